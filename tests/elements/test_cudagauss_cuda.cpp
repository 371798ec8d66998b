// cudagauss: backend=cuda and backend=cpu give identical buffers for every
// format and method (needs a device: exits 77 without one).
#include <gst/check/gstharness.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "frames.h"
#include "gst_test.h"

namespace {

GstBuffer *run(const std::string &launch, const std::string &caps, GstBuffer *input) {
  GstHarness *h = gst_harness_new_parse(launch.c_str());
  gst_harness_set_src_caps_str(h, caps.c_str());
  gst_harness_set_sink_caps_str(h, caps.c_str());
  GstBuffer *out = gst_harness_push_and_pull(h, input);
  gst_harness_teardown(h);
  return out;
}

// Pushes one random frame of `caps` through cudagauss with `settings` on
// both backends and compares their output byte for byte.
void expect_cuda_equals_cpu(const std::string &caps, const char *settings) {
  GstVideoInfo info;
  GstCaps *c = gst_caps_from_string(caps.c_str());
  gst_video_info_from_caps(&info, c);
  gst_caps_unref(c);
  GstBuffer *input = gst_test::random_buffer(info, testing_util::rng());
  const std::string base = std::string("cudagauss ") + settings + " backend=";
  GstBuffer *gpu = run(base + "cuda", caps, gst_buffer_ref(input));
  GstBuffer *cpu = run(base + "cpu", caps, input);
  ASSERT_NE(gpu, nullptr) << caps << " " << settings;
  ASSERT_NE(cpu, nullptr) << caps << " " << settings;
  GstVideoFrame a, b;
  ASSERT_TRUE(gst_video_frame_map(&a, &info, gpu, GST_MAP_READ));
  ASSERT_TRUE(gst_video_frame_map(&b, &info, cpu, GST_MAP_READ));
  for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES(&a); ++p) {
    const int comp = p;
    const gsize visible = static_cast<gsize>(GST_VIDEO_FRAME_COMP_WIDTH(&a, comp)) *
                          GST_VIDEO_FRAME_COMP_PSTRIDE(&a, comp);
    for (int y = 0; y < GST_VIDEO_FRAME_COMP_HEIGHT(&a, comp); ++y)
      ASSERT_EQ(memcmp(gst_test::pixel(&a, p, 0, y), gst_test::pixel(&b, p, 0, y), visible), 0)
          << caps << " " << settings << " plane " << p << " row " << y;
  }
  gst_video_frame_unmap(&a);
  gst_video_frame_unmap(&b);
  gst_buffer_unref(gpu);
  gst_buffer_unref(cpu);
}

}  // namespace

TEST(CudaGaussCuda, CudaEqualsCpuEveryFormatAndMethod) {
  const char *formats[] = {"BGR",  "RGB",   "BGRx", "RGBx", "xBGR", "xRGB", "BGRA", "RGBA", "ABGR",
                           "ARGB", "GRAY8", "I420", "YV12", "NV12", "NV21", "Y444", "Y42B"};
  const char *settings[] = {
      "method=gaussian kernel-size=5", "method=gaussian kernel-size=9 sigma=2",
      "method=box kernel-size=5",      "method=box kernel-size=15",
      "method=median kernel-size=3",   "method=median kernel-size=5",
      "method=median kernel-size=7"};
  for (const char *fmt : formats)
    for (const char *s : settings) expect_cuda_equals_cpu(gst_test::raw_caps(fmt, 643, 37), s);
}

// Interlaced frames, filtered field by field (an odd height: fields of two
// sizes).
TEST(CudaGaussCuda, CudaEqualsCpuInterlaced) {
  const struct {
    const char *format;
    int height;
  } cases[] = {{"BGR", 37}, {"GRAY8", 36}, {"I420", 36}, {"NV12", 36}, {"Y42B", 37}};
  for (const auto &c : cases)
    for (const char *s : {"method=gaussian kernel-size=7", "method=box kernel-size=5",
                          "method=median kernel-size=5"})
      expect_cuda_equals_cpu(
          gst_test::raw_caps(c.format, 643, c.height) + ",interlace-mode=interleaved", s);
}
