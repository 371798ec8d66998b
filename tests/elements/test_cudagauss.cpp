// cudagauss through GstHarness: every format and method against the core's
// CPU reference (and hand-computed values), properties, changes while playing,
// the kernel-size rules. The backend is the default (auto): the CUDA path on
// the GPU machine, the CPU path on CI; test_cudagauss_cuda compares both.
#include <gst/check/gstharness.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cudadiff/gauss.h"
#include "frames.h"
#include "gst_test.h"

namespace {

const char *kFormats[] = {"BGR",  "RGB",   "BGRx", "RGBx", "xBGR", "xRGB", "BGRA", "RGBA", "ABGR",
                          "ARGB", "GRAY8", "I420", "YV12", "NV12", "NV21", "Y444", "Y42B"};

GstVideoInfo info_of(const std::string &caps_str) {
  GstCaps *caps = gst_caps_from_string(caps_str.c_str());
  GstVideoInfo info;
  gst_video_info_from_caps(&info, caps);
  gst_caps_unref(caps);
  return info;
}

// A view of a mapped frame for the core (the same mapping as the elements').
cudadiff::FrameView view_of(GstVideoFrame *f) {
  cudadiff::FrameView v;
  const char *name = GST_VIDEO_FRAME_FORMAT(f) == GST_VIDEO_FORMAT_UNKNOWN
                         ? ""
                         : gst_video_format_to_string(GST_VIDEO_FRAME_FORMAT(f));
  const std::string n = name;
  const std::pair<const char *, cudadiff::VideoFormat> table[] = {
      {"BGR", cudadiff::VideoFormat::BGR},     {"RGB", cudadiff::VideoFormat::RGB},
      {"BGRx", cudadiff::VideoFormat::BGRx},   {"RGBx", cudadiff::VideoFormat::RGBx},
      {"xBGR", cudadiff::VideoFormat::xBGR},   {"xRGB", cudadiff::VideoFormat::xRGB},
      {"BGRA", cudadiff::VideoFormat::BGRA},   {"RGBA", cudadiff::VideoFormat::RGBA},
      {"ABGR", cudadiff::VideoFormat::ABGR},   {"ARGB", cudadiff::VideoFormat::ARGB},
      {"GRAY8", cudadiff::VideoFormat::GRAY8}, {"I420", cudadiff::VideoFormat::I420},
      {"YV12", cudadiff::VideoFormat::YV12},   {"NV12", cudadiff::VideoFormat::NV12},
      {"NV21", cudadiff::VideoFormat::NV21},   {"Y444", cudadiff::VideoFormat::Y444},
      {"Y42B", cudadiff::VideoFormat::Y42B},
  };
  for (const auto &e : table)
    if (n == e.first) v.format = e.second;
  v.width = GST_VIDEO_FRAME_WIDTH(f);
  v.height = GST_VIDEO_FRAME_HEIGHT(f);
  for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES(f); ++p) {
    v.data[p] = static_cast<uint8_t *>(GST_VIDEO_FRAME_PLANE_DATA(f, p));
    v.stride[p] = static_cast<size_t>(GST_VIDEO_FRAME_PLANE_STRIDE(f, p));
  }
  return v;
}

// Random bytes in every plane.
GstBuffer *random_buffer(const GstVideoInfo &info, int index = 0) {
  return gst_test::random_buffer(info, testing_util::rng(), index);
}

// The bytes the core's CPU reference gives for `in`.
testing_util::HostFrame reference(GstBuffer *in, const GstVideoInfo &info,
                                  const cudadiff::NoiseFilterSettings &s) {
  testing_util::HostFrame want;
  auto cpu = cudadiff::Context::cpu();
  gst_test::read_frame(in, info, [&](GstVideoFrame *f) {
    const cudadiff::FrameView v = view_of(f);
    want = testing_util::HostFrame(v.format, v.width, v.height);
    cudadiff::NoiseFilter::create(*cpu, v.format, v.width, v.height)->process(v, want.view, s);
  });
  return want;
}

void expect_equal(GstBuffer *out, const GstVideoInfo &info, const testing_util::HostFrame &want,
                  const std::string &what) {
  gst_test::read_frame(out, info, [&](GstVideoFrame *f) {
    EXPECT_EQ(testing_util::compare_frames(want.view, view_of(f)), "") << what;
  });
}

cudadiff::NoiseFilterSettings settings(cudadiff::NoiseFilterMethod m, int k, double sigma = 0) {
  cudadiff::NoiseFilterSettings s;
  s.method = m;
  s.kernel_size = k;
  s.sigma = sigma;
  return s;
}

// Pushes one random frame through `launch` and compares with the reference.
void check_format(const char *format, int w, int h, const char *launch,
                  const cudadiff::NoiseFilterSettings &s) {
  const std::string caps = gst_test::raw_caps(format, w, h);
  GstHarness *harness = gst_harness_new_parse(launch);
  gst_harness_set_src_caps_str(harness, caps.c_str());
  gst_harness_set_sink_caps_str(harness, caps.c_str());
  const GstVideoInfo info = info_of(caps);
  GstBuffer *in = random_buffer(info);
  const testing_util::HostFrame want = reference(in, info, s);
  GstBuffer *out = gst_harness_push_and_pull(harness, in);
  ASSERT_NE(out, nullptr) << format << " " << launch;
  expect_equal(out, info, want, std::string(format) + " " + launch);
  gst_buffer_unref(out);
  gst_harness_teardown(harness);
}

}  // namespace

TEST(CudaGauss, EveryFormatEveryMethod) {
  using M = cudadiff::NoiseFilterMethod;
  for (const char *fmt : kFormats) {
    check_format(fmt, 37, 21, "cudagauss", settings(M::Gaussian, 5));
    check_format(fmt, 37, 21, "cudagauss method=box kernel-size=3", settings(M::Box, 3));
    check_format(fmt, 37, 21, "cudagauss method=median kernel-size=5", settings(M::Median, 5));
  }
}

TEST(CudaGauss, OddSizesAndSigma) {
  using M = cudadiff::NoiseFilterMethod;
  for (auto wh : {std::make_pair(1, 1), std::make_pair(1, 9), std::make_pair(9, 1),
                  std::make_pair(3, 2), std::make_pair(641, 3)}) {
    check_format("BGRA", wh.first, wh.second, "cudagauss kernel-size=9 sigma=2.5",
                 settings(M::Gaussian, 9, 2.5));
    check_format("I420", wh.first, wh.second, "cudagauss method=median kernel-size=7",
                 settings(M::Median, 7));
    check_format("NV12", wh.first, wh.second, "cudagauss method=box kernel-size=31",
                 settings(M::Box, 31));
  }
}

// Hand-computed values through the element: a constant frame stays constant,
// alpha passes, and a bright right edge stays bright (replicated borders).
TEST(CudaGauss, HandComputedValues) {
  const std::string caps = gst_test::raw_caps("BGRA", 5, 3);
  const GstVideoInfo info = info_of(caps);
  for (const char *launch : {"cudagauss", "cudagauss method=box kernel-size=3",
                             "cudagauss method=median kernel-size=3"}) {
    GstHarness *h = gst_harness_new_parse(launch);
    gst_harness_set_src_caps_str(h, caps.c_str());
    GstBuffer *in = gst_test::make_buffer(info, [](GstVideoFrame *f) {
      for (int y = 0; y < 3; ++y)
        for (int x = 0; x < 5; ++x) {
          guint8 *px = gst_test::pixel(f, 0, 4 * x, y);
          px[0] = 10;                               // B: constant
          px[1] = x == 4 ? 90 : 0;                  // G: bright right column
          px[2] = 200;                              // R: constant
          px[3] = static_cast<guint8>(x * 50 + y);  // A: varies, must pass through
        }
    });
    GstBuffer *out = gst_harness_push_and_pull(h, in);
    ASSERT_NE(out, nullptr);
    const std::string l = launch;
    // G at x = 4: gaussian (1 2 1)... sigma 0, k 5: weights (1 4 6 4 1)/16 on 0,0,90,90,90
    // = (6*90 + 4*90 + 90)/16 = 61.9 -> 62; box 3: (0+90+90)/3 = 60; median 3: 90.
    const int edge = l == "cudagauss" ? 62 : l.find("box") != std::string::npos ? 60 : 90;
    gst_test::read_frame(out, info, [&](GstVideoFrame *f) {
      for (int y = 0; y < 3; ++y)
        for (int x = 0; x < 5; ++x) {
          const guint8 *px = gst_test::pixel(f, 0, 4 * x, y);
          EXPECT_EQ(px[0], 10) << launch;
          EXPECT_EQ(px[2], 200) << launch;
          EXPECT_EQ(px[3], x * 50 + y) << launch << " alpha";
        }
      EXPECT_EQ(gst_test::pixel(f, 0, 4 * 4 + 1, 1)[0], edge) << launch;
      EXPECT_EQ(gst_test::pixel(f, 0, 1, 1)[0], 0) << launch;
    });
    gst_buffer_unref(out);
    gst_harness_teardown(h);
  }
}

TEST(CudaGauss, PropertiesAndDefaults) {
  GstElement *el = gst_element_factory_make("cudagauss", nullptr);
  ASSERT_NE(el, nullptr);
  for (const char *name : {"method", "kernel-size", "sigma", "backend", "device-id"}) {
    GParamSpec *spec = g_object_class_find_property(G_OBJECT_GET_CLASS(el), name);
    ASSERT_NE(spec, nullptr) << name;
    EXPECT_NE(std::string(g_param_spec_get_blurb(spec)).find("Default"), std::string::npos) << name;
    if (std::string(name) != "backend" && std::string(name) != "device-id") {
      EXPECT_TRUE(spec->flags & GST_PARAM_MUTABLE_PLAYING) << name;
    }
  }
  gint method = -1, k = -1, backend = -1, device = -1;
  gdouble sigma = -1;
  g_object_get(el, "method", &method, "kernel-size", &k, "sigma", &sigma, "backend", &backend,
               "device-id", &device, nullptr);
  EXPECT_EQ(method, 0);  // gaussian
  EXPECT_EQ(k, 5);
  EXPECT_EQ(sigma, 0.0);
  EXPECT_EQ(backend, 0);  // auto
  EXPECT_EQ(device, 0);
  // Even sizes become the next odd one.
  g_object_set(el, "kernel-size", 4, nullptr);
  g_object_get(el, "kernel-size", &k, nullptr);
  EXPECT_EQ(k, 5);
  gst_util_set_object_arg(G_OBJECT(el), "method", "median");
  g_object_get(el, "method", &method, nullptr);
  EXPECT_EQ(method, 2);
  GParamSpec *ks = g_object_class_find_property(G_OBJECT_GET_CLASS(el), "kernel-size");
  EXPECT_EQ(G_PARAM_SPEC_INT(ks)->minimum, 3);
  EXPECT_EQ(G_PARAM_SPEC_INT(ks)->maximum, 31);
  GstElementFactory *f = gst_element_get_factory(el);
  EXPECT_STREQ(gst_element_factory_get_metadata(f, GST_ELEMENT_METADATA_KLASS),
               "Filter/Effect/Video");
  gst_object_unref(el);
}

// Method, kernel-size and sigma change while playing; a median of size 9
// uses 7, with one warning on the bus until the settings are valid again.
TEST(CudaGauss, ChangesWhilePlaying) {
  using M = cudadiff::NoiseFilterMethod;
  const std::string caps = gst_test::raw_caps("BGR", 64, 24);
  const GstVideoInfo info = info_of(caps);
  GstHarness *h = gst_harness_new_parse("cudagauss");
  GstBus *bus = gst_bus_new();
  gst_element_set_bus(h->element, bus);
  gst_harness_set_src_caps_str(h, caps.c_str());
  GstElement *el = gst_harness_find_element(h, "cudagauss");
  ASSERT_NE(el, nullptr);
  struct Step {
    const char *method;
    int k;
    double sigma;
    cudadiff::NoiseFilterSettings want;
  } steps[] = {
      {"gaussian", 5, 0, settings(M::Gaussian, 5)},
      {"box", 7, 0, settings(M::Box, 7)},
      {"gaussian", 11, 3.0, settings(M::Gaussian, 11, 3.0)},
      {"median", 3, 0, settings(M::Median, 3)},
      {"median", 9, 0, settings(M::Median, 7)},
      {"median", 31, 0, settings(M::Median, 7)},
      {"median", 5, 0, settings(M::Median, 5)},
      {"median", 11, 0, settings(M::Median, 7)},
  };
  int index = 0;
  for (const Step &s : steps) {
    gst_util_set_object_arg(G_OBJECT(el), "method", s.method);
    g_object_set(el, "kernel-size", s.k, "sigma", s.sigma, nullptr);
    GstBuffer *in = random_buffer(info, index++);
    const testing_util::HostFrame want = reference(in, info, s.want);
    GstBuffer *out = gst_harness_push_and_pull(h, in);
    ASSERT_NE(out, nullptr);
    expect_equal(out, info, want, std::string(s.method) + " " + std::to_string(s.k));
    gst_buffer_unref(out);
  }
  // Sizes 9 and 31 in a row warn once; 11 after a valid 5, again.
  const std::vector<gst_test::BusText> warnings = gst_test::pop_texts(bus, GST_MESSAGE_WARNING);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_EQ(warnings[0].message, "the median takes kernel-size 3, 5 or 7: using 7 instead of 9");
  EXPECT_EQ(warnings[1].message, "the median takes kernel-size 3, 5 or 7: using 7 instead of 11");
  EXPECT_NE(warnings[0].debug.find("method=gaussian or box"), std::string::npos)
      << warnings[0].debug;
  gst_object_unref(el);
  // The bus's messages hold the element: detach it before the teardown.
  gst_element_set_bus(h->element, nullptr);
  gst_harness_teardown(h);
  gst_object_unref(bus);
}

// Output caps equal the input caps; unsupported formats do not negotiate.
TEST(CudaGauss, CapsNegotiation) {
  GstHarness *h = gst_harness_new("cudagauss");
  gst_harness_set_src_caps_str(h, gst_test::raw_caps("NV12", 16, 8).c_str());
  GstBuffer *out =
      gst_harness_push_and_pull(h, random_buffer(info_of(gst_test::raw_caps("NV12", 16, 8))));
  ASSERT_NE(out, nullptr);
  GstCaps *out_caps = gst_pad_get_current_caps(h->sinkpad);
  ASSERT_NE(out_caps, nullptr);
  GstStructure *st = gst_caps_get_structure(out_caps, 0);
  EXPECT_STREQ(gst_structure_get_string(st, "format"), "NV12");
  gint w = 0, ht = 0;
  gst_structure_get_int(st, "width", &w);
  gst_structure_get_int(st, "height", &ht);
  EXPECT_EQ(w, 16);
  EXPECT_EQ(ht, 8);
  gst_caps_unref(out_caps);
  gst_buffer_unref(out);
  gst_harness_teardown(h);

  h = gst_harness_new("cudagauss");
  gst_harness_set_src_caps_str(h, gst_test::raw_caps("YUY2", 16, 8).c_str());
  EXPECT_EQ(gst_harness_push(h, random_buffer(info_of(gst_test::raw_caps("YUY2", 16, 8)))),
            GST_FLOW_NOT_NEGOTIATED);
  gst_harness_teardown(h);
}

namespace {

// Field `field` (0: the even lines) of a frame as a frame of its own.
cudadiff::FrameView field_of(const cudadiff::FrameView &frame, int field) {
  cudadiff::FrameView v = frame;
  v.height = field == 0 ? (frame.height + 1) / 2 : frame.height / 2;
  for (int p = 0; p < frame.n_planes(); ++p) {
    v.data[p] += static_cast<size_t>(field) * frame.stride[p];
    v.stride[p] *= 2;
  }
  return v;
}

std::string interleaved_caps(const char *format, int w, int h) {
  return gst_test::raw_caps(format, w, h) + ",interlace-mode=interleaved";
}

// The error cudagauss posts for `caps` (and that the buffer is refused).
gst_test::BusText refusal(const std::string &caps) {
  GstHarness *h = gst_harness_new("cudagauss");
  GstBus *bus = gst_bus_new();
  gst_element_set_bus(h->element, bus);
  gst_harness_set_src_caps_str(h, caps.c_str());
  // (GstBaseTransform tries the caps again for each buffer: still one
  // error; it posted one per attempt before, seven for one buffer here)
  for (int i = 0; i < 3; ++i) {
    const GstFlowReturn ret = gst_harness_push(h, random_buffer(info_of(caps)));
    EXPECT_EQ(ret, GST_FLOW_NOT_NEGOTIATED) << caps;
  }
  const std::vector<gst_test::BusText> errors = gst_test::pop_texts(bus, GST_MESSAGE_ERROR);
  gst_element_set_bus(h->element, nullptr);
  gst_object_unref(bus);
  gst_harness_teardown(h);
  EXPECT_EQ(errors.size(), 1u) << caps;
  return errors.empty() ? gst_test::BusText() : errors[0];
}

// A GRAY8 16x8 frame whose fields are flat: the top field (even lines) 0,
// the bottom field 200.
GstBuffer *flat_fields(const GstVideoInfo &info) {
  return gst_test::make_buffer(info, [](GstVideoFrame *f) {
    for (int y = 0; y < 8; ++y) memset(gst_test::pixel(f, 0, 0, y), y % 2 ? 200 : 0, 16);
  });
}

void expect_flat_fields(GstBuffer *out, const GstVideoInfo &info, const std::string &what) {
  gst_test::read_frame(out, info, [&](GstVideoFrame *f) {
    for (int y = 0; y < 8; ++y)
      for (int x = 0; x < 16; ++x)
        ASSERT_EQ(gst_test::pixel(f, 0, x, y)[0], y % 2 ? 200 : 0)
            << what << " x " << x << " y " << y;
  });
}

}  // namespace

// Each field of an interleaved frame is filtered alone, as a frame of half
// the height: flat fields of different values stay as they are, and random
// frames give, field by field, the CPU reference of that field.
TEST(CudaGauss, InterlacedFramesAreFilteredFieldByField) {
  {
    const std::string caps = interleaved_caps("GRAY8", 16, 8);
    const GstVideoInfo info = info_of(caps);
    GstBuffer *in = flat_fields(info);
    for (const char *launch : {"cudagauss", "cudagauss method=box kernel-size=7",
                               "cudagauss method=median kernel-size=3"}) {
      GstHarness *h = gst_harness_new_parse(launch);
      gst_harness_set_src_caps_str(h, caps.c_str());
      GstBuffer *out = gst_harness_push_and_pull(h, gst_buffer_ref(in));
      ASSERT_NE(out, nullptr) << launch;
      expect_flat_fields(out, info, launch);
      gst_buffer_unref(out);
      gst_harness_teardown(h);
    }
    gst_buffer_unref(in);
  }
  {
    // I420 and NV12: the chroma rows alternate between the fields too (row
    // j of a chroma plane belongs to field j % 2).
    for (const char *format : {"I420", "NV12"}) {
      const std::string caps = interleaved_caps(format, 16, 8);
      const GstVideoInfo info = info_of(caps);
      auto fill = [](GstVideoFrame *f) {
        for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES(f); ++p)
          for (int y = 0; y < GST_VIDEO_FRAME_COMP_HEIGHT(f, p); ++y)
            memset(gst_test::pixel(f, p, 0, y), y % 2 ? 200 : 10 + 20 * p,
                   GST_VIDEO_FRAME_PLANE_STRIDE(f, p));
      };
      GstBuffer *in = gst_test::make_buffer(info, fill);
      GstBuffer *want = gst_test::make_buffer(info, fill);
      GstHarness *h = gst_harness_new("cudagauss");
      gst_harness_set_src_caps_str(h, caps.c_str());
      GstBuffer *out = gst_harness_push_and_pull(h, in);
      ASSERT_NE(out, nullptr) << format;
      gst_test::read_frame(want, info, [&](GstVideoFrame *w) {
        gst_test::read_frame(out, info, [&](GstVideoFrame *o) {
          EXPECT_EQ(testing_util::compare_frames(view_of(w), view_of(o)), "") << format;
        });
      });
      gst_buffer_unref(want);
      gst_buffer_unref(out);
      gst_harness_teardown(h);
    }
  }
  using M = cudadiff::NoiseFilterMethod;
  const struct {
    const char *format;
    int height;
  } cases[] = {{"BGR", 21},  {"GRAY8", 2}, {"BGRA", 24}, {"I420", 24},
               {"NV12", 20}, {"YV12", 4},  {"Y42B", 17}, {"Y444", 9}};
  for (const auto &c : cases)
    for (const auto &[launch, s] :
         {std::pair{"cudagauss", settings(M::Gaussian, 5)},
          std::pair{"cudagauss method=median kernel-size=5", settings(M::Median, 5)}}) {
      const std::string caps = interleaved_caps(c.format, 37, c.height);
      const GstVideoInfo info = info_of(caps);
      GstBuffer *in = random_buffer(info);
      testing_util::HostFrame want[2];
      auto cpu = cudadiff::Context::cpu();
      gst_test::read_frame(in, info, [&](GstVideoFrame *f) {
        for (int field = 0; field < 2; ++field) {
          const cudadiff::FrameView v = field_of(view_of(f), field);
          want[field] = testing_util::HostFrame(v.format, v.width, v.height);
          cudadiff::NoiseFilter::create(*cpu, v.format, v.width, v.height)
              ->process(v, want[field].view, s);
        }
      });
      GstHarness *h = gst_harness_new_parse(launch);
      gst_harness_set_src_caps_str(h, caps.c_str());
      GstBuffer *out = gst_harness_push_and_pull(h, in);
      ASSERT_NE(out, nullptr) << caps << " " << launch;
      gst_test::read_frame(out, info, [&](GstVideoFrame *f) {
        for (int field = 0; field < 2; ++field)
          EXPECT_EQ(testing_util::compare_frames(want[field].view, field_of(view_of(f), field)), "")
              << caps << " " << launch << " field " << field;
      });
      GstCaps *out_caps = gst_pad_get_current_caps(h->sinkpad);
      ASSERT_NE(out_caps, nullptr);
      EXPECT_STREQ(gst_structure_get_string(gst_caps_get_structure(out_caps, 0), "interlace-mode"),
                   "interleaved");
      gst_caps_unref(out_caps);
      gst_buffer_unref(out);
      gst_harness_teardown(h);
    }
}

// interlace-mode=mixed: the frames flagged interlaced are filtered field by
// field, the others as whole frames.
TEST(CudaGauss, MixedInterlacingFollowsEachFramesFlag) {
  const std::string caps = gst_test::raw_caps("GRAY8", 16, 8) + ",interlace-mode=mixed";
  const GstVideoInfo info = info_of(caps);
  GstHarness *h = gst_harness_new("cudagauss");
  gst_harness_set_src_caps_str(h, caps.c_str());
  GstBuffer *in = flat_fields(info);
  GST_BUFFER_FLAG_SET(in, GST_VIDEO_BUFFER_FLAG_INTERLACED);
  GstBuffer *out = gst_harness_push_and_pull(h, in);
  ASSERT_NE(out, nullptr);
  expect_flat_fields(out, info, "flagged interlaced");
  gst_buffer_unref(out);
  // The same frame unflagged is one picture: its lines are mixed.
  in = flat_fields(info);
  const testing_util::HostFrame want =
      reference(in, info, settings(cudadiff::NoiseFilterMethod::Gaussian, 5));
  EXPECT_NE(want.view.row(0, 0)[0], 0);
  out = gst_harness_push_and_pull(h, in);
  ASSERT_NE(out, nullptr);
  expect_equal(out, info, want, "progressive frame of a mixed stream");
  gst_buffer_unref(out);
  gst_harness_teardown(h);
}

// A GstVideoMeta whose planes do not fit their memory is refused with an
// error; before, the filter read past the buffer (a crash with a stride of
// G_MAXINT).
TEST(CudaGauss, RefusesAVideoMetaThatReachesPastItsMemory) {
  gst_test::expect_filter_refuses_meta_past_memory("cudagauss", nullptr);
}

// Interlacing that cannot be filtered field by field is refused with one
// error that says why in its message and what to do in its details.
TEST(CudaGauss, RefusesInterlacingItCannotFilterByField) {
  gst_test::BusText e = refusal(interleaved_caps("I420", 16, 10));
  EXPECT_NE(e.message.find("interlaced I420 (interleaved) of height 10 cannot be filtered field "
                           "by field: 4:2:0 needs a height that is a multiple of 4"),
            std::string::npos)
      << e.message;
  EXPECT_NE(e.debug.find("deinterlace"), std::string::npos) << e.debug;
  e = refusal(gst_test::raw_caps("NV12", 16, 6) + ",interlace-mode=mixed");
  EXPECT_NE(e.message.find("multiple of 4"), std::string::npos) << e.message;
  e = refusal(interleaved_caps("GRAY8", 16, 1));
  EXPECT_NE(e.message.find("a field needs at least one line"), std::string::npos) << e.message;
}
