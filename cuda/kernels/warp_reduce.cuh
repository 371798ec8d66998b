// Sums, maxima and minima over the 32 threads of a warp (every thread gets
// the result; all 32 must call): the reduction instructions from sm_80 on,
// a butterfly of shuffles before. Shared by the version 2 codec's kernels.
#pragma once

#include <cstdint>

namespace cudadiff {

__device__ __forceinline__ uint32_t warp_sum_u32(uint32_t v) {
#if __CUDA_ARCH__ >= 800
  return __reduce_add_sync(0xffffffffu, v);
#else
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
#endif
}
__device__ __forceinline__ uint32_t warp_max_u32(uint32_t v) {
#if __CUDA_ARCH__ >= 800
  return __reduce_max_sync(0xffffffffu, v);
#else
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
#endif
}
__device__ __forceinline__ uint32_t warp_min_u32(uint32_t v) {
#if __CUDA_ARCH__ >= 800
  return __reduce_min_sync(0xffffffffu, v);
#else
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
#endif
}

}  // namespace cudadiff
