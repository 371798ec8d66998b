// Real pipelines by gst_parse_launch: videotestsrc (a moving ball) through
// cudaheatmap and cudanoisevis to fakesink. The heat map's first frame is all
// "no change" blue, later frames show the ball's movement; cudanoisevis posts
// one report per stats-interval frames on the pipeline's bus, with fractions
// that match a ball moving over a still background.
#include <gst/video/video.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "gst_test.h"

namespace {

struct HeatProbe {
  std::atomic<int> buffers{0};
  std::atomic<int> first_not_blue{-1};  // non-blue pixels in the first frame
  std::atomic<int> later_not_blue{0};   // in the other frames, summed
};

// BGR at 320x240: counts pixels that are not (255, 0, 0) in B, G, R order.
// The frame is mapped with its caps and strides: between two GPU elements it
// is CUDA memory, whose rows are padded.
GstPadProbeReturn on_heat_buffer(GstPad *pad, GstPadProbeInfo *info, gpointer user_data) {
  auto *p = static_cast<HeatProbe *>(user_data);
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER(info);
  GstCaps *caps = gst_pad_get_current_caps(pad);
  GstVideoInfo vinfo;
  const bool have_info = caps && gst_video_info_from_caps(&vinfo, caps);
  if (caps) gst_caps_unref(caps);
  GstVideoFrame frame;
  if (!have_info || !gst_video_frame_map(&frame, &vinfo, buf, GST_MAP_READ)) {
    ADD_FAILURE() << "cannot map the heat map's frame";
    return GST_PAD_PROBE_OK;
  }
  int not_blue = 0;
  for (int y = 0; y < GST_VIDEO_FRAME_HEIGHT(&frame); ++y) {
    const guint8 *row = static_cast<const guint8 *>(GST_VIDEO_FRAME_PLANE_DATA(&frame, 0)) +
                        y * GST_VIDEO_FRAME_PLANE_STRIDE(&frame, 0);
    for (int x = 0; x < GST_VIDEO_FRAME_WIDTH(&frame); ++x)
      not_blue += !(row[3 * x] == 255 && row[3 * x + 1] == 0 && row[3 * x + 2] == 0);
  }
  gst_video_frame_unmap(&frame);
  if (p->buffers.fetch_add(1) == 0)
    p->first_not_blue = not_blue;
  else
    p->later_not_blue += not_blue;
  return GST_PAD_PROBE_OK;
}

}  // namespace

TEST(VisPipeline, HeatmapThenNoiseViewOnAMovingBall) {
  GError *err = nullptr;
  GstElement *pipeline = gst_parse_launch(
      "videotestsrc num-buffers=30 pattern=ball ! video/x-raw,format=BGR,width=320,height=240 ! "
      "cudaheatmap name=heat ! cudanoisevis name=noise stats-interval=10 ! fakesink",
      &err);
  ASSERT_NE(pipeline, nullptr) << (err ? err->message : "");
  GstElement *heat = gst_bin_get_by_name(GST_BIN(pipeline), "heat");
  GstPad *heat_src = gst_element_get_static_pad(heat, "src");
  HeatProbe probe;
  gst_pad_add_probe(heat_src, GST_PAD_PROBE_TYPE_BUFFER, on_heat_buffer, &probe, nullptr);

  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  GstBus *bus = gst_element_get_bus(pipeline);
  std::vector<GstStructure *> reports;
  bool eos = false;
  while (!eos) {
    GstMessage *msg = gst_bus_timed_pop_filtered(
        bus, 30 * GST_SECOND,
        static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_ELEMENT));
    // (stopped first: the probes write into this function's locals)
    if (!msg) gst_element_set_state(pipeline, GST_STATE_NULL);
    ASSERT_NE(msg, nullptr) << "timeout";
    if (GST_MESSAGE_TYPE(msg) == GST_MESSAGE_ERROR) {
      GError *e = nullptr;
      gst_message_parse_error(msg, &e, nullptr);
      ADD_FAILURE() << e->message;
      g_error_free(e);
      eos = true;
    } else if (GST_MESSAGE_TYPE(msg) == GST_MESSAGE_EOS) {
      eos = true;
    } else if (gst_structure_has_name(gst_message_get_structure(msg), "cudanoisevis")) {
      EXPECT_STREQ(GST_OBJECT_NAME(GST_MESSAGE_SRC(msg)), "noise");
      reports.push_back(gst_structure_copy(gst_message_get_structure(msg)));
    }
    gst_message_unref(msg);
  }
  gst_element_set_state(pipeline, GST_STATE_NULL);

  EXPECT_EQ(probe.buffers.load(), 30);
  EXPECT_EQ(probe.first_not_blue.load(), 0) << "the first frame shows no change";
  EXPECT_GT(probe.later_not_blue.load(), 29 * 50) << "the ball's movement shows";

  ASSERT_EQ(reports.size(), 3u);
  for (size_t i = 0; i < reports.size(); ++i) {
    guint frames = 0, compared = 0;
    guint64 pixels = 0, bytes = 0, marked = 0;
    gdouble fraction = -1, byte_fraction = -1;
    ASSERT_TRUE(gst_structure_get(reports[i], "frames", G_TYPE_UINT, &frames, "compared-frames",
                                  G_TYPE_UINT, &compared, "pixels", G_TYPE_UINT64, &pixels, "bytes",
                                  G_TYPE_UINT64, &bytes, "marked-pixels", G_TYPE_UINT64, &marked,
                                  "marked-fraction", G_TYPE_DOUBLE, &fraction,
                                  "changed-byte-fraction", G_TYPE_DOUBLE, &byte_fraction, nullptr));
    EXPECT_EQ(frames, 10u);
    EXPECT_EQ(compared, i == 0 ? 9u : 10u);
    EXPECT_EQ(pixels, compared * 320ull * 240ull);
    EXPECT_EQ(bytes, pixels * 3);
    // The heat map of a moving ball: the ring it leaves and enters changes
    // (a few percent of the frame), the still background does not.
    EXPECT_GT(fraction, 0.001) << i;
    EXPECT_LT(fraction, 0.2) << i;
    EXPECT_GT(byte_fraction, 0.0) << i;
    EXPECT_LE(byte_fraction, fraction) << i;
    gst_structure_free(reports[i]);
  }
  gst_object_unref(heat_src);
  gst_object_unref(heat);
  gst_object_unref(bus);
  gst_object_unref(pipeline);
}

// Gray camera-like input shown in colour: GRAY8 in, xRGB out by caps.
TEST(VisPipeline, Gray8InputColourOutput) {
  EXPECT_EQ(gst_test::run_pipeline(
                "videotestsrc num-buffers=10 pattern=ball ! video/x-raw,format=GRAY8,width=64,"
                "height=48 ! cudanoisevis mode=overlay ! video/x-raw,format=xRGB ! cudaheatmap "
                "colormap=turbo alpha=0.5 ! video/x-raw,format=xRGB ! fakesink"),
            "");
}
