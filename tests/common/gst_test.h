// Helpers for element and pipeline tests (GStreamer side). Tests load the
// plugin from the build tree (GST_PLUGIN_PATH_1_0, set by meson) and never
// link plugins/common: its GTypes belong to the plugin module alone.
#pragma once

#include <gst/gst.h>
#include <gst/video/video.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

namespace gst_test {

// gst_init, fatal criticals, and a check that `element` comes from the build
// tree's plugin. Call from main().
void init(int *argc, char ***argv);

// Lets a warning GStreamer's own elements emit, and that is no bug of this
// project, through init()'s fatal rule: a warning whose text contains every
// string of one call is printed and not fatal. Use sparingly, with a comment
// saying where the warning comes from.
void tolerate_warning(std::vector<std::string> substrings);

// Caps string for raw video.
std::string raw_caps(const char *format, int width, int height, int fps = 30);

// A buffer of `info` whose pixels come from `fill(frame)` (map of the frame
// is done for you); pts and duration from `index` at 30 fps.
GstBuffer *make_buffer(const GstVideoInfo &info, const std::function<void(GstVideoFrame *)> &fill,
                       int index = 0);

// A buffer of `info` whose every plane is random bytes from `gen`, each
// row's padding to its stride included; pts and duration as make_buffer().
GstBuffer *random_buffer(const GstVideoInfo &info, std::mt19937 &gen, int index = 0);

// A buffer of `memories` (their sizes, each filled with `value`) with a
// GstVideoMeta for `format` at width x height that gives the planes'
// `offsets` and `strides` as they are, fitting the buffer or not; pts and
// duration as make_buffer() for index 0.
GstBuffer *buffer_with_meta(GstVideoFormat format, int width, int height,
                            const std::vector<size_t> &memories, const std::vector<gsize> &offsets,
                            const std::vector<gint> &strides, guint8 value = 0x40);

// Layouts of an I420 33x17 frame (planes of 33x17, 17x9 and 17x9 bytes,
// 867 in all) in buffer_with_meta(): three that fit their memories, and
// three whose GstVideoMeta reaches past the memory that holds a plane's
// first byte (the third plane 77 bytes past the end, a stride of G_MAXINT,
// the second plane across two memories), which the elements refuse.
struct MetaLayout {
  const char *what;
  std::vector<size_t> memories;
  std::vector<gsize> offsets;
  std::vector<gint> strides;
  bool fits;
};
const std::vector<MetaLayout> &i420_33x17_meta_layouts();
// A filter `factory` (set up by `setup`, may be null) given each of those
// layouts in a harness with I420 33x17 caps on both sides: those that fit
// give a frame, the others GST_FLOW_ERROR with one error whose details say
// that the plane reaches past its memory (gtest expectations).
void expect_filter_refuses_meta_past_memory(const char *factory,
                                            const std::function<void(GstElement *)> &setup);

// The byte at (x_byte, y) of plane `plane` of a mapped frame.
inline guint8 *pixel(GstVideoFrame *frame, int plane, int x_byte, int y) {
  return static_cast<guint8 *>(GST_VIDEO_FRAME_PLANE_DATA(frame, plane)) +
         y * GST_VIDEO_FRAME_PLANE_STRIDE(frame, plane) + x_byte;
}

// Maps `buffer` with `info` for reading, calls `check`, unmaps.
void read_frame(GstBuffer *buffer, const GstVideoInfo &info,
                const std::function<void(GstVideoFrame *)> &check);

// TRUE when a CUDA device is usable (the core's view, no GStreamer).
bool have_cuda_device();

// `text` cut at each `separator`.
std::vector<std::string> split(const std::string &text, char separator);

// An error or warning message's text and debug text ("" without one).
struct BusText {
  std::string message, debug;
};
// The texts of an ERROR or WARNING message.
BusText bus_text(GstMessage *message);
// Takes the ERROR or WARNING messages (`type`) waiting on `bus`, oldest
// first, and returns their texts.
std::vector<BusText> pop_texts(GstBus *bus, GstMessageType type);

// Runs `pipeline` (gst_parse_launch syntax) to EOS or ERROR within
// `timeout_s`; returns the error message ("" on EOS) and, when `error_out`,
// the GError (caller frees).
std::string run_pipeline(const std::string &pipeline, int timeout_s = 30,
                         GError **error_out = nullptr);

}  // namespace gst_test
