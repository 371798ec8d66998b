// Device-resident frames: video/x-raw(memory:CUDAMemory) caps, the CUDA
// context a pipeline shares (GStreamer's gst.cuda.context, also used by
// nvcodec's cudaupload, cudadownload, NVDEC decoders...), buffer pools of CUDA
// memory, frame mapping to device pointers, and the ordering of GPU work
// between gst-cudadiff elements.
//
// Built with gstreamer-cuda-1.0 (meson option gst-cuda); without it every
// function here reports "not available", no CUDA memory caps are offered and
// the elements work on system memory as before.
//
// Ordering. All gst-cudadiff elements of one GstCudaContext queue their GPU
// work on one stream (shared_stream below), so a frame that one element
// writes and the next reads needs no host synchronisation: the stream
// orders them, and an output buffer that goes back to its pool is only
// written again after everything queued to read it. A producer marks such
// an unfinished buffer (gst_cudadiff_buffer_mark_pending) when downstream
// declared in the ALLOCATION query that it honours the mark (our elements
// do); any other consumer gets the buffer only after the producer waited for
// its stream. Input from any other producer is complete when it arrives
// (GStreamer 1.22's CUDA elements wait before pushing), but its producer may
// reuse the memory as soon as we release it, so a consumer waits for its own
// reads before it releases such a buffer. Whoever maps a pending buffer on the
// host (a pad probe) gets GStreamer 1.22's synchronous copy on the legacy
// default stream, which waits for the shared stream (a blocking stream).
#pragma once

#include <gst/gst.h>
#include <gst/video/gstvideoutils.h>
#include <gst/video/video.h>

#include <memory>
#include <mutex>
#include <string>

#include "cudadiff/runtime.h"
#include "gstcudadiffutils.h"

#define GST_CUDADIFF_CAPS_FEATURE_CUDA "memory:CUDAMemory"
// The formats that gst-cudadiff exchanges in CUDA memory: those of ours that
// GStreamer's CUDA allocator lays out (1.22: no GRAY8, xRGB, xBGR).
#define GST_CUDADIFF_CUDA_FORMATS                                                              \
  "{ BGR, RGB, BGRx, RGBx, BGRA, RGBA, ABGR, ARGB, I420, YV12, NV12, NV21, YUY2, UYVY, Y444, " \
  "Y42B }"

// Called once from plugin_init: loads GStreamer's CUDA library (and through
// it the driver) and registers its allocator. Safe without a driver.
void gst_cudadiff_cuda_memory_init(void);
// TRUE when this build supports CUDA memory and the driver was loaded.
gboolean gst_cudadiff_cuda_memory_available(void);

// TRUE when the first structure of `caps` has the memory:CUDAMemory feature.
gboolean gst_cudadiff_caps_are_cuda(const GstCaps *caps);
// Raw video caps of `formats` (a "{ BGR, ... }" list): the CUDA memory
// structure first (formats restricted to GST_CUDADIFF_CUDA_FORMATS) when this
// build supports it, then system memory. For pad templates.
GstCaps *gst_cudadiff_make_template_caps(const char *formats);
// Caps of memory kinds: every structure of `caps` is taken as system memory
// (its features dropped, duplicates merged); with `cuda`, a copy of each in
// CUDA memory (formats restricted, empty ones dropped) comes first. Returns
// new caps; `caps` is not taken.
GstCaps *gst_cudadiff_caps_with_memory(GstCaps *caps, bool cuda);
// `caps` without its CUDA memory structures (new caps; `caps` not taken).
GstCaps *gst_cudadiff_caps_without_cuda(GstCaps *caps);
// `caps` (taken) with its CUDA memory structures first, the others after,
// each group in its order: for elements whose caps pass through others
// (an in-place filter, an encoder's proxied caps), so that the element that
// picks the first structure upstream (cudaupload) prefers CUDA memory.
GstCaps *gst_cudadiff_caps_cuda_first(GstCaps *caps);
// The same with the system memory structures first.
GstCaps *gst_cudadiff_caps_system_first(GstCaps *caps);
// Reorders `caps` (taken) for fixation: CUDA memory structures first when
// the peer of `pad` lists memory:CUDAMemory itself (not merely ANY caps),
// system memory first otherwise, so that an application's appsink or a
// fakesink keep getting system memory.
GstCaps *gst_cudadiff_caps_prefer_peer_memory(GstPad *pad, GstCaps *caps);

// Whether frames of `info` must not leave in CUDA memory: I420 and YV12 of an
// odd height, whose third plane GStreamer's CUDA allocator (1.22) puts half a
// pitch into a row, past the part of each row that its host map copies (a
// sink or an application mapping them would get that plane wrong).
bool gst_cudadiff_cuda_memory_loses_planes(const GstVideoInfo *info);

// A decoder's new output state (caps not yet made): in CUDA memory when
// `allowed`, the frames do not lose planes there, and the peer of `srcpad`
// lists memory:CUDAMemory itself and accepts these caps in it; else left to
// the default (system memory).
void gst_cudadiff_output_state_prefer_cuda(GstPad *srcpad, GstVideoCodecState *state, bool allowed);

// The pipeline's CUDA context as one element holds it. One per element;
// every method is thread-safe.
class GstCudaDiffCudaShare {
 public:
  GstCudaDiffCudaShare() = default;
  ~GstCudaDiffCudaShare() { release(); }
  GstCudaDiffCudaShare(const GstCudaDiffCudaShare &) = delete;
  GstCudaDiffCudaShare &operator=(const GstCudaDiffCudaShare &) = delete;

  // GstElement::set_context: keeps a gst.cuda.context on `device_id` (a
  // context already held stays). Ignored while disabled, and by elements
  // whose backend is cpu (they do not call it).
  void set_context(GstElement *element, GstContext *context, gint device_id);
  // Finds the pipeline's context (the neighbours, then the application or
  // the bins through need-context), else wraps the device's primary context
  // (the one the CUDA runtime uses) and announces it on the bus
  // (have-context), so that later CUDA elements join it. FALSE with `why`
  // when CUDA memory is not available or the device is unusable.
  bool ensure(GstElement *element, gint device_id, std::string *why);
  // GST_QUERY_CONTEXT on a pad: TRUE when answered with our context.
  bool handle_query(GstElement *element, GstQuery *query);
  // Drops the held context; the share may be used again (stop).
  void release();
  // Drops the held context and refuses contexts until release() or
  // enable(): the element runs without CUDA memory (backend cpu, or the
  // pipeline's context could not be used). Its caps then offer system
  // memory only and it answers no context query.
  void disable();
  // Takes contexts again (each start decides anew, also after a start that
  // failed and so was never followed by the stop that releases).
  void enable();
  bool disabled() const;
  // The GstCudaContext (transfer none; valid while held), or nullptr.
  gpointer gst_context() const;
  // The raw CUcontext of the held context, or nullptr.
  void *driver_context() const;
  // A core context in the held GstCudaContext, on the stream that all
  // gst-cudadiff elements of that GstCudaContext share. Throws
  // cudadiff::Error (nothing held, or the device differs).
  std::unique_ptr<cudadiff::Context> open(gint device_id);

 private:
  mutable std::mutex lock_;
  // (unused in builds without gstreamer-cuda-1.0)
  [[maybe_unused]] gpointer ctx_ = nullptr;  // GstCudaContext, one reference
  [[maybe_unused]] bool disabled_ = false;
};

// Whether an element with these settings offers memory:CUDAMemory caps:
// CUDA memory available, backend not cpu, device-id names a usable device,
// and its `share` not disabled (since its start chose the CPU or could not
// use the pipeline's context, until it stops). Takes the share's lock: not
// under the element's object lock.
gboolean gst_cudadiff_cuda_caps_allowed(GstCudaDiffBackend backend, gint device_id,
                                        const GstCudaDiffCudaShare &share);

// Opens the element's core context as gst_cudadiff_open_context() does, but
// for CUDA inside the pipeline's shared GstCudaContext (`share`, ensured
// here) when CUDA memory is available; without it (or when the context
// cannot be had) in the device's primary context as before, with `share`
// disabled (system memory caps only) until stop. backend=cpu disables it
// too: a CPU element never takes nor hands out device pointers.
std::unique_ptr<cudadiff::Context> gst_cudadiff_open_shared_context(GstElement *element,
                                                                    GstCudaDiffBackend backend,
                                                                    gint device_id,
                                                                    GstCudaDiffCudaShare *share);

// propose_allocation for CUDA memory caps: a CUDA buffer pool of the shared
// context (`min_buffers` the element may keep), GstVideoMeta, and the mark
// that says "this element orders its work after pending buffers".
gboolean gst_cudadiff_propose_cuda_allocation(GstCudaDiffCudaShare *share, GstQuery *query,
                                              guint min_buffers = 0);
// decide_allocation for CUDA memory caps: downstream's CUDA pool when it is
// of the shared context, else a new one of it; `extra_buffers` more than
// downstream asks for. *downstream_orders: downstream honours pending marks.
gboolean gst_cudadiff_decide_cuda_allocation(GstElement *element, GstCudaDiffCudaShare *share,
                                             GstQuery *query, guint extra_buffers,
                                             bool *downstream_orders);

// Whether the peer of `srcpad` orders its work after pending buffers of
// `caps` (an ALLOCATION query downstream): for an element that works in
// place, which decides no allocation of its own.
bool gst_cudadiff_downstream_orders(GstPad *srcpad, GstCaps *caps);

// Maps `buffer` (of `info`) for the element's GPU work: with device
// pointers when its memory is CUDA memory of the shared context's driver
// context (GST_MAP_CUDA), else with host pointers (system memory, CUDA
// memory of another driver context, which GStreamer then copies through the
// host, and every buffer while `share` holds no context: backend cpu).
// *on_device says which. FALSE when the buffer cannot be mapped.
gboolean gst_cudadiff_frame_map(GstVideoFrame *frame, const GstVideoInfo *info, GstBuffer *buffer,
                                GstMapFlags flags, GstCudaDiffCudaShare *share, bool *on_device);
// Why `buffer` could not be mapped as a frame of `info`, for an error's
// debug text (a buffer smaller than its caps say, without a GstVideoMeta).
std::string gst_cudadiff_map_failure(const GstVideoInfo *info, GstBuffer *buffer);

// TRUE when `buffer` holds CUDA memory of another driver context than the
// one `share` holds (another device-id, or a context that was not shared):
// such frames are mapped through the host (slow, but correct).
gboolean gst_cudadiff_buffer_is_foreign_cuda(GstBuffer *buffer, GstCudaDiffCudaShare *share);
// Posts one warning (while *warned is false; it sets it) when `buffer` is
// such memory and `share` holds a context: it works, but costs two copies
// per frame; the warning says why and what to do.
void gst_cudadiff_warn_if_foreign(GstElement *element, GstBuffer *buffer,
                                  GstCudaDiffCudaShare *share, bool *warned);

// The GPU work that writes `buffer` is queued on ctx's stream and may not be
// finished: consumers that honour the mark order their work after it.
void gst_cudadiff_buffer_mark_pending(GstBuffer *buffer, const cudadiff::Context &ctx);
// Whether the GPU work writing `buffer` is ordered before ctx's stream: TRUE
// when it was queued on the same stream (or is finished and its producer
// keeps no claim, see above: FALSE then means "wait for your own reads
// before releasing it"). A mark of another stream is waited for here.
// Throws cudadiff::Error.
bool gst_cudadiff_buffer_ordered_input(GstBuffer *buffer, const cudadiff::Context &ctx);
// Whether `buffer` carries a pending mark.
bool gst_cudadiff_buffer_is_pending(GstBuffer *buffer);
// Removes the mark of a buffer whose GPU work has been waited for (when the
// buffer is writable; a mark left on a finished buffer costs a consumer a
// wait that returns at once).
void gst_cudadiff_buffer_clear_pending(GstBuffer *buffer);
// Waits until the GPU work that writes `buffer` has finished, when it is
// marked pending; TRUE when it was (an element that passes the buffer on
// untouched to a consumer that does not honour the mark). Throws
// cudadiff::Error.
bool gst_cudadiff_buffer_wait_pending(GstBuffer *buffer);
