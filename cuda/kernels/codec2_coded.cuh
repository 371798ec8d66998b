// The coded blocks (block mode not kSkip) of a delta's tile, as the version
// 2 codec's kernels that walk a tile's schedule read them: the encoder's
// choice of lanes (tile_type_kernel, tile_walk()) and the decoder's jumps
// over steps at which no lane decodes (next_coded_step()). A 64-bit word
// per block row in shared memory when the tile is at most 64 blocks wide and
// its block rows fit the caller's store, else the block modes in global
// memory.
#pragma once

#include <cstdint>

#include "cudadiff/codec2_rules.h"

namespace cudadiff {
namespace codec2 {

constexpr int kCodedRowBlocks = 64;  // blocks of a row in one word

struct CodedBlocks {
  const uint8_t *modes;            // the tile's first block mode in the frame's modes
  int stride;                      // block modes per row of the frame
  int bw;                          // the tile's width in blocks
  const unsigned long long *rows;  // a word per block row (bit b: block b coded), or null

  // The word of each of the tile's `bh` block rows into `store` (`max_rows`
  // words) when they fit, else `rows` stays null. Every thread of the warp
  // calls it (`lane`: its lane), once the block modes are in memory and
  // visible to the warp.
  __device__ __forceinline__ void build(unsigned long long *store, int bh, int max_rows, int lane) {
    rows = nullptr;
    if (bw > kCodedRowBlocks || bh > max_rows) return;
    for (int by = 0; by < bh; ++by) {
      const uint8_t *r = modes + size_t(by) * stride;
      const unsigned lo = __ballot_sync(0xffffffffu, lane < bw && r[lane] != kSkip);
      const unsigned hi = __ballot_sync(0xffffffffu, lane + 32 < bw && r[lane + 32] != kSkip);
      if (lane == 0) store[by] = (unsigned long long)hi << 32 | lo;
    }
    __syncwarp();
    rows = store;
  }

  // The first run [a, b) of coded blocks in the tile's block row `by` with
  // a >= bx (coded_run()); false when there is none.
  __device__ __forceinline__ bool run(int by, int bx, int &a, int &b) const {
    if (bx >= bw) return false;
    if (!rows) return coded_run(modes + size_t(by) * stride, bw, bx, a, b);
    const unsigned long long row = rows[by], m = row >> bx;
    if (!m) return false;
    a = bx + __ffsll((long long)m) - 1;
    // the bits above bw are clear, so the run ends at bw at the latest
    const unsigned long long rest = ~(row >> a);
    b = rest ? a + __ffsll((long long)rest) - 1 : kCodedRowBlocks;
    return true;
  }
};

}  // namespace codec2
}  // namespace cudadiff
