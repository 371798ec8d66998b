// cudagrayscale through GstHarness: caps negotiation in both output modes,
// every format, values, and a property change while playing. The backend is
// the one a user gets by default (auto), so on the GPU machine this runs the
// CUDA path and on CI the CPU path; test_cudagrayscale_cuda compares both.
#include <gst/check/gstharness.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gst_test.h"

namespace {

const char *kRgbFormats[] = {"BGR",  "RGB",  "BGRx", "RGBx", "xBGR",
                             "xRGB", "BGRA", "RGBA", "ABGR", "ARGB"};

int bt601(int r, int g, int b) {
  return (77 * r + 150 * g + 29 * b + 128) >> 8;
}
int average(int r, int g, int b) {
  return static_cast<int>(std::lround((r + g + b) / 3.0));
}

// Colour of pixel (x, y) in the test pattern.
void colour_at(int x, int y, int *r, int *g, int *b) {
  *r = (x * 29 + y * 7) & 255;
  *g = (x * 3 + y * 53 + 17) & 255;
  *b = (x * 91 + y * 13 + 101) & 255;
}

GstBuffer *pattern_buffer(const GstVideoInfo &info, int index = 0) {
  return gst_test::make_buffer(
      info,
      [](GstVideoFrame *f) {
        const GstVideoFormatInfo *fi = f->info.finfo;
        for (int y = 0; y < GST_VIDEO_FRAME_HEIGHT(f); ++y)
          for (int x = 0; x < GST_VIDEO_FRAME_WIDTH(f); ++x) {
            int r, g, b;
            colour_at(x, y, &r, &g, &b);
            const int ps = GST_VIDEO_FORMAT_INFO_PSTRIDE(fi, 0);
            guint8 *px = gst_test::pixel(f, 0, x * ps, y);
            if (GST_VIDEO_FORMAT_INFO_IS_GRAY(fi)) {
              px[0] = static_cast<guint8>(r);
              continue;
            }
            for (int k = 0; k < ps; ++k) px[k] = static_cast<guint8>(0xA0 + x % 16);  // alpha / x
            px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, 0)] = static_cast<guint8>(r);
            px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, 1)] = static_cast<guint8>(g);
            px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, 2)] = static_cast<guint8>(b);
          }
      },
      index);
}

GstHarness *make_harness(const char *launch, const std::string &in_caps,
                         const std::string &out_caps) {
  GstHarness *h = gst_harness_new_parse(launch);
  gst_harness_set_src_caps_str(h, in_caps.c_str());
  gst_harness_set_sink_caps_str(h, out_caps.c_str());
  return h;
}

GstVideoInfo info_of(const std::string &caps_str) {
  GstCaps *caps = gst_caps_from_string(caps_str.c_str());
  GstVideoInfo info;
  gst_video_info_from_caps(&info, caps);
  gst_caps_unref(caps);
  return info;
}

// Pushes one pattern frame and checks every output pixel.
void check_conversion(const char *in_format, const char *out_format, int w, int h,
                      const char *method = "bt601") {
  const std::string in_caps = gst_test::raw_caps(in_format, w, h);
  const std::string out_caps = gst_test::raw_caps(out_format, w, h);
  const std::string launch = std::string("cudagrayscale method=") + method;
  GstHarness *harness = make_harness(launch.c_str(), in_caps, out_caps);
  const GstVideoInfo in_info = info_of(in_caps), out_info = info_of(out_caps);
  GstBuffer *out = gst_harness_push_and_pull(harness, pattern_buffer(in_info));
  ASSERT_NE(out, nullptr);
  const bool gray_in = std::string(in_format) == "GRAY8";
  const bool avg = std::string(method) == "average";
  gst_test::read_frame(out, out_info, [&](GstVideoFrame *f) {
    const GstVideoFormatInfo *fi = f->info.finfo;
    const int ps = GST_VIDEO_FORMAT_INFO_PSTRIDE(fi, 0);
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        int r, g, b;
        colour_at(x, y, &r, &g, &b);
        const int want = gray_in ? r : (avg ? average(r, g, b) : bt601(r, g, b));
        const guint8 *px = gst_test::pixel(f, 0, x * ps, y);
        if (GST_VIDEO_FORMAT_INFO_IS_GRAY(fi)) {
          ASSERT_EQ(px[0], want) << in_format << "->" << out_format << " at " << x << "," << y;
        } else {
          for (int c = 0; c < 3; ++c)
            ASSERT_EQ(px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, c)], want)
                << in_format << " channel " << c << " at " << x << "," << y;
          if (GST_VIDEO_FORMAT_INFO_HAS_ALPHA(fi)) {
            ASSERT_EQ(px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, 3)], 0xA0 + x % 16) << "alpha kept";
          }
        }
      }
  });
  gst_buffer_unref(out);
  gst_harness_teardown(harness);
}

}  // namespace

TEST(CudaGrayscale, EveryFormatToGray8) {
  for (const char *fmt : kRgbFormats) check_conversion(fmt, "GRAY8", 37, 5);
  check_conversion("GRAY8", "GRAY8", 37, 5);
}

TEST(CudaGrayscale, EveryFormatKeepsItsFormat) {
  for (const char *fmt : kRgbFormats) check_conversion(fmt, fmt, 37, 5);
}

TEST(CudaGrayscale, OddSizes) {
  for (auto wh : {std::make_pair(1, 1), std::make_pair(3, 1), std::make_pair(1, 7),
                  std::make_pair(17, 13), std::make_pair(641, 3)}) {
    check_conversion("BGR", "GRAY8", wh.first, wh.second);
    check_conversion("RGBA", "RGBA", wh.first, wh.second, "average");
  }
}

// Without constraints downstream, GRAY8 is chosen; GRAY8 input cannot become
// a colour format.
TEST(CudaGrayscale, CapsNegotiation) {
  GstHarness *h = gst_harness_new("cudagrayscale");
  gst_harness_set_src_caps_str(h, gst_test::raw_caps("BGRx", 8, 8).c_str());
  GstVideoInfo in_info = info_of(gst_test::raw_caps("BGRx", 8, 8));
  GstBuffer *out = gst_harness_push_and_pull(h, pattern_buffer(in_info));
  ASSERT_NE(out, nullptr);
  GstCaps *out_caps = gst_pad_get_current_caps(h->sinkpad);
  ASSERT_NE(out_caps, nullptr);
  EXPECT_STREQ(gst_structure_get_string(gst_caps_get_structure(out_caps, 0), "format"), "GRAY8");
  gst_caps_unref(out_caps);
  gst_buffer_unref(out);
  gst_harness_teardown(h);

  h = gst_harness_new("cudagrayscale");
  gst_harness_set_sink_caps_str(h, "video/x-raw,format=BGR");
  gst_harness_set_src_caps_str(h, gst_test::raw_caps("GRAY8", 8, 8).c_str());
  in_info = info_of(gst_test::raw_caps("GRAY8", 8, 8));
  EXPECT_EQ(gst_harness_push(h, pattern_buffer(in_info)), GST_FLOW_NOT_NEGOTIATED);
  gst_harness_teardown(h);
}

// Output of another colour family than the input keeps none of the input's
// colorimetry (an RGB matrix on GRAY8, a YUV matrix on BGR: GStreamer warns
// that they are invalid and uses the defaults); output of the same family
// keeps it, and downstream may still ask for one of its own. The filters
// share this (gst_cudadiff_transform_formats()).
TEST(CudaGrayscale, ColorimetryOnlyWithinTheColourFamily) {
  struct Case {
    const char *element, *in_format, *colorimetry, *out_caps;
    const char *want;  // the output's colorimetry (nullptr: none)
  };
  const Case cases[] = {
      {"cudagrayscale", "BGRx", "sRGB", "format=GRAY8", nullptr},
      {"cudagrayscale", "BGRx", "sRGB", "format=BGRx", "sRGB"},
      {"cudabinarize", "RGBA", "sRGB", "format=GRAY8", nullptr},
      {"cudaheatmap", "GRAY8", "1:4:0:0", "format=BGR", nullptr},
      {"cudanoisevis", "GRAY8", "1:4:0:0", "format=BGR", nullptr},
      {"cudaheatmap", "BGR", "sRGB", "format=BGR", "sRGB"},
      // downstream asks for a colorimetry of the output's family
      {"cudaheatmap", "GRAY8", "1:4:0:0", "format=BGR,colorimetry=sRGB", "sRGB"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(std::string(c.element) + " " + c.in_format + " -> " + c.out_caps);
    const std::string in_caps =
        gst_test::raw_caps(c.in_format, 8, 8) + ",colorimetry=" + c.colorimetry;
    GstHarness *h = make_harness(c.element, in_caps, std::string("video/x-raw,") + c.out_caps);
    GstBuffer *out = gst_harness_push_and_pull(h, pattern_buffer(info_of(in_caps)));
    ASSERT_NE(out, nullptr);
    gst_buffer_unref(out);
    GstCaps *out_caps = gst_pad_get_current_caps(h->sinkpad);
    ASSERT_NE(out_caps, nullptr);
    const GstStructure *st = gst_caps_get_structure(out_caps, 0);
    if (c.want) {
      EXPECT_STREQ(gst_structure_get_string(st, "colorimetry"), c.want);
    } else {
      EXPECT_FALSE(gst_structure_has_field(st, "colorimetry"));
      EXPECT_FALSE(gst_structure_has_field(st, "chroma-site"));
    }
    gst_caps_unref(out_caps);
    gst_harness_teardown(h);
  }
}

TEST(CudaGrayscale, TransformCapsMapsFormats) {
  GstElement *el = gst_element_factory_make("cudagrayscale", nullptr);
  GstBaseTransformClass *klass = GST_BASE_TRANSFORM_GET_CLASS(el);
  // The formats in system memory (backend=cpu offers no memory:CUDAMemory;
  // the CUDA memory variants are checked in tests/pipelines/test_cuda_memory).
  gst_util_set_object_arg(G_OBJECT(el), "backend", "cpu");
  GstCaps *bgr = gst_caps_from_string("video/x-raw,format=BGR,width=4,height=4");
  GstCaps *src = klass->transform_caps(GST_BASE_TRANSFORM(el), GST_PAD_SINK, bgr, nullptr);
  gchar *s = gst_caps_to_string(src);
  EXPECT_STREQ(s, "video/x-raw, format=(string){ GRAY8, BGR }, width=(int)4, height=(int)4");
  g_free(s);
  GstCaps *rgba = gst_caps_from_string("video/x-raw,format=RGBA,width=4,height=4");
  GstCaps *sink = klass->transform_caps(GST_BASE_TRANSFORM(el), GST_PAD_SRC, rgba, nullptr);
  s = gst_caps_to_string(sink);
  EXPECT_STREQ(s, "video/x-raw, format=(string)RGBA, width=(int)4, height=(int)4");
  g_free(s);
  GstCaps *gray = gst_caps_from_string("video/x-raw,format=GRAY8");
  GstCaps *all = klass->transform_caps(GST_BASE_TRANSFORM(el), GST_PAD_SRC, gray, nullptr);
  GstStructure *st = gst_caps_get_structure(all, 0);
  EXPECT_EQ(gst_value_list_get_size(gst_structure_get_value(st, "format")), 11u);
  for (GstCaps *c : {bgr, src, rgba, sink, gray, all}) gst_caps_unref(c);
  gst_object_unref(el);
}

TEST(CudaGrayscale, MethodChangesWhilePlaying) {
  const std::string caps = gst_test::raw_caps("BGR", 16, 4);
  GstHarness *h = make_harness("cudagrayscale", caps, gst_test::raw_caps("GRAY8", 16, 4));
  const GstVideoInfo in_info = info_of(caps),
                     out_info = info_of(gst_test::raw_caps("GRAY8", 16, 4));
  for (int i = 0; i < 3; ++i) {
    const char *method = i == 1 ? "average" : i == 2 ? "bt709" : "bt601";
    if (i > 0) {
      GstElement *el = gst_harness_find_element(h, "cudagrayscale");
      ASSERT_NE(el, nullptr);
      gst_util_set_object_arg(G_OBJECT(el), "method", method);
      gst_object_unref(el);
    }
    GstBuffer *out = gst_harness_push_and_pull(h, pattern_buffer(in_info, i));
    ASSERT_NE(out, nullptr);
    gst_test::read_frame(out, out_info, [&](GstVideoFrame *f) {
      for (int y = 0; y < 4; ++y)
        for (int x = 0; x < 16; ++x) {
          int r, g, b;
          colour_at(x, y, &r, &g, &b);
          const int want = i == 0   ? bt601(r, g, b)
                           : i == 1 ? average(r, g, b)
                                    : (54 * r + 183 * g + 19 * b + 128) >> 8;
          ASSERT_EQ(gst_test::pixel(f, 0, x, y)[0], want) << method << " at " << x << "," << y;
        }
    });
    gst_buffer_unref(out);
  }
  gst_harness_teardown(h);
}

// GRAY8 in and out: the frame passes through, its memory untouched (it was
// copied before); a packed RGB input is converted again after a caps
// change, and GRAY8 passes through once more. A packed RGB format kept as
// itself is converted (EveryFormatKeepsItsFormat).
TEST(CudaGrayscale, Gray8PassesThrough) {
  const std::string gray = gst_test::raw_caps("GRAY8", 16, 4);
  const std::string bgr = gst_test::raw_caps("BGR", 16, 4);
  GstHarness *h = gst_harness_new("cudagrayscale");
  gst_harness_set_src_caps_str(h, gray.c_str());
  gst_harness_set_sink_caps_str(h, gray.c_str());
  auto push_gray = [&] {
    GstBuffer *in = pattern_buffer(info_of(gray));
    GstMemory *mem = gst_memory_ref(gst_buffer_peek_memory(in, 0));
    GstBuffer *out = gst_harness_push_and_pull(h, in);
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(gst_buffer_n_memory(out), 1u);
    EXPECT_EQ(gst_buffer_peek_memory(out, 0), mem);
    EXPECT_TRUE(gst_base_transform_is_passthrough(GST_BASE_TRANSFORM(h->element)));
    gst_memory_unref(mem);
    gst_buffer_unref(out);
  };
  push_gray();
  gst_harness_set_src_caps_str(h, bgr.c_str());
  GstBuffer *out = gst_harness_push_and_pull(h, pattern_buffer(info_of(bgr)));
  ASSERT_NE(out, nullptr);
  EXPECT_FALSE(gst_base_transform_is_passthrough(GST_BASE_TRANSFORM(h->element)));
  gst_test::read_frame(out, info_of(gray), [&](GstVideoFrame *f) {
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 16; ++x) {
        int r, g, b;
        colour_at(x, y, &r, &g, &b);
        ASSERT_EQ(gst_test::pixel(f, 0, x, y)[0], bt601(r, g, b)) << x << "," << y;
      }
  });
  gst_buffer_unref(out);
  gst_harness_set_src_caps_str(h, gray.c_str());
  push_gray();
  gst_harness_teardown(h);
}

// Metas that hold for a frame of the same size and orientation (a region
// of interest from a detector upstream, a time code) go with the frame, as
// videoconvert does for its conversion to GRAY8 (GStreamer 1.22's
// GstVideoFilter dropped the region of interest).
TEST(CudaGrayscale, RegionsOfInterestGoWithTheFrame) {
  const std::string caps = gst_test::raw_caps("BGR", 16, 4);
  GstHarness *h = make_harness("cudagrayscale", caps, gst_test::raw_caps("GRAY8", 16, 4));
  GstBuffer *in = pattern_buffer(info_of(caps), 0);
  gst_buffer_add_video_region_of_interest_meta(in, "face", 3, 1, 5, 2);
  GstVideoTimeCode *tc =
      gst_video_time_code_new(30, 1, nullptr, GST_VIDEO_TIME_CODE_FLAGS_NONE, 1, 2, 3, 4, 0);
  gst_buffer_add_video_time_code_meta(in, tc);
  gst_video_time_code_free(tc);
  GstBuffer *out = gst_harness_push_and_pull(h, in);
  ASSERT_NE(out, nullptr);
  GstVideoRegionOfInterestMeta *roi = gst_buffer_get_video_region_of_interest_meta_id(out, 0);
  ASSERT_NE(roi, nullptr);
  EXPECT_STREQ(g_quark_to_string(roi->roi_type), "face");
  EXPECT_EQ(roi->x, 3u);
  EXPECT_EQ(roi->y, 1u);
  EXPECT_EQ(roi->w, 5u);
  EXPECT_EQ(roi->h, 2u);
  GstVideoTimeCodeMeta *tcm = gst_buffer_get_video_time_code_meta(out);
  ASSERT_NE(tcm, nullptr);
  EXPECT_EQ(tcm->tc.frames, 4u);
  gst_buffer_unref(out);
  gst_harness_teardown(h);
}

TEST(CudaGrayscale, PropertiesAndDefaults) {
  GstElement *el = gst_element_factory_make("cudagrayscale", nullptr);
  ASSERT_NE(el, nullptr);
  for (const char *name : {"method", "backend", "device-id"}) {
    GParamSpec *spec = g_object_class_find_property(G_OBJECT_GET_CLASS(el), name);
    ASSERT_NE(spec, nullptr) << name;
    EXPECT_NE(std::string(g_param_spec_get_blurb(spec)).find("Default"), std::string::npos) << name;
  }
  gint method = -1, backend = -1, device = -1;
  g_object_get(el, "method", &method, "backend", &backend, "device-id", &device, nullptr);
  EXPECT_EQ(method, 1);   // bt601
  EXPECT_EQ(backend, 0);  // auto
  EXPECT_EQ(device, 0);
  GstElementFactory *f = gst_element_get_factory(el);
  EXPECT_STREQ(gst_element_factory_get_metadata(f, GST_ELEMENT_METADATA_KLASS),
               "Filter/Effect/Video");
  gst_object_unref(el);
}

// Every element of the plugin is named after its factory by default
// (cudagauss0, as stock elements are), not after its type.
TEST(Plugin, DefaultNamesAreTheFactoryNames) {
  for (const char *factory :
       {"cudagrayscale", "cudagauss", "cudabinarize", "cudaheatmap", "cudanoisevis",
        "cudatextoverlay", "cudadiffenc", "cudadiffdec", "cudadiffparse"}) {
    GstElement *el = gst_element_factory_make(factory, nullptr);
    ASSERT_NE(el, nullptr) << factory;
    gchar *name = gst_element_get_name(el);
    const std::string n = name;
    g_free(name);
    EXPECT_EQ(n.rfind(factory, 0), 0u) << n;
    EXPECT_TRUE(n.size() > strlen(factory) &&
                std::isdigit(static_cast<unsigned char>(n[strlen(factory)])))
        << n;
    gst_object_unref(el);
  }
}
