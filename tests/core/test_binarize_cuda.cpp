// Binarization: the CUDA backend equals the CPU reference bit for bit, in the
// histogram counts, the peaks, the threshold and every output byte, on both
// of its paths: the single-pass kernel (the default) and the two launches
// (BinarizeOptions::single_pass = false).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "binarize_frames.h"
#include "cudadiff/binarize.h"
#include "frames.h"

using cudadiff::BinarizeOptions;
using cudadiff::BinarizeParams;
using cudadiff::BinarizeResult;
using cudadiff::FrameView;
using cudadiff::Histogram;
using cudadiff::ThresholdMethod;
using cudadiff::VideoFormat;
using testing_util::HostFrame;

namespace {

const ThresholdMethod kMethods[] = {ThresholdMethod::Otsu, ThresholdMethod::TwoPeaks,
                                    ThresholdMethod::Fixed};

std::string describe(const HostFrame &in, VideoFormat out_fmt, const BinarizeParams &p) {
  return std::string(cudadiff::format_name(in.view.format)) + " -> " +
         cudadiff::format_name(out_fmt) + " " + std::to_string(in.view.width) + "x" +
         std::to_string(in.view.height) + " method " + std::to_string(static_cast<int>(p.method)) +
         " gray " + std::to_string(static_cast<int>(p.gray)) + (p.invert ? " inverted" : "") +
         (p.want_peaks ? " peaks" : "");
}

void expect_same_result(const BinarizeResult &want, const BinarizeResult &got,
                        const std::string &what) {
  EXPECT_EQ(want.threshold, got.threshold) << what;
  EXPECT_EQ(want.peak1, got.peak1) << what;
  EXPECT_EQ(want.peak2, got.peak2) << what;
  EXPECT_EQ(want.peak1_count, got.peak1_count) << what;
  EXPECT_EQ(want.peak2_count, got.peak2_count) << what;
}

struct Fixture : ::testing::Test {
  std::unique_ptr<cudadiff::Context> cpu = cudadiff::Context::cpu();
  std::unique_ptr<cudadiff::Context> gpu = cudadiff::Context::cuda(0);

  // The CPU and CUDA ops on `in`; every part of the answer must agree.
  // Returns whether the CUDA op ran as the single pass.
  bool check(const HostFrame &in, VideoFormat out_fmt, const BinarizeParams &p,
             const BinarizeOptions &options = BinarizeOptions()) {
    const int w = in.view.width, h = in.view.height;
    const std::string what = describe(in, out_fmt, p);
    HostFrame want(out_fmt, w, h);
    auto cpu_op = cudadiff::Binarize::create(*cpu, in.view.format, out_fmt, w, h);
    cpu_op->process(in.view, want.view, p);

    cudadiff::DeviceFrame din = testing_util::upload(in, *gpu);
    cudadiff::DeviceFrame dout(out_fmt, w, h);
    auto op = cudadiff::Binarize::create(*gpu, in.view.format, out_fmt, w, h, options);
    op->process(din.view(), dout.view(), p);
    HostFrame got = testing_util::download(dout, *gpu);  // synchronises
    expect_same_result(cpu_op->result(), op->result(), what);
    EXPECT_EQ(cpu_op->histogram(), op->histogram()) << what;
    EXPECT_EQ(testing_util::compare_frames(want.view, got.view), "") << what;
    return op->used_single_pass();
  }
};

BinarizeOptions two_launches() {
  BinarizeOptions o;
  o.single_pass = false;
  return o;
}

}  // namespace

TEST_F(Fixture, AllFormatsSizesMethodsRandom) {
  const int sizes[][2] = {{1, 1}, {2, 3}, {15, 3}, {16, 1}, {17, 5}, {31, 2}, {33, 17}, {640, 480}};
  int k = 0;
  for (VideoFormat fmt : binarize_test::input_formats())
    for (const auto &sz : sizes)
      for (ThresholdMethod m : kMethods) {
        HostFrame in(fmt, sz[0], sz[1], 7);
        testing_util::fill_random(in);
        BinarizeParams p;
        p.method = m;
        p.gray = static_cast<cudadiff::GrayMethod>(k % 3);
        p.invert = (k % 4) == 1;
        p.threshold = (k * 37) % 256;
        p.want_peaks = (k % 5) == 2;
        ++k;
        check(in, VideoFormat::GRAY8, p);
        check(in, fmt, p);
      }
}

TEST_F(Fixture, RealisticFramesEveryFormat) {
  const int sizes[][2] = {{1920, 1080}, {1919, 1081}, {641, 359}};
  for (VideoFormat fmt : binarize_test::input_formats())
    for (const auto &sz : sizes) {
      const HostFrame in = binarize_test::realistic_frame(fmt, sz[0], sz[1], testing_util::rng());
      for (ThresholdMethod m : {ThresholdMethod::Otsu, ThresholdMethod::TwoPeaks}) {
        BinarizeParams p;
        p.method = m;
        check(in, VideoFormat::GRAY8, p);
        if (sz[0] != 1920) check(in, fmt, p);
      }
    }
}

// Flat frames and long runs (the run-length merging in the histogram pass,
// and one bin taking every pixel), and hand-made histograms whose Otsu and
// two-peaks answers are known.
TEST_F(Fixture, FlatFramesAndKnownHistograms) {
  for (VideoFormat fmt :
       {VideoFormat::BGR, VideoFormat::RGBA, VideoFormat::GRAY8, VideoFormat::NV12})
    for (int v : {0, 1, 128, 254, 255})
      for (ThresholdMethod m : kMethods) {
        const HostFrame in =
            binarize_test::gray_pattern(fmt, 1280, 720, [&](int, int) { return v; });
        BinarizeParams p;
        p.method = m;
        check(in, VideoFormat::GRAY8, p);
      }
  // Stripes: runs of 5 and 11 pixels, two levels; uniform ramp; three levels.
  const auto stripes = [](int x, int y) { return ((x / 5 + y / 11) & 1) ? 200 : 40; };
  const auto ramp = [](int x, int) { return x & 255; };
  const auto three = [](int x, int y) {
    const int i = (x + 3 * y) % 4;
    return i < 2 ? 40 : i == 2 ? 100 : 200;
  };
  for (const auto &pattern :
       {std::function<int(int, int)>(stripes), std::function<int(int, int)>(ramp),
        std::function<int(int, int)>(three)})
    for (VideoFormat fmt : {VideoFormat::BGRx, VideoFormat::I420})
      for (ThresholdMethod m : kMethods) {
        const HostFrame in = binarize_test::gray_pattern(fmt, 1024, 300, pattern, 3);
        BinarizeParams p;
        p.method = m;
        p.want_peaks = true;
        check(in, fmt, p);
      }
  // The three-level frame has the hand-worked Otsu threshold of the CPU test.
  const HostFrame in = binarize_test::gray_pattern(VideoFormat::GRAY8, 1024, 300, three);
  auto op = cudadiff::Binarize::create(*gpu, VideoFormat::GRAY8, VideoFormat::GRAY8, 1024, 300);
  cudadiff::DeviceFrame din = testing_util::upload(in, *gpu), dout(VideoFormat::GRAY8, 1024, 300);
  op->process(din.view(), dout.view(), BinarizeParams());
  gpu->synchronize();
  EXPECT_EQ(op->result().threshold, 100);
  EXPECT_EQ(op->result().peak1, 40);
}

// One object, many frames: the device accumulator is reset between frames,
// fixed frames without a histogram in between do not disturb it, and each
// frame's answer is its own.
TEST_F(Fixture, SameObjectManyFrames) {
  const int w = 1921, h = 543;
  for (VideoFormat fmt : {VideoFormat::BGR, VideoFormat::GRAY8}) {
    auto cpu_op = cudadiff::Binarize::create(*cpu, fmt, VideoFormat::GRAY8, w, h);
    auto op = cudadiff::Binarize::create(*gpu, fmt, VideoFormat::GRAY8, w, h);
    cudadiff::DeviceFrame dout(VideoFormat::GRAY8, w, h);
    for (int i = 0; i < 8; ++i) {
      const HostFrame in =
          (i % 2) ? binarize_test::realistic_frame(fmt, w, h, testing_util::rng()) : [&] {
            HostFrame f(fmt, w, h);
            testing_util::fill_random(f);
            return f;
          }();
      BinarizeParams p;
      p.method = kMethods[i % 3];
      p.threshold = 20 * i;
      HostFrame want(VideoFormat::GRAY8, w, h);
      cpu_op->process(in.view, want.view, p);
      cudadiff::DeviceFrame din = testing_util::upload(in, *gpu);
      op->process(din.view(), dout.view(), p);
      HostFrame got = testing_util::download(dout, *gpu);
      const std::string what = "frame " + std::to_string(i);
      expect_same_result(cpu_op->result(), op->result(), what);
      EXPECT_EQ(cpu_op->histogram(), op->histogram()) << what;
      ASSERT_EQ(testing_util::compare_frames(want.view, got.view), "") << what;
    }
  }
}

// Frames larger than one wave of the histogram grid (grid-stride loop).
TEST_F(Fixture, LargeFrames) {
  for (VideoFormat fmt : {VideoFormat::BGR, VideoFormat::ARGB, VideoFormat::GRAY8}) {
    const HostFrame in = binarize_test::realistic_frame(fmt, 4096, 2176, testing_util::rng());
    check(in, VideoFormat::GRAY8, BinarizeParams());
  }
}

// The output pass reading the kept gray image or recomputing gray from the
// input gives the same bytes.
TEST_F(Fixture, KeepGrayOrRecompute) {
  BinarizeOptions recompute;
  recompute.keep_gray = false;
  for (VideoFormat fmt : testing_util::packed_rgb_formats())
    for (ThresholdMethod m : kMethods) {
      const HostFrame in = binarize_test::realistic_frame(fmt, 1283, 77, testing_util::rng());
      BinarizeParams p;
      p.method = m;
      p.gray = cudadiff::GrayMethod::Bt709;
      check(in, VideoFormat::GRAY8, p, recompute);
      check(in, fmt, p, recompute);
      check(in, VideoFormat::GRAY8, p);
      check(in, fmt, p);
    }
}

// Device views with unaligned base pointers and strides take the scalar
// paths; bytes after each row are never written.
TEST_F(Fixture, UnalignedDeviceStrides) {
  const int w = 45, h = 6;
  for (VideoFormat fmt : {VideoFormat::BGR, VideoFormat::RGBA, VideoFormat::GRAY8}) {
    for (VideoFormat out_fmt : {VideoFormat::GRAY8, fmt}) {
      HostFrame in(fmt, w, h, 5);
      testing_util::fill_random(in);
      HostFrame want(out_fmt, w, h, 3);
      BinarizeParams p;
      auto cpu_op = cudadiff::Binarize::create(*cpu, fmt, out_fmt, w, h);
      cpu_op->process(in.view, want.view, p);

      gpu->activate();
      const size_t in_stride = in.view.stride[0];  // row + 5: not a multiple of 16
      const size_t out_stride = want.view.stride[0];
      cudadiff::DeviceBuffer in_buf(in_stride * h + 1), out_buf(out_stride * h + 1);
      FrameView din = in.view, dout = want.view;
      din.data[0] = in_buf.data() + 1;
      dout.data[0] = out_buf.data() + 1;
      cudadiff::copy_to_device(in.view, din, *gpu);
      cudadiff::fill_bytes_async(out_buf.data(), 0xCD, out_stride * h + 1, *gpu);
      auto op = cudadiff::Binarize::create(*gpu, fmt, out_fmt, w, h);
      op->process(din, dout, p);
      HostFrame raw(VideoFormat::GRAY8, static_cast<int>(out_stride), h);
      FrameView raw_dev = raw.view;
      raw_dev.data[0] = out_buf.data() + 1;
      cudadiff::copy_to_host(raw_dev, raw.view, *gpu);
      gpu->synchronize();
      const size_t row = want.view.row_bytes(0);
      for (int y = 0; y < h; ++y) {
        for (size_t x = 0; x < row; ++x)
          ASSERT_EQ(raw.view.row(0, y)[x], want.view.row(0, y)[x]) << x << "," << y;
        for (size_t x = row; x < out_stride; ++x)
          ASSERT_EQ(raw.view.row(0, y)[x], 0xCD) << "padding " << x << "," << y;
      }
      expect_same_result(cpu_op->result(), op->result(), "unaligned");
    }
  }
}

TEST_F(Fixture, FixedWithoutHistogram) {
  HostFrame in(VideoFormat::RGB, 100, 10);
  testing_util::fill_random(in);
  BinarizeParams p;
  p.method = ThresholdMethod::Fixed;
  p.threshold = 77;
  check(in, VideoFormat::GRAY8, p);
  auto op = cudadiff::Binarize::create(*gpu, VideoFormat::RGB, VideoFormat::GRAY8, 100, 10);
  cudadiff::DeviceFrame din = testing_util::upload(in, *gpu), dout(VideoFormat::GRAY8, 100, 10);
  op->process(din.view(), dout.view(), p);
  gpu->synchronize();
  EXPECT_EQ(op->result().threshold, 77);
  EXPECT_EQ(op->result().peak1, -1);
  for (uint32_t c : op->histogram()) ASSERT_EQ(c, 0u);
  p.want_peaks = true;
  op->process(din.view(), dout.view(), p);
  gpu->synchronize();
  EXPECT_EQ(op->result().threshold, 77);
  EXPECT_GE(op->result().peak1, 0);
  uint32_t total = 0;
  for (uint32_t c : op->histogram()) total += c;
  EXPECT_EQ(total, 1000u);
}

// The single pass is the default wherever a histogram is needed (every
// format and output, odd sizes, the vector and scalar paths);
// fixed thresholds without peaks need no histogram and take the one-pass
// output kernel.
TEST_F(Fixture, SinglePassEveryFormatAndOutput) {
  const int sizes[][2] = {{1, 1}, {2, 3}, {16, 1}, {17, 5}, {33, 17}, {640, 480}};
  int k = 0;
  for (VideoFormat fmt : binarize_test::input_formats())
    for (const auto &sz : sizes)
      for (ThresholdMethod m : kMethods) {
        HostFrame in(fmt, sz[0], sz[1], 3);
        testing_util::fill_random(in);
        BinarizeParams p;
        p.method = m;
        p.gray = static_cast<cudadiff::GrayMethod>(k % 3);
        p.invert = (k % 2) == 1;
        p.threshold = (k * 53) % 256;
        p.want_peaks = (k % 4) == 3;
        ++k;
        const bool histogram = m != ThresholdMethod::Fixed || p.want_peaks;
        EXPECT_EQ(check(in, VideoFormat::GRAY8, p), histogram) << describe(in, fmt, p);
        EXPECT_EQ(check(in, fmt, p), histogram) << describe(in, fmt, p);
      }
}

// The two-launch path, forced, on the same kind of inputs: random frames of
// every format and odd sizes, camera-like frames, the gray image kept or
// recomputed.
TEST_F(Fixture, TwoLaunchPathForced) {
  const int sizes[][2] = {{1, 1}, {15, 3}, {17, 5}, {33, 17}, {640, 480}};
  BinarizeOptions recompute = two_launches();
  recompute.keep_gray = false;
  int k = 0;
  for (VideoFormat fmt : binarize_test::input_formats())
    for (const auto &sz : sizes)
      for (ThresholdMethod m : kMethods) {
        HostFrame in(fmt, sz[0], sz[1], 5);
        testing_util::fill_random(in);
        BinarizeParams p;
        p.method = m;
        p.gray = static_cast<cudadiff::GrayMethod>(k % 3);
        p.invert = (k % 3) == 1;
        p.want_peaks = (k % 2) == 0;
        ++k;
        EXPECT_FALSE(check(in, VideoFormat::GRAY8, p, two_launches()));
        EXPECT_FALSE(check(in, fmt, p, two_launches()));
        EXPECT_FALSE(check(in, fmt, p, recompute));
      }
  for (VideoFormat fmt : {VideoFormat::BGR, VideoFormat::RGBA, VideoFormat::GRAY8}) {
    const HostFrame in = binarize_test::realistic_frame(fmt, 1920, 1080, testing_util::rng());
    EXPECT_FALSE(check(in, VideoFormat::GRAY8, BinarizeParams(), two_launches()));
    EXPECT_FALSE(check(in, VideoFormat::GRAY8, BinarizeParams(), recompute));
  }
}

// Every number of groups kept per thread and of blocks per SM gives the same
// bytes. With few blocks and few kept groups most chunks go through the
// scratch buffer (1 block per SM keeping 1 chunk: 132 of the 507 chunks of a
// 1920x1080 frame on chip on an H100).
TEST_F(Fixture, SinglePassKeptGroupsAndBlocks) {
  const HostFrame bgr =
      binarize_test::realistic_frame(VideoFormat::BGR, 1920, 1080, testing_util::rng());
  HostFrame odd(VideoFormat::xRGB, 1283, 77, 9);
  testing_util::fill_random(odd);
  for (int g = 1; g <= 4; ++g)
    for (int blocks_per_sm : {1, 2, 0}) {
      BinarizeOptions o;
      o.groups_per_thread = g;
      o.blocks_per_sm = blocks_per_sm;
      EXPECT_TRUE(check(bgr, VideoFormat::GRAY8, BinarizeParams(), o));
      BinarizeParams p;
      p.method = ThresholdMethod::TwoPeaks;
      p.invert = true;
      EXPECT_TRUE(check(odd, VideoFormat::xRGB, p, o));
    }
}

// Large frames: most of a 7680x4320 frame's 8,100 chunks go through the
// scratch buffer.
TEST_F(Fixture, SinglePassLargeFrames) {
  const HostFrame huge =
      binarize_test::realistic_frame(VideoFormat::GRAY8, 7680, 4320, testing_util::rng());
  EXPECT_TRUE(check(huge, VideoFormat::GRAY8, BinarizeParams()));
  for (VideoFormat fmt : {VideoFormat::BGR, VideoFormat::BGRA}) {
    const HostFrame uhd = binarize_test::realistic_frame(fmt, 3840, 2160, testing_util::rng());
    EXPECT_TRUE(check(uhd, VideoFormat::GRAY8, BinarizeParams()));
  }
}

// Two ops on two streams at once, each with more blocks than fit beside the
// other's: the single pass needs no co-residency (blocks that wait only wait
// for running blocks), so both finish, with their own answers.
TEST_F(Fixture, SinglePassOnTwoStreamsAtOnce) {
  const int w = 7680, h = 2160;
  std::unique_ptr<cudadiff::Context> gpu2 = cudadiff::Context::cuda(0);
  HostFrame a = binarize_test::realistic_frame(VideoFormat::BGR, w, h, testing_util::rng());
  HostFrame b(VideoFormat::BGR, w, h);
  testing_util::fill_random(b);
  auto cpu_op = cudadiff::Binarize::create(*cpu, VideoFormat::BGR, VideoFormat::GRAY8, w, h);
  HostFrame want_a(VideoFormat::GRAY8, w, h), want_b(VideoFormat::GRAY8, w, h);
  cpu_op->process(a.view, want_a.view, BinarizeParams());
  const BinarizeResult result_a = cpu_op->result();
  cpu_op->process(b.view, want_b.view, BinarizeParams());
  const BinarizeResult result_b = cpu_op->result();

  cudadiff::DeviceFrame da = testing_util::upload(a, *gpu), db = testing_util::upload(b, *gpu2);
  cudadiff::DeviceFrame oa(VideoFormat::GRAY8, w, h), ob(VideoFormat::GRAY8, w, h);
  gpu->synchronize();
  gpu2->synchronize();
  auto op_a = cudadiff::Binarize::create(*gpu, VideoFormat::BGR, VideoFormat::GRAY8, w, h);
  auto op_b = cudadiff::Binarize::create(*gpu2, VideoFormat::BGR, VideoFormat::GRAY8, w, h);
  for (int i = 0; i < 5; ++i) {  // queued back to back on both streams
    gpu->activate();
    op_a->process(da.view(), oa.view(), BinarizeParams());
    gpu2->activate();
    op_b->process(db.view(), ob.view(), BinarizeParams());
  }
  HostFrame got_a = testing_util::download(oa, *gpu);
  HostFrame got_b = testing_util::download(ob, *gpu2);
  EXPECT_TRUE(op_a->used_single_pass());
  expect_same_result(result_a, op_a->result(), "stream a");
  expect_same_result(result_b, op_b->result(), "stream b");
  EXPECT_EQ(testing_util::compare_frames(want_a.view, got_a.view), "");
  EXPECT_EQ(testing_util::compare_frames(want_b.view, got_b.view), "");
}

// One object, many frames on the single pass (its two accumulator sets
// alternate) with fixed frames (no histogram) between them, on the same
// device frames, each frame's answer its own.
TEST_F(Fixture, SinglePassManyFrames) {
  const int w = 1920, h = 1080;
  auto cpu_op = cudadiff::Binarize::create(*cpu, VideoFormat::BGR, VideoFormat::GRAY8, w, h);
  auto op = cudadiff::Binarize::create(*gpu, VideoFormat::BGR, VideoFormat::GRAY8, w, h);
  std::vector<HostFrame> frames;
  std::vector<cudadiff::DeviceFrame> device_frames;
  for (int i = 0; i < 3; ++i) {
    frames.push_back(binarize_test::realistic_frame(VideoFormat::BGR, w, h, testing_util::rng()));
    device_frames.push_back(testing_util::upload(frames.back(), *gpu));
  }
  cudadiff::DeviceFrame dout(VideoFormat::GRAY8, w, h);
  for (int i = 0; i < 12; ++i) {
    BinarizeParams p;
    p.method = kMethods[(i / 3) % 3];
    p.threshold = 100;
    p.invert = i % 5 == 0;
    HostFrame want(VideoFormat::GRAY8, w, h);
    cpu_op->process(frames[i % 3].view, want.view, p);
    op->process(device_frames[i % 3].view(), dout.view(), p);
    HostFrame got = testing_util::download(dout, *gpu);
    const std::string what = "frame " + std::to_string(i);
    EXPECT_EQ(op->used_single_pass(), p.method != ThresholdMethod::Fixed) << what;
    expect_same_result(cpu_op->result(), op->result(), what);
    EXPECT_EQ(cpu_op->histogram(), op->histogram()) << what;
    ASSERT_EQ(testing_util::compare_frames(want.view, got.view), "") << what;
  }
}

// The single pass writes the output with a guess of the threshold (the
// previous frame's) and rewrites what the real one changes: the same frame
// twice (a right guess), other frames (wrong guesses, small and large), each
// time into an output full of garbage, every byte must be right; with
// overflow chunks too (1 block per SM keeping 1 chunk).
TEST_F(Fixture, SinglePassGuessRightOrWrong) {
  const int w = 1920, h = 1080;
  std::vector<HostFrame> frames;
  frames.push_back(binarize_test::realistic_frame(VideoFormat::RGB, w, h, testing_util::rng()));
  frames.push_back(binarize_test::gray_pattern(VideoFormat::RGB, w, h,
                                               [](int x, int y) { return (x * 7 + y) % 256; }));
  frames.emplace_back(VideoFormat::RGB, w, h);
  testing_util::fill_random(frames.back());
  std::vector<cudadiff::DeviceFrame> device_frames;
  for (const HostFrame &f : frames) device_frames.push_back(testing_util::upload(f, *gpu));
  const int order[] = {0, 0, 1, 1, 2, 0, 2, 2, 1};
  for (int variant = 0; variant < 2; ++variant) {
    BinarizeOptions o;
    if (variant == 1) {
      o.blocks_per_sm = 1;
      o.groups_per_thread = 1;
    }
    for (VideoFormat out_fmt : {VideoFormat::GRAY8, VideoFormat::RGB}) {
      auto cpu_op = cudadiff::Binarize::create(*cpu, VideoFormat::RGB, out_fmt, w, h);
      auto op = cudadiff::Binarize::create(*gpu, VideoFormat::RGB, out_fmt, w, h, o);
      cudadiff::DeviceFrame dout(out_fmt, w, h);
      int k = 0;
      for (int i : order) {
        BinarizeParams p;
        p.method = k % 4 == 3 ? ThresholdMethod::TwoPeaks : ThresholdMethod::Otsu;
        p.invert = k % 5 == 4;
        ++k;
        HostFrame want(out_fmt, w, h);
        cpu_op->process(frames[i].view, want.view, p);
        cudadiff::fill_bytes_async(dout.view().data[0], 0x5A, dout.size(), *gpu);
        op->process(device_frames[i].view(), dout.view(), p);
        HostFrame got = testing_util::download(dout, *gpu);
        const std::string what = "variant " + std::to_string(variant) + " output " +
                                 cudadiff::format_name(out_fmt) + " step " + std::to_string(k);
        EXPECT_TRUE(op->used_single_pass()) << what;
        expect_same_result(cpu_op->result(), op->result(), what);
        ASSERT_EQ(testing_util::compare_frames(want.view, got.view), "") << what;
      }
    }
  }
}

// Unaligned device pointers and strides on the two-launch path (the default
// single pass is covered by UnalignedDeviceStrides).
TEST_F(Fixture, UnalignedDeviceStridesTwoLaunches) {
  const int w = 45, h = 6;
  for (VideoFormat fmt : {VideoFormat::BGR, VideoFormat::RGBA, VideoFormat::GRAY8}) {
    for (VideoFormat out_fmt : {VideoFormat::GRAY8, fmt}) {
      HostFrame in(fmt, w, h, 5);
      testing_util::fill_random(in);
      HostFrame want(out_fmt, w, h, 3);
      BinarizeParams p;
      auto cpu_op = cudadiff::Binarize::create(*cpu, fmt, out_fmt, w, h);
      cpu_op->process(in.view, want.view, p);

      gpu->activate();
      const size_t in_stride = in.view.stride[0];
      const size_t out_stride = want.view.stride[0];
      cudadiff::DeviceBuffer in_buf(in_stride * h + 1), out_buf(out_stride * h + 1);
      FrameView din = in.view, dout = want.view;
      din.data[0] = in_buf.data() + 1;
      dout.data[0] = out_buf.data() + 1;
      cudadiff::copy_to_device(in.view, din, *gpu);
      cudadiff::fill_bytes_async(out_buf.data(), 0xCD, out_stride * h + 1, *gpu);
      auto op = cudadiff::Binarize::create(*gpu, fmt, out_fmt, w, h, two_launches());
      op->process(din, dout, p);
      EXPECT_FALSE(op->used_single_pass());
      HostFrame raw(VideoFormat::GRAY8, static_cast<int>(out_stride), h);
      FrameView raw_dev = raw.view;
      raw_dev.data[0] = out_buf.data() + 1;
      cudadiff::copy_to_host(raw_dev, raw.view, *gpu);
      gpu->synchronize();
      const size_t row = want.view.row_bytes(0);
      for (int y = 0; y < h; ++y) {
        for (size_t x = 0; x < row; ++x)
          ASSERT_EQ(raw.view.row(0, y)[x], want.view.row(0, y)[x]) << x << "," << y;
        for (size_t x = row; x < out_stride; ++x)
          ASSERT_EQ(raw.view.row(0, y)[x], 0xCD) << "padding " << x << "," << y;
      }
      expect_same_result(cpu_op->result(), op->result(), "unaligned, two launches");
    }
  }
}
