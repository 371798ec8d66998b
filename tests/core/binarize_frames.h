// Frames for the binarization tests (CPU and CUDA): a gray pattern written
// into any input format, and "real-looking" content.
#pragma once

#include <cmath>
#include <functional>
#include <random>

#include "cudadiff/binarize.h"
#include "frames.h"

namespace binarize_test {

using cudadiff::VideoFormat;
using testing_util::HostFrame;

inline std::vector<VideoFormat> input_formats() {
  std::vector<VideoFormat> f = testing_util::packed_rgb_formats();
  f.push_back(VideoFormat::GRAY8);
  f.push_back(VideoFormat::I420);
  f.push_back(VideoFormat::NV12);
  return f;
}

// The alpha / x byte the pattern frames carry, to check that it is kept.
inline uint8_t alpha_at(int x, int y) {
  return static_cast<uint8_t>(0x40 + (x * 7 + y * 3) % 97);
}

// A frame whose gray value at (x, y) is gray(x, y) with every gray rule:
// R = G = B = v gives v for average, BT.601 and BT.709 alike (their weights
// sum to 256). YUV chroma gets arbitrary bytes (they must not matter).
inline HostFrame gray_pattern(VideoFormat fmt, int w, int h,
                              const std::function<int(int, int)> &gray, size_t pad = 0) {
  HostFrame f(fmt, w, h, pad);
  const cudadiff::FormatInfo &fi = cudadiff::format_info(fmt);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const uint8_t v = static_cast<uint8_t>(gray(x, y));
      if (cudadiff::is_packed_rgb(fmt)) {
        uint8_t *px = f.view.row(0, y) + x * fi.pixel_stride[0];
        for (int k = 0; k < fi.pixel_stride[0]; ++k) px[k] = alpha_at(x, y);
        px[fi.r] = px[fi.g] = px[fi.b] = v;
      } else {
        f.view.row(0, y)[x] = v;
      }
    }
  for (int p = 1; p < f.view.n_planes(); ++p)
    for (int y = 0; y < f.view.plane_height(p); ++y)
      for (size_t x = 0; x < f.view.row_bytes(p); ++x)
        f.view.row(p, y)[x] = static_cast<uint8_t>(x * 31 + y * 17);
  return f;
}

// Camera-like content: a smooth lit background, a few flat objects (long runs
// of equal values), soft edges and sensor noise. The gray histogram is
// bimodal-ish and has flat regions, like real frames.
inline HostFrame realistic_frame(VideoFormat fmt, int w, int h, std::mt19937 &gen, size_t pad = 0) {
  HostFrame f(fmt, w, h, pad);
  std::normal_distribution<double> noise(0.0, 3.0);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double cx = u(gen) * w, cy = u(gen) * h, r = (0.1 + 0.3 * u(gen)) * std::min(w, h);
  const double bx0 = u(gen) * w * 0.5, by0 = u(gen) * h * 0.5;
  const cudadiff::FormatInfo &fi = cudadiff::format_info(fmt);
  for (int p = 0; p < f.view.n_planes(); ++p) {
    const int pw = static_cast<int>(f.view.row_bytes(p));
    const int ph = f.view.plane_height(p);
    for (int y = 0; y < ph; ++y)
      for (int xb = 0; xb < pw; ++xb) {
        const int ps = p == 0 ? std::max(1, fi.pixel_stride[0]) : 1;
        const int x = xb / ps, c = xb % ps;
        double v = 60 + 120.0 * x / std::max(1, w) + 30.0 * y / std::max(1, h) + 10 * c;
        const double d = std::hypot(x - cx, y - cy);
        if (d < r)
          v = 200 + 20 * c;  // a bright disc
        else if (d < r + 2)
          v = 130;                                                               // its soft edge
        if (x >= bx0 && x < bx0 + w / 4 && y >= by0 && y < by0 + h / 5) v = 25;  // a dark box
        if ((x / 8 + y / 8) % 23 == 0) v += noise(gen) * 4;                      // texture
        v += noise(gen);
        f.view.row(p, y)[xb] = static_cast<uint8_t>(std::min(255.0, std::max(0.0, std::round(v))));
      }
  }
  return f;
}

// The output the rules give for a gray image `g` (gray of each pixel) and a threshold.
inline uint8_t expected_value(int gray, int threshold, bool invert) {
  return (gray > threshold) != invert ? 255 : 0;
}

}  // namespace binarize_test
