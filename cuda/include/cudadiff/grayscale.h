// Grayscale: one gray value per pixel from its R, G, B (the report's filter).
//
//   average: (R + G + B + 1) / 3                 (rounded to nearest)
//   bt601:   (77 R + 150 G + 29 B + 128) >> 8    (0.299, 0.587, 0.114 in 8.8 fixed point)
//   bt709:   (54 R + 183 G + 19 B + 128) >> 8    (0.2126, 0.7152, 0.0722 in 8.8 fixed point)
//
// Integer arithmetic, so the CPU and CUDA backends agree bit for bit.
// Input: the packed RGB family or GRAY8 (copied). Output: GRAY8, or the input
// format with the gray value in R, G and B and every other byte (alpha, x)
// copied from the input.
#pragma once

#include <cstdint>
#include <memory>

#include "cudadiff/frame.h"
#include "cudadiff/runtime.h"

namespace cudadiff {

enum class GrayMethod { Average = 0, Bt601 = 1, Bt709 = 2 };

// The per-pixel rule, shared by both backends (host and device code).
#if defined(__CUDACC__)
#define CUDADIFF_HD __host__ __device__ __forceinline__
#else
#define CUDADIFF_HD inline
#endif

CUDADIFF_HD uint8_t gray_value(GrayMethod method, unsigned r, unsigned g, unsigned b) {
  switch (method) {
    case GrayMethod::Average:
      return static_cast<uint8_t>((r + g + b + 1) / 3);
    case GrayMethod::Bt709:
      return static_cast<uint8_t>((54 * r + 183 * g + 19 * b + 128) >> 8);
    case GrayMethod::Bt601:
    default:
      return static_cast<uint8_t>((77 * r + 150 * g + 29 * b + 128) >> 8);
  }
}

// The same rule as one weighted sum in 16.16 fixed point, which is what the
// CUDA kernel evaluates: (wr R + wg G + wb B + bias) >> 16. For bt601/bt709
// these are the 8.8 weights scaled by 256; for average, 21846 / 65536 is close
// enough to 1/3 that the result equals (sum + 1) / 3 for every sum up to 765
// (tests/core check all 2^24 colours).
struct GrayWeights {
  uint32_t wr, wg, wb, bias;
};

CUDADIFF_HD GrayWeights gray_weights(GrayMethod method) {
  switch (method) {
    case GrayMethod::Average:
      return {21846u, 21846u, 21846u, 21846u};
    case GrayMethod::Bt709:
      return {54u << 8, 183u << 8, 19u << 8, 128u << 8};
    case GrayMethod::Bt601:
    default:
      return {77u << 8, 150u << 8, 29u << 8, 128u << 8};
  }
}

CUDADIFF_HD uint8_t gray_weighted(const GrayWeights &w, unsigned r, unsigned g, unsigned b) {
  return static_cast<uint8_t>((w.wr * r + w.wg * g + w.wb * b + w.bias) >> 16);
}

class Grayscale {
 public:
  virtual ~Grayscale() = default;
  // Converts `in` into `out` (same width and height). For the CUDA backend
  // both views hold device pointers (or mapped host memory on integrated
  // GPUs) and the work is queued on the context's stream, not waited for.
  virtual void process(const FrameView &in, const FrameView &out, GrayMethod method) = 0;

  // Backend chosen by the context. Throws Error for unsupported formats.
  static std::unique_ptr<Grayscale> create(const Context &ctx, VideoFormat in_format,
                                           VideoFormat out_format);
  static bool supports(VideoFormat in_format, VideoFormat out_format);
};

namespace detail {
std::unique_ptr<Grayscale> make_cuda_grayscale(const Context &ctx);
// The CPU backend runs a fast path (cuda/cpu/grayscale_fast.cpp) that gives
// the same bytes as the reference (cuda/cpu/grayscale.cpp: plain loops that
// define the operation). Tests compare the two; create() gives the fast one.
std::unique_ptr<Grayscale> make_fast_grayscale();
std::unique_ptr<Grayscale> make_reference_grayscale();
}  // namespace detail

}  // namespace cudadiff
