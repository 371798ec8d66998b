// The CPU backend's fast paths (cuda/cpu/*_fast.cpp) against the reference
// implementations that define each operation (cuda/cpu/*.cpp): random frames
// (the seed is printed), every format, odd sizes, padded strides, one and
// several threads. Every byte, count and threshold must be equal (the fast
// paths are what the CUDA tests compare the kernels with).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../../cuda/cpu/fast.h"
#include "../../cuda/cpu/gauss_fast.h"
#include "cudadiff/binarize.h"
#include "cudadiff/gauss.h"
#include "cudadiff/grayscale.h"
#include "cudadiff/heatmap.h"
#include "cudadiff/noisevis.h"
#include "frames.h"

using cudadiff::FrameView;
using cudadiff::VideoFormat;
using testing_util::HostFrame;

namespace {

// Sizes with 1-pixel rows and columns, odd widths, and rows longer than a
// 64-byte vector with a remainder.
const int kSizes[][2] = {{1, 1}, {1, 9}, {9, 1}, {2, 3}, {7, 5}, {33, 17}, {67, 9}, {130, 21}};

// Runs `body` with the CPU backend set to one thread, then to three (more
// than this machine may have: blocks and their borders are what is tested).
template <class F>
void for_thread_counts(F body) {
  for (int threads : {1, 3}) {
    cudadiff::set_cpu_threads(threads);
    body(threads);
  }
  cudadiff::set_cpu_threads(0);
}

// Frames large enough that the fast paths use three threads.
constexpr size_t kThreadedBytes = size_t(3) << 18;

// The small sizes with one thread; one large size with more.
std::vector<std::pair<int, int>> sizes_for(int threads, int large_w, int large_h) {
  if (threads > 1) return {{large_w, large_h}};
  std::vector<std::pair<int, int>> v;
  for (const auto &sz : kSizes) v.push_back({sz[0], sz[1]});
  return v;
}

std::vector<VideoFormat> noise_filter_formats() {
  std::vector<VideoFormat> v = testing_util::packed_rgb_formats();
  for (VideoFormat y : {VideoFormat::GRAY8, VideoFormat::I420, VideoFormat::YV12, VideoFormat::NV12,
                        VideoFormat::NV21, VideoFormat::Y444, VideoFormat::Y42B})
    v.push_back(y);
  return v;
}

std::string describe(VideoFormat f, int w, int h, int threads) {
  return std::string(cudadiff::format_name(f)) + " " + std::to_string(w) + "x" + std::to_string(h) +
         ", " + std::to_string(threads) + " thread(s)";
}

// ------------------------------------------------------------ noise filters

using cudadiff::NoiseFilterMethod;
using cudadiff::NoiseFilterSettings;

NoiseFilterSettings filter(NoiseFilterMethod m, int k, double sigma = 0) {
  NoiseFilterSettings s;
  s.method = m;
  s.kernel_size = k;
  s.sigma = sigma;
  return s;
}

std::string describe(const NoiseFilterSettings &s) {
  return std::string(cudadiff::noise_filter_method_name(s.method)) + " " +
         std::to_string(s.kernel_size) + " sigma " + std::to_string(s.sigma);
}

void expect_filters_equal(const HostFrame &in, const NoiseFilterSettings &s, int threads) {
  const FrameView &v = in.view;
  HostFrame want(v.format, v.width, v.height, 5), got(v.format, v.width, v.height, 5);
  cudadiff::detail::make_reference_noise_filter(v.format, v.width, v.height)
      ->process(v, want.view, s);
  cudadiff::detail::make_fast_noise_filter(v.format, v.width, v.height)->process(v, got.view, s);
  ASSERT_EQ(testing_util::compare_frames(want.view, got.view), "")
      << describe(v.format, v.width, v.height, threads) << " " << describe(s);
  ASSERT_TRUE(got.padding_intact()) << describe(v.format, v.width, v.height, threads);
}

TEST(CpuFastNoiseFilter, EveryFormatMethodAndSmallSize) {
  for (VideoFormat f : noise_filter_formats())
    for (const auto &sz : kSizes) {
      HostFrame in(f, sz[0], sz[1], 3);
      testing_util::fill_random(in);
      for (int k : {3, 5, 7})
        for (NoiseFilterMethod m :
             {NoiseFilterMethod::Gaussian, NoiseFilterMethod::Box, NoiseFilterMethod::Median})
          expect_filters_equal(in, filter(m, k), 1);
    }
}

// Kernel sizes and sigmas: the 16-bit Gaussian (OpenCV's kernels for K = 3
// and 5, and a sigma so small that only the centre weight is left), the
// 32-bit one, the box's 16- and 32-bit column sums.
TEST(CpuFastNoiseFilter, KernelSizesAndSigmas) {
  HostFrame in(VideoFormat::BGR, 71, 29, 1);
  testing_util::fill_random(in);
  for (int k = 3; k <= cudadiff::kMaxConvKernel; k += 2) {
    expect_filters_equal(in, filter(NoiseFilterMethod::Box, k), 1);
    for (double sigma : {0.0, 0.05, 0.6, 1.3, 4.0, 50.0})
      expect_filters_equal(in, filter(NoiseFilterMethod::Gaussian, k, sigma), 1);
  }
  // Extreme frames: all 0 and all 255 (the largest sums).
  for (uint8_t value : {uint8_t(0), uint8_t(255)}) {
    testing_util::fill_value(in, value);
    for (int k : {3, 5, 9, 15, 17, 31}) {
      expect_filters_equal(in, filter(NoiseFilterMethod::Box, k), 1);
      expect_filters_equal(in, filter(NoiseFilterMethod::Gaussian, k), 1);
    }
  }
}

TEST(CpuFastNoiseFilter, ThreadsAndBlocks) {
  for_thread_counts([](int threads) {
    // Planar, semi-planar and packed, above the size that starts threads.
    for (VideoFormat f :
         {VideoFormat::BGR, VideoFormat::I420, VideoFormat::NV12, VideoFormat::xRGB}) {
      const bool planar = f == VideoFormat::I420 || f == VideoFormat::NV12;
      const int w = planar ? 745 : 541, h = planar ? 713 : 493;
      HostFrame in(f, w, h, 7);
      ASSERT_GE(cudadiff::frame_size_packed(f, w, h), kThreadedBytes);
      testing_util::fill_random(in);
      for (const NoiseFilterSettings &s :
           {filter(NoiseFilterMethod::Gaussian, 5), filter(NoiseFilterMethod::Gaussian, 9),
            filter(NoiseFilterMethod::Box, 5), filter(NoiseFilterMethod::Box, 17)})
        expect_filters_equal(in, s, threads);
    }
    // The median counts as more work per byte: smaller frames start threads.
    for (VideoFormat f : {VideoFormat::BGR, VideoFormat::NV12}) {
      HostFrame in(f, 203, 181, 2);
      testing_util::fill_random(in);
      for (int k : {3, 5, 7})
        expect_filters_equal(in, filter(NoiseFilterMethod::Median, k), threads);
    }
  });
}

// GStreamer calls elements from several streaming threads: operations on
// different threads share the backend's thread pool at the same time.
TEST(CpuFastNoiseFilter, ConcurrentCallersShareThePool) {
  cudadiff::set_cpu_threads(3);
  const int w = 541, h = 493;
  HostFrame in(VideoFormat::BGR, w, h);
  testing_util::fill_random(in);
  const NoiseFilterSettings settings[2] = {filter(NoiseFilterMethod::Gaussian, 5),
                                           filter(NoiseFilterMethod::Median, 3)};
  HostFrame want[2] = {HostFrame(VideoFormat::BGR, w, h), HostFrame(VideoFormat::BGR, w, h)};
  for (int i = 0; i < 2; ++i)
    cudadiff::detail::make_reference_noise_filter(VideoFormat::BGR, w, h)
        ->process(in.view, want[i].view, settings[i]);
  std::string errors[2];
  std::vector<std::thread> callers;
  for (int i = 0; i < 2; ++i)
    callers.emplace_back([&, i] {
      auto op = cudadiff::detail::make_fast_noise_filter(VideoFormat::BGR, w, h);
      HostFrame got(VideoFormat::BGR, w, h);
      for (int frame = 0; frame < 20 && errors[i].empty(); ++frame) {
        testing_util::fill_value(got, 0);
        op->process(in.view, got.view, settings[i]);
        errors[i] = testing_util::compare_frames(want[i].view, got.view);
      }
    });
  for (std::thread &t : callers) t.join();
  cudadiff::set_cpu_threads(0);
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

TEST(CpuFastNoiseFilter, BoxFloatDivisionIsExactForEverySum) {
  for (int k = 3; k <= cudadiff::kMaxConvKernel; k += 2) {
    const cudadiff::BoxDivisor d = cudadiff::box_divisor(k);
    const cudadiff::fast::BoxFloat f = cudadiff::fast::box_float(k);
    for (uint32_t sum = 0; sum <= 255u * k * k; ++sum)
      ASSERT_EQ(cudadiff::fast::box_mean_float(sum, f), cudadiff::box_mean(sum, d))
          << "k " << k << " sum " << sum;
  }
}

// ------------------------------------------------------------ grayscale

TEST(CpuFastGrayscale, RuleEqualsGrayValueForEveryColour) {
  using cudadiff::GrayMethod;
  for (GrayMethod m : {GrayMethod::Average, GrayMethod::Bt601, GrayMethod::Bt709}) {
    const cudadiff::fast::GrayRule rule = cudadiff::fast::gray_rule(m);
    for (unsigned r = 0; r < 256; ++r)
      for (unsigned g = 0; g < 256; ++g)
        for (unsigned b = 0; b < 256; ++b) {
          const uint8_t fast = rule.average ? cudadiff::fast::gray_pixel<true>(r, g, b, rule)
                                            : cudadiff::fast::gray_pixel<false>(r, g, b, rule);
          if (fast != cudadiff::gray_value(m, r, g, b))
            FAIL() << "method " << int(m) << " colour " << r << "," << g << "," << b;
        }
  }
}

TEST(CpuFastGrayscale, EveryFormatMethodSizeAndThreads) {
  using cudadiff::GrayMethod;
  std::vector<VideoFormat> formats = testing_util::packed_rgb_formats();
  formats.push_back(VideoFormat::GRAY8);
  const auto check = [](const HostFrame &in, VideoFormat out_format, GrayMethod m, int threads) {
    const FrameView &v = in.view;
    HostFrame want(out_format, v.width, v.height, 5), got(out_format, v.width, v.height, 5);
    cudadiff::detail::make_reference_grayscale()->process(v, want.view, m);
    cudadiff::detail::make_fast_grayscale()->process(v, got.view, m);
    ASSERT_EQ(testing_util::compare_frames(want.view, got.view), "")
        << describe(v.format, v.width, v.height, threads) << " -> "
        << cudadiff::format_name(out_format) << " method " << int(m);
    ASSERT_TRUE(got.padding_intact());
  };
  for_thread_counts([&](int threads) {
    for (VideoFormat f : formats) {
      for (const auto &sz : sizes_for(threads, 531, 503)) {
        HostFrame in(f, sz.first, sz.second, 3);
        testing_util::fill_random(in);
        for (GrayMethod m : {GrayMethod::Average, GrayMethod::Bt601, GrayMethod::Bt709})
          for (VideoFormat out : {VideoFormat::GRAY8, f}) check(in, out, m, threads);
      }
    }
  });
}

// ------------------------------------------------------------ binarize

TEST(CpuFastBinarize, EveryFormatMethodSizeAndThreads) {
  using cudadiff::BinarizeParams;
  using cudadiff::ThresholdMethod;
  std::vector<VideoFormat> formats = testing_util::packed_rgb_formats();
  for (VideoFormat f : {VideoFormat::GRAY8, VideoFormat::I420, VideoFormat::NV12})
    formats.push_back(f);
  std::vector<BinarizeParams> params;
  for (ThresholdMethod m :
       {ThresholdMethod::Otsu, ThresholdMethod::TwoPeaks, ThresholdMethod::Fixed})
    for (bool invert : {false, true}) {
      BinarizeParams p;
      p.method = m;
      p.invert = invert;
      p.gray = invert ? cudadiff::GrayMethod::Average : cudadiff::GrayMethod::Bt709;
      p.threshold = 97;
      p.want_peaks = invert;
      params.push_back(p);
    }
  for_thread_counts([&](int threads) {
    for (VideoFormat f : formats) {
      for (const auto &sz : sizes_for(threads, 537, 509)) {
        const int w = sz.first, h = sz.second;
        HostFrame in(f, w, h, 3);
        testing_util::fill_random(in);
        for (VideoFormat out_format : {VideoFormat::GRAY8, f}) {
          auto want_op = cudadiff::detail::make_reference_binarize(f, out_format, w, h);
          auto got_op = cudadiff::detail::make_fast_binarize(f, out_format, w, h);
          for (const BinarizeParams &p : params) {
            HostFrame want(out_format, w, h, 5), got(out_format, w, h, 5);
            want_op->process(in.view, want.view, p);
            got_op->process(in.view, got.view, p);
            const std::string what = describe(f, w, h, threads) + " -> " +
                                     cudadiff::format_name(out_format) + " method " +
                                     std::to_string(int(p.method));
            ASSERT_EQ(testing_util::compare_frames(want.view, got.view), "") << what;
            ASSERT_TRUE(got.padding_intact()) << what;
            ASSERT_TRUE(want_op->histogram() == got_op->histogram()) << what;
            const cudadiff::BinarizeResult a = want_op->result(), b = got_op->result();
            ASSERT_EQ(a.threshold, b.threshold) << what;
            ASSERT_EQ(a.peak1, b.peak1) << what;
            ASSERT_EQ(a.peak2, b.peak2) << what;
            ASSERT_EQ(a.peak1_count, b.peak1_count) << what;
            ASSERT_EQ(a.peak2_count, b.peak2_count) << what;
          }
        }
      }
    }
  });
}

// ------------------------------------------------------------ heat map and noise view

// The input -> output pairs both operations take.
std::vector<std::pair<VideoFormat, VideoFormat>> vis_pairs() {
  std::vector<std::pair<VideoFormat, VideoFormat>> v;
  v.push_back({VideoFormat::GRAY8, VideoFormat::GRAY8});
  for (VideoFormat f : testing_util::packed_rgb_formats()) {
    v.push_back({f, f});
    v.push_back({VideoFormat::GRAY8, f});
  }
  return v;
}

// A sequence: random, then changes of a few bytes (some by more than any
// threshold), then a frame unchanged.
std::vector<HostFrame> vis_sequence(VideoFormat f, int w, int h) {
  std::vector<HostFrame> frames;
  frames.emplace_back(f, w, h, 3);
  testing_util::fill_random(frames[0]);
  std::mt19937 &gen = testing_util::rng();
  for (int i = 1; i < 4; ++i) {
    frames.push_back(frames[i - 1]);
    if (i == 3) break;
    for (int y = 0; y < h; ++y) {
      uint8_t *row = frames[i].view.row(0, y);
      for (size_t x = 0; x < frames[i].view.row_bytes(0); ++x)
        if (gen() % 4 == 0) row[x] = static_cast<uint8_t>(row[x] + gen() % 256);
    }
  }
  return frames;
}

TEST(CpuFastHeatmap, EveryPairParamsSizeAndThreads) {
  using cudadiff::HeatColormap;
  using cudadiff::HeatmapParams;
  std::vector<HeatmapParams> params;
  for (HeatColormap c : {HeatColormap::Sine, HeatColormap::Turbo, HeatColormap::Gray})
    for (double alpha : {1.0, 0.5, 0.0}) {
      HeatmapParams p;
      p.colormap = c;
      p.alpha = alpha;
      p.gain = c == HeatColormap::Turbo ? 3.5 : 1.0;
      params.push_back(p);
    }
  for_thread_counts([&](int threads) {
    for (const auto &pair : vis_pairs()) {
      for (const auto &sz : sizes_for(threads, 527, 511)) {
        const int w = sz.first, h = sz.second;
        const std::vector<HostFrame> frames = vis_sequence(pair.first, w, h);
        auto want_op = cudadiff::detail::make_reference_heatmap(pair.first, pair.second, w, h);
        auto got_op = cudadiff::detail::make_fast_heatmap(pair.first, pair.second, w, h);
        for (size_t i = 0; i < 2 * frames.size(); ++i) {
          if (i == frames.size()) {  // again after forgetting the previous frame
            want_op->reset();
            got_op->reset();
          }
          const HeatmapParams &p = params[i % params.size()];
          HostFrame want(pair.second, w, h, 5), got(pair.second, w, h, 5);
          want_op->process(frames[i % frames.size()].view, want.view, p);
          got_op->process(frames[i % frames.size()].view, got.view, p);
          ASSERT_EQ(testing_util::compare_frames(want.view, got.view), "")
              << describe(pair.first, w, h, threads) << " -> " << cudadiff::format_name(pair.second)
              << " frame " << i;
          ASSERT_TRUE(got.padding_intact());
        }
      }
    }
  });
}

TEST(CpuFastNoiseVis, EveryPairParamsSizeAndThreads) {
  using cudadiff::NoiseMode;
  using cudadiff::NoiseParams;
  std::vector<NoiseParams> params;
  for (int threshold : {20, 0, 255, 100})
    for (NoiseMode mode : {NoiseMode::Mask, NoiseMode::Overlay}) {
      NoiseParams p;
      p.threshold = threshold;
      p.mode = mode;
      p.color = threshold == 100 ? 0x00ffffffu : (threshold == 0 ? 0x80123456u : 0xffff0000u);
      params.push_back(p);
    }
  for_thread_counts([&](int threads) {
    for (const auto &pair : vis_pairs()) {
      for (const auto &sz : sizes_for(threads, 529, 507)) {
        const int w = sz.first, h = sz.second;
        const std::vector<HostFrame> frames = vis_sequence(pair.first, w, h);
        auto want_op = cudadiff::detail::make_reference_noisevis(pair.first, pair.second, w, h);
        auto got_op = cudadiff::detail::make_fast_noisevis(pair.first, pair.second, w, h);
        for (size_t i = 0; i < 2 * params.size(); ++i) {
          if (i == params.size()) {
            want_op->reset();
            got_op->reset();
          }
          const NoiseParams &p = params[i % params.size()];
          HostFrame want(pair.second, w, h, 5), got(pair.second, w, h, 5);
          want_op->process(frames[i % frames.size()].view, want.view, p, i % 3 != 2);
          got_op->process(frames[i % frames.size()].view, got.view, p, i % 3 != 2);
          const std::string what = describe(pair.first, w, h, threads) + " -> " +
                                   cudadiff::format_name(pair.second) + " frame " +
                                   std::to_string(i);
          ASSERT_EQ(testing_util::compare_frames(want.view, got.view), "") << what;
          ASSERT_TRUE(got.padding_intact()) << what;
          if (i % 4 == 3) {
            want_op->take_counts();
            got_op->take_counts();
            const cudadiff::NoiseCounts a = want_op->counts(), b = got_op->counts();
            ASSERT_EQ(a.marked_pixels, b.marked_pixels) << what;
            ASSERT_EQ(a.changed_bytes, b.changed_bytes) << what;
            ASSERT_EQ(a.pixels, b.pixels) << what;
            ASSERT_EQ(a.bytes, b.bytes) << what;
            ASSERT_EQ(a.frames, b.frames) << what;
            ASSERT_EQ(a.compared_frames, b.compared_frames) << what;
          }
        }
      }
    }
  });
}

}  // namespace
