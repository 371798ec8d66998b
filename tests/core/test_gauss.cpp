// Noise filters, the CPU reference: hand-computed values, a direct 2D
// restatement of the definitions (no separable passes), borders, strides,
// formats; and the generated median networks, exhaustively on 0-1 inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../../cuda/kernels/median_networks.h"
#include "cudadiff/gauss.h"
#include "frames.h"

using cudadiff::FrameView;
using cudadiff::NoiseFilter;
using cudadiff::NoiseFilterMethod;
using cudadiff::NoiseFilterSettings;
using cudadiff::VideoFormat;
using testing_util::HostFrame;

namespace {

std::unique_ptr<cudadiff::Context> cpu = cudadiff::Context::cpu();

NoiseFilterSettings settings(NoiseFilterMethod m, int k, double sigma = 0) {
  NoiseFilterSettings s;
  s.method = m;
  s.kernel_size = k;
  s.sigma = sigma;
  return s;
}

HostFrame run(const HostFrame &in, const NoiseFilterSettings &s, size_t pad = 0) {
  HostFrame out(in.view.format, in.view.width, in.view.height, pad);
  NoiseFilter::create(*cpu, in.view.format, in.view.width, in.view.height)
      ->process(in.view, out.view, s);
  return out;
}

const std::vector<VideoFormat> &all_formats() {
  static const std::vector<VideoFormat> f = [] {
    std::vector<VideoFormat> v = testing_util::packed_rgb_formats();
    for (VideoFormat y :
         {VideoFormat::GRAY8, VideoFormat::I420, VideoFormat::YV12, VideoFormat::NV12,
          VideoFormat::NV21, VideoFormat::Y444, VideoFormat::Y42B})
      v.push_back(y);
    return v;
  }();
  return f;
}

// The definitions restated in two dimensions, straight from the window.
// Gaussian: the real-valued 2D convolution with the real weights (the
// reference must be within 1 of it); box: the exact rounded mean; median: by
// sorting.
int direct(const FrameView &in, int plane, int x, int y, int channel,
           const NoiseFilterSettings &s) {
  const int ps = cudadiff::noise_filter_plane_layout(in.format, plane).pixel_stride;
  const int w = in.plane_width(plane), h = in.plane_height(plane);
  const int k = s.kernel_size, r = k / 2;
  std::vector<int> values;
  for (int dy = -r; dy <= r; ++dy)
    for (int dx = -r; dx <= r; ++dx) {
      const int yy = std::clamp(y + dy, 0, h - 1), xx = std::clamp(x + dx, 0, w - 1);
      values.push_back(in.row(plane, yy)[xx * ps + channel]);
    }
  if (s.method == NoiseFilterMethod::Median) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
  }
  if (s.method == NoiseFilterMethod::Box) {
    int sum = 0;
    for (int v : values) sum += v;
    const int n = k * k;
    return (sum + n / 2) / n;
  }
  const std::vector<uint32_t> w1 = cudadiff::gaussian_weights(k, s.sigma);
  double sum = 0;
  for (int dy = 0; dy < k; ++dy)
    for (int dx = 0; dx < k; ++dx)
      sum += double(w1[dy]) * w1[dx] / 65536.0 / 65536.0 * values[dy * k + dx];
  return static_cast<int>(std::lround(sum));
}

// Compares every filtered byte with direct() (tolerance 1 for the Gaussian's
// real-valued restatement, 0 otherwise) and every alpha/x byte with the input.
void expect_matches_definition(const HostFrame &in, const HostFrame &out,
                               const NoiseFilterSettings &s) {
  const int tol = s.method == NoiseFilterMethod::Gaussian ? 1 : 0;
  for (int p = 0; p < in.view.n_planes(); ++p) {
    const cudadiff::PlaneLayout l = cudadiff::noise_filter_plane_layout(in.view.format, p);
    for (int y = 0; y < in.view.plane_height(p); ++y)
      for (int x = 0; x < in.view.plane_width(p); ++x)
        for (int c = 0; c < l.pixel_stride; ++c) {
          const int got = out.view.row(p, y)[x * l.pixel_stride + c];
          const int want = (l.filtered_mask >> c & 1u) ? direct(in.view, p, x, y, c, s)
                                                       : in.view.row(p, y)[x * l.pixel_stride + c];
          ASSERT_LE(std::abs(got - want), tol)
              << cudadiff::format_name(in.view.format) << " " << in.view.width << "x"
              << in.view.height << " " << cudadiff::noise_filter_method_name(s.method) << " k "
              << s.kernel_size << " plane " << p << " at " << x << "," << y << " byte " << c;
        }
  }
}

}  // namespace

TEST(GaussWeights, OpenCvSmallKernelsAndSigma) {
  EXPECT_EQ(cudadiff::gaussian_weights(3, 0), (std::vector<uint32_t>{16384, 32768, 16384}));
  EXPECT_EQ(cudadiff::gaussian_weights(5, 0),
            (std::vector<uint32_t>{4096, 16384, 24576, 16384, 4096}));
  EXPECT_EQ(cudadiff::gaussian_weights(7, 0),
            (std::vector<uint32_t>{2048, 7168, 14336, 18432, 14336, 7168, 2048}));
  EXPECT_DOUBLE_EQ(cudadiff::gaussian_sigma(9, 0), 1.7);
  EXPECT_DOUBLE_EQ(cudadiff::gaussian_sigma(31, 0), 5.0);
  EXPECT_DOUBLE_EQ(cudadiff::gaussian_sigma(5, 2.5), 2.5);
  // sigma 1, K 3: exp(-1/2) = 0.60653; weights 0.27407, 0.45186, 0.27407.
  EXPECT_EQ(cudadiff::gaussian_weights(3, 1.0), (std::vector<uint32_t>{17961, 29614, 17961}));
  for (int k = 3; k <= 31; k += 2)
    for (double sigma : {0.0, 0.3, 1.0, 2.0, 5.0, 100.0}) {
      const std::vector<uint32_t> w = cudadiff::gaussian_weights(k, sigma);
      ASSERT_EQ(int(w.size()), k);
      uint64_t sum = 0;
      for (int i = 0; i < k; ++i) {
        sum += w[i];
        EXPECT_EQ(w[i], w[k - 1 - i]) << "symmetric";
        // Rises to the centre (which absorbs up to k/2 of rounding).
        if (i > 0 && i <= k / 2) {
          EXPECT_LE(w[i - 1], w[i] + (i == k / 2 ? k / 2 : 0)) << "k " << k << " sigma " << sigma;
        }
      }
      EXPECT_EQ(sum, 65536u) << "k " << k << " sigma " << sigma;
    }
}

TEST(GaussWeights, BoxDivisionIsExactForEverySum) {
  for (int k = 3; k <= cudadiff::kMaxConvKernel; k += 2) {
    const cudadiff::BoxDivisor d = cudadiff::box_divisor(k);
    const uint32_t n = uint32_t(k * k);
    for (uint32_t sum = 0; sum <= 255 * n; ++sum)
      ASSERT_EQ(cudadiff::box_mean(sum, d), (sum + n / 2) / n) << "k " << k << " sum " << sum;
  }
}

TEST(GaussCpu, ConstantImageUnchanged) {
  for (VideoFormat fmt : all_formats())
    for (NoiseFilterMethod m :
         {NoiseFilterMethod::Gaussian, NoiseFilterMethod::Box, NoiseFilterMethod::Median})
      for (int k : {3, 5, 7}) {
        for (uint8_t v : {uint8_t(0), uint8_t(1), uint8_t(128), uint8_t(255)}) {
          HostFrame in(fmt, 9, 7);
          testing_util::fill_value(in, v);
          HostFrame out = run(in, settings(m, k));
          EXPECT_EQ(testing_util::compare_frames(in.view, out.view), "")
              << cudadiff::format_name(fmt) << " " << cudadiff::noise_filter_method_name(m) << " k "
              << k << " value " << int(v);
        }
      }
}

// A single bright pixel: the output is the kernel, worked out by hand.
TEST(GaussCpu, ImpulseResponseIsTheKernel) {
  HostFrame in(VideoFormat::GRAY8, 7, 7);
  testing_util::fill_value(in, 0);
  in.at(0, 3, 3) = 255;
  // Gaussian 3x3, sigma 0: (1 2 1)/4 both ways, 255/16 = 15.94 -> 16, 31.9 -> 32, 63.75 -> 64.
  const int gauss3[3][3] = {{16, 32, 16}, {32, 64, 32}, {16, 32, 16}};
  HostFrame g = run(in, settings(NoiseFilterMethod::Gaussian, 3));
  for (int y = 0; y < 7; ++y)
    for (int x = 0; x < 7; ++x) {
      const bool inside = std::abs(x - 3) <= 1 && std::abs(y - 3) <= 1;
      EXPECT_EQ(g.at(0, x, y), inside ? gauss3[y - 2][x - 2] : 0) << x << "," << y;
    }
  // Box 3x3: 255 / 9 = 28.3 -> 28 inside the window, 0 elsewhere.
  HostFrame b = run(in, settings(NoiseFilterMethod::Box, 3));
  for (int y = 0; y < 7; ++y)
    for (int x = 0; x < 7; ++x) {
      const bool inside = std::abs(x - 3) <= 1 && std::abs(y - 3) <= 1;
      EXPECT_EQ(b.at(0, x, y), inside ? 28 : 0) << x << "," << y;
    }
  // Box 5x5: 255 / 25 = 10.2 -> 10.
  HostFrame b5 = run(in, settings(NoiseFilterMethod::Box, 5));
  EXPECT_EQ(b5.at(0, 1, 1), 10);
  EXPECT_EQ(b5.at(0, 0, 0), 0);
  // Median: one outlier disappears.
  for (int k : {3, 5, 7}) {
    HostFrame m = run(in, settings(NoiseFilterMethod::Median, k));
    EXPECT_EQ(testing_util::compare_frames(m.view, HostFrame(VideoFormat::GRAY8, 7, 7, 0, 0).view),
              "");
  }
  // Larger Gaussians: the response is 255 * w[y] * w[x] (within 1: two roundings).
  for (int k : {5, 7, 9, 15}) {
    HostFrame big(VideoFormat::GRAY8, 2 * k + 1, 2 * k + 1);
    testing_util::fill_value(big, 0);
    big.at(0, k, k) = 255;
    HostFrame out = run(big, settings(NoiseFilterMethod::Gaussian, k, k == 15 ? 3.0 : 0.0));
    const std::vector<uint32_t> w = cudadiff::gaussian_weights(k, k == 15 ? 3.0 : 0.0);
    for (int y = 0; y < 2 * k + 1; ++y)
      for (int x = 0; x < 2 * k + 1; ++x) {
        const int dy = y - k + k / 2, dx = x - k + k / 2;
        const double want = (dy >= 0 && dy < k && dx >= 0 && dx < k)
                                ? 255.0 * w[dy] / 65536.0 * w[dx] / 65536.0
                                : 0.0;
        EXPECT_LE(std::abs(out.at(0, x, y) - want), 1.0) << "k " << k << " at " << x << "," << y;
      }
  }
}

TEST(GaussCpu, MedianHandComputed) {
  // 3x3 of 1..9 in scrambled order: median 5 at the centre; the corner (0,0)
  // sees rows/columns replicated: {7,7,2, 7,7,2, 4,4,9} -> sorted 2 2 4 4 7 7 7 7 9 -> 7.
  const uint8_t v[3][3] = {{7, 2, 8}, {4, 9, 1}, {3, 5, 6}};
  HostFrame in(VideoFormat::GRAY8, 3, 3);
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 3; ++x) in.at(0, x, y) = v[y][x];
  HostFrame out = run(in, settings(NoiseFilterMethod::Median, 3));
  EXPECT_EQ(out.at(0, 1, 1), 5);
  EXPECT_EQ(out.at(0, 0, 0), 7);
  // Bottom-right corner: {9,1,1, 5,6,6, 5,6,6} -> 1 5 5 6 6 6 6 9 ... sorted 1 1 5 5 6 6 6 6 9
  // -> 6.
  EXPECT_EQ(out.at(0, 2, 2), 6);
}

// Replicated borders, not zero padding: a bright right edge keeps its level.
TEST(GaussCpu, BordersReplicateTheEdge) {
  HostFrame in(VideoFormat::GRAY8, 5, 1);
  const uint8_t row[5] = {0, 0, 0, 0, 90};
  for (int x = 0; x < 5; ++x) in.at(0, x, 0) = row[x];
  // Box 3 at x = 4: the window holds 0, 90, 90 (replicated) in each of its
  // three (replicated) rows: 540 / 9 = 60. Zero padding would give 20.
  EXPECT_EQ(run(in, settings(NoiseFilterMethod::Box, 3)).at(0, 4, 0), 60);
  EXPECT_EQ(run(in, settings(NoiseFilterMethod::Box, 3)).at(0, 3, 0), 30);
  EXPECT_EQ(run(in, settings(NoiseFilterMethod::Box, 3)).at(0, 0, 0), 0);
  // Gaussian 3 at x = 4: (0 * 1 + 90 * 2 + 90 * 1) / 4 = 67.5 -> 68 (rows identical).
  EXPECT_EQ(run(in, settings(NoiseFilterMethod::Gaussian, 3)).at(0, 4, 0), 68);
  // Median 3 at x = 4: {0, 90, 90} x 3 -> 90.
  EXPECT_EQ(run(in, settings(NoiseFilterMethod::Median, 3)).at(0, 4, 0), 90);
  // The same along columns: a dark top row.
  HostFrame col(VideoFormat::GRAY8, 1, 4);
  const uint8_t c[4] = {30, 120, 120, 120};
  for (int y = 0; y < 4; ++y) col.at(0, 0, y) = c[y];
  EXPECT_EQ(run(col, settings(NoiseFilterMethod::Box, 3)).at(0, 0, 0), 60);  // 30,30,120 x3
  EXPECT_EQ(run(col, settings(NoiseFilterMethod::Median, 3)).at(0, 0, 0), 30);
}

// Random frames of odd sizes, 1-pixel-wide and 1-pixel-high ones included,
// every format and method: the separable, fixed-point reference equals the
// direct definition.
TEST(GaussCpu, MatchesDirectDefinition) {
  const int sizes[][2] = {{1, 1}, {1, 9}, {9, 1}, {2, 3}, {7, 5}, {17, 11}};
  for (VideoFormat fmt : all_formats())
    for (const auto &sz : sizes) {
      HostFrame in(fmt, sz[0], sz[1], 3);
      testing_util::fill_random(in);
      for (int k : {3, 5, 7}) {
        for (NoiseFilterMethod m :
             {NoiseFilterMethod::Gaussian, NoiseFilterMethod::Box, NoiseFilterMethod::Median}) {
          const NoiseFilterSettings s = settings(m, k);
          HostFrame out = run(in, s, 5);
          expect_matches_definition(in, out, s);
          EXPECT_TRUE(out.padding_intact());
        }
      }
    }
  // Large kernels and explicit sigmas on one format.
  HostFrame in(VideoFormat::BGR, 23, 19);
  testing_util::fill_random(in);
  for (int k : {9, 15, 31}) {
    expect_matches_definition(in, run(in, settings(NoiseFilterMethod::Box, k)),
                              settings(NoiseFilterMethod::Box, k));
    for (double sigma : {0.0, 0.5, 2.0, 8.0})
      expect_matches_definition(in, run(in, settings(NoiseFilterMethod::Gaussian, k, sigma)),
                                settings(NoiseFilterMethod::Gaussian, k, sigma));
  }
}

// NV12's chroma: U filtered with U, V with V (a mix would give 100 here).
TEST(GaussCpu, Nv12ChromaPairsStaySeparate) {
  HostFrame in(VideoFormat::NV12, 8, 6);
  testing_util::fill_value(in, 50);
  for (int y = 0; y < in.view.plane_height(1); ++y)
    for (int x = 0; x < in.view.plane_width(1); ++x) {
      in.at(1, 2 * x, y) = 0;
      in.at(1, 2 * x + 1, y) = 200;
    }
  for (NoiseFilterMethod m :
       {NoiseFilterMethod::Gaussian, NoiseFilterMethod::Box, NoiseFilterMethod::Median}) {
    HostFrame out = run(in, settings(m, 5));
    EXPECT_EQ(testing_util::compare_frames(in.view, out.view), "")
        << cudadiff::noise_filter_method_name(m);
  }
}

TEST(GaussCpu, AlphaAndPaddingPassThrough) {
  for (VideoFormat fmt :
       {VideoFormat::BGRA, VideoFormat::ARGB, VideoFormat::xRGB, VideoFormat::RGBx}) {
    HostFrame in(fmt, 13, 6);
    testing_util::fill_random(in);
    const cudadiff::FormatInfo &fi = cudadiff::format_info(fmt);
    const int keep = 6 - fi.r - fi.g - fi.b;  // the byte that is none of R, G, B
    for (NoiseFilterMethod m :
         {NoiseFilterMethod::Gaussian, NoiseFilterMethod::Box, NoiseFilterMethod::Median}) {
      HostFrame out = run(in, settings(m, 3));
      for (int y = 0; y < 6; ++y)
        for (int x = 0; x < 13; ++x)
          ASSERT_EQ(out.at(0, 4 * x + keep, y), in.at(0, 4 * x + keep, y))
              << cudadiff::format_name(fmt) << " at " << x << "," << y;
    }
  }
}

TEST(GaussCpu, PaddedStridesGiveTheSameBytes) {
  HostFrame tight(VideoFormat::I420, 31, 17);
  testing_util::fill_random(tight);
  HostFrame padded(VideoFormat::I420, 31, 17, 29);
  cudadiff::copy_frame_host(tight.view, padded.view);
  for (NoiseFilterMethod m :
       {NoiseFilterMethod::Gaussian, NoiseFilterMethod::Box, NoiseFilterMethod::Median}) {
    HostFrame a = run(tight, settings(m, 5));
    HostFrame b = run(padded, settings(m, 5), 11);
    EXPECT_EQ(testing_util::compare_frames(a.view, b.view), "");
    EXPECT_TRUE(b.padding_intact());
  }
}

TEST(GaussCpu, RejectsBadInput) {
  EXPECT_FALSE(NoiseFilter::supports(VideoFormat::YUY2));
  EXPECT_THROW(NoiseFilter::create(*cpu, VideoFormat::UYVY, 4, 4), cudadiff::Error);
  EXPECT_THROW(cudadiff::validate(settings(NoiseFilterMethod::Gaussian, 4)), cudadiff::Error);
  EXPECT_THROW(cudadiff::validate(settings(NoiseFilterMethod::Box, 33)), cudadiff::Error);
  EXPECT_THROW(cudadiff::validate(settings(NoiseFilterMethod::Median, 9)), cudadiff::Error);
  EXPECT_THROW(cudadiff::validate(settings(NoiseFilterMethod::Box, 1)), cudadiff::Error);
  EXPECT_NO_THROW(cudadiff::validate(settings(NoiseFilterMethod::Box, 31)));
  auto op = NoiseFilter::create(*cpu, VideoFormat::BGR, 4, 4);
  HostFrame in(VideoFormat::BGR, 4, 4), other(VideoFormat::BGR, 5, 4);
  EXPECT_THROW(op->process(in.view, other.view, settings(NoiseFilterMethod::Box, 3)),
               cudadiff::Error);
  EXPECT_THROW(op->process(in.view, in.view, settings(NoiseFilterMethod::Median, 9)),
               cudadiff::Error);
}

// ------------------------------------------------------------ median networks

namespace {

// 64 0-1 inputs at a time: min = and, max = or.
struct BitLanes {
  using T = uint64_t;
  static T min(T a, T b) { return a & b; }
  static T max(T a, T b) { return a | b; }
};
struct ByteLanes {
  using T = int;
  static T min(T a, T b) { return std::min(a, b); }
  static T max(T a, T b) { return std::max(a, b); }
};

// 0-1 principle: a min/max network selects the median of every input iff it
// does so for every input of zeros and ones. For output o, all 2^(K*K)
// assignments of its window, 64 per evaluation (other rows held at 0).
template <int K>
void exhaustive_zero_one() {
  using Net = cudadiff::median_net::MedianNetwork<K>;
  constexpr int kInputs = K * K;
  for (int o = 0; o < Net::kRows; ++o) {
    uint64_t failures = 0;
    for (uint64_t base = 0; base < (uint64_t(1) << kInputs); base += 64) {
      // Input i of the window is bit i of the assignment base + lane.
      static const uint64_t kLanePattern[6] = {0xAAAAAAAAAAAAAAAAull, 0xCCCCCCCCCCCCCCCCull,
                                               0xF0F0F0F0F0F0F0F0ull, 0xFF00FF00FF00FF00ull,
                                               0xFFFF0000FFFF0000ull, 0xFFFFFFFF00000000ull};
      uint64_t in[Net::kInputRows][K] = {};
      for (int i = 0; i < kInputs; ++i)
        in[o + i / K][i % K] = i < 6 ? kLanePattern[i] : ((base >> i & 1) ? ~uint64_t(0) : 0);
      uint64_t want = 0;
      for (int lane = 0; lane < 64; ++lane)
        if (__builtin_popcountll(base + lane) > kInputs / 2) want |= uint64_t(1) << lane;
      uint64_t out[Net::kRows];
      Net::template run<BitLanes>(in, out);
      failures += __builtin_popcountll(out[o] ^ want);
    }
    EXPECT_EQ(failures, 0u) << "K " << K << " output " << o;
  }
}

template <int K>
void random_values() {
  using Net = cudadiff::median_net::MedianNetwork<K>;
  std::mt19937 &gen = testing_util::rng();
  for (int t = 0; t < 20000; ++t) {
    int in[Net::kInputRows][K];
    const int range = t % 3 == 0 ? 2 : t % 3 == 1 ? 8 : 256;
    for (auto &row : in)
      for (int &v : row) v = int(gen() % range);
    int out[Net::kRows];
    Net::template run<ByteLanes>(in, out);
    for (int o = 0; o < Net::kRows; ++o) {
      std::vector<int> w;
      for (int r = o; r < o + K; ++r) w.insert(w.end(), in[r], in[r] + K);
      std::nth_element(w.begin(), w.begin() + w.size() / 2, w.end());
      ASSERT_EQ(out[o], w[w.size() / 2]) << "K " << K << " output " << o;
    }
  }
}

}  // namespace

TEST(MedianNetworks, ZeroOnePrincipleExhaustive3x3) {
  exhaustive_zero_one<3>();
}
TEST(MedianNetworks, ZeroOnePrincipleExhaustive5x5) {
  exhaustive_zero_one<5>();
}
TEST(MedianNetworks, RandomValues) {
  random_values<3>();
  random_values<5>();
  random_values<7>();
}
