#include "gstcudadifffilter.h"

#include <memory>
#include <vector>

#include "diff/gstcudadiffenc.h"  // GstCudaDiffFrameOverlap
#include "gstcudadiffcudamem.h"
#include "gstcudadiffpinned.h"

GST_DEBUG_CATEGORY_STATIC(gst_cudadiff_filter_debug);
#define GST_CAT_DEFAULT gst_cudadiff_filter_debug

#define DEFAULT_FRAME_OVERLAP GST_CUDADIFF_FRAME_OVERLAP_AUTO

namespace {

enum { PROP_0, PROP_BACKEND, PROP_DEVICE_ID, PROP_FRAME_OVERLAP, PROP_ACTIVE_BACKEND };

// An input buffer whose memory the GPU may still read: released once the
// work queued up to its event has finished.
struct HeldInput {
  GstBuffer *buffer = nullptr;
  std::unique_ptr<cudadiff::StreamEvent> read_done;
};

// A frame of the overlapped system-memory path: both buffers stay mapped
// (and referenced) until its download has finished.
struct Flight {
  GstVideoFrame in_frame;
  GstVideoFrame out_frame;
  GstBuffer *out = nullptr;  // owned: pushed when the frame is done
  GstClockTime pts = GST_CLOCK_TIME_NONE;
  int out_slot = 0;
};

// Everything that lives from start to stop. C++ objects, so held by pointer
// from the GObject private struct.
struct FilterState {
  std::unique_ptr<cudadiff::Context> ctx;
  GstCudaDiffCudaShare share;  // the pipeline's CUDA context
  bool configured = false;     // setup() succeeded for the current caps
  bool caps_refused = false;   // setup() posted why it refuses the caps
  // The last refusal posted (its message and details): GstBaseTransform
  // sets the same caps again for each buffer that follows, and an
  // application should see one problem as one error. Cleared when caps are
  // taken and at stop.
  std::string refused;
  bool frame_interlaced = false;  // the frame being processed has two fields
  // What each side negotiated.
  bool in_cuda = false, out_cuda = false;
  bool downstream_orders = false;  // downstream orders its work after pending buffers
  // In pass-through: whether downstream honours pending marks (-1: not asked
  // yet since the last switch).
  int passthrough_orders = -1;
  // Device frames (CUDA backend, process-type filters): input slots
  // (alternate, so that the previous input stays valid) and output slots.
  std::vector<cudadiff::DeviceFrame> device_in;
  std::vector<cudadiff::DeviceFrame> device_out;
  unsigned frame_index = 0;        // frames since caps: picks the slots
  bool need_host_results = false;  // process() asked for this frame
  // Inputs the GPU may still read, and spare events for them.
  std::vector<HeldInput> held;
  std::vector<std::unique_ptr<cudadiff::StreamEvent>> spare_events;
  // Device input kept while the next frame compares with it.
  GstBuffer *previous_input = nullptr;
  bool previous_ordered = false;
  // The last device-resident frame, not waited for: finish_frame once done.
  std::unique_ptr<cudadiff::StreamEvent> last_frame_done;
  bool last_frame_unfinished = false;
  GstClockTime last_frame_pts = GST_CLOCK_TIME_NONE;
  // Frame overlap: uploads and downloads on streams of their own beside the
  // shared stream the kernels run on; per slot, events for "its last reader
  // (kernel or download) has finished".
  bool overlap = false;
  std::unique_ptr<cudadiff::Stream> upload_stream, download_stream;
  std::vector<std::unique_ptr<cudadiff::StreamEvent>> in_free, out_free;
  std::unique_ptr<cudadiff::StreamEvent> uploaded, processed;
  Flight flight;  // the frame waiting to be pushed
  bool in_flight = false;
  Flight queued;  // the frame transform() just queued, for generate_output()
  bool have_queued = false;
  // CUDA memory of another driver context was seen (warned once per start).
  bool warned_foreign = false;
  // The stream-id of the last STREAM_START since start: another one ends
  // the stream before (new_stream()).
  std::string stream_id;
};

}  // namespace

struct GstCudaDiffFilterPrivate {
  GstCudaDiffBackend backend;
  gint device_id;
  GstCudaDiffFrameOverlap frame_overlap;
  // What frame overlap adds to the latency (one frame; 0 without it),
  // under the object lock: latency queries come from any thread.
  GstClockTime overlap_latency;
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

static std::unique_ptr<cudadiff::StreamEvent> take_event(FilterState *st) {
  if (st->spare_events.empty()) return std::make_unique<cudadiff::StreamEvent>();
  auto e = std::move(st->spare_events.back());
  st->spare_events.pop_back();
  return e;
}

// Keeps `buffer` (a reference is taken) until the work queued so far on the
// context's stream has finished.
static void hold_input(FilterState *st, GstBuffer *buffer) {
  HeldInput h;
  h.read_done = take_event(st);
  h.read_done->record(*st->ctx);
  h.buffer = gst_buffer_ref(buffer);
  st->held.push_back(std::move(h));
}

// Waits for the held inputs' readers and releases them. With the context
// current. Throws cudadiff::Error (the buffers are released anyway).
static void release_held(FilterState *st) {
  std::vector<HeldInput> held = std::move(st->held);
  st->held.clear();
  bool failed = false;
  std::string why;
  for (HeldInput &h : held) {
    try {
      if (!failed) h.read_done->synchronize();
    } catch (const cudadiff::Error &e) {
      failed = true;
      why = e.what();
    }
    gst_buffer_unref(h.buffer);
    st->spare_events.push_back(std::move(h.read_done));
  }
  if (failed) throw cudadiff::Error(why);
}

// The previous device input is no longer needed (the frame after it was
// queued): released now when its producer orders by our stream, else once
// our reads have finished.
static void drop_previous_input(FilterState *st, bool wait) {
  if (!st->previous_input) return;
  if (!st->previous_ordered && !wait) hold_input(st, st->previous_input);
  gst_buffer_unref(st->previous_input);
  st->previous_input = nullptr;
}

static void unmap_flight(Flight &f) {
  gst_video_frame_unmap(&f.in_frame);
  gst_video_frame_unmap(&f.out_frame);
}

// Waits for the frame in flight; returns its output buffer (transfer full)
// or nullptr when there is none. Throws cudadiff::Error (the frame is
// dropped then).
static GstBuffer *complete_flight(GstCudaDiffFilter *self) {
  FilterState *st = get_priv(self)->state;
  if (!st->in_flight) return nullptr;
  st->in_flight = false;
  Flight f = st->flight;
  try {
    st->out_free[f.out_slot]->synchronize();
  } catch (const cudadiff::Error &) {
    unmap_flight(f);
    gst_buffer_unref(f.out);
    throw;
  }
  unmap_flight(f);
  GstCudaDiffFilterClass *klass = GST_CUDADIFF_FILTER_GET_CLASS(self);
  if (klass->finish_frame) klass->finish_frame(self, f.pts);
  return f.out;
}

// Pushes the frame in flight (events, caps changes and drains come after it).
static GstFlowReturn push_flight(GstCudaDiffFilter *self) {
  FilterState *st = get_priv(self)->state;
  if (!st->in_flight) return GST_FLOW_OK;
  GstBuffer *out = nullptr;
  try {
    cudadiff::ContextScope scope(st->ctx.get());
    out = complete_flight(self);
  } catch (const cudadiff::Error &e) {
    gst_cudadiff_post_error(GST_ELEMENT(self), "processing a frame", e);
    return GST_FLOW_ERROR;
  }
  return out ? gst_pad_push(GST_BASE_TRANSFORM_SRC_PAD(self), out) : GST_FLOW_OK;
}

// Flushes and stops: the frame in flight is waited for and dropped.
static void discard_flight(GstCudaDiffFilter *self) {
  FilterState *st = get_priv(self)->state;
  if (!st->in_flight) return;
  try {
    cudadiff::ContextScope scope(st->ctx.get());
    GstBuffer *out = complete_flight(self);
    if (out) gst_buffer_unref(out);
  } catch (const cudadiff::Error &e) {
    GST_WARNING_OBJECT(self, "dropping the frame in flight: %s", e.what());
  }
}

// Everything that belongs to the negotiated caps. With the context current.
static void drop_operation(GstCudaDiffFilter *self) {
  GstCudaDiffFilterPrivate *priv = get_priv(self);
  GstCudaDiffFilterClass *klass = GST_CUDADIFF_FILTER_GET_CLASS(self);
  FilterState *st = priv->state;
  discard_flight(self);
  // The input buffers go back upstream even when the wait fails (a CUDA
  // error stays with the context: the device has given up its work).
  try {
    if (st->ctx && st->ctx->is_cuda()) st->ctx->synchronize();
  } catch (const cudadiff::Error &e) {
    GST_WARNING_OBJECT(self, "waiting for the device: %s", e.what());
  }
  drop_previous_input(st, true);
  try {
    release_held(st);  // (releases every buffer, then throws the first failure)
  } catch (const cudadiff::Error &e) {
    GST_WARNING_OBJECT(self, "releasing frames: %s", e.what());
  }
  if (st->configured && klass->teardown) klass->teardown(self);
  st->configured = false;
  st->device_in.clear();
  st->device_out.clear();
  st->frame_index = 0;
  st->in_free.clear();
  st->out_free.clear();
  st->uploaded.reset();
  st->processed.reset();
  st->upload_stream.reset();
  st->download_stream.reset();
  st->last_frame_done.reset();
  st->last_frame_unfinished = false;
  st->spare_events.clear();
  st->overlap = false;
  GST_OBJECT_LOCK(self);
  priv->overlap_latency = 0;
  GST_OBJECT_UNLOCK(self);
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
    case PROP_FRAME_OVERLAP:
      priv->frame_overlap = static_cast<GstCudaDiffFrameOverlap>(g_value_get_enum(value));
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
    case PROP_ACTIVE_BACKEND:
      g_value_set_enum(value, gst_cudadiff_active_backend(GST_ELEMENT(object)));
      break;
    case PROP_FRAME_OVERLAP:
      g_value_set_enum(value, priv->frame_overlap);
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

static void gst_cudadiff_filter_set_context(GstElement *element, GstContext *context) {
  GstCudaDiffFilterPrivate *priv = get_priv(GST_CUDADIFF_FILTER(element));
  GST_OBJECT_LOCK(element);
  const gint device_id = priv->device_id;
  const bool cpu = priv->backend == GST_CUDADIFF_BACKEND_CPU;
  GST_OBJECT_UNLOCK(element);
  // A CPU element keeps no CUDA context (and so answers no context query).
  if (!cpu) priv->state->share.set_context(element, context, device_id);
  GST_ELEMENT_CLASS(gst_cudadiff_filter_parent_class)->set_context(element, context);
}

static gboolean gst_cudadiff_filter_query(GstBaseTransform *trans, GstPadDirection direction,
                                          GstQuery *query) {
  FilterState *st = get_priv(GST_CUDADIFF_FILTER(trans))->state;
  if (GST_QUERY_TYPE(query) == GST_QUERY_CONTEXT &&
      st->share.handle_query(GST_ELEMENT(trans), query))
    return TRUE;
  const gboolean ret =
      GST_BASE_TRANSFORM_CLASS(gst_cudadiff_filter_parent_class)->query(trans, direction, query);
  // Frame overlap holds each frame until the next one arrives: one frame
  // more of latency, which a live pipeline must account for.
  if (ret && direction == GST_PAD_SRC && GST_QUERY_TYPE(query) == GST_QUERY_LATENCY) {
    GstCudaDiffFilterPrivate *priv = get_priv(GST_CUDADIFF_FILTER(trans));
    GST_OBJECT_LOCK(trans);
    const GstClockTime frame = priv->overlap_latency;
    GST_OBJECT_UNLOCK(trans);
    if (frame > 0) {
      gboolean live = FALSE;
      GstClockTime min = 0, max = GST_CLOCK_TIME_NONE;
      gst_query_parse_latency(query, &live, &min, &max);
      min += frame;
      if (GST_CLOCK_TIME_IS_VALID(max)) max += frame;
      gst_query_set_latency(query, live, min, max);
      GST_DEBUG_OBJECT(trans, "frame overlap: latency + %" GST_TIME_FORMAT, GST_TIME_ARGS(frame));
    }
  }
  return ret;
}

static gboolean gst_cudadiff_filter_start(GstBaseTransform *trans) {
  auto *self = GST_CUDADIFF_FILTER(trans);
  GstCudaDiffFilterPrivate *priv = get_priv(self);
  GST_OBJECT_LOCK(self);
  const GstCudaDiffBackend backend = priv->backend;
  const gint device_id = priv->device_id;
  GST_OBJECT_UNLOCK(self);
  priv->state->warned_foreign = false;
  priv->state->stream_id.clear();
  priv->state->ctx =
      gst_cudadiff_open_shared_context(GST_ELEMENT(self), backend, device_id, &priv->state->share);
  return priv->state->ctx != nullptr;
}

static gboolean gst_cudadiff_filter_stop(GstBaseTransform *trans) {
  auto *self = GST_CUDADIFF_FILTER(trans);
  FilterState *st = get_priv(self)->state;
  try {
    cudadiff::ContextScope scope(st->ctx.get());
    drop_operation(self);
    st->ctx.reset();
  } catch (const cudadiff::Error &e) {
    GST_WARNING_OBJECT(self, "at stop: %s", e.what());
    drop_operation(self);
    st->ctx.reset();
  }
  st->share.release();
  st->refused.clear();
  gst_cudadiff_forget_backend(GST_ELEMENT(self));
  return TRUE;
}

// The other side's caps: the subclass's formats, in CUDA memory (first, when
// this element can use it) and in system memory, whatever memory this side
// has: the element uploads or downloads as needed. In-place filters keep
// format and memory.
static GstCaps *gst_cudadiff_filter_transform_caps(GstBaseTransform *trans,
                                                   GstPadDirection direction, GstCaps *caps,
                                                   GstCaps *filter) {
  auto *self = GST_CUDADIFF_FILTER(trans);
  GstCudaDiffFilterPrivate *priv = get_priv(self);
  GstCudaDiffFilterClass *klass = GST_CUDADIFF_FILTER_GET_CLASS(self);
  GST_OBJECT_LOCK(self);
  const GstCudaDiffBackend backend = priv->backend;
  const gint device_id = priv->device_id;
  GST_OBJECT_UNLOCK(self);
  // Not after start failed to share the pipeline's context (or chose the
  // CPU): system memory only then.
  const bool cuda = gst_cudadiff_cuda_caps_allowed(backend, device_id, priv->state->share);
  GstCaps *result;
  if (gst_base_transform_is_in_place(trans)) {
    result = cuda ? gst_cudadiff_caps_cuda_first(gst_caps_ref(caps))
                  : gst_cudadiff_caps_without_cuda(caps);
  } else {
    // Caps in CUDA memory only where this element can take them, so that an
    // ACCEPT_CAPS query refuses them as the CAPS query leaves them out.
    GstCaps *plain = cuda ? gst_caps_ref(caps) : gst_cudadiff_caps_without_cuda(caps);
    GstCaps *sys = gst_cudadiff_caps_with_memory(plain, false);
    gst_caps_unref(plain);
    GstCaps *mapped = klass->transform_format_caps
                          ? klass->transform_format_caps(trans, direction, sys, nullptr)
                          : gst_caps_ref(sys);
    gst_caps_unref(sys);
    result = gst_cudadiff_caps_with_memory(mapped, cuda);
    gst_caps_unref(mapped);
  }
  if (filter) {
    GstCaps *tmp = gst_caps_intersect_full(filter, result, GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref(result);
    result = tmp;
  }
  GST_DEBUG_OBJECT(trans, "%s caps %" GST_PTR_FORMAT " -> %" GST_PTR_FORMAT,
                   direction == GST_PAD_SINK ? "sink" : "src", caps, result);
  return result;
}

// CUDA memory out when downstream asks for it by name, else system memory;
// system memory first for I420 and YV12 of an odd height, which lose a plane
// in CUDA memory (gst_cudadiff_cuda_memory_loses_planes()).
static GstCaps *gst_cudadiff_filter_fixate_caps(GstBaseTransform *trans, GstPadDirection direction,
                                                GstCaps *caps, GstCaps *othercaps) {
  if (direction == GST_PAD_SINK && !gst_base_transform_is_in_place(trans)) {
    GstVideoInfo in;
    if (gst_video_info_from_caps(&in, caps) && gst_cudadiff_cuda_memory_loses_planes(&in))
      othercaps = gst_cudadiff_caps_system_first(othercaps);
    else
      othercaps =
          gst_cudadiff_caps_prefer_peer_memory(GST_BASE_TRANSFORM_SRC_PAD(trans), othercaps);
  }
  return GST_BASE_TRANSFORM_CLASS(gst_cudadiff_filter_parent_class)
      ->fixate_caps(trans, direction, caps, othercaps);
}

static gboolean gst_cudadiff_filter_set_info(GstVideoFilter *filter, GstCaps *incaps,
                                             GstVideoInfo *in_info, GstCaps *outcaps,
                                             GstVideoInfo *out_info) {
  auto *self = GST_CUDADIFF_FILTER(filter);
  GstCudaDiffFilterPrivate *priv = get_priv(self);
  GstCudaDiffFilterClass *klass = GST_CUDADIFF_FILTER_GET_CLASS(self);
  FilterState *st = priv->state;
  if (!st->ctx) return FALSE;
  // New caps: an element in place waits for its frames until upstream's
  // allocation query (which follows) says that downstream orders after them.
  if (gst_base_transform_is_in_place(GST_BASE_TRANSFORM(filter))) st->downstream_orders = false;

  const cudadiff::VideoFormat in_fmt = gst_cudadiff_format_from_gst(GST_VIDEO_INFO_FORMAT(in_info));
  const cudadiff::VideoFormat out_fmt =
      gst_cudadiff_format_from_gst(GST_VIDEO_INFO_FORMAT(out_info));
  if (in_fmt == cudadiff::VideoFormat::Unknown || out_fmt == cudadiff::VideoFormat::Unknown) {
    GST_ELEMENT_ERROR(
        self, CORE, NEGOTIATION, ("unsupported video format"),
        ("input %s, output %s", GST_VIDEO_INFO_NAME(in_info), GST_VIDEO_INFO_NAME(out_info)));
    return FALSE;
  }
  const bool in_cuda = gst_cudadiff_caps_are_cuda(incaps);
  const bool out_cuda = gst_cudadiff_caps_are_cuda(outcaps);
  if ((in_cuda || out_cuda) && (!st->ctx->is_cuda() || !st->share.gst_context())) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("memory:CUDAMemory needs the CUDA backend"),
                      ("caps %" GST_PTR_FORMAT " -> %" GST_PTR_FORMAT
                       " on backend %s without the pipeline's CUDA context",
                       incaps, outcaps, cudadiff::backend_name(st->ctx->backend())));
    return FALSE;
  }
  // A frame waiting from the last caps goes out first, under them.
  if (st->in_flight && push_flight(self) == GST_FLOW_ERROR) return FALSE;
  GST_OBJECT_LOCK(self);
  const GstClockTime had_latency = priv->overlap_latency;
  const GstCudaDiffFrameOverlap overlap = priv->frame_overlap;
  GST_OBJECT_UNLOCK(self);
  try {
    cudadiff::ContextScope scope(st->ctx.get());
    drop_operation(self);
    st->in_cuda = in_cuda;
    st->out_cuda = out_cuda;
    const cudadiff::Context &ctx = *st->ctx;
    if (ctx.is_cuda()) {
      st->overlap = klass->process && !klass->host_results && !in_cuda && !out_cuda &&
                    !ctx.gpu().integrated &&
                    (overlap == GST_CUDADIFF_FRAME_OVERLAP_ALWAYS ||
                     (overlap == GST_CUDADIFF_FRAME_OVERLAP_AUTO &&
                      !gst_cudadiff_upstream_is_live(GST_BASE_TRANSFORM_SINK_PAD(self))));
      if (klass->process) {
        const int w = GST_VIDEO_INFO_WIDTH(in_info), h = GST_VIDEO_INFO_HEIGHT(in_info);
        // Input slots: one, plus the previous frame's, plus one being uploaded.
        const size_t n_in = in_cuda ? 0 : (klass->keeps_previous_input ? 2 : 1) + st->overlap;
        for (size_t i = 0; i < n_in; ++i) st->device_in.emplace_back(in_fmt, w, h);
        const size_t n_out = out_cuda ? 0 : (st->overlap ? 2 : 1);
        for (size_t i = 0; i < n_out; ++i)
          st->device_out.emplace_back(out_fmt, GST_VIDEO_INFO_WIDTH(out_info),
                                      GST_VIDEO_INFO_HEIGHT(out_info));
      }
      if (st->overlap) {
        st->upload_stream = std::make_unique<cudadiff::Stream>(ctx.gpu_id());
        st->download_stream = std::make_unique<cudadiff::Stream>(ctx.gpu_id());
        for (size_t i = 0; i < st->device_in.size(); ++i)
          st->in_free.push_back(std::make_unique<cudadiff::StreamEvent>());
        for (size_t i = 0; i < st->device_out.size(); ++i)
          st->out_free.push_back(std::make_unique<cudadiff::StreamEvent>());
        st->uploaded = std::make_unique<cudadiff::StreamEvent>();
        st->processed = std::make_unique<cudadiff::StreamEvent>();
      }
      st->last_frame_done = std::make_unique<cudadiff::StreamEvent>();
    }
    st->caps_refused = false;
    klass->setup(self, in_info, out_info, ctx);
    st->configured = true;
    st->refused.clear();
  } catch (const cudadiff::Error &e) {
    drop_operation(self);
    if (!st->caps_refused)
      gst_cudadiff_post_error(GST_ELEMENT(self), "configuring for the negotiated caps", e);
    return FALSE;
  }
  const GstClockTime latency = gst_cudadiff_overlap_latency(
      st->overlap ? 1 : 0, GST_VIDEO_INFO_FPS_N(in_info), GST_VIDEO_INFO_FPS_D(in_info));
  GST_OBJECT_LOCK(self);
  priv->overlap_latency = latency;
  GST_OBJECT_UNLOCK(self);
  // The frame held back changes the latency: live pipelines query it again.
  if (latency != had_latency)
    gst_element_post_message(GST_ELEMENT(self), gst_message_new_latency(GST_OBJECT(self)));
  GST_DEBUG_OBJECT(self, "configured %s %dx%d (%s) -> %s (%s) on %s%s",
                   GST_VIDEO_INFO_NAME(in_info), GST_VIDEO_INFO_WIDTH(in_info),
                   GST_VIDEO_INFO_HEIGHT(in_info), in_cuda ? "CUDA memory" : "system memory",
                   GST_VIDEO_INFO_NAME(out_info), out_cuda ? "CUDA memory" : "system memory",
                   cudadiff::backend_name(st->ctx->backend()),
                   st->overlap ? ", frames overlap" : "");
  return TRUE;
}

// Finishes a frame whose output is on the device: waits for it when
// downstream would not order its work after it (or the subclass wants its
// results); else lets the frame run and returns true: the caller marks the
// buffer pending once it is unmapped (and so writable again).
static bool finish_device_output(GstCudaDiffFilter *self, GstBuffer *outbuf, bool may_mark) {
  FilterState *st = get_priv(self)->state;
  GstCudaDiffFilterClass *klass = GST_CUDADIFF_FILTER_GET_CLASS(self);
  const cudadiff::Context &ctx = *st->ctx;
  if (st->downstream_orders && may_mark && !st->need_host_results) {
    st->last_frame_done->record(ctx);
    st->last_frame_unfinished = true;
    st->last_frame_pts = GST_BUFFER_PTS(outbuf);
    return true;
  }
  ctx.synchronize();
  release_held(st);  // read by now
  if (klass->finish_frame) klass->finish_frame(self, GST_BUFFER_PTS(outbuf));
  return false;
}

// Before a new frame: inputs of earlier frames are released once read, and
// the last device-resident frame gets finish_frame if its work has finished.
static void begin_frame(GstCudaDiffFilter *self) {
  FilterState *st = get_priv(self)->state;
  GstCudaDiffFilterClass *klass = GST_CUDADIFF_FILTER_GET_CLASS(self);
  st->need_host_results = false;
  if (!st->ctx->is_cuda()) return;
  release_held(st);
  if (st->last_frame_unfinished) {
    st->last_frame_unfinished = false;
    if (klass->finish_frame && st->last_frame_done->done())
      klass->finish_frame(self, st->last_frame_pts);
  }
}

// System memory in and out, frames overlapped: queues frame N's upload (on
// the upload stream), kernels (the shared stream) and download (the
// download stream), each waiting on the GPU for what it needs, and leaves
// the frame in st->queued for generate_output().
static void queue_overlapped(GstCudaDiffFilter *self, GstVideoFrame *in_frame,
                             GstVideoFrame *out_frame) {
  FilterState *st = get_priv(self)->state;
  GstCudaDiffFilterClass *klass = GST_CUDADIFF_FILTER_GET_CLASS(self);
  const cudadiff::Context &ctx = *st->ctx;
  const size_t n_in = st->device_in.size();
  const unsigned n = st->frame_index++;
  const size_t slot = n % n_in, previous = (n + n_in - 1) % n_in;
  const int out_slot = static_cast<int>(n % st->device_out.size());
  const cudadiff::FrameView &dev_in = st->device_in[slot].view();
  const cudadiff::FrameView &dev_out = st->device_out[out_slot].view();
  // Upload once the slot's last reader has finished.
  st->in_free[slot]->make_wait(*st->upload_stream);
  cudadiff::copy_frame_async(gst_cudadiff_frame_view(in_frame, &GST_VIDEO_FILTER(self)->in_info),
                             dev_in, *st->upload_stream);
  st->uploaded->record(*st->upload_stream);
  // Kernels once uploaded and once the output slot's last download is done.
  st->uploaded->make_wait(ctx.stream());
  st->out_free[out_slot]->make_wait(ctx.stream());
  klass->process(self, dev_in, dev_out);
  st->in_free[slot]->record(ctx);
  if (klass->keeps_previous_input) st->in_free[previous]->record(ctx);
  st->processed->record(ctx);
  // Download once processed; its event marks the frame done.
  st->processed->make_wait(*st->download_stream);
  cudadiff::copy_frame_async(dev_out,
                             gst_cudadiff_frame_view(out_frame, &GST_VIDEO_FILTER(self)->out_info),
                             *st->download_stream);
  st->out_free[out_slot]->record(*st->download_stream);
  st->queued.in_frame = *in_frame;
  st->queued.out_frame = *out_frame;
  st->queued.pts = GST_BUFFER_PTS(out_frame->buffer);
  st->queued.out_slot = out_slot;
  st->have_queued = true;
}

// Device frames for one side that negotiated CUDA memory but got a host
// frame (CUDA memory of another driver context): as many as set_info makes
// for system memory on that side without overlap. With the context current.
static void allocate_slots(GstCudaDiffFilter *self, std::vector<cudadiff::DeviceFrame> *slots,
                           bool input) {
  GstCudaDiffFilterClass *klass = GST_CUDADIFF_FILTER_GET_CLASS(self);
  const GstVideoInfo *info =
      input ? &GST_VIDEO_FILTER(self)->in_info : &GST_VIDEO_FILTER(self)->out_info;
  const size_t n = input && klass->keeps_previous_input ? 2 : 1;
  const cudadiff::VideoFormat format = gst_cudadiff_format_from_gst(GST_VIDEO_INFO_FORMAT(info));
  for (size_t i = 0; i < n; ++i)
    slots->emplace_back(format, GST_VIDEO_INFO_WIDTH(info), GST_VIDEO_INFO_HEIGHT(info));
  GST_DEBUG_OBJECT(self, "allocated %zu device %s frame(s) for host frames", n,
                   input ? "input" : "output");
}

static GstFlowReturn gst_cudadiff_filter_transform(GstBaseTransform *trans, GstBuffer *inbuf,
                                                   GstBuffer *outbuf) {
  auto *self = GST_CUDADIFF_FILTER(trans);
  GstCudaDiffFilterPrivate *priv = get_priv(self);
  GstCudaDiffFilterClass *klass = GST_CUDADIFF_FILTER_GET_CLASS(self);
  FilterState *st = priv->state;
  GstVideoFilter *vfilter = GST_VIDEO_FILTER(trans);
  if (!st->ctx || !st->configured) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, (nullptr), ("frame before caps were configured"));
    return GST_FLOW_NOT_NEGOTIATED;
  }
  if (!klass->process) {
    GST_ELEMENT_ERROR(self, CORE, NOT_IMPLEMENTED, (nullptr), ("in-place filter not in place"));
    return GST_FLOW_ERROR;
  }
  GstVideoFrame in_frame, out_frame;
  bool in_dev = false, out_dev = false;
  if (!gst_cudadiff_frame_map(&in_frame, &vfilter->in_info, inbuf, GST_MAP_READ, &st->share,
                              &in_dev)) {
    GST_ELEMENT_ERROR(self, STREAM, FAILED, ("cannot map the input frame"),
                      ("%s", gst_cudadiff_map_failure(&vfilter->in_info, inbuf).c_str()));
    return GST_FLOW_ERROR;
  }
  if (!gst_cudadiff_frame_map(&out_frame, &vfilter->out_info, outbuf, GST_MAP_WRITE, &st->share,
                              &out_dev)) {
    gst_video_frame_unmap(&in_frame);
    GST_ELEMENT_ERROR(self, STREAM, FAILED, ("cannot map the output frame"), (nullptr));
    return GST_FLOW_ERROR;
  }
  if (!in_dev)
    gst_cudadiff_warn_if_foreign(GST_ELEMENT(self), inbuf, &st->share, &st->warned_foreign);
  bool mapped = true;  // false once the frames are handed to the overlap queue
  bool mark_pending = false;
  try {
    cudadiff::ContextScope scope(st->ctx.get());
    const cudadiff::Context &ctx = *st->ctx;
    const cudadiff::FrameView in = gst_cudadiff_frame_view(&in_frame, &vfilter->in_info);
    const cudadiff::FrameView out = gst_cudadiff_frame_view(&out_frame, &vfilter->out_info);
    st->frame_interlaced = GST_VIDEO_FRAME_IS_INTERLACED(&in_frame);
    begin_frame(self);
    if (!ctx.is_cuda()) {
      klass->process(self, in, out);
      if (klass->finish_frame) klass->finish_frame(self, GST_BUFFER_PTS(inbuf));
    } else if (!in_dev && !out_dev && st->overlap && st->device_out.size() == 2) {
      queue_overlapped(self, &in_frame, &out_frame);
      mapped = false;
    } else if (!in_dev && !out_dev && ctx.gpu().integrated && !klass->keeps_previous_input &&
               gst_cudadiff_buffer_is_pinned(inbuf) && gst_cudadiff_buffer_is_pinned(outbuf)) {
      // Integrated GPUs read mapped pinned memory in place: no copies at all.
      klass->process(self, in, out);
      ctx.synchronize();
      if (klass->finish_frame) klass->finish_frame(self, GST_BUFFER_PTS(inbuf));
    } else {
      // The device input: the buffer itself, or an upload into a slot.
      cudadiff::FrameView dev_in = in;
      bool input_ordered = false;
      if (in_dev) {
        input_ordered = gst_cudadiff_buffer_ordered_input(inbuf, ctx);
      } else {
        // Host input under CUDA memory caps (CUDA memory of another driver
        // context, mapped through the host): slots made when first needed.
        if (st->device_in.empty()) allocate_slots(self, &st->device_in, true);
        const cudadiff::FrameView &slot =
            st->device_in[st->frame_index % st->device_in.size()].view();
        cudadiff::copy_to_device(in, slot, ctx);
        dev_in = slot;
      }
      st->frame_index++;
      cudadiff::FrameView dev_out = out_dev                  ? out
                                    : st->device_out.empty() ? cudadiff::FrameView()
                                                             : st->device_out[0].view();
      if (!out_dev && st->device_out.empty()) {
        allocate_slots(self, &st->device_out, false);
        dev_out = st->device_out[0].view();
      }
      // With frame overlap, a device frame under system memory caps (CUDA
      // memory of our context, as GStreamer 1.22's cudadownload passes on)
      // comes here while the overlapped frame before it may still be
      // downloading from the output slot written below: the kernels wait
      // for that download.
      if (st->overlap && st->in_flight && !out_dev)
        st->out_free[size_t(st->flight.out_slot)]->make_wait(ctx.stream());
      klass->process(self, dev_in, dev_out);
      // ...and the next overlapped frame's upload waits for these kernels'
      // reads of the input slots (the stream has waited for every upload
      // and download before, so each slot is free once they are done).
      if (st->overlap)
        for (auto &free : st->in_free) free->record(ctx);
      // The inputs the GPU reads are kept until read: host input being
      // uploaded, device input of a producer that does not order by our stream,
      // and the device input the next frame compares with.
      if (in_dev && klass->keeps_previous_input) {
        drop_previous_input(st, false);
        st->previous_input = gst_buffer_ref(inbuf);
        st->previous_ordered = input_ordered;
      } else if (!input_ordered) {
        hold_input(st, inbuf);
      }
      if (out_dev) {
        mark_pending = finish_device_output(self, outbuf, true);
      } else {
        cudadiff::copy_to_host(dev_out, out, ctx);
        ctx.synchronize();
        release_held(st);  // read by now
        if (klass->finish_frame) klass->finish_frame(self, GST_BUFFER_PTS(inbuf));
      }
    }
  } catch (const cudadiff::Error &e) {
    if (mapped) {
      gst_video_frame_unmap(&in_frame);
      gst_video_frame_unmap(&out_frame);
    }
    gst_cudadiff_post_error(GST_ELEMENT(self), "processing a frame", e);
    return GST_FLOW_ERROR;
  }
  if (mapped) {
    gst_video_frame_unmap(&in_frame);
    gst_video_frame_unmap(&out_frame);
  }
  if (mark_pending) gst_cudadiff_buffer_mark_pending(outbuf, *st->ctx);
  return GST_FLOW_OK;
}

// Never called (transform() maps the buffers itself); its presence tells
// GstVideoFilter that the element is not in place unless it says so.
static GstFlowReturn gst_cudadiff_filter_transform_frame_unused(GstVideoFilter *filter,
                                                                GstVideoFrame *, GstVideoFrame *) {
  GST_ELEMENT_ERROR(filter, CORE, NOT_IMPLEMENTED, (nullptr), ("unexpected transform_frame"));
  return GST_FLOW_ERROR;
}

static GstFlowReturn gst_cudadiff_filter_transform_ip(GstBaseTransform *trans, GstBuffer *buf) {
  auto *self = GST_CUDADIFF_FILTER(trans);
  GstCudaDiffFilterClass *klass = GST_CUDADIFF_FILTER_GET_CLASS(self);
  FilterState *st = get_priv(self)->state;
  GstVideoFilter *vfilter = GST_VIDEO_FILTER(trans);
  if (!klass->process_ip) {
    GST_ELEMENT_ERROR(self, CORE, NOT_IMPLEMENTED, (nullptr), ("no in-place processing"));
    return GST_FLOW_ERROR;
  }
  if (!st->ctx || !st->configured) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, (nullptr), ("frame before caps were configured"));
    return GST_FLOW_NOT_NEGOTIATED;
  }
  GstVideoFrame frame;
  bool on_device = false;
  if (!gst_cudadiff_frame_map(&frame, &vfilter->in_info, buf,
                              static_cast<GstMapFlags>(GST_MAP_READWRITE), &st->share,
                              &on_device)) {
    GST_ELEMENT_ERROR(self, STREAM, FAILED, ("cannot map the input frame"),
                      ("%s", gst_cudadiff_map_failure(&vfilter->in_info, buf).c_str()));
    return GST_FLOW_ERROR;
  }
  if (!on_device)
    gst_cudadiff_warn_if_foreign(GST_ELEMENT(self), buf, &st->share, &st->warned_foreign);
  // Unmapped exactly once, on every path: before the pending mark (which
  // needs the buffer writable again) or at the end.
  bool mapped = true;
  auto unmap = [&]() {
    if (mapped) gst_video_frame_unmap(&frame);
    mapped = false;
  };
  try {
    cudadiff::ContextScope scope(st->ctx.get());
    const cudadiff::Context &ctx = *st->ctx;
    begin_frame(self);
    if (on_device) {
      // Our writes join the producer's on the stream when it is ours (the
      // buffer goes back to a pool that orders by it); a buffer of another
      // producer leaves complete.
      const bool ordered = gst_cudadiff_buffer_ordered_input(buf, ctx);
      klass->process_ip(self, gst_cudadiff_frame_view(&frame, &vfilter->in_info), TRUE);
      unmap();
      if (finish_device_output(self, buf, ordered))
        gst_cudadiff_buffer_mark_pending(buf, ctx);
      else
        gst_cudadiff_buffer_clear_pending(buf);  // (upstream's mark: finished now)
      return GST_FLOW_OK;
    }
    klass->process_ip(self, gst_cudadiff_frame_view(&frame, &vfilter->in_info), FALSE);
    if (ctx.is_cuda()) ctx.synchronize();
    if (klass->finish_frame) klass->finish_frame(self, GST_BUFFER_PTS(buf));
  } catch (const cudadiff::Error &e) {
    unmap();
    gst_cudadiff_post_error(GST_ELEMENT(self), "processing a frame", e);
    return GST_FLOW_ERROR;
  }
  unmap();
  return GST_FLOW_OK;
}

// Frame overlap: the frame just queued stays on the GPU while the previous
// one, now downloaded, is pushed (same frames, one later).
static GstFlowReturn gst_cudadiff_filter_generate_output(GstBaseTransform *trans,
                                                         GstBuffer **outbuf) {
  auto *self = GST_CUDADIFF_FILTER(trans);
  FilterState *st = get_priv(self)->state;
  GstBaseTransformClass *parent = GST_BASE_TRANSFORM_CLASS(gst_cudadiff_filter_parent_class);
  if (!st->overlap) return parent->generate_output(trans, outbuf);
  st->have_queued = false;
  GstBuffer *current = nullptr;
  GstFlowReturn ret = parent->generate_output(trans, &current);
  *outbuf = nullptr;
  if (ret != GST_FLOW_OK || !current) {
    if (current) gst_buffer_unref(current);
    return ret;
  }
  if (!st->have_queued) {
    // Processed at once (another path): the one in flight goes first.
    ret = push_flight(self);
    if (ret != GST_FLOW_OK) {
      gst_buffer_unref(current);
      return ret;
    }
    *outbuf = current;
    return GST_FLOW_OK;
  }
  GstBuffer *previous = nullptr;
  try {
    cudadiff::ContextScope scope(st->ctx.get());
    previous = complete_flight(self);
  } catch (const cudadiff::Error &e) {
    st->flight = st->queued;
    st->flight.out = current;
    st->in_flight = true;
    gst_cudadiff_post_error(GST_ELEMENT(self), "processing a frame", e);
    return GST_FLOW_ERROR;
  }
  st->flight = st->queued;
  st->flight.out = current;
  st->in_flight = true;
  *outbuf = previous;
  return GST_FLOW_OK;
}

// Frame overlap: an input that starts a gap (marked DISCONT upstream) or
// makes one (dropped by QoS, with the qos property on) lets the frame in
// flight, the last before the gap, leave first. The base class puts its
// pending DISCONT on the next buffer it pushes itself, which is then the
// first frame after the gap (else it would be the frame in flight).
static GstFlowReturn gst_cudadiff_filter_submit_input_buffer(GstBaseTransform *trans,
                                                             gboolean is_discont,
                                                             GstBuffer *input) {
  auto *self = GST_CUDADIFF_FILTER(trans);
  FilterState *st = get_priv(self)->state;
  // Properties under a GstController (thresholds, sigma, gain, colours,
  // the text's padding...) take their values for this buffer before it is
  // processed.
  gst_cudadiff_sync_controlled(GST_OBJECT(trans), &trans->segment, GST_BUFFER_PTS(input));
  // (is_discont is the base class's pending mark, which may still be that
  // of an earlier drop; the input's own flag says that a gap starts here)
  if (GST_BUFFER_IS_DISCONT(input) && st->in_flight) {
    const GstFlowReturn pushed = push_flight(self);
    if (pushed != GST_FLOW_OK) {
      gst_buffer_unref(input);  // (ours: the base class stashes it only below)
      return pushed;
    }
  }
  const GstFlowReturn ret = GST_BASE_TRANSFORM_CLASS(gst_cudadiff_filter_parent_class)
                                ->submit_input_buffer(trans, is_discont, input);
  // (a dropped input is released by the base class: nothing is stashed)
  if (ret == GST_BASE_TRANSFORM_FLOW_DROPPED && st->in_flight) {
    const GstFlowReturn pushed = push_flight(self);
    if (pushed != GST_FLOW_OK) return pushed;
  }
  return ret;
}

// At EOS: the last frame left on the GPU unfinished gets its finish_frame,
// then the subclass posts what it still holds (drain).
static void end_of_stream(GstCudaDiffFilter *self) {
  FilterState *st = get_priv(self)->state;
  GstCudaDiffFilterClass *klass = GST_CUDADIFF_FILTER_GET_CLASS(self);
  if (!st->configured || !st->ctx || (!klass->finish_frame && !klass->drain)) return;
  try {
    cudadiff::ContextScope scope(st->ctx.get());
    if (st->last_frame_unfinished) {
      st->last_frame_unfinished = false;
      st->last_frame_done->synchronize();
      if (klass->finish_frame) klass->finish_frame(self, st->last_frame_pts);
    }
    if (klass->drain) klass->drain(self);
  } catch (const cudadiff::Error &e) {
    gst_cudadiff_post_error(GST_ELEMENT(self), "finishing the stream", e);
  }
}

// A STREAM_START of another stream-id than the last (concat's next file, an
// input-selector's switch) ends the stream before as EOS would (its last
// results are posted) and its history is forgotten, as after a flush: a
// filter that compares frames does not compare the new stream's first frame
// with the old one's last. The same stream-id again (a relinked pad) is the
// same stream.
static void new_stream(GstCudaDiffFilter *self, GstEvent *event) {
  FilterState *st = get_priv(self)->state;
  GstCudaDiffFilterClass *klass = GST_CUDADIFF_FILTER_GET_CLASS(self);
  if (gst_cudadiff_another_stream(&st->stream_id, event) && st->configured) {
    GST_DEBUG_OBJECT(self, "another stream (%s): starting over", st->stream_id.c_str());
    end_of_stream(self);
    if (klass->reset) klass->reset(self);
  }
}

static gboolean gst_cudadiff_filter_sink_event(GstBaseTransform *trans, GstEvent *event) {
  auto *self = GST_CUDADIFF_FILTER(trans);
  GstCudaDiffFilterClass *klass = GST_CUDADIFF_FILTER_GET_CLASS(self);
  FilterState *st = get_priv(self)->state;
  if (GST_EVENT_TYPE(event) == GST_EVENT_FLUSH_STOP) {
    discard_flight(self);
    st->last_frame_unfinished = false;  // (a frame from before the flush)
    if (klass->reset && st->configured) klass->reset(self);
  } else if (GST_EVENT_IS_SERIALIZED(event) && st->in_flight) {
    // The frame in flight leaves before anything that follows it (EOS, a
    // segment, caps).
    const GstFlowReturn ret = push_flight(self);
    if (ret != GST_FLOW_OK)
      GST_DEBUG_OBJECT(self, "pushing the frame in flight: %s", gst_flow_get_name(ret));
  }
  if (GST_EVENT_TYPE(event) == GST_EVENT_STREAM_START) new_stream(self, event);
  if (GST_EVENT_TYPE(event) == GST_EVENT_EOS) end_of_stream(self);
  return GST_BASE_TRANSFORM_CLASS(gst_cudadiff_filter_parent_class)->sink_event(trans, event);
}

static gboolean gst_cudadiff_filter_sink_query(GstBaseTransform *trans, GstPadDirection direction,
                                               GstQuery *query) {
  if (direction == GST_PAD_SINK && GST_QUERY_TYPE(query) == GST_QUERY_DRAIN)
    push_flight(GST_CUDADIFF_FILTER(trans));
  return gst_cudadiff_filter_query(trans, direction, query);
}

// Takes GstVideoCropMeta out of downstream's answer to an allocation query.
static void remove_crop_meta(GstQuery *query) {
  guint index = 0;
  while (gst_query_find_allocation_meta(query, GST_VIDEO_CROP_META_API_TYPE, &index))
    gst_query_remove_nth_allocation_meta(query, index);
}

// Upstream gets a pool: CUDA memory of the pipeline's context for CUDA
// caps, else pinned buffers with GstVideoMeta, so that it writes each frame
// where the GPU reads it (an element in place on system memory forwards the
// query downstream instead). One buffer more than it needs: the element may
// keep an input until the GPU has read it.
static gboolean gst_cudadiff_filter_propose_allocation(GstBaseTransform *trans,
                                                       GstQuery *decide_query, GstQuery *query) {
  FilterState *st = get_priv(GST_CUDADIFF_FILTER(trans))->state;
  // (an element in place learns it below; until then it waits for its frames)
  if (gst_base_transform_is_in_place(trans)) st->downstream_orders = false;
  if (gst_base_transform_is_passthrough(trans)) {
    if (!GST_BASE_TRANSFORM_CLASS(gst_cudadiff_filter_parent_class)
             ->propose_allocation(trans, decide_query, query))
      return FALSE;
    // (an element in place that passes through now may blend into the next
    // buffer, which upstream has made by this answer)
    if (gst_base_transform_is_in_place(trans)) remove_crop_meta(query);
    return TRUE;
  }
  GstCaps *caps = nullptr;
  gst_query_parse_allocation(query, &caps, nullptr);
  GstCudaDiffFilterClass *klass = GST_CUDADIFF_FILTER_GET_CLASS(trans);
  const guint keep =
      (st->ctx && st->ctx->is_cuda() ? 1u : 0u) + (klass->keeps_previous_input ? 1u : 0u);
  if (gst_cudadiff_caps_are_cuda(caps)) {
    // An element in place decides no allocation (GstBaseTransform asks
    // downstream nothing for it): whether downstream orders its work after
    // the frames it marks is asked here, as upstream asks for its pool.
    if (gst_base_transform_is_in_place(trans)) {
      st->downstream_orders =
          gst_cudadiff_downstream_orders(GST_BASE_TRANSFORM_SRC_PAD(trans), caps);
      GST_DEBUG_OBJECT(trans, "in place: downstream %s",
                       st->downstream_orders ? "orders its work after marked frames"
                                             : "waits for no marked frame");
    }
    return gst_cudadiff_propose_cuda_allocation(&st->share, query, keep);
  }
  // In place on system memory (blended on the host): the buffer upstream
  // writes is the one that goes downstream, so downstream answers (its
  // pool, and the metas it handles: a GstVideoMeta claimed here for a
  // downstream without it would let upstream pad its lines, which
  // downstream would then read as packed). All but the crop meta: the
  // element writes the picture its caps describe, so upstream crops (with
  // it, videocrop passed the whole picture on, and the text was placed in
  // a frame of another size).
  if (gst_base_transform_is_in_place(trans)) {
    if (!gst_pad_peer_query(GST_BASE_TRANSFORM_SRC_PAD(trans), query)) return FALSE;
    remove_crop_meta(query);
    return TRUE;
  }
  return gst_cudadiff_propose_pinned_allocation(query, keep);
}

// The input's metas that the output takes: those that say nothing of how
// the bytes are laid out or what colours they hold (no tags, or only the
// video, orientation and size tags: regions of interest, for instance),
// since every filter keeps the picture's size and orientation. GStreamer
// 1.22's GstVideoFilter copies only metas without tags or with the video
// tag alone; colour-space metas are not copied, nor memory metas
// (GstBaseTransform asks about none).
static gboolean gst_cudadiff_filter_transform_meta(GstBaseTransform *, GstBuffer *, GstMeta *meta,
                                                   GstBuffer *) {
  const gchar *const *tags = gst_meta_api_type_get_tags(meta->info->api);
  if (!tags) return TRUE;
  for (; *tags; ++tags)
    if (g_strcmp0(*tags, GST_META_TAG_VIDEO_STR) != 0 &&
        g_strcmp0(*tags, GST_META_TAG_VIDEO_ORIENTATION_STR) != 0 &&
        g_strcmp0(*tags, GST_META_TAG_VIDEO_SIZE_STR) != 0)
      return FALSE;
  return TRUE;
}

// Output buffers: CUDA memory of the pipeline's context (downstream's pool
// when it is one), or a pinned pool (downstream's own when it is one of
// ours, else a new one).
static gboolean gst_cudadiff_filter_decide_allocation(GstBaseTransform *trans, GstQuery *query) {
  FilterState *st = get_priv(GST_CUDADIFF_FILTER(trans))->state;
  GstCaps *caps = nullptr;
  gst_query_parse_allocation(query, &caps, nullptr);
  st->downstream_orders = false;
  if (gst_cudadiff_caps_are_cuda(caps))
    return gst_cudadiff_decide_cuda_allocation(GST_ELEMENT(trans), &st->share, query, 0,
                                               &st->downstream_orders);
  return gst_cudadiff_decide_pinned_allocation(GST_ELEMENT(trans), query, st->overlap ? 1 : 0);
}

static void gst_cudadiff_filter_class_init(GstCudaDiffFilterClass *klass) {
  GObjectClass *gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  GstBaseTransformClass *trans_class = GST_BASE_TRANSFORM_CLASS(klass);
  GstVideoFilterClass *filter_class = GST_VIDEO_FILTER_CLASS(klass);

  gobject_class->set_property = gst_cudadiff_filter_set_property;
  gobject_class->get_property = gst_cudadiff_filter_get_property;
  gobject_class->finalize = gst_cudadiff_filter_finalize;
  gst_cudadiff_install_backend_properties(gobject_class, PROP_BACKEND, PROP_DEVICE_ID,
                                          PROP_ACTIVE_BACKEND);
  g_object_class_install_property(
      gobject_class, PROP_FRAME_OVERLAP,
      g_param_spec_enum(
          "frame-overlap", "Frame overlap",
          "With system memory on both sides (CUDA backend): whether frame N leaves only when "
          "frame N+1 arrives, so that the upload of N+1 runs while N is processed and "
          "downloaded (copy engines work both ways at once: more frames per second, one frame "
          "of delay; end of stream, caps changes and drain queries push it): auto = when "
          "upstream is not live (latency query), always, never; an application that waits for "
          "each frame it pushes into a non-live appsrc sets never. Filters whose results come "
          "back with each frame (cudabinarize, cudanoisevis) and cudatextoverlay (in place) "
          "never overlap. Read when caps are set. Default: auto",
          GST_TYPE_CUDADIFF_FRAME_OVERLAP, DEFAULT_FRAME_OVERLAP,
          static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
                                   GST_PARAM_MUTABLE_PLAYING)));

  element_class->set_context = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_set_context);
  trans_class->start = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_start);
  trans_class->stop = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_stop);
  trans_class->sink_event = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_sink_event);
  trans_class->query = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_sink_query);
  trans_class->transform_caps = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_transform_caps);
  trans_class->fixate_caps = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_fixate_caps);
  trans_class->propose_allocation = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_propose_allocation);
  trans_class->decide_allocation = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_decide_allocation);
  trans_class->transform_meta = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_transform_meta);
  trans_class->generate_output = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_generate_output);
  trans_class->submit_input_buffer = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_submit_input_buffer);
  // Buffers are mapped here (device pointers for CUDA memory), not by
  // GstVideoFilter.
  trans_class->transform = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_transform);
  // Used by in-place subclasses only (GstBaseTransform calls transform_ip
  // when in place); a passthrough buffer is never touched.
  trans_class->transform_ip = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_transform_ip);
  trans_class->transform_ip_on_passthrough = FALSE;
  filter_class->set_info = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_set_info);
  filter_class->transform_frame = GST_DEBUG_FUNCPTR(gst_cudadiff_filter_transform_frame_unused);

  gst_type_mark_as_plugin_api(GST_TYPE_CUDADIFF_FILTER, static_cast<GstPluginAPIFlags>(0));
  gst_type_mark_as_plugin_api(GST_TYPE_CUDADIFF_FRAME_OVERLAP, static_cast<GstPluginAPIFlags>(0));
}

static void gst_cudadiff_filter_init(GstCudaDiffFilter *self) {
  GstCudaDiffFilterPrivate *priv = get_priv(self);
  priv->backend = GST_CUDADIFF_DEFAULT_BACKEND;
  priv->device_id = GST_CUDADIFF_DEFAULT_DEVICE_ID;
  priv->frame_overlap = DEFAULT_FRAME_OVERLAP;
  priv->overlap_latency = 0;
  priv->state = new FilterState();
}

const cudadiff::Context *gst_cudadiff_filter_get_context(GstCudaDiffFilter *filter) {
  return get_priv(filter)->state->ctx.get();
}

cudadiff::Backend gst_cudadiff_filter_get_backend(GstCudaDiffFilter *filter) {
  const cudadiff::Context *ctx = gst_cudadiff_filter_get_context(filter);
  return ctx ? ctx->backend() : cudadiff::Backend::Cpu;
}

void gst_cudadiff_filter_passthrough_changed(GstCudaDiffFilter *filter) {
  get_priv(filter)->state->passthrough_orders = -1;
}

void gst_cudadiff_filter_pass_through(GstCudaDiffFilter *filter, GstBuffer *buffer) {
  FilterState *st = get_priv(filter)->state;
  if (!st->ctx || !st->ctx->is_cuda() || !gst_cudadiff_buffer_is_pending(buffer)) return;
  if (st->passthrough_orders < 0) {
    GstPad *src = GST_BASE_TRANSFORM_SRC_PAD(filter);
    GstCaps *caps = gst_pad_get_current_caps(src);
    st->passthrough_orders = caps && gst_cudadiff_downstream_orders(src, caps) ? 1 : 0;
    if (caps) gst_caps_unref(caps);
    GST_DEBUG_OBJECT(filter, "pass-through: downstream %s",
                     st->passthrough_orders ? "orders its work after marked frames"
                                            : "gets marked frames finished");
  }
  if (st->passthrough_orders) return;
  try {
    cudadiff::ContextScope scope(st->ctx.get());
    gst_cudadiff_buffer_wait_pending(buffer);
    gst_cudadiff_buffer_clear_pending(buffer);
  } catch (const cudadiff::Error &e) {
    GST_ELEMENT_WARNING(filter, STREAM, FAILED, ("waiting for a frame passed through"),
                        ("%s", e.what()));
  }
}

void gst_cudadiff_filter_need_host_results(GstCudaDiffFilter *filter) {
  get_priv(filter)->state->need_host_results = true;
}

gboolean gst_cudadiff_filter_frame_is_interlaced(GstCudaDiffFilter *filter) {
  return get_priv(filter)->state->frame_interlaced;
}

void gst_cudadiff_filter_refuse_caps(GstCudaDiffFilter *filter, const std::string &message,
                                     const std::string &debug) {
  FilterState *st = get_priv(filter)->state;
  st->caps_refused = true;
  gst_cudadiff_post_error_once(GST_ELEMENT(filter), &st->refused, message + "\n" + debug,
                               GST_CORE_ERROR, GST_CORE_ERROR_NEGOTIATION, message, debug, __FILE__,
                               GST_FUNCTION, __LINE__);
  throw cudadiff::Error(message);
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
  GstCaps *sink = gst_cudadiff_make_template_caps(sink_formats);
  GstCaps *src = gst_cudadiff_make_template_caps(src_formats);
  gst_element_class_add_pad_template(
      klass, gst_pad_template_new("sink", GST_PAD_SINK, GST_PAD_ALWAYS, sink));
  gst_element_class_add_pad_template(klass,
                                     gst_pad_template_new("src", GST_PAD_SRC, GST_PAD_ALWAYS, src));
  gst_caps_unref(sink);
  gst_caps_unref(src);
}
