// Helpers of the version 2 codec's command-line programs (codec_eval,
// codec2_decode, the codec benchmarks): a format by its name, the encoder's
// tile geometry and lanes from options, frames of a raw clip scaled to the
// benchmark's size, and the FNV-1a hash they print of bodies and pictures
// (equal hashes: the same bytes).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "cudadiff/codec2.h"
#include "cudadiff/codec2_rules.h"
#include "cudadiff/runtime.h"

namespace bench {

// The format named `name` (format_name()'s spelling), Unknown if none.
inline cudadiff::VideoFormat parse_format(const std::string &name) {
  for (int i = 1; i < 64; ++i) {
    const cudadiff::VideoFormat f = static_cast<cudadiff::VideoFormat>(i);
    if (cudadiff::format_info(f).n_planes == 0) break;
    if (name == cudadiff::format_name(f)) return f;
  }
  return cudadiff::VideoFormat::Unknown;
}

// Applies `--format NAME` (a format the codec takes, format_name()'s
// spelling) to `f`: 1 when `option` is it and `value` names such a format, 0
// when it is another option, -1 (with a message on stderr) for a bad name.
inline int format_option(const std::string &option, const std::string &value,
                         cudadiff::VideoFormat &f) {
  if (option != "--format") return 0;
  const cudadiff::VideoFormat g = parse_format(value);
  if (g == cudadiff::VideoFormat::Unknown || cudadiff::codec2::layers_of(g, 16, 16).count == 0) {
    std::fprintf(stderr, "--format wants a format of the codec (e.g. BGR, I420, NV12), not '%s'\n",
                 value.c_str());
    return -1;
  }
  f = g;
  return 1;
}

// `value` as a whole decimal number in lo .. hi into `out`; false when it
// is not one.
inline bool parse_int_in(const std::string &value, long lo, long hi, long &out) {
  char *end = nullptr;
  out = std::strtol(value.c_str(), &end, 10);
  return !value.empty() && *end == 0 && out >= lo && out <= hi;
}

// Applies `--tiles BXxBY` (tiles of BX x BY blocks, each 1..255),
// `--lane-samples N` (coded sample components per rANS lane, 1 .. 2^24) or
// `--walk-bound P` (percent of a full tile's walk, 0 .. 1000; 0: none) or
// `--lane-coding rans|tans` (tANS lanes: body flag 0x04, CPU only) to `g`. Returns 1 when `option`
// is one of them and `value` is valid, 0 when it is neither, -1 (with a message on stderr) for a
// bad value.
inline int geometry_option(const std::string &option, const std::string &value,
                           cudadiff::codec2::Geometry &g) {
  if (option == "--tiles") {
    int bx = 0, by = 0;
    char sep = 0, extra = 0;
    if (std::sscanf(value.c_str(), "%d%c%d%c", &bx, &sep, &by, &extra) != 3 || sep != 'x' ||
        bx < 1 || bx > 255 || by < 1 || by > 255) {
      std::fprintf(stderr, "--tiles wants BXxBY, each 1..255 blocks (e.g. 10x8), not '%s'\n",
                   value.c_str());
      return -1;
    }
    g.tile_bx = bx;
    g.tile_by = by;
    return 1;
  }
  long n = 0;
  if (option == "--lane-samples") {
    if (!parse_int_in(value, 1, 1L << 24, n)) {
      std::fprintf(stderr, "--lane-samples wants 1 .. 16777216 (default 2048), not '%s'\n",
                   value.c_str());
      return -1;
    }
    g.lane_samples = int(n);
    return 1;
  }
  if (option == "--walk-bound") {
    if (!parse_int_in(value, 0, 1000, n)) {
      std::fprintf(stderr, "--walk-bound wants 0 .. 1000 percent (default 100), not '%s'\n",
                   value.c_str());
      return -1;
    }
    g.walk_bound = int(n);
    return 1;
  }
  if (option == "--lane-coding") {
    if (value != "rans" && value != "tans") {
      std::fprintf(stderr, "--lane-coding wants rans (default) or tans, not '%s'\n", value.c_str());
      return -1;
    }
    g.tans_lanes = value == "tans";
    return 1;
  }
  return 0;
}

// Parses "WxH" (each 1..65535) into w and h; false when it is not that.
inline bool parse_size(const std::string &value, int &w, int &h) {
  char sep = 0, extra = 0;
  return std::sscanf(value.c_str(), "%d%c%d%c", &w, &sep, &h, &extra) == 3 && sep == 'x' &&
         w >= 1 && w <= 65535 && h >= 1 && h <= 65535;
}

// Applies `--clip FILE` (to `clip`) or `--clip-size WxH` (to clip_w,
// clip_h). Returns 1 when `option` is one of them and `value` is valid, 0
// when it is neither, -1 (with a message on stderr) for a bad size.
inline int clip_option(const std::string &option, const std::string &value, std::string &clip,
                       int &clip_w, int &clip_h) {
  if (option == "--clip") {
    clip = value;
    return 1;
  }
  if (option == "--clip-size") {
    if (parse_size(value, clip_w, clip_h)) return 1;
    std::fprintf(stderr, "--clip-size wants WxH, not '%s'\n", value.c_str());
    return -1;
  }
  return 0;
}

// `--random` among the arguments (into `random`): frames of uniformly random
// bytes, each independent of the one before (the worst case: every tile is
// stored raw at threshold 0, and every block is coded at the others).
// Returns -1 (with a message on stderr) when a --clip was given too, else 0.
inline int random_option(const std::vector<std::string> &args, const std::string &clip,
                         bool &random) {
  random = false;
  for (const std::string &a : args)
    if (a == "--random") random = true;
  if (random && !clip.empty()) {
    std::fprintf(stderr, "--random and --clip exclude each other\n");
    return -1;
  }
  return 0;
}

// `--threshold K` among the arguments: `ks` becomes {K} (the benchmarks'
// default is 0, 5, 10 and 20). Returns -1 (with a message on stderr) when K
// is not 0..255, else 0.
inline int threshold_option(const std::vector<std::string> &args, std::vector<int> &ks) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] != "--threshold") continue;
    long k = 0;
    if (!parse_int_in(args[i + 1], 0, 255, k)) {
      std::fprintf(stderr, "--threshold wants 0..255, not '%s'\n", args[i + 1].c_str());
      return -1;
    }
    ks = {int(k)};
  }
  return 0;
}

// One frame of read_scaled_clip() into the first plane of `view` (a packed
// 3-byte format of the same size), row by row.
inline void copy_clip_frame(const std::vector<uint8_t> &bytes, const cudadiff::FrameView &view) {
  const size_t row = size_t(view.width) * 3;
  for (int y = 0; y < view.height; ++y)
    std::copy_n(bytes.data() + size_t(y) * row, row, view.row(0, y));
}

// The formats clip_frame_to() writes: BGR, I420 and NV12.
inline bool clip_converts_to(cudadiff::VideoFormat f) {
  using cudadiff::VideoFormat;
  return f == VideoFormat::BGR || f == VideoFormat::I420 || f == VideoFormat::NV12;
}

// 0 when a benchmark's frames of format `f` can come from `clip` (none, or
// clip_converts_to(f)); else -1, with a message on stderr.
inline int check_clip_format(const std::string &clip, cudadiff::VideoFormat f) {
  if (clip.empty() || clip_converts_to(f)) return 0;
  std::fprintf(stderr, "--clip converts its BGR frames to BGR, I420 or NV12 only, not %s\n",
               cudadiff::format_name(f));
  return -1;
}

// One frame of read_scaled_clip() (BGR) into `view`: copied for BGR,
// converted for I420 and NV12 (BT.601's limited-range matrix; each chroma
// sample from the mean of its 2x2 pixels), so that a benchmark can run
// planar formats on real footage. False for other formats
// (clip_converts_to()).
inline bool clip_frame_to(const std::vector<uint8_t> &bytes, const cudadiff::FrameView &view) {
  using cudadiff::VideoFormat;
  const int w = view.width, h = view.height;
  if (!clip_converts_to(view.format)) return false;
  if (view.format == VideoFormat::BGR) {
    copy_clip_frame(bytes, view);
    return true;
  }
  auto px = [&](int x, int y, int c) {  // c: 0 B, 1 G, 2 R
    return int(bytes[(size_t(y) * w + x) * 3 + c]);
  };
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      view.row(0, y)[x] =
          uint8_t(((66 * px(x, y, 2) + 129 * px(x, y, 1) + 25 * px(x, y, 0) + 128) >> 8) + 16);
  for (int cy = 0; cy < (h + 1) / 2; ++cy)
    for (int cx = 0; cx < (w + 1) / 2; ++cx) {
      int sum[3] = {0, 0, 0};
      for (int dy = 0; dy < 2; ++dy)
        for (int dx = 0; dx < 2; ++dx)
          for (int c = 0; c < 3; ++c)
            sum[c] += px(std::min(2 * cx + dx, w - 1), std::min(2 * cy + dy, h - 1), c);
      const int b = (sum[0] + 2) / 4, g = (sum[1] + 2) / 4, r = (sum[2] + 2) / 4;
      const uint8_t u = uint8_t(((-38 * r - 74 * g + 112 * b + 128) >> 8) + 128);
      const uint8_t v = uint8_t(((112 * r - 94 * g - 18 * b + 128) >> 8) + 128);
      if (view.format == VideoFormat::I420) {
        view.row(1, cy)[cx] = u;
        view.row(2, cy)[cx] = v;
      } else {
        view.row(1, cy)[2 * cx] = u;
        view.row(1, cy)[2 * cx + 1] = v;
      }
    }
  return true;
}

// Up to `max_frames` frames of packed 3-byte pixels (e.g. BGR) from `path`,
// frames of src_w x src_h one after another (what `ffmpeg -i clip -f
// rawvideo -pix_fmt bgr24` or `gst-launch-1.0 ... ! video/x-raw,format=BGR
// ! filesink` writes), each scaled to w x h by nearest neighbour (sample
// (x, y) takes source pixel ((2x + 1) src_w / 2w, (2y + 1) src_h / 2h)), as
// `videoscale method=nearest-neighbour` scales the clips for the codec's
// other measurements. Each frame is w * h * 3 bytes. Fewer frames than
// asked when the file ends (a partial last frame is dropped).
inline std::vector<std::vector<uint8_t>> read_scaled_clip(const std::string &path, int src_w,
                                                          int src_h, int w, int h, int max_frames) {
  std::vector<std::vector<uint8_t>> out;
  std::ifstream f(path, std::ios::binary);
  const size_t src_bytes = size_t(src_w) * src_h * 3;
  std::vector<uint8_t> src(src_bytes);
  std::vector<int> sx(size_t(w), 0);
  for (int x = 0; x < w; ++x) sx[size_t(x)] = int((2 * int64_t(x) + 1) * src_w / (2 * int64_t(w)));
  while (int(out.size()) < max_frames &&
         f.read(reinterpret_cast<char *>(src.data()), std::streamsize(src_bytes))) {
    std::vector<uint8_t> frame(size_t(w) * h * 3);
    for (int y = 0; y < h; ++y) {
      const int syy = int((2 * int64_t(y) + 1) * src_h / (2 * int64_t(h)));
      const uint8_t *row = src.data() + size_t(syy) * src_w * 3;
      uint8_t *dst = frame.data() + size_t(y) * w * 3;
      for (int x = 0; x < w; ++x)
        for (int c = 0; c < 3; ++c) dst[size_t(x) * 3 + c] = row[size_t(sx[size_t(x)]) * 3 + c];
    }
    out.push_back(std::move(frame));
  }
  return out;
}

constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ull;
inline uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace bench
