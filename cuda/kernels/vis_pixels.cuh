// Private to the heat map and noise view kernels: both read 16 pixels of two
// frames and write 16 pixels, in 16-byte loads and stores where the rows allow
// it. A group of 16 pixels of PS bytes is 4 PS 32-bit words; after full
// unrolling every byte index below is a compile-time constant, so the words
// stay in registers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace cudadiff {
namespace vis {

constexpr int kGroup = 16;   // pixels per thread
constexpr int kBlock = 256;  // threads per block

// True when a view's base pointer and stride allow 16-byte accesses on every row.
inline bool aligned16(const void *data, size_t stride) {
  return ((reinterpret_cast<uintptr_t>(data) | stride) & 15u) == 0;
}

// 0xff at byte k (nothing for k < 0).
constexpr uint32_t byte_mask(int k) {
  return k < 0 ? 0u : 0xffu << (8 * k);
}

constexpr uint32_t low_bytes_mask(int n) {
  return n >= 4 ? 0xffffffffu : (1u << (8 * n)) - 1u;
}

// Pixel p of a group held as words: its PS bytes in the low bytes of the
// result (a pixel of 3 bytes may straddle two words: one funnel shift).
template <int PS>
__device__ __forceinline__ uint32_t get_pixel(const uint32_t *words, int p) {
  const int b = p * PS, w = b >> 2, sh = (b & 3) * 8;
  const uint32_t v =
      sh + 8 * PS <= 32 ? words[w] >> sh : __funnelshift_r(words[w], words[w + 1], sh);
  return v & low_bytes_mask(PS);
}

// ORs pixel p (PS low bytes of v, the rest zero) into a zeroed word array.
template <int PS>
__device__ __forceinline__ void put_pixel(uint32_t *words, int p, uint32_t v) {
  const int b = p * PS, w = b >> 2, sh = (b & 3) * 8;
  words[w] |= v << sh;
  if (sh + 8 * PS > 32) words[w + 1] |= v >> (32 - sh);
}

// The same for one pixel in memory, byte by byte (any alignment).
template <int PS>
__device__ __forceinline__ uint32_t load_pixel(const uint8_t *src) {
  uint32_t v = 0;
#pragma unroll
  for (int k = 0; k < PS; ++k) v |= static_cast<uint32_t>(src[k]) << (8 * k);
  return v;
}

template <int PS>
__device__ __forceinline__ void store_pixel(uint8_t *dst, uint32_t v) {
#pragma unroll
  for (int k = 0; k < PS; ++k) dst[k] = static_cast<uint8_t>(v >> (8 * k));
}

// 0x80 in every byte where a's byte is greater than the threshold byte
// (not_t4: the threshold's complement in every byte): the carry out of each
// byte of a + ~t, computed without carries crossing bytes.
__device__ __forceinline__ uint32_t bytes_above(uint32_t a, uint32_t not_t4) {
  const uint32_t low = (a & 0x7f7f7f7fu) + (not_t4 & 0x7f7f7f7fu);
  return ((a & not_t4) | (a & low) | (not_t4 & low)) & 0x80808080u;
}

// 16 pixels of PS bytes from an aligned address. The frame read for the last
// time goes through the streaming (evict-first) cache path.
template <int PS, bool LAST_USE>
__device__ __forceinline__ void load_group(const uint8_t *src, uint32_t (&words)[4 * PS]) {
#pragma unroll
  for (int i = 0; i < PS; ++i) {
    const uint4 *p = reinterpret_cast<const uint4 *>(src) + i;
    const uint4 v = LAST_USE ? __ldcs(p) : __ldg(p);
    words[4 * i + 0] = v.x;
    words[4 * i + 1] = v.y;
    words[4 * i + 2] = v.z;
    words[4 * i + 3] = v.w;
  }
}

template <int PS>
__device__ __forceinline__ void store_group(uint8_t *dst, const uint32_t (&words)[4 * PS]) {
#pragma unroll
  for (int i = 0; i < PS; ++i)
    __stcs(reinterpret_cast<uint4 *>(dst) + i,
           make_uint4(words[4 * i], words[4 * i + 1], words[4 * i + 2], words[4 * i + 3]));
}

// Where the thread's group starts: row y, first pixel x0; false past the end.
__device__ __forceinline__ bool group_position(int groups_per_row, int height, int *y, int *x0) {
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<long long>(groups_per_row) * height) return false;
  *y = static_cast<int>(idx / groups_per_row);
  *x0 = static_cast<int>(idx - static_cast<long long>(*y) * groups_per_row) * kGroup;
  return true;
}

inline unsigned group_blocks(int width, int height, int *groups_per_row) {
  *groups_per_row = (width + kGroup - 1) / kGroup;
  const long long threads = static_cast<long long>(*groups_per_row) * height;
  return static_cast<unsigned>((threads + kBlock - 1) / kBlock);
}

// Sums two counts over the block and adds the sums to total[0] and total[1]
// (one 64-bit atomic each per block; integer sums do not depend on the
// order). A block's sums fit in 32 bits (at most 256 threads x 64 bytes).
// Every thread of the block must call it, once per kernel; blockDim.x must be
// kBlock.
__device__ __forceinline__ void block_add2(uint32_t a, uint32_t b, unsigned long long *total) {
  __shared__ uint32_t warp_sums[2][kBlock / 32];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    a += __shfl_down_sync(0xffffffffu, a, offset);
    b += __shfl_down_sync(0xffffffffu, b, offset);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    warp_sums[0][warp] = a;
    warp_sums[1][warp] = b;
  }
  __syncthreads();
  if (warp == 0) {
    a = lane < kBlock / 32 ? warp_sums[0][lane] : 0u;
    b = lane < kBlock / 32 ? warp_sums[1][lane] : 0u;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      a += __shfl_down_sync(0xffffffffu, a, offset);
      b += __shfl_down_sync(0xffffffffu, b, offset);
    }
    if (lane == 0) {
      if (a != 0) atomicAdd(total, static_cast<unsigned long long>(a));
      if (b != 0) atomicAdd(total + 1, static_cast<unsigned long long>(b));
    }
  }
}

}  // namespace vis
}  // namespace cudadiff
