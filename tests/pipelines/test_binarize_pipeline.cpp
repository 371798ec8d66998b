// videotestsrc ! cudabinarize ! fakesink by gst_parse_launch: frames flow,
// every output byte is black or white (or neutral chroma), one element
// message per frame, last-threshold is set, and upstream writes into the
// pinned pool the element proposes.
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "gst_test.h"

namespace {

struct ProbeData {
  std::atomic<int> buffers{0};
  std::atomic<int> pinned_or_host{0};
  std::atomic<int> bad_bytes{0};
  GstVideoInfo info;
  bool have_info = false;
};

GstPadProbeReturn on_input(GstPad *, GstPadProbeInfo *info, gpointer user_data) {
  auto *d = static_cast<ProbeData *>(user_data);
  GstMemory *mem = gst_buffer_peek_memory(GST_PAD_PROBE_INFO_BUFFER(info), 0);
  d->buffers++;
  if (gst_memory_is_type(mem, "CudaDiffPinned") || gst_memory_is_type(mem, "CudaDiffHost"))
    d->pinned_or_host++;
  return GST_PAD_PROBE_OK;
}

GstPadProbeReturn on_output(GstPad *pad, GstPadProbeInfo *info, gpointer user_data) {
  auto *d = static_cast<ProbeData *>(user_data);
  if (!d->have_info) {
    GstCaps *caps = gst_pad_get_current_caps(pad);
    gst_video_info_from_caps(&d->info, caps);
    gst_caps_unref(caps);
    d->have_info = true;
  }
  d->buffers++;
  GstVideoFrame f;
  if (!gst_video_frame_map(&f, &d->info, GST_PAD_PROBE_INFO_BUFFER(info), GST_MAP_READ)) {
    d->bad_bytes++;
    return GST_PAD_PROBE_OK;
  }
  for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES(&f); ++p) {
    const int comp = static_cast<int>(p);
    const int row = GST_VIDEO_FRAME_COMP_WIDTH(&f, comp) * GST_VIDEO_FRAME_COMP_PSTRIDE(&f, comp);
    for (int y = 0; y < GST_VIDEO_FRAME_COMP_HEIGHT(&f, comp); ++y) {
      const guint8 *r = gst_test::pixel(&f, p, 0, y);
      for (int x = 0; x < row; ++x) {
        const bool ok = p == 0 ? (r[x] == 0 || r[x] == 255) : r[x] == 128;
        if (!ok) d->bad_bytes++;
      }
    }
  }
  gst_video_frame_unmap(&f);
  return GST_PAD_PROBE_OK;
}

struct RunResult {
  int in_buffers = 0, out_buffers = 0, pooled = 0, bad_bytes = 0, messages = 0;
  gint last_threshold = -2;
  std::string error;
};

RunResult run(const std::string &description) {
  RunResult result;
  GError *err = nullptr;
  GstElement *pipeline = gst_parse_launch(description.c_str(), &err);
  if (!pipeline) {
    result.error = err ? err->message : "parse failed";
    g_clear_error(&err);
    return result;
  }
  GstElement *bin = gst_bin_get_by_name(GST_BIN(pipeline), "bin");
  GstPad *sinkpad = gst_element_get_static_pad(bin, "sink");
  GstPad *srcpad = gst_element_get_static_pad(bin, "src");
  ProbeData in_data, out_data;
  gst_pad_add_probe(sinkpad, GST_PAD_PROBE_TYPE_BUFFER, on_input, &in_data, nullptr);
  gst_pad_add_probe(srcpad, GST_PAD_PROBE_TYPE_BUFFER, on_output, &out_data, nullptr);

  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  GstBus *bus = gst_element_get_bus(pipeline);
  for (;;) {
    GstMessage *msg = gst_bus_timed_pop_filtered(
        bus, 30 * GST_SECOND,
        static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_ELEMENT));
    if (!msg) {
      result.error = "timeout";
      break;
    }
    const GstMessageType type = GST_MESSAGE_TYPE(msg);
    if (type == GST_MESSAGE_ELEMENT &&
        gst_structure_has_name(gst_message_get_structure(msg), "cudabinarize"))
      result.messages++;
    if (type == GST_MESSAGE_ERROR) {
      GError *gerr = nullptr;
      gst_message_parse_error(msg, &gerr, nullptr);
      result.error = gerr->message;
      g_error_free(gerr);
    }
    gst_message_unref(msg);
    if (type != GST_MESSAGE_ELEMENT) break;
  }
  gst_element_set_state(pipeline, GST_STATE_NULL);
  g_object_get(bin, "last-threshold", &result.last_threshold, nullptr);
  result.in_buffers = in_data.buffers;
  result.pooled = in_data.pinned_or_host;
  result.out_buffers = out_data.buffers;
  result.bad_bytes = out_data.bad_bytes;
  gst_object_unref(sinkpad);
  gst_object_unref(srcpad);
  gst_object_unref(bin);
  gst_object_unref(bus);
  gst_object_unref(pipeline);
  return result;
}

}  // namespace

TEST(BinarizePipeline, BgrxToGray8WithMessages) {
  const RunResult r = run(
      "videotestsrc num-buffers=20 pattern=smpte ! video/x-raw,format=BGRx,width=320,height=240 ! "
      "cudabinarize name=bin post-messages=true ! video/x-raw,format=GRAY8 ! fakesink");
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.in_buffers, 20);
  EXPECT_EQ(r.out_buffers, 20);
  EXPECT_EQ(r.pooled, 20) << "upstream did not write into the proposed pinned pool";
  EXPECT_EQ(r.bad_bytes, 0);
  EXPECT_EQ(r.messages, 20);
  EXPECT_GE(r.last_threshold, 0);
  EXPECT_LE(r.last_threshold, 255);
}

TEST(BinarizePipeline, I420KeepsItsFormat) {
  const RunResult r = run(
      "videotestsrc num-buffers=10 pattern=ball ! video/x-raw,format=I420,width=321,height=241 ! "
      "cudabinarize name=bin method=two-peaks invert=true ! video/x-raw,format=I420 ! fakesink");
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.out_buffers, 10);
  EXPECT_EQ(r.bad_bytes, 0);
  EXPECT_EQ(r.messages, 0);  // post-messages defaults to false
  // The ball pattern is black with a white ball; in I420's limited-range luma
  // they are Y = 16 and Y = 235: peaks 16 and 235 -> (16 + 235) / 2 = 125.
  EXPECT_EQ(r.last_threshold, 125);
}

TEST(BinarizePipeline, ThroughVideoconvert) {
  const RunResult r = run(
      "videotestsrc num-buffers=5 pattern=snow ! video/x-raw,width=160,height=120 ! videoconvert ! "
      "cudabinarize name=bin method=fixed threshold=100 ! videoconvert ! "
      "video/x-raw,format=RGBA ! fakesink");
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.out_buffers, 5);
  EXPECT_EQ(r.bad_bytes, 0);
  EXPECT_EQ(r.last_threshold, 100);
}
