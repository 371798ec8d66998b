// Overlay: the CUDA backend equals the CPU reference bit for bit, on device
// frames (blend) and on host frames (blend_host: only the covered rectangles
// cross the bus), at every format, odd sizes, clipping placements, padded and
// unaligned strides. Needs a device (exits 77 without one).
#include <gtest/gtest.h>

#include <cstring>

#include "cudadiff/overlay.h"
#include "frames.h"
#include "overlay_model.h"

using cudadiff::FrameView;
using cudadiff::VideoFormat;
using overlay_model::TestImage;
using testing_util::HostFrame;

namespace {

HostFrame copy_of(const HostFrame &f) {
  HostFrame c(f.view.format, f.view.width, f.view.height, f.pad);
  cudadiff::copy_frame_host(f.view, c.view);
  return c;
}

struct Fixture : ::testing::Test {
  std::unique_ptr<cudadiff::Context> cpu = cudadiff::Context::cpu();
  std::unique_ptr<cudadiff::Context> gpu = cudadiff::Context::cuda(0);

  // One image at one place, through both CUDA paths, against the CPU.
  void check(cudadiff::Overlay &cpu_op, cudadiff::Overlay &gpu_op, const HostFrame &in,
             const TestImage &img, int x, int y) {
    HostFrame want = copy_of(in);
    cpu_op.set_image(img.view(), x, y);
    cpu_op.blend(want.view);
    gpu_op.set_image(img.view(), x, y);
    const cudadiff::Rect a = cpu_op.covered(), b = gpu_op.covered();
    ASSERT_TRUE(a.x0 == b.x0 && a.y0 == b.y0 && a.x1 == b.x1 && a.y1 == b.y1);

    cudadiff::DeviceFrame dev = testing_util::upload(in, *gpu);
    gpu_op.blend(dev.view());
    HostFrame got = testing_util::download(dev, *gpu);
    ASSERT_EQ(testing_util::compare_frames(want.view, got.view), "")
        << "blend: image " << img.width << "x" << img.height << " at " << x << "," << y;

    HostFrame host = copy_of(in);
    gpu_op.blend_host(host.view);
    gpu->synchronize();
    ASSERT_EQ(testing_util::compare_frames(want.view, host.view), "")
        << "blend_host: image " << img.width << "x" << img.height << " at " << x << "," << y;
    ASSERT_TRUE(host.padding_intact());
  }
};

}  // namespace

TEST_F(Fixture, EveryFormatSizeAndPlacement) {
  const int sizes[][2] = {{1, 1}, {2, 2}, {3, 3}, {17, 9}, {33, 8}, {641, 479}};
  const int image_sizes[][2] = {{1, 1}, {7, 5}, {300, 41}, {1000, 700}};
  std::mt19937 &gen = testing_util::rng();
  for (VideoFormat fmt : overlay_model::all_formats())
    for (const auto &sz : sizes) {
      const int w = sz[0], h = sz[1];
      auto cpu_op = cudadiff::Overlay::create(*cpu, fmt, w, h);
      auto gpu_op = cudadiff::Overlay::create(*gpu, fmt, w, h);
      HostFrame in(fmt, w, h, 7);
      testing_util::fill_random(in, gen);
      for (const auto &isz : image_sizes) {
        TestImage img(isz[0], isz[1], 12);
        img.fill_random(gen);
        const int xs[] = {-isz[0] / 2, -1, 0, 1, 3, w / 2, w - 1};
        const int ys[] = {-isz[1] / 2, 0, 1, h / 2, h - 1};
        for (int x : xs)
          for (int y : ys) check(*cpu_op, *gpu_op, in, img, x, y);
      }
    }
}

// A one-line text at full HD in every format: the element's case.
TEST_F(Fixture, FullHdTextLine) {
  std::mt19937 &gen = testing_util::rng();
  TestImage img(1500, 48);
  img.fill_random(gen);
  for (VideoFormat fmt : overlay_model::all_formats()) {
    auto cpu_op = cudadiff::Overlay::create(*cpu, fmt, 1920, 1080);
    auto gpu_op = cudadiff::Overlay::create(*gpu, fmt, 1920, 1080);
    HostFrame in(fmt, 1920, 1080, 64);
    testing_util::fill_random(in, gen);
    check(*cpu_op, *gpu_op, in, img, 25, 25);
    check(*cpu_op, *gpu_op, in, img, 1920 - 1500 - 25, 1080 - 48 - 25);
    check(*cpu_op, *gpu_op, in, img, 1000, 1070);  // clipped right and bottom
  }
}

// Replacing the image (larger, smaller, empty) takes effect on the next blend.
TEST_F(Fixture, ReplacedImages) {
  std::mt19937 &gen = testing_util::rng();
  for (VideoFormat fmt : {VideoFormat::BGRx, VideoFormat::I420, VideoFormat::NV12}) {
    auto cpu_op = cudadiff::Overlay::create(*cpu, fmt, 97, 61);
    auto gpu_op = cudadiff::Overlay::create(*gpu, fmt, 97, 61);
    HostFrame in(fmt, 97, 61, 3);
    testing_util::fill_random(in, gen);
    for (auto wh : {std::make_pair(3, 3), std::make_pair(90, 60), std::make_pair(5, 40),
                    std::make_pair(200, 200)}) {
      TestImage img(wh.first, wh.second);
      img.fill_random(gen);
      check(*cpu_op, *gpu_op, in, img, 2, 1);
    }
    TestImage clear(10, 10);
    check(*cpu_op, *gpu_op, in, clear, 0, 0);
    gpu_op->set_image(cudadiff::ArgbImage(), 0, 0);
    EXPECT_TRUE(gpu_op->covered().empty());
  }
}

// blend_host from pinned memory (what the element gets from its pool).
TEST_F(Fixture, PinnedHostFrame) {
  std::mt19937 &gen = testing_util::rng();
  TestImage img(400, 40);
  img.fill_random(gen);
  for (VideoFormat fmt : {VideoFormat::BGRA, VideoFormat::NV12, VideoFormat::GRAY8}) {
    const int w = 1280, h = 720;
    size_t offsets[cudadiff::kMaxPlanes], strides[cudadiff::kMaxPlanes];
    const size_t total = cudadiff::packed_layout(fmt, w, h, 64, offsets, strides);
    cudadiff::PinnedBuffer pinned(total);
    FrameView view;
    view.format = fmt;
    view.width = w;
    view.height = h;
    for (int p = 0; p < cudadiff::format_info(fmt).n_planes; ++p) {
      view.data[p] = pinned.data() + offsets[p];
      view.stride[p] = strides[p];
    }
    HostFrame in(fmt, w, h);
    testing_util::fill_random(in, gen);
    cudadiff::copy_frame_host(in.view, view);
    HostFrame want = copy_of(in);
    auto cpu_op = cudadiff::Overlay::create(*cpu, fmt, w, h);
    auto gpu_op = cudadiff::Overlay::create(*gpu, fmt, w, h);
    cpu_op->set_image(img.view(), 31, 17);
    gpu_op->set_image(img.view(), 31, 17);
    cpu_op->blend(want.view);
    gpu_op->blend_host(view);
    gpu->synchronize();
    EXPECT_EQ(testing_util::compare_frames(want.view, view), "") << cudadiff::format_name(fmt);
  }
}

// Device frames whose base and stride are not 4-byte aligned take the byte
// path of the packed kernel; bytes around the rows stay untouched.
TEST_F(Fixture, UnalignedDeviceFrames) {
  std::mt19937 &gen = testing_util::rng();
  const int w = 45, h = 6;
  TestImage img(60, 10);
  img.fill_random(gen);
  for (VideoFormat fmt : {VideoFormat::BGRx, VideoFormat::RGBA, VideoFormat::ARGB, VideoFormat::BGR,
                          VideoFormat::GRAY8}) {
    HostFrame in(fmt, w, h, 5);  // stride = row + 5
    testing_util::fill_random(in, gen);
    HostFrame want = copy_of(in);
    auto cpu_op = cudadiff::Overlay::create(*cpu, fmt, w, h);
    cpu_op->set_image(img.view(), -3, -2);
    cpu_op->blend(want.view);

    gpu->activate();
    const size_t stride = in.view.stride[0];
    cudadiff::DeviceBuffer buf(stride * h + 1);
    const std::vector<uint8_t> guard(stride * h + 1, 0xCD);
    cudadiff::copy_bytes_async(buf.data(), guard.data(), guard.size(), *gpu);
    FrameView dev = in.view;
    dev.data[0] = buf.data() + 1;
    cudadiff::copy_to_device(in.view, dev, *gpu);
    auto gpu_op = cudadiff::Overlay::create(*gpu, fmt, w, h);
    gpu_op->set_image(img.view(), -3, -2);
    gpu_op->blend(dev);
    HostFrame got(fmt, w, h, 5);
    cudadiff::copy_to_host(dev, got.view, *gpu);
    std::vector<uint8_t> raw(stride * h + 1);
    cudadiff::copy_bytes_async(raw.data(), buf.data(), raw.size(), *gpu);
    gpu->synchronize();
    EXPECT_EQ(testing_util::compare_frames(want.view, got.view), "") << cudadiff::format_name(fmt);
    EXPECT_EQ(raw[0], 0xCD);
    const size_t row = in.view.row_bytes(0);
    for (int y = 0; y < h; ++y)
      for (size_t x = row; x < stride && 1 + y * stride + x < raw.size(); ++x)
        ASSERT_EQ(raw[1 + y * stride + x], 0xCD)
            << cudadiff::format_name(fmt) << " " << x << "," << y;
  }
}
