// cudagauss in real pipelines (gst_parse_launch): frames flow in every
// family of formats, chained filters work, and a flat frame comes out flat.
#include <gst/video/video.h>
#include <gtest/gtest.h>

#include <string>

#include "gst_test.h"

TEST(GaussPipeline, FormatsFlowToEos) {
  for (const char *fmt : {"BGRx", "I420", "NV12", "Y444", "GRAY8"}) {
    const std::string p =
        std::string("videotestsrc num-buffers=8 pattern=ball ! video/x-raw,format=") + fmt +
        ",width=320,height=240 ! cudagauss ! cudagauss method=median "
        "kernel-size=3 ! cudagauss method=box kernel-size=7 ! fakesink";
    EXPECT_EQ(gst_test::run_pipeline(p), "") << fmt;
  }
}

namespace {

struct FlatCheck {
  int frames = 0;
  int wrong_bytes = 0;
};

GstPadProbeReturn check_flat(GstPad *pad, GstPadProbeInfo *info, gpointer user_data) {
  auto *d = static_cast<FlatCheck *>(user_data);
  GstCaps *caps = gst_pad_get_current_caps(pad);
  GstVideoInfo vinfo;
  const bool ok = caps && gst_video_info_from_caps(&vinfo, caps);
  if (caps) gst_caps_unref(caps);
  if (!ok) return GST_PAD_PROBE_OK;
  gst_test::read_frame(GST_PAD_PROBE_INFO_BUFFER(info), vinfo, [&](GstVideoFrame *f) {
    for (int y = 0; y < GST_VIDEO_FRAME_HEIGHT(f); ++y)
      for (int x = 0; x < GST_VIDEO_FRAME_WIDTH(f) * 3; ++x)
        d->wrong_bytes += gst_test::pixel(f, 0, x, y)[0] != 255;
  });
  d->frames++;
  return GST_PAD_PROBE_OK;
}

}  // namespace

// A white frame stays white through every method (a constant image is a fixed
// point of all three), and every buffer arrives.
TEST(GaussPipeline, FlatFrameStaysFlat) {
  GError *err = nullptr;
  GstElement *pipeline = gst_parse_launch(
      "videotestsrc num-buffers=5 pattern=white ! video/x-raw,format=BGR,width=160,height=90 ! "
      "cudagauss kernel-size=9 ! cudagauss method=median kernel-size=5 ! "
      "cudagauss method=box kernel-size=3 ! fakesink name=sink",
      &err);
  ASSERT_NE(pipeline, nullptr) << (err ? err->message : "");
  GstElement *sink = gst_bin_get_by_name(GST_BIN(pipeline), "sink");
  GstPad *pad = gst_element_get_static_pad(sink, "sink");
  FlatCheck check;
  gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_BUFFER, check_flat, &check, nullptr);
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
  EXPECT_EQ(check.frames, 5);
  EXPECT_EQ(check.wrong_bytes, 0);
  gst_object_unref(bus);
  gst_object_unref(pad);
  gst_object_unref(sink);
  gst_object_unref(pipeline);
}
