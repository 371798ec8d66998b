// Noise view: the CUDA backend equals the CPU reference bit for bit, counts
// included, over sequences of frames (first-frame rule, previous frame kept on
// the device, reset, totals summed over frames and taken every other frame),
// every format and mode, odd sizes, 1920x1080, and device views with their
// own (unaligned or aligned) pointers and strides.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "cudadiff/noisevis.h"
#include "frames.h"

using cudadiff::FrameView;
using cudadiff::NoiseCounts;
using cudadiff::NoiseMode;
using cudadiff::NoiseParams;
using cudadiff::VideoFormat;
using testing_util::HostFrame;

namespace {

NoiseParams params_of(int threshold, NoiseMode mode, uint32_t color) {
  NoiseParams p;
  p.threshold = threshold;
  p.mode = mode;
  p.color = color;
  return p;
}

// f0 random, f1 = f0 plus noise of +-30 (the threshold matters), f2 random.
std::vector<HostFrame> make_sequence(VideoFormat fmt, int w, int h, size_t pad) {
  std::vector<HostFrame> frames;
  frames.emplace_back(fmt, w, h, pad);
  testing_util::fill_random(frames[0]);
  frames.push_back(frames[0]);
  std::mt19937 &gen = testing_util::rng();
  HostFrame &f1 = frames[1];
  for (int y = 0; y < h; ++y)
    for (size_t x = 0; x < f1.view.row_bytes(0); ++x) {
      const int v = f1.at(0, static_cast<int>(x), y) + static_cast<int>(gen() % 61) - 30;
      f1.at(0, static_cast<int>(x), y) = static_cast<uint8_t>(std::min(255, std::max(0, v)));
    }
  frames.emplace_back(fmt, w, h, pad);
  testing_util::fill_random(frames[2]);
  frames.push_back(frames[0]);
  frames.push_back(frames[1]);
  frames.push_back(frames[1]);  // no change at all
  return frames;
}

// Per step: params and whether to count.
struct Step {
  NoiseParams params;
  bool count;
};
const std::vector<Step> kSteps = {
    {params_of(20, NoiseMode::Mask, 0xffff0000u), true},
    {params_of(20, NoiseMode::Mask, 0xffff0000u), true},
    {params_of(0, NoiseMode::Overlay, 0xff00ff00u), true},
    {params_of(17, NoiseMode::Overlay, 0x80123456u), false},
    {params_of(255, NoiseMode::Mask, 0x7f0000ffu), true},
    {params_of(5, NoiseMode::Mask, 0x40ffffffu), true},
};

// The totals are taken after every odd step and after the last one, so they
// cover one or two frames (counted or not).
bool take_after(size_t step, size_t steps) {
  return step % 2 == 1 || step + 1 == steps;
}

void expect_counts_equal(const NoiseCounts &a, const NoiseCounts &b, const std::string &what) {
  EXPECT_EQ(a.frames, b.frames) << what;
  EXPECT_EQ(a.compared_frames, b.compared_frames) << what;
  EXPECT_EQ(a.marked_pixels, b.marked_pixels) << what;
  EXPECT_EQ(a.changed_bytes, b.changed_bytes) << what;
  EXPECT_EQ(a.pixels, b.pixels) << what;
  EXPECT_EQ(a.bytes, b.bytes) << what;
}

struct Fixture : ::testing::Test {
  std::unique_ptr<cudadiff::Context> cpu = cudadiff::Context::cpu();
  std::unique_ptr<cudadiff::Context> gpu = cudadiff::Context::cuda(0);

  void check_sequence(VideoFormat in_fmt, VideoFormat out_fmt, const std::vector<HostFrame> &frames,
                      const std::vector<Step> &steps, int reset_before = -1) {
    const int w = frames[0].view.width, h = frames[0].view.height;
    auto cpu_op = cudadiff::NoiseVis::create(*cpu, in_fmt, out_fmt, w, h);
    auto gpu_op = cudadiff::NoiseVis::create(*gpu, in_fmt, out_fmt, w, h);
    std::vector<cudadiff::DeviceFrame> device_in;  // each stays valid: the next step's previous
    for (const HostFrame &f : frames) device_in.push_back(testing_util::upload(f, *gpu));
    cudadiff::DeviceFrame device_out(out_fmt, w, h);
    for (size_t i = 0; i < frames.size() && i < steps.size(); ++i) {
      if (static_cast<int>(i) == reset_before) {
        cpu_op->reset();
        gpu_op->reset();
      }
      HostFrame want(out_fmt, w, h, 3);
      cpu_op->process(frames[i].view, want.view, steps[i].params, steps[i].count);
      gpu_op->process(device_in[i].view(), device_out.view(), steps[i].params, steps[i].count);
      if (take_after(i, std::min(frames.size(), steps.size()))) {
        cpu_op->take_counts();
        gpu_op->take_counts();
      }
      HostFrame got = testing_util::download(device_out, *gpu);  // synchronises
      const std::string what = std::string(cudadiff::format_name(in_fmt)) + " -> " +
                               cudadiff::format_name(out_fmt) + " " + std::to_string(w) + "x" +
                               std::to_string(h) + " step " + std::to_string(i);
      ASSERT_EQ(testing_util::compare_frames(want.view, got.view), "") << what;
      expect_counts_equal(cpu_op->counts(), gpu_op->counts(), what);
    }
  }
};

}  // namespace

TEST_F(Fixture, EveryFormatOddSizes) {
  const int sizes[][2] = {{1, 1},  {15, 3}, {16, 1},    {17, 5},
                          {31, 2}, {33, 7}, {640, 480}, {1919, 1081}};
  for (VideoFormat fmt : testing_util::packed_rgb_formats())
    for (const auto &sz : sizes)
      check_sequence(fmt, fmt, make_sequence(fmt, sz[0], sz[1], 5), kSteps, 4);
  for (const auto &sz : sizes) {
    const auto gray = make_sequence(VideoFormat::GRAY8, sz[0], sz[1], 3);
    check_sequence(VideoFormat::GRAY8, VideoFormat::GRAY8, gray, kSteps, 4);
    check_sequence(VideoFormat::GRAY8, VideoFormat::RGB, gray, kSteps, 4);
    check_sequence(VideoFormat::GRAY8, VideoFormat::ABGR, gray, kSteps, 4);
  }
  const auto gray = make_sequence(VideoFormat::GRAY8, 37, 9, 0);
  for (VideoFormat fmt : testing_util::packed_rgb_formats())
    check_sequence(VideoFormat::GRAY8, fmt, gray, kSteps, 4);
}

TEST_F(Fixture, FullHdEveryFormat) {
  for (VideoFormat fmt : testing_util::packed_rgb_formats())
    check_sequence(fmt, fmt, make_sequence(fmt, 1920, 1080, 0), kSteps);
  check_sequence(VideoFormat::GRAY8, VideoFormat::GRAY8,
                 make_sequence(VideoFormat::GRAY8, 1920, 1080, 0), kSteps);
}

// Counts over a large frame with a known number of changes: every 7th byte of
// a 1920x1080 BGR frame changes by 40, so the expected counts follow by hand.
TEST_F(Fixture, CountsOfAKnownPattern) {
  const int w = 1920, h = 1080;
  HostFrame f0(VideoFormat::BGR, w, h), f1(VideoFormat::BGR, w, h);
  testing_util::fill_value(f0, 100);
  f1 = f0;
  uint64_t changed = 0, marked = 0;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      bool any = false;
      for (int k = 0; k < 3; ++k) {
        const uint64_t index = (static_cast<uint64_t>(y) * w + x) * 3 + k;
        if (index % 7 == 0) {
          f1.at(0, x * 3 + k, y) = 140;
          ++changed;
          any = true;
        }
      }
      marked += any;
    }
  // 6220800 bytes, every 7th: ceil(6220800 / 7) = 888686; pixels: a pixel of
  // 3 bytes holds at most one multiple of 7, so the same number.
  ASSERT_EQ(changed, 888686u);
  ASSERT_EQ(marked, 888686u);
  auto gpu_op = cudadiff::NoiseVis::create(*gpu, VideoFormat::BGR, VideoFormat::BGR, w, h);
  cudadiff::DeviceFrame d0 = testing_util::upload(f0, *gpu), d1 = testing_util::upload(f1, *gpu);
  cudadiff::DeviceFrame out(VideoFormat::BGR, w, h);
  gpu_op->process(d0.view(), out.view(), NoiseParams{}, true);
  gpu_op->process(d1.view(), out.view(), NoiseParams{}, true);
  gpu_op->take_counts();
  gpu->synchronize();
  EXPECT_EQ(gpu_op->counts().frames, 2u);
  EXPECT_EQ(gpu_op->counts().compared_frames, 1u);
  EXPECT_EQ(gpu_op->counts().changed_bytes, changed);
  EXPECT_EQ(gpu_op->counts().marked_pixels, marked);
  // Back to f0: the same bytes change by 40, which is not more than 40...
  NoiseParams p40;
  p40.threshold = 40;
  gpu_op->process(d0.view(), out.view(), p40, true);
  gpu_op->take_counts();
  gpu->synchronize();
  EXPECT_EQ(gpu_op->counts().changed_bytes, 0u);
  EXPECT_EQ(gpu_op->counts().marked_pixels, 0u);
  // ... but more than 39.
  NoiseParams p39;
  p39.threshold = 39;
  gpu_op->process(d1.view(), out.view(), p39, true);
  gpu_op->take_counts();
  gpu->synchronize();
  EXPECT_EQ(gpu_op->counts().changed_bytes, changed);
  EXPECT_EQ(gpu_op->counts().marked_pixels, marked);
  EXPECT_EQ(gpu_op->counts().bytes, 6220800u);
  EXPECT_EQ(gpu_op->counts().pixels, 2073600u);
  // Totals over several frames stay on the device until taken: three counted
  // frames (a change, none, a change) and an uncounted change.
  gpu_op->process(d0.view(), out.view(), p39, true);   // d1 -> d0: counted
  gpu_op->process(d1.view(), out.view(), p39, false);  // d0 -> d1: not counted
  gpu_op->process(d1.view(), out.view(), p39, true);   // d1 -> d1: nothing changed
  gpu_op->process(d0.view(), out.view(), p39, true);   // d1 -> d0: counted
  gpu_op->take_counts();
  gpu->synchronize();
  EXPECT_EQ(gpu_op->counts().frames, 3u);
  EXPECT_EQ(gpu_op->counts().compared_frames, 3u);
  EXPECT_EQ(gpu_op->counts().changed_bytes, 2 * changed);
  EXPECT_EQ(gpu_op->counts().marked_pixels, 2 * marked);
  EXPECT_EQ(gpu_op->counts().pixels, 3 * 2073600u);
  EXPECT_EQ(gpu_op->counts().bytes, 3 * 6220800u);
  // clear_counts() drops the running totals; a take with nothing counted
  // since gives zeros (and copies nothing).
  gpu_op->process(d1.view(), out.view(), p39, true);
  gpu_op->clear_counts();
  gpu_op->process(d0.view(), out.view(), p39, true);
  gpu_op->take_counts();
  gpu->synchronize();
  EXPECT_EQ(gpu_op->counts().frames, 1u);
  EXPECT_EQ(gpu_op->counts().changed_bytes, changed);
  gpu_op->clear_counts();
  gpu_op->take_counts();
  gpu->synchronize();
  EXPECT_EQ(gpu_op->counts().frames, 0u);
  EXPECT_EQ(gpu_op->counts().changed_bytes, 0u);
  EXPECT_EQ(gpu_op->counts().marked_pixels, 0u);
  gpu_op->process(d1.view(), out.view(), p39, false);
  gpu_op->take_counts();
  gpu->synchronize();
  EXPECT_EQ(gpu_op->counts().frames, 0u);
  EXPECT_EQ(gpu_op->counts().changed_bytes, 0u);
}

// Device views whose pointers and strides are not multiples of 16 take the
// scalar path, aligned ones the vector path; previous and current frames
// have different strides; the bytes after each output row are not touched.
TEST_F(Fixture, DeviceViewsWithOwnStrides) {
  const int w = 45, h = 6;
  for (bool aligned : {false, true})
    for (VideoFormat fmt : {VideoFormat::BGR, VideoFormat::xRGB, VideoFormat::GRAY8}) {
      const std::vector<HostFrame> frames = make_sequence(fmt, w, h, 5);
      auto cpu_op = cudadiff::NoiseVis::create(*cpu, fmt, fmt, w, h);
      auto gpu_op = cudadiff::NoiseVis::create(*gpu, fmt, fmt, w, h);
      gpu->activate();
      const size_t row = frames[0].view.row_bytes(0);
      const size_t row16 = (row + 15) / 16 * 16;
      const size_t out_stride = aligned ? row16 + 32 : row + 3;
      const size_t out_offset = aligned ? 0 : 1;
      std::vector<cudadiff::DeviceBuffer> in_bufs;
      std::vector<FrameView> din;
      for (size_t i = 0; i < frames.size(); ++i) {
        const size_t stride = aligned ? row16 + 16 * i : row + 1 + 2 * i;
        const size_t offset = aligned ? 0 : 1 + i;
        in_bufs.emplace_back(stride * h + offset);
        FrameView v = frames[i].view;
        v.data[0] = in_bufs.back().data() + offset;
        v.stride[0] = stride;
        cudadiff::copy_to_device(frames[i].view, v, *gpu);
        din.push_back(v);
      }
      cudadiff::DeviceBuffer out_buf(out_stride * h + out_offset);
      FrameView dout = frames[0].view;
      dout.data[0] = out_buf.data() + out_offset;
      dout.stride[0] = out_stride;
      FrameView raw_out = dout;
      raw_out.format = VideoFormat::GRAY8;
      raw_out.width = static_cast<int>(out_stride);
      HostFrame guard(VideoFormat::GRAY8, raw_out.width, h, 0, 0xCD);
      cudadiff::copy_to_device(guard.view, raw_out, *gpu);
      for (size_t i = 0; i < frames.size(); ++i) {
        HostFrame want(fmt, w, h);
        cpu_op->process(frames[i].view, want.view, kSteps[i].params, kSteps[i].count);
        gpu_op->process(din[i], dout, kSteps[i].params, kSteps[i].count);
        if (take_after(i, frames.size())) {
          cpu_op->take_counts();
          gpu_op->take_counts();
        }
        HostFrame got(fmt, w, h, 2);
        cudadiff::copy_to_host(dout, got.view, *gpu);
        HostFrame raw(VideoFormat::GRAY8, raw_out.width, h);
        cudadiff::copy_to_host(raw_out, raw.view, *gpu);
        gpu->synchronize();
        for (int y = 0; y < h; ++y)
          for (size_t x = row; x < out_stride; ++x)
            ASSERT_EQ(raw.view.row(0, y)[x], 0xCD) << x << "," << y;
        const std::string what = std::string(cudadiff::format_name(fmt)) +
                                 (aligned ? " aligned" : " unaligned") + " step " +
                                 std::to_string(i);
        EXPECT_EQ(testing_util::compare_frames(want.view, got.view), "") << what;
        expect_counts_equal(cpu_op->counts(), gpu_op->counts(), what);
      }
    }
}
