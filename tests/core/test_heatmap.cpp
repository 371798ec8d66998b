// Heat map reference (CPU) against hand-computed values: the colour of chosen
// differences for each colormap, gain, alpha blending, the first-frame rule,
// reset, every format's byte positions, GRAY8 input, padded strides.
#include <gtest/gtest.h>

#include <cmath>

#include "cudadiff/heatmap.h"
#include "frames.h"

using cudadiff::FrameView;
using cudadiff::HeatColormap;
using cudadiff::HeatmapParams;
using cudadiff::VideoFormat;
using testing_util::HostFrame;

namespace {

std::unique_ptr<cudadiff::Context> cpu = cudadiff::Context::cpu();

struct Rgb {
  int r, g, b;
};

// Worked out from the formulas in cudadiff/heatmap.h (t = d / 765, sines in
// double precision, floor(255 v + 0.5)), avoiding exact .5 ties.
struct ColourCase {
  int d;
  Rgb sine, turbo;
  int gray;
};
const ColourCase kColours[] = {
    {0, {0, 0, 255}, {35, 23, 27}, 0},     {153, {0, 150, 206}, {47, 158, 245}, 51},
    {306, {0, 243, 79}, {0, 0, 0}, 102},   {383, {1, 255, 0}, {151, 250, 80}, 128},
    {459, {79, 243, 0}, {0, 0, 0}, 153},   {612, {206, 150, 0}, {244, 92, 23}, 204},
    {765, {255, 0, 0}, {144, 13, 0}, 255},
};
bool has_turbo(const ColourCase &c) {
  return c.turbo.r + c.turbo.g + c.turbo.b > 0;
}

void set_rgb(HostFrame &f, int x, int y, Rgb c, int extra = 0x5A) {
  const cudadiff::FormatInfo &fi = cudadiff::format_info(f.view.format);
  uint8_t *px = f.view.row(0, y) + x * fi.pixel_stride[0];
  for (int k = 0; k < fi.pixel_stride[0]; ++k) px[k] = static_cast<uint8_t>(extra);
  px[fi.r] = static_cast<uint8_t>(c.r);
  px[fi.g] = static_cast<uint8_t>(c.g);
  px[fi.b] = static_cast<uint8_t>(c.b);
}

Rgb get_rgb(const HostFrame &f, int x, int y) {
  const cudadiff::FormatInfo &fi = cudadiff::format_info(f.view.format);
  const uint8_t *px = f.view.row(0, y) + x * fi.pixel_stride[0];
  return {px[fi.r], px[fi.g], px[fi.b]};
}

int extra_byte(const HostFrame &f, int x, int y) {
  const cudadiff::FormatInfo &fi = cudadiff::format_info(f.view.format);
  return f.view.row(0, y)[x * 4 + 6 - fi.r - fi.g - fi.b];
}

::testing::AssertionResult same(Rgb got, Rgb want) {
  if (got.r == want.r && got.g == want.g && got.b == want.b) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "got (" << got.r << "," << got.g << "," << got.b << ") want (" << want.r << ","
         << want.g << "," << want.b << ")";
}

// A pixel pair whose difference sum is d: R falls, G rises, B falls.
void pair_with_difference(int d, Rgb *prev, Rgb *cur) {
  const int dr = std::min(d, 255), dg = std::min(std::max(d - 255, 0), 255),
            db = std::max(d - 510, 0);
  *prev = {dr, 0, 255};
  *cur = {0, dg, 255 - db};
}

}  // namespace

TEST(HeatmapCpu, ColourFunction) {
  for (const ColourCase &c : kColours) {
    const double t = cudadiff::heat_position(c.d, 1.0);
    const cudadiff::HeatColour s = cudadiff::heat_colour(HeatColormap::Sine, t);
    EXPECT_TRUE(same({s.r, s.g, s.b}, c.sine)) << "sine d=" << c.d;
    const cudadiff::HeatColour g = cudadiff::heat_colour(HeatColormap::Gray, t);
    EXPECT_TRUE(same({g.r, g.g, g.b}, {c.gray, c.gray, c.gray})) << "gray d=" << c.d;
    if (has_turbo(c)) {
      const cudadiff::HeatColour u = cudadiff::heat_colour(HeatColormap::Turbo, t);
      EXPECT_TRUE(same({u.r, u.g, u.b}, c.turbo)) << "turbo d=" << c.d;
    }
  }
  // Gain multiplies before the clamp.
  EXPECT_DOUBLE_EQ(cudadiff::heat_position(153, 2.0), 0.4);
  EXPECT_DOUBLE_EQ(cudadiff::heat_position(153, 10.0), 1.0);
  EXPECT_DOUBLE_EQ(cudadiff::heat_position(765, 0.0), 0.0);
  EXPECT_DOUBLE_EQ(cudadiff::heat_position(765, -3.0), 0.0);
  // The blend weight and formula.
  EXPECT_EQ(cudadiff::heat_blend_weight(1.0), 256u);
  EXPECT_EQ(cudadiff::heat_blend_weight(0.5), 128u);
  EXPECT_EQ(cudadiff::heat_blend_weight(0.0), 0u);
  EXPECT_EQ(cudadiff::heat_blend_weight(-1.0), 0u);
  EXPECT_EQ(cudadiff::heat_blend(255, 200, 128), 228);  // (255*128 + 200*128 + 128) >> 8
  EXPECT_EQ(cudadiff::heat_blend(0, 100, 128), 50);
  EXPECT_EQ(cudadiff::heat_blend(17, 99, 256), 17);
  EXPECT_EQ(cudadiff::heat_blend(17, 99, 0), 99);
}

TEST(HeatmapCpu, TableCoversEveryDifference) {
  cudadiff::HeatColour table[cudadiff::kHeatTableSize];
  cudadiff::heat_table(HeatColormap::Sine, 1.0, table);
  for (const ColourCase &c : kColours)
    EXPECT_TRUE(same({table[c.d].r, table[c.d].g, table[c.d].b}, c.sine)) << c.d;
  // Blue fades while red grows; green peaks in the middle.
  for (int d = 1; d < cudadiff::kHeatTableSize; ++d) {
    EXPECT_LE(table[d].b, table[d - 1].b);
    EXPECT_GE(table[d].r, table[d - 1].r);
  }
  EXPECT_EQ(table[383].g, 255);
}

// A 3x2 BGR frame with padded rows: the first frame is all "no change" (blue),
// the second shows each pixel's own difference; padding is never written.
TEST(HeatmapCpu, SmallFrameFirstFrameAndDifferences) {
  const int w = 3, h = 2;
  HostFrame f0(VideoFormat::BGR, w, h, 5), f1(VideoFormat::BGR, w, h, 5);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) set_rgb(f0, x, y, {10 + x, 20 + y, 30});
  f1 = f0;
  set_rgb(f1, 0, 0, {10 + 100, 20 + 53, 30});    // d = 153
  set_rgb(f1, 1, 0, {0, 255, 255});              // from (11, 20, 30): d = 11 + 235 + 225 = 471
  set_rgb(f1, 2, 1, {12 + 100, 21 + 106, 130});  // d = 100 + 106 + 100 = 306
  HostFrame out(VideoFormat::BGR, w, h, 3, 0xEE);
  auto op = cudadiff::Heatmap::create(*cpu, VideoFormat::BGR, VideoFormat::BGR, w, h);
  op->process(f0.view, out.view, HeatmapParams{});
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) EXPECT_TRUE(same(get_rgb(out, x, y), {0, 0, 255})) << x << "," << y;
  EXPECT_TRUE(out.padding_intact(0xEE));

  op->process(f1.view, out.view, HeatmapParams{});
  EXPECT_TRUE(same(get_rgb(out, 0, 0), {0, 150, 206}));
  // 471 / 765 = 0.6157: R = -cos(0.6157 pi) = 0.3576 -> 91, G = sin(..) = 0.9339 -> 238.
  EXPECT_TRUE(same(get_rgb(out, 1, 0), {91, 238, 0}));
  EXPECT_TRUE(same(get_rgb(out, 2, 1), {0, 243, 79}));
  EXPECT_TRUE(same(get_rgb(out, 2, 0), {0, 0, 255}));
  EXPECT_TRUE(same(get_rgb(out, 0, 1), {0, 0, 255}));
  EXPECT_TRUE(out.padding_intact(0xEE));

  // The same frame again: nothing changed.
  op->process(f1.view, out.view, HeatmapParams{});
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) EXPECT_TRUE(same(get_rgb(out, x, y), {0, 0, 255}));

  // After reset the next frame shows no change even though it differs.
  op->process(f0.view, out.view, HeatmapParams{});
  EXPECT_TRUE(same(get_rgb(out, 0, 0), {0, 150, 206}));
  op->reset();
  op->process(f1.view, out.view, HeatmapParams{});
  EXPECT_TRUE(same(get_rgb(out, 0, 0), {0, 0, 255}));
}

// Every colormap and difference, every packed format: the colour lands at the
// format's R, G, B offsets, the alpha/x byte is the current frame's.
TEST(HeatmapCpu, EveryFormatColormapDifference) {
  for (VideoFormat fmt : testing_util::packed_rgb_formats()) {
    for (const ColourCase &c : kColours) {
      Rgb p, q;
      pair_with_difference(c.d, &p, &q);
      ASSERT_EQ(std::abs(p.r - q.r) + std::abs(p.g - q.g) + std::abs(p.b - q.b), c.d);
      HostFrame prev(fmt, 1, 1), cur(fmt, 1, 1);
      set_rgb(prev, 0, 0, p, 0x11);
      set_rgb(cur, 0, 0, q, 0x77);  // the alpha/x byte changes too: not part of d
      for (HeatColormap cm : {HeatColormap::Sine, HeatColormap::Turbo, HeatColormap::Gray}) {
        if (cm == HeatColormap::Turbo && !has_turbo(c)) continue;
        const Rgb want = cm == HeatColormap::Sine   ? c.sine
                         : cm == HeatColormap::Gray ? Rgb{c.gray, c.gray, c.gray}
                                                    : c.turbo;
        HostFrame out(fmt, 1, 1);
        auto op = cudadiff::Heatmap::create(*cpu, fmt, fmt, 1, 1);
        HeatmapParams params;
        params.colormap = cm;
        op->process(prev.view, out.view, params);
        op->process(cur.view, out.view, params);
        EXPECT_TRUE(same(get_rgb(out, 0, 0), want))
            << cudadiff::format_name(fmt) << " d=" << c.d << " colormap " << int(cm);
        if (cudadiff::format_info(fmt).pixel_stride[0] == 4) {
          EXPECT_EQ(extra_byte(out, 0, 0), 0x77);
        }
      }
    }
  }
}

TEST(HeatmapCpu, GainAndAlpha) {
  HostFrame prev(VideoFormat::RGB, 2, 1), cur(VideoFormat::RGB, 2, 1), out(VideoFormat::RGB, 2, 1);
  set_rgb(prev, 0, 0, {0, 0, 0});
  set_rgb(cur, 0, 0, {100, 53, 0});  // d = 153
  set_rgb(prev, 1, 0, {100, 50, 200});
  set_rgb(cur, 1, 0, {100, 50, 200});  // unchanged
  auto op = cudadiff::Heatmap::create(*cpu, VideoFormat::RGB, VideoFormat::RGB, 2, 1);
  const auto run = [&](double gain, double alpha) {
    HeatmapParams params;
    params.gain = gain;
    params.alpha = alpha;
    op->reset();
    op->process(prev.view, out.view, params);
    op->process(cur.view, out.view, params);
  };
  run(2.0, 1.0);  // t = 0.4
  EXPECT_TRUE(same(get_rgb(out, 0, 0), {0, 243, 79}));
  run(5.0, 1.0);  // t = 1
  EXPECT_TRUE(same(get_rgb(out, 0, 0), {255, 0, 0}));
  run(0.0, 1.0);  // nothing shows
  EXPECT_TRUE(same(get_rgb(out, 0, 0), {0, 0, 255}));
  run(1.0, 0.5);  // w = 128: (heat 128 + frame 128 + 128) >> 8
  // d = 153: heat (0, 150, 206) over (100, 53, 0): (50, 102, 103).
  EXPECT_TRUE(same(get_rgb(out, 0, 0), {50, 102, 103}));
  // Unchanged: blue (0, 0, 255) over (100, 50, 200): (50, 25, 228).
  EXPECT_TRUE(same(get_rgb(out, 1, 0), {50, 25, 228}));
  run(1.0, 0.0);  // the frame itself
  EXPECT_TRUE(same(get_rgb(out, 0, 0), {100, 53, 0}));
  EXPECT_TRUE(same(get_rgb(out, 1, 0), {100, 50, 200}));
  run(1.0, 0.25);  // w = 64: (0*64 + 100*192 + 128) >> 8 = 75, (150*64 + 53*192 + 128) >> 8 = 77,
                   // (206*64 + 0 + 128) >> 8 = 52
  EXPECT_TRUE(same(get_rgb(out, 0, 0), {75, 77, 52}));
}

// GRAY8 input: d = 3 |dY|. GRAY8 output shows the colour's BT.601 luma; a
// colour output gets the colour and an opaque alpha/x byte.
TEST(HeatmapCpu, Gray8Input) {
  HostFrame prev(VideoFormat::GRAY8, 2, 1, 3), cur(VideoFormat::GRAY8, 2, 1, 3);
  prev.at(0, 0, 0) = 10;
  cur.at(0, 0, 0) = 61;  // d = 153
  prev.at(0, 1, 0) = cur.at(0, 1, 0) = 200;
  {
    HostFrame out(VideoFormat::GRAY8, 2, 1, 2);
    auto op = cudadiff::Heatmap::create(*cpu, VideoFormat::GRAY8, VideoFormat::GRAY8, 2, 1);
    op->process(prev.view, out.view, HeatmapParams{});
    EXPECT_EQ(out.at(0, 0, 0), 29);  // blue (0, 0, 255): (29*255 + 128) >> 8
    op->process(cur.view, out.view, HeatmapParams{});
    EXPECT_EQ(out.at(0, 0, 0), 111);  // (0, 150, 206): (150*150 + 29*206 + 128) >> 8
    EXPECT_EQ(out.at(0, 1, 0), 29);
    EXPECT_TRUE(out.padding_intact());
    HeatmapParams gray;
    gray.colormap = HeatColormap::Gray;
    op->reset();
    op->process(prev.view, out.view, gray);
    op->process(cur.view, out.view, gray);
    EXPECT_EQ(out.at(0, 0, 0), 51);
    EXPECT_EQ(out.at(0, 1, 0), 0);
    HeatmapParams half = gray;
    half.alpha = 0.5;  // (51*128 + 61*128 + 128) >> 8 = 56; (0 + 200*128 + 128) >> 8 = 100
    op->reset();
    op->process(prev.view, out.view, half);
    op->process(cur.view, out.view, half);
    EXPECT_EQ(out.at(0, 0, 0), 56);
    EXPECT_EQ(out.at(0, 1, 0), 100);
  }
  for (VideoFormat fmt : testing_util::packed_rgb_formats()) {
    HostFrame out(fmt, 2, 1);
    auto op = cudadiff::Heatmap::create(*cpu, VideoFormat::GRAY8, fmt, 2, 1);
    op->process(prev.view, out.view, HeatmapParams{});
    op->process(cur.view, out.view, HeatmapParams{});
    EXPECT_TRUE(same(get_rgb(out, 0, 0), {0, 150, 206})) << cudadiff::format_name(fmt);
    EXPECT_TRUE(same(get_rgb(out, 1, 0), {0, 0, 255})) << cudadiff::format_name(fmt);
    if (cudadiff::format_info(fmt).pixel_stride[0] == 4) {
      EXPECT_EQ(extra_byte(out, 1, 0), 255);
    }
  }
}

TEST(HeatmapCpu, FormatsAndSizesChecked) {
  EXPECT_TRUE(cudadiff::Heatmap::supports(VideoFormat::BGR, VideoFormat::BGR));
  EXPECT_TRUE(cudadiff::Heatmap::supports(VideoFormat::GRAY8, VideoFormat::ARGB));
  EXPECT_TRUE(cudadiff::Heatmap::supports(VideoFormat::GRAY8, VideoFormat::GRAY8));
  EXPECT_FALSE(cudadiff::Heatmap::supports(VideoFormat::BGR, VideoFormat::RGB));
  EXPECT_FALSE(cudadiff::Heatmap::supports(VideoFormat::BGR, VideoFormat::GRAY8));
  EXPECT_FALSE(cudadiff::Heatmap::supports(VideoFormat::I420, VideoFormat::I420));
  EXPECT_THROW(cudadiff::Heatmap::create(*cpu, VideoFormat::NV12, VideoFormat::NV12, 4, 4),
               cudadiff::Error);
  EXPECT_THROW(cudadiff::Heatmap::create(*cpu, VideoFormat::BGR, VideoFormat::BGR, 0, 4),
               cudadiff::Error);
  auto op = cudadiff::Heatmap::create(*cpu, VideoFormat::BGR, VideoFormat::BGR, 4, 4);
  HostFrame small(VideoFormat::BGR, 3, 4), ok(VideoFormat::BGR, 4, 4);
  EXPECT_THROW(op->process(small.view, ok.view, HeatmapParams{}), cudadiff::Error);
  EXPECT_THROW(op->process(ok.view, small.view, HeatmapParams{}), cudadiff::Error);
}

// Odd sizes, every format, padded strides: a random sequence against a
// straightforward restatement of the rule per pixel.
TEST(HeatmapCpu, RandomSequencesMatchTheRule) {
  const int sizes[][2] = {{1, 1}, {17, 3}, {33, 5}};
  for (VideoFormat fmt : testing_util::packed_rgb_formats()) {
    const cudadiff::FormatInfo &fi = cudadiff::format_info(fmt);
    for (const auto &sz : sizes) {
      const int w = sz[0], h = sz[1];
      auto op = cudadiff::Heatmap::create(*cpu, fmt, fmt, w, h);
      HostFrame prev(fmt, w, h, 7);
      testing_util::fill_random(prev);
      HostFrame out(fmt, w, h, 9, 0xAB);
      HeatmapParams params;
      params.gain = 3.0;
      op->process(prev.view, out.view, params);
      HostFrame cur(fmt, w, h, 7);
      testing_util::fill_random(cur);
      op->process(cur.view, out.view, params);
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
          const uint8_t *p = prev.view.row(0, y) + x * fi.pixel_stride[0];
          const uint8_t *c = cur.view.row(0, y) + x * fi.pixel_stride[0];
          const int d = std::abs(p[fi.r] - c[fi.r]) + std::abs(p[fi.g] - c[fi.g]) +
                        std::abs(p[fi.b] - c[fi.b]);
          const double t = std::min(1.0, 3.0 * d / 765.0);
          const double pi = std::acos(-1.0);
          const auto byte = [](double v) {
            return static_cast<int>(std::floor(std::max(0.0, v) * 255.0 + 0.5));
          };
          const Rgb want{byte(-std::cos(pi * t)), byte(std::sin(pi * t)), byte(std::cos(pi * t))};
          const Rgb got = get_rgb(out, x, y);
          // cos and the shifted sines may differ in the last bit: within 1.
          EXPECT_LE(std::abs(got.r - want.r) + std::abs(got.g - want.g) + std::abs(got.b - want.b),
                    1)
              << cudadiff::format_name(fmt) << " " << x << "," << y << " d=" << d;
        }
      EXPECT_TRUE(out.padding_intact(0xAB));
    }
  }
}
