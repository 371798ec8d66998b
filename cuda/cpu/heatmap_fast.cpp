// Heat map, the CPU backend's fast path: the reference's rule (heatmap.cpp,
// cudadiff/heatmap.h) row by row in two vectorised loops (fast.h), the
// differences of a row, then its colours from the same table, specialised for
// each byte layout; the current row is kept as the next frame's previous row
// while it is in cache. Blocks of rows on threads. tests/core/test_cpu_fast.cpp
// compares it with the reference.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cudadiff/heatmap.h"
#include "fast.h"

namespace cudadiff {
namespace {

CUDADIFF_ALWAYS_INLINE uint8_t absdiff(uint8_t a, uint8_t b) {
  return a > b ? static_cast<uint8_t>(a - b) : static_cast<uint8_t>(b - a);
}

// d = |dR| + |dG| + |dB| per pixel.
template <int PS, int R, int G, int B>
CUDADIFF_ALWAYS_INLINE void rgb_difference_row(const uint8_t *CUDADIFF_RESTRICT prev,
                                               const uint8_t *CUDADIFF_RESTRICT cur, int width,
                                               uint16_t *CUDADIFF_RESTRICT d) {
  for (int x = 0; x < width; ++x)
    d[x] = static_cast<uint16_t>(absdiff(cur[x * PS + R], prev[x * PS + R]) +
                                 absdiff(cur[x * PS + G], prev[x * PS + G]) +
                                 absdiff(cur[x * PS + B], prev[x * PS + B]));
}

CUDADIFF_CPU_CLONES void difference_row(bool gray_in, fast::RgbLayout layout,
                                        const uint8_t *CUDADIFF_RESTRICT prev,
                                        const uint8_t *CUDADIFF_RESTRICT cur, int width,
                                        uint16_t *CUDADIFF_RESTRICT d) {
  if (gray_in) {
    for (int x = 0; x < width; ++x) d[x] = static_cast<uint16_t>(3 * absdiff(cur[x], prev[x]));
    return;
  }
  CUDADIFF_RGB_LAYOUT_CALL(layout, rgb_difference_row, prev, cur, width, d);
}

// Colours of a row into a packed RGB output. table[d]: R | G << 8 | B << 16.
// GRAY_IN: the background is the gray byte and the fourth byte is opaque;
// otherwise the input has the output's layout.
template <int PS, int R, int G, int B, bool GRAY_IN, bool BLEND>
CUDADIFF_ALWAYS_INLINE void colour_row_k(const uint16_t *CUDADIFF_RESTRICT d,
                                         const uint8_t *CUDADIFF_RESTRICT cur, int width,
                                         const uint32_t *CUDADIFF_RESTRICT table, unsigned weight,
                                         uint8_t *CUDADIFF_RESTRICT out) {
  constexpr int X = 6 - R - G - B;  // the alpha / x byte of 4-byte pixels
  for (int x = 0; x < width; ++x) {
    const uint32_t c = table[d[x]];
    uint8_t r = static_cast<uint8_t>(c), g = static_cast<uint8_t>(c >> 8),
            b = static_cast<uint8_t>(c >> 16);
    if (BLEND) {
      const uint8_t *px = cur + x * (GRAY_IN ? 1 : PS);
      r = heat_blend(r, px[GRAY_IN ? 0 : R], weight);
      g = heat_blend(g, px[GRAY_IN ? 0 : G], weight);
      b = heat_blend(b, px[GRAY_IN ? 0 : B], weight);
    }
    out[x * PS + R] = r;
    out[x * PS + G] = g;
    out[x * PS + B] = b;
    if (PS == 4) out[x * PS + X] = GRAY_IN ? 255 : cur[x * PS + X];
  }
}

template <int PS, int R, int G, int B>
CUDADIFF_ALWAYS_INLINE void colour_row_layout(bool gray_in, bool blend, const uint16_t *d,
                                              const uint8_t *cur, int width, const uint32_t *table,
                                              unsigned weight, uint8_t *out) {
  if (gray_in) {
    if (blend)
      colour_row_k<PS, R, G, B, true, true>(d, cur, width, table, weight, out);
    else
      colour_row_k<PS, R, G, B, true, false>(d, cur, width, table, weight, out);
  } else {
    if (blend)
      colour_row_k<PS, R, G, B, false, true>(d, cur, width, table, weight, out);
    else
      colour_row_k<PS, R, G, B, false, false>(d, cur, width, table, weight, out);
  }
}

CUDADIFF_CPU_CLONES void colour_row(fast::RgbLayout layout, bool gray_in, bool blend,
                                    const uint16_t *d, const uint8_t *cur, int width,
                                    const uint32_t *table, unsigned weight, uint8_t *out) {
  CUDADIFF_RGB_LAYOUT_CALL(layout, colour_row_layout, gray_in, blend, d, cur, width, table, weight,
                           out);
}

// GRAY8 output (GRAY8 input): table[d] is the colour's luma.
CUDADIFF_CPU_CLONES void luma_row(const uint16_t *CUDADIFF_RESTRICT d,
                                  const uint8_t *CUDADIFF_RESTRICT cur, int width,
                                  const uint32_t *CUDADIFF_RESTRICT table, unsigned weight,
                                  uint8_t *CUDADIFF_RESTRICT out) {
  for (int x = 0; x < width; ++x)
    out[x] = heat_blend(static_cast<uint8_t>(table[d[x]]), cur[x], weight);
}

class FastHeatmap final : public Heatmap {
 public:
  FastHeatmap(VideoFormat in_format, VideoFormat out_format, int width, int height)
      : in_format_(in_format), out_format_(out_format), width_(width), height_(height) {
    previous_row_bytes_ = plane_row_bytes(in_format, 0, width);
    previous_.resize(previous_row_bytes_ * static_cast<size_t>(height));
  }

  void process(const FrameView &in, const FrameView &out, const HeatmapParams &params) override {
    validate(in, "heatmap input");
    validate(out, "heatmap output");
    if (in.format != in_format_ || out.format != out_format_ || in.width != width_ ||
        in.height != height_ || out.width != width_ || out.height != height_)
      throw Error(std::string("heatmap: frames do not match the negotiated ") +
                  format_name(in_format_) + " -> " + format_name(out_format_) + " " +
                  std::to_string(width_) + "x" + std::to_string(height_));
    const bool gray_in = in_format_ == VideoFormat::GRAY8;
    const bool gray_out = out_format_ == VideoFormat::GRAY8;
    if (!table_valid_ || params.colormap != table_colormap_ || params.gain != table_gain_) {
      HeatColour colours[kHeatTableSize];
      heat_table(params.colormap, params.gain, colours);
      for (int d = 0; d < kHeatTableSize; ++d) {
        const HeatColour &c = colours[d];
        table_[d] = gray_out ? gray_value(GrayMethod::Bt601, c.r, c.g, c.b)
                             : c.r | uint32_t(c.g) << 8 | uint32_t(c.b) << 16;
      }
      table_colormap_ = params.colormap;
      table_gain_ = params.gain;
      table_valid_ = true;
    }
    const unsigned weight = heat_blend_weight(params.alpha);
    const bool blend = weight != 256;
    const fast::RgbLayout in_layout = gray_in ? fast::RgbLayout::BGR : fast::rgb_layout(in_format_);
    const fast::RgbLayout out_layout =
        gray_out ? fast::RgbLayout::BGR : fast::rgb_layout(out_format_);
    const bool compare = have_previous_;  // else d = 0: the frame against itself

    const size_t bytes = (2 * in.row_bytes(0) + out.row_bytes(0)) * static_cast<size_t>(height_);
    const int threads = fast::threads_for_bytes(bytes);
    const int blocks = threads == 1 ? 1 : 4 * threads;
    if (differences_.size() < static_cast<size_t>(threads)) differences_.resize(threads);
    fast::parallel_jobs(blocks, threads, [&](int block, int t) {
      std::vector<uint16_t> &d = differences_[t];
      if (d.size() < static_cast<size_t>(width_)) d.resize(width_);
      int y0, y1;
      fast::block_rows(height_, blocks, block, &y0, &y1);
      for (int y = y0; y < y1; ++y) {
        const uint8_t *cur = in.row(0, y);
        uint8_t *prev = previous_.data() + previous_row_bytes_ * y;
        difference_row(gray_in, in_layout, compare ? prev : cur, cur, width_, d.data());
        if (gray_out)
          luma_row(d.data(), cur, width_, table_, weight, out.row(0, y));
        else
          colour_row(out_layout, gray_in, blend, d.data(), cur, width_, table_, weight,
                     out.row(0, y));
        std::memcpy(prev, cur, previous_row_bytes_);  // the next frame's previous row
      }
    });
    have_previous_ = true;
  }

  void reset() override { have_previous_ = false; }

 private:
  VideoFormat in_format_, out_format_;
  int width_, height_;
  std::vector<uint8_t> previous_;  // the last input, rows without padding
  size_t previous_row_bytes_ = 0;
  bool have_previous_ = false;
  uint32_t table_[kHeatTableSize];
  bool table_valid_ = false;
  HeatColormap table_colormap_ = HeatColormap::Sine;
  double table_gain_ = 0.0;
  std::vector<std::vector<uint16_t>> differences_;  // one row per thread
};

}  // namespace

namespace detail {
std::unique_ptr<Heatmap> make_fast_heatmap(VideoFormat in_format, VideoFormat out_format, int width,
                                           int height) {
  return std::make_unique<FastHeatmap>(in_format, out_format, width, height);
}
}  // namespace detail

}  // namespace cudadiff
