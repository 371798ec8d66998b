// Grayscale at 1920x1080 (default): CPU one thread, CPU all threads, CUDA
// device-resident; the device-to-device copy ceiling measured in the same run.
// Usage: bench_grayscale [--runs N] [--size WxH] ...
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "cudadiff/grayscale.h"
#include "frames.h"

using cudadiff::GrayMethod;
using cudadiff::VideoFormat;

int main(int argc, char **argv) {
  bench::Options opt = bench::parse_options(argc, argv);
  bench::Report report;
  const int w = opt.width, h = opt.height;
  std::vector<testing_util::HostFrame> inputs;
  for (int i = 0; i < opt.frames; ++i) {
    inputs.emplace_back(VideoFormat::BGR, w, h);
    testing_util::fill_random(inputs.back());
  }
  const double bytes_gray = double(w) * h * 3 + double(w) * h;  // BGR in, GRAY8 out
  const double bytes_same = double(w) * h * 3 * 2;              // BGR in, BGR out
  const std::string size = std::to_string(w) + "x" + std::to_string(h);

  std::unique_ptr<cudadiff::Context> gpu;
  std::string why;
  if (opt.cuda && cudadiff::device_count(&why) > 0) gpu = cudadiff::Context::cuda(0);
  bench::describe_machine(report, gpu.get());

  if (opt.cpu) {
    auto cpu = cudadiff::Context::cpu();
    testing_util::HostFrame out(VideoFormat::GRAY8, w, h);
    auto op = cudadiff::Grayscale::create(*cpu, VideoFormat::BGR, VideoFormat::GRAY8);
    bench::Options cpu_opt = opt;
    cpu_opt.runs = std::min(opt.runs, 50);
    cpu_opt.warmup = 3;
    for (int threads : {1, 0}) {
      cudadiff::set_cpu_threads(threads);
      bench::Row r;
      r.operation = "grayscale BGR->GRAY8 " + size;
      r.implementation = threads == 1
                             ? "cpu 1 thread"
                             : "cpu " + std::to_string(cudadiff::cpu_threads()) + " threads";
      r.bytes = bytes_gray;
      r.stats = bench::time_host(cpu_opt, [&](int i) {
        op->process(inputs[i % opt.frames].view, out.view, GrayMethod::Bt601);
      });
      report.add(r);
    }
    cudadiff::set_cpu_threads(0);
  }

  if (!gpu) {
    report.note("no CUDA device (" + why + "): CUDA measurements skipped");
    report.print_table();
    return 77;
  }

  std::vector<cudadiff::DeviceFrame> dev_in;
  for (auto &f : inputs) dev_in.push_back(testing_util::upload(f, *gpu));
  cudadiff::DeviceFrame gray(VideoFormat::GRAY8, w, h), same(VideoFormat::BGR, w, h);
  auto to_gray = cudadiff::Grayscale::create(*gpu, VideoFormat::BGR, VideoFormat::GRAY8);
  auto to_same = cudadiff::Grayscale::create(*gpu, VideoFormat::BGR, VideoFormat::BGR);

  const bench::Row d2d_big = bench::measure_d2d_copy(opt, *gpu, size_t(1) << 30, "D2D copy 1 GiB");
  report.add(d2d_big);
  bench::Row d2d_frame = bench::measure_d2d_copy(opt, *gpu, static_cast<size_t>(bytes_gray / 2),
                                                 "D2D copy, same bytes as gray");
  report.add(d2d_frame);
  report.add(bench::measure_h2d_copy(opt, *gpu, size_t(w) * h * 3));

  bench::Row r;
  r.operation = "grayscale BGR->GRAY8 " + size;
  r.implementation = "cuda device-resident";
  r.bytes = bytes_gray;
  r.stats = bench::time_device(opt, *gpu, [&](int i) {
    to_gray->process(dev_in[i % opt.frames].view(), gray.view(), GrayMethod::Bt601);
  });
  report.add(r);
  const double gray_gbs = bench::gbs(r);

  r.operation = "grayscale BGR->BGR " + size;
  r.bytes = bytes_same;
  r.stats = bench::time_device(opt, *gpu, [&](int i) {
    to_same->process(dev_in[i % opt.frames].view(), same.view(), GrayMethod::Bt601);
  });
  report.add(r);

  // Back-to-back frames: 100 conversions between one pair of events, as a
  // stream of frames runs; per-frame time = total / 100.
  bench::Options batch = opt;
  batch.runs = std::max(10, opt.runs / 10);
  r.operation = "grayscale BGR->GRAY8 " + size;
  r.implementation = "cuda, 100 frames back to back";
  r.bytes = bytes_gray;
  r.stats = bench::time_device(batch, *gpu, [&](int i) {
    for (int k = 0; k < 100; ++k)
      to_gray->process(dev_in[(i + k) % opt.frames].view(), gray.view(), GrayMethod::Bt601);
  });
  r.stats.median_ms /= 100;
  r.stats.min_ms /= 100;
  r.stats.max_ms /= 100;
  report.add(r);

  // The same 100 frames captured as one CUDA graph: no launch gaps between
  // frames, so the kernel's own bandwidth shows.
  cudadiff::StreamGraph graph(*gpu, [&] {
    for (int k = 0; k < 100; ++k)
      to_gray->process(dev_in[k % opt.frames].view(), gray.view(), GrayMethod::Bt601);
  });
  r.implementation = "cuda, 100 frames in a CUDA graph";
  r.stats = bench::time_device(batch, *gpu, [&](int) { graph.replay(); });
  r.stats.median_ms /= 100;
  r.stats.min_ms /= 100;
  r.stats.max_ms /= 100;
  report.add(r);
  const double graph_gbs = bench::gbs(r);
  // The ceiling the same way: 100 device-to-device copies of the same bytes.
  std::vector<cudadiff::DeviceBuffer> copy_dst;
  for (int k = 0; k < opt.frames; ++k) copy_dst.emplace_back(static_cast<size_t>(bytes_gray / 2));
  cudadiff::StreamGraph copies(*gpu, [&] {
    for (int k = 0; k < 100; ++k)
      cudadiff::copy_bytes_async(copy_dst[k % opt.frames].data(),
                                 dev_in[k % opt.frames].view().data[0],
                                 static_cast<size_t>(bytes_gray / 2), *gpu);
  });
  bench::Row c = d2d_frame;
  c.implementation = "D2D copies in a CUDA graph";
  c.stats = bench::time_device(batch, *gpu, [&](int) { copies.replay(); });
  c.stats.median_ms /= 100;
  c.stats.min_ms /= 100;
  c.stats.max_ms /= 100;
  report.add(c);

  report.print_table(bench::gbs(d2d_big), "D2D copy 1 GiB");
  std::printf(
      "grayscale BGR->GRAY8 in a CUDA graph: %.1f GB/s = %.0f%% of the 1 GiB D2D copy, "
      "%.0f%% of D2D copies of the same size in a graph\n",
      graph_gbs, 100 * graph_gbs / bench::gbs(d2d_big), 100 * graph_gbs / bench::gbs(c));
  std::printf(
      "grayscale BGR->GRAY8 device-resident: %.1f GB/s = %.0f%% of the 1 GiB D2D copy, "
      "%.0f%% of a D2D copy of the same size\n",
      gray_gbs, 100 * gray_gbs / bench::gbs(d2d_big), 100 * gray_gbs / bench::gbs(d2d_frame));
  return 0;
}
