// The version 2 encoder on the GPU: the same bodies as the CPU reference
// (cuda/cpu/codec2.cpp), byte for byte. docs/stream-format.md, "The
// encoder", lists the steps; here every per-sample and per-block step runs
// on the device, one thread per sample, one thread block per 16x16 block of
// the block grid and layer (so that a block's sums need no atomics between
// thread blocks of one layer):
//   1. prepare: the input's channels, its working values in both domains,
//      the reference's texture classes, and which blocks are not skipped;
//   2. round 1: every coded block's proxy symbols in the three classes
//      (kept as distribution * 32 + token) and the block's first costs;
//      decide; the proxies' histograms under that choice; their costs (a
//      format of one layer decides and counts in round 1's kernel);
//   3. round 2: the blocks' costs by those; decide again (one layer: in
//      round 2's kernel);
//   4. the reconstruction (the new reference) and its working values;
//   5. every tile's symbols in the reference's layout, and per tile the
//      histogram of its symbols; the tiles' types and the histogram of the
//      coded tiles;
//   6. the tables from the histogram, by the CPU reference's rules
//      (codec2_tables.h), in three small kernels; beside them, on a stream
//      of their own (from the tile types on), the coded tiles' bounds and
//      lanes, then the symbols laid out in schedule order (a thread per
//      lane and run of steps), with the steps that code something marked
//      and the maps of each lane's checksum;
//   7. rANS: each lane (a thread of a tile's coding warp, which two more
//      warps feed the symbols and their tables) codes its symbols
//      backwards alone, over the marked steps only, noting its bytes and
//      how many it emitted in each sub-step; beside it two more warps
//      place the bytes in the reference's order (in a sub-step, the lanes
//      from the last) by counting; tiles no smaller than their bytes
//      become raw (their reconstruction's bytes);
//   8. the payloads' offsets, the payloads gathered in body order. The
//      tables' choices come back as soon as the tables are made, and the
//      host writes the model section while 7 runs; then it waits for the
//      frame, writes the header, the model and the tile table, and the
//      payloads follow: one frame at a time the device writes them into
//      the pinned body itself, else they are copied back at once
//      (finish()).
// The reference is final after 4 (a keyframe's after its tile types) and
// the tables after 6 (the front part): the next frame's steps 1-4 may run
// beside this frame's symbols, tile types and histogram (with the working
// values in a second set of buffers), its symbols wait for this frame's
// histogram and its tables for this frame's tables; this frame's lanes'
// checksums and schedule, 7 and 8 run beside the next frames, each frame
// in flight with buffers of its own for those (submit(), finish()); a
// frame's work from its tables on runs at a higher priority than the next
// frame's front part (launch_frame()). The front part's kernels follow
// each other as programmatic dependent launches where the device allows
// (launch_after()). What follows prepare goes as one CUDA graph where the
// runtime makes one. The reference stays on the device between frames.
#include <cuda_awbarrier_primitives.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "../src/check.h"
#include "../src/codec2_encoder.h"
#include "../src/codec2_tables.h"
#include "codec2_coded.cuh"
#include "warp_reduce.cuh"
#include "cudadiff/codec2.h"
#include "cudadiff/codec2_rules.h"

namespace cudadiff {
namespace codec2 {
namespace {

using detail::ChosenTable;
using detail::Tile;

constexpr int kThreads = kBlock * kBlock;  // one thread per sample of a block (layer 0)
constexpr unsigned kFullWarp = 0xffffffffu;

struct DevLayer {
  int width, height, channels, ycocg, sx, sy;
  int plane[kMaxComps], step[kMaxComps], offset[kMaxComps];
};

// Per tile, what the symbol layout needs.
struct DevTile {
  unsigned long long first;  // first symbol of the tile (its block modes)
  int blocks;                // blocks of the tile (block-mode symbols in a delta)
  int x0[kMaxLayers], y0[kMaxLayers], w[kMaxLayers], h[kMaxLayers];
  unsigned long long layer_first[kMaxLayers];  // first symbol of each layer
  int channels[kMaxLayers];                    // components per sample of each layer
  // The rANS pass's input: the symbols in schedule order and the steps in
  // which some lane codes something (layer_mark_words() below, in 32-bit
  // words).
  unsigned long long sched_first, marks_first;
  uint32_t raw_bytes;  // the tile's bytes (a raw tile's payload)
};

// A distribution's table on the device: its frequencies (0 beyond its
// tokens and for absent ones) and whether it is used.
struct DevModel {
  uint16_t freq[kTokens];
  uint32_t used;
};

// A symbol as the kernels keep it, in 32 bits: distribution x 32 + token in
// bits 0-13, the raw bit count in 14-17, the raw bits from 18 (at most 10 of
// them); kNoCode where a skipped block's sample has none. A block mode is
// distribution 0's token.
constexpr uint32_t kNoCode = 0xffffffffu;
__host__ __device__ constexpr uint32_t pack_code(int dist, int token, int nbits, uint32_t bits) {
  return (uint32_t(dist) * kTokens + uint32_t(token)) | uint32_t(nbits) << 14 | bits << 18;
}
static_assert(kTokens == 32 && pack_code(511, 31, 15, 1023) < kNoCode,
              "a distribution and token fit 14 bits and 10 raw bits the rest");
// A code's parts: distribution x 32 + token (its index in the frame's
// tables), the token, the raw bit count, the raw bits.
__device__ __forceinline__ uint32_t code_key(uint32_t v) {
  return v & 0x3fff;
}
__device__ __forceinline__ uint32_t code_token(uint32_t v) {
  return v & (kTokens - 1);
}
__device__ __forceinline__ int code_nbits(uint32_t v) {
  return int((v >> 14) & 15);
}
__device__ __forceinline__ uint32_t code_bits(uint32_t v) {
  return v >> 18;
}

// The rANS coder notes how many bytes each lane emits in each sub-step (a
// component's raw bits, its token, or a block mode) per unit, a step of a
// layer (two sub-steps per component: raw bits and token, in the order the
// lane codes them) or a group of block modes (one sub-step), in a 16-bit
// word: sub-step s's count (0..2 bytes) in bits 2s and 2s + 1.
constexpr int kUnitSubsteps = 2 * kMaxComps;
static_assert(2 * kUnitSubsteps <= 16, "a unit's counts fit 16 bits");
// The symbols as the rANS pass reads them: per layer, per step, per
// component, per lane (idle: kNoCode), packed in 32 bits (pack_code()).
__host__ __device__ inline uint32_t layer_codes(const DevTile &t, int l, int lanes) {
  return uint32_t(schedule_steps(t.w[l], t.h[l], lanes)) * uint32_t(t.channels[l]) * lanes;
}
// The steps of a layer in which some lane of the tile codes something (the
// others the lanes jump over): one bit per step (step s: bit s % 32 of word
// s / 32), then one bit per word that has a bit set (word w: bit w % 32 of
// summary word w / 32), so that a long run of steps without a code costs a
// few reads. step_words(): the first part's words; layer_mark_words(): the
// 32-bit words of the layer's marks.
__host__ __device__ constexpr uint32_t step_words(int steps) {
  return (uint32_t(steps) + 31) / 32;
}
__host__ __device__ inline uint32_t layer_mark_words(const DevTile &t, int l, int lanes) {
  const uint32_t words = step_words(schedule_steps(t.w[l], t.h[l], lanes));
  return words + (words + 31) / 32;
}
// schedule_kernel's threads for a layer: one per lane and run of
// kScheduleRun steps (the host sizes the kernel's grid with it).
constexpr int kScheduleRun = 8;  // steps per thread, a divisor of 32
static_assert(32 % kScheduleRun == 0, "a run lies in one word of the marks");
__host__ __device__ inline uint32_t layer_schedule_items(const DevTile &t, int l, int lanes) {
  const uint32_t steps = uint32_t(schedule_steps(t.w[l], t.h[l], lanes));
  return (steps + kScheduleRun - 1) / kScheduleRun * uint32_t(lanes);
}
// Everything a kernel reads: the geometry and the device planes. Channel
// planes are W x H bytes per channel of a layer; working values W x H x nc
// int16 (components interleaved per sample).
struct Params {
  int layers;
  DevLayer layer[kMaxLayers];
  int blocks_x, blocks_y, tile_bx, tile_by, tiles_x;
  int k;          // the body's quantiser, frame_k(threshold, keyframe)
  StepDiv step;   // step_div(k): the divisions by 2k+1 of the per-sample kernels
  int threshold;  // the bound (deltas keep the reference's byte within it)
  int keyframe;
  int dist_count;
  uint32_t lane_samples;  // coded sample components per rANS lane (Geometry)
  int walk_bound;         // percent of a full tile's walk (Geometry; 0: none)
  uint32_t walk_words;    // tile_type_kernel's bitmaps: words for the largest tile (0: none)
  int dist_base[kMaxLayers][kClasses][kMaxComps];
  // schedule_kernel's chunks of a tile (of kScheduleThreads items each) for
  // which it leaves each lane's checksum map (Params::lane_maps); also
  // keeps the parameters without padding (the CUDA graphs' key compares
  // the bytes)
  uint32_t lane_chunks;
  const uint8_t *frame[kMaxPlanes];
  size_t pitch[kMaxPlanes];
  uint8_t *cur[kMaxLayers][kMaxComps];  // at threshold 0 rec's (lossless(), submit())
  const uint8_t *ref[kMaxLayers][kMaxComps];
  uint8_t *rec[kMaxLayers][kMaxComps];
  int16_t *in_s[kMaxLayers], *in_t[kMaxLayers];  // the input's working values
  int16_t *wk_s[kMaxLayers], *wk_t[kMaxLayers];  // the reconstruction's (threshold 0: in_s, in_t)
  uint8_t *rclass[kMaxLayers];
  uint16_t *ids[kMaxLayers][kClasses];  // round 1's proxy symbols per sample and component
  uint8_t *coded;                       // per block: not skipped
  uint8_t *modes;                       // per block
  unsigned long long *cost;             // per block and mode
  uint32_t *hist;                       // the coded tiles' histogram (distribution x token)
  uint32_t *proxy_hist;                 // kProxyCopies histograms of the proxy symbols
  uint32_t *id_cost;                    // round 2's cost per distribution and token
  const DevTile *tiles;
  uint32_t *symbols;    // per tile its block modes, then its layers' samples (pack_code())
  uint32_t *tile_hist;  // per tile: distribution x token
  int n_tiles;
  int raw_bound;        // raw_bound_enabled()
  int *tile_type;       // 0 skipped, 1 coded, 2 raw, 3 indexed
  int *tile_lanes;      // lanes of a coded tile
  uint32_t *tile_size;  // its stream's bytes
  uint32_t *tile_raw;   // 1: a coded tile that ends raw whatever the tables (raw_by_bound())
  uint32_t *freq_cum;   // the frame's tables: cum | freq << 16 per distribution and token
  // The tables (made on the device, codec2_tables.h): the previous frame's,
  // this frame's, the fresh ones from the histogram, the choices for the
  // model section, the costs of the previous and of a new table.
  const DevModel *prev_model;
  DevModel *model, *fresh;
  ChosenTable *chosen;
  unsigned long long *cost_prev, *cost_new;
  uint8_t *copy_choice;  // per distribution: its choice in each copy state (tables_copy_kernel)
  const uint16_t *symbol_costs;       // per frequency f >= 1: detail::symbol_cost(f)
  unsigned long long *payload_total;  // the payloads' bytes, then the tile table's
  uint8_t *streams;  // per tile a region (stream_off) its stream ends at the end of
  const unsigned long long *stream_off;  // n_tiles + 1 offsets of the regions
  unsigned long long *payload_off;       // per tile, where its payload goes in `payload`
  uint8_t *payload;                      // the tiles' payloads in body order
  uint32_t *tile_coded;                  // per tile: coded sample components
  uint32_t *tile_extra;                  // per tile: their raw bits
  // per tile, chunk of schedule_kernel and lane (lane_chunks x kMaxLanes a
  // tile): the map of the lane's symbols in the chunk (m, a), the block
  // modes in chunk 0
  uint2 *lane_maps;
  const uint32_t *reciprocal;  // per frequency f: ceil(2^(31 + ceil(log2 f)) / f)
  const uint8_t *shift;        // per frequency f: 31 + ceil(log2 f), the reciprocal's
  uint32_t *codes;             // the symbols in schedule order (DevTile::sched_first)
  int ring_nc;                 // rans_lanes_kernel's ring: the layers' most components
  int index_digits;            // indexed_digits(k)
  uint8_t *place_ring;   // rans_lanes_kernel<1>'s placing rings, per tile (place_ring_bytes())
  uint32_t *step_marks;  // the steps with a code (DevTile::marks_first)
  unsigned long long *changed;  // deltas: input bytes more than k off the reference
};

// A frame's counts, in its slot's buffers (SlotLayout::changed), back to
// the host with the block modes and the tiles' types, lanes and sizes:
// Params::changed points at `changed`, Params::payload_total at `payloads`
// (payload_total[1] is `table`).
struct FrameCounts {
  unsigned long long changed;   // deltas: input bytes more than k off the reference
  unsigned long long payloads;  // the payloads' bytes
  unsigned long long table;     // the body's tile table's bytes
};
static_assert(offsetof(FrameCounts, table) ==
                  offsetof(FrameCounts, payloads) + sizeof(unsigned long long),
              "payload_total[1] is the tile table's bytes");

// Kernels take Params by value: within the 4 KB of parameters of CUDA 11.8.
static_assert(sizeof(Params) <= 4000, "Params must fit a kernel's parameters");
// Equal parameters are equal bytes (CudaEncoder::graph_for()).
static_assert(std::has_unique_object_representations_v<Params>, "Params without padding");

__constant__ uint32_t c_first_cost[kTokens];
constexpr int kProxyCopies = 16;

// The front part's kernels that follow another kernel in their stream are
// launched as programmatic dependent launches where the device and runtime
// allow (launch_after()): each may start while the kernel before it ends,
// and waits here, before it reads anything, until that kernel has finished
// and its writes are visible. (A no-op for a kernel launched the ordinary
// way; every front-part kernel calls it.)
__device__ __forceinline__ void wait_for_kernel_before() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// A test aid (CUDADIFF_CODEC2_DELAY_SYMBOLS): one thread that waits `ns`
// nanoseconds on the device's clock.
__global__ void delay_kernel(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

// The sample of this thread in layer l of block (blockIdx.x, blockIdx.y).
struct Sample {
  int x, y;
  bool valid;
};
__device__ __forceinline__ Sample sample_of(const DevLayer &ly) {
  const int tx = threadIdx.x & (kBlock - 1), ty = threadIdx.x / kBlock;
  const int x = ((int(blockIdx.x) * kBlock) >> ly.sx) + tx;
  const int y = ((int(blockIdx.y) * kBlock) >> ly.sy) + ty;
  const bool valid =
      tx < (kBlock >> ly.sx) && ty < (kBlock >> ly.sy) && x < ly.width && y < ly.height;
  return {x, y, valid};
}

// The tile of this thread block, and the sample's position in it.
struct InTile {
  int tile, i, j, w;
};
__device__ __forceinline__ InTile in_tile(const Params &p, int l, int x, int y) {
  const int tx = int(blockIdx.x) / p.tile_bx, ty = int(blockIdx.y) / p.tile_by;
  const int t = ty * p.tiles_x + tx;
  const DevTile &dt = p.tiles[t];
  return {t, x - dt.x0[l], y - dt.y0[l], dt.w[l]};
}

// Neighbours (a left, b above, c above-left, d above-right) of component c
// of sample (x, y) in working values `v` (nc components per sample), with
// the tile's edge rules.
struct Nb {
  int a, b, c, d;
};
__device__ __forceinline__ Nb neighbours(const int16_t *v, int width, int nc, int comp, int x,
                                         int y, int i, int j, int w) {
  const int16_t *q = v + (size_t(y) * width + x) * nc + comp;
  const ptrdiff_t up = ptrdiff_t(width) * nc;
  Nb n;
  if (j == 0) {
    n.a = i > 0 ? q[-nc] : 0;
    n.b = n.c = n.d = n.a;
  } else {
    n.b = q[-up];
    if (i > 0) {
      n.a = q[-nc];
      n.c = q[-up - nc];
    } else {
      n.a = n.c = n.b;
    }
    n.d = i + 1 < w ? q[-up + nc] : n.b;
  }
  return n;
}

// Sums over the thread block (256 threads) of three values; thread 0 gets
// them. The rounds' costs of a block fit 32 bits: per sample component at
// most c_first_cost's largest (5,674) and 256 per raw bit (10), or a
// token's id_cost (at most 256 * (32 + 10)), by 256 samples and 4
// components: under 12 million.
__device__ __forceinline__ void block_sum3(uint32_t v[3]) {
  __shared__ uint32_t part[kThreads / 32][3];
  for (int m = 0; m < 3; ++m)
    for (int o = 16; o > 0; o >>= 1) v[m] += __shfl_down_sync(kFullWarp, v[m], o);
  const int warp = threadIdx.x / 32;
  if ((threadIdx.x & 31) == 0)
    for (int m = 0; m < 3; ++m) part[warp][m] = v[m];
  __syncthreads();
  if (threadIdx.x == 0)
    for (int m = 0; m < 3; ++m) {
      uint32_t s = 0;
      for (int w = 0; w < kThreads / 32; ++w) s += part[w][m];
      v[m] = s;
    }
}

// hist[key] += 1 for every thread of the warp with `valid`, one atomic per
// distinct key. Every thread of the warp must call it.
__device__ __forceinline__ void warp_count(uint32_t *hist, uint32_t key, bool valid) {
  const unsigned same = __match_any_sync(kFullWarp, valid ? key : 0xffffffffu);
  if (valid && int(threadIdx.x & 31) == __ffs(same) - 1) atomicAdd(hist + key, __popc(same));
}

// 1. The input's channels and working values, the reference's texture
// classes, and per block whether it is coded (a byte more than k from the
// reference; every block of a keyframe). Layer 0 sets a block's flag, layer
// 1 (launched after it) may set it too.
template <int NC>
__global__ void prepare_kernel(Params p, int l) {
  const DevLayer &ly = p.layer[l];
  const Sample s = sample_of(ly);
  __shared__ unsigned block_changed;
  if (threadIdx.x == 0) block_changed = 0;
  __syncthreads();
  bool far = false;
  if (s.valid) {
    const size_t at = size_t(s.y) * ly.width + s.x;
    constexpr int nc = NC;
    int v[kMaxComps], ch[kMaxComps], comp[kMaxComps];
#pragma unroll
    for (int c = 0; c < nc; ++c) {
      v[c] = p.frame[ly.plane[c]]
                    [size_t(s.y) * p.pitch[ly.plane[c]] + size_t(s.x) * ly.step[c] + ly.offset[c]];
      p.cur[l][c][at] = uint8_t(v[c]);
      ch[c] = quant_index(v[c], p.step);
    }
    to_components(ly.ycocg, NC, ch, comp);
#pragma unroll
    for (int c = 0; c < nc; ++c) p.in_s[l][at * nc + c] = int16_t(comp[c]);
    if (!p.keyframe) {
      unsigned n = 0;
#pragma unroll
      for (int c = 0; c < nc; ++c) {
        const int r = p.ref[l][c][at];
        n += iabs(v[c] - r) > p.threshold;
        ch[c] = encoder_diff(v[c] - r, p.step, p.threshold);
      }
      far = n != 0;
      if (n) atomicAdd(&block_changed, n);
      to_components(ly.ycocg, NC, ch, comp);
#pragma unroll
      for (int c = 0; c < nc; ++c) p.in_t[l][at * nc + c] = int16_t(comp[c]);
      // The reference's texture class around the sample by the tile rule
      // (kBodyTileClasses, which the body header sets): its left, right,
      // above and above-left samples within its tile (this thread block's
      // block lies in one tile).
      const int x0 = tile_sample_first(s.x, ly.sx, p.tile_bx);
      const int x1 = tile_sample_end(s.x, ly.sx, p.tile_bx, ly.width);
      const int y0 = tile_sample_first(s.y, ly.sy, p.tile_by);
      const int g =
          tile_ref_texture(p.ref[l][ly.ycocg ? 1 : 0], size_t(ly.width), s.x, s.y, x0, x1, y0);
      p.rclass[l][at] = uint8_t(ref_class_of_steps(int(p.step.div(uint32_t(g)))));
    }
  }
  const int any = __syncthreads_or(far);
  if (threadIdx.x == 0 && block_changed) atomicAdd(p.changed, (unsigned long long)block_changed);
  if (threadIdx.x == 0) {
    uint8_t &coded = p.coded[size_t(blockIdx.y) * p.blocks_x + blockIdx.x];
    if (p.keyframe)
      coded = 1;
    else if (l == 0)
      coded = uint8_t(any != 0);
    else if (any)
      coded = 1;
  }
}

// activity_bucket(g) for g <= kActivityTableMax (read by
// bucket_from_table()), in shared memory: filled by a kernel's threads
// before a __syncthreads().
static_assert(kThreads >= 128 + kActivityTableMax + 1, "threads 128.. fill the buckets");
__device__ __forceinline__ void fill_buckets(uint8_t *bucket, int i) {
  if (i >= 0 && i <= kActivityTableMax) bucket[i] = uint8_t(activity_bucket(i));
}

// The symbol of component c of a sample in class CLS from its neighbours n
// and value v. Returns the token; distribution context in *ctx; *r0 the
// first component's residual (set when c == 0).
template <int CLS>
__device__ __forceinline__ int code_value(const Nb &n, int v, int c, int rclass,
                                          const uint8_t *bucket, int *r0, int *ctx, int *nbits,
                                          uint32_t *bits) {
  const int pred = CLS == kClassTemporal ? 0 : med(n.a, n.b, n.c);
  const int r = v - pred;
  if (c == 0) *r0 = r;
  const int g = context_activity(CLS, n.a, n.b, n.c, n.d);
  *ctx = context_of_bucket(CLS, c, bucket_from_table(bucket, g), *r0, rclass);
  return token_of(zigzag(flip_sign(CLS, n.a, n.b, n.c, n.d) ? -r : r), nbits, bits);
}

// A sample's neighbours of every component in working values `nb` and its
// values in `val`, loaded at once (before the caller's stores, which the
// compiler cannot tell apart from these planes).
template <int NC>
struct SampleNb {
  Nb n[NC];
  int v[NC];
};
template <int NC>
__device__ __forceinline__ SampleNb<NC> sample_nb(const int16_t *nb, const int16_t *val, int width,
                                                  int x, int y, const InTile &it) {
  SampleNb<NC> out;
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    out.n[c] = neighbours(nb, width, NC, c, x, y, it.i, it.j, it.w);
    out.v[c] = val[(size_t(y) * width + x) * NC + c];
  }
  return out;
}

// Round 1's proxy symbols of a sample in class CLS (neighbours and values
// from the input's working values of the class) and their first cost.
// first_cost: c_first_cost in shared memory (the constant cache serialises
// a warp's loads of different tokens).
template <int CLS, int NC>
__device__ __forceinline__ uint32_t proxy_class(const Params &p, int l, size_t at,
                                                const SampleNb<NC> &sn, int rclass,
                                                const uint32_t *first_cost, const uint8_t *bucket,
                                                uint32_t id[NC]) {
  uint16_t *ids = p.ids[l][CLS] + at * NC;
  uint32_t cost = 0;
  int r0 = 0;
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    int ctx, nbits;
    uint32_t bits;
    const int token =
        code_value<CLS>(sn.n[c], sn.v[c], c, rclass, bucket, &r0, &ctx, &nbits, &bits);
    id[c] = uint32_t(p.dist_base[l][CLS][c] + ctx) * kTokens + uint32_t(token);
    ids[c] = uint16_t(id[c]);
    cost += first_cost[token] + 256u * uint32_t(nbits);
  }
  return cost;
}

// The cheapest of a coded block's modes by its costs in the classes
// spatial, temporal and t+s (ties: temporal, t+s, spatial).
template <typename T>
__device__ __forceinline__ int cheapest_mode(T spatial, T temporal, T temp_spat) {
  int best = kTemporal;
  T c = temporal;
  if (temp_spat < c) best = kTempSpat, c = temp_spat;
  if (spatial < c) best = kSpatial;
  return best;
}

__device__ __forceinline__ int class_of(int mode) {
  return mode == kSpatial ? kClassSpatial : mode == kTemporal ? kClassTemporal : kClassTempSpat;
}

// The kProxyCopies copy of the proxy symbols' histogram that thread block
// (blockIdx.x, blockIdx.y) counts into (they take turns, so that the atomics
// on the most frequent symbols wait less for each other).
__device__ __forceinline__ uint32_t *proxy_hist_copy(const Params &p) {
  return p.proxy_hist + size_t(blockIdx.y * gridDim.x + blockIdx.x) % kProxyCopies *
                            size_t(p.dist_count) * kTokens;
}

// 2. Round 1: the proxy symbols of the coded blocks' samples in each class
// (neighbours from the input's working values of that class: the temporal
// and t+s classes share the T-domain ones), and the block's first cost of
// each mode. A format of one layer (p.layers == 1) takes the block's first
// choice here and counts the proxy symbols of that choice into the
// histogram at once (what decide_kernel and proxy_hist_kernel do for two
// layers, whose costs are added up over the layers first).
template <int NC>
__global__ void round1_kernel(Params p, int l) {
  wait_for_kernel_before();
  const DevLayer &ly = p.layer[l];
  const Sample s = sample_of(ly);
  const size_t block = size_t(blockIdx.y) * p.blocks_x + blockIdx.x;
  if (!p.coded[block]) return;  // the whole thread block
  __shared__ uint32_t first_cost[kTokens];
  __shared__ uint8_t bucket[kActivityTableMax + 1];
  __shared__ int chosen;  // one layer: the class of the block's first choice
  if (threadIdx.x < kTokens) first_cost[threadIdx.x] = c_first_cost[threadIdx.x];
  fill_buckets(bucket, int(threadIdx.x) - 128);
  __syncthreads();
  uint32_t v[3] = {0, 0, 0};  // spatial, temporal, t+s
  uint32_t id[kClasses][NC] = {};
  if (s.valid) {
    const InTile it = in_tile(p, l, s.x, s.y);
    const size_t at = size_t(s.y) * ly.width + s.x;
    const int rc = p.rclass[l][at];
    // (one plane's values live at a time: fewer registers)
    const SampleNb<NC> sn_s = sample_nb<NC>(p.in_s[l], p.in_s[l], ly.width, s.x, s.y, it);
    v[0] = proxy_class<kClassSpatial, NC>(p, l, at, sn_s, rc, first_cost, bucket, id[0]);
    const SampleNb<NC> sn_t = sample_nb<NC>(p.in_t[l], p.in_t[l], ly.width, s.x, s.y, it);
    v[1] = proxy_class<kClassTemporal, NC>(p, l, at, sn_t, rc, first_cost, bucket, id[1]);
    v[2] = proxy_class<kClassTempSpat, NC>(p, l, at, sn_t, rc, first_cost, bucket, id[2]);
  }
  block_sum3(v);
  if (p.layers > 1) {
    if (threadIdx.x == 0) {
      atomicAdd(&p.cost[block * kModes + kSpatial], (unsigned long long)v[0]);
      atomicAdd(&p.cost[block * kModes + kTemporal], (unsigned long long)v[1]);
      atomicAdd(&p.cost[block * kModes + kTempSpat], (unsigned long long)v[2]);
    }
    return;
  }
  if (threadIdx.x == 0) chosen = class_of(cheapest_mode(v[0], v[1], v[2]));
  __syncthreads();
  const int cls = chosen;
  uint32_t *hist = proxy_hist_copy(p);
#pragma unroll
  for (int c = 0; c < NC; ++c)
    warp_count(hist,
               cls == kClassSpatial    ? id[0][c]
               : cls == kClassTemporal ? id[1][c]
                                       : id[2][c],
               s.valid);
}

// A tile's blocks in the block grid.
struct TileBlocks {
  int bw, bh, blocks;
  size_t first;    // its first block's index (rows p.blocks_x apart)
  uint8_t *modes;  // that block's mode
};
__device__ __forceinline__ TileBlocks tile_blocks(const Params &p, int t) {
  const int tx = t % p.tiles_x, ty = t / p.tiles_x;
  const int bx0 = tx * p.tile_bx, by0 = ty * p.tile_by;
  const int bx1 = min(p.blocks_x, bx0 + p.tile_bx), by1 = min(p.blocks_y, by0 + p.tile_by);
  const size_t first = size_t(by0) * p.blocks_x + bx0;
  return {bx1 - bx0, by1 - by0, (bx1 - bx0) * (by1 - by0), first, p.modes + first};
}

// A delta's indexed tiles (indexed_pays(), codec2_rules.h) at k > 0, by
// the cost of the blocks' chosen modes (p.cost at the chosen mode, which
// round 2 leaves there). Every block of such a tile gets the mode
// kModeIndexed, which the reconstruction takes as spatial (the S-domain
// reconstruction), the symbols as none and tile_type_kernel as the tile's
// type; finish() reports them as spatial. A thread block per tile (a thread
// per block of it).
constexpr int kModeIndexed = kModes;
constexpr int kIndexThreads = 128;
__global__ void __launch_bounds__(kIndexThreads) index_tiles_kernel(Params p) {
  wait_for_kernel_before();
  const int t = blockIdx.x;
  const TileBlocks tb = tile_blocks(p, t);
  __shared__ unsigned long long part[kIndexThreads / 32];
  __shared__ int indexed;
  unsigned long long est = 0;
  for (int i = int(threadIdx.x); i < tb.blocks; i += kIndexThreads) {
    const size_t b = tb.first + size_t(i / tb.bw) * p.blocks_x + i % tb.bw;
    const int mode = p.modes[b];
    if (mode != kSkip) est += p.cost[b * kModes + mode];
  }
  for (int o = 16; o > 0; o >>= 1) est += __shfl_xor_sync(kFullWarp, est, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = est;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kIndexThreads / 32; ++w) est += part[w];
    indexed = indexed_pays((long long)est, p.tiles[t].raw_bytes, p.k, p.index_digits);
  }
  __syncthreads();
  if (!indexed) return;
  for (int i = int(threadIdx.x); i < tb.blocks; i += kIndexThreads)
    tb.modes[size_t(i / tb.bw) * p.blocks_x + i % tb.bw] = uint8_t(kModeIndexed);
}

// The cheapest mode of every block from its costs over the layers.
__global__ void decide_kernel(Params p, int n_blocks) {
  wait_for_kernel_before();
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= n_blocks) return;
  if (!p.coded[b]) {
    p.modes[b] = kSkip;
    return;
  }
  const unsigned long long *c = p.cost + size_t(b) * kModes;
  p.modes[b] = uint8_t(cheapest_mode(c[kSpatial], c[kTemporal], c[kTempSpat]));
}

// Histogram of the proxy symbols that round 1's choice would code, in
// kProxyCopies copies (proxy_hist_copy()); id_cost_kernel adds them up.
// Formats of two layers (one layer: round1_kernel).
template <int NC>
__global__ void proxy_hist_kernel(Params p, int l) {
  wait_for_kernel_before();
  const DevLayer &ly = p.layer[l];
  const Sample s = sample_of(ly);
  const size_t block = size_t(blockIdx.y) * p.blocks_x + blockIdx.x;
  if (!p.coded[block]) return;
  const int cls = class_of(p.modes[block]);
  const size_t at = size_t(s.y) * ly.width + s.x;
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    const uint32_t id = s.valid ? p.ids[l][cls][at * NC + c] : 0;
    warp_count(proxy_hist_copy(p), id, s.valid);
  }
}

// Round 2's cost of every distribution's tokens: log2 of the total over
// log2 of the count (one extra count each), plus the raw bits. A warp per
// distribution, a lane per token.
__global__ void id_cost_kernel(Params p) {
  wait_for_kernel_before();
  const int d = int(blockIdx.x) * (blockDim.x / 32) + int(threadIdx.x / 32), t = threadIdx.x & 31;
  if (d >= p.dist_count) return;  // the whole warp
  // Every copy's count first, then the clearing stores (for the next
  // delta; zero since the allocation): a load after each store waited for
  // it, 16 round trips to memory in a row (9 us, against 3 us with a
  // memset before the frame).
  uint32_t *copies = p.proxy_hist + size_t(d) * kTokens + t;
  const size_t apart = size_t(p.dist_count) * kTokens;
  uint32_t c[kProxyCopies];
#pragma unroll
  for (int r = 0; r < kProxyCopies; ++r) c[r] = copies[r * apart];
  uint32_t h = 1;
#pragma unroll
  for (int r = 0; r < kProxyCopies; ++r) {
    h += c[r];
    copies[r * apart] = 0;
  }
  uint32_t total = h;
  for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(kFullWarp, total, o);
  p.id_cost[size_t(d) * kTokens + t] =
      log2_q8(total) - log2_q8(h) + 256u * uint32_t(token_extra_bits(t));
}

// 3. Round 2: the blocks' costs from the proxy symbols and those costs. A
// format of one layer takes each block's mode here (skipped blocks too);
// two add the costs up over the layers for decide_kernel.
template <int NC>
__global__ void round2_kernel(Params p, int l) {
  wait_for_kernel_before();
  const DevLayer &ly = p.layer[l];
  const Sample s = sample_of(ly);
  const size_t block = size_t(blockIdx.y) * p.blocks_x + blockIdx.x;
  if (!p.coded[block]) {  // the whole thread block
    if (p.layers == 1 && threadIdx.x == 0) p.modes[block] = kSkip;
    return;
  }
  uint32_t v[3] = {0, 0, 0};
  if (s.valid) {
    const size_t at = (size_t(s.y) * ly.width + s.x) * NC;
    for (int cls = 0; cls < kClasses; ++cls)
#pragma unroll
      for (int c = 0; c < NC; ++c) v[cls] += p.id_cost[p.ids[l][cls][at + c]];
  }
  block_sum3(v);
  if (threadIdx.x != 0) return;
  if (p.layers == 1) {
    const int mode = cheapest_mode(v[0], v[1], v[2]);
    p.modes[block] = uint8_t(mode);
    p.cost[block * kModes + mode] = v[class_of(mode)];  // (index_tiles_kernel)
  } else {
    atomicAdd(&p.cost[block * kModes + kSpatial], (unsigned long long)v[0]);
    atomicAdd(&p.cost[block * kModes + kTemporal], (unsigned long long)v[1]);
    atomicAdd(&p.cost[block * kModes + kTempSpat], (unsigned long long)v[2]);
  }
}

// 4. The reconstruction by the block's mode and its working values.
template <int NC>
__global__ void reconstruct_kernel(Params p, int l) {
  wait_for_kernel_before();
  const DevLayer &ly = p.layer[l];
  const Sample s = sample_of(ly);
  if (!s.valid) return;
  const int m = p.modes[size_t(blockIdx.y) * p.blocks_x + blockIdx.x];
  const int mode = m == kModeIndexed ? int(kSpatial) : m;
  const size_t at = size_t(s.y) * ly.width + s.x;
  constexpr int nc = NC;
  int rec[kMaxComps], ch[kMaxComps], comp[kMaxComps];
#pragma unroll
  for (int c = 0; c < nc; ++c) {
    const int v = p.cur[l][c][at];
    if (mode == kSpatial) {
      rec[c] = dequant_index(quant_index(v, p.step), p.k);
    } else {
      const int r = p.ref[l][c][at];
      rec[c] = mode == kSkip ? r : dequant_diff(r, encoder_diff(v - r, p.step, p.threshold), p.k);
    }
    p.rec[l][c][at] = uint8_t(rec[c]);
    ch[c] = quant_index(rec[c], p.step);
  }
  to_components(ly.ycocg, NC, ch, comp);
#pragma unroll
  for (int c = 0; c < nc; ++c) p.wk_s[l][at * nc + c] = int16_t(comp[c]);
  if (p.keyframe) return;
#pragma unroll
  for (int c = 0; c < nc; ++c) ch[c] = quant_diff(rec[c] - int(p.ref[l][c][at]), p.step);
  to_components(ly.ycocg, NC, ch, comp);
#pragma unroll
  for (int c = 0; c < nc; ++c) p.wk_t[l][at * nc + c] = int16_t(comp[c]);
}

template <int CLS, int NC>
__device__ __forceinline__ void symbols_class(const Params &p, int l, const Sample &s,
                                              const InTile &it, int rclass, const uint8_t *bucket,
                                              uint32_t *out, uint32_t *key) {
  const DevLayer &ly = p.layer[l];
  constexpr int nc = NC;
  const int16_t *nb = CLS == kClassSpatial ? p.wk_s[l] : p.wk_t[l];
  const int16_t *val = CLS == kClassSpatial ? p.in_s[l] : p.in_t[l];
  const SampleNb<NC> sn = sample_nb<NC>(nb, val, ly.width, s.x, s.y, it);
  int r0 = 0;
#pragma unroll
  for (int c = 0; c < nc; ++c) {
    int ctx, nbits;
    uint32_t bits;
    const int token =
        code_value<CLS>(sn.n[c], sn.v[c], c, rclass, bucket, &r0, &ctx, &nbits, &bits);
    const int d = p.dist_base[l][CLS][c] + ctx;
    out[c] = pack_code(d, token, nbits, bits);
    key[c] = uint32_t(d) * kTokens + uint32_t(token);
  }
}

// Whether tile_type_kernel looks for coded tiles that cannot get smaller
// (raw_by_bound()): only at quantiser 0, where noise-like tiles come out
// raw. From k = 1 on the quantiser's step of 3 or more takes over 1.5 bits
// off each component (random bytes code to about 0.9 of their size), and
// the raw bits' count would cost the frame's kernels for nothing.
__device__ __forceinline__ bool bound_tiles(const Params &p) {
  return p.raw_bound && p.k == 0;
}

// Whether tile t goes through the lanes' checksums, the schedule and the
// rANS pass: coded, and not found raw by its bound (raw_by_bound()).
__device__ __forceinline__ bool rans_coded(const Params &p, int t) {
  return p.tile_type[t] == 1 && !p.tile_raw[t];
}

// 5. Every sample's symbols (neighbours from the reconstruction's working
// values, values from the input's) in the tile's layout, the block-mode
// symbols of a delta, and each tile's histogram.
template <int NC>
__global__ void symbols_kernel(Params p, int l) {
  wait_for_kernel_before();
  const DevLayer &ly = p.layer[l];
  const Sample s = sample_of(ly);
  const size_t block = size_t(blockIdx.y) * p.blocks_x + blockIdx.x;
  const int mode = p.modes[block];
  const int tx = int(blockIdx.x) / p.tile_bx, ty = int(blockIdx.y) / p.tile_by;
  const int t = ty * p.tiles_x + tx;
  if (mode == kModeIndexed) return;  // the whole block: an indexed tile has no symbols
  const DevTile &dt = p.tiles[t];
  uint32_t *hist = p.tile_hist + size_t(t) * p.dist_count * kTokens;
  __shared__ uint8_t bucket[kActivityTableMax + 1];
  __shared__ uint32_t s_extra;
  fill_buckets(bucket, int(threadIdx.x) - 128);
  if (threadIdx.x == 0) s_extra = 0;
  __syncthreads();
  if (!p.keyframe && l == 0 && threadIdx.x == 0) {
    const int local = (int(blockIdx.y) - ty * p.tile_by) *
                          (min(p.blocks_x, (tx + 1) * p.tile_bx) - tx * p.tile_bx) +
                      (int(blockIdx.x) - tx * p.tile_bx);
    p.symbols[dt.first + local] = pack_code(0, mode, 0, 0);  // distribution 0: modes
    atomicAdd(hist + mode, 1u);
  }
  constexpr int nc = NC;
  uint32_t sym[kMaxComps];
  uint32_t key[kMaxComps] = {0, 0, 0, 0};
  if (s.valid) {
    const InTile it{t, s.x - dt.x0[l], s.y - dt.y0[l], dt.w[l]};
    uint32_t *out = p.symbols + dt.layer_first[l] + (size_t(it.j) * it.w + it.i) * nc;
    if (mode == kSkip) {
#pragma unroll
      for (int c = 0; c < nc; ++c) out[c] = kNoCode;
    } else {
      const int rc = p.keyframe ? 0 : p.rclass[l][size_t(s.y) * ly.width + s.x];
      if (mode == kSpatial)
        symbols_class<kClassSpatial, NC>(p, l, s, it, rc, bucket, sym, key);
      else if (mode == kTemporal)
        symbols_class<kClassTemporal, NC>(p, l, s, it, rc, bucket, sym, key);
      else
        symbols_class<kClassTempSpat, NC>(p, l, s, it, rc, bucket, sym, key);
#pragma unroll
      for (int c = 0; c < nc; ++c) out[c] = sym[c];
    }
  }
  const bool counted = s.valid && mode != kSkip;
#pragma unroll
  for (int c = 0; c < nc; ++c) warp_count(hist, key[c], counted);
  if (bound_tiles(p)) {  // the raw bits (raw_by_bound())
    uint32_t extra = 0;
    if (counted)
#pragma unroll
      for (int c = 0; c < nc; ++c) extra += uint32_t(code_nbits(sym[c]));
    extra = warp_sum_u32(extra);
    if ((threadIdx.x & 31) == 0 && extra) atomicAdd(&s_extra, extra);
  }
  const int n = __syncthreads_count(counted);
  if (threadIdx.x == 0 && n) {
    atomicAdd(p.tile_coded + t, uint32_t(n * nc));
    if (s_extra) atomicAdd(p.tile_extra + t, s_extra);
  }
}

// Tile types (tile_type_kernel): skipped when every block of a delta's
// tile is (keyframes: coded), indexed where the mode decision (deltas) or
// the estimate from the tile's histogram (keyframes) says so, else coded.
// Then, on the lanes stream beside the histogram's sum and the tables
// (tile_lanes_kernel; the next frame's front part waits for it only
// before it writes the tiles' histograms and counts), whether a coded tile
// is raw by its bound (raw_by_bound()), else its lanes in tile_lanes (a
// kernel that did both took 15-19 us of each frame's front part, which
// sets the rate of frames in flight). The lanes: lanes_for_tile() of its
// coded sample components (counted by symbols_kernel), and for a delta's tile
// with skipped blocks bounded_lanes(): the fewest lanes, from that number
// up, whose walk (tile_walk()) is within the bound. A thread block per
// tile. The walks of all the candidate numbers of lanes at once: per
// candidate a bitmap of the steps of its schedule at which some lane
// decodes (a thread per candidate and row sets its row's runs of coded
// samples), then a warp per candidate counts the walk from the runs of
// steps without a bit (walk_from_steps()). For tiles whose bitmaps do not
// fit p.walk_words, a thread per candidate walks the runs of coded blocks
// instead (tile_walk()). The runs of coded blocks come from a word per
// block row in shared memory for tiles up to 64 blocks wide and high, else
// from the block modes in global memory (codec2_coded.cuh).
constexpr int kTileTypeThreads = 512;  // 16 warps: up to two candidates each
constexpr int kTileTypeRows = 64;
// The most 32-bit words of the candidates' bitmaps (44 KB: with the
// kernel's static shared memory within the 48 KB that need no opt-in): a
// full tile of 10x8 blocks of RGB takes 2,678 (CudaEncoder::setup() sizes
// them for the largest tile).
constexpr uint32_t kWalkWordsMax = 11264;

// Sets bits [a, b) of a bitmap in shared memory.
__device__ __forceinline__ void set_bits(uint32_t *bits, int a, int b) {
  while (a < b) {
    const int wd = a >> 5, lo = a & 31, n = min(32 - lo, b - a);
    const uint32_t m = (n == 32 ? 0xffffffffu : ((1u << n) - 1u)) << lo;
    atomicOr(bits + wd, m);
    a += n;
  }
}

// The walk of a schedule of `steps` steps from its bitmap (bit s: some lane
// decodes at step s), as tile_walk() counts it: every step, less for each
// run of steps without a bit that is longer than kDecoderMinJump, or ends
// the schedule, all its steps but one. The warp together (each thread a
// part of the words, then lane 0 joins the parts in order); the walk in
// lane 0.
__device__ __forceinline__ int walk_from_steps(const uint32_t *bits, int steps, int ln) {
  const int words = (steps + 31) >> 5, per = (words + 31) >> 5;
  const int w0 = min(words, ln * per), w1 = min(words, w0 + per);
  // This part: the steps without a bit before its first bit (lead), after
  // its last (run), and the saving of the runs between its bits (inner).
  bool seen = false;
  int lead = 0, run = 0, inner = 0;
  for (int wd = w0; wd < w1; ++wd) {
    const int nb = min(32, steps - 32 * wd);  // bits past `steps` are never set
    const uint32_t v = bits[wd];
    int pos = 0;
    while (pos < nb) {
      const uint32_t rest = v >> pos;
      if (rest == 0) {
        run += nb - pos;
        break;
      }
      const int z = __ffs(int(rest)) - 1;  // steps without a bit, then a run of bits
      run += z;
      if (seen)
        inner += run > kDecoderMinJump ? run - 1 : 0;
      else
        lead = run;
      seen = true;
      run = 0;
      const uint32_t ones = ~(rest >> z);
      pos += z + (ones ? __ffs(int(ones)) - 1 : 32 - pos - z);
    }
  }
  int saving = 0, pending = 0;  // pending: the run without a bit so far
  for (int q = 0; q < 32; ++q) {
    const int q_seen = __shfl_sync(kFullWarp, int(seen), q);
    const int q_lead = __shfl_sync(kFullWarp, lead, q);
    const int q_run = __shfl_sync(kFullWarp, run, q);
    const int q_inner = __shfl_sync(kFullWarp, inner, q);
    if (!q_seen) {
      pending += q_run;  // a part without a bit (or without words)
      continue;
    }
    const int gap = pending + q_lead;
    saving += (gap > kDecoderMinJump ? gap - 1 : 0) + q_inner;
    pending = q_run;
  }
  if (pending > 0) saving += pending - 1;  // the run that ends the schedule
  return steps - saving;
}

// Whether coded tile t would come out no smaller than its bytes, whatever the
// tables: coded_tile_bound() (codec2_rules.h) from its histogram reaches its
// bytes (tile_type_kernel's threads together: a warp per distribution at a
// time, a thread per token; every thread gets the answer). Such a tile is
// raw (raw_check_kernel) and takes no lanes' checksums, schedule or rANS.
// Worked out only where it may hold: with at most 5 bits per symbol (32
// tokens) and the tile's raw bits (symbols_kernel counts them), the bound
// could reach the bytes (a frame of the clips took 3-4 us longer with four
// in flight otherwise; with the bound in a kernel of its own beside the
// histogram's sum, 8-22 us longer). The logarithms are the single-precision
// instruction's (at most 2 ulp off: below 2^-17 bits per symbol, far within
// the bound's margin of 3/256 bits per symbol less the coder's loss of
// under 2^-8.6).
__device__ bool raw_by_bound(const Params &p, int t, int blocks, double *s_part) {
  const DevTile &dt = p.tiles[t];
  const uint64_t symbols_most = uint64_t(p.tile_coded[t]) + (p.keyframe ? 0u : uint32_t(blocks));
  if (5 * symbols_most + p.tile_extra[t] < 8 * uint64_t(dt.raw_bytes)) return false;
  const int warp = int(threadIdx.x / 32), ln = int(threadIdx.x & 31);
  const int warps = int(blockDim.x / 32);
  const uint32_t *hist = p.tile_hist + size_t(t) * p.dist_count * kTokens;
  const double raw_bits = double(token_extra_bits(ln));
  double bits = 0.0, symbols = 0.0;
  constexpr int kLoads = 8;  // distributions per warp loaded at once
  for (int d0 = warp; d0 < p.dist_count; d0 += warps * kLoads) {
    uint32_t c[kLoads];
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int d = d0 + i * warps;
      c[i] = d < p.dist_count ? hist[size_t(d) * kTokens + uint32_t(ln)] : 0u;
    }
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const uint32_t n = warp_sum_u32(c[i]);
      if (n == 0) continue;
      if (c[i]) bits += double(c[i]) * (raw_bits - double(__log2f(float(c[i]))));
      if (ln == 0) bits += double(n) * double(__log2f(float(n))), symbols += double(n);
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    bits += __shfl_xor_sync(kFullWarp, bits, o);
    symbols += __shfl_xor_sync(kFullWarp, symbols, o);
  }
  if (ln == 0) s_part[warp] = bits, s_part[warps + warp] = symbols;
  __syncthreads();
  bool raw = false;
  if (threadIdx.x == 0) {
    double all = 0.0, n = 0.0;
    for (int w = 0; w < warps; ++w) all += s_part[w], n += s_part[warps + w];
    raw = coded_tile_bound(all, n) >= double(dt.raw_bytes);
  }
  return __syncthreads_or(raw) != 0;
}

// Whether coded tile t is indexed (indexed_pays(), codec2_rules.h): the
// estimate from its histogram, a warp per distribution at a time and a
// thread per token, in integers as the CPU encoder's. Every thread gets
// the answer.
__device__ bool indexed_by_estimate(const Params &p, int t, long long *s_est) {
  const DevTile &dt = p.tiles[t];
  if (indexed_bytes_of(dt.raw_bytes, p.index_digits) >= dt.raw_bytes)
    return false;  // (the whole block)
  const int warp = int(threadIdx.x / 32), ln = int(threadIdx.x & 31);
  const int warps = int(blockDim.x / 32);
  const uint32_t *hist = p.tile_hist + size_t(t) * p.dist_count * kTokens;
  long long est = 0;
  for (int d = warp; d < p.dist_count; d += warps) {
    const uint32_t c = hist[size_t(d) * kTokens + uint32_t(ln)];
    const uint32_t n = warp_sum_u32(c);
    est += indexed_count_q8(c, ln) + (ln == 0 ? indexed_total_q8(n) : 0);
  }
  for (int o = 16; o > 0; o >>= 1) est += __shfl_xor_sync(kFullWarp, est, o);
  if (ln == 0) s_est[warp] = est;
  __syncthreads();
  bool indexed = false;
  if (threadIdx.x == 0) {
    long long all = 0;
    for (int w = 0; w < warps; ++w) all += s_est[w];
    indexed = indexed_pays(all, dt.raw_bytes, p.k, p.index_digits);
  }
  return __syncthreads_or(indexed) != 0;
}

// An indexed tile's reconstruction: the S-domain one of the input (the
// tile's thread block).
__device__ void index_tile(const Params &p, int t) {
  const DevTile &dt = p.tiles[t];
  for (int l = 0; l < p.layers; ++l) {
    const DevLayer &ly = p.layer[l];
    const int nc = ly.channels, row = dt.w[l] * nc, n = row * dt.h[l];
    for (int i = int(threadIdx.x); i < n; i += int(blockDim.x)) {
      const int j = i / row, r = i - j * row, c = r % nc;
      const size_t at = size_t(dt.y0[l] + j) * ly.width + dt.x0[l] + r / nc;
      p.rec[l][c][at] = uint8_t(dequant_index(quant_index(p.cur[l][c][at], p.step), p.k));
    }
  }
}

// Tile t's entries for an indexed tile (one thread of its block).
__device__ void set_indexed(const Params &p, int t) {
  p.tile_type[t] = 3;
  p.tile_raw[t] = 0;
  p.tile_lanes[t] = 1;
}

// The tile's skipped blocks (0 in a keyframe), for every thread of the
// block; *s_skipped is 0 before (and the block synchronised since).
__device__ __forceinline__ uint32_t count_skipped(const Params &p, const TileBlocks &tb,
                                                  uint32_t *s_skipped) {
  uint32_t skipped = 0;
  if (!p.keyframe)
    for (int b = int(threadIdx.x); b < tb.blocks; b += blockDim.x)
      skipped += tb.modes[size_t(b / tb.bw) * p.blocks_x + b % tb.bw] == kSkip;
  skipped = warp_sum_u32(skipped);
  if ((threadIdx.x & 31) == 0 && skipped) atomicAdd(s_skipped, skipped);
  __syncthreads();
  return *s_skipped;
}

__global__ void __launch_bounds__(kTileTypeThreads) tile_type_kernel(Params p) {
  wait_for_kernel_before();
  __shared__ long long s_est[kTileTypeThreads / 32];
  __shared__ uint32_t s_skipped;
  const int t = int(blockIdx.x);
  const TileBlocks tb = tile_blocks(p, t);
  if (!p.keyframe && tb.modes[0] == kModeIndexed) {
    if (threadIdx.x == 0) set_indexed(p, t);
    return;  // the whole block
  }
  if (threadIdx.x == 0) s_skipped = 0;
  __syncthreads();
  const uint32_t skipped = count_skipped(p, tb, &s_skipped);
  const int type = int(skipped) < tb.blocks ? 1 : 0;
  if (type == 1 && p.keyframe && p.k > 0 && indexed_by_estimate(p, t, s_est)) {
    if (threadIdx.x == 0) set_indexed(p, t);
    index_tile(p, t);
    return;  // the whole block
  }
  if (threadIdx.x == 0) {
    p.tile_type[t] = type;
    if (type != 1) p.tile_raw[t] = 0;
  }
}

// A coded tile's rawness by its bound, else its lanes (the comment before
// tile_type_kernel). A thread block per tile.
__global__ void __launch_bounds__(kTileTypeThreads) tile_lanes_kernel(Params p) {
  extern __shared__ uint32_t s_steps[];  // the candidates' bitmaps (p.walk_words words)
  __shared__ unsigned long long s_rows[kTileTypeRows];
  __shared__ double s_part[2 * kTileTypeThreads / 32];
  __shared__ uint32_t s_skipped, s_fits, s_have_rows;
  __shared__ int s_off[kMaxLanes + 1];  // each candidate's first word
  const int t = int(blockIdx.x);
  if (p.tile_type[t] != 1) return;  // the whole block
  const int warp = int(threadIdx.x / 32), ln = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    s_skipped = 0;
    s_fits = 0;
  }
  __syncthreads();
  const TileBlocks tb = tile_blocks(p, t);
  const int bw = tb.bw, bh = tb.bh, blocks = tb.blocks;
  const uint8_t *const modes = tb.modes;
  const int stride = p.blocks_x;
  const uint32_t skipped = count_skipped(p, tb, &s_skipped);
  const bool raw = bound_tiles(p) && raw_by_bound(p, t, blocks, s_part);
  if (threadIdx.x == 0) p.tile_raw[t] = raw;
  if (raw) {
    if (threadIdx.x == 0) p.tile_lanes[t] = 1;
    return;
  }
  const DevTile &dt = p.tiles[t];
  const int w = dt.w[0], h = dt.h[0];
  const int first = lanes_for_tile(p.tile_coded[t], h, p.lane_samples);
  const int cap = min(h, kMaxLanes);
  if (!(skipped > 0 && p.walk_bound > 0 && first < cap)) {
    if (threadIdx.x == 0) p.tile_lanes[t] = first;
    return;  // the whole block
  }
  CodedBlocks coded{modes, stride, bw, nullptr};
  if (warp == 0) {
    coded.build(s_rows, bh, kTileTypeRows, ln);
    if (ln == 0) s_have_rows = coded.rows != nullptr;
  }
  const int cands = cap - first;  // candidate n: first + n
  if (threadIdx.x == 0) {
    int words = 0;
    for (int c = 0; c < cands; ++c) {
      s_off[c] = words;
      words += (schedule_steps(w, h, first + c) + 31) / 32;
    }
    s_off[cands] = words;
  }
  __syncthreads();
  if (s_have_rows) coded.rows = s_rows;
  const int bound = walk_bound(w, h, dt.raw_bytes, p.lane_samples, p.walk_bound);
  const auto runs = [coded](int by, int bx, int &a, int &b) { return coded.run(by, bx, a, b); };
  const int words = s_off[cands];
  if (uint32_t(words) > p.walk_words) {
    // Too large for the bitmaps: a thread per candidate walks the runs.
    if (warp == 0) {
      const int mine = first + ln;
      const bool fits = mine < cap && tile_walk(w, h, mine, bound, runs) <= bound;
      const unsigned ok = __ballot_sync(kFullWarp, fits);
      if (ln == 0) p.tile_lanes[t] = ok ? first + __ffs(int(ok)) - 1 : cap;
    }
    return;
  }
  for (int i = int(threadIdx.x); i < words; i += blockDim.x) s_steps[i] = 0;
  __syncthreads();
  // Candidate c, row j: lane j % n decodes the row's samples x in round
  // j / n, at steps round * period + x + kStagger * lane.
  for (int item = int(threadIdx.x); item < cands * h; item += blockDim.x) {
    const int c = item / h, j = item % h, n = first + c;
    const int base = (j / n) * schedule_period(w, n) + kStagger * (j % n);
    uint32_t *bits = s_steps + s_off[c];
    int a, b;
    for (int bx = 0; coded.run(j / kBlock, bx, a, b); bx = b)
      set_bits(bits, base + a * kBlock, base + min(b * kBlock, w));
  }
  __syncthreads();
  for (int c = warp; c < cands; c += kTileTypeThreads / 32) {
    const int n = first + c;
    const int walk = walk_from_steps(s_steps + s_off[c], schedule_steps(w, h, n), ln);
    if (ln == 0 && walk <= bound) atomicOr(&s_fits, 1u << c);
  }
  __syncthreads();
  if (threadIdx.x == 0) p.tile_lanes[t] = s_fits ? first + __ffs(int(s_fits)) - 1 : cap;
}

// The histogram of the coded tiles: kHistParts neighbouring threads of a
// warp per distribution and token, each summing every kHistParts-th tile.
// (With one thread per distribution and token, some 30 thread blocks, each
// thread's chain of loads over all the tiles took 10-11 us of the front
// part at 1080p.)
constexpr int kHistParts = 4;
static_assert(32 % kHistParts == 0, "a distribution and token's threads in one warp");
__global__ void sum_hist_kernel(Params p) {
  const size_t n = size_t(p.dist_count) * kTokens;
  const size_t g = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t i = g / kHistParts;
  uint32_t sum = 0;
  if (i < n) {
    // (loads without a branch, so that several are in flight at once)
#pragma unroll 8
    for (int t = int(g % kHistParts); t < p.n_tiles; t += kHistParts) {
      const uint32_t v = p.tile_hist[size_t(t) * n + i];
      sum += p.tile_type[t] == 1 ? v : 0u;
    }
  }
  for (int o = 1; o < kHistParts; o <<= 1) sum += __shfl_down_sync(kFullWarp, sum, o);
  if (i < n && g % kHistParts == 0) p.hist[i] = sum;
}

// 6. The frame's tables from the histogram of the coded tiles, by the CPU
// reference's rules (codec2_tables.h; CpuEncoder::build_model()), in three
// kernels: (a) each distribution's fresh table and the costs of a new and of
// the previous table, (b) the choice each distribution would make for each
// table a copy could take (the previous or fresh table of one of the last
// kCopyWindow distributions with symbols), (c) in one warp the choices in
// listing order (following the table a copy takes from one to the next),
// then every table as cum | freq << 16. A warp per distribution, a lane per
// token. The distributions are listed in their order; those not listed in
// a keyframe have no symbols.
constexpr int kCopyWindow = 8;
constexpr int kCopyStates = 2 * kCopyWindow + 1;  // (window slot, previous/fresh), or none
constexpr int kTableWarps = 8;

// A histogram's cost (1/256 bit) under frequencies f (this lane's token);
// ~0 when a counted token has no frequency.
__device__ __forceinline__ unsigned long long warp_coding_cost(const Params &p, uint32_t count,
                                                               uint32_t f) {
  if (__any_sync(kFullWarp, count != 0 && f == 0)) return ~0ull;
  const unsigned long long c = count ? (unsigned long long)count * p.symbol_costs[f] : 0ull;
  // c < 2^35: the sums of its low and high halves fit 32 bits.
  const uint32_t lo = warp_sum_u32(uint32_t(c & 0xffffu)), hi = warp_sum_u32(uint32_t(c >> 16));
  return ((unsigned long long)hi << 16) + lo;
}

__global__ void __launch_bounds__(32 * kTableWarps) tables_fresh_kernel(Params p) {
  const int d = int(blockIdx.x) * kTableWarps + int(threadIdx.x / 32), tk = threadIdx.x & 31;
  if (d >= p.dist_count) return;  // the whole warp
  const bool keyframe = p.keyframe != 0;
  const uint32_t count = p.hist[size_t(d) * kTokens + tk];
  ChosenTable &ch = p.chosen[d];
  DevModel &fr = p.fresh[d];
  const unsigned present = __ballot_sync(kFullWarp, count != 0);
  if (tk == 0) {
    ch.choice = detail::kTableUnused;
    ch.n = uint8_t(present ? 32 - __clz(int(present)) : 0);
    fr.used = present != 0;
  }
  if (!present) {
    ch.levels[tk] = 0;
    fr.freq[tk] = 0;
    return;
  }
  // detail::levels_from_histogram() and normalize_levels(), a lane per token.
  const uint32_t lmx = log2_q8(warp_max_u32(count));
  const int level = count ? detail::level_of_count(count, lmx) : 0;
  const uint32_t total = warp_sum_u32(level_weight(level));  // < 32 * 2^21
  uint32_t f = 0;
  if (level) {
    f = uint32_t((uint64_t(level_weight(level)) * kProbScale) / total);
    if (f == 0) f = 1;
  }
  const uint32_t sum = warp_sum_u32(f), most = warp_max_u32(f);
  const int largest = __ffs(int(__ballot_sync(kFullWarp, f == most))) - 1;
  if (tk == largest) f = uint32_t(int32_t(f) + int32_t(kProbScale) - int32_t(sum));
  ch.levels[tk] = uint8_t(level);
  fr.freq[tk] = uint16_t(f);
  // detail::table_description_bits(): each level against the last present one before it.
  const int n = 32 - __clz(int(present));
  const unsigned with_level = __ballot_sync(kFullWarp, level != 0);
  const unsigned below = with_level & ((1u << tk) - 1u);
  const int from = below ? 31 - __clz(int(below)) : tk;
  const int before = __shfl_sync(kFullWarp, level, from);
  const uint32_t bits = tk >= n ? 0u
                        : level
                            ? uint32_t(detail::level_code_bits(level - (below ? before : kLevels)))
                            : 2u;
  const unsigned long long cost = warp_coding_cost(p, count, f);
  const uint32_t desc = 5 + warp_sum_u32(bits);
  const DevModel &prev = p.prev_model[d];
  const unsigned long long cost_prev = warp_coding_cost(p, count, prev.freq[tk]);
  if (tk == 0) {
    p.cost_new[d] = cost + 256ull * (desc + uint32_t(detail::new_flag_bits(keyframe)));
    p.cost_prev[d] =
        keyframe || !prev.used ? detail::kNeverCost : detail::flagged_cost(cost_prev, 2);
  }
}

// (b) For each distribution with symbols, its choice for each table a copy
// may take: state j * 2 + kind, the previous (kind 0) or fresh (1) table
// of the j-th distribution with symbols before it; state 2 * kCopyWindow:
// none before it.
__global__ void __launch_bounds__(32 * kTableWarps) tables_copy_kernel(Params p) {
  const int d = int(blockIdx.x) * kTableWarps + int(threadIdx.x / 32), tk = threadIdx.x & 31;
  if (d >= p.dist_count || !p.fresh[d].used) return;  // the whole warp
  const bool keyframe = p.keyframe != 0;
  const uint32_t count = p.hist[size_t(d) * kTokens + tk];
  const unsigned long long cost_prev = p.cost_prev[d], cost_new = p.cost_new[d];
  uint8_t *choice = p.copy_choice + size_t(d) * kCopyStates;
  if (tk == 0)
    choice[2 * kCopyWindow] =
        uint8_t(detail::choose_table(cost_prev, detail::kNeverCost, cost_new));
  int j = 0;
  for (int end = d; end > 0 && j < kCopyWindow; end -= 32) {
    const int o_lane = end - 1 - tk;
    unsigned used = __ballot_sync(kFullWarp, o_lane >= 0 && p.fresh[o_lane].used);
    for (; used && j < kCopyWindow; ++j) {
      const int o = end - 1 - (__ffs(int(used)) - 1);
      used &= used - 1;
      for (int kind = 0; kind < 2; ++kind) {
        const uint32_t f = kind == 0 ? p.prev_model[o].freq[tk] : p.fresh[o].freq[tk];
        const unsigned long long c = warp_coding_cost(p, count, f);
        if (tk == 0)
          choice[j * 2 + kind] = uint8_t(detail::choose_table(
              cost_prev, detail::flagged_cost(c, detail::copy_flag_bits(keyframe)), cost_new));
      }
    }
  }
}

// (c) The choices in order: one warp follows the table a copy would take
// (window slot and kind) along the distributions with symbols, listed
// first; beyond the window it works the cost out itself. Then each
// distribution's table, a warp per distribution.
constexpr int kChooseWarps = 32;  // (c)'s second part: many tables' loads in flight at once
constexpr size_t kChooseSharedPerDist = sizeof(int) + 1 + kCopyStates + sizeof(uint16_t);
__global__ void __launch_bounds__(32 * kChooseWarps) tables_choose_kernel(Params p) {
  // Per distribution: origin * 2 + kind of its table (-1 unused), whether
  // it has symbols, its choice in each copy state; the list of those with
  // symbols.
  extern __shared__ int s_src[];
  uint8_t *s_used = reinterpret_cast<uint8_t *>(s_src + p.dist_count);
  uint8_t *s_choice = s_used + p.dist_count;
  uint16_t *s_list = reinterpret_cast<uint16_t *>(s_choice + size_t(p.dist_count) * kCopyStates);
  static_assert((sizeof(int) + 1 + kCopyStates) % 2 == 0, "s_list is 2-byte aligned");
  const bool keyframe = p.keyframe != 0;
  for (int d = threadIdx.x; d < p.dist_count; d += blockDim.x) {
    s_used[d] = uint8_t(p.fresh[d].used);
    s_src[d] = -1;
  }
  for (int i = threadIdx.x; i < p.dist_count * kCopyStates; i += blockDim.x)
    s_choice[i] = p.copy_choice[i];
  __syncthreads();
  if (threadIdx.x < 32) {
    // Warp 0, every lane following the same choices (lane 0 writes them);
    // beyond the window a lane per token.
    const int tk = threadIdx.x;
    int listed = 0;
    for (int base = 0; base < p.dist_count; base += 32) {
      const bool used = base + tk < p.dist_count && s_used[base + tk];
      const unsigned with = __ballot_sync(kFullWarp, used);
      if (used) s_list[listed + __popc(with & ((1u << tk) - 1u))] = uint16_t(base + tk);
      listed += __popc(with);
    }
    __syncwarp();
    int state = 2 * kCopyWindow;  // no table before
    int origin = -1, kind = 0;    // the table a copy takes
    for (int i = 0; i < listed; ++i) {
      const int d = s_list[i];
      int choice;
      if (state < kCopyStates) {
        choice = s_choice[d * kCopyStates + state];
      } else {  // a copy of a table further back than the window
        const uint32_t count = p.hist[size_t(d) * kTokens + tk];
        const uint32_t f = kind == 0 ? p.prev_model[origin].freq[tk] : p.fresh[origin].freq[tk];
        const unsigned long long c = warp_coding_cost(p, count, f);
        choice = detail::choose_table(p.cost_prev[d],
                                      detail::flagged_cost(c, detail::copy_flag_bits(keyframe)),
                                      p.cost_new[d]);
      }
      if (choice == detail::kTableCopy) {
        state = state + 2 < 2 * kCopyWindow ? state + 2 : kCopyStates;  // one slot further back
      } else {
        origin = d;
        kind = choice == detail::kTablePrevious ? 0 : 1;
        state = kind;  // slot 0
      }
      if (tk == 0) {
        p.chosen[d].choice = uint8_t(choice);
        s_src[d] = origin * 2 + kind;
      }
    }
  }
  __syncthreads();
  const int tk = threadIdx.x & 31;
  for (int d = threadIdx.x / 32; d < p.dist_count; d += kChooseWarps) {
    const int src = s_src[d];
    uint32_t f = 0;
    if (src >= 0) f = (src & 1) ? p.fresh[src >> 1].freq[tk] : p.prev_model[src >> 1].freq[tk];
    uint32_t cum = f;  // inclusive scan over the tokens
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t u = __shfl_up_sync(kFullWarp, cum, o);
      if (tk >= o) cum += u;
    }
    cum -= f;
    p.model[d].freq[tk] = uint16_t(f);
    if (tk == 0) p.model[d].used = src >= 0;
    p.freq_cum[size_t(d) * kTokens + tk] = src >= 0 ? (cum | f << 16) : 0u;
  }
}

// After the rANS pass: coded tiles no smaller than their bytes become raw
// (their reconstruction's bytes; the tables stay as they are), as do those
// that tile_type_kernel found could not be smaller (raw_by_bound(); not coded).
__global__ void raw_check_kernel(Params p) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= p.n_tiles) return;
  if (p.tile_type[t] == 1 && (p.tile_raw[t] || p.tile_size[t] >= p.tiles[t].raw_bytes))
    p.tile_type[t] = 2;
}

// Where each payload goes: a prefix sum of their sizes over the tiles in
// order (one thread block), and their total; and the bytes of the body's
// tile table (CpuEncoder::assemble()): per tile (size << 7) | (lanes - 1)
// << 2 | type in groups of 7 bits, at least one.
constexpr int kScanThreads = 1024;
constexpr int kToHostBlocks = 256;  // payloads_to_host_kernel's grid
__global__ void __launch_bounds__(kScanThreads) payload_offsets_kernel(Params p) {
  __shared__ unsigned long long part[kScanThreads / 32];
  __shared__ unsigned long long carry;
  __shared__ unsigned table_bytes;
  if (threadIdx.x == 0) carry = 0, table_bytes = 0;
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  for (int base = 0; base < p.n_tiles; base += kScanThreads) {
    const int t = base + int(threadIdx.x);
    unsigned long long v = 0;
    if (t < p.n_tiles) {
      const int type = p.tile_type[t];
      v = type == 1   ? p.tile_size[t]
          : type == 2 ? p.tiles[t].raw_bytes
          : type == 3 ? indexed_bytes_of(p.tiles[t].raw_bytes, p.index_digits)
                      : 0;
      const unsigned long long entry =
          v << 7 | (unsigned long long)(type == 1 ? p.tile_lanes[t] - 1 : 0) << 2 | unsigned(type);
      atomicAdd(&table_bytes, unsigned(entry ? (64 - __clzll((long long)entry) + 6) / 7 : 1));
    }
    unsigned long long incl = v;  // inclusive scan in the warp
    for (int o = 1; o < 32; o <<= 1) {
      const unsigned long long u = __shfl_up_sync(kFullWarp, incl, o);
      if (lane >= o) incl += u;
    }
    if (lane == 31) part[warp] = incl;
    __syncthreads();
    if (warp == 0) {
      unsigned long long w = part[lane], wi = w;
      for (int o = 1; o < 32; o <<= 1) {
        const unsigned long long u = __shfl_up_sync(kFullWarp, wi, o);
        if (lane >= o) wi += u;
      }
      part[lane] = wi - w;  // exclusive: the warps before
    }
    __syncthreads();
    const unsigned long long at = carry + part[warp] + incl - v;
    if (t < p.n_tiles) p.payload_off[t] = at;
    __syncthreads();
    if (threadIdx.x == kScanThreads - 1) carry = at + v;
    __syncthreads();
  }
  if (threadIdx.x == 0) p.payload_total[0] = carry, p.payload_total[1] = table_bytes;
}

// n bytes from device memory at `src` to host memory mapped for the device
// at `dst`, by the kernel's threads together: each stores 16 bytes aligned
// in host memory (the first and the last few bytes one at a time), read a
// byte at a time (`src` need not be aligned with `dst`).
__device__ __forceinline__ void store_to_host(const uint8_t *__restrict__ src, uint8_t *dst,
                                              size_t n) {
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
  const size_t lead = head < n ? head : n;
  const size_t chunks = (n - lead) / 16, tail = lead + chunks * 16;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t first = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (size_t i = first; i < chunks; i += stride) {
    const uint8_t *from = src + lead + i * 16;
    uint32_t w[4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
      w[q] = uint32_t(from[4 * q]) | uint32_t(from[4 * q + 1]) << 8 |
             uint32_t(from[4 * q + 2]) << 16 | uint32_t(from[4 * q + 3]) << 24;
    reinterpret_cast<uint4 *>(dst + lead)[i] = make_uint4(w[0], w[1], w[2], w[3]);
  }
  if (first < lead) dst[first] = src[first];
  if (first < n - tail) dst[tail + first] = src[tail + first];
}

// n bytes from the device to host memory mapped for it (back_to_host()).
__global__ void to_host_kernel(const uint8_t *__restrict__ src, uint8_t *dst, size_t n) {
  store_to_host(src, dst, n);
}

// The payloads (`totals`: their bytes, then the tile table's) to host
// memory mapped for the device, at `body` plus the tile table's bytes
// (`body`: the body's start plus head_bytes()); the back end's assemble()
// writes the header, the model section and the tile table before them.
__global__ void payloads_to_host_kernel(const uint8_t *__restrict__ payload,
                                        const unsigned long long *totals, uint8_t *body) {
  store_to_host(payload, body + totals[1], totals[0]);
}

// A lane's checksum h -> (33 h + v) mod 2^17 per symbol is affine in h, so
// a run of symbols is one map h -> m h + a (mod 2^32; the checksum keeps the
// low 17 bits), and the maps of consecutive runs compose in order.
struct Affine {
  uint32_t m, a;
};
__device__ __forceinline__ Affine then(Affine first, Affine second) {
  return {first.m * second.m, first.a * second.m + second.a};
}
__device__ __forceinline__ Affine affine_of(uint32_t v) {
  if (v == kNoCode) return {1u, 0u};
  const uint32_t token = code_token(v);
  if (!code_nbits(v)) return {33u, token};
  return {33u * 33u, token * 33u + code_bits(v)};  // the token, then its raw bits
}

// One lane's rANS coder: its state, and where its bytes and counts of the
// current batch go (the placing ring, rans_lanes_kernel). Renormalisation
// emits at most 2 bytes (a state below 2^31 against x_max >= 2^15),
// computed without a loop; the division by a frequency is a multiplication
// by its reciprocal (exact for x < 2^31, see RansEncoder::quotient in
// cuda/cpu/codec2.cpp). A unit's counts gather in a register and are
// written once, at the unit's end (a byte per sub-step, written where it
// was not 0 and walked by pointer, took some 30 of the coding warp's 220
// instructions per step of three components); the bytes are walked by
// pointer. A sub-step without a code is the identity rather than
// a branch: no raw bits (x_max 2^31, which no state reaches, then x << 0),
// or the token of frequency kProbScale at 0 (kIdentityToken: x_max 2^31,
// and q = x / 4096 gives q * 4096 + x % 4096 = x), so every lane runs the
// same instructions.
constexpr uint32_t kIdentityToken = kProbScale << 16;  // cum 0, freq kProbScale
static_assert(((kRansLow >> kProbBits) << 8) * kProbScale == 1u << 31 && kRansLow << 8 == 1u << 31,
              "the identity's x_max is above every state");
// A symbol's record as the coder takes it (rans_record()): cum, the
// frequency's reciprocal, the reciprocal's shift (31 + ceil(log2 freq)) |
// raw bit count << 6 | raw bits << 10, and kProbScale - freq.
struct LaneCoder {
  uint32_t x;
  uint8_t *log;    // where this lane's next byte goes (a lane's bytes are 32 apart)
  uint16_t *unit;  // this lane's word of the current unit (units are 32 words apart)
  uint32_t pack;   // the current unit's counts so far
  // Sub-step s of the unit (a constant once the caller's loop is unrolled).
  __device__ __forceinline__ void renorm(uint32_t x_max, int s) {
    const bool one = x >= x_max, two = (x >> 8) >= x_max;  // two: one as well
    if (one) log[0] = uint8_t(x);
    if (two) log[32] = uint8_t(x >> 8);
    const uint32_t e = uint32_t(one) + uint32_t(two);
    log += e * 32;
    x >>= 8 * e;
    pack |= e << (2 * s);
  }
  // n raw bits (n = 0: x stays as it is); x_max = (kRansLow >> n) << 8.
  __device__ __forceinline__ void raw(uint32_t bits, int n, int s) {
    renorm(0x80000000u >> n, s);
    x = (x << n) | bits;
  }
  // x_max = ((kRansLow >> kProbBits) << 8) * freq = 2^31 - (kProbScale -
  // freq) * 2^19; x' = (x / freq) * kProbScale + x % freq + cum = x + q *
  // (kProbScale - freq) + cum.
  __device__ __forceinline__ void token(const uint4 &r, int s) {
    renorm(0x80000000u - (r.w << 19), s);
    const uint32_t q = uint32_t((uint64_t(x) * r.y) >> (r.z & 63u));
    x += q * r.w + r.x;
  }
  // The unit is coded: its counts to the ring (0 for the threads beyond the
  // lanes: they code identities), the next unit's word.
  __device__ __forceinline__ void end_unit() {
    *unit = uint16_t(pack);
    pack = 0;
    unit += 32;
  }
};
static_assert((kRansLow >> kProbBits) << 8 == 1u << 19, "the token's x_max is freq << 19");

// 6a'. The coded tiles' symbols in schedule order (so that the lanes of a
// step read them together), and the steps in which some lane codes
// something (layer_mark_words()). A thread per lane and run of
// kScheduleRun steps: it works out its lane's sample at the run's first
// step (two divisions), loads the run's codes at once and writes them, step
// by step; the threads of a warp with the same word of the marks join their
// bits. (A thread per step and lane executed some 200 instructions for
// each, most of them to find its sample; a warp per run of steps left most
// threads idle in tiles with few lanes; runs of 32 steps with each load
// waited for made the kernel a chain of waits.) Each thread also composes
// the checksum map of its lane's symbols in the run (Affine), and then
// thread q of the block composes those of lane q in the block's chunk of
// items in order (a lane's items of a layer are `lanes` apart, layer 0's
// before layer 1's), the first chunk's after the lane's block modes, so
// that rans_lanes_kernel starts from a few maps per lane. (A kernel of its
// own that walked each lane's symbols again for the maps took 22 us and
// 12.6 M warp instructions per 1080p frame of a hand-held camera, about
// 8 % of the encoder's instructions.) Per layer of the tile, what every
// thread needs, worked out once per thread block:
struct SchedLayer {
  uint32_t items;  // lanes x runs
  uint32_t out;    // the layer's first code in the tile's
  uint32_t marks;  // its first word in the tile's marks
  uint32_t words;  // its words of steps (the summary follows them)
  int steps;       // schedule_steps()
  int period;      // schedule_period()
};
// The OR of v over the lanes in `group` (each of them calls it with it).
__device__ __forceinline__ uint32_t group_or_u32(unsigned group, uint32_t v) {
#if __CUDA_ARCH__ >= 800
  return __reduce_or_sync(group, v);
#else
  uint32_t r = 0;
  for (unsigned g = group; g; g &= g - 1) r |= __shfl_sync(group, v, __ffs(int(g)) - 1);
  return r;
#endif
}
// Lane ln's codes at the steps of run `run` of layer l into the tile's
// codes; returns the run's bits (bit s: its step run * kScheduleRun + s
// codes something) and in *map the checksum map of the run's codes in the
// lane's order (by step, each component's token, then its raw bits).
template <int NC>
__device__ __forceinline__ uint32_t schedule_run(const Params &p, const DevTile &dt, int l,
                                                 const SchedLayer &ly, int lanes, int run, int ln,
                                                 Affine *map) {
  const int w = dt.w[l], h = dt.h[l];
  const int st0 = run * kScheduleRun, n = min(ly.steps - st0, kScheduleRun);
  // The lane's sample at step st0: column i of its row j (i < 0: the lane
  // starts later; i >= w: between its rows; j >= h: done).
  const int tt = st0 - kStagger * ln;
  const int round = tt >= 0 ? tt / ly.period : 0;
  int i = tt - round * ly.period, j = round * lanes + ln;
  const uint32_t *__restrict__ syms = p.symbols + dt.layer_first[l];
  uint32_t v[kScheduleRun][NC];
#pragma unroll
  for (int s = 0; s < kScheduleRun; ++s) {
    const bool valid = s < n && i >= 0 && i < w && j < h;
    const size_t at = valid ? (size_t(j) * w + i) * NC : 0;
#pragma unroll
    for (int c = 0; c < NC; ++c) v[s][c] = valid ? __ldg(syms + at + c) : kNoCode;
    if (++i == ly.period) {
      i = 0;
      j += lanes;
    }
  }
  uint32_t *__restrict__ out =
      p.codes + dt.sched_first + ly.out + size_t(st0) * NC * uint32_t(lanes) + uint32_t(ln);
  uint32_t bits = 0;
  Affine acc{1u, 0u};
#pragma unroll
  for (int s = 0; s < kScheduleRun; ++s) {
    if (s >= n) break;
    bool coded = false;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      out[(s * NC + c) * lanes] = v[s][c];
      coded |= v[s][c] != kNoCode;
      acc = then(acc, affine_of(v[s][c]));
    }
    // Exactly the steps at which a lane reads a code: the marks follow the
    // codes, not the block modes.
    bits |= uint32_t(coded) << s;
  }
  *map = acc;
  return bits;
}
constexpr int kScheduleThreads = 256;
// Composes onto `acc` lane q's maps of the items [from, to) of a layer
// whose first item is `first` (item i goes to lane (i - first) % lanes),
// from the chunk's maps in s_map (the chunk's first item: cbase).
__device__ __forceinline__ Affine compose_lane(Affine acc, const uint2 *s_map, uint32_t cbase,
                                               uint32_t from, uint32_t to, uint32_t first,
                                               uint32_t q, uint32_t ln_count) {
  for (uint32_t i = from + (q + ln_count - (from - first) % ln_count) % ln_count; i < to;
       i += ln_count) {
    const uint2 m = s_map[i - cbase];
    acc = then(acc, Affine{m.x, m.y});
  }
  return acc;
}

__global__ void __launch_bounds__(kScheduleThreads) schedule_kernel(Params p) {
  const int t = blockIdx.x;
  if (!rans_coded(p, t)) return;
  const DevTile &dt = p.tiles[t];
  const int lanes = p.tile_lanes[t];
  __shared__ SchedLayer s_layer[kMaxLayers];
  static_assert(kMaxLayers == 2, "the items of two layers");
  if (threadIdx.x == 0) {
    uint32_t out = 0, marks = 0;
    for (int l = 0; l < kMaxLayers; ++l) {
      SchedLayer &ly = s_layer[l];
      ly.steps = l < p.layers ? schedule_steps(dt.w[l], dt.h[l], lanes) : 0;
      ly.words = step_words(ly.steps);
      ly.items = l < p.layers ? layer_schedule_items(dt, l, lanes) : 0;
      ly.out = out;
      ly.marks = marks;
      ly.period = l < p.layers ? schedule_period(dt.w[l], lanes) : 1;
      if (l < p.layers) {
        out += layer_codes(dt, l, lanes);
        marks += layer_mark_words(dt, l, lanes);
      }
    }
  }
  __syncthreads();
  const uint32_t items0 = s_layer[0].items, items = items0 + s_layer[1].items;
  uint32_t *marks = p.step_marks + dt.marks_first;
  __shared__ uint2 s_map[kScheduleThreads];
  // Whole warps go round, so that the threads of a warp with the same word
  // of the marks set it with one atomic; the first to set a bit in a word
  // also sets the word's bit in the summary. The whole block goes round
  // with its chunk of items (the lanes' maps).
  const uint32_t me = threadIdx.x & 31;
  for (uint32_t chunk = blockIdx.y; chunk * blockDim.x < items; chunk += gridDim.y) {
    const uint32_t cbase = chunk * blockDim.x, base = cbase + (threadIdx.x - me);
    uint32_t word = ~0u, bits = 0, summary = 0, summary_bit = 0;
    Affine map{1u, 0u};
    if (base + me < items) {
      uint32_t idx = base + me;
      const int l = idx < items0 ? 0 : 1;
      if (l == 1) idx -= items0;
      const SchedLayer &ly = s_layer[l];
      const int run = int(idx / uint32_t(lanes)), ln = int(idx) - run * lanes;
      switch (dt.channels[l]) {
        case 1:
          bits = schedule_run<1>(p, dt, l, ly, lanes, run, ln, &map);
          break;
        case 2:
          bits = schedule_run<2>(p, dt, l, ly, lanes, run, ln, &map);
          break;
        case 3:
          bits = schedule_run<3>(p, dt, l, ly, lanes, run, ln, &map);
          break;
        default:
          bits = schedule_run<4>(p, dt, l, ly, lanes, run, ln, &map);
          break;
      }
      const uint32_t st0 = uint32_t(run) * kScheduleRun, wd = st0 / 32;
      bits <<= st0 & 31;
      word = ly.marks + wd;
      summary = ly.marks + ly.words + wd / 32;
      summary_bit = 1u << (wd & 31);
    }
    const unsigned same = __match_any_sync(kFullWarp, word);
    const uint32_t all = group_or_u32(same, bits);
    if (all && me == uint32_t(__ffs(int(same)) - 1) && atomicOr(marks + word, all) == 0)
      atomicOr(marks + summary, summary_bit);
    s_map[threadIdx.x] = make_uint2(map.m, map.a);
    __syncthreads();
    if (threadIdx.x < uint32_t(lanes)) {
      const uint32_t q = threadIdx.x, ln_count = uint32_t(lanes);
      Affine acc{1u, 0u};
      if (chunk == 0 && !p.keyframe) {  // the lane's block modes come first
        const uint32_t *syms = p.symbols + dt.first;
        for (uint32_t b = q; b < uint32_t(dt.blocks); b += ln_count)
          acc = then(acc, affine_of(syms[b]));
      }
      const uint32_t end = min(items, cbase + blockDim.x);
      // lane q's items of layer 0 in the chunk, then of layer 1
      acc = compose_lane(acc, s_map, cbase, cbase, min(end, items0), 0, q, ln_count);
      acc = compose_lane(acc, s_map, cbase, max(cbase, items0), end, items0, q, ln_count);
      p.lane_maps[(size_t(t) * p.lane_chunks + chunk) * kMaxLanes + q] = make_uint2(acc.m, acc.a);
    }
    __syncthreads();  // s_map is read before the next chunk writes it
  }
}

// The marked steps of a layer (layer_mark_words()), from the last: the same
// for every lane of the tile (they read the same words). A run of words
// without a mark is passed over in the summary, 1024 steps a word.
struct MarkedSteps {
  const uint32_t *marks;  // the layer's marks
  int words;              // its words of steps (the summary follows them)
  int word;               // the word of the step last returned
  uint32_t bits;          // its marked steps not returned yet
  int sword;              // the summary word being read
  uint32_t sbits;         // its marked words below `word` not visited yet
  __device__ __forceinline__ MarkedSteps(const uint32_t *layer_marks, int steps) {
    marks = layer_marks;
    words = int(step_words(steps));
    word = words;
    bits = 0;
    sword = (words - 1) / 32;
    sbits = marks[words + sword];
  }
  // The next marked step going backwards; -1 when none is left.
  __device__ __forceinline__ int next() {
    while (!bits) {
      while (!sbits) {
        if (sword == 0) return -1;
        sbits = marks[words + --sword];
      }
      const int b = 31 - __clz(int(sbits));
      sbits ^= 1u << b;
      word = sword * 32 + b;
      bits = marks[word];  // not 0: a word's summary bit is set once it has a mark
    }
    const int b = 31 - __clz(int(bits));
    bits ^= 1u << b;
    return word * 32 + b;
  }
};

// The steps of one layer of a tile, backwards, for a lane: NC components
// per sample. Only the marked steps (schedule_kernel), in which some lane of
// the tile codes something: at the others (their samples lie in skipped
// blocks or outside the tile) no lane emits a byte, so they have no unit.
// Five warps per tile, thread l of each for lane l: the coding warp runs the
// chain of states and writes each unit's bytes and counts; two loading warps
// walk the marks, load the symbols of B steps at once, look up their tables
// and write them to a ring of two batches in shared memory, one slot each
// (batches 0, 2, 4, ... and 1, 3, 5, ...): while the coding warp codes one
// batch, the next waits in the other slot, and each loading warp holds its
// next batch in its registers. Arrive-wait barriers hand the slots over:
// "full" when a batch is written, "empty" when it is coded (each phase: the
// 32 threads of the slot's loading warp and of the coding warp). The coding
// warp writes a batch's bytes and counts to a second ring, of kPlaceSlots
// slots, with where the batch's bytes start in the tile's stream, and
// kPlacers placing warps, taking the batches in turn, put them where the
// decoder reads them ("coded" and "placed": the coding warp and the
// batch's placing warp), so that the placement runs beside the chain of
// states rather than after it (in a kernel of its own it took 31-65 us per
// 1080p frame after the coding pass; with one placing warp, frames where
// most sub-steps emit bytes took longer than with that kernel).
// With one warp per multiprocessor (a tile each) a single warp issued all of
// the coding and loading, about 280 instructions per step of three
// components; with one loading warp, the coding warp waited for it (the
// pass took 216 instead of 168 us on a hand-held camera's frames at 1080p,
// k = 0).
// B is kRansBatch where the rings fit the device's shared memory beside the
// tables, else 1 (devices with 64 KB per block and formats of 4 components:
// CudaEncoder's constructor), and then the placing ring lies in global
// memory (beside the records and tables it would not fit 64 KB).
constexpr int kRansBatch = 8;
constexpr int kPlacers = 2;
constexpr int kPlaceSlots = 2 * kPlacers;
// two loading warps, the coding warp, the placing warps
constexpr int kRansThreads = 32 * (3 + kPlacers);
constexpr int kRansArrivals = 64;  // per phase of a slot's barriers: the two warps that share it
struct RansRing {
  // The records in dynamic shared memory after the tables (rans_ring_bytes()):
  // per slot, step of the batch, component (of the format's most, `nc`) and
  // lane: its record (LaneCoder, rans_record()).
  uint4 *rec;
  int nc;
  // The placing ring (place_ring_bytes()): in shared memory after the
  // records, or with batches of one step (devices with little shared
  // memory) the tile's part of Params::place_ring in global memory. Per
  // slot, its units' counts (unit, lane) and the lanes' bytes (byte of the
  // batch, lane; at most 2 per sub-step, so 4 nc per unit).
  uint8_t *place;
  __device__ __forceinline__ uint4 &at(int slot, int B, int k, int c, int ln) const {
    return rec[((slot * B + k) * nc + c) * 32 + ln];
  }
  __device__ __forceinline__ uint16_t *words(int slot, int B) const {
    return reinterpret_cast<uint16_t *>(place) + slot * B * 32;
  }
  __device__ __forceinline__ uint8_t *bytes(int slot, int B) const {
    return place + 2 * kPlaceSlots * B * 32 + slot * B * 4 * nc * 32;
  }
};
// The kernel's dynamic shared memory: the tables (reciprocals, the
// distributions' cum | freq << 16, the shifts), rounded up to 16 bytes, then
// the records and, with batches of more than one step, the placing ring.
__host__ __device__ inline size_t rans_tables_bytes(int dist_count) {
  const size_t n = (size_t(dist_count) * kTokens + kProbScale + 1) * 4 + kProbScale + 1;
  return (n + 15) / 16 * 16;
}
__host__ __device__ inline size_t place_ring_bytes(int batch, int nc) {
  return size_t(kPlaceSlots) * batch * 32 * (sizeof(uint16_t) + 4 * size_t(nc));
}
// The records' part: two slots of `batch` steps, `nc` components, 32 lanes.
__host__ __device__ inline size_t rans_records_bytes(int batch, int nc) {
  return size_t(2) * batch * nc * 32 * sizeof(uint4);
}
__host__ __device__ inline size_t rans_ring_bytes(int batch, int nc) {
  return rans_records_bytes(batch, nc) + (batch > 1 ? place_ring_bytes(batch, nc) : 0);
}
// The rings' other part, static: the batches' steps, whether each step has
// raw bits, the placing ring's units per batch (-1: the tile's end) and
// where its bytes start (bytes from the stream's end), and the barriers.
struct RansSync {
  int step[2][kRansBatch];     // the batch's steps; -1 ends the layer
  uint8_t raw[2][kRansBatch];  // whether some lane has raw bits in the step
  int units[kPlaceSlots];
  uint32_t start[kPlaceSlots];
  __mbarrier_t full[2], empty[2], coded[kPlaceSlots], placed[kPlaceSlots];
};
__device__ __forceinline__ void ring_arrive(__mbarrier_t *bar) {
  (void)__mbarrier_arrive(bar);
}
__device__ __forceinline__ void ring_wait(__mbarrier_t *bar) {
  const __mbarrier_token_t token = __mbarrier_arrive(bar);
  while (!__mbarrier_test_wait(bar, token)) {
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  // (before sm_80 the barrier is a counter in shared memory that the wait
  // polls with volatile loads: the ring's reads must not pass it)
  __threadfence_block();
#endif
}
// A symbol as the coding warp takes it (LaneCoder; kNoCode: both identities).
__device__ __forceinline__ uint4 rans_record(uint32_t v, const uint32_t *s_fc,
                                             const uint32_t *s_rcp, const uint8_t *s_shift) {
  const bool coded = v != kNoCode;
  const uint32_t fc = coded ? s_fc[code_key(v)] : kIdentityToken;
  const uint32_t f = fc >> 16;
  // code_nbits(v) << 6 | code_bits(v) << 10 (pack_code())
  const uint32_t meta = uint32_t(s_shift[f]) | (coded ? (v >> 8) & ~63u : 0u);
  return make_uint4(fc & 0xffffu, s_rcp[f], meta, kProbScale - f);
}
static_assert((pack_code(0, 0, 15, 1023) >> 8 & ~63u) == (15u << 6 | 1023u << 10) &&
                  (pack_code(511, 31, 0, 0) >> 8 & ~63u) == 0u,
              "a record's raw bit count and bits straight from the code");
static_assert(31 + kProbBits < 64 && 10 + 14 <= 32, "a record's shift, count and bits fit");

// A loading warp's part of a layer: the batches b with b % 2 = slot, in
// that slot of the ring (both warps walk every mark, so that each knows its
// batches' steps and where the layer ends). A batch waits until the warp's
// one before is coded; at the end the warp waits for its last one, so that
// every phase of its slot's barriers completes within the layer. With each
// step goes whether some lane has raw bits in it (code_step()).
template <int NC, int B>
__device__ __forceinline__ void load_layer(const uint32_t *codes, const uint32_t *marks, int steps,
                                           int lanes, int ln, const uint32_t *s_fc,
                                           const uint32_t *s_rcp, const uint8_t *s_shift,
                                           const RansRing &ring, RansSync &sync, int slot) {
  MarkedSteps ms(marks, steps);
  const bool is_lane = ln < lanes;
  bool done = false;
  int made = 0;  // the batches this warp has written in the layer
  for (int b = 0; !done; ++b) {
    int st[B];
    uint32_t v[B][NC];
#pragma unroll
    for (int k = 0; k < B; ++k) {
      st[k] = done ? -1 : ms.next();
      done |= st[k] < 0;
    }
    // Where b & 1 is not this warp's slot, the batch is the other loading
    // warp's (the layer's last one if done). 32-bit offsets: a tile's codes
    // are counted in 32 bits (layer_codes()).
    if ((b & 1) != slot) continue;
#pragma unroll
    for (int k = 0; k < B; ++k) {
      const uint32_t *row = codes + uint32_t(st[k]) * uint32_t(NC * lanes) + uint32_t(ln);
#pragma unroll
      for (int c = 0; c < NC; ++c)
        v[k][c] = st[k] >= 0 && is_lane ? __ldg(row + uint32_t(c * lanes)) : kNoCode;
    }
    bool raw[B];
#pragma unroll
    for (int k = 0; k < B; ++k) {
      bool mine = false;
#pragma unroll
      for (int c = 0; c < NC; ++c) mine |= v[k][c] != kNoCode && code_nbits(v[k][c]) != 0;
      raw[k] = __any_sync(kFullWarp, mine);
    }
    if (made > 0) ring_wait(&sync.empty[slot]);
#pragma unroll
    for (int k = 0; k < B; ++k) {
#pragma unroll
      for (int c = 0; c < NC; ++c)
        ring.at(slot, B, k, c, ln) = rans_record(v[k][c], s_fc, s_rcp, s_shift);
      if (ln == k) {
        sync.step[slot][k] = st[k];
        sync.raw[slot][k] = raw[k];
      }
    }
    ring_arrive(&sync.full[slot]);
    ++made;
  }
  if (made > 0) ring_wait(&sync.empty[slot]);
}

// One step of a lane: its components from the last, each one's raw bits
// first (they are read after the token), then its token. RAW = false where
// no lane of the step has raw bits: their sub-steps would emit nothing and
// leave the states as they are.
template <int NC, bool RAW>
__device__ __forceinline__ void code_step(LaneCoder &lc, const RansRing &ring, int slot, int B,
                                          int k, int ln) {
#pragma unroll
  for (int c = NC - 1; c >= 0; --c) {
    const uint4 r = ring.at(slot, B, k, c, ln);
    if (RAW) lc.raw(r.z >> 10, int((r.z >> 6) & 15u), 2 * (NC - 1 - c));
    lc.token(r, 2 * (NC - 1 - c) + 1);
  }
}

// The coding warp's side of the placing ring: its batch n of the tile goes
// to slot n % kPlaceSlots, once a placing warp has placed what was there
// before, with the bytes of the batches before it (`start`).
struct PlaceCursor {
  int n = 0;
  uint32_t start = 0;   // the tile's bytes so far
  const uint8_t *base;  // this lane's first byte of the batch
  __device__ __forceinline__ void begin(LaneCoder &lc, const RansRing &ring, RansSync &sync, int B,
                                        int ln) {
    const int slot = n % kPlaceSlots;
    if (n >= kPlaceSlots) ring_wait(&sync.placed[slot]);
    if (B == 1) __threadfence_block();  // the ring in global memory
    lc.log = ring.bytes(slot, B) + ln;
    lc.unit = ring.words(slot, B) + ln;
    base = lc.log;
  }
  // units < 0: the tile's end (one such batch for each placing warp).
  __device__ __forceinline__ void end(const LaneCoder &lc, RansSync &sync, int B, int units,
                                      int ln) {
    const int slot = n % kPlaceSlots;
    if (B == 1) __threadfence_block();  // the ring in global memory
    if (ln == 0) {
      sync.units[slot] = units;
      sync.start[slot] = start;
    }
    ring_arrive(&sync.coded[slot]);
    start += warp_sum_u32(uint32_t(lc.log - base) / 32);
    ++n;
  }
};

// The coding warp's part of a layer: batch by batch from the ring, each
// batch handed back once coded and its units handed to a placing warp.
template <int NC, int B>
__device__ __forceinline__ void code_layer(LaneCoder &lc, PlaceCursor &place, int ln,
                                           const RansRing &ring, RansSync &sync) {
  for (int b = 0;; ++b) {
    const int slot = b & 1;
    ring_wait(&sync.full[slot]);
    place.begin(lc, ring, sync, B, ln);
    int units = 0;
    bool end = false;
    for (int k = 0; k < B; ++k) {
      if (sync.step[slot][k] < 0) {
        end = true;
        break;
      }
      if (sync.raw[slot][k])
        code_step<NC, true>(lc, ring, slot, B, k, ln);
      else
        code_step<NC, false>(lc, ring, slot, B, k, ln);
      lc.end_unit();
      ++units;
    }
    ring_arrive(&sync.empty[slot]);
    place.end(lc, sync, B, units, ln);
    if (end) break;
  }
}

// A placing warp (the j-th): the units of batches j, j + kPlacers, ... where
// the decoder reads their bytes (the reference's order: sub-steps from the
// first emitted, in each the lanes from the last, each lane's bytes in the
// order it emitted them), written backwards from the end of the tile's
// region.
template <int B>
__device__ __forceinline__ void place_batches(const Params &p, int t, int j, int ln,
                                              const RansRing &ring, RansSync &sync) {
  uint8_t *end = p.streams + p.stream_off[t + 1];
  const unsigned higher = ln == 31 ? 0u : ~0u << (ln + 1);  // the lanes after this one
  for (int n = j;; n += kPlacers) {
    const int slot = n % kPlaceSlots;
    ring_wait(&sync.coded[slot]);
    if (B == 1) __threadfence_block();  // the ring in global memory
    const int units = sync.units[slot];
    if (units < 0) break;
    uint32_t written = sync.start[slot];  // the tile's bytes before this one
    const uint16_t *words = ring.words(slot, B) + ln;
    const uint8_t *bytes = ring.bytes(slot, B) + ln;  // this lane's k-th at bytes[32 k]
    uint32_t at = 0;                                  // this lane's bytes of the batch so far
    for (int u = 0; u < units; ++u) {
      const uint32_t w = words[u * 32];
      const uint32_t any = group_or_u32(kFullWarp, w);  // the sub-steps with a byte
      if (!any) continue;
#pragma unroll
      for (int s = 0; s < kUnitSubsteps; ++s) {
        if (!((any >> (2 * s)) & 3u)) continue;
        const uint32_t e = (w >> (2 * s)) & 3u;
        const unsigned one = __ballot_sync(kFullWarp, e >= 1),
                       two = __ballot_sync(kFullWarp, e >= 2);
        const uint32_t o = written + __popc(one & higher) + __popc(two & higher);
        if (e >= 1) end[-1 - int(o)] = bytes[at * 32];
        if (e >= 2) end[-2 - int(o)] = bytes[(at + 1) * 32];
        written += __popc(one) + __popc(two);
        at += e;
      }
    }
    if (B == 1) __threadfence_block();
    ring_arrive(&sync.placed[slot]);
  }
}

// n values to shared memory by the block's kRansThreads threads, 16 loads
// in flight per thread (one at a time, the tables took some 10 us of the
// kernel before the lanes could start).
template <typename T>
__device__ __forceinline__ void to_shared(T *dst, const T *__restrict__ src, int n) {
  constexpr int kInFlight = 16;
  for (int i0 = int(threadIdx.x); i0 < n; i0 += kInFlight * kRansThreads) {
    T v[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int i = i0 + u * kRansThreads;
      v[u] = i < n ? __ldg(src + i) : T(0);
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int i = i0 + u * kRansThreads;
      if (i < n) dst[i] = v[u];
    }
  }
}

// 6b. rANS: five warps per coded tile (code_layer(), load_layer(),
// place_batches()), thread l of the coding warp codes lane l's symbols in
// exactly the reverse of the decoding order from its final state, alone:
// per sub-step it notes the bytes it emitted (0..2) in its unit's word and
// appends them to its bytes of the batch, which a placing warp then puts
// in the tile's stream. The frame's tables and the reciprocals of the
// frequencies are in shared memory. Threads beyond the tile's lanes take
// part in the barriers and code identities.
template <int B>
__global__ void __launch_bounds__(kRansThreads) rans_lanes_kernel(Params p) {
  // reciprocals (kProbScale + 1), the tables, the shifts (kProbScale + 1
  // bytes), then the rings (rans_tables_bytes(), rans_ring_bytes())
  extern __shared__ uint4 s_dyn[];
  __shared__ RansSync sync;
  uint32_t *s_tab = reinterpret_cast<uint32_t *>(s_dyn);
  const int n_fc = p.dist_count * kTokens;
  uint32_t *s_rcp = s_tab, *s_fc = s_tab + kProbScale + 1;
  uint8_t *s_shift = reinterpret_cast<uint8_t *>(s_fc + n_fc);
  const int t = blockIdx.x;
  uint4 *rec = s_dyn + rans_tables_bytes(p.dist_count) / sizeof(uint4);
  const RansRing ring{rec, p.ring_nc,
                      B == 1 ? p.place_ring + size_t(t) * place_ring_bytes(1, p.ring_nc)
                             : reinterpret_cast<uint8_t *>(rec) + rans_records_bytes(B, p.ring_nc)};
  if (!rans_coded(p, t)) return;  // the whole block
  to_shared(s_fc, p.freq_cum, n_fc);
  to_shared(s_rcp, p.reciprocal, int(kProbScale) + 1);
  to_shared(s_shift, p.shift, int(kProbScale) + 1);
  if (threadIdx.x == 0)
    for (int slot = 0; slot < kPlaceSlots; ++slot) {
      if (slot < 2) {
        __mbarrier_init(&sync.full[slot], kRansArrivals);
        __mbarrier_init(&sync.empty[slot], kRansArrivals);
      }
      __mbarrier_init(&sync.coded[slot], kRansArrivals);
      __mbarrier_init(&sync.placed[slot], kRansArrivals);
    }
  __syncthreads();
  const DevTile &dt = p.tiles[t];
  const int ln = threadIdx.x & 31;
  const int warp = int(threadIdx.x) / 32;
  const bool coder = warp == 2;
  const int lanes = p.tile_lanes[t];
  const bool is_lane = ln < lanes;
  if (warp >= 3) {
    place_batches<B>(p, t, warp - 3, ln, ring, sync);
    return;
  }
  LaneCoder lc{};
  PlaceCursor place;
  if (coder) {
    // The lane's checksum: the maps of its symbols in schedule_kernel's
    // chunks, in order.
    Affine sum{1u, 0u};
    if (is_lane) {
      uint32_t items = 0;
      for (int l = 0; l < p.layers; ++l) items += layer_schedule_items(dt, l, lanes);
      const uint32_t chunks = (items + kScheduleThreads - 1) / kScheduleThreads;
      const uint2 *maps = p.lane_maps + size_t(t) * p.lane_chunks * kMaxLanes + ln;
      for (uint32_t c = 0; c < chunks; ++c) {
        const uint2 m = maps[size_t(c) * kMaxLanes];
        sum = then(sum, Affine{m.x, m.y});
      }
    }
    lc.x = is_lane ? lane_final_state(p.k, ln, sum.a & 0x1FFFFu) : kRansLow;
  }
  for (int l = p.layers - 1; l >= 0; --l) {
    const int steps = schedule_steps(dt.w[l], dt.h[l], lanes);
    if (steps == 0) continue;
    const uint32_t *codes = p.codes + dt.sched_first;
    const uint32_t *marks = p.step_marks + dt.marks_first;
    for (int m = 0; m < l; ++m) {
      codes += layer_codes(dt, m, lanes);
      marks += layer_mark_words(dt, m, lanes);
    }
#define CODEC2_RANS_LAYER(NC)                     \
  if (coder)                                      \
    code_layer<NC, B>(lc, place, ln, ring, sync); \
  else                                            \
    load_layer<NC, B>(codes, marks, steps, lanes, ln, s_fc, s_rcp, s_shift, ring, sync, warp)
    switch (dt.channels[l]) {
      case 1:
        CODEC2_RANS_LAYER(1);
        break;
      case 2:
        CODEC2_RANS_LAYER(2);
        break;
      case 3:
        CODEC2_RANS_LAYER(3);
        break;
      default:
        CODEC2_RANS_LAYER(4);
        break;
    }
#undef CODEC2_RANS_LAYER
  }
  if (!coder) return;
  // The block modes, a unit per group of `lanes` of them, B units a batch.
  const uint32_t *syms = p.symbols + dt.first;
  const size_t n_modes = p.keyframe ? 0 : size_t(dt.blocks);
  for (int g0 = int((n_modes + lanes - 1) / lanes) - 1; g0 >= 0; g0 -= B) {
    place.begin(lc, ring, sync, B, ln);
    int units = 0;
    for (int g = g0; g >= 0 && g > g0 - B; --g) {
      const size_t b = size_t(g) * lanes + ln;
      const bool here = is_lane && b < n_modes;
      lc.token(rans_record(here ? syms[b] : kNoCode, s_fc, s_rcp, s_shift), 0);
      lc.end_unit();
      ++units;
    }
    place.end(lc, sync, B, units, ln);
  }
  for (int j = 0; j < kPlacers; ++j) {  // the end, for each placing warp
    place.begin(lc, ring, sync, B, ln);
    place.end(lc, sync, B, -1, ln);
  }
  // The lanes' final states before the bytes (lane 0 first, little-endian),
  // and the tile's size.
  uint8_t *end = p.streams + p.stream_off[t + 1] - place.start;
  if (is_lane)
    for (int q = 0; q < 4; ++q) end[-1 - 4 * (lanes - 1 - ln) - q] = uint8_t(lc.x >> (24 - 8 * q));
  if (ln == 0) p.tile_size[t] = place.start + 4u * uint32_t(lanes);
}

// 8. The payloads in body order: coded tiles' streams, raw tiles' bytes of
// the reconstruction (layer by layer, row by row, sample by sample, channel
// by channel). kGatherParts thread blocks per tile (blockIdx.y) share its
// bytes: with one block per tile (a raw tile of 10x8 blocks of BGR is 61 KB)
// the kernel took 29-43 us on frames with raw tiles.
constexpr int kGatherParts = 16;
__global__ void gather_kernel(Params p) {
  const int t = blockIdx.x;
  const int type = p.tile_type[t];
  uint8_t *out = p.payload + p.payload_off[t];
  const uint32_t from = blockIdx.y * blockDim.x + threadIdx.x, stride = gridDim.y * blockDim.x;
  if (type == 1) {
    const uint32_t n = p.tile_size[t];
    const uint8_t *src = p.streams + p.stream_off[t + 1] - n;
    for (uint32_t i = from; i < n; i += stride) out[i] = src[i];
  } else if (type == 2) {
    const DevTile &dt = p.tiles[t];
    for (int l = 0; l < p.layers; ++l) {
      const DevLayer &ly = p.layer[l];
      const int nc = ly.channels, row = dt.w[l] * nc;
      const uint32_t n = uint32_t(row) * dt.h[l];
      for (uint32_t i = from; i < n; i += stride) {
        const int y = dt.y0[l] + int(i / row), r = int(i % row);
        out[i] = p.rec[l][r % nc][size_t(y) * ly.width + dt.x0[l] + r / nc];
      }
      out += n;
    }
  } else if (type == 3) {
    // A word per thread: its digits' indices from the reconstruction (an
    // index is its reconstruction's index), the last digit first.
    const DevTile &dt = p.tiles[t];
    const uint32_t base = uint32_t(indexed_base(p.k)), digits = uint32_t(p.index_digits);
    const uint32_t n = uint32_t(dt.raw_bytes), words = (n + digits - 1) / digits;
    const uint32_t n0 = uint32_t(dt.w[0] * p.layer[0].channels * dt.h[0]);
    for (uint32_t wd = from; wd < words; wd += stride) {
      uint32_t v = 0;
      for (uint32_t i = min(n, (wd + 1) * digits); i-- > wd * digits;) {
        const int l = i < n0 ? 0 : 1;
        const uint32_t li = l == 0 ? i : i - n0;
        const int nc = p.layer[l].channels, row = dt.w[l] * nc;
        const int y = dt.y0[l] + int(li / uint32_t(row)), r = int(li % uint32_t(row));
        const int byte = p.rec[l][r % nc][size_t(y) * p.layer[l].width + dt.x0[l] + r / nc];
        v = v * base + uint32_t(quant_index(byte, p.step));
      }
      uint8_t *o = out + size_t(wd) * 4;
      o[0] = uint8_t(v), o[1] = uint8_t(v >> 8), o[2] = uint8_t(v >> 16), o[3] = uint8_t(v >> 24);
    }
  }
}

// Launches `kernel` after the kernel before it in `stream` as a
// programmatic dependent launch when `early` (the kernel must begin with
// wait_for_kernel_before()): it may be scheduled while that kernel ends.
// In a stream capture this needs CUDA 12.3; before it, and where `early` is
// false, an ordinary launch.
template <typename... KArgs, typename... Args>
void launch_after(void (*kernel)(KArgs...), dim3 grid, dim3 block, cudaStream_t stream, bool early,
                  Args... args) {
#if CUDART_VERSION >= 12030
  if (early) {
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CUDADIFF_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
    return;
  }
#endif
  (void)early;
  kernel<<<grid, block, 0, stream>>>(args...);
}
// launch_after() of kernel<NC> for a layer of NC channels.
#define CODEC2_LAUNCH_NC_AFTER(kernel, nc, grid, block, stream, early, ...) \
  do {                                                                      \
    switch (nc) {                                                           \
      case 1:                                                               \
        launch_after(kernel<1>, grid, block, stream, early, __VA_ARGS__);   \
        break;                                                              \
      case 2:                                                               \
        launch_after(kernel<2>, grid, block, stream, early, __VA_ARGS__);   \
        break;                                                              \
      case 3:                                                               \
        launch_after(kernel<3>, grid, block, stream, early, __VA_ARGS__);   \
        break;                                                              \
      default:                                                              \
        launch_after(kernel<4>, grid, block, stream, early, __VA_ARGS__);   \
        break;                                                              \
    }                                                                       \
  } while (0)

// Launches kernel<NC> for a layer of NC channels.
#define CODEC2_LAUNCH_NC(kernel, nc, grid, block, stream, ...) \
  CODEC2_LAUNCH_NC_AFTER(kernel, nc, grid, block, stream, false, __VA_ARGS__)

// A graph's kernels keep the priority of the stream they were captured on
// (the high one of a frame's tail, CudaEncoder::launch_frame()).
#if CUDART_VERSION >= 11070
constexpr unsigned long long kGraphFlags = cudaGraphInstantiateFlagUseNodePriority;
#else
constexpr unsigned long long kGraphFlags = 0;
#endif

// An instantiated CUDA graph (cudaGraphExec_t), made once from the work a
// function queues on a stream (stream capture). Empty until capture()
// succeeds.
class GraphExec {
 public:
  GraphExec() = default;
  ~GraphExec() {
    if (exec_) cudaGraphExecDestroy(exec_);
  }
  GraphExec(const GraphExec &) = delete;
  GraphExec &operator=(const GraphExec &) = delete;
  // Captures what `queue` puts on `stream` (nothing of it runs) and
  // instantiates it. False, with nothing kept and no error left pending,
  // when the runtime refuses (a call that cannot be captured, a driver
  // without graphs) or `queue` throws: the caller then queues the work
  // itself.
  template <class F>
  bool capture(cudaStream_t stream, F &&queue) {
    if (exec_) return false;  // made already
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    bool queued = true;
    try {
      queue();
    } catch (...) {
      queued = false;
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    cudaGraphExec_t exec = nullptr;
    const bool captured = queued && ended == cudaSuccess && graph;
    bool made = captured && cudaGraphInstantiateWithFlags(&exec, graph, kGraphFlags) == cudaSuccess;
    if (!made && captured && kGraphFlags != 0) {
      // A driver older than the runtime may not know the flag: the
      // priority of the stream the graph is launched into then.
      cudaGetLastError();
      made = cudaGraphInstantiateWithFlags(&exec, graph, 0) == cudaSuccess;
    }
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    if (!made) return false;
    exec_ = exec;
    return true;
  }
  cudaError_t launch(cudaStream_t stream) const { return cudaGraphLaunch(exec_, stream); }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

class CudaEncoder final : public Encoder {
 public:
  ~CudaEncoder() override {
    // Frames still in flight: their copies end before their buffers go.
    try {
      ctx_.activate();
    } catch (const Error &) {
    }
    for (const Slot &slot : slots_) wait_for_streams(slot);
    for (BodyInTransit &b : transit_)
      if (b.done) cudaEventDestroy(b.done);
    frame_graphs_.clear();
    if (epoch_) cudaEventDestroy(epoch_);
  }
  CudaEncoder(const Context &ctx, VideoFormat format, int width, int height, const Geometry &g)
      : ctx_(ctx) {
    format_ = format;
    width_ = width;
    height_ = height;
    geometry_ = g;
    back_ = detail::make_encoder_back_end(format, width, height, g);  // checks the arguments
    ctx.activate();
    stream_ = static_cast<cudaStream_t>(ctx.stream_handle());
    const LayerSet &ls = back_->layers();
    ls_ = ls;
    const std::vector<Tile> &tiles = back_->tiles();
    n_blocks_ = size_t(ls.blocks_x) * ls.blocks_y;
    Params &p = p_;
    std::memset(&p, 0, sizeof(p));
    p.layers = ls.count;
    p.blocks_x = ls.blocks_x;
    p.blocks_y = ls.blocks_y;
    p.tile_bx = g.tile_bx;
    p.tile_by = g.tile_by;
    p.tiles_x = (ls.blocks_x + g.tile_bx - 1) / g.tile_bx;
    p.lane_samples = uint32_t(g.lane_samples);
    p.walk_bound = g.walk_bound;
    p.dist_count = back_->dist_count();
    // tables_choose_kernel's shared memory without an opt-in (which also
    // bounds its 16-bit list of distributions); every format takes under
    // 8 KB.
    if (size_t(p.dist_count) * kChooseSharedPerDist > 48 * 1024)
      throw Error("codec2 CUDA encoder: too many distributions for the tables' kernel");

    for (int l = 0; l < ls.count; ++l) {
      const Layer &ly = ls.layer[l];
      DevLayer &d = p.layer[l];
      d.width = ly.width;
      d.height = ly.height;
      d.channels = ly.channels;
      d.ycocg = ly.ycocg;
      d.sx = ly.sx;
      d.sy = ly.sy;
      for (int c = 0; c < kMaxComps; ++c) {
        d.plane[c] = ly.plane[c];
        d.step[c] = ly.step[c];
        d.offset[c] = ly.offset[c];
      }
      for (int cls = 0; cls < kClasses; ++cls)
        for (int c = 0; c < ly.channels; ++c) p.dist_base[l][cls][c] = back_->dist_base(l, cls, c);
    }
    // Symbols: per tile its block modes, then its layers' samples.
    std::vector<DevTile> dev_tiles(tiles.size());
    size_t n_symbols = 0;
    for (size_t t = 0; t < tiles.size(); ++t) {
      const Tile &tl = tiles[t];
      DevTile &d = dev_tiles[t];
      d.first = n_symbols;
      d.blocks = (tl.bx1 - tl.bx0) * (tl.by1 - tl.by0);
      size_t at = n_symbols + size_t(d.blocks);
      for (int l = 0; l < kMaxLayers; ++l) {
        d.x0[l] = tl.x0[l];
        d.y0[l] = tl.y0[l];
        d.w[l] = l < ls.count ? tl.w[l] : 0;
        d.h[l] = l < ls.count ? tl.h[l] : 0;
        d.layer_first[l] = at;
        if (l < ls.count) at += size_t(d.w[l]) * d.h[l] * ls.layer[l].channels;
      }
      n_symbols = at;
    }

    const size_t hist_count = size_t(p.dist_count) * kTokens;

    // One allocation for the channel planes (the input's and the
    // reconstructions), one for the rest, carved up with 256-byte alignment.
    auto carve = [](size_t &at, size_t bytes) {
      const size_t off = at;
      at += (bytes + 255) / 256 * 256;
      return off;
    };
    size_t at = 0;
    // The input's channels (two sets: Scratch), then the reconstructions,
    // one per frame in flight (submit()).
    size_t plane_off[2 + kMaxInFlight][kMaxLayers][kMaxComps] = {};
    for (int which = 0; which < 2 + kMaxInFlight; ++which)
      for (int l = 0; l < ls.count; ++l)
        for (int c = 0; c < ls.layer[l].channels; ++c)
          plane_off[which][l][c] = carve(at, size_t(ls.layer[l].width) * ls.layer[l].height);
    planes_ = DeviceBuffer(std::max<size_t>(at, 256));
    for (int l = 0; l < ls.count; ++l)
      for (int c = 0; c < ls.layer[l].channels; ++c) {
        for (int set = 0; set < 2; ++set)
          scratch_[set].cur[l][c] = planes_.data() + plane_off[set][l][c];
        for (int r = 0; r < kMaxInFlight; ++r)
          recon_[r][l][c] = planes_.data() + plane_off[2 + r][l][c];
      }
    at = 0;
    size_t off_in_s[2][kMaxLayers], off_in_t[2][kMaxLayers], off_wk_s[2][kMaxLayers],
        off_wk_t[2][kMaxLayers], off_rclass[2][kMaxLayers], off_ids[kMaxLayers][kClasses];
    for (int l = 0; l < ls.count; ++l) {
      const size_t n = size_t(ls.layer[l].width) * ls.layer[l].height,
                   nv = n * ls.layer[l].channels;
      for (int set = 0; set < 2; ++set) {
        off_in_s[set][l] = carve(at, nv * 2);
        off_in_t[set][l] = carve(at, nv * 2);
        off_wk_s[set][l] = carve(at, nv * 2);
        off_wk_t[set][l] = carve(at, nv * 2);
        off_rclass[set][l] = carve(at, n);
      }
      for (int cls = 0; cls < kClasses; ++cls) off_ids[l][cls] = carve(at, nv * 2);
    }
    const size_t off_coded = carve(at, n_blocks_), off_cost = carve(at, n_blocks_ * kModes * 8),
                 off_hist = carve(at, hist_count * 4), off_id_cost = carve(at, hist_count * 4),
                 off_tiles = carve(at, dev_tiles.size() * sizeof(DevTile)),
                 off_tile_hist = carve(at, tiles.size() * hist_count * 4);
    // (tile_coded, then tile_extra: right after the tiles' histograms, so
    // that one memset clears both)
    const size_t off_coded_count = carve(at, tiles.size() * 8),
                 off_proxy_hist = carve(at, kProxyCopies * hist_count * 4);
    // Per tile: type, lanes, stream size; the tables; the regions the
    // streams are written into (each at most 4 bytes per symbol, plus the
    // states); the payloads (at most the frame's bytes: a coded tile is
    // smaller than its raw bytes).
    std::vector<unsigned long long> stream_off(tiles.size() + 1, 0);
    size_t codes_count = 0, marks_count = 0;
    size_t frame_bytes = 0;
    size_t most_items = 0;  // most lanes x runs of a tile (schedule_kernel's threads)
    for (size_t t = 0; t < tiles.size(); ++t) {
      const size_t count =
          size_t(dev_tiles[t].layer_first[kMaxLayers - 1] - dev_tiles[t].first) +
          (ls.count > 1 ? size_t(tiles[t].w[1]) * tiles[t].h[1] * ls.layer[1].channels : 0);
      stream_off[t + 1] = stream_off[t] + 4 * count + 4 * kMaxLanes + 16;
      DevTile &d = dev_tiles[t];
      d.raw_bytes = uint32_t(tiles[t].raw_bytes);
      for (int l = 0; l < kMaxLayers; ++l) d.channels[l] = l < ls.count ? ls.layer[l].channels : 0;
      size_t most_codes = 0, most_marks = 0;
      for (int lanes = 1; lanes <= std::min(kMaxLanes, d.h[0]); ++lanes) {
        size_t codes = 0, items = 0, marks = 0;
        for (int l = 0; l < ls.count; ++l) {
          codes += layer_codes(d, l, lanes);
          items += layer_schedule_items(d, l, lanes);
          marks += layer_mark_words(d, l, lanes);
        }
        most_codes = std::max(most_codes, codes);
        most_marks = std::max(most_marks, marks);
        most_items = std::max(most_items, items);
      }
      // tile_type_kernel's bitmaps of steps: every candidate number of lanes.
      uint32_t walk_words = 0;
      for (int lanes = 1; lanes < std::min(kMaxLanes, d.h[0]); ++lanes)
        walk_words += uint32_t(schedule_steps(d.w[0], d.h[0], lanes) + 31) / 32;
      p.walk_words = std::max(p.walk_words, std::min(walk_words, kWalkWordsMax));
      d.sched_first = codes_count;
      d.marks_first = marks_count;
      codes_count += most_codes;
      marks_count += most_marks;
      frame_bytes += tiles[t].raw_bytes;
    }
    // Shared by the frames in flight (a frame's front part runs after the
    // one before's histogram, its tables after the one before's tables):
    // what the front part alone reads, the constants, and the tables of the
    // last frames (kMaxInFlight).
    size_t off_model[kMaxInFlight];
    for (size_t &o : off_model) o = carve(at, size_t(p.dist_count) * sizeof(DevModel));
    const size_t off_stream_off = carve(at, stream_off.size() * 8),
                 off_reciprocal = carve(at, (kProbScale + 1) * 4),
                 off_shift = carve(at, kProbScale + 1),
                 off_fresh = carve(at, size_t(p.dist_count) * sizeof(DevModel)),
                 off_cost_prev = carve(at, size_t(p.dist_count) * 8),
                 off_cost_new = carve(at, size_t(p.dist_count) * 8),
                 off_copy_choice = carve(at, size_t(p.dist_count) * kCopyStates),
                 off_symbol_costs = carve(at, (kProbScale + 1) * 2);
    work_ = DeviceBuffer(at);
    uint8_t *w = work_.data();
    for (int l = 0; l < ls.count; ++l) {
      for (int set = 0; set < 2; ++set) {
        Scratch &sc = scratch_[set];
        sc.in_s[l] = reinterpret_cast<int16_t *>(w + off_in_s[set][l]);
        sc.in_t[l] = reinterpret_cast<int16_t *>(w + off_in_t[set][l]);
        sc.wk_s[l] = reinterpret_cast<int16_t *>(w + off_wk_s[set][l]);
        sc.wk_t[l] = reinterpret_cast<int16_t *>(w + off_wk_t[set][l]);
        sc.rclass[l] = w + off_rclass[set][l];
      }
      for (int cls = 0; cls < kClasses; ++cls)
        p.ids[l][cls] = reinterpret_cast<uint16_t *>(w + off_ids[l][cls]);
    }
    p.coded = w + off_coded;
    p.cost = reinterpret_cast<unsigned long long *>(w + off_cost);
    p.hist = reinterpret_cast<uint32_t *>(w + off_hist);
    p.id_cost = reinterpret_cast<uint32_t *>(w + off_id_cost);
    p.tiles = reinterpret_cast<const DevTile *>(w + off_tiles);
    p.tile_hist = reinterpret_cast<uint32_t *>(w + off_tile_hist);
    p.proxy_hist = reinterpret_cast<uint32_t *>(w + off_proxy_hist);
    p.n_tiles = int(tiles.size());
    p.raw_bound = detail::raw_bound_enabled() ? 1 : 0;
    p.stream_off = reinterpret_cast<const unsigned long long *>(w + off_stream_off);
    p.tile_coded = reinterpret_cast<uint32_t *>(w + off_coded_count);
    p.tile_extra = p.tile_coded + tiles.size();
    p.reciprocal = reinterpret_cast<const uint32_t *>(w + off_reciprocal);
    p.shift = w + off_shift;
    for (int m = 0; m < kMaxInFlight; ++m)
      model_buf_[m] = reinterpret_cast<DevModel *>(w + off_model[m]);
    p.fresh = reinterpret_cast<DevModel *>(w + off_fresh);
    p.cost_prev = reinterpret_cast<unsigned long long *>(w + off_cost_prev);
    p.cost_new = reinterpret_cast<unsigned long long *>(w + off_cost_new);
    p.copy_choice = w + off_copy_choice;
    p.symbol_costs = reinterpret_cast<const uint16_t *>(w + off_symbol_costs);
    // Each frame in flight's own (Slot): what its entropy coding reads or
    // writes while the next frame's front part runs, and what comes back to
    // the host. Per tile: type, lanes, stream size; the tables; the regions
    // the streams are written into (each at most 4 bytes per symbol, plus
    // the states); the payloads (at most the frame's bytes: a coded tile is
    // smaller than its raw bytes).
    SlotLayout &o = slot_layout_;
    size_t sat = 0;
    // What comes back at the frame's end lies together (one copy): the
    // block modes, the tiles' types, lanes and sizes, and the counts.
    o.modes = carve(sat, n_blocks_);
    o.type = carve(sat, tiles.size() * sizeof(int));
    o.lanes = carve(sat, tiles.size() * sizeof(int));
    o.size = carve(sat, tiles.size() * 4);
    o.raw = carve(sat, tiles.size() * 4);
    o.changed = carve(sat, sizeof(FrameCounts));
    o.symbols = carve(sat, n_symbols * 4);
    o.freq_cum = carve(sat, hist_count * 4);
    o.streams = carve(sat, stream_off.back());
    o.payload_off = carve(sat, tiles.size() * 8);
    o.payload = carve(sat, frame_bytes);
    payload_capacity_ = frame_bytes;
    p.lane_chunks = uint32_t((most_items + kScheduleThreads - 1) / kScheduleThreads);
    o.lane_maps = carve(sat, tiles.size() * p.lane_chunks * kMaxLanes * sizeof(uint2));
    o.marks = carve(sat, marks_count * 4);
    marks_bytes_ = marks_count * 4;
    o.codes = carve(sat, codes_count * 4);
    o.chosen = carve(sat, size_t(p.dist_count) * sizeof(ChosenTable));
    // rans_lanes_kernel's tables and ring: batches of kRansBatch steps where
    // they fit the device's shared memory per block, else of one step (64
    // KB, formats of 4 components). Each kernel may take all the device
    // allows: the attribute holds for every encoder of the process.
    p.ring_nc = 1;
    for (int l = 0; l < ls.count; ++l) p.ring_nc = std::max(p.ring_nc, ls.layer[l].channels);
    {
      int optin = 0;
      CUDADIFF_CHECK(
          cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx.gpu_id()));
      cudaFuncAttributes many{}, one{};
      CUDADIFF_CHECK(cudaFuncGetAttributes(&many, rans_lanes_kernel<kRansBatch>));
      CUDADIFF_CHECK(cudaFuncGetAttributes(&one, rans_lanes_kernel<1>));
      const size_t limit_many = size_t(optin) - std::min(size_t(optin), many.sharedSizeBytes);
      const size_t limit_one = size_t(optin) - std::min(size_t(optin), one.sharedSizeBytes);
      CUDADIFF_CHECK(cudaFuncSetAttribute(rans_lanes_kernel<kRansBatch>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(limit_many)));
      CUDADIFF_CHECK(cudaFuncSetAttribute(
          rans_lanes_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(limit_one)));
      const size_t tables = rans_tables_bytes(p.dist_count);
      // (CUDADIFF_CODEC2_RANS_BATCH=1 takes the batches of one step on any
      // device: for the tests)
      const char *forced = std::getenv("CUDADIFF_CODEC2_RANS_BATCH");
      const bool small = forced && std::strcmp(forced, "1") == 0;
      if (!small && tables + rans_ring_bytes(kRansBatch, p.ring_nc) <= limit_many) {
        rans_batch_ = kRansBatch;
      } else if (tables + rans_ring_bytes(1, p.ring_nc) <= limit_one) {
        rans_batch_ = 1;
      } else {
        throw Error("codec2 encoder: the rANS pass needs " +
                    std::to_string(tables + rans_ring_bytes(1, p.ring_nc) + one.sharedSizeBytes) +
                    " bytes of shared memory per thread block; this GPU has " +
                    std::to_string(optin) + " (encode on the CPU backend instead)");
      }
      rans_shared_ = tables + rans_ring_bytes(rans_batch_, p.ring_nc);
    }
    // Batches of one step: the placing rings in global memory, a part per tile.
    o.place = rans_batch_ == 1 ? carve(sat, tiles.size() * place_ring_bytes(1, p.ring_nc)) : sat;
    o.bytes = sat;

    // Every buffer a kernel may read is defined (the reference of a first
    // delta is refused anyway; these keep a sanitizer's view clean).
    CUDADIFF_CHECK(cudaMemsetAsync(planes_.data(), 0, planes_.size(), stream_));
    CUDADIFF_CHECK(cudaMemsetAsync(work_.data(), 0, work_.size(), stream_));
    CUDADIFF_CHECK(cudaMemcpyAsync(w + off_tiles, dev_tiles.data(),
                                   dev_tiles.size() * sizeof(DevTile), cudaMemcpyHostToDevice,
                                   stream_));
    CUDADIFF_CHECK(cudaMemcpyAsync(w + off_stream_off, stream_off.data(), stream_off.size() * 8,
                                   cudaMemcpyHostToDevice, stream_));
    std::vector<uint16_t> symbol_costs(kProbScale + 1, 0);
    for (uint32_t f = 1; f <= kProbScale; ++f) symbol_costs[f] = uint16_t(detail::symbol_cost(f));
    CUDADIFF_CHECK(cudaMemcpyAsync(w + off_symbol_costs, symbol_costs.data(),
                                   symbol_costs.size() * 2, cudaMemcpyHostToDevice, stream_));
    std::vector<uint32_t> reciprocal(kProbScale + 1, 0);
    std::vector<uint8_t> shift(kProbScale + 1, 0);
    for (uint32_t f = 1; f <= kProbScale; ++f) {
      int l = 0;
      while ((1u << l) < f) ++l;
      shift[f] = uint8_t(31 + l);
      reciprocal[f] = uint32_t(((uint64_t(1) << shift[f]) + f - 1) / f);
    }
    CUDADIFF_CHECK(cudaMemcpyAsync(w + off_reciprocal, reciprocal.data(), reciprocal.size() * 4,
                                   cudaMemcpyHostToDevice, stream_));
    CUDADIFF_CHECK(cudaMemcpyAsync(w + off_shift, shift.data(), shift.size(),
                                   cudaMemcpyHostToDevice, stream_));
    uint32_t first_cost[kTokens];
    for (int t = 0; t < kTokens; ++t)
      first_cost[t] = 256 + 2 * log2_q8(1 + (token_value(t, 0) + 1) / 2);
    CUDADIFF_CHECK(cudaMemcpyToSymbolAsync(c_first_cost, first_cost, sizeof(first_cost), 0,
                                           cudaMemcpyHostToDevice, stream_));
    timing_ = std::getenv("CODEC2_CUDA_TIMES") != nullptr;
    mapped_back_ = detail::env_switch_on("CUDADIFF_CODEC2_MAPPED_BACK");
    if (const char *late = std::getenv("CUDADIFF_CODEC2_DELAY_SYMBOLS")) {
      long long frame = -1, us = 0;
      if (std::sscanf(late, "%lld:%lld", &frame, &us) == 2 && frame >= 0 && us > 0) {
        late_frame_ = frame;
        late_ns_ = static_cast<unsigned long long>(us) * 1000ull;
      }
    }
    if (const char *fail = std::getenv("CUDADIFF_CODEC2_ENC_FAIL_FINISH"))
      fail_finish_ = std::atoll(fail);
    {
      int major = 0;
      CUDADIFF_CHECK(
          cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ctx.gpu_id()));
      // (CUDADIFF_CODEC2_PDL=0: ordinary launches, for comparisons)
      early_ = major >= 9 && detail::env_switch_on("CUDADIFF_CODEC2_PDL");
    }
    if (timing_) CUDADIFF_CHECK(cudaEventCreate(&epoch_));
    // (CUDADIFF_CODEC2_GRAPHS=0 launches every kernel itself, for the tests
    // and for comparisons; =require makes a graph that cannot be made or
    // launched an error instead: for the tests)
    const char *graphs = std::getenv("CUDADIFF_CODEC2_GRAPHS");
    graphs_ = graphs && std::strcmp(graphs, "0") == 0         ? Graphs::Off
              : graphs && std::strcmp(graphs, "require") == 0 ? Graphs::Required
                                                              : Graphs::On;
    input_ready_ = std::make_unique<StreamEvent>();
    // Each frame's work waits for the front_done, tiles_read and
    // samples_done of the slot before its own (launch_frame()), allocated
    // or not: a CUDA graph made one frame at a time stays right when frames
    // are in flight later.
    for (Slot &slot : slots_) {
      slot.front_done = std::make_unique<StreamEvent>();
      slot.tiles_read = std::make_unique<StreamEvent>();
      slot.samples_done = std::make_unique<StreamEvent>();
      slot.rec_done = std::make_unique<StreamEvent>();
    }
    alloc_slot(slots_[0]);  // the others on the first frames submitted beside another
    CUDADIFF_CHECK(cudaStreamSynchronize(stream_));
  }

  FrameStats encode(const FrameView &frame, int threshold, bool keyframe,
                    HostBytes &body) override {
    if (in_flight_ != 0)
      throw Error("codec2 CUDA encoder: encode() while frames are in flight (finish() them first)");
    submit(frame, threshold, keyframe);
    return finish(body);
  }

  // Queues every step of a frame on its slot's streams: the front part
  // (working values to tables, the new reference) after the previous
  // frame's front part less its tables (its tables before this one's), then
  // its entropy coding and the copy of what the host needs to write the
  // body (finish()); launch_frame() has the rest.
  void submit(const FrameView &frame, int threshold, bool keyframe) override {
    if (in_flight_ >= kMaxInFlight)
      throw Error("codec2 encoder: more than " + std::to_string(kMaxInFlight) +
                  " frames submitted and not finished");
    validate(frame, "codec2 encoder input");
    if (frame.format != format_ || frame.width != width_ || frame.height != height_)
      throw Error("codec2 encoder: frame does not match the encoder's format and size");
    if (threshold < 0 || threshold > 255) throw Error("codec2 encoder: threshold not in 0..255");
    if (!keyframe && !has_reference_) throw Error("codec2 encoder: a delta needs a previous frame");
    for (int pl = 0; pl < frame.n_planes(); ++pl)
      if (!is_device_memory(frame.data[pl]))
        throw Error("codec2 CUDA encoder: the frame must be in device memory");
    ctx_.activate();
    if (in_flight_ == 0) oldest_slot_ = 0;  // one frame at a time: slot 0 only
    const int si = (oldest_slot_ + in_flight_) % kMaxInFlight;
    Slot &slot = slots_[si];
    if (!slot.ready) alloc_slot(slot);
    slot.start = std::chrono::steady_clock::now();
    const cudaStream_t stream = static_cast<cudaStream_t>(slot.stream->handle());
    // The frame's count of changed bytes, which the slot's stream may clear
    // at once (payload_offsets_kernel writes the frame's other counts).
    CUDADIFF_CHECK(
        cudaMemsetAsync(&device_counts(slot)->changed, 0, sizeof(FrameCounts::changed), stream));
    // After the caller's work on the context's stream (the frame's upload)
    // and the frame before's reconstruction: its reference, which this one
    // reads, and its use of the scratch up to its mode decision, which this
    // one overwrites (launch_frame() waits for the rest of its front part
    // before the symbols, and for its tables before the histogram's sum).
    input_ready_->record(ctx_);
    input_ready_->make_wait(*slot.stream);
    if (in_flight_ > 0) slot_before(slot).rec_done->make_wait(*slot.stream);
    // The scratch set this frame writes (apply()) is the frame two before's,
    // whose symbols (and a keyframe's tile types) read it until its
    // samples_done. The frame before's rec_done does not imply that: its
    // front part waits only for that frame's reconstruction.
    if (in_flight_ > 1)
      slots_[(si + kMaxInFlight - 2) % kMaxInFlight].samples_done->make_wait(*slot.stream);

    Params p = p_;
    apply(slot, p);
    // The finer quantisers, with the dead zone in deltas (codec2_rules.h,
    // encoder_k(), keyframe_k()).
    p.k = frame_k(threshold, keyframe);
    p.step = step_div(p.k);
    p.index_digits = indexed_digits(p.k);
    p.threshold = threshold;
    p.keyframe = keyframe ? 1 : 0;
    p.model = model_buf_[place_];
    p.prev_model = model_buf_[(place_ + kMaxInFlight - 1) % kMaxInFlight];
    for (int pl = 0; pl < kMaxPlanes; ++pl) {
      p.frame[pl] = pl < frame.n_planes() ? frame.data[pl] : nullptr;
      p.pitch[pl] = pl < frame.n_planes() ? frame.stride[pl] : 0;
    }
    for (int l = 0; l < ls_.count; ++l)
      for (int c = 0; c < ls_.layer[l].channels; ++c) {
        p.ref[l][c] = recon_[place_][l][c];
        p.rec[l][c] = recon_[(place_ + 1) % kMaxInFlight][l][c];
      }
    if (lossless(p)) {
      // The reconstruction is the input, and its working values are the
      // input's (step 1, no dead zone: quant_index(), quant_diff() and
      // encoder_diff() are the identity, dequant_*() give the input's byte,
      // and a skipped block's bytes equal the reference's). So
      // prepare_kernel writes the input's channels into the reconstruction,
      // the symbols take their neighbours from the input's working values,
      // and reconstruct_kernel does not run (launch_frame()).
      for (int l = 0; l < ls_.count; ++l) {
        for (int c = 0; c < ls_.layer[l].channels; ++c) p.cur[l][c] = p.rec[l][c];
        p.wk_s[l] = p.in_s[l];
        p.wk_t[l] = p.in_t[l];
      }
    }
    slot.threshold = threshold;
    slot.k = p.k;
    slot.keyframe = keyframe;
    const dim3 grid(unsigned(ls_.blocks_x), unsigned(ls_.blocks_y));

    if (timing_ && !epoch_recorded_) {
      CUDADIFF_CHECK(cudaEventRecord(epoch_, stream));
      // The host's clock at the same instant (give or take the wake-up):
      // the timing waits once for the first frame's input.
      CUDADIFF_CHECK(cudaEventSynchronize(epoch_));
      host_epoch_ = std::chrono::steady_clock::now();
      epoch_recorded_ = true;
    }
    mark(slot, 0);
    for (int l = 0; l < ls_.count; ++l) {
      CODEC2_LAUNCH_NC(prepare_kernel, ls_.layer[l].channels, grid, kThreads, stream, p, l);
      CUDADIFF_CHECK_LAUNCH("codec2 prepare_kernel");
    }
    mark(slot, 1);
    // Only prepare_kernel reads the frame: the rest goes as one CUDA graph
    // where the runtime makes it (FrameGraphs), one launch instead of some
    // forty calls.
    try {
      // (the frame whose symbols are made late goes one kernel at a time)
      const bool late = submitted_++ == late_frame_;
      const FrameGraphs *graph = late ? nullptr : graph_for(slot, p, keyframe, stream);
      if (graph && graph->exec.launch(stream) != cudaSuccess) {
        cudaGetLastError();
        if (graphs_ == Graphs::Required)
          throw Error("codec2 CUDA encoder: a frame's CUDA graph failed to launch");
        graphs_ = Graphs::Off;  // from now on one by one
        frame_graphs_.clear();
        graph = nullptr;
      }
      if (!graph) launch_frame(slot, p, keyframe, stream, false, late);
      slot.graphed = graph != nullptr;
    } catch (...) {
      // Nothing of this frame's may run on beside the next one (the slot's
      // other streams join its main one only at their ends).
      wait_for_streams(slot);
      throw;
    }
    slot.submitted = std::chrono::steady_clock::now();
    // The next frame's reference and previous tables are this one's. The
    // reconstructions rotate through kMaxInFlight buffers: the next frame
    // writes the one that the frame kMaxInFlight before it wrote (its raw
    // tiles are gathered from it at its end) and the frame after that one
    // read in its front part. By the next frame's submission the first is
    // finished (at most kMaxInFlight in flight), and the next frame's front
    // part runs after the second's. The tables, which the front part alone
    // reads, rotate with them (two would do, but this way a frame's
    // buffers, and so its CUDA graph, follow from the slot and the
    // rotation's place).
    place_ = (place_ + 1) % kMaxInFlight;
    has_reference_ = true;
    in_flight_++;
  }

  // Waits for the oldest frame in flight; the header, the model and the
  // tile table on the host, the payloads brought back at once.
  FrameStats finish(HostBytes &body) override { return finish_frame(body, false); }
  // The payloads' copy is queued and not waited for: the caller packs the
  // body before while it crosses the bus (a 1080p frame of raw tiles: 6.2
  // MB, some 0.12 ms).
  FrameStats finish_async(HostBytes &body) override { return finish_frame(body, true); }
  void wait_body(const HostBytes &body) override {
    for (BodyInTransit &b : transit_)
      if (b.active && b.data == body.data()) {
        b.active = false;
        ctx_.activate();
        const cudaError_t e = cudaEventSynchronize(b.done);
        if (e != cudaSuccess)
          throw Error(std::string("codec2 CUDA encoder: a body's copy from the device failed: ") +
                      cudaGetErrorString(e));
      }
  }

  FrameStats finish_frame(HostBytes &body, bool async) {
    if (in_flight_ == 0) throw Error("codec2 encoder: no frame submitted to finish");
    Slot &slot = slots_[oldest_slot_];
    oldest_slot_ = (oldest_slot_ + 1) % kMaxInFlight;
    in_flight_--;
    try {
      ctx_.activate();
      // (a body still on its way must not be written twice at once)
      wait_body(body);
      if (finishes_++ == fail_finish_)
        throw Error("codec2 encoder: finish() failed on purpose (CUDADIFF_CODEC2_ENC_FAIL_FINISH)");
      return collect(slot, body, async);
    } catch (...) {
      // No decoder will see this frame, which the frames after it were
      // coded against: only a keyframe may follow. Nothing of it may still
      // run once finish() has thrown (the caller frees its input).
      wait_for_streams(slot);
      has_reference_ = false;
      throw;
    }
  }

  void read_reference(HostBytes &out) override {
    if (in_flight_ != 0)
      throw Error("codec2 CUDA encoder: read_reference() while frames are in flight");
    ctx_.activate();
    std::vector<uint8_t> planes[kMaxLayers][kMaxComps];
    download_planes(recon_[place_], planes);
    out.resize(frame_size_packed(format_, width_, height_));
    const FrameView v = packed_view(format_, width_, height_, out.data());
    for (int l = 0; l < ls_.count; ++l) {
      const Layer &ly = ls_.layer[l];
      for (int c = 0; c < ly.channels; ++c)
        for (int y = 0; y < ly.height; ++y) {
          uint8_t *row = v.row(ly.plane[c], y) + ly.offset[c];
          const uint8_t *src = planes[l][c].data() + size_t(y) * ly.width;
          for (int x = 0; x < ly.width; ++x) row[size_t(x) * ly.step[c]] = src[x];
        }
    }
  }

 private:
  struct Slot;
  // A frame's work after prepare_kernel (launch_frame()) as a CUDA graph,
  // captured with a frame's parameters less its planes. The parameters
  // change with the slot, the reconstructions' and the tables' buffers
  // (which rotate together through kMaxInFlight places, submit()), the
  // threshold and the kind of frame: a stream of one threshold uses at most
  // 32 graphs (each of the four slots with each of the rotation's four
  // places, keyframes and deltas; one frame at a time, slot 0 only: 8).
  struct FrameGraphs {
    Params params;  // frame[] and pitch[] zero
    const Slot *slot = nullptr;
    GraphExec exec;
    uint64_t used = 0;  // graph_clock_ when last used
  };
  static constexpr size_t kMaxGraphs = 2 * kMaxInFlight * kMaxInFlight;
  enum class Graphs { Off, On, Required };
  // The graph for a frame with these parameters, made at its first use (the
  // least recently used gives way beyond kMaxGraphs). Nullptr when graphs
  // are off or the runtime cannot make them (from then on the kernels are
  // launched one by one; an error where they are required).
  const FrameGraphs *graph_for(Slot &slot, const Params &p, bool keyframe, cudaStream_t stream) {
    if (graphs_ == Graphs::Off) return nullptr;
    Params key = p;
    for (int pl = 0; pl < kMaxPlanes; ++pl) {
      key.frame[pl] = nullptr;
      key.pitch[pl] = 0;
    }
    ++graph_clock_;
    for (const std::unique_ptr<FrameGraphs> &g : frame_graphs_)
      if (g->slot == &slot && std::memcmp(&g->params, &key, sizeof key) == 0) {
        g->used = graph_clock_;
        return g.get();
      }
    auto g = std::make_unique<FrameGraphs>();
    g->params = key;
    g->slot = &slot;
    g->used = graph_clock_;
    if (!g->exec.capture(stream, [&] { launch_frame(slot, key, keyframe, stream, true); })) {
      if (graphs_ == Graphs::Required)
        throw Error("codec2 CUDA encoder: the runtime could not make a frame's CUDA graph");
      graphs_ = Graphs::Off;
      frame_graphs_.clear();
      return nullptr;
    }
    if (frame_graphs_.size() >= kMaxGraphs)
      frame_graphs_.erase(std::min_element(
          frame_graphs_.begin(), frame_graphs_.end(),
          [](const std::unique_ptr<FrameGraphs> &a, const std::unique_ptr<FrameGraphs> &b) {
            return a->used < b->used;
          }));
    frame_graphs_.push_back(std::move(g));
    return frame_graphs_.back().get();
  }

  // Makes `stream` wait for `event`, recorded outside this frame's work: in
  // a stream capture as the graph's own wait for an event outside it, which
  // waits for the event's last record queued before the graph's launch (as
  // cudaStreamWaitEvent does when it is called), also one that another
  // graph queued.
  static void wait_seen(const StreamEvent &event, cudaStream_t stream, bool in_graph) {
    CUDADIFF_CHECK(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(event.handle()),
                                       in_graph ? cudaEventWaitExternal : 0));
  }
  // The slot of the frame submitted before the one in `slot` while frames
  // are in flight (slots are taken in turn).
  Slot &slot_before(const Slot &slot) {
    return slots_[(&slot - slots_ + kMaxInFlight - 1) % kMaxInFlight];
  }
  // Threshold 0: every reconstructed byte is the input's (submit()).
  static bool lossless(const Params &p) { return p.threshold == 0 && p.k == 0; }
  // Records `event` on `stream` where the host and other streams see it:
  // in a stream capture as the graph's own record of an event outside it.
  static void record_seen(const StreamEvent &event, cudaStream_t stream, bool in_graph) {
    record_seen(static_cast<cudaEvent_t>(event.handle()), stream, in_graph);
  }
  static void record_seen(cudaEvent_t e, cudaStream_t stream, bool in_graph) {
    if (in_graph)
      CUDADIFF_CHECK(cudaEventRecordWithFlags(e, stream, cudaEventRecordExternal));
    else
      CUDADIFF_CHECK(cudaEventRecord(e, stream));
  }
  // A frame's work after the working values, on the slot's streams
  // (`stream` its main one, which the side and aux streams join at the
  // end, the lanes stream through the side stream). On `stream` the modes
  // and the reconstruction (at threshold 0 prepare_kernel's, submit()):
  // then rec_done (a keyframe's after its tile types), and the next frame's
  // front part may start; after the frame before's samples_done the
  // symbols and the tile types, and after the frame before's tables the
  // histogram: then samples_done. On the lanes stream (default priority:
  // beside the next frame's front part, which sets the rate of frames in
  // flight; at the high priority the encoder core took up to 3 % longer per
  // frame with four in flight on the clips scaled to 1080p) the coded
  // tiles' bounds and lanes (tiles_read: they read the tiles' histograms
  // and counts, which the next frame clears after its reconstruction), then the
  // schedule and the lanes' checksum maps (they read only the frame's own
  // buffers). On the side stream (high priority) the tables (front_done:
  // the next frame's histogram and tables may follow), then, after the
  // lanes stream, the entropy coding and the copy back of what finish()
  // reads first; on the aux stream the tables' choices back to the host
  // (tables_ready). So a frame's small kernels do not wait behind the next
  // frame's front part, whose thread blocks fill the device beside them,
  // and its tables do not wait for its checksums and schedule. Reads
  // nothing of p.frame.
  // `in_graph`: queued in a stream capture (graph_for()). `late`: the
  // symbols start late (CUDADIFF_CODEC2_DELAY_SYMBOLS).
  void launch_frame(Slot &slot, const Params &p, bool keyframe, cudaStream_t stream, bool in_graph,
                    bool late = false) {
    const dim3 grid(unsigned(ls_.blocks_x), unsigned(ls_.blocks_y));
    const int nb = int(n_blocks_);
    const size_t hist_count = size_t(p.dist_count) * kTokens;
    const size_t n_tiles = back_->tiles().size();
    if (keyframe) {
      CUDADIFF_CHECK(cudaMemsetAsync(p.modes, kSpatial, n_blocks_, stream));
    } else {
      // One layer: each round's kernel takes the blocks' choices itself,
      // and round 1's counts the proxy symbols of its choice at once (no
      // sums over layers, no decide_kernel, no proxy_hist_kernel).
      const bool layers = ls_.count > 1;
      // (the proxy histograms are zero: id_cost_kernel clears them)
      for (int round = 0; round < 2; ++round) {
        if (layers)
          CUDADIFF_CHECK(
              cudaMemsetAsync(p.cost, 0, n_blocks_ * kModes * sizeof(unsigned long long), stream));
        for (int l = 0; l < ls_.count; ++l) {
          if (round == 0)
            CODEC2_LAUNCH_NC(round1_kernel, ls_.layer[l].channels, grid, kThreads, stream, p, l);
          else
            CODEC2_LAUNCH_NC_AFTER(round2_kernel, ls_.layer[l].channels, grid, kThreads, stream,
                                   early_ && !layers, p, l);
          CUDADIFF_CHECK_LAUNCH("codec2 round kernel");
        }
        if (layers) {
          decide_kernel<<<(nb + 255) / 256, 256, 0, stream>>>(p, nb);
          CUDADIFF_CHECK_LAUNCH("codec2 decide_kernel");
        }
        if (round == 1) break;
        if (layers)
          for (int l = 0; l < ls_.count; ++l) {
            CODEC2_LAUNCH_NC(proxy_hist_kernel, ls_.layer[l].channels, grid, kThreads, stream, p,
                             l);
            CUDADIFF_CHECK_LAUNCH("codec2 proxy_hist_kernel");
          }
        launch_after(id_cost_kernel, dim3((p.dist_count + 7) / 8), dim3(256), stream, early_, p);
        CUDADIFF_CHECK_LAUNCH("codec2 id_cost_kernel");
      }
      if (p.k > 0) {
        launch_after(index_tiles_kernel, dim3(unsigned(n_tiles)), dim3(kIndexThreads), stream,
                     early_, p);
        CUDADIFF_CHECK_LAUNCH("codec2 index_tiles_kernel");
      }
    }
    mark(slot, 2, in_graph);
    for (int l = 0; l < ls_.count && !lossless(p); ++l) {
      CODEC2_LAUNCH_NC(reconstruct_kernel, ls_.layer[l].channels, grid, kThreads, stream, p, l);
      CUDADIFF_CHECK_LAUNCH("codec2 reconstruct_kernel");
    }
    // A delta's reconstruction is final here (a keyframe's after its tile
    // types, which reconstruct its indexed tiles): the next frame's front
    // part may start.
    if (!keyframe) record_seen(*slot.rec_done, stream, in_graph);
    // The tiles' histograms and counts are the frame before's until its
    // tile_lanes_kernel has read them, and until its histogram's sum; its
    // symbols and tile types are done then too.
    wait_seen(*slot_before(slot).tiles_read, stream, in_graph);
    wait_seen(*slot_before(slot).samples_done, stream, in_graph);
    if (late) {
      delay_kernel<<<1, 1, 0, stream>>>(late_ns_);
      CUDADIFF_CHECK_LAUNCH("codec2 delay_kernel");
    }
    // (the tiles' histograms, then their counts: tile_coded, tile_extra)
    CUDADIFF_CHECK(cudaMemsetAsync(p.tile_hist, 0,
                                   size_t(reinterpret_cast<uint8_t *>(p.tile_extra + n_tiles) -
                                          reinterpret_cast<uint8_t *>(p.tile_hist)),
                                   stream));
    for (int l = 0; l < ls_.count; ++l) {
      CODEC2_LAUNCH_NC_AFTER(symbols_kernel, ls_.layer[l].channels, grid, kThreads, stream,
                             early_ && l > 0, p, l);
      CUDADIFF_CHECK_LAUNCH("codec2 symbols_kernel");
    }
    // Tile types and the histogram of the coded tiles; the coded tiles'
    // bounds and lanes on the lanes stream.
    const unsigned hist_grid = unsigned((hist_count * kHistParts + 255) / 256);
    launch_after(tile_type_kernel, dim3(unsigned(n_tiles)), dim3(kTileTypeThreads), stream, early_,
                 p);
    CUDADIFF_CHECK_LAUNCH("codec2 tile_type_kernel");
    if (keyframe) record_seen(*slot.rec_done, stream, in_graph);
    const cudaStream_t side = static_cast<cudaStream_t>(slot.side->handle());
    const cudaStream_t aux = static_cast<cudaStream_t>(slot.aux->handle());
    const cudaStream_t lanes = static_cast<cudaStream_t>(slot.lanes->handle());
    slot.to_lanes->record(*slot.stream);
    slot.to_lanes->make_wait(*slot.lanes);
    // The step marks start at zero (schedule_kernel sets the marked ones).
    CUDADIFF_CHECK(cudaMemsetAsync(p.step_marks, 0, marks_bytes_, lanes));
    tile_lanes_kernel<<<unsigned(n_tiles), kTileTypeThreads, size_t(p.walk_words) * 4, lanes>>>(p);
    CUDADIFF_CHECK_LAUNCH("codec2 tile_lanes_kernel");
    record_seen(*slot.tiles_read, lanes, in_graph);
    schedule_kernel<<<dim3(unsigned(n_tiles), unsigned(std::min<size_t>(p.lane_chunks, 65535))),
                      kScheduleThreads, 0, lanes>>>(p);
    CUDADIFF_CHECK_LAUNCH("codec2 schedule_kernel");
    slot.from_lanes->record(*slot.lanes);
    // The frame histogram and the tables after the frame before's tables,
    // which read the histogram and made this frame's previous tables (when
    // no frame is in flight, that frame has finished, or its slot's event
    // was never recorded: nothing to wait for).
    wait_seen(*slot_before(slot).front_done, stream, in_graph);
    sum_hist_kernel<<<hist_grid, 256, 0, stream>>>(p);
    CUDADIFF_CHECK_LAUNCH("codec2 sum_hist_kernel");
    // The next frame's symbols may follow: the tiles' histograms and counts
    // (until tiles_read) and the frame histogram's part of the scratch are
    // free.
    record_seen(*slot.samples_done, stream, in_graph);
    // The rest on the side stream, whose high priority keeps the next
    // frame's front part (on its slot's stream) from holding it up: the
    // thread blocks of this frame's small kernels start first.
    slot.to_side->record(*slot.stream);
    slot.to_side->make_wait(*slot.side);
    mark(slot, 3, in_graph);
    // The tables, which end the front part (the next frame's histogram and
    // tables wait for them).
    const unsigned table_grid = unsigned((p.dist_count + kTableWarps - 1) / kTableWarps);
    tables_fresh_kernel<<<table_grid, 32 * kTableWarps, 0, side>>>(p);
    CUDADIFF_CHECK_LAUNCH("codec2 tables_fresh_kernel");
    tables_copy_kernel<<<table_grid, 32 * kTableWarps, 0, side>>>(p);
    CUDADIFF_CHECK_LAUNCH("codec2 tables_copy_kernel");
    tables_choose_kernel<<<1, 32 * kChooseWarps, size_t(p.dist_count) * kChooseSharedPerDist,
                           side>>>(p);
    CUDADIFF_CHECK_LAUNCH("codec2 tables_choose_kernel");
    mark(slot, 4, in_graph);
    record_seen(*slot.front_done, side, in_graph);
    // The tables' choices go back beside the entropy coding: finish() writes
    // the model section while the GPU codes the tiles.
    slot.to_aux->record(*slot.side);
    slot.to_aux->make_wait(*slot.aux);
    back_to_host(aux, slot.h_chosen, slot.d_chosen, p.chosen);
    record_seen(*slot.tables_ready, aux, in_graph);
    slot.from_aux->record(*slot.aux);
    slot.from_lanes->make_wait(*slot.side);  // the lanes' checksums and schedule
    mark(slot, 5, in_graph);
    const unsigned tile_grid = (unsigned(n_tiles) + 127) / 128;
    // rANS per tile; tiles no smaller than their bytes are stored raw.
    if (rans_batch_ == kRansBatch)
      rans_lanes_kernel<kRansBatch><<<unsigned(n_tiles), kRansThreads, rans_shared_, side>>>(p);
    else
      rans_lanes_kernel<1><<<unsigned(n_tiles), kRansThreads, rans_shared_, side>>>(p);
    CUDADIFF_CHECK_LAUNCH("codec2 rans_lanes_kernel");
    mark(slot, 6, in_graph);
    raw_check_kernel<<<tile_grid, 128, 0, side>>>(p);
    CUDADIFF_CHECK_LAUNCH("codec2 raw_check_kernel");
    mark(slot, 7, in_graph);
    // The payloads in body order, gathered on the device.
    payload_offsets_kernel<<<1, kScanThreads, 0, side>>>(p);
    CUDADIFF_CHECK_LAUNCH("codec2 payload_offsets_kernel");
    gather_kernel<<<dim3(unsigned(n_tiles), kGatherParts), 256, 0, side>>>(p);
    CUDADIFF_CHECK_LAUNCH("codec2 gather_kernel");
    mark(slot, 8, in_graph);
    back_to_host(side, slot.h_out, slot.d_out, p.modes);
    // Both join the slot's stream, which finish() waits for.
    slot.from_side->record(*slot.side);
    slot.from_side->make_wait(*slot.stream);
    slot.from_aux->make_wait(*slot.stream);
  }

  // finish() of the frame in `slot`. The model section is written from the
  // tables' choices while the GPU still codes the tiles. Then, when no
  // other frame is in flight and the body is host memory mapped for the
  // device (pinned), the device writes the payloads into it behind the
  // header, the model section and the tile table (whose size it counts),
  // and the frame's end brings all back at once: one wait for the frame
  // instead of a second one for the payloads' copy.
  // Else the copy engine copies them once their size is known (beside the
  // next frame's kernels, whose thread blocks the writes over the bus would
  // hold up).
  // `async`: the payloads' copy (when not written by the device) is not
  // waited for (finish_async()).
  FrameStats collect(Slot &slot, HostBytes &body, bool async) {
    using clock = std::chrono::steady_clock;
    const auto t_finish = clock::now();
    slot.tables_ready->synchronize();
    const auto t_chosen = clock::now();
    const size_t n_tiles = back_->tiles().size();
    const cudaStream_t stream = static_cast<cudaStream_t>(slot.stream->handle());
    const SlotLayout &o = slot_layout_;
    size_t head = 0;
    auto t_tables = t_chosen;
    uint8_t *device_body = nullptr, *host_body = nullptr;
    try {
      back_->set_tables(slot.keyframe, reinterpret_cast<const ChosenTable *>(slot.h_chosen.data()));
      t_tables = clock::now();
      head = back_->head_bytes();
      if (in_flight_ == 0) {
        // A tile table's entry takes at most 10 bytes (64 bits in groups of 7).
        body.reserve(head + n_tiles * 10 + payload_capacity_);
        device_body = mapped_for_device(body);  // null: not mapped, copied below
      }
      if (device_body) {
        host_body = body.data();
        payloads_to_host_kernel<<<kToHostBlocks, 256, 0, stream>>>(
            slot.work.data() + o.payload, &device_counts(slot)->payloads, device_body + head);
        CUDADIFF_CHECK_LAUNCH("codec2 payloads_to_host_kernel");
      }
      slot.stream->synchronize();
    } catch (...) {
      // Nothing of this frame's may still run (nor write into `body`) once
      // finish() has thrown.
      ::cudadiff::detail::ignore_cuda(cudaStreamSynchronize(stream));
      throw;
    }
    const auto t_done = clock::now();
    const auto back = [&](size_t offset) { return slot.h_out.data() + (offset - o.modes); };
    // (an indexed tile's blocks count as spatial, as the CPU encoder's)
    uint8_t *modes = back(o.modes);
    for (size_t b = 0; b < n_blocks_; ++b)
      if (modes[b] == kModeIndexed) modes[b] = kSpatial;
    const int *types = reinterpret_cast<const int *>(back(o.type));
    const uint32_t *sizes = reinterpret_cast<const uint32_t *>(back(o.size));
    const int *lanes = reinterpret_cast<const int *>(back(o.lanes));
    const uint32_t *raw_bound = reinterpret_cast<const uint32_t *>(back(o.raw));
    FrameCounts counts;
    std::memcpy(&counts, back(o.changed), sizeof counts);
    const std::vector<Tile> &tiles = back_->tiles();
    std::vector<size_t> size_of(n_tiles);
    size_t payload = 0;
    const int digits = indexed_digits(slot.k);
    for (size_t t = 0; t < n_tiles; ++t) {
      size_of[t] = types[t] == 1   ? sizes[t]
                   : types[t] == 2 ? tiles[t].raw_bytes
                   : types[t] == 3 ? size_t(indexed_bytes_of(tiles[t].raw_bytes, digits))
                                   : 0;
      payload += size_of[t];
    }
    if (counts.payloads != payload)
      throw Error("codec2 CUDA encoder: the payloads' size disagrees with the tile sizes");
    FrameStats st = back_->assemble(
        slot.keyframe, slot.k, modes, types, lanes, size_of.data(),
        [&](uint8_t *dst) {
          if (device_body) {  // already there, if the tile tables agree and nothing moved
            if (body.data() != host_body || dst != host_body + head + counts.table)
              throw Error("codec2 CUDA encoder: the tile table's size disagrees with the device's");
            return;
          }
          if (payload) copy_out(*slot.stream, dst, slot.work.data() + o.payload, payload);
          if (async && payload) {
            try {
              in_transit(body.data(), *slot.stream);
            } catch (...) {
              // (no record of it: the copy must not land after finish_async() throws)
              ::cudadiff::detail::ignore_cuda(
                  cudaStreamSynchronize(static_cast<cudaStream_t>(slot.stream->handle())));
              throw;
            }
          } else {
            slot.stream->synchronize();
          }
        },
        body);
    st.threshold = slot.threshold;
    if (!slot.keyframe) st.changed_bytes = counts.changed;
    st.raw_by_bound =
        uint32_t(std::count_if(raw_bound, raw_bound + n_tiles, [](uint32_t r) { return r != 0; }));
    if (timing_) {  // development aid: where the time goes
      const auto t_end = clock::now();
      float ms[kEvents - 1];
      for (int i = 0; i + 1 < kEvents; ++i)
        CUDADIFF_CHECK(cudaEventElapsedTime(&ms[i], slot.events[i], slot.events[i + 1]));
      std::fprintf(
          stderr,
          "codec2 cuda k=%d device: prepare %.3f, modes %.3f, reconstruction, symbols, tile "
          "types, histogram (after the frame before's tables) %.3f, tables %.3f, to the rANS "
          "pass (after the lanes' checksums and schedule) %.3f, rANS %.3f, raw check %.3f, "
          "payloads %.3f ms\n",
          slot.threshold, ms[0], ms[1], ms[2], ms[3], ms[4], ms[5], ms[6], ms[7]);
      float at[kEvents];
      for (int i = 0; i < kEvents; ++i)
        CUDADIFF_CHECK(cudaEventElapsedTime(&at[i], epoch_, slot.events[i]));
      std::fprintf(stderr,
                   "codec2 cuda k=%d timeline (ms since the first frame's start): prepare %.3f, "
                   "modes %.3f, reconstruction %.3f, tables %.3f, front done %.3f, rANS %.3f, "
                   "raw check %.3f, payloads %.3f, end %.3f\n",
                   slot.threshold, at[0], at[1], at[2], at[3], at[4], at[5], at[6], at[7], at[8]);
      using ms_t = std::chrono::duration<double, std::milli>;
      std::fprintf(stderr,
                   "codec2 cuda k=%d host, from submit(): submitted %.3f, tables' choices back "
                   "%.3f, model section written %.3f, frame done %.3f, body %.3f ms (%zu payload "
                   "bytes%s; %s; %zu of %zu tiles raw by their bound, not coded)\n",
                   slot.threshold, ms_t(slot.submitted - slot.start).count(),
                   ms_t(t_chosen - slot.start).count(), ms_t(t_tables - slot.start).count(),
                   ms_t(t_done - slot.start).count(), ms_t(t_end - slot.start).count(), payload,
                   device_body ? ", written by the device" : ", copied",
                   slot.graphed ? "as a CUDA graph" : "kernels launched one by one",
                   size_t(st.raw_by_bound), n_tiles);
      // The same on the device's clock (the timeline above): where the
      // host's part of a frame lies beside the device's.
      const auto since = [&](clock::time_point t) { return ms_t(t - host_epoch_).count(); };
      std::fprintf(stderr,
                   "codec2 cuda k=%d host timeline (ms since the first frame's start): submit "
                   "%.3f, submitted %.3f, finish %.3f, tables' choices back %.3f, model section "
                   "written %.3f, frame done %.3f, body %.3f\n",
                   slot.threshold, since(slot.start), since(slot.submitted), since(t_finish),
                   since(t_chosen), since(t_tables), since(t_done), since(t_end));
    }
    return st;
  }

  static constexpr int kEvents = 9;
  // Where each of a slot's buffers lies in its allocation.
  struct SlotLayout {
    size_t modes, symbols, type, lanes, size, raw, freq_cum, streams, payload_off, payload,
        lane_maps, marks, codes, changed, chosen, place, bytes;
  };
  // A frame in flight: the device buffers its entropy coding uses while the
  // next frame's front part runs (SlotLayout), its stream and events, the
  // pinned staging for what comes back, and what finish() needs.
  struct Slot {
    DeviceBuffer work;               // its buffers, where slot_layout_ says
    std::unique_ptr<Stream> stream;  // the front part to the histogram; finish() waits for it
    std::unique_ptr<Stream> aux;     // the tables' choices back to the host
    // High priority: the tables and the entropy coding (launch_frame()).
    std::unique_ptr<Stream> side;
    std::unique_ptr<Stream> lanes;  // the coded tiles' bounds and lanes, the schedule
    // The front part's end (its tables) and the end of its use of the
    // shared scratch but the tables' (samples_done: the next frame's
    // symbols may follow, launch_frame(); so may the front part of the
    // frame two after, which writes the same scratch set, submit()).
    // tiles_read: its tile_lanes_kernel has read the tiles' histograms and
    // counts (the next frame clears them after its reconstruction).
    // rec_done: its reconstruction is final and its mode decision has read
    // the scratch (the next frame's front part may start, submit(); the
    // working values are in the other set, Scratch).
    std::unique_ptr<StreamEvent> front_done, samples_done, tables_ready, tiles_read, rec_done;
    std::unique_ptr<StreamEvent> to_side, from_side, to_aux, from_aux, to_lanes,
        from_lanes;                    // forks and joins
    cudaEvent_t events[kEvents] = {};  // CODEC2_CUDA_TIMES: the phases on the device
    HostBytes h_out;  // the slot's bytes from modes to the counts' end (SlotLayout)
    HostBytes h_chosen;
    // Both as the device sees them (mapped), or null (back_to_host()).
    uint8_t *d_out = nullptr, *d_chosen = nullptr;
    int threshold = 0, k = 0;
    bool keyframe = false;
    bool ready = false;    // alloc_slot() completed
    bool graphed = false;  // its frame ran as a CUDA graph (CODEC2_CUDA_TIMES says so)
    std::chrono::steady_clock::time_point start, submitted;
    ~Slot() {
      for (cudaEvent_t e : events)
        if (e) cudaEventDestroy(e);
    }
  };
  // A frame's counts on the device (in its slot's buffers).
  FrameCounts *device_counts(const Slot &slot) const {
    return reinterpret_cast<FrameCounts *>(slot.work.data() + slot_layout_.changed);
  }
  // A frame's own buffers in the kernels' parameters.
  void apply(const Slot &slot, Params &p) const {
    const SlotLayout &o = slot_layout_;
    uint8_t *w = slot.work.data();
    p.modes = w + o.modes;
    p.symbols = reinterpret_cast<uint32_t *>(w + o.symbols);
    p.tile_type = reinterpret_cast<int *>(w + o.type);
    p.tile_lanes = reinterpret_cast<int *>(w + o.lanes);
    p.tile_size = reinterpret_cast<uint32_t *>(w + o.size);
    p.tile_raw = reinterpret_cast<uint32_t *>(w + o.raw);
    p.freq_cum = reinterpret_cast<uint32_t *>(w + o.freq_cum);
    p.streams = w + o.streams;
    p.payload_off = reinterpret_cast<unsigned long long *>(w + o.payload_off);
    p.payload = w + o.payload;
    p.lane_maps = reinterpret_cast<uint2 *>(w + o.lane_maps);
    p.step_marks = reinterpret_cast<uint32_t *>(w + o.marks);
    p.place_ring = rans_batch_ == 1 ? w + o.place : nullptr;
    p.codes = reinterpret_cast<uint32_t *>(w + o.codes);
    p.changed = &device_counts(slot)->changed;
    p.payload_total = &device_counts(slot)->payloads;
    p.chosen = reinterpret_cast<ChosenTable *>(w + o.chosen);
    const Scratch &sc = scratch_[(&slot - slots_) % 2];
    for (int l = 0; l < kMaxLayers; ++l) {
      for (int c = 0; c < kMaxComps; ++c) p.cur[l][c] = sc.cur[l][c];
      p.in_s[l] = sc.in_s[l];
      p.in_t[l] = sc.in_t[l];
      p.wk_s[l] = sc.wk_s[l];
      p.wk_t[l] = sc.wk_t[l];
      p.rclass[l] = sc.rclass[l];
    }
  }
  // Waits for the work queued on each of the slot's streams (those it has:
  // a slot not yet allocated has none); errors are left to the next call.
  static void wait_for_streams(const Slot &slot) {
    for (const Stream *st : {slot.stream.get(), slot.side.get(), slot.aux.get(), slot.lanes.get()})
      if (st)
        ::cudadiff::detail::ignore_cuda(
            cudaStreamSynchronize(static_cast<cudaStream_t>(st->handle())));
  }
  void alloc_slot(Slot &slot) {
    const SlotLayout &o = slot_layout_;
    slot.work = DeviceBuffer(o.bytes);
    uint8_t *w = slot.work.data();
    slot.stream = std::make_unique<Stream>(ctx_.gpu_id());
    slot.aux = std::make_unique<Stream>(ctx_.gpu_id());
    // A frame's tables and entropy coding before the next frame's front
    // part: high priority; its tiles' lanes and schedule beside it
    // (launch_frame()).
    slot.side = std::make_unique<Stream>(ctx_.gpu_id(), false, true);
    slot.lanes = std::make_unique<Stream>(ctx_.gpu_id());
    slot.tables_ready = std::make_unique<StreamEvent>();
    for (auto *e : {&slot.to_side, &slot.from_side, &slot.to_aux, &slot.from_aux, &slot.to_lanes,
                    &slot.from_lanes})
      *e = std::make_unique<StreamEvent>();
    if (timing_)
      for (cudaEvent_t &e : slot.events)
        if (!e) CUDADIFF_CHECK(cudaEventCreate(&e));
    slot.h_out.resize(o.changed + sizeof(FrameCounts) - o.modes);
    slot.h_chosen.resize(size_t(p_.dist_count) * sizeof(ChosenTable));
    slot.d_out = mapped_back_ ? mapped_for_device(slot.h_out) : nullptr;
    slot.d_chosen = mapped_back_ ? mapped_for_device(slot.h_chosen) : nullptr;
    // Every buffer a kernel may read is defined (these keep a sanitizer's
    // view clean).
    CUDADIFF_CHECK(
        cudaMemsetAsync(w, 0, o.bytes, static_cast<cudaStream_t>(slot.stream->handle())));
    slot.stream->synchronize();
    slot.ready = true;
  }
  // `b`'s data() as the device sees it, or null where it is not mapped for
  // this device (the pointer is the allocation's own start's, as
  // cudaHostAlloc returned it, plus the headroom data() lies after).
  static uint8_t *mapped_for_device(HostBytes &b) {
    void *d = nullptr;
    if (!b.pinned() || cudaHostGetDevicePointer(&d, b.base(), 0) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return static_cast<uint8_t *>(d) + b.headroom();
  }
  // A body (its data()) whose payloads' copy was queued last on `stream`
  // (finish_async()): an event marks the copy's end. Beyond kMaxInFlight
  // such bodies the oldest is waited for.
  struct BodyInTransit {
    const uint8_t *data = nullptr;  // the body's data()
    cudaEvent_t done = nullptr;
    uint64_t order = 0;
    bool active = false;
  };
  void in_transit(const uint8_t *data, const Stream &stream) {
    BodyInTransit *slot = nullptr;
    for (BodyInTransit &b : transit_)
      if (!b.active && !slot) slot = &b;
    if (!slot) {
      slot = &transit_[0];
      for (BodyInTransit &b : transit_)
        if (b.order < slot->order) slot = &b;
      // (on failure the record stays, and its wait_body() fails too)
      CUDADIFF_CHECK(cudaEventSynchronize(slot->done));
      slot->active = false;
    }
    if (!slot->done) CUDADIFF_CHECK(cudaEventCreateWithFlags(&slot->done, cudaEventDisableTiming));
    CUDADIFF_CHECK(cudaEventRecord(slot->done, static_cast<cudaStream_t>(stream.handle())));
    slot->data = data;
    slot->order = ++transit_clock_;
    slot->active = true;
  }
  // What finish() reads of a frame, from the device into `host` (pinned):
  // written by a kernel into the host memory mapped for the device at
  // `mapped` where there is one. A copy instead would wait in the copy
  // engine's queue behind the copies queued before it, which wait for
  // their own frames: the copies of the frames in flight after this one,
  // and so would the payloads' copy that follows it in finish().
  void back_to_host(cudaStream_t stream, HostBytes &host, uint8_t *mapped, const void *device) {
    if (mapped) {
      const size_t chunks = host.size() / 16;  // store_to_host()'s 16 bytes per thread
      to_host_kernel<<<unsigned(std::max<size_t>(1, std::min<size_t>((chunks + 255) / 256, 64))),
                       256, 0, stream>>>(static_cast<const uint8_t *>(device), mapped, host.size());
      CUDADIFF_CHECK_LAUNCH("codec2 to_host_kernel");
    } else {
      CUDADIFF_CHECK(
          cudaMemcpyAsync(host.data(), device, host.size(), cudaMemcpyDeviceToHost, stream));
    }
  }
  void copy_out(const Stream &stream, void *host, const void *device, size_t n) {
    CUDADIFF_CHECK(cudaMemcpyAsync(host, device, n, cudaMemcpyDeviceToHost,
                                   static_cast<cudaStream_t>(stream.handle())));
  }
  void download_planes(uint8_t *const (&src)[kMaxLayers][kMaxComps],
                       std::vector<uint8_t> (&dst)[kMaxLayers][kMaxComps]) {
    for (int l = 0; l < ls_.count; ++l)
      for (int c = 0; c < ls_.layer[l].channels; ++c) {
        const size_t n = size_t(ls_.layer[l].width) * ls_.layer[l].height;
        dst[l][c].resize(n);
        CUDADIFF_CHECK(
            cudaMemcpyAsync(dst[l][c].data(), src[l][c], n, cudaMemcpyDeviceToHost, stream_));
      }
    CUDADIFF_CHECK(cudaStreamSynchronize(stream_));
  }
  // CODEC2_CUDA_TIMES: phase i's mark (0..2 on the slot's stream, the rest
  // on its side stream); in a stream capture as the graph's own record of
  // the event, so that the timing sees the frame as it runs in its graph.
  void mark(Slot &slot, int i, bool in_graph = false) {
    if (timing_)
      record_seen(slot.events[i],
                  static_cast<cudaStream_t>((i < 3 ? slot.stream : slot.side)->handle()), in_graph);
  }

  const Context &ctx_;
  cudaStream_t stream_ = nullptr;  // the context's: the caller's work, read_reference()
  std::unique_ptr<detail::EncoderBackEnd> back_;
  LayerSet ls_;
  size_t n_blocks_ = 0;
  Params p_;  // the shared buffers; a frame's own come from its slot
  SlotLayout slot_layout_;
  Slot slots_[kMaxInFlight];
  int oldest_slot_ = 0;                       // the slot of the oldest frame in flight
  std::unique_ptr<StreamEvent> input_ready_;  // the caller's work before a frame
  DeviceBuffer planes_, work_;
  // The reconstructions and the tables, one of each per frame in flight,
  // which rotate together (submit()): recon_[place_] is the last frame
  // submitted's reconstruction (the next frame's reference), the one after
  // it the next frame's; model_buf_[place_] the next frame's tables, the
  // one before it the last frame's.
  uint8_t *recon_[kMaxInFlight][kMaxLayers][kMaxComps] = {};
  // What a frame's front part writes and its symbols (and at keyframes its
  // tile types) read, in two sets, so that the next frame's front part may
  // start once this frame's reconstruction is final (rec_done): a slot
  // takes set slot % 2 (apply(); frames in flight take the slots in turn).
  struct Scratch {
    uint8_t *cur[kMaxLayers][kMaxComps] = {};
    int16_t *in_s[kMaxLayers] = {}, *in_t[kMaxLayers] = {};
    int16_t *wk_s[kMaxLayers] = {}, *wk_t[kMaxLayers] = {};
    uint8_t *rclass[kMaxLayers] = {};
  };
  Scratch scratch_[2];
  static_assert(kMaxInFlight % 2 == 0, "the frame before takes the other set of the scratch");
  DevModel *model_buf_[kMaxInFlight] = {};
  int place_ = 0;
  size_t rans_shared_ = 0;       // the rANS kernel's dynamic shared memory: tables and ring
  int rans_batch_ = kRansBatch;  // its batches' steps
  size_t payload_capacity_ = 0;  // the most payload bytes of a frame (slot_layout_.payload)
  size_t marks_bytes_ = 0;       // the step marks (zeroed per frame)
  bool timing_ = false;          // CODEC2_CUDA_TIMES set: each frame's phases on stderr
  bool early_ = false;           // programmatic dependent launches (launch_after())
  cudaEvent_t epoch_ = nullptr;  // CODEC2_CUDA_TIMES: the first frame's start
  bool epoch_recorded_ = false;
  std::chrono::steady_clock::time_point host_epoch_;  // the host's clock at epoch_
  Graphs graphs_ = Graphs::On;  // a frame's work after prepare_kernel as a CUDA graph
  std::vector<std::unique_ptr<FrameGraphs>> frame_graphs_;
  uint64_t graph_clock_ = 0;  // graph_for()'s lookups (FrameGraphs::used)
  // CUDADIFF_CODEC2_DELAY_SYMBOLS=N:US, a test aid: the symbols of the N-th
  // frame submitted (from 0) start US microseconds after they could, while
  // the frames after it go on (launch_frame()).
  long long late_frame_ = -1;
  unsigned long long late_ns_ = 0;
  long long submitted_ = 0;  // frames submitted
  // CUDADIFF_CODEC2_ENC_FAIL_FINISH=N, a test aid: the N-th finish() or
  // finish_async() (from 0) throws Error after the body before it is
  // complete, as a CUDA error found while waiting for the frame would.
  long long fail_finish_ = -1;
  long long finishes_ = 0;
  // What finish() reads first comes back through mapped memory
  // (back_to_host(); CUDADIFF_CODEC2_MAPPED_BACK=0: copies).
  bool mapped_back_ = true;
  BodyInTransit transit_[kMaxInFlight];
  uint64_t transit_clock_ = 0;
};

}  // namespace

namespace detail {
std::unique_ptr<Encoder> make_cuda_encoder(const Context &ctx, VideoFormat format, int width,
                                           int height, const Geometry &geometry) {
  return std::make_unique<CudaEncoder>(ctx, format, width, height, geometry);
}
}  // namespace detail

}  // namespace codec2
}  // namespace cudadiff
