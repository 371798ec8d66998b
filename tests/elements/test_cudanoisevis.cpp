// cudanoisevis through GstHarness: every format in both modes, colours with
// alpha, the first-frame rule after start, flush and caps change, the
// cudanoisevis element messages and the `stats` property (values worked out
// from the test pattern), properties while playing, caps, defaults and
// blurbs. Integer rule: outputs are checked exactly on either backend.
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

// Frame i of the test sequence: a base colour per pixel; from frame 1 on,
// pixels with (x + y + i) % 3 == 0 have R raised by 30 (marked at the default
// threshold), pixels with (x + 2y) % 5 == 0 have G raised by 20 (not more
// than 20, so not marked unless the threshold is lower). The alpha/x byte is
// constant.
Rgb colour_at(int x, int y, int i) {
  Rgb c{(x * 29 + y * 7) % 200, (x * 3 + y * 53 + 17) % 200, (x * 91 + y * 13 + 101) % 200};
  if (i > 0 && (x + y + i) % 3 == 0) c.r += 30;
  if (i > 0 && (x + 2 * y + i) % 5 == 0) c.g += 20;
  return c;
}
constexpr int kExtra = 0xC3;

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
            for (int k = 0; k < ps; ++k) px[k] = kExtra;
            px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, 0)] = static_cast<guint8>(c.r);
            px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, 1)] = static_cast<guint8>(c.g);
            px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, 2)] = static_cast<guint8>(c.b);
          }
      },
      i);
}

// Changed bytes of pixel (x, y) from frame i-1 to frame i at `threshold`.
int changed_bytes(bool gray, int x, int y, int i, int threshold) {
  if (i == 0) return 0;
  const Rgb a = colour_at(x, y, i - 1), b = colour_at(x, y, i);
  int n = std::abs(a.r - b.r) > threshold;
  if (!gray) n += (std::abs(a.g - b.g) > threshold) + (std::abs(a.b - b.b) > threshold);
  return n;
}

struct Settings {
  int threshold = 20;
  bool overlay = false;
  guint32 color = 0xffff0000u;
};

int paint(int c, int b, int a) {
  return (c * a + b * (255 - a) + 127) / 255;
}

void check_output(GstBuffer *out, const std::string &in_format, const std::string &out_format,
                  int w, int h, int i, const Settings &s = Settings(), bool first = false) {
  const GstVideoInfo out_info = info_of(gst_test::raw_caps(out_format.c_str(), w, h));
  const bool gray_in = in_format == "GRAY8";
  const int a = (s.color >> 24) & 255;
  const Rgb colour{static_cast<int>((s.color >> 16) & 255), static_cast<int>((s.color >> 8) & 255),
                   static_cast<int>(s.color & 255)};
  gst_test::read_frame(out, out_info, [&](GstVideoFrame *f) {
    const GstVideoFormatInfo *fi = f->info.finfo;
    const int ps = GST_VIDEO_FORMAT_INFO_PSTRIDE(fi, 0);
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const bool marked = !first && changed_bytes(gray_in, x, y, i, s.threshold) > 0;
        Rgb bg = colour_at(x, y, i);
        if (gray_in) bg = {bg.r, bg.r, bg.r};
        if (!s.overlay) bg = {0, 0, 0};
        const guint8 *px = gst_test::pixel(f, 0, x * ps, y);
        const std::string where = in_format + "->" + out_format + " frame " + std::to_string(i) +
                                  " at " + std::to_string(x) + "," + std::to_string(y);
        if (GST_VIDEO_FORMAT_INFO_IS_GRAY(fi)) {
          const int gray = (77 * colour.r + 150 * colour.g + 29 * colour.b + 128) >> 8;
          ASSERT_EQ(px[0], marked ? paint(gray, bg.r, a) : bg.r) << where;
          continue;
        }
        ASSERT_EQ(px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, 0)],
                  marked ? paint(colour.r, bg.r, a) : bg.r)
            << where;
        ASSERT_EQ(px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, 1)],
                  marked ? paint(colour.g, bg.g, a) : bg.g)
            << where;
        ASSERT_EQ(px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, 2)],
                  marked ? paint(colour.b, bg.b, a) : bg.b)
            << where;
        if (ps == 4) {
          const int extra = 6 - GST_VIDEO_FORMAT_INFO_POFFSET(fi, 0) -
                            GST_VIDEO_FORMAT_INFO_POFFSET(fi, 1) -
                            GST_VIDEO_FORMAT_INFO_POFFSET(fi, 2);
          ASSERT_EQ(px[extra], gray_in ? 255 : kExtra) << where << " alpha/x byte";
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

void check_sequence(const std::string &in_format, const std::string &out_format, int w, int h,
                    const std::string &props = "", const Settings &s = Settings(), int n = 3) {
  const std::string in_caps = gst_test::raw_caps(in_format.c_str(), w, h);
  GstHarness *harness =
      make_harness("cudanoisevis " + props, in_caps, gst_test::raw_caps(out_format.c_str(), w, h));
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

// The expected report over frames [from, to) of the sequence at w x h.
struct Expected {
  guint frames = 0, compared = 0;
  guint64 marked = 0, pixels = 0, changed = 0, bytes = 0;
};
Expected expected_report(bool gray, int bytes_per_pixel, int w, int h, int from, int to,
                         int threshold = 20) {
  Expected e;
  for (int i = from; i < to; ++i) {
    e.frames++;
    if (i == 0) continue;
    e.compared++;
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const int n = changed_bytes(gray, x, y, i, threshold);
        e.changed += n;
        e.marked += n > 0;
      }
    e.pixels += static_cast<guint64>(w) * h;
    e.bytes += static_cast<guint64>(w) * h * bytes_per_pixel;
  }
  return e;
}

void expect_report(const GstStructure *s, const Expected &e, int threshold = 20) {
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(gst_structure_has_name(s, "cudanoisevis"));
  guint frames = 0, compared = 0, thr = 0;
  guint64 marked = 0, pixels = 0, changed = 0, bytes = 0, ts = 0;
  gdouble mf = -1, cf = -1;
  EXPECT_TRUE(gst_structure_get(
      s, "frames", G_TYPE_UINT, &frames, "compared-frames", G_TYPE_UINT, &compared, "threshold",
      G_TYPE_UINT, &thr, "marked-pixels", G_TYPE_UINT64, &marked, "pixels", G_TYPE_UINT64, &pixels,
      "changed-bytes", G_TYPE_UINT64, &changed, "bytes", G_TYPE_UINT64, &bytes, "marked-fraction",
      G_TYPE_DOUBLE, &mf, "changed-byte-fraction", G_TYPE_DOUBLE, &cf, "timestamp", G_TYPE_UINT64,
      &ts, nullptr));
  EXPECT_EQ(frames, e.frames);
  EXPECT_EQ(compared, e.compared);
  EXPECT_EQ(thr, static_cast<guint>(threshold));
  EXPECT_EQ(marked, e.marked);
  EXPECT_EQ(pixels, e.pixels);
  EXPECT_EQ(changed, e.changed);
  EXPECT_EQ(bytes, e.bytes);
  EXPECT_DOUBLE_EQ(mf, e.pixels ? double(e.marked) / double(e.pixels) : 0.0);
  EXPECT_DOUBLE_EQ(cf, e.bytes ? double(e.changed) / double(e.bytes) : 0.0);
  EXPECT_GT(e.marked, 0u);
}

// Pops the next cudanoisevis element message (nullptr when none is queued).
GstMessage *pop_report(GstBus *bus) {
  return gst_bus_pop_filtered(bus, GST_MESSAGE_ELEMENT);
}

}  // namespace

TEST(CudaNoiseVis, EveryFormatBothModes) {
  for (const char *fmt : kRgbFormats) {
    check_sequence(fmt, fmt, 37, 5);
    Settings overlay;
    overlay.overlay = true;
    check_sequence(fmt, fmt, 37, 5, "mode=overlay", overlay);
  }
  check_sequence("GRAY8", "GRAY8", 37, 5);
  for (const char *fmt : {"RGB", "RGBx", "ABGR"}) {
    check_sequence("GRAY8", fmt, 37, 5);
    Settings overlay;
    overlay.overlay = true;
    check_sequence("GRAY8", fmt, 37, 5, "mode=overlay", overlay);
  }
}

TEST(CudaNoiseVis, OddSizes) {
  for (auto wh : {std::make_pair(1, 1), std::make_pair(3, 1), std::make_pair(1, 7),
                  std::make_pair(17, 13), std::make_pair(641, 3)}) {
    check_sequence("BGR", "BGR", wh.first, wh.second);
    check_sequence("ARGB", "ARGB", wh.first, wh.second);
    check_sequence("GRAY8", "GRAY8", wh.first, wh.second);
  }
}

TEST(CudaNoiseVis, ThresholdAndColour) {
  Settings s;
  s.threshold = 19;  // now the +20 on G marks too
  check_sequence("BGR", "BGR", 23, 6, "threshold=19", s);
  s.threshold = 255;
  check_sequence("BGR", "BGR", 23, 6, "threshold=255", s);
  s = Settings();
  s.color = 0x8000ff00u;  // half-transparent green
  check_sequence("RGBA", "RGBA", 23, 6, "color=0x8000ff00", s);
  s.overlay = true;
  check_sequence("RGBA", "RGBA", 23, 6, "color=0x8000ff00 mode=overlay", s);
  check_sequence("GRAY8", "GRAY8", 23, 6, "color=0x8000ff00 mode=overlay", s);
}

TEST(CudaNoiseVis, PropertiesChangeWhilePlaying) {
  const int w = 21, hgt = 4;
  const std::string caps = gst_test::raw_caps("BGRx", w, hgt);
  GstHarness *h = make_harness("cudanoisevis", caps, caps);
  const GstVideoInfo info = info_of(caps);
  GstElement *el = gst_harness_find_element(h, "cudanoisevis");
  ASSERT_NE(el, nullptr);
  Settings s;
  for (int i = 0; i < 5; ++i) {
    if (i == 2) {
      g_object_set(el, "threshold", 10u, "color", 0xff0000ffu, nullptr);
      s.threshold = 10;
      s.color = 0xff0000ffu;
    } else if (i == 3) {
      gst_util_set_object_arg(G_OBJECT(el), "mode", "overlay");
      s.overlay = true;
    }
    GstBuffer *out = gst_harness_push_and_pull(h, pattern_buffer(info, i));
    ASSERT_NE(out, nullptr);
    check_output(out, "BGRx", "BGRx", w, hgt, i, s);
    gst_buffer_unref(out);
  }
  gst_object_unref(el);
  gst_harness_teardown(h);
}

// stats-interval=2 over 5 frames: reports after frames 2 and 4, each over its
// two frames (the first frame has nothing to compare with); `stats` holds the
// last report; nothing is posted with stats-interval=0.
TEST(CudaNoiseVis, MessagesAndStatsProperty) {
  const int w = 29, hgt = 7;
  const std::string caps = gst_test::raw_caps("RGB", w, hgt);
  GstHarness *h = make_harness("cudanoisevis stats-interval=2", caps, caps);
  GstElement *el = gst_harness_find_element(h, "cudanoisevis");
  GstBus *bus = gst_bus_new();
  gst_element_set_bus(el, bus);
  GstStructure *stats = nullptr;
  g_object_get(el, "stats", &stats, nullptr);
  EXPECT_EQ(stats, nullptr);
  // Each report notifies `stats` (two reports in five frames).
  int notified = 0;
  g_signal_connect(el, "notify::stats", G_CALLBACK(+[](GObject *, GParamSpec *, gpointer n) {
                     ++*static_cast<int *>(n);
                   }),
                   &notified);
  const GstVideoInfo info = info_of(caps);
  for (int i = 0; i < 5; ++i)
    gst_buffer_unref(gst_harness_push_and_pull(h, pattern_buffer(info, i)));
  EXPECT_EQ(notified, 2);

  GstMessage *m = pop_report(bus);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(GST_MESSAGE_SRC(m), GST_OBJECT(el));
  expect_report(gst_message_get_structure(m), expected_report(false, 3, w, hgt, 0, 2));
  guint64 ts = 0;
  gst_structure_get_uint64(gst_message_get_structure(m), "timestamp", &ts);
  EXPECT_EQ(ts, gst_util_uint64_scale(1, GST_SECOND, 30));  // the second frame's
  gst_message_unref(m);
  m = pop_report(bus);
  ASSERT_NE(m, nullptr);
  const Expected second = expected_report(false, 3, w, hgt, 2, 4);
  expect_report(gst_message_get_structure(m), second);
  gst_message_unref(m);
  EXPECT_EQ(pop_report(bus), nullptr);  // frame 5 starts the next interval

  g_object_get(el, "stats", &stats, nullptr);
  expect_report(stats, second);
  gst_structure_free(stats);

  // A flush starts a new interval and a new first frame.
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_flush_start()));
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_flush_stop(TRUE)));
  GstSegment segment;
  gst_segment_init(&segment, GST_FORMAT_TIME);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_segment(&segment)));
  for (int i = 5; i < 7; ++i) {
    GstBuffer *out = gst_harness_push_and_pull(h, pattern_buffer(info, i));
    check_output(out, "RGB", "RGB", w, hgt, i, Settings(), /*first=*/i == 5);
    gst_buffer_unref(out);
  }
  m = pop_report(bus);
  ASSERT_NE(m, nullptr);
  Expected after_flush = expected_report(false, 3, w, hgt, 6, 7);
  after_flush.frames = 2;  // frame 5 (nothing compared) and frame 6
  expect_report(gst_message_get_structure(m), after_flush);
  gst_message_unref(m);

  // Off: no more reports.
  g_object_set(el, "stats-interval", 0u, nullptr);
  for (int i = 7; i < 11; ++i)
    gst_buffer_unref(gst_harness_push_and_pull(h, pattern_buffer(info, i)));
  EXPECT_EQ(pop_report(bus), nullptr);
  // Changing the interval while playing starts a fresh one.
  g_object_set(el, "stats-interval", 3u, "threshold", 19u, nullptr);
  for (int i = 11; i < 14; ++i)
    gst_buffer_unref(gst_harness_push_and_pull(h, pattern_buffer(info, i)));
  m = pop_report(bus);
  ASSERT_NE(m, nullptr);
  expect_report(gst_message_get_structure(m), expected_report(false, 3, w, hgt, 11, 14, 19), 19);
  gst_message_unref(m);

  // Stopped and started again: no report until the new run's first one.
  ASSERT_EQ(gst_element_set_state(h->element, GST_STATE_READY), GST_STATE_CHANGE_SUCCESS);
  g_object_get(el, "stats", &stats, nullptr);
  EXPECT_NE(stats, nullptr) << "the last report stays while stopped";
  if (stats) gst_structure_free(stats);
  ASSERT_NE(gst_element_set_state(h->element, GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
  g_object_get(el, "stats", &stats, nullptr);
  EXPECT_EQ(stats, nullptr) << "the previous run's report after a start";
  if (stats) gst_structure_free(stats);
  gst_harness_set_src_caps_str(h, caps.c_str());
  for (int i = 14; i < 17; ++i)
    gst_buffer_unref(gst_harness_push_and_pull(h, pattern_buffer(info, i)));
  m = pop_report(bus);
  ASSERT_NE(m, nullptr);
  gst_message_unref(m);
  g_object_get(el, "stats", &stats, nullptr);
  EXPECT_NE(stats, nullptr);
  if (stats) gst_structure_free(stats);

  gst_element_set_bus(el, nullptr);
  gst_object_unref(bus);
  gst_object_unref(el);
  gst_harness_teardown(h);
}

// At EOS the frames since the last report get one of their own, before EOS
// goes on; when the last frame ended an interval, EOS adds none. Without
// stats-interval nothing is posted at EOS either.
TEST(CudaNoiseVis, EndOfStreamReportsTheRest) {
  const int w = 23, hgt = 5;
  const std::string caps = gst_test::raw_caps("BGR", w, hgt);
  const GstVideoInfo info = info_of(caps);
  for (int frames : {5, 6}) {
    for (guint interval : {3u, 0u}) {
      const std::string launch = "cudanoisevis stats-interval=" + std::to_string(interval);
      GstHarness *h = make_harness(launch.c_str(), caps, caps);
      GstElement *el = gst_harness_find_element(h, "cudanoisevis");
      GstBus *bus = gst_bus_new();
      gst_element_set_bus(el, bus);
      for (int i = 0; i < frames; ++i)
        gst_buffer_unref(gst_harness_push_and_pull(h, pattern_buffer(info, i)));
      if (interval > 0) {
        GstMessage *m = pop_report(bus);
        ASSERT_NE(m, nullptr);
        expect_report(gst_message_get_structure(m), expected_report(false, 3, w, hgt, 0, 3));
        gst_message_unref(m);
        if (frames == 6) {
          m = pop_report(bus);
          ASSERT_NE(m, nullptr);
          expect_report(gst_message_get_structure(m), expected_report(false, 3, w, hgt, 3, 6));
          gst_message_unref(m);
        }
      }
      EXPECT_EQ(pop_report(bus), nullptr) << "before EOS";

      ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
      GstMessage *m = pop_report(bus);
      if (interval > 0 && frames == 5) {
        ASSERT_NE(m, nullptr) << "no report at EOS";
        const Expected rest = expected_report(false, 3, w, hgt, 3, 5);
        EXPECT_EQ(rest.frames, 2u);
        expect_report(gst_message_get_structure(m), rest);
        guint64 ts = 0;
        gst_structure_get_uint64(gst_message_get_structure(m), "timestamp", &ts);
        EXPECT_EQ(ts, gst_util_uint64_scale(4, GST_SECOND, 30));  // the last frame's
        GstStructure *stats = nullptr;
        g_object_get(el, "stats", &stats, nullptr);
        expect_report(stats, rest);
        if (stats) gst_structure_free(stats);
        gst_message_unref(m);
        m = pop_report(bus);
      }
      EXPECT_EQ(m, nullptr) << frames << " frames, interval " << interval;
      if (m) gst_message_unref(m);
      // EOS itself went on, after the report.
      bool eos = false;
      while (GstEvent *e = gst_harness_try_pull_event(h)) {
        eos |= GST_EVENT_TYPE(e) == GST_EVENT_EOS;
        gst_event_unref(e);
      }
      EXPECT_TRUE(eos);

      gst_element_set_bus(el, nullptr);
      gst_object_unref(bus);
      gst_object_unref(el);
      gst_harness_teardown(h);
    }
  }
  // stats-interval changed after the last frame: its counts are dropped, as
  // at any change, and EOS posts nothing.
  GstHarness *h = make_harness("cudanoisevis stats-interval=3", caps, caps);
  GstElement *el = gst_harness_find_element(h, "cudanoisevis");
  GstBus *bus = gst_bus_new();
  gst_element_set_bus(el, bus);
  for (int i = 0; i < 5; ++i)
    gst_buffer_unref(gst_harness_push_and_pull(h, pattern_buffer(info, i)));
  GstMessage *m = pop_report(bus);
  ASSERT_NE(m, nullptr);
  gst_message_unref(m);
  g_object_set(el, "stats-interval", 0u, nullptr);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  m = pop_report(bus);
  EXPECT_EQ(m, nullptr) << "a report at EOS after stats-interval=0";
  if (m) gst_message_unref(m);
  gst_element_set_bus(el, nullptr);
  gst_object_unref(bus);
  gst_object_unref(el);
  gst_harness_teardown(h);
}

// Another stream (a stream-start of another stream-id) ends the one before:
// its frames since the last report are reported, as at EOS, and the new
// stream's first frame has nothing marked and starts a new interval. The same
// stream-id again changes nothing.
TEST(CudaNoiseVis, AnotherStreamReportsTheRestAndStartsOver) {
  const int w = 11, hgt = 4;
  const std::string caps = gst_test::raw_caps("BGR", w, hgt);
  const GstVideoInfo info = info_of(caps);
  GstHarness *h = make_harness("cudanoisevis stats-interval=3", caps, caps);
  GstElement *el = gst_harness_find_element(h, "cudanoisevis");
  GstBus *bus = gst_bus_new();
  gst_element_set_bus(el, bus);
  for (int i = 0; i < 5; ++i)
    gst_buffer_unref(gst_harness_push_and_pull(h, pattern_buffer(info, i)));
  GstMessage *m = pop_report(bus);
  ASSERT_NE(m, nullptr);
  expect_report(gst_message_get_structure(m), expected_report(false, 3, w, hgt, 0, 3));
  gst_message_unref(m);
  EXPECT_EQ(pop_report(bus), nullptr);

  GstSegment segment;
  gst_segment_init(&segment, GST_FORMAT_TIME);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_stream_start("another-stream")));
  m = pop_report(bus);
  ASSERT_NE(m, nullptr) << "no report of the stream before";
  expect_report(gst_message_get_structure(m), expected_report(false, 3, w, hgt, 3, 5));
  gst_message_unref(m);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_segment(&segment)));
  for (int i = 0; i < 3; ++i) {
    if (i == 2) {  // the same stream again
      ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_stream_start("another-stream")));
      EXPECT_EQ(pop_report(bus), nullptr) << "the same stream-id again";
    }
    GstBuffer *out = gst_harness_push_and_pull(h, pattern_buffer(info, i));
    ASSERT_NE(out, nullptr);
    check_output(out, "BGR", "BGR", w, hgt, i, Settings(), /*first=*/i == 0);
    gst_buffer_unref(out);
  }
  m = pop_report(bus);
  ASSERT_NE(m, nullptr) << "no report of the new stream's first interval";
  expect_report(gst_message_get_structure(m), expected_report(false, 3, w, hgt, 0, 3));
  gst_message_unref(m);
  gst_element_set_bus(el, nullptr);
  gst_object_unref(bus);
  gst_object_unref(el);
  gst_harness_teardown(h);
}

// Reports count every byte of the pixel: 4 per pixel for BGRx, 1 for GRAY8.
TEST(CudaNoiseVis, ReportBytesPerFormat) {
  for (const char *fmt : {"BGRx", "GRAY8"}) {
    const int w = 13, hgt = 5;
    const std::string caps = gst_test::raw_caps(fmt, w, hgt);
    GstHarness *h = make_harness("cudanoisevis stats-interval=3", caps, caps);
    GstElement *el = gst_harness_find_element(h, "cudanoisevis");
    GstBus *bus = gst_bus_new();
    gst_element_set_bus(el, bus);
    const GstVideoInfo info = info_of(caps);
    for (int i = 0; i < 3; ++i)
      gst_buffer_unref(gst_harness_push_and_pull(h, pattern_buffer(info, i)));
    GstMessage *m = pop_report(bus);
    ASSERT_NE(m, nullptr) << fmt;
    const bool gray = std::string(fmt) == "GRAY8";
    expect_report(gst_message_get_structure(m), expected_report(gray, gray ? 1 : 4, w, hgt, 0, 3));
    gst_message_unref(m);
    gst_element_set_bus(el, nullptr);
    gst_object_unref(bus);
    gst_object_unref(el);
    gst_harness_teardown(h);
  }
}

TEST(CudaNoiseVis, CapsChangeStartsOver) {
  GstHarness *h = make_harness("cudanoisevis mode=overlay", gst_test::raw_caps("ABGR", 8, 4), "");
  Settings overlay;
  overlay.overlay = true;
  GstVideoInfo info = info_of(gst_test::raw_caps("ABGR", 8, 4));
  for (int i = 0; i < 2; ++i) {
    GstBuffer *out = gst_harness_push_and_pull(h, pattern_buffer(info, i));
    check_output(out, "ABGR", "ABGR", 8, 4, i, overlay);
    gst_buffer_unref(out);
  }
  gst_harness_set_src_caps_str(h, gst_test::raw_caps("ABGR", 5, 3).c_str());
  info = info_of(gst_test::raw_caps("ABGR", 5, 3));
  GstBuffer *out = gst_harness_push_and_pull(h, pattern_buffer(info, 2));
  ASSERT_NE(out, nullptr);
  check_output(out, "ABGR", "ABGR", 5, 3, 2, overlay, /*first=*/true);
  gst_buffer_unref(out);
  out = gst_harness_push_and_pull(h, pattern_buffer(info, 3));
  check_output(out, "ABGR", "ABGR", 5, 3, 3, overlay);
  gst_buffer_unref(out);
  gst_harness_teardown(h);
}

TEST(CudaNoiseVis, CapsNegotiation) {
  GstHarness *h = gst_harness_new("cudanoisevis");
  gst_harness_set_src_caps_str(h, gst_test::raw_caps("GRAY8", 8, 2).c_str());
  GstBuffer *out =
      gst_harness_push_and_pull(h, pattern_buffer(info_of(gst_test::raw_caps("GRAY8", 8, 2)), 0));
  ASSERT_NE(out, nullptr);
  GstCaps *caps = gst_pad_get_current_caps(h->sinkpad);
  EXPECT_STREQ(gst_structure_get_string(gst_caps_get_structure(caps, 0), "format"), "BGR");
  gst_caps_unref(caps);
  gst_buffer_unref(out);
  gst_harness_teardown(h);

  h = gst_harness_new("cudanoisevis");
  gst_harness_set_sink_caps_str(h, "video/x-raw,format=xRGB");
  gst_harness_set_src_caps_str(h, gst_test::raw_caps("BGRx", 8, 2).c_str());
  EXPECT_EQ(gst_harness_push(h, pattern_buffer(info_of(gst_test::raw_caps("BGRx", 8, 2)), 0)),
            GST_FLOW_NOT_NEGOTIATED);
  gst_harness_teardown(h);
}

TEST(CudaNoiseVis, PropertiesAndDefaults) {
  GstElement *el = gst_element_factory_make("cudanoisevis", nullptr);
  ASSERT_NE(el, nullptr);
  for (const char *name :
       {"threshold", "mode", "color", "stats-interval", "stats", "backend", "device-id"}) {
    GParamSpec *spec = g_object_class_find_property(G_OBJECT_GET_CLASS(el), name);
    ASSERT_NE(spec, nullptr) << name;
    EXPECT_NE(std::string(g_param_spec_get_blurb(spec)).find("Default"), std::string::npos) << name;
  }
  for (const char *name : {"threshold", "mode", "color", "stats-interval"}) {
    GParamSpec *spec = g_object_class_find_property(G_OBJECT_GET_CLASS(el), name);
    EXPECT_TRUE(spec->flags & GST_PARAM_MUTABLE_PLAYING) << name;
  }
  GParamSpec *stats = g_object_class_find_property(G_OBJECT_GET_CLASS(el), "stats");
  EXPECT_FALSE(stats->flags & G_PARAM_WRITABLE);
  EXPECT_EQ(stats->value_type, GST_TYPE_STRUCTURE);
  guint threshold = 0, color = 0, interval = 99;
  gint mode = -1;
  g_object_get(el, "threshold", &threshold, "color", &color, "stats-interval", &interval, "mode",
               &mode, nullptr);
  EXPECT_EQ(threshold, 20u);
  EXPECT_EQ(color, 0xffff0000u);
  EXPECT_EQ(interval, 0u);
  EXPECT_EQ(mode, 0);  // mask
  gst_util_set_object_arg(G_OBJECT(el), "color", "0x8000ff00");
  g_object_get(el, "color", &color, nullptr);
  EXPECT_EQ(color, 0x8000ff00u);
  GstElementFactory *f = gst_element_get_factory(el);
  EXPECT_STREQ(gst_element_factory_get_metadata(f, GST_ELEMENT_METADATA_KLASS),
               "Filter/Analyzer/Video");
  gst_object_unref(el);
}
