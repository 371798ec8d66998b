// Grayscale, the CPU backend's fast path: the reference's rule (gray_value,
// in 16-bit lanes) in loops specialised for each packed RGB byte layout, so
// that the compiler vectorises them (fast.h); blocks of rows on threads.
// tests/core/test_cpu_fast.cpp compares it with the reference (grayscale.cpp).
#include <cstring>
#include <memory>
#include <string>

#include "cudadiff/grayscale.h"
#include "fast.h"

namespace cudadiff {
namespace {

template <int PS, int R, int G, int B, bool AVERAGE>
CUDADIFF_ALWAYS_INLINE void gray_row_k(const uint8_t *CUDADIFF_RESTRICT src, int width,
                                       const fast::GrayRule &w, uint8_t *CUDADIFF_RESTRICT dst) {
  for (int x = 0; x < width; ++x)
    dst[x] = fast::gray_pixel<AVERAGE>(src[x * PS + R], src[x * PS + G], src[x * PS + B], w);
}

// The gray value in R, G and B, every other byte (alpha, x) from the input.
template <int PS, int R, int G, int B, bool AVERAGE>
CUDADIFF_ALWAYS_INLINE void gray_same_row_k(const uint8_t *CUDADIFF_RESTRICT src, int width,
                                            const fast::GrayRule &w,
                                            uint8_t *CUDADIFF_RESTRICT dst) {
  for (int x = 0; x < width; ++x) {
    const uint8_t gray =
        fast::gray_pixel<AVERAGE>(src[x * PS + R], src[x * PS + G], src[x * PS + B], w);
    for (int k = 0; k < PS; ++k)
      dst[x * PS + k] = (k == R || k == G || k == B) ? gray : src[x * PS + k];
  }
}

template <int PS, int R, int G, int B>
CUDADIFF_ALWAYS_INLINE void gray_row_layout(const uint8_t *src, int width, const fast::GrayRule &w,
                                            bool same, uint8_t *dst) {
  if (same) {
    if (w.average)
      gray_same_row_k<PS, R, G, B, true>(src, width, w, dst);
    else
      gray_same_row_k<PS, R, G, B, false>(src, width, w, dst);
  } else {
    if (w.average)
      gray_row_k<PS, R, G, B, true>(src, width, w, dst);
    else
      gray_row_k<PS, R, G, B, false>(src, width, w, dst);
  }
}

CUDADIFF_CPU_CLONES void gray_rows(fast::RgbLayout layout, const uint8_t *src, size_t src_stride,
                                   int width, int rows, const fast::GrayRule &w, bool same,
                                   uint8_t *dst, size_t dst_stride) {
  for (int y = 0; y < rows; ++y)
    CUDADIFF_RGB_LAYOUT_CALL(layout, gray_row_layout, src + y * src_stride, width, w, same,
                             dst + y * dst_stride);
}

class FastGrayscale final : public Grayscale {
 public:
  void process(const FrameView &in, const FrameView &out, GrayMethod method) override {
    validate(in, "grayscale input");
    validate(out, "grayscale output");
    if (in.width != out.width || in.height != out.height)
      throw Error("grayscale: input and output sizes differ");
    if (!Grayscale::supports(in.format, out.format))
      throw Error(std::string("grayscale: cannot convert ") + format_name(in.format) + " to " +
                  format_name(out.format));
    if (in.format == VideoFormat::GRAY8) {
      copy_frame_host(in, out);
      return;
    }
    const fast::RgbLayout layout = fast::rgb_layout(in.format);
    const fast::GrayRule rule = fast::gray_rule(method);
    const bool same = out.format == in.format;
    const size_t bytes = (in.row_bytes(0) + out.row_bytes(0)) * static_cast<size_t>(in.height);
    const int threads = fast::threads_for_bytes(bytes);
    const int blocks = threads == 1 ? 1 : 4 * threads;
    fast::parallel_jobs(blocks, threads, [&](int block, int) {
      int y0, y1;
      fast::block_rows(in.height, blocks, block, &y0, &y1);
      gray_rows(layout, in.row(0, y0), in.stride[0], in.width, y1 - y0, rule, same, out.row(0, y0),
                out.stride[0]);
    });
  }
};

}  // namespace

namespace detail {
std::unique_ptr<Grayscale> make_fast_grayscale() {
  return std::make_unique<FastGrayscale>();
}
}  // namespace detail

}  // namespace cudadiff
