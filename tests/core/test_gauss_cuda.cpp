// Noise filters: the CUDA backend equals the CPU reference bit for bit (the
// arithmetic is integer on both), for every format, method and size, odd
// frame sizes, unaligned device memory and both median lane types.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cudadiff/gauss.h"
#include "frames.h"

using cudadiff::FrameView;
using cudadiff::NoiseFilter;
using cudadiff::NoiseFilterMethod;
using cudadiff::NoiseFilterSettings;
using cudadiff::VideoFormat;
using testing_util::HostFrame;

namespace {

NoiseFilterSettings settings(NoiseFilterMethod m, int k, double sigma = 0) {
  NoiseFilterSettings s;
  s.method = m;
  s.kernel_size = k;
  s.sigma = sigma;
  return s;
}

std::string describe(VideoFormat fmt, int w, int h, const NoiseFilterSettings &s) {
  return std::string(cudadiff::format_name(fmt)) + " " + std::to_string(w) + "x" +
         std::to_string(h) + " " + cudadiff::noise_filter_method_name(s.method) + " k " +
         std::to_string(s.kernel_size) + " sigma " + std::to_string(s.sigma);
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

struct Fixture : ::testing::Test {
  std::unique_ptr<cudadiff::Context> cpu = cudadiff::Context::cpu();
  std::unique_ptr<cudadiff::Context> gpu = cudadiff::Context::cuda(0);

  void check(const HostFrame &in, const NoiseFilterSettings &s) {
    const VideoFormat fmt = in.view.format;
    const int w = in.view.width, h = in.view.height;
    HostFrame want(fmt, w, h);
    NoiseFilter::create(*cpu, fmt, w, h)->process(in.view, want.view, s);
    cudadiff::DeviceFrame din = testing_util::upload(in, *gpu);
    cudadiff::DeviceFrame dout(fmt, w, h);
    NoiseFilter::create(*gpu, fmt, w, h)->process(din.view(), dout.view(), s);
    HostFrame got = testing_util::download(dout, *gpu);
    ASSERT_EQ(testing_util::compare_frames(want.view, got.view), "") << describe(fmt, w, h, s);
  }

  void check_random(VideoFormat fmt, int w, int h, const NoiseFilterSettings &s) {
    HostFrame in(fmt, w, h, 3);
    testing_util::fill_random(in);
    check(in, s);
  }
};

const NoiseFilterMethod kMethods[] = {NoiseFilterMethod::Gaussian, NoiseFilterMethod::Box,
                                      NoiseFilterMethod::Median};

}  // namespace

TEST_F(Fixture, EveryFormatMethodAndSmallSize) {
  const int sizes[][2] = {{1, 1}, {1, 7}, {7, 1}, {2, 2}, {5, 3}, {17, 9}, {33, 35}, {130, 67}};
  for (VideoFormat fmt : all_formats())
    for (const auto &sz : sizes)
      for (NoiseFilterMethod m : kMethods)
        for (int k : {3, 5, 7}) check_random(fmt, sz[0], sz[1], settings(m, k));
}

// Every kernel size (the templated radii 1..4 and the generic kernel) and
// explicit sigmas, on each pixel stride (GRAY8 1, NV12 2, BGR 3, BGRA 4).
TEST_F(Fixture, EveryKernelSize) {
  for (VideoFormat fmt :
       {VideoFormat::GRAY8, VideoFormat::NV12, VideoFormat::BGR, VideoFormat::BGRA})
    for (int k = 3; k <= cudadiff::kMaxConvKernel; k += 2) {
      check_random(fmt, 161, 75, settings(NoiseFilterMethod::Box, k));
      check_random(fmt, 161, 75, settings(NoiseFilterMethod::Gaussian, k));
      check_random(fmt, 161, 75, settings(NoiseFilterMethod::Gaussian, k, 0.7 + k / 3.0));
    }
}

TEST_F(Fixture, RandomFullHdFrames) {
  for (NoiseFilterMethod m : kMethods)
    for (int k : {3, 5, 7, 9}) {
      if (m == NoiseFilterMethod::Median && k > 7) continue;
      if (m != NoiseFilterMethod::Median && k == 7) continue;
      check_random(VideoFormat::BGR, 1920, 1080, settings(m, k));
    }
  for (VideoFormat fmt : {VideoFormat::I420, VideoFormat::NV12}) {
    check_random(fmt, 1920, 1080, settings(NoiseFilterMethod::Gaussian, 5));
    check_random(fmt, 1920, 1080, settings(NoiseFilterMethod::Median, 5));
  }
  check_random(VideoFormat::BGRx, 1920, 1080, settings(NoiseFilterMethod::Box, 5));
  check_random(VideoFormat::BGR, 1919, 1081, settings(NoiseFilterMethod::Gaussian, 31, 6.0));
}

// Smooth content (few distinct values, many ties) exercises the median's
// comparisons of equal bytes.
TEST_F(Fixture, TiesAndConstantRegions) {
  HostFrame in(VideoFormat::BGR, 301, 77);
  std::mt19937 &gen = testing_util::rng();
  for (int y = 0; y < 77; ++y)
    for (int x = 0; x < 301 * 3; ++x) in.at(0, x, y) = static_cast<uint8_t>((gen() % 3) * 127);
  for (NoiseFilterMethod m : kMethods)
    for (int k : {3, 5, 7}) check(in, settings(m, k));
}

// Device views whose base and stride are not multiples of 16 (or 4) take the
// byte-wise load and store paths; bytes between rows stay untouched.
TEST_F(Fixture, UnalignedDeviceMemory) {
  for (VideoFormat fmt : {VideoFormat::BGR, VideoFormat::RGBA, VideoFormat::GRAY8}) {
    const int w = 45, h = 13;
    HostFrame in(fmt, w, h, 5);
    testing_util::fill_random(in);
    for (NoiseFilterMethod m : kMethods) {
      const NoiseFilterSettings s = settings(m, 5);
      HostFrame want(fmt, w, h);
      NoiseFilter::create(*cpu, fmt, w, h)->process(in.view, want.view, s);

      gpu->activate();
      const size_t row = in.view.row_bytes(0);
      const size_t in_stride = row + 5, out_stride = row + 3;
      cudadiff::DeviceBuffer in_buf(in_stride * h + 1), out_buf(out_stride * h + 1);
      FrameView din = in.view, dout = want.view;
      din.data[0] = in_buf.data() + 1;
      din.stride[0] = in_stride;
      dout.data[0] = out_buf.data() + 1;
      dout.stride[0] = out_stride;
      cudadiff::copy_to_device(in.view, din, *gpu);
      cudadiff::fill_bytes_async(out_buf.data(), 0xCD, out_stride * h + 1, *gpu);
      NoiseFilter::create(*gpu, fmt, w, h)->process(din, dout, s);
      HostFrame got(fmt, w, h);
      cudadiff::copy_to_host(dout, got.view, *gpu);
      std::vector<uint8_t> raw(out_stride * h + 1);
      cudadiff::copy_bytes_async(raw.data(), out_buf.data(), raw.size(), *gpu);
      gpu->synchronize();
      EXPECT_EQ(testing_util::compare_frames(want.view, got.view), "") << describe(fmt, w, h, s);
      EXPECT_EQ(raw[0], 0xCD);
      for (int y = 0; y < h; ++y)
        for (size_t x = row; x < out_stride; ++x)
          ASSERT_EQ(raw[1 + y * out_stride + x], 0xCD) << "padding written at " << x << "," << y;
    }
  }
}

// The half-float median lanes (CUDADIFF_MEDIAN_LANES=f16) give the same bytes.
TEST_F(Fixture, MedianHalfFloatLanes) {
  ASSERT_EQ(setenv("CUDADIFF_MEDIAN_LANES", "f16", 1), 0);
  for (VideoFormat fmt : {VideoFormat::BGR, VideoFormat::BGRA, VideoFormat::NV12})
    for (int k : {3, 5, 7}) check_random(fmt, 643, 129, settings(NoiseFilterMethod::Median, k));
  check_random(VideoFormat::BGR, 1920, 1080, settings(NoiseFilterMethod::Median, 5));
  unsetenv("CUDADIFF_MEDIAN_LANES");
}

// Settings change from call to call on one object.
TEST_F(Fixture, SettingsChangeBetweenFrames) {
  HostFrame in(VideoFormat::I420, 200, 100);
  testing_util::fill_random(in);
  auto cpu_op = NoiseFilter::create(*cpu, VideoFormat::I420, 200, 100);
  auto gpu_op = NoiseFilter::create(*gpu, VideoFormat::I420, 200, 100);
  cudadiff::DeviceFrame din = testing_util::upload(in, *gpu);
  cudadiff::DeviceFrame dout(VideoFormat::I420, 200, 100);
  for (const NoiseFilterSettings &s :
       {settings(NoiseFilterMethod::Median, 7), settings(NoiseFilterMethod::Gaussian, 3),
        settings(NoiseFilterMethod::Box, 21), settings(NoiseFilterMethod::Gaussian, 11, 1.5)}) {
    HostFrame want(VideoFormat::I420, 200, 100);
    cpu_op->process(in.view, want.view, s);
    gpu_op->process(din.view(), dout.view(), s);
    HostFrame got = testing_util::download(dout, *gpu);
    ASSERT_EQ(testing_util::compare_frames(want.view, got.view), "")
        << describe(VideoFormat::I420, 200, 100, s);
  }
}
