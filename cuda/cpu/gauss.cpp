// Noise filters, the reference: plain loops over rows (OpenMP across rows).
// What they compute is specified in cudadiff/gauss.h. The CPU backend runs
// the fast path of gauss_fast.cpp, which gives the same bytes (tested).
#include "cudadiff/gauss.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace cudadiff {

const char *noise_filter_method_name(NoiseFilterMethod method) {
  switch (method) {
    case NoiseFilterMethod::Gaussian:
      return "gaussian";
    case NoiseFilterMethod::Box:
      return "box";
    case NoiseFilterMethod::Median:
      return "median";
  }
  return "unknown";
}

void validate(const NoiseFilterSettings &s) {
  const int k = s.kernel_size;
  const int max = s.method == NoiseFilterMethod::Median ? kMaxMedianKernel : kMaxConvKernel;
  if (s.method != NoiseFilterMethod::Gaussian && s.method != NoiseFilterMethod::Box &&
      s.method != NoiseFilterMethod::Median)
    throw Error("noise filter: unknown method");
  if (k < kMinFilterKernel || k > max || k % 2 == 0)
    throw Error(std::string("noise filter: kernel size ") + std::to_string(k) + " for " +
                noise_filter_method_name(s.method) + " must be odd and within 3.." +
                std::to_string(max));
  if (!std::isfinite(s.sigma)) throw Error("noise filter: sigma is not a number");
}

double gaussian_sigma(int kernel_size, double sigma) {
  if (sigma > 0) return sigma;
  return 0.3 * ((kernel_size - 1) * 0.5 - 1) + 0.8;
}

std::vector<uint32_t> gaussian_weights(int kernel_size, double sigma) {
  validate(NoiseFilterSettings{NoiseFilterMethod::Gaussian, kernel_size, sigma});
  const int k = kernel_size;
  const double scale = double(1u << kGaussWeightBits);
  std::vector<double> real(k);
  if (sigma <= 0 && k <= 7) {
    // OpenCV's fixed kernels for the small sizes when no sigma is given.
    static const double k3[] = {1, 2, 1}, k5[] = {1, 4, 6, 4, 1}, k7[] = {2, 7, 14, 18, 14, 7, 2};
    const double *table = k == 3 ? k3 : k == 5 ? k5 : k7;
    const double sum = k == 3 ? 4 : k == 5 ? 16 : 64;
    for (int i = 0; i < k; ++i) real[i] = table[i] / sum;
  } else {
    const double s = gaussian_sigma(k, sigma);
    double sum = 0;
    for (int i = 0; i < k; ++i) {
      const double x = i - (k - 1) / 2.0;
      real[i] = std::exp(-(x * x) / (2 * s * s));
      sum += real[i];
    }
    for (double &v : real) v /= sum;
  }
  // Round each weight, then give the centre what rounding took or added, so
  // that the weights sum to exactly 1 << 16 (a constant image stays constant).
  std::vector<uint32_t> w(k);
  int64_t total = 0;
  for (int i = 0; i < k; ++i) {
    // Symmetric by construction: take the mirror's value for the right half.
    const int j = std::min(i, k - 1 - i);
    w[i] = static_cast<uint32_t>(std::llround(real[j] * scale));
    total += w[i];
  }
  w[k / 2] = static_cast<uint32_t>(int64_t(w[k / 2]) + (int64_t(1) << kGaussWeightBits) - total);
  return w;
}

BoxDivisor box_divisor(int kernel_size) {
  BoxDivisor d;
  d.n = static_cast<uint32_t>(kernel_size * kernel_size);
  d.half = d.n / 2;
  d.magic = static_cast<uint32_t>(((uint64_t(1) << 32) + d.n - 1) / d.n);
  return d;
}

PlaneLayout noise_filter_plane_layout(VideoFormat format, int plane) {
  const FormatInfo &fi = format_info(format);
  PlaneLayout l;
  l.pixel_stride = fi.pixel_stride[plane];
  if (fi.packed_rgb) {
    l.filtered_mask = (1u << fi.r) | (1u << fi.g) | (1u << fi.b);
  } else {
    l.filtered_mask = (1u << l.pixel_stride) - 1;  // every byte (NV12's U and V)
  }
  return l;
}

bool NoiseFilter::supports(VideoFormat format) {
  switch (format) {
    case VideoFormat::GRAY8:
    case VideoFormat::I420:
    case VideoFormat::YV12:
    case VideoFormat::NV12:
    case VideoFormat::NV21:
    case VideoFormat::Y444:
    case VideoFormat::Y42B:
      return true;
    default:
      return is_packed_rgb(format);
  }
}

namespace {

// One plane as the filters see it: bytes, `ps` bytes per pixel, replicated
// borders through clamped pixel indices.
struct PlaneRef {
  const uint8_t *data;
  size_t stride;
  int width;  // pixels
  int height;
  int ps;
  const uint8_t *row(int y) const {
    return data + static_cast<size_t>(std::clamp(y, 0, height - 1)) * stride;
  }
  // Byte `channel` of pixel x (clamped) in row r.
  uint8_t at(const uint8_t *r, int x, int channel) const {
    return r[std::clamp(x, 0, width - 1) * ps + channel];
  }
};

class CpuNoiseFilter final : public NoiseFilter {
 public:
  CpuNoiseFilter(VideoFormat format, int width, int height)
      : format_(format), width_(width), height_(height) {
    size_t largest = 0;
    const int planes = format_info(format).n_planes;
    for (int p = 0; p < planes; ++p)
      largest = std::max(largest, plane_row_bytes(format, p, width) *
                                      static_cast<size_t>(plane_height(format, p, height)));
    intermediate_.resize(largest);
  }

  void process(const FrameView &in, const FrameView &out,
               const NoiseFilterSettings &settings) override {
    validate(in, "noise filter input");
    validate(out, "noise filter output");
    validate(settings);
    if (in.format != format_ || out.format != format_ || in.width != width_ ||
        in.height != height_ || out.width != width_ || out.height != height_)
      throw Error("noise filter: frame does not match the configured format and size");
    for (int p = 0; p < in.n_planes(); ++p) {
      const PlaneLayout layout = noise_filter_plane_layout(format_, p);
      const PlaneRef src{in.data[p], in.stride[p], in.plane_width(p), in.plane_height(p),
                         layout.pixel_stride};
      switch (settings.method) {
        case NoiseFilterMethod::Gaussian:
        case NoiseFilterMethod::Box:
          convolve(src, out.data[p], out.stride[p], layout, settings);
          break;
        case NoiseFilterMethod::Median:
          median(src, out.data[p], out.stride[p], layout, settings.kernel_size);
          break;
      }
      copy_unfiltered(src, out.data[p], out.stride[p], layout);
    }
  }

 private:
  // Separable: a horizontal pass into intermediate_ (16 bits per byte), then
  // a vertical pass. Box: the weights are all 1 and the sums stay exact.
  void convolve(const PlaneRef &src, uint8_t *dst, size_t dst_stride, const PlaneLayout &layout,
                const NoiseFilterSettings &s) {
    const int k = s.kernel_size, r = k / 2;
    const bool gauss = s.method == NoiseFilterMethod::Gaussian;
    const std::vector<uint32_t> w =
        gauss ? gaussian_weights(k, s.sigma) : std::vector<uint32_t>(k, 1u);
    const BoxDivisor div = box_divisor(k);
    const int ps = layout.pixel_stride;
    const size_t row_bytes = static_cast<size_t>(src.width) * ps;
    uint16_t *mid = intermediate_.data();
    [[maybe_unused]] const int threads = cpu_threads();

#pragma omp parallel for num_threads(threads) schedule(static)
    for (int y = 0; y < src.height; ++y) {
      const uint8_t *in_row = src.row(y);
      uint16_t *h = mid + static_cast<size_t>(y) * row_bytes;
      for (int x = 0; x < src.width; ++x)
        for (int c = 0; c < ps; ++c) {
          uint32_t sum = 0;
          for (int i = 0; i < k; ++i) sum += w[i] * src.at(in_row, x + i - r, c);
          h[x * ps + c] = static_cast<uint16_t>(gauss ? gauss_round_horizontal(sum) : sum);
        }
    }

#pragma omp parallel for num_threads(threads) schedule(static)
    for (int y = 0; y < src.height; ++y) {
      uint8_t *o = dst + static_cast<size_t>(y) * dst_stride;
      const uint16_t *rows[kMaxConvKernel];
      for (int i = 0; i < k; ++i)
        rows[i] = mid + static_cast<size_t>(std::clamp(y + i - r, 0, src.height - 1)) * row_bytes;
      for (size_t b = 0; b < row_bytes; ++b) {
        uint32_t sum = 0;
        for (int i = 0; i < k; ++i) sum += w[i] * rows[i][b];
        o[b] = gauss ? gauss_round_vertical(sum) : box_mean(sum, div);
      }
    }
  }

  // The K*K window of each byte, and its middle element after a partial sort.
  static void median(const PlaneRef &src, uint8_t *dst, size_t dst_stride,
                     const PlaneLayout &layout, int k) {
    const int r = k / 2, ps = layout.pixel_stride;
    [[maybe_unused]] const int threads = cpu_threads();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int y = 0; y < src.height; ++y) {
      uint8_t window[kMaxMedianKernel * kMaxMedianKernel];
      const uint8_t *rows[kMaxMedianKernel];
      for (int i = 0; i < k; ++i) rows[i] = src.row(y + i - r);
      uint8_t *o = dst + static_cast<size_t>(y) * dst_stride;
      for (int x = 0; x < src.width; ++x)
        for (int c = 0; c < ps; ++c) {
          int n = 0;
          for (int i = 0; i < k; ++i)
            for (int j = -r; j <= r; ++j) window[n++] = src.at(rows[i], x + j, c);
          std::nth_element(window, window + n / 2, window + n);
          o[x * ps + c] = window[n / 2];
        }
    }
  }

  // Alpha and padding bytes: copied from the input.
  static void copy_unfiltered(const PlaneRef &src, uint8_t *dst, size_t dst_stride,
                              const PlaneLayout &layout) {
    const int ps = layout.pixel_stride;
    if (layout.filtered_mask == (1u << ps) - 1) return;
    for (int y = 0; y < src.height; ++y) {
      const uint8_t *i = src.data + static_cast<size_t>(y) * src.stride;
      uint8_t *o = dst + static_cast<size_t>(y) * dst_stride;
      for (int x = 0; x < src.width; ++x)
        for (int c = 0; c < ps; ++c)
          if (!(layout.filtered_mask >> c & 1u)) o[x * ps + c] = i[x * ps + c];
    }
  }

  VideoFormat format_;
  int width_, height_;
  std::vector<uint16_t> intermediate_;
};

}  // namespace

std::unique_ptr<NoiseFilter> NoiseFilter::create(const Context &ctx, VideoFormat format, int width,
                                                 int height) {
  if (!supports(format))
    throw Error(std::string("noise filter: unsupported format ") + format_name(format));
  if (width <= 0 || height <= 0) throw Error("noise filter: empty frame size");
#if CUDADIFF_HAVE_CUDA
  if (ctx.is_cuda()) return detail::make_cuda_noise_filter(ctx, format, width, height);
#else
  (void)ctx;
#endif
  return detail::make_fast_noise_filter(format, width, height);
}

namespace detail {
std::unique_ptr<NoiseFilter> make_reference_noise_filter(VideoFormat format, int width,
                                                         int height) {
  if (!NoiseFilter::supports(format))
    throw Error(std::string("noise filter: unsupported format ") + format_name(format));
  if (width <= 0 || height <= 0) throw Error("noise filter: empty frame size");
  return std::make_unique<CpuNoiseFilter>(format, width, height);
}
}  // namespace detail

}  // namespace cudadiff
