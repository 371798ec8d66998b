// Private to the core: the version 2 encoder's rules for the frequency
// tables (docs/stream-format.md, "The encoder", step 5), shared by the CPU
// reference (cuda/cpu/codec2.cpp) and the CUDA encoder, which makes the
// tables on the device with these very functions.
#pragma once

#include <cstdint>

#include "cudadiff/codec2_rules.h"

namespace cudadiff {
namespace codec2 {
namespace detail {

// The level of a token counted `count` >= 1 times in a histogram whose
// largest count has log2_q8() `lmx`.
CODEC2_HD int level_of_count(uint32_t count, uint32_t lmx) {
  const int32_t d = int32_t(lmx) - int32_t(log2_q8(count));  // >= 0, 1/256 bit
  const int32_t l = kLevels - (4 * d + 128) / 256;
  return l < 1 ? 1 : l;
}

// The levels of a histogram's table: the most frequent token gets kLevels,
// the others kLevels + round(4 * log2(count / max)), at least 1; absent
// tokens 0. Returns n (tokens 0..n-1 may occur; 0: no token present).
CODEC2_HD int levels_from_histogram(const uint32_t *hist, uint8_t *levels) {
  uint32_t mx = 0;
  int n = 0;
  for (int i = 0; i < kTokens; ++i) {
    levels[i] = 0;
    if (hist[i]) n = i + 1;
    if (hist[i] > mx) mx = hist[i];
  }
  if (n == 0) return 0;
  const uint32_t lmx = log2_q8(mx);
  for (int i = 0; i < n; ++i)
    if (hist[i]) levels[i] = uint8_t(level_of_count(hist[i], lmx));
  return n;
}

// Bits of a level's prefix code for a change of `delta` (0: the same level).
CODEC2_HD int level_code_bits(int delta) {
  const int d = delta < 0 ? -delta : delta;
  return d == 0 ? 2 : d <= 2 ? 4 : d <= 6 ? 6 : d <= 14 ? 8 : 11;
}

// Bits of a table's description (n and the levels; the last token present).
CODEC2_HD uint32_t table_description_bits(const uint8_t *levels, int n) {
  uint32_t bits = 5;
  int prev = kLevels;
  for (int i = 0; i < n; ++i) {
    if (!levels[i]) {
      bits += 2;
      continue;
    }
    bits += uint32_t(level_code_bits(levels[i] - prev));
    prev = levels[i];
  }
  return bits;
}

// Cost (1/256 bit) of a symbol of frequency f >= 1: 256 * log2(4096 / f).
CODEC2_HD uint32_t symbol_cost(uint32_t f) {
  return 12 * 256 - log2_q8(f);
}

// A distribution's table in a body: the previous frame's, a copy of the last
// table listed before, or a new one (the model section's choices).
constexpr int kTableUnused = 0, kTablePrevious = 1, kTableCopy = 2, kTableNew = 3;
// The costs of the three choices (1/256 bit) with their flag bits; a choice
// that cannot code the histogram costs kNeverCost.
constexpr uint64_t kNeverCost = ~uint64_t(0) >> 1;
CODEC2_HD uint64_t flagged_cost(uint64_t cost, int flag_bits) {
  return cost == ~uint64_t(0) ? kNeverCost : cost + 256ull * uint64_t(flag_bits);
}
CODEC2_HD int choose_table(uint64_t cost_previous, uint64_t cost_copy, uint64_t cost_new) {
  if (cost_previous <= cost_copy && cost_previous <= cost_new) return kTablePrevious;
  return cost_copy <= cost_new ? kTableCopy : kTableNew;
}
// Flag bits of a copy and of a new table (a keyframe has no previous table).
CODEC2_HD int copy_flag_bits(bool keyframe) {
  return keyframe ? 2 : 3;
}
CODEC2_HD int new_flag_bits(bool keyframe) {
  return keyframe ? 2 : 3;
}

}  // namespace detail
}  // namespace codec2
}  // namespace cudadiff
