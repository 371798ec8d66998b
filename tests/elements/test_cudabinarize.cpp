// cudabinarize through GstHarness: every format in both output modes, every
// property, caps negotiation, element messages and last-threshold. The
// backend is the default (auto): CUDA on the GPU machine, CPU elsewhere;
// test_cudabinarize_cuda compares the two.
#include <gst/check/gstharness.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cudadiff/binarize.h"
#include "gst_test.h"

namespace {

const char *kFormats[] = {"BGR",  "RGB",  "BGRx", "RGBx",  "xBGR", "xRGB", "BGRA",
                          "RGBA", "ABGR", "ARGB", "GRAY8", "I420", "NV12"};

bool is_yuv(const GstVideoFormatInfo *fi) {
  return GST_VIDEO_FORMAT_INFO_IS_YUV(fi);
}

guint8 alpha_at(int x, int y) {
  return static_cast<guint8>(0x30 + (x * 5 + y) % 101);
}

// Three levels in the proportions 2 : 1 : 1 on frames whose width is a
// multiple of 4 (40 x 1/2, 100 x 1/4, 200 x 1/4): Otsu gives 100 (worked out
// in tests/core/test_binarize.cpp), the peaks are 40 and 100, two-peaks 70.
int three_levels(int x, int y) {
  const int i = (x + 3 * y) % 4;
  return i < 2 ? 40 : i == 2 ? 100 : 200;
}

using Pattern = int (*)(int, int);

// A frame whose gray value is pattern(x, y) for every gray rule (R = G = B);
// YUV chroma and alpha / x get other bytes.
GstBuffer *pattern_buffer(const GstVideoInfo &info, Pattern pattern, int index = 0) {
  return gst_test::make_buffer(
      info,
      [&](GstVideoFrame *f) {
        const GstVideoFormatInfo *fi = f->info.finfo;
        for (int y = 0; y < GST_VIDEO_FRAME_HEIGHT(f); ++y)
          for (int x = 0; x < GST_VIDEO_FRAME_WIDTH(f); ++x) {
            const guint8 v = static_cast<guint8>(pattern(x, y));
            if (GST_VIDEO_FORMAT_INFO_IS_RGB(fi)) {
              const int ps = GST_VIDEO_FORMAT_INFO_PSTRIDE(fi, 0);
              guint8 *px = gst_test::pixel(f, 0, x * ps, y);
              for (int k = 0; k < ps; ++k) px[k] = alpha_at(x, y);
              for (int c = 0; c < 3; ++c) px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, c)] = v;
            } else {
              gst_test::pixel(f, 0, x, y)[0] = v;  // GRAY8, or the Y plane
            }
          }
        for (guint p = 1; p < GST_VIDEO_FRAME_N_PLANES(f); ++p) {
          const int rows = GST_VIDEO_FRAME_COMP_HEIGHT(f, p);
          for (int y = 0; y < rows; ++y)
            for (int x = 0; x < GST_VIDEO_FRAME_COMP_STRIDE(f, p); ++x)
              gst_test::pixel(f, p, x, y)[0] = static_cast<guint8>(x * 13 + y * 7);
        }
      },
      index);
}

GstVideoInfo info_of(const std::string &caps_str) {
  GstCaps *caps = gst_caps_from_string(caps_str.c_str());
  GstVideoInfo info;
  gst_video_info_from_caps(&info, caps);
  gst_caps_unref(caps);
  return info;
}

GstHarness *make_harness(const std::string &launch, const std::string &in_caps,
                         const std::string &out_caps) {
  GstHarness *h = gst_harness_new_parse(launch.c_str());
  gst_harness_set_src_caps_str(h, in_caps.c_str());
  gst_harness_set_sink_caps_str(h, out_caps.c_str());
  return h;
}

gint last_threshold(GstHarness *h) {
  GstElement *el = gst_harness_find_element(h, "cudabinarize");
  gint t = -2;
  g_object_get(el, "last-threshold", &t, nullptr);
  gst_object_unref(el);
  return t;
}

// Checks every output pixel against the rule for `threshold`.
void check_output(GstBuffer *out, const GstVideoInfo &out_info, Pattern pattern, int threshold,
                  bool invert, const std::string &what) {
  gst_test::read_frame(out, out_info, [&](GstVideoFrame *f) {
    const GstVideoFormatInfo *fi = f->info.finfo;
    for (int y = 0; y < GST_VIDEO_FRAME_HEIGHT(f); ++y)
      for (int x = 0; x < GST_VIDEO_FRAME_WIDTH(f); ++x) {
        const int want = (pattern(x, y) > threshold) != invert ? 255 : 0;
        if (GST_VIDEO_FORMAT_INFO_IS_RGB(fi)) {
          const int ps = GST_VIDEO_FORMAT_INFO_PSTRIDE(fi, 0);
          const guint8 *px = gst_test::pixel(f, 0, x * ps, y);
          for (int c = 0; c < 3; ++c)
            ASSERT_EQ(px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, c)], want)
                << what << " channel " << c << " at " << x << "," << y;
          if (ps == 4) {  // alpha or x: the input's byte
            const int a = 6 - GST_VIDEO_FORMAT_INFO_POFFSET(fi, 0) -
                          GST_VIDEO_FORMAT_INFO_POFFSET(fi, 1) -
                          GST_VIDEO_FORMAT_INFO_POFFSET(fi, 2);
            ASSERT_EQ(px[a], alpha_at(x, y)) << what << " alpha at " << x << "," << y;
          }
        } else {
          ASSERT_EQ(gst_test::pixel(f, 0, x, y)[0], want) << what << " at " << x << "," << y;
        }
      }
    if (!is_yuv(fi)) return;
    for (guint p = 1; p < GST_VIDEO_FRAME_N_PLANES(f); ++p)
      for (int y = 0; y < GST_VIDEO_FRAME_COMP_HEIGHT(f, p); ++y)
        for (int x = 0; x < GST_VIDEO_FRAME_COMP_WIDTH(f, p) * GST_VIDEO_FRAME_COMP_PSTRIDE(f, p);
             ++x)
          ASSERT_EQ(gst_test::pixel(f, p, x, y)[0], 128) << what << " chroma plane " << p;
  });
}

// Pushes one frame of `pattern` and checks the output and last-threshold.
void check_conversion(const char *in_format, const char *out_format, int w, int h,
                      const std::string &properties, Pattern pattern, int want_threshold,
                      bool invert = false) {
  const std::string in_caps = gst_test::raw_caps(in_format, w, h);
  const std::string out_caps = gst_test::raw_caps(out_format, w, h);
  GstHarness *harness = make_harness("cudabinarize " + properties, in_caps, out_caps);
  const GstVideoInfo in_info = info_of(in_caps), out_info = info_of(out_caps);
  GstBuffer *out = gst_harness_push_and_pull(harness, pattern_buffer(in_info, pattern));
  ASSERT_NE(out, nullptr);
  const std::string what = std::string(in_format) + "->" + out_format + " " + properties;
  EXPECT_EQ(last_threshold(harness), want_threshold) << what;
  check_output(out, out_info, pattern, want_threshold, invert, what);
  gst_buffer_unref(out);
  gst_harness_teardown(harness);
}

// The threshold the rules give for `pattern` on a w x h frame.
int reference_threshold(Pattern pattern, int w, int h, const cudadiff::BinarizeParams &p) {
  cudadiff::Histogram hist;
  hist.fill(0);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) ++hist[pattern(x, y)];
  return cudadiff::threshold_from_histogram(hist, p).threshold;
}

int diagonal(int x, int y) {
  return (x * 9 + y * 14) & 255;
}

}  // namespace

TEST(CudaBinarize, EveryFormatToGray8) {
  for (const char *fmt : kFormats) check_conversion(fmt, "GRAY8", 36, 6, "", three_levels, 100);
}

TEST(CudaBinarize, EveryFormatKeepsItsFormat) {
  for (const char *fmt : kFormats) {
    if (std::string(fmt) == "GRAY8") continue;
    check_conversion(fmt, fmt, 36, 6, "", three_levels, 100);
    check_conversion(fmt, fmt, 36, 6, "method=two-peaks invert=true", three_levels, 70, true);
  }
}

TEST(CudaBinarize, OddSizes) {
  for (auto wh : {std::make_pair(1, 1), std::make_pair(3, 1), std::make_pair(1, 7),
                  std::make_pair(17, 13), std::make_pair(641, 3)}) {
    cudadiff::BinarizeParams otsu;
    const int t = reference_threshold(diagonal, wh.first, wh.second, otsu);
    for (const char *fmt : {"BGR", "RGBA", "GRAY8", "I420", "NV12"}) {
      check_conversion(fmt, "GRAY8", wh.first, wh.second, "", diagonal, t);
      if (std::string(fmt) != "GRAY8")
        check_conversion(fmt, fmt, wh.first, wh.second, "", diagonal, t);
    }
  }
}

TEST(CudaBinarize, Methods) {
  check_conversion("BGR", "GRAY8", 20, 20, "method=otsu", three_levels, 100);
  check_conversion("BGR", "GRAY8", 20, 20, "method=two-peaks", three_levels, 70);
  check_conversion("BGR", "GRAY8", 20, 20, "method=two-peaks min-threshold=80", three_levels, 80);
  check_conversion("BGR", "GRAY8", 20, 20, "method=two-peaks max-threshold=60", three_levels, 60);
  check_conversion("BGR", "GRAY8", 20, 20, "method=two-peaks min-threshold=90 max-threshold=60",
                   three_levels, 60);  // min > max: max wins
  check_conversion("BGR", "GRAY8", 20, 20, "method=fixed", three_levels, 128);  // default 128
  check_conversion("BGR", "GRAY8", 20, 20, "method=fixed threshold=40", three_levels, 40);
  check_conversion("BGR", "GRAY8", 20, 20, "method=fixed threshold=39", three_levels, 39);
  check_conversion("BGR", "GRAY8", 20, 20, "method=fixed threshold=255", three_levels, 255);
  check_conversion("RGBA", "RGBA", 20, 20, "method=fixed threshold=100 invert=true", three_levels,
                   100, true);
}

// The grayscale rule decides which side a coloured pixel falls on: pure red
// (255, 0, 0) is 85 by average, 77 by BT.601, 54 by BT.709.
TEST(CudaBinarize, GrayscaleProperty) {
  const std::string caps = gst_test::raw_caps("RGB", 8, 2);
  const GstVideoInfo info = info_of(caps), out_info = info_of(gst_test::raw_caps("GRAY8", 8, 2));
  for (const auto &c :
       {std::make_pair("average", 85), std::make_pair("bt601", 77), std::make_pair("bt709", 54)}) {
    for (int t : {c.second - 1, c.second}) {
      const std::string launch = std::string("cudabinarize method=fixed grayscale=") + c.first +
                                 " threshold=" + std::to_string(t);
      GstHarness *h = make_harness(launch, caps, gst_test::raw_caps("GRAY8", 8, 2));
      GstBuffer *in = gst_test::make_buffer(info, [](GstVideoFrame *f) {
        for (int y = 0; y < 2; ++y)
          for (int x = 0; x < 8; ++x) {
            guint8 *px = gst_test::pixel(f, 0, 3 * x, y);
            px[0] = 255;
            px[1] = px[2] = 0;
          }
      });
      GstBuffer *out = gst_harness_push_and_pull(h, in);
      ASSERT_NE(out, nullptr);
      const int want = c.second > t ? 255 : 0;
      gst_test::read_frame(out, out_info, [&](GstVideoFrame *f) {
        for (int y = 0; y < 2; ++y)
          for (int x = 0; x < 8; ++x)
            ASSERT_EQ(gst_test::pixel(f, 0, x, y)[0], want) << c.first << " threshold " << t;
      });
      gst_buffer_unref(out);
      gst_harness_teardown(h);
    }
  }
}

// Properties change between frames while playing.
TEST(CudaBinarize, PropertiesChangeWhilePlaying) {
  const std::string caps = gst_test::raw_caps("BGRx", 20, 20);
  const std::string out_caps = gst_test::raw_caps("GRAY8", 20, 20);
  GstHarness *h = make_harness("cudabinarize", caps, out_caps);
  const GstVideoInfo in_info = info_of(caps), out_info = info_of(out_caps);
  GstElement *el = gst_harness_find_element(h, "cudabinarize");
  struct Step {
    const char *property;
    const char *value;
    int threshold;
    bool invert;
  };
  const Step steps[] = {
      {nullptr, nullptr, 100, false},     {"method", "two-peaks", 70, false},
      {"min-threshold", "75", 75, false}, {"invert", "true", 75, true},
      {"method", "fixed", 128, true},     {"threshold", "99", 99, true},
      {"invert", "false", 99, false},     {"method", "otsu", 100, false},
  };
  int i = 0;
  for (const Step &s : steps) {
    if (s.property) gst_util_set_object_arg(G_OBJECT(el), s.property, s.value);
    GstBuffer *out = gst_harness_push_and_pull(h, pattern_buffer(in_info, three_levels, i++));
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(last_threshold(h), s.threshold) << (s.property ? s.property : "default");
    check_output(out, out_info, three_levels, s.threshold, s.invert,
                 s.property ? s.property : "default");
    gst_buffer_unref(out);
  }
  // Stopped and started again: no last threshold until the new run's first
  // frame.
  ASSERT_EQ(gst_element_set_state(h->element, GST_STATE_READY), GST_STATE_CHANGE_SUCCESS);
  EXPECT_EQ(last_threshold(h), 100);
  ASSERT_NE(gst_element_set_state(h->element, GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
  EXPECT_EQ(last_threshold(h), -1);
  gst_util_set_object_arg(G_OBJECT(el), "method", "fixed");
  gst_harness_set_src_caps_str(h, caps.c_str());
  GstBuffer *out = gst_harness_push_and_pull(h, pattern_buffer(in_info, three_levels, i));
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(last_threshold(h), 99);
  gst_buffer_unref(out);
  gst_object_unref(el);
  gst_harness_teardown(h);
}

TEST(CudaBinarize, ElementMessages) {
  const std::string caps = gst_test::raw_caps("I420", 20, 20);
  GstHarness *h = make_harness("cudabinarize post-messages=true method=two-peaks", caps,
                               gst_test::raw_caps("GRAY8", 20, 20));
  GstElement *el = gst_harness_find_element(h, "cudabinarize");
  GstBus *bus = gst_bus_new();
  gst_element_set_bus(el, bus);
  const GstVideoInfo info = info_of(caps);
  for (int i = 0; i < 3; ++i) {
    GstBuffer *out = gst_harness_push_and_pull(h, pattern_buffer(info, three_levels, i));
    ASSERT_NE(out, nullptr);
    gst_buffer_unref(out);
    GstMessage *msg = gst_bus_pop_filtered(bus, GST_MESSAGE_ELEMENT);
    ASSERT_NE(msg, nullptr) << "frame " << i;
    const GstStructure *s = gst_message_get_structure(msg);
    EXPECT_TRUE(gst_structure_has_name(s, "cudabinarize"));
    guint threshold = 0, c1 = 0, c2 = 0;
    gint p1 = -1, p2 = -1;
    guint64 ts = 0, running = 0;
    EXPECT_TRUE(gst_structure_get_uint(s, "threshold", &threshold));
    EXPECT_TRUE(gst_structure_get_int(s, "peak1", &p1));
    EXPECT_TRUE(gst_structure_get_int(s, "peak2", &p2));
    EXPECT_TRUE(gst_structure_get_uint(s, "peak1-count", &c1));
    EXPECT_TRUE(gst_structure_get_uint(s, "peak2-count", &c2));
    EXPECT_TRUE(gst_structure_get_uint64(s, "timestamp", &ts));
    EXPECT_TRUE(gst_structure_get_uint64(s, "running-time", &running));
    EXPECT_STREQ(gst_structure_get_string(s, "method"), "two-peaks");
    EXPECT_EQ(threshold, 70u);
    EXPECT_EQ(p1, 40);
    EXPECT_EQ(p2, 100);
    EXPECT_EQ(c1, 200u);
    EXPECT_EQ(c2, 100u);
    EXPECT_EQ(ts, gst_util_uint64_scale(i, GST_SECOND, 30));
    EXPECT_EQ(running, ts);
    gst_message_unref(msg);
  }
  // Off again: no more messages.
  g_object_set(el, "post-messages", FALSE, nullptr);
  GstBuffer *out = gst_harness_push_and_pull(h, pattern_buffer(info, three_levels, 3));
  gst_buffer_unref(out);
  EXPECT_EQ(gst_bus_pop_filtered(bus, GST_MESSAGE_ELEMENT), nullptr);
  // Fixed with messages: the peaks are still there.
  g_object_set(el, "post-messages", TRUE, nullptr);
  gst_util_set_object_arg(G_OBJECT(el), "method", "fixed");
  out = gst_harness_push_and_pull(h, pattern_buffer(info, three_levels, 4));
  gst_buffer_unref(out);
  GstMessage *msg = gst_bus_pop_filtered(bus, GST_MESSAGE_ELEMENT);
  ASSERT_NE(msg, nullptr);
  gint p1 = -1;
  guint threshold = 0;
  gst_structure_get_int(gst_message_get_structure(msg), "peak1", &p1);
  gst_structure_get_uint(gst_message_get_structure(msg), "threshold", &threshold);
  EXPECT_EQ(p1, 40);
  EXPECT_EQ(threshold, 128u);
  gst_message_unref(msg);
  gst_element_set_bus(el, nullptr);
  gst_object_unref(bus);
  gst_object_unref(el);
  gst_harness_teardown(h);
}

// Without constraints downstream GRAY8 is chosen; GRAY8 input cannot become a
// colour format; I420 input may stay I420.
TEST(CudaBinarize, CapsNegotiation) {
  GstHarness *h = gst_harness_new("cudabinarize");
  gst_harness_set_src_caps_str(h, gst_test::raw_caps("NV12", 8, 8).c_str());
  GstBuffer *out = gst_harness_push_and_pull(
      h, pattern_buffer(info_of(gst_test::raw_caps("NV12", 8, 8)), three_levels));
  ASSERT_NE(out, nullptr);
  GstCaps *caps = gst_pad_get_current_caps(h->sinkpad);
  ASSERT_NE(caps, nullptr);
  EXPECT_STREQ(gst_structure_get_string(gst_caps_get_structure(caps, 0), "format"), "GRAY8");
  gst_caps_unref(caps);
  gst_buffer_unref(out);
  gst_harness_teardown(h);

  h = gst_harness_new("cudabinarize");
  gst_harness_set_sink_caps_str(h, "video/x-raw,format=BGR");
  gst_harness_set_src_caps_str(h, gst_test::raw_caps("GRAY8", 8, 8).c_str());
  EXPECT_EQ(
      gst_harness_push(h, pattern_buffer(info_of(gst_test::raw_caps("GRAY8", 8, 8)), three_levels)),
      GST_FLOW_NOT_NEGOTIATED);
  gst_harness_teardown(h);
}

TEST(CudaBinarize, TransformCapsMapsFormats) {
  GstElement *el = gst_element_factory_make("cudabinarize", nullptr);
  GstBaseTransformClass *klass = GST_BASE_TRANSFORM_GET_CLASS(el);
  // The formats in system memory (backend=cpu offers no memory:CUDAMemory;
  // the CUDA memory variants are checked in tests/pipelines/test_cuda_memory).
  gst_util_set_object_arg(G_OBJECT(el), "backend", "cpu");
  const auto mapped = [&](GstPadDirection dir, const char *in) {
    GstCaps *c = gst_caps_from_string(in);
    GstCaps *r = klass->transform_caps(GST_BASE_TRANSFORM(el), dir, c, nullptr);
    gchar *s = gst_caps_to_string(r);
    std::string out = s;
    g_free(s);
    gst_caps_unref(c);
    gst_caps_unref(r);
    return out;
  };
  EXPECT_EQ(mapped(GST_PAD_SINK, "video/x-raw,format=BGR,width=4,height=4"),
            "video/x-raw, format=(string){ GRAY8, BGR }, width=(int)4, height=(int)4");
  EXPECT_EQ(mapped(GST_PAD_SINK, "video/x-raw,format=I420,width=4,height=4"),
            "video/x-raw, format=(string){ GRAY8, I420 }, width=(int)4, height=(int)4");
  EXPECT_EQ(mapped(GST_PAD_SINK, "video/x-raw,format=GRAY8"), "video/x-raw, format=(string)GRAY8");
  EXPECT_EQ(mapped(GST_PAD_SRC, "video/x-raw,format=NV12"), "video/x-raw, format=(string)NV12");
  GstCaps *gray = gst_caps_from_string("video/x-raw,format=GRAY8");
  GstCaps *all = klass->transform_caps(GST_BASE_TRANSFORM(el), GST_PAD_SRC, gray, nullptr);
  EXPECT_EQ(
      gst_value_list_get_size(gst_structure_get_value(gst_caps_get_structure(all, 0), "format")),
      13u);
  gst_caps_unref(gray);
  gst_caps_unref(all);
  gst_object_unref(el);
}

TEST(CudaBinarize, PropertiesAndDefaults) {
  GstElement *el = gst_element_factory_make("cudabinarize", nullptr);
  ASSERT_NE(el, nullptr);
  for (const char *name : {"method", "grayscale", "threshold", "min-threshold", "max-threshold",
                           "invert", "post-messages", "last-threshold", "backend", "device-id"}) {
    GParamSpec *spec = g_object_class_find_property(G_OBJECT_GET_CLASS(el), name);
    ASSERT_NE(spec, nullptr) << name;
    EXPECT_NE(std::string(g_param_spec_get_blurb(spec)).find("Default"), std::string::npos) << name;
    const bool writable = (spec->flags & G_PARAM_WRITABLE) != 0;
    EXPECT_EQ(writable, std::string(name) != "last-threshold") << name;
  }
  gint method = -1, gray = -1, backend = -1, device = -1, last = 0;
  guint threshold = 0, min_t = 0, max_t = 0;
  gboolean invert = TRUE, post = TRUE;
  g_object_get(el, "method", &method, "grayscale", &gray, "threshold", &threshold, "min-threshold",
               &min_t, "max-threshold", &max_t, "invert", &invert, "post-messages", &post,
               "last-threshold", &last, "backend", &backend, "device-id", &device, nullptr);
  EXPECT_EQ(method, 0);  // otsu
  EXPECT_EQ(gray, 1);    // bt601
  EXPECT_EQ(threshold, 128u);
  EXPECT_EQ(min_t, 50u);
  EXPECT_EQ(max_t, 200u);
  EXPECT_FALSE(invert);
  EXPECT_FALSE(post);
  EXPECT_EQ(last, -1);
  EXPECT_EQ(backend, 0);  // auto
  EXPECT_EQ(device, 0);
  GParamSpec *spec = g_object_class_find_property(G_OBJECT_GET_CLASS(el), "method");
  EXPECT_TRUE(spec->flags & GST_PARAM_MUTABLE_PLAYING);
  GEnumClass *methods = G_ENUM_CLASS(g_type_class_ref(spec->value_type));
  EXPECT_NE(g_enum_get_value_by_nick(methods, "otsu"), nullptr);
  EXPECT_NE(g_enum_get_value_by_nick(methods, "two-peaks"), nullptr);
  EXPECT_NE(g_enum_get_value_by_nick(methods, "fixed"), nullptr);
  g_type_class_unref(methods);
  GstElementFactory *f = gst_element_get_factory(el);
  EXPECT_STREQ(gst_element_factory_get_metadata(f, GST_ELEMENT_METADATA_KLASS),
               "Filter/Effect/Video");
  gst_object_unref(el);
}

// backend=cpu is always available and gives the same values.
TEST(CudaBinarize, CpuBackend) {
  check_conversion("BGRA", "BGRA", 36, 6, "backend=cpu", three_levels, 100);
  check_conversion("NV12", "NV12", 36, 6, "backend=cpu method=two-peaks", three_levels, 70);
}

// backend=cuda with a device that does not exist fails at start with the
// base class's error (on every machine: no machine has 100 GPUs).
TEST(CudaBinarize, BackendCudaWithoutThatDevice) {
  GError *err = nullptr;
  const std::string msg = gst_test::run_pipeline(
      "videotestsrc num-buffers=1 ! video/x-raw,format=BGR,width=32,height=8 ! "
      "cudabinarize backend=cuda device-id=99 ! fakesink",
      20, &err);
  ASSERT_NE(err, nullptr) << msg;
  EXPECT_TRUE(g_error_matches(err, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND)) << msg;
  EXPECT_NE(msg.find("no CUDA device is usable for backend=cuda"), std::string::npos) << msg;
  g_error_free(err);
  // auto with that device-id runs on the CPU when the device is missing.
  EXPECT_EQ(gst_test::run_pipeline("videotestsrc num-buffers=2 ! video/x-raw,width=32,height=8 ! "
                                   "cudabinarize backend=auto device-id=99 ! fakesink",
                                   20),
            "");
}
