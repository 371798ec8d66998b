// What the CPU backend's fast paths share (private to cuda/cpu).
//
// The fast paths are plain loops over the bytes of a row that the compiler
// vectorises (the core is built with -O3 or -ftree-vectorize). The functions
// that hold those loops are compiled several times, for the instruction sets
// of x86-64 CPUs, and the dynamic linker picks one version per function when
// the library is loaded (GCC/clang target_clones, an ifunc): AVX-512
// (x86-64-v4, GCC 12 and later), AVX2, and the SSE2 baseline. aarch64 (Jetson)
// has NEON in its baseline, so one version is enough there.
//
// Two rules follow from how clones are made:
//  - a cloned function is not a template (clang refuses); it dispatches to
//    templates marked CUDADIFF_ALWAYS_INLINE, which are then compiled with
//    the clone's instruction set;
//  - a cloned function holds no OpenMP region (the outlined region would be
//    compiled for the baseline only). Threads are started by plain functions
//    (parallel_jobs below) that call the cloned ones.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>

#include "cudadiff/runtime.h"

// Sanitizers instrument the resolvers that target_clones makes, and the
// dynamic linker runs those before the sanitizer's runtime is ready (a crash
// at load time): sanitized builds get the baseline version only (meson
// defines CUDADIFF_NO_CPU_CLONES for b_sanitize; the checks below catch the
// sanitizers a compiler announces).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CUDADIFF_NO_CPU_CLONES 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define CUDADIFF_NO_CPU_CLONES 1
#endif
#endif

#if defined(CUDADIFF_NO_CPU_CLONES)
#define CUDADIFF_CPU_CLONES
#elif defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__) && \
    __GNUC__ >= 12
#define CUDADIFF_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#elif defined(__x86_64__) && defined(__linux__) && \
    ((defined(__clang__) && __clang_major__ >= 14) || (!defined(__clang__) && __GNUC__ >= 8))
// GCC 11 has no x86-64-v4 clone; clang 14 checks it wrongly (not by features).
#define CUDADIFF_CPU_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CUDADIFF_CPU_CLONES
#endif

#if defined(__GNUC__) || defined(__clang__)
#define CUDADIFF_ALWAYS_INLINE inline __attribute__((always_inline))
#define CUDADIFF_RESTRICT __restrict__
#else
#define CUDADIFF_ALWAYS_INLINE inline
#define CUDADIFF_RESTRICT
#endif

#include "cudadiff/frame.h"
#include "cudadiff/grayscale.h"

namespace cudadiff {
namespace fast {

// The byte layouts of the packed RGB formats (alpha and x formats share one).
// Fast paths are templates on the pixel stride and the offsets of R, G and B;
// CUDADIFF_RGB_LAYOUT_CALL calls FN<PS, R, G, B>(args...) for a layout.
enum class RgbLayout { BGR, RGB, BGRx, RGBx, xBGR, xRGB };

inline RgbLayout rgb_layout(VideoFormat format) {
  const FormatInfo &fi = format_info(format);
  if (fi.pixel_stride[0] == 3) return fi.r == 2 ? RgbLayout::BGR : RgbLayout::RGB;
  switch (fi.r) {
    case 2:
      return RgbLayout::BGRx;
    case 0:
      return RgbLayout::RGBx;
    case 3:
      return RgbLayout::xBGR;
    default:
      return RgbLayout::xRGB;
  }
}

#define CUDADIFF_RGB_LAYOUT_CALL(layout, FN, ...) \
  do {                                            \
    switch (layout) {                             \
      case ::cudadiff::fast::RgbLayout::BGR:      \
        FN<3, 2, 1, 0>(__VA_ARGS__);              \
        break;                                    \
      case ::cudadiff::fast::RgbLayout::RGB:      \
        FN<3, 0, 1, 2>(__VA_ARGS__);              \
        break;                                    \
      case ::cudadiff::fast::RgbLayout::BGRx:     \
        FN<4, 2, 1, 0>(__VA_ARGS__);              \
        break;                                    \
      case ::cudadiff::fast::RgbLayout::RGBx:     \
        FN<4, 0, 1, 2>(__VA_ARGS__);              \
        break;                                    \
      case ::cudadiff::fast::RgbLayout::xBGR:     \
        FN<4, 3, 2, 1>(__VA_ARGS__);              \
        break;                                    \
      case ::cudadiff::fast::RgbLayout::xRGB:     \
        FN<4, 1, 2, 3>(__VA_ARGS__);              \
        break;                                    \
    }                                             \
  } while (0)

// gray_value() in 16-bit lanes: average (r + g + b + 1) / 3, or the 8.8
// weights of BT.601 / BT.709 ((wr r + wg g + wb b + 128) >> 8 <= 65408).
struct GrayRule {
  bool average;
  uint16_t wr, wg, wb;
};

inline GrayRule gray_rule(GrayMethod method) {
  switch (method) {
    case GrayMethod::Average:
      return {true, 0, 0, 0};
    case GrayMethod::Bt709:
      return {false, 54, 183, 19};
    case GrayMethod::Bt601:
    default:
      return {false, 77, 150, 29};
  }
}

template <bool AVERAGE>
CUDADIFF_ALWAYS_INLINE uint8_t gray_pixel(uint16_t r, uint16_t g, uint16_t b, const GrayRule &w) {
  if (AVERAGE) return static_cast<uint8_t>(static_cast<uint16_t>(r + g + b + 1) / 3);
  return static_cast<uint8_t>(static_cast<uint16_t>(w.wr * r + w.wg * g + w.wb * b + 128) >> 8);
}

// Threads worth starting for `bytes` of work touched once or a few times:
// each thread gets at least `grain` bytes (waking a thread costs tens of
// microseconds, far more on a busy machine), and never more than
// cpu_threads().
inline int threads_for_bytes(size_t bytes, size_t grain = size_t(1) << 18) {
  const size_t useful = std::max<size_t>(1, bytes / grain);
  return static_cast<int>(std::min<size_t>(useful, static_cast<size_t>(cpu_threads())));
}

// Runs job(j, t) for j in [0, jobs) on `threads` threads (t: the thread's index,
// below `threads`, for per-thread scratch), jobs taken in order as threads
// become free. One thread: a plain loop, no team started.
void parallel_jobs(int jobs, int threads, const std::function<void(int job, int thread)> &job);

// Rows [begin, end) of block `block` when `rows` rows are cut into `blocks`
// contiguous blocks of nearly equal size.
inline void block_rows(int rows, int blocks, int block, int *begin, int *end) {
  *begin = static_cast<int>(static_cast<long long>(rows) * block / blocks);
  *end = static_cast<int>(static_cast<long long>(rows) * (block + 1) / blocks);
}

}  // namespace fast
}  // namespace cudadiff
