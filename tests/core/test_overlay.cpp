// Overlay reference (CPU) against hand-computed values and against a
// straightforward per-pixel model of the documented rules (cudadiff/overlay.h),
// at every placement (negative, odd, partly and wholly outside the frame),
// every format, odd sizes and padded strides.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cudadiff/overlay.h"
#include "frames.h"
#include "overlay_model.h"

using cudadiff::ArgbImage;
using cudadiff::FrameView;
using cudadiff::VideoFormat;
using overlay_model::TestImage;
using testing_util::HostFrame;

namespace {

std::unique_ptr<cudadiff::Context> cpu = cudadiff::Context::cpu();

HostFrame copy_of(const HostFrame &f) {
  HostFrame c(f.view.format, f.view.width, f.view.height, f.pad);
  cudadiff::copy_frame_host(f.view, c.view);
  return c;
}

}  // namespace

// blend(s, c, a) = (s (255 - a) + c a + 127) / 255 is s + (c - s) a / 255
// rounded to nearest, for every s, c, a.
TEST(OverlayCpu, BlendRuleIsRoundedExactValue) {
  int mismatches = 0;
  for (int s = 0; s < 256; ++s)
    for (int c = 0; c < 256; ++c)
      for (int a = 0; a < 256; ++a)
        mismatches += static_cast<int>(cudadiff::overlay_blend(s, c, a)) !=
                      std::lround(s + (c - s) * a / 255.0);
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(cudadiff::overlay_blend(100, 200, 128), 150u);  // 100 + 100 * 128 / 255 = 150.2
  EXPECT_EQ(cudadiff::overlay_blend(0, 255, 1), 1u);
  EXPECT_EQ(cudadiff::overlay_blend(255, 0, 1), 254u);
  EXPECT_EQ(cudadiff::overlay_blend(37, 201, 0), 37u);
  EXPECT_EQ(cudadiff::overlay_blend(37, 201, 255), 201u);
}

// With one alpha and one value over the 2x2 block, the chroma rule equals the
// luma rule; with four different pixels it is the mean of their four blends.
TEST(OverlayCpu, ChromaRuleIsMeanOfFourBlends) {
  int mismatches = 0;
  for (uint32_t s = 0; s < 256; ++s)
    for (uint32_t c = 0; c < 256; ++c)
      for (uint32_t a = 0; a < 256; ++a)
        mismatches +=
            cudadiff::overlay_blend_chroma(s, 4 * a, 4 * a * c) != cudadiff::overlay_blend(s, c, a);
  EXPECT_EQ(mismatches, 0);
  // s = 128; pixels (a, U): (255, 90) (255, 90) (0, -) (0, -): half the block
  // is red's U: (90 + 90 + 128 + 128) / 4 = 109.
  EXPECT_EQ(cudadiff::overlay_blend_chroma(128, 510, 2 * 255 * 90), 109u);
  // s = 0, alphas 1, 2, 3, 4 of value 255: (1 + 2 + 3 + 4) / 4 = 2.5 -> 3 (half up).
  EXPECT_EQ(cudadiff::overlay_blend_chroma(0, 10, 10 * 255), 3u);
  std::mt19937 &gen = testing_util::rng();
  for (int i = 0; i < 200000; ++i) {
    const uint32_t s = gen() & 255;
    uint32_t alpha_sum = 0, weighted = 0;
    long long twice_numerator = 0;  // 2 * sum of s (255 - a) + a c
    for (int k = 0; k < 4; ++k) {
      const uint32_t a = gen() & 255, c = gen() & 255;
      alpha_sum += a;
      weighted += a * c;
      twice_numerator += 2LL * (s * (255 - a) + a * c);
    }
    // mean of the four exact blends = numerator / 1020, rounded half up
    const long long want = (twice_numerator + 1020) / 2040;
    ASSERT_EQ(cudadiff::overlay_blend_chroma(s, alpha_sum, weighted), want);
  }
}

TEST(OverlayCpu, ColourConversionsHandComputed) {
  struct Case {
    int r, g, b, gray, y, u, v;
  };
  // Worked out from the formulas in cudadiff/overlay.h, e.g. red:
  // Y = (66 * 255 + 4224) >> 8 = 21054 >> 8 = 82, U = (32896 - 38 * 255) >> 8 = 90,
  // V = (112 * 255 + 32896) >> 8 = 240.
  const Case cases[] = {
      {255, 255, 255, 255, 235, 128, 128}, {0, 0, 0, 0, 16, 128, 128},
      {255, 0, 0, 77, 82, 90, 240},        {0, 255, 0, 149, 144, 54, 34},
      {0, 0, 255, 29, 41, 240, 110},       {128, 128, 128, 128, 126, 128, 128},
  };
  for (const Case &c : cases) {
    EXPECT_EQ(cudadiff::gray_value(cudadiff::GrayMethod::Bt601, c.r, c.g, c.b), c.gray);
    EXPECT_EQ(cudadiff::overlay_luma_601(c.r, c.g, c.b), static_cast<uint32_t>(c.y));
    EXPECT_EQ(cudadiff::overlay_cb_601(c.r, c.g, c.b), static_cast<uint32_t>(c.u));
    EXPECT_EQ(cudadiff::overlay_cr_601(c.r, c.g, c.b), static_cast<uint32_t>(c.v));
    EXPECT_EQ(overlay_model::y601(c.r, c.g, c.b), c.y);
    EXPECT_EQ(overlay_model::u601(c.r, c.g, c.b), c.u);
    EXPECT_EQ(overlay_model::v601(c.r, c.g, c.b), c.v);
  }
  // Ranges over every colour: 16..235 and 16..240.
  uint32_t lo_y = 255, hi_y = 0, lo_c = 255, hi_c = 0;
  for (uint32_t r = 0; r < 256; r += 5)
    for (uint32_t g = 0; g < 256; g += 5)
      for (uint32_t b = 0; b < 256; b += 5) {
        const uint32_t y = cudadiff::overlay_luma_601(r, g, b);
        const uint32_t u = cudadiff::overlay_cb_601(r, g, b), v = cudadiff::overlay_cr_601(r, g, b);
        lo_y = std::min(lo_y, y);
        hi_y = std::max(hi_y, y);
        lo_c = std::min({lo_c, u, v});
        hi_c = std::max({hi_c, u, v});
        ASSERT_EQ(static_cast<int>(y), overlay_model::y601(r, g, b));
        ASSERT_EQ(static_cast<int>(u), overlay_model::u601(r, g, b));
        ASSERT_EQ(static_cast<int>(v), overlay_model::v601(r, g, b));
      }
  EXPECT_EQ(lo_y, 16u);
  EXPECT_EQ(hi_y, 235u);
  EXPECT_EQ(lo_c, 16u);
  EXPECT_EQ(hi_c, 240u);
}

// A 4x2 BGRA frame, a 2x1 image at (1, 1): opaque red, then (10, 20, 30) at
// alpha 128. Every byte worked out by hand.
TEST(OverlayCpu, HandComputedBgra) {
  HostFrame f(VideoFormat::BGRA, 4, 2, 3);
  testing_util::fill_value(f, 100);  // B = G = R = A = 100
  TestImage img(2, 1);
  img.set(0, 0, 255, 255, 0, 0);
  img.set(1, 0, 128, 10, 20, 30);
  auto op = cudadiff::Overlay::create(*cpu, VideoFormat::BGRA, 4, 2);
  op->set_image(img.view(), 1, 1);
  EXPECT_EQ(op->covered().x0, 1);
  EXPECT_EQ(op->covered().x1, 3);
  EXPECT_EQ(op->covered().y0, 1);
  EXPECT_EQ(op->covered().y1, 2);
  op->blend(f.view);
  const uint8_t *row1 = f.view.row(0, 1);
  // (1,1): B = 0, G = 0, R = 255; alpha = blend(100, 255, 255) = 255.
  EXPECT_EQ(row1[4 + 0], 0);
  EXPECT_EQ(row1[4 + 1], 0);
  EXPECT_EQ(row1[4 + 2], 255);
  EXPECT_EQ(row1[4 + 3], 255);
  // (2,1): B = (100 * 127 + 30 * 128 + 127) / 255 = 16667 / 255 = 65
  //        G = (12700 + 2560 + 127) / 255 = 15387 / 255 = 60
  //        R = (12700 + 1280 + 127) / 255 = 14107 / 255 = 55
  //        A = (12700 + 32640 + 127) / 255 = 45467 / 255 = 178
  EXPECT_EQ(row1[8 + 0], 65);
  EXPECT_EQ(row1[8 + 1], 60);
  EXPECT_EQ(row1[8 + 2], 55);
  EXPECT_EQ(row1[8 + 3], 178);
  // Untouched: row 0, and pixels 0 and 3 of row 1.
  for (int k = 0; k < 16; ++k) EXPECT_EQ(f.view.row(0, 0)[k], 100);
  for (int k : {0, 1, 2, 3, 12, 13, 14, 15}) EXPECT_EQ(row1[k], 100);
  EXPECT_TRUE(f.padding_intact());
}

// BGRx keeps its x byte; GRAY8 takes the BT.601 gray of the colour.
TEST(OverlayCpu, HandComputedBgrxAndGray) {
  TestImage img(1, 1);
  img.set(0, 0, 64, 0, 255, 0);  // green at alpha 64
  HostFrame bgrx(VideoFormat::BGRx, 1, 1);
  testing_util::fill_value(bgrx, 200);
  auto op = cudadiff::Overlay::create(*cpu, VideoFormat::BGRx, 1, 1);
  op->set_image(img.view(), 0, 0);
  op->blend(bgrx.view);
  // B, R: (200 * 191 + 0 + 127) / 255 = 38327 / 255 = 150; G: (38200 + 16320 + 127) / 255 = 214.
  EXPECT_EQ(bgrx.view.data[0][0], 150);
  EXPECT_EQ(bgrx.view.data[0][1], 214);
  EXPECT_EQ(bgrx.view.data[0][2], 150);
  EXPECT_EQ(bgrx.view.data[0][3], 200);

  HostFrame gray(VideoFormat::GRAY8, 1, 1);
  testing_util::fill_value(gray, 200);
  auto gop = cudadiff::Overlay::create(*cpu, VideoFormat::GRAY8, 1, 1);
  gop->set_image(img.view(), 0, 0);
  gop->blend(gray.view);
  // gray(green) = 149: (200 * 191 + 149 * 64 + 127) / 255 = 47863 / 255 = 187.
  EXPECT_EQ(gray.view.data[0][0], 187);
}

// I420 4x4, Y = 100, U = V = 128; image 3x2 at (1, 0): row 0 opaque red,
// row 1 red at alpha 128.
TEST(OverlayCpu, HandComputedI420AndNv12) {
  TestImage img(3, 2);
  for (int x = 0; x < 3; ++x) {
    img.set(x, 0, 255, 255, 0, 0);
    img.set(x, 1, 128, 255, 0, 0);
  }
  for (VideoFormat fmt : {VideoFormat::I420, VideoFormat::NV12}) {
    HostFrame f(fmt, 4, 4, 2);
    testing_util::fill_value(f, 100);
    for (int p = 1; p < f.view.n_planes(); ++p)
      for (int y = 0; y < 2; ++y)
        for (size_t x = 0; x < f.view.row_bytes(p); ++x) f.view.row(p, y)[x] = 128;
    auto op = cudadiff::Overlay::create(*cpu, fmt, 4, 4);
    op->set_image(img.view(), 1, 0);
    op->blend(f.view);
    // Luma: red Y = 82. Row 0, x 1..3: 82. Row 1: (100 * 127 + 82 * 128 + 127) / 255
    // = 23323 / 255 = 91. Column 0 and rows 2, 3: 100.
    const int want_y[4][4] = {
        {100, 82, 82, 82}, {100, 91, 91, 91}, {100, 100, 100, 100}, {100, 100, 100, 100}};
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 4; ++x)
        EXPECT_EQ(f.view.row(0, y)[x], want_y[y][x]) << cudadiff::format_name(fmt) << x << "," << y;
    // Chroma (0,0): pixels (0,0) a 0, (1,0) a 255, (0,1) a 0, (1,1) a 128:
    //   S = 383; U: P = 383 * 90 = 34470; (128 * 637 + 34470 + 510) / 1020 = 116516 / 1020 = 114
    //            V: P = 383 * 240 = 91920; (81536 + 91920 + 510) / 1020 = 173966 / 1020 = 170
    // Chroma (1,0): a = 255, 255, 128, 128: S = 766;
    //   U: (128 * 254 + 766 * 90 + 510) / 1020 = 101962 / 1020 = 99
    //   V: (32512 + 766 * 240 + 510) / 1020 = 216862 / 1020 = 212
    // Chroma row 1: untouched (128).
    const cudadiff::FrameView &v = f.view;
    const auto u_at = [&](int x, int y) {
      return fmt == VideoFormat::I420 ? v.row(1, y)[x] : v.row(1, y)[2 * x];
    };
    const auto v_at = [&](int x, int y) {
      return fmt == VideoFormat::I420 ? v.row(2, y)[x] : v.row(1, y)[2 * x + 1];
    };
    EXPECT_EQ(u_at(0, 0), 114);
    EXPECT_EQ(v_at(0, 0), 170);
    EXPECT_EQ(u_at(1, 0), 99);
    EXPECT_EQ(v_at(1, 0), 212);
    for (int x = 0; x < 2; ++x) {
      EXPECT_EQ(u_at(x, 1), 128);
      EXPECT_EQ(v_at(x, 1), 128);
    }
    EXPECT_TRUE(f.padding_intact());
  }
}

// Odd frame size: the last chroma column and row cover one pixel; the pixel
// past the edge counts as its in-frame neighbour, so an opaque colour over the
// edge gives the colour's chroma exactly.
TEST(OverlayCpu, OddFrameEdgeChroma) {
  TestImage img(1, 1);
  img.set(0, 0, 255, 0, 0, 255);  // opaque blue
  for (VideoFormat fmt :
       {VideoFormat::I420, VideoFormat::YV12, VideoFormat::NV12, VideoFormat::NV21}) {
    HostFrame f(fmt, 3, 3, 1);
    testing_util::fill_value(f, 60);
    auto op = cudadiff::Overlay::create(*cpu, fmt, 3, 3);
    op->set_image(img.view(), 2, 2);  // pixel (2,2) only, alone in its chroma block
    op->blend(f.view);
    EXPECT_EQ(f.view.row(0, 2)[2], 41);
    const cudadiff::detail::ChromaLayout cl = cudadiff::detail::chroma_layout(fmt);
    const uint8_t u = f.view.row(cl.u_plane, 1)[1 * cl.sample_bytes + cl.u_offset];
    const uint8_t v = f.view.row(cl.v_plane, 1)[1 * cl.sample_bytes + cl.v_offset];
    EXPECT_EQ(u, 240) << cudadiff::format_name(fmt);
    EXPECT_EQ(v, 110) << cudadiff::format_name(fmt);
    // Everything else is 60.
    EXPECT_EQ(f.view.row(0, 1)[1], 60);
    EXPECT_EQ(f.view.row(cl.u_plane, 0)[cl.u_offset], 60);
    EXPECT_TRUE(f.padding_intact());
  }
}

// Every format, small odd sizes, padded strides, images smaller and larger
// than the frame at placements that cover each alignment and every kind of
// clipping: the result equals the model and no padding byte is written.
TEST(OverlayCpu, EveryFormatEveryPlacementMatchesModel) {
  const int sizes[][2] = {{1, 1}, {2, 2}, {3, 3}, {5, 4}, {17, 9}};
  const int image_sizes[][2] = {{1, 1}, {2, 3}, {7, 5}, {40, 30}};
  std::mt19937 &gen = testing_util::rng();
  int cases = 0;
  for (VideoFormat fmt : overlay_model::all_formats()) {
    for (const auto &sz : sizes) {
      const int w = sz[0], h = sz[1];
      auto op = cudadiff::Overlay::create(*cpu, fmt, w, h);
      for (const auto &isz : image_sizes) {
        TestImage img(isz[0], isz[1], 3);
        img.fill_random(gen);
        const int xs[] = {-isz[0] - 2, -isz[0] + 1, -1, 0, 1, 2, 3, w - 2, w - 1, w};
        const int ys[] = {-isz[1], -1, 0, 1, h - 1, h + 1};
        for (int x : xs)
          for (int y : ys)
            for (size_t pad : {size_t(0), size_t(5)}) {
              HostFrame in(fmt, w, h, pad);
              testing_util::fill_random(in, gen);
              HostFrame out = copy_of(in);
              op->set_image(img.view(), x, y);
              op->blend(out.view);
              HostFrame want = overlay_model::expected(in, img, x, y);
              ASSERT_EQ(testing_util::compare_frames(want.view, out.view), "")
                  << "image " << isz[0] << "x" << isz[1] << " at " << x << "," << y;
              ASSERT_TRUE(out.padding_intact());
              ++cases;
            }
      }
    }
  }
  std::printf("%d cases\n", cases);
}

// Enough covered pixels for the reference to use all its threads: the rows
// split among them give the same frame.
TEST(OverlayCpu, ManyThreadsMatchModel) {
  std::mt19937 &gen = testing_util::rng();
  TestImage img(820, 410);
  img.fill_random(gen);
  for (VideoFormat fmt :
       {VideoFormat::BGRA, VideoFormat::GRAY8, VideoFormat::I420, VideoFormat::NV21}) {
    HostFrame in(fmt, 801, 403, 3);
    testing_util::fill_random(in, gen);
    HostFrame out = copy_of(in);
    auto op = cudadiff::Overlay::create(*cpu, fmt, 801, 403);
    op->set_image(img.view(), -9, -3);
    op->blend(out.view);
    HostFrame want = overlay_model::expected(in, img, -9, -3);
    EXPECT_EQ(testing_util::compare_frames(want.view, out.view), "") << cudadiff::format_name(fmt);
    EXPECT_TRUE(out.padding_intact());
  }
}

// An image much larger than the frame, at a negative place: every frame pixel
// takes the colour, nothing outside the frame is written.
TEST(OverlayCpu, LargeImageIsClipped) {
  TestImage img(300, 200);
  for (int y = 0; y < 200; ++y)
    for (int x = 0; x < 300; ++x) img.set(x, y, 255, 10, 200, 30);
  for (VideoFormat fmt : overlay_model::all_formats()) {
    HostFrame f(fmt, 13, 7, 9);
    testing_util::fill_random(f);
    auto op = cudadiff::Overlay::create(*cpu, fmt, 13, 7);
    op->set_image(img.view(), -100, -50);
    EXPECT_EQ(op->covered().x0, 0);
    EXPECT_EQ(op->covered().y0, 0);
    EXPECT_EQ(op->covered().x1, 13);
    EXPECT_EQ(op->covered().y1, 7);
    HostFrame want = overlay_model::expected(f, img, -100, -50);
    op->blend(f.view);
    EXPECT_EQ(testing_util::compare_frames(want.view, f.view), "") << cudadiff::format_name(fmt);
    EXPECT_TRUE(f.padding_intact());
    if (fmt == VideoFormat::RGB) {
      EXPECT_EQ(f.view.row(0, 6)[12 * 3 + 0], 10);
      EXPECT_EQ(f.view.row(0, 6)[12 * 3 + 1], 200);
      EXPECT_EQ(f.view.row(0, 6)[12 * 3 + 2], 30);
    }
  }
}

// The covered rectangle is the bounding box of the non-transparent pixels
// inside the frame; a transparent or outside image covers nothing and the
// frame stays as it was.
TEST(OverlayCpu, CoveredRectangle) {
  TestImage img(20, 10);  // all transparent
  img.set(3, 2, 1, 0, 0, 0);
  img.set(15, 7, 200, 0, 0, 0);
  auto op = cudadiff::Overlay::create(*cpu, VideoFormat::NV12, 32, 16);
  op->set_image(img.view(), 5, 4);
  EXPECT_EQ(op->covered().x0, 8);
  EXPECT_EQ(op->covered().y0, 6);
  EXPECT_EQ(op->covered().x1, 21);
  EXPECT_EQ(op->covered().y1, 12);
  op->set_image(img.view(), 20, 4);  // (15, 7) -> x 35: outside
  EXPECT_EQ(op->covered().x0, 23);
  EXPECT_EQ(op->covered().x1, 24);

  TestImage clear(8, 8);
  HostFrame f(VideoFormat::NV12, 32, 16, 3);
  testing_util::fill_random(f);
  HostFrame before = copy_of(f);
  for (auto [x, y] : {std::make_pair(0, 0), std::make_pair(-8, 0), std::make_pair(32, 16)}) {
    op->set_image(clear.view(), x, y);
    EXPECT_TRUE(op->covered().empty());
    op->blend(f.view);
  }
  op->set_image(img.view(), -1000, 3);
  EXPECT_TRUE(op->covered().empty());
  op->blend(f.view);
  op->set_image(ArgbImage(), 0, 0);
  EXPECT_TRUE(op->covered().empty());
  op->blend(f.view);
  EXPECT_EQ(testing_util::compare_frames(before.view, f.view), "");
}

// Image rows are read up to their width only: bytes between rows (here
// opaque garbage) never show.
TEST(OverlayCpu, ImageStrideIsHonoured) {
  TestImage img(3, 3, 8);
  for (size_t i = 0; i < img.storage.size(); ++i) img.storage[i] = 0xff;  // opaque white everywhere
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 3; ++x) img.set(x, y, 0, 0, 0, 0);  // visible pixels transparent
  HostFrame f(VideoFormat::RGBx, 8, 8);
  testing_util::fill_value(f, 7);
  auto op = cudadiff::Overlay::create(*cpu, VideoFormat::RGBx, 8, 8);
  op->set_image(img.view(), 2, 2);
  EXPECT_TRUE(op->covered().empty());
  op->blend(f.view);
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 32; ++x) ASSERT_EQ(f.view.row(0, y)[x], 7);
}

TEST(OverlayCpu, RejectsBadInput) {
  EXPECT_FALSE(cudadiff::Overlay::supports(VideoFormat::YUY2));
  EXPECT_FALSE(cudadiff::Overlay::supports(VideoFormat::Y444));
  EXPECT_TRUE(cudadiff::Overlay::supports(VideoFormat::NV21));
  EXPECT_THROW(cudadiff::Overlay::create(*cpu, VideoFormat::UYVY, 4, 4), cudadiff::Error);
  EXPECT_THROW(cudadiff::Overlay::create(*cpu, VideoFormat::BGR, 0, 4), cudadiff::Error);
  auto op = cudadiff::Overlay::create(*cpu, VideoFormat::BGR, 4, 4);
  HostFrame other(VideoFormat::BGR, 5, 4);
  EXPECT_THROW(op->blend(other.view), cudadiff::Error);
  HostFrame other_fmt(VideoFormat::RGB, 4, 4);
  EXPECT_THROW(op->blend(other_fmt.view), cudadiff::Error);
  TestImage img(4, 4);
  ArgbImage bad = img.view();
  bad.stride = 15;
  EXPECT_THROW(op->set_image(bad, 0, 0), cudadiff::Error);
  bad = img.view();
  bad.data = nullptr;
  EXPECT_THROW(op->set_image(bad, 0, 0), cudadiff::Error);
}
