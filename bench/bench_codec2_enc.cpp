// The version 2 encoder at 1920x1080 BGR (default size; --format NAME for
// another format the codec takes, e.g. I420) on moving frames: a
// textured scene panning by 3 pixels per frame with a moving square and
// noise of +-2 (every block is coded; the mode decision sees temporal,
// t+s and spatial candidates), deltas at thresholds 0, 5, 10 and 20.
//
// Rows: encode() per delta frame, from the frame to the body in host memory,
// on the CPU (all threads) and on CUDA (the frame in device memory: what the
// element hands over when it gets CUDA memory); the body size; the
// host-to-device copy of one frame measured in the same run (what an
// upload from host memory would add). The project's goal for the CUDA
// encoder core: at most 0.25 ms per 1080p frame.
//
// --tiles BXxBY: tiles of BX x BY blocks instead of the default geometry
// (both backends; the body records it). --lane-samples N: one rANS lane per
// N coded sample components instead of the format's default (2048 for RGB,
// 1024 for YUV and gray; default_geometry()). --walk-bound P: lanes that
// bound a tile's walk to P percent of a full tile's instead of 100 (0: no
// bound; codec2_rules.h, bounded_lanes()).
//
// --clip FILE: real footage instead, the first --frames raw BGR frames of
// FILE (e.g. `ffmpeg -i clip.avi -f rawvideo -pix_fmt bgr24 clip.bgr`), of
// --clip-size WxH (default: --size) one after another, scaled to --size by
// nearest neighbour (with --format I420 or NV12 then converted to it);
// first every frame is encoded on both backends as one
// sequence (a keyframe every 30 frames) and the bodies compared, then the
// deltas timed. --random: frames of random bytes instead (independent).
// --threshold K: only that threshold (0..255) instead of 0, 5, 10 and 20
// (for a profiler that should see one threshold's kernels).
#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "codec_util.h"
#include "cudadiff/codec2.h"
#include "frames.h"

using namespace cudadiff;
using namespace cudadiff::codec2;

namespace {

// Each plane in its own resolution (subsampled planes see the picture at
// their samples' positions), each byte of a pixel as a channel.
void fill_moving(testing_util::HostFrame &f, int t, std::mt19937 &gen) {
  const VideoFormat fmt = f.view.format;
  const FormatInfo &fi = format_info(fmt);
  const int w = f.view.width;
  std::uniform_int_distribution<int> noise(-2, 2);
  for (int p = 0; p < fi.n_planes; ++p) {
    const int ps = fi.pixel_stride[p], sx = fi.w_sub[p], sy = fi.h_sub[p];
    const int pw = plane_width(fmt, p, w), ph = plane_height(fmt, p, f.view.height);
    for (int py = 0; py < ph; ++py) {
      uint8_t *row = f.view.row(p, py);
      const int y = py << sy;
      for (int px = 0; px < pw; ++px) {
        const int x = px << sx;
        const int u = x + 3 * t;
        const int sq = (x - 8 * t) % w;
        const bool in_square = sq >= 200 && sq < 360 && y >= 400 && y < 560;
        for (int c = 0; c < ps; ++c) {
          int v = 40 + (u * (c + 1) / 5 + y / 3) % 120 + ((u / 37 + y / 29) % 2) * 60;
          if (in_square) v = 230 - c * 30;
          v += noise(gen);
          row[ps * px + c] = uint8_t(std::clamp(v, 0, 255));
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char **argv) {
  bench::Options opt = bench::parse_options(
      argc, argv,
      "[--format NAME] [--clip FILE [--clip-size WxH] | --random] [--tiles BXxBY] "
      "[--lane-samples N] [--walk-bound P] [--threshold K]");
  std::string clip;
  VideoFormat fmt = VideoFormat::BGR;
  const int w = opt.width, h = opt.height;
  int clip_w = w, clip_h = h;
  for (size_t i = 0; i + 1 < opt.positional.size(); ++i)
    if (bench::format_option(opt.positional[i], opt.positional[i + 1], fmt) < 0) return 2;
  Geometry geometry = default_geometry(fmt, w, h);
  for (size_t i = 0; i + 1 < opt.positional.size(); ++i) {
    if (bench::clip_option(opt.positional[i], opt.positional[i + 1], clip, clip_w, clip_h) < 0)
      return 2;
    if (bench::geometry_option(opt.positional[i], opt.positional[i + 1], geometry) < 0) return 2;
  }
  if (bench::check_clip_format(clip, fmt) < 0) return 2;
  std::vector<int> ks = {0, 5, 10, 20};  // --threshold K: that one alone
  if (bench::threshold_option(opt.positional, ks) < 0) return 2;
  bool random = false;
  if (bench::random_option(opt.positional, clip, random) < 0) return 2;
  const size_t n = frame_size_packed(fmt, w, h);
  const std::string size = std::to_string(w) + "x" + std::to_string(h);
  bench::Report report;
  std::mt19937 gen(testing_util::test_seed());
  std::vector<testing_util::HostFrame> in;
  if (!clip.empty()) {
    for (const std::vector<uint8_t> &bytes :
         bench::read_scaled_clip(clip, clip_w, clip_h, w, h, std::max(2, opt.frames))) {
      testing_util::HostFrame fr(fmt, w, h);
      bench::clip_frame_to(bytes, fr.view);
      in.push_back(std::move(fr));
    }
    if (in.size() < 2) {
      std::fprintf(stderr, "%s: fewer than 2 frames of %dx%d BGR\n", clip.c_str(), clip_w, clip_h);
      return 2;
    }
    report.note(clip + ": " + std::to_string(in.size()) + " frames of " + std::to_string(clip_w) +
                "x" + std::to_string(clip_h) + " scaled to " + size);
  } else {
    for (int t = 0; t < std::max(2, opt.frames); ++t) {
      in.emplace_back(fmt, w, h);
      if (random)
        testing_util::fill_random(in.back(), gen);
      else
        fill_moving(in.back(), t, gen);
    }
    if (random) report.note("frames of random bytes");
  }
  const int frames = int(in.size());

  std::unique_ptr<Context> gpu;
  std::string why;
  if (opt.cuda && device_count(&why) > 0) gpu = Context::cuda(0);
  bench::describe_machine(report, gpu.get());
  report.note(std::string("format ") + format_name(fmt) + ", " + size);
  report.note("tiles of " + std::to_string(geometry.tile_bx) + "x" +
              std::to_string(geometry.tile_by) + " blocks, a lane per " +
              std::to_string(geometry.lane_samples) + " coded sample components, walk bound " +
              std::to_string(geometry.walk_bound) + " %");

  // Frame i of the timed run is delta i + 1 of a sequence that started with
  // a keyframe of frame 0 (untimed).
  bench::Options run = opt;
  run.runs = std::min(opt.runs, 30);
  run.warmup = std::min(opt.warmup, 3);
  run.frames = frames;

  if (opt.cpu) {
    auto cpu = Context::cpu();
    for (int k : ks) {
      auto enc = Encoder::create(*cpu, fmt, w, h, &geometry);
      HostBytes body;
      enc->encode(in[0].view, k, true, body);
      size_t bytes = 0;
      int count = 0;
      bench::Row r{"codec2 encode delta " + size + " k=" + std::to_string(k),
                   "cpu " + std::to_string(cpu_threads()) + " threads",
                   {},
                   double(n),
                   ""};
      r.stats = bench::time_host(run, [&](int i) {
        enc->encode(in[(i + 1) % frames].view, k, false, body);
        bytes += body.size();
        ++count;
      });
      r.note = "body " + std::to_string(bytes / std::max(count, 1)) + " bytes";
      report.add(r);
    }
  }

  if (!gpu) {
    report.note("no CUDA device (" + why + "): CUDA measurements skipped");
    report.print_table();
    return 77;
  }
  report.add(bench::measure_h2d_copy(opt, *gpu, n));

  std::vector<DeviceBuffer> dev;
  for (int t = 0; t < frames; ++t) {
    dev.emplace_back(n);
    copy_to_device(in[t].view, packed_view(fmt, w, h, dev.back().data()), *gpu);
  }
  gpu->synchronize();
  auto view = [&](int t) { return packed_view(fmt, w, h, dev[t % frames].data()); };

  for (int k : ks) {
    // Correctness first: the first deltas (every frame of a clip) give the
    // CPU's bodies.
    {
      auto cpu = Context::cpu();
      auto cenc = Encoder::create(*cpu, fmt, w, h, &geometry);
      auto genc = Encoder::create(*gpu, fmt, w, h, &geometry);
      HostBytes cb, gb;
      const int checked = clip.empty() ? std::min(frames, 3) : frames;
      for (int t = 0; t < checked; ++t) {
        cenc->encode(in[t].view, k, t % 30 == 0, cb);
        genc->encode(view(t), k, t % 30 == 0, gb);
        if (cb.size() != gb.size() || !std::equal(cb.data(), cb.data() + cb.size(), gb.data())) {
          std::printf("ERROR: CUDA encoder disagrees with the CPU at k=%d frame %d\n", k, t);
          return 1;
        }
      }
      report.note("k=" + std::to_string(k) + ": " + std::to_string(checked) +
                  " frames, CUDA bodies identical to the CPU's");
    }
    auto enc = Encoder::create(*gpu, fmt, w, h, &geometry);
    HostBytes body;
    enc->encode(view(0), k, true, body);
    size_t bytes = 0;
    int count = 0;
    bench::Row r{"codec2 encode delta " + size + " k=" + std::to_string(k),
                 "cuda (device frame)",
                 {},
                 double(n),
                 ""};
    r.stats = bench::time_host(run, [&](int i) {
      enc->encode(view(i + 1), k, false, body);
      bytes += body.size();
      ++count;
    });
    r.note = "body " + std::to_string(bytes / std::max(count, 1)) + " bytes";
    report.add(r);

    // Two frames in flight (submit(), then finish() of the one before) up
    // to Encoder::kMaxInFlight (as cudadiffenc keeps them): the time per
    // frame of a run of 40 deltas, five runs (after one).
    for (int depth = 2; depth <= Encoder::kMaxInFlight; ++depth) {
      enc->encode(view(0), k, true, body);
      const int batch = 40;
      bench::Options batches = run;
      batches.runs = 5;
      batches.warmup = 1;
      bench::Row f{"codec2 encode delta " + size + " k=" + std::to_string(k),
                   "cuda, " + std::to_string(depth) + " frames in flight",
                   {},
                   double(n),
                   "per frame of 40 deltas, 5 runs"};
      f.stats = bench::time_host(batches, [&](int) {
        for (int i = 0; i < batch; ++i) {
          enc->submit(view(i + 1), k, false);
          if (enc->frames_in_flight() == depth) enc->finish(body);
        }
        while (enc->frames_in_flight() > 0) enc->finish(body);
      });
      f.stats.median_ms /= batch;
      f.stats.min_ms /= batch;
      f.stats.max_ms /= batch;
      report.add(f);
    }
  }
  report.print_table();
  return 0;
}
