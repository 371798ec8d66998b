// The version 2 decoder's rANS step on the GPU: a distribution's decoding
// table, a token from a lane's state, and the renormalisation of a warp's
// lanes from the tile's one byte stream. Used by the CUDA decoder
// (codec2_dec.cu) and by bench/codec2_chain.cu, which models the decoder's
// chain of steps with these very functions.
#pragma once

#include <cstdint>

#include "cudadiff/codec2_rules.h"

namespace cudadiff {
namespace codec2 {

// A distribution's decoding table: the token of a slot from one word of a
// bitmap of where tokens start and a count, without a 4096-slot table.
// rank(slot) = before[slot / 32] + popc(mask[slot / 32] up to bit slot % 32)
// is the slot's token among the present ones (in token order, the order of
// their slots), with before[q] one less than the tokens starting before
// bucket q; ent[rank] = cum | token << 12 | freq << 17.
constexpr int kTabBuckets = int(kProbScale) / 32;
struct DistTab {
  uint32_t mask[kTabBuckets];
  uint32_t ent[kTokens];
  int8_t before[kTabBuckets];  // minus 1 (-1 in bucket 0, where the first token starts)
};
static_assert(sizeof(DistTab) % 16 == 0, "tables are copied in 16-byte words");

// The payload's bytes as renorm_from() reads them (read-only data cache):
// the byte `next` after the one at `at` (the address's sum in 64 bits).
struct PayloadBytes {
  const uint8_t *__restrict__ p;
  __device__ __forceinline__ uint32_t operator()(uint32_t at, uint32_t next = 0) const {
    return __ldg(p + at + next);
  }
};

// Renormalises the lanes that are `active` (every thread of the warp calls
// it): each lane needs 0, 1 or 2 bytes (its state is at least 2^11 after a
// step), handed out in lane order from `pos`, byte(at, next) being the
// stream's byte `next` after the one at `at`. False (the same in every lane)
// when the payload has too few. The votes are on the comparisons themselves
// (a lane below 2^15 needs a second byte, and is below 2^23 too), so that
// they wait for nothing else.
template <class Bytes>
__device__ __forceinline__ bool renorm_from(uint32_t &x, bool active, const Bytes &byte,
                                            uint32_t &pos, uint32_t end, unsigned lane_mask_lt) {
  const bool one = active && x < kRansLow, two = active && x < (1u << 15);
  const uint32_t ones = __ballot_sync(0xffffffffu, one), twos = __ballot_sync(0xffffffffu, two);
  if (ones == 0) return true;
  const uint32_t total = __popc(ones) + __popc(twos);
  if (end - pos < total) return false;
  if (one) {
    const uint32_t at = pos + __popc(ones & lane_mask_lt) + __popc(twos & lane_mask_lt);
    x = !two ? (x << 8) | byte(at) : (x << 16) | byte(at) << 8 | byte(at, 1);
  }
  pos += total;
  return true;
}
__device__ __forceinline__ bool renorm(uint32_t &x, bool active, const uint8_t *__restrict__ p,
                                       uint32_t &pos, uint32_t end, unsigned lane_mask_lt) {
  return renorm_from(x, active, PayloadBytes{p}, pos, end, lane_mask_lt);
}

// The token of a table symbol from lane state x (the step without
// renormalisation), with the table at `tab` (shared or global memory).
__device__ __forceinline__ int decode_symbol(uint32_t &x, const DistTab *tab) {
  const uint32_t slot = x & (kProbScale - 1), q = slot >> 5;
  const uint32_t m = tab->mask[q] & (0xffffffffu >> (31u - (slot & 31u)));
  // (0..31: every table comes from BodyReader::symbols() or is table 0,
  // with frequencies that add up to 4096 and are at least 1 for a present
  // token (normalize_levels()), so the first present token starts at slot
  // 0, m has a bit in bucket 0, before[q] >= 0 in the others, and at most
  // 32 tokens start anywhere)
  const int rank = int(tab->before[q]) + __popc(m);
  const uint32_t e = tab->ent[rank];
  x = (e >> 17) * (x >> kProbBits) + slot - (e & 0xfff);
  return int((e >> 12) & 31u);
}

}  // namespace codec2
}  // namespace cudadiff
