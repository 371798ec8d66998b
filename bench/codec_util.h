// Helpers of the version 2 codec's command-line programs (codec_eval,
// codec2_decode): a format by its name, and the FNV-1a hash they print of
// bodies and pictures (equal hashes: the same bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

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

constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ull;
inline uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace bench
