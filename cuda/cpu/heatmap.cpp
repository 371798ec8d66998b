// Heat map, the reference: a colour table per (colormap, gain), then one
// readable loop over pixels (OpenMP across rows). The previous frame is a
// private copy of the last input. The CPU backend runs the fast path of
// heatmap_fast.cpp (same bytes, tested).
#include "cudadiff/heatmap.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace cudadiff {

void heat_table(HeatColormap colormap, double gain, HeatColour table[kHeatTableSize]) {
  for (int d = 0; d < kHeatTableSize; ++d) table[d] = heat_colour(colormap, heat_position(d, gain));
}

namespace {

void check_frames(const FrameView &in, const FrameView &out, VideoFormat in_format,
                  VideoFormat out_format, int width, int height) {
  validate(in, "heatmap input");
  validate(out, "heatmap output");
  if (in.format != in_format || out.format != out_format || in.width != width ||
      in.height != height || out.width != width || out.height != height)
    throw Error(std::string("heatmap: frames do not match the negotiated ") +
                format_name(in_format) + " -> " + format_name(out_format) + " " +
                std::to_string(width) + "x" + std::to_string(height));
}

class CpuHeatmap final : public Heatmap {
 public:
  CpuHeatmap(VideoFormat in_format, VideoFormat out_format, int width, int height)
      : in_format_(in_format), out_format_(out_format), width_(width), height_(height) {
    size_t offsets[kMaxPlanes], strides[kMaxPlanes];
    previous_storage_.resize(packed_layout(in_format, width, height, 1, offsets, strides));
    previous_.format = in_format;
    previous_.width = width;
    previous_.height = height;
    previous_.data[0] = previous_storage_.data();
    previous_.stride[0] = strides[0];
  }

  void process(const FrameView &in, const FrameView &out, const HeatmapParams &params) override {
    check_frames(in, out, in_format_, out_format_, width_, height_);
    if (!table_valid_ || params.colormap != table_colormap_ || params.gain != table_gain_) {
      heat_table(params.colormap, params.gain, table_);
      table_colormap_ = params.colormap;
      table_gain_ = params.gain;
      table_valid_ = true;
    }
    const unsigned weight = heat_blend_weight(params.alpha);
    // No previous frame: compare the frame with itself, so d = 0 everywhere.
    const FrameView &previous = have_previous_ ? previous_ : in;

    const FormatInfo &fi = format_info(in_format_);
    const FormatInfo &fo = format_info(out_format_);
    const bool gray_in = in_format_ == VideoFormat::GRAY8;
    const bool gray_out = out_format_ == VideoFormat::GRAY8;
    const int ps_in = fi.pixel_stride[0], ps_out = fo.pixel_stride[0];
#pragma omp parallel for num_threads(cpu_threads()) schedule(static)
    for (int y = 0; y < height_; ++y) {
      const uint8_t *prev_row = previous.row(0, y);
      const uint8_t *cur_row = in.row(0, y);
      uint8_t *out_row = out.row(0, y);
      for (int x = 0; x < width_; ++x) {
        const uint8_t *p = prev_row + x * ps_in;
        const uint8_t *c = cur_row + x * ps_in;
        uint8_t *o = out_row + x * ps_out;
        int d;
        unsigned bg_r, bg_g, bg_b;  // the current frame's colour, for blending
        if (gray_in) {
          d = 3 * std::abs(int(c[0]) - int(p[0]));
          bg_r = bg_g = bg_b = c[0];
        } else {
          d = std::abs(int(c[fi.r]) - int(p[fi.r])) + std::abs(int(c[fi.g]) - int(p[fi.g])) +
              std::abs(int(c[fi.b]) - int(p[fi.b]));
          bg_r = c[fi.r];
          bg_g = c[fi.g];
          bg_b = c[fi.b];
        }
        const HeatColour &heat = table_[d];
        if (gray_out) {
          o[0] = heat_blend(gray_value(GrayMethod::Bt601, heat.r, heat.g, heat.b), c[0], weight);
          continue;
        }
        if (ps_out == 4) {
          // The fourth byte (alpha or x): the input's, or opaque for GRAY8 input.
          const int extra = 6 - fo.r - fo.g - fo.b;  // offsets are a permutation of 0..3
          o[extra] = gray_in ? 255 : c[extra];
        }
        o[fo.r] = heat_blend(heat.r, bg_r, weight);
        o[fo.g] = heat_blend(heat.g, bg_g, weight);
        o[fo.b] = heat_blend(heat.b, bg_b, weight);
      }
    }
    copy_frame_host(in, previous_);
    have_previous_ = true;
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
  HeatColour table_[kHeatTableSize];
  bool table_valid_ = false;
  HeatColormap table_colormap_ = HeatColormap::Sine;
  double table_gain_ = 0.0;
};

}  // namespace

bool Heatmap::supports(VideoFormat in_format, VideoFormat out_format) {
  if (in_format == VideoFormat::GRAY8)
    return out_format == VideoFormat::GRAY8 || is_packed_rgb(out_format);
  return is_packed_rgb(in_format) && out_format == in_format;
}

std::unique_ptr<Heatmap> Heatmap::create(const Context &ctx, VideoFormat in_format,
                                         VideoFormat out_format, int width, int height) {
  if (!supports(in_format, out_format))
    throw Error(std::string("heatmap: cannot convert ") + format_name(in_format) + " to " +
                format_name(out_format));
  if (width <= 0 || height <= 0) throw Error("heatmap: empty frame size");
#if CUDADIFF_HAVE_CUDA
  if (ctx.is_cuda()) return detail::make_cuda_heatmap(ctx, in_format, out_format, width, height);
#endif
  (void)ctx;
  return detail::make_fast_heatmap(in_format, out_format, width, height);
}

namespace detail {
std::unique_ptr<Heatmap> make_reference_heatmap(VideoFormat in_format, VideoFormat out_format,
                                                int width, int height) {
  return std::make_unique<CpuHeatmap>(in_format, out_format, width, height);
}
}  // namespace detail

}  // namespace cudadiff
