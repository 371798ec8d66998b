// Noise view: which pixels the difference encoder would send (the report's
// chapter 5). A byte changed when |current - previous| > threshold, the
// encoder's rule; a pixel is marked when any of its bytes changed (every byte
// of the pixel, alpha and x included, as the encoder sees the frame). The
// first frame after creation or reset() has no previous frame: nothing is
// marked.
//
// Output: the input format (packed RGB family), or for GRAY8 input GRAY8 or any
// packed RGB format. With `color` = 0xAARRGGBB and A its alpha:
//
//   mask:    marked pixels show the colour over black, the others black;
//   overlay: marked pixels show the colour over the current frame, the others
//            the current frame unchanged;
//
// "c over b" per channel is (c A + b (255 - A) + 127) / 255 (A = 255: c). A
// GRAY8 output paints the colour's BT.601 luma (gray_value(Bt601, R, G, B)).
// The alpha/x byte of the output is the input's (255 when the input is GRAY8).
// Integer arithmetic only: both backends agree bit for bit, counts included.
#pragma once

#include <cstdint>
#include <memory>

#include "cudadiff/frame.h"
#include "cudadiff/grayscale.h"  // CUDADIFF_HD, gray_value
#include "cudadiff/runtime.h"

namespace cudadiff {

enum class NoiseMode { Mask = 0, Overlay = 1 };

struct NoiseParams {
  int threshold = 20;  // 0..255: a byte changed when |difference| > threshold
  NoiseMode mode = NoiseMode::Mask;
  uint32_t color = 0xffff0000u;  // 0xAARRGGBB; default opaque red
};

// Totals over the frames counted since the counts were last taken (or
// cleared, or the object created). Pixels and bytes are those of the frames
// that had a previous frame (width x height, and width x height x bytes per
// pixel, each); a frame without one (`frames` - `compared_frames`) has
// nothing marked and adds nothing but to `frames`.
struct NoiseCounts {
  uint64_t marked_pixels = 0;
  uint64_t pixels = 0;
  uint64_t changed_bytes = 0;
  uint64_t bytes = 0;
  uint32_t frames = 0;           // frames processed with count = true
  uint32_t compared_frames = 0;  // of those, the ones that had a previous frame
};

// Colour c painted over background b with alpha a (all 0..255).
CUDADIFF_HD uint32_t noise_paint(uint32_t c, uint32_t b, uint32_t a) {
  return (c * a + b * (255u - a) + 127u) / 255u;
}

class NoiseVis {
 public:
  virtual ~NoiseVis() = default;
  // Compares `in` with the previous frame given to this object and writes the
  // view to `out` (same width and height). With `count`, also adds the
  // frame's marked pixels and changed bytes to the running totals. With the
  // CUDA backend both views are device memory, the work is queued on the
  // context's stream, and `in` must stay valid and unmodified until the next
  // process() returns (it is the next call's previous frame); the totals
  // stay on the device (no per-frame copy, reset or synchronisation). The CPU
  // backend keeps its own copy of the previous frame.
  virtual void process(const FrameView &in, const FrameView &out, const NoiseParams &params,
                       bool count) = 0;
  // Hands the running totals (every counted frame since the last take, clear
  // or creation) over to counts() and starts new totals at zero. CUDA: queues
  // one 16-byte copy to the host on the context's stream, nothing else; call
  // it after the process() it should include, e.g. once per reporting
  // interval.
  virtual void take_counts() = 0;
  // The totals handed over by the last take_counts() (all zero before the
  // first). With the CUDA backend, valid once the context's stream has been
  // synchronised after that take_counts().
  virtual NoiseCounts counts() const = 0;
  // Drops the running totals: the next counted frame starts new ones.
  virtual void clear_counts() = 0;
  // Forgets the previous frame: nothing is marked in the next frame (the
  // running totals are kept; clear_counts() drops them).
  virtual void reset() = 0;

  // Backend chosen by the context; one object per format and size. Throws
  // Error for unsupported formats or an empty size.
  static std::unique_ptr<NoiseVis> create(const Context &ctx, VideoFormat in_format,
                                          VideoFormat out_format, int width, int height);
  // Packed RGB to itself; GRAY8 to GRAY8 or to any packed RGB format.
  static bool supports(VideoFormat in_format, VideoFormat out_format);
};

namespace detail {
std::unique_ptr<NoiseVis> make_cuda_noisevis(const Context &ctx, VideoFormat in_format,
                                             VideoFormat out_format, int width, int height);
// The CPU backend runs a fast path (cuda/cpu/noisevis_fast.cpp) that gives the
// same bytes and counts as the reference (cuda/cpu/noisevis.cpp: plain loops
// that define the operation). Tests compare the two; create() gives the fast
// one. Both take formats and sizes create() has checked.
std::unique_ptr<NoiseVis> make_fast_noisevis(VideoFormat in_format, VideoFormat out_format,
                                             int width, int height);
std::unique_ptr<NoiseVis> make_reference_noisevis(VideoFormat in_format, VideoFormat out_format,
                                                  int width, int height);
}  // namespace detail

}  // namespace cudadiff
