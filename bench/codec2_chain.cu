// How fast can a GPU decode version 2's rANS lanes at all? A model of the
// CUDA decoder's chain of dependent steps (cuda/kernels/codec2_dec.cu), not
// the decoder: one warp per tile, one thread per lane, each lane decoding
// random payload bytes (the tokens then come out with the tables'
// frequencies, and the lanes read bytes at the rate a real stream of that
// entropy would) with the format's decoding tables and renormalisation. It
// answers what the decoder itself cannot: how much of a step is the chain of
// the three symbols alone, and what would a different renormalisation, a
// different order of the bytes or contexts that do not wait for the left
// neighbour save (docs/performance.md, "The rANS chain alone").
//
// Part 1, one symbol: 108 warps (a 1080p frame's full tiles, one per
// multiprocessor as the decoder has them), each lane decoding 2,106 symbols
// one after the other (a full tile's 702 steps of three components), adding
// one thing at a time: the token from one table, from a table per symbol,
// the lane's bytes from its own stream in shared memory, their positions
// from votes of the warp, the format's renormalisation (two votes, one or
// two bytes, global memory).
// Part 2, a step of three components as the format codes it (the second and
// third component's table depends on whether the first's residual is 0, a
// token of 16 or more has raw bits read from the state), in two layouts of
// the same 2 million samples: 108 tiles of 32 lanes walking 702 steps (the
// encoders' default tiles at 1920x1080) and 864 tiles of 32 lanes walking
// 142 steps; with variants that the format does not allow, among them
// samples coded in one or two symbols instead of three.
// Part 3, the same step with 10-bit tANS states instead of rANS (not the
// format; docs/performance.md, "The same step with tANS"), in both layouts:
// 40 tables in shared memory, or a table per distribution read from global
// memory, which lets eight tiles share a block in the second layout; and in
// the second layout a palette of 16 tables in shared memory that the
// distributions share (bench/tans_body_model.py prices it in bytes),
// eight tiles per block.
// Part 4, in the second layout, the encoder's side of that palette: each
// lane's symbols coded in reverse with the palette's encoding tables, the
// words placed by votes of the warp, one or eight tiles per block (and, to
// compare, each lane's words in a column of its own).
//
//   codec2_chain [--runs N]     (needs a CUDA device; exit 77 without one)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "../cuda/kernels/codec2_rans.cuh"
#include "cudadiff/codec2_rules.h"

using namespace cudadiff::codec2;

namespace {

#define CHAIN_CHECK(x)                                                                   \
  do {                                                                                   \
    const cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "codec2_chain: %s failed: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

constexpr unsigned kFull = 0xffffffffu;

// The decoder's tables (DistTab), token lookup (decode_symbol()) and
// renormalisation (renorm_from()) are its own, from codec2_rans.cuh.
constexpr int kNumTabs = 40;
constexpr int kPaletteTabs = 16;  // part 3's palette
constexpr int kNC = 3;            // components (RGB)
constexpr int kDists =
    kNC * kActivityBuckets * 2;  // per component: 13 contexts x 2 (first's residual)
constexpr int kLanes = 32;
constexpr int kSharedBytes = 4096;  // a payload window in shared memory (variants)

// ---- part 1: one symbol ---------------------------------------------------
enum Rung {
  kOneTable,     // the token from one table; the state kept in range by arithmetic
  kTablePerSym,  // a table per symbol (from a map in shared memory)
  kOwnShared,    // + 2 bytes of the lane's own stream (shared memory) when x < 2^16
  kVotedShared,  // + their position from votes of the warp
  kFormat,       // the format's renormalisation: two votes, 1-2 bytes, global memory
  kRungs
};
const char *const kRungNames[kRungs] = {"token from one table", "a table per symbol",
                                        "+ own stream's bytes (shared memory)",
                                        "+ positions by votes", "the format's renormalisation"};

template <int R>
__global__ void __launch_bounds__(32) symbol_kernel(const DistTab *gtabs, const uint8_t *payload,
                                                    uint32_t region, int n, uint32_t *out) {
  __shared__ DistTab tabs[kNumTabs];
  __shared__ uint8_t bytes[kSharedBytes];
  __shared__ uint8_t map[64];
  const int lane = threadIdx.x;
  for (int v = lane; v < int(sizeof(tabs) / 4); v += 32)
    reinterpret_cast<uint32_t *>(tabs)[v] = reinterpret_cast<const uint32_t *>(gtabs)[v];
  for (int v = lane; v < kSharedBytes; v += 32) bytes[v] = payload[v];
  for (int v = lane; v < 64; v += 32) map[v] = uint8_t((v * 13) % kNumTabs);
  __syncwarp();
  const uint8_t *p = payload + size_t(blockIdx.x) * region;  // the format's: one stream
  const uint32_t end = region;
  const unsigned lt = (1u << lane) - 1;
  uint32_t x = kRansLow | (uint32_t(lane) * 7919u), h = 0;
  uint32_t pos = R == kFormat ? 0 : uint32_t(lane) * 64;  // own streams: apart in the window
  for (int i = 0; i < n; ++i) {
    h += uint32_t(decode_symbol(x, R == kOneTable ? tabs : tabs + map[i & 63]));
    if (R <= kTablePerSym) {
      x = x < (1u << 16) ? (x << 16) | 0x1234u : x;
    } else if (R == kOwnShared) {
      if (x < (1u << 16)) {
        x = (x << 16) | uint32_t(bytes[pos % kSharedBytes]) << 8 | bytes[(pos + 1) % kSharedBytes];
        pos += 2;
      }
    } else if (R == kVotedShared) {
      const bool one = x < (1u << 16);
      const uint32_t ones = __ballot_sync(kFull, one);
      if (ones) {
        if (one) {
          const uint32_t at = pos + 2 * __popc(ones & lt);
          x = (x << 16) | uint32_t(bytes[at % kSharedBytes]) << 8 | bytes[(at + 1) % kSharedBytes];
        }
        pos += 2 * __popc(ones);
      }
    } else if (!renorm(x, true, p, pos, end, lt)) {  // the decoder's
      out[blockIdx.x * 32 + lane] = 0xdead;
      return;
    }
  }
  out[blockIdx.x * 32 + lane] = x ^ h ^ pos;
}

// ---- part 2: a step of three components -----------------------------------
// How a step chooses its tables.
enum Contexts {
  kCtxNone,   // from the step and lane only (no context waits for a decoded value)
  kCtxLeft,   // the format's spatial contexts: left, above-left, above, above-right
  kCtxAbove,  // the row above only (above-left, above, above-right, and the one before)
};
// Variants of the stream (FLAGS): the format has none of them.
constexpr int kBytesShared = 1;  // the payload's bytes from shared memory (as if always prefetched)
constexpr int kNoRawBits = 2;    // no raw bits (tokens of 16 and more taken as values)
constexpr int kOwnStreams = 4;   // each lane its own stream of bytes (no votes)
constexpr int kRenorm16 = 8;     // 16-bit renormalisation: 2 bytes once when x < 2^16

// The payload window in shared memory, read as renorm_from() reads the
// payload (PayloadBytes).
struct WindowBytes {
  const uint8_t *window;
  __device__ __forceinline__ uint32_t operator()(uint32_t at, uint32_t next = 0) const {
    return window[(at + next) % kSharedBytes];
  }
};

// Renormalises the lanes that are `active` from the bytes byte(at, next);
// false when the payload runs short.
template <int FLAGS, class Bytes>
__device__ __forceinline__ bool renorm_variant(uint32_t &x, bool active, const Bytes &byte,
                                               uint32_t &pos, uint32_t end, unsigned lt) {
  if (FLAGS & kOwnStreams) {
    if (FLAGS & kRenorm16) {
      if (active && x < (1u << 16)) {
        x = (x << 16) | byte(pos) << 8 | byte(pos, 1);
        pos += 2;
      }
      return true;
    }
    const bool one = active && x < kRansLow, two = active && x < (1u << 15);
    if (one) {
      x = !two ? (x << 8) | byte(pos) : (x << 16) | byte(pos) << 8 | byte(pos, 1);
      pos += two ? 2 : 1;
    }
    return true;
  }
  if (FLAGS & kRenorm16) {
    const bool one = active && x < (1u << 16);
    const uint32_t ones = __ballot_sync(kFull, one);
    if (ones == 0) return true;
    const uint32_t total = 2 * __popc(ones);
    if (end - pos < total) return false;
    if (one) {
      const uint32_t at = pos + 2 * __popc(ones & lt);
      x = (x << 16) | byte(at) << 8 | byte(at, 1);
    }
    pos += total;
    return true;
  }
  return renorm_from(x, active, byte, pos, end, lt);  // the format's: the decoder's own
}

// A step's contexts, as the decoder forms them from the ring of values
// (`at`) and the values to the left: component c's first symbol takes
// table map[dist[c]], the others (after a non-zero first residual)
// map[dist[c] + kActivityBuckets]; pred[c] is its prediction. Parts 2 and 3.
template <int CTX, class At>
__device__ __forceinline__ void step_contexts(const At &at, int up, int col, int st, int lane,
                                              const int (&left)[kNC], const uint8_t *bucket,
                                              int (&dist)[kNC], int (&pred)[kNC]) {
#pragma unroll
  for (int c = 0; c < kNC; ++c) {
    const int b = at(up, col, c), cc = at(up, col > 0 ? col - 1 : 0, c);
    const int d = at(up, col + 1, c);
    const int a = left[c];
    int g;
    if (CTX == kCtxNone) {
      g = (st * 7 + lane * 3 + c) & 63;
    } else if (CTX == kCtxLeft) {
      g = spatial_activity(a, b, cc, d);
    } else {
      const int e = at(up, col > 1 ? col - 2 : 0, c);
      g = iabs(b - cc) + iabs(b - d) + iabs(cc - e) + iabs(d - b) / 2;
    }
    pred[c] = CTX == kCtxNone ? 0 : med(a, b, cc);
    dist[c] = c * 2 * kActivityBuckets + bucket_from_table(bucket, g);
  }
}

// A component's value from its prediction and residual, in range.
__device__ __forceinline__ int step_value(int pred, int r) {
  const int val = pred + r;
  return val < -255 ? -255 : val > 255 ? 255 : val;
}

// The end of a step: an active lane's values into the ring, and to its left.
template <class At>
__device__ __forceinline__ void keep_values(const At &at, int slot, int col, bool active,
                                            const int (&value)[kNC], int (&left)[kNC]) {
#pragma unroll
  for (int c = 0; c < kNC; ++c) {
    if (active) at(slot, col, c) = int16_t(value[c]);
    left[c] = active ? value[c] : left[c];
  }
  __syncwarp();
}

// One warp per tile; lane l decodes row j = round * 32 + l of a tile `width`
// samples wide at step round * period + i + 2l (the format's schedule), its
// values kept in a ring of 33 rows in shared memory as the decoder keeps its
// working values.
template <int CTX, int FLAGS, int NSYM = kNC>
__global__ void __launch_bounds__(256)
    step_kernel(const uint8_t *payload, size_t tile_bytes, const DistTab *gtabs,
                const uint16_t *gmap, int width, int steps, uint32_t *out) {
  extern __shared__ uint4 dyn[];
  DistTab *tabs = reinterpret_cast<DistTab *>(dyn);
  __shared__ uint8_t bucket[kActivityTableMax + 1];
  __shared__ uint16_t map[kDists];
  __shared__ uint8_t window[kSharedBytes];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int period = width > 2 * kLanes ? width : 2 * kLanes;
  const int cols = period + 2;  // column 0: left of the first sample; one right of the last
  int16_t *ring = reinterpret_cast<int16_t *>(tabs + kNumTabs) + size_t(warp) * 33 * cols * kNC;
  const auto at = [&](int row, int col, int c) -> int16_t & {
    return ring[(row * cols + col) * kNC + c];
  };
  for (int v = threadIdx.x; v < int(sizeof(DistTab) * kNumTabs / 4); v += blockDim.x)
    reinterpret_cast<uint32_t *>(tabs)[v] = reinterpret_cast<const uint32_t *>(gtabs)[v];
  for (int g = threadIdx.x; g <= kActivityTableMax; g += blockDim.x)
    bucket[g] = uint8_t(activity_bucket(g));
  for (int d = threadIdx.x; d < kDists; d += blockDim.x) map[d] = gmap[d];
  for (int v = threadIdx.x; v < kSharedBytes; v += blockDim.x) window[v] = payload[v * 7 + 3];
  for (int v = lane; v < 33 * cols * kNC; v += 32) ring[v] = 0;
  __syncthreads();
  const int tile = blockIdx.x * (blockDim.x >> 5) + warp;
  const uint8_t *p = payload + size_t(tile) * tile_bytes;
  const auto bytes = [&] {
    if constexpr ((FLAGS & kBytesShared) != 0)
      return WindowBytes{window};
    else
      return PayloadBytes{p};
  }();
  const uint32_t end = uint32_t(tile_bytes);
  const unsigned lt = (1u << lane) - 1;
  uint32_t x = uint32_t(p[4 * lane]) << 24 | uint32_t(p[4 * lane + 1]) << 16 |
               uint32_t(p[4 * lane + 2]) << 8 | p[4 * lane + 3];
  x = (x & 0x7fffffffu) | kRansLow;
  uint32_t pos = (FLAGS & kOwnStreams) ? 128 + uint32_t(lane) * uint32_t(tile_bytes / 33) : 128;
  uint32_t h = 0;
  int left[kNC] = {0, 0, 0};
  for (int st = 0; st < steps; ++st) {
    const int tt = st - 2 * lane;
    const int i = tt < 0 ? -1 : tt % period, j = (tt < 0 ? 0 : tt / period) * kLanes + lane;
    const bool active = tt >= 0 && i < width;
    const int slot = j % 33, up = (j + 32) % 33;
    const int col = i + 1;  // 0 before the first step
    if (!(FLAGS & (kBytesShared | kOwnStreams)) && lane == 0 && pos + 256u < end)
      asm volatile("prefetch.global.L1 [%0];" ::"l"(p + pos + 256));
    int dist[kNC], pred[kNC];
    step_contexts<CTX>(at, up, col, st, lane, left, bucket, dist, pred);
    const DistTab *tab0[kNC], *tab1[kNC];
#pragma unroll
    for (int c = 0; c < kNC; ++c) {
      tab0[c] = tabs + map[dist[c]];
      tab1[c] = tabs + map[dist[c] + kActivityBuckets];
    }
    bool cross = false;
    int value[kNC];
#pragma unroll
    for (int c = 0; c < kNC; ++c) {
      if (c >= NSYM) {  // a sample coded in fewer symbols: the others' residuals 0
        value[c] = pred[c];
        continue;
      }
      uint32_t xn = x;
      int token = decode_symbol(xn, cross ? tab1[c] : tab0[c]);
      token = active ? token : 0;
      x = active ? xn : x;
      h = active ? lane_checksum(h, uint32_t(token)) : h;
      const bool extra = !(FLAGS & kNoRawBits) && active && token >= kDirectTokens;
      const bool any_extra = (FLAGS & kNoRawBits) ? false : __any_sync(kFull, extra);
      if (!renorm_variant<FLAGS>(x, active, bytes, pos, end, lt)) {
        out[tile * 32 + lane] = 0xdead;
        return;
      }
      uint32_t v = uint32_t(token);
      if (any_extra) {
        const int nbits = extra ? token_extra_bits(token) : 0;
        const uint32_t bits = x & ((1u << nbits) - 1);
        x >>= nbits;
        if (!renorm_variant<FLAGS>(x, extra, bytes, pos, end, lt)) {
          out[tile * 32 + lane] = 0xdead;
          return;
        }
        v = extra ? token_value(token, bits) : v;
      }
      const int r = unzigzag(v);
      if (c == 0) cross = r != 0;
      value[c] = step_value(pred[c], r);
    }
    keep_values(at, slot, col, active, value, left);
  }
  out[tile * 32 + lane] = x ^ h ^ pos;
}

// ---- part 3: the same step with tANS instead of rANS ---------------------
// Not the format: what a step would cost if each symbol came from a tANS
// (table-driven ANS) state of 10 bits. A distribution's decoding table has
// kChainStates entries (token, bits to read, base of the next state); a
// symbol is one lookup in shared memory and nb bits from the lane's bit
// buffer: state = base + bits. A lane refills its buffer by a 32-bit word
// when it holds fewer than 32 bits, the words handed out in lane order by a
// vote of the warp (one interleaved stream per tile, as the format's
// bytes). A token of 16 or more reads its raw bits from the same buffer.
// The step, contexts and ring of values are step_kernel's. A lane would end
// in a 10-bit state instead of a 32-bit one.
constexpr int kChainBits = 10, kChainStates = 1 << kChainBits;

// GLOBAL_TABS: the tables stay in global memory, each entry read through
// the L1 cache (__ldg) where it is needed, so that more tables than shared
// memory holds (a real frame's, "The tables a real frame needs") and several
// warps per block fit; otherwise the first `ntabs` tables are copied to
// shared memory. WARPS warps per block, one tile each (tiles
// blockIdx.x * WARPS + warp), each with its ring.
template <int CTX, int NSYM = kNC, bool WINDOW = false, bool GLOBAL_TABS = false, int WARPS = 1>
__global__ void __launch_bounds__(32 * WARPS)
    tans_step_kernel(const uint32_t *payload, size_t tile_words, const uint32_t *gtabs,
                     const uint16_t *gmap, int ntabs, int width, int steps, uint32_t *out) {
  extern __shared__ uint4 dyn[];
  uint32_t *tabs = reinterpret_cast<uint32_t *>(dyn);
  __shared__ uint8_t bucket[kActivityTableMax + 1];
  __shared__ uint16_t map[kDists];
  const int lane = WARPS == 1 ? int(threadIdx.x) : int(threadIdx.x & 31);
  const int warp = WARPS == 1 ? 0 : int(threadIdx.x >> 5);
  const int period = width > 2 * kLanes ? width : 2 * kLanes;
  const int cols = period + 2;
  int16_t *ring = reinterpret_cast<int16_t *>(tabs + (GLOBAL_TABS ? 0 : ntabs * kChainStates)) +
                  (WARPS == 1 ? 0 : warp * 33 * cols * kNC);
  const auto at = [&](int row, int col, int c) -> int16_t & {
    return ring[(row * cols + col) * kNC + c];
  };
  if (!GLOBAL_TABS)
    for (int v = threadIdx.x; v < ntabs * kChainStates; v += 32 * WARPS) tabs[v] = gtabs[v];
  for (int g = threadIdx.x; g <= kActivityTableMax; g += 32 * WARPS)
    bucket[g] = uint8_t(activity_bucket(g));
  for (int d = threadIdx.x; d < kDists; d += 32 * WARPS) map[d] = gmap[d];
  for (int v = lane; v < 33 * cols * kNC; v += 32) ring[v] = 0;
  if (WARPS == 1)
    __syncwarp();
  else
    __syncthreads();
  const int tile = blockIdx.x * WARPS + warp;
  const uint32_t *w = payload + size_t(tile) * tile_words;
  const uint32_t *const tab_base = GLOBAL_TABS ? gtabs : tabs;
  const unsigned lt = (1u << lane) - 1;
  uint32_t x = w[lane] & (kChainStates - 1);
  uint32_t wpos = 32;
  uint64_t buf = __ldg(w + wpos + lane);
  int cnt = 32;
  wpos += 32;
  // WINDOW: the warp's next 64 words held in registers (lane l: words l and
  // 32 + l), so that a refill is a shuffle, and the load of the words after
  // them is off the chain until they are needed.
  uint32_t win = WINDOW ? __ldg(w + wpos + lane) : 0,
           nxt = WINDOW ? __ldg(w + wpos + 32 + lane) : 0;
  uint32_t h = 0;
  int left[kNC] = {0, 0, 0};
  for (int st = 0; st < steps; ++st) {
    const int tt = st - 2 * lane;
    const int i = tt < 0 ? -1 : tt % period, j = (tt < 0 ? 0 : tt / period) * kLanes + lane;
    const bool active = tt >= 0 && i < width;
    const int slot = j % 33, up = (j + 32) % 33;
    const int col = i + 1;
    int dist[kNC], pred[kNC];
    step_contexts<CTX>(at, up, col, st, lane, left, bucket, dist, pred);
    const uint32_t *tab0[kNC], *tab1[kNC];
#pragma unroll
    for (int c = 0; c < kNC; ++c) {
      tab0[c] = tab_base + map[dist[c]] * kChainStates;
      tab1[c] = tab_base + map[dist[c] + kActivityBuckets] * kChainStates;
    }
    bool cross = false;
    int value[kNC];
#pragma unroll
    for (int c = 0; c < kNC; ++c) {
      if (c >= NSYM) {
        value[c] = pred[c];
        continue;
      }
      const uint32_t *const entry = (cross ? tab1[c] : tab0[c]) + x;
      const uint32_t e = GLOBAL_TABS ? __ldg(entry) : *entry;
      const int token = active ? int(e & 31u) : 0;
      const int nb = active ? int((e >> 5) & 15u) : 0;
      const int raw = token >= kDirectTokens ? token_extra_bits(token) : 0;
      const uint32_t bits = uint32_t(buf) & ((1u << nb) - 1);
      x = active ? (e >> 9) + bits : x;
      const uint32_t rb = uint32_t(buf >> nb) & ((1u << raw) - 1);
      buf >>= nb + raw;
      cnt -= nb + raw;
      h = active ? lane_checksum(h, uint32_t(token)) : h;
      const bool refill = cnt < 32;
      const uint32_t refills = __ballot_sync(kFull, refill);
      if (refills) {
        const int k = __popc(refills);
        if (WINDOW) {
          const uint32_t word = __shfl_sync(kFull, win, __popc(refills & lt));
          if (refill) {
            buf |= uint64_t(word) << cnt;
            cnt += 32;
          }
          const int from = lane + k;  // the window moves on by k words
          const uint32_t a = __shfl_sync(kFull, win, from & 31),
                         b = __shfl_sync(kFull, nxt, from & 31);
          win = from < 32 ? a : b;
          wpos += k;
          if (wpos + 128 > tile_words) wpos = 64;  // (random words: wrap around)
          nxt = from < 32 ? b : __ldg(w + wpos + 32 + lane);
        } else {
          if (refill) {
            buf |= uint64_t(__ldg(w + wpos + __popc(refills & lt))) << cnt;
            cnt += 32;
          }
          wpos += k;
          if (wpos + 64 > tile_words) wpos = 64;  // (random words: wrap around the window)
        }
      }
      const uint32_t v = token >= kDirectTokens ? token_value(token, rb) : uint32_t(token);
      const int r = unzigzag(v);
      if (c == 0) cross = r != 0;
      value[c] = step_value(pred[c], r);
    }
    keep_values(at, slot, col, active, value, left);
  }
  out[tile * 32 + lane] = x ^ h ^ wpos;
}

// ---- part 4: the encoder's side of part 3's palette -----------------------
// Not the format: what the encoder's pass would cost with tANS lanes. Each
// warp codes a tile, each thread a lane, its symbols in the reverse of the
// decoding order (steps from the last, in each the components from the
// last), each symbol a token of the table the front part chose, with raw
// bits for tokens of 16 and more: the state's bits and the raw bits into
// the lane's 64-bit buffer, the state from the palette's encoding tables in
// shared memory (make_tans_enc()), and every full 32-bit word written to
// the tile's region from its end backwards, its place given by a vote of
// the warp (the reverse of the decoder's refills). The symbols come from
// global memory as the encoder's front part would leave them (token |
// table << 5 | raw bits << 12, lane by lane). WARPS tiles per block share
// the tables. The encoder's real pass has loading and placing warps
// beside the coding one; this has only the chain and its writes.
constexpr int kEncEntry = 2 * kTokens;  // the deltas of a table, int32 each
constexpr int kEncBatch = 8;            // symbols loaded at once per lane

struct EncTile {
  uint32_t words;  // written
  uint32_t state;  // the lane's last state (its first to the decoder)
};

// One symbol v (token | table << 5 | raw bits << 12) coded onto state X in
// [L, 2L): X becomes the state the decoder reads before it; returns how
// many bits to write, `bits` (the raw bits, then the state's nb low bits).
__host__ __device__ inline int tans_encode_symbol(uint32_t &x, uint32_t v, const uint16_t *next,
                                                  const int32_t *delta, uint64_t &bits) {
  const int token = int(v & 31u), t = int((v >> 5) & 127u);
  const int raw = token >= kDirectTokens ? token_extra_bits(token) : 0;
  const int32_t *d = delta + t * kEncEntry + 2 * token;
  const uint32_t nb = (x + uint32_t(d[0])) >> 16;
  bits = uint64_t((v >> 12) & ((1u << raw) - 1)) | uint64_t(x & ((1u << nb) - 1)) << raw;
  x = next[t * kChainStates + int(x >> nb) + d[1]];
  return raw + int(nb);
}

// VOTES false: each lane writes its words to its own column of the tile's
// region (word k of lane l at k * 32 + l), the coding alone, as the real
// pass's coding warp works (its placing warps put the bytes in order).
template <int WARPS, bool VOTES>
__global__ void __launch_bounds__(32 * WARPS)
    tans_encode_kernel(const uint32_t *syms, const uint16_t *gnext, const int32_t *gdelta,
                       int ntabs, int steps, uint32_t *out, uint32_t tile_words, EncTile *ends) {
  extern __shared__ uint4 dyn[];
  uint16_t *next = reinterpret_cast<uint16_t *>(dyn);
  int32_t *delta = reinterpret_cast<int32_t *>(next + ntabs * kChainStates);
  for (int v = threadIdx.x; v < ntabs * kChainStates; v += 32 * WARPS) next[v] = gnext[v];
  for (int v = threadIdx.x; v < ntabs * kEncEntry; v += 32 * WARPS) delta[v] = gdelta[v];
  __syncthreads();
  const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5);
  const int tile = blockIdx.x * WARPS + warp;
  const unsigned lt = (1u << lane) - 1;
  const uint32_t *sym = syms + size_t(tile) * steps * kNC * 32 + lane;
  uint32_t *end = out + size_t(tile + 1) * tile_words;
  uint32_t x = kChainStates;  // X in [L, 2L): the state the decoder must end in
  uint64_t buf = 0;
  int cnt = 0;
  uint32_t written = 0;
  const auto code = [&](uint32_t v) {
    uint64_t bits;
    const int count = tans_encode_symbol(x, v, next, delta, bits);
    buf |= bits << cnt;
    cnt += count;
    const bool full = cnt >= 32;
    if (!VOTES) {
      if (full) {
        end[-1 - int(written * 32 + lane)] = uint32_t(buf);
        buf >>= 32;
        cnt -= 32;
        ++written;
      }
      return;
    }
    const unsigned fulls = __ballot_sync(kFull, full);
    if (fulls) {
      if (full) {
        end[-1 - int(written + __popc(fulls & lt))] = uint32_t(buf);
        buf >>= 32;
        cnt -= 32;
      }
      written += __popc(fulls);
    }
  };
  // The symbols kEncBatch at a time, the next batch's loads issued before
  // the current one is coded (as the real pass's loading warps stage them),
  // so that the chain does not wait for global memory.
  const int n = steps * kNC;
  uint32_t cur[kEncBatch], ahead[kEncBatch];
  const auto load = [&](uint32_t *v, int i0) {
#pragma unroll
    for (int j = 0; j < kEncBatch; ++j) v[j] = i0 - j >= 0 ? __ldg(sym + size_t(i0 - j) * 32) : 0;
  };
  load(cur, n - 1);
  for (int i0 = n - 1; i0 >= 0; i0 -= kEncBatch) {
    load(ahead, i0 - kEncBatch);
#pragma unroll
    for (int j = 0; j < kEncBatch; ++j)
      if (i0 - j >= 0) code(cur[j]);
#pragma unroll
    for (int j = 0; j < kEncBatch; ++j) cur[j] = ahead[j];
  }
  if (!VOTES)
    for (int o = 16; o > 0; o >>= 1) written += __shfl_xor_sync(kFull, written, o);
  if (lane == 0) ends[tile] = EncTile{written, x};
}

// The same pass on the host for one tile: its words, and lane 0's last state.
EncTile encode_tile_host(const uint32_t *sym, const uint16_t *next, const int32_t *delta,
                         int steps) {
  uint32_t x[32], written = 0;
  int cnt[32] = {};
  for (int l = 0; l < 32; ++l) x[l] = kChainStates;
  for (int i = steps * kNC - 1; i >= 0; --i)
    for (int l = 0; l < 32; ++l) {
      uint64_t bits;
      cnt[l] += tans_encode_symbol(x[l], sym[size_t(i) * 32 + l], next, delta, bits);
      if (cnt[l] >= 32) {
        cnt[l] -= 32;
        ++written;
      }
    }
  return EncTile{written, x[0]};
}

// Geometric frequencies with ratio rho normalised to kChainStates (every
// token present, n), spread over the states with FSE's step (sym: the token
// of each state).
void tans_spread(double rho, int *n, std::vector<int> &sym) {
  double wsum = 0, wt[kTokens];
  for (int k = 0; k < kTokens; ++k) wsum += (wt[k] = std::pow(rho, k));
  int total = 0;
  for (int k = 0; k < kTokens; ++k) {
    n[k] = std::max(1, int(wt[k] / wsum * kChainStates));
    total += n[k];
  }
  n[0] += kChainStates - total;
  sym.assign(kChainStates, 0);
  const int stride = (kChainStates >> 1) + (kChainStates >> 3) + 3;
  int pos = 0;
  for (int k = 0; k < kTokens; ++k)
    for (int r = 0; r < n[k]; ++r) {
      sym[pos] = k;
      pos = (pos + stride) & (kChainStates - 1);
    }
}

// A tANS decoding table of kChainStates entries for ratio rho, each entry
// token | nb << 5 | base << 9.
void make_tans(double rho, uint32_t *t) {
  int n[kTokens];
  std::vector<int> sym;
  tans_spread(rho, n, sym);
  int next[kTokens];
  for (int k = 0; k < kTokens; ++k) next[k] = n[k];
  for (int s = 0; s < kChainStates; ++s) {
    const int k = sym[s], q = next[k]++;
    int nb = 0;
    while ((q << nb) < kChainStates) ++nb;
    const uint32_t base = uint32_t((q << nb) - kChainStates);
    t[s] = uint32_t(k) | uint32_t(nb) << 5 | base << 9;
  }
}

// The encoding side of make_tans()'s table for ratio rho (FSE's): `next`,
// the state X' in [L, 2L) that comes before the state index read for the
// j-th state of token k, at next[start_k + j]; per token `delta[2k]`, which
// gives the bits to write from X as (X + delta[2k]) >> 16, and
// `delta[2k + 1]`, which gives X' as next[(X >> bits) + delta[2k + 1]]. The
// counts `n` come back for drawing tokens.
void make_tans_enc(double rho, uint16_t *next, int32_t *delta, int *n) {
  std::vector<int> sym;
  tans_spread(rho, n, sym);
  int start[kTokens], seen[kTokens] = {};
  for (int k = 0, c = 0; k < kTokens; c += n[k++]) start[k] = c;
  for (int s = 0; s < kChainStates; ++s) {
    const int k = sym[s];
    next[start[k] + seen[k]++] = uint16_t(kChainStates + s);
  }
  for (int k = 0; k < kTokens; ++k) {
    int high = 0;  // the highest bit of n - 1 (n = 1: the state's R bits)
    while (n[k] > 1 && ((n[k] - 1) >> (high + 1)) != 0) ++high;
    const int bits = n[k] == 1 ? kChainBits : kChainBits - high;
    delta[2 * k] = (bits << 16) - (n[k] << bits);
    delta[2 * k + 1] = start[k] - n[k];
  }
}

// Geometric token frequencies with ratio rho (every token present), as the
// decoder's table.
void make_tab(double rho, DistTab &t) {
  double w[kTokens], sum = 0;
  for (int k = 0; k < kTokens; ++k) sum += (w[k] = std::pow(rho, k));
  uint32_t f[kTokens], total = 0;
  for (int k = 0; k < kTokens; ++k) {
    f[k] = std::max<uint32_t>(1, uint32_t(w[k] / sum * kProbScale));
    total += f[k];
  }
  f[0] += kProbScale - total;
  std::memset(&t, 0, sizeof t);
  uint32_t cum = 0;
  for (int k = 0; k < kTokens; ++k) {
    t.ent[k] = cum | uint32_t(k) << 12 | f[k] << 17;
    t.mask[cum >> 5] |= 1u << (cum & 31);
    cum += f[k];
  }
  for (int q = 0; q < kTabBuckets; ++q) {
    int before = 0;
    for (int k = 0; k < kTokens; ++k) before += (t.ent[k] & 0xfff) < uint32_t(32 * q);
    t.before[q] = int8_t(before - 1);
  }
}

template <class Launch>
float best_ms(const Launch &launch, int runs) {
  cudaEvent_t e0, e1;
  CHAIN_CHECK(cudaEventCreate(&e0));
  CHAIN_CHECK(cudaEventCreate(&e1));
  launch();
  CHAIN_CHECK(cudaGetLastError());
  CHAIN_CHECK(cudaDeviceSynchronize());
  float best = 1e30f;
  for (int r = 0; r < runs; ++r) {
    CHAIN_CHECK(cudaEventRecord(e0));
    launch();
    CHAIN_CHECK(cudaEventRecord(e1));
    CHAIN_CHECK(cudaEventSynchronize(e1));
    float t = 0;
    CHAIN_CHECK(cudaEventElapsedTime(&t, e0, e1));
    best = std::min(best, t);
  }
  CHAIN_CHECK(cudaEventDestroy(e0));
  CHAIN_CHECK(cudaEventDestroy(e1));
  return best;
}

// Part 4 in a layout of `tiles` tiles of 32 lanes walking `steps` steps:
// symbols drawn with the palette's frequencies (each symbol's table that of
// a context drawn at random, as part 3's map gives it), coded by
// tans_encode_kernel with one and with eight tiles per block, two tiles
// checked against encode_tile_host().
void encoder_pass(const double *rho, const std::vector<uint16_t> &palette_map, int tiles, int steps,
                  int runs, double cycles_per_ms, const cudaDeviceProp &prop) {
  std::vector<uint16_t> next(size_t(kPaletteTabs) * kChainStates);
  std::vector<int32_t> delta(size_t(kPaletteTabs) * kEncEntry);
  std::vector<int> n(size_t(kPaletteTabs) * kTokens);
  for (int t = 0; t < kPaletteTabs; ++t)
    make_tans_enc(rho[0] + (rho[1] - rho[0]) * t / (kPaletteTabs - 1),
                  next.data() + size_t(t) * kChainStates, delta.data() + size_t(t) * kEncEntry,
                  n.data() + size_t(t) * kTokens);
  const size_t per_tile = size_t(steps) * kNC * 32;
  std::vector<uint32_t> syms(per_tile * tiles);
  std::mt19937 rng(2);
  for (size_t i = 0; i < syms.size(); ++i) {
    const int c = int(i / 32 % kNC);
    const int dist = c * kActivityBuckets * 2 + int(rng() % (c == 0 ? 13u : 26u));
    const int t = palette_map[dist];
    int u = int(rng() % kChainStates), token = 0;
    while (u >= n[size_t(t) * kTokens + token]) u -= n[size_t(t) * kTokens + token++];
    syms[i] = uint32_t(token) | uint32_t(t) << 5 | (rng() & 1023u) << 12;
  }
  const uint32_t tile_words = uint32_t(steps * kNC * (kChainBits + 10) + 32);
  uint32_t *d_syms = nullptr, *d_out = nullptr;
  uint16_t *d_next = nullptr;
  int32_t *d_delta = nullptr;
  EncTile *d_ends = nullptr;
  CHAIN_CHECK(cudaMalloc(&d_syms, 4 * syms.size()));
  CHAIN_CHECK(cudaMalloc(&d_out, 4 * size_t(tile_words) * tiles));
  CHAIN_CHECK(cudaMalloc(&d_next, 2 * next.size()));
  CHAIN_CHECK(cudaMalloc(&d_delta, 4 * delta.size()));
  CHAIN_CHECK(cudaMalloc(&d_ends, sizeof(EncTile) * tiles));
  CHAIN_CHECK(cudaMemcpy(d_syms, syms.data(), 4 * syms.size(), cudaMemcpyHostToDevice));
  CHAIN_CHECK(cudaMemcpy(d_next, next.data(), 2 * next.size(), cudaMemcpyHostToDevice));
  CHAIN_CHECK(cudaMemcpy(d_delta, delta.data(), 4 * delta.size(), cudaMemcpyHostToDevice));
  const size_t smem = 2 * next.size() + 4 * delta.size();
  std::printf(
      "part 4: the encoder's pass with the palette's 16 tables in shared memory (%zu bytes)\n",
      smem);
  const auto pass = [&](auto kernel, int warps, const char *how) {
    CHAIN_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    int per_sm = 0;
    CHAIN_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * warps, smem));
    CHAIN_CHECK(cudaMemset(d_ends, 0, sizeof(EncTile) * tiles));  // (the pass before's)
    const float ms = best_ms(
        [&] {
          kernel<<<tiles / warps, 32 * warps, smem>>>(d_syms, d_next, d_delta, kPaletteTabs, steps,
                                                      d_out, tile_words, d_ends);
        },
        runs);
    std::vector<EncTile> ends(tiles);
    CHAIN_CHECK(cudaMemcpy(ends.data(), d_ends, sizeof(EncTile) * tiles, cudaMemcpyDeviceToHost));
    bool ok = true;
    for (const int t : {0, tiles - 1}) {
      const EncTile h =
          encode_tile_host(syms.data() + per_tile * t, next.data(), delta.data(), steps);
      ok &= h.words == ends[t].words && h.state == ends[t].state;
    }
    std::printf(
        "  %s, %d tile(s) per block, %d block(s) per multiprocessor (%.2f waves)   %.4f ms  %5.0f "
        "cycles per step  %.1f KB per tile%s\n",
        how, warps, per_sm, double(tiles / warps) / std::max(1, per_sm * prop.multiProcessorCount),
        ms, ms * cycles_per_ms / steps, 4.0 * ends[0].words / 1024,
        ok ? "" : "  (differs from the host's coding)");
    if (!ok) std::exit(1);
  };
  pass(tans_encode_kernel<1, true>, 1, "words placed by votes");
  pass(tans_encode_kernel<8, true>, 8, "words placed by votes");
  pass(tans_encode_kernel<8, false>, 8, "each lane its own words");
  CHAIN_CHECK(cudaFree(d_syms));
  CHAIN_CHECK(cudaFree(d_out));
  CHAIN_CHECK(cudaFree(d_next));
  CHAIN_CHECK(cudaFree(d_delta));
  CHAIN_CHECK(cudaFree(d_ends));
}

}  // namespace

int main(int argc, char **argv) {
  int runs = 15;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: codec2_chain [--runs N]\n");
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("codec2_chain: no CUDA device, skipped\n");
    return 77;
  }
  cudaDeviceProp prop{};
  CHAIN_CHECK(cudaGetDeviceProperties(&prop, 0));
  int clock_khz = 0;
  CHAIN_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  const double cycles_per_ms = double(clock_khz);
  std::printf("%s, %d multiprocessors, %.0f MHz (cycles below at this clock)\n", prop.name,
              prop.multiProcessorCount, clock_khz / 1000.0);

  constexpr int kMaxTiles = 864;
  const size_t tile_bytes = 320 * 1024;  // enough for every lane of every variant
  std::vector<uint8_t> payload(tile_bytes * kMaxTiles);
  std::mt19937 rng(1);
  for (auto &b : payload) b = uint8_t(rng());
  std::vector<uint16_t> map(kDists);
  for (int d = 0; d < kDists; ++d) map[d] = uint16_t(((d % 13) * 3 + (d / 13) % 3) % kNumTabs);
  uint8_t *d_payload = nullptr;
  DistTab *d_tabs = nullptr;
  uint16_t *d_map = nullptr;
  uint32_t *d_out = nullptr;
  CHAIN_CHECK(cudaMalloc(&d_payload, payload.size()));
  CHAIN_CHECK(cudaMalloc(&d_tabs, sizeof(DistTab) * kNumTabs));
  CHAIN_CHECK(cudaMalloc(&d_map, sizeof(uint16_t) * kDists));
  CHAIN_CHECK(cudaMalloc(&d_out, sizeof(uint32_t) * 32 * kMaxTiles));
  CHAIN_CHECK(cudaMemcpy(d_payload, payload.data(), payload.size(), cudaMemcpyHostToDevice));
  CHAIN_CHECK(cudaMemcpy(d_map, map.data(), sizeof(uint16_t) * kDists, cudaMemcpyHostToDevice));

  // Two sets of tables: tokens mostly small (P(0) 0.5-0.9, little raw bits)
  // and wider (P(0) 0.2-0.7).
  const double rhos[2][2] = {{0.1, 0.5}, {0.3, 0.8}};
  for (const auto &rho : rhos) {
    std::vector<DistTab> tabs(kNumTabs);
    for (int i = 0; i < kNumTabs; ++i)
      make_tab(rho[0] + (rho[1] - rho[0]) * i / (kNumTabs - 1), tabs[i]);
    CHAIN_CHECK(
        cudaMemcpy(d_tabs, tabs.data(), sizeof(DistTab) * kNumTabs, cudaMemcpyHostToDevice));
    std::printf("\ntables with geometric frequencies, ratio %.1f to %.1f\n", rho[0], rho[1]);

    std::printf("part 1: one symbol (108 warps, 2,106 symbols per lane)\n");
    const int n = 2106;
    const auto rung = [&](auto kernel, int r) {
      const float ms = best_ms(
          [&] { kernel<<<108, 32>>>(d_tabs, d_payload, uint32_t(tile_bytes), n, d_out); }, runs);
      std::vector<uint32_t> out(size_t(32) * 108);
      CHAIN_CHECK(cudaMemcpy(out.data(), d_out, 4 * out.size(), cudaMemcpyDeviceToHost));
      const bool short_payload = std::count(out.begin(), out.end(), 0xdeadu) > 0;
      std::printf("  %-40s %.4f ms  %4.0f cycles per symbol%s\n", kRungNames[r], ms,
                  ms * cycles_per_ms / n, short_payload ? "  (payload ran short)" : "");
    };
    rung(symbol_kernel<kOneTable>, kOneTable);
    rung(symbol_kernel<kTablePerSym>, kTablePerSym);
    rung(symbol_kernel<kOwnShared>, kOwnShared);
    rung(symbol_kernel<kVotedShared>, kVotedShared);
    rung(symbol_kernel<kFormat>, kFormat);

    struct Layout {
      int tiles, width, rounds, per_block;
      const char *name;
    } layouts[] = {{108, 160, 4, 1, "108 tiles x 32 lanes, 4 rows of 160 per lane"},
                   {864, 80, 1, 8, "864 tiles x 32 lanes, 1 row of 80 per lane"}};
    for (const Layout &L : layouts) {
      const int period = std::max(L.width, 2 * kLanes);
      const int steps = (L.rounds - 1) * period + L.width + 2 * (kLanes - 1);
      const size_t smem =
          sizeof(DistTab) * kNumTabs + size_t(L.per_block) * 33 * (period + 2) * kNC * 2;
      std::printf("part 2: a step of three components, %s: %d steps\n", L.name, steps);
      if (smem > prop.sharedMemPerBlockOptin) {
        std::printf("  skipped: needs %zu bytes of shared memory per block, the device has %zu\n",
                    smem, size_t(prop.sharedMemPerBlockOptin));
        continue;
      }
      const auto variant = [&](auto kernel, const char *name) {
        CHAIN_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        const float ms = best_ms(
            [&] {
              kernel<<<L.tiles / L.per_block, 32 * L.per_block, smem>>>(
                  d_payload, tile_bytes, d_tabs, d_map, L.width, steps, d_out);
            },
            runs);
        std::vector<uint32_t> out(size_t(32) * L.tiles);
        CHAIN_CHECK(cudaMemcpy(out.data(), d_out, 4 * out.size(), cudaMemcpyDeviceToHost));
        const bool short_payload = std::count(out.begin(), out.end(), 0xdeadu) > 0;
        std::printf("  %-52s %.4f ms  %5.0f cycles per step%s\n", name, ms,
                    ms * cycles_per_ms / steps, short_payload ? "  (payload ran short)" : "");
      };
      variant(step_kernel<kCtxLeft, 0>, "the format (contexts from the left and above)");
      variant(step_kernel<kCtxNone, 0>, "tables known beforehand");
      variant(step_kernel<kCtxAbove, 0>, "contexts from the row above only");
      variant(step_kernel<kCtxLeft, kBytesShared>, "bytes from shared memory");
      variant(step_kernel<kCtxLeft, kNoRawBits>, "no raw bits");
      variant(step_kernel<kCtxLeft, kOwnStreams>, "lanes with their own streams (no votes)");
      variant(step_kernel<kCtxLeft, kRenorm16>, "16-bit renormalisation");
      variant(step_kernel<kCtxLeft, kBytesShared | kNoRawBits | kRenorm16>,
              "16-bit, shared, no raw bits");
      variant(step_kernel<kCtxNone, kBytesShared | kNoRawBits | kOwnStreams | kRenorm16>,
              "all four, tables known beforehand");
      variant(step_kernel<kCtxLeft, 0, 2>, "the format's step with two symbols per sample");
      variant(step_kernel<kCtxLeft, 0, 1>, "the format's step with one symbol per sample");
      // Part 3 (tANS). Its 40 tables in shared memory take 160 KB: one warp
      // per block in the first layout, four in the second (two waves of
      // blocks). With a table per distribution (78) read from global memory
      // through the L1 cache instead, one or eight warps per block. In the
      // second layout also a palette of 16 tables (64 KB) in shared memory
      // with eight warps per block: the same spread of ratios, each
      // distribution mapped to the palette's table nearest to its table of
      // the 40.
      std::vector<uint32_t> tans(size_t(kNumTabs) * kChainStates);
      for (int t = 0; t < kNumTabs; ++t)
        make_tans(rho[0] + (rho[1] - rho[0]) * t / (kNumTabs - 1), tans.data() + t * kChainStates);
      std::vector<uint32_t> palette(size_t(kPaletteTabs) * kChainStates);
      for (int t = 0; t < kPaletteTabs; ++t)
        make_tans(rho[0] + (rho[1] - rho[0]) * t / (kPaletteTabs - 1),
                  palette.data() + t * kChainStates);
      std::vector<uint16_t> palette_map(kDists);
      for (int d = 0; d < kDists; ++d)
        palette_map[d] =
            uint16_t((map[d] * (kPaletteTabs - 1) + (kNumTabs - 1) / 2) / (kNumTabs - 1));
      std::vector<uint32_t> tans_all(size_t(kDists) * kChainStates);
      std::vector<uint16_t> ident(kDists);
      for (int d = 0; d < kDists; ++d) {
        make_tans(
            rho[0] + (rho[1] - rho[0]) * (d % kNumTabs) / (kNumTabs - 1) + 0.001 * (d / kNumTabs),
            tans_all.data() + size_t(d) * kChainStates);
        ident[d] = uint16_t(d);
      }
      uint32_t *d_tans = nullptr, *d_tans_all = nullptr, *d_palette = nullptr;
      uint16_t *d_ident = nullptr, *d_palette_map = nullptr;
      CHAIN_CHECK(cudaMalloc(&d_tans, 4 * tans.size()));
      CHAIN_CHECK(cudaMalloc(&d_palette, 4 * palette.size()));
      CHAIN_CHECK(cudaMalloc(&d_palette_map, sizeof(uint16_t) * kDists));
      CHAIN_CHECK(
          cudaMemcpy(d_palette, palette.data(), 4 * palette.size(), cudaMemcpyHostToDevice));
      CHAIN_CHECK(cudaMemcpy(d_palette_map, palette_map.data(), sizeof(uint16_t) * kDists,
                             cudaMemcpyHostToDevice));
      CHAIN_CHECK(cudaMalloc(&d_tans_all, 4 * tans_all.size()));
      CHAIN_CHECK(cudaMalloc(&d_ident, sizeof(uint16_t) * kDists));
      CHAIN_CHECK(cudaMemcpy(d_tans, tans.data(), 4 * tans.size(), cudaMemcpyHostToDevice));
      CHAIN_CHECK(
          cudaMemcpy(d_tans_all, tans_all.data(), 4 * tans_all.size(), cudaMemcpyHostToDevice));
      CHAIN_CHECK(
          cudaMemcpy(d_ident, ident.data(), sizeof(uint16_t) * kDists, cudaMemcpyHostToDevice));
      const size_t ring_bytes = size_t(33) * (period + 2) * kNC * 2;
      enum Tables { kShared, kGlobal, kPalette };
      for (const Tables where : {kShared, kGlobal, kPalette}) {
        const bool global = where == kGlobal;
        if (where == kPalette && L.per_block == 1) continue;
        const int warps = L.per_block == 1 ? 1 : where == kShared ? 4 : 8;
        const int ntabs = global ? kDists : where == kPalette ? kPaletteTabs : kNumTabs;
        const size_t tsmem =
            (global ? 0 : 4 * size_t(ntabs) * kChainStates) + size_t(warps) * ring_bytes;
        const uint32_t *tabs_arg = global ? d_tans_all : where == kPalette ? d_palette : d_tans;
        const uint16_t *map_arg = global ? d_ident : where == kPalette ? d_palette_map : d_map;
        std::printf(
            "part 3: the same step with 10-bit tANS states, %d tables %s, %d warp(s) per block "
            "(%zu bytes of shared memory)\n",
            ntabs, global ? "in global memory (L1)" : "in shared memory", warps, tsmem);
        if (tsmem > prop.sharedMemPerBlockOptin) {
          std::printf("  skipped: the device has %zu bytes per block\n",
                      size_t(prop.sharedMemPerBlockOptin));
          continue;
        }
        bool first = true;
        const auto tvariant = [&](auto kernel, const char *name) {
          CHAIN_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(tsmem)));
          if (first) {
            int per_sm = 0;
            CHAIN_CHECK(
                cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * warps, tsmem));
            std::printf("  %d block(s) per multiprocessor: %.2f waves\n", per_sm,
                        double(L.tiles / warps) / std::max(1, per_sm * prop.multiProcessorCount));
            first = false;
          }
          const float ms = best_ms(
              [&] {
                kernel<<<L.tiles / warps, 32 * warps, tsmem>>>(
                    reinterpret_cast<const uint32_t *>(d_payload), tile_bytes / 4, tabs_arg,
                    map_arg, ntabs, L.width, steps, d_out);
              },
              runs);
          std::printf("  %-52s %.4f ms  %5.0f cycles per step\n", name, ms,
                      ms * cycles_per_ms / steps);
        };
        // The three steps of every configuration: G, global tables; W, warps.
        const auto steps3 = [&](auto G, auto W) {
          constexpr bool g = decltype(G)::value;
          constexpr int w = decltype(W)::value;
          tvariant(tans_step_kernel<kCtxLeft, kNC, false, g, w>, "tANS, the format's contexts");
          tvariant(tans_step_kernel<kCtxNone, kNC, false, g, w>, "tANS, tables known beforehand");
          tvariant(tans_step_kernel<kCtxLeft, 1, false, g, w>, "tANS, one symbol per sample");
        };
        using Yes = std::true_type;
        using No = std::false_type;
        if (global && warps == 1) {
          steps3(Yes{}, std::integral_constant<int, 1>{});
        } else if (global) {
          steps3(Yes{}, std::integral_constant<int, 8>{});
        } else if (warps == 8) {
          steps3(No{}, std::integral_constant<int, 8>{});
        } else if (warps != 1) {
          steps3(No{}, std::integral_constant<int, 4>{});
        } else {
          steps3(No{}, std::integral_constant<int, 1>{});
          tvariant(tans_step_kernel<kCtxLeft, kNC, true>, "tANS, refills from a window (shuffles)");
          tvariant(tans_step_kernel<kCtxNone, kNC, true>, "tANS, window, tables known beforehand");
          tvariant(tans_step_kernel<kCtxLeft, 1, true>, "tANS, window, one symbol per sample");
        }
      }
      if (L.per_block > 1)
        encoder_pass(rho, palette_map, L.tiles, steps, runs, cycles_per_ms, prop);
      CHAIN_CHECK(cudaFree(d_tans));
      CHAIN_CHECK(cudaFree(d_palette));
      CHAIN_CHECK(cudaFree(d_palette_map));
      CHAIN_CHECK(cudaFree(d_tans_all));
      CHAIN_CHECK(cudaFree(d_ident));
    }
  }
  CHAIN_CHECK(cudaFree(d_payload));
  CHAIN_CHECK(cudaFree(d_tabs));
  CHAIN_CHECK(cudaFree(d_map));
  CHAIN_CHECK(cudaFree(d_out));
  return 0;
}
