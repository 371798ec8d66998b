// videotestsrc ! cudagrayscale ! fakesink by gst_parse_launch: frames flow,
// values are gray, and upstream writes into the pinned pool the element
// proposes (page-locked memory when a device exists).
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "gst_test.h"

namespace {

struct ProbeData {
  std::atomic<int> buffers{0};
  std::atomic<int> pinned{0};
  std::atomic<int> host_fallback{0};
  std::string first_mem_type;
};

GstPadProbeReturn on_buffer(GstPad *, GstPadProbeInfo *info, gpointer user_data) {
  auto *d = static_cast<ProbeData *>(user_data);
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER(info);
  GstMemory *mem = gst_buffer_peek_memory(buf, 0);
  const char *type = mem->allocator ? mem->allocator->mem_type : "(none)";
  if (d->buffers.fetch_add(1) == 0) d->first_mem_type = type;
  if (gst_memory_is_type(mem, "CudaDiffPinned")) d->pinned++;
  if (gst_memory_is_type(mem, "CudaDiffHost")) d->host_fallback++;
  return GST_PAD_PROBE_OK;
}

}  // namespace

TEST(GrayscalePipeline, UpstreamWritesIntoPinnedPool) {
  GError *err = nullptr;
  GstElement *pipeline = gst_parse_launch(
      "videotestsrc num-buffers=20 pattern=smpte ! video/x-raw,format=BGRx,width=320,height=240 ! "
      "cudagrayscale name=gray ! video/x-raw,format=GRAY8 ! fakesink name=sink",
      &err);
  ASSERT_NE(pipeline, nullptr) << (err ? err->message : "");
  GstElement *gray = gst_bin_get_by_name(GST_BIN(pipeline), "gray");
  GstPad *sinkpad = gst_element_get_static_pad(gray, "sink");
  GstPad *srcpad = gst_element_get_static_pad(gray, "src");
  ProbeData in_data, out_data;
  gst_pad_add_probe(sinkpad, GST_PAD_PROBE_TYPE_BUFFER, on_buffer, &in_data, nullptr);
  gst_pad_add_probe(srcpad, GST_PAD_PROBE_TYPE_BUFFER, on_buffer, &out_data, nullptr);

  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  GstBus *bus = gst_element_get_bus(pipeline);
  GstMessage *msg = gst_bus_timed_pop_filtered(
      bus, 30 * GST_SECOND, static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
  // (stopped first: the probes write into this function's locals)
  if (!msg) gst_element_set_state(pipeline, GST_STATE_NULL);
  ASSERT_NE(msg, nullptr) << "timeout";
  EXPECT_EQ(GST_MESSAGE_TYPE(msg), GST_MESSAGE_EOS);
  gst_message_unref(msg);
  gst_element_set_state(pipeline, GST_STATE_NULL);

  EXPECT_EQ(in_data.buffers.load(), 20);
  EXPECT_EQ(out_data.buffers.load(), 20);
  if (gst_test::have_cuda_device()) {
    EXPECT_EQ(in_data.pinned.load(), 20) << "upstream buffers: " << in_data.first_mem_type;
    EXPECT_EQ(out_data.pinned.load(), 20) << "output buffers: " << out_data.first_mem_type;
  } else {
    // No device: the same pool, with system memory behind it.
    EXPECT_EQ(in_data.host_fallback.load(), 20) << "upstream buffers: " << in_data.first_mem_type;
    EXPECT_EQ(out_data.host_fallback.load(), 20) << "output buffers: " << out_data.first_mem_type;
  }
  gst_object_unref(sinkpad);
  gst_object_unref(srcpad);
  gst_object_unref(gray);
  gst_object_unref(bus);
  gst_object_unref(pipeline);
}
