// Noise view reference (CPU) against hand-computed values: marking by the
// threshold rule, counts, mask and overlay, colour alpha, alpha/x bytes,
// GRAY8 input, the first-frame rule, reset, padded strides.
#include <gtest/gtest.h>

#include <cstdlib>

#include "cudadiff/noisevis.h"
#include "frames.h"

using cudadiff::NoiseCounts;
using cudadiff::NoiseMode;
using cudadiff::NoiseParams;
using cudadiff::VideoFormat;
using testing_util::HostFrame;

namespace {

std::unique_ptr<cudadiff::Context> cpu = cudadiff::Context::cpu();

struct Rgb {
  int r, g, b;
};

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

int extra_at(const cudadiff::FormatInfo &fi) {
  return 6 - fi.r - fi.g - fi.b;
}

::testing::AssertionResult same(Rgb got, Rgb want) {
  if (got.r == want.r && got.g == want.g && got.b == want.b) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "got (" << got.r << "," << got.g << "," << got.b << ") want (" << want.r << ","
         << want.g << "," << want.b << ")";
}

// 4x2 BGR, rows padded. Frame 1 -> frame 2 (threshold 20):
//   (0,0): B +21            -> marked, 1 changed byte
//   (1,0): G +20            -> not marked (not more than 20)
//   (2,0): R -30, G +25     -> marked, 2 changed bytes
//   (3,1): 0 -> 255 in all  -> marked, 3 changed bytes
//   (1,1): B -20, R +19     -> not marked
struct Scene {
  HostFrame f1{VideoFormat::BGR, 4, 2, 6}, f2{VideoFormat::BGR, 4, 2, 6};
  Scene() {
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 4; ++x) set_rgb(f1, x, y, {40 + 10 * x, 60 + 20 * y, 80});
    set_rgb(f1, 3, 1, {0, 0, 0});
    f2 = f1;
    set_rgb(f2, 0, 0, {40, 60, 80 + 21});
    set_rgb(f2, 1, 0, {50, 60 + 20, 80});
    set_rgb(f2, 2, 0, {60 - 30, 60 + 25, 80});
    set_rgb(f2, 3, 1, {255, 255, 255});
    set_rgb(f2, 1, 1, {50 + 19, 80, 80 - 20});
  }
  bool marked(int x, int y) const {
    return (x == 0 && y == 0) || (x == 2 && y == 0) || (x == 3 && y == 1);
  }
};

}  // namespace

TEST(NoiseVisCpu, PaintFormula) {
  EXPECT_EQ(cudadiff::noise_paint(255, 0, 255), 255u);
  EXPECT_EQ(cudadiff::noise_paint(0, 200, 255), 0u);
  EXPECT_EQ(cudadiff::noise_paint(17, 200, 0), 200u);
  EXPECT_EQ(cudadiff::noise_paint(255, 0, 128), 128u);   // (32640 + 127) / 255
  EXPECT_EQ(cudadiff::noise_paint(255, 50, 128), 153u);  // (32640 + 6350 + 127) / 255
  EXPECT_EQ(cudadiff::noise_paint(0, 100, 128), 50u);    // (12700 + 127) / 255
}

TEST(NoiseVisCpu, MaskCountsAndFirstFrame) {
  Scene s;
  HostFrame out(VideoFormat::BGR, 4, 2, 3, 0xEE);
  auto op = cudadiff::NoiseVis::create(*cpu, VideoFormat::BGR, VideoFormat::BGR, 4, 2);
  op->process(s.f1.view, out.view, NoiseParams{}, true);
  op->take_counts();
  NoiseCounts c = op->counts();
  EXPECT_EQ(c.frames, 1u);
  EXPECT_EQ(c.compared_frames, 0u);  // the first frame: nothing to compare with
  EXPECT_EQ(c.marked_pixels, 0u);
  EXPECT_EQ(c.changed_bytes, 0u);
  EXPECT_EQ(c.pixels, 0u);
  EXPECT_EQ(c.bytes, 0u);
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 4; ++x) EXPECT_TRUE(same(get_rgb(out, x, y), {0, 0, 0}));

  op->process(s.f2.view, out.view, NoiseParams{}, true);
  op->take_counts();
  c = op->counts();
  EXPECT_EQ(c.frames, 1u);
  EXPECT_EQ(c.compared_frames, 1u);
  EXPECT_EQ(c.marked_pixels, 3u);
  EXPECT_EQ(c.changed_bytes, 6u);
  EXPECT_EQ(c.pixels, 8u);
  EXPECT_EQ(c.bytes, 24u);
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 4; ++x)
      EXPECT_TRUE(same(get_rgb(out, x, y), s.marked(x, y) ? Rgb{255, 0, 0} : Rgb{0, 0, 0}))
          << x << "," << y;
  EXPECT_TRUE(out.padding_intact(0xEE));

  // Without counting nothing is added; counts() keeps the last take's.
  op->process(s.f2.view, out.view, NoiseParams{}, false);
  EXPECT_EQ(op->counts().marked_pixels, 3u);
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 4; ++x) EXPECT_TRUE(same(get_rgb(out, x, y), {0, 0, 0}));
  op->take_counts();
  EXPECT_EQ(op->counts().frames, 0u);
  EXPECT_EQ(op->counts().marked_pixels, 0u);
  EXPECT_EQ(op->counts().pixels, 0u);

  // Reset: the next frame is a first frame again.
  op->reset();
  op->process(s.f1.view, out.view, NoiseParams{}, true);
  op->take_counts();
  EXPECT_EQ(op->counts().frames, 1u);
  EXPECT_EQ(op->counts().compared_frames, 0u);
  EXPECT_EQ(op->counts().marked_pixels, 0u);
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 4; ++x) EXPECT_TRUE(same(get_rgb(out, x, y), {0, 0, 0}));
}

// The totals add up over counted frames until they are taken; clear_counts()
// drops them; reset() keeps them.
TEST(NoiseVisCpu, CountsAddUpUntilTaken) {
  Scene s;
  HostFrame out(VideoFormat::BGR, 4, 2);
  auto op = cudadiff::NoiseVis::create(*cpu, VideoFormat::BGR, VideoFormat::BGR, 4, 2);
  op->process(s.f1.view, out.view, NoiseParams{}, true);   // first frame
  op->process(s.f2.view, out.view, NoiseParams{}, true);   // 3 marked, 6 changed
  op->process(s.f2.view, out.view, NoiseParams{}, false);  // not counted
  op->process(s.f1.view, out.view, NoiseParams{}, true);   // the same 3 and 6 back
  op->take_counts();
  NoiseCounts c = op->counts();
  EXPECT_EQ(c.frames, 3u);
  EXPECT_EQ(c.compared_frames, 2u);
  EXPECT_EQ(c.marked_pixels, 6u);
  EXPECT_EQ(c.changed_bytes, 12u);
  EXPECT_EQ(c.pixels, 16u);
  EXPECT_EQ(c.bytes, 48u);

  op->process(s.f2.view, out.view, NoiseParams{}, true);
  op->clear_counts();  // drops that frame
  op->process(s.f1.view, out.view, NoiseParams{}, true);
  op->reset();                                            // keeps the totals
  op->process(s.f2.view, out.view, NoiseParams{}, true);  // a first frame again
  op->take_counts();
  c = op->counts();
  EXPECT_EQ(c.frames, 2u);
  EXPECT_EQ(c.compared_frames, 1u);
  EXPECT_EQ(c.marked_pixels, 3u);
  EXPECT_EQ(c.changed_bytes, 6u);
  EXPECT_EQ(c.pixels, 8u);
  EXPECT_EQ(c.bytes, 24u);

  op->take_counts();  // nothing counted since
  c = op->counts();
  EXPECT_EQ(c.frames, 0u);
  EXPECT_EQ(c.marked_pixels, 0u);
  EXPECT_EQ(c.changed_bytes, 0u);
}

TEST(NoiseVisCpu, ThresholdEdges) {
  Scene s;
  HostFrame out(VideoFormat::BGR, 4, 2);
  auto op = cudadiff::NoiseVis::create(*cpu, VideoFormat::BGR, VideoFormat::BGR, 4, 2);
  NoiseParams p;
  const auto run = [&](int threshold) {
    p.threshold = threshold;
    op->reset();
    op->process(s.f1.view, out.view, p, true);
    op->process(s.f2.view, out.view, p, true);
    op->take_counts();
    return op->counts();
  };
  NoiseCounts c = run(19);  // now the +20 of (1,0) and the -20 of (1,1) count too
  EXPECT_EQ(c.marked_pixels, 5u);
  EXPECT_EQ(c.changed_bytes, 8u);
  c = run(0);
  EXPECT_EQ(c.marked_pixels, 5u);
  EXPECT_EQ(c.changed_bytes, 9u);
  c = run(254);
  EXPECT_EQ(c.marked_pixels, 1u);  // only 0 -> 255
  EXPECT_EQ(c.changed_bytes, 3u);
  c = run(255);
  EXPECT_EQ(c.marked_pixels, 0u);
  EXPECT_EQ(c.changed_bytes, 0u);
  c = run(-5);  // clamped to 0
  EXPECT_EQ(c.marked_pixels, 5u);
  c = run(1000);  // clamped to 255
  EXPECT_EQ(c.marked_pixels, 0u);
}

TEST(NoiseVisCpu, OverlayAndColourAlpha) {
  Scene s;
  HostFrame out(VideoFormat::BGR, 4, 2);
  auto op = cudadiff::NoiseVis::create(*cpu, VideoFormat::BGR, VideoFormat::BGR, 4, 2);
  NoiseParams p;
  p.mode = NoiseMode::Overlay;
  op->process(s.f1.view, out.view, p, false);
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 4; ++x) EXPECT_TRUE(same(get_rgb(out, x, y), get_rgb(s.f1, x, y)));
  op->process(s.f2.view, out.view, p, false);
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 4; ++x)
      EXPECT_TRUE(same(get_rgb(out, x, y), s.marked(x, y) ? Rgb{255, 0, 0} : get_rgb(s.f2, x, y)));

  // Half-transparent green: over black (mask) 128; over (R, G, B) in overlay
  // ((0|255) * 128 + c * 127 + 127) / 255 per channel.
  p.color = 0x8000ff00u;
  p.mode = NoiseMode::Mask;
  op->reset();
  op->process(s.f1.view, out.view, p, false);
  op->process(s.f2.view, out.view, p, false);
  EXPECT_TRUE(same(get_rgb(out, 0, 0), {0, 128, 0}));
  EXPECT_TRUE(same(get_rgb(out, 1, 0), {0, 0, 0}));
  p.mode = NoiseMode::Overlay;
  op->reset();
  op->process(s.f1.view, out.view, p, false);
  op->process(s.f2.view, out.view, p, false);
  // (2,0) is (30, 85, 80): R (30*127 + 127) / 255 = 15, G (32640 + 85*127 + 127) / 255 = 170,
  // B (80*127 + 127) / 255 = 40.
  EXPECT_TRUE(same(get_rgb(out, 2, 0), {15, 170, 40}));
  EXPECT_TRUE(same(get_rgb(out, 1, 0), get_rgb(s.f2, 1, 0)));
  // A fully transparent colour marks nothing visibly.
  p.color = 0x00ffffffu;
  op->reset();
  op->process(s.f1.view, out.view, p, false);
  op->process(s.f2.view, out.view, p, false);
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 4; ++x) EXPECT_TRUE(same(get_rgb(out, x, y), get_rgb(s.f2, x, y)));
}

// Every packed format: the colour at the right offsets, the alpha/x byte the
// input's, and a change in the alpha/x byte alone marks the pixel (the
// encoder sends every byte).
TEST(NoiseVisCpu, EveryFormat) {
  for (VideoFormat fmt : testing_util::packed_rgb_formats()) {
    const cudadiff::FormatInfo &fi = cudadiff::format_info(fmt);
    const int ps = fi.pixel_stride[0];
    HostFrame f1(fmt, 3, 1, 2), f2(fmt, 3, 1, 2);
    set_rgb(f1, 0, 0, {10, 20, 30}, 0x40);
    set_rgb(f1, 1, 0, {10, 20, 30}, 0x40);
    set_rgb(f1, 2, 0, {10, 20, 30}, 0x40);
    set_rgb(f2, 0, 0, {10, 20, 30}, 0x40);   // unchanged
    set_rgb(f2, 1, 0, {10, 20, 130}, 0x41);  // B changed
    set_rgb(f2, 2, 0, {10, 20, 30}, 0x90);   // only alpha/x changed (if any)
    for (NoiseMode mode : {NoiseMode::Mask, NoiseMode::Overlay}) {
      HostFrame out(fmt, 3, 1, 4, 0xEE);
      auto op = cudadiff::NoiseVis::create(*cpu, fmt, fmt, 3, 1);
      NoiseParams p;
      p.mode = mode;
      p.color = 0xff102030u;
      op->process(f1.view, out.view, p, true);
      op->process(f2.view, out.view, p, true);
      const bool has_extra = ps == 4;
      op->take_counts();
      const NoiseCounts c = op->counts();
      EXPECT_EQ(c.marked_pixels, has_extra ? 2u : 1u) << cudadiff::format_name(fmt);
      EXPECT_EQ(c.changed_bytes, has_extra ? 2u : 1u);
      EXPECT_EQ(c.bytes, static_cast<uint64_t>(3 * ps));
      const Rgb paint{0x10, 0x20, 0x30};
      const Rgb background = mode == NoiseMode::Mask ? Rgb{0, 0, 0} : Rgb{10, 20, 30};
      EXPECT_TRUE(same(get_rgb(out, 0, 0), background)) << cudadiff::format_name(fmt);
      EXPECT_TRUE(same(get_rgb(out, 1, 0), paint)) << cudadiff::format_name(fmt);
      EXPECT_TRUE(same(get_rgb(out, 2, 0), has_extra ? paint : background));
      if (has_extra) {
        EXPECT_EQ(out.view.row(0, 0)[0 * 4 + extra_at(fi)], 0x40);
        EXPECT_EQ(out.view.row(0, 0)[1 * 4 + extra_at(fi)], 0x41);
        EXPECT_EQ(out.view.row(0, 0)[2 * 4 + extra_at(fi)], 0x90);
      }
      EXPECT_TRUE(out.padding_intact(0xEE));
    }
  }
}

// GRAY8 input: one byte per pixel. GRAY8 output paints the colour's BT.601
// luma; colour outputs paint the colour, with an opaque alpha/x byte.
TEST(NoiseVisCpu, Gray8Input) {
  HostFrame f1(VideoFormat::GRAY8, 3, 1, 5), f2(VideoFormat::GRAY8, 3, 1, 5);
  const uint8_t a[3] = {100, 100, 100}, b[3] = {100, 121, 80};  // +21 marked, -20 not
  for (int x = 0; x < 3; ++x) {
    f1.at(0, x, 0) = a[x];
    f2.at(0, x, 0) = b[x];
  }
  {
    HostFrame out(VideoFormat::GRAY8, 3, 1, 2);
    auto op = cudadiff::NoiseVis::create(*cpu, VideoFormat::GRAY8, VideoFormat::GRAY8, 3, 1);
    op->process(f1.view, out.view, NoiseParams{}, true);
    op->process(f2.view, out.view, NoiseParams{}, true);
    op->take_counts();
    EXPECT_EQ(out.at(0, 0, 0), 0);
    EXPECT_EQ(out.at(0, 1, 0), 77);  // red: (77*255 + 128) >> 8
    EXPECT_EQ(out.at(0, 2, 0), 0);
    EXPECT_EQ(op->counts().marked_pixels, 1u);
    EXPECT_EQ(op->counts().changed_bytes, 1u);
    EXPECT_EQ(op->counts().bytes, 3u);
    NoiseParams overlay;
    overlay.mode = NoiseMode::Overlay;
    op->reset();
    op->process(f1.view, out.view, overlay, false);
    op->process(f2.view, out.view, overlay, false);
    EXPECT_EQ(out.at(0, 0, 0), 100);
    EXPECT_EQ(out.at(0, 1, 0), 77);
    EXPECT_EQ(out.at(0, 2, 0), 80);
    EXPECT_TRUE(out.padding_intact());
  }
  for (VideoFormat fmt : testing_util::packed_rgb_formats()) {
    const cudadiff::FormatInfo &fi = cudadiff::format_info(fmt);
    HostFrame out(fmt, 3, 1);
    auto op = cudadiff::NoiseVis::create(*cpu, VideoFormat::GRAY8, fmt, 3, 1);
    NoiseParams overlay;
    overlay.mode = NoiseMode::Overlay;
    op->process(f1.view, out.view, overlay, false);
    op->process(f2.view, out.view, overlay, false);
    EXPECT_TRUE(same(get_rgb(out, 0, 0), {100, 100, 100})) << cudadiff::format_name(fmt);
    EXPECT_TRUE(same(get_rgb(out, 1, 0), {255, 0, 0})) << cudadiff::format_name(fmt);
    EXPECT_TRUE(same(get_rgb(out, 2, 0), {80, 80, 80})) << cudadiff::format_name(fmt);
    if (fi.pixel_stride[0] == 4) {
      for (int x = 0; x < 3; ++x) EXPECT_EQ(out.view.row(0, 0)[x * 4 + extra_at(fi)], 255);
    }
  }
}

TEST(NoiseVisCpu, FormatsAndSizesChecked) {
  EXPECT_TRUE(cudadiff::NoiseVis::supports(VideoFormat::RGBA, VideoFormat::RGBA));
  EXPECT_TRUE(cudadiff::NoiseVis::supports(VideoFormat::GRAY8, VideoFormat::BGR));
  EXPECT_FALSE(cudadiff::NoiseVis::supports(VideoFormat::RGBA, VideoFormat::BGRA));
  EXPECT_FALSE(cudadiff::NoiseVis::supports(VideoFormat::YUY2, VideoFormat::YUY2));
  EXPECT_THROW(cudadiff::NoiseVis::create(*cpu, VideoFormat::I420, VideoFormat::I420, 4, 4),
               cudadiff::Error);
  EXPECT_THROW(cudadiff::NoiseVis::create(*cpu, VideoFormat::BGR, VideoFormat::BGR, 4, 0),
               cudadiff::Error);
  auto op = cudadiff::NoiseVis::create(*cpu, VideoFormat::BGR, VideoFormat::BGR, 4, 4);
  HostFrame wrong(VideoFormat::RGB, 4, 4), ok(VideoFormat::BGR, 4, 4);
  EXPECT_THROW(op->process(wrong.view, ok.view, NoiseParams{}, false), cudadiff::Error);
}

// Random sequences at odd sizes, every format and mode, against the rule
// restated per byte.
TEST(NoiseVisCpu, RandomSequencesMatchTheRule) {
  const int sizes[][2] = {{1, 1}, {19, 3}, {40, 4}};
  std::mt19937 &gen = testing_util::rng();
  for (VideoFormat fmt : testing_util::packed_rgb_formats()) {
    const cudadiff::FormatInfo &fi = cudadiff::format_info(fmt);
    const int ps = fi.pixel_stride[0];
    for (const auto &sz : sizes) {
      const int w = sz[0], h = sz[1];
      HostFrame f1(fmt, w, h, 3), f2(fmt, w, h, 3);
      testing_util::fill_random(f1);
      f2 = f1;
      // Small noise on most bytes, so the threshold matters.
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w * ps; ++x) {
          const int v = f2.at(0, x, y) + static_cast<int>(gen() % 61) - 30;
          f2.at(0, x, y) = static_cast<uint8_t>(std::min(255, std::max(0, v)));
        }
      auto op = cudadiff::NoiseVis::create(*cpu, fmt, fmt, w, h);
      HostFrame out(fmt, w, h, 1, 0xAB);
      NoiseParams p;
      p.threshold = 17;
      op->process(f1.view, out.view, p, true);
      op->process(f2.view, out.view, p, true);
      op->take_counts();
      uint64_t marked = 0, changed = 0;
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
          int n = 0;
          for (int k = 0; k < ps; ++k)
            n += std::abs(f1.at(0, x * ps + k, y) - f2.at(0, x * ps + k, y)) > 17;
          changed += n;
          marked += n > 0;
          EXPECT_TRUE(same(get_rgb(out, x, y), n > 0 ? Rgb{255, 0, 0} : Rgb{0, 0, 0}));
        }
      EXPECT_EQ(op->counts().marked_pixels, marked);
      EXPECT_EQ(op->counts().changed_bytes, changed);
      EXPECT_TRUE(out.padding_intact(0xAB));
    }
  }
}
