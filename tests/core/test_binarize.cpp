// Binarization reference (CPU) against hand-worked histograms, thresholds and
// outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "binarize_frames.h"
#include "cudadiff/binarize.h"
#include "frames.h"

using binarize_test::expected_value;
using binarize_test::gray_pattern;
using cudadiff::BinarizeParams;
using cudadiff::BinarizeResult;
using cudadiff::Histogram;
using cudadiff::ThresholdMethod;
using cudadiff::VideoFormat;
using testing_util::HostFrame;

namespace {

std::unique_ptr<cudadiff::Context> cpu = cudadiff::Context::cpu();

Histogram histogram_of(std::initializer_list<std::pair<int, uint32_t>> bins) {
  Histogram h;
  h.fill(0);
  for (const auto &b : bins) h[b.first] = b.second;
  return h;
}

BinarizeParams params_for(ThresholdMethod m) {
  BinarizeParams p;
  p.method = m;
  return p;
}

// A GRAY8 frame whose pixels follow `bins` (value, count) in row-major order.
HostFrame frame_with_histogram(const Histogram &h, int width,
                               VideoFormat fmt = VideoFormat::GRAY8) {
  std::vector<uint8_t> values;
  for (int v = 0; v < 256; ++v) values.insert(values.end(), h[v], static_cast<uint8_t>(v));
  const int height = static_cast<int>((values.size() + width - 1) / width);
  EXPECT_EQ(values.size() % width, 0u) << "histogram must fill whole rows";
  // Shuffle deterministically so that runs and order do not matter.
  std::mt19937 gen(12345);
  std::shuffle(values.begin(), values.end(), gen);
  return gray_pattern(
      fmt, width, height, [&](int x, int y) { return values[static_cast<size_t>(y) * width + x]; },
      5);
}

// Runs the CPU op and checks the histogram and each output pixel.
BinarizeResult run_and_check(const HostFrame &in, VideoFormat out_fmt, const BinarizeParams &p,
                             const Histogram *want_hist = nullptr) {
  HostFrame out(out_fmt, in.view.width, in.view.height, 3);
  auto op =
      cudadiff::Binarize::create(*cpu, in.view.format, out_fmt, in.view.width, in.view.height);
  op->process(in.view, out.view, p);
  const BinarizeResult r = op->result();
  if (want_hist) {
    EXPECT_EQ(op->histogram(), *want_hist);
  }
  const cudadiff::FormatInfo &fi = cudadiff::format_info(in.view.format);
  for (int y = 0; y < in.view.height; ++y)
    for (int x = 0; x < in.view.width; ++x) {
      const uint8_t *px = in.view.row(0, y) + x * fi.pixel_stride[0];
      const int gray = cudadiff::is_packed_rgb(in.view.format)
                           ? cudadiff::gray_value(p.gray, px[fi.r], px[fi.g], px[fi.b])
                           : px[0];
      const uint8_t want = expected_value(gray, r.threshold, p.invert);
      if (out_fmt == VideoFormat::GRAY8 || !cudadiff::is_packed_rgb(out_fmt)) {
        EXPECT_EQ(out.view.row(0, y)[x], want) << "at " << x << "," << y;
      } else {
        const uint8_t *o = out.view.row(0, y) + x * fi.pixel_stride[0];
        for (int k = 0; k < fi.pixel_stride[0]; ++k) {
          const bool colour = k == fi.r || k == fi.g || k == fi.b;
          EXPECT_EQ(o[k], colour ? want : px[k]) << "byte " << k << " at " << x << "," << y;
        }
      }
    }
  for (int pl = 1; pl < out.view.n_planes(); ++pl)
    for (int y = 0; y < out.view.plane_height(pl); ++y)
      for (size_t x = 0; x < out.view.row_bytes(pl); ++x)
        EXPECT_EQ(out.view.row(pl, y)[x], 128) << "chroma plane " << pl;
  EXPECT_TRUE(out.padding_intact());
  return r;
}

// Otsu's between-class variance in long double, the textbook formula.
long double sigma_b(const Histogram &h, int t) {
  long double n = 0, s = 0, n0 = 0, s0 = 0;
  for (int v = 0; v < 256; ++v) {
    n += h[v];
    s += static_cast<long double>(v) * h[v];
    if (v <= t) {
      n0 += h[v];
      s0 += static_cast<long double>(v) * h[v];
    }
  }
  const long double n1 = n - n0;
  if (n0 == 0 || n1 == 0) return 0;
  const long double w0 = n0 / n, w1 = n1 / n, mu0 = s0 / n0, mu1 = (s - s0) / n1;
  return w0 * w1 * (mu0 - mu1) * (mu0 - mu1);
}

}  // namespace

// Three levels, worked by hand (N = 400):
//   40 x 200, 100 x 100, 200 x 100
//   split {40} | {100, 200}:  w0 = w1 = 1/2, mu0 = 40, mu1 = 150:
//       sigma = 1/4 * 110^2 = 3025
//   split {40, 100} | {200}:  w0 = 3/4, w1 = 1/4, mu0 = 18000/300 = 60, mu1 = 200:
//       sigma = 3/16 * 140^2 = 3675   <- larger
// The second split is t = 100..199; the lowest is 100.
TEST(BinarizeCpu, OtsuThreeLevelsWorkedByHand) {
  const Histogram h = histogram_of({{40, 200}, {100, 100}, {200, 100}});
  EXPECT_EQ(cudadiff::otsu_threshold(h), 100);
  EXPECT_NEAR(static_cast<double>(sigma_b(h, 40)), 3025.0, 1e-9);
  EXPECT_NEAR(static_cast<double>(sigma_b(h, 100)), 3675.0, 1e-9);
  for (VideoFormat fmt : binarize_test::input_formats()) {
    const HostFrame in = frame_with_histogram(h, 20, fmt);
    const BinarizeResult r =
        run_and_check(in, VideoFormat::GRAY8, params_for(ThresholdMethod::Otsu), &h);
    EXPECT_EQ(r.threshold, 100) << cudadiff::format_name(fmt);
    EXPECT_EQ(r.peak1, 40);
    EXPECT_EQ(r.peak1_count, 200u);
    EXPECT_EQ(r.peak2, 100);  // 100 and 200 tie at 100 pixels: the lower level
    EXPECT_EQ(r.peak2_count, 100u);
  }
}

// Bimodal: 30/31/32 (10, 20, 10) and 180/181/182 (5, 10, 5). Every t from 32
// to 179 makes the same split, so they tie; the lowest, 32, is the threshold.
// By hand: w0 = 40/60, mu0 = 31, w1 = 20/60, mu1 = 181:
//   sigma = (2/3)(1/3) 150^2 = 5000.
TEST(BinarizeCpu, OtsuBimodalTiesGoToLowestThreshold) {
  const Histogram h = histogram_of({{30, 10}, {31, 20}, {32, 10}, {180, 5}, {181, 10}, {182, 5}});
  EXPECT_EQ(cudadiff::otsu_threshold(h), 32);
  EXPECT_NEAR(static_cast<double>(sigma_b(h, 32)), 5000.0, 1e-9);
  const HostFrame in = frame_with_histogram(h, 12);
  EXPECT_EQ(run_and_check(in, VideoFormat::GRAY8, params_for(ThresholdMethod::Otsu), &h).threshold,
            32);
  // two-peaks: the highest bin is 31 (20); 30, 32 and 181 tie for second
  // (10 each) and the lowest level, 30, wins: (31 + 30) / 2 = 30, clamped to
  // 50. The report's rule takes the two highest bins, which on a spread-out
  // mode are neighbours, not the two modes.
  BinarizeResult r =
      run_and_check(in, VideoFormat::GRAY8, params_for(ThresholdMethod::TwoPeaks), &h);
  EXPECT_EQ(r.peak1, 31);
  EXPECT_EQ(r.peak2, 30);
  EXPECT_EQ(r.threshold, 50);
}

// Every level equally often: sigma(t) = w0 w1 128^2 (the class means are
// always 128 apart), largest at w0 = 1/2, i.e. t = 127. The peaks all tie:
// 0 and 1, so two-peaks gives (0 + 1) / 2 = 0, clamped to 50.
TEST(BinarizeCpu, UniformHistogram) {
  const HostFrame in = gray_pattern(
      VideoFormat::GRAY8, 256, 4, [](int x, int) { return x; }, 7);
  Histogram h;
  h.fill(4);
  BinarizeResult r = run_and_check(in, VideoFormat::GRAY8, params_for(ThresholdMethod::Otsu), &h);
  EXPECT_EQ(r.threshold, 127);
  EXPECT_EQ(r.peak1, 0);
  EXPECT_EQ(r.peak2, 1);
  EXPECT_EQ(r.peak1_count, 4u);
  EXPECT_EQ(r.peak2_count, 4u);
  r = run_and_check(in, VideoFormat::GRAY8, params_for(ThresholdMethod::TwoPeaks), &h);
  EXPECT_EQ(r.threshold, 50);
  BinarizeParams p = params_for(ThresholdMethod::TwoPeaks);
  p.min_threshold = 0;
  EXPECT_EQ(run_and_check(in, VideoFormat::GRAY8, p).threshold, 0);
}

// One gray level: every split has an empty class, all scores are 0, Otsu
// gives 0. Both peaks are that level.
TEST(BinarizeCpu, SingleValue) {
  for (int v : {0, 77, 255}) {
    for (VideoFormat fmt : {VideoFormat::BGR, VideoFormat::GRAY8, VideoFormat::NV12}) {
      const HostFrame in = gray_pattern(fmt, 9, 5, [&](int, int) { return v; });
      const Histogram h = histogram_of({{v, 45}});
      BinarizeResult r =
          run_and_check(in, VideoFormat::GRAY8, params_for(ThresholdMethod::Otsu), &h);
      EXPECT_EQ(r.threshold, 0);
      EXPECT_EQ(r.peak1, v);
      EXPECT_EQ(r.peak2, v);
      EXPECT_EQ(r.peak1_count, 45u);
      EXPECT_EQ(r.peak2_count, 45u);
      BinarizeParams p = params_for(ThresholdMethod::TwoPeaks);
      p.min_threshold = 0;
      p.max_threshold = 255;
      EXPECT_EQ(run_and_check(in, VideoFormat::GRAY8, p, &h).threshold, v);
    }
  }
}

// Peaks at 100 (50 pixels) and 101 (40): threshold (100 + 101) / 2 = 100, so
// the two neighbouring levels fall on different sides.
TEST(BinarizeCpu, TwoAdjacentPeaks) {
  const Histogram h = histogram_of({{10, 5}, {100, 50}, {101, 40}, {250, 5}});
  const HostFrame in = frame_with_histogram(h, 10, VideoFormat::RGBA);
  const BinarizeResult r =
      run_and_check(in, VideoFormat::RGBA, params_for(ThresholdMethod::TwoPeaks), &h);
  EXPECT_EQ(r.threshold, 100);
  EXPECT_EQ(r.peak1, 100);
  EXPECT_EQ(r.peak2, 101);
  EXPECT_EQ(r.peak1_count, 50u);
  EXPECT_EQ(r.peak2_count, 40u);
  HostFrame out(VideoFormat::GRAY8, 10, 10);
  auto op = cudadiff::Binarize::create(*cpu, VideoFormat::RGBA, VideoFormat::GRAY8, 10, 10);
  op->process(in.view, out.view, params_for(ThresholdMethod::TwoPeaks));
  int white = 0;
  for (int y = 0; y < 10; ++y)
    for (int x = 0; x < 10; ++x) white += out.view.row(0, y)[x] == 255;
  EXPECT_EQ(white, 45);  // the 101s and the 250s
}

TEST(BinarizeCpu, TwoPeaksClamping) {
  using cudadiff::HistogramPeaks;
  const auto peaks = [](int a, int b) {
    HistogramPeaks p;
    p.first = a;
    p.second = b;
    return p;
  };
  EXPECT_EQ(cudadiff::two_peaks_threshold(peaks(10, 20), 50, 200), 50);     // 15 -> 50
  EXPECT_EQ(cudadiff::two_peaks_threshold(peaks(240, 250), 50, 200), 200);  // 245 -> 200
  EXPECT_EQ(cudadiff::two_peaks_threshold(peaks(60, 181), 50, 200), 120);   // 241 / 2
  EXPECT_EQ(cudadiff::two_peaks_threshold(peaks(181, 60), 50, 200), 120);   // order-free
  EXPECT_EQ(cudadiff::two_peaks_threshold(peaks(60, 181), 130, 140), 130);
  EXPECT_EQ(cudadiff::two_peaks_threshold(peaks(60, 181), 0, 255), 120);
  EXPECT_EQ(cudadiff::two_peaks_threshold(peaks(60, 181), 150, 100), 100);  // min > max: max wins
  EXPECT_EQ(cudadiff::two_peaks_threshold(peaks(0, 0), 0, 255), 0);

  // Through frames: dark peaks (10, 20) and bright peaks (240, 250).
  for (const auto &c : {std::make_pair(10, 20), std::make_pair(240, 250)}) {
    const Histogram h = histogram_of({{c.first, 30}, {c.second, 20}, {128, 10}});
    const HostFrame in = frame_with_histogram(h, 15, VideoFormat::BGR);
    const BinarizeResult r =
        run_and_check(in, VideoFormat::BGR, params_for(ThresholdMethod::TwoPeaks), &h);
    EXPECT_EQ(r.threshold, c.first < 128 ? 50 : 200);
    BinarizeParams p = params_for(ThresholdMethod::TwoPeaks);
    p.min_threshold = 0;
    p.max_threshold = 255;
    EXPECT_EQ(run_and_check(in, VideoFormat::GRAY8, p).threshold, (c.first + c.second) / 2);
  }
}

TEST(BinarizeCpu, PeaksTieBreaking) {
  // Equal counts: the lower level is the first peak.
  cudadiff::HistogramPeaks p = cudadiff::histogram_peaks(histogram_of({{60, 9}, {30, 9}}));
  EXPECT_EQ(p.first, 30);
  EXPECT_EQ(p.second, 60);
  // Second place tied between 200 and 90: 90.
  p = cudadiff::histogram_peaks(histogram_of({{200, 4}, {90, 4}, {128, 7}}));
  EXPECT_EQ(p.first, 128);
  EXPECT_EQ(p.second, 90);
  EXPECT_EQ(p.second_count, 4u);
  // Empty histogram (never a real frame): level 0 twice.
  p = cudadiff::histogram_peaks(histogram_of({}));
  EXPECT_EQ(p.first, 0);
  EXPECT_EQ(p.second, 0);
}

TEST(BinarizeCpu, FixedAndInvert) {
  const HostFrame in = gray_pattern(
      VideoFormat::BGRx, 33, 3, [](int x, int y) { return (x * 8 + y) & 255; }, 4);
  BinarizeParams p = params_for(ThresholdMethod::Fixed);
  for (int t : {0, 1, 127, 128, 254, 255}) {
    p.threshold = t;
    for (bool invert : {false, true}) {
      p.invert = invert;
      const BinarizeResult r = run_and_check(in, VideoFormat::BGRx, p);
      EXPECT_EQ(r.threshold, t);
      EXPECT_EQ(r.peak1, -1);  // no histogram for fixed
      run_and_check(in, VideoFormat::GRAY8, p);
    }
  }
  // Fixed with peaks asked for: the histogram is computed.
  p.threshold = 100;
  p.want_peaks = true;
  auto op = cudadiff::Binarize::create(*cpu, VideoFormat::BGRx, VideoFormat::GRAY8, 33, 3);
  HostFrame out(VideoFormat::GRAY8, 33, 3);
  op->process(in.view, out.view, p);
  EXPECT_EQ(op->result().threshold, 100);
  EXPECT_GE(op->result().peak1, 0);
  uint32_t total = 0;
  for (uint32_t c : op->histogram()) total += c;
  EXPECT_EQ(total, 99u);
  p.want_peaks = false;
  op->process(in.view, out.view, p);
  EXPECT_EQ(op->result().peak1, -1);
  for (uint32_t c : op->histogram()) EXPECT_EQ(c, 0u);
}

// Every input format, both output modes, odd sizes from 1x1 and padded
// strides: the outputs follow the rule pixel by pixel, alpha / x bytes are
// kept, chroma is 128, padding is untouched; the histogram counts the gray
// values computed with the grayscale rule.
TEST(BinarizeCpu, FormatsSizesStridesMethods) {
  const int sizes[][2] = {{1, 1}, {2, 1}, {1, 3}, {3, 2}, {7, 5}, {17, 3}, {33, 9}};
  const cudadiff::GrayMethod grays[] = {cudadiff::GrayMethod::Average, cudadiff::GrayMethod::Bt601,
                                        cudadiff::GrayMethod::Bt709};
  for (VideoFormat fmt : binarize_test::input_formats()) {
    for (const auto &sz : sizes) {
      for (size_t pad : {size_t(0), size_t(11)}) {
        HostFrame in(fmt, sz[0], sz[1], pad);
        testing_util::fill_random(in);
        for (int m = 0; m < 3; ++m) {
          BinarizeParams p = params_for(static_cast<ThresholdMethod>(m));
          p.gray = grays[(m + sz[0]) % 3];
          p.invert = (sz[1] & 1) != 0;
          // The histogram, counted here by the rule.
          Histogram want;
          want.fill(0);
          const cudadiff::FormatInfo &fi = cudadiff::format_info(fmt);
          for (int y = 0; y < sz[1]; ++y)
            for (int x = 0; x < sz[0]; ++x) {
              const uint8_t *px = in.view.row(0, y) + x * fi.pixel_stride[0];
              ++want[cudadiff::is_packed_rgb(fmt)
                         ? cudadiff::gray_value(p.gray, px[fi.r], px[fi.g], px[fi.b])
                         : px[0]];
            }
          const Histogram *check = p.method == ThresholdMethod::Fixed ? nullptr : &want;
          const BinarizeResult r = run_and_check(in, VideoFormat::GRAY8, p, check);
          run_and_check(in, fmt, p, check);
          EXPECT_EQ(r.threshold, cudadiff::threshold_from_histogram(want, p).threshold);
        }
        EXPECT_TRUE(in.padding_intact());
      }
    }
  }
}

// The exact integer Otsu agrees with the floating-point formula wherever the
// latter can tell the candidates apart.
TEST(BinarizeCpu, OtsuMatchesFloatingPointOnRandomHistograms) {
  std::mt19937 &gen = testing_util::rng();
  for (int trial = 0; trial < 300; ++trial) {
    Histogram h;
    h.fill(0);
    const int kind = trial % 3;
    std::uniform_int_distribution<uint32_t> big(0, kind == 0 ? 1000u : 16000000u);
    for (int v = 0; v < 256; ++v) {
      if (kind == 2 && (gen() % 4) != 0) continue;  // sparse
      h[v] = big(gen);
    }
    const int t = cudadiff::otsu_threshold(h);
    long double best = 0;
    for (int c = 0; c < 256; ++c) best = std::max(best, sigma_b(h, c));
    const long double got = sigma_b(h, t);
    ASSERT_GE(got, best * (1 - 1e-15L)) << "trial " << trial << " t " << t;
    for (int c = 0; c < t; ++c)  // nothing lower is clearly as good
      ASSERT_LT(sigma_b(h, c), got * (1 + 1e-15L) + 1e-30L) << "trial " << trial << " c " << c;
  }
}

// Near the limit of 2^32 - 1 pixels the 256-bit comparison has no overflow:
// equal scores compare equal, and one pixel moved changes the order.
TEST(BinarizeCpu, OtsuScoreExactAtExtremes) {
  namespace otsu = cudadiff::otsu;
  const uint32_t k = 0x7fffffffu;  // two levels of 2^31 - 1 pixels each
  const uint32_t total = 2 * k;
  const uint64_t total_sum = uint64_t(255) * k;
  // Splits of {0 x k, 255 x k}: every t in [0, 254] has n0 = k, S0 = 0.
  const otsu::Score a = otsu::score(total, total_sum, k, 0);
  const otsu::Score b = otsu::score(total, total_sum, k, 0);
  EXPECT_FALSE(otsu::greater(a, b));
  EXPECT_FALSE(otsu::greater(b, a));
  Histogram h = histogram_of({{0, k}, {255, k}});
  EXPECT_EQ(cudadiff::otsu_threshold(h), 0);
  // Two candidates whose variances differ by one part in 10^9 at the largest
  // magnitudes: balanced halves beat halves off by one pixel.
  const otsu::Score balanced = otsu::score(total, total_sum, k, 0);
  const otsu::Score off = otsu::score(total, total_sum, k - 1, 0);  // one dark pixel moved up
  EXPECT_TRUE(otsu::greater(balanced, off));
  EXPECT_FALSE(otsu::greater(off, balanced));
  // Empty classes score 0; anything with both classes and distinct means beats it.
  const otsu::Score empty = otsu::score(total, total_sum, 0, 0);
  const otsu::Score full = otsu::score(total, total_sum, total, total_sum);
  EXPECT_FALSE(otsu::greater(empty, full));
  EXPECT_FALSE(otsu::greater(full, empty));
  EXPECT_TRUE(otsu::greater(off, empty));
  EXPECT_FALSE(otsu::greater(empty, off));
  // The largest frame the caps allow, one level each side.
  const uint32_t n = 32767u * 32767u;
  h = histogram_of({{3, n / 3}, {250, n - n / 3}});
  EXPECT_EQ(cudadiff::otsu_threshold(h), 3);
}

// The CUDA backend's parallel Otsu (kernels/binarize.cu, block_otsu) run on
// the host step by step: per-t candidates from the double approximation, a
// butterfly reduction in each warp of 32, then the 8 warp winners in order,
// all with otsu::better. It must give the sequential exact answer.
int otsu_as_the_kernel_does(const Histogram &h) {
  namespace otsu = cudadiff::otsu;
  uint32_t total = 0;
  uint64_t total_sum = 0;
  for (int v = 0; v < 256; ++v) {
    total += h[v];
    total_sum += static_cast<uint64_t>(v) * h[v];
  }
  otsu::Candidate c[256];
  double approx[256], largest = 0;
  uint32_t n0 = 0;
  uint64_t sum0 = 0;
  for (int t = 0; t < 256; ++t) {
    n0 += h[t];
    sum0 += static_cast<uint64_t>(t) * h[t];
    c[t] = {t, false, n0, sum0};
    approx[t] = otsu::approx_score(total, total_sum, n0, sum0);
    largest = std::max(largest, approx[t]);
  }
  for (int t = 0; t < 256; ++t)
    c[t].candidate = approx[t] >= largest * (1.0 - otsu::kCandidateTolerance);
  for (int offset = 16; offset > 0; offset >>= 1) {
    otsu::Candidate next[256];
    for (int t = 0; t < 256; ++t) {
      const otsu::Candidate &other = c[(t & ~31) | ((t & 31) ^ offset)];
      next[t] = otsu::better(other, c[t], total, total_sum) ? other : c[t];
    }
    std::copy(next, next + 256, c);
  }
  otsu::Candidate winner = c[0];
  for (int warp = 1; warp < 8; ++warp)
    if (otsu::better(c[32 * warp], winner, total, total_sum)) winner = c[32 * warp];
  return winner.t;
}

TEST(BinarizeCpu, ParallelOtsuEqualsSequential) {
  std::mt19937 &gen = testing_util::rng();
  std::vector<Histogram> cases;
  // Hand-made: exact ties between different splits ({0, 127, 254} is
  // symmetric: the two splits score the same), one level, two levels, uniform.
  const uint32_t k = 0x55555555u;
  cases.push_back(histogram_of({{0, 7}, {127, 7}, {254, 7}}));
  cases.push_back(histogram_of({{0, k}, {127, k}, {254, k}}));
  cases.push_back(histogram_of({{0, k}, {127, k}, {254, k - 1}}));
  cases.push_back(histogram_of({{9, 100}}));
  cases.push_back(histogram_of({{40, 200}, {100, 100}, {200, 100}}));
  Histogram flat;
  flat.fill(16000000u);
  cases.push_back(flat);
  for (int trial = 0; trial < 500; ++trial) {
    Histogram h;
    h.fill(0);
    const int kind = trial % 4;
    for (int v = 0; v < 256; ++v) {
      if (kind >= 2 && gen() % 8 != 0) continue;  // sparse
      h[v] = kind % 2 ? gen() % 16000000u : gen() % 5;
    }
    if (kind == 3) {  // mirror: symmetric histograms tie between splits
      for (int v = 0; v < 128; ++v) h[255 - v] = h[v];
    }
    cases.push_back(h);
  }
  for (size_t i = 0; i < cases.size(); ++i)
    ASSERT_EQ(otsu_as_the_kernel_does(cases[i]), cudadiff::otsu_threshold(cases[i]))
        << "case " << i;
}

// The double approximation is within 1e-14 of the textbook formula (x N^2).
TEST(BinarizeCpu, OtsuApproximationIsClose) {
  std::mt19937 &gen = testing_util::rng();
  for (int trial = 0; trial < 100; ++trial) {
    Histogram h;
    for (auto &c : h) c = gen() % (trial % 2 ? 16000000u : 50u);
    uint32_t total = 0, n0 = 0;
    uint64_t total_sum = 0, sum0 = 0;
    for (int v = 0; v < 256; ++v) {
      total += h[v];
      total_sum += static_cast<uint64_t>(v) * h[v];
    }
    for (int t = 0; t < 256; ++t) {
      n0 += h[t];
      sum0 += static_cast<uint64_t>(t) * h[t];
      const long double want = sigma_b(h, t) * static_cast<long double>(total) * total;
      const double got = cudadiff::otsu::approx_score(total, total_sum, n0, sum0);
      ASSERT_LE(std::fabs(static_cast<long double>(got) - want), 1e-14L * want + 1e-30L)
          << "trial " << trial << " t " << t;
    }
  }
}

TEST(BinarizeCpu, SameObjectManyFrames) {
  auto op = cudadiff::Binarize::create(*cpu, VideoFormat::GRAY8, VideoFormat::GRAY8, 20, 20);
  for (int i = 0; i < 4; ++i) {
    const Histogram h = histogram_of({{10 + i, 300}, {150 + 20 * i, 100}});
    const HostFrame in = frame_with_histogram(h, 20);
    HostFrame out(VideoFormat::GRAY8, 20, 20);
    op->process(in.view, out.view, params_for(ThresholdMethod::Otsu));
    EXPECT_EQ(op->histogram(), h);
    EXPECT_EQ(op->result().threshold, 10 + i);
  }
}

TEST(BinarizeCpu, RejectsBadInput) {
  EXPECT_TRUE(cudadiff::Binarize::supports(VideoFormat::BGR, VideoFormat::GRAY8));
  EXPECT_TRUE(cudadiff::Binarize::supports(VideoFormat::NV12, VideoFormat::NV12));
  EXPECT_TRUE(cudadiff::Binarize::supports(VideoFormat::I420, VideoFormat::GRAY8));
  EXPECT_FALSE(cudadiff::Binarize::supports(VideoFormat::BGR, VideoFormat::RGB));
  EXPECT_FALSE(cudadiff::Binarize::supports(VideoFormat::GRAY8, VideoFormat::BGR));
  EXPECT_FALSE(cudadiff::Binarize::supports(VideoFormat::YUY2, VideoFormat::GRAY8));
  EXPECT_FALSE(cudadiff::Binarize::supports(VideoFormat::I420, VideoFormat::NV12));
  EXPECT_THROW(cudadiff::Binarize::create(*cpu, VideoFormat::YV12, VideoFormat::GRAY8, 4, 4),
               cudadiff::Error);
  EXPECT_THROW(cudadiff::Binarize::create(*cpu, VideoFormat::BGR, VideoFormat::GRAY8, 0, 4),
               cudadiff::Error);
  EXPECT_THROW(cudadiff::Binarize::create(*cpu, VideoFormat::BGR, VideoFormat::GRAY8, 65536, 65536),
               cudadiff::Error);
  auto op = cudadiff::Binarize::create(*cpu, VideoFormat::BGR, VideoFormat::GRAY8, 4, 4);
  HostFrame in(VideoFormat::BGR, 4, 4), out(VideoFormat::GRAY8, 4, 4),
      wide(VideoFormat::GRAY8, 5, 4);
  EXPECT_THROW(op->process(in.view, wide.view, BinarizeParams()), cudadiff::Error);
  HostFrame rgb(VideoFormat::RGB, 4, 4);
  EXPECT_THROW(op->process(rgb.view, out.view, BinarizeParams()), cudadiff::Error);
  BinarizeParams bad;
  bad.threshold = 256;
  EXPECT_THROW(op->process(in.view, out.view, bad), cudadiff::Error);
  bad = BinarizeParams();
  bad.min_threshold = -1;
  EXPECT_THROW(op->process(in.view, out.view, bad), cudadiff::Error);
  cudadiff::FrameView short_stride = in.view;
  short_stride.stride[0] = 11;
  EXPECT_THROW(op->process(short_stride, out.view, BinarizeParams()), cudadiff::Error);
}
