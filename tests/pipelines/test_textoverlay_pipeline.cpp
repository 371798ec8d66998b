// cudatextoverlay in real pipelines (gst_parse_launch): it blends in place
// into the buffers upstream allocates as downstream says (it passes the
// ALLOCATION query on: the buffer upstream writes is the one that goes
// downstream); with an empty text it passes buffers through unchanged;
// switching the text off and on while playing renegotiates the allocation
// each way (on system memory downstream answers both times).
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "gst_test.h"

namespace {

struct Seen {
  GstBuffer *buffer;  // pointer only, for identity
  std::string mem_type;
  guint32 checksum;
};

struct ProbeData {
  std::mutex lock;
  std::vector<Seen> seen;
  GstElement *overlay = nullptr;
  bool toggle = false;  // text off at buffer 5, on again at buffer 12
};

guint32 checksum(GstBuffer *buf) {
  GstMapInfo map;
  gst_buffer_map(buf, &map, GST_MAP_READ);
  guint32 h = 2166136261u;
  for (gsize i = 0; i < map.size; ++i) h = (h ^ map.data[i]) * 16777619u;
  gst_buffer_unmap(buf, &map);
  return h;
}

GstPadProbeReturn on_buffer(GstPad *, GstPadProbeInfo *info, gpointer user_data) {
  auto *d = static_cast<ProbeData *>(user_data);
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER(info);
  GstMemory *mem = gst_buffer_peek_memory(buf, 0);
  size_t index;
  {
    std::lock_guard<std::mutex> g(d->lock);
    d->seen.push_back({buf, mem->allocator ? mem->allocator->mem_type : "(none)", checksum(buf)});
    index = d->seen.size() - 1;
  }
  // Property changes from the streaming thread, between two buffers.
  if (d->toggle && index == 4) g_object_set(d->overlay, "text", "", nullptr);
  if (d->toggle && index == 11) g_object_set(d->overlay, "text", "back on", nullptr);
  return GST_PAD_PROBE_OK;
}

bool ours(const std::string &mem_type) {
  return mem_type == "CudaDiffPinned" || mem_type == "CudaDiffHost";
}

struct PipelineRun {
  std::vector<Seen> in, out;
  guint64 renders = 0;
  std::string result;
};

PipelineRun run_pipeline(const std::string &text, bool toggle, int buffers) {
  PipelineRun r;
  GError *err = nullptr;
  const std::string desc = "videotestsrc num-buffers=" + std::to_string(buffers) +
                           " pattern=smpte ! video/x-raw,format=BGRx,width=320,height=240 ! "
                           "cudatextoverlay name=ov text=\"" +
                           text + "\" ! fakesink";
  GstElement *pipeline = gst_parse_launch(desc.c_str(), &err);
  if (!pipeline) {
    r.result = err ? err->message : "parse failed";
    g_clear_error(&err);
    return r;
  }
  GstElement *ov = gst_bin_get_by_name(GST_BIN(pipeline), "ov");
  GstPad *sinkpad = gst_element_get_static_pad(ov, "sink");
  GstPad *srcpad = gst_element_get_static_pad(ov, "src");
  ProbeData in_data, out_data;
  in_data.overlay = ov;
  in_data.toggle = toggle;
  gst_pad_add_probe(sinkpad, GST_PAD_PROBE_TYPE_BUFFER, on_buffer, &in_data, nullptr);
  gst_pad_add_probe(srcpad, GST_PAD_PROBE_TYPE_BUFFER, on_buffer, &out_data, nullptr);

  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  GstBus *bus = gst_element_get_bus(pipeline);
  GstMessage *msg = gst_bus_timed_pop_filtered(
      bus, 30 * GST_SECOND, static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
  if (!msg) {
    r.result = "timeout";
  } else {
    if (GST_MESSAGE_TYPE(msg) == GST_MESSAGE_ERROR) {
      GError *gerr = nullptr;
      gst_message_parse_error(msg, &gerr, nullptr);
      r.result = gerr->message;
      g_error_free(gerr);
    }
    gst_message_unref(msg);
  }
  gst_element_set_state(pipeline, GST_STATE_NULL);
  g_object_get(ov, "render-count", &r.renders, nullptr);
  r.in = in_data.seen;
  r.out = out_data.seen;
  gst_object_unref(sinkpad);
  gst_object_unref(srcpad);
  gst_object_unref(ov);
  gst_object_unref(bus);
  gst_object_unref(pipeline);
  return r;
}

}  // namespace

// Text on: every buffer comes from where downstream (fakesink) says, not
// from a pool of ours, and leaves as the same buffer (in place), changed;
// the text is rendered once.
TEST(TextOverlayPipeline, BlendsInPlaceIntoDownstreamsBuffers) {
  const PipelineRun r = run_pipeline("gst-cudadiff 59.94 fps", false, 20);
  ASSERT_EQ(r.result, "");
  ASSERT_EQ(r.in.size(), 20u);
  ASSERT_EQ(r.out.size(), 20u);
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_FALSE(ours(r.in[i].mem_type)) << "buffer " << i << ": " << r.in[i].mem_type;
    EXPECT_EQ(r.in[i].buffer, r.out[i].buffer) << "buffer " << i << " not in place";
    EXPECT_NE(r.in[i].checksum, r.out[i].checksum) << "buffer " << i << " unchanged";
  }
  EXPECT_EQ(r.renders, 1u);
}

// Empty text: pass-through; upstream allocates as downstream (fakesink)
// answers, not from our pool; nothing is rendered or changed.
TEST(TextOverlayPipeline, EmptyTextPassesThrough) {
  const PipelineRun r = run_pipeline("", false, 20);
  ASSERT_EQ(r.result, "");
  ASSERT_EQ(r.in.size(), 20u);
  ASSERT_EQ(r.out.size(), 20u);
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_FALSE(ours(r.in[i].mem_type)) << "buffer " << i << ": " << r.in[i].mem_type;
    EXPECT_EQ(r.in[i].buffer, r.out[i].buffer);
    EXPECT_EQ(r.in[i].checksum, r.out[i].checksum);
  }
  EXPECT_EQ(r.renders, 0u);
}

// Off at buffer 5, on again at 12, from the streaming thread: the buffers in
// between pass unchanged, upstream allocates as downstream says throughout,
// and every buffer arrives.
TEST(TextOverlayPipeline, TextOffAndOnWhilePlaying) {
  const PipelineRun r = run_pipeline("on", true, 30);
  ASSERT_EQ(r.result, "");
  ASSERT_EQ(r.in.size(), 30u);
  ASSERT_EQ(r.out.size(), 30u);
  for (size_t i = 0; i < 30; ++i) {
    EXPECT_EQ(r.in[i].buffer, r.out[i].buffer) << i;
    const bool off = i >= 4 && i < 11;  // set in the probe of buffer 4 and 11
    EXPECT_EQ(r.in[i].checksum == r.out[i].checksum, off) << "buffer " << i;
  }
  EXPECT_FALSE(ours(r.in[0].mem_type)) << r.in[0].mem_type;
  EXPECT_FALSE(ours(r.in[9].mem_type)) << "pass-through: " << r.in[9].mem_type;
  EXPECT_FALSE(ours(r.in[29].mem_type)) << "blending again: " << r.in[29].mem_type;
  EXPECT_EQ(r.renders, 2u);
}
