// codec_eval: bytes per frame, error and speed of the version 2 codec
// (cudadiff/codec2.h, CPU reference) on raw frames read from a file or stdin.
//
//   codec_eval --format BGR --size 768x576 --k 0,5,10,20 [--frames N]
//              [--keyframe-interval 60] [--threads T] [--repeat R] [--label NAME]
//              [--hash] [--steady] [--tiles BXxBY] [--lane-samples N] [--walk-bound P]
//              [--lane-coding rans|tans] FILE|-
//
// For each k: every frame is encoded (a keyframe every `keyframe-interval`
// frames, the element's default 60), decoded by a separate decoder, and
// compared with the input: maximum error per byte and PSNR over all bytes.
// Prints one line per k (also as a markdown row with --markdown). The times
// are CPU times per frame of this machine (indicative: other work disturbs them).
// --hash also prints, per k, a hash (FNV-1a, 64 bits) of every body and one of
// every decoded picture: two builds that print the same hashes wrote the same
// bytes (a check for optimisations that must not change the stream).
// --steady times the encoder as a stream runs it: one encoder for all
// `repeat` passes, a keyframe first (not timed), then only deltas, each pass
// walking the frames the other way (so that every delta is between
// neighbouring frames); the encoder time is then per delta, with the
// encoder's buffers already in use (a fresh encoder's first frames also pay
// for allocating and touching them).
// --tiles and --lane-samples encode with another tile geometry or another
// number of coded sample components per rANS lane than the default (10x8
// blocks, 2048): what a faster GPU decoder would cost in bytes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "cudadiff/codec2.h"
#include "cudadiff/runtime.h"
#include "codec_util.h"

using namespace cudadiff;
using bench::fnv1a;
using bench::kFnvBasis;
using bench::parse_format;

namespace {

std::vector<int> parse_list(const std::string &s) {
  std::vector<int> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = s.find(',', at);
    const std::string item =
        s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (!item.empty()) out.push_back(std::atoi(item.c_str()));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

// Wall time, or with --cpu-time the process's CPU time (less disturbed by
// other work on a shared machine; with one thread the same as wall time).
bool g_cpu_time = false;
double now_ms() {
  if (g_cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
  }
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

int usage() {
  std::fprintf(stderr,
               "usage: codec_eval --format FMT --size WxH [--k 0,5,10,20] [--frames N]\n"
               "                  [--keyframe-interval N] [--threads T] [--repeat R]\n"
               "                  [--label NAME] [--markdown] [--cpu-time] [--hash] [--steady]\n"
               "                  [--tiles BXxBY] [--lane-samples N] [--walk-bound P] "
               "[--lane-coding rans|tans] FILE|-\n");
  return 2;
}

}  // namespace

int main(int argc, char **argv) {
  std::string format_name_arg, size_arg, path, label;
  std::vector<int> ks = {0, 5, 10, 20};
  long max_frames = -1;
  int keyint = 60, threads = 0, repeat = 1;  // --repeat 0: sizes and errors only
  bool markdown = false, hash = false, steady = false;
  std::vector<std::string> geometry_args;  // option, value, ...
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--format")
      format_name_arg = next();
    else if (a == "--size")
      size_arg = next();
    else if (a == "--k")
      ks = parse_list(next());
    else if (a == "--frames")
      max_frames = std::atol(next().c_str());
    else if (a == "--keyframe-interval")
      keyint = std::atoi(next().c_str());
    else if (a == "--threads")
      threads = std::atoi(next().c_str());
    else if (a == "--repeat")
      repeat = std::max(0, std::atoi(next().c_str()));
    else if (a == "--label")
      label = next();
    else if (a == "--markdown")
      markdown = true;
    else if (a == "--cpu-time")
      g_cpu_time = true;
    else if (a == "--hash")
      hash = true;
    else if (a == "--steady")
      steady = true;
    else if (a == "--tiles" || a == "--lane-samples" || a == "--walk-bound" ||
             a == "--lane-coding") {
      geometry_args.push_back(a);
      geometry_args.push_back(next());
    } else if (!a.empty() && a[0] == '-' && a != "-")
      return usage();
    else
      path = a;
  }
  const VideoFormat format = parse_format(format_name_arg);
  int width = 0, height = 0;
  if (format == VideoFormat::Unknown ||
      std::sscanf(size_arg.c_str(), "%dx%d", &width, &height) != 2 || width <= 0 || height <= 0 ||
      path.empty() || ks.empty())
    return usage();
  if (keyint < 1) keyint = 1;
  set_cpu_threads(threads);

  // Read the frames.
  const size_t frame_bytes = frame_size_packed(format, width, height);
  FILE *f = path == "-" ? stdin : std::fopen(path.c_str(), "rb");
  if (!f) {
    std::perror(path.c_str());
    return 1;
  }
  std::vector<std::vector<uint8_t>> frames;
  for (;;) {
    if (max_frames >= 0 && long(frames.size()) >= max_frames) break;
    std::vector<uint8_t> buf(frame_bytes);
    if (std::fread(buf.data(), 1, frame_bytes, f) != frame_bytes) break;
    frames.push_back(std::move(buf));
  }
  if (f != stdin) std::fclose(f);
  if (frames.empty()) {
    std::fprintf(stderr, "no complete frame of %zu bytes in %s\n", frame_bytes, path.c_str());
    return 1;
  }

  auto ctx = Context::cpu();
  codec2::Geometry g = codec2::default_geometry(format, width, height);
  for (size_t i = 0; i + 1 < geometry_args.size(); i += 2)
    if (bench::geometry_option(geometry_args[i], geometry_args[i + 1], g) < 0) return 2;
  if (!markdown)
    std::printf("%s %s %dx%d, %zu frames, keyframe every %d, tiles %dx%d blocks, %d threads\n",
                label.c_str(), format_name(format), width, height, frames.size(), keyint, g.tile_bx,
                g.tile_by, cpu_threads());
  for (int k : ks) {
    // Times: the fastest of the `repeat` passes over all frames, per frame
    // (the minimum is the least disturbed by other work on the machine).
    double enc_ms = 1e300, dec_ms = 1e300;
    size_t total = 0, key_total = 0, keys = 0;
    int max_err = 0;
    double sq = 0;
    uint64_t blocks[4] = {0, 0, 0, 0};
    size_t model = 0, table = 0;
    bool mismatch = false;
    std::string error;
    uint64_t body_hash = kFnvBasis, picture_hash = kFnvBasis;
    // Encode every frame once (checking each body with a decoder that follows
    // the encoder), then time the encoder and the decoder `repeat` times more
    // on the same frames and bodies (a fresh encoder and decoder each time).
    std::vector<std::vector<uint8_t>> bodies(frames.size());
    for (int rep = 0; rep <= repeat; ++rep) {
      auto enc = codec2::Encoder::create(*ctx, format, width, height, &g);
      HostBytes body;
      double pass_ms = 0;
      for (size_t i = 0; i < frames.size(); ++i) {
        const FrameView in = packed_view(format, width, height, frames[i].data());
        const bool key = i % size_t(keyint) == 0;
        const double t0 = now_ms();
        const codec2::FrameStats st = enc->encode(in, k, key, body);
        if (rep > 0) {
          pass_ms += now_ms() - t0;
          continue;
        }
        bodies[i].assign(body.data(), body.data() + body.size());
        const uint8_t size_bytes[4] = {uint8_t(body.size()), uint8_t(body.size() >> 8),
                                       uint8_t(body.size() >> 16), uint8_t(body.size() >> 24)};
        body_hash = fnv1a(body_hash, size_bytes, 4);
        body_hash = fnv1a(body_hash, body.data(), body.size());
        total += body.size();
        if (key) {
          key_total += body.size();
          keys++;
        }
        model += st.model_bytes;
        table += st.table_bytes;
        for (int m = 0; m < 4; ++m) blocks[m] += st.blocks[m];
      }
      if (rep > 0) enc_ms = std::min(enc_ms, pass_ms / double(frames.size()));
      if (steady) break;  // the passes below time the encoder instead
    }
    if (steady && repeat > 0 && frames.size() > 1) {
      auto enc = codec2::Encoder::create(*ctx, format, width, height, &g);
      HostBytes body;
      enc->encode(packed_view(format, width, height, frames[0].data()), k, true, body);
      const size_t n = frames.size();
      enc_ms = 1e300;
      for (int rep = 0; rep < repeat; ++rep) {
        double pass_ms = 0;
        for (size_t j = 1; j < n; ++j) {
          const size_t i = rep % 2 == 0 ? j : n - 1 - j;
          const double t0 = now_ms();
          enc->encode(packed_view(format, width, height, frames[i].data()), k, false, body);
          pass_ms += now_ms() - t0;
        }
        enc_ms = std::min(enc_ms, pass_ms / double(n - 1));
      }
    }
    {
      // Decode once, checking against the input (and against the encoder's
      // reference through the decoded picture: every byte within k).
      auto dec = codec2::Decoder::create(*ctx, format, width, height);
      auto enc = codec2::Encoder::create(*ctx, format, width, height, &g);
      HostBytes out, ref, body;
      for (size_t i = 0; i < frames.size(); ++i) {
        if (!dec->decode(bodies[i].data(), bodies[i].size(), &error)) {
          std::fprintf(stderr, "k=%d frame %zu: decode failed: %s\n", k, i, error.c_str());
          return 1;
        }
        enc->encode(packed_view(format, width, height, frames[i].data()), k,
                    i % size_t(keyint) == 0, body);
        dec->read_reference(out);
        enc->read_reference(ref);
        picture_hash = fnv1a(picture_hash, out.data(), frame_bytes);
        if (std::memcmp(out.data(), ref.data(), frame_bytes) != 0) mismatch = true;
        for (size_t b = 0; b < frame_bytes; ++b) {
          const int d = int(out.data()[b]) - int(frames[i][b]);
          max_err = std::max(max_err, std::abs(d));
          sq += double(d) * d;
        }
      }
    }
    // The decoder's time includes writing the picture out (a packed frame).
    std::vector<uint8_t> picture(frame_bytes);
    const FrameView out_view = packed_view(format, width, height, picture.data());
    for (int rep = 0; rep < repeat; ++rep) {
      auto dec = codec2::Decoder::create(*ctx, format, width, height);
      double pass_ms = 0;
      for (size_t i = 0; i < frames.size(); ++i) {
        const double t0 = now_ms();
        dec->decode(bodies[i].data(), bodies[i].size(), &error);
        dec->write_frame(out_view);
        pass_ms += now_ms() - t0;
      }
      dec_ms = std::min(dec_ms, pass_ms / double(frames.size()));
    }
    const double n = double(frames.size());
    const double mse = sq / (n * double(frame_bytes));
    const double psnr = mse > 0 ? 10 * std::log10(255.0 * 255.0 / mse) : 99.0;
    const double per = 1;
    if (repeat == 0) enc_ms = dec_ms = 0;  // not timed
    if (markdown) {
      std::printf("| %s | %s | %d | %.0f | %d | %.2f | %.2f | %.2f |\n", label.c_str(),
                  format_name(format), k, double(total) / n, max_err, psnr, enc_ms / per,
                  dec_ms / per);
    } else {
      const uint64_t nb = blocks[0] + blocks[1] + blocks[2] + blocks[3];
      std::printf(
          "k=%-3d bytes/frame %9.0f (keyframes %9.0f, model %6.0f, tile table %4.0f) max_err %d "
          "psnr %6.2f  enc %7.2f ms  dec %7.2f ms  blocks skip/T/TS/S %.2f/%.2f/%.2f/%.2f%s\n",
          k, double(total) / n, keys ? double(key_total) / double(keys) : 0.0, double(model) / n,
          double(table) / n, max_err, psnr, enc_ms / per, dec_ms / per,
          nb ? double(blocks[0]) / nb : 0, nb ? double(blocks[1]) / nb : 0,
          nb ? double(blocks[2]) / nb : 0, nb ? double(blocks[3]) / nb : 0,
          mismatch ? "  DECODER != ENCODER" : "");
    }
    if (hash)
      std::printf("k=%d hash bodies %016llx pictures %016llx\n", k, (unsigned long long)body_hash,
                  (unsigned long long)picture_hash);
    std::fflush(stdout);
    if (mismatch || max_err > k) return 1;
  }
  return 0;
}
