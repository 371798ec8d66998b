// Test side of the overlay: ARGB test images and a per-pixel model of the
// rules documented in cudadiff/overlay.h, written the obvious way (every
// frame pixel asks which image pixel lies on it; every chroma sample looks at
// its 2x2 block), independent of the implementation's precomputed plan.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cudadiff/overlay.h"
#include "frames.h"

namespace overlay_model {

// An ARGB image (bytes A, R, G, B) with `pad` bytes after each row.
struct TestImage {
  int width, height;
  size_t stride;
  std::vector<uint8_t> storage;

  TestImage(int w, int h, size_t pad = 0)
      : width(w), height(h), stride(static_cast<size_t>(w) * 4 + pad), storage(stride * h, 0) {}
  void set(int x, int y, int a, int r, int g, int b) {
    uint8_t *p = &storage[y * stride + x * 4];
    p[0] = static_cast<uint8_t>(a);
    p[1] = static_cast<uint8_t>(r);
    p[2] = static_cast<uint8_t>(g);
    p[3] = static_cast<uint8_t>(b);
  }
  const uint8_t *at(int x, int y) const { return &storage[y * stride + x * 4]; }
  cudadiff::ArgbImage view() const {
    cudadiff::ArgbImage v;
    v.data = storage.data();
    v.stride = stride;
    v.width = width;
    v.height = height;
    return v;
  }
  // Like rendered text: many transparent and many opaque pixels, the rest in
  // between; random colours. Padding bytes random too (never read).
  void fill_random(std::mt19937 &gen) {
    for (auto &b : storage) b = static_cast<uint8_t>(gen() >> 24);
    for (int y = 0; y < height; ++y)
      for (int x = 0; x < width; ++x) {
        const uint32_t pick = gen() % 3;
        uint8_t *p = &storage[y * stride + x * 4];
        p[0] = pick == 0 ? 0 : pick == 1 ? 255 : static_cast<uint8_t>(gen() >> 24);
      }
  }
};

inline std::vector<cudadiff::VideoFormat> all_formats() {
  std::vector<cudadiff::VideoFormat> f = testing_util::packed_rgb_formats();
  for (auto g :
       {cudadiff::VideoFormat::GRAY8, cudadiff::VideoFormat::I420, cudadiff::VideoFormat::YV12,
        cudadiff::VideoFormat::NV12, cudadiff::VideoFormat::NV21})
    f.push_back(g);
  return f;
}

// The rules restated.
inline int blend(int s, int c, int a) {
  return static_cast<int>(std::lround(s + (c - s) * a / 255.0));
}
inline int gray(int r, int g, int b) {
  return static_cast<int>(std::floor((77 * r + 150 * g + 29 * b) / 256.0 + 0.5));
}
inline int y601(int r, int g, int b) {
  return 16 + static_cast<int>(std::floor((66 * r + 129 * g + 25 * b + 128) / 256.0));
}
inline int u601(int r, int g, int b) {
  return 128 + static_cast<int>(std::floor((-38 * r - 74 * g + 112 * b + 128) / 256.0));
}
inline int v601(int r, int g, int b) {
  return 128 + static_cast<int>(std::floor((112 * r - 94 * g - 18 * b + 128) / 256.0));
}

// The image pixel on frame pixel (fx, fy), or nullptr.
inline const uint8_t *image_pixel(const TestImage &img, int x, int y, int fx, int fy) {
  const long long ix = static_cast<long long>(fx) - x, iy = static_cast<long long>(fy) - y;
  if (ix < 0 || iy < 0 || ix >= img.width || iy >= img.height) return nullptr;
  return img.at(static_cast<int>(ix), static_cast<int>(iy));
}

// `in` with `img` blended at (x, y).
inline testing_util::HostFrame expected(const testing_util::HostFrame &in, const TestImage &img,
                                        int x, int y) {
  using cudadiff::VideoFormat;
  testing_util::HostFrame out(in.view.format, in.view.width, in.view.height, in.pad);
  cudadiff::copy_frame_host(in.view, out.view);
  const cudadiff::FrameView &v = out.view;
  const VideoFormat fmt = v.format;
  const int w = v.width, h = v.height;
  const bool yuv = fmt == VideoFormat::I420 || fmt == VideoFormat::YV12 ||
                   fmt == VideoFormat::NV12 || fmt == VideoFormat::NV21;
  for (int fy = 0; fy < h; ++fy)
    for (int fx = 0; fx < w; ++fx) {
      const uint8_t *p = image_pixel(img, x, y, fx, fy);
      if (!p) continue;
      const int a = p[0], r = p[1], g = p[2], b = p[3];
      if (fmt == VideoFormat::GRAY8 || yuv) {
        uint8_t &s = v.row(0, fy)[fx];
        s = static_cast<uint8_t>(blend(s, yuv ? y601(r, g, b) : gray(r, g, b), a));
        continue;
      }
      const cudadiff::FormatInfo &fi = cudadiff::format_info(fmt);
      uint8_t *px = v.row(0, fy) + fx * fi.pixel_stride[0];
      px[fi.r] = static_cast<uint8_t>(blend(px[fi.r], r, a));
      px[fi.g] = static_cast<uint8_t>(blend(px[fi.g], g, a));
      px[fi.b] = static_cast<uint8_t>(blend(px[fi.b], b, a));
      if (fi.a >= 0) px[fi.a] = static_cast<uint8_t>(blend(px[fi.a], 255, a));
    }
  if (!yuv) return out;
  const int cw = (w + 1) / 2, ch = (h + 1) / 2;
  for (int cy = 0; cy < ch; ++cy)
    for (int cx = 0; cx < cw; ++cx) {
      uint8_t *u, *vv;
      switch (fmt) {
        case VideoFormat::I420:
          u = v.row(1, cy) + cx;
          vv = v.row(2, cy) + cx;
          break;
        case VideoFormat::YV12:
          vv = v.row(1, cy) + cx;
          u = v.row(2, cy) + cx;
          break;
        case VideoFormat::NV12:
          u = v.row(1, cy) + 2 * cx;
          vv = u + 1;
          break;
        default:
          vv = v.row(1, cy) + 2 * cx;
          u = vv + 1;
          break;  // NV21
      }
      long long nu = 0, nv = 0;  // sums of s (255 - a) + a c over the block
      for (int k = 0; k < 4; ++k) {
        const int fx = std::min(2 * cx + (k & 1), w - 1);
        const int fy = std::min(2 * cy + (k >> 1), h - 1);
        const uint8_t *p = image_pixel(img, x, y, fx, fy);
        const int a = p ? p[0] : 0;
        const int cu = p ? u601(p[1], p[2], p[3]) : 0, cv = p ? v601(p[1], p[2], p[3]) : 0;
        nu += static_cast<long long>(*u) * (255 - a) + a * cu;
        nv += static_cast<long long>(*vv) * (255 - a) + a * cv;
      }
      // The mean of four blends (n / 1020) rounded half up.
      *u = static_cast<uint8_t>((2 * nu + 1020) / 2040);
      *vv = static_cast<uint8_t>((2 * nv + 1020) / 2040);
    }
  return out;
}

}  // namespace overlay_model
