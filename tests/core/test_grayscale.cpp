// Grayscale reference (CPU) against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>

#include "cudadiff/grayscale.h"
#include "frames.h"

using cudadiff::FrameView;
using cudadiff::GrayMethod;
using cudadiff::VideoFormat;
using testing_util::HostFrame;

namespace {

const GrayMethod kMethods[] = {GrayMethod::Average, GrayMethod::Bt601, GrayMethod::Bt709};

// The rules restated in floating point; .5 ties cannot occur for these weights
// at 8-bit inputs except through the fixed-point weights, so this is the
// documented formula, not a copy of the implementation.
int expected_gray(GrayMethod m, int r, int g, int b) {
  switch (m) {
    case GrayMethod::Average:
      return static_cast<int>(std::lround((r + g + b) / 3.0));
    case GrayMethod::Bt601:
      return static_cast<int>(std::floor((77 * r + 150 * g + 29 * b) / 256.0 + 0.5));
    case GrayMethod::Bt709:
      return static_cast<int>(std::floor((54 * r + 183 * g + 19 * b) / 256.0 + 0.5));
  }
  return -1;
}

void set_pixel(HostFrame &f, int x, int y, int r, int g, int b, int a_or_x) {
  const cudadiff::FormatInfo &fi = cudadiff::format_info(f.view.format);
  uint8_t *px = f.view.row(0, y) + x * fi.pixel_stride[0];
  for (int k = 0; k < fi.pixel_stride[0]; ++k) px[k] = static_cast<uint8_t>(a_or_x);
  px[fi.r] = static_cast<uint8_t>(r);
  px[fi.g] = static_cast<uint8_t>(g);
  px[fi.b] = static_cast<uint8_t>(b);
}

std::unique_ptr<cudadiff::Context> cpu = cudadiff::Context::cpu();

}  // namespace

TEST(GrayscaleCpu, HandComputedPixels) {
  struct Case {
    int r, g, b;
    int avg, bt601, bt709;
  };
  // Worked out by hand from the formulas in cudadiff/grayscale.h.
  const Case cases[] = {
      {0, 0, 0, 0, 0, 0},
      {255, 255, 255, 255, 255, 255},
      {255, 0, 0, 85, 77, 54},
      {0, 255, 0, 85, 149, 182},
      {0, 0, 255, 85, 29, 19},
      {30, 20, 10, 20, 22, 21},
      {1, 1, 0, 1, 1, 1},
      {1, 0, 0, 0, 0, 0},
      {100, 150, 200, 150, 141, 143},
  };
  for (VideoFormat fmt : testing_util::packed_rgb_formats()) {
    for (const Case &c : cases) {
      HostFrame in(fmt, 1, 1);
      set_pixel(in, 0, 0, c.r, c.g, c.b, 0x5A);
      const int want[] = {c.avg, c.bt601, c.bt709};
      for (int mi = 0; mi < 3; ++mi) {
        HostFrame out(VideoFormat::GRAY8, 1, 1);
        auto op = cudadiff::Grayscale::create(*cpu, fmt, VideoFormat::GRAY8);
        op->process(in.view, out.view, kMethods[mi]);
        EXPECT_EQ(out.view.data[0][0], want[mi]) << cudadiff::format_name(fmt) << " rgb " << c.r
                                                 << "," << c.g << "," << c.b << " method " << mi;
        EXPECT_EQ(expected_gray(kMethods[mi], c.r, c.g, c.b), want[mi]);
      }
    }
  }
}

// Every format, odd sizes from 1x1, padded strides, both output modes: the
// gray value lands in the right place, alpha/x bytes are kept, padding is not
// written.
TEST(GrayscaleCpu, FormatsSizesStrides) {
  const int sizes[][2] = {{1, 1}, {2, 1}, {1, 3}, {3, 2}, {7, 5}, {17, 3}, {33, 9}};
  for (VideoFormat fmt : testing_util::packed_rgb_formats()) {
    const cudadiff::FormatInfo &fi = cudadiff::format_info(fmt);
    for (const auto &sz : sizes) {
      for (size_t pad : {size_t(0), size_t(13)}) {
        HostFrame in(fmt, sz[0], sz[1], pad);
        for (int y = 0; y < sz[1]; ++y)
          for (int x = 0; x < sz[0]; ++x)
            set_pixel(in, x, y, (x * 37 + y * 11) & 255, (x * 5 + y * 101) & 255,
                      (x * 71 + y * 3 + 9) & 255, (x + 7 * y) & 255);
        for (GrayMethod m : kMethods) {
          HostFrame gray(VideoFormat::GRAY8, sz[0], sz[1], pad);
          HostFrame same(fmt, sz[0], sz[1], pad);
          cudadiff::Grayscale::create(*cpu, fmt, VideoFormat::GRAY8)
              ->process(in.view, gray.view, m);
          cudadiff::Grayscale::create(*cpu, fmt, fmt)->process(in.view, same.view, m);
          for (int y = 0; y < sz[1]; ++y) {
            for (int x = 0; x < sz[0]; ++x) {
              const uint8_t *px = in.view.row(0, y) + x * fi.pixel_stride[0];
              const int want = expected_gray(m, px[fi.r], px[fi.g], px[fi.b]);
              ASSERT_EQ(gray.view.row(0, y)[x], want) << cudadiff::format_name(fmt) << " " << sz[0]
                                                      << "x" << sz[1] << " at " << x << "," << y;
              const uint8_t *o = same.view.row(0, y) + x * fi.pixel_stride[0];
              for (int k = 0; k < fi.pixel_stride[0]; ++k) {
                const bool colour = k == fi.r || k == fi.g || k == fi.b;
                ASSERT_EQ(o[k], colour ? want : px[k])
                    << cudadiff::format_name(fmt) << " byte " << k << " at " << x << "," << y;
              }
            }
          }
          EXPECT_TRUE(gray.padding_intact());
          EXPECT_TRUE(same.padding_intact());
        }
      }
    }
  }
}

TEST(GrayscaleCpu, Gray8IsCopied) {
  HostFrame in(VideoFormat::GRAY8, 5, 3, 3);
  testing_util::fill_random(in);
  HostFrame out(VideoFormat::GRAY8, 5, 3, 1);
  cudadiff::Grayscale::create(*cpu, VideoFormat::GRAY8, VideoFormat::GRAY8)
      ->process(in.view, out.view, GrayMethod::Bt709);
  EXPECT_EQ(testing_util::compare_frames(in.view, out.view), "");
  EXPECT_TRUE(out.padding_intact());
}

TEST(GrayscaleCpu, RejectsBadInput) {
  EXPECT_FALSE(cudadiff::Grayscale::supports(VideoFormat::BGR, VideoFormat::RGB));
  EXPECT_FALSE(cudadiff::Grayscale::supports(VideoFormat::I420, VideoFormat::GRAY8));
  EXPECT_THROW(cudadiff::Grayscale::create(*cpu, VideoFormat::NV12, VideoFormat::GRAY8),
               cudadiff::Error);
  auto op = cudadiff::Grayscale::create(*cpu, VideoFormat::BGR, VideoFormat::GRAY8);
  HostFrame in(VideoFormat::BGR, 4, 4), out(VideoFormat::GRAY8, 5, 4);
  EXPECT_THROW(op->process(in.view, out.view, GrayMethod::Bt601), cudadiff::Error);
  FrameView short_stride = in.view;
  short_stride.stride[0] = 11;  // less than 4 pixels * 3 bytes
  HostFrame out4(VideoFormat::GRAY8, 4, 4);
  EXPECT_THROW(op->process(short_stride, out4.view, GrayMethod::Bt601), cudadiff::Error);
}

// The fixed-point form the CUDA kernel evaluates equals the documented rule for
// all 2^24 colours.
TEST(GrayscaleCpu, WeightedFormEqualsRuleForAllColours) {
  for (GrayMethod m : kMethods) {
    const cudadiff::GrayWeights w = cudadiff::gray_weights(m);
    int mismatches = 0;
    for (unsigned r = 0; r < 256; ++r)
      for (unsigned g = 0; g < 256; ++g)
        for (unsigned b = 0; b < 256; ++b)
          mismatches += cudadiff::gray_weighted(w, r, g, b) != cudadiff::gray_value(m, r, g, b);
    EXPECT_EQ(mismatches, 0) << "method " << static_cast<int>(m);
  }
}
