// cudabinarize: backend=cuda and backend=cpu give identical buffers,
// last-threshold values and element messages (needs a device: exits 77
// without one).
#include <gst/check/gstharness.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "frames.h"
#include "gst_test.h"

namespace {

struct Output {
  GstBuffer *buffer = nullptr;
  gint last_threshold = -2;
  std::string message;  // the element message, serialised
};

Output run(const std::string &properties, const char *backend, const std::string &in_caps,
           const std::string &out_caps, GstBuffer *input) {
  const std::string launch =
      "cudabinarize post-messages=true " + properties + " backend=" + backend;
  GstHarness *h = gst_harness_new_parse(launch.c_str());
  gst_harness_set_src_caps_str(h, in_caps.c_str());
  gst_harness_set_sink_caps_str(h, out_caps.c_str());
  GstElement *el = gst_harness_find_element(h, "cudabinarize");
  GstBus *bus = gst_bus_new();
  gst_element_set_bus(el, bus);
  Output out;
  out.buffer = gst_harness_push_and_pull(h, input);
  g_object_get(el, "last-threshold", &out.last_threshold, nullptr);
  if (GstMessage *msg = gst_bus_pop_filtered(bus, GST_MESSAGE_ELEMENT)) {
    gchar *s = gst_structure_to_string(gst_message_get_structure(msg));
    out.message = s;
    g_free(s);
    gst_message_unref(msg);
  }
  gst_element_set_bus(el, nullptr);
  gst_object_unref(bus);
  gst_object_unref(el);
  gst_harness_teardown(h);
  return out;
}

GstVideoInfo info_of(const std::string &caps_str) {
  GstCaps *caps = gst_caps_from_string(caps_str.c_str());
  GstVideoInfo info;
  gst_video_info_from_caps(&info, caps);
  gst_caps_unref(caps);
  return info;
}

// Random bytes, or smooth content with flat areas (long runs in the histogram pass).
GstBuffer *input_buffer(const GstVideoInfo &info, bool smooth) {
  std::mt19937 &gen = testing_util::rng();
  return gst_test::make_buffer(info, [&](GstVideoFrame *f) {
    for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES(f); ++p) {
      const int rows = GST_VIDEO_FRAME_COMP_HEIGHT(f, p);
      for (int y = 0; y < rows; ++y)
        for (int x = 0; x < GST_VIDEO_FRAME_PLANE_STRIDE(f, p); ++x) {
          guint8 v = static_cast<guint8>(gen() >> 24);
          if (smooth) v = static_cast<guint8>((x / 24) * 20 + (y / 16) * 9 + (v & 3));
          gst_test::pixel(f, p, x, y)[0] = v;
        }
    }
  });
}

// Compares the visible bytes of every plane.
void expect_same_frames(GstBuffer *a, GstBuffer *b, const GstVideoInfo &info,
                        const std::string &what) {
  GstVideoFrame fa, fb;
  ASSERT_TRUE(gst_video_frame_map(&fa, const_cast<GstVideoInfo *>(&info), a, GST_MAP_READ));
  ASSERT_TRUE(gst_video_frame_map(&fb, const_cast<GstVideoInfo *>(&info), b, GST_MAP_READ));
  for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES(&fa); ++p) {
    // Visible bytes of plane p: its width in components times their pixel stride.
    const int comp = p == 0 ? 0 : static_cast<int>(p);
    const int row = GST_VIDEO_FRAME_COMP_WIDTH(&fa, comp) * GST_VIDEO_FRAME_COMP_PSTRIDE(&fa, comp);
    for (int y = 0; y < GST_VIDEO_FRAME_COMP_HEIGHT(&fa, comp); ++y)
      ASSERT_EQ(memcmp(gst_test::pixel(&fa, p, 0, y), gst_test::pixel(&fb, p, 0, y), row), 0)
          << what << " plane " << p << " row " << y;
  }
  gst_video_frame_unmap(&fa);
  gst_video_frame_unmap(&fb);
}

}  // namespace

TEST(CudaBinarizeCuda, CudaEqualsCpuEveryFormatAndMethod) {
  const char *formats[] = {"BGR",  "RGB",  "BGRx", "RGBx",  "xBGR", "xRGB", "BGRA",
                           "RGBA", "ABGR", "ARGB", "GRAY8", "I420", "NV12"};
  const char *methods[] = {"method=otsu", "method=two-peaks grayscale=average",
                           "method=fixed threshold=90 grayscale=bt709 invert=true",
                           "method=two-peaks min-threshold=0 max-threshold=255 invert=true"};
  for (const char *fmt : formats)
    for (bool to_gray : {true, false}) {
      if (!to_gray && std::string(fmt) == "GRAY8") continue;
      for (int mi = 0; mi < 4; ++mi) {
        const int w = mi % 2 ? 643 : 640, h = mi % 2 ? 37 : 360;
        const std::string in_caps = gst_test::raw_caps(fmt, w, h);
        const std::string out_caps = gst_test::raw_caps(to_gray ? "GRAY8" : fmt, w, h);
        GstBuffer *input = input_buffer(info_of(in_caps), mi >= 2);
        Output gpu = run(methods[mi], "cuda", in_caps, out_caps, gst_buffer_ref(input));
        Output cpu = run(methods[mi], "cpu", in_caps, out_caps, input);
        const std::string what =
            std::string(fmt) + (to_gray ? "->GRAY8 " : "->same ") + methods[mi];
        ASSERT_NE(gpu.buffer, nullptr) << what;
        ASSERT_NE(cpu.buffer, nullptr) << what;
        EXPECT_EQ(gpu.last_threshold, cpu.last_threshold) << what;
        EXPECT_GE(gpu.last_threshold, 0) << what;
        EXPECT_EQ(gpu.message, cpu.message) << what;
        EXPECT_FALSE(gpu.message.empty()) << what;
        expect_same_frames(gpu.buffer, cpu.buffer, info_of(out_caps), what);
        gst_buffer_unref(gpu.buffer);
        gst_buffer_unref(cpu.buffer);
      }
    }
}

// A stream of videotestsrc-like frames through one CUDA element: the device
// state carries over correctly from frame to frame.
TEST(CudaBinarizeCuda, ManyFramesOneElement) {
  const std::string in_caps = gst_test::raw_caps("BGRx", 1280, 720);
  const std::string out_caps = gst_test::raw_caps("GRAY8", 1280, 720);
  GstHarness *gpu = gst_harness_new_parse("cudabinarize backend=cuda");
  GstHarness *cpu = gst_harness_new_parse("cudabinarize backend=cpu");
  for (GstHarness *h : {gpu, cpu}) {
    gst_harness_set_src_caps_str(h, in_caps.c_str());
    gst_harness_set_sink_caps_str(h, out_caps.c_str());
  }
  const GstVideoInfo in_info = info_of(in_caps), out_info = info_of(out_caps);
  for (int i = 0; i < 12; ++i) {
    GstBuffer *input = input_buffer(in_info, i % 3 != 0);
    GstBuffer *a = gst_harness_push_and_pull(gpu, gst_buffer_ref(input));
    GstBuffer *b = gst_harness_push_and_pull(cpu, input);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    expect_same_frames(a, b, out_info, "frame " + std::to_string(i));
    gst_buffer_unref(a);
    gst_buffer_unref(b);
  }
  gst_harness_teardown(gpu);
  gst_harness_teardown(cpu);
}
