/**
 * SECTION:element-cudanoisevis
 * @title: cudanoisevis
 *
 * Shows which pixels the difference encoder would send: a pixel is marked when
 * any of its bytes differs from the previous frame's by more than `threshold`
 * (the encoder's rule). mode=mask draws marked pixels in `color` on black,
 * mode=overlay paints them over the current frame. The first frame after
 * start, a flush, a caps change or a stream-start of another stream-id has
 * nothing marked.
 *
 * With `stats-interval` N > 0, every N frames an element message named
 * `cudanoisevis` reports the fraction of marked pixels and of changed bytes
 * over those N frames, and at the end of the stream (or of a stream that
 * another stream-id follows) one more over the frames since the last
 * report; the last report is also the `stats` property. The counts are
 * reduced and summed over the N frames on the GPU; 16 bytes come back once
 * per report.
 *
 * ## Example launch lines
 * |[
 * gst-launch-1.0 v4l2src ! videoconvert ! cudanoisevis threshold=20 ! videoconvert ! autovideosink
 * gst-launch-1.0 -m videotestsrc pattern=ball ! cudanoisevis mode=overlay stats-interval=30 \
 *     ! videoconvert ! autovideosink
 * ]|
 */
#include "gstcudanoisevis.h"

#include <memory>

#include "cudadiff/noisevis.h"
#include "gstcudadiffvis.h"

GST_DEBUG_CATEGORY_STATIC(gst_cudadiff_noisevis_debug);
#define GST_CAT_DEFAULT gst_cudadiff_noisevis_debug

#define DEFAULT_THRESHOLD 20
#define DEFAULT_MODE cudadiff::NoiseMode::Mask
#define DEFAULT_COLOR 0xffff0000u
#define DEFAULT_STATS_INTERVAL 0

enum { PROP_0, PROP_THRESHOLD, PROP_MODE, PROP_COLOR, PROP_STATS_INTERVAL, PROP_STATS };
static GParamSpec *stats_pspec = nullptr;

struct _GstCudaNoiseVis {
  GstCudaDiffFilter parent;
  // Guarded by the object lock.
  cudadiff::NoiseParams params;
  guint stats_interval;
  GstStructure *stats;  // the last report, or nullptr
  // Streaming thread.
  cudadiff::NoiseVis *op;   // between setup and teardown; it sums the counts
  guint counting_interval;  // interval of the frame in flight (0: not counted)
  guint totals_interval;    // interval the op's running totals belong to
  guint interval_frames;    // frames in the op's running totals
  gboolean report_due;      // the frame in flight ends an interval: its totals were taken
  int frame_threshold;      // threshold of the frame in flight
  GstClockTime last_pts;    // of the last frame finished
};

G_DEFINE_TYPE(GstCudaNoiseVis, gst_cudadiff_noisevis, GST_TYPE_CUDADIFF_FILTER)
GST_ELEMENT_REGISTER_DEFINE(cudanoisevis, "cudanoisevis", GST_RANK_NONE, GST_TYPE_CUDADIFF_NOISEVIS)

GType gst_cudadiff_noisevis_mode_get_type(void) {
  static GType type = 0;
  static const GEnumValue values[] = {
      {static_cast<gint>(cudadiff::NoiseMode::Mask), "Marked pixels in the colour on black",
       "mask"},
      {static_cast<gint>(cudadiff::NoiseMode::Overlay),
       "Marked pixels painted over the current frame", "overlay"},
      {0, nullptr, nullptr},
  };
  if (g_once_init_enter(&type)) {
    GType t = g_enum_register_static("GstCudaDiffNoiseVisMode", values);
    g_once_init_leave(&type, t);
  }
  return type;
}

static void gst_cudadiff_noisevis_setup(GstCudaDiffFilter *filter, const GstVideoInfo *in_info,
                                        const GstVideoInfo *out_info,
                                        const cudadiff::Context &ctx) {
  auto *self = GST_CUDADIFF_NOISEVIS(filter);
  auto op =
      cudadiff::NoiseVis::create(ctx, gst_cudadiff_format_from_gst(GST_VIDEO_INFO_FORMAT(in_info)),
                                 gst_cudadiff_format_from_gst(GST_VIDEO_INFO_FORMAT(out_info)),
                                 GST_VIDEO_INFO_WIDTH(in_info), GST_VIDEO_INFO_HEIGHT(in_info));
  self->op = op.release();
  self->interval_frames = 0;  // a new op: new totals
}

static void gst_cudadiff_noisevis_teardown(GstCudaDiffFilter *filter) {
  auto *self = GST_CUDADIFF_NOISEVIS(filter);
  delete self->op;
  self->op = nullptr;
}

// After a flush nothing is marked in the next frame, and a new interval starts.
static void gst_cudadiff_noisevis_reset(GstCudaDiffFilter *filter) {
  auto *self = GST_CUDADIFF_NOISEVIS(filter);
  if (self->op) {
    self->op->reset();
    self->op->clear_counts();
  }
  self->interval_frames = 0;
}

static void gst_cudadiff_noisevis_process(GstCudaDiffFilter *filter, const cudadiff::FrameView &in,
                                          const cudadiff::FrameView &out) {
  auto *self = GST_CUDADIFF_NOISEVIS(filter);
  GST_OBJECT_LOCK(self);
  const cudadiff::NoiseParams params = self->params;
  const guint interval = self->stats_interval;
  GST_OBJECT_UNLOCK(self);
  self->counting_interval = interval;
  self->frame_threshold = params.threshold;
  self->report_due = FALSE;
  if (interval == 0) {
    self->totals_interval = 0;  // counting off: the next interval starts afresh
  } else if (self->totals_interval != interval) {
    self->op->clear_counts();  // a new interval length: new totals
    self->interval_frames = 0;
    self->totals_interval = interval;
  }
  // Counted frames add to the op's running totals on the device; the last
  // frame of an interval takes them (one small copy, queued with the frame).
  self->op->process(in, out, params, interval > 0);
  if (interval > 0 && ++self->interval_frames >= interval) {
    self->op->take_counts();
    self->interval_frames = 0;
    self->report_due = TRUE;
    gst_cudadiff_filter_need_host_results(filter);
  }
}

// Posts the report of the interval the frame ends (its totals are valid now:
// the base class has waited for the GPU).
static void post_report(GstCudaNoiseVis *self, GstClockTime pts) {
  const cudadiff::NoiseCounts t = self->op->counts();

  GstBaseTransform *trans = GST_BASE_TRANSFORM(self);
  GstClockTime running_time = GST_CLOCK_TIME_NONE, stream_time = GST_CLOCK_TIME_NONE;
  if (GST_CLOCK_TIME_IS_VALID(pts) && trans->segment.format == GST_FORMAT_TIME) {
    running_time = gst_segment_to_running_time(&trans->segment, GST_FORMAT_TIME, pts);
    stream_time = gst_segment_to_stream_time(&trans->segment, GST_FORMAT_TIME, pts);
  }
  GstStructure *s = gst_structure_new(
      "cudanoisevis", "timestamp", G_TYPE_UINT64, static_cast<guint64>(pts), "stream-time",
      G_TYPE_UINT64, static_cast<guint64>(stream_time), "running-time", G_TYPE_UINT64,
      static_cast<guint64>(running_time), "frames", G_TYPE_UINT, static_cast<guint>(t.frames),
      "compared-frames", G_TYPE_UINT, static_cast<guint>(t.compared_frames), "threshold",
      G_TYPE_UINT, static_cast<guint>(self->frame_threshold), "marked-pixels", G_TYPE_UINT64,
      static_cast<guint64>(t.marked_pixels), "pixels", G_TYPE_UINT64,
      static_cast<guint64>(t.pixels), "changed-bytes", G_TYPE_UINT64,
      static_cast<guint64>(t.changed_bytes), "bytes", G_TYPE_UINT64, static_cast<guint64>(t.bytes),
      "marked-fraction", G_TYPE_DOUBLE,
      t.pixels ? static_cast<double>(t.marked_pixels) / static_cast<double>(t.pixels) : 0.0,
      "changed-byte-fraction", G_TYPE_DOUBLE,
      t.bytes ? static_cast<double>(t.changed_bytes) / static_cast<double>(t.bytes) : 0.0, nullptr);
  GST_LOG_OBJECT(self, "report %" GST_PTR_FORMAT, s);
  GST_OBJECT_LOCK(self);
  if (self->stats) gst_structure_free(self->stats);
  self->stats = gst_structure_copy(s);
  GST_OBJECT_UNLOCK(self);
  g_object_notify_by_pspec(G_OBJECT(self), stats_pspec);  // (notify::stats, in this thread)
  gst_element_post_message(GST_ELEMENT(self), gst_message_new_element(GST_OBJECT(self), s));
}

// A frame that ends an interval asked for its results (need_host_results):
// the base class waited for it, so its totals are on the host.
static void gst_cudadiff_noisevis_finish_frame(GstCudaDiffFilter *filter, GstClockTime pts) {
  auto *self = GST_CUDADIFF_NOISEVIS(filter);
  self->last_pts = pts;
  if (self->report_due && self->op) post_report(self, pts);
  self->report_due = FALSE;
}

// At EOS the frames counted since the last report get a report of their own
// (as `level` does), so that every frame of a stream is reported.
static void gst_cudadiff_noisevis_drain(GstCudaDiffFilter *filter) {
  auto *self = GST_CUDADIFF_NOISEVIS(filter);
  GST_OBJECT_LOCK(self);
  const guint interval = self->stats_interval;
  GST_OBJECT_UNLOCK(self);
  // (stats-interval changed since the last frame: its counts are dropped)
  if (!self->op || self->totals_interval == 0 || self->interval_frames == 0 ||
      interval != self->totals_interval)
    return;
  self->op->take_counts();
  gst_cudadiff_filter_get_context(filter)->synchronize();
  self->interval_frames = 0;
  post_report(self, self->last_pts);
}

// Each run starts without a report: `stats` is NULL until its first one
// (not the previous run's).
static gboolean gst_cudadiff_noisevis_start(GstBaseTransform *trans) {
  auto *self = GST_CUDADIFF_NOISEVIS(trans);
  GST_OBJECT_LOCK(self);
  if (self->stats) gst_structure_free(self->stats);
  self->stats = nullptr;
  GST_OBJECT_UNLOCK(self);
  return GST_BASE_TRANSFORM_CLASS(gst_cudadiff_noisevis_parent_class)->start(trans);
}

static void gst_cudadiff_noisevis_set_property(GObject *object, guint prop_id, const GValue *value,
                                               GParamSpec *pspec) {
  auto *self = GST_CUDADIFF_NOISEVIS(object);
  GST_OBJECT_LOCK(self);
  switch (prop_id) {
    case PROP_THRESHOLD:
      self->params.threshold = static_cast<int>(g_value_get_uint(value));
      break;
    case PROP_MODE:
      self->params.mode = static_cast<cudadiff::NoiseMode>(g_value_get_enum(value));
      break;
    case PROP_COLOR:
      self->params.color = g_value_get_uint(value);
      break;
    case PROP_STATS_INTERVAL:
      self->stats_interval = g_value_get_uint(value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK(self);
}

static void gst_cudadiff_noisevis_get_property(GObject *object, guint prop_id, GValue *value,
                                               GParamSpec *pspec) {
  auto *self = GST_CUDADIFF_NOISEVIS(object);
  GST_OBJECT_LOCK(self);
  switch (prop_id) {
    case PROP_THRESHOLD:
      g_value_set_uint(value, static_cast<guint>(self->params.threshold));
      break;
    case PROP_MODE:
      g_value_set_enum(value, static_cast<gint>(self->params.mode));
      break;
    case PROP_COLOR:
      g_value_set_uint(value, self->params.color);
      break;
    case PROP_STATS_INTERVAL:
      g_value_set_uint(value, self->stats_interval);
      break;
    case PROP_STATS:
      g_value_set_boxed(value, self->stats);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK(self);
}

static void gst_cudadiff_noisevis_finalize(GObject *object) {
  auto *self = GST_CUDADIFF_NOISEVIS(object);
  if (self->stats) gst_structure_free(self->stats);
  self->stats = nullptr;
  G_OBJECT_CLASS(gst_cudadiff_noisevis_parent_class)->finalize(object);
}

static void gst_cudadiff_noisevis_class_init(GstCudaNoiseVisClass *klass) {
  GObjectClass *gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  GstCudaDiffFilterClass *filter_class = GST_CUDADIFF_FILTER_CLASS(klass);

  GST_DEBUG_CATEGORY_INIT(gst_cudadiff_noisevis_debug, "cudanoisevis", 0,
                          "gst-cudadiff noise view");

  gobject_class->set_property = gst_cudadiff_noisevis_set_property;
  gobject_class->get_property = gst_cudadiff_noisevis_get_property;
  gobject_class->finalize = gst_cudadiff_noisevis_finalize;

  const auto flags = static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
                                              GST_PARAM_MUTABLE_PLAYING);
  // (numbers a GstController may drive: gst_cudadiff_sync_controlled())
  const auto controllable = static_cast<GParamFlags>(flags | GST_PARAM_CONTROLLABLE);
  g_object_class_install_property(
      gobject_class, PROP_THRESHOLD,
      g_param_spec_uint("threshold", "Threshold",
                        "A byte has changed when it differs from the previous frame's by more "
                        "than this (the difference encoder's rule); a pixel is marked when any "
                        "of its bytes changed. 0 to 255. Changeable while playing. Default: 20",
                        0, 255, DEFAULT_THRESHOLD, controllable));
  g_object_class_install_property(
      gobject_class, PROP_MODE,
      g_param_spec_enum("mode", "Mode",
                        "mask: marked pixels in `color` on black; overlay: marked pixels "
                        "painted over the current frame, the rest of the frame unchanged. "
                        "Changeable while playing. Default: mask",
                        GST_TYPE_CUDADIFF_NOISEVIS_MODE, static_cast<gint>(DEFAULT_MODE), flags));
  g_object_class_install_property(
      gobject_class, PROP_COLOR,
      g_param_spec_uint("color", "Color",
                        "Colour of marked pixels as 0xAARRGGBB; its alpha AA blends it over "
                        "the background (black in mask mode, the frame in overlay mode). GRAY8 "
                        "output shows its BT.601 luma. Changeable while playing. Default: "
                        "0xffff0000 (opaque red)",
                        0, G_MAXUINT32, DEFAULT_COLOR, controllable));
  g_object_class_install_property(
      gobject_class, PROP_STATS_INTERVAL,
      g_param_spec_uint("stats-interval", "Statistics interval",
                        "Every this many frames, post an element message named cudanoisevis "
                        "with the fraction of marked pixels and of changed bytes over those "
                        "frames (and at the end of the stream, or at a stream-start of another "
                        "stream-id, over the frames since the last report), and update `stats`; "
                        "0 = off (nothing is counted). In frames. "
                        "Changeable while playing. Default: 0",
                        0, G_MAXUINT, DEFAULT_STATS_INTERVAL, flags));
  stats_pspec = g_param_spec_boxed(
      "stats", "Statistics",
      "The last report (read-only): a structure named cudanoisevis with "
      "frames, compared-frames (frames that had a previous frame), threshold, "
      "marked-pixels, pixels, changed-bytes, bytes (sums over the compared "
      "frames), marked-fraction, changed-byte-fraction, timestamp, "
      "stream-time and running-time (of the last frame). Needs "
      "stats-interval > 0; each report notifies it (notify::stats, from the "
      "streaming thread). NULL until the first report after each start. "
      "Default: NULL",
      GST_TYPE_STRUCTURE, static_cast<GParamFlags>(G_PARAM_READABLE | G_PARAM_STATIC_STRINGS));
  g_object_class_install_property(gobject_class, PROP_STATS, stats_pspec);

  gst_cudadiff_filter_add_pad_templates(element_class, GST_CUDADIFF_VIS_SINK_FORMATS,
                                        GST_CUDADIFF_VIS_SRC_FORMATS);
  gst_element_class_set_static_metadata(
      element_class, "CUDA noise view", "Filter/Analyzer/Video",
      "Marks the pixels that changed by more than a threshold since the previous frame (what "
      "the difference encoder sends), on black or over the frame, and reports the fraction of "
      "changed pixels and bytes; on the GPU or on the CPU without one",
      "gst-cudadiff developers");

  filter_class->transform_format_caps = GST_DEBUG_FUNCPTR(gst_cudadiff_vis_transform_caps);
  filter_class->finish_frame = gst_cudadiff_noisevis_finish_frame;
  filter_class->drain = gst_cudadiff_noisevis_drain;
  filter_class->host_results = TRUE;
  filter_class->setup = gst_cudadiff_noisevis_setup;
  filter_class->teardown = gst_cudadiff_noisevis_teardown;
  filter_class->process = gst_cudadiff_noisevis_process;
  filter_class->reset = gst_cudadiff_noisevis_reset;
  filter_class->keeps_previous_input = TRUE;
  GST_BASE_TRANSFORM_CLASS(klass)->start = GST_DEBUG_FUNCPTR(gst_cudadiff_noisevis_start);

  gst_type_mark_as_plugin_api(GST_TYPE_CUDADIFF_NOISEVIS_MODE, static_cast<GstPluginAPIFlags>(0));
}

static void gst_cudadiff_noisevis_init(GstCudaNoiseVis *self) {
  self->params.threshold = DEFAULT_THRESHOLD;
  self->params.mode = DEFAULT_MODE;
  self->params.color = DEFAULT_COLOR;
  self->stats_interval = DEFAULT_STATS_INTERVAL;
  self->stats = nullptr;
  self->op = nullptr;
  self->counting_interval = 0;
  self->totals_interval = 0;
  self->interval_frames = 0;
  self->report_due = FALSE;
  self->frame_threshold = DEFAULT_THRESHOLD;
  self->last_pts = GST_CLOCK_TIME_NONE;
}
