// Heat map and noise view at 1920x1080 BGR (default): CPU one thread, CPU all
// threads, CUDA device-resident (one frame per timing, and 100 frames in a
// CUDA graph), and the element's work per frame from pinned buffers (upload,
// kernel, download, one synchronisation, as the base filter class does it);
// the copy ceilings measured in the same run. Bytes per frame: two frames
// read (previous and current) and one written.
//
// The frames are a sequence like a camera's: each differs from the previous
// one in about 6% of its bytes (the peer benchmark's rate), so the previous
// frame of step i is frame i-1, as in the element.
//
// Usage: bench_vis [--runs N] [--frames N] [--size WxH] [--no-cpu] [--no-cuda]
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "cudadiff/heatmap.h"
#include "cudadiff/noisevis.h"
#include "frames.h"

using cudadiff::FrameView;
using cudadiff::HeatColormap;
using cudadiff::HeatmapParams;
using cudadiff::NoiseMode;
using cudadiff::NoiseParams;
using cudadiff::VideoFormat;

namespace {

constexpr VideoFormat kFormat = VideoFormat::BGR;

std::vector<testing_util::HostFrame> camera_like_frames(int w, int h, int n) {
  std::vector<testing_util::HostFrame> frames;
  frames.emplace_back(kFormat, w, h);
  testing_util::fill_random(frames[0]);
  std::mt19937 &gen = testing_util::rng();
  const size_t row = frames[0].view.row_bytes(0);
  for (int i = 1; i < n; ++i) {
    testing_util::HostFrame next = frames[i - 1];
    frames.push_back(std::move(next));
    for (int y = 0; y < h; ++y) {
      uint8_t *r = frames[i].view.row(0, y);
      for (size_t x = 0; x < row; ++x)
        if (gen() % 100 < 6) r[x] = static_cast<uint8_t>(r[x] + 21 + gen() % 200);
    }
  }
  return frames;
}

struct Variant {
  std::string name;
  std::function<void(const FrameView &, const FrameView &)> process;
};

}  // namespace

int main(int argc, char **argv) {
  bench::Options opt = bench::parse_options(argc, argv);
  bench::Report report;
  const int w = opt.width, h = opt.height;
  const std::string size = std::to_string(w) + "x" + std::to_string(h);
  const double frame_bytes = double(w) * h * 3;
  const double op_bytes = 3 * frame_bytes;  // previous + current read, output written
  const std::vector<testing_util::HostFrame> inputs = camera_like_frames(w, h, opt.frames);

  std::unique_ptr<cudadiff::Context> gpu;
  std::string why;
  if (opt.cuda && cudadiff::device_count(&why) > 0) gpu = cudadiff::Context::cuda(0);
  bench::describe_machine(report, gpu.get());
  report.note("frames: " + std::to_string(opt.frames) + " BGR " + size +
              ", each 6% of bytes away from the previous; bytes per frame = 3 frames");

  HeatmapParams heat_default;               // sine, gain 1, alpha 1
  HeatmapParams heat_blend = heat_default;  // blended over the frame
  heat_blend.alpha = 0.5;
  heat_blend.colormap = HeatColormap::Turbo;
  NoiseParams noise_default;  // mask, threshold 20
  NoiseParams noise_overlay = noise_default;
  noise_overlay.mode = NoiseMode::Overlay;
  noise_overlay.color = 0x80ff0000u;

  // The operations of one context, by name, with their (stateful) objects.
  const auto variants = [&](const cudadiff::Context &ctx) {
    auto heat =
        std::shared_ptr<cudadiff::Heatmap>(cudadiff::Heatmap::create(ctx, kFormat, kFormat, w, h));
    auto noise = std::shared_ptr<cudadiff::NoiseVis>(
        cudadiff::NoiseVis::create(ctx, kFormat, kFormat, w, h));
    auto frames = std::make_shared<int>(0);
    return std::vector<Variant>{
        {"heatmap sine",
         [=](const FrameView &in, const FrameView &out) { heat->process(in, out, heat_default); }},
        {"heatmap turbo alpha 0.5",
         [=](const FrameView &in, const FrameView &out) { heat->process(in, out, heat_blend); }},
        {"noisevis mask",
         [=](const FrameView &in, const FrameView &out) {
           noise->process(in, out, noise_default, false);
         }},
        {"noisevis mask + counts",
         [=](const FrameView &in, const FrameView &out) {
           noise->process(in, out, noise_default, true);
         }},
        {"noisevis mask + counts, taken /30",
         [=](const FrameView &in, const FrameView &out) {
           noise->process(in, out, noise_default, true);
           if (++*frames % 30 == 0) noise->take_counts();  // the element's stats-interval=30
         }},
        {"noisevis overlay a=128",
         [=](const FrameView &in, const FrameView &out) {
           noise->process(in, out, noise_overlay, false);
         }},
    };
  };

  if (opt.cpu) {
    auto cpu = cudadiff::Context::cpu();
    testing_util::HostFrame out(kFormat, w, h);
    bench::Options cpu_opt = opt;
    cpu_opt.runs = std::min(opt.runs, 30);
    cpu_opt.warmup = 3;
    for (int threads : {1, 0}) {
      cudadiff::set_cpu_threads(threads);
      for (const Variant &v : variants(*cpu)) {
        if (v.name.find("turbo") != std::string::npos ||
            v.name.find("overlay") != std::string::npos || v.name.find("/30") != std::string::npos)
          continue;  // the CPU rows: the default settings
        bench::Row r;
        r.operation = v.name + " " + size;
        r.implementation = threads == 1
                               ? "cpu 1 thread"
                               : "cpu " + std::to_string(cudadiff::cpu_threads()) + " threads";
        r.bytes = op_bytes;
        r.stats = bench::time_host(
            cpu_opt, [&](int i) { v.process(inputs[i % opt.frames].view, out.view); });
        report.add(r);
      }
    }
    cudadiff::set_cpu_threads(0);
  }

  if (!gpu) {
    report.note("no CUDA device (" + why + "): CUDA measurements skipped");
    report.print_table();
    return 77;
  }

  // Ceilings, in the same run.
  const bench::Row d2d_big = bench::measure_d2d_copy(opt, *gpu, size_t(1) << 30, "D2D copy 1 GiB");
  report.add(d2d_big);
  const bench::Row d2d_same = bench::measure_d2d_copy(opt, *gpu, static_cast<size_t>(op_bytes / 2),
                                                      "D2D copy, same bytes as op");
  report.add(d2d_same);
  report.add(bench::measure_h2d_copy(opt, *gpu, static_cast<size_t>(frame_bytes)));
  report.add(bench::measure_d2h_copy(opt, *gpu, static_cast<size_t>(frame_bytes)));

  std::vector<cudadiff::DeviceFrame> dev_in;
  for (const auto &f : inputs) dev_in.push_back(testing_util::upload(f, *gpu));
  cudadiff::DeviceFrame dev_out(kFormat, w, h);
  bench::Options batch = opt;
  batch.runs = std::max(10, opt.runs / 10);

  struct Result {
    std::string name;
    double single_gbs, graph_gbs;
  };
  std::vector<Result> results;
  double graph_copy_gbs = 0;
  {
    // D2D copies of the same bytes, 100 in a graph: the ceiling for graph rows.
    std::vector<cudadiff::DeviceBuffer> src, dst;
    for (int k = 0; k < opt.frames; ++k) {
      src.emplace_back(static_cast<size_t>(op_bytes / 2));
      dst.emplace_back(static_cast<size_t>(op_bytes / 2));
    }
    cudadiff::StreamGraph copies(*gpu, [&] {
      for (int k = 0; k < 100; ++k)
        cudadiff::copy_bytes_async(dst[k % opt.frames].data(), src[k % opt.frames].data(),
                                   static_cast<size_t>(op_bytes / 2), *gpu);
    });
    bench::Row c = d2d_same;
    c.implementation = "100 in a CUDA graph";
    c.stats = bench::time_device(batch, *gpu, [&](int) { copies.replay(); });
    c.stats.median_ms /= 100;
    c.stats.min_ms /= 100;
    c.stats.max_ms /= 100;
    report.add(c);
    graph_copy_gbs = bench::gbs(c);
  }

  for (const Variant &v : variants(*gpu)) {
    bench::Row r;
    r.operation = v.name + " " + size;
    r.implementation = "cuda device-resident";
    r.bytes = op_bytes;
    r.stats = bench::time_device(
        opt, *gpu, [&](int i) { v.process(dev_in[i % opt.frames].view(), dev_out.view()); });
    report.add(r);
    const double single = bench::gbs(r);

    // 100 frames back to back in one graph: the kernels' own bandwidth.
    cudadiff::StreamGraph graph(*gpu, [&] {
      for (int k = 0; k < 100; ++k) v.process(dev_in[k % opt.frames].view(), dev_out.view());
    });
    r.implementation = "cuda, 100 frames in a graph";
    r.stats = bench::time_device(batch, *gpu, [&](int) { graph.replay(); });
    r.stats.median_ms /= 100;
    r.stats.min_ms /= 100;
    r.stats.max_ms /= 100;
    report.add(r);
    results.push_back({v.name, single, bench::gbs(r)});
  }

  // The element's work per frame, as the base filter class does it: the input
  // in a pinned buffer (GStreamer's stride), uploaded into one of two device
  // frames (the other holds the previous frame), the kernel, the output
  // downloaded into a pinned buffer, one synchronisation. Host clock.
  {
    const size_t packed = cudadiff::frame_size_packed(kFormat, w, h);
    std::vector<cudadiff::PinnedBuffer> pinned_in;
    std::vector<FrameView> host_in;
    for (const auto &f : inputs) {
      pinned_in.emplace_back(packed);
      host_in.push_back(cudadiff::packed_view(kFormat, w, h, pinned_in.back().data()));
      cudadiff::copy_frame_host(f.view, host_in.back());
    }
    cudadiff::PinnedBuffer pinned_out(packed);
    const FrameView host_out = cudadiff::packed_view(kFormat, w, h, pinned_out.data());
    cudadiff::DeviceFrame device_in[2] = {cudadiff::DeviceFrame(kFormat, w, h),
                                          cudadiff::DeviceFrame(kFormat, w, h)};
    for (const Variant &v : variants(*gpu)) {
      if (v.name.find("turbo") != std::string::npos ||
          v.name.find("overlay") != std::string::npos || v.name.find("/30") != std::string::npos)
        continue;
      bench::Row r;
      r.operation = v.name + " " + size;
      r.implementation = "element: pinned in/out + sync";
      r.bytes = 2 * frame_bytes;  // host bytes crossing PCIe: one frame up, one down
      r.note = "bytes = PCIe traffic (1 frame up, 1 down)";
      int k = 0;
      r.stats = bench::time_host(opt, [&](int i) {
        const FrameView &din = device_in[k].view();
        k ^= 1;
        cudadiff::copy_to_device(host_in[i % opt.frames], din, *gpu);
        v.process(din, dev_out.view());
        cudadiff::copy_to_host(dev_out.view(), host_out, *gpu);
        gpu->synchronize();
      });
      report.add(r);
    }
  }

  report.print_table(bench::gbs(d2d_big), "D2D copy 1 GiB");
  std::printf(
      "\nTarget: device-resident >= 60%% of the D2D copy bandwidth (bytes: 2 frames read, "
      "1 written)\n");
  std::printf("%-34s %12s %10s %12s %14s %12s\n", "operation", "single GB/s", "% 1GiB cp",
              "% same cp", "graph GB/s", "% graph cp");
  for (const Result &r : results)
    std::printf("%-34s %12.1f %9.0f%% %11.0f%% %14.1f %11.0f%%\n", r.name.c_str(), r.single_gbs,
                100 * r.single_gbs / bench::gbs(d2d_big), 100 * r.single_gbs / bench::gbs(d2d_same),
                r.graph_gbs, 100 * r.graph_gbs / graph_copy_gbs);
  return 0;
}
