// Grayscale, the reference: readable loops over rows (OpenMP across rows).
// The CPU backend runs the fast path of grayscale_fast.cpp (same bytes, tested).
#include "cudadiff/grayscale.h"

#include <cstring>
#include <string>

namespace cudadiff {
namespace {

void check_pair(const FrameView &in, const FrameView &out) {
  validate(in, "grayscale input");
  validate(out, "grayscale output");
  if (in.width != out.width || in.height != out.height)
    throw Error("grayscale: input and output sizes differ");
  if (!Grayscale::supports(in.format, out.format))
    throw Error(std::string("grayscale: cannot convert ") + format_name(in.format) + " to " +
                format_name(out.format));
}

class CpuGrayscale final : public Grayscale {
 public:
  void process(const FrameView &in, const FrameView &out, GrayMethod method) override {
    check_pair(in, out);
    [[maybe_unused]] const int threads = cpu_threads_for(static_cast<size_t>(in.width) * in.height);
    if (in.format == VideoFormat::GRAY8) {
      copy_frame_host(in, out);
      return;
    }
    const FormatInfo &fi = format_info(in.format);
    const int ps = fi.pixel_stride[0];
    const bool to_gray8 = out.format == VideoFormat::GRAY8;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int y = 0; y < in.height; ++y) {
      const uint8_t *src = in.row(0, y);
      uint8_t *dst = out.row(0, y);
      for (int x = 0; x < in.width; ++x) {
        const uint8_t *px = src + x * ps;
        const uint8_t gray = gray_value(method, px[fi.r], px[fi.g], px[fi.b]);
        if (to_gray8) {
          dst[x] = gray;
        } else {
          uint8_t *o = dst + x * ps;
          std::memcpy(o, px, ps);  // alpha / padding byte kept
          o[fi.r] = o[fi.g] = o[fi.b] = gray;
        }
      }
    }
  }
};

}  // namespace

bool Grayscale::supports(VideoFormat in_format, VideoFormat out_format) {
  if (in_format == VideoFormat::GRAY8) return out_format == VideoFormat::GRAY8;
  if (!is_packed_rgb(in_format)) return false;
  return out_format == VideoFormat::GRAY8 || out_format == in_format;
}

std::unique_ptr<Grayscale> Grayscale::create(const Context &ctx, VideoFormat in_format,
                                             VideoFormat out_format) {
  if (!supports(in_format, out_format))
    throw Error(std::string("grayscale: cannot convert ") + format_name(in_format) + " to " +
                format_name(out_format));
#if CUDADIFF_HAVE_CUDA
  if (ctx.is_cuda()) return detail::make_cuda_grayscale(ctx);
#else
  (void)ctx;
#endif
  return detail::make_fast_grayscale();
}

namespace detail {
std::unique_ptr<Grayscale> make_reference_grayscale() {
  return std::make_unique<CpuGrayscale>();
}
}  // namespace detail

}  // namespace cudadiff
