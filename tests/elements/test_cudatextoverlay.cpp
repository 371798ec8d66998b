// cudatextoverlay through GstHarness: pass-through on empty text (the same
// buffer, untouched, and downstream's allocation answer), text blended only
// inside its box in every format, exact colours where glyphs cover pixels
// fully, alignment, clipping without a byte written outside the frame, text
// changes while playing (rendered again then, and only then), caps changes.
// The backend is the default (auto): CUDA on the GPU machine, CPU elsewhere;
// test_cudatextoverlay_cuda compares the two.
#include <gst/check/gstharness.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gst_test.h"

namespace {

const char *kAllFormats[] = {"BGR",  "RGB",  "BGRx",  "RGBx", "xBGR", "xRGB", "BGRA", "RGBA",
                             "ABGR", "ARGB", "GRAY8", "I420", "YV12", "NV12", "NV21"};

GstVideoInfo info_of(const std::string &caps_str) {
  GstCaps *caps = gst_caps_from_string(caps_str.c_str());
  GstVideoInfo info;
  gst_video_info_from_caps(&info, caps);
  gst_caps_unref(caps);
  return info;
}

// A frame of one colour: packed RGB (r, g, b) with every other byte (alpha,
// x) set to `other`; GRAY8 r; 4:2:0 Y = y, U = V = 128.
GstBuffer *solid_buffer(const GstVideoInfo &info, int r, int g, int b, int other = 0x5A, int y = 16,
                        int index = 0) {
  return gst_test::make_buffer(
      info,
      [&](GstVideoFrame *f) {
        const GstVideoFormatInfo *fi = f->info.finfo;
        if (GST_VIDEO_FORMAT_INFO_IS_YUV(fi)) {
          for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES(f); ++p) {
            const int value = p == 0 ? y : 128;
            const int rows = GST_VIDEO_FRAME_COMP_HEIGHT(f, p == 0 ? 0 : 1);
            const int bytes =
                p == 0 ? GST_VIDEO_FRAME_WIDTH(f)
                       : GST_VIDEO_FRAME_COMP_WIDTH(f, 1) * GST_VIDEO_FRAME_COMP_PSTRIDE(f, 1);
            for (int row = 0; row < rows; ++row)
              memset(gst_test::pixel(f, p, 0, row), value, bytes);
          }
          return;
        }
        const int ps = GST_VIDEO_FORMAT_INFO_PSTRIDE(fi, 0);
        for (int row = 0; row < GST_VIDEO_FRAME_HEIGHT(f); ++row)
          for (int x = 0; x < GST_VIDEO_FRAME_WIDTH(f); ++x) {
            guint8 *px = gst_test::pixel(f, 0, x * ps, row);
            if (GST_VIDEO_FORMAT_INFO_IS_GRAY(fi)) {
              px[0] = static_cast<guint8>(r);
              continue;
            }
            for (int k = 0; k < ps; ++k) px[k] = static_cast<guint8>(other);
            px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, 0)] = static_cast<guint8>(r);
            px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, 1)] = static_cast<guint8>(g);
            px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, 2)] = static_cast<guint8>(b);
          }
      },
      index);
}

// Every byte of a buffer, and whether it belongs to a visible pixel.
struct Bytes {
  std::vector<guint8> data;
  std::vector<bool> visible;
};

Bytes bytes_of(GstBuffer *buf, const GstVideoInfo &info) {
  Bytes b;
  b.data.resize(gst_buffer_get_size(buf));
  gst_buffer_extract(buf, 0, b.data.data(), b.data.size());
  b.visible.assign(b.data.size(), false);
  for (guint p = 0; p < GST_VIDEO_INFO_N_PLANES(&info); ++p) {
    const int comp = p == 0 ? 0 : 1;
    const int rows = GST_VIDEO_INFO_COMP_HEIGHT(&info, comp);
    const int row_bytes =
        GST_VIDEO_INFO_COMP_WIDTH(&info, comp) * GST_VIDEO_INFO_COMP_PSTRIDE(&info, comp);
    for (int y = 0; y < rows; ++y)
      for (int x = 0; x < row_bytes; ++x)
        b.visible[GST_VIDEO_INFO_PLANE_OFFSET(&info, p) +
                  y * GST_VIDEO_INFO_PLANE_STRIDE(&info, p) + x] = true;
  }
  return b;
}

struct Box {
  int x, y, w, h;
};

GstElement *overlay_of(GstHarness *h) {
  return gst_harness_find_element(h, "cudatextoverlay");
}

Box text_box(GstHarness *h) {
  GstElement *el = overlay_of(h);
  Box b;
  guint w = 0, hh = 0;
  g_object_get(el, "text-x", &b.x, "text-y", &b.y, "text-width", &w, "text-height", &hh, nullptr);
  b.w = static_cast<int>(w);
  b.h = static_cast<int>(hh);
  gst_object_unref(el);
  return b;
}

guint64 render_count(GstHarness *h) {
  GstElement *el = overlay_of(h);
  guint64 n = 0;
  g_object_get(el, "render-count", &n, nullptr);
  gst_object_unref(el);
  return n;
}

void set_arg(GstHarness *h, const char *name, const char *value) {
  GstElement *el = overlay_of(h);
  gst_util_set_object_arg(G_OBJECT(el), name, value);
  gst_object_unref(el);
}

GstHarness *make_harness(const std::string &launch, const std::string &caps) {
  GstHarness *h = gst_harness_new_parse(launch.c_str());
  gst_harness_set_src_caps_str(h, caps.c_str());
  gst_harness_set_sink_caps_str(h, caps.c_str());
  return h;
}

// The frame position (x, y) of byte `i` of plane `p`, or false for padding.
bool pixel_of_byte(const GstVideoInfo &info, size_t i, int *plane, int *x, int *y) {
  for (int p = static_cast<int>(GST_VIDEO_INFO_N_PLANES(&info)) - 1; p >= 0; --p) {
    const size_t off = GST_VIDEO_INFO_PLANE_OFFSET(&info, p);
    if (i < off) continue;
    const size_t stride = GST_VIDEO_INFO_PLANE_STRIDE(&info, p);
    *plane = p;
    *y = static_cast<int>((i - off) / stride);
    const int xb = static_cast<int>((i - off) % stride);
    const int comp = p == 0 ? 0 : 1;
    *x = xb / GST_VIDEO_INFO_COMP_PSTRIDE(&info, comp);
    if (p > 0) {  // chroma sample -> the luma pixels it covers start at 2x, 2y
      *x *= 2;
      *y *= 2;
    }
    return true;
  }
  return false;
}

}  // namespace

TEST(CudaTextOverlay, PropertiesAndDefaults) {
  GstElement *el = gst_element_factory_make("cudatextoverlay", nullptr);
  ASSERT_NE(el, nullptr);
  for (const char *name : {"text", "font-desc", "color", "halignment", "valignment", "xpad", "ypad",
                           "shaded-background", "shading-value", "text-x", "text-y", "text-width",
                           "text-height", "render-count", "backend", "device-id"}) {
    GParamSpec *spec = g_object_class_find_property(G_OBJECT_GET_CLASS(el), name);
    ASSERT_NE(spec, nullptr) << name;
    EXPECT_NE(std::string(g_param_spec_get_blurb(spec)).find("Default"), std::string::npos) << name;
  }
  for (const char *name : {"text", "font-desc", "color", "halignment", "valignment", "xpad", "ypad",
                           "shaded-background", "shading-value"}) {
    GParamSpec *spec = g_object_class_find_property(G_OBJECT_GET_CLASS(el), name);
    EXPECT_TRUE(spec->flags & GST_PARAM_MUTABLE_PLAYING) << name;
  }
  gchar *text = nullptr, *font = nullptr;
  guint color = 0, shading = 0;
  gint halign = -1, valign = -1, xpad = -1, ypad = -1, backend = -1;
  gboolean shaded = TRUE;
  g_object_get(el, "text", &text, "font-desc", &font, "color", &color, "halignment", &halign,
               "valignment", &valign, "xpad", &xpad, "ypad", &ypad, "shaded-background", &shaded,
               "shading-value", &shading, "backend", &backend, nullptr);
  EXPECT_STREQ(text, "");
  EXPECT_STREQ(font, "Sans 24");
  EXPECT_EQ(color, 0xffffffffu);
  EXPECT_EQ(halign, 0);  // left
  EXPECT_EQ(valign, 0);  // top
  EXPECT_EQ(xpad, 25);
  EXPECT_EQ(ypad, 25);
  EXPECT_FALSE(shaded);
  EXPECT_EQ(shading, 80u);
  EXPECT_EQ(backend, 0);
  g_free(text);
  g_free(font);
  gst_util_set_object_arg(G_OBJECT(el), "halignment", "right");
  gst_util_set_object_arg(G_OBJECT(el), "valignment", "bottom");
  g_object_get(el, "halignment", &halign, "valignment", &valign, nullptr);
  EXPECT_EQ(halign, 2);
  EXPECT_EQ(valign, 2);
  GstElementFactory *f = gst_element_get_factory(el);
  EXPECT_STREQ(gst_element_factory_get_metadata(f, GST_ELEMENT_METADATA_KLASS),
               "Filter/Editor/Video");
  gst_object_unref(el);
}

// In place: a GstVideoMeta whose planes do not fit their memory is
// refused with an error instead of blending past the buffer.
TEST(CudaTextOverlay, RefusesAVideoMetaThatReachesPastItsMemory) {
  gst_test::expect_filter_refuses_meta_past_memory(
      "cudatextoverlay", [](GstElement *el) { g_object_set(el, "text", "Hi", nullptr); });
}

// Empty text: the very buffer that came in goes out, untouched.
TEST(CudaTextOverlay, EmptyTextIsPassthrough) {
  const std::string caps = gst_test::raw_caps("BGRx", 64, 32);
  GstHarness *h = make_harness("cudatextoverlay", caps);
  const GstVideoInfo info = info_of(caps);
  for (int i = 0; i < 3; ++i) {
    GstBuffer *in = solid_buffer(info, 10, 20, 30, 0x5A, 16, i);
    const Bytes before = bytes_of(in, info);
    GstBuffer *out = gst_harness_push_and_pull(h, in);
    ASSERT_EQ(out, in);
    EXPECT_EQ(bytes_of(out, info).data, before.data);
    gst_buffer_unref(out);
  }
  GstElement *el = overlay_of(h);
  EXPECT_TRUE(gst_base_transform_is_passthrough(GST_BASE_TRANSFORM(el)));
  gst_object_unref(el);
  EXPECT_EQ(render_count(h), 0u);
  gst_harness_teardown(h);
}

// White (then red) text on black in every format: only bytes inside the
// reported text box change, the alpha/x bytes of packed formats stay,
// padding stays, and where glyphs cover pixels (2x2 blocks for chroma)
// fully the exact colour appears: white Y 235 / gray 255 / RGB 255; red's
// U 90, V 240 (BT.601 limited range) and gray 77.
TEST(CudaTextOverlay, EveryFormatBlendsInsideTheBox) {
  for (const char *fmt : kAllFormats) {
    for (const char *colour : {"0xffffffff", "0xffff0000"}) {
      const bool red = std::string(colour) == "0xffff0000";
      const std::string caps = gst_test::raw_caps(fmt, 161, 75);
      const GstVideoInfo info = info_of(caps);
      GstHarness *h = make_harness(std::string("cudatextoverlay text=\"HI H\" xpad=3 ypad=2 "
                                               "font-desc=\"Sans Bold 40\" color=") +
                                       colour,
                                   caps);
      GstBuffer *in = solid_buffer(info, 0, 0, 0);
      const Bytes before = bytes_of(in, info);
      GstBuffer *out = gst_harness_push_and_pull(h, in);
      ASSERT_NE(out, nullptr);
      const Bytes after = bytes_of(out, info);
      const Box box = text_box(h);
      EXPECT_EQ(box.x, 3);
      EXPECT_EQ(box.y, 2);
      EXPECT_GT(box.w, 40);
      EXPECT_GT(box.h, 30);
      EXPECT_EQ(render_count(h), 1u);
      int changed = 0;
      for (size_t i = 0; i < after.data.size(); ++i) {
        if (after.data[i] == before.data[i]) continue;
        ++changed;
        int plane, x, y;
        ASSERT_TRUE(after.visible[i]) << fmt << ": padding byte " << i << " written";
        ASSERT_TRUE(pixel_of_byte(info, i, &plane, &x, &y));
        // Chroma samples cover 2x2 pixels: the box grows by one on each side.
        const int slack = plane > 0 ? 1 : 0;
        ASSERT_TRUE(x >= box.x - slack && x < box.x + box.w + slack && y >= box.y - slack &&
                    y < box.y + box.h + slack)
            << fmt << ": byte " << i << " (pixel " << x << "," << y << ") outside the box";
      }
      EXPECT_GT(changed, 100) << fmt;
      gst_test::read_frame(out, info, [&](GstVideoFrame *f) {
        const GstVideoFormatInfo *fi = f->info.finfo;
        bool exact = false, exact_chroma = !red || !GST_VIDEO_FORMAT_INFO_IS_YUV(fi);
        const int ps = GST_VIDEO_FORMAT_INFO_PSTRIDE(fi, 0);
        for (int y = 0; y < 75; ++y)
          for (int x = 0; x < 161; ++x) {
            const guint8 *px =
                gst_test::pixel(f, 0, x * (GST_VIDEO_FORMAT_INFO_IS_YUV(fi) ? 1 : ps), y);
            if (GST_VIDEO_FORMAT_INFO_IS_YUV(fi)) {
              exact |= px[0] == (red ? 82 : 235);
            } else if (GST_VIDEO_FORMAT_INFO_IS_GRAY(fi)) {
              exact |= px[0] == (red ? 77 : 255);
            } else {
              exact |= px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, 0)] == 255 &&
                       px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, 1)] == (red ? 0 : 255) &&
                       px[GST_VIDEO_FORMAT_INFO_POFFSET(fi, 2)] == (red ? 0 : 255);
              for (guint k = 0; k < static_cast<guint>(ps); ++k) {
                const bool colour_byte = k == GST_VIDEO_FORMAT_INFO_POFFSET(fi, 0) ||
                                         k == GST_VIDEO_FORMAT_INFO_POFFSET(fi, 1) ||
                                         k == GST_VIDEO_FORMAT_INFO_POFFSET(fi, 2);
                const bool alpha_byte = GST_VIDEO_FORMAT_INFO_HAS_ALPHA(fi) &&
                                        k == GST_VIDEO_FORMAT_INFO_POFFSET(fi, 3);
                if (!colour_byte && !alpha_byte) {
                  ASSERT_EQ(px[k], 0x5A) << fmt << ": x byte changed";
                }
              }
            }
          }
        if (GST_VIDEO_FORMAT_INFO_IS_YUV(fi)) {
          const int u_comp = 1, v_comp = 2;
          for (int y = 0; y < GST_VIDEO_FRAME_COMP_HEIGHT(f, 1); ++y)
            for (int x = 0; x < GST_VIDEO_FRAME_COMP_WIDTH(f, 1); ++x) {
              const guint8 *u = static_cast<const guint8 *>(GST_VIDEO_FRAME_COMP_DATA(f, u_comp)) +
                                y * GST_VIDEO_FRAME_COMP_STRIDE(f, u_comp) +
                                x * GST_VIDEO_FRAME_COMP_PSTRIDE(f, u_comp);
              const guint8 *v = static_cast<const guint8 *>(GST_VIDEO_FRAME_COMP_DATA(f, v_comp)) +
                                y * GST_VIDEO_FRAME_COMP_STRIDE(f, v_comp) +
                                x * GST_VIDEO_FRAME_COMP_PSTRIDE(f, v_comp);
              if (!red) {
                // White has U = V = 128: chroma never moves.
                ASSERT_EQ(*u, 128) << fmt;
                ASSERT_EQ(*v, 128) << fmt;
              } else {
                exact_chroma |= *u == 90 && *v == 240;
              }
            }
        }
        EXPECT_TRUE(exact) << fmt << " " << colour << ": no fully covered pixel has the colour";
        EXPECT_TRUE(exact_chroma) << fmt << ": no fully covered chroma block is red";
      });
      gst_buffer_unref(out);
      gst_harness_teardown(h);
    }
  }
}

// Changing the text while playing renders it again before the next frame;
// frames without a change, and setting a value it already has, render
// nothing; an empty text switches to pass-through and back.
TEST(CudaTextOverlay, TextChangesWhilePlaying) {
  const std::string caps = gst_test::raw_caps("I420", 320, 96);
  const GstVideoInfo info = info_of(caps);
  GstHarness *h = make_harness("cudatextoverlay text=AAAA", caps);
  const auto push = [&](int i) {
    GstBuffer *in = solid_buffer(info, 0, 0, 0, 0, 16, i);
    GstBuffer *out = gst_harness_push_and_pull(h, in);
    EXPECT_EQ(out, in);  // in place
    Bytes b = bytes_of(out, info);
    gst_buffer_unref(out);
    return b.data;
  };
  const std::vector<guint8> a1 = push(0), a2 = push(1), a3 = push(2);
  EXPECT_EQ(render_count(h), 1u);
  EXPECT_EQ(a1, a2);
  EXPECT_EQ(a1, a3);

  set_arg(h, "text", "BBBB");
  EXPECT_EQ(render_count(h), 1u);  // rendered by the streaming thread, at the next frame
  const std::vector<guint8> b1 = push(3);
  EXPECT_EQ(render_count(h), 2u);
  EXPECT_NE(a1, b1);
  EXPECT_EQ(push(4), b1);
  set_arg(h, "text", "BBBB");  // same value: nothing to do
  EXPECT_EQ(push(5), b1);
  EXPECT_EQ(render_count(h), 2u);

  set_arg(h, "color", "0xff00ff00");
  const std::vector<guint8> c1 = push(6);
  EXPECT_EQ(render_count(h), 3u);
  EXPECT_NE(c1, b1);

  const Box before = text_box(h);
  set_arg(h, "xpad", "40");
  const std::vector<guint8> d1 = push(7);
  EXPECT_EQ(render_count(h), 4u);
  EXPECT_EQ(text_box(h).x, 40);
  EXPECT_EQ(before.x, 25);
  EXPECT_NE(d1, c1);

  set_arg(h, "text", "");
  GstBuffer *in = solid_buffer(info, 0, 0, 0, 0, 16, 8);
  const Bytes plain = bytes_of(in, info);
  GstBuffer *out = gst_harness_push_and_pull(h, in);
  EXPECT_EQ(out, in);
  EXPECT_EQ(bytes_of(out, info).data, plain.data);
  gst_buffer_unref(out);
  EXPECT_EQ(render_count(h), 4u);

  set_arg(h, "text", "BBBB");
  EXPECT_EQ(push(9), d1);
  EXPECT_EQ(render_count(h), 5u);

  set_arg(h, "font-desc", "Sans Bold 30");
  EXPECT_NE(push(10), d1);
  EXPECT_EQ(render_count(h), 6u);
  gst_harness_teardown(h);
}

TEST(CudaTextOverlay, Alignment) {
  const std::string caps = gst_test::raw_caps("BGRA", 320, 101);
  const GstVideoInfo info = info_of(caps);
  const char *hs[] = {"left", "center", "right"};
  const char *vs[] = {"top", "center", "bottom"};
  for (const char *ha : hs)
    for (const char *va : vs) {
      GstHarness *h = make_harness(std::string("cudatextoverlay text=Hello xpad=7 ypad=5 ") +
                                       "halignment=" + ha + " valignment=" + va,
                                   caps);
      GstBuffer *out = gst_harness_push_and_pull(h, solid_buffer(info, 0, 0, 0));
      gst_buffer_unref(out);
      const Box b = text_box(h);
      const std::string hstr = ha, vstr = va;
      const int want_x = hstr == "left" ? 7 : hstr == "right" ? 320 - 7 - b.w : (320 - b.w) / 2;
      const int want_y = vstr == "top" ? 5 : vstr == "bottom" ? 101 - 5 - b.h : (101 - b.h) / 2;
      EXPECT_EQ(b.x, want_x) << ha << " " << va;
      EXPECT_EQ(b.y, want_y) << ha << " " << va;
      gst_harness_teardown(h);
    }
}

// Text far larger than the frame, at every alignment, on odd sizes whose rows
// are padded: bytes change only in visible pixels, and only in the part of
// the box inside the frame.
TEST(CudaTextOverlay, LargeTextIsClipped) {
  std::string text(120, 'W');
  for (const char *fmt : {"BGR", "RGBA", "GRAY8", "I420", "NV12"}) {
    const std::string caps = gst_test::raw_caps(fmt, 33, 9);
    const GstVideoInfo info = info_of(caps);
    for (const char *ha : {"left", "center", "right"})
      for (const char *va : {"top", "center", "bottom"}) {
        GstHarness *h = make_harness(std::string("cudatextoverlay font-desc=\"Sans 80\" text=") +
                                         text + " halignment=" + ha + " valignment=" + va,
                                     caps);
        GstBuffer *in = solid_buffer(info, 0, 0, 0);
        const Bytes before = bytes_of(in, info);
        GstBuffer *out = gst_harness_push_and_pull(h, in);
        ASSERT_NE(out, nullptr);
        const Bytes after = bytes_of(out, info);
        const Box box = text_box(h);
        EXPECT_GT(box.w, 33);
        EXPECT_GT(box.h, 9);
        int changed = 0;
        for (size_t i = 0; i < after.data.size(); ++i)
          if (after.data[i] != before.data[i]) {
            ASSERT_TRUE(after.visible[i]) << fmt << " " << ha << " " << va << ": padding written";
            ++changed;
          }
        if (std::string(va) == "center" && std::string(ha) == "center") {
          EXPECT_GT(changed, 0) << fmt;
        }
        gst_buffer_unref(out);
        gst_harness_teardown(h);
      }
  }
}

// A new frame size places and clips the text again.
TEST(CudaTextOverlay, CapsChangeRendersAgain) {
  GstHarness *h = gst_harness_new_parse("cudatextoverlay text=Size halignment=right");
  for (int round = 0; round < 2; ++round) {
    const int w = round == 0 ? 320 : 160;
    const std::string caps = gst_test::raw_caps("RGB", w, 64);
    gst_harness_set_src_caps_str(h, caps.c_str());
    const GstVideoInfo info = info_of(caps);
    GstBuffer *out = gst_harness_push_and_pull(h, solid_buffer(info, 0, 0, 0));
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(gst_buffer_get_size(out), GST_VIDEO_INFO_SIZE(&info));
    gst_buffer_unref(out);
    const Box b = text_box(h);
    EXPECT_EQ(b.x + b.w, w - 25);
    EXPECT_EQ(render_count(h), static_cast<guint64>(round + 1));
  }
  gst_harness_teardown(h);
}

// ALLOCATION from upstream, in pass-through and while blending (system
// memory): downstream's answer (here the metas the harness sink proposes),
// since the buffer upstream writes is the one that goes downstream. So
// GstVideoMeta only when downstream handles it: claimed for a downstream
// without it, upstream could pad its lines (a decoder's 1088 rows, a
// camera's padded lines), which downstream would then read as packed.
TEST(CudaTextOverlay, AllocationQueryIsDownstreams) {
  const std::string caps_str = gst_test::raw_caps("NV12", 64, 48);
  GstHarness *h = make_harness("cudatextoverlay", caps_str);
  gst_harness_add_propose_allocation_meta(h, GST_VIDEO_CROP_META_API_TYPE, nullptr);
  gst_harness_add_propose_allocation_meta(h, GST_VIDEO_TIME_CODE_META_API_TYPE, nullptr);
  const GstVideoInfo info = info_of(caps_str);
  gst_buffer_unref(gst_harness_push_and_pull(h, solid_buffer(info, 0, 0, 0)));
  GstCaps *caps = gst_caps_from_string(caps_str.c_str());
  for (int round = 0; round < 2; ++round) {
    // Round 1: downstream handles GstVideoMeta too.
    if (round == 1) gst_harness_add_propose_allocation_meta(h, GST_VIDEO_META_API_TYPE, nullptr);
    for (bool passthrough : {true, false, true, false}) {
      SCOPED_TRACE(std::string(passthrough ? "passthrough" : "blending") +
                   (round ? ", downstream with GstVideoMeta" : ", downstream without"));
      set_arg(h, "text", passthrough ? "" : "pool");
      GstQuery *q = gst_query_new_allocation(caps, TRUE);
      ASSERT_TRUE(gst_pad_peer_query(h->srcpad, q));
      // ... but not the crop meta: upstream (videocrop) would then pass the
      // whole picture on, and the text would go into a frame of another
      // size (passing through, the next buffer may already be blended)
      EXPECT_FALSE(gst_query_find_allocation_meta(q, GST_VIDEO_CROP_META_API_TYPE, nullptr));
      EXPECT_TRUE(gst_query_find_allocation_meta(q, GST_VIDEO_TIME_CODE_META_API_TYPE, nullptr));
      EXPECT_EQ(gst_query_find_allocation_meta(q, GST_VIDEO_META_API_TYPE, nullptr),
                gboolean(round == 1));
      gst_query_unref(q);
      GstBuffer *in = solid_buffer(info, 0, 0, 0);
      GstBuffer *out = gst_harness_push_and_pull(h, in);
      EXPECT_EQ(out, in);
      gst_buffer_unref(out);
    }
  }
  gst_caps_unref(caps);
  gst_harness_teardown(h);
}

// videocrop before the element, downstream handling crop metas: videocrop
// crops the frames itself (the element does not pass the crop meta up), so
// the text is blended into frames of the caps' size. With the crop meta the
// whole picture came with a crop meta, and the element stopped with an
// error (a frame of another size than the caps').
TEST(CudaTextOverlay, CropsUpstreamWhenDownstreamTakesCropMetas) {
  for (const char *text : {"XX", ""}) {
    SCOPED_TRACE(std::string("text '") + text + "'");
    GstHarness *h = gst_harness_new_parse(
        (std::string("videocrop left=32 top=16 ! cudatextoverlay text=\"") + text + "\"").c_str());
    gst_harness_add_propose_allocation_meta(h, GST_VIDEO_META_API_TYPE, nullptr);
    gst_harness_add_propose_allocation_meta(h, GST_VIDEO_CROP_META_API_TYPE, nullptr);
    const std::string caps = gst_test::raw_caps("RGBx", 320, 160);
    gst_harness_set_src_caps_str(h, caps.c_str());
    const GstVideoInfo info = info_of(caps);
    for (int i = 0; i < 3; ++i) {
      if (i == 2) set_arg(h, "text", "YY");  // passing through until now when ""
      GstBuffer *out = gst_harness_push_and_pull(h, solid_buffer(info, 0, 0, 0, 0, 16, i));
      ASSERT_NE(out, nullptr) << "frame " << i;
      EXPECT_EQ(gst_buffer_get_video_crop_meta(out), nullptr) << "frame " << i;
      GstCaps *out_caps = gst_pad_get_current_caps(h->sinkpad);
      GstVideoInfo out_info;
      ASSERT_TRUE(gst_video_info_from_caps(&out_info, out_caps));
      gst_caps_unref(out_caps);
      EXPECT_EQ(GST_VIDEO_INFO_WIDTH(&out_info), 288);
      EXPECT_EQ(GST_VIDEO_INFO_HEIGHT(&out_info), 144);
      // The text's pixels (not black) lie within the cropped frame.
      int drawn = 0;
      gst_test::read_frame(out, out_info, [&](GstVideoFrame *f) {
        for (int y = 0; y < 144; ++y)
          for (int x = 0; x < 288 * 4; ++x) drawn += gst_test::pixel(f, 0, x, y)[0] != 0;
      });
      if (i == 2 || text[0]) {
        EXPECT_GT(drawn, 0) << "frame " << i << ": no text";
      }
      gst_buffer_unref(out);
    }
    gst_harness_teardown(h);
  }
}

// Markup is used when it parses; other text (with < or &) is shown as is;
// invalid UTF-8 is repaired: no warning in any case (warnings are fatal here).
TEST(CudaTextOverlay, MarkupPlainAndInvalidText) {
  const std::string caps = gst_test::raw_caps("BGRx", 200, 60);
  const GstVideoInfo info = info_of(caps);
  GstHarness *h = make_harness(
      "cudatextoverlay font-desc=\"Sans Bold 30\" text=\"<span foreground='#00ff00'>G</span>\"",
      caps);
  GstBuffer *out = gst_harness_push_and_pull(h, solid_buffer(info, 0, 0, 0));
  bool green = false;
  gst_test::read_frame(out, info, [&](GstVideoFrame *f) {
    for (int y = 0; y < 60; ++y)
      for (int x = 0; x < 200; ++x) {
        const guint8 *px = gst_test::pixel(f, 0, 4 * x, y);  // B, G, R, x
        green |= px[0] == 0 && px[1] == 255 && px[2] == 0;
        ASSERT_TRUE(px[0] == 0 && px[2] == 0) << "only green appears, not the white colour";
      }
  });
  EXPECT_TRUE(green);
  gst_buffer_unref(out);
  for (const char *text : {"a < b & c", "<b>unclosed", "bad \xff\xfe utf-8", "two\nlines"}) {
    GstElement *el = overlay_of(h);
    g_object_set(el, "text", text, nullptr);
    gst_object_unref(el);
    out = gst_harness_push_and_pull(h, solid_buffer(info, 0, 0, 0));
    ASSERT_NE(out, nullptr);
    gst_buffer_unref(out);
  }
  EXPECT_EQ(render_count(h), 5u);
  const Box two_lines = text_box(h);
  set_arg(h, "text", "one line");
  gst_buffer_unref(gst_harness_push_and_pull(h, solid_buffer(info, 0, 0, 0)));
  EXPECT_GT(two_lines.h, text_box(h).h * 3 / 2);
  gst_harness_teardown(h);
}

// shaded-background: a black box of opacity shading-value behind the text,
// 4 pixels larger on each side: its corner pixel (no glyph there) on white
// becomes blend(255, 0, 255) = 0 and blend(255, 0, 80) = 175.
TEST(CudaTextOverlay, ShadedBackground) {
  const std::string caps = gst_test::raw_caps("RGBx", 200, 80);
  const GstVideoInfo info = info_of(caps);
  for (int shading : {255, 80}) {
    GstHarness *h =
        make_harness("cudatextoverlay text=Shade shaded-background=true shading-value=" +
                         std::to_string(shading),
                     caps);
    GstBuffer *out = gst_harness_push_and_pull(h, solid_buffer(info, 255, 255, 255));
    const Box b = text_box(h);
    EXPECT_EQ(b.x, 25);
    gst_test::read_frame(out, info, [&](GstVideoFrame *f) {
      const int want = shading == 255 ? 0 : 175;
      for (auto [x, y] : {std::make_pair(b.x, b.y), std::make_pair(b.x + b.w - 1, b.y + b.h - 1)}) {
        const guint8 *px = gst_test::pixel(f, 0, 4 * x, y);
        for (int c = 0; c < 3; ++c)
          EXPECT_NEAR(px[c], want, 1) << shading << " at " << x << "," << y;
      }
      // Just outside the box: white.
      EXPECT_EQ(gst_test::pixel(f, 0, 4 * (b.x - 1), b.y)[0], 255);
      EXPECT_EQ(gst_test::pixel(f, 0, 4 * b.x, b.y + b.h)[0], 255);
    });
    gst_buffer_unref(out);
    gst_harness_teardown(h);
  }
}

// A buffer someone else still holds is not writable: the text goes onto a
// copy and the original stays as it was.
TEST(CudaTextOverlay, SharedBufferIsNotModified) {
  const std::string caps = gst_test::raw_caps("NV12", 160, 64);
  const GstVideoInfo info = info_of(caps);
  GstHarness *h = make_harness("cudatextoverlay text=shared", caps);
  GstBuffer *in = solid_buffer(info, 0, 0, 0);
  const Bytes before = bytes_of(in, info);
  gst_buffer_ref(in);  // a second holder
  GstBuffer *out = gst_harness_push_and_pull(h, in);
  ASSERT_NE(out, nullptr);
  EXPECT_NE(out, in);
  EXPECT_EQ(bytes_of(in, info).data, before.data);
  EXPECT_NE(bytes_of(out, info).data, before.data);
  gst_buffer_unref(out);
  gst_buffer_unref(in);
  gst_harness_teardown(h);
}

// The text set from the application's thread switches pass-through in the
// streaming thread, at the next buffer: GstBaseTransform reads the switch
// twice per buffer, and a switch between the two reads handed the in-place
// blend a shared buffer it had not copied ("write map requested on
// non-writable buffer", an element error), or left the text undrawn.
TEST(CudaTextOverlay, TextSwitchesPassthroughAtTheNextBuffer) {
  const std::string caps = gst_test::raw_caps("NV12", 160, 64);
  const GstVideoInfo info = info_of(caps);
  GstHarness *h = make_harness("cudatextoverlay", caps);
  GstElement *el = overlay_of(h);
  GstBaseTransform *trans = GST_BASE_TRANSFORM(el);
  gst_buffer_unref(gst_harness_push_and_pull(h, solid_buffer(info, 0, 0, 0)));
  for (const char *text : {"shared", "", "again"}) {
    SCOPED_TRACE(std::string("text \"") + text + "\"");
    const bool passthrough = *text == '\0';
    set_arg(h, "text", text);
    EXPECT_EQ(gst_base_transform_is_passthrough(trans), !passthrough) << "before a buffer";
    GstBuffer *in = solid_buffer(info, 0, 0, 0);
    const Bytes before = bytes_of(in, info);
    gst_buffer_ref(in);  // a second holder (a tee): not writable
    GstBuffer *out = gst_harness_push_and_pull(h, in);
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(gst_base_transform_is_passthrough(trans), passthrough) << "after a buffer";
    EXPECT_EQ(bytes_of(in, info).data, before.data);
    if (passthrough) {
      EXPECT_EQ(out, in);
    } else {
      EXPECT_NE(out, in);
      EXPECT_NE(bytes_of(out, info).data, before.data);
    }
    gst_buffer_unref(out);
    gst_buffer_unref(in);
  }
  gst_object_unref(el);
  gst_harness_teardown(h);
}

// backend=cuda without a device fails at start, with or without text (the
// GPU machine covers the other case in test_cudatextoverlay_cuda).
TEST(CudaTextOverlay, BackendCudaWithoutDevice) {
  if (gst_test::have_cuda_device()) GTEST_SKIP() << "a CUDA device is usable here";
  for (const char *text : {"text=hello", ""}) {
    GError *err = nullptr;
    const std::string msg = gst_test::run_pipeline(
        std::string("videotestsrc num-buffers=2 ! video/x-raw,format=NV12,width=32,height=8 ! "
                    "cudatextoverlay backend=cuda ") +
            text + " ! fakesink",
        20, &err);
    ASSERT_NE(err, nullptr) << msg;
    EXPECT_TRUE(g_error_matches(err, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND)) << msg;
    g_error_free(err);
  }
  EXPECT_EQ(gst_test::run_pipeline("videotestsrc num-buffers=2 ! video/x-raw,width=32,height=8 ! "
                                   "cudatextoverlay backend=auto text=x ! fakesink",
                                   20),
            "");
}
