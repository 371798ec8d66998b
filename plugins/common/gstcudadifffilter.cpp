#include "gstcudadifffilter.h"

#include <memory>

#include "gstcudadiffpinned.h"

GST_DEBUG_CATEGORY_STATIC(gst_cudadiff_filter_debug);
#define GST_CAT_DEFAULT gst_cudadiff_filter_debug

namespace {

enum { PROP_0, PROP_BACKEND, PROP_DEVICE_ID };

// Everything that lives from start to stop. C++ objects, so held by pointer
// from the GObject private struct.
struct FilterState {
  std::unique_ptr<cudadiff::Context> ctx;
  cudadiff::DeviceFrame device_in[2];  // alternate, so the previous input stays valid
  cudadiff::DeviceFrame device_out;
  int next_in = 0;
  bool configured = false;  // setup() succeeded for the current caps
};

}  // namespace

struct GstCudaDiffFilterPrivate {
  GstCudaDiffBackend backend;
  gint device_id;
  FilterState *state;
};

G_DEFINE_ABSTRACT_TYPE_WITH_CODE(GstCudaDiffFilter, gst_cudadiff_filter, GST_TYPE_VIDEO_FILTER,
                                 G_ADD_PRIVATE(GstCudaDiffFilter)
                                     GST_DEBUG_CATEGORY_INIT(gst_cudadiff_filter_debug,
                                                             "cudadifffilter", 0,
                                                             "gst-cudadiff base filter"))

static GstCudaDiffFilterPrivate *get_priv(GstCudaDiffFilter *self) {
  return static_cast<GstCudaDiffFilterPrivate *>(gst_cudadiff_filter_get_instance_private(self));
}

static void drop_operation(GstCudaDiffFilter *self) {
  GstCudaDiffFilterPrivate *priv = get_priv(self);
  GstCudaDiffFilterClass *klass = GST_CUDADIFF_FILTER_GET_CLASS(self);
  if (priv->state->configured && klass->teardown) klass->teardown(self);
  priv->state->configured = false;
  priv->state->device_in[0] = cudadiff::DeviceFrame();
  priv->state->device_in[1] = cudadiff::DeviceFrame();
  priv->state->device_out = cudadiff::DeviceFrame();
  priv->state->next_in = 0;
}

static void gst_cudadiff_filter_set_property(GObject *object, guint prop_id, const GValue *value,
                                             GParamSpec *pspec) {
  GstCudaDiffFilterPrivate *priv = get_priv(GST_CUDADIFF_FILTER(object));
  GST_OBJECT_LOCK(object);
  switch (prop_id) {
    case PROP_BACKEND:
      priv->backend = static_cast<GstCudaDiffBackend>(g_value_get_enum(value));
      break;
    case PROP_DEVICE_ID:
      priv->device_id = g_value_get_int(value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK(object);
}

static void gst_cudadiff_filter_get_property(GObject *object, guint prop_id, GValue *value,
                                             GParamSpec *pspec) {
  GstCudaDiffFilterPrivate *priv = get_priv(GST_CUDADIFF_FILTER(object));
  GST_OBJECT_LOCK(object);
  switch (prop_id) {
    case PROP_BACKEND:
      g_value_set_enum(value, priv->backend);
      break;
    case PROP_DEVICE_ID:
      g_value_set_int(value, priv->device_id);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK(object);
}

static void gst_cudadiff_filter_finalize(GObject *object) {
  GstCudaDiffFilterPrivate *priv = get_priv(GST_CUDADIFF_FILTER(object));
  delete priv->state;
  priv->state = nullptr;
  G_OBJECT_CLASS(gst_cudadiff_filter_parent_class)->finalize(object);
}

static gboolean gst_cudadiff_filter_start(GstBaseTransform *trans) {
  auto *self = GST_CUDADIFF_FILTER(trans);
  GstCudaDiffFilterPrivate *priv = get_priv(self);
  GST_OBJECT_LOCK(self);
  const GstCudaDiffBackend backend = priv->backend;
  const gint device_id = priv->device_id;
  GST_OBJECT_UNLOCK(self);
  priv->state->ctx = gst_cudadiff_open_context(GST_ELEMENT(self), backend, device_id);
  return priv->state->ctx != nullptr;
}

static gboolean gst_cudadiff_filter_stop(GstBaseTransform *trans) {
  auto *self = GST_CUDADIFF_FILTER(trans);
  GstCudaDiffFilterPrivate *priv = get_priv(self);
  if (priv->state->ctx) {
    try {
      priv->state->ctx->activate();
      priv->state->ctx->synchronize();
    } catch (const cudadiff::Error &e) {
      GST_WARNING_OBJECT(self, "at stop: %s", e.what());
    }
  }
  drop_operation(self);
  priv->state->ctx.reset();
  return TRUE;
}

static gboolean gst_cudadiff_filter_set_info(GstVideoFilter *filter, GstCaps *,
                                             GstVideoInfo *in_info, GstCaps *,
                                             GstVideoInfo *out_info) {
  auto *self = GST_CUDADIFF_FILTER(filter);
  GstCudaDiffFilterPrivate *priv = get_priv(self);
  GstCudaDiffFilterClass *klass = GST_CUDADIFF_FILTER_GET_CLASS(self);
  FilterState *st = priv->state;
  if (!st->ctx) return FALSE;

  const cudadiff::VideoFormat in_fmt = gst_cudadiff_format_from_gst(GST_VIDEO_INFO_FORMAT(in_info));
  const cudadiff::VideoFormat out_fmt =
      gst_cudadiff_format_from_gst(GST_VIDEO_INFO_FORMAT(out_info));
  if (in_fmt == cudadiff::VideoFormat::Unknown || out_fmt == cudadiff::VideoFormat::Unknown) {
    GST_ELEMENT_ERROR(
        self, CORE, NEGOTIATION, ("unsupported video format"),
        ("input %s, output %s", GST_VIDEO_INFO_NAME(in_info), GST_VIDEO_INFO_NAME(out_info)));
    return FALSE;
  }
  drop_operation(self);
  try {
    st->ctx->activate();
    if (st->ctx->is_cuda() && klass->process) {
      st->device_in[0] = cudadiff::DeviceFrame(in_fmt, GST_VIDEO_INFO_WIDTH(in_info),
                                               GST_VIDEO_INFO_HEIGHT(in_info));
      if (klass->keeps_previous_input)
        st->device_in[1] = cudadiff::DeviceFrame(in_fmt, GST_VIDEO_INFO_WIDTH(in_info),
                                                 GST_VIDEO_INFO_HEIGHT(in_info));
      st->device_out = cudadiff::DeviceFrame(out_fmt, GST_VIDEO_INFO_WIDTH(out_info),
                                             GST_VIDEO_INFO_HEIGHT(out_info));
    }
    klass->setup(self, in_info, out_info, *st->ctx);
    st->configured = true;
  } catch (const cudadiff::Error &e) {
    drop_operation(self);
    gst_cudadiff_post_error(GST_ELEMENT(self), "configuring for the negotiated caps", e);
    return FALSE;
  }
  GST_DEBUG_OBJECT(self, "configured %s %dx%d -> %s on %s", GST_VIDEO_INFO_NAME(in_info),
                   GST_VIDEO_INFO_WIDTH(in_info), GST_VIDEO_INFO_HEIGHT(in_info),
                   GST_VIDEO_INFO_NAME(out_info), cudadiff::backend_name(st->ctx->backend()));
  return TRUE;
}

static GstFlowReturn gst_cudadiff_filter_transform_frame(GstVideoFilter *filter,
                                                         GstVideoFrame *inframe,
                                                         GstVideoFrame *outframe) {
  auto *self = GST_CUDADIFF_FILTER(filter);
  GstCudaDiffFilterPrivate *priv = get_priv(self);
  GstCudaDiffFilterClass *klass = GST_CUDADIFF_FILTER_GET_CLASS(self);
  FilterState *st = priv->state;
  if (!st->ctx || !st->configured) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, (nullptr), ("frame before caps were configured"));
    return GST_FLOW_NOT_NEGOTIATED;
  }
  if (!klass->process) {
    GST_ELEMENT_ERROR(self, CORE, NOT_IMPLEMENTED, (nullptr), ("in-place filter not in place"));
    return GST_FLOW_ERROR;
  }
  try {
    const cudadiff::Context &ctx = *st->ctx;
    ctx.activate();
    const cudadiff::FrameView in = gst_cudadiff_frame_view(inframe);
    const cudadiff::FrameView out = gst_cudadiff_frame_view(outframe);
    if (!ctx.is_cuda()) {
      klass->process(self, in, out);
      return GST_FLOW_OK;
    }
    // Integrated GPUs read mapped pinned memory in place: no copies at all.
    if (ctx.gpu().integrated && !klass->keeps_previous_input &&
        gst_cudadiff_buffer_is_pinned(inframe->buffer) &&
        gst_cudadiff_buffer_is_pinned(outframe->buffer)) {
      klass->process(self, in, out);
      ctx.synchronize();
      return GST_FLOW_OK;
    }
    const cudadiff::FrameView &device_in = st->device_in[st->next_in].view();
    if (klass->keeps_previous_input) st->next_in ^= 1;
    cudadiff::copy_to_device(in, device_in, ctx);
    klass->process(self, device_in, st->device_out.view());
    cudadiff::copy_to_host(st->device_out.view(), out, ctx);
    ctx.synchronize();
  } catch (const cudadiff::Error &e) {
    gst_cudadiff_post_error(GST_ELEMENT(self), "processing a frame", e);
    return GST_FLOW_ERROR;
  }
  return GST_FLOW_OK;
}

static GstFlowReturn gst_cudadiff_filter_transform_frame_ip(GstVideoFilter *filter,
                                                            GstVideoFrame *frame) {
  auto *self = GST_CUDADIFF_FILTER(filter);
  GstCudaDiffFilterClass *klass = GST_CUDADIFF_FILTER_GET_CLASS(self);
  FilterState *st = get_priv(self)->state;
  if (!klass->process_ip) {
    GST_ELEMENT_ERROR(self, CORE, NOT_IMPLEMENTED, (nullptr), ("no in-place processing"));
    return GST_FLOW_ERROR;
  }
  if (!st->ctx || !st->configured) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, (nullptr), ("frame before caps were configured"));
    return GST_FLOW_NOT_NEGOTIATED;
  }
  try {
    const cudadiff::Context &ctx = *st->ctx;
    ctx.activate();
    klass->process_ip(self, gst_cudadiff_frame_view(frame));
    if (ctx.is_cuda()) ctx.synchronize();
  } catch (const cudadiff::Error &e) {
    gst_cudadiff_post_error(GST_ELEMENT(self), "processing a frame", e);
    return GST_FLOW_ERROR;
  }
  return GST_FLOW_OK;
}

static gboolean gst_cudadiff_filter_sink_event(GstBaseTransform *trans, GstEvent *event) {
  auto *self = GST_CUDADIFF_FILTER(trans);
  GstCudaDiffFilterClass *klass = GST_CUDADIFF_FILTER_GET_CLASS(self);
  if (GST_EVENT_TYPE(event) == GST_EVENT_FLUSH_STOP && klass->reset &&
      get_priv(self)->state->configured)
    klass->reset(self);
  return GST_BASE_TRANSFORM_CLASS(gst_cudadiff_filter_parent_class)->sink_event(trans, event);
}

// Upstream gets a pool of pinned buffers with GstVideoMeta, so that it writes
// each frame straight into memory the GPU copies from at full speed.
static gboolean gst_cudadiff_filter_propose_allocation(GstBaseTransform *trans,
                                                       GstQuery *decide_query, GstQuery *query) {
  if (gst_base_transform_is_passthrough(trans))
    return GST_BASE_TRANSFORM_CLASS(gst_cudadiff_filter_parent_class)
        ->propose_allocation(trans, decide_query, query);
  return gst_cudadiff_propose_pinned_allocation(query);
}

// Output buffers come from a pinned pool: downstream's own pool when it is one
// of ours (another gst-cudadiff element), else a new one.
static gboolean gst_cudadiff_filter_decide_allocation(GstBaseTransform *trans, GstQuery *query) {
  return gst_cudadiff_decide_pinned_allocation(GST_ELEMENT(trans), query);
}

static void gst_cudadiff_filter_class_init(GstCudaDiffFilterClass *klass) {
  GObjectClass *gobject_class = G_OBJECT_CLASS(klass);
  GstBaseTransformClass *trans_class = GST_BASE_TRANSFORM_CLASS(klass);
  GstVideoFilterClass *filter_class = GST_VIDEO_FILTER_CLASS(klass);

  gobject_class->set_property = gst_cudadiff_filter_set_property;
  gobject_class->get_property = gst_cudadiff_filter_get_property;
  gobject_class->finalize = gst_cudadiff_filter_finalize;
  gst_cudadiff_install_backend_properties(gobject_class, PROP_BACKEND, PROP_DEVICE_ID);

  trans_class->start = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_start);
  trans_class->stop = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_stop);
  trans_class->sink_event = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_sink_event);
  trans_class->propose_allocation = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_propose_allocation);
  trans_class->decide_allocation = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_decide_allocation);
  filter_class->set_info = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_set_info);
  filter_class->transform_frame = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_transform_frame);
  // Used by in-place subclasses only (GstBaseTransform calls transform_ip
  // when in place); a passthrough buffer is never touched.
  filter_class->transform_frame_ip = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_transform_frame_ip);
  trans_class->transform_ip_on_passthrough = FALSE;

  gst_type_mark_as_plugin_api(GST_TYPE_CUDADIFF_FILTER, static_cast<GstPluginAPIFlags>(0));
}

static void gst_cudadiff_filter_init(GstCudaDiffFilter *self) {
  GstCudaDiffFilterPrivate *priv = get_priv(self);
  priv->backend = GST_CUDADIFF_DEFAULT_BACKEND;
  priv->device_id = GST_CUDADIFF_DEFAULT_DEVICE_ID;
  priv->state = new FilterState();
}

const cudadiff::Context *gst_cudadiff_filter_get_context(GstCudaDiffFilter *filter) {
  return get_priv(filter)->state->ctx.get();
}

cudadiff::Backend gst_cudadiff_filter_get_backend(GstCudaDiffFilter *filter) {
  const cudadiff::Context *ctx = gst_cudadiff_filter_get_context(filter);
  return ctx ? ctx->backend() : cudadiff::Backend::Cpu;
}

GstCaps *gst_cudadiff_filter_make_caps(const char *formats) {
  gchar *str = g_strdup_printf(
      "video/x-raw, format = (string) %s, width = (int) [ 1, 32767 ], "
      "height = (int) [ 1, 32767 ], framerate = (fraction) [ 0, max ]",
      formats);
  GstCaps *caps = gst_caps_from_string(str);
  g_free(str);
  return caps;
}

void gst_cudadiff_filter_add_pad_templates(GstElementClass *klass, const char *sink_formats,
                                           const char *src_formats) {
  // gst_pad_template_new() takes its own reference to the caps.
  GstCaps *sink = gst_cudadiff_filter_make_caps(sink_formats);
  GstCaps *src = gst_cudadiff_filter_make_caps(src_formats);
  gst_element_class_add_pad_template(
      klass, gst_pad_template_new("sink", GST_PAD_SINK, GST_PAD_ALWAYS, sink));
  gst_element_class_add_pad_template(klass,
                                     gst_pad_template_new("src", GST_PAD_SRC, GST_PAD_ALWAYS, src));
  gst_caps_unref(sink);
  gst_caps_unref(src);
}
