// codec2_decode: the version 2 CPU decoder alone, on bodies encoded once
// (so that a profiler or `perf stat` sees the decoder's work only).
//
//   codec2_decode --format BGR --size 1920x1080 --threshold K [--frames N]
//                 [--keyframe-interval 60] [--tiles BXxBY] [--lane-samples N]
//                 [--walk-bound P] [--lane-coding rans|tans] --encode RAW BODIES
//   codec2_decode --format BGR --size 1920x1080 [--threads T] [--repeat R]
//                 [--frames N] --decode BODIES
//
// --encode codes the raw frames of RAW (packed, as codec_eval reads them)
// with the CPU encoder and writes the bodies to BODIES (per body its size as
// 4 bytes little-endian, then its bytes). --decode decodes every body of
// BODIES (the first N) and writes the picture out (a packed frame), `repeat` passes with a
// fresh decoder each, and prints the fastest pass's wall time per frame and
// a hash (FNV-1a, 64 bits) of every decoded picture: two builds that print
// the same hash decoded the same pictures.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cudadiff/codec2.h"
#include "cudadiff/runtime.h"
#include "codec_util.h"

using namespace cudadiff;
using bench::fnv1a;
using bench::kFnvBasis;
using bench::parse_format;

namespace {

int usage() {
  std::fprintf(
      stderr,
      "usage: codec2_decode --format FMT --size WxH --threshold K [--frames N]\n"
      "                     [--keyframe-interval N] [--tiles BXxBY] [--lane-samples N]\n"
      "                     [--walk-bound P] [--lane-coding rans|tans] --encode RAW BODIES\n"
      "       codec2_decode --format FMT --size WxH [--threads T] [--repeat R]\n"
      "                     [--frames N] --decode BODIES\n");
  return 2;
}

}  // namespace

int main(int argc, char **argv) {
  std::string format_arg, size_arg, raw_path, bodies_path;
  int threshold = -1, keyint = 60, threads = 0, repeat = 3;
  long max_frames = -1;
  bool encode = false, decode = false;
  std::vector<std::pair<std::string, std::string>> geometry_args;  // applied once the size is known
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--format")
      format_arg = next();
    else if (a == "--size")
      size_arg = next();
    else if (a == "--threshold")
      threshold = std::atoi(next().c_str());
    else if (a == "--frames")
      max_frames = std::atol(next().c_str());
    else if (a == "--keyframe-interval")
      keyint = std::max(1, std::atoi(next().c_str()));
    else if (a == "--threads")
      threads = std::atoi(next().c_str());
    else if (a == "--repeat")
      repeat = std::max(1, std::atoi(next().c_str()));
    else if (a == "--tiles" || a == "--lane-samples" || a == "--walk-bound" || a == "--lane-coding")
      geometry_args.emplace_back(a, next());
    else if (a == "--encode") {
      encode = true;
      raw_path = next();
      bodies_path = next();
    } else if (a == "--decode") {
      decode = true;
      bodies_path = next();
    } else
      return usage();
  }
  const VideoFormat format = parse_format(format_arg);
  int width = 0, height = 0;
  if (format == VideoFormat::Unknown ||
      std::sscanf(size_arg.c_str(), "%dx%d", &width, &height) != 2 || width <= 0 || height <= 0 ||
      encode == decode || bodies_path.empty() || (encode && (raw_path.empty() || threshold < 0)))
    return usage();
  codec2::Geometry geometry = codec2::default_geometry(format, width, height);
  for (const auto &[option, value] : geometry_args)
    if (bench::geometry_option(option, value, geometry) <= 0) return usage();
  set_cpu_threads(threads);
  auto ctx = Context::cpu();
  const size_t frame_bytes = frame_size_packed(format, width, height);

  if (encode) {
    FILE *in = std::fopen(raw_path.c_str(), "rb");
    FILE *out = std::fopen(bodies_path.c_str(), "wb");
    if (!in || !out) {
      std::perror(!in ? raw_path.c_str() : bodies_path.c_str());
      return 1;
    }
    auto enc = codec2::Encoder::create(*ctx, format, width, height, &geometry);
    std::vector<uint8_t> frame(frame_bytes);
    HostBytes body;
    long n = 0;
    for (; max_frames < 0 || n < max_frames; ++n) {
      if (std::fread(frame.data(), 1, frame_bytes, in) != frame_bytes) break;
      enc->encode(packed_view(format, width, height, frame.data()), threshold, n % keyint == 0,
                  body);
      const uint32_t size = uint32_t(body.size());
      const uint8_t size_bytes[4] = {uint8_t(size), uint8_t(size >> 8), uint8_t(size >> 16),
                                     uint8_t(size >> 24)};
      std::fwrite(size_bytes, 1, 4, out);
      std::fwrite(body.data(), 1, body.size(), out);
    }
    std::fclose(in);
    if (std::fclose(out) != 0) {
      std::perror(bodies_path.c_str());
      return 1;
    }
    std::printf("%ld bodies written\n", n);
    return 0;
  }

  std::vector<std::vector<uint8_t>> bodies;
  FILE *in = std::fopen(bodies_path.c_str(), "rb");
  if (!in) {
    std::perror(bodies_path.c_str());
    return 1;
  }
  while (max_frames < 0 || long(bodies.size()) < max_frames) {
    uint8_t size_bytes[4];
    if (std::fread(size_bytes, 1, 4, in) != 4) break;
    const size_t size = size_t(size_bytes[0]) | size_t(size_bytes[1]) << 8 |
                        size_t(size_bytes[2]) << 16 | size_t(size_bytes[3]) << 24;
    std::vector<uint8_t> body(size);
    if (std::fread(body.data(), 1, size, in) != size) break;
    bodies.push_back(std::move(body));
  }
  std::fclose(in);
  if (bodies.empty()) {
    std::fprintf(stderr, "no body in %s\n", bodies_path.c_str());
    return 1;
  }
  std::vector<uint8_t> picture(frame_bytes);
  const FrameView view = packed_view(format, width, height, picture.data());
  double best_ms = 1e300;
  uint64_t hash = kFnvBasis;
  for (int rep = 0; rep < repeat; ++rep) {
    auto dec = codec2::Decoder::create(*ctx, format, width, height);
    std::string error;
    double pass_ms = 0;
    for (size_t i = 0; i < bodies.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      if (!dec->decode(bodies[i].data(), bodies[i].size(), &error)) {
        std::fprintf(stderr, "frame %zu: decode failed: %s\n", i, error.c_str());
        return 1;
      }
      dec->write_frame(view);
      pass_ms +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (rep == 0) hash = fnv1a(hash, picture.data(), frame_bytes);
    }
    best_ms = std::min(best_ms, pass_ms / double(bodies.size()));
  }
  std::printf(
      "%zu frames, %d threads: %.2f ms per frame (fastest of %d passes), pictures %016llx\n",
      bodies.size(), cpu_threads(), best_ms, repeat, (unsigned long long)hash);
  return 0;
}
