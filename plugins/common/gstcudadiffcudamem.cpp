#include "gstcudadiffcudamem.h"

#include <map>
#include <vector>

#if CUDADIFF_HAVE_GST_CUDA
#include <gst/cuda/gstcudabufferpool.h>
#include <gst/cuda/gstcudacontext.h>
#include <gst/cuda/gstcudaloader.h>
#include <gst/cuda/gstcudamemory.h>
#include <gst/cuda/gstcudautils.h>
#if GST_CHECK_VERSION(1, 24, 0)
#include <gst/cuda/gstcudastream.h>
#endif
#endif

GST_DEBUG_CATEGORY_STATIC(gst_cudadiff_cudamem_debug);
#define GST_CAT_DEFAULT gst_cudadiff_cudamem_debug

namespace {

gboolean g_available = FALSE;

void init_debug() {
  static gsize once = 0;
  if (g_once_init_enter(&once)) {
    GST_DEBUG_CATEGORY_INIT(gst_cudadiff_cudamem_debug, "cudadiffcudamem", 0,
                            "gst-cudadiff CUDA memory and shared context");
    g_once_init_leave(&once, 1);
  }
}

// --- the pending mark (a GstMeta naming the stream the writes are queued on)

struct PendingMeta {
  GstMeta meta;
  std::shared_ptr<cudadiff::Stream> *stream;
};

GType pending_meta_api_get_type() {
  static GType type = 0;
  static const gchar *tags[] = {GST_META_TAG_MEMORY_STR, nullptr};
  if (g_once_init_enter(&type)) {
    GType t = gst_meta_api_type_register("GstCudaDiffPendingMetaAPI", tags);
    g_once_init_leave(&type, t);
  }
  return type;
}

gboolean pending_meta_init(GstMeta *meta, gpointer, GstBuffer *) {
  reinterpret_cast<PendingMeta *>(meta)->stream = nullptr;
  return TRUE;
}

void pending_meta_free(GstMeta *meta, GstBuffer *) {
  auto *m = reinterpret_cast<PendingMeta *>(meta);
  delete m->stream;
  m->stream = nullptr;
}

// No transform function: a copy of the buffer (new memory, written by
// whoever copied it) does not inherit the mark.
const GstMetaInfo *pending_meta_info() {
  static const GstMetaInfo *info = nullptr;
  if (g_once_init_enter(&info)) {
    const GstMetaInfo *i =
        gst_meta_register(pending_meta_api_get_type(), "GstCudaDiffPendingMeta",
                          sizeof(PendingMeta), pending_meta_init, pending_meta_free, nullptr);
    g_once_init_leave(&info, i);
  }
  return info;
}

// --- caps

bool structure_is_cuda(const GstCaps *caps, guint i) {
  GstCapsFeatures *f = gst_caps_get_features(caps, i);
  return f && !gst_caps_features_is_any(f) &&
         gst_caps_features_contains(f, GST_CUDADIFF_CAPS_FEATURE_CUDA);
}

const GValue *cuda_format_list() {
  static GValue *list = nullptr;
  if (g_once_init_enter(&list)) {
    auto *v = g_new0(GValue, 1);
    g_value_init(v, GST_TYPE_LIST);
    gst_value_deserialize(v, GST_CUDADIFF_CUDA_FORMATS);
    g_once_init_leave(&list, v);
  }
  return list;
}

}  // namespace

void gst_cudadiff_cuda_memory_init(void) {
  init_debug();
#if CUDADIFF_HAVE_GST_CUDA
  g_available = gst_cuda_load_library();
  if (g_available) {
    gst_cuda_memory_init_once();
    pending_meta_info();
  } else {
    GST_INFO("GStreamer's CUDA library could not load the driver: system memory only");
  }
#endif
}

gboolean gst_cudadiff_cuda_memory_available(void) {
  return g_available;
}

gboolean gst_cudadiff_cuda_caps_allowed(GstCudaDiffBackend backend, gint device_id,
                                        const GstCudaDiffCudaShare &share) {
  if (!g_available || backend == GST_CUDADIFF_BACKEND_CPU) return FALSE;
  return cudadiff::device_count() > device_id && !share.disabled();
}

gboolean gst_cudadiff_caps_are_cuda(const GstCaps *caps) {
  return caps && gst_caps_get_size(caps) > 0 && structure_is_cuda(caps, 0);
}

GstCaps *gst_cudadiff_caps_with_memory(GstCaps *caps, bool cuda) {
  GstCaps *sys = gst_caps_new_empty();
  if (gst_caps_is_any(caps)) {
    gst_caps_unref(sys);
    return gst_caps_ref(caps);
  }
  for (guint i = 0; i < gst_caps_get_size(caps); ++i)
    sys = gst_caps_merge_structure(sys, gst_structure_copy(gst_caps_get_structure(caps, i)));
  if (!cuda) return sys;
  GstCaps *result = gst_caps_new_empty();
  for (guint i = 0; i < gst_caps_get_size(sys); ++i) {
    const GstStructure *s = gst_caps_get_structure(sys, i);
    GstStructure *c = gst_structure_copy(s);
    const GValue *format = gst_structure_get_value(s, "format");
    if (format) {
      GValue restricted = G_VALUE_INIT;
      if (!gst_value_intersect(&restricted, format, cuda_format_list())) {
        gst_structure_free(c);
        continue;
      }
      gst_structure_take_value(c, "format", &restricted);
    } else {
      gst_structure_set_value(c, "format", cuda_format_list());
    }
    result = gst_caps_merge_structure_full(
        result, c, gst_caps_features_new(GST_CUDADIFF_CAPS_FEATURE_CUDA, nullptr));
  }
  return gst_caps_merge(result, sys);
}

GstCaps *gst_cudadiff_caps_without_cuda(GstCaps *caps) {
  if (gst_caps_is_any(caps)) return gst_caps_ref(caps);
  GstCaps *result = gst_caps_new_empty();
  for (guint i = 0; i < gst_caps_get_size(caps); ++i) {
    if (structure_is_cuda(caps, i)) continue;
    GstCapsFeatures *f = gst_caps_get_features(caps, i);
    gst_caps_append_structure_full(result, gst_structure_copy(gst_caps_get_structure(caps, i)),
                                   f ? gst_caps_features_copy(f) : nullptr);
  }
  return result;
}

GstCaps *gst_cudadiff_make_template_caps(const char *formats) {
  gchar *str = g_strdup_printf(
      "video/x-raw, format = (string) %s, width = (int) [ 1, 32767 ], "
      "height = (int) [ 1, 32767 ], framerate = (fraction) [ 0, max ]",
      formats);
  GstCaps *sys = gst_caps_from_string(str);
  g_free(str);
#if CUDADIFF_HAVE_GST_CUDA
  GstCaps *caps = gst_cudadiff_caps_with_memory(sys, true);
  gst_caps_unref(sys);
  return caps;
#else
  return sys;
#endif
}

namespace {

GstCaps *order_by_memory(GstCaps *caps, bool cuda_first) {
  if (gst_caps_is_any(caps) || gst_caps_is_empty(caps)) return caps;
  caps = gst_caps_make_writable(caps);
  GstCaps *first = gst_caps_new_empty(), *rest = gst_caps_new_empty();
  while (gst_caps_get_size(caps) > 0) {
    GstStructure *s = nullptr;
    GstCapsFeatures *f = nullptr;
    const bool is_cuda = structure_is_cuda(caps, 0);
    f = gst_caps_get_features(caps, 0);
    f = f ? gst_caps_features_copy(f) : nullptr;
    s = gst_caps_steal_structure(caps, 0);
    gst_caps_append_structure_full(is_cuda == cuda_first ? first : rest, s, f);
  }
  gst_caps_unref(caps);
  gst_caps_append(first, rest);
  return first;
}

}  // namespace

GstCaps *gst_cudadiff_caps_cuda_first(GstCaps *caps) {
  return order_by_memory(caps, true);
}

GstCaps *gst_cudadiff_caps_system_first(GstCaps *caps) {
  return order_by_memory(caps, false);
}

GstCaps *gst_cudadiff_caps_prefer_peer_memory(GstPad *pad, GstCaps *caps) {
  bool cuda_first = false;
  if (GstCaps *peer = gst_pad_peer_query_caps(pad, nullptr)) {
    if (!gst_caps_is_any(peer))
      for (guint i = 0; i < gst_caps_get_size(peer) && !cuda_first; ++i)
        cuda_first = structure_is_cuda(peer, i);
    gst_caps_unref(peer);
  }
  return order_by_memory(caps, cuda_first);
}

bool gst_cudadiff_cuda_memory_loses_planes(const GstVideoInfo *info) {
  const GstVideoFormat format = GST_VIDEO_INFO_FORMAT(info);
  return (format == GST_VIDEO_FORMAT_I420 || format == GST_VIDEO_FORMAT_YV12) &&
         GST_VIDEO_INFO_HEIGHT(info) % 2 != 0;
}

void gst_cudadiff_output_state_prefer_cuda(GstPad *srcpad, GstVideoCodecState *state,
                                           bool allowed) {
  if (!allowed) return;
  if (gst_cudadiff_cuda_memory_loses_planes(&state->info)) {
    GST_DEBUG("%s of an odd height: system memory (CUDA memory loses a plane on the host)",
              GST_VIDEO_INFO_NAME(&state->info));
    return;
  }
  GstCaps *plain = gst_video_info_to_caps(&state->info);
  GstCaps *caps = gst_cudadiff_caps_with_memory(plain, true);
  gst_caps_unref(plain);
  // The CUDA structure (first) when the format is one of ours in CUDA memory.
  if (gst_caps_get_size(caps) < 2 || !gst_cudadiff_caps_are_cuda(caps)) {
    gst_caps_unref(caps);
    return;
  }
  GstCaps *cuda = gst_caps_copy_nth(caps, 0);
  gst_caps_unref(caps);
  bool named = false;
  if (GstCaps *peer = gst_pad_peer_query_caps(srcpad, nullptr)) {
    if (!gst_caps_is_any(peer))
      for (guint i = 0; i < gst_caps_get_size(peer) && !named; ++i)
        named = structure_is_cuda(peer, i);
    gst_caps_unref(peer);
  }
  if (named && gst_pad_peer_query_accept_caps(srcpad, cuda)) {
    if (state->caps) gst_caps_unref(state->caps);
    state->caps = cuda;
    return;
  }
  gst_caps_unref(cuda);
}

// --- the shared context

#if CUDADIFF_HAVE_GST_CUDA

namespace {

// One stream per GstCudaContext for every gst-cudadiff element in it, alive
// while one of them (or a buffer marked pending on it) uses it.
struct SharedStream {
  std::weak_ptr<cudadiff::Stream> stream;
  gpointer gst_stream = nullptr;  // GStreamer >= 1.24: its GstCudaStream (valid while `stream` is)
};

struct SharedStreams {
  std::mutex lock;
  std::map<gpointer, SharedStream> streams;
};

SharedStreams &shared_streams() {
  static SharedStreams *s = new SharedStreams();  // never destroyed: used until exit
  return *s;
}

std::shared_ptr<cudadiff::Stream> shared_stream(GstCudaContext *ctx, int device_id) {
  SharedStreams &all = shared_streams();
  std::lock_guard<std::mutex> guard(all.lock);
  for (auto it = all.streams.begin(); it != all.streams.end();)
    it = it->second.stream.expired() ? all.streams.erase(it) : std::next(it);
  SharedStream &entry = all.streams[ctx];
  if (auto s = entry.stream.lock()) return s;
  void *handle = gst_cuda_context_get_handle(ctx);
  cudadiff::ContextScope scope(handle);
  std::shared_ptr<cudadiff::Stream> stream;
  // The deleter keeps the GstCudaContext (and so its driver context) alive
  // until the stream is gone.
  gst_object_ref(ctx);
#if GST_CHECK_VERSION(1, 24, 0)
  // GStreamer's own stream object, so that pools and memories name it and
  // GStreamer's CUDA elements wait for it when they read our buffers.
  GstCudaStream *gst_stream = gst_cuda_stream_new(ctx);
  if (!gst_stream) {
    gst_object_unref(ctx);
    throw cudadiff::Error("cannot create a CUDA stream (gst_cuda_stream_new)");
  }
  std::shared_ptr<cudadiff::Stream> borrowed;
  try {
    borrowed = cudadiff::Stream::borrow(device_id, gst_cuda_stream_get_handle(gst_stream));
  } catch (...) {
    gst_cuda_stream_unref(gst_stream);
    gst_object_unref(ctx);
    throw;
  }
  stream = std::shared_ptr<cudadiff::Stream>(
      borrowed.get(), [borrowed, gst_stream, ctx](cudadiff::Stream *) mutable {
        borrowed.reset();
        gst_cuda_stream_unref(gst_stream);
        gst_object_unref(ctx);
      });
  entry.gst_stream = gst_stream;
#else
  // Blocking: GStreamer 1.22's CUDA memory copies synchronously on the legacy
  // default stream (a buffer copied, or mapped to the host), which then runs
  // after the work queued here.
  cudadiff::Stream *raw = nullptr;
  try {
    raw = new cudadiff::Stream(device_id, true);
  } catch (...) {
    gst_object_unref(ctx);
    throw;
  }
  stream = std::shared_ptr<cudadiff::Stream>(raw, [handle, ctx](cudadiff::Stream *s) {
    try {
      cudadiff::ContextScope destroy_scope(handle);
      delete s;
    } catch (const cudadiff::Error &) {
      delete s;
    }
    gst_object_unref(ctx);
  });
#endif
  entry.stream = stream;
  GST_DEBUG("new shared stream %p for %" GST_PTR_FORMAT, stream->handle(), ctx);
  return stream;
}

#if GST_CHECK_VERSION(1, 24, 0)
// The GstCudaStream behind the shared stream of `ctx` (transfer none), or nullptr.
GstCudaStream *shared_gst_stream(GstCudaContext *ctx) {
  SharedStreams &all = shared_streams();
  std::lock_guard<std::mutex> guard(all.lock);
  auto it = all.streams.find(ctx);
  if (it == all.streams.end() || it->second.stream.expired()) return nullptr;
  return static_cast<GstCudaStream *>(it->second.gst_stream);
}
#endif

bool run_context_query(GstElement *element, GstQuery *query, GstPadDirection direction) {
  GstIterator *it = direction == GST_PAD_SRC ? gst_element_iterate_src_pads(element)
                                             : gst_element_iterate_sink_pads(element);
  bool answered = false;
  GValue item = G_VALUE_INIT;
  bool done = false;
  while (!done && !answered) {
    switch (gst_iterator_next(it, &item)) {
      case GST_ITERATOR_OK: {
        GstPad *pad = GST_PAD(g_value_get_object(&item));
        answered = gst_pad_peer_query(pad, query);
        g_value_reset(&item);
        break;
      }
      case GST_ITERATOR_RESYNC:
        gst_iterator_resync(it);
        break;
      default:
        done = true;
        break;
    }
  }
  g_value_unset(&item);
  gst_iterator_free(it);
  return answered;
}

}  // namespace

void GstCudaDiffCudaShare::set_context(GstElement *element, GstContext *context, gint device_id) {
  if (!g_available) return;
  std::lock_guard<std::mutex> guard(lock_);
  if (disabled_) return;
  GstCudaContext *ctx = static_cast<GstCudaContext *>(ctx_);
  if (gst_cuda_handle_set_context(element, context, device_id, &ctx) && ctx != ctx_) {
    ctx_ = ctx;
    GST_DEBUG_OBJECT(element, "using the pipeline's CUDA context %" GST_PTR_FORMAT, ctx);
  }
}

bool GstCudaDiffCudaShare::ensure(GstElement *element, gint device_id, std::string *why) {
  init_debug();
  if (!g_available) {
    *why = "GStreamer's CUDA library could not load the CUDA driver";
    return false;
  }
  if (gst_context()) return true;
  // The neighbours first (downstream, then upstream), then whoever answers
  // need-context (the application, or a bin that already has one).
  GstQuery *query = gst_query_new_context(GST_CUDA_CONTEXT_TYPE);
  for (GstPadDirection dir : {GST_PAD_SRC, GST_PAD_SINK}) {
    if (gst_context()) break;
    if (run_context_query(element, query, dir)) {
      GstContext *found = nullptr;
      gst_query_parse_context(query, &found);
      if (found) gst_element_set_context(element, found);
    }
  }
  gst_query_unref(query);
  if (!gst_context())
    gst_element_post_message(
        element, gst_message_new_need_context(GST_OBJECT(element), GST_CUDA_CONTEXT_TYPE));
  if (gst_context()) return true;

  // None in the pipeline: the device's primary context, the one the CUDA
  // runtime (our core) uses anyway, so that pipelines of our elements alone
  // (and many of them in one process) share one driver context per device.
  GstCudaContext *made = nullptr;
  try {
    void *primary = cudadiff::primary_context(device_id);
    CUdevice device = 0;
    if (CuInit(0) != CUDA_SUCCESS || CuDeviceGet(&device, device_id) != CUDA_SUCCESS) {
      *why = "the CUDA driver does not know device " + std::to_string(device_id);
      return false;
    }
    made = gst_cuda_context_new_wrapped(static_cast<CUcontext>(primary), device);
  } catch (const cudadiff::Error &e) {
    *why = e.what();
    return false;
  }
  if (!made) {
    *why = "gst_cuda_context_new_wrapped failed";
    return false;
  }
  {
    std::lock_guard<std::mutex> guard(lock_);
    if (ctx_) {  // set meanwhile by another thread: keep that one
      gst_object_unref(made);
      return true;
    }
    ctx_ = made;
  }
  GST_INFO_OBJECT(element, "made the pipeline's CUDA context on device %d (primary context)",
                  device_id);
  GstContext *context = gst_context_new_cuda_context(made);
  gst_element_set_context(element, context);
  gst_element_post_message(element, gst_message_new_have_context(GST_OBJECT(element), context));
  return true;
}

bool GstCudaDiffCudaShare::handle_query(GstElement *element, GstQuery *query) {
  if (GST_QUERY_TYPE(query) != GST_QUERY_CONTEXT) return false;
  std::lock_guard<std::mutex> guard(lock_);
  if (!ctx_) return false;
  return gst_cuda_handle_context_query(element, query, static_cast<GstCudaContext *>(ctx_));
}

void GstCudaDiffCudaShare::release() {
  std::lock_guard<std::mutex> guard(lock_);
  if (ctx_) gst_object_unref(ctx_);
  ctx_ = nullptr;
  disabled_ = false;
}

void GstCudaDiffCudaShare::disable() {
  std::lock_guard<std::mutex> guard(lock_);
  if (ctx_) gst_object_unref(ctx_);
  ctx_ = nullptr;
  disabled_ = true;
}

void GstCudaDiffCudaShare::enable() {
  std::lock_guard<std::mutex> guard(lock_);
  disabled_ = false;
}

bool GstCudaDiffCudaShare::disabled() const {
  std::lock_guard<std::mutex> guard(lock_);
  return disabled_;
}

gpointer GstCudaDiffCudaShare::gst_context() const {
  std::lock_guard<std::mutex> guard(lock_);
  return ctx_;
}

void *GstCudaDiffCudaShare::driver_context() const {
  std::lock_guard<std::mutex> guard(lock_);
  return ctx_ ? gst_cuda_context_get_handle(static_cast<GstCudaContext *>(ctx_)) : nullptr;
}

std::unique_ptr<cudadiff::Context> GstCudaDiffCudaShare::open(gint device_id) {
  GstCudaContext *ctx = nullptr;
  {
    std::lock_guard<std::mutex> guard(lock_);
    if (ctx_) ctx = static_cast<GstCudaContext *>(gst_object_ref(ctx_));
  }
  if (!ctx) throw cudadiff::Error("no CUDA context in the pipeline");
  guint ctx_device = 0;
  g_object_get(ctx, "cuda-device-id", &ctx_device, nullptr);
  try {
    if (static_cast<gint>(ctx_device) != device_id)
      throw cudadiff::Error("the pipeline's CUDA context is on device " +
                            std::to_string(ctx_device) + ", device-id is " +
                            std::to_string(device_id));
    auto core = cudadiff::Context::cuda_in(device_id, gst_cuda_context_get_handle(ctx),
                                           shared_stream(ctx, device_id));
    gst_object_unref(ctx);
    return core;
  } catch (...) {
    gst_object_unref(ctx);
    throw;
  }
}

#else  // no gstreamer-cuda-1.0

void GstCudaDiffCudaShare::set_context(GstElement *, GstContext *, gint) {}
bool GstCudaDiffCudaShare::ensure(GstElement *, gint, std::string *why) {
  *why = "built without gstreamer-cuda-1.0";
  return false;
}
bool GstCudaDiffCudaShare::handle_query(GstElement *, GstQuery *) {
  return false;
}
void GstCudaDiffCudaShare::release() {}
void GstCudaDiffCudaShare::disable() {}
void GstCudaDiffCudaShare::enable() {}
bool GstCudaDiffCudaShare::disabled() const {
  return true;
}
gpointer GstCudaDiffCudaShare::gst_context() const {
  return nullptr;
}
void *GstCudaDiffCudaShare::driver_context() const {
  return nullptr;
}
std::unique_ptr<cudadiff::Context> GstCudaDiffCudaShare::open(gint) {
  throw cudadiff::Error("built without gstreamer-cuda-1.0");
}

#endif

static std::unique_ptr<cudadiff::Context> open_shared_context(GstElement *element,
                                                              GstCudaDiffBackend backend,
                                                              gint device_id,
                                                              GstCudaDiffCudaShare *share) {
  if (share) share->enable();  // (a failed start before left it disabled)
  if (!share || !g_available || backend == GST_CUDADIFF_BACKEND_CPU ||
      cudadiff::device_count() <= device_id) {
    if (share) share->disable();
    return gst_cudadiff_open_context(element, backend, device_id);
  }
  std::string why;
  if (share->ensure(element, device_id, &why)) {
    try {
      auto ctx = share->open(device_id);
      const cudadiff::DeviceInfo &dev = ctx->gpu();
      GST_INFO_OBJECT(element, "backend cuda: device %d %s (compute %d.%d), the pipeline's context",
                      device_id, dev.name.c_str(), dev.cc_major, dev.cc_minor);
      return ctx;
    } catch (const cudadiff::Error &e) {
      why = e.what();
    }
  }
  GST_WARNING_OBJECT(element,
                     "cannot share the pipeline's CUDA context (%s): using a context of our own, "
                     "system memory only",
                     why.c_str());
  share->disable();
  return gst_cudadiff_open_context(element, backend, device_id);
}

std::unique_ptr<cudadiff::Context> gst_cudadiff_open_shared_context(GstElement *element,
                                                                    GstCudaDiffBackend backend,
                                                                    gint device_id,
                                                                    GstCudaDiffCudaShare *share) {
  std::unique_ptr<cudadiff::Context> ctx = open_shared_context(element, backend, device_id, share);
  gst_cudadiff_remember_backend(element, ctx.get());
  return ctx;
}

// --- allocation

#if CUDADIFF_HAVE_GST_CUDA

gboolean gst_cudadiff_propose_cuda_allocation(GstCudaDiffCudaShare *share, GstQuery *query,
                                              guint min_buffers) {
  GstCaps *caps = nullptr;
  gboolean need_pool = FALSE;
  gst_query_parse_allocation(query, &caps, &need_pool);
  GstVideoInfo info;
  if (!caps || !gst_video_info_from_caps(&info, caps)) return FALSE;
  GstCudaContext *ctx = share ? static_cast<GstCudaContext *>(share->gst_context()) : nullptr;
  if (!ctx) return FALSE;
  if (need_pool) {
    GstBufferPool *pool = gst_cuda_buffer_pool_new(ctx);
    GstStructure *config = gst_buffer_pool_get_config(pool);
    gst_buffer_pool_config_add_option(config, GST_BUFFER_POOL_OPTION_VIDEO_META);
    gst_buffer_pool_config_set_params(config, caps, static_cast<guint>(GST_VIDEO_INFO_SIZE(&info)),
                                      min_buffers, 0);
    if (!gst_buffer_pool_set_config(pool, config)) {
      GST_WARNING("CUDA pool rejected its configuration for %" GST_PTR_FORMAT, caps);
      gst_object_unref(pool);
      return FALSE;
    }
    // The pool sets the real (pitched) size.
    config = gst_buffer_pool_get_config(pool);
    guint size = 0;
    gst_buffer_pool_config_get_params(config, nullptr, &size, nullptr, nullptr);
    gst_structure_free(config);
    gst_query_add_allocation_pool(query, pool, size, min_buffers, 0);
    gst_object_unref(pool);
  }
  gst_query_add_allocation_meta(query, GST_VIDEO_META_API_TYPE, nullptr);
  gst_query_add_allocation_meta(query, pending_meta_api_get_type(), nullptr);
  return TRUE;
}

gboolean gst_cudadiff_decide_cuda_allocation(GstElement *element, GstCudaDiffCudaShare *share,
                                             GstQuery *query, guint extra_buffers,
                                             bool *downstream_orders) {
  *downstream_orders = false;
  GstCaps *caps = nullptr;
  gst_query_parse_allocation(query, &caps, nullptr);
  GstVideoInfo info;
  if (!caps || !gst_video_info_from_caps(&info, caps)) return FALSE;
  GstCudaContext *ctx = share ? static_cast<GstCudaContext *>(share->gst_context()) : nullptr;
  if (!ctx) {
    GST_ERROR_OBJECT(element, "CUDA memory output without a CUDA context");
    return FALSE;
  }
  *downstream_orders = gst_query_find_allocation_meta(query, pending_meta_api_get_type(), nullptr);
  GstBufferPool *pool = nullptr;
  guint size = 0, min = 0, max = 0;
  const gboolean have_pool = gst_query_get_n_allocation_pools(query) > 0;
  if (have_pool) gst_query_parse_nth_allocation_pool(query, 0, &pool, &size, &min, &max);
  if (pool && (!GST_IS_CUDA_BUFFER_POOL(pool) || GST_CUDA_BUFFER_POOL(pool)->context != ctx)) {
    gst_object_unref(pool);
    pool = nullptr;
  }
  min += extra_buffers;
  if (max != 0) max += extra_buffers;
  if (!pool) pool = gst_cuda_buffer_pool_new(ctx);
  GstStructure *config = gst_buffer_pool_get_config(pool);
  gst_buffer_pool_config_set_params(config, caps, static_cast<guint>(GST_VIDEO_INFO_SIZE(&info)),
                                    min, max);
  gst_buffer_pool_config_add_option(config, GST_BUFFER_POOL_OPTION_VIDEO_META);
#if GST_CHECK_VERSION(1, 24, 0)
  if (GstCudaStream *stream = shared_gst_stream(ctx))
    gst_buffer_pool_config_set_cuda_stream(config, stream);
#endif
  if (!gst_buffer_pool_set_config(pool, config)) {
    // A pool may refuse a new configuration while in use: a fresh one.
    gst_object_unref(pool);
    pool = gst_cuda_buffer_pool_new(ctx);
    config = gst_buffer_pool_get_config(pool);
    gst_buffer_pool_config_set_params(config, caps, static_cast<guint>(GST_VIDEO_INFO_SIZE(&info)),
                                      min, max);
    gst_buffer_pool_config_add_option(config, GST_BUFFER_POOL_OPTION_VIDEO_META);
    if (!gst_buffer_pool_set_config(pool, config)) {
      GST_ERROR_OBJECT(element, "cannot configure a CUDA buffer pool for %" GST_PTR_FORMAT, caps);
      gst_object_unref(pool);
      return FALSE;
    }
  }
  config = gst_buffer_pool_get_config(pool);
  gst_buffer_pool_config_get_params(config, nullptr, &size, nullptr, nullptr);
  gst_structure_free(config);
  if (have_pool)
    gst_query_set_nth_allocation_pool(query, 0, pool, size, min, max);
  else
    gst_query_add_allocation_pool(query, pool, size, min, max);
  gst_object_unref(pool);
  GST_DEBUG_OBJECT(element, "CUDA output pool, downstream %s pending buffers",
                   *downstream_orders ? "orders its work after" : "waits for no");
  return TRUE;
}

namespace {

// Whether `mem` is CUDA memory in the driver context `handle` (two
// GstCudaContexts may wrap one driver context: its pointers are valid in
// both).
bool cuda_memory_in(GstMemory *mem, void *handle) {
  if (!handle || !gst_is_cuda_memory(mem)) return false;
  GstCudaContext *mem_ctx = GST_CUDA_MEMORY_CAST(mem)->context;
  return mem_ctx && gst_cuda_context_get_handle(mem_ctx) == handle;
}

}  // namespace

gboolean gst_cudadiff_buffer_is_foreign_cuda(GstBuffer *buffer, GstCudaDiffCudaShare *share) {
  void *handle = share ? share->driver_context() : nullptr;
  for (guint i = 0; i < gst_buffer_n_memory(buffer); ++i) {
    GstMemory *mem = gst_buffer_peek_memory(buffer, i);
    if (gst_is_cuda_memory(mem) && !cuda_memory_in(mem, handle)) return TRUE;
  }
  return FALSE;
}

gboolean gst_cudadiff_frame_map(GstVideoFrame *frame, const GstVideoInfo *info, GstBuffer *buffer,
                                GstMapFlags flags, GstCudaDiffCudaShare *share, bool *on_device) {
  *on_device = false;
  GstCudaContext *ctx = share ? static_cast<GstCudaContext *>(share->gst_context()) : nullptr;
  void *handle = ctx ? gst_cuda_context_get_handle(ctx) : nullptr;
  const guint n = gst_buffer_n_memory(buffer);
  bool cuda = handle && n > 0;
  for (guint i = 0; i < n && cuda; ++i)
    cuda = cuda_memory_in(gst_buffer_peek_memory(buffer, i), handle);
  if (!cuda && n > 0 && gst_is_cuda_memory(gst_buffer_peek_memory(buffer, 0)))
    GST_LOG("CUDA memory %s: mapped through the host",
            handle ? "of another driver context" : "for an element without CUDA context");
  if (cuda) {
#if GST_CHECK_VERSION(1, 24, 0)
    // A producer on another stream may have left work queued (1.24's
    // GstCudaStream): gst_cuda_memory_sync() waits for it when needed. Work
    // on our own shared stream is ordered already.
    GstCudaStream *ours = shared_gst_stream(ctx);
    for (guint i = 0; i < n; ++i) {
      auto *cmem = GST_CUDA_MEMORY_CAST(gst_buffer_peek_memory(buffer, i));
      if (!ours || gst_cuda_memory_get_stream(cmem) != ours) gst_cuda_memory_sync(cmem);
    }
#endif
    if (!gst_video_frame_map(frame, info, buffer, static_cast<GstMapFlags>(flags | GST_MAP_CUDA)))
      return FALSE;
    *on_device = true;
    return TRUE;
  }
  return gst_video_frame_map(frame, info, buffer, flags);
}

#else

gboolean gst_cudadiff_propose_cuda_allocation(GstCudaDiffCudaShare *, GstQuery *, guint) {
  return FALSE;
}
gboolean gst_cudadiff_decide_cuda_allocation(GstElement *, GstCudaDiffCudaShare *, GstQuery *,
                                             guint, bool *downstream_orders) {
  *downstream_orders = false;
  return FALSE;
}
gboolean gst_cudadiff_frame_map(GstVideoFrame *frame, const GstVideoInfo *info, GstBuffer *buffer,
                                GstMapFlags flags, GstCudaDiffCudaShare *, bool *on_device) {
  *on_device = false;
  return gst_video_frame_map(frame, info, buffer, flags);
}
gboolean gst_cudadiff_buffer_is_foreign_cuda(GstBuffer *, GstCudaDiffCudaShare *) {
  return FALSE;
}

#endif

std::string gst_cudadiff_map_failure(const GstVideoInfo *info, GstBuffer *buffer) {
  const gsize size = gst_buffer_get_size(buffer);
  const bool meta = gst_buffer_get_video_meta(buffer) != nullptr;
  gchar *frame = g_strdup_printf("a %dx%d %s frame", GST_VIDEO_INFO_WIDTH(info),
                                 GST_VIDEO_INFO_HEIGHT(info), GST_VIDEO_INFO_NAME(info));
  gchar *text;
  if (!meta && size < GST_VIDEO_INFO_SIZE(info))
    text = g_strdup_printf(
        "the buffer holds %" G_GSIZE_FORMAT " bytes, fewer than the %" G_GSIZE_FORMAT
        " that %s takes in GStreamer's default layout (each row padded to 4 bytes); a "
        "buffer laid out otherwise must carry a GstVideoMeta that says where its planes are",
        size, gsize(GST_VIDEO_INFO_SIZE(info)), frame);
  else
    text = g_strdup_printf("%s in a buffer of %" G_GSIZE_FORMAT " bytes%s could not be mapped",
                           frame, size, meta ? " with a GstVideoMeta" : "");
  std::string out = text;
  g_free(text);
  g_free(frame);
  return out;
}

void gst_cudadiff_warn_if_foreign(GstElement *element, GstBuffer *buffer,
                                  GstCudaDiffCudaShare *share, bool *warned) {
  if (*warned || !share->gst_context() || !gst_cudadiff_buffer_is_foreign_cuda(buffer, share))
    return;
  *warned = true;
  GST_ELEMENT_WARNING(element, STREAM, FAILED,
                      ("CUDA memory of another CUDA context: frames are copied through system "
                       "memory"),
                      ("upstream's CUDA context is not this element's (another device-id, or "
                       "a context that was not shared): give every CUDA element the same "
                       "device-id and let them share one gst.cuda.context (or set the same "
                       "GstCudaContext on each) to keep frames on the GPU"));
}

// --- ordering

bool gst_cudadiff_downstream_orders(GstPad *srcpad, GstCaps *caps) {
  GstQuery *query = gst_query_new_allocation(caps, FALSE);
  const bool orders = gst_pad_peer_query(srcpad, query) &&
                      gst_query_find_allocation_meta(query, pending_meta_api_get_type(), nullptr);
  gst_query_unref(query);
  return orders;
}

void gst_cudadiff_buffer_mark_pending(GstBuffer *buffer, const cudadiff::Context &ctx) {
  auto *meta =
      reinterpret_cast<PendingMeta *>(gst_buffer_get_meta(buffer, pending_meta_api_get_type()));
  if (!meta)
    meta =
        reinterpret_cast<PendingMeta *>(gst_buffer_add_meta(buffer, pending_meta_info(), nullptr));
  if (!meta) return;
  if (!meta->stream)
    meta->stream = new std::shared_ptr<cudadiff::Stream>(ctx.shared_stream());
  else
    *meta->stream = ctx.shared_stream();
#if CUDADIFF_HAVE_GST_CUDA && GST_CHECK_VERSION(1, 24, 0)
  // GStreamer's own CUDA elements wait for it when they read (they see the
  // pool's GstCudaStream on the memory).
  for (guint i = 0; i < gst_buffer_n_memory(buffer); ++i) {
    GstMemory *mem = gst_buffer_peek_memory(buffer, i);
    if (gst_is_cuda_memory(mem)) GST_MINI_OBJECT_FLAG_SET(mem, GST_CUDA_MEMORY_TRANSFER_NEED_SYNC);
  }
#endif
}

// The stream that a buffer's pending mark names, or nullptr (no mark).
static cudadiff::Stream *pending_stream(GstBuffer *buffer) {
  auto *meta =
      reinterpret_cast<PendingMeta *>(gst_buffer_get_meta(buffer, pending_meta_api_get_type()));
  return meta && meta->stream ? meta->stream->get() : nullptr;
}

bool gst_cudadiff_buffer_ordered_input(GstBuffer *buffer, const cudadiff::Context &ctx) {
  cudadiff::Stream *stream = pending_stream(buffer);
  if (!stream) return false;
  if (stream == ctx.shared_stream().get()) return true;
  stream->synchronize();  // another stream: its writes are done after this
  return false;
}

bool gst_cudadiff_buffer_is_pending(GstBuffer *buffer) {
  return pending_stream(buffer) != nullptr;
}

void gst_cudadiff_buffer_clear_pending(GstBuffer *buffer) {
  GstMeta *meta = gst_buffer_get_meta(buffer, pending_meta_api_get_type());
  if (meta && gst_buffer_is_writable(buffer)) gst_buffer_remove_meta(buffer, meta);
}

bool gst_cudadiff_buffer_wait_pending(GstBuffer *buffer) {
  cudadiff::Stream *stream = pending_stream(buffer);
  if (!stream) return false;
  stream->synchronize();
  return true;
}
