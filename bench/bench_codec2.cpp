// The version 2 codec's decoder core at 1920x1080 BGR (default; --format
// NAME for another format the codec takes, e.g. I420): time per
// frame of Decoder::decode() from a body in pinned host memory to the
// picture (CPU: host memory; CUDA: device memory, where it stays), for
// k = 0, 5, 10, 20, on camera-like frames that pan, with a moving object
// and per-pixel noise that wanders (a random walk): a keyframe, then deltas.
// CUDA's time includes reading the body's header, tables and tile table on
// the host, copying the body to the device, the kernels and the one
// synchronisation. The H2D copy of one 1080p frame from pinned memory is
// measured in the same run as the ceiling (the copy a decoder on the host
// side would need to ship the frame to the GPU).
// --clip FILE [--clip-size WxH]: real footage instead, the first --frames
// raw BGR frames of FILE (of --clip-size, default --size, one after
// another) scaled to --size by nearest neighbour (with --format I420 or
// NV12 then converted to it). --random: frames of random bytes instead.
// --streams N (CUDA): also N decoders side by side, each on a Context of its
// own (a stream of its own) in a thread of its own, each decoding the same
// bodies over and over as a stream of its own would: the time per frame of
// all of them together (wall time over the frames decoded, keyframes
// included), beside one decoder's in the same loop: what several streams
// decoded by one GPU (one cudadiffdec each) get from it.
// CUDA also gets a row "2 in flight": the same bodies through submit() and
// finish() with up to Decoder::kMaxInFlight frames in flight (as cudadiffdec
// with frame-overlap), so that the host's part of a frame runs while the GPU
// decodes the one before: wall time per frame over --runs / --frames passes
// (at least one) of the bodies (keyframe included), after one pass of warm-up.
//   RESULT|codec2 decode|<impl> k=<k> <key|delta>|median ms|body bytes|0|note
//   RESULT|codec2 decode|cuda k=<k>, 2 in flight|ms per frame|...|note (the body sizes)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "codec_util.h"
#include "cudadiff/codec2.h"
#include "frames.h"

using namespace cudadiff;
using namespace cudadiff::codec2;

namespace {

// Frame t of the sequence: a panning textured picture, a moving object, and
// `walk` (per-byte noise that wanders by -1, 0, +1 each frame, within +-12).
// Each plane in its own resolution (subsampled planes see the picture at
// their samples' positions).
void make_frame(testing_util::HostFrame &f, int t, std::vector<int8_t> &walk, std::mt19937 &gen) {
  const VideoFormat fmt = f.view.format;
  const FormatInfo &fi = format_info(fmt);
  const int w = f.view.width, h = f.view.height;
  size_t at = 0;  // the plane's first byte in `walk`
  for (int p = 0; p < fi.n_planes; ++p) {
    const int ps = fi.pixel_stride[p], sx = fi.w_sub[p], sy = fi.h_sub[p];
    const int pw = plane_width(fmt, p, w), ph = plane_height(fmt, p, h);
    for (int y = 0; y < ph; ++y) {
      uint8_t *row = f.view.row(p, y);
      int8_t *wr = walk.data() + at + size_t(y) * pw * ps;
      for (int x = 0; x < pw * ps; ++x) {
        const int fx = (x / ps) << sx, fy = y << sy;  // the sample's place in the picture
        const int px = fx + 2 * t, py = fy + t, c = x % ps;
        int v = 70 + (px * 3 + py * 2) % 90 + ((px / 40 + py / 30) % 2) * 50 + c * 9;
        const int ox = (8 * t) % w, oy = (4 * t) % h;
        if (std::abs(fx - ox) < 60 && std::abs(fy - oy) < 40) v = 220 - (fx - ox);
        const int step = int(gen() % 3) - 1;
        wr[x] = int8_t(std::clamp(wr[x] + step, -12, 12));
        row[x] = uint8_t(std::clamp(v + wr[x], 0, 255));
      }
    }
    at += size_t(ph) * pw * ps;
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char **argv) {
  bench::Options opt = bench::parse_options(
      argc, argv,
      "[--format NAME] [--clip FILE [--clip-size WxH] | --random] [--tiles BXxBY] "
      "[--lane-samples N] [--walk-bound P] [--lane-coding rans|tans] [--streams N] "
      "[--threshold K]");
  // --tiles, --lane-samples, --walk-bound: another tile geometry than the
  // encoder's default (blocks of 16x16 per tile), more or fewer coded
  // samples per rANS lane, or another bound on the walk through a tile with
  // skipped blocks, to see how the decoder scales with tiles and lanes.
  // --lane-coding tans: bodies of tANS lanes (body flag 0x04; the rows'
  // notes say which).
  const int w = opt.width, h = opt.height;
  VideoFormat fmt = VideoFormat::BGR;
  std::string clip;
  int clip_w = w, clip_h = h;
  for (size_t i = 0; i + 1 < opt.positional.size(); ++i)
    if (bench::format_option(opt.positional[i], opt.positional[i + 1], fmt) < 0) return 2;
  const Geometry defaults = default_geometry(fmt, w, h);
  Geometry geometry = defaults;
  for (size_t i = 0; i + 1 < opt.positional.size(); ++i) {
    if (bench::clip_option(opt.positional[i], opt.positional[i + 1], clip, clip_w, clip_h) < 0)
      return 2;
    if (bench::geometry_option(opt.positional[i], opt.positional[i + 1], geometry) < 0) return 2;
  }
  if (bench::check_clip_format(clip, fmt) < 0) return 2;
  int streams = 0;
  for (size_t i = 0; i + 1 < opt.positional.size(); ++i)
    if (opt.positional[i] == "--streams") {
      streams = std::atoi(opt.positional[i + 1].c_str());
      if (streams < 1 || streams > 64) {
        std::fprintf(stderr, "--streams wants 1..64, not %s\n", opt.positional[i + 1].c_str());
        return 2;
      }
    }
  std::vector<int> ks = {0, 5, 10, 20};  // --threshold K: that one alone
  if (bench::threshold_option(opt.positional, ks) < 0) return 2;
  bool random = false;
  if (bench::random_option(opt.positional, clip, random) < 0) return 2;
  const size_t n = frame_size_packed(fmt, w, h);
  std::vector<std::vector<uint8_t>> clip_frames;
  if (!clip.empty()) {
    clip_frames = bench::read_scaled_clip(clip, clip_w, clip_h, w, h, std::max(2, opt.frames));
    if (clip_frames.size() < 2) {
      std::fprintf(stderr, "%s: fewer than 2 frames of %dx%d BGR\n", clip.c_str(), clip_w, clip_h);
      return 2;
    }
  }
  const int frames = clip.empty() ? std::max(2, opt.frames) : int(clip_frames.size());
  const int rounds = std::max(1, opt.runs / frames);
  bench::Report report;
  std::unique_ptr<Context> cpu = Context::cpu();
  std::unique_ptr<Context> gpu;
  std::string why;
  if (opt.cuda && device_count(&why) > 0) gpu = Context::cuda(0);
  bench::describe_machine(report, gpu.get());
  report.note(std::string("format ") + format_name(fmt) + ", " + std::to_string(w) + "x" +
              std::to_string(h));
  if (opt.cuda && !gpu) {
    std::printf("SKIP: no usable CUDA device (%s)\n", why.c_str());
    if (!opt.cpu) return 77;
  }

  std::mt19937 gen(testing_util::test_seed());
  std::vector<testing_util::HostFrame> input;
  std::vector<int8_t> walk(n, 0);
  for (int t = 0; t < frames; ++t) {
    input.emplace_back(fmt, w, h);
    if (random) {
      testing_util::fill_random(input.back(), gen);
    } else if (clip.empty()) {
      make_frame(input.back(), t, walk, gen);
    } else {
      bench::clip_frame_to(clip_frames[size_t(t)], input.back().view);
    }
  }
  if (random) report.note("frames of random bytes");
  if (!clip.empty())
    report.note(clip + ": " + std::to_string(frames) + " frames of " + std::to_string(clip_w) +
                "x" + std::to_string(clip_h) + " scaled to " + std::to_string(w) + "x" +
                std::to_string(h));

  // The rows' operation: the size, the format and the layout.
  const std::string operation =
      "codec2 decode " + std::to_string(w) + "x" + std::to_string(h) + " " + format_name(fmt) +
      ", tiles " + std::to_string(geometry.tile_bx) + "x" + std::to_string(geometry.tile_by) +
      (geometry.lane_samples != defaults.lane_samples
           ? ", " + std::to_string(geometry.lane_samples) + " per lane"
           : std::string()) +
      (geometry.walk_bound != defaults.walk_bound
           ? ", walk bound " + std::to_string(geometry.walk_bound) + " %"
           : std::string());
  for (int k : ks) {
    // The bodies: a keyframe, then deltas, in pinned host memory.
    auto enc = Encoder::create(*cpu, fmt, w, h, &geometry);
    std::vector<HostBytes> bodies(static_cast<size_t>(frames));
    size_t delta_bytes = 0;
    for (int t = 0; t < frames; ++t) {
      enc->encode(input[t].view, k, t == 0, bodies[t]);
      if (t > 0) delta_bytes += bodies[t].size();
    }
    const std::string sizes = "keyframe " + std::to_string(bodies[0].size()) + " B, deltas " +
                              std::to_string(delta_bytes / (frames - 1)) + " B on average";
    struct Impl {
      const char *name;
      const Context *ctx;
    };
    std::vector<Impl> impls;
    if (opt.cpu) impls.push_back({"cpu", cpu.get()});
    if (gpu) impls.push_back({"cuda", gpu.get()});
    for (const Impl &impl : impls) {
      auto dec = Decoder::create(*impl.ctx, fmt, w, h);
      std::vector<double> key_ms, delta_ms;
      std::string err;
      for (int r = 0; r < rounds + 1; ++r)  // the first round warms up
        for (int t = 0; t < frames; ++t) {
          const auto t0 = std::chrono::steady_clock::now();
          const bool ok = dec->decode(bodies[t].data(), bodies[t].size(), &err);
          const auto t1 = std::chrono::steady_clock::now();
          if (!ok) {
            std::fprintf(stderr, "decode failed: %s\n", err.c_str());
            return 1;
          }
          if (r == 0) continue;
          (t == 0 ? key_ms : delta_ms)
              .push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
      if (impl.ctx == gpu.get()) {
        // Frames in flight: one pass = the keyframe and the deltas in order.
        auto pass = [&](int passes) {
          for (int r = 0; r < passes; ++r)
            for (int t = 0; t < frames; ++t) {
              if (dec->frames_in_flight() == Decoder::kMaxInFlight && !dec->finish(&err))
                return false;
              if (!dec->submit(bodies[t].data(), bodies[t].size(), &err)) return false;
            }
          while (dec->frames_in_flight() > 0)
            if (!dec->finish(&err)) return false;
          return true;
        };
        if (!pass(1)) {
          std::fprintf(stderr, "decode failed: %s\n", err.c_str());
          return 1;
        }
        const auto t0 = std::chrono::steady_clock::now();
        const bool ok = pass(rounds);
        const auto t1 = std::chrono::steady_clock::now();
        if (!ok) {
          std::fprintf(stderr, "decode failed: %s\n", err.c_str());
          return 1;
        }
        bench::Row row;
        row.operation = operation;
        row.implementation = "cuda k=" + std::to_string(k) + ", " +
                             std::to_string(Decoder::kMaxInFlight) + " in flight";
        const double ms =
            std::chrono::duration<double, std::milli>(t1 - t0).count() / (double(rounds) * frames);
        row.stats.median_ms = row.stats.min_ms = row.stats.max_ms = ms;
        row.stats.runs = 1;
        row.note = "wall time per frame through submit()/finish() (" +
                   std::to_string(rounds * frames) + " frames, keyframes included); " + sizes;
        report.add(row);
      }
      if (streams > 0 && impl.ctx == gpu.get()) {
        // One decoder, then `streams` side by side, each decoding the bodies
        // `rounds` times after one warm-up pass; wall time per frame.
        for (int m : {1, streams}) {
          std::vector<std::unique_ptr<Context>> ctxs;
          std::vector<std::unique_ptr<Decoder>> decs;
          for (int i = 0; i < m; ++i) {
            ctxs.push_back(Context::cuda(0));
            decs.push_back(Decoder::create(*ctxs.back(), fmt, w, h));
          }
          std::vector<std::string> errs(static_cast<size_t>(m), std::string());
          auto pass = [&](int i, int passes) {
            for (int r = 0; r < passes; ++r)
              for (int t = 0; t < frames; ++t)
                if (!decs[size_t(i)]->decode(bodies[t].data(), bodies[t].size(), &errs[size_t(i)]))
                  return;
          };
          for (int i = 0; i < m; ++i) pass(i, 1);  // warm-up
          const auto t0 = std::chrono::steady_clock::now();
          std::vector<std::thread> threads;
          for (int i = 0; i < m; ++i) threads.emplace_back(pass, i, rounds);
          for (std::thread &th : threads) th.join();
          const auto t1 = std::chrono::steady_clock::now();
          for (const std::string &e : errs)
            if (!e.empty()) {
              std::fprintf(stderr, "decode failed: %s\n", e.c_str());
              return 1;
            }
          bench::Row row;
          row.operation = operation + ", side by side";
          row.implementation = "cuda k=" + std::to_string(k) + " " + std::to_string(m) +
                               (m == 1 ? " stream" : " streams");
          const double ms = std::chrono::duration<double, std::milli>(t1 - t0).count() /
                            (double(m) * rounds * frames);
          row.stats.median_ms = row.stats.min_ms = row.stats.max_ms = ms;
          row.stats.runs = 1;
          row.note = "wall time per frame of all streams together (" +
                     std::to_string(m * rounds * frames) + " frames, keyframes included)";
          report.add(row);
        }
      }
      for (int key = 1; key >= 0; --key) {
        bench::Row row;
        row.operation = operation;
        row.implementation =
            std::string(impl.name) + " k=" + std::to_string(k) + (key ? " keyframe" : " delta");
        const std::vector<double> &v = key ? key_ms : delta_ms;
        row.stats.median_ms = median(v);
        row.stats.min_ms = v.empty() ? 0 : *std::min_element(v.begin(), v.end());
        row.stats.max_ms = v.empty() ? 0 : *std::max_element(v.begin(), v.end());
        row.stats.runs = int(v.size());
        row.note = std::string("body in pinned host memory, picture in ") +
                   (gpu && impl.ctx == gpu.get() ? "device" : "host") + " memory; " +
                   (geometry.tans_lanes ? "tANS lanes; " : "") + sizes;
        report.add(row);
      }
    }
  }
  if (gpu) report.add(bench::measure_h2d_copy(opt, *gpu, n));
  if (streams > 0 && !gpu) std::fprintf(stderr, "--streams: no CUDA device, skipped\n");
  report.print_table();
  return 0;
}
