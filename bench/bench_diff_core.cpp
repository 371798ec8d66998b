// The difference codec's core at 1920x1080 BGR (default), on the frames the
// peer benchmark of docs/performance.md used: B = A + noise within
// +-10 everywhere, and a 480x259 rectangle XOR 0x80, so exactly 5.996 % of
// the bytes exceed the threshold of 20.
//
// Encoder: CPU 1 thread and all threads; CUDA kernels only (device-resident
// core: masks, scan, compaction, bitmap; the body stays on the device); CUDA
// delta() as the element calls it (kernels + totals + body to pinned host
// memory, two synchronisations); the element's work per frame from a pinned
// frame (upload + delta()). Decoder: CPU and CUDA from a host body to a host
// frame. Ceilings measured in the same run: H2D of one frame, D2D copies.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "cudadiff/diff.h"
#include "frames.h"

using namespace cudadiff;
using namespace cudadiff::diff;

namespace {

void make_pair(const testing_util::HostFrame &a, testing_util::HostFrame &b, std::mt19937 &gen) {
  const int w = a.view.width, h = a.view.height, ps = format_info(a.view.format).pixel_stride[0];
  const int rw = std::min(w, 480), rh = std::min(h, 259);
  const int rx = int(gen() % uint32_t(w - rw + 1)), ry = int(gen() % uint32_t(h - rh + 1));
  for (int y = 0; y < h; ++y) {
    const uint8_t *pa = a.view.row(0, y);
    uint8_t *pb = b.view.row(0, y);
    for (int x = 0; x < w * ps; ++x) {
      const int v = int(pa[x]) + int(gen() % 21) - 10;
      pb[x] = uint8_t(std::clamp(v, 0, 255));
    }
    if (y >= ry && y < ry + rh)
      for (int x = rx * ps; x < (rx + rw) * ps; ++x) pb[x] = uint8_t(pa[x] ^ 0x80);
  }
}

}  // namespace

int main(int argc, char **argv) {
  bench::Options opt = bench::parse_options(argc, argv, "[--threshold T]");
  int threshold = 20;
  for (size_t i = 0; i + 1 < opt.positional.size(); ++i)
    if (opt.positional[i] == "--threshold") threshold = std::atoi(opt.positional[i + 1].c_str());
  const int w = opt.width, h = opt.height;
  const VideoFormat fmt = VideoFormat::BGR;
  const size_t n = frame_size_packed(fmt, w, h);
  const std::string size = std::to_string(w) + "x" + std::to_string(h);
  bench::Report report;

  std::mt19937 gen(testing_util::test_seed());
  std::vector<testing_util::HostFrame> a, b;
  for (int k = 0; k < opt.frames; ++k) {
    a.emplace_back(fmt, w, h);
    b.emplace_back(fmt, w, h);
    testing_util::fill_random(a.back(), gen);
    make_pair(a.back(), b.back(), gen);
  }

  std::unique_ptr<Context> gpu;
  std::string why;
  if (opt.cuda && device_count(&why) > 0) gpu = Context::cuda(0);
  bench::describe_machine(report, gpu.get());

  // The counts every implementation must reproduce (and the body size).
  DeltaSummary expected;
  size_t body_size = 0;
  {
    auto cpu = Context::cpu();
    auto enc = DiffEncoder::create(*cpu, fmt, w, h);
    HostBytes body;
    enc->keyframe(a[0].view, body);
    expected = enc->delta(b[0].view, threshold, ValueMode::Values, body);
    body_size = body.size();
    char line[200];
    std::snprintf(
        line, sizeof line,
        "pair 0: %llu changed bytes (%.3f %%), %llu blocks, body %zu bytes (report's layout "
        "%llu bytes)",
        (unsigned long long)expected.changed_bytes, 100.0 * expected.changed_bytes / n,
        (unsigned long long)expected.changed_blocks, body_size,
        (unsigned long long)(5 * expected.changed_bytes));
    report.note(line);
  }
  // Bytes of the core: read current and reference, write the body.
  const double core_bytes = 2.0 * n + double(body_size);

  if (opt.cpu) {
    auto cpu = Context::cpu();
    auto enc = DiffEncoder::create(*cpu, fmt, w, h);
    auto dec = DiffDecoder::create(*cpu, fmt, w, h);
    HostBytes body, key_body;
    bench::Options cpu_opt = opt;
    cpu_opt.runs = std::min(opt.runs, 40);
    cpu_opt.warmup = 2;
    for (int threads : {1, 0}) {
      set_cpu_threads(threads);
      const std::string impl =
          threads == 1 ? "cpu 1 thread" : "cpu " + std::to_string(cpu_threads()) + " threads";
      bench::Row r{"diff encode " + size, impl, {}, core_bytes, "keyframe reset untimed"};
      r.stats = bench::time_host_with_setup(
          cpu_opt, [&](int i) { enc->keyframe(a[i % opt.frames].view, key_body); },
          [&](int i) { enc->delta(b[i % opt.frames].view, threshold, ValueMode::Values, body); });
      report.add(r);
    }
    // Decoder: apply pair 0's body to its keyframe and write the frame.
    enc->keyframe(a[0].view, key_body);
    enc->delta(b[0].view, threshold, ValueMode::Values, body);
    DeltaIndex idx;
    std::string err;
    parse_delta(body.data(), body.size(), n, &idx, &err);
    testing_util::HostFrame out(fmt, w, h);
    for (int threads : {1, 0}) {
      set_cpu_threads(threads);
      const std::string impl =
          threads == 1 ? "cpu 1 thread" : "cpu " + std::to_string(cpu_threads()) + " threads";
      bench::Row r{"diff decode + write frame " + size,
                   impl,
                   {},
                   double(body.size()) + 2.0 * n,
                   "keyframe reset untimed"};
      r.stats = bench::time_host_with_setup(
          cpu_opt, [&](int) { dec->keyframe(key_body.data()); },
          [&](int) {
            dec->delta(body.data(), idx, ValueMode::Values);
            dec->write_frame(out.view);
          });
      report.add(r);
    }
    set_cpu_threads(0);
  }

  if (!gpu) {
    report.note("no CUDA device (" + why + "): CUDA measurements skipped");
    report.print_table();
    return 77;
  }

  const bench::Row d2d = bench::measure_d2d_copy(opt, *gpu, size_t(1) << 30, "D2D copy 1 GiB");
  report.add(d2d);
  const bench::Row h2d = bench::measure_h2d_copy(opt, *gpu, n);
  report.add(h2d);
  report.add(bench::measure_d2h_copy(opt, *gpu, n));

  std::vector<DeviceBuffer> dev_a, dev_b;
  for (int k = 0; k < opt.frames; ++k) {
    dev_a.emplace_back(n);
    dev_b.emplace_back(n);
    copy_to_device(a[k].view, packed_view(fmt, w, h, dev_a.back().data()), *gpu);
    copy_to_device(b[k].view, packed_view(fmt, w, h, dev_b.back().data()), *gpu);
  }
  gpu->synchronize();
  auto view_a = [&](int i) { return packed_view(fmt, w, h, dev_a[i % opt.frames].data()); };
  auto view_b = [&](int i) { return packed_view(fmt, w, h, dev_b[i % opt.frames].data()); };

  auto enc = DiffEncoder::create(*gpu, fmt, w, h);
  HostBytes body, key_body;
  {  // correctness against the CPU on pair 0 before timing
    enc->keyframe(view_a(0), key_body);
    const DeltaSummary s = enc->delta(view_b(0), threshold, ValueMode::Values, body);
    if (s.changed_bytes != expected.changed_bytes || body.size() != body_size) {
      std::printf("ERROR: CUDA encoder disagrees with the CPU (%llu vs %llu bytes)\n",
                  (unsigned long long)s.changed_bytes, (unsigned long long)expected.changed_bytes);
      return 1;
    }
  }
  const auto reset = [&](int i) { enc->keyframe(view_a(i), key_body); };
  bench::Row r{
      "diff encode " + size,
      "cuda kernels (device-resident)",
      {},
      core_bytes,
      "masks with tile scans + compaction (bitmap, masks, values); body stays on the device"};
  r.stats = bench::time_device(
      opt, *gpu, [&](int i) { enc->queue_delta(view_b(i), threshold, ValueMode::Values); }, reset);
  report.add(r);
  const double core_ms = r.stats.median_ms;

  r = {"diff encode " + size,
       "cuda delta() to pinned host",
       {},
       core_bytes,
       "kernels + 12 B totals D2H + sync + body D2H + sync"};
  r.stats = bench::time_device(
      opt, *gpu, [&](int i) { enc->delta(view_b(i), threshold, ValueMode::Values, body); }, reset);
  report.add(r);

  // The element's work per frame: the input frame in pinned host memory
  // (strided as a GstVideoFrame would be), delta_host(): sliced upload
  // overlapped with the comparison, compaction, body to pinned host memory.
  std::vector<HostBytes> pinned_b;
  for (int k = 0; k < opt.frames; ++k) {
    pinned_b.emplace_back(n);
    copy_frame_host(b[k].view, packed_view(fmt, w, h, pinned_b.back().data()));
  }
  r = {"diff encode " + size,
       "cuda delta_host from pinned",
       {},
       double(n) + core_bytes,
       "sliced H2D overlapped with masks + compaction + body D2H; compare with H2D alone"};
  r.stats = bench::time_device(
      opt, *gpu,
      [&](int i) {
        enc->delta_host(packed_view(fmt, w, h, pinned_b[i % opt.frames].data()), threshold,
                        ValueMode::Values, body);
      },
      reset);
  report.add(r);
  const double element_ms = r.stats.median_ms;

  // The same with frames in flight (cudadiffenc with a non-live upstream):
  // submit frame i+1, then collect frame i, so that frame i's body comes
  // back while frame i+1 crosses the bus. Wall clock over the run (the
  // frames overlap, so per-frame events do not apply); best of 5 runs.
  double in_flight_ms = 1e9;
  for (int run = 0; run < 5; ++run) {
    enc->keyframe_host(packed_view(fmt, w, h, pinned_b[0].data()), key_body);
    const int frames = std::max(opt.runs, 100);
    const auto t0 = std::chrono::steady_clock::now();
    enc->submit_delta_host(packed_view(fmt, w, h, pinned_b[1 % opt.frames].data()), threshold,
                           ValueMode::Values);
    for (int i = 1; i <= frames; ++i) {
      if (i < frames)
        enc->submit_delta_host(packed_view(fmt, w, h, pinned_b[(i + 1) % opt.frames].data()),
                               threshold, ValueMode::Values);
      enc->collect_delta(body);
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
        frames;
    in_flight_ms = std::min(in_flight_ms, ms);
  }

  // Decoder: from a host body to a host frame (upload, apply, download).
  auto dec = DiffDecoder::create(*gpu, fmt, w, h);
  enc->keyframe(view_a(0), key_body);
  enc->delta(view_b(0), threshold, ValueMode::Values, body);
  DeltaIndex idx;
  std::string err;
  std::vector<SuperblockEntry> entries;  // listed while checking, as the element does
  parse_delta(body.data(), body.size(), n, &idx, &err, &entries);
  HostBytes out_pinned(n);
  const FrameView out_view = packed_view(fmt, w, h, out_pinned.data());
  r = {"diff decode + write frame " + size,
       "cuda to pinned frame",
       {},
       double(body.size()) + n,
       "body H2D + apply + frame D2H + sync"};
  r.stats = bench::time_device(
      opt, *gpu,
      [&](int) {
        dec->delta(body.data(), idx, ValueMode::Values);
        dec->write_frame(out_view);
      },
      [&](int) { dec->keyframe(key_body.data()); });
  report.add(r);
  const double decoder_ms = r.stats.median_ms;
  // Where the decoder's time goes (host clock): delta() with its upload and
  // apply kernel waited for, then write_frame() alone.
  r = {"diff decode: delta() + sync " + size, "cuda, host clock", {}, double(body.size()), ""};
  r.stats = bench::time_host_with_setup(
      opt, [&](int) { dec->keyframe(key_body.data()); },
      [&](int) {
        dec->delta(body.data(), idx, ValueMode::Values);
        gpu->synchronize();
      });
  report.add(r);
  r = {"diff decode: write_frame() " + size, "cuda, host clock", {}, double(n), ""};
  r.stats = bench::time_host_with_setup(
      opt,
      [&](int) {
        dec->keyframe(key_body.data());
        dec->delta(body.data(), idx, ValueMode::Values);
        gpu->synchronize();
      },
      [&](int) { dec->write_frame(out_view); });
  report.add(r);
  r = {"parse_delta " + size, "cpu 1 thread", {}, double(body.size()), "the reader's check"};
  r.stats = bench::time_host(
      opt, [&](int) { parse_delta(body.data(), body.size(), n, &idx, &err, &entries); });
  report.add(r);

  report.print_table(bench::gbs(d2d), "D2D copy 1 GiB");
  const double h2d_ms = h2d.stats.median_ms;
  std::printf("\nencoder core (kernels, device-resident): %.1f us per frame\n", core_ms * 1000);
  std::printf(
      "encoder from pinned frame: %.1f us = %.0f fps; H2D alone allows %.0f fps -> %.0f%%\n",
      element_ms * 1000, 1000 / element_ms, 1000 / h2d_ms, 100 * h2d_ms / element_ms);
  std::printf(
      "encoder from pinned frames, 2 in flight (submit/collect): %.1f us = %.0f fps -> %.0f%%\n",
      in_flight_ms * 1000, 1000 / in_flight_ms, 100 * h2d_ms / in_flight_ms);
  std::printf(
      "decoder to pinned frame: %.1f us = %.0f fps; D2H/H2D of a frame allows %.0f fps -> "
      "%.0f%%\n",
      decoder_ms * 1000, 1000 / decoder_ms, 1000 / h2d_ms, 100 * h2d_ms / decoder_ms);
  return 0;
}
