// GstCudaDiffFilter: the base class of every gst-cudadiff video filter.
//
// It owns the `backend`, `device-id` and `frame-overlap` properties, the core
// Context (in the pipeline's shared CUDA context) from start to stop, device
// frames allocated once per negotiated caps, the memory each side of the
// element negotiated (system memory, or video/x-raw(memory:CUDAMemory) where
// the neighbour offers it: gstcudadiffcudamem.h), the upload of host input
// and the download of host output, buffer pools (pinned or CUDA) offered
// upstream and used downstream, the ordering of GPU work between elements,
// and error reporting. A subclass maps caps and properties to one core
// operation: it fills the class vfuncs below and, where its output formats
// differ from the input's, `transform_format_caps`.
//
// Frames per memory kind, CUDA backend (process-type filters):
//   CUDA in, CUDA out       the kernels read and write GStreamer's CUDA memory
//                           in place; no copy, no wait between our elements
//   system in, CUDA out     one upload into a device frame
//   CUDA in, system out     one download, waited for before the push
//   system in, system out   upload, kernels, download; with frame-overlap the
//                           upload of frame N+1 runs while frame N is
//                           processed and downloaded, frame N leaving when
//                           N+1 arrives
#pragma once

#include <gst/gst.h>
#include <gst/video/gstvideofilter.h>
#include <gst/video/video.h>

#include <string>

#include "cudadiff/frame.h"
#include "cudadiff/runtime.h"
#include "gstcudadiffutils.h"

G_BEGIN_DECLS

#define GST_TYPE_CUDADIFF_FILTER (gst_cudadiff_filter_get_type())
G_DECLARE_DERIVABLE_TYPE(GstCudaDiffFilter, gst_cudadiff_filter, GST, CUDADIFF_FILTER,
                         GstVideoFilter)

struct _GstCudaDiffFilterClass {
  GstVideoFilterClass parent_class;

  // Creates the core operation for the negotiated formats (both infos are
  // formats the core knows). Called with the context active, after the
  // previous operation was torn down. Throws cudadiff::Error on failure.
  void (*setup)(GstCudaDiffFilter *filter, const GstVideoInfo *in_info,
                const GstVideoInfo *out_info, const cudadiff::Context &ctx);
  // Processes one frame. With the CUDA backend `in` and `out` are device
  // frames (work is queued on the context's stream; the base class orders
  // and waits), with the CPU backend the mapped buffers. Throws
  // cudadiff::Error.
  void (*process)(GstCudaDiffFilter *filter, const cudadiff::FrameView &in,
                  const cudadiff::FrameView &out);
  // Drops the operation (caps change, stop). Must not throw.
  void (*teardown)(GstCudaDiffFilter *filter);
  // Forgets history after a flush (optional).
  void (*reset)(GstCudaDiffFilter *filter);

  // In-place filters (optional, instead of `process`): modify the frame where
  // it is, so the output buffer is the input buffer. `frame` is the mapped
  // buffer: device memory when `on_device` (CUDA memory caps: the work is
  // queued on the context's stream), else host memory with every backend
  // (the operation moves to the device and back only what it needs, on the
  // context's stream, and the base class waits once). Such a subclass leaves
  // `process` NULL and calls gst_base_transform_set_in_place(TRUE) in its
  // instance init; no device frames are allocated for it. Never called in
  // passthrough. Throws cudadiff::Error.
  void (*process_ip)(GstCudaDiffFilter *filter, const cudadiff::FrameView &frame,
                     gboolean on_device);

  // The formats of the other side (optional; NULL: the same formats).
  // `caps` is system-memory caps; the result too: the base class adds the
  // memory kinds. Same contract as GstBaseTransform::transform_caps.
  GstCaps *(*transform_format_caps)(GstBaseTransform *trans, GstPadDirection direction,
                                    GstCaps *caps, GstCaps *filter);

  // A frame's results are on the host (optional): called after the base
  // class waited for the frame, before it is pushed, in frame order, with
  // its timestamp. Frames that stay on the GPU (CUDA memory between our
  // elements) are not waited for: they get this call at the next frame when
  // their work has finished by then, unless process() asked for a wait with
  // gst_cudadiff_filter_need_host_results().
  void (*finish_frame)(GstCudaDiffFilter *filter, GstClockTime pts);
  // The stream ends (EOS), optional: called after the last frame's
  // finish_frame (if that frame stayed on the GPU, it gets its call then)
  // and before EOS goes downstream, with the context active; posts what the
  // frames' results left pending. Throws cudadiff::Error.
  void (*drain)(GstCudaDiffFilter *filter);

  // Set in class_init by filters that compare a frame with the previous one:
  // then the device input frame of one process() call stays valid and
  // unmodified during the next call, and input is always uploaded (no
  // zero-copy of mapped memory on integrated GPUs).
  gboolean keeps_previous_input;
  // Set in class_init by filters whose results come back to the host with
  // each frame (histograms, counts): their frames never overlap.
  gboolean host_results;

  gpointer _reserved[GST_PADDING];
};

// The context between start and stop (nullptr otherwise).
const cudadiff::Context *gst_cudadiff_filter_get_context(GstCudaDiffFilter *filter);
// The backend in use after start.
cudadiff::Backend gst_cudadiff_filter_get_backend(GstCudaDiffFilter *filter);
// An element in place that passes `buffer` on untouched (pass-through):
// when upstream marked it as still being written on the GPU (it was told,
// while the element worked, that the element orders its work after such
// frames), it is waited for unless downstream honours the mark too. Call
// gst_cudadiff_filter_passthrough_changed() at each switch.
void gst_cudadiff_filter_pass_through(GstCudaDiffFilter *filter, GstBuffer *buffer);
void gst_cudadiff_filter_passthrough_changed(GstCudaDiffFilter *filter);
// From process(): this frame's results must be on the host before it leaves
// (the base class waits for it and calls finish_frame).
void gst_cudadiff_filter_need_host_results(GstCudaDiffFilter *filter);
// From process(): whether the frame has two fields (its caps say
// interlace-mode=interleaved, or mixed and the buffer is flagged interlaced).
gboolean gst_cudadiff_filter_frame_is_interlaced(GstCudaDiffFilter *filter);
// From setup(): refuses the negotiated caps with an error that says why
// (`message`, shown to the user) and what to do (`debug`); throws the
// cudadiff::Error that ends setup(), and the base class posts no second one.
[[noreturn]] void gst_cudadiff_filter_refuse_caps(GstCudaDiffFilter *filter,
                                                  const std::string &message,
                                                  const std::string &debug);
// Caps of every format the core knows, restricted to `formats` (a
// GST_VIDEO_CAPS_MAKE-style format list string such as "{ BGR, RGB }"), in
// system memory.
GstCaps *gst_cudadiff_filter_make_caps(const char *formats);
// Adds "sink" and "src" always-pad templates with those format lists, in
// CUDA memory (when built with it) and system memory.
void gst_cudadiff_filter_add_pad_templates(GstElementClass *klass, const char *sink_formats,
                                           const char *src_formats);

G_END_DECLS
