/**
 * SECTION:element-cudagrayscale
 * @title: cudagrayscale
 *
 * Converts video to grayscale, on the GPU when one is usable. The output is
 * GRAY8, or, when downstream asks for it, the input format with the gray value
 * in every colour channel (alpha kept).
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 videotestsrc ! cudagrayscale method=bt709 ! videoconvert ! autovideosink
 * ]|
 */
#include "gstcudagrayscale.h"

#include <memory>

#include "cudadiff/grayscale.h"

GST_DEBUG_CATEGORY_STATIC(gst_cudadiff_grayscale_debug);
#define GST_CAT_DEFAULT gst_cudadiff_grayscale_debug

#define DEFAULT_METHOD cudadiff::GrayMethod::Bt601

enum { PROP_0, PROP_METHOD };

struct _GstCudaGrayscale {
  GstCudaDiffFilter parent;
  cudadiff::GrayMethod method;  // guarded by the object lock
  cudadiff::Grayscale *op;      // between setup and teardown
};

#define SINK_FORMATS "{ BGR, RGB, BGRx, RGBx, xBGR, xRGB, BGRA, RGBA, ABGR, ARGB, GRAY8 }"
#define SRC_FORMATS "{ GRAY8, BGR, RGB, BGRx, RGBx, xBGR, xRGB, BGRA, RGBA, ABGR, ARGB }"

G_DEFINE_TYPE(GstCudaGrayscale, gst_cudadiff_grayscale, GST_TYPE_CUDADIFF_FILTER)
GST_ELEMENT_REGISTER_DEFINE(cudagrayscale, "cudagrayscale", GST_RANK_NONE,
                            GST_TYPE_CUDADIFF_GRAYSCALE)

GType gst_cudadiff_gray_method_get_type(void) {
  static GType type = 0;
  static const GEnumValue values[] = {
      {static_cast<gint>(cudadiff::GrayMethod::Average), "Average of R, G and B", "average"},
      {static_cast<gint>(cudadiff::GrayMethod::Bt601),
       "Luma weights of BT.601 (0.299 R + 0.587 G + 0.114 B)", "bt601"},
      {static_cast<gint>(cudadiff::GrayMethod::Bt709),
       "Luma weights of BT.709 (0.2126 R + 0.7152 G + 0.0722 B)", "bt709"},
      {0, nullptr, nullptr},
  };
  if (g_once_init_enter(&type)) {
    GType t = g_enum_register_static("GstCudaDiffGrayMethod", values);
    g_once_init_leave(&type, t);
  }
  return type;
}

static const std::vector<GstVideoFormat> &sink_formats() {
  static const std::vector<GstVideoFormat> formats = [] {
    std::vector<GstVideoFormat> f = gst_cudadiff_packed_rgb_formats();
    f.push_back(GST_VIDEO_FORMAT_GRAY8);
    return f;
  }();
  return formats;
}

static bool is_packed_rgb(GstVideoFormat f) {
  return cudadiff::is_packed_rgb(gst_cudadiff_format_from_gst(f));
}

// Sink format f gives GRAY8 (preferred, listed first) or f itself; a GRAY8
// output can come from every sink format.
static GstCaps *gst_cudadiff_grayscale_transform_caps(GstBaseTransform *trans,
                                                      GstPadDirection direction, GstCaps *caps,
                                                      GstCaps *filter) {
  return gst_cudadiff_transform_caps_gray_or_same(trans, direction, caps, filter, sink_formats(),
                                                  is_packed_rgb);
}

static void gst_cudadiff_grayscale_setup(GstCudaDiffFilter *filter, const GstVideoInfo *in_info,
                                         const GstVideoInfo *out_info,
                                         const cudadiff::Context &ctx) {
  auto *self = GST_CUDADIFF_GRAYSCALE(filter);
  auto op =
      cudadiff::Grayscale::create(ctx, gst_cudadiff_format_from_gst(GST_VIDEO_INFO_FORMAT(in_info)),
                                  gst_cudadiff_format_from_gst(GST_VIDEO_INFO_FORMAT(out_info)));
  self->op = op.release();
}

static void gst_cudadiff_grayscale_teardown(GstCudaDiffFilter *filter) {
  auto *self = GST_CUDADIFF_GRAYSCALE(filter);
  delete self->op;
  self->op = nullptr;
}

static void gst_cudadiff_grayscale_process(GstCudaDiffFilter *filter, const cudadiff::FrameView &in,
                                           const cudadiff::FrameView &out) {
  auto *self = GST_CUDADIFF_GRAYSCALE(filter);
  GST_OBJECT_LOCK(self);
  const cudadiff::GrayMethod method = self->method;
  GST_OBJECT_UNLOCK(self);
  self->op->process(in, out, method);
}

// GRAY8 in and out with the same caps: the frame is its own gray picture,
// so it passes through untouched (no copy, no upload), as videoconvert does
// for equal caps. Every other pair of formats is converted, a packed RGB
// format to itself too (its channels become the gray value).
static gboolean gst_cudadiff_grayscale_set_caps(GstBaseTransform *trans, GstCaps *incaps,
                                                GstCaps *outcaps) {
  if (!GST_BASE_TRANSFORM_CLASS(gst_cudadiff_grayscale_parent_class)
           ->set_caps(trans, incaps, outcaps))
    return FALSE;
  GstVideoInfo in;
  const bool same = gst_video_info_from_caps(&in, incaps) &&
                    GST_VIDEO_INFO_FORMAT(&in) == GST_VIDEO_FORMAT_GRAY8 &&
                    gst_caps_is_equal(incaps, outcaps);
  if (bool(gst_base_transform_is_passthrough(trans)) != same) {
    gst_base_transform_set_passthrough(trans, same);
    gst_cudadiff_filter_passthrough_changed(GST_CUDADIFF_FILTER(trans));
    GST_DEBUG_OBJECT(trans, "passthrough %s", same ? "on (GRAY8 to GRAY8)" : "off");
  }
  return TRUE;
}

// A frame passed through that upstream marked as still being written on
// the GPU is finished first unless downstream honours the mark.
static void gst_cudadiff_grayscale_before_transform(GstBaseTransform *trans, GstBuffer *buffer) {
  if (gst_base_transform_is_passthrough(trans))
    gst_cudadiff_filter_pass_through(GST_CUDADIFF_FILTER(trans), buffer);
}

static void gst_cudadiff_grayscale_set_property(GObject *object, guint prop_id, const GValue *value,
                                                GParamSpec *pspec) {
  auto *self = GST_CUDADIFF_GRAYSCALE(object);
  switch (prop_id) {
    case PROP_METHOD:
      GST_OBJECT_LOCK(self);
      self->method = static_cast<cudadiff::GrayMethod>(g_value_get_enum(value));
      GST_OBJECT_UNLOCK(self);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
      break;
  }
}

static void gst_cudadiff_grayscale_get_property(GObject *object, guint prop_id, GValue *value,
                                                GParamSpec *pspec) {
  auto *self = GST_CUDADIFF_GRAYSCALE(object);
  switch (prop_id) {
    case PROP_METHOD:
      GST_OBJECT_LOCK(self);
      g_value_set_enum(value, static_cast<gint>(self->method));
      GST_OBJECT_UNLOCK(self);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
      break;
  }
}

static void gst_cudadiff_grayscale_class_init(GstCudaGrayscaleClass *klass) {
  GObjectClass *gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  GstCudaDiffFilterClass *filter_class = GST_CUDADIFF_FILTER_CLASS(klass);

  GST_DEBUG_CATEGORY_INIT(gst_cudadiff_grayscale_debug, "cudagrayscale", 0,
                          "gst-cudadiff grayscale");

  gobject_class->set_property = gst_cudadiff_grayscale_set_property;
  gobject_class->get_property = gst_cudadiff_grayscale_get_property;

  g_object_class_install_property(
      gobject_class, PROP_METHOD,
      g_param_spec_enum("method", "Method",
                        "How R, G and B become one gray value: average ((R+G+B+1)/3), bt601 "
                        "(0.299 R + 0.587 G + 0.114 B) or bt709 (0.2126 R + 0.7152 G + "
                        "0.0722 B), in 8-bit fixed point. Changeable while playing. "
                        "Default: bt601",
                        GST_TYPE_CUDADIFF_GRAY_METHOD, static_cast<gint>(DEFAULT_METHOD),
                        static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
                                                 GST_PARAM_MUTABLE_PLAYING)));

  gst_cudadiff_filter_add_pad_templates(element_class, SINK_FORMATS, SRC_FORMATS);
  gst_element_class_set_static_metadata(
      element_class, "CUDA grayscale", "Filter/Effect/Video",
      "Converts video to grayscale (average, BT.601 or BT.709 luma) on the GPU, or on the "
      "CPU without one; outputs GRAY8 or the input format",
      "gst-cudadiff developers");

  GstBaseTransformClass *trans_class = GST_BASE_TRANSFORM_CLASS(klass);
  trans_class->set_caps = GST_DEBUG_FUNCPTR(gst_cudadiff_grayscale_set_caps);
  trans_class->before_transform = GST_DEBUG_FUNCPTR(gst_cudadiff_grayscale_before_transform);
  filter_class->transform_format_caps = GST_DEBUG_FUNCPTR(gst_cudadiff_grayscale_transform_caps);
  filter_class->setup = gst_cudadiff_grayscale_setup;
  filter_class->teardown = gst_cudadiff_grayscale_teardown;
  filter_class->process = gst_cudadiff_grayscale_process;

  gst_type_mark_as_plugin_api(GST_TYPE_CUDADIFF_GRAY_METHOD, static_cast<GstPluginAPIFlags>(0));
}

static void gst_cudadiff_grayscale_init(GstCudaGrayscale *self) {
  self->method = DEFAULT_METHOD;
  self->op = nullptr;
}
