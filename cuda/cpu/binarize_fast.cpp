// Binarization, the CPU backend's fast path: the reference's steps
// (binarize.cpp) in two passes over blocks of rows on threads. The first
// computes a block's gray rows (vectorised, as grayscale_fast.cpp) and counts
// them into the thread's histogram while they are in cache; the thresholds
// come from the summed histogram by the reference's rules; the second writes
// the output (vectorised). tests/core/test_cpu_fast.cpp compares it with the
// reference.
#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cudadiff/binarize.h"
#include "fast.h"

namespace cudadiff {
namespace {

// Four histograms, used in turn, so that runs of equal values do not wait on
// each other's increments.
using Counts = std::array<uint32_t, 4 * 256>;

void count_row(const uint8_t *gray, int n, uint32_t *counts) {
  int x = 0;
  for (; x + 8 <= n; x += 8) {
    uint64_t v;
    std::memcpy(&v, gray + x, 8);
    ++counts[0 * 256 + (v & 0xff)];
    ++counts[1 * 256 + ((v >> 8) & 0xff)];
    ++counts[2 * 256 + ((v >> 16) & 0xff)];
    ++counts[3 * 256 + ((v >> 24) & 0xff)];
    ++counts[0 * 256 + ((v >> 32) & 0xff)];
    ++counts[1 * 256 + ((v >> 40) & 0xff)];
    ++counts[2 * 256 + ((v >> 48) & 0xff)];
    ++counts[3 * 256 + (v >> 56)];
  }
  for (; x < n; ++x) ++counts[gray[x]];
}

template <int PS, int R, int G, int B, bool AVERAGE>
CUDADIFF_ALWAYS_INLINE void gray_row_k(const uint8_t *CUDADIFF_RESTRICT src, int width,
                                       const fast::GrayRule &w, uint8_t *CUDADIFF_RESTRICT dst) {
  for (int x = 0; x < width; ++x)
    dst[x] = fast::gray_pixel<AVERAGE>(src[x * PS + R], src[x * PS + G], src[x * PS + B], w);
}

template <int PS, int R, int G, int B>
CUDADIFF_ALWAYS_INLINE void gray_row_layout(const uint8_t *src, int width, const fast::GrayRule &w,
                                            uint8_t *dst) {
  if (w.average)
    gray_row_k<PS, R, G, B, true>(src, width, w, dst);
  else
    gray_row_k<PS, R, G, B, false>(src, width, w, dst);
}

CUDADIFF_CPU_CLONES void gray_row(fast::RgbLayout layout, const uint8_t *src, int width,
                                  const fast::GrayRule &w, uint8_t *dst) {
  CUDADIFF_RGB_LAYOUT_CALL(layout, gray_row_layout, src, width, w, dst);
}

// One byte per pixel: above where gray > t, else below.
CUDADIFF_CPU_CLONES void threshold_row(const uint8_t *CUDADIFF_RESTRICT gray, int n, uint8_t t,
                                       uint8_t above, uint8_t below,
                                       uint8_t *CUDADIFF_RESTRICT dst) {
  for (int x = 0; x < n; ++x) dst[x] = gray[x] > t ? above : below;
}

// The value in R, G and B; the other byte (alpha, x) from the input.
template <int PS, int R, int G, int B>
CUDADIFF_ALWAYS_INLINE void threshold_same_row_k(const uint8_t *CUDADIFF_RESTRICT gray,
                                                 const uint8_t *CUDADIFF_RESTRICT src, int width,
                                                 uint8_t t, uint8_t above, uint8_t below,
                                                 uint8_t *CUDADIFF_RESTRICT dst) {
  for (int x = 0; x < width; ++x) {
    const uint8_t v = gray[x] > t ? above : below;
    for (int k = 0; k < PS; ++k)
      dst[x * PS + k] = (k == R || k == G || k == B) ? v : src[x * PS + k];
  }
}

CUDADIFF_CPU_CLONES void threshold_same_row(fast::RgbLayout layout, const uint8_t *gray,
                                            const uint8_t *src, int width, uint8_t t, uint8_t above,
                                            uint8_t below, uint8_t *dst) {
  CUDADIFF_RGB_LAYOUT_CALL(layout, threshold_same_row_k, gray, src, width, t, above, below, dst);
}

class FastBinarize final : public Binarize {
 public:
  FastBinarize(VideoFormat in_format, VideoFormat out_format, int width, int height)
      : in_format_(in_format), out_format_(out_format), width_(width), height_(height) {
    if (is_packed_rgb(in_format)) gray_.resize(static_cast<size_t>(width) * height);
    histogram_.fill(0);
  }

  void process(const FrameView &in, const FrameView &out, const BinarizeParams &params) override {
    validate(in, "binarize input");
    validate(out, "binarize output");
    validate(params);
    if (in.format != in_format_ || out.format != out_format_ || in.width != width_ ||
        in.height != height_ || out.width != width_ || out.height != height_)
      throw Error("binarize: frame does not match the configured formats and size");

    const bool rgb_in = is_packed_rgb(in.format);
    const bool need_histogram = params.method != ThresholdMethod::Fixed || params.want_peaks;
    const size_t bytes = (in.row_bytes(0) + out.row_bytes(0)) * static_cast<size_t>(height_);
    const int threads = fast::threads_for_bytes(bytes);
    const int blocks = threads == 1 ? 1 : 4 * threads;
    if (counts_.size() < static_cast<size_t>(threads)) counts_.resize(threads);

    // 1 and 2. The gray image (packed RGB only: the luma plane otherwise)
    // and the histogram, block by block.
    const uint8_t *gray = rgb_in ? gray_.data() : in.data[0];
    const size_t gray_stride = rgb_in ? static_cast<size_t>(width_) : in.stride[0];
    if (rgb_in || need_histogram) {
      for (int t = 0; t < threads; ++t) counts_[t].fill(0);
      const fast::RgbLayout layout = rgb_in ? fast::rgb_layout(in.format) : fast::RgbLayout::BGR;
      const fast::GrayRule rule = fast::gray_rule(params.gray);
      fast::parallel_jobs(blocks, threads, [&](int block, int t) {
        int y0, y1;
        fast::block_rows(height_, blocks, block, &y0, &y1);
        for (int y = y0; y < y1; ++y) {
          const uint8_t *g = gray + y * gray_stride;
          if (rgb_in) gray_row(layout, in.row(0, y), width_, rule, gray_.data() + y * gray_stride);
          if (need_histogram) count_row(g, width_, counts_[t].data());
        }
      });
    }

    // 3. Threshold.
    if (need_histogram) {
      histogram_.fill(0);
      for (int t = 0; t < threads; ++t)
        for (int i = 0; i < 4 * 256; ++i) histogram_[i % 256] += counts_[t][i];
      result_ = threshold_from_histogram(histogram_, params);
    } else {
      histogram_.fill(0);
      result_ = BinarizeResult();
      result_.threshold = params.threshold;
    }

    // 4. Output.
    const uint8_t t = static_cast<uint8_t>(result_.threshold);
    const uint8_t above = params.invert ? 0 : 255;
    const uint8_t below = params.invert ? 255 : 0;
    const bool rgb_out = is_packed_rgb(out.format);
    const fast::RgbLayout out_layout =
        rgb_out ? fast::rgb_layout(out.format) : fast::RgbLayout::BGR;
    fast::parallel_jobs(blocks, threads, [&](int block, int) {
      int y0, y1;
      fast::block_rows(height_, blocks, block, &y0, &y1);
      for (int y = y0; y < y1; ++y) {
        const uint8_t *g = gray + y * gray_stride;
        if (rgb_out)
          threshold_same_row(out_layout, g, in.row(0, y), width_, t, above, below, out.row(0, y));
        else
          threshold_row(g, width_, t, above, below, out.row(0, y));  // GRAY8, or Y of I420/NV12
      }
    });
    for (int p = 1; p < out.n_planes(); ++p)  // neutral chroma
      for (int y = 0; y < out.plane_height(p); ++y)
        std::memset(out.row(p, y), 128, out.row_bytes(p));
  }

  BinarizeResult result() const override { return result_; }
  Histogram histogram() const override { return histogram_; }

 private:
  VideoFormat in_format_, out_format_;
  int width_, height_;
  std::vector<uint8_t> gray_;   // packed RGB input only
  std::vector<Counts> counts_;  // per thread
  Histogram histogram_;
  BinarizeResult result_;
};

}  // namespace

namespace detail {
std::unique_ptr<Binarize> make_fast_binarize(VideoFormat in_format, VideoFormat out_format,
                                             int width, int height) {
  return std::make_unique<FastBinarize>(in_format, out_format, width, height);
}
}  // namespace detail

}  // namespace cudadiff
