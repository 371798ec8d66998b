/**
 * SECTION:element-cudaheatmap
 * @title: cudaheatmap
 *
 * Shows where and how much each frame changed since the previous one: for
 * every pixel d = |dR| + |dG| + |dB| (0..765; GRAY8 input: 3 |dY|) is
 * normalised, multiplied by `gain`, clamped to 1 and drawn as a colour, by
 * default the report's three phase-shifted sines: blue for no change, green
 * halfway, red for the largest change. The first frame after start, a flush,
 * a caps change or a stream-start of another stream-id shows no change. With
 * `alpha` below 1 the heat map is blended over the current frame. The
 * previous frame stays on the GPU.
 *
 * ## Example launch lines
 * |[
 * gst-launch-1.0 v4l2src ! videoconvert ! cudaheatmap gain=8 ! videoconvert ! autovideosink
 * gst-launch-1.0 videotestsrc pattern=ball ! cudaheatmap colormap=turbo alpha=0.6 \
 *     ! videoconvert ! autovideosink
 * ]|
 */
#include "gstcudaheatmap.h"

#include <memory>

#include "cudadiff/heatmap.h"
#include "gstcudadiffvis.h"

GST_DEBUG_CATEGORY_STATIC(gst_cudadiff_heatmap_debug);
#define GST_CAT_DEFAULT gst_cudadiff_heatmap_debug

#define DEFAULT_COLORMAP cudadiff::HeatColormap::Sine
#define DEFAULT_GAIN 1.0
#define DEFAULT_ALPHA 1.0
#define MAX_GAIN 1000.0

enum { PROP_0, PROP_COLORMAP, PROP_GAIN, PROP_ALPHA };

struct _GstCudaHeatmap {
  GstCudaDiffFilter parent;
  cudadiff::HeatmapParams params;  // guarded by the object lock
  cudadiff::Heatmap *op;           // between setup and teardown
};

G_DEFINE_TYPE(GstCudaHeatmap, gst_cudadiff_heatmap, GST_TYPE_CUDADIFF_FILTER)
GST_ELEMENT_REGISTER_DEFINE(cudaheatmap, "cudaheatmap", GST_RANK_NONE, GST_TYPE_CUDADIFF_HEATMAP)

GType gst_cudadiff_heatmap_colormap_get_type(void) {
  static GType type = 0;
  static const GEnumValue values[] = {
      {static_cast<gint>(cudadiff::HeatColormap::Sine),
       "The report's three phase-shifted sines: blue (no change), green (half), red (most)",
       "sine"},
      {static_cast<gint>(cudadiff::HeatColormap::Turbo),
       "Google's Turbo rainbow: dark blue (no change) through green and yellow to dark red",
       "turbo"},
      {static_cast<gint>(cudadiff::HeatColormap::Gray), "Black (no change) to white (most)",
       "gray"},
      {0, nullptr, nullptr},
  };
  if (g_once_init_enter(&type)) {
    GType t = g_enum_register_static("GstCudaDiffHeatmapColormap", values);
    g_once_init_leave(&type, t);
  }
  return type;
}

static void gst_cudadiff_heatmap_setup(GstCudaDiffFilter *filter, const GstVideoInfo *in_info,
                                       const GstVideoInfo *out_info, const cudadiff::Context &ctx) {
  auto *self = GST_CUDADIFF_HEATMAP(filter);
  auto op =
      cudadiff::Heatmap::create(ctx, gst_cudadiff_format_from_gst(GST_VIDEO_INFO_FORMAT(in_info)),
                                gst_cudadiff_format_from_gst(GST_VIDEO_INFO_FORMAT(out_info)),
                                GST_VIDEO_INFO_WIDTH(in_info), GST_VIDEO_INFO_HEIGHT(in_info));
  self->op = op.release();
}

static void gst_cudadiff_heatmap_teardown(GstCudaDiffFilter *filter) {
  auto *self = GST_CUDADIFF_HEATMAP(filter);
  delete self->op;
  self->op = nullptr;
}

// After a flush the next frame shows no change.
static void gst_cudadiff_heatmap_reset(GstCudaDiffFilter *filter) {
  auto *self = GST_CUDADIFF_HEATMAP(filter);
  if (self->op) self->op->reset();
}

static void gst_cudadiff_heatmap_process(GstCudaDiffFilter *filter, const cudadiff::FrameView &in,
                                         const cudadiff::FrameView &out) {
  auto *self = GST_CUDADIFF_HEATMAP(filter);
  GST_OBJECT_LOCK(self);
  const cudadiff::HeatmapParams params = self->params;
  GST_OBJECT_UNLOCK(self);
  self->op->process(in, out, params);
}

static void gst_cudadiff_heatmap_set_property(GObject *object, guint prop_id, const GValue *value,
                                              GParamSpec *pspec) {
  auto *self = GST_CUDADIFF_HEATMAP(object);
  GST_OBJECT_LOCK(self);
  switch (prop_id) {
    case PROP_COLORMAP:
      self->params.colormap = static_cast<cudadiff::HeatColormap>(g_value_get_enum(value));
      break;
    case PROP_GAIN:
      self->params.gain = g_value_get_double(value);
      break;
    case PROP_ALPHA:
      self->params.alpha = g_value_get_double(value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK(self);
}

static void gst_cudadiff_heatmap_get_property(GObject *object, guint prop_id, GValue *value,
                                              GParamSpec *pspec) {
  auto *self = GST_CUDADIFF_HEATMAP(object);
  GST_OBJECT_LOCK(self);
  switch (prop_id) {
    case PROP_COLORMAP:
      g_value_set_enum(value, static_cast<gint>(self->params.colormap));
      break;
    case PROP_GAIN:
      g_value_set_double(value, self->params.gain);
      break;
    case PROP_ALPHA:
      g_value_set_double(value, self->params.alpha);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK(self);
}

static void gst_cudadiff_heatmap_class_init(GstCudaHeatmapClass *klass) {
  GObjectClass *gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  GstCudaDiffFilterClass *filter_class = GST_CUDADIFF_FILTER_CLASS(klass);

  GST_DEBUG_CATEGORY_INIT(gst_cudadiff_heatmap_debug, "cudaheatmap", 0, "gst-cudadiff heat map");

  gobject_class->set_property = gst_cudadiff_heatmap_set_property;
  gobject_class->get_property = gst_cudadiff_heatmap_get_property;

  const auto flags = static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
                                              GST_PARAM_MUTABLE_PLAYING);
  // (numbers a GstController may drive: gst_cudadiff_sync_controlled())
  const auto controllable = static_cast<GParamFlags>(flags | GST_PARAM_CONTROLLABLE);
  g_object_class_install_property(
      gobject_class, PROP_COLORMAP,
      g_param_spec_enum("colormap", "Colormap",
                        "How the change of a pixel becomes a colour: sine (the report's three "
                        "phase-shifted sines: blue for no change, green halfway, red for the "
                        "most), turbo (Google's Turbo rainbow, dark blue to dark red) or gray "
                        "(black to white). Changeable while playing. Default: sine",
                        GST_TYPE_CUDADIFF_HEATMAP_COLORMAP, static_cast<gint>(DEFAULT_COLORMAP),
                        flags));
  g_object_class_install_property(
      gobject_class, PROP_GAIN,
      g_param_spec_double(
          "gain", "Gain",
          "Multiplies the normalised change (|dR|+|dG|+|dB|)/765 (GRAY8: "
          "|dY|/255) before it is clamped to 1, so that small changes become "
          "visible: with gain 10 a change of 77 (summed over R, G and B) already shows "
          "the top colour. "
          "0 to 1000. Changeable while playing. Default: 1",
          0.0, MAX_GAIN, DEFAULT_GAIN, controllable));
  g_object_class_install_property(
      gobject_class, PROP_ALPHA,
      g_param_spec_double("alpha", "Alpha",
                          "Opacity of the heat map over the current frame, 0 to 1: 1 shows the "
                          "heat map only, lower values blend it over the frame (0: the frame "
                          "unchanged). Changeable while playing. Default: 1",
                          0.0, 1.0, DEFAULT_ALPHA, controllable));

  gst_cudadiff_filter_add_pad_templates(element_class, GST_CUDADIFF_VIS_SINK_FORMATS,
                                        GST_CUDADIFF_VIS_SRC_FORMATS);
  gst_element_class_set_static_metadata(
      element_class, "CUDA heat map", "Filter/Effect/Video",
      "Shows how much each pixel changed since the previous frame, as a colour from blue (no "
      "change) through green to red (most), on the GPU or on the CPU without one. Output: the "
      "input format; GRAY8 input gives colour or GRAY8",
      "gst-cudadiff developers");

  filter_class->transform_format_caps = GST_DEBUG_FUNCPTR(gst_cudadiff_vis_transform_caps);
  filter_class->setup = gst_cudadiff_heatmap_setup;
  filter_class->teardown = gst_cudadiff_heatmap_teardown;
  filter_class->process = gst_cudadiff_heatmap_process;
  filter_class->reset = gst_cudadiff_heatmap_reset;
  filter_class->keeps_previous_input = TRUE;

  gst_type_mark_as_plugin_api(GST_TYPE_CUDADIFF_HEATMAP_COLORMAP,
                              static_cast<GstPluginAPIFlags>(0));
}

static void gst_cudadiff_heatmap_init(GstCudaHeatmap *self) {
  self->params.colormap = DEFAULT_COLORMAP;
  self->params.gain = DEFAULT_GAIN;
  self->params.alpha = DEFAULT_ALPHA;
  self->op = nullptr;
}
