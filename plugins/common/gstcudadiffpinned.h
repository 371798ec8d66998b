// Pinned (page-locked) host memory for GStreamer buffers: a GstAllocator whose
// memory comes from cudaHostAlloc (portable, mapped), or plain aligned system
// memory when no CUDA device is usable, and a GstVideoBufferPool that uses it.
#pragma once

#include <gst/gst.h>
#include <gst/video/video.h>

G_BEGIN_DECLS

// mem_type of memory that really is page-locked; the fallback allocator of a
// machine without a usable device reports GST_CUDADIFF_HOST_MEMORY_TYPE.
#define GST_CUDADIFF_PINNED_MEMORY_TYPE "CudaDiffPinned"
#define GST_CUDADIFF_HOST_MEMORY_TYPE "CudaDiffHost"

#define GST_TYPE_CUDADIFF_PINNED_ALLOCATOR (gst_cudadiff_pinned_allocator_get_type())
G_DECLARE_FINAL_TYPE(GstCudaDiffPinnedAllocator, gst_cudadiff_pinned_allocator, GST,
                     CUDADIFF_PINNED_ALLOCATOR, GstAllocator)

// The process-wide allocator (transfer full). It decides once, on first use,
// whether a device exists and thus whether its memory is pinned.
GstAllocator *gst_cudadiff_pinned_allocator_get(void);

// TRUE when `mem` comes from the pinned allocator and is page-locked.
gboolean gst_cudadiff_memory_is_pinned(GstMemory *mem);
// TRUE when every memory of `buffer` is page-locked.
gboolean gst_cudadiff_buffer_is_pinned(GstBuffer *buffer);

// A video buffer pool configured for `caps` with pinned memory; with
// `video_meta` it adds GstVideoMeta to its buffers. Returns NULL for caps that
// are not raw video.
GstBufferPool *gst_cudadiff_pinned_pool_new(GstCaps *caps, guint size, guint min_buffers,
                                            guint max_buffers, gboolean video_meta);

// TRUE when `pool` allocates from the pinned allocator.
gboolean gst_cudadiff_pool_is_pinned(GstBufferPool *pool);

// propose_allocation for a sink pad of raw video: a pinned pool (when asked
// for one; `min_buffers`: how many input buffers the element may keep after
// its chain function returns), the pinned allocator and GstVideoMeta. FALSE
// for unusable caps.
gboolean gst_cudadiff_propose_pinned_allocation(GstQuery *query, guint min_buffers = 0);
// decide_allocation for a source pad of raw video: output buffers from a
// pinned pool (downstream's when it is one of ours, else a new one), with
// GstVideoMeta when downstream supports it; `extra_buffers` more than
// downstream asks for (frames the element holds). `element` names the errors.
gboolean gst_cudadiff_decide_pinned_allocation(GstElement *element, GstQuery *query,
                                               guint extra_buffers = 0);

G_END_DECLS
