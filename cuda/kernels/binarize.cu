// Binarization on the GPU; the histogram and the threshold never leave the
// device. Two paths, with the same results:
//
// The single pass (default): single_pass_kernel, one launch per frame. Blocks
// take chunks of 256 groups of 16 pixels from a counter, compute their gray
// values, count them, keep them in shared memory and write the output with a
// guess of the threshold (the previous frame's); the block that counts the
// last chunk computes the threshold and publishes it; the blocks, which have
// waited for it, rewrite the groups whose output the guess got wrong (none
// when the threshold did not change). The frame is read once and no gray
// image is written. No co-residency is needed (see the kernel), so any frame
// size and any number of resident blocks work.
//
// The two launches (BinarizeOptions::single_pass = false; and the fixed
// threshold without a histogram, which is step 2 alone):
//
// 1. histogram_kernel: each thread takes 16 pixels of a row (16-byte loads),
//    computes their gray values (writing the gray image when the output pass
//    wants it) and counts them in its warp's shared-memory histogram, merging
//    runs of equal values into one atomic (flat regions would otherwise
//    serialise on one bin). Each block adds its 256 bins to a global
//    accumulator; the last block to finish (threadfence + ticket) takes the
//    histogram, resets the accumulator for the next frame, and computes the
//    peaks and the threshold with 256 threads, one per bin: block-wide max for
//    the peaks, a block scan and an arg-max of Otsu's score that is exact but
//    only does 256-bit arithmetic between near-tied candidates (otsu::better
//    in cudadiff/binarize.h; tests/core/test_binarize.cpp replays it on the
//    host). It runs out of line (__noinline__) so that its register needs do
//    not cut the occupancy of the streaming loop. It writes the result to
//    device memory for the output pass and, through mapped pinned memory, to
//    the host, where it is read after the per-frame synchronisation.
// 2. output_kernel: 16 pixels per thread again; reads the threshold from
//    device memory (or gets it as an argument for the fixed method, which
//    then skips step 1 unless the peaks are wanted), compares four gray bytes
//    at once (__vcmpgtu4) and writes GRAY8 or the input format (I420 / NV12
//    output adds a chroma fill).
//
// Rows whose pointer or stride is not 16-byte aligned, and the last group of a
// row, take a scalar path, so any stride and width work.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "../src/check.h"
#include "cudadiff/binarize.h"

namespace cudadiff {
namespace {

constexpr int kGroup = 16;   // pixels per thread
constexpr int kBlock = 256;  // also one thread per histogram bin in the threshold step
constexpr int kWarps = kBlock / 32;
// Resident histogram blocks per SM the register budget is sized for (64
// registers per thread); the grid is capped at this many per SM.
constexpr int kHistogramBlocksPerSm = 4;
constexpr unsigned kFullMask = 0xffffffffu;

// Copies of each device histogram: a block adds its bins into copy
// blockIdx.x % kReplicas, so that hundreds of blocks do not queue on the same
// few L2 lines; the reader sums the copies.
constexpr int kReplicas = 8;

// A counter alone on its 128-byte line (polled or hit by atomics from every block).
struct alignas(128) LineCounter {
  uint32_t value;
};

// The single pass's state for one frame. Frames alternate between two sets
// (the frame's parity): a frame uses set p and zeroes set 1 - p, which the
// previous single-pass frame used and the next one will use; set p is all
// zero when a frame starts.
struct alignas(128) PassSet {
  LineCounter next_chunk;      // chunks handed out so far
  LineCounter done_chunks;     // chunks whose bins are in `bins`
  LineCounter ready;           // 0, then threshold + 1, published by the last block
  LineCounter overflow_count;  // chunks whose gray values went to the scratch buffer
  LineCounter overflow_next;   // overflow entries handed out for output
  uint32_t bins[kReplicas][256];
};

// Device-side state of one Binarize object (one allocation, zeroed at creation).
struct DeviceState {
  PassSet pass[2];                       // the single pass
  uint32_t accumulator[kReplicas][256];  // two launches: all zero between frames (the last
  uint32_t blocks_done;                  // block resets them)
  uint32_t histogram[256];               // the last frame's histogram
  BinarizeResult result;                 // the last frame's threshold and peaks
  // The single pass's guess of the threshold: a frame of parity p reads
  // guess[p] and its last block writes guess[1 - p] for the next frame.
  uint32_t guess[2];
};

struct ThresholdArgs {
  int method;  // ThresholdMethod
  int fixed_threshold;
  int min_threshold;
  int max_threshold;
};

// Byte k (0 = lowest address) of an array of little-endian words.
#define WORD_BYTE(words, k) (((words)[(k) >> 2] >> (((k)&3) * 8)) & 0xffu)

// A source of gray values: PS = 1 is a gray (or luma) plane; PS = 3 or 4 is
// packed RGB with R, G, B at those byte offsets.
template <int PS>
__device__ __forceinline__ void load_group(const uint8_t *src, uint32_t (&word)[PS * 4]) {
#pragma unroll
  for (int i = 0; i < PS; ++i) {
    const uint4 v = reinterpret_cast<const uint4 *>(src)[i];
    word[4 * i + 0] = v.x;
    word[4 * i + 1] = v.y;
    word[4 * i + 2] = v.z;
    word[4 * i + 3] = v.w;
  }
}

// The 16 gray values of a loaded group, four per word.
template <int PS, int R, int G, int B>
__device__ __forceinline__ void gray_of_group(const uint32_t (&word)[PS * 4], const GrayWeights &w,
                                              uint32_t (&gray)[4]) {
  if constexpr (PS == 1) {
#pragma unroll
    for (int i = 0; i < 4; ++i) gray[i] = word[i];
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) gray[i] = 0;
#pragma unroll
    for (int p = 0; p < kGroup; ++p) {
      const uint32_t g = gray_weighted(w, WORD_BYTE(word, p * PS + R), WORD_BYTE(word, p * PS + G),
                                       WORD_BYTE(word, p * PS + B));
      gray[p >> 2] |= g << ((p & 3) * 8);
    }
  }
}

template <int PS, int R, int G, int B>
__device__ __forceinline__ uint32_t gray_of_pixel(const uint8_t *px, const GrayWeights &w) {
  if constexpr (PS == 1)
    return px[0];
  else
    return gray_weighted(w, px[R], px[G], px[B]);
}

// ---- the threshold step (run by the whole block that counted last) ----

__device__ __forceinline__ uint64_t warp_max(uint64_t v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const uint64_t other = __shfl_xor_sync(kFullMask, v, offset);
    v = other > v ? other : v;
  }
  return v;
}

// otsu::better, with the exact comparison out of line: it is needed only
// between two near-tied candidates, and inline its 256-bit products would
// make the common path spill.
__device__ __noinline__ int compare_scores(uint32_t total, uint64_t total_sum, uint32_t n0_a,
                                           uint64_t sum0_a, uint32_t n0_b, uint64_t sum0_b) {
  const otsu::Score a = otsu::score(total, total_sum, n0_a, sum0_a);
  const otsu::Score b = otsu::score(total, total_sum, n0_b, sum0_b);
  if (otsu::greater(a, b)) return 1;
  if (otsu::greater(b, a)) return -1;
  return 0;
}

__device__ __forceinline__ bool better_candidate(const otsu::Candidate &a, const otsu::Candidate &b,
                                                 uint32_t total, uint64_t total_sum) {
  if (a.candidate != b.candidate) return a.candidate;
  if (a.candidate && a.n0 != b.n0) {
    const int c = compare_scores(total, total_sum, a.n0, a.sum0, b.n0, b.sum0);
    if (c != 0) return c > 0;
  }
  return a.t < b.t;
}

__device__ __forceinline__ void shfl_candidate(otsu::Candidate &c, int offset, uint32_t total,
                                               uint64_t total_sum) {
  otsu::Candidate other;
  other.t = __shfl_xor_sync(kFullMask, c.t, offset);
  other.candidate = __shfl_xor_sync(kFullMask, static_cast<int>(c.candidate), offset) != 0;
  other.n0 = __shfl_xor_sync(kFullMask, c.n0, offset);
  other.sum0 = __shfl_xor_sync(kFullMask, c.sum0, offset);
  if (better_candidate(other, c, total, total_sum)) c = other;
}

__device__ __forceinline__ uint64_t block_max(uint64_t v, uint64_t *scratch) {
  v = warp_max(v);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  uint64_t result = scratch[0];
#pragma unroll
  for (int i = 1; i < kWarps; ++i) result = scratch[i] > result ? scratch[i] : result;
  __syncthreads();  // scratch may be reused
  return result;
}

struct ThresholdScratch {
  uint64_t max[kWarps];
  uint32_t count[kWarps];
  uint64_t sum[kWarps];
  double approx[kWarps];
  otsu::Candidate best[kWarps];
};

// Otsu's threshold; every thread of the block calls it with its bin's count.
// Gives what the sequential loop of cpu/binarize.cpp gives: the largest
// approximate score, then the arg-max under otsu::better (exact between
// near-tied candidates, see cudadiff/binarize.h), reduced within each warp
// and then across the warps; a strict total order, so the reduction order
// does not matter.
__device__ __forceinline__ int block_otsu(uint32_t count, ThresholdScratch &scratch) {
  const int t = threadIdx.x;
  const int lane = t & 31, warp = t >> 5;
  // Inclusive prefix sums of the counts and of the gray sums: n0(t), S0(t).
  uint32_t n0 = count;
  uint64_t sum0 = static_cast<uint64_t>(t) * count;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const uint32_t n = __shfl_up_sync(kFullMask, n0, offset);
    const uint64_t s = __shfl_up_sync(kFullMask, sum0, offset);
    if (lane >= offset) {
      n0 += n;
      sum0 += s;
    }
  }
  if (lane == 31) {
    scratch.count[warp] = n0;
    scratch.sum[warp] = sum0;
  }
  __syncthreads();
  uint32_t total = 0;
  uint64_t total_sum = 0;
#pragma unroll
  for (int i = 0; i < kWarps; ++i) {
    if (i < warp) {
      n0 += scratch.count[i];
      sum0 += scratch.sum[i];
    }
    total += scratch.count[i];
    total_sum += scratch.sum[i];
  }

  // The largest approximate score, then the exact winner among the candidates.
  const double approx = otsu::approx_score(total, total_sum, n0, sum0);
  double largest = approx;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    largest = fmax(largest, __shfl_xor_sync(kFullMask, largest, offset));
  if (lane == 0) scratch.approx[warp] = largest;
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kWarps; ++i) largest = fmax(largest, scratch.approx[i]);

  otsu::Candidate best;
  best.t = t;
  best.candidate = approx >= largest * (1.0 - otsu::kCandidateTolerance);
  best.n0 = n0;
  best.sum0 = sum0;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) shfl_candidate(best, offset, total, total_sum);
  if (lane == 0) scratch.best[warp] = best;
  __syncthreads();
  otsu::Candidate winner = scratch.best[0];
  for (int i = 1; i < kWarps; ++i)
    if (better_candidate(scratch.best[i], winner, total, total_sum)) winner = scratch.best[i];
  __syncthreads();  // scratch may be reused
  return winner.t;
}

// Thread 0 hands the threshold to the blocks waiting for it (single pass).
__device__ __forceinline__ void publish_threshold(uint32_t *ready, int threshold) {
  if (ready && threadIdx.x == 0) {
    __threadfence();
    atomicExch(ready, static_cast<uint32_t>(threshold) + 1u);
  }
}

// The threshold and peaks of the histogram whose bin threadIdx.x holds
// `count`; every thread of the block calls it and gets the same answer. With
// `ready` (single pass), the threshold is published as soon as it is known:
// before the peaks unless the threshold is made from them.
__device__ __noinline__ BinarizeResult block_result(uint32_t count, ThresholdArgs args,
                                                    uint32_t *ready) {
  __shared__ ThresholdScratch scratch;
  const int bin = threadIdx.x;
  int threshold = args.fixed_threshold;
  if (args.method == static_cast<int>(ThresholdMethod::Otsu))
    threshold = block_otsu(count, scratch);  // uniform branch: every thread calls it
  if (args.method != static_cast<int>(ThresholdMethod::TwoPeaks))
    publish_threshold(ready, threshold);

  // Peaks: keys order by count, then by lower gray level.
  const uint64_t key = (static_cast<uint64_t>(count) << 8) | static_cast<uint64_t>(255 - bin);
  const uint64_t first_key = block_max(key, scratch.max);
  const int first = 255 - static_cast<int>(first_key & 255u);
  const uint64_t second_key = block_max((bin != first && count > 0) ? key : 0, scratch.max);
  const int second = second_key ? 255 - static_cast<int>(second_key & 255u) : first;
  if (args.method == static_cast<int>(ThresholdMethod::TwoPeaks)) {
    const int mean = (first + second) / 2;
    threshold = min(max(mean, args.min_threshold), args.max_threshold);
    publish_threshold(ready, threshold);
  }

  BinarizeResult r;
  r.threshold = threshold;
  r.peak1 = first;
  r.peak2 = second;
  r.peak1_count = static_cast<uint32_t>(first_key >> 8);
  r.peak2_count = second_key ? static_cast<uint32_t>(second_key >> 8) : r.peak1_count;
  return r;
}

// The two launches' threshold step, run by the whole last block of pass 1.
__device__ __forceinline__ void block_threshold(DeviceState *state, const ThresholdArgs &args,
                                                BinarizeResult *host_result) {
  const int bin = threadIdx.x;
  // Read the merged histogram and leave the accumulator zero for the next
  // frame; atomics act at L2, so no stale cached value can be read.
  uint32_t count = 0;
#pragma unroll
  for (int r = 0; r < kReplicas; ++r) count += atomicExch(&state->accumulator[r][bin], 0u);
  state->histogram[bin] = count;
  if (bin == 0) state->blocks_done = 0;  // every block has taken its ticket
  const BinarizeResult r = block_result(count, args, nullptr);
  if (bin == 0) {
    state->result = r;
    if (host_result) *host_result = r;  // mapped pinned memory: no copy needed
  }
}

// ---- pass 1: gray, histogram, threshold ----

// Adds a run of `len` pixels of gray value `value` to the warp's histogram.
__device__ __forceinline__ void count_run(uint32_t *hist, uint32_t value, uint32_t len) {
  atomicAdd(&hist[value], len);
}

template <int PS, int R, int G, int B, bool WRITE_GRAY, bool VECTOR>
__global__ void __launch_bounds__(kBlock, kHistogramBlocksPerSm)
    histogram_kernel(const uint8_t *__restrict__ in, size_t in_stride, uint8_t *__restrict__ gray,
                     size_t gray_stride, int width, int height, int groups_per_row, GrayWeights w,
                     ThresholdArgs args, DeviceState *state, BinarizeResult *host_result) {
  __shared__ uint32_t warp_hist[kWarps][256];
  __shared__ bool is_last;
  for (int i = threadIdx.x; i < kWarps * 256; i += kBlock) (&warp_hist[0][0])[i] = 0;
  __syncthreads();
  uint32_t *hist = warp_hist[threadIdx.x >> 5];

  const long long groups = static_cast<long long>(groups_per_row) * height;
  const long long step = static_cast<long long>(gridDim.x) * kBlock;
  for (long long idx = static_cast<long long>(blockIdx.x) * kBlock + threadIdx.x; idx < groups;
       idx += step) {
    const int y = static_cast<int>(idx / groups_per_row);
    const int x0 = static_cast<int>(idx - static_cast<long long>(y) * groups_per_row) * kGroup;
    const uint8_t *src = in + y * in_stride + static_cast<size_t>(x0) * PS;
    uint8_t *dst = WRITE_GRAY ? gray + y * gray_stride + x0 : nullptr;

    if (VECTOR && x0 + kGroup <= width) {
      uint32_t word[PS * 4];
      load_group<PS>(src, word);
      uint32_t g[4];
      gray_of_group<PS, R, G, B>(word, w, g);
      if (WRITE_GRAY) *reinterpret_cast<uint4 *>(dst) = make_uint4(g[0], g[1], g[2], g[3]);
      uint32_t run_value = WORD_BYTE(g, 0), run_len = 1;
#pragma unroll
      for (int p = 1; p < kGroup; ++p) {
        const uint32_t v = WORD_BYTE(g, p);
        if (v == run_value) {
          ++run_len;
        } else {
          count_run(hist, run_value, run_len);
          run_value = v;
          run_len = 1;
        }
      }
      count_run(hist, run_value, run_len);
    } else {
      const int n = min(kGroup, width - x0);
      uint32_t run_value = gray_of_pixel<PS, R, G, B>(src, w), run_len = 1;
      if (WRITE_GRAY) dst[0] = static_cast<uint8_t>(run_value);
      for (int p = 1; p < n; ++p) {
        const uint32_t v = gray_of_pixel<PS, R, G, B>(src + p * PS, w);
        if (WRITE_GRAY) dst[p] = static_cast<uint8_t>(v);
        if (v == run_value) {
          ++run_len;
        } else {
          count_run(hist, run_value, run_len);
          run_value = v;
          run_len = 1;
        }
      }
      count_run(hist, run_value, run_len);
    }
  }
  __syncthreads();

  // This block's bins into the frame's accumulator.
  for (int bin = threadIdx.x; bin < 256; bin += kBlock) {
    uint32_t sum = 0;
#pragma unroll
    for (int k = 0; k < kWarps; ++k) sum += warp_hist[k][bin];
    if (sum) atomicAdd(&state->accumulator[blockIdx.x % kReplicas][bin], sum);
  }
  // Make the additions visible device-wide before taking a ticket; the block
  // that takes the last ticket sees every block's additions.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) is_last = atomicAdd(&state->blocks_done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  block_threshold(state, args, host_result);
}

// ---- pass 2: black and white ----

// SPS: source of gray values (1: a gray/luma plane; 3, 4: packed RGB with R, G,
// B offsets); DPS: output bytes per pixel (1: GRAY8 or a Y plane; 3: packed RGB
// without alpha; 4: packed RGB with alpha / x, which then come from the source).
template <int SPS, int R, int G, int B, int DPS, bool VECTOR>
__global__ void __launch_bounds__(kBlock)
    output_kernel(const uint8_t *__restrict__ src, size_t src_stride, uint8_t *__restrict__ out,
                  size_t out_stride, int width, int height, int groups_per_row, GrayWeights w,
                  const BinarizeResult *__restrict__ result, int fixed_threshold,
                  uint32_t invert_mask) {
  static_assert(DPS == 1 || (DPS == 3 && SPS != 4) || (DPS == 4 && SPS == 4),
                "output layout needs a matching source");
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<long long>(groups_per_row) * height) return;
  const int y = static_cast<int>(idx / groups_per_row);
  const int x0 = static_cast<int>(idx - static_cast<long long>(y) * groups_per_row) * kGroup;
  const uint8_t *s = src + y * src_stride + static_cast<size_t>(x0) * SPS;
  uint8_t *d = out + y * out_stride + static_cast<size_t>(x0) * DPS;
  const uint32_t threshold =
      result ? static_cast<uint32_t>(result->threshold) : static_cast<uint32_t>(fixed_threshold);

  if (VECTOR && x0 + kGroup <= width) {
    uint32_t word[SPS * 4];
    load_group<SPS>(s, word);
    uint32_t g[4];
    gray_of_group<SPS, R, G, B>(word, w, g);
    const uint32_t t4 = threshold * 0x01010101u;
    uint32_t white[4];  // 0xff in each byte whose pixel is white
#pragma unroll
    for (int i = 0; i < 4; ++i) white[i] = __vcmpgtu4(g[i], t4) ^ invert_mask;
    if constexpr (DPS == 1) {
      *reinterpret_cast<uint4 *>(d) = make_uint4(white[0], white[1], white[2], white[3]);
    } else if constexpr (DPS == 3) {
      uint32_t o[12];
#pragma unroll
      for (int i = 0; i < 12; ++i) o[i] = 0;
#pragma unroll
      for (int k = 0; k < 3 * kGroup; ++k) o[k >> 2] |= WORD_BYTE(white, k / 3) << ((k & 3) * 8);
#pragma unroll
      for (int i = 0; i < 3; ++i)
        reinterpret_cast<uint4 *>(d)[i] =
            make_uint4(o[4 * i], o[4 * i + 1], o[4 * i + 2], o[4 * i + 3]);
    } else {
      constexpr uint32_t colour = (0xffu << (8 * R)) | (0xffu << (8 * G)) | (0xffu << (8 * B));
      uint32_t o[16];
#pragma unroll
      for (int p = 0; p < kGroup; ++p) {
        const uint32_t v = WORD_BYTE(white, p) * 0x01010101u;
        o[p] = (word[p] & ~colour) | (v & colour);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
        reinterpret_cast<uint4 *>(d)[i] =
            make_uint4(o[4 * i], o[4 * i + 1], o[4 * i + 2], o[4 * i + 3]);
    }
    return;
  }

  const int n = min(kGroup, width - x0);
  const uint8_t above = static_cast<uint8_t>(0xffu ^ (invert_mask & 0xffu));
  const uint8_t below = static_cast<uint8_t>(invert_mask & 0xffu);
  for (int p = 0; p < n; ++p) {
    const uint8_t v = gray_of_pixel<SPS, R, G, B>(s + p * SPS, w) > threshold ? above : below;
    if constexpr (DPS == 1) {
      d[p] = v;
    } else if constexpr (DPS == 3) {
      d[3 * p] = d[3 * p + 1] = d[3 * p + 2] = v;
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) d[4 * p + k] = (k == R || k == G || k == B) ? v : s[4 * p + k];
    }
  }
}

// ---- the single pass: everything in one kernel ----

// Groups of 16 pixels one thread of the single pass keeps on chip (as gray
// values, 16 bytes each, in shared memory) from the histogram phase to the
// output phase.
constexpr int kPassMaxGroups = 4;

// Adds a group's gray values (bytes 0..n-1 of g) to the warp's histogram,
// merging runs of equal values into one atomic.
__device__ __forceinline__ void count_group(uint32_t *hist, const uint32_t (&g)[4], int n) {
  uint32_t run_value = WORD_BYTE(g, 0), run_len = 1;
#pragma unroll
  for (int p = 1; p < kGroup; ++p) {
    if (p < n) {
      const uint32_t v = WORD_BYTE(g, p);
      if (v == run_value) {
        ++run_len;
      } else {
        count_run(hist, run_value, run_len);
        run_value = v;
        run_len = 1;
      }
    }
  }
  count_run(hist, run_value, run_len);
}

// Writes a group's output. `white` has 0xff in each byte whose pixel is white;
// n pixels (vector: all 16, with 16-byte stores). 4-byte output takes the
// alpha / x bytes from the source group `s`, read again here (from L2: the
// frame was read a moment ago).
template <int SPS, int R, int G, int B, int DPS>
__device__ __forceinline__ void store_group(uint8_t *d, const uint8_t *s,
                                            const uint32_t (&white)[4], bool vector, int n) {
  if (vector) {
    if constexpr (DPS == 1) {
      *reinterpret_cast<uint4 *>(d) = make_uint4(white[0], white[1], white[2], white[3]);
    } else if constexpr (DPS == 3) {
      uint32_t o[12];
#pragma unroll
      for (int i = 0; i < 12; ++i) o[i] = 0;
#pragma unroll
      for (int k = 0; k < 3 * kGroup; ++k) o[k >> 2] |= WORD_BYTE(white, k / 3) << ((k & 3) * 8);
#pragma unroll
      for (int i = 0; i < 3; ++i)
        reinterpret_cast<uint4 *>(d)[i] =
            make_uint4(o[4 * i], o[4 * i + 1], o[4 * i + 2], o[4 * i + 3]);
    } else {
      constexpr uint32_t colour = (0xffu << (8 * R)) | (0xffu << (8 * G)) | (0xffu << (8 * B));
      uint32_t word[16];
      load_group<4>(s, word);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        uint32_t o[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t v = WORD_BYTE(white, 4 * i + j) * 0x01010101u;
          o[j] = (word[4 * i + j] & ~colour) | (v & colour);
        }
        reinterpret_cast<uint4 *>(d)[i] = make_uint4(o[0], o[1], o[2], o[3]);
      }
    }
    return;
  }
#pragma unroll
  for (int p = 0; p < kGroup; ++p) {
    if (p < n) {
      const uint8_t v = static_cast<uint8_t>(WORD_BYTE(white, p));
      if constexpr (DPS == 1) {
        d[p] = v;
      } else if constexpr (DPS == 3) {
        d[3 * p] = d[3 * p + 1] = d[3 * p + 2] = v;
      } else {
#pragma unroll
        for (int k = 0; k < 4; ++k)
          if (k == R || k == G || k == B)
            d[4 * p + k] = v;
          else
            d[4 * p + k] = s[4 * p + k];
      }
    }
  }
}

// 0xff in each byte of g above the threshold t (in every byte of t4), with
// the invert mask applied: the output bytes of the group's 16 pixels.
__device__ __forceinline__ void white_of(const uint4 &g, uint32_t t4, uint32_t invert_mask,
                                         uint32_t (&white)[4]) {
  white[0] = __vcmpgtu4(g.x, t4) ^ invert_mask;
  white[1] = __vcmpgtu4(g.y, t4) ^ invert_mask;
  white[2] = __vcmpgtu4(g.z, t4) ^ invert_mask;
  white[3] = __vcmpgtu4(g.w, t4) ^ invert_mask;
}

// Where group `idx` starts in a plane of `ps` bytes per pixel.
struct GroupAt {
  uint32_t y;
  int x0, n;  // first pixel, pixels in the group (16 but at the end of a row)
};
__device__ __forceinline__ GroupAt group_at(uint32_t idx, uint32_t gpr, int width) {
  GroupAt at;
  at.y = idx / gpr;
  at.x0 = static_cast<int>(idx - at.y * gpr) * kGroup;
  at.n = min(kGroup, width - at.x0);
  return at;
}

// The single pass: one launch per frame, any number of blocks. The frame is
// cut into chunks of kBlock groups (group c * kBlock + threadIdx.x of chunk c
// for each thread). Each block:
// 1. takes chunks from a counter until none is left: gray values of its
//    group, counted in the warp's shared-memory histogram, kept in shared
//    memory (the first `keep_chunks` chunks; later ones, which only come when
//    few blocks run at once, go to a scratch buffer and a list), and the
//    output written with a guess of the threshold (the previous frame's, or
//    the fixed one); then adds its bins into the frame's device histogram;
// 2. adds its chunk count to done_chunks; the block that completes the count
//    sums the histogram copies and computes the threshold (publishing it in
//    `ready` at once) and the peaks; the others wait for the threshold;
// 3. rewrites the groups of its kept chunks whose output differs under the
//    real threshold (none when the guess was right), then helps with the
//    scratch chunks (another counter).
// Only running blocks take chunks and nobody waits before every chunk is
// taken, so the blocks that wait only wait for running blocks: no deadlock,
// whatever number of blocks the GPU can hold at once (no cooperative launch
// needed). Blocks that get no chunk leave at once. The output is exact: a
// group is written with the guess in step 1 and again in step 3 by a thread
// that is ordered after that write (the same thread, or through the fences
// before done_chunks and ready) whenever the guess gave other bytes.
// SPS: source (1: gray / luma plane; 3, 4: packed RGB with R, G, B offsets);
// DPS: output bytes per pixel as in output_kernel. `vector`: source and output
// rows allow 16-byte accesses (then every full group takes them).
template <int SPS, int R, int G, int B, int DPS>
__global__ void __launch_bounds__(kBlock, kHistogramBlocksPerSm)
    single_pass_kernel(const uint8_t *__restrict__ in, size_t in_stride, uint8_t *__restrict__ out,
                       size_t out_stride, int width, int height, int groups_per_row,
                       uint32_t chunks, uint32_t keep_chunks, bool vector, GrayWeights w,
                       ThresholdArgs args, uint32_t invert_mask, int parity, DeviceState *state,
                       BinarizeResult *host_result, uint4 *scratch, uint32_t *overflow_list) {
  static_assert(DPS == 1 || (DPS == 3 && SPS == 3) || (DPS == 4 && SPS == 4),
                "output layout needs a matching source");
  __shared__ uint32_t warp_hist[kWarps][256];
  __shared__ uint4 kept[kPassMaxGroups][kBlock];  // 16 KiB: gray values of the kept chunks
  __shared__ uint32_t kept_chunk[kPassMaxGroups];
  __shared__ uint32_t next;  // what thread 0 fetched from a counter
  __shared__ uint32_t threshold;
  __shared__ bool last;
  PassSet &set = state->pass[parity];
  if (threadIdx.x == 0) next = atomicAdd(&set.next_chunk.value, 1u);
  for (int i = threadIdx.x; i < kWarps * 256; i += kBlock) (&warp_hist[0][0])[i] = 0;
  if (blockIdx.x == 0) {
    // Zero the other set for the next single-pass frame (unused this frame).
    PassSet &other = state->pass[parity ^ 1];
#pragma unroll
    for (int r = 0; r < kReplicas; ++r) other.bins[r][threadIdx.x] = 0;
    if (threadIdx.x == 0) {
      other.next_chunk.value = 0;
      other.done_chunks.value = 0;
      other.ready.value = 0;
      other.overflow_count.value = 0;
      other.overflow_next.value = 0;
    }
  }
  // The guess: written by the previous single-pass frame; nobody writes it
  // during this frame.
  const uint32_t guess = args.method == static_cast<int>(ThresholdMethod::Fixed)
                             ? static_cast<uint32_t>(args.fixed_threshold)
                             : state->guess[parity];
  const uint32_t guess4 = guess * 0x01010101u;
  __syncthreads();
  uint32_t *hist = warp_hist[threadIdx.x >> 5];
  // Fewer than 2^28 groups (frames have fewer than 2^32 pixels): 32-bit indices.
  const uint32_t gpr = static_cast<uint32_t>(groups_per_row);
  const uint32_t groups = gpr * static_cast<uint32_t>(height);

  // 1. Chunks: gray values, histogram, output with the guess.
  uint32_t chunk = next, taken = 0;  // the same in every thread
  while (chunk < chunks) {
    __syncthreads();  // every thread has read `next`
    uint32_t fetched = 0;
    if (threadIdx.x == 0) fetched = atomicAdd(&set.next_chunk.value, 1u);  // used at the end
    const uint32_t idx = chunk * kBlock + threadIdx.x;
    uint4 g = make_uint4(0, 0, 0, 0);
    if (idx < groups) {
      const GroupAt at = group_at(idx, gpr, width);
      const uint8_t *src = in + at.y * in_stride + static_cast<size_t>(at.x0) * SPS;
      const bool full = vector && at.n == kGroup;
      uint32_t gw[4] = {0, 0, 0, 0};
      if (full) {
        uint32_t word[SPS * 4];
        load_group<SPS>(src, word);
        gray_of_group<SPS, R, G, B>(word, w, gw);
      } else {
#pragma unroll
        for (int p = 0; p < kGroup; ++p)
          if (p < at.n)
            gw[p >> 2] |= gray_of_pixel<SPS, R, G, B>(src + p * SPS, w) << ((p & 3) * 8);
      }
      count_group(hist, gw, at.n);
      g = make_uint4(gw[0], gw[1], gw[2], gw[3]);
      uint32_t white[4];
      white_of(g, guess4, invert_mask, white);
      store_group<SPS, R, G, B, DPS>(out + at.y * out_stride + static_cast<size_t>(at.x0) * DPS,
                                     src, white, full, at.n);
    }
    if (taken < keep_chunks) {
      kept[taken][threadIdx.x] = g;
      if (threadIdx.x == 0) kept_chunk[taken] = chunk;
    } else {
      if (idx < groups) scratch[idx] = g;
      if (threadIdx.x == 0) overflow_list[atomicAdd(&set.overflow_count.value, 1u)] = chunk;
    }
    ++taken;
    if (threadIdx.x == 0) next = fetched;
    __syncthreads();
    chunk = next;
  }
  if (taken == 0) return;  // no chunk left for this block: nothing to count or write

  // The block's bins into the frame's histogram (one of its copies).
  {
    uint32_t sum = 0;
#pragma unroll
    for (int k = 0; k < kWarps; ++k) sum += warp_hist[k][threadIdx.x];
    if (sum) atomicAdd(&set.bins[blockIdx.x % kReplicas][threadIdx.x], sum);
  }

  // 2. Count the chunks in; the block that completes the count computes the
  //    threshold (its bins and every other block's, and the output and
  //    scratch writes, are ordered before the count by the barrier and the
  //    fences).
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(&set.done_chunks.value, taken) + taken == chunks;
    if (last) __threadfence();
  }
  __syncthreads();
  if (last) {
    uint32_t count = 0;
#pragma unroll
    for (int r = 0; r < kReplicas; ++r) count += __ldcg(&set.bins[r][threadIdx.x]);
    state->histogram[threadIdx.x] = count;
    const BinarizeResult r = block_result(count, args, &set.ready.value);
    if (threadIdx.x == 0) {
      state->result = r;
      if (host_result) *host_result = r;  // mapped pinned memory: no copy needed
      state->guess[parity ^ 1] = static_cast<uint32_t>(r.threshold);  // the next frame's guess
      threshold = static_cast<uint32_t>(r.threshold);
    }
  } else if (threadIdx.x == 0) {
    const volatile uint32_t *ready = &set.ready.value;
    uint32_t v;
    while ((v = *ready) == 0) __nanosleep(32);
    __threadfence();
    threshold = v - 1;
  }
  __syncthreads();
  if (threshold == guess) return;  // every byte written in step 1 is right

  // 3. Rewrite the groups the guess got wrong: kept chunks, then a share of
  //    the scratch chunks.
  const uint32_t t4 = threshold * 0x01010101u;
  const auto fix = [&](uint32_t idx, const uint4 &g) {
    uint32_t white[4], guessed[4];
    white_of(g, t4, invert_mask, white);
    white_of(g, guess4, invert_mask, guessed);
    if ((white[0] ^ guessed[0]) | (white[1] ^ guessed[1]) | (white[2] ^ guessed[2]) |
        (white[3] ^ guessed[3])) {
      const GroupAt at = group_at(idx, gpr, width);
      store_group<SPS, R, G, B, DPS>(out + at.y * out_stride + static_cast<size_t>(at.x0) * DPS,
                                     in + at.y * in_stride + static_cast<size_t>(at.x0) * SPS,
                                     white, vector && at.n == kGroup, at.n);
    }
  };
  const uint32_t kept_count = min(taken, keep_chunks);
  for (uint32_t k = 0; k < kept_count; ++k) {
    const uint32_t idx = kept_chunk[k] * kBlock + threadIdx.x;
    if (idx < groups) fix(idx, kept[k][threadIdx.x]);
  }
  const uint32_t overflow = __ldcg(&set.overflow_count.value);  // final: every chunk is in
  if (overflow == 0) return;
  for (;;) {
    __syncthreads();  // every thread has read `next`
    if (threadIdx.x == 0) next = atomicAdd(&set.overflow_next.value, 1u);
    __syncthreads();
    const uint32_t e = next;
    if (e >= overflow) break;
    const uint32_t idx = __ldcg(&overflow_list[e]) * kBlock + threadIdx.x;
    if (idx < groups) fix(idx, __ldcg(&scratch[idx]));
  }
}

#undef WORD_BYTE

// Neutral chroma (128) for I420 / NV12 output, one byte per thread. A kernel
// rather than cudaMemset2DAsync so that mapped host memory (integrated GPUs)
// works the same as device memory.
__global__ void __launch_bounds__(kBlock)
    fill_plane_kernel(uint8_t *plane, size_t stride, int row_bytes, int rows, uint8_t value) {
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<long long>(row_bytes) * rows) return;
  const int y = static_cast<int>(idx / row_bytes);
  const int x = static_cast<int>(idx - static_cast<long long>(y) * row_bytes);
  plane[y * stride + x] = value;
}

bool aligned16(const void *p, size_t stride) {
  return ((reinterpret_cast<uintptr_t>(p) | stride) & 15u) == 0;
}

class CudaBinarize final : public Binarize {
 public:
  CudaBinarize(const Context &ctx, VideoFormat in_format, VideoFormat out_format, int width,
               int height, const BinarizeOptions &options)
      : ctx_(ctx),
        in_format_(in_format),
        out_format_(out_format),
        width_(width),
        height_(height),
        options_(options) {
    ctx.activate();
    const FormatInfo &fi = format_info(in_format);
    // The gray image is kept only where the output pass can use it: GRAY8
    // output, or 3-byte RGB written back (4-byte formats need the input's
    // alpha / x bytes, so their output pass reads the input anyway).
    if (options.keep_gray && !options.single_pass && is_packed_rgb(in_format) &&
        (out_format == VideoFormat::GRAY8 || fi.pixel_stride[0] == 3))
      gray_ = DeviceFrame(VideoFormat::GRAY8, width, height);
    state_ = DeviceBuffer(sizeof(DeviceState));
    fill_bytes_async(state_.data(), 0, sizeof(DeviceState), ctx);
    host_result_ = PinnedBuffer(sizeof(BinarizeResult));
    const BinarizeResult none{};
    std::memcpy(host_result_.data(), &none, sizeof none);
    if (host_result_.pinned()) {
      void *device_ptr = nullptr;
      if (cudaHostGetDevicePointer(&device_ptr, host_result_.data(), 0) == cudaSuccess)
        mapped_result_ = static_cast<BinarizeResult *>(device_ptr);
      else
        cudaGetLastError();  // not mappable: the result is copied instead
    }
    max_histogram_blocks_ = std::max(1, ctx.gpu().multiprocessors * kHistogramBlocksPerSm);
    if (options.single_pass) {
      // Where the gray values of chunks that do not fit a block's shared
      // memory go (used only when few blocks run at once), and their list.
      pass_scratch_ = DeviceBuffer(static_cast<size_t>(pass_chunks()) * kBlock * sizeof(uint4));
      pass_overflow_ = DeviceBuffer(static_cast<size_t>(pass_chunks()) * sizeof(uint32_t));
    }
  }

  ~CudaBinarize() override {
    // The device may still write the mapped result; wait before it is freed.
    try {
      ctx_.activate();
      ctx_.synchronize();
    } catch (const Error &) {
    }
  }

  void process(const FrameView &in, const FrameView &out, const BinarizeParams &params) override {
    validate(in, "binarize input");
    validate(out, "binarize output");
    validate(params);
    if (in.format != in_format_ || out.format != out_format_ || in.width != width_ ||
        in.height != height_ || out.width != width_ || out.height != height_)
      throw Error("binarize: frame does not match the configured formats and size");
    stream_ = static_cast<cudaStream_t>(ctx_.stream_handle());
    need_histogram_ = params.method != ThresholdMethod::Fixed || params.want_peaks;
    used_single_pass_ = false;
    switch (in.format) {
      case VideoFormat::GRAY8:
      case VideoFormat::I420:
      case VideoFormat::NV12:
        run<1, 0, 0, 0>(in, out, params);
        break;
      case VideoFormat::BGR:
        run<3, 2, 1, 0>(in, out, params);
        break;
      case VideoFormat::RGB:
        run<3, 0, 1, 2>(in, out, params);
        break;
      case VideoFormat::BGRx:
      case VideoFormat::BGRA:
        run<4, 2, 1, 0>(in, out, params);
        break;
      case VideoFormat::RGBx:
      case VideoFormat::RGBA:
        run<4, 0, 1, 2>(in, out, params);
        break;
      case VideoFormat::xBGR:
      case VideoFormat::ABGR:
        run<4, 3, 2, 1>(in, out, params);
        break;
      case VideoFormat::xRGB:
      case VideoFormat::ARGB:
        run<4, 1, 2, 3>(in, out, params);
        break;
      default:
        throw Error(std::string("binarize: unsupported format ") + format_name(in.format));
    }
    // Neutral chroma for I420 / NV12 output.
    for (int p = 1; p < out.n_planes(); ++p) {
      const int row_bytes = static_cast<int>(out.row_bytes(p)), rows = out.plane_height(p);
      const long long bytes = static_cast<long long>(row_bytes) * rows;
      fill_plane_kernel<<<static_cast<unsigned>((bytes + kBlock - 1) / kBlock), kBlock, 0,
                          stream_>>>(out.data[p], out.stride[p], row_bytes, rows, 128);
      CUDADIFF_CHECK_LAUNCH("binarize chroma fill launch");
    }
    if (need_histogram_) {
      if (!mapped_result_)  // a few bytes, queued with the frame's download
        copy_bytes_async(host_result_.data(), &device_state()->result, sizeof(BinarizeResult),
                         ctx_);
    } else {
      fixed_result_ = BinarizeResult();
      fixed_result_.threshold = params.threshold;
    }
    histogram_valid_ = need_histogram_;
  }

  BinarizeResult result() const override {
    if (!histogram_valid_) return fixed_result_;
    BinarizeResult r;
    std::memcpy(&r, host_result_.data(), sizeof r);
    return r;
  }

  bool used_single_pass() const override { return used_single_pass_; }

  Histogram histogram() const override {
    Histogram h;
    h.fill(0);
    if (!histogram_valid_) return h;
    ctx_.activate();
    copy_bytes_async(h.data(), device_state()->histogram, sizeof(h), ctx_);
    ctx_.synchronize();
    return h;
  }

 private:
  DeviceState *device_state() const { return state_.as<DeviceState>(); }

  int groups_per_row() const { return (width_ + kGroup - 1) / kGroup; }

  template <int PS, int R, int G, int B>
  void launch_histogram(const uint8_t *src, size_t src_stride, const BinarizeParams &params) {
    const long long groups = static_cast<long long>(groups_per_row()) * height_;
    const unsigned blocks = static_cast<unsigned>(
        std::min<long long>((groups + kBlock - 1) / kBlock, max_histogram_blocks_));
    const ThresholdArgs args{static_cast<int>(params.method), params.threshold,
                             params.min_threshold, params.max_threshold};
    const GrayWeights w = gray_weights(params.gray);
    uint8_t *gray = gray_.empty() ? nullptr : gray_.view().data[0];
    const size_t gray_stride = gray_.empty() ? 0 : gray_.view().stride[0];
    const bool vector = aligned16(src, src_stride) && (!gray || aligned16(gray, gray_stride));
    const auto launch = [&](auto kernel) {
      kernel<<<blocks, kBlock, 0, stream_>>>(src, src_stride, gray, gray_stride, width_, height_,
                                             groups_per_row(), w, args, device_state(),
                                             mapped_result_);
    };
    if constexpr (PS > 1) {
      if (gray) {
        vector ? launch(histogram_kernel<PS, R, G, B, true, true>)
               : launch(histogram_kernel<PS, R, G, B, true, false>);
        CUDADIFF_CHECK_LAUNCH("binarize histogram kernel launch");
        return;
      }
    }
    vector ? launch(histogram_kernel<PS, R, G, B, false, true>)
           : launch(histogram_kernel<PS, R, G, B, false, false>);
    CUDADIFF_CHECK_LAUNCH("binarize histogram kernel launch");
  }

  template <int SPS, int R, int G, int B, int DPS>
  void launch_output(const uint8_t *src, size_t src_stride, uint8_t *out, size_t out_stride,
                     const BinarizeParams &params) {
    const long long threads = static_cast<long long>(groups_per_row()) * height_;
    const unsigned blocks = static_cast<unsigned>((threads + kBlock - 1) / kBlock);
    const GrayWeights w = gray_weights(params.gray);
    const BinarizeResult *result = need_histogram_ ? &device_state()->result : nullptr;
    const uint32_t invert_mask = params.invert ? 0xffffffffu : 0u;
    const bool vector = aligned16(src, src_stride) && aligned16(out, out_stride);
    const auto launch = [&](auto kernel) {
      kernel<<<blocks, kBlock, 0, stream_>>>(src, src_stride, out, out_stride, width_, height_,
                                             groups_per_row(), w, result, params.threshold,
                                             invert_mask);
    };
    vector ? launch(output_kernel<SPS, R, G, B, DPS, true>)
           : launch(output_kernel<SPS, R, G, B, DPS, false>);
    CUDADIFF_CHECK_LAUNCH("binarize output kernel launch");
  }

  // The single pass (one launch; see single_pass_kernel).
  template <int SPS, int R, int G, int B, int DPS>
  void launch_single_pass(const FrameView &in, const FrameView &out, const BinarizeParams &params) {
    const auto kernel = single_pass_kernel<SPS, R, G, B, DPS>;
    if (pass_blocks_per_sm_ < 0) {
      int blocks_per_sm = 0;
      if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, kBlock, 0) !=
          cudaSuccess) {
        cudaGetLastError();
        blocks_per_sm = 1;  // any number of blocks works; this one is merely slower
      }
      if (options_.blocks_per_sm > 0)
        blocks_per_sm = std::min(blocks_per_sm, options_.blocks_per_sm);
      pass_blocks_per_sm_ = std::max(1, blocks_per_sm);
    }
    const uint32_t chunks = pass_chunks();
    const unsigned blocks = static_cast<unsigned>(std::min<long long>(
        chunks, static_cast<long long>(pass_blocks_per_sm_) * ctx_.gpu().multiprocessors));
    const uint32_t keep = static_cast<uint32_t>(
        options_.groups_per_thread > 0 ? std::min(options_.groups_per_thread, kPassMaxGroups)
                                       : kPassMaxGroups);
    const bool vector =
        aligned16(in.data[0], in.stride[0]) && aligned16(out.data[0], out.stride[0]);
    const ThresholdArgs args{static_cast<int>(params.method), params.threshold,
                             params.min_threshold, params.max_threshold};
    kernel<<<blocks, kBlock, 0, stream_>>>(
        in.data[0], in.stride[0], out.data[0], out.stride[0], width_, height_, groups_per_row(),
        chunks, keep, vector, gray_weights(params.gray), args, params.invert ? 0xffffffffu : 0u,
        parity_, device_state(), mapped_result_, pass_scratch_.as<uint4>(),
        pass_overflow_.as<uint32_t>());
    CUDADIFF_CHECK_LAUNCH("binarize single-pass kernel launch");
    parity_ ^= 1;
    used_single_pass_ = true;
  }

  uint32_t pass_chunks() const {
    const long long groups = static_cast<long long>(groups_per_row()) * height_;
    return static_cast<uint32_t>((groups + kBlock - 1) / kBlock);
  }

  template <int PS, int R, int G, int B>
  void run(const FrameView &in, const FrameView &out, const BinarizeParams &params) {
    if (need_histogram_ && options_.single_pass) {
      if constexpr (PS == 1)
        launch_single_pass<1, 0, 0, 0, 1>(in, out, params);
      else if (out.format == VideoFormat::GRAY8)
        launch_single_pass<PS, R, G, B, 1>(in, out, params);
      else
        launch_single_pass<PS, R, G, B, PS>(in, out, params);
      return;
    }
    if (need_histogram_) launch_histogram<PS, R, G, B>(in.data[0], in.stride[0], params);
    uint8_t *dst = out.data[0];
    const size_t dst_stride = out.stride[0];
    if constexpr (PS == 1) {
      // GRAY8 / luma input: GRAY8 or Y-plane output.
      launch_output<1, 0, 0, 0, 1>(in.data[0], in.stride[0], dst, dst_stride, params);
    } else {
      // The kept gray image is valid only when the first pass ran.
      const bool from_gray = need_histogram_ && !gray_.empty();
      const uint8_t *gray = from_gray ? gray_.view().data[0] : nullptr;
      const size_t gray_stride = from_gray ? gray_.view().stride[0] : 0;
      if (out.format == VideoFormat::GRAY8) {
        if (from_gray)
          launch_output<1, 0, 0, 0, 1>(gray, gray_stride, dst, dst_stride, params);
        else
          launch_output<PS, R, G, B, 1>(in.data[0], in.stride[0], dst, dst_stride, params);
      } else if constexpr (PS == 3) {
        if (from_gray)
          launch_output<1, 0, 0, 0, 3>(gray, gray_stride, dst, dst_stride, params);
        else
          launch_output<3, R, G, B, 3>(in.data[0], in.stride[0], dst, dst_stride, params);
      } else {
        launch_output<4, R, G, B, 4>(in.data[0], in.stride[0], dst, dst_stride, params);
      }
    }
  }

  const Context &ctx_;
  VideoFormat in_format_, out_format_;
  int width_, height_;
  DeviceFrame gray_;                         // the gray image of packed RGB input (when kept)
  DeviceBuffer state_;                       // DeviceState
  PinnedBuffer host_result_;                 // BinarizeResult, written by the device
  BinarizeResult *mapped_result_ = nullptr;  // its device address (null: copied instead)
  int max_histogram_blocks_ = 1;
  BinarizeOptions options_;
  DeviceBuffer pass_scratch_;    // single pass: gray values of chunks not kept on chip
  DeviceBuffer pass_overflow_;   // single pass: the list of those chunks
  int pass_blocks_per_sm_ = -1;  // single-pass blocks per SM (-1: not asked yet)
  int parity_ = 0;               // the next single-pass frame's set in DeviceState
  bool used_single_pass_ = false;
  cudaStream_t stream_ = nullptr;
  bool need_histogram_ = false;
  bool histogram_valid_ = false;  // the last frame computed a histogram
  BinarizeResult fixed_result_;
};

}  // namespace

namespace detail {
std::unique_ptr<Binarize> make_cuda_binarize(const Context &ctx, VideoFormat in_format,
                                             VideoFormat out_format, int width, int height,
                                             const BinarizeOptions &options) {
  return std::make_unique<CudaBinarize>(ctx, in_format, out_format, width, height, options);
}
}  // namespace detail

}  // namespace cudadiff
