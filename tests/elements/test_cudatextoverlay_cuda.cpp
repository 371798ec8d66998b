// cudatextoverlay: backend=cuda and backend=cpu give identical buffers in
// every format, at odd sizes and every alignment (clipped text included),
// from pinned and from plain memory, and across text changes while playing
// (needs a device: exits 77 without one).
#include <gst/check/gstharness.h>
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "frames.h"
#include "gst_test.h"

namespace {

GstVideoInfo info_of(const std::string &caps_str) {
  GstCaps *caps = gst_caps_from_string(caps_str.c_str());
  GstVideoInfo info;
  gst_video_info_from_caps(&info, caps);
  gst_caps_unref(caps);
  return info;
}

GstBuffer *random_buffer(const GstVideoInfo &info) {
  return gst_test::random_buffer(info, testing_util::rng());
}

std::vector<guint8> bytes_of(GstBuffer *buf) {
  std::vector<guint8> b(gst_buffer_get_size(buf));
  gst_buffer_extract(buf, 0, b.data(), b.size());
  return b;
}

// Runs `frames` copies of `input` through the element with `backend`;
// `between(i, element)` may change properties before frame i.
std::vector<std::vector<guint8>> run(const char *backend, const std::string &props,
                                     const std::string &caps, GstBuffer *input, int frames,
                                     const std::function<void(int, GstElement *)> &between) {
  const std::string launch = "cudatextoverlay backend=" + std::string(backend) + " " + props;
  GstHarness *h = gst_harness_new_parse(launch.c_str());
  gst_harness_set_src_caps_str(h, caps.c_str());
  gst_harness_set_sink_caps_str(h, caps.c_str());
  GstElement *el = gst_harness_find_element(h, "cudatextoverlay");
  std::vector<std::vector<guint8>> outputs;
  for (int i = 0; i < frames; ++i) {
    if (between) between(i, el);
    GstBuffer *in = gst_buffer_copy_deep(input);
    GstBuffer *out = gst_harness_push_and_pull(h, in);
    EXPECT_NE(out, nullptr);
    if (!out) break;
    outputs.push_back(bytes_of(out));
    gst_buffer_unref(out);
  }
  gst_object_unref(el);
  gst_harness_teardown(h);
  return outputs;
}

}  // namespace

TEST(CudaTextOverlayCuda, CudaEqualsCpuEveryFormatAndPlace) {
  const char *formats[] = {"BGR",  "RGB",  "BGRx",  "RGBx", "xBGR", "xRGB", "BGRA", "RGBA",
                           "ABGR", "ARGB", "GRAY8", "I420", "YV12", "NV12", "NV21"};
  const char *places[] = {"halignment=left valignment=top",
                          "halignment=center valignment=center shaded-background=true",
                          "halignment=right valignment=bottom xpad=0 ypad=0",
                          "halignment=right valignment=top xpad=3 ypad=1 font-desc=\"Sans 90\""};
  for (const char *fmt : formats)
    for (const char *place : places)
      for (auto wh : {std::make_pair(641, 97), std::make_pair(33, 9), std::make_pair(1920, 1080)}) {
        const std::string caps = gst_test::raw_caps(fmt, wh.first, wh.second);
        const GstVideoInfo info = info_of(caps);
        GstBuffer *input = random_buffer(info);
        const std::string props =
            std::string("text=\"<b>59.94</b> fps, 1234.5 MB/s, Größe 日本\" color=0xc0ff8020 ") +
            place;
        const auto gpu = run("cuda", props, caps, input, 2, nullptr);
        const auto cpu = run("cpu", props, caps, input, 2, nullptr);
        ASSERT_EQ(gpu.size(), 2u);
        ASSERT_EQ(cpu.size(), 2u);
        for (int i = 0; i < 2; ++i)
          ASSERT_TRUE(gpu[i] == cpu[i])
              << fmt << " " << wh.first << "x" << wh.second << " " << place << " frame " << i;
        if (wh.first > 100) {  // at 33x9 the padding can push the text out of the frame
          EXPECT_FALSE(gpu[0] == bytes_of(input)) << fmt << " " << place << ": nothing drawn";
        }
        gst_buffer_unref(input);
      }
}

TEST(CudaTextOverlayCuda, TextChangesWhilePlaying) {
  const std::string caps = gst_test::raw_caps("NV12", 1280, 720);
  const GstVideoInfo info = info_of(caps);
  GstBuffer *input = random_buffer(info);
  const auto change = [](int i, GstElement *el) {
    if (i == 2) g_object_set(el, "text", "second", nullptr);
    if (i == 3) g_object_set(el, "text", "", nullptr);  // pass-through
    if (i == 4) g_object_set(el, "text", "third", "color", 0xff00ff00u, nullptr);
    if (i == 5) gst_util_set_object_arg(G_OBJECT(el), "valignment", "bottom");
  };
  const auto gpu = run("cuda", "text=first", caps, input, 7, change);
  const auto cpu = run("cpu", "text=first", caps, input, 7, change);
  ASSERT_EQ(gpu.size(), 7u);
  ASSERT_EQ(cpu.size(), 7u);
  for (int i = 0; i < 7; ++i) EXPECT_TRUE(gpu[i] == cpu[i]) << "frame " << i;
  EXPECT_TRUE(gpu[0] == gpu[1]);
  EXPECT_FALSE(gpu[1] == gpu[2]);
  EXPECT_TRUE(gpu[3] == bytes_of(input));
  EXPECT_FALSE(gpu[4] == gpu[5]);
  gst_buffer_unref(input);
}

// A pipeline on the GPU: upstream writes into the pinned pool, the element
// blends in place and the output equals the CPU backend's.
TEST(CudaTextOverlayCuda, PipelineCudaEqualsCpu) {
  std::vector<std::vector<guint8>> outputs[2];
  int index = 0;
  for (const char *backend : {"cuda", "cpu"}) {
    GError *err = nullptr;
    const std::string desc =
        "videotestsrc num-buffers=5 pattern=smpte ! video/x-raw,format=I420,width=1280,height=720 "
        "! cudatextoverlay backend=" +
        std::string(backend) + " text=\"frame text\" ! appsink name=sink sync=false";
    GstElement *pipeline = gst_parse_launch(desc.c_str(), &err);
    ASSERT_NE(pipeline, nullptr) << (err ? err->message : "");
    GstElement *sink = gst_bin_get_by_name(GST_BIN(pipeline), "sink");
    gst_element_set_state(pipeline, GST_STATE_PLAYING);
    for (int i = 0; i < 5; ++i) {
      GstSample *sample = nullptr;
      g_signal_emit_by_name(sink, "pull-sample", &sample);
      ASSERT_NE(sample, nullptr) << backend << " frame " << i;
      outputs[index].push_back(bytes_of(gst_sample_get_buffer(sample)));
      gst_sample_unref(sample);
    }
    gst_element_set_state(pipeline, GST_STATE_NULL);
    gst_object_unref(sink);
    gst_object_unref(pipeline);
    ++index;
  }
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(outputs[0][i] == outputs[1][i]) << "frame " << i;
}
