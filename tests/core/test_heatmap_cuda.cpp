// Heat map: the CUDA backend equals the CPU reference bit for bit (both use
// the colour table the host builds), over sequences of frames (first-frame rule, previous frame
// kept on the device, reset), every format, odd sizes, 1920x1080, every difference 0..765, and
// device views with unaligned pointers and strides (the scalar path).
#include <gtest/gtest.h>

#include <vector>

#include "cudadiff/heatmap.h"
#include "frames.h"

using cudadiff::FrameView;
using cudadiff::HeatColormap;
using cudadiff::HeatmapParams;
using cudadiff::VideoFormat;
using testing_util::HostFrame;

namespace {

constexpr int kTolerance = 0;

HeatmapParams params_of(HeatColormap cm, double gain, double alpha) {
  HeatmapParams p;
  p.colormap = cm;
  p.gain = gain;
  p.alpha = alpha;
  return p;
}

// f0 random, f1 = f0 plus small noise (most pixels change a little), f2 random.
std::vector<HostFrame> make_sequence(VideoFormat fmt, int w, int h, size_t pad) {
  std::vector<HostFrame> frames;
  frames.emplace_back(fmt, w, h, pad);
  testing_util::fill_random(frames[0]);
  frames.push_back(frames[0]);
  std::mt19937 &gen = testing_util::rng();
  HostFrame &f1 = frames[1];
  for (int y = 0; y < h; ++y)
    for (size_t x = 0; x < f1.view.row_bytes(0); ++x) {
      const int v = f1.at(0, static_cast<int>(x), y) + static_cast<int>(gen() % 41) - 20;
      f1.at(0, static_cast<int>(x), y) = static_cast<uint8_t>(std::min(255, std::max(0, v)));
    }
  frames.emplace_back(fmt, w, h, pad);
  testing_util::fill_random(frames[2]);
  return frames;
}

struct Fixture : ::testing::Test {
  std::unique_ptr<cudadiff::Context> cpu = cudadiff::Context::cpu();
  std::unique_ptr<cudadiff::Context> gpu = cudadiff::Context::cuda(0);

  // Runs frames[i] with params[i] through both backends (a reset before step
  // `reset_before`, if any) and compares every output.
  void check_sequence(VideoFormat in_fmt, VideoFormat out_fmt, const std::vector<HostFrame> &frames,
                      const std::vector<HeatmapParams> &params, int reset_before = -1) {
    const int w = frames[0].view.width, h = frames[0].view.height;
    auto cpu_op = cudadiff::Heatmap::create(*cpu, in_fmt, out_fmt, w, h);
    auto gpu_op = cudadiff::Heatmap::create(*gpu, in_fmt, out_fmt, w, h);
    std::vector<cudadiff::DeviceFrame> device_in;  // each stays valid: the next step's previous
    for (const HostFrame &f : frames) device_in.push_back(testing_util::upload(f, *gpu));
    cudadiff::DeviceFrame device_out(out_fmt, w, h);
    for (size_t i = 0; i < frames.size(); ++i) {
      if (static_cast<int>(i) == reset_before) {
        cpu_op->reset();
        gpu_op->reset();
      }
      HostFrame want(out_fmt, w, h, 3);
      cpu_op->process(frames[i].view, want.view, params[i]);
      gpu_op->process(device_in[i].view(), device_out.view(), params[i]);
      HostFrame got = testing_util::download(device_out, *gpu);
      ASSERT_EQ(testing_util::compare_frames(want.view, got.view, kTolerance), "")
          << cudadiff::format_name(in_fmt) << " -> " << cudadiff::format_name(out_fmt) << " " << w
          << "x" << h << " step " << i << " colormap " << int(params[i].colormap) << " gain "
          << params[i].gain << " alpha " << params[i].alpha;
    }
  }
};

const std::vector<HeatmapParams> kSteps = {
    params_of(HeatColormap::Sine, 1.0, 1.0), params_of(HeatColormap::Sine, 1.0, 1.0),
    params_of(HeatColormap::Sine, 4.0, 1.0), params_of(HeatColormap::Turbo, 2.5, 0.6),
    params_of(HeatColormap::Gray, 1.0, 0.3), params_of(HeatColormap::Sine, 0.37, 1.0),
};

// The three frames, then the first one again (a large change), then two more
// steps; a reset before the fifth.
std::vector<HostFrame> extend(std::vector<HostFrame> f) {
  f.push_back(f[0]);
  f.push_back(f[1]);
  f.push_back(f[2]);
  return f;
}

}  // namespace

TEST_F(Fixture, EveryFormatOddSizes) {
  const int sizes[][2] = {{1, 1},  {15, 3}, {16, 1},    {17, 5},
                          {31, 2}, {33, 7}, {640, 480}, {1919, 1081}};
  for (VideoFormat fmt : testing_util::packed_rgb_formats())
    for (const auto &sz : sizes)
      check_sequence(fmt, fmt, extend(make_sequence(fmt, sz[0], sz[1], 5)), kSteps, 4);
  for (const auto &sz : sizes) {
    const auto gray = extend(make_sequence(VideoFormat::GRAY8, sz[0], sz[1], 3));
    check_sequence(VideoFormat::GRAY8, VideoFormat::GRAY8, gray, kSteps, 4);
    check_sequence(VideoFormat::GRAY8, VideoFormat::BGR, gray, kSteps, 4);
    check_sequence(VideoFormat::GRAY8, VideoFormat::xRGB, gray, kSteps, 4);
  }
  const auto gray = extend(make_sequence(VideoFormat::GRAY8, 37, 9, 0));
  for (VideoFormat fmt : testing_util::packed_rgb_formats())
    check_sequence(VideoFormat::GRAY8, fmt, gray, kSteps, 4);
}

TEST_F(Fixture, FullHdEveryFormat) {
  for (VideoFormat fmt : testing_util::packed_rgb_formats())
    check_sequence(fmt, fmt, make_sequence(fmt, 1920, 1080, 0), {kSteps[0], kSteps[1], kSteps[3]});
  check_sequence(VideoFormat::GRAY8, VideoFormat::GRAY8,
                 make_sequence(VideoFormat::GRAY8, 1920, 1080, 0),
                 {kSteps[0], kSteps[1], kSteps[4]});
}

// Every difference 0..765 in one 766x1 frame (previous all zero), each
// colormap, several gains: the device table against the CPU table.
TEST_F(Fixture, EveryDifferenceEveryColormap) {
  const int n = cudadiff::kHeatTableSize;
  HostFrame zero(VideoFormat::RGB, n, 1), ramp(VideoFormat::RGB, n, 1);
  testing_util::fill_value(zero, 0);
  for (int d = 0; d < n; ++d) {
    uint8_t *px = ramp.view.row(0, 0) + 3 * d;
    px[0] = static_cast<uint8_t>(std::min(d, 255));
    px[1] = static_cast<uint8_t>(std::min(std::max(d - 255, 0), 255));
    px[2] = static_cast<uint8_t>(std::max(d - 510, 0));
  }
  for (HeatColormap cm : {HeatColormap::Sine, HeatColormap::Turbo, HeatColormap::Gray})
    for (double gain : {1.0, 0.37, 2.5, 1000.0}) {
      const HeatmapParams p = params_of(cm, gain, 1.0);
      check_sequence(VideoFormat::RGB, VideoFormat::RGB, {zero, ramp}, {p, p});
    }
}

// Device views whose pointers and strides are not multiples of 16 take the
// scalar path, aligned ones the vector path; previous and current frames
// have different strides; the bytes after each output row are not touched.
TEST_F(Fixture, DeviceViewsWithOwnStrides) {
  const int w = 45, h = 6;
  for (bool aligned : {false, true})
    for (VideoFormat fmt : {VideoFormat::BGR, VideoFormat::RGBA, VideoFormat::GRAY8}) {
      const std::vector<HostFrame> frames = make_sequence(fmt, w, h, 5);
      const VideoFormat out_fmt = fmt;
      auto cpu_op = cudadiff::Heatmap::create(*cpu, fmt, out_fmt, w, h);
      auto gpu_op = cudadiff::Heatmap::create(*gpu, fmt, out_fmt, w, h);
      gpu->activate();
      const size_t row = frames[0].view.row_bytes(0);
      const size_t row16 = (row + 15) / 16 * 16;
      const size_t out_stride = aligned ? row16 + 32 : row + 3;
      const size_t out_offset = aligned ? 0 : 1;
      std::vector<cudadiff::DeviceBuffer> in_bufs;
      std::vector<FrameView> din;
      for (size_t i = 0; i < frames.size(); ++i) {
        // A different stride per frame.
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
      dout.format = out_fmt;
      dout.data[0] = out_buf.data() + out_offset;
      dout.stride[0] = out_stride;
      // The whole output buffer, padding included, as one wide GRAY8 frame of guard bytes.
      FrameView raw_out = dout;
      raw_out.format = VideoFormat::GRAY8;
      raw_out.width = static_cast<int>(out_stride);
      HostFrame guard(VideoFormat::GRAY8, raw_out.width, h, 0, 0xCD);
      cudadiff::copy_to_device(guard.view, raw_out, *gpu);
      for (size_t i = 0; i < frames.size(); ++i) {
        HostFrame want(out_fmt, w, h);
        const HeatmapParams p = kSteps[i + 2];
        cpu_op->process(frames[i].view, want.view, p);
        gpu_op->process(din[i], dout, p);
        HostFrame got(out_fmt, w, h, 2);
        cudadiff::copy_to_host(dout, got.view, *gpu);
        HostFrame raw(VideoFormat::GRAY8, raw_out.width, h);
        cudadiff::copy_to_host(raw_out, raw.view, *gpu);
        gpu->synchronize();
        for (int y = 0; y < h; ++y)
          for (size_t x = row; x < out_stride; ++x)
            ASSERT_EQ(raw.view.row(0, y)[x], 0xCD) << x << "," << y;
        EXPECT_EQ(testing_util::compare_frames(want.view, got.view, kTolerance), "")
            << cudadiff::format_name(fmt) << (aligned ? " aligned" : " unaligned") << " step " << i;
      }
    }
}
