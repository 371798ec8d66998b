// Binarization: every pixel becomes black (0) or white (255) by comparing its
// gray value with a threshold that is either fixed or derived from the frame's
// 256-bin histogram (the report's section 8, plus Otsu's method).
//
//   gray       the grayscale rule of cudadiff/grayscale.h (gray_value) for the
//              packed RGB family; GRAY8 is its own gray image; I420 and NV12
//              use their luma (Y) plane as it is.
//   histogram  hist[v] = number of pixels whose gray value is v (exact counts).
//   peaks      first = the bin with the highest count; second = the bin with the
//              highest count among the other non-empty bins. Ties go to the
//              lower gray level. With a single non-empty bin, second = first.
//   thresholds
//     otsu      the t in [0, 255] that maximises Otsu's between-class variance
//               of the split {gray <= t} | {gray > t}, computed exactly in
//               integers (see otsu::score); a split with an empty class scores
//               0; ties go to the lowest t (a one-valued frame gives 0).
//     two-peaks the report's rule: (first + second) / 2 (integer division),
//               clamped to [min_threshold, max_threshold]; when min > max the
//               result is max (std::min(std::max(t, min), max)).
//     fixed     `threshold` as given.
//   output     white (255) when gray > threshold, black (0) otherwise; `invert`
//              swaps the two. GRAY8, or the input format: packed RGB gets the
//              value in R, G and B with alpha / x bytes copied from the input;
//              I420 / NV12 get it in Y with neutral chroma (128).
//
// All of it is integer arithmetic, so the CPU reference and the CUDA backend
// agree bit for bit: histogram counts, peaks, threshold and every output byte.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "cudadiff/frame.h"
#include "cudadiff/grayscale.h"
#include "cudadiff/runtime.h"

namespace cudadiff {

enum class ThresholdMethod { Otsu = 0, TwoPeaks = 1, Fixed = 2 };

struct BinarizeParams {
  ThresholdMethod method = ThresholdMethod::Otsu;
  GrayMethod gray = GrayMethod::Bt601;
  int threshold = 128;      // fixed: 0..255
  int min_threshold = 50;   // two-peaks clamp: 0..255
  int max_threshold = 200;  // two-peaks clamp: 0..255
  bool invert = false;      // white where gray <= threshold instead
  // Fixed only: still compute the histogram so that the result has the peaks
  // (otherwise the fixed method skips the histogram and peaks are -1).
  bool want_peaks = false;
};

// What one frame's threshold came from. A plain struct: the CUDA backend
// writes it on the device and the host reads it after the stream is synchronised.
struct BinarizeResult {
  int32_t threshold = -1;  // the threshold applied to the frame (0..255)
  int32_t peak1 = -1;      // gray level of the highest histogram bin (-1: no histogram)
  int32_t peak2 = -1;      // gray level of the second highest bin
  uint32_t peak1_count = 0;
  uint32_t peak2_count = 0;
};

using Histogram = std::array<uint32_t, 256>;

// The rules on a histogram: the reference definitions (plain loops).
struct HistogramPeaks {
  int first = -1, second = -1;
  uint32_t first_count = 0, second_count = 0;
};
HistogramPeaks histogram_peaks(const Histogram &hist);
int otsu_threshold(const Histogram &hist);
int two_peaks_threshold(const HistogramPeaks &peaks, int min_threshold, int max_threshold);
// The threshold `params` asks for (fixed ignores the histogram) and the peaks.
BinarizeResult threshold_from_histogram(const Histogram &hist, const BinarizeParams &params);
// Throws Error when a threshold parameter is outside 0..255.
void validate(const BinarizeParams &params);

// CUDA only: how the work is split into kernels. Same output, histogram and
// result on every path (bench_binarize measures them all).
//
// single_pass (default): when the frame needs a histogram, one kernel does
// everything: each block takes chunks of the frame from a counter, computes
// and counts their gray values, keeps them on chip and writes their output
// with a guess of the threshold (the previous frame's); the block that counts
// last computes the threshold while the others wait for it; then every block
// rewrites the pixels the guess got wrong. The frame is read once, no gray
// image is written, and there is one launch per frame. Blocks that cannot
// keep more chunks on chip (only when few blocks run at once, or for very
// large frames) put the gray values of further chunks in a scratch buffer.
// groups_per_thread, blocks_per_sm (single pass; for benchmarks and tests):
// 16-pixel groups each thread keeps on chip, 1..4 (0: 4), and a cap on the
// blocks per SM (0: as many as can be resident).
//
// single_pass = false: two launches, a histogram pass (whose last block
// computes the threshold) and an output pass. keep_gray (default): the first
// pass writes the gray image (1 byte per pixel) and the output pass reads it;
// otherwise the output pass reads the input again and recomputes gray.
// Formats with alpha / x written back in the input format always re-read the
// input (the alpha byte is needed anyway).
//
// The fixed threshold without peaks needs no histogram: one output pass.
struct BinarizeOptions {
  bool keep_gray = true;
  bool single_pass = true;
  int groups_per_thread = 0;
  int blocks_per_sm = 0;
};

class Binarize {
 public:
  virtual ~Binarize() = default;
  // Binarizes `in` into `out` (the formats and size given to create()). For
  // the CUDA backend both views hold device pointers (or mapped host memory on
  // integrated GPUs); the work is queued on the context's stream, not waited
  // for, and the histogram and threshold never leave the device.
  virtual void process(const FrameView &in, const FrameView &out, const BinarizeParams &params) = 0;
  // The last frame's threshold and peaks. CUDA: valid once the context's
  // stream has been synchronised after process() (the element's base class
  // does so once per frame); the few bytes come back with the frame.
  virtual BinarizeResult result() const = 0;
  // The last frame's histogram (all zero when that frame needed none).
  // CUDA: copies 1 KiB from the device and synchronises: for tests and
  // diagnostics, never needed per frame.
  virtual Histogram histogram() const = 0;
  // Diagnostics: whether the last process() ran as the single-pass kernel
  // (BinarizeOptions::single_pass). Always false for the CPU backend.
  virtual bool used_single_pass() const { return false; }

  // Backend chosen by the context; device buffers are allocated here, once.
  // Throws Error for unsupported formats or sizes.
  static std::unique_ptr<Binarize> create(const Context &ctx, VideoFormat in_format,
                                          VideoFormat out_format, int width, int height,
                                          const BinarizeOptions &options = BinarizeOptions());
  // Input: packed RGB, GRAY8, I420, NV12. Output: GRAY8 or the input format.
  static bool supports(VideoFormat in_format, VideoFormat out_format);
};

namespace detail {
std::unique_ptr<Binarize> make_cuda_binarize(const Context &ctx, VideoFormat in_format,
                                             VideoFormat out_format, int width, int height,
                                             const BinarizeOptions &options);
// The CPU backend runs a fast path (cuda/cpu/binarize_fast.cpp) that gives
// the same bytes, histogram and result as the reference (cuda/cpu/binarize.cpp:
// plain loops that define the operation). Tests compare the two; create()
// gives the fast one. Both take formats and sizes create() has checked.
std::unique_ptr<Binarize> make_fast_binarize(VideoFormat in_format, VideoFormat out_format,
                                             int width, int height);
std::unique_ptr<Binarize> make_reference_binarize(VideoFormat in_format, VideoFormat out_format,
                                                  int width, int height);
}  // namespace detail

// Otsu's criterion in exact integer arithmetic, shared by both backends.
//
// With N pixels of total gray sum S, and n0, S0 the count and gray sum of the
// pixels <= t (n1 = N - n0), the between-class variance is
//   w0 w1 (mu0 - mu1)^2 = (N S0 - n0 S)^2 / (N^2 n0 n1).
// N^2 is common to every t, so score(t) = D^2 / (n0 n1) with D = N S0 - n0 S.
// For N < 2^32: |D| < 2^72 (three 32-bit limbs), D^2 < 2^144 (six limbs),
// n0 n1 < 2^64 (two limbs); two scores compare as D_a^2 n_b > D_b^2 n_a in
// 256 bits. No floating point, so no rounding can differ between backends.
namespace otsu {

struct Score {
  uint32_t num[6];  // D^2, least significant limb first
  uint32_t den[2];  // n0 * n1; 0 when a class is empty (then the score is 0)
};

// out = a * b, limbs of 32 bits, least significant first.
template <int A, int B>
CUDADIFF_HD void mul_limbs(const uint32_t (&a)[A], const uint32_t (&b)[B], uint32_t (&out)[A + B]) {
#if defined(__CUDACC__)
#pragma unroll
#endif
  for (int i = 0; i < A + B; ++i) out[i] = 0;
#if defined(__CUDACC__)
#pragma unroll
#endif
  for (int i = 0; i < A; ++i) {
    uint64_t carry = 0;
#if defined(__CUDACC__)
#pragma unroll
#endif
    for (int j = 0; j < B; ++j) {
      // At most (2^32-1)^2 + 2 (2^32-1) = 2^64 - 1: no overflow.
      const uint64_t t = static_cast<uint64_t>(a[i]) * b[j] + out[i + j] + carry;
      out[i + j] = static_cast<uint32_t>(t);
      carry = t >> 32;
    }
    out[i + B] = static_cast<uint32_t>(carry);
  }
}

// -1, 0, 1 as a <, ==, > b.
template <int N>
CUDADIFF_HD int compare_limbs(const uint32_t (&a)[N], const uint32_t (&b)[N]) {
  int result = 0;
#if defined(__CUDACC__)
#pragma unroll
#endif
  for (int i = N - 1; i >= 0; --i)
    if (result == 0 && a[i] != b[i]) result = a[i] > b[i] ? 1 : -1;
  return result;
}

// x * y for x < 2^32, y < 2^64 as three limbs.
CUDADIFF_HD void mul_u32_u64(uint32_t x, uint64_t y, uint32_t (&out)[3]) {
  const uint64_t lo = static_cast<uint64_t>(x) * static_cast<uint32_t>(y);
  const uint64_t hi = static_cast<uint64_t>(x) * static_cast<uint32_t>(y >> 32) + (lo >> 32);
  out[0] = static_cast<uint32_t>(lo);
  out[1] = static_cast<uint32_t>(hi);
  out[2] = static_cast<uint32_t>(hi >> 32);
}

// |D| = |N S0 - n0 S| for a split of `total` pixels (gray sum `total_sum`)
// into n0 pixels of gray sum sum0 at or below t and the rest above it.
CUDADIFF_HD void abs_difference(uint32_t total, uint64_t total_sum, uint32_t n0, uint64_t sum0,
                                uint32_t (&d)[3]) {
  uint32_t a[3], b[3];
  mul_u32_u64(total, sum0, a);    // N S0
  mul_u32_u64(n0, total_sum, b);  // n0 S
  // Subtract the smaller from the larger, with borrow.
  const bool a_larger = compare_limbs(a, b) >= 0;
  uint64_t borrow = 0;
#if defined(__CUDACC__)
#pragma unroll
#endif
  for (int i = 0; i < 3; ++i) {
    const uint64_t x = a_larger ? a[i] : b[i];
    const uint64_t y = (a_larger ? b[i] : a[i]) + borrow;
    d[i] = static_cast<uint32_t>(x - y);
    borrow = x < y ? 1 : 0;
  }
}

// The exact score of that split.
CUDADIFF_HD Score score(uint32_t total, uint64_t total_sum, uint32_t n0, uint64_t sum0) {
  Score s;
  const uint32_t n1 = total - n0;
  const uint64_t den = static_cast<uint64_t>(n0) * n1;
  s.den[0] = static_cast<uint32_t>(den);
  s.den[1] = static_cast<uint32_t>(den >> 32);
  uint32_t d[3];
  abs_difference(total, total_sum, n0, sum0, d);
  mul_limbs(d, d, s.num);
  return s;
}

// The same score in double precision, from the exact |D|: a handful of
// correctly rounded operations, so its relative error is below 1e-15 (fused
// multiply-adds only make it smaller). 0 exactly when the exact score is 0.
CUDADIFF_HD double approx_score(uint32_t total, uint64_t total_sum, uint32_t n0, uint64_t sum0) {
  const uint32_t n1 = total - n0;
  if (n0 == 0 || n1 == 0) return 0.0;
  uint32_t d[3];
  abs_difference(total, total_sum, n0, sum0, d);
  const double dd = static_cast<double>(d[2]) * 18446744073709551616.0 +  // 2^64
                    static_cast<double>((static_cast<uint64_t>(d[1]) << 32) | d[0]);
  return dd * dd / (static_cast<double>(n0) * static_cast<double>(n1));
}

// Scores whose approximations are within this relative distance of the
// largest one may be the maximum; far more than twice the error bound above.
constexpr double kCandidateTolerance = 1e-12;

CUDADIFF_HD bool is_zero_den(const Score &s) {
  return (s.den[0] | s.den[1]) == 0;
}

// True when score a is strictly greater than score b.
CUDADIFF_HD bool greater(const Score &a, const Score &b) {
  if (is_zero_den(a)) return false;  // a = 0 and scores are >= 0
  if (is_zero_den(b)) {              // b = 0: a > 0 when D_a != 0
    uint32_t any = 0;
#if defined(__CUDACC__)
#pragma unroll
#endif
    for (int i = 0; i < 6; ++i) any |= a.num[i];
    return any != 0;
  }
  uint32_t lhs[8], rhs[8];
  mul_limbs(a.num, b.den, lhs);
  mul_limbs(b.num, a.den, rhs);
  return compare_limbs(lhs, rhs) > 0;
}

// A parallel arg-max that gives the sequential answer (the lowest t of the
// largest exact score) with exact arithmetic only where it matters: t is a
// candidate when approx_score(t) >= max approx_score * (1 - kCandidateTolerance)
// (every exact maximum is one). This order puts candidates first, then
// compares two candidates exactly; splits with the same n0 hold the same
// pixels, so they tie without arithmetic. A strict total order on distinct t,
// so every reduction order gives the same winner.
struct Candidate {
  int t;
  bool candidate;
  uint32_t n0;
  uint64_t sum0;
};

CUDADIFF_HD bool better(const Candidate &a, const Candidate &b, uint32_t total,
                        uint64_t total_sum) {
  if (a.candidate != b.candidate) return a.candidate;
  if (a.candidate && a.n0 != b.n0) {
    const Score sa = score(total, total_sum, a.n0, a.sum0);
    const Score sb = score(total, total_sum, b.n0, b.sum0);
    if (greater(sa, sb)) return true;
    if (greater(sb, sa)) return false;
  }
  return a.t < b.t;
}

}  // namespace otsu

}  // namespace cudadiff
