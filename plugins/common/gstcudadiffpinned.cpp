#include "gstcudadiffpinned.h"

#include <cstring>

#include "cudadiff/runtime.h"

GST_DEBUG_CATEGORY_STATIC(gst_cudadiff_pinned_debug);
#define GST_CAT_DEFAULT gst_cudadiff_pinned_debug

namespace {

struct PinnedMemory {
  GstMemory mem;
  guint8 *data;     // start of the whole allocation (shared by sub-memories)
  gboolean pinned;  // page-locked (cudaHostAlloc) or system memory
};

}  // namespace

struct _GstCudaDiffPinnedAllocator {
  GstAllocator parent;
  gboolean device_present;
};

G_DEFINE_TYPE(GstCudaDiffPinnedAllocator, gst_cudadiff_pinned_allocator, GST_TYPE_ALLOCATOR)

static GstMemory *pinned_alloc(GstAllocator *allocator, gsize size, GstAllocationParams *params) {
  // Alignment: cudaHostAlloc returns page-aligned memory and the fallback is
  // 64-byte aligned; that covers every alignment GStreamer asks for below it.
  const gsize align = params->align;
  if (align >= 64 && !GST_CUDADIFF_PINNED_ALLOCATOR(allocator)->device_present) {
    GST_WARNING_OBJECT(allocator, "alignment %" G_GSIZE_FORMAT " above 64 is not honoured",
                       align + 1);
  }
  const gsize maxsize = size + params->prefix + params->padding;
  bool pinned = false;
  void *data = cudadiff::host_alloc(maxsize, &pinned);
  if (!data) {
    GST_ERROR_OBJECT(allocator, "failed to allocate %" G_GSIZE_FORMAT " bytes", maxsize);
    return nullptr;
  }
  // Zeroed once: upstream may leave bytes of a row unwritten (the padding
  // luma of an odd-width YUY2 row), which the encoder sends as they are;
  // they are then zeros, not what the heap held before.
  std::memset(data, 0, maxsize);
  auto *mem = g_new0(PinnedMemory, 1);
  mem->data = static_cast<guint8 *>(data);
  mem->pinned = pinned;
  gst_memory_init(GST_MEMORY_CAST(mem), params->flags, allocator, nullptr, maxsize, align,
                  params->prefix, size);
  return GST_MEMORY_CAST(mem);
}

static void pinned_free(GstAllocator *, GstMemory *memory) {
  auto *mem = reinterpret_cast<PinnedMemory *>(memory);
  if (memory->parent == nullptr) cudadiff::host_free(mem->data, mem->pinned);
  g_free(mem);
}

static gpointer pinned_map(GstMemory *memory, gsize, GstMapFlags) {
  return reinterpret_cast<PinnedMemory *>(memory)->data;
}

static void pinned_unmap(GstMemory *) {}

static GstMemory *pinned_share(GstMemory *memory, gssize offset, gssize size) {
  auto *mem = reinterpret_cast<PinnedMemory *>(memory);
  GstMemory *parent = memory->parent ? memory->parent : memory;
  if (size == -1) size = static_cast<gssize>(memory->size) - offset;
  auto *sub = g_new0(PinnedMemory, 1);
  sub->data = mem->data;
  sub->pinned = mem->pinned;
  gst_memory_init(GST_MEMORY_CAST(sub),
                  static_cast<GstMemoryFlags>(GST_MINI_OBJECT_FLAGS(parent) |
                                              GST_MINI_OBJECT_FLAG_LOCK_READONLY),
                  memory->allocator, parent, memory->maxsize, memory->align,
                  memory->offset + offset, size);
  return GST_MEMORY_CAST(sub);
}

static gboolean pinned_is_span(GstMemory *mem1, GstMemory *mem2, gsize *offset) {
  auto *m1 = reinterpret_cast<PinnedMemory *>(mem1);
  auto *m2 = reinterpret_cast<PinnedMemory *>(mem2);
  if (offset) {
    GstMemory *parent = mem1->parent;
    *offset = parent ? mem1->offset - parent->offset : mem1->offset;
  }
  return m1->data == m2->data && mem1->offset + mem1->size == mem2->offset;
}

static void gst_cudadiff_pinned_allocator_class_init(GstCudaDiffPinnedAllocatorClass *klass) {
  GstAllocatorClass *alloc_class = GST_ALLOCATOR_CLASS(klass);
  alloc_class->alloc = pinned_alloc;
  alloc_class->free = pinned_free;
  GST_DEBUG_CATEGORY_INIT(gst_cudadiff_pinned_debug, "cudadiffpinned", 0,
                          "gst-cudadiff pinned host memory");
}

static void gst_cudadiff_pinned_allocator_init(GstCudaDiffPinnedAllocator *self) {
  GstAllocator *alloc = GST_ALLOCATOR_CAST(self);
  std::string why;
  self->device_present = cudadiff::device_count(&why) > 0;
  alloc->mem_type =
      self->device_present ? GST_CUDADIFF_PINNED_MEMORY_TYPE : GST_CUDADIFF_HOST_MEMORY_TYPE;
  alloc->mem_map = pinned_map;
  alloc->mem_unmap = pinned_unmap;
  alloc->mem_share = pinned_share;
  alloc->mem_is_span = pinned_is_span;
  if (!self->device_present)
    GST_INFO_OBJECT(self, "no CUDA device (%s): buffers use system memory", why.c_str());
}

GstAllocator *gst_cudadiff_pinned_allocator_get(void) {
  static GstAllocator *allocator = nullptr;
  if (g_once_init_enter(&allocator)) {
    GstAllocator *a = GST_ALLOCATOR_CAST(g_object_new(GST_TYPE_CUDADIFF_PINNED_ALLOCATOR, nullptr));
    gst_object_ref_sink(a);
    // Lives for the whole process, like GStreamer's system allocator.
    GST_OBJECT_FLAG_SET(a, GST_OBJECT_FLAG_MAY_BE_LEAKED);
    gst_allocator_register(GST_CUDADIFF_PINNED_MEMORY_TYPE, GST_ALLOCATOR_CAST(gst_object_ref(a)));
    g_once_init_leave(&allocator, a);
  }
  return GST_ALLOCATOR_CAST(gst_object_ref(allocator));
}

gboolean gst_cudadiff_memory_is_pinned(GstMemory *mem) {
  if (!mem || !GST_IS_CUDADIFF_PINNED_ALLOCATOR(mem->allocator)) return FALSE;
  return reinterpret_cast<PinnedMemory *>(mem)->pinned;
}

gboolean gst_cudadiff_buffer_is_pinned(GstBuffer *buffer) {
  const guint n = gst_buffer_n_memory(buffer);
  if (n == 0) return FALSE;
  for (guint i = 0; i < n; ++i)
    if (!gst_cudadiff_memory_is_pinned(gst_buffer_peek_memory(buffer, i))) return FALSE;
  return TRUE;
}

GstBufferPool *gst_cudadiff_pinned_pool_new(GstCaps *caps, guint size, guint min_buffers,
                                            guint max_buffers, gboolean video_meta) {
  GstVideoInfo info;
  if (!caps || !gst_video_info_from_caps(&info, caps)) return nullptr;
  if (size == 0) size = static_cast<guint>(GST_VIDEO_INFO_SIZE(&info));
  GstBufferPool *pool = gst_video_buffer_pool_new();
  GstStructure *config = gst_buffer_pool_get_config(pool);
  gst_buffer_pool_config_set_params(config, caps, size, min_buffers, max_buffers);
  GstAllocator *allocator = gst_cudadiff_pinned_allocator_get();
  GstAllocationParams params;
  gst_allocation_params_init(&params);
  params.align = 63;  // 64-byte aligned rows for the CPU paths
  gst_buffer_pool_config_set_allocator(config, allocator, &params);
  gst_object_unref(allocator);
  if (video_meta) gst_buffer_pool_config_add_option(config, GST_BUFFER_POOL_OPTION_VIDEO_META);
  if (!gst_buffer_pool_set_config(pool, config)) {
    GST_WARNING("pinned pool rejected its configuration for %" GST_PTR_FORMAT, caps);
    gst_object_unref(pool);
    return nullptr;
  }
  return pool;
}

gboolean gst_cudadiff_pool_is_pinned(GstBufferPool *pool) {
  if (!pool) return FALSE;
  GstStructure *config = gst_buffer_pool_get_config(pool);
  GstAllocator *allocator = nullptr;
  gboolean pinned = FALSE;
  if (gst_buffer_pool_config_get_allocator(config, &allocator, nullptr) && allocator)
    pinned = GST_IS_CUDADIFF_PINNED_ALLOCATOR(allocator);
  gst_structure_free(config);
  return pinned;
}

// The pinned allocator as an allocation parameter of the query (64-byte
// aligned rows for the CPU paths): added, or in place of the first one.
static void put_pinned_param(GstQuery *query, bool replace_first) {
  GstAllocator *allocator = gst_cudadiff_pinned_allocator_get();
  GstAllocationParams params;
  gst_allocation_params_init(&params);
  params.align = 63;
  if (replace_first && gst_query_get_n_allocation_params(query) > 0)
    gst_query_set_nth_allocation_param(query, 0, allocator, &params);
  else
    gst_query_add_allocation_param(query, allocator, &params);
  gst_object_unref(allocator);
}

gboolean gst_cudadiff_propose_pinned_allocation(GstQuery *query, guint min_buffers) {
  GstCaps *caps = nullptr;
  gboolean need_pool = FALSE;
  gst_query_parse_allocation(query, &caps, &need_pool);
  GstVideoInfo info;
  if (!caps || !gst_video_info_from_caps(&info, caps)) return FALSE;
  if (need_pool) {
    GstBufferPool *pool = gst_cudadiff_pinned_pool_new(
        caps, static_cast<guint>(GST_VIDEO_INFO_SIZE(&info)), min_buffers, 0, TRUE);
    if (pool) {
      gst_query_add_allocation_pool(query, pool, static_cast<guint>(GST_VIDEO_INFO_SIZE(&info)),
                                    min_buffers, 0);
      gst_object_unref(pool);
    }
  }
  put_pinned_param(query, false);
  gst_query_add_allocation_meta(query, GST_VIDEO_META_API_TYPE, nullptr);
  return TRUE;
}

gboolean gst_cudadiff_decide_pinned_allocation(GstElement *element, GstQuery *query,
                                               guint extra_buffers) {
  GstCaps *caps = nullptr;
  gst_query_parse_allocation(query, &caps, nullptr);
  GstVideoInfo info;
  if (!caps || !gst_video_info_from_caps(&info, caps)) return FALSE;

  GstBufferPool *pool = nullptr;
  guint size = 0, min = 0, max = 0;
  const gboolean have_pool = gst_query_get_n_allocation_pools(query) > 0;
  if (have_pool) gst_query_parse_nth_allocation_pool(query, 0, &pool, &size, &min, &max);
  if (pool && !gst_cudadiff_pool_is_pinned(pool)) {
    gst_object_unref(pool);
    pool = nullptr;
  }
  size = MAX(size, static_cast<guint>(GST_VIDEO_INFO_SIZE(&info)));
  min += extra_buffers;
  if (max != 0) max += extra_buffers;
  const gboolean video_meta =
      gst_query_find_allocation_meta(query, GST_VIDEO_META_API_TYPE, nullptr);
  if (pool) {
    GstStructure *config = gst_buffer_pool_get_config(pool);
    gst_buffer_pool_config_set_params(config, caps, size, min, max);
    if (video_meta) gst_buffer_pool_config_add_option(config, GST_BUFFER_POOL_OPTION_VIDEO_META);
    if (!gst_buffer_pool_set_config(pool, config)) {
      gst_object_unref(pool);
      pool = nullptr;
    }
  }
  if (!pool) pool = gst_cudadiff_pinned_pool_new(caps, size, min, max, video_meta);
  if (!pool) {
    GST_ERROR_OBJECT(element, "could not create a pinned buffer pool for %" GST_PTR_FORMAT, caps);
    return FALSE;
  }
  if (have_pool)
    gst_query_set_nth_allocation_pool(query, 0, pool, size, min, max);
  else
    gst_query_add_allocation_pool(query, pool, size, min, max);
  gst_object_unref(pool);

  put_pinned_param(query, true);
  return TRUE;
}
