// Benchmark helpers: timing by host clock (CPU work) and CUDA events (device
// work), warm-up, median of many runs, rotation among several inputs, the
// copy-bandwidth ceilings measured in the same run, and one output format:
//   RESULT|operation|implementation|median ms|bytes moved|GB/s|note
// followed by a short human-readable table at the end.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cudadiff/runtime.h"

namespace bench {

struct Options {
  int runs = 200;   // timed runs per measurement (median reported)
  int warmup = 20;  // untimed runs first
  int frames = 8;   // distinct random inputs rotated
  int width = 1920;
  int height = 1080;
  bool cpu = true;   // run the CPU measurements
  bool cuda = true;  // run the CUDA measurements (when a device exists)
  std::vector<std::string> positional;
};

// --runs N --warmup N --frames N --size WxH --no-cpu --no-cuda; prints usage on --help.
Options parse_options(int argc, char **argv, const char *usage_extra = "");

struct Stats {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int runs = 0;
};

// fn(i) for i = 0.. ; rotate inputs with i % frames.
Stats time_host(const Options &opt, const std::function<void(int)> &fn);
// Each call of fn(i) queues work on ctx's stream; timed with events around it.
// setup(i), when given, runs before each call, untimed (e.g. resetting state).
Stats time_device(const Options &opt, const cudadiff::Context &ctx,
                  const std::function<void(int)> &fn,
                  const std::function<void(int)> &setup = nullptr);
// The host-clock variant with an untimed setup(i) before each timed fn(i).
Stats time_host_with_setup(const Options &opt, const std::function<void(int)> &setup,
                           const std::function<void(int)> &fn);

struct Row {
  std::string operation;
  std::string implementation;
  Stats stats;
  double bytes = 0;  // bytes read + written per run (0: not a bandwidth figure)
  std::string note;
};

class Report {
 public:
  void add(const Row &row);            // prints the RESULT line at once
  void note(const std::string &line);  // "INFO|..." line
  // The short table: one line per row, with GB/s and % of `ceiling_gbs` when given.
  void print_table(double ceiling_gbs = 0, const std::string &ceiling_name = "") const;
  const std::vector<Row> &rows() const { return rows_; }

 private:
  std::vector<Row> rows_;
};

inline double gbs(const Row &r) {
  return r.bytes > 0 ? r.bytes / (r.stats.median_ms * 1e6) : 0;
}

// Ceilings, measured like everything else (events, median, rotation):
// device-to-device cudaMemcpyAsync of `bytes` (bytes moved = 2 * bytes), and
// host-to-device / device-to-host from pinned memory.
Row measure_d2d_copy(const Options &opt, const cudadiff::Context &ctx, size_t bytes,
                     const std::string &label);
Row measure_h2d_copy(const Options &opt, const cudadiff::Context &ctx, size_t bytes);
Row measure_d2h_copy(const Options &opt, const cudadiff::Context &ctx, size_t bytes);

// Machine description lines (device name, CPU threads).
void describe_machine(Report &report, const cudadiff::Context *ctx);

}  // namespace bench
