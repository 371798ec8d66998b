// Noise view, the CPU backend's fast path: the reference's rule (noisevis.cpp,
// cudadiff/noisevis.h) row by row in two vectorised loops (fast.h), the
// changed bytes of each pixel (with the row's counts), then the painted
// pixels, specialised for each byte layout; the current row is kept as the
// next frame's previous row while it is in cache. Blocks of rows on threads,
// counts summed per block. tests/core/test_cpu_fast.cpp compares it with the
// reference.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cudadiff/noisevis.h"
#include "fast.h"

namespace cudadiff {
namespace {

struct RowCounts {
  uint32_t marked_pixels = 0;
  uint32_t changed_bytes = 0;
};

// changed[x] = how many of pixel x's PS bytes differ by more than t.
template <int PS>
CUDADIFF_ALWAYS_INLINE RowCounts changed_row_k(const uint8_t *CUDADIFF_RESTRICT prev,
                                               const uint8_t *CUDADIFF_RESTRICT cur, int width,
                                               uint8_t t, uint8_t *CUDADIFF_RESTRICT changed) {
  for (int x = 0; x < width; ++x) {
    uint8_t n = 0;
    for (int k = 0; k < PS; ++k) {
      const uint8_t a = cur[x * PS + k], b = prev[x * PS + k];
      const uint8_t diff = a > b ? static_cast<uint8_t>(a - b) : static_cast<uint8_t>(b - a);
      n = static_cast<uint8_t>(n + (diff > t ? 1 : 0));
    }
    changed[x] = n;
  }
  // The counts in a second loop over the row, which is in cache (one loop
  // doing both is not vectorised).
  uint32_t marked = 0, bytes = 0;
  for (int x = 0; x < width; ++x) {
    bytes += changed[x];
    marked += changed[x] != 0 ? 1 : 0;
  }
  return {marked, bytes};
}

CUDADIFF_CPU_CLONES RowCounts changed_row(int ps, const uint8_t *prev, const uint8_t *cur,
                                          int width, uint8_t t, uint8_t *changed) {
  switch (ps) {
    case 1:
      return changed_row_k<1>(prev, cur, width, t, changed);
    case 3:
      return changed_row_k<3>(prev, cur, width, t, changed);
    default:
      return changed_row_k<4>(prev, cur, width, t, changed);
  }
}

// What is painted: the colour (R, G, B, and its BT.601 luma) and its alpha.
struct Paint {
  uint8_t r, g, b, gray, alpha;
};

CUDADIFF_ALWAYS_INLINE uint8_t paint(uint8_t colour, uint8_t background, uint8_t alpha) {
  return static_cast<uint8_t>(noise_paint(colour, background, alpha));
}

// Marked pixels painted over black (mask) or over the current pixel
// (overlay); the others black or the current pixel. GRAY_IN: the current
// pixel is one gray byte (in R, G and B) and the fourth byte is opaque;
// otherwise the input has the output's layout.
template <int PS, int R, int G, int B, bool GRAY_IN, bool OVERLAY>
CUDADIFF_ALWAYS_INLINE void paint_row_k(const uint8_t *CUDADIFF_RESTRICT changed,
                                        const uint8_t *CUDADIFF_RESTRICT cur, int width,
                                        const Paint &p, uint8_t *CUDADIFF_RESTRICT out) {
  constexpr int X = 6 - R - G - B;  // the alpha / x byte of 4-byte pixels
  const uint8_t mask_r = paint(p.r, 0, p.alpha), mask_g = paint(p.g, 0, p.alpha),
                mask_b = paint(p.b, 0, p.alpha);
  for (int x = 0; x < width; ++x) {
    const bool marked = changed[x] != 0;
    uint8_t r, g, b;
    if (OVERLAY) {
      const uint8_t *px = cur + x * (GRAY_IN ? 1 : PS);
      const uint8_t bg_r = px[GRAY_IN ? 0 : R], bg_g = px[GRAY_IN ? 0 : G],
                    bg_b = px[GRAY_IN ? 0 : B];
      r = marked ? paint(p.r, bg_r, p.alpha) : bg_r;
      g = marked ? paint(p.g, bg_g, p.alpha) : bg_g;
      b = marked ? paint(p.b, bg_b, p.alpha) : bg_b;
    } else {
      r = marked ? mask_r : 0;
      g = marked ? mask_g : 0;
      b = marked ? mask_b : 0;
    }
    out[x * PS + R] = r;
    out[x * PS + G] = g;
    out[x * PS + B] = b;
    if (PS == 4) out[x * PS + X] = GRAY_IN ? 255 : cur[x * PS + X];
  }
}

template <int PS, int R, int G, int B>
CUDADIFF_ALWAYS_INLINE void paint_row_layout(bool gray_in, bool overlay, const uint8_t *changed,
                                             const uint8_t *cur, int width, const Paint &p,
                                             uint8_t *out) {
  if (gray_in) {
    if (overlay)
      paint_row_k<PS, R, G, B, true, true>(changed, cur, width, p, out);
    else
      paint_row_k<PS, R, G, B, true, false>(changed, cur, width, p, out);
  } else {
    if (overlay)
      paint_row_k<PS, R, G, B, false, true>(changed, cur, width, p, out);
    else
      paint_row_k<PS, R, G, B, false, false>(changed, cur, width, p, out);
  }
}

CUDADIFF_CPU_CLONES void paint_row(fast::RgbLayout layout, bool gray_in, bool overlay,
                                   const uint8_t *changed, const uint8_t *cur, int width,
                                   const Paint &p, uint8_t *out) {
  CUDADIFF_RGB_LAYOUT_CALL(layout, paint_row_layout, gray_in, overlay, changed, cur, width, p, out);
}

// GRAY8 output (GRAY8 input): the colour's luma.
CUDADIFF_CPU_CLONES void paint_gray_row(bool overlay, const uint8_t *CUDADIFF_RESTRICT changed,
                                        const uint8_t *CUDADIFF_RESTRICT cur, int width,
                                        const Paint &p, uint8_t *CUDADIFF_RESTRICT out) {
  for (int x = 0; x < width; ++x) {
    const uint8_t bg = overlay ? cur[x] : 0;
    out[x] = changed[x] != 0 ? paint(p.gray, bg, p.alpha) : bg;
  }
}

class FastNoiseVis final : public NoiseVis {
 public:
  FastNoiseVis(VideoFormat in_format, VideoFormat out_format, int width, int height)
      : in_format_(in_format), out_format_(out_format), width_(width), height_(height) {
    previous_row_bytes_ = plane_row_bytes(in_format, 0, width);
    previous_.resize(previous_row_bytes_ * static_cast<size_t>(height));
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
    const uint8_t threshold = static_cast<uint8_t>(
        params.threshold < 0 ? 0 : (params.threshold > 255 ? 255 : params.threshold));
    const bool overlay = params.mode == NoiseMode::Overlay;
    Paint p;
    p.alpha = static_cast<uint8_t>(params.color >> 24);
    p.r = static_cast<uint8_t>(params.color >> 16);
    p.g = static_cast<uint8_t>(params.color >> 8);
    p.b = static_cast<uint8_t>(params.color);
    p.gray = gray_value(GrayMethod::Bt601, p.r, p.g, p.b);
    const bool gray_in = in_format_ == VideoFormat::GRAY8;
    const bool gray_out = out_format_ == VideoFormat::GRAY8;
    const int ps_in = format_info(in_format_).pixel_stride[0];
    const fast::RgbLayout out_layout =
        gray_out ? fast::RgbLayout::BGR : fast::rgb_layout(out_format_);
    const bool compare = have_previous_;  // else nothing changed: the frame against itself

    const size_t bytes = (2 * in.row_bytes(0) + out.row_bytes(0)) * static_cast<size_t>(height_);
    const int threads = fast::threads_for_bytes(bytes);
    const int blocks = threads == 1 ? 1 : 4 * threads;
    if (changed_.size() < static_cast<size_t>(threads)) changed_.resize(threads);
    std::vector<uint64_t> marked(blocks, 0), changed_bytes(blocks, 0);
    fast::parallel_jobs(blocks, threads, [&](int block, int t) {
      std::vector<uint8_t> &changed = changed_[t];
      if (changed.size() < static_cast<size_t>(width_)) changed.resize(width_);
      int y0, y1;
      fast::block_rows(height_, blocks, block, &y0, &y1);
      for (int y = y0; y < y1; ++y) {
        const uint8_t *cur = in.row(0, y);
        uint8_t *prev = previous_.data() + previous_row_bytes_ * y;
        const RowCounts c =
            changed_row(ps_in, compare ? prev : cur, cur, width_, threshold, changed.data());
        marked[block] += c.marked_pixels;
        changed_bytes[block] += c.changed_bytes;
        if (gray_out)
          paint_gray_row(overlay, changed.data(), cur, width_, p, out.row(0, y));
        else
          paint_row(out_layout, gray_in, overlay, changed.data(), cur, width_, p, out.row(0, y));
        std::memcpy(prev, cur, previous_row_bytes_);  // the next frame's previous row
      }
    });
    if (count) {
      running_.frames++;
      if (have_previous_) {
        running_.compared_frames++;
        for (int b = 0; b < blocks; ++b) {
          running_.marked_pixels += marked[b];
          running_.changed_bytes += changed_bytes[b];
        }
        running_.pixels += static_cast<uint64_t>(width_) * height_;
        running_.bytes += static_cast<uint64_t>(width_) * height_ * ps_in;
      }
    }
    have_previous_ = true;
  }

  void take_counts() override {
    taken_ = running_;
    running_ = NoiseCounts();
  }
  NoiseCounts counts() const override { return taken_; }
  void clear_counts() override { running_ = NoiseCounts(); }
  void reset() override { have_previous_ = false; }

 private:
  VideoFormat in_format_, out_format_;
  int width_, height_;
  std::vector<uint8_t> previous_;  // the last input, rows without padding
  size_t previous_row_bytes_ = 0;
  bool have_previous_ = false;
  NoiseCounts running_;                        // since the last take or clear
  NoiseCounts taken_;                          // what counts() returns
  std::vector<std::vector<uint8_t>> changed_;  // one row per thread
};

}  // namespace

namespace detail {
std::unique_ptr<NoiseVis> make_fast_noisevis(VideoFormat in_format, VideoFormat out_format,
                                             int width, int height) {
  return std::make_unique<FastNoiseVis>(in_format, out_format, width, height);
}
}  // namespace detail

}  // namespace cudadiff
