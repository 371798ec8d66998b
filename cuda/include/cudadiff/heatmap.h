// Heat map of the change between consecutive frames (the report's chapter 4).
//
// For each pixel, against the previous frame given to the same object:
//
//   d = |dR| + |dG| + |dB|                      packed RGB input, 0..765
//   d = 3 |dY|                                   GRAY8 input, the same 0..765 range
//   t = min(1, gain * d / 765)                   normalised, then amplified
//
// and t becomes a colour (heat_colour below, in double precision):
//
//   sine  (the report): R = max(0, sin(pi t - pi/2)), G = max(0, sin(pi t)),
//         B = max(0, sin(pi t + pi/2)): blue for no change, green at t = 1/2,
//         red at t = 1
//   turbo: Google's Turbo colormap (its published polynomial approximation)
//   gray:  R = G = B = t
//
// each channel rounded to the nearest byte: floor(255 v + 0.5). The first frame
// after creation or reset() has no previous frame and shows "no change" (d = 0).
//
// Output: the input format (packed RGB family), or for GRAY8 input GRAY8 or any
// packed RGB format. `alpha` (0..1) blends the heat colour over the current
// frame with an integer weight: w = round(alpha * 256), out = (heat w + cur
// (256 - w) + 128) >> 8 per channel (alpha 1 = heat map only). A GRAY8 output
// shows the colour's BT.601 luma (gray_value(Bt601, ...); with colormap gray,
// t itself). The alpha/x byte of the output is the input's (255 when the input
// is GRAY8).
//
// The colour of each of the 766 possible differences is a table computed once
// per (colormap, gain); the CUDA backend computes the same table on the device
// from the same function, so both backends agree within 1 per byte (the only
// source of disagreement is the last bit of sin/cos, which may round a channel
// the other way).
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>

#include "cudadiff/frame.h"
#include "cudadiff/grayscale.h"  // CUDADIFF_HD, gray_value
#include "cudadiff/runtime.h"

namespace cudadiff {

enum class HeatColormap { Sine = 0, Turbo = 1, Gray = 2 };

constexpr int kHeatMaxDifference = 765;  // 3 * 255
constexpr int kHeatTableSize = kHeatMaxDifference + 1;

struct HeatmapParams {
  HeatColormap colormap = HeatColormap::Sine;
  double gain = 1.0;   // >= 0; multiplies d / 765 before clamping to 1
  double alpha = 1.0;  // 0..1; 1 = heat map only, below 1 blended over the current frame
};

struct HeatColour {
  uint8_t r, g, b;
};

// v in [0, 1] (clamped) to a byte, rounding to nearest.
CUDADIFF_HD uint8_t heat_unit_to_byte(double v) {
  v = v < 0.0 ? 0.0 : (v > 1.0 ? 1.0 : v);
  return static_cast<uint8_t>(floor(v * 255.0 + 0.5));
}

// t = min(1, gain * d / 765); a negative gain counts as 0.
CUDADIFF_HD double heat_position(int difference, double gain) {
  const double t = (gain > 0.0 ? gain : 0.0) * static_cast<double>(difference) /
                   static_cast<double>(kHeatMaxDifference);
  return t < 1.0 ? t : 1.0;
}

// The colour of position t in [0, 1].
CUDADIFF_HD HeatColour heat_colour(HeatColormap colormap, double t) {
  const double pi = 3.14159265358979323846;
  t = t < 0.0 ? 0.0 : (t > 1.0 ? 1.0 : t);
  HeatColour c;
  switch (colormap) {
    case HeatColormap::Turbo: {
      // Turbo (Anton Mikhailov, Google, 2019), polynomial approximation by
      // Ruofei Du: each channel is c0 + c1 t + ... + c5 t^5 (Horner form).
      const double r =
          0.13572138 +
          t * (4.61539260 +
               t * (-42.66032258 + t * (132.13108234 + t * (-152.94239396 + t * 59.28637943))));
      const double g =
          0.09140261 +
          t * (2.19418839 +
               t * (4.84296658 + t * (-14.18503333 + t * (4.27729857 + t * 2.82956604))));
      const double b =
          0.10667330 +
          t * (12.64194608 +
               t * (-60.58204836 + t * (110.36276771 + t * (-89.90310912 + t * 27.34824973))));
      c.r = heat_unit_to_byte(r);
      c.g = heat_unit_to_byte(g);
      c.b = heat_unit_to_byte(b);
      break;
    }
    case HeatColormap::Gray:
      c.r = c.g = c.b = heat_unit_to_byte(t);
      break;
    case HeatColormap::Sine:
    default:
      // The report's three phase-shifted sines, negative halves cut to 0.
      c.r = heat_unit_to_byte(sin(pi * t - pi / 2.0));
      c.g = heat_unit_to_byte(sin(pi * t));
      c.b = heat_unit_to_byte(sin(pi * t + pi / 2.0));
      break;
  }
  return c;
}

// The blend weight of the heat colour: round(alpha * 256), 0..256.
inline unsigned heat_blend_weight(double alpha) {
  if (!(alpha > 0.0)) return 0;  // also NaN
  if (alpha >= 1.0) return 256;
  return static_cast<unsigned>(std::lround(alpha * 256.0));
}

// One channel: (heat w + background (256 - w) + 128) >> 8.
CUDADIFF_HD uint8_t heat_blend(unsigned heat, unsigned background, unsigned weight) {
  return static_cast<uint8_t>((heat * weight + background * (256u - weight) + 128u) >> 8);
}

class Heatmap {
 public:
  virtual ~Heatmap() = default;
  // Compares `in` with the previous frame given to this object and writes the
  // heat map to `out` (same width and height). With the CUDA backend both
  // views are device memory, the work is queued on the context's stream, and
  // `in` must stay valid and unmodified until the next process() returns: it
  // is the next call's previous frame (the frame stays on the device, no
  // copy). The CPU backend keeps its own copy of the previous frame.
  virtual void process(const FrameView &in, const FrameView &out, const HeatmapParams &params) = 0;
  // Forgets the previous frame: the next frame shows no change.
  virtual void reset() = 0;

  // Backend chosen by the context; one object per format and size. Throws
  // Error for unsupported formats or an empty size.
  static std::unique_ptr<Heatmap> create(const Context &ctx, VideoFormat in_format,
                                         VideoFormat out_format, int width, int height);
  // Packed RGB to itself; GRAY8 to GRAY8 or to any packed RGB format.
  static bool supports(VideoFormat in_format, VideoFormat out_format);
};

// The colour of every difference 0..765 for `params`, as the CPU reference
// uses it (exposed for tests).
void heat_table(HeatColormap colormap, double gain, HeatColour table[kHeatTableSize]);

namespace detail {
std::unique_ptr<Heatmap> make_cuda_heatmap(const Context &ctx, VideoFormat in_format,
                                           VideoFormat out_format, int width, int height);
// The CPU backend runs a fast path (cuda/cpu/heatmap_fast.cpp) that gives the
// same bytes as the reference (cuda/cpu/heatmap.cpp: plain loops that define
// the operation). Tests compare the two; create() gives the fast one. Both
// take formats and sizes create() has checked.
std::unique_ptr<Heatmap> make_fast_heatmap(VideoFormat in_format, VideoFormat out_format, int width,
                                           int height);
std::unique_ptr<Heatmap> make_reference_heatmap(VideoFormat in_format, VideoFormat out_format,
                                                int width, int height);
}  // namespace detail

}  // namespace cudadiff
