// The difference codec, version 2: the decoder on the GPU. The same pictures
// as the CPU reference (cuda/cpu/codec2.cpp), byte for byte, and the same
// bodies refused (docs/stream-format.md, "Version 2: the body").
//
// Per body:
//   1. the body goes to the device in one copy, while the host reads its
//      header, tables and tile table with the reference's own code
//      (codec2_body.h), so both backends refuse the same bodies there; the
//      tile list, each used table's symbols, the map from distributions to
//      tables, the count of failed tiles (0) and the list of tiles to copy
//      go to the device in another;
//   2. build_tables_kernel: per used table, a compact decoding table
//      (DistTab, 768 bytes: a bitmap of where tokens start; it, the token's
//      lookup and the renormalisation are in codec2_rans.cuh);
//   3. decode_tiles_kernel: one warp per tile, one thread per rANS lane
//      (several tiles per block when tiles outnumber the multiprocessors;
//      the block copies the decoding tables into shared memory when they
//      fit beside the tiles' rings of working values, a few KB each:
//      WorkRows).
//      Block modes in rounds of `lanes` blocks, then each layer in the
//      wavefront order of the spec: per step and component every lane
//      decodes its token from its table, the lanes' renormalisation bytes
//      are handed out in lane order by a prefix sum over the warp (two
//      ballots: who needs a byte, who needs a second one), then the raw
//      bits likewise. A step's sample is a chain of dependent operations, so
//      what does not depend on the rANS states comes first or a step
//      ahead (the reference's bytes, the block modes, the contexts'
//      tables). In deltas the lanes jump over runs of steps at which none
//      of them decodes (skipped blocks; a word per block row of the
//      tile's coded blocks finds the next step, codec2_coded.cuh), and the
//      warp does the samples in between. Skipped, raw and indexed tiles
//      are copy_tiles_kernel's, on a stream of its own beside it (a tile
//      skipped in two frames in a row is not copied again).
//   With tANS lanes (body flag 0x04) the palette's frequencies go up
//   instead, tans_tables_kernel makes its decoding tables, and a lane reads
//   its bits from a buffer that takes the tile's words in lane order when a
//   symbol needs more than it holds (docs/stream-format.md, "tANS lanes").
//   4. one flag comes back: the picture (two device buffers in the
//      canonical byte order) is swapped only when every tile decoded.
// A tile whose payload runs short stops at once; one with a value out of
// range or a token of an unused table fails at the end of the layer, which
// keeps that check off each step's chain (the CPU decoder goes on to its
// end and refuses the body all the same).
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../src/check.h"
#include "cudadiff/codec2.h"
#include "cudadiff/codec2_body.h"
#include "codec2_coded.cuh"
#include "codec2_rans.cuh"
#include "cudadiff/codec2_rules.h"
#include "warp_reduce.cuh"

namespace cudadiff {
namespace codec2 {
namespace {

constexpr unsigned kFullWarp = 0xffffffffu;
static_assert(kCrossLevels == 2, "the first component's residual: zero or not");

// A layer as the kernel addresses it: channel c of sample (x, y) is byte
// chan_at[c] + y * chan_stride[c] + x * chan_step[c] of a picture.
struct LayerDev {
  int width, height, channels, ycocg, sx, sy;
  uint32_t chan_at[kMaxComps];
  uint32_t chan_stride[kMaxComps];
  int chan_step[kMaxComps];
  int base[kClasses][kMaxComps];  // first distribution of each class and component
};

struct TileDev {
  int type, lanes;
  uint32_t offset, size;  // payload, from the first tile's
  int bx0, by0, bx1, by1;
  int x0[kMaxLayers], y0[kMaxLayers], w[kMaxLayers], h[kMaxLayers];
};

struct Params {
  const uint8_t *ref;
  uint8_t *rec;
  int16_t *work[kMaxLayers];  // per sample: S-domain components, then T-domain ones
  uint8_t *modes;             // per block of the frame
  const uint8_t *payload;
  const TileDev *tiles;
  const uint8_t *tabs;     // the decoding tables (DistTab), table 0 for unused distributions
  const uint16_t *map;     // per distribution: its table, 0 when it has none
  const uint32_t *copied;  // copy_tiles_kernel's tiles (skipped, raw, indexed)
  uint32_t *failed;        // tiles that failed
  size_t ring_elems;       // int16 of shared memory for the rows of working values
  uint32_t tab_bytes;      // of all tables; copied to shared memory when tabs_shared
  int tabs_shared, n_dist, n_tiles;
  int k, keyframe, blocks_x, mode_dist, n_layers;
  int tile_classes;  // body flag 0x02: the reference classes' tile rule
  // Body flag 0x04: tANS lanes; `tabs` then holds the palette's tables
  // (kTansStates entries each, tans_tables_kernel()) and `map` a
  // distribution's table + 1 (0: none).
  int tans;
  LayerDev layer[kMaxLayers];
};

// ---- tANS lanes (body flag 0x04; docs/stream-format.md, "tANS lanes") ----
// A lane's bits: a buffer (the oldest lowest) and their count. The tile's
// 32-bit words from byte `pos` of its payload are handed out in lane order
// to the lanes that need more bits than they hold, from a window of the
// next 64 words held by the warp (lane i: words wbase/4 + i and + 32 + i),
// so that a lane's word comes by a shuffle, and the window's loads are off
// the chain of symbols.
struct TansBits {
  uint64_t buf;
  uint32_t n;
  uint32_t win, nxt;  // the window
  uint32_t wbase;     // the window's first word (bytes into the payload)
};

// Bits [at, at + n) of a bit field (n <= 25), least significant first; the
// bytes from `end` on (past the tile) read as 0 and are not loaded.
__device__ __forceinline__ uint32_t field_bits(const uint8_t *p, uint32_t at, uint32_t n,
                                               uint32_t end) {
  const uint32_t b = at >> 3;
  uint32_t v = 0;
#pragma unroll
  for (uint32_t i = 0; i < 4; ++i)
    if (b + i < end) v |= uint32_t(__ldg(p + b + i)) << (8 * i);
  return (v >> (at & 7)) & ((1u << n) - 1u);
}
// The word at byte `at` of the payload (0 past the tile's `end`).
__device__ __forceinline__ uint32_t tile_word(const uint8_t *p, uint32_t at, uint32_t end) {
  if (at + 4u > end) return 0u;
  const uint8_t *q = p + at;
  return uint32_t(__ldg(q)) | uint32_t(__ldg(q + 1)) << 8 | uint32_t(__ldg(q + 2)) << 16 |
         uint32_t(__ldg(q + 3)) << 24;
}
__device__ __forceinline__ void tans_window(TansBits &b, const uint8_t *p, uint32_t from,
                                            uint32_t end, int lane) {
  b.wbase = from;
  b.win = tile_word(p, from + 4u * uint32_t(lane), end);
  b.nxt = tile_word(p, from + 128u + 4u * uint32_t(lane), end);
}
// The `active` lanes read `bits` (<= 20) bits into v, those that hold fewer
// taking the next word first, in lane order (every thread of the warp
// calls it); false (in every lane) when the tile has too few words.
__device__ __forceinline__ bool tans_read(bool active, uint32_t bits, uint32_t &v, TansBits &b,
                                          const uint8_t *p, uint32_t &pos, uint32_t end,
                                          unsigned lt, int lane) {
  const bool want = active && b.n < bits;
  const uint32_t wants = __ballot_sync(kFullWarp, want);
  if (wants) {
    const uint32_t total = 4u * uint32_t(__popc(wants));
    if (end - pos < total) return false;
    const uint32_t idx = (pos - b.wbase) / 4u + uint32_t(__popc(wants & lt));  // < 64
    const uint32_t lo = __shfl_sync(kFullWarp, b.win, int(idx & 31u));
    const uint32_t hi = __shfl_sync(kFullWarp, b.nxt, int(idx & 31u));
    if (want) {
      b.buf |= uint64_t(idx < 32u ? lo : hi) << b.n;
      b.n += 32;
    }
    pos += total;
    if (pos - b.wbase >= 128u) {  // the window moves on by 32 words
      b.win = b.nxt;
      b.wbase += 128u;
      b.nxt = tile_word(p, b.wbase + 128u + 4u * uint32_t(lane), end);
    }
  }
  v = 0;
  if (active) {
    v = uint32_t(b.buf) & ((1u << bits) - 1u);
    b.buf >>= bits;
    b.n -= bits;
  }
  return true;
}

__device__ __forceinline__ uint8_t *chan_ptr(uint8_t *pic, const LayerDev &L, int c, int x, int y) {
  return pic + L.chan_at[c] + size_t(y) * L.chan_stride[c] + size_t(x) * L.chan_step[c];
}
__device__ __forceinline__ const uint8_t *chan_ptr(const uint8_t *pic, const LayerDev &L, int c,
                                                   int x, int y) {
  return pic + L.chan_at[c] + size_t(y) * L.chan_stride[c] + size_t(x) * L.chan_step[c];
}

constexpr int kMaxDist = 512;  // distributions of any format (313 at most)

// Per table (one thread block of kTabBuckets threads each), from its
// symbols (cum | freq << 16 per token; freq 0: absent).
__global__ void build_tables_kernel(const uint32_t *__restrict__ sym, DistTab *__restrict__ tabs) {
  const int d = blockIdx.x, q = threadIdx.x;
  __shared__ uint32_t s[kTokens];
  if (q < kTokens) s[q] = sym[d * kTokens + q];
  __syncthreads();
  uint32_t mask = 0, before = 0;
  int rank = 0;
  for (int t = 0; t < kTokens; ++t) {
    const uint32_t e = s[t], freq = e >> 16, cum = e & 0xffff;
    if (freq == 0) continue;
    if (int(cum >> 5) == q) mask |= 1u << (cum & 31);
    if (cum < uint32_t(32 * q)) ++before;
    if (q == rank) tabs[d].ent[rank] = cum | uint32_t(t) << 12 | freq << 17;
    ++rank;
  }
  if (q >= rank && q < kTokens) tabs[d].ent[q] = 0;
  tabs[d].mask[q] = mask;
  tabs[d].before[q] = int8_t(before - 1);
}

// Per palette table of a body with tANS lanes (one thread block of
// kTansStates threads each), its decoding entries from its frequencies
// (summing to kTansStates), as TansTable::build() of the CPU's code: token
// t's f_t instances are spread over the states, the i-th of all (in token
// order) at state i * kTansSpreadStep mod kTansStates; a state's entry
// holds its token, q = f_t + (its rank among the token's states), the
// bits to read 10 - floor(log2 q) and the next state's base q << nb - 1024
// (token | nb << 5 | base << 9), and above them the bits a symbol of the
// token reads in all, nb and its raw bits (<< 19), so that a lane knows at
// once whether it needs a word.
__global__ void __launch_bounds__(kTansStates)
    tans_tables_kernel(const uint16_t *__restrict__ freq, uint32_t *__restrict__ dec) {
  const int tab = blockIdx.x, x = threadIdx.x, lane = x & 31, warp = x >> 5;
  __shared__ uint32_t cum[kTokens + 1];
  __shared__ uint8_t sym[kTansStates];
  __shared__ uint16_t count[kTansStates / 32][kTokens];  // per warp of states and token
  if (x == 0) {
    cum[0] = 0;
    for (int t = 0; t < kTokens; ++t) cum[t + 1] = cum[t] + freq[tab * kTokens + t];
  }
  for (int v = x; v < (kTansStates / 32) * kTokens; v += kTansStates) (&count[0][0])[v] = 0;
  __syncthreads();
  // The x-th instance in token order (the frequencies sum to kTansStates).
  int t = 0;
  while (t + 1 < kTokens && cum[t + 1] <= uint32_t(x)) ++t;
  sym[(uint32_t(x) * kTansSpreadStep) & (kTansStates - 1)] = uint8_t(t);
  __syncthreads();
  const int s = sym[x];
  const unsigned same = __match_any_sync(0xffffffffu, s);
  if (lane == __ffs(same) - 1) count[warp][s] = uint16_t(__popc(same));
  __syncthreads();
  uint32_t rank = uint32_t(__popc(same & ((1u << lane) - 1u)));
  for (int w = 0; w < warp; ++w) rank += count[w][s];
  const uint32_t f = cum[s + 1] - cum[s], q = f + rank;
  const uint32_t nb = uint32_t(kTansBits) - uint32_t(bit_length(q));
  dec[tab * kTansStates + x] = uint32_t(s) | nb << 5 | ((q << nb) - kTansStates) << 9 |
                               (nb + uint32_t(token_extra_bits(s))) << 19;
}

// Where a layer's working values live while a tile decodes. A sample reads its
// left neighbour (its own lane's sample of the step before) and three in the
// row above: (i-1, i, i+1) of lane - 1's row, which that lane, two columns
// ahead, wrote one to three steps before; lane 0 reads the last lane's row of
// the round before, written up to a round earlier. So in shared memory (the
// ring) each lane but the last keeps only its last four columns (a column's
// slot: i & 3), in two halves by the round's parity (a lane that moves on to
// its next row while the lane below still reads its last columns writes the
// other half), and the last lane whole rows, two by the round's parity: 2 * w +
// (lanes - 1) * 16 samples per tile (and a word per lane) instead of (lanes +
// 1) rows of w. Each column is written twice in its half, at slot i & 3 and at
// its twin 4 further on (has_twin()), so that the three samples above (i - 1,
// i, i + 1) follow each other there as in a whole row: one address and fixed
// offsets, as the rows had. A lane's columns take an odd number of 32-bit words
// (ring_lane_elems()), so that the lanes' loads and stores of the same slot
// fall in different banks (the first ring, 8 * w2 int16 a lane, a multiple of 8
// words, put 4 or 8 lanes in a bank). When that does not fit (very wide tiles),
// the frame-sized buffer in global memory holds every row. A sample's values:
// at(row(j, mask), i, mask) with the row's mask from row(), and a twin where
// has_twin() says.
constexpr int kRingColumns = 4;  // a lane's columns in each half of its ring (a power of 2)
__host__ __device__ inline size_t ring_lane_elems(int w2) {
  return size_t(2 * 2 * kRingColumns) * w2 + 2;  // two halves of columns and their twins
}
__host__ __device__ inline size_t work_ring_elems(int lanes, int w, int w2) {
  return size_t(2) * w * w2 + size_t(lanes - 1) * ring_lane_elems(w2);
}
struct WorkRows {
  int16_t *base;     // ring: the last lane's two rows, then the other lanes' columns
  size_t row_elems;  // int16 per row: the frame's rows (frame) or the tile's (ring)
  int lanes, w2;
  bool ring;
  __device__ __forceinline__ int16_t *row(int j, unsigned &mask) const {
    if (!ring) {
      mask = ~0u;
      return base + size_t(j) * row_elems;
    }
    const int owner = j % lanes, half = (j / lanes) & 1;
    if (owner == lanes - 1) {
      mask = ~0u;
      return base + size_t(half) * row_elems;
    }
    mask = kRingColumns - 1;
    return base + 2 * row_elems + size_t(owner) * ring_lane_elems(w2) +
           size_t(half) * 2 * kRingColumns * w2;
  }
  // sample i's values in a row (i may be -1 or w: the slot is computed, not
  // read, by a lane without that neighbour)
  __device__ __forceinline__ int16_t *at(int16_t *r, int i, unsigned mask) const {
    return r + int(unsigned(i) & mask) * w2;
  }
  // whether a sample's values are written a second time, kRingColumns
  // samples further on (a ring's column; whole rows need no twin)
  __device__ __forceinline__ static bool has_twin(unsigned mask) {
    return mask == unsigned(kRingColumns - 1);
  }
  // where a twin lies: kRingColumns samples of 2 * nc int16 further on
  __host__ __device__ static constexpr int twin_offset(int nc) { return kRingColumns * 2 * nc; }
  // Component c of the sample at v (from at(), with its row's mask): its
  // S-domain value s and T-domain value t, or (put_s) s alone, also in the
  // twin where there is one.
  template <int NC>
  __device__ __forceinline__ static void put(int16_t *v, unsigned mask, int c, int s, int t) {
    v[c] = int16_t(s);
    v[NC + c] = int16_t(t);
    if (has_twin(mask)) {
      v[twin_offset(NC) + c] = int16_t(s);
      v[twin_offset(NC) + NC + c] = int16_t(t);
    }
  }
  template <int NC>
  __device__ __forceinline__ static void put_s(int16_t *v, unsigned mask, int c, int s) {
    v[c] = int16_t(s);
    if (has_twin(mask)) v[twin_offset(NC) + c] = int16_t(s);
  }
};

// Per-threshold tables of a block, in shared memory (a division per sample
// costs more than the rest of its arithmetic).
struct Lookup {
  uint8_t index[256];                     // quant_index
  int16_t diff[511];                      // quant_diff(e) at e + 255
  uint8_t bucket[kActivityTableMax + 1];  // activity_bucket(g) for g <= kActivityTableMax
};
__device__ __forceinline__ int bucket_of(const Lookup &lu, int g) {
  return bucket_from_table(lu.bucket, g);
}

// Channel bytes of a row of a layer in a picture (the tile's first sample).
template <int NC>
struct RowPointers {
  uint8_t *at[NC];
};

// What a sample of a delta needs from the block modes and the reference
// picture, loaded one step before it is decoded so that the loads' latency
// passes while the lanes decode the step before.
template <int NC>
struct Ahead {
  int mode;
  int refv[NC];
  int tex[5];  // the texture channel at the sample and its 4 neighbours (fetch())
};

// A delta's tile's coded blocks (codec2_coded.cuh) in shared memory for
// tiles of up to kDecoderCodedRows block rows (the encoders' tiles have 8)
// and 64 blocks a row; other tiles read the block modes in global memory.
constexpr int kDecoderCodedRows = 16;

// The first step >= s at which lane `lane` of a tile with `lanes` lanes
// decodes a sample of a block that is not skipped in layer l (INT_MAX when
// none is left): its rows j = lane, lane + lanes, ... from the round of step
// s on, within a row by its runs of coded blocks.
__device__ __forceinline__ int next_coded_step(const LayerDev &L, const TileDev &t, int l,
                                               int lanes, int lane, int period, int s,
                                               const CodedBlocks &coded) {
  const int w = t.w[l], hh = t.h[l], x0 = t.x0[l], y0 = t.y0[l];
  const int tt = s - kStagger * lane;
  int i = tt < 0 ? 0 : tt % period;
  int j = (tt < 0 ? 0 : tt / period) * lanes + lane;
  while (j < hh) {
    const int by = ((y0 + j) << L.sy) / kBlock - t.by0;  // the tile's block row
    int a, b;
    if (i < w && coded.run(by, ((x0 + i) << L.sx) / kBlock - t.bx0, a, b)) {
      const int first = (((t.bx0 + a) * kBlock) >> L.sx) - x0;
      return (j / lanes) * period + (first > i ? first : i) + kStagger * lane;
    }
    // Nothing left in this row: the lane's next row, or when no block of
    // this block row is coded, its first row of the next block row.
    j += lanes;
    i = 0;
    if (!coded.run(by, 0, a, b)) {
      const int next = (((t.by0 + by + 1) * kBlock) >> L.sy) - y0;
      if (next > j) j += (next - j + lanes - 1) / lanes * lanes;
    }
  }
  return INT_MAX;
}

// One layer of a coded tile (the warp together; `lane` < `lanes` are the
// tile's rANS lanes). False when the tile is damaged.
// Deltas: where no lane decodes anything for a while (every lane's samples
// skipped), the lanes jump to the next step at which one does, and the
// whole warp does the skipped samples in between (the reference's bytes and
// their working values). A tile with few coded blocks has few lanes, each
// walking all its rows (up to width x height steps): without the jumps a
// mostly skipped tile of a fixed camera's frame took several milliseconds.
// `coded`: the tile's coded blocks (deltas; next_coded_step()).
// SMEM: the tables and the rows of working values are in shared memory (the
// common case; the caller checks it), so that their loads and stores are
// the shared memory's own, with 32-bit addresses, rather than generic ones.
// The layer is known from NC: layer 0 has 1, 3 or 4 components, layer 1
// (chroma) 2 (layers_of()), so that its fields are constants of the kernel's
// parameters rather than loads at an index known only at run time.
// TANS: tANS lanes (x a lane's state, `bits` its bits, pos the next word);
// otherwise rANS lanes (pos the next byte, `bits` unused). h: the lane's
// checksum either way.
template <int NC, bool YCOCG, bool KEY, bool SMEM, bool TANS>
__device__ bool decode_layer(const Params &P, const Lookup &lu, const uint16_t *map,
                             const DistTab *tabs, const TileDev &t, int lanes, int lane,
                             unsigned lt, uint32_t &x, uint32_t &h, TansBits &bits,
                             const uint8_t *p, uint32_t &pos, int16_t *ring, size_t ring_elems,
                             const CodedBlocks &coded) {
  constexpr int W2 = 2 * NC;
  constexpr int kTwin = WorkRows::twin_offset(NC);  // (fill() writes its twins itself)
  constexpr int l = NC == 2 ? 1 : 0;
  const LayerDev &L = P.layer[l];
  const int w = t.w[l], hh = t.h[l], x0 = t.x0[l], y0 = t.y0[l];
  const int k = P.k;
  const int step = 2 * k + 1;
  const int max_idx = max_index(k);
  // Reference classes: q = g / step < 2, 6, 16 as comparisons.
  const int rc1 = 2 * step, rc2 = 6 * step, rc3 = 16 * step;
  WorkRows rows;
  if (SMEM) {
    extern __shared__ uint4 dyn[];  // the kernel's: the tables come first
    tabs = reinterpret_cast<const DistTab *>(dyn);
    __builtin_assume(__isShared(ring));
  }
  if (SMEM || work_ring_elems(lanes, w, W2) <= ring_elems) {
    rows = {ring, size_t(w) * W2, lanes, W2, true};
  } else {
    rows = {P.work[l] + (size_t(y0) * L.width + x0) * W2, size_t(L.width) * W2, lanes, W2, false};
  }
  int step_of[NC], base[kClasses][NC];
  for (int c = 0; c < NC; ++c) {
    step_of[c] = L.chan_step[c];
    for (int cls = 0; cls < kClasses; ++cls) base[cls][c] = L.base[cls][c];
  }
  const size_t tex_stride = L.chan_stride[YCOCG ? 1 : 0];
  const int tex_step = L.chan_step[YCOCG ? 1 : 0];
  // The reference class's neighbourhood (fetch()): the tile's samples, or
  // the layer's.
  const int tex_x_lo = P.tile_classes ? x0 : 0, tex_x_hi = P.tile_classes ? x0 + w : L.width;
  const int tex_y_lo = P.tile_classes ? y0 : 0;
  const ptrdiff_t tex_diag = -ptrdiff_t(tex_stride) - tex_step;  // above-left

  const int period = schedule_period(w, lanes);
  const int steps = schedule_steps(w, hh, lanes);
  const bool is_lane = lane < lanes;
  int ci = -kStagger * lane, cj = lane;
  // Per lane, its row: working values (and the row above), the picture's
  // bytes, the block modes.
  int16_t *cur, *up;
  unsigned cur_mask, up_mask;
  RowPointers<NC> rec_row, ref_row;
  const uint8_t *mode_row;
  auto set_row = [&](int j) {
    cur = rows.row(j, cur_mask);
    up = rows.row(j > 0 ? j - 1 : 0, up_mask);
    const int y = y0 + j;
    for (int c = 0; c < NC; ++c) {
      const size_t o = L.chan_at[c] + size_t(y) * L.chan_stride[c] + size_t(x0) * L.chan_step[c];
      rec_row.at[c] = P.rec + o;
      ref_row.at[c] = const_cast<uint8_t *>(P.ref) + o;
    }
    mode_row = P.modes + size_t((y << L.sy) / kBlock) * P.blocks_x;
  };
  const int tex = YCOCG ? 1 : 0;  // the texture channel: G, else the first
  // Issues the loads of sample (i, j) of this lane (its row's pointers
  // set); nothing waits for them here.
  auto fetch = [&](int i, int j, Ahead<NC> &a) {
    // (defined for every lane: the step's arithmetic runs in all of them)
    a.mode = kSpatial;
    for (int c = 0; c < NC; ++c) a.refv[c] = 0;
    for (int e = 0; e < 5; ++e) a.tex[e] = 0;
    if (KEY || !(is_lane && i >= 0 && i < w && j < hh)) return;
    const int sxp = x0 + i, syp = y0 + j;
    a.mode = mode_row[(sxp << L.sx) / kBlock];
    for (int c = 0; c < NC; ++c) a.refv[c] = __ldg(ref_row.at[c] + i * step_of[c]);
    const uint8_t *q = ref_row.at[tex] + i * tex_step;
    a.tex[0] = __ldg(q);
    // The texture's neighbours: left, right, above, and by the body's rule
    // above-left within the tile (tile_ref_texture(); a neighbour outside
    // the tile is the sample itself, adding 0) or below within the layer
    // (ref_texture()); the bounds are the layer's constants above.
    a.tex[1] = __ldg(q - (sxp > tex_x_lo ? tex_step : 0));
    a.tex[2] = __ldg(q + (sxp + 1 < tex_x_hi ? tex_step : 0));
    a.tex[3] = __ldg(q - (syp > tex_y_lo ? tex_stride : 0));
    a.tex[4] = __ldg(q + (P.tile_classes ? (sxp > tex_x_lo && syp > tex_y_lo ? tex_diag : 0)
                                         : (syp + 1 < L.height ? tex_stride : 0)));
  };
  // The samples of steps [s0, s1), at which no lane decodes (deltas: each
  // lane's samples there are skipped or outside the tile), by the whole
  // warp: the reference's bytes, and the working values of those that the
  // lanes read from step s1 on (keep = INT_MAX: none, the tile ends): in the
  // frame's rows those of rows from `keep` on, in the ring a lane's last
  // three steps' samples and the last lane's rows of the round before lane
  // 0's and of its round (the others' slots may belong to later samples
  // already, which the warp writes at the same time).
  auto fill = [&](int s0, int s1, int keep) {
    constexpr int kBatch = 4;  // samples per thread whose loads are in flight together
    const int n = (s1 - s0) * lanes;
    const int last_round = s1 / period - 1;  // the last lane's rows from this round on
    for (int first = lane; first < n; first += 32 * kBatch) {
      int si[kBatch], sj[kBatch];
      bool keep_it[kBatch];
      int v[kBatch][NC];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int idx = first + 32 * u;
        const int ln = idx % lanes, at = s0 + idx / lanes, tt = at - kStagger * ln;
        si[u] = tt < 0 ? w : tt % period;
        sj[u] = tt < 0 ? hh : (tt / period) * lanes + ln;
        keep_it[u] = keep != INT_MAX && (!rows.ring       ? sj[u] >= keep
                                         : ln < lanes - 1 ? at >= s1 - (kRingColumns - 1)
                                                          : sj[u] / lanes >= last_round);
        if (idx >= n || si[u] >= w || sj[u] >= hh) si[u] = -1;
        if (si[u] >= 0)
          for (int c = 0; c < NC; ++c)
            v[u][c] = __ldg(chan_ptr(P.ref, L, c, x0 + si[u], y0 + sj[u]));
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (si[u] < 0) continue;
        int ch[NC], comp[NC];
        for (int c = 0; c < NC; ++c) {
          *chan_ptr(P.rec, L, c, x0 + si[u], y0 + sj[u]) = uint8_t(v[u][c]);
          ch[c] = lu.index[v[u][c]];
        }
        if (!keep_it[u]) continue;
        to_components(YCOCG, NC, ch, comp);
        unsigned mask;
        int16_t *wv = rows.at(rows.row(sj[u], mask), si[u], mask);
        // (WorkRows::put() written out: through the helper here nvcc
        // schedules the whole kernel differently from the one measured)
        for (int c = 0; c < NC; ++c) {
          wv[c] = int16_t(comp[c]);
          wv[NC + c] = 0;
          if (WorkRows::has_twin(mask)) {
            wv[kTwin + c] = int16_t(comp[c]);
            wv[kTwin + NC + c] = 0;
          }
        }
      }
    }
  };
  int walk_until = 0;  // deltas: the steps before this one need no jump test
  // A value out of range or a token of an unused table, at any step: the
  // tile fails at the layer's end. Until then the lanes go on (such a value
  // is taken as 0, such a table keeps the state), reading and writing only
  // where an undamaged tile would.
  bool damaged = false;
  set_row(cj);
  Ahead<NC> next;
  fetch(ci, cj, next);
  const uint32_t end = t.size;
  for (int st = 0; st < steps; ++st) {
    const int i = ci, j = cj;
    int16_t *const wp_row = cur, *const up_row = up;
    const unsigned wp_mask = cur_mask, up_mask_now = up_mask;
    const RowPointers<NC> rec_at = rec_row;
    const Ahead<NC> a = next;
    if (++ci == period) {
      ci = 0;
      cj += lanes;
      set_row(cj);
    }
    if (!KEY) fetch(ci, cj, next);
    // The payload a few steps ahead into the L1 cache.
    if (lane == 0 && pos + 256u < end)
      asm volatile("prefetch.global.L1 [%0];" ::"l"(p + pos + 256));
    const bool in_tile = is_lane && i >= 0 && i < w && j < hh;
    const int mode = a.mode;
    const bool skip = !KEY && mode == kSkip;
    const bool active = in_tile && !skip;
    const int cls = mode_class(mode);
    const bool spatial = KEY || cls == kClassSpatial;
    const bool temporal = !KEY && cls == kClassTemporal;
    int16_t *const wp = rows.at(wp_row, i, wp_mask);
    // The reference's bytes (deltas): skipped samples copy them, the others
    // need them for the T-domain.
    int refv[NC];
    for (int c = 0; c < NC; ++c) refv[c] = KEY ? 0 : a.refv[c];
    // (keyframes need no jumps: a step at which no lane has a sample, which
    // only tiles one sample wide have, runs with every lane idle)
    if (!KEY && __ballot_sync(kFullWarp, active) == 0) {
      if (in_tile && skip) {
        int ch[NC], comp[NC];
        for (int c = 0; c < NC; ++c) {
          rec_at.at[c][i * step_of[c]] = uint8_t(refv[c]);
          ch[c] = lu.index[refv[c]];
        }
        to_components(YCOCG, NC, ch, comp);
        for (int c = 0; c < NC; ++c) WorkRows::put<NC>(wp, wp_mask, c, comp[c], 0);
      }
      if (st + 1 >= walk_until) {
        // The next step at which a lane decodes something; unless it comes
        // soon, the warp does the samples in between and the lanes jump.
        const unsigned nx = warp_min_u32(
            is_lane ? unsigned(next_coded_step(L, t, l, lanes, lane, period, st + 1, coded))
                    : unsigned(INT_MAX));
        if (nx >= unsigned(steps)) {
          __syncwarp();
          fill(st + 1, steps, INT_MAX);
          break;
        }
        walk_until = int(nx);
        if (int(nx) > st + kDecoderMinJump) {
          const int tt = int(nx) - kStagger * lane;
          ci = tt < 0 ? tt : tt % period;
          cj = tt < 0 ? lane : (tt / period) * lanes + lane;
          const int keep = int(warp_min_u32(is_lane ? unsigned(cj) : unsigned(INT_MAX))) - 1;
          __syncwarp();
          fill(st + 1, int(nx), keep);
          st = int(nx) - 1;
          set_row(cj);
          fetch(ci, cj, next);
        }
      }
      __syncwarp();
      continue;
    }
    // From here on the step's arithmetic runs in every lane without
    // branches on the data (a lane's class, edges and skipped samples are
    // selects; loads and stores of lanes that have none are predicated off),
    // so that the warp does not take each class's path in turn.
    int rclass = 0;
    if (!KEY) {
      const int v = a.tex[0];
      const int g =
          iabs(a.tex[1] - v) + iabs(a.tex[2] - v) + iabs(a.tex[3] - v) + iabs(a.tex[4] - v);
      rclass = (g >= rc1) + (g >= rc2) + (g >= rc3);
    }
    // Everything of the step that does not depend on the rANS states first:
    // per component the prediction, the sign rule and the table(s) of its
    // context (components after the first: with and without the first's
    // residual), so that the chain of symbols waits only on itself.
    // Neighbours in the class's domain, with the tile's edge rules: left a,
    // above b, above-left c, above-right d; on the first row all are a (0
    // without one), at the left edge a and c are b, at the right edge d is b.
    const bool hl = i > 0, hu = j > 0, hr = i + 1 < w;
    const int dom0 = spatial ? 0 : NC;
    const int16_t *const qa = rows.at(wp_row, i - 1, wp_mask) + dom0;
    const int16_t *const qc = rows.at(up_row, i - 1, up_mask_now) + dom0;
    const int16_t *const qb = qc + W2, *const qd = qc + 2 * W2;  // (twins in a ring)
    int pred[NC];
    bool flip[NC];
    const DistTab *tab0[NC], *tab1[NC];
    const uint32_t *ttab0[NC], *ttab1[NC];  // TANS
    const uint32_t *const ttabs = reinterpret_cast<const uint32_t *>(tabs);
    bool unused0[NC], unused1[NC];
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      int ra = 0, rb = 0, rc = 0, rd = 0;
      if (active && hl) ra = qa[c];
      if (active && hu) rb = qb[c];
      if (active && hl && hu) rc = qc[c];
      if (active && hr && hu) rd = qd[c];
      const int b = hu ? rb : hl ? ra : 0;
      const int av = hl ? ra : b;
      const int cc = hl && hu ? rc : b;
      const int d = hr && hu ? rd : b;
      int ctx = bucket_of(
          lu, temporal ? temporal_activity(av, b, cc, d) : spatial_activity(av, b, cc, d));
      if (c == 0 && temporal) ctx = ctx * kRefClasses + rclass;
      pred[c] = temporal ? 0 : med(av, b, cc);
      flip[c] = flip_sign(temporal ? kClassTemporal : kClassSpatial, av, b, cc, d);
      // (a select, not an index into an array that would live in local memory)
      const int dist = (spatial ? base[0][c] : temporal ? base[1][c] : base[2][c]) + ctx;
      const int m0 = active ? int(map[dist]) : 0;
      tab0[c] = tabs + m0;
      ttab0[c] = ttabs + (m0 > 0 ? m0 - 1 : 0) * kTansStates;
      unused0[c] = active && m0 == 0;
      tab1[c] = tabs;
      ttab1[c] = ttabs;
      unused1[c] = false;
      if (c > 0) {
        const int m1 = active ? int(map[dist + kActivityBuckets]) : 0;
        tab1[c] = tabs + m1;
        ttab1[c] = ttabs + (m1 > 0 ? m1 - 1 : 0) * kTansStates;
        unused1[c] = active && m1 == 0;
      }
    }
    int value[NC];
    bool cross = false;
    bool bad = false;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      // An unused table keeps the state (its one token spans all slots)
      // and makes the tile fail at the layer's end.
      bad |= cross ? unused1[c] : unused0[c];
      if constexpr (TANS) {
        // The token's bits and its raw bits, one read (an unused table
        // reads palette table 0: the tile fails anyway).
        const uint32_t e = active ? (cross ? ttab1[c] : ttab0[c])[x] : 0u;
        const int token = int(e & 31u);
        const uint32_t nb = (e >> 5) & 15u, need = (e >> 19) & 31u, extra = need - nb;
        uint32_t got;
        if (!tans_read(active, need, got, bits, p, pos, end, lt, lane)) return false;
        const uint32_t raw = got >> nb;
        if (active) {
          x = ((e >> 9) & (kTansStates - 1u)) + (got & ((1u << nb) - 1u));  // (the base's 10 bits)
          h = lane_checksum(h, uint32_t(token));
          if (extra) h = lane_checksum(h, raw);
        }
        const uint32_t v = extra ? token_value(token, raw) : uint32_t(token);
        int r = unzigzag(v);
        if (flip[c]) r = -r;
        if (c == 0) cross = r != 0;
        value[c] = pred[c] + r;
        continue;
      }
      uint32_t xn = x;
      int token = decode_symbol(xn, cross ? tab1[c] : tab0[c]);
      token = active ? token : 0;
      x = active ? xn : x;
      h = active ? lane_checksum(h, uint32_t(token)) : h;
      // The token's renormalisation (and, in the same round of votes,
      // whether any lane has raw bits to read after it).
      const bool extra = active && token >= kDirectTokens;
      bool any_extra;
      {
        // (as renorm())
        const bool one = active && x < kRansLow, two = active && x < (1u << 15);
        const uint32_t ones = __ballot_sync(kFullWarp, one);
        const uint32_t twos = __ballot_sync(kFullWarp, two);
        any_extra = __any_sync(kFullWarp, extra);
        if (ones) {
          const uint32_t total = __popc(ones) + __popc(twos);
          if (end - pos < total) return false;
          const uint32_t at = pos + __popc(ones & lt) + __popc(twos & lt);
          const uint32_t b0 = one ? uint32_t(__ldg(p + at)) : 0u;
          const uint32_t b1 = two ? uint32_t(__ldg(p + at + 1)) : 0u;
          x = !one ? x : !two ? (x << 8) | b0 : (x << 16) | b0 << 8 | b1;
          pos += total;
        }
      }
      uint32_t v = uint32_t(token);
      if (any_extra) {
        const int nbits = extra ? token_extra_bits(token) : 0;
        const uint32_t bits = x & ((1u << nbits) - 1);
        x >>= nbits;
        if (!renorm(x, extra, p, pos, end, lt)) return false;
        h = extra ? lane_checksum(h, bits) : h;
        v = extra ? token_value(token, bits) : v;
      }
      int r = unzigzag(v);
      if (flip[c]) r = -r;
      if (c == 0) cross = r != 0;
      value[c] = pred[c] + r;
    }
    // Reconstruction and the sample's working values, by the same selects
    // in every lane. S-domain: the decoded values (spatial), else from the
    // reconstruction; T-domain: the decoded values (temporal, unless a
    // value was clamped), 0 (skipped), else from the reconstruction.
    {
      int ch[NC], rv[NC];
      bool clamped = false;
      to_channels(YCOCG, NC, value, ch);
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        // In range: an index 0..max_idx, a difference -255..255. Both
        // reconstructions are base + u * step clamped to 0..255 (an index's
        // is min(255, u * step): dequant_index()), without a branch.
        const bool out =
            spatial ? uint32_t(ch[c]) > uint32_t(max_idx) : uint32_t(ch[c] + 255) > 510u;
        bad |= active && out;
        const int u = out ? 0 : ch[c];
        const int vv = (spatial ? 0 : refv[c]) + u * step;
        const int cv = vv < 0 ? 0 : vv > 255 ? 255 : vv;
        clamped |= !spatial && cv != vv;
        rv[c] = skip ? refv[c] : cv;
        if (in_tile) rec_at.at[c][i * step_of[c]] = uint8_t(rv[c]);
      }
      if (KEY) {
#pragma unroll
        for (int c = 0; c < NC; ++c)
          if (in_tile) WorkRows::put_s<NC>(wp, wp_mask, c, value[c]);
      } else {
        int ci3[NC], cd[NC], cs[NC], ct[NC];
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          ci3[c] = lu.index[rv[c]];
          cd[c] = lu.diff[rv[c] - refv[c] + 255];
        }
        to_components(YCOCG, NC, ci3, cs);
        to_components(YCOCG, NC, cd, ct);
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          const int sv = spatial ? value[c] : cs[c];
          const int tv = skip ? 0 : !spatial && !clamped ? value[c] : ct[c];
          if (in_tile) WorkRows::put<NC>(wp, wp_mask, c, sv, tv);
        }
      }
    }
    damaged |= bad;
    __syncwarp();
  }
  return !__any_sync(kFullWarp, damaged);
}

constexpr int kMaxTilesPerBlock = 8;

// Skipped tiles take the reference's samples, raw tiles the payload's (layer
// by layer, row by row, sample by sample, channel by channel), indexed
// tiles the reconstruction of the payload's indices: a thread block per
// tile and kCopyParts of its bytes (a warp per tile, as the coded tiles
// have, took about 0.4 ms for a 1080p frame of raw tiles). The tiles are
// those of the list `copied` (the host leaves out a skipped tile whose
// bytes the picture written already holds), on a stream of their own
// beside decode_tiles_kernel: the two write different tiles.
constexpr int kCopyParts = 16;
// Indexed tiles (type 3): a thread per word of digits (indexed_digits()),
// which it takes apart, the first the least significant; a word larger than
// its digits allow fails the tile.
__device__ void index_tile(const Params &P, const TileDev &t) {
  const uint32_t base = uint32_t(indexed_base(P.k)), digits = uint32_t(indexed_digits(P.k));
  const Div32 by_base = div32(base);
  const uint32_t row0 = uint32_t(t.w[0] * P.layer[0].channels);
  const uint32_t n0 = row0 * uint32_t(t.h[0]);
  const uint32_t n = n0 + (P.n_layers > 1 ? uint32_t(t.w[1] * P.layer[1].channels * t.h[1]) : 0u);
  const uint32_t words = (n + digits - 1) / digits;
  const uint8_t *p = P.payload + t.offset;
  bool bad = false;
  for (uint32_t wd = blockIdx.y * blockDim.x + threadIdx.x; wd < words;
       wd += gridDim.y * blockDim.x) {
    uint32_t v = uint32_t(__ldg(p + 4 * wd)) | uint32_t(__ldg(p + 4 * wd + 1)) << 8 |
                 uint32_t(__ldg(p + 4 * wd + 2)) << 16 | uint32_t(__ldg(p + 4 * wd + 3)) << 24;
    const uint32_t end = min(n, (wd + 1) * digits);
    for (uint32_t i = wd * digits; i < end; ++i) {
      const uint32_t q = by_base.div(v);
      const int u = int(v - q * base);
      v = q;
      const int l = i < n0 ? 0 : 1;
      const LayerDev &L = P.layer[l];
      const uint32_t li = l == 0 ? i : i - n0, row = l == 0 ? row0 : uint32_t(t.w[1] * L.channels);
      const int j = int(li / row), r = int(li - uint32_t(j) * row);
      const int c = r % L.channels;
      *chan_ptr(P.rec, L, c, t.x0[l] + r / L.channels, t.y0[l] + j) =
          uint8_t(dequant_index(u, P.k));
    }
    bad |= v != 0;
  }
  if (bad) atomicAdd(P.failed, 1u);
}

__global__ void __launch_bounds__(256) copy_tiles_kernel(const Params P) {
  const TileDev &t = P.tiles[P.copied[blockIdx.x]];
  const int type = t.type;
  if (type == 3) {
    index_tile(P, t);
    return;
  }
  if (type != 0 && type != 2) return;
  const uint8_t *p = P.payload + t.offset;
  size_t at = 0;
  for (int l = 0; l < P.n_layers; ++l) {
    const LayerDev &L = P.layer[l];
    const int nc = L.channels, row = t.w[l] * nc;
    const int n = row * t.h[l];
    for (int idx = int(blockIdx.y * blockDim.x + threadIdx.x); idx < n;
         idx += int(gridDim.y * blockDim.x)) {
      const int j = idx / row, rem = idx - j * row, i = rem / nc, c = rem - i * nc;
      const int x = t.x0[l] + i, y = t.y0[l] + j;
      *chan_ptr(P.rec, L, c, x, y) =
          type == 0 ? __ldg(chan_ptr(P.ref, L, c, x, y)) : __ldg(p + at + idx);
    }
    at += size_t(n);
  }
}

// One warp per coded tile, `tiles_per_block` of them per thread block (several
// when there are more tiles than multiprocessors: they share one copy of
// the tables in shared memory).
__global__ void __launch_bounds__(32 * kMaxTilesPerBlock) decode_tiles_kernel(const Params P) {
  extern __shared__ uint4 dyn[];
  __shared__ Lookup lu;
  __shared__ uint16_t map[kMaxDist];
  __shared__ unsigned long long coded_rows[kMaxTilesPerBlock][kDecoderCodedRows];
  const int tid = threadIdx.x, nthreads = blockDim.x;
  // The tables into shared memory when they fit beside the rows of working
  // values (the host decides), the threads of the block together.
  const DistTab *tabs = reinterpret_cast<const DistTab *>(P.tabs);
  int16_t *ring = reinterpret_cast<int16_t *>(dyn);
  if (P.tabs_shared) {
    const uint4 *src = reinterpret_cast<const uint4 *>(P.tabs);
    const int n = int(P.tab_bytes / 16);
    for (int v = tid; v < n; v += nthreads) __pipeline_memcpy_async(dyn + v, src + v, 16);
    __pipeline_commit();
    tabs = reinterpret_cast<const DistTab *>(dyn);
    ring = reinterpret_cast<int16_t *>(dyn + n);
  }
  for (int d = tid; d < kMaxDist; d += nthreads) map[d] = d < P.n_dist ? P.map[d] : 0;
  for (int v = tid; v < 511; v += nthreads) {
    if (v < 256) lu.index[v] = uint8_t(quant_index(v, P.k));
    if (v <= kActivityTableMax) lu.bucket[v] = uint8_t(activity_bucket(v));
    lu.diff[v] = int16_t(quant_diff(v - 255, P.k));
  }
  if (P.tabs_shared) __pipeline_wait_prior(0);
  __syncthreads();
  const int warp = tid >> 5, lane = tid & 31;
  const int ti = blockIdx.x * (nthreads >> 5) + warp;
  if (ti >= P.n_tiles) return;
  ring += size_t(warp) * P.ring_elems;
  const TileDev t = P.tiles[ti];
  const uint8_t *p = P.payload + t.offset;
  if (t.type != 1) return;  // copy_tiles_kernel's
  const int lanes = t.lanes;
  const unsigned lt = (1u << lane) - 1u;
  const bool is_lane = lane < lanes;
  const bool tans = P.tans != 0;
  uint32_t x = 0, h = 0, pos = 0;
  TansBits bits{};  // tANS lanes' bits
  bool ok = true;
  if (tans) {
    // The lanes' fills (5 bits each, lane 0 first; the tile table made sure
    // they are in the payload), then their first bits in lane order, to a
    // byte; then the words. Each lane's state: its first 10 bits.
    const uint32_t fill =
        is_lane ? field_bits(p, uint32_t(kTansFillBits * lane), kTansFillBits, t.size) : 0u;
    uint32_t incl = fill;  // the fills of lanes 0..lane
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t v = __shfl_up_sync(kFullWarp, incl, o);
      if (lane >= o) incl += v;
    }
    const uint32_t head_bits = uint32_t(kTansFillBits * lanes) + __shfl_sync(kFullWarp, incl, 31);
    const uint32_t head = (head_bits + 7) / 8;
    if (head > t.size || (t.size - head) % 4 != 0) {
      ok = false;
    } else {
      const uint32_t first = uint32_t(kTansFillBits * lanes) + incl - fill;
      if (fill > 16)
        bits.buf = field_bits(p, first, 16, t.size) |
                   uint64_t(field_bits(p, first + 16, fill - 16, t.size)) << 16;
      else if (fill > 0)
        bits.buf = field_bits(p, first, fill, t.size);
      bits.n = fill;
      // the padding bits after the first bits: 0
      if (lane == 0 && head_bits % 8 != 0 &&
          field_bits(p, head_bits, 8 - head_bits % 8, t.size) != 0)
        ok = false;
      ok = !__any_sync(kFullWarp, !ok);
      pos = head;
      tans_window(bits, p, head, t.size, lane);
      if (ok && !tans_read(is_lane, kTansBits, x, bits, p, pos, t.size, lt, lane)) ok = false;
    }
  } else {
    bool bad = false;
    if (is_lane) {
      x = uint32_t(p[4 * lane]) | uint32_t(p[4 * lane + 1]) << 8 | uint32_t(p[4 * lane + 2]) << 16 |
          uint32_t(p[4 * lane + 3]) << 24;
      bad = x < kRansLow || x >= (kRansLow << 8);
    }
    ok = !__any_sync(kFullWarp, bad);
    pos = 4u * lanes;
  }
  const bool key = P.keyframe != 0;
  // a delta's tile's coded blocks (next_coded_step())
  CodedBlocks coded{P.modes + size_t(t.by0) * P.blocks_x + t.bx0, P.blocks_x, t.bx1 - t.bx0,
                    nullptr};
  // Block modes: block b by lane b % lanes, in rounds of `lanes` blocks.
  if (ok && !key) {
    const int md = map[P.mode_dist];
    if (md == 0) ok = false;
    const int tbw = t.bx1 - t.bx0, n_blocks = tbw * (t.by1 - t.by0);
    const uint32_t *const mtab =
        reinterpret_cast<const uint32_t *>(tabs) + (md > 0 ? md - 1 : 0) * kTansStates;
    for (int b0 = 0; ok && b0 < n_blocks; b0 += lanes) {
      const int b = b0 + lane;
      const bool act = is_lane && b < n_blocks;
      int mode = kSpatial;
      if (tans) {
        const uint32_t e = act ? mtab[x] : 0u;
        uint32_t got = 0;
        if (!tans_read(act, (e >> 5) & 15u, got, bits, p, pos, t.size, lt, lane)) ok = false;
        if (act) {
          x = ((e >> 9) & (kTansStates - 1u)) + got;
          h = lane_checksum(h, e & 31u);
          P.modes[size_t(t.by0 + b / tbw) * P.blocks_x + t.bx0 + b % tbw] = uint8_t(e & 31u);
        }
        continue;
      }
      if (act) {
        mode = decode_symbol(x, tabs + md);
        h = lane_checksum(h, uint32_t(mode));
        P.modes[size_t(t.by0 + b / tbw) * P.blocks_x + t.bx0 + b % tbw] = uint8_t(mode);
      }
      if (!renorm(x, act, p, pos, t.size, lt)) ok = false;
    }
    __syncwarp();
    if (ok) coded.build(coded_rows[warp], t.by1 - t.by0, kDecoderCodedRows, lane);
  }
  for (int l = 0; ok && l < P.n_layers; ++l) {
    const LayerDev &L = P.layer[l];
    if (t.w[l] == 0 || t.h[l] == 0) continue;
    const int variant = L.channels * 4 + L.ycocg * 2 + (key ? 1 : 0);
    // (the condition of decode_layer()'s ring of rows)
    const bool smem =
        P.tabs_shared && work_ring_elems(lanes, t.w[l], 2 * L.channels) <= P.ring_elems;
    // (decode_layer<NC>() takes layer NC == 2 ? 1 : 0, which layers_of() makes so)
    if ((L.channels == 2) != (l == 1)) {
      ok = false;
      break;
    }
    switch (variant) {
#define CODEC2_LAYER_CALL(NC, YC, KEY, SMEM, TANS)                                                \
  decode_layer<NC, YC, KEY, SMEM, TANS>(P, lu, map, tabs, t, lanes, lane, lt, x, h, bits, p, pos, \
                                        ring, P.ring_elems, coded)
#define CODEC2_LAYER_KEY(NC, YC, KEY)                              \
  ok = tans ? (smem ? CODEC2_LAYER_CALL(NC, YC, KEY, true, true)   \
                    : CODEC2_LAYER_CALL(NC, YC, KEY, false, true)) \
            : (smem ? CODEC2_LAYER_CALL(NC, YC, KEY, true, false)  \
                    : CODEC2_LAYER_CALL(NC, YC, KEY, false, false));
#define CODEC2_LAYER(NC, YC)        \
  case NC * 4 + YC * 2 + 0:         \
    CODEC2_LAYER_KEY(NC, YC, false) \
    break;                          \
  case NC * 4 + YC * 2 + 1:         \
    CODEC2_LAYER_KEY(NC, YC, true)  \
    break;
      CODEC2_LAYER(1, 0)
      CODEC2_LAYER(2, 0)
      CODEC2_LAYER(3, 1)
      CODEC2_LAYER(4, 1)
#undef CODEC2_LAYER_CALL
#undef CODEC2_LAYER_KEY
#undef CODEC2_LAYER
      default:
        ok = false;
    }
  }
  // Every lane ends where its encoder began, with every byte read (tANS:
  // in its end state, tans_final_state(), holding no bit).
  if (ok) {
    const bool wrong = is_lane && (tans ? x != tans_final_state(P.k, lane, h) || bits.n != 0
                                        : x != lane_final_state(P.k, lane, h));
    if (__any_sync(kFullWarp, wrong) || pos != t.size) ok = false;
  }
  if (!ok && lane == 0) atomicAdd(P.failed, 1u);
}

size_t align_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}

class CudaDecoder final : public Decoder {
 public:
  // Frames still in flight are waited for: their copies read the slots.
  ~CudaDecoder() override {
    if (in_flight_ == 0) return;
    try {
      ctx_.activate();
    } catch (const Error &) {
      return;
    }
    ::cudadiff::detail::ignore_cuda(cudaStreamSynchronize(stream_));
    ::cudadiff::detail::ignore_cuda(
        cudaStreamSynchronize(static_cast<cudaStream_t>(copy_stream_->handle())));
    ::cudadiff::detail::ignore_cuda(
        cudaStreamSynchronize(static_cast<cudaStream_t>(side_stream_->handle())));
  }
  CudaDecoder(const Context &ctx, VideoFormat format, int width, int height)
      : ctx_(ctx), reader_(format, width, height) {
    format_ = format;
    width_ = width;
    height_ = height;
    const LayerSet &ls = reader_.layers();
    frame_bytes_ = frame_size_packed(format, width, height);
    size_t offsets[kMaxPlanes], strides[kMaxPlanes];
    packed_layout(format, width, height, 1, offsets, strides);
    n_layers_ = ls.count;
    for (int l = 0; l < ls.count; ++l) {
      const Layer &ly = ls.layer[l];
      LayerDev &d = layer_[l];
      d = LayerDev{};
      d.width = ly.width;
      d.height = ly.height;
      d.channels = ly.channels;
      d.ycocg = ly.ycocg;
      d.sx = ly.sx;
      d.sy = ly.sy;
      for (int c = 0; c < ly.channels; ++c) {
        d.chan_at[c] = uint32_t(offsets[ly.plane[c]] + ly.offset[c]);
        d.chan_stride[c] = uint32_t(strides[ly.plane[c]]);
        d.chan_step[c] = ly.step[c];
        for (int cls = 0; cls < kClasses; ++cls) d.base[cls][c] = reader_.base(l, cls, c);
      }
    }
    blocks_x_ = ls.blocks_x;
    n_dist_ = reader_.distributions();
    if (const char *fail = std::getenv("CUDADIFF_CODEC2_FAIL_FINISH"))
      fail_finish_ = std::atol(fail);
    ctx.activate();
    stream_ = static_cast<cudaStream_t>(ctx.stream_handle());
    picture_[0] = DeviceBuffer(frame_bytes_);
    picture_[1] = DeviceBuffer(frame_bytes_);
    CUDADIFF_CHECK(cudaMemsetAsync(picture_[0].data(), 0, frame_bytes_, stream_));
    CUDADIFF_CHECK(cudaMemsetAsync(picture_[1].data(), 0, frame_bytes_, stream_));
    for (int l = 0; l < ls.count; ++l)
      work_[l] = DeviceBuffer(std::max<size_t>(1, size_t(ls.layer[l].width) * ls.layer[l].height *
                                                      2 * ls.layer[l].channels * sizeof(int16_t)));
    modes_ = DeviceBuffer(size_t(ls.blocks_x) * ls.blocks_y);
    if (n_dist_ + 1 > kMaxDist) throw Error("codec2 decoder: too many distributions");
    // (the rANS tables, or a palette of tANS tables: body flag 0x04)
    tabs_ = DeviceBuffer(std::max(size_t(n_dist_ + 1) * sizeof(DistTab),
                                  size_t(kTansPalette) * kTansStates * sizeof(uint32_t)));
    int optin = 0;
    CUDADIFF_CHECK(
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx.gpu_id()));
    cudaFuncAttributes attr{};
    CUDADIFF_CHECK(cudaFuncGetAttributes(&attr, decode_tiles_kernel));
    max_shared_ = size_t(optin) - attr.sharedSizeBytes;
    CUDADIFF_CHECK(cudaFuncSetAttribute(
        decode_tiles_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(max_shared_)));
    CUDADIFF_CHECK(cudaDeviceGetAttribute(&n_sm_, cudaDevAttrMultiProcessorCount, ctx.gpu_id()));
    n_sm_ = std::max(n_sm_, 1);
    for (Slot &slot : slots_) {
      slot.flag.resize(sizeof(uint32_t));
      slot.done = std::make_unique<StreamEvent>();
    }
    copy_stream_ = std::make_unique<Stream>(ctx.gpu_id());
    side_stream_ = std::make_unique<Stream>(ctx.gpu_id());
    fork_ = std::make_unique<StreamEvent>();
    join_ = std::make_unique<StreamEvent>();
    for (auto &e : read_) e = std::make_unique<StreamEvent>();
    ctx.synchronize();
  }

  bool decode(const uint8_t *body, size_t n, std::string *error) override {
    if (in_flight_ != 0)
      throw Error("codec2 decoder: decode() while frames are in flight (finish() them first)");
    const int shown = current_;
    if (!queue(body, n, false, error)) return false;
    if (finish(error)) return true;
    current_ = shown;  // the picture stays as it was
    return false;
  }

  bool submit(const uint8_t *body, size_t n, std::string *error) override {
    if (in_flight_ >= kMaxInFlight)
      throw Error("codec2 decoder: more than " + std::to_string(kMaxInFlight) +
                  " frames submitted and not finished");
    return queue(body, n, true, error);
  }

  // The copy goes on a stream of its own, beside the next frame's decoding
  // (which writes the other picture); the frame after that, which writes
  // this picture again, waits for it (queue()).
  void submit_write_frame(const FrameView &out) override {
    if (in_flight_ == 0) throw Error("codec2 decoder: no frame submitted to write");
    check_output(out);
    Slot &s = slots_[(oldest_ + in_flight_ - 1) % kMaxInFlight];
    ctx_.activate();
    s.done->make_wait(*copy_stream_);
    auto mark = [&] {
      read_[current_]->record(*copy_stream_);
      read_pending_[current_] = true;
      s.done->record(*copy_stream_);
    };
    try {
      copy_frame_async(packed_view(format_, width_, height_, picture_[current_].data()), out,
                       *copy_stream_);
    } catch (const Error &) {
      // A plane's copy may be queued: finish() still waits for it before
      // `out` may go.
      try {
        mark();
      } catch (const Error &) {
        ::cudadiff::detail::ignore_cuda(
            cudaStreamSynchronize(static_cast<cudaStream_t>(copy_stream_->handle())));
      }
      throw;
    }
    mark();
  }

  bool finish(std::string *error) override {
    if (in_flight_ == 0) throw Error("codec2 decoder: no frame submitted to finish");
    Slot &s = slots_[oldest_];
    oldest_ = (oldest_ + 1) % kMaxInFlight;
    in_flight_--;
    ctx_.activate();
    s.done->synchronize();
    if (finishes_++ == fail_finish_)
      throw Error("codec2 decoder: finish() failed on purpose (CUDADIFF_CODEC2_FAIL_FINISH)");
    uint32_t failed;
    std::memcpy(&failed, s.flag.data(), sizeof failed);
    const char *why = nullptr;
    if (failed) {
      why = "a tile failed to decode (damaged data)";
      failed_run_ = s.run;
    } else if (!s.keyframe && s.run == failed_run_) {
      why = "an earlier frame since its keyframe failed to decode";
    }
    if (!why) return true;
    if (s.run == run_) has_reference_ = false;  // else a later keyframe is in flight
    if (error) *error = std::string("codec2 body: ") + why;
    return false;
  }

 private:
  void check_output(const FrameView &out) const {
    validate(out, "codec2 decoder output");
    if (out.format != format_ || out.width != width_ || out.height != height_)
      throw Error("codec2 decoder: output frame does not match the stream's format and size");
  }

  // Checks a body on the host and queues its decoding into the other
  // picture, which becomes the current one; the frame is then in flight
  // (finish()). `copy_body`: the body goes through the slot's pinned
  // buffer, so that `body` may be reused on return (else the caller waits).
  bool queue(const uint8_t *body, size_t n, bool copy_body, std::string *error) {
    bool sent = false;  // the body's copy to the device is queued
    auto fail = [&](const std::string &why) {
      if (error) *error = "codec2 body: " + why;
      has_reference_ = false;
      // The body's memory (the caller's, or the slot's, which the next
      // body overwrites) may change once this returns.
      if (sent) CUDADIFF_CHECK(cudaStreamSynchronize(stream_));
      return false;
    };
    if (n > UINT32_MAX) return fail("body too large");
    ctx_.activate();
    Slot &slot = slots_[(oldest_ + in_flight_) % kMaxInFlight];  // not in flight
    // The whole body goes to the device at once (the payloads are most of
    // it), while the host reads it when the device's buffer holds it
    // already, else once it is read (a body refused grows nothing). The
    // device's buffers grow only when no frame in flight may still read them.
    auto send = [&] {
      if (payload_.size() < n + 16) {
        CUDADIFF_CHECK(cudaStreamSynchronize(stream_));
        payload_ = DeviceBuffer(n + n / 4 + 16);
      }
      const uint8_t *from = body;
      if (copy_body) {
        slot.body.resize(n);
        std::memcpy(slot.body.data(), body, n);
        from = slot.body.data();
      }
      CUDADIFF_CHECK(cudaMemcpyAsync(payload_.data(), from, n, cudaMemcpyHostToDevice, stream_));
      sent = true;
    };
    if (n > 0 && payload_.size() >= n + 16) send();
    std::string why;
    if (!reader_.read(body, n, has_reference_, &why)) return fail(why);
    if (!sent) send();
    const BodyHeader &h = reader_.header();
    const std::vector<detail::Tile> &tiles = reader_.tiles();
    const std::vector<detail::TileEntry> &entries = reader_.entries();
    const size_t n_tiles = tiles.size();

    // Staging: tiles, the symbols of each table (table 0 for the
    // distributions without one, then the used ones), the distributions'
    // tables; one copy.
    // With tANS lanes (flag 0x04) the palette's decoding tables instead of
    // the symbols, for the kernel as they are.
    const bool tans = h.geometry.tans_lanes;
    int n_tabs = 1;
    for (int d = 0; d < n_dist_; ++d) n_tabs += reader_.used(d) ? 1 : 0;
    if (tans) n_tabs = reader_.palette_size();
    const size_t tab_entry_bytes =
        tans ? size_t(kTokens) * sizeof(uint16_t) : size_t(kTokens) * sizeof(uint32_t);
    // Then the count of failed tiles (0 here: no memset), and the list of
    // tiles that copy_tiles_kernel does.
    const size_t tiles_at = 0;
    const size_t sym_at = align_up(tiles_at + n_tiles * sizeof(TileDev), 16);
    const size_t map_at = align_up(sym_at + size_t(n_tabs) * tab_entry_bytes, 16);
    const size_t failed_at = align_up(map_at + size_t(n_dist_) * sizeof(uint16_t), 16);
    const size_t copied_at = failed_at + sizeof(uint32_t);
    const size_t total = copied_at + n_tiles * sizeof(uint32_t);
    if (upload_.size() < total) {
      CUDADIFF_CHECK(cudaStreamSynchronize(stream_));
      upload_ = DeviceBuffer(total + total / 4);
    }
    slot.staging.resize(total);
    uint8_t *s = slot.staging.data();
    // The picture this frame writes may still be on its way out.
    if (read_pending_[1 - current_]) {
      read_[1 - current_]->make_wait(ctx_.stream());
      read_pending_[1 - current_] = false;
    }
    TileDev *td = reinterpret_cast<TileDev *>(s + tiles_at);
    // Skipped tiles of the frame before this one copied the picture this
    // frame writes into the reference: when this frame skips them too, the
    // picture holds their bytes already. (After a frame that failed, only a
    // keyframe, which skips no tile, is decoded correctly until one
    // succeeds: deltas already in flight behind it are reported failed.)
    const bool same_tiles = prev_types_.size() == n_tiles &&
                            prev_tiles_ == std::make_pair(h.geometry.tile_bx, h.geometry.tile_by);
    uint32_t *copied = reinterpret_cast<uint32_t *>(s + copied_at);
    uint32_t n_copied = 0;
    for (size_t ti = 0; ti < n_tiles; ++ti) {
      const detail::Tile &t = tiles[ti];
      TileDev &d = td[ti];
      d.type = entries[ti].type;
      if (d.type != 1 && !(d.type == 0 && same_tiles && prev_types_[ti] == 0))
        copied[n_copied++] = uint32_t(ti);
      d.lanes = entries[ti].lanes;
      d.offset = uint32_t(entries[ti].offset);
      d.size = uint32_t(entries[ti].size);
      d.bx0 = t.bx0;
      d.by0 = t.by0;
      d.bx1 = t.bx1;
      d.by1 = t.by1;
      for (int l = 0; l < kMaxLayers; ++l) {
        d.x0[l] = t.x0[l];
        d.y0[l] = t.y0[l];
        d.w[l] = l < n_layers_ ? t.w[l] : 0;
        d.h[l] = l < n_layers_ ? t.h[l] : 0;
      }
    }
    uint32_t *sym = reinterpret_cast<uint32_t *>(s + sym_at);
    uint16_t *map = reinterpret_cast<uint16_t *>(s + map_at);
    if (tans) {
      uint16_t *freq = reinterpret_cast<uint16_t *>(sym);
      for (int i = 0; i < n_tabs; ++i) reader_.palette_freq(i, freq + size_t(i) * kTokens);
      for (int d = 0; d < n_dist_; ++d) map[d] = uint16_t(reader_.palette_of(d) + 1);
    } else {
      // Table 0: token 0 spans all slots, so decoding keeps the state (a
      // tile that reaches it fails all the same).
      sym[0] = kProbScale << 16;
      for (int t = 1; t < kTokens; ++t) sym[t] = kProbScale;
      int tab = 1;
      for (int d = 0; d < n_dist_; ++d) {
        map[d] = 0;
        if (!reader_.used(d)) continue;
        reader_.symbols(d, sym + size_t(tab) * kTokens);
        map[d] = uint16_t(tab++);
      }
    }
    std::memset(s + failed_at, 0, sizeof(uint32_t));
    CUDADIFF_CHECK(cudaMemcpyAsync(upload_.data(), s, total, cudaMemcpyHostToDevice, stream_));

    if (tans) {
      tans_tables_kernel<<<n_tabs, kTansStates, 0, stream_>>>(
          reinterpret_cast<const uint16_t *>(upload_.data() + sym_at), tabs_.as<uint32_t>());
      CUDADIFF_CHECK_LAUNCH("codec2 tans_tables_kernel");
    } else {
      build_tables_kernel<<<n_tabs, kTabBuckets, 0, stream_>>>(
          reinterpret_cast<const uint32_t *>(upload_.data() + sym_at), tabs_.as<DistTab>());
      CUDADIFF_CHECK_LAUNCH("codec2 build_tables_kernel");
    }

    Params P{};
    P.ref = picture_[current_].data();
    P.rec = picture_[1 - current_].data();
    for (int l = 0; l < kMaxLayers; ++l) P.work[l] = work_[l].as<int16_t>();
    P.modes = modes_.data();
    P.payload = payload_.data() + reader_.payload_offset();
    P.tiles = reinterpret_cast<const TileDev *>(upload_.data() + tiles_at);
    P.tabs = tabs_.data();
    P.tans = tans ? 1 : 0;
    P.map = reinterpret_cast<const uint16_t *>(upload_.data() + map_at);
    P.n_dist = n_dist_;
    P.copied = reinterpret_cast<const uint32_t *>(upload_.data() + copied_at);
    P.failed = reinterpret_cast<uint32_t *>(upload_.data() + failed_at);
    P.k = h.k;
    P.keyframe = h.keyframe ? 1 : 0;
    P.tile_classes = h.tile_classes ? 1 : 0;
    P.blocks_x = blocks_x_;
    P.mode_dist = reader_.mode_distribution();
    P.n_layers = n_layers_;
    for (int l = 0; l < kMaxLayers; ++l) P.layer[l] = layer_[l];
    // Shared memory for the ring of working values (WorkRows) of the widest
    // coded tile (those that do not fit use global memory).
    size_t ring_bytes = 0;
    for (size_t ti = 0; ti < n_tiles; ++ti) {
      if (entries[ti].type != 1) continue;
      for (int l = 0; l < n_layers_; ++l)
        ring_bytes = std::max(
            ring_bytes, work_ring_elems(entries[ti].lanes, tiles[ti].w[l], 2 * layer_[l].channels) *
                            sizeof(int16_t));
    }
    // Tiles per block: as many as it takes to keep every multiprocessor
    // busy, no more (each warp's time is the latency of its own chain), and
    // as many rows as fit. The tables go to shared memory too when they fit
    // beside the rows (they are on every symbol's path, the rows on every
    // sample's).
    ring_bytes = align_up(ring_bytes, 16);
    const size_t tab_bytes =
        size_t(n_tabs) * (tans ? size_t(kTansStates) * sizeof(uint32_t) : sizeof(DistTab));
    int per_block = int(std::min<size_t>(kMaxTilesPerBlock, (n_tiles + n_sm_ - 1) / n_sm_));
    per_block = std::max(per_block, 1);
    while (per_block > 1 && tab_bytes + per_block * ring_bytes > max_shared_) --per_block;
    size_t shared = 0;
    if (tab_bytes + per_block * ring_bytes <= max_shared_) {
      P.tabs_shared = 1;
      P.tab_bytes = uint32_t(tab_bytes);
      shared = tab_bytes + per_block * ring_bytes;
    } else {
      ring_bytes = std::min(ring_bytes, max_shared_ / 16 * 16);
      shared = ring_bytes;
    }
    P.ring_elems = ring_bytes / sizeof(int16_t);
    P.n_tiles = int(n_tiles);
    // From here the picture changes: until this frame is queued whole, no
    // tile may count as skipped before (an error thrown below leaves the
    // picture part written).
    prev_types_.clear();
    try {
      if (n_tiles > 0) {
        // The copies on a stream of their own, beside the coded tiles (they
        // write other tiles; the decoding stream waits for them before the
        // flag's copy, so the next frame's work comes after them).
        if (n_copied > 0) {
          fork_->record(ctx_);
          fork_->make_wait(*side_stream_);
          copy_tiles_kernel<<<dim3(n_copied, kCopyParts), 256, 0,
                              static_cast<cudaStream_t>(side_stream_->handle())>>>(P);
          CUDADIFF_CHECK_LAUNCH("codec2 copy_tiles_kernel");
          join_->record(*side_stream_);
        }
        const unsigned blocks = unsigned((n_tiles + per_block - 1) / per_block);
        decode_tiles_kernel<<<blocks, 32 * per_block, shared, stream_>>>(P);
        CUDADIFF_CHECK_LAUNCH("codec2 decode_tiles_kernel");
        if (n_copied > 0) join_->make_wait(ctx_.stream());
      }
      CUDADIFF_CHECK(cudaMemcpyAsync(slot.flag.data(), upload_.data() + failed_at, sizeof(uint32_t),
                                     cudaMemcpyDeviceToHost, stream_));
      slot.done->record(ctx_);
    } catch (const Error &) {
      // Nothing of this frame may still run when the caller goes on.
      ::cudadiff::detail::ignore_cuda(
          cudaStreamSynchronize(static_cast<cudaStream_t>(side_stream_->handle())));
      ::cudadiff::detail::ignore_cuda(cudaStreamSynchronize(stream_));
      throw;
    }
    if (h.keyframe) ++run_;
    slot.keyframe = h.keyframe;
    slot.run = run_;
    in_flight_++;
    // Taken as decoded (finish() says otherwise): a delta may follow at once.
    current_ = 1 - current_;
    prev_types_.resize(n_tiles);
    for (size_t ti = 0; ti < n_tiles; ++ti) prev_types_[ti] = uint8_t(td[ti].type);
    prev_tiles_ = std::make_pair(h.geometry.tile_bx, h.geometry.tile_by);
    reader_.commit();
    has_reference_ = true;
    return true;
  }

 public:
  void write_frame(const FrameView &out) override {
    if (in_flight_ != 0)
      throw Error("codec2 decoder: write_frame() while frames are in flight (finish() them first)");
    check_output(out);
    ctx_.activate();
    copy_to_host(packed_view(format_, width_, height_, picture_[current_].data()), out, ctx_);
    ctx_.synchronize();
  }

  void read_reference(HostBytes &out) override {
    ctx_.activate();
    out.resize(frame_bytes_);
    CUDADIFF_CHECK(cudaMemcpyAsync(out.data(), picture_[current_].data(), frame_bytes_,
                                   cudaMemcpyDeviceToHost, stream_));
    ctx_.synchronize();
  }

 private:
  const Context &ctx_;
  detail::BodyReader reader_;
  cudaStream_t stream_ = nullptr;
  size_t frame_bytes_ = 0;
  size_t max_shared_ = 0;  // dynamic shared memory a block may have
  int n_layers_ = 0, blocks_x_ = 0, n_dist_ = 0, n_sm_ = 1;
  LayerDev layer_[kMaxLayers] = {};
  DeviceBuffer picture_[2];  // the picture shown and the one being decoded
  int current_ = 0;
  DeviceBuffer work_[kMaxLayers], modes_, tabs_, upload_, payload_;
  // The tile types of the last frame queued and its tiles' size in blocks.
  std::vector<uint8_t> prev_types_;
  std::pair<int, int> prev_tiles_{0, 0};
  // copy_tiles_kernel's stream, and the marks it waits for and leaves.
  std::unique_ptr<Stream> side_stream_;
  std::unique_ptr<StreamEvent> fork_, join_;
  // A frame in flight: what the host gives the GPU (read by copies that may
  // still be queued), the failure count that comes back, and an event after
  // its last work (the decoding, or the write when submitted).
  struct Slot {
    HostBytes staging;  // tiles, tables, distribution map, failed tiles' count, copy list
    HostBytes body;     // the body (submit())
    HostBytes flag;
    std::unique_ptr<StreamEvent> done;
    bool keyframe = false;
    uint64_t run = 0;  // the keyframes queued up to this frame
  };
  Slot slots_[kMaxInFlight];
  int oldest_ = 0;
  std::unique_ptr<Stream> copy_stream_;  // submit_write_frame()'s copies
  // After the last copy out of each picture (on copy_stream_), and whether
  // the decoding stream has yet to wait for it.
  std::unique_ptr<StreamEvent> read_[2];
  bool read_pending_[2] = {false, false};
  uint64_t run_ = 0;         // keyframes queued
  uint64_t failed_run_ = 0;  // the run of the last frame that failed (0: none)
  // CUDADIFF_CODEC2_FAIL_FINISH=N, a test aid: the N-th finish() (from 0)
  // throws Error after its wait, as a CUDA error found there would.
  long fail_finish_ = -1;
  long finishes_ = 0;
};

}  // namespace

namespace detail {
std::unique_ptr<Decoder> make_cuda_decoder(const Context &ctx, VideoFormat format, int width,
                                           int height) {
  return std::make_unique<CudaDecoder>(ctx, format, width, height);
}
}  // namespace detail

}  // namespace codec2
}  // namespace cudadiff
