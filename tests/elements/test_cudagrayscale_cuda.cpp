// cudagrayscale: backend=cuda and backend=cpu give identical buffers (needs a
// device: exits 77 without one).
#include <gst/check/gstharness.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "frames.h"
#include "gst_test.h"

namespace {

GstBuffer *run(const char *backend, const std::string &in_caps, const std::string &out_caps,
               GstBuffer *input) {
  const std::string launch = std::string("cudagrayscale method=bt709 backend=") + backend;
  GstHarness *h = gst_harness_new_parse(launch.c_str());
  gst_harness_set_src_caps_str(h, in_caps.c_str());
  gst_harness_set_sink_caps_str(h, out_caps.c_str());
  GstBuffer *out = gst_harness_push_and_pull(h, input);
  gst_harness_teardown(h);
  return out;
}

}  // namespace

TEST(CudaGrayscaleCuda, CudaEqualsCpuEveryFormat) {
  const char *formats[] = {"BGR",  "RGB",  "BGRx", "RGBx", "xBGR", "xRGB",
                           "BGRA", "RGBA", "ABGR", "ARGB", "GRAY8"};
  for (const char *fmt : formats) {
    for (bool to_gray : {true, false}) {
      const int w = 643, h = 37;
      const std::string in_caps = gst_test::raw_caps(fmt, w, h);
      const std::string out_caps = gst_test::raw_caps(to_gray ? "GRAY8" : fmt, w, h);
      GstVideoInfo info;
      GstCaps *caps = gst_caps_from_string(in_caps.c_str());
      gst_video_info_from_caps(&info, caps);
      gst_caps_unref(caps);
      GstBuffer *input = gst_test::random_buffer(info, testing_util::rng());
      GstBuffer *gpu = run("cuda", in_caps, out_caps, gst_buffer_ref(input));
      GstBuffer *cpu = run("cpu", in_caps, out_caps, input);
      ASSERT_NE(gpu, nullptr);
      ASSERT_NE(cpu, nullptr);
      EXPECT_EQ(gst_buffer_get_size(gpu), gst_buffer_get_size(cpu));
      GstMapInfo a, b;
      gst_buffer_map(gpu, &a, GST_MAP_READ);
      gst_buffer_map(cpu, &b, GST_MAP_READ);
      GstVideoInfo out_info;
      GstCaps *oc = gst_caps_from_string(out_caps.c_str());
      gst_video_info_from_caps(&out_info, oc);
      gst_caps_unref(oc);
      const gsize row = static_cast<gsize>(GST_VIDEO_INFO_COMP_STRIDE(&out_info, 0));
      const gsize visible = static_cast<gsize>(w) * GST_VIDEO_INFO_COMP_PSTRIDE(&out_info, 0);
      for (int y = 0; y < h; ++y)
        ASSERT_EQ(memcmp(a.data + y * row, b.data + y * row, visible), 0)
            << fmt << (to_gray ? "->GRAY8" : "->same") << " row " << y;
      gst_buffer_unmap(gpu, &a);
      gst_buffer_unmap(cpu, &b);
      gst_buffer_unref(gpu);
      gst_buffer_unref(cpu);
    }
  }
}
