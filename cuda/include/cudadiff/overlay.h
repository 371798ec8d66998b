// Overlay: alpha-blends a small ARGB image (rendered text, a logo) onto every
// frame, in place. The image is set once (prepared for the frame's format and
// uploaded by the CUDA backend) and blended onto each frame.
//
// The image: 8-bit straight (not premultiplied) alpha, bytes A, R, G, B per
// pixel in memory (GStreamer's ARGB), any row stride, in host memory. Its
// top-left pixel sits at (x, y) of the frame; x and y may be negative and the
// image may reach past the frame: only frame pixels are ever written.
//
// The blend, in integers, so the CPU and CUDA backends agree bit for bit
// (a = image alpha, c = the image's value for the sample, s = frame sample):
//
//   blend(s, c, a) = (s * (255 - a) + c * a + 127) / 255
//
//   a = 0 keeps s, a = 255 gives c; the result is s + (c - s) * a / 255
//   rounded to nearest (the exact quotient never ends in .5).
//
// Per format:
//   packed RGB:  R, G, B = blend(s, image R/G/B, a); an alpha byte (BGRA, ...)
//                becomes blend(s, 255, a) (the image composed over the frame);
//                an x byte (BGRx, ...) is kept.
//   GRAY8:       blend(s, gray, a) with gray = (77 R + 150 G + 29 B + 128) >> 8
//                (BT.601 full-range luma, as cudagrayscale's bt601).
//   I420, YV12, NV12, NV21 (BT.601 limited range, computed once per image):
//                Y = (66 R + 129 G + 25 B + 4224) >> 8             (16..235)
//                U = (-38 R - 74 G + 112 B + 32896) >> 8           (16..240)
//                V = (112 R - 94 G - 18 B + 32896) >> 8            (16..240)
//                luma: blend(s, Y, a) at every pixel.
//                chroma: each chroma sample covers a 2x2 block of pixels; over
//                its four pixels (a pixel past the right or bottom edge of an
//                odd-sized frame counts as its in-frame neighbour; a pixel
//                outside the image has a = 0):
//                  S = sum of a,  P = sum of a * U (or a * V)
//                  out = (s * (1020 - S) + P + 510) / 1020
//                that is, the mean of the four pixels' blends, rounded to
//                nearest. With one alpha and colour over the block it equals
//                blend(s, U, a) exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "cudadiff/frame.h"
#include "cudadiff/grayscale.h"  // CUDADIFF_HD, gray_value
#include "cudadiff/runtime.h"

namespace cudadiff {

// An ARGB image in host memory (see above); width or height 0 = no image.
struct ArgbImage {
  const uint8_t *data = nullptr;
  size_t stride = 0;  // bytes from one row to the next (>= 4 * width)
  int width = 0;
  int height = 0;
};

// A rectangle [x0, x1) x [y0, y1); empty when x1 <= x0 or y1 <= y0.
struct Rect {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  bool empty() const { return x1 <= x0 || y1 <= y0; }
  int width() const { return x1 - x0; }
  int height() const { return y1 - y0; }
};

// The per-sample rules, shared by both backends (host and device code).
CUDADIFF_HD uint32_t overlay_blend(uint32_t s, uint32_t c, uint32_t a) {
  return (s * (255u - a) + c * a + 127u) / 255u;
}
CUDADIFF_HD uint32_t overlay_blend_chroma(uint32_t s, uint32_t alpha_sum, uint32_t weighted_sum) {
  return (s * (1020u - alpha_sum) + weighted_sum + 510u) / 1020u;
}
CUDADIFF_HD uint32_t overlay_luma_601(uint32_t r, uint32_t g, uint32_t b) {
  return (66u * r + 129u * g + 25u * b + 4224u) >> 8;
}
CUDADIFF_HD uint32_t overlay_cb_601(uint32_t r, uint32_t g, uint32_t b) {
  return (112u * b + 32896u - 38u * r - 74u * g) >> 8;  // never negative: 32896 > 112 * 255
}
CUDADIFF_HD uint32_t overlay_cr_601(uint32_t r, uint32_t g, uint32_t b) {
  return (112u * r + 32896u - 94u * g - 18u * b) >> 8;
}

class Overlay {
 public:
  virtual ~Overlay() = default;

  // Sets the image and its place (see above); the image memory is read during
  // the call only. The values each format needs are computed here, once; the
  // CUDA backend uploads them and waits for the upload (this is not a per-frame
  // call). An image with width or height 0 removes the overlay.
  virtual void set_image(const ArgbImage &image, int x, int y) = 0;

  // Blends the image onto `frame`, in place (format and size as created). CPU
  // backend: host memory. CUDA backend: device memory (or mapped pinned memory
  // on integrated GPUs); the work is queued on the context's stream.
  virtual void blend(const FrameView &frame) = 0;

  // Blends onto a frame in host memory, in place. CPU backend: as blend().
  // CUDA backend: copies the covered rectangle of each plane to the device,
  // blends there and copies it back, all queued on the context's stream: the
  // caller synchronises before it reads the frame. Only those rectangles
  // cross the bus, not the frame.
  virtual void blend_host(const FrameView &frame) = 0;

  // The pixels blend() may change (clipped to the frame and to the image's
  // non-transparent pixels); empty when nothing would change.
  Rect covered() const { return covered_; }
  VideoFormat format() const { return format_; }

  // Backend chosen by the context. Throws Error for unsupported formats or
  // sizes.
  static std::unique_ptr<Overlay> create(const Context &ctx, VideoFormat format, int width,
                                         int height);
  static bool supports(VideoFormat format);

 protected:
  Overlay(VideoFormat format, int width, int height)
      : format_(format), width_(width), height_(height) {}
  VideoFormat format_;
  int width_, height_;
  Rect covered_;
};

namespace detail {

// The image prepared for one format and place: what both backends blend.
struct OverlayPlan {
  Rect luma;    // covered pixels of plane 0 (frame coordinates)
  Rect chroma;  // covered samples of the chroma planes (4:2:0 formats)
  // Per covered pixel, row by row (luma.width() per row, tightly packed):
  // packed RGB: R, G, B, A; GRAY8 and 4:2:0: value (gray or Y), A.
  std::vector<uint8_t> pixels;
  // 4:2:0, per covered chroma sample, row by row: S, P for U, P for V.
  std::vector<uint32_t> chroma_sums;
};

enum class OverlayKind { PackedRgb, Gray, Yuv420 };
OverlayKind overlay_kind(VideoFormat format);
// Planes that hold U and V (4:2:0), and for semi-planar formats the byte
// offset of U and V in a sample pair (planar: 0 and plane 2 holds V).
struct ChromaLayout {
  int u_plane, v_plane;  // the same plane for NV12 / NV21
  int u_offset, v_offset;
  int sample_bytes;  // 1 planar, 2 semi-planar
};
ChromaLayout chroma_layout(VideoFormat format);

OverlayPlan plan_overlay(VideoFormat format, int frame_width, int frame_height,
                         const ArgbImage &image, int x, int y);

std::unique_ptr<Overlay> make_cuda_overlay(const Context &ctx, VideoFormat format, int width,
                                           int height);

}  // namespace detail

}  // namespace cudadiff
