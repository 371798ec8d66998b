/**
 * SECTION:element-cudabinarize
 * @title: cudabinarize
 *
 * Turns video into black and white: each pixel's gray value is compared with
 * a threshold that is fixed or computed from the frame's 256-bin histogram
 * (Otsu's method, or the two-peaks rule of the webcam-streaming report). On
 * the GPU the histogram and the threshold stay on the device. The output is
 * GRAY8, or, when downstream asks for it, the input format with 0 or 255 in
 * every colour channel (alpha kept; I420/NV12 get neutral chroma).
 *
 * With post-messages=true an element message named "cudabinarize" is posted
 * for every frame, with the fields timestamp, stream-time, running-time
 * (GstClockTime), method (string), threshold (uint), peak1, peak2 (int: gray
 * levels of the two highest histogram bins) and peak1-count, peak2-count (uint).
 *
 * ## Example launch lines
 * |[
 * gst-launch-1.0 videotestsrc ! cudabinarize ! videoconvert ! autovideosink
 * gst-launch-1.0 v4l2src ! videoconvert ! cudabinarize method=two-peaks post-messages=true \
 *     ! videoconvert ! autovideosink -m
 * ]|
 */
#include "gstcudabinarize.h"

#include "cudadiff/binarize.h"
#include "gstcudagrayscale.h"

GST_DEBUG_CATEGORY_STATIC(gst_cudadiff_binarize_debug);
#define GST_CAT_DEFAULT gst_cudadiff_binarize_debug

#define DEFAULT_METHOD cudadiff::ThresholdMethod::Otsu
#define DEFAULT_GRAYSCALE cudadiff::GrayMethod::Bt601
#define DEFAULT_THRESHOLD 128
#define DEFAULT_MIN_THRESHOLD 50
#define DEFAULT_MAX_THRESHOLD 200
#define DEFAULT_INVERT FALSE
#define DEFAULT_POST_MESSAGES FALSE

enum {
  PROP_0,
  PROP_METHOD,
  PROP_GRAYSCALE,
  PROP_THRESHOLD,
  PROP_MIN_THRESHOLD,
  PROP_MAX_THRESHOLD,
  PROP_INVERT,
  PROP_POST_MESSAGES,
  PROP_LAST_THRESHOLD,
};

struct _GstCudaBinarize {
  GstCudaDiffFilter parent;
  // Guarded by the object lock.
  cudadiff::BinarizeParams params;
  gboolean post_messages;
  gint last_threshold;  // -1 until the first frame
  // Streaming thread only.
  cudadiff::Binarize *op;  // between setup and teardown
  gboolean frame_posts_message;
  cudadiff::ThresholdMethod frame_method;  // the method the frame was processed with
};

#define SINK_FORMATS \
  "{ BGR, RGB, BGRx, RGBx, xBGR, xRGB, BGRA, RGBA, ABGR, ARGB, GRAY8, I420, NV12 }"
#define SRC_FORMATS \
  "{ GRAY8, BGR, RGB, BGRx, RGBx, xBGR, xRGB, BGRA, RGBA, ABGR, ARGB, I420, NV12 }"

G_DEFINE_TYPE(GstCudaBinarize, gst_cudadiff_binarize, GST_TYPE_CUDADIFF_FILTER)
GST_ELEMENT_REGISTER_DEFINE(cudabinarize, "cudabinarize", GST_RANK_NONE, GST_TYPE_CUDADIFF_BINARIZE)

GType gst_cudadiff_binarize_method_get_type(void) {
  static GType type = 0;
  static const GEnumValue values[] = {
      {static_cast<gint>(cudadiff::ThresholdMethod::Otsu),
       "Otsu: the threshold that best separates the histogram into two classes", "otsu"},
      {static_cast<gint>(cudadiff::ThresholdMethod::TwoPeaks),
       "Mean of the gray levels of the two highest histogram bins, clamped to "
       "[min-threshold, max-threshold]",
       "two-peaks"},
      {static_cast<gint>(cudadiff::ThresholdMethod::Fixed), "The threshold property", "fixed"},
      {0, nullptr, nullptr},
  };
  if (g_once_init_enter(&type)) {
    GType t = g_enum_register_static("GstCudaDiffBinarizeMethod", values);
    g_once_init_leave(&type, t);
  }
  return type;
}

static const std::vector<GstVideoFormat> &sink_formats() {
  static const std::vector<GstVideoFormat> formats = [] {
    std::vector<GstVideoFormat> f = gst_cudadiff_packed_rgb_formats();
    f.push_back(GST_VIDEO_FORMAT_GRAY8);
    f.push_back(GST_VIDEO_FORMAT_I420);
    f.push_back(GST_VIDEO_FORMAT_NV12);
    return f;
  }();
  return formats;
}

// Formats that can also be the output (the input's format kept).
static bool keeps_format(GstVideoFormat f) {
  return cudadiff::is_packed_rgb(gst_cudadiff_format_from_gst(f)) || f == GST_VIDEO_FORMAT_I420 ||
         f == GST_VIDEO_FORMAT_NV12;
}

// Sink format f gives GRAY8 (preferred, listed first) or f itself; a GRAY8
// output can come from every sink format.
static GstCaps *gst_cudadiff_binarize_transform_caps(GstBaseTransform *trans,
                                                     GstPadDirection direction, GstCaps *caps,
                                                     GstCaps *filter) {
  return gst_cudadiff_transform_caps_gray_or_same(trans, direction, caps, filter, sink_formats(),
                                                  keeps_format);
}

static void gst_cudadiff_binarize_setup(GstCudaDiffFilter *filter, const GstVideoInfo *in_info,
                                        const GstVideoInfo *out_info,
                                        const cudadiff::Context &ctx) {
  auto *self = GST_CUDADIFF_BINARIZE(filter);
  auto op =
      cudadiff::Binarize::create(ctx, gst_cudadiff_format_from_gst(GST_VIDEO_INFO_FORMAT(in_info)),
                                 gst_cudadiff_format_from_gst(GST_VIDEO_INFO_FORMAT(out_info)),
                                 GST_VIDEO_INFO_WIDTH(in_info), GST_VIDEO_INFO_HEIGHT(in_info));
  self->op = op.release();
}

static void gst_cudadiff_binarize_teardown(GstCudaDiffFilter *filter) {
  auto *self = GST_CUDADIFF_BINARIZE(filter);
  delete self->op;
  self->op = nullptr;
}

static void gst_cudadiff_binarize_process(GstCudaDiffFilter *filter, const cudadiff::FrameView &in,
                                          const cudadiff::FrameView &out) {
  auto *self = GST_CUDADIFF_BINARIZE(filter);
  GST_OBJECT_LOCK(self);
  cudadiff::BinarizeParams params = self->params;
  params.want_peaks = self->post_messages;
  GST_OBJECT_UNLOCK(self);
  self->frame_posts_message = params.want_peaks;
  self->frame_method = params.method;
  // A message per frame needs each frame's result on the host.
  if (params.want_peaks) gst_cudadiff_filter_need_host_results(filter);
  self->op->process(in, out, params);
}

static void post_threshold_message(GstCudaBinarize *self, GstClockTime pts,
                                   cudadiff::ThresholdMethod method,
                                   const cudadiff::BinarizeResult &r) {
  GstBaseTransform *trans = GST_BASE_TRANSFORM(self);
  GstClockTime stream_time = GST_CLOCK_TIME_NONE, running_time = GST_CLOCK_TIME_NONE;
  if (GST_CLOCK_TIME_IS_VALID(pts) && trans->segment.format == GST_FORMAT_TIME) {
    stream_time = gst_segment_to_stream_time(&trans->segment, GST_FORMAT_TIME, pts);
    running_time = gst_segment_to_running_time(&trans->segment, GST_FORMAT_TIME, pts);
  }
  GEnumClass *klass =
      static_cast<GEnumClass *>(g_type_class_ref(GST_TYPE_CUDADIFF_BINARIZE_METHOD));
  GEnumValue *value = g_enum_get_value(klass, static_cast<gint>(method));
  GstStructure *s =
      gst_structure_new("cudabinarize", "timestamp", G_TYPE_UINT64, pts, "stream-time",
                        G_TYPE_UINT64, stream_time, "running-time", G_TYPE_UINT64, running_time,
                        "method", G_TYPE_STRING, value ? value->value_nick : "unknown", "threshold",
                        G_TYPE_UINT, static_cast<guint>(r.threshold), "peak1", G_TYPE_INT, r.peak1,
                        "peak2", G_TYPE_INT, r.peak2, "peak1-count", G_TYPE_UINT, r.peak1_count,
                        "peak2-count", G_TYPE_UINT, r.peak2_count, nullptr);
  g_type_class_unref(klass);
  gst_element_post_message(GST_ELEMENT(self), gst_message_new_element(GST_OBJECT(self), s));
}

// The threshold (a few bytes that came back with the frame) once the frame
// is done: every frame in system memory or with post-messages; a frame that
// stays on the GPU updates last-threshold when its work has finished by the
// next frame.
static void gst_cudadiff_binarize_finish_frame(GstCudaDiffFilter *filter, GstClockTime pts) {
  auto *self = GST_CUDADIFF_BINARIZE(filter);
  if (!self->op) return;
  const cudadiff::BinarizeResult r = self->op->result();
  GST_OBJECT_LOCK(self);
  self->last_threshold = r.threshold;
  GST_OBJECT_UNLOCK(self);
  GST_LOG_OBJECT(self, "threshold %d, peaks %d (%u) and %d (%u)", r.threshold, r.peak1,
                 r.peak1_count, r.peak2, r.peak2_count);
  // (the method of the frame's settings: the property may have changed since)
  if (self->frame_posts_message) post_threshold_message(self, pts, self->frame_method, r);
  self->frame_posts_message = FALSE;
}

// Each run starts without a last threshold: -1 until its first frame (not
// the previous run's).
static gboolean gst_cudadiff_binarize_start(GstBaseTransform *trans) {
  auto *self = GST_CUDADIFF_BINARIZE(trans);
  GST_OBJECT_LOCK(self);
  self->last_threshold = -1;
  GST_OBJECT_UNLOCK(self);
  return GST_BASE_TRANSFORM_CLASS(gst_cudadiff_binarize_parent_class)->start(trans);
}

static void gst_cudadiff_binarize_set_property(GObject *object, guint prop_id, const GValue *value,
                                               GParamSpec *pspec) {
  auto *self = GST_CUDADIFF_BINARIZE(object);
  GST_OBJECT_LOCK(self);
  switch (prop_id) {
    case PROP_METHOD:
      self->params.method = static_cast<cudadiff::ThresholdMethod>(g_value_get_enum(value));
      break;
    case PROP_GRAYSCALE:
      self->params.gray = static_cast<cudadiff::GrayMethod>(g_value_get_enum(value));
      break;
    case PROP_THRESHOLD:
      self->params.threshold = static_cast<int>(g_value_get_uint(value));
      break;
    case PROP_MIN_THRESHOLD:
      self->params.min_threshold = static_cast<int>(g_value_get_uint(value));
      break;
    case PROP_MAX_THRESHOLD:
      self->params.max_threshold = static_cast<int>(g_value_get_uint(value));
      break;
    case PROP_INVERT:
      self->params.invert = g_value_get_boolean(value);
      break;
    case PROP_POST_MESSAGES:
      self->post_messages = g_value_get_boolean(value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK(self);
}

static void gst_cudadiff_binarize_get_property(GObject *object, guint prop_id, GValue *value,
                                               GParamSpec *pspec) {
  auto *self = GST_CUDADIFF_BINARIZE(object);
  GST_OBJECT_LOCK(self);
  switch (prop_id) {
    case PROP_METHOD:
      g_value_set_enum(value, static_cast<gint>(self->params.method));
      break;
    case PROP_GRAYSCALE:
      g_value_set_enum(value, static_cast<gint>(self->params.gray));
      break;
    case PROP_THRESHOLD:
      g_value_set_uint(value, static_cast<guint>(self->params.threshold));
      break;
    case PROP_MIN_THRESHOLD:
      g_value_set_uint(value, static_cast<guint>(self->params.min_threshold));
      break;
    case PROP_MAX_THRESHOLD:
      g_value_set_uint(value, static_cast<guint>(self->params.max_threshold));
      break;
    case PROP_INVERT:
      g_value_set_boolean(value, self->params.invert);
      break;
    case PROP_POST_MESSAGES:
      g_value_set_boolean(value, self->post_messages);
      break;
    case PROP_LAST_THRESHOLD:
      g_value_set_int(value, self->last_threshold);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK(self);
}

static void gst_cudadiff_binarize_class_init(GstCudaBinarizeClass *klass) {
  GObjectClass *gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  GstCudaDiffFilterClass *filter_class = GST_CUDADIFF_FILTER_CLASS(klass);

  GST_DEBUG_CATEGORY_INIT(gst_cudadiff_binarize_debug, "cudabinarize", 0,
                          "gst-cudadiff binarization");

  gobject_class->set_property = gst_cudadiff_binarize_set_property;
  gobject_class->get_property = gst_cudadiff_binarize_get_property;

  const auto playing = static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
                                                GST_PARAM_MUTABLE_PLAYING);
  // (numbers a GstController may drive: gst_cudadiff_sync_controlled())
  const auto controllable = static_cast<GParamFlags>(playing | GST_PARAM_CONTROLLABLE);
  g_object_class_install_property(
      gobject_class, PROP_METHOD,
      g_param_spec_enum("method", "Method",
                        "How the threshold is chosen for each frame: otsu (Otsu's method on the "
                        "frame's histogram), two-peaks (mean of the gray levels of the two "
                        "highest histogram bins, clamped to [min-threshold, max-threshold]) or "
                        "fixed (the threshold property). Changeable while playing. Default: otsu",
                        GST_TYPE_CUDADIFF_BINARIZE_METHOD, static_cast<gint>(DEFAULT_METHOD),
                        playing));
  g_object_class_install_property(
      gobject_class, PROP_GRAYSCALE,
      g_param_spec_enum("grayscale", "Grayscale",
                        "How R, G and B become the gray value that is compared: average, bt601 "
                        "or bt709, as in cudagrayscale (GRAY8, I420 and NV12 input use their "
                        "luma as it is). Changeable while playing. Default: bt601",
                        GST_TYPE_CUDADIFF_GRAY_METHOD, static_cast<gint>(DEFAULT_GRAYSCALE),
                        playing));
  g_object_class_install_property(
      gobject_class, PROP_THRESHOLD,
      g_param_spec_uint("threshold", "Threshold",
                        "Gray level (0-255) for method=fixed: pixels whose gray value is greater "
                        "are white, the others black. Changeable while playing. Default: 128",
                        0, 255, DEFAULT_THRESHOLD, controllable));
  g_object_class_install_property(
      gobject_class, PROP_MIN_THRESHOLD,
      g_param_spec_uint("min-threshold", "Minimum threshold",
                        "Lowest threshold (gray level 0-255) method=two-peaks may give. "
                        "Changeable while playing. Default: 50",
                        0, 255, DEFAULT_MIN_THRESHOLD, controllable));
  g_object_class_install_property(
      gobject_class, PROP_MAX_THRESHOLD,
      g_param_spec_uint("max-threshold", "Maximum threshold",
                        "Highest threshold (gray level 0-255) method=two-peaks may give; it wins "
                        "when it is below min-threshold. Changeable while playing. Default: 200",
                        0, 255, DEFAULT_MAX_THRESHOLD, controllable));
  g_object_class_install_property(
      gobject_class, PROP_INVERT,
      g_param_spec_boolean("invert", "Invert",
                           "Swap black and white: pixels at or below the threshold become white. "
                           "Changeable while playing. Default: false",
                           DEFAULT_INVERT, playing));
  g_object_class_install_property(
      gobject_class, PROP_POST_MESSAGES,
      g_param_spec_boolean(
          "post-messages", "Post messages",
          "Post an element message \"cudabinarize\" for every frame with the threshold, the "
          "method and the histogram's two peaks (gray levels and counts). Changeable while "
          "playing. Default: false",
          DEFAULT_POST_MESSAGES, playing));
  g_object_class_install_property(
      gobject_class, PROP_LAST_THRESHOLD,
      g_param_spec_int(
          "last-threshold", "Last threshold",
          "Threshold (gray level 0-255) of the last frame whose result reached the host: "
          "every frame with system-memory output or post-messages=true; with CUDA memory "
          "output (no wait per frame), a frame whose GPU work had finished when the next one "
          "came. -1 before the first frame after each start. Read-only. Default: -1",
          -1, 255, -1, static_cast<GParamFlags>(G_PARAM_READABLE | G_PARAM_STATIC_STRINGS)));

  gst_cudadiff_filter_add_pad_templates(element_class, SINK_FORMATS, SRC_FORMATS);
  gst_element_class_set_static_metadata(
      element_class, "CUDA binarization", "Filter/Effect/Video",
      "Black and white by a threshold from the frame's histogram (Otsu, two peaks) or fixed, "
      "on the GPU, or on the CPU without one; outputs GRAY8 or the input format",
      "gst-cudadiff developers");

  GST_BASE_TRANSFORM_CLASS(klass)->start = GST_DEBUG_FUNCPTR(gst_cudadiff_binarize_start);
  filter_class->transform_format_caps = GST_DEBUG_FUNCPTR(gst_cudadiff_binarize_transform_caps);
  filter_class->finish_frame = gst_cudadiff_binarize_finish_frame;
  filter_class->host_results = TRUE;
  filter_class->setup = gst_cudadiff_binarize_setup;
  filter_class->teardown = gst_cudadiff_binarize_teardown;
  filter_class->process = gst_cudadiff_binarize_process;

  gst_type_mark_as_plugin_api(GST_TYPE_CUDADIFF_BINARIZE_METHOD, static_cast<GstPluginAPIFlags>(0));
}

static void gst_cudadiff_binarize_init(GstCudaBinarize *self) {
  self->params = cudadiff::BinarizeParams();
  self->params.method = DEFAULT_METHOD;
  self->params.gray = DEFAULT_GRAYSCALE;
  self->params.threshold = DEFAULT_THRESHOLD;
  self->params.min_threshold = DEFAULT_MIN_THRESHOLD;
  self->params.max_threshold = DEFAULT_MAX_THRESHOLD;
  self->params.invert = DEFAULT_INVERT;
  self->post_messages = DEFAULT_POST_MESSAGES;
  self->last_threshold = -1;
  self->op = nullptr;
  self->frame_posts_message = FALSE;
  self->frame_method = DEFAULT_METHOD;
}
