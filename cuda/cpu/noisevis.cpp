// Noise view, the reference: one readable loop over pixels (OpenMP across
// rows, counts summed by the OpenMP reduction, then added to the running
// totals). The previous frame is a private copy of the last input. The CPU
// backend runs the fast path of noisevis_fast.cpp (same bytes and counts, tested).
#include "cudadiff/noisevis.h"

#include <cstdlib>
#include <string>
#include <vector>

namespace cudadiff {
namespace {

class CpuNoiseVis final : public NoiseVis {
 public:
  CpuNoiseVis(VideoFormat in_format, VideoFormat out_format, int width, int height)
      : in_format_(in_format), out_format_(out_format), width_(width), height_(height) {
    size_t offsets[kMaxPlanes], strides[kMaxPlanes];
    previous_storage_.resize(packed_layout(in_format, width, height, 1, offsets, strides));
    previous_.format = in_format;
    previous_.width = width;
    previous_.height = height;
    previous_.data[0] = previous_storage_.data();
    previous_.stride[0] = strides[0];
  }

  void process(const FrameView &in, const FrameView &out, const NoiseParams &params,
               bool count) override {
    validate(in, "noisevis input");
    validate(out, "noisevis output");
    if (in.format != in_format_ || out.format != out_format_ || in.width != width_ ||
        in.height != height_ || out.width != width_ || out.height != height_)
      throw Error(std::string("noisevis: frames do not match the negotiated ") +
                  format_name(in_format_) + " -> " + format_name(out_format_) + " " +
                  std::to_string(width_) + "x" + std::to_string(height_));
    const int threshold =
        params.threshold < 0 ? 0 : (params.threshold > 255 ? 255 : params.threshold);
    const bool overlay = params.mode == NoiseMode::Overlay;
    const unsigned alpha = (params.color >> 24) & 0xffu;
    const unsigned paint_r = (params.color >> 16) & 0xffu;
    const unsigned paint_g = (params.color >> 8) & 0xffu;
    const unsigned paint_b = params.color & 0xffu;
    const unsigned paint_gray = gray_value(GrayMethod::Bt601, paint_r, paint_g, paint_b);
    // No previous frame: compare the frame with itself, so nothing changed.
    const FrameView &previous = have_previous_ ? previous_ : in;

    const FormatInfo &fi = format_info(in_format_);
    const FormatInfo &fo = format_info(out_format_);
    const bool gray_in = in_format_ == VideoFormat::GRAY8;
    const bool gray_out = out_format_ == VideoFormat::GRAY8;
    const int ps_in = fi.pixel_stride[0], ps_out = fo.pixel_stride[0];
    uint64_t marked_pixels = 0, changed_bytes = 0;
#pragma omp parallel for num_threads(cpu_threads()) schedule(static) \
    reduction(+ : marked_pixels, changed_bytes)
    for (int y = 0; y < height_; ++y) {
      const uint8_t *prev_row = previous.row(0, y);
      const uint8_t *cur_row = in.row(0, y);
      uint8_t *out_row = out.row(0, y);
      for (int x = 0; x < width_; ++x) {
        const uint8_t *p = prev_row + x * ps_in;
        const uint8_t *c = cur_row + x * ps_in;
        uint8_t *o = out_row + x * ps_out;
        int changed = 0;
        for (int k = 0; k < ps_in; ++k)
          if (std::abs(int(c[k]) - int(p[k])) > threshold) ++changed;
        const bool marked = changed > 0;
        changed_bytes += static_cast<uint64_t>(changed);
        marked_pixels += marked ? 1 : 0;

        // The background: black, or the current frame (GRAY8: its gray in R, G and B).
        const unsigned bg_r = overlay ? c[gray_in ? 0 : fi.r] : 0;
        const unsigned bg_g = overlay ? c[gray_in ? 0 : fi.g] : 0;
        const unsigned bg_b = overlay ? c[gray_in ? 0 : fi.b] : 0;
        if (gray_out) {
          o[0] = static_cast<uint8_t>(marked ? noise_paint(paint_gray, bg_r, alpha) : bg_r);
          continue;
        }
        if (ps_out == 4) {
          // The fourth byte (alpha or x): the input's, or opaque for GRAY8 input.
          const int extra = 6 - fo.r - fo.g - fo.b;  // offsets are a permutation of 0..3
          o[extra] = gray_in ? 255 : c[extra];
        }
        o[fo.r] = static_cast<uint8_t>(marked ? noise_paint(paint_r, bg_r, alpha) : bg_r);
        o[fo.g] = static_cast<uint8_t>(marked ? noise_paint(paint_g, bg_g, alpha) : bg_g);
        o[fo.b] = static_cast<uint8_t>(marked ? noise_paint(paint_b, bg_b, alpha) : bg_b);
      }
    }
    if (count) {
      running_.frames++;
      if (have_previous_) {
        running_.compared_frames++;
        running_.marked_pixels += marked_pixels;
        running_.changed_bytes += changed_bytes;
        running_.pixels += static_cast<uint64_t>(width_) * height_;
        running_.bytes += static_cast<uint64_t>(width_) * height_ * ps_in;
      }
    }
    copy_frame_host(in, previous_);
    have_previous_ = true;
  }

  void take_counts() override {
    taken_ = running_;
    running_ = NoiseCounts();
  }
  NoiseCounts counts() const override {
    return taken_;
  }
  void clear_counts() override {
    running_ = NoiseCounts();
  }
  void reset() override {
    have_previous_ = false;
  }

 private:
  VideoFormat in_format_, out_format_;
  int width_, height_;
  std::vector<uint8_t> previous_storage_;
  FrameView previous_;
  bool have_previous_ = false;
  NoiseCounts running_;  // since the last take or clear
  NoiseCounts taken_;    // what counts() returns
};

}  // namespace

bool NoiseVis::supports(VideoFormat in_format, VideoFormat out_format) {
  if (in_format == VideoFormat::GRAY8)
    return out_format == VideoFormat::GRAY8 || is_packed_rgb(out_format);
  return is_packed_rgb(in_format) && out_format == in_format;
}

std::unique_ptr<NoiseVis> NoiseVis::create(const Context &ctx, VideoFormat in_format,
                                           VideoFormat out_format, int width, int height) {
  if (!supports(in_format, out_format))
    throw Error(std::string("noisevis: cannot convert ") + format_name(in_format) + " to " +
                format_name(out_format));
  if (width <= 0 || height <= 0) throw Error("noisevis: empty frame size");
#if CUDADIFF_HAVE_CUDA
  if (ctx.is_cuda()) return detail::make_cuda_noisevis(ctx, in_format, out_format, width, height);
#endif
  (void)ctx;
  return detail::make_fast_noisevis(in_format, out_format, width, height);
}

namespace detail {
std::unique_ptr<NoiseVis> make_reference_noisevis(VideoFormat in_format, VideoFormat out_format,
                                                  int width, int height) {
  return std::make_unique<CpuNoiseVis>(in_format, out_format, width, height);
}
}  // namespace detail

}  // namespace cudadiff
