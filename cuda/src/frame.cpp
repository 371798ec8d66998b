#include "cudadiff/frame.h"

#include <string>

#include "cudadiff/runtime.h"

namespace cudadiff {
namespace {

//                     name     planes pixel stride  w_sub      h_sub       r   g   b   a packed_rgb
const FormatInfo kFormats[] = {
    {"unknown", 0, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, -1, -1, -1, -1, false},
    {"BGR", 1, {3, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, 2, 1, 0, -1, true},
    {"RGB", 1, {3, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, 0, 1, 2, -1, true},
    {"BGRx", 1, {4, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, 2, 1, 0, -1, true},
    {"RGBx", 1, {4, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, 0, 1, 2, -1, true},
    {"xBGR", 1, {4, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, 3, 2, 1, -1, true},
    {"xRGB", 1, {4, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, 1, 2, 3, -1, true},
    {"BGRA", 1, {4, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, 2, 1, 0, 3, true},
    {"RGBA", 1, {4, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, 0, 1, 2, 3, true},
    {"ABGR", 1, {4, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, 3, 2, 1, 0, true},
    {"ARGB", 1, {4, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, 1, 2, 3, 0, true},
    {"GRAY8", 1, {1, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, -1, -1, -1, -1, false},
    {"I420", 3, {1, 1, 1, 0}, {0, 1, 1, 0}, {0, 1, 1, 0}, -1, -1, -1, -1, false},
    {"YV12", 3, {1, 1, 1, 0}, {0, 1, 1, 0}, {0, 1, 1, 0}, -1, -1, -1, -1, false},
    {"NV12", 2, {1, 2, 0, 0}, {0, 1, 0, 0}, {0, 1, 0, 0}, -1, -1, -1, -1, false},
    {"NV21", 2, {1, 2, 0, 0}, {0, 1, 0, 0}, {0, 1, 0, 0}, -1, -1, -1, -1, false},
    // Packed 4:2:2: one "sample" is a 4-byte group holding two pixels.
    {"YUY2", 1, {4, 0, 0, 0}, {1, 0, 0, 0}, {0, 0, 0, 0}, -1, -1, -1, -1, false},
    {"UYVY", 1, {4, 0, 0, 0}, {1, 0, 0, 0}, {0, 0, 0, 0}, -1, -1, -1, -1, false},
    {"Y444", 3, {1, 1, 1, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, -1, -1, -1, -1, false},
    {"Y42B", 3, {1, 1, 1, 0}, {0, 1, 1, 0}, {0, 0, 0, 0}, -1, -1, -1, -1, false},
};
constexpr int kFormatCount = sizeof(kFormats) / sizeof(kFormats[0]);

}  // namespace

const FormatInfo &format_info(VideoFormat format) {
  const int i = static_cast<int>(format);
  return (i > 0 && i < kFormatCount) ? kFormats[i] : kFormats[0];
}

const char *format_name(VideoFormat format) {
  return format_info(format).name;
}

int plane_width(VideoFormat format, int plane, int width) {
  const FormatInfo &fi = format_info(format);
  if (plane < 0 || plane >= fi.n_planes) return 0;
  const int sub = fi.w_sub[plane];
  return (width + (1 << sub) - 1) >> sub;
}

int plane_height(VideoFormat format, int plane, int height) {
  const FormatInfo &fi = format_info(format);
  if (plane < 0 || plane >= fi.n_planes) return 0;
  const int sub = fi.h_sub[plane];
  return (height + (1 << sub) - 1) >> sub;
}

size_t plane_row_bytes(VideoFormat format, int plane, int width) {
  const FormatInfo &fi = format_info(format);
  if (plane < 0 || plane >= fi.n_planes) return 0;
  return static_cast<size_t>(plane_width(format, plane, width)) *
         static_cast<size_t>(fi.pixel_stride[plane]);
}

void validate(const FrameView &view, const char *what) {
  const FormatInfo &fi = format_info(view.format);
  if (fi.n_planes == 0) throw Error(std::string(what) + ": unsupported video format");
  if (view.width <= 0 || view.height <= 0)
    throw Error(std::string(what) + ": empty frame (" + std::to_string(view.width) + "x" +
                std::to_string(view.height) + ")");
  for (int p = 0; p < fi.n_planes; ++p) {
    if (view.data[p] == nullptr)
      throw Error(std::string(what) + ": plane " + std::to_string(p) + " has no data");
    if (view.stride[p] < view.row_bytes(p))
      throw Error(std::string(what) + ": stride of plane " + std::to_string(p) + " (" +
                  std::to_string(view.stride[p]) + ") is shorter than a row (" +
                  std::to_string(view.row_bytes(p)) + " bytes)");
  }
}

size_t packed_layout(VideoFormat format, int width, int height, size_t row_align,
                     size_t offsets[kMaxPlanes], size_t strides[kMaxPlanes]) {
  const FormatInfo &fi = format_info(format);
  if (row_align == 0) row_align = 1;
  size_t total = 0;
  for (int p = 0; p < kMaxPlanes; ++p) {
    offsets[p] = 0;
    strides[p] = 0;
  }
  for (int p = 0; p < fi.n_planes; ++p) {
    const size_t row = plane_row_bytes(format, p, width);
    strides[p] = (row + row_align - 1) / row_align * row_align;
    offsets[p] = total;
    total += strides[p] * static_cast<size_t>(plane_height(format, p, height));
  }
  return total;
}

}  // namespace cudadiff
