// Binarization, the reference: gray image, histogram, threshold rule, output,
// each as a plain loop (OpenMP across rows). cudadiff/binarize.h states the rules.
// The CPU backend runs the fast path of binarize_fast.cpp (same results, tested).
#include "cudadiff/binarize.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace cudadiff {

HistogramPeaks histogram_peaks(const Histogram &hist) {
  HistogramPeaks p;
  p.first = 0;
  for (int v = 1; v < 256; ++v)
    if (hist[v] > hist[p.first]) p.first = v;  // strict: ties keep the lower level
  for (int v = 0; v < 256; ++v) {
    if (v == p.first || hist[v] == 0) continue;
    if (p.second < 0 || hist[v] > hist[p.second]) p.second = v;
  }
  if (p.second < 0) p.second = p.first;
  p.first_count = hist[p.first];
  p.second_count = hist[p.second];
  return p;
}

int otsu_threshold(const Histogram &hist) {
  uint32_t total = 0;
  uint64_t total_sum = 0;
  for (int v = 0; v < 256; ++v) {
    total += hist[v];
    total_sum += static_cast<uint64_t>(v) * hist[v];
  }
  int best_t = 0;
  otsu::Score best{};
  uint32_t n0 = 0;
  uint64_t sum0 = 0;
  for (int t = 0; t < 256; ++t) {
    n0 += hist[t];
    sum0 += static_cast<uint64_t>(t) * hist[t];
    const otsu::Score s = otsu::score(total, total_sum, n0, sum0);
    if (t == 0 || otsu::greater(s, best)) {  // strict: ties keep the lowest t
      best = s;
      best_t = t;
    }
  }
  return best_t;
}

int two_peaks_threshold(const HistogramPeaks &peaks, int min_threshold, int max_threshold) {
  const int mean = (peaks.first + peaks.second) / 2;
  return std::min(std::max(mean, min_threshold), max_threshold);
}

void validate(const BinarizeParams &params) {
  const auto in_range = [](int v) { return v >= 0 && v <= 255; };
  if (!in_range(params.threshold) || !in_range(params.min_threshold) ||
      !in_range(params.max_threshold))
    throw Error("binarize: thresholds must be within 0..255 (threshold " +
                std::to_string(params.threshold) + ", min " + std::to_string(params.min_threshold) +
                ", max " + std::to_string(params.max_threshold) + ")");
}

BinarizeResult threshold_from_histogram(const Histogram &hist, const BinarizeParams &params) {
  BinarizeResult r;
  const HistogramPeaks peaks = histogram_peaks(hist);
  r.peak1 = peaks.first;
  r.peak2 = peaks.second;
  r.peak1_count = peaks.first_count;
  r.peak2_count = peaks.second_count;
  switch (params.method) {
    case ThresholdMethod::Otsu:
      r.threshold = otsu_threshold(hist);
      break;
    case ThresholdMethod::TwoPeaks:
      r.threshold = two_peaks_threshold(peaks, params.min_threshold, params.max_threshold);
      break;
    case ThresholdMethod::Fixed:
    default:
      r.threshold = params.threshold;
      break;
  }
  return r;
}

bool Binarize::supports(VideoFormat in_format, VideoFormat out_format) {
  const bool yuv = in_format == VideoFormat::I420 || in_format == VideoFormat::NV12;
  if (!is_packed_rgb(in_format) && !yuv && in_format != VideoFormat::GRAY8) return false;
  return out_format == VideoFormat::GRAY8 || out_format == in_format;
}

namespace {

class CpuBinarize final : public Binarize {
 public:
  CpuBinarize(VideoFormat in_format, VideoFormat out_format, int width, int height)
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
    [[maybe_unused]] const int threads = cpu_threads();

    // 1. The gray image: the luma plane of GRAY8 / I420 / NV12 as it is,
    //    gray_value() of each pixel for packed RGB.
    const uint8_t *gray = in.data[0];
    size_t gray_stride = in.stride[0];
    if (is_packed_rgb(in.format)) {
      const FormatInfo &fi = format_info(in.format);
      const int ps = fi.pixel_stride[0];
#pragma omp parallel for num_threads(threads) schedule(static)
      for (int y = 0; y < height_; ++y) {
        const uint8_t *src = in.row(0, y);
        uint8_t *dst = gray_.data() + static_cast<size_t>(y) * width_;
        for (int x = 0; x < width_; ++x) {
          const uint8_t *px = src + x * ps;
          dst[x] = gray_value(params.gray, px[fi.r], px[fi.g], px[fi.b]);
        }
      }
      gray = gray_.data();
      gray_stride = static_cast<size_t>(width_);
    }

    // 2. Histogram (only when the threshold or the peaks need it).
    const bool need_histogram = params.method != ThresholdMethod::Fixed || params.want_peaks;
    if (need_histogram) {
      uint32_t hist[256] = {};
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : hist[:256])
      for (int y = 0; y < height_; ++y) {
        const uint8_t *row = gray + static_cast<size_t>(y) * gray_stride;
        for (int x = 0; x < width_; ++x) ++hist[row[x]];
      }
      std::copy(hist, hist + 256, histogram_.begin());
      // 3. Threshold.
      result_ = threshold_from_histogram(histogram_, params);
    } else {
      histogram_.fill(0);
      result_ = BinarizeResult();
      result_.threshold = params.threshold;
    }

    // 4. Output.
    const int t = result_.threshold;
    const uint8_t above = params.invert ? 0 : 255;
    const uint8_t below = params.invert ? 255 : 0;
    if (out.format == VideoFormat::GRAY8 || !is_packed_rgb(out.format)) {
      // GRAY8, or the Y plane of I420 / NV12.
#pragma omp parallel for num_threads(threads) schedule(static)
      for (int y = 0; y < height_; ++y) {
        const uint8_t *src = gray + static_cast<size_t>(y) * gray_stride;
        uint8_t *dst = out.row(0, y);
        for (int x = 0; x < width_; ++x) dst[x] = src[x] > t ? above : below;
      }
      for (int p = 1; p < out.n_planes(); ++p)  // neutral chroma
        for (int y = 0; y < out.plane_height(p); ++y)
          std::memset(out.row(p, y), 128, out.row_bytes(p));
      return;
    }
    const FormatInfo &fi = format_info(out.format);
    const int ps = fi.pixel_stride[0];
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int y = 0; y < height_; ++y) {
      const uint8_t *src = in.row(0, y);
      const uint8_t *g = gray + static_cast<size_t>(y) * gray_stride;
      uint8_t *dst = out.row(0, y);
      for (int x = 0; x < width_; ++x) {
        uint8_t *o = dst + x * ps;
        std::memcpy(o, src + x * ps, ps);  // alpha / x byte kept
        o[fi.r] = o[fi.g] = o[fi.b] = g[x] > t ? above : below;
      }
    }
  }

  BinarizeResult result() const override {
    return result_;
  }
  Histogram histogram() const override {
    return histogram_;
  }

 private:
  VideoFormat in_format_, out_format_;
  int width_, height_;
  std::vector<uint8_t> gray_;  // packed RGB input only
  Histogram histogram_;
  BinarizeResult result_;
};

}  // namespace

std::unique_ptr<Binarize> Binarize::create(const Context &ctx, VideoFormat in_format,
                                           VideoFormat out_format, int width, int height,
                                           const BinarizeOptions &options) {
  if (!supports(in_format, out_format))
    throw Error(std::string("binarize: cannot convert ") + format_name(in_format) + " to " +
                format_name(out_format));
  if (width <= 0 || height <= 0 || static_cast<uint64_t>(width) * height >= (uint64_t(1) << 32))
    throw Error("binarize: frame size " + std::to_string(width) + "x" + std::to_string(height) +
                " is empty or has 2^32 pixels or more");
#if CUDADIFF_HAVE_CUDA
  if (ctx.is_cuda())
    return detail::make_cuda_binarize(ctx, in_format, out_format, width, height, options);
#else
  (void)ctx;
#endif
  (void)options;
  return detail::make_fast_binarize(in_format, out_format, width, height);
}

namespace detail {
std::unique_ptr<Binarize> make_reference_binarize(VideoFormat in_format, VideoFormat out_format,
                                                  int width, int height) {
  return std::make_unique<CpuBinarize>(in_format, out_format, width, height);
}
}  // namespace detail

}  // namespace cudadiff
