// Noise filters applied before difference encoding (the report's section 6):
// Gaussian blur, box mean and median over a K x K window, per channel.
//
// Every plane is filtered at its own size; a pixel's neighbours are the pixels
// of the same plane, and each byte of a pixel (a channel) is filtered with the
// same byte of its neighbours: B with B, G with G, NV12's U with U and V with V.
// Alpha and padding bytes (the A or x of BGRA, xRGB, ...) are copied unfiltered.
// Borders replicate the edge pixel.
//
// The arithmetic is integer, so both backends give identical bytes:
//
//   gaussian: 1D weights w[0..K-1] in 16-bit fixed point (sum exactly 65536;
//             gaussian_weights()), applied along rows, then along columns:
//               h = (sum_k w[k] * p[x + k - K/2] + 128) >> 8        (8 fraction bits kept)
//               out = (sum_k w[k] * h[y + k - K/2] + (1 << 23)) >> 24
//   box:      out = (sum of the K*K bytes + K*K/2) / (K*K)   (rounded to nearest)
//   median:   the true median of the K*K bytes (K = 3, 5, 7)
//
// The Gaussian's sigma: given, or (0) derived from K as OpenCV's
// getGaussianKernel does: sigma = 0.3 * ((K - 1) / 2 - 1) + 0.8, and for
// K = 3, 5, 7 OpenCV's fixed small kernels (1 2 1)/4, (1 4 6 4 1)/16 and
// (2 7 14 18 14 7 2)/64.
//
// Formats: the packed RGB family, GRAY8, and planar or semi-planar YUV (I420,
// YV12, NV12, NV21, Y444, Y42B).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cudadiff/frame.h"
#include "cudadiff/runtime.h"

namespace cudadiff {

#if defined(__CUDACC__)
#define CUDADIFF_GAUSS_HD __host__ __device__ __forceinline__
#else
#define CUDADIFF_GAUSS_HD inline
#endif

enum class NoiseFilterMethod : int { Gaussian = 0, Box = 1, Median = 2 };
const char *noise_filter_method_name(NoiseFilterMethod method);

constexpr int kMinFilterKernel = 3;
constexpr int kMaxConvKernel = 31;    // gaussian and box
constexpr int kMaxMedianKernel = 7;   // median
constexpr int kGaussWeightBits = 16;  // weights sum to 1 << 16

struct NoiseFilterSettings {
  NoiseFilterMethod method = NoiseFilterMethod::Gaussian;
  int kernel_size = 5;  // odd; 3..31 (gaussian, box) or 3..7 (median)
  double sigma = 0;     // gaussian only; <= 0: derived from kernel_size
};

// Throws Error when the settings are out of range (even or too large sizes).
void validate(const NoiseFilterSettings &settings);

// The sigma the Gaussian uses: `sigma` when > 0, else OpenCV's rule.
double gaussian_sigma(int kernel_size, double sigma);
// The K fixed-point weights (symmetric, non-negative, summing to exactly 65536).
std::vector<uint32_t> gaussian_weights(int kernel_size, double sigma);

// The rounding steps of the Gaussian, shared by both backends.
CUDADIFF_GAUSS_HD uint32_t gauss_round_horizontal(uint32_t sum) {
  return (sum + 128u) >> 8;
}
CUDADIFF_GAUSS_HD uint8_t gauss_round_vertical(uint32_t sum) {
  return static_cast<uint8_t>((sum + (1u << 23)) >> 24);
}

// Rounded division by n = K*K for the box mean without a divide:
// (sum + n/2) / n == umulhi(sum + n/2, magic) with magic = ceil(2^32 / n), exact
// whenever (sum + n/2) * n < 2^32, true for every window sum of 8-bit values
// with K <= 31 (tests/core check every sum).
struct BoxDivisor {
  uint32_t n = 1;
  uint32_t half = 0;
  uint32_t magic = 0;
};
BoxDivisor box_divisor(int kernel_size);
CUDADIFF_GAUSS_HD uint8_t box_mean(uint32_t sum, const BoxDivisor &d) {
  const uint64_t x = static_cast<uint64_t>(sum + d.half);
  return static_cast<uint8_t>((x * d.magic) >> 32);
}

class NoiseFilter {
 public:
  virtual ~NoiseFilter() = default;
  // Filters `in` into `out` (same format and size as given to create(); they
  // must not overlap). For the CUDA backend both are device views (or mapped
  // host memory on integrated GPUs) and the work is queued on the context's
  // stream, not waited for. Throws Error.
  virtual void process(const FrameView &in, const FrameView &out,
                       const NoiseFilterSettings &settings) = 0;

  // One object per negotiated format and size; backend chosen by the context.
  static std::unique_ptr<NoiseFilter> create(const Context &ctx, VideoFormat format, int width,
                                             int height);
  static bool supports(VideoFormat format);
};

// Per plane: bytes per pixel and which of them are filtered (bit i = byte i).
struct PlaneLayout {
  int pixel_stride = 1;
  unsigned filtered_mask = 1;
};
PlaneLayout noise_filter_plane_layout(VideoFormat format, int plane);

namespace detail {
std::unique_ptr<NoiseFilter> make_cuda_noise_filter(const Context &ctx, VideoFormat format,
                                                    int width, int height);
// The CPU backend runs a fast path (cuda/cpu/gauss_fast.cpp) that gives the
// same bytes as the reference (cuda/cpu/gauss.cpp: plain loops that define
// the filters). Tests compare the two; create() gives the fast one.
std::unique_ptr<NoiseFilter> make_fast_noise_filter(VideoFormat format, int width, int height);
std::unique_ptr<NoiseFilter> make_reference_noise_filter(VideoFormat format, int width, int height);
}  // namespace detail

}  // namespace cudadiff
