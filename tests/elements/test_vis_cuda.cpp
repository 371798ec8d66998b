// cudaheatmap and cudanoisevis: backend=cuda against backend=cpu through the
// elements (needs a device: exits 77 without one). Random frames in a
// sequence of four, every format; both bit for bit, the noise view with
// identical reports.
#include <gst/check/gstharness.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "frames.h"
#include "gst_test.h"

namespace {

const char *kFormats[] = {"BGR",  "RGB",  "BGRx", "RGBx", "xBGR", "xRGB",
                          "BGRA", "RGBA", "ABGR", "ARGB", "GRAY8"};

GstVideoInfo info_of(const std::string &caps_str) {
  GstCaps *caps = gst_caps_from_string(caps_str.c_str());
  GstVideoInfo info;
  gst_video_info_from_caps(&info, caps);
  gst_caps_unref(caps);
  return info;
}

// Four frames: random, the same with noise of +-25, random, the first again.
std::vector<GstBuffer *> make_frames(const GstVideoInfo &info) {
  std::mt19937 &gen = testing_util::rng();
  const int h = GST_VIDEO_INFO_HEIGHT(&info);
  const int row = GST_VIDEO_INFO_WIDTH(&info) * GST_VIDEO_INFO_COMP_PSTRIDE(&info, 0);
  std::vector<std::vector<guint8>> rows(h, std::vector<guint8>(row));
  std::vector<GstBuffer *> frames;
  for (int i = 0; i < 4; ++i) {
    for (auto &r : rows)
      for (auto &v : r) {
        if (i == 0 || i == 2) v = static_cast<guint8>(gen() >> 24);
        if (i == 1) v = static_cast<guint8>(std::min(255, std::max(0, v + int(gen() % 51) - 25)));
      }
    if (i == 3) {
      frames.push_back(gst_buffer_copy_deep(frames[0]));
      continue;
    }
    frames.push_back(gst_test::make_buffer(
        info,
        [&](GstVideoFrame *f) {
          for (int y = 0; y < h; ++y) std::memcpy(gst_test::pixel(f, 0, 0, y), rows[y].data(), row);
        },
        i));
  }
  return frames;
}

struct Run {
  std::vector<GstBuffer *> outputs;
  std::vector<std::string> reports;
};

Run run(const std::string &element, const std::string &launch, const std::string &in_caps,
        const std::string &out_caps, const std::vector<GstBuffer *> &frames) {
  GstHarness *h = gst_harness_new_parse(launch.c_str());
  gst_harness_set_src_caps_str(h, in_caps.c_str());
  gst_harness_set_sink_caps_str(h, out_caps.c_str());
  GstElement *el = gst_harness_find_element(h, element.c_str());
  GstBus *bus = gst_bus_new();
  gst_element_set_bus(el, bus);
  Run r;
  for (GstBuffer *f : frames) r.outputs.push_back(gst_harness_push_and_pull(h, gst_buffer_ref(f)));
  EXPECT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));  // (a last report, if any)
  while (GstMessage *m = gst_bus_pop_filtered(bus, GST_MESSAGE_ELEMENT)) {
    gchar *s = gst_structure_to_string(gst_message_get_structure(m));
    r.reports.push_back(s);
    g_free(s);
    gst_message_unref(m);
  }
  gst_element_set_bus(el, nullptr);
  gst_object_unref(bus);
  gst_object_unref(el);
  gst_harness_teardown(h);
  return r;
}

// `reports`: how many element messages each backend posts (-1: not checked).
void compare(const std::string &element, const std::string &props, int tolerance,
             int reports = -1) {
  for (const char *fmt : kFormats) {
    std::vector<std::string> outs = {fmt};
    if (std::string(fmt) == "GRAY8") outs.push_back("BGRx");
    for (const std::string &out_fmt : outs) {
      const int w = 643, h = 37;
      const std::string in_caps = gst_test::raw_caps(fmt, w, h);
      const std::string out_caps = gst_test::raw_caps(out_fmt.c_str(), w, h);
      const std::vector<GstBuffer *> frames = make_frames(info_of(in_caps));
      const std::string launch = element + " " + props + " backend=";
      Run gpu = run(element, launch + "cuda", in_caps, out_caps, frames);
      Run cpu = run(element, launch + "cpu", in_caps, out_caps, frames);
      const GstVideoInfo out_info = info_of(out_caps);
      const gsize row = static_cast<gsize>(GST_VIDEO_INFO_COMP_STRIDE(&out_info, 0));
      const gsize visible = static_cast<gsize>(w) * GST_VIDEO_INFO_COMP_PSTRIDE(&out_info, 0);
      for (size_t i = 0; i < frames.size(); ++i) {
        ASSERT_NE(gpu.outputs[i], nullptr);
        ASSERT_NE(cpu.outputs[i], nullptr);
        GstMapInfo a, b;
        gst_buffer_map(gpu.outputs[i], &a, GST_MAP_READ);
        gst_buffer_map(cpu.outputs[i], &b, GST_MAP_READ);
        int worst = 0;
        for (int y = 0; y < h; ++y)
          for (gsize x = 0; x < visible; ++x)
            worst = std::max(worst, std::abs(int(a.data[y * row + x]) - int(b.data[y * row + x])));
        EXPECT_LE(worst, tolerance)
            << element << " " << props << " " << fmt << "->" << out_fmt << " frame " << i;
        gst_buffer_unmap(gpu.outputs[i], &a);
        gst_buffer_unmap(cpu.outputs[i], &b);
        gst_buffer_unref(gpu.outputs[i]);
        gst_buffer_unref(cpu.outputs[i]);
      }
      EXPECT_EQ(gpu.reports, cpu.reports) << element << " " << props << " " << fmt;
      if (reports >= 0) {
        EXPECT_EQ(gpu.reports.size(), static_cast<size_t>(reports))
            << element << " " << props << " " << fmt;
      }
      for (GstBuffer *f : frames) gst_buffer_unref(f);
    }
  }
}

}  // namespace

TEST(VisCuda, HeatmapCudaMatchesCpu) {
  compare("cudaheatmap", "", 0);
  compare("cudaheatmap", "colormap=turbo gain=3.5 alpha=0.4", 0);
  compare("cudaheatmap", "colormap=gray gain=0.8", 0);
}

TEST(VisCuda, NoiseVisCudaMatchesCpu) {
  compare("cudanoisevis", "stats-interval=2", 0, 2);
  compare("cudanoisevis", "mode=overlay threshold=7 color=0x80ffff00 stats-interval=1", 0, 4);
  // Four frames: one report after the third, one at EOS over the fourth.
  compare("cudanoisevis", "threshold=7 stats-interval=3", 0, 2);
}
