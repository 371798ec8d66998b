// What every element shares besides memory: the `backend` enum and the
// device-id property, opening a core Context with GStreamer error reporting,
// and mapping GStreamer video frames to core frame views.
#pragma once

#include <gst/base/gstbasetransform.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cudadiff/frame.h"
#include "cudadiff/runtime.h"

// Called once from plugin_init (debug categories).
void gst_cudadiff_common_init(void);

typedef enum {
  GST_CUDADIFF_BACKEND_AUTO = 0,
  GST_CUDADIFF_BACKEND_CUDA = 1,
  GST_CUDADIFF_BACKEND_CPU = 2,
} GstCudaDiffBackend;

#define GST_TYPE_CUDADIFF_BACKEND (gst_cudadiff_backend_get_type())
GType gst_cudadiff_backend_get_type(void);

#define GST_CUDADIFF_DEFAULT_BACKEND GST_CUDADIFF_BACKEND_AUTO
#define GST_CUDADIFF_DEFAULT_DEVICE_ID 0

// Installs `backend` and `device-id` with the given property ids (ready-state
// mutable, documented the same way on every element), and the read-only
// `active-backend` (gst_cudadiff_active_backend()).
void gst_cudadiff_install_backend_properties(GObjectClass *klass, guint backend_prop_id,
                                             guint device_id_prop_id, guint active_backend_prop_id);
// The backend an element runs on since its start (cuda or cpu; auto before
// its start and after its stop): remembered by
// gst_cudadiff_open_shared_context(), which every element opens its context
// with, and forgotten at stop.
GstCudaDiffBackend gst_cudadiff_active_backend(GstElement *element);
void gst_cudadiff_forget_backend(GstElement *element);
void gst_cudadiff_remember_backend(GstElement *element, const cudadiff::Context *ctx);

// Posts an ERROR message unless the last one posted through `last` had
// the same `key`, and keeps `key` there: a base class that tries the same
// caps again for each buffer that follows would repeat a refusal, and an
// application should see one problem as one error. The caller clears
// `last` once the problem is gone.
void gst_cudadiff_post_error_once(GstElement *element, std::string *last, std::string key,
                                  GQuark domain, gint code, const std::string &text,
                                  const std::string &debug, const char *file, const char *function,
                                  int line);

// Properties under a GstController take their values at the stream time of
// `pts` in `segment` (gst_object_sync_values()), in a segment in time only:
// an appsrc left in bytes, its default, times its buffers all the same.
void gst_cudadiff_sync_controlled(GstObject *object, const GstSegment *segment, GstClockTime pts);

// Opens the context the element asked for: auto = CUDA when device-id names a
// usable device, else the CPU (an INFO line says which); cuda without a usable
// device posts GST_ELEMENT_ERROR (RESOURCE, "no CUDA device ...") and returns
// nullptr; cpu always works.
std::unique_ptr<cudadiff::Context> gst_cudadiff_open_context(GstElement *element,
                                                             GstCudaDiffBackend backend,
                                                             gint device_id);

// GstVideoFormat <-> core format; Unknown / GST_VIDEO_FORMAT_UNKNOWN when the
// core does not know it.
cudadiff::VideoFormat gst_cudadiff_format_from_gst(GstVideoFormat format);
GstVideoFormat gst_cudadiff_format_to_gst(cudadiff::VideoFormat format);

// A view of a mapped frame (its mapping's pointers, in host memory or, for
// CUDA memory, on the device; the frame's own strides) of the size of
// `info`, the caps it was mapped with: a GstVideoMeta may describe a larger
// frame (a decoder's coded size, 1920x1088 under 1920x1080 caps), whose
// top-left part is the picture.
cudadiff::FrameView gst_cudadiff_frame_view(const GstVideoFrame *frame, const GstVideoInfo *info);

// Posts the element error for a failed core call, naming what was being done.
void gst_cudadiff_post_error(GstElement *element, const char *doing, const cudadiff::Error &err);

// The error that gst_cudadiff_post_error posts, described: its domain and
// code, its text and its debug text (for callers that post it themselves).
struct GstCudaDiffErrorText {
  GQuark domain;
  gint code;
  std::string text;
  std::string debug;
};
GstCudaDiffErrorText gst_cudadiff_error_text(const char *doing, const cudadiff::Error &err);

// change_state of the codec elements: `open` (the backend; it posts its own
// error) runs before `parent_class`'s READY -> PAUSED, not in the base
// class's start(), whose failure makes GstVideoEncoder and GstVideoDecoder
// post a second, generic error ("Could not initialize supporting library")
// that says nothing about what to do. `close` frees what `open` made when
// the change fails (the base class calls stop() only on PAUSED -> READY,
// after a start that succeeded).
GstStateChangeReturn gst_cudadiff_change_state_opening(GstElement *element,
                                                       GstStateChange transition,
                                                       GstElementClass *parent_class,
                                                       bool (*open)(GstElement *),
                                                       void (*close)(GstElement *));

// Caps transformation by formats: each structure of `caps` is copied with its
// `format` replaced by the formats `map` gives for each of its formats (in
// order, without repeats); a structure without a format field stands for every
// format in `all`. Used by elements whose output format depends on the input's.
GstCaps *gst_cudadiff_transform_formats(
    GstCaps *caps, const std::vector<GstVideoFormat> &all,
    const std::function<void(GstVideoFormat, std::vector<GstVideoFormat> &)> &map);

// transform_caps of an element whose output is GRAY8 (preferred, listed
// first) or, where `keeps_format` says so, the input's own format: sink
// format f gives { GRAY8, f }; a GRAY8 output can come from every sink format.
// `filter` is applied as GstBaseTransform's vfunc must.
GstCaps *gst_cudadiff_transform_caps_gray_or_same(
    GstBaseTransform *trans, GstPadDirection direction, GstCaps *caps, GstCaps *filter,
    const std::vector<GstVideoFormat> &sink_formats,
    const std::function<bool(GstVideoFormat)> &keeps_format);

// Whether the element upstream of `sinkpad` is live (a latency query);
// unknown counts as live.
bool gst_cudadiff_upstream_is_live(GstPad *sinkpad);

// Whether upstream of `sinkpad` seeks in bytes within a known size (a file,
// also through a queue).
bool gst_cudadiff_upstream_is_file(GstPad *sinkpad);

// A STREAM_START event's stream-id against `last`, the id of the last one
// an element saw (empty: none since its start): true when it is another
// stream's (`last` not empty and the ids differ). `last` becomes the event's
// id either way; the same id again (a relinked pad) is the same stream.
bool gst_cudadiff_another_stream(std::string *last, GstEvent *event);

// The present of a stream received as it comes (upstream of `sinkpad` not
// a file), for a restarted sender's timeline (stream::Timeline::place()):
// where `segment` (in time) is now for a PLAYING element with a clock, its
// running time as a position of the segment. GST_CLOCK_TIME_NONE (which is
// stream::kNoTime) for a file, whose timeline its seeks follow, and when not
// playing, without a clock, in another format or before the segment.
GstClockTime gst_cudadiff_live_present(GstElement *element, GstPad *sinkpad,
                                       const GstSegment *segment);

// The flow for new caps that could not be set on `srcpad`: FLUSHING when
// the pad flushes (pushing caps fails there: a seek or a stop meanwhile,
// no negotiation error), else NOT_NEGOTIATED.
GstFlowReturn gst_cudadiff_caps_failed_flow(GstPad *srcpad);
// Whether fps_n/fps_d gives no framerate: 0/1 (variable), or either <= 0.
bool gst_cudadiff_framerate_unknown(gint fps_n, gint fps_d);
// The framerate assumed for the latency of frames held where the caps give
// none (framerate 0/1: variable).
constexpr gint kUnknownFramerateFps = 25;
// The latency of frame-overlap: `frames_held` frame intervals of
// fps_n/fps_d (of kUnknownFramerateFps where either is <= 0); 0 for none held.
GstClockTime gst_cudadiff_overlap_latency(int frames_held, gint fps_n, gint fps_d);
// A GstVideoEncoder's or GstVideoDecoder's latency with frame-overlap
// (gst_cudadiff_overlap_latency()). The base class adds it to LATENCY queries (min and
// max) and posts a latency message when it changes.
void gst_cudadiff_set_overlap_latency(GstElement *codec, int frames_held, gint fps_n, gint fps_d);

// The last segment a stream element was sent, to tell a new segment from
// the same one sent again (as an input-selector does when it switches back
// to a pad): upstream's times may start again in a new one only.
class GstCudaDiffLastSegment {
 public:
  // Remembers `segment`; true when it is not the one remembered (or none
  // is, since the start or forget()).
  bool is_new(const GstSegment *segment) {
    const bool differs = !have_ || !gst_segment_is_equal(segment, &segment_);
    gst_segment_copy_into(segment, &segment_);
    have_ = true;
    return differs;
  }
  void forget() { have_ = false; }

 private:
  GstSegment segment_;
  bool have_ = false;
};

// The packed RGB family, in the order caps list them.
const std::vector<GstVideoFormat> &gst_cudadiff_packed_rgb_formats(void);
