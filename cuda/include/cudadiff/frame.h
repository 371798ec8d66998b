// Frame views shared by the CPU and CUDA operations: a video format, a size,
// and per-plane pointer and stride. A view never owns memory; the pointers are
// host pointers for the CPU backend and device pointers for the CUDA backend.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cudadiff {

// The 8-bit formats the project knows. Names follow GStreamer's video formats
// (byte order in memory, e.g. BGR = B, G, R).
enum class VideoFormat : int {
  Unknown = 0,
  BGR,
  RGB,
  BGRx,
  RGBx,
  xBGR,
  xRGB,
  BGRA,
  RGBA,
  ABGR,
  ARGB,
  GRAY8,
  I420,
  YV12,
  NV12,
  NV21,
  YUY2,
  UYVY,
  Y444,
  Y42B,
};

constexpr int kMaxPlanes = 4;

// Static description of a format's layout.
struct FormatInfo {
  const char *name;
  int n_planes;
  int pixel_stride[kMaxPlanes];  // bytes per pixel (per horizontal sample group for packed YUV)
  int w_sub[kMaxPlanes];         // log2 horizontal subsampling per plane
  int h_sub[kMaxPlanes];         // log2 vertical subsampling per plane
  // Packed RGB family: byte offsets of R, G, B and alpha (-1: none) within a pixel.
  int r, g, b, a;
  bool packed_rgb;
};

const FormatInfo &format_info(VideoFormat format);
const char *format_name(VideoFormat format);
inline bool is_packed_rgb(VideoFormat f) {
  return format_info(f).packed_rgb;
}

// Width of plane `plane` in samples (round-up for subsampled planes) and in bytes.
int plane_width(VideoFormat format, int plane, int width);
int plane_height(VideoFormat format, int plane, int height);
size_t plane_row_bytes(VideoFormat format, int plane, int width);

// A mutable view of one frame.
struct FrameView {
  VideoFormat format = VideoFormat::Unknown;
  int width = 0;
  int height = 0;
  uint8_t *data[kMaxPlanes] = {nullptr, nullptr, nullptr, nullptr};
  size_t stride[kMaxPlanes] = {0, 0, 0, 0};

  int n_planes() const { return format_info(format).n_planes; }
  uint8_t *row(int plane, int y) const {
    return data[plane] + static_cast<size_t>(y) * stride[plane];
  }
  int plane_width(int plane) const { return cudadiff::plane_width(format, plane, width); }
  int plane_height(int plane) const { return cudadiff::plane_height(format, plane, height); }
  size_t row_bytes(int plane) const { return plane_row_bytes(format, plane, width); }
};

// Throws cudadiff::Error when the view is malformed (null planes, stride shorter
// than a row, zero size): operations call it before touching memory.
void validate(const FrameView &view, const char *what);

// The layout a tightly packed frame of this format and size has when each row
// is padded to `row_align` bytes; returns the total size and fills offsets and
// strides (planes are placed one after another).
size_t packed_layout(VideoFormat format, int width, int height, size_t row_align,
                     size_t offsets[kMaxPlanes], size_t strides[kMaxPlanes]);

}  // namespace cudadiff
