// Grayscale: the CUDA backend equals the CPU reference bit for bit.
#include <gtest/gtest.h>

#include "cudadiff/grayscale.h"
#include "frames.h"

using cudadiff::FrameView;
using cudadiff::GrayMethod;
using cudadiff::VideoFormat;
using testing_util::HostFrame;

namespace {

const GrayMethod kMethods[] = {GrayMethod::Average, GrayMethod::Bt601, GrayMethod::Bt709};

struct Fixture : ::testing::Test {
  std::unique_ptr<cudadiff::Context> cpu = cudadiff::Context::cpu();
  std::unique_ptr<cudadiff::Context> gpu = cudadiff::Context::cuda(0);

  void check(VideoFormat in_fmt, VideoFormat out_fmt, int w, int h, GrayMethod m) {
    HostFrame in(in_fmt, w, h, 7);
    testing_util::fill_random(in);
    HostFrame want(out_fmt, w, h);
    cudadiff::Grayscale::create(*cpu, in_fmt, out_fmt)->process(in.view, want.view, m);

    cudadiff::DeviceFrame din = testing_util::upload(in, *gpu);
    cudadiff::DeviceFrame dout(out_fmt, w, h);
    auto op = cudadiff::Grayscale::create(*gpu, in_fmt, out_fmt);
    op->process(din.view(), dout.view(), m);
    HostFrame got = testing_util::download(dout, *gpu);
    ASSERT_EQ(testing_util::compare_frames(want.view, got.view), "")
        << cudadiff::format_name(in_fmt) << " -> " << cudadiff::format_name(out_fmt) << " method "
        << static_cast<int>(m);
  }
};

}  // namespace

TEST_F(Fixture, AllFormatsSizesMethods) {
  const int sizes[][2] = {{1, 1}, {15, 3}, {16, 1}, {17, 5}, {31, 2}, {640, 480}, {1919, 1081}};
  for (VideoFormat fmt : testing_util::packed_rgb_formats())
    for (const auto &sz : sizes)
      for (GrayMethod m : kMethods) {
        check(fmt, VideoFormat::GRAY8, sz[0], sz[1], m);
        check(fmt, fmt, sz[0], sz[1], m);
      }
  check(VideoFormat::GRAY8, VideoFormat::GRAY8, 33, 7, GrayMethod::Bt601);
}

TEST_F(Fixture, FullHdEveryFormat) {
  for (VideoFormat fmt : testing_util::packed_rgb_formats()) {
    check(fmt, VideoFormat::GRAY8, 1920, 1080, GrayMethod::Bt601);
    check(fmt, fmt, 1920, 1080, GrayMethod::Bt709);
  }
}

// Device views with unaligned base and stride take the scalar path and still
// match; the bytes around each row are not touched.
TEST_F(Fixture, UnalignedDeviceStrides) {
  const int w = 45, h = 6;
  for (VideoFormat fmt : {VideoFormat::BGR, VideoFormat::RGBA}) {
    HostFrame in(fmt, w, h, 5);
    testing_util::fill_random(in);
    HostFrame want(VideoFormat::GRAY8, w, h, 3);
    cudadiff::Grayscale::create(*cpu, fmt, VideoFormat::GRAY8)
        ->process(in.view, want.view, GrayMethod::Bt601);

    gpu->activate();
    const size_t in_stride = in.view.stride[0];  // row + 5: not a multiple of 16
    const size_t out_stride = w + 3;
    cudadiff::DeviceBuffer in_buf(in_stride * h + 1), out_buf(out_stride * h + 1);
    FrameView din = in.view, dout = want.view;
    din.data[0] = in_buf.data() + 1;
    dout.data[0] = out_buf.data() + 1;
    dout.stride[0] = out_stride;
    cudadiff::copy_to_device(in.view, din, *gpu);
    // The whole output buffer, padding included, seen as one wide GRAY8 frame.
    FrameView raw_out = dout;
    raw_out.width = static_cast<int>(out_stride);
    HostFrame guard(VideoFormat::GRAY8, raw_out.width, h, 0, 0xCD);
    cudadiff::copy_to_device(guard.view, raw_out, *gpu);
    auto op = cudadiff::Grayscale::create(*gpu, fmt, VideoFormat::GRAY8);
    op->process(din, dout, GrayMethod::Bt601);
    HostFrame got(VideoFormat::GRAY8, w, h, 3);
    cudadiff::copy_to_host(dout, got.view, *gpu);
    HostFrame raw(VideoFormat::GRAY8, raw_out.width, h);
    cudadiff::copy_to_host(raw_out, raw.view, *gpu);
    gpu->synchronize();
    for (int y = 0; y < h; ++y)
      for (size_t x = w; x < out_stride; ++x)
        ASSERT_EQ(raw.view.row(0, y)[x], 0xCD) << x << "," << y;
    EXPECT_EQ(testing_util::compare_frames(want.view, got.view), "");
  }
}

// A CUDA call that fails inside the core (here: choosing a device that does
// not exist) leaves no error behind on the thread, which the next kernel
// launch's check would report as its own. (compute-sanitizer's memcheck
// reports the failing call as an API error: scripts/gpu-check.sh and
// gpu-sanitize-parallel.sh leave tests named *DeliberateApiError* out of
// their memcheck runs.)
TEST_F(Fixture, DeliberateApiErrorLeavesNoErrorBehind) {
  EXPECT_THROW(cudadiff::Stream(9999), cudadiff::Error);
  check(VideoFormat::BGR, VideoFormat::GRAY8, 64, 8, GrayMethod::Bt601);
}
