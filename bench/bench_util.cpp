#include "bench_util.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace bench {

Options parse_options(int argc, char **argv, const char *usage_extra) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&](const char *what) -> const char * {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", what);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--runs")
      o.runs = std::max(1, std::atoi(next("--runs")));
    else if (a == "--warmup")
      o.warmup = std::max(0, std::atoi(next("--warmup")));
    else if (a == "--frames")
      o.frames = std::max(1, std::atoi(next("--frames")));
    else if (a == "--size") {
      const char *v = next("--size");
      if (std::sscanf(v, "%dx%d", &o.width, &o.height) != 2 || o.width <= 0 || o.height <= 0) {
        std::fprintf(stderr, "--size takes WxH\n");
        std::exit(2);
      }
    } else if (a == "--no-cpu")
      o.cpu = false;
    else if (a == "--no-cuda")
      o.cuda = false;
    else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: %s [--runs N] [--warmup N] [--frames N] [--size WxH] [--no-cpu] "
          "[--no-cuda] %s\n",
          argv[0], usage_extra);
      std::exit(0);
    } else {
      o.positional.push_back(a);
    }
  }
  // An option that neither this function nor the program's usage names is a
  // mistake (say, one of another benchmark): refused, rather than ignored
  // while the program times something other than what was asked.
  const std::string known = usage_extra;
  auto name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-'; };
  for (const std::string &a : o.positional) {
    if (a.size() < 3 || a.compare(0, 2, "--") != 0) continue;
    bool found = false;
    for (size_t at = known.find(a); at != std::string::npos && !found; at = known.find(a, at + 1)) {
      const size_t end = at + a.size();
      found =
          (at == 0 || !name_char(known[at - 1])) && (end == known.size() || !name_char(known[end]));
    }
    if (!found) {
      std::fprintf(stderr, "%s: unknown option %s (--help lists them)\n", argv[0], a.c_str());
      std::exit(2);
    }
  }
  return o;
}

static Stats summarize(std::vector<double> ms) {
  Stats s;
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  s.runs = static_cast<int>(ms.size());
  s.min_ms = ms.front();
  s.max_ms = ms.back();
  const size_t n = ms.size();
  s.median_ms = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  return s;
}

Stats time_host(const Options &opt, const std::function<void(int)> &fn) {
  for (int i = 0; i < opt.warmup; ++i) fn(i);
  std::vector<double> ms;
  ms.reserve(opt.runs);
  for (int i = 0; i < opt.runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn(i);
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return summarize(ms);
}

Stats time_host_with_setup(const Options &opt, const std::function<void(int)> &setup,
                           const std::function<void(int)> &fn) {
  for (int i = 0; i < opt.warmup; ++i) {
    setup(i);
    fn(i);
  }
  std::vector<double> ms;
  ms.reserve(opt.runs);
  for (int i = 0; i < opt.runs; ++i) {
    setup(i);
    const auto t0 = std::chrono::steady_clock::now();
    fn(i);
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return summarize(ms);
}

Stats time_device(const Options &opt, const cudadiff::Context &ctx,
                  const std::function<void(int)> &fn, const std::function<void(int)> &setup) {
  ctx.activate();
  for (int i = 0; i < opt.warmup; ++i) {
    if (setup) setup(i);
    fn(i);
  }
  ctx.synchronize();
  cudadiff::EventTimer timer(ctx);
  std::vector<double> ms;
  ms.reserve(opt.runs);
  for (int i = 0; i < opt.runs; ++i) {
    if (setup) {
      setup(i);
      ctx.synchronize();
    }
    timer.start();
    fn(i);
    timer.stop();
    ms.push_back(timer.elapsed_ms());
  }
  return summarize(ms);
}

void Report::add(const Row &row) {
  rows_.push_back(row);
  std::printf("RESULT|%s|%s|%.4f|%.0f|%.1f|min %.4f max %.4f ms, %d runs%s%s\n",
              row.operation.c_str(), row.implementation.c_str(), row.stats.median_ms, row.bytes,
              gbs(row), row.stats.min_ms, row.stats.max_ms, row.stats.runs,
              row.note.empty() ? "" : "; ", row.note.c_str());
  std::fflush(stdout);
}

void Report::note(const std::string &line) {
  std::printf("INFO|%s\n", line.c_str());
  std::fflush(stdout);
}

void Report::print_table(double ceiling_gbs, const std::string &ceiling_name) const {
  std::printf("\n%-34s %-28s %10s %9s %8s\n", "operation", "implementation", "median ms", "GB/s",
              ceiling_gbs > 0 ? "% ceil" : "");
  for (const Row &r : rows_) {
    const double g = gbs(r);
    char pct[16] = "";
    if (ceiling_gbs > 0 && g > 0) std::snprintf(pct, sizeof pct, "%.0f%%", 100.0 * g / ceiling_gbs);
    std::printf("%-34s %-28s %10.4f %9.1f %8s\n", r.operation.c_str(), r.implementation.c_str(),
                r.stats.median_ms, g, pct);
  }
  if (ceiling_gbs > 0)
    std::printf("ceiling: %s = %.1f GB/s (bytes read + written)\n", ceiling_name.c_str(),
                ceiling_gbs);
  std::fflush(stdout);
}

Row measure_d2d_copy(const Options &opt, const cudadiff::Context &ctx, size_t bytes,
                     const std::string &label) {
  ctx.activate();
  // Rotate among enough buffers that the copies do not run out of L2 cache.
  const int n = bytes >= (256u << 20) ? 1 : std::max(2, opt.frames);
  std::vector<cudadiff::DeviceBuffer> src, dst;
  for (int i = 0; i < n; ++i) {
    src.emplace_back(bytes);
    dst.emplace_back(bytes);
    cudadiff::fill_bytes_async(src.back().data(), static_cast<uint8_t>(17 * i + 1), bytes, ctx);
  }
  Options o = opt;
  if (bytes >= (256u << 20)) o.runs = std::min(opt.runs, 50);
  Row r;
  r.operation = label;
  r.implementation = "cudaMemcpyAsync D2D";
  r.bytes = 2.0 * static_cast<double>(bytes);
  r.stats = time_device(o, ctx, [&](int i) {
    cudadiff::copy_bytes_async(dst[i % n].data(), src[i % n].data(), bytes, ctx);
  });
  return r;
}

static Row measure_host_copy(const Options &opt, const cudadiff::Context &ctx, size_t bytes,
                             bool to_device) {
  ctx.activate();
  const int n = std::max(2, opt.frames);
  std::vector<cudadiff::PinnedBuffer> host;
  std::vector<cudadiff::DeviceBuffer> dev;
  for (int i = 0; i < n; ++i) {
    host.emplace_back(bytes);
    std::memset(host.back().data(), 31 * i + 7, bytes);
    dev.emplace_back(bytes);
  }
  Row r;
  r.operation = to_device ? "H2D copy 1 frame" : "D2H copy 1 frame";
  r.implementation = host[0].pinned() ? "cudaMemcpyAsync pinned" : "cudaMemcpyAsync pageable";
  r.bytes = static_cast<double>(bytes);
  r.stats = time_device(opt, ctx, [&](int i) {
    if (to_device)
      cudadiff::copy_bytes_async(dev[i % n].data(), host[i % n].data(), bytes, ctx);
    else
      cudadiff::copy_bytes_async(host[i % n].data(), dev[i % n].data(), bytes, ctx);
  });
  return r;
}

Row measure_h2d_copy(const Options &opt, const cudadiff::Context &ctx, size_t bytes) {
  return measure_host_copy(opt, ctx, bytes, true);
}

Row measure_d2h_copy(const Options &opt, const cudadiff::Context &ctx, size_t bytes) {
  return measure_host_copy(opt, ctx, bytes, false);
}

void describe_machine(Report &report, const cudadiff::Context *ctx) {
  report.note("cpu threads " + std::to_string(cudadiff::cpu_threads()) + " (hardware " +
              std::to_string(std::thread::hardware_concurrency()) + ")");
  if (ctx && ctx->is_cuda()) {
    const cudadiff::DeviceInfo &d = ctx->gpu();
    report.note("device " + d.name + " cc " + std::to_string(d.cc_major) + "." +
                std::to_string(d.cc_minor) + " " + std::to_string(d.multiprocessors) + " SMs");
  }
}

}  // namespace bench
