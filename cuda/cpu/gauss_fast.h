// Private to the noise filters' fast path (gauss_fast.cpp) and its tests.
#pragma once

#include <cstdint>

#include "fast.h"

namespace cudadiff {
namespace fast {

// The box's rounded mean (sum + n/2) / n, n = K*K, as (sum + n/2 + 0.5) *
// (1/n) in float, truncated: the same value as box_mean() for every sum a
// window of bytes can have. Why: (sum + n/2 + 0.5) / n is at least 0.5/n away
// from an integer; the float operations (sum + n/2 + 0.5 is exact below 2^23,
// then two roundings) err by less than (sum + n) 2^-23 / n, which is below
// 0.5/n while sum + n < 2^22 (sums are at most 31 x 31 x 255 < 2^18).
// tests/core check every sum of every K.
struct BoxFloat {
  float bias;  // n/2 + 0.5
  float inv;   // 1/n
};

inline BoxFloat box_float(int kernel_size) {
  const int n = kernel_size * kernel_size;
  return {static_cast<float>(n / 2) + 0.5f, 1.0f / static_cast<float>(n)};
}

CUDADIFF_ALWAYS_INLINE uint8_t box_mean_float(uint32_t sum, BoxFloat d) {
  return static_cast<uint8_t>(static_cast<int32_t>((static_cast<float>(sum) + d.bias) * d.inv));
}

}  // namespace fast
}  // namespace cudadiff
