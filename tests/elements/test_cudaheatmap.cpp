// cudaheatmap through GstHarness: every format (GRAY8 to gray and to colour),
// odd sizes, the first-frame rule after start, flush and caps change, every
// property (also while playing), caps negotiation, defaults and blurbs. The
// backend is the default (auto): CUDA on the GPU machine, CPU elsewhere.
// Colours are checked within 1 per byte against this test's own model of
// the colour rule (written independently, it may round the other way);
// test_vis_cuda compares the two backends byte for byte.
#include <gst/check/gstharness.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gst_test.h"

namespace {

const char *kRgbFormats[] = {"BGR",  "RGB",  "BGRx", "RGBx", "xBGR",
                             "xRGB", "BGRA", "RGBA", "ABGR", "ARGB"};

struct Rgb {
  int r, g, b;
};

// Colour of pixel (x, y) in frame i of the test sequence.
Rgb colour_at(int x, int y, int i) {
  return {(x * 29 + y * 7 + i * 37) & 255, (x * 3 + y * 53 + 17 + i * 11) & 255,
          (x * 91 + y * 13 + 101 + i * 5) & 255};
}
int alpha_at(int x, int i) {
  return 0xA0 + (x + i) % 16;
}

// The documented rule, restated: t = min(1, gain d / 765), colour by map.
Rgb heat(int d, const std::string &colormap = "sine", double gain = 1.0) {
  const double t = std::min(1.0, gain * d / 765.0), pi = std::acos(-1.0);
  const auto byte = [](double v) {
    return static_cast<int>(std::floor(std::min(1.0, std::max(0.0, v)) * 255.0 + 0.5));
  };
  if (colormap == "gray") return {byte(t), byte(t), byte(t)};
  return {byte(-std::cos(pi * t)), byte(std::sin(pi * t)), byte(std::cos(pi * t))};
}
int luma(Rgb c) {
  return (77 * c.r + 150 * c.g + 29 * c.b + 128) >> 8;
}
int blend(int h, int c, int w) {
  return (h * w + c * (256 - w) + 128) >> 8;
}

GstVideoInfo info_of(const std::string &caps_str) {
  GstCaps *caps = gst_caps_from_string(caps_str.c_str());
  GstVideoInfo info;
  gst_video_info_from_caps(&info, caps);
  gst_caps_unref(caps);
  return info;
}

GstBuffer *pattern_buffer(const GstVideoInfo &info, int i) {
  return gst_test::make_buffer(
      info,
      [i](GstVideoFrame *f) {
        const GstVideoFormatInfo *fi = f->info.finfo;
        const int ps = GST_VIDEO_FORMAT_INFO_PSTRIDE(fi, 0);
        for (int y = 0; y < GST_VIDEO_FRAME_HEIGHT(f); ++y)
          for (int x = 0; x < GST_VIDEO_FRAME_WIDTH(f); ++x) {
            const Rgb c = colour_at(x, y, i);
            guint8 *px = gst_test::pixel(f, 0, x * ps, y);
            if (GST_VIDEO_FORMAT_INFO_IS_GRAY(fi)) {
              px[0] = static_cast<guint8>(c.r);
              continue;
            }
            for (int k = 0; k < ps; ++k) px[k] = static_cast<guint8>(alpha_at(x, i));
            px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, 0)] = static_cast<guint8>(c.r);
            px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, 1)] = static_cast<guint8>(c.g);
            px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, 2)] = static_cast<guint8>(c.b);
          }
      },
      i);
}

// The difference d of pixel (x, y) between frames i-1 and i (0 for i == 0).
int difference(bool gray, int x, int y, int i) {
  if (i == 0) return 0;
  const Rgb a = colour_at(x, y, i - 1), b = colour_at(x, y, i);
  if (gray) return 3 * std::abs(a.r - b.r);
  return std::abs(a.r - b.r) + std::abs(a.g - b.g) + std::abs(a.b - b.b);
}

struct Settings {
  std::string colormap = "sine";
  double gain = 1.0;
  double alpha = 1.0;
};

// Checks every pixel of output `out` (format out_format) for frame i of the
// sequence with input format in_format.
void check_output(GstBuffer *out, const std::string &in_format, const std::string &out_format,
                  int w, int h, int i, const Settings &s = Settings(), bool first = false) {
  const GstVideoInfo out_info = info_of(gst_test::raw_caps(out_format.c_str(), w, h));
  const bool gray_in = in_format == "GRAY8";
  const int weight = static_cast<int>(std::lround(s.alpha * 256));
  gst_test::read_frame(out, out_info, [&](GstVideoFrame *f) {
    const GstVideoFormatInfo *fi = f->info.finfo;
    const int ps = GST_VIDEO_FORMAT_INFO_PSTRIDE(fi, 0);
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const int d = first ? 0 : difference(gray_in, x, y, i);
        const Rgb hc = heat(d, s.colormap, s.gain);
        Rgb cur = colour_at(x, y, i);
        if (gray_in) cur = {cur.r, cur.r, cur.r};
        const guint8 *px = gst_test::pixel(f, 0, x * ps, y);
        const std::string where = in_format + "->" + out_format + " frame " + std::to_string(i) +
                                  " at " + std::to_string(x) + "," + std::to_string(y) +
                                  " d=" + std::to_string(d);
        if (GST_VIDEO_FORMAT_INFO_IS_GRAY(fi)) {
          ASSERT_NEAR(px[0], blend(luma(hc), cur.r, weight), 1) << where;
          continue;
        }
        ASSERT_NEAR(px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, 0)], blend(hc.r, cur.r, weight), 1)
            << where;
        ASSERT_NEAR(px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, 1)], blend(hc.g, cur.g, weight), 1)
            << where;
        ASSERT_NEAR(px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, 2)], blend(hc.b, cur.b, weight), 1)
            << where;
        if (ps == 4) {
          const int extra = 6 - GST_VIDEO_FORMAT_INFO_POFFSET(fi, 0) -
                            GST_VIDEO_FORMAT_INFO_POFFSET(fi, 1) -
                            GST_VIDEO_FORMAT_INFO_POFFSET(fi, 2);
          ASSERT_EQ(px[extra], gray_in ? 255 : alpha_at(x, i)) << where << " alpha/x byte";
        }
      }
  });
}

GstHarness *make_harness(const std::string &launch, const std::string &in_caps,
                         const std::string &out_caps) {
  GstHarness *h = gst_harness_new_parse(launch.c_str());
  gst_harness_set_src_caps_str(h, in_caps.c_str());
  if (!out_caps.empty()) gst_harness_set_sink_caps_str(h, out_caps.c_str());
  return h;
}

// Pushes frames 0..n-1 and checks each output.
void check_sequence(const std::string &in_format, const std::string &out_format, int w, int h,
                    int n = 3, const std::string &props = "", const Settings &s = Settings()) {
  const std::string in_caps = gst_test::raw_caps(in_format.c_str(), w, h);
  GstHarness *harness =
      make_harness("cudaheatmap " + props, in_caps, gst_test::raw_caps(out_format.c_str(), w, h));
  const GstVideoInfo in_info = info_of(in_caps);
  for (int i = 0; i < n; ++i) {
    GstBuffer *out = gst_harness_push_and_pull(harness, pattern_buffer(in_info, i));
    ASSERT_NE(out, nullptr);
    check_output(out, in_format, out_format, w, h, i, s);
    gst_buffer_unref(out);
    if (::testing::Test::HasFatalFailure()) break;
  }
  gst_harness_teardown(harness);
}

}  // namespace

TEST(CudaHeatmap, EveryFormat) {
  for (const char *fmt : kRgbFormats) check_sequence(fmt, fmt, 37, 5);
  check_sequence("GRAY8", "GRAY8", 37, 5);
  for (const char *fmt : {"BGR", "BGRx", "ARGB"}) check_sequence("GRAY8", fmt, 37, 5);
}

TEST(CudaHeatmap, OddSizes) {
  for (auto wh : {std::make_pair(1, 1), std::make_pair(3, 1), std::make_pair(1, 7),
                  std::make_pair(17, 13), std::make_pair(641, 3)}) {
    check_sequence("BGR", "BGR", wh.first, wh.second);
    check_sequence("RGBA", "RGBA", wh.first, wh.second);
    check_sequence("GRAY8", "GRAY8", wh.first, wh.second);
  }
}

TEST(CudaHeatmap, PropertiesFromLaunchLine) {
  Settings s;
  s.colormap = "gray";
  s.gain = 3.0;
  check_sequence("BGRx", "BGRx", 19, 4, 3, "colormap=gray gain=3", s);
  s = Settings();
  s.alpha = 0.5;
  check_sequence("RGB", "RGB", 19, 4, 3, "alpha=0.5", s);
  s.alpha = 0.0;
  check_sequence("RGB", "RGB", 19, 4, 3, "alpha=0", s);
  s = Settings();
  s.alpha = 0.3;
  s.gain = 0.5;
  check_sequence("GRAY8", "GRAY8", 19, 4, 3, "alpha=0.3 gain=0.5", s);
}

// Turbo: no change is dark blue (Turbo at 0: 35, 23, 27), the most change
// dark red (144, 13, 0) -- from its polynomial, worked out by hand.
TEST(CudaHeatmap, TurboEnds) {
  const std::string caps = gst_test::raw_caps("RGB", 2, 1);
  GstHarness *h = make_harness("cudaheatmap colormap=turbo", caps, caps);
  const GstVideoInfo info = info_of(caps);
  const auto frame = [&](int v) {
    return gst_test::make_buffer(info, [v](GstVideoFrame *f) {
      guint8 *px = gst_test::pixel(f, 0, 0, 0);
      for (int k = 0; k < 3; ++k) px[k] = static_cast<guint8>(v);  // pixel 0 changes
      for (int k = 3; k < 6; ++k) px[k] = 7;                       // pixel 1 does not
    });
  };
  gst_buffer_unref(gst_harness_push_and_pull(h, frame(0)));
  GstBuffer *out = gst_harness_push_and_pull(h, frame(255));
  ASSERT_NE(out, nullptr);
  gst_test::read_frame(out, info, [](GstVideoFrame *f) {
    const guint8 *p = gst_test::pixel(f, 0, 0, 0);
    EXPECT_NEAR(p[0], 144, 1);
    EXPECT_NEAR(p[1], 13, 1);
    EXPECT_NEAR(p[2], 0, 1);
    EXPECT_NEAR(p[3], 35, 1);
    EXPECT_NEAR(p[4], 23, 1);
    EXPECT_NEAR(p[5], 27, 1);
  });
  gst_buffer_unref(out);
  gst_harness_teardown(h);
}

TEST(CudaHeatmap, PropertiesChangeWhilePlaying) {
  const int w = 16, hgt = 4;
  const std::string caps = gst_test::raw_caps("BGR", w, hgt);
  GstHarness *h = make_harness("cudaheatmap", caps, caps);
  const GstVideoInfo info = info_of(caps);
  GstElement *el = gst_harness_find_element(h, "cudaheatmap");
  ASSERT_NE(el, nullptr);
  Settings s;
  for (int i = 0; i < 5; ++i) {
    if (i == 2) {
      g_object_set(el, "gain", 4.0, "alpha", 0.75, nullptr);
      s.gain = 4.0;
      s.alpha = 0.75;
    } else if (i == 3) {
      gst_util_set_object_arg(G_OBJECT(el), "colormap", "gray");
      s.colormap = "gray";
    } else if (i == 4) {
      g_object_set(el, "gain", 1.0, "alpha", 1.0, nullptr);
      s = Settings();
      s.colormap = "gray";
    }
    GstBuffer *out = gst_harness_push_and_pull(h, pattern_buffer(info, i));
    ASSERT_NE(out, nullptr);
    check_output(out, "BGR", "BGR", w, hgt, i, s);
    gst_buffer_unref(out);
  }
  gst_object_unref(el);
  gst_harness_teardown(h);
}

// After a flush the next frame shows no change, whatever it is.
TEST(CudaHeatmap, FlushStartsOver) {
  const int w = 20, hgt = 3;
  const std::string caps = gst_test::raw_caps("xRGB", w, hgt);
  GstHarness *h = make_harness("cudaheatmap", caps, caps);
  const GstVideoInfo info = info_of(caps);
  for (int i = 0; i < 2; ++i) {
    GstBuffer *out = gst_harness_push_and_pull(h, pattern_buffer(info, i));
    check_output(out, "xRGB", "xRGB", w, hgt, i);
    gst_buffer_unref(out);
  }
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_flush_start()));
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_flush_stop(TRUE)));
  GstSegment segment;
  gst_segment_init(&segment, GST_FORMAT_TIME);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_segment(&segment)));
  GstBuffer *out = gst_harness_push_and_pull(h, pattern_buffer(info, 2));
  ASSERT_NE(out, nullptr);
  check_output(out, "xRGB", "xRGB", w, hgt, 2, Settings(), /*first=*/true);
  gst_buffer_unref(out);
  out = gst_harness_push_and_pull(h, pattern_buffer(info, 3));
  check_output(out, "xRGB", "xRGB", w, hgt, 3);
  gst_buffer_unref(out);
  gst_harness_teardown(h);
}

// Another stream (a stream-start of another stream-id: concat's next file,
// an input-selector's switch) starts over too; the same stream-id again
// (a relinked pad) does not.
TEST(CudaHeatmap, AnotherStreamStartsOver) {
  const int w = 9, hgt = 4;
  const std::string caps = gst_test::raw_caps("BGR", w, hgt);
  GstHarness *h = make_harness("cudaheatmap", caps, caps);
  const GstVideoInfo info = info_of(caps);
  for (int i = 0; i < 2; ++i) {
    GstBuffer *out = gst_harness_push_and_pull(h, pattern_buffer(info, i));
    check_output(out, "BGR", "BGR", w, hgt, i);
    gst_buffer_unref(out);
  }
  GstSegment segment;
  gst_segment_init(&segment, GST_FORMAT_TIME);
  for (int i = 2; i < 4; ++i) {
    ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_stream_start("another-stream")));
    ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_segment(&segment)));
    GstBuffer *out = gst_harness_push_and_pull(h, pattern_buffer(info, i));
    ASSERT_NE(out, nullptr);
    check_output(out, "BGR", "BGR", w, hgt, i, Settings(), /*first=*/i == 2);
    gst_buffer_unref(out);
  }
  gst_harness_teardown(h);
}

// A caps change (new size) starts over too.
TEST(CudaHeatmap, CapsChangeStartsOver) {
  GstHarness *h = make_harness("cudaheatmap", gst_test::raw_caps("BGRA", 8, 4), "");
  GstVideoInfo info = info_of(gst_test::raw_caps("BGRA", 8, 4));
  for (int i = 0; i < 2; ++i) {
    GstBuffer *out = gst_harness_push_and_pull(h, pattern_buffer(info, i));
    check_output(out, "BGRA", "BGRA", 8, 4, i);
    gst_buffer_unref(out);
  }
  gst_harness_set_src_caps_str(h, gst_test::raw_caps("BGRA", 6, 3).c_str());
  info = info_of(gst_test::raw_caps("BGRA", 6, 3));
  GstBuffer *out = gst_harness_push_and_pull(h, pattern_buffer(info, 2));
  ASSERT_NE(out, nullptr);
  check_output(out, "BGRA", "BGRA", 6, 3, 2, Settings(), /*first=*/true);
  gst_buffer_unref(out);
  out = gst_harness_push_and_pull(h, pattern_buffer(info, 3));
  check_output(out, "BGRA", "BGRA", 6, 3, 3);
  gst_buffer_unref(out);
  gst_harness_teardown(h);
}

// Packed RGB keeps its format; GRAY8 gives colour (BGR first) unless
// downstream wants GRAY8; a colour format cannot become another.
TEST(CudaHeatmap, CapsNegotiation) {
  GstHarness *h = gst_harness_new("cudaheatmap");
  gst_harness_set_src_caps_str(h, gst_test::raw_caps("GRAY8", 8, 2).c_str());
  GstBuffer *out =
      gst_harness_push_and_pull(h, pattern_buffer(info_of(gst_test::raw_caps("GRAY8", 8, 2)), 0));
  ASSERT_NE(out, nullptr);
  GstCaps *caps = gst_pad_get_current_caps(h->sinkpad);
  EXPECT_STREQ(gst_structure_get_string(gst_caps_get_structure(caps, 0), "format"), "BGR");
  gst_caps_unref(caps);
  gst_buffer_unref(out);
  gst_harness_teardown(h);

  h = gst_harness_new("cudaheatmap");
  gst_harness_set_sink_caps_str(h, "video/x-raw,format=RGB");
  gst_harness_set_src_caps_str(h, gst_test::raw_caps("BGR", 8, 2).c_str());
  EXPECT_EQ(gst_harness_push(h, pattern_buffer(info_of(gst_test::raw_caps("BGR", 8, 2)), 0)),
            GST_FLOW_NOT_NEGOTIATED);
  gst_harness_teardown(h);

  GstElement *el = gst_element_factory_make("cudaheatmap", nullptr);
  GstBaseTransformClass *klass = GST_BASE_TRANSFORM_GET_CLASS(el);
  // The formats in system memory (backend=cpu offers no memory:CUDAMemory;
  // the CUDA memory variants are checked in tests/pipelines/test_cuda_memory).
  gst_util_set_object_arg(G_OBJECT(el), "backend", "cpu");
  GstCaps *bgr = gst_caps_from_string("video/x-raw,format=BGR,width=4,height=4");
  GstCaps *src = klass->transform_caps(GST_BASE_TRANSFORM(el), GST_PAD_SINK, bgr, nullptr);
  gchar *s = gst_caps_to_string(src);
  EXPECT_STREQ(s, "video/x-raw, format=(string)BGR, width=(int)4, height=(int)4");
  g_free(s);
  GstCaps *sink = klass->transform_caps(GST_BASE_TRANSFORM(el), GST_PAD_SRC, bgr, nullptr);
  s = gst_caps_to_string(sink);
  EXPECT_STREQ(s, "video/x-raw, format=(string){ BGR, GRAY8 }, width=(int)4, height=(int)4");
  g_free(s);
  GstCaps *gray = gst_caps_from_string("video/x-raw,format=GRAY8");
  GstCaps *all = klass->transform_caps(GST_BASE_TRANSFORM(el), GST_PAD_SINK, gray, nullptr);
  EXPECT_EQ(
      gst_value_list_get_size(gst_structure_get_value(gst_caps_get_structure(all, 0), "format")),
      11u);
  GstCaps *back = klass->transform_caps(GST_BASE_TRANSFORM(el), GST_PAD_SRC, gray, nullptr);
  s = gst_caps_to_string(back);
  EXPECT_STREQ(s, "video/x-raw, format=(string)GRAY8");
  g_free(s);
  for (GstCaps *c : {bgr, src, sink, gray, all, back}) gst_caps_unref(c);
  gst_object_unref(el);
}

TEST(CudaHeatmap, PropertiesAndDefaults) {
  GstElement *el = gst_element_factory_make("cudaheatmap", nullptr);
  ASSERT_NE(el, nullptr);
  for (const char *name : {"colormap", "gain", "alpha", "backend", "device-id"}) {
    GParamSpec *spec = g_object_class_find_property(G_OBJECT_GET_CLASS(el), name);
    ASSERT_NE(spec, nullptr) << name;
    EXPECT_NE(std::string(g_param_spec_get_blurb(spec)).find("Default"), std::string::npos) << name;
  }
  for (const char *name : {"colormap", "gain", "alpha"}) {
    GParamSpec *spec = g_object_class_find_property(G_OBJECT_GET_CLASS(el), name);
    EXPECT_TRUE(spec->flags & GST_PARAM_MUTABLE_PLAYING) << name;
  }
  gint colormap = -1, backend = -1, device = -1;
  gdouble gain = -1, alpha = -1;
  g_object_get(el, "colormap", &colormap, "gain", &gain, "alpha", &alpha, "backend", &backend,
               "device-id", &device, nullptr);
  EXPECT_EQ(colormap, 0);  // sine
  EXPECT_EQ(gain, 1.0);
  EXPECT_EQ(alpha, 1.0);
  EXPECT_EQ(backend, 0);
  EXPECT_EQ(device, 0);
  gst_util_set_object_arg(G_OBJECT(el), "colormap", "turbo");
  g_object_get(el, "colormap", &colormap, nullptr);
  EXPECT_EQ(colormap, 1);
  GParamSpecDouble *gain_spec =
      G_PARAM_SPEC_DOUBLE(g_object_class_find_property(G_OBJECT_GET_CLASS(el), "gain"));
  EXPECT_EQ(gain_spec->minimum, 0.0);
  EXPECT_EQ(gain_spec->maximum, 1000.0);
  GstElementFactory *f = gst_element_get_factory(el);
  EXPECT_STREQ(gst_element_factory_get_metadata(f, GST_ELEMENT_METADATA_KLASS),
               "Filter/Effect/Video");
  gst_object_unref(el);
}
