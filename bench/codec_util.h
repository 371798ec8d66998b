// Helpers of the version 2 codec's command-line programs (codec_eval,
// codec2_decode, the codec benchmarks): a format by its name, the encoder's
// tile geometry and lanes from options, and the FNV-1a hash they print of
// bodies and pictures (equal hashes: the same bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cudadiff/codec2.h"
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

// Applies `--tiles BXxBY` (tiles of BX x BY blocks, each 1..255) or
// `--lane-samples N` (coded sample components per rANS lane, 1 .. 2^24) to
// `g`. Returns 1 when `option` is one of them and `value` is valid, 0 when
// it is neither, -1 (with a message on stderr) for a bad value.
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
  if (option == "--lane-samples") {
    char *end = nullptr;
    const long n = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != 0 || n < 1 || n > (1L << 24)) {
      std::fprintf(stderr, "--lane-samples wants 1 .. 16777216 (default 2048), not '%s'\n",
                   value.c_str());
      return -1;
    }
    g.lane_samples = int(n);
    return 1;
  }
  return 0;
}

constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ull;
inline uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace bench
