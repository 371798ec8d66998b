/**
 * SECTION:element-cudagauss
 * @title: cudagauss
 *
 * Smooths camera noise before difference encoding, on the GPU when one is
 * usable: a Gaussian blur (default), a box mean or a median over a square
 * window, per colour channel, with the edge pixels replicated at the borders.
 * Alpha and padding bytes pass through unfiltered; YUV planes are each
 * filtered at their own size (NV12's U and V separately). Interlaced frames
 * (interlace-mode=interleaved, and the frames of interlace-mode=mixed
 * flagged interlaced) are filtered field by field, so that no line is mixed
 * with the other field's.
 *
 * ## Example launch lines
 * |[
 * gst-launch-1.0 videotestsrc ! cudagauss kernel-size=7 ! videoconvert ! autovideosink
 * gst-launch-1.0 v4l2src ! videoconvert ! cudagauss method=median kernel-size=3 \
 *     ! videoconvert ! autovideosink
 * ]|
 */
#include "gstcudagauss.h"

#include <memory>
#include <string>

#include "cudadiff/gauss.h"

GST_DEBUG_CATEGORY_STATIC(gst_cudadiff_gauss_debug);
#define GST_CAT_DEFAULT gst_cudadiff_gauss_debug

#define DEFAULT_METHOD cudadiff::NoiseFilterMethod::Gaussian
#define DEFAULT_KERNEL_SIZE 5
#define DEFAULT_SIGMA 0.0
#define MAX_SIGMA 100.0

enum { PROP_0, PROP_METHOD, PROP_KERNEL_SIZE, PROP_SIGMA };

struct _GstCudaGauss {
  GstCudaDiffFilter parent;
  // Guarded by the object lock.
  cudadiff::NoiseFilterMethod method;
  gint kernel_size;
  gdouble sigma;
  // Streaming thread only.
  // Between setup and teardown: progressive frames' operation (none when
  // every frame is interlaced), the top field's (none when no frame is) and
  // the bottom field's when its height differs (an odd frame height).
  cudadiff::NoiseFilter *op;
  cudadiff::NoiseFilter *top_op;
  cudadiff::NoiseFilter *bottom_op;
  gboolean warned_median_size;
};

#define FORMATS                                                                           \
  "{ BGR, RGB, BGRx, RGBx, xBGR, xRGB, BGRA, RGBA, ABGR, ARGB, GRAY8, I420, YV12, NV12, " \
  "NV21, Y444, Y42B }"

G_DEFINE_TYPE(GstCudaGauss, gst_cudadiff_gauss, GST_TYPE_CUDADIFF_FILTER)
GST_ELEMENT_REGISTER_DEFINE(cudagauss, "cudagauss", GST_RANK_NONE, GST_TYPE_CUDADIFF_GAUSS)

GType gst_cudadiff_gauss_method_get_type(void) {
  static GType type = 0;
  static const GEnumValue values[] = {
      {static_cast<gint>(cudadiff::NoiseFilterMethod::Gaussian),
       "Gaussian blur, separable, weights from sigma", "gaussian"},
      {static_cast<gint>(cudadiff::NoiseFilterMethod::Box),
       "Box mean of the window (the report's mean filter)", "box"},
      {static_cast<gint>(cudadiff::NoiseFilterMethod::Median),
       "Exact median of the window (kernel-size 3, 5 or 7)", "median"},
      {0, nullptr, nullptr},
  };
  if (g_once_init_enter(&type)) {
    GType t = g_enum_register_static("GstCudaDiffGaussMethod", values);
    g_once_init_leave(&type, t);
  }
  return type;
}

static void gst_cudadiff_gauss_setup(GstCudaDiffFilter *filter, const GstVideoInfo *in_info,
                                     const GstVideoInfo *, const cudadiff::Context &ctx) {
  auto *self = GST_CUDADIFF_GAUSS(filter);
  const cudadiff::VideoFormat format = gst_cudadiff_format_from_gst(GST_VIDEO_INFO_FORMAT(in_info));
  const int width = GST_VIDEO_INFO_WIDTH(in_info), height = GST_VIDEO_INFO_HEIGHT(in_info);
  const GstVideoInterlaceMode mode = GST_VIDEO_INFO_INTERLACE_MODE(in_info);
  std::unique_ptr<cudadiff::NoiseFilter> frame_op, top_op, bottom_op;
  if (mode != GST_VIDEO_INTERLACE_MODE_PROGRESSIVE) {
    const std::string what = std::string("interlaced ") +
                             gst_video_format_to_string(GST_VIDEO_INFO_FORMAT(in_info)) + " (" +
                             gst_video_interlace_mode_to_string(mode) + ")";
    if (mode != GST_VIDEO_INTERLACE_MODE_INTERLEAVED && mode != GST_VIDEO_INTERLACE_MODE_MIXED)
      gst_cudadiff_filter_refuse_caps(
          filter, what + " is not supported: cudagauss filters each field of interleaved frames",
          "put deinterlace before cudagauss");
    // A field of 4:2:0 video has every other chroma row, as many as its lines
    // need only when the frame's height is a multiple of 4.
    const bool chroma_halved = cudadiff::plane_height(format, 1, 4) == 2;
    if (height < 2 || (chroma_halved && height % 4 != 0))
      gst_cudadiff_filter_refuse_caps(
          filter,
          what + " of height " + std::to_string(height) + " cannot be filtered field by field: " +
              (chroma_halved ? "4:2:0 needs a height that is a multiple of 4"
                             : "a field needs at least one line"),
          "put deinterlace before cudagauss, or scale or crop to such a height");
    top_op = cudadiff::NoiseFilter::create(ctx, format, width, (height + 1) / 2);
    if (height % 2 != 0) bottom_op = cudadiff::NoiseFilter::create(ctx, format, width, height / 2);
  }
  if (mode != GST_VIDEO_INTERLACE_MODE_INTERLEAVED)
    frame_op = cudadiff::NoiseFilter::create(ctx, format, width, height);
  self->op = frame_op.release();
  self->top_op = top_op.release();
  self->bottom_op = bottom_op.release();
}

static void gst_cudadiff_gauss_teardown(GstCudaDiffFilter *filter) {
  auto *self = GST_CUDADIFF_GAUSS(filter);
  delete self->op;
  self->op = nullptr;
  delete self->top_op;
  self->top_op = nullptr;
  delete self->bottom_op;
  self->bottom_op = nullptr;
  self->warned_median_size = FALSE;  // (a new start or new caps say it again)
}

// One field of an interlaced frame (0: the top, the even lines) as a frame
// of its own: every other line of each plane.
static cudadiff::FrameView field_of(const cudadiff::FrameView &frame, int field) {
  cudadiff::FrameView v = frame;
  v.height = field == 0 ? (frame.height + 1) / 2 : frame.height / 2;
  for (int p = 0; p < frame.n_planes(); ++p) {
    v.data[p] = frame.data[p] + static_cast<size_t>(field) * frame.stride[p];
    v.stride[p] = 2 * frame.stride[p];
  }
  return v;
}

static void gst_cudadiff_gauss_process(GstCudaDiffFilter *filter, const cudadiff::FrameView &in,
                                       const cudadiff::FrameView &out) {
  auto *self = GST_CUDADIFF_GAUSS(filter);
  cudadiff::NoiseFilterSettings s;
  GST_OBJECT_LOCK(self);
  s.method = self->method;
  s.kernel_size = self->kernel_size;
  s.sigma = self->sigma;
  GST_OBJECT_UNLOCK(self);
  if (s.method == cudadiff::NoiseFilterMethod::Median &&
      s.kernel_size > cudadiff::kMaxMedianKernel) {
    // Once until the settings are valid again, on the bus (gst-launch
    // shows it) and in the debug log.
    if (!self->warned_median_size)
      GST_ELEMENT_WARNING(self, LIBRARY, SETTINGS,
                          ("the median takes kernel-size 3, 5 or 7: using %d instead of %d",
                           cudadiff::kMaxMedianKernel, s.kernel_size),
                          ("method=median kernel-size=%d; set kernel-size to at most %d, or use "
                           "method=gaussian or box for larger windows",
                           s.kernel_size, cudadiff::kMaxMedianKernel));
    self->warned_median_size = TRUE;
    s.kernel_size = cudadiff::kMaxMedianKernel;
  } else {
    self->warned_median_size = FALSE;
  }
  if (!self->top_op || (self->op && !gst_cudadiff_filter_frame_is_interlaced(filter))) {
    self->op->process(in, out, s);
    return;
  }
  self->top_op->process(field_of(in, 0), field_of(out, 0), s);
  cudadiff::NoiseFilter *bottom = self->bottom_op ? self->bottom_op : self->top_op;
  bottom->process(field_of(in, 1), field_of(out, 1), s);
}

static void gst_cudadiff_gauss_set_property(GObject *object, guint prop_id, const GValue *value,
                                            GParamSpec *pspec) {
  auto *self = GST_CUDADIFF_GAUSS(object);
  GST_OBJECT_LOCK(self);
  switch (prop_id) {
    case PROP_METHOD:
      self->method = static_cast<cudadiff::NoiseFilterMethod>(g_value_get_enum(value));
      break;
    case PROP_KERNEL_SIZE: {
      gint k = g_value_get_int(value);
      if (k % 2 == 0) {
        GST_WARNING_OBJECT(self, "kernel-size must be odd: using %d instead of %d", k + 1, k);
        k += 1;
      }
      self->kernel_size = k;
      break;
    }
    case PROP_SIGMA:
      self->sigma = g_value_get_double(value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK(self);
}

static void gst_cudadiff_gauss_get_property(GObject *object, guint prop_id, GValue *value,
                                            GParamSpec *pspec) {
  auto *self = GST_CUDADIFF_GAUSS(object);
  GST_OBJECT_LOCK(self);
  switch (prop_id) {
    case PROP_METHOD:
      g_value_set_enum(value, static_cast<gint>(self->method));
      break;
    case PROP_KERNEL_SIZE:
      g_value_set_int(value, self->kernel_size);
      break;
    case PROP_SIGMA:
      g_value_set_double(value, self->sigma);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK(self);
}

static void gst_cudadiff_gauss_class_init(GstCudaGaussClass *klass) {
  GObjectClass *gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  GstCudaDiffFilterClass *filter_class = GST_CUDADIFF_FILTER_CLASS(klass);

  GST_DEBUG_CATEGORY_INIT(gst_cudadiff_gauss_debug, "cudagauss", 0, "gst-cudadiff noise filter");

  gobject_class->set_property = gst_cudadiff_gauss_set_property;
  gobject_class->get_property = gst_cudadiff_gauss_get_property;

  const auto flags = static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
                                              GST_PARAM_MUTABLE_PLAYING);
  g_object_class_install_property(
      gobject_class, PROP_METHOD,
      g_param_spec_enum("method", "Method",
                        "The filter: gaussian (separable Gaussian blur), box (mean of the "
                        "window) or median (exact median of the window, kernel-size 3, 5 or "
                        "7). Per colour channel; borders replicate the edge pixel. Changeable "
                        "while playing. Default: gaussian",
                        GST_TYPE_CUDADIFF_GAUSS_METHOD, static_cast<gint>(DEFAULT_METHOD), flags));
  g_object_class_install_property(
      gobject_class, PROP_KERNEL_SIZE,
      g_param_spec_int("kernel-size", "Kernel size",
                       "Width and height of the square window in pixels; odd (an even value "
                       "becomes the next odd one), 3 to 31 for gaussian and box, 3 to 7 for "
                       "median (larger values use 7). Changeable while playing. Default: 5",
                       cudadiff::kMinFilterKernel, cudadiff::kMaxConvKernel, DEFAULT_KERNEL_SIZE,
                       flags));
  g_object_class_install_property(
      gobject_class, PROP_SIGMA,
      g_param_spec_double("sigma", "Sigma",
                          "Standard deviation of the Gaussian in pixels (0 to 100); 0 derives "
                          "it from kernel-size as OpenCV does (0.3 * ((kernel-size - 1) / 2 - "
                          "1) + 0.8, with OpenCV's fixed kernels for 3, 5 and 7). Gaussian "
                          "only. Changeable while playing. Default: 0",
                          0.0, MAX_SIGMA, DEFAULT_SIGMA,
                          static_cast<GParamFlags>(flags | GST_PARAM_CONTROLLABLE)));

  gst_cudadiff_filter_add_pad_templates(element_class, FORMATS, FORMATS);
  gst_element_class_set_static_metadata(
      element_class, "CUDA noise filter", "Filter/Effect/Video",
      "Gaussian blur, box mean or median per colour channel, to make frame-difference "
      "streaming cheaper; on the GPU, or on the CPU without one",
      "gst-cudadiff developers");

  filter_class->setup = gst_cudadiff_gauss_setup;
  filter_class->teardown = gst_cudadiff_gauss_teardown;
  filter_class->process = gst_cudadiff_gauss_process;

  gst_type_mark_as_plugin_api(GST_TYPE_CUDADIFF_GAUSS_METHOD, static_cast<GstPluginAPIFlags>(0));
}

static void gst_cudadiff_gauss_init(GstCudaGauss *self) {
  self->method = DEFAULT_METHOD;
  self->kernel_size = DEFAULT_KERNEL_SIZE;
  self->sigma = DEFAULT_SIGMA;
  self->op = nullptr;
  self->top_op = nullptr;
  self->bottom_op = nullptr;
  self->warned_median_size = FALSE;
}
