// GstCudaDiffFilter: the base class of every gst-cudadiff video filter.
//
// It owns the `backend` and `device-id` properties, the core Context (CUDA
// stream) from start to stop, device frames allocated once per negotiated
// caps, the upload of each input and the download of each output, pinned
// buffer pools offered upstream and used downstream, and error reporting. A
// subclass maps caps and properties to one core operation: it fills the class
// vfuncs below and, where its output caps differ from the input's, overrides
// GstBaseTransform's transform_caps/fixate_caps.
#pragma once

#include <gst/gst.h>
#include <gst/video/gstvideofilter.h>
#include <gst/video/video.h>

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
  // frames (work is queued on the context's stream; the base class waits),
  // with the CPU backend the mapped buffers. Throws cudadiff::Error.
  void (*process)(GstCudaDiffFilter *filter, const cudadiff::FrameView &in,
                  const cudadiff::FrameView &out);
  // Drops the operation (caps change, stop). Must not throw.
  void (*teardown)(GstCudaDiffFilter *filter);
  // Forgets history after a flush (optional).
  void (*reset)(GstCudaDiffFilter *filter);

  // In-place filters (optional, instead of `process`): modify the frame where
  // it is, so the output buffer is the input buffer. `frame` is the mapped
  // buffer (host memory) with every backend: the operation moves to the
  // device and back only what it needs, on the context's stream, and the base
  // class waits once. Such a subclass leaves `process` NULL and calls
  // gst_base_transform_set_in_place(TRUE) in its instance init; no device
  // frames are allocated for it. Never called in passthrough. Throws
  // cudadiff::Error.
  void (*process_ip)(GstCudaDiffFilter *filter, const cudadiff::FrameView &frame);

  // Set in class_init by filters that compare a frame with the previous one:
  // then the device input frame of one process() call stays valid and
  // unmodified during the next call (two input frames alternate), and input
  // is always uploaded (no zero-copy of mapped memory on integrated GPUs).
  gboolean keeps_previous_input;

  gpointer _reserved[GST_PADDING];
};

// The context between start and stop (nullptr otherwise).
const cudadiff::Context *gst_cudadiff_filter_get_context(GstCudaDiffFilter *filter);
// The backend in use after start.
cudadiff::Backend gst_cudadiff_filter_get_backend(GstCudaDiffFilter *filter);
// Caps of every format the core knows, restricted to `formats` (a
// GST_VIDEO_CAPS_MAKE-style format list string such as "{ BGR, RGB }").
GstCaps *gst_cudadiff_filter_make_caps(const char *formats);
// Adds "sink" and "src" always-pad templates with those format lists.
void gst_cudadiff_filter_add_pad_templates(GstElementClass *klass, const char *sink_formats,
                                           const char *src_formats);

G_END_DECLS
