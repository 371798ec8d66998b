// Overlay, the reference: the image is prepared once (plan_overlay, shared
// with the CUDA backend, which uploads the plan), then blended with readable
// loops over the covered rows (OpenMP across rows).
#include "cudadiff/overlay.h"

#include <algorithm>
#include <string>

namespace cudadiff {
namespace detail {

OverlayKind overlay_kind(VideoFormat format) {
  switch (format) {
    case VideoFormat::GRAY8:
      return OverlayKind::Gray;
    case VideoFormat::I420:
    case VideoFormat::YV12:
    case VideoFormat::NV12:
    case VideoFormat::NV21:
      return OverlayKind::Yuv420;
    default:
      return OverlayKind::PackedRgb;
  }
}

ChromaLayout chroma_layout(VideoFormat format) {
  switch (format) {
    case VideoFormat::YV12:
      return {2, 1, 0, 0, 1};
    case VideoFormat::NV12:
      return {1, 1, 0, 1, 2};
    case VideoFormat::NV21:
      return {1, 1, 1, 0, 2};
    case VideoFormat::I420:
    default:
      return {1, 2, 0, 0, 1};
  }
}

OverlayPlan plan_overlay(VideoFormat format, int frame_width, int frame_height,
                         const ArgbImage &image, int x, int y) {
  OverlayPlan plan;
  if (image.width <= 0 || image.height <= 0) return plan;
  if (image.data == nullptr || image.stride < static_cast<size_t>(image.width) * 4)
    throw Error("overlay: image without data or with a stride shorter than a row");

  // The image clipped to the frame (64-bit: x + width may overflow an int).
  const long long cx0 = std::max<long long>(x, 0);
  const long long cy0 = std::max<long long>(y, 0);
  const long long cx1 = std::min<long long>(static_cast<long long>(x) + image.width, frame_width);
  const long long cy1 = std::min<long long>(static_cast<long long>(y) + image.height, frame_height);
  if (cx1 <= cx0 || cy1 <= cy0) return plan;

  const auto pixel_at = [&](long long fx, long long fy) -> const uint8_t * {
    return image.data + static_cast<size_t>(fy - y) * image.stride +
           static_cast<size_t>(fx - x) * 4;
  };

  // Shrink to the pixels that are not fully transparent: a = 0 changes
  // nothing, and fewer rows mean fewer bytes to copy and blend.
  Rect box{static_cast<int>(cx1), static_cast<int>(cy1), static_cast<int>(cx0),
           static_cast<int>(cy0)};
  for (long long fy = cy0; fy < cy1; ++fy)
    for (long long fx = cx0; fx < cx1; ++fx)
      if (pixel_at(fx, fy)[0] != 0) {
        box.x0 = std::min(box.x0, static_cast<int>(fx));
        box.x1 = std::max(box.x1, static_cast<int>(fx) + 1);
        box.y0 = std::min(box.y0, static_cast<int>(fy));
        box.y1 = std::max(box.y1, static_cast<int>(fy) + 1);
      }
  if (box.empty()) return plan;
  plan.luma = box;

  const OverlayKind kind = overlay_kind(format);
  const int bytes_per_pixel = kind == OverlayKind::PackedRgb ? 4 : 2;
  plan.pixels.resize(static_cast<size_t>(box.width()) * box.height() * bytes_per_pixel);
  uint8_t *out = plan.pixels.data();
  for (int fy = box.y0; fy < box.y1; ++fy)
    for (int fx = box.x0; fx < box.x1; ++fx) {
      const uint8_t *px = pixel_at(fx, fy);
      const uint32_t a = px[0], r = px[1], g = px[2], b = px[3];
      switch (kind) {
        case OverlayKind::PackedRgb:
          *out++ = static_cast<uint8_t>(r);
          *out++ = static_cast<uint8_t>(g);
          *out++ = static_cast<uint8_t>(b);
          *out++ = static_cast<uint8_t>(a);
          break;
        case OverlayKind::Gray:
          *out++ = gray_value(GrayMethod::Bt601, r, g, b);
          *out++ = static_cast<uint8_t>(a);
          break;
        case OverlayKind::Yuv420:
          *out++ = static_cast<uint8_t>(overlay_luma_601(r, g, b));
          *out++ = static_cast<uint8_t>(a);
          break;
      }
    }

  if (kind != OverlayKind::Yuv420) return plan;
  // Chroma samples whose 2x2 block meets the covered pixels.
  plan.chroma = Rect{box.x0 >> 1, box.y0 >> 1, (box.x1 + 1) >> 1, (box.y1 + 1) >> 1};
  plan.chroma_sums.resize(static_cast<size_t>(plan.chroma.width()) * plan.chroma.height() * 3);
  uint32_t *sums = plan.chroma_sums.data();
  for (int sy = plan.chroma.y0; sy < plan.chroma.y1; ++sy)
    for (int sx = plan.chroma.x0; sx < plan.chroma.x1; ++sx) {
      uint32_t alpha_sum = 0, u_sum = 0, v_sum = 0;
      for (int dy = 0; dy < 2; ++dy)
        for (int dx = 0; dx < 2; ++dx) {
          // Past the right/bottom edge of an odd-sized frame: the edge pixel.
          const long long fx = std::min(2 * sx + dx, frame_width - 1);
          const long long fy = std::min(2 * sy + dy, frame_height - 1);
          if (fx < x || fy < y || fx >= static_cast<long long>(x) + image.width ||
              fy >= static_cast<long long>(y) + image.height)
            continue;  // outside the image: transparent
          const uint8_t *px = pixel_at(fx, fy);
          const uint32_t a = px[0], r = px[1], g = px[2], b = px[3];
          alpha_sum += a;
          u_sum += a * overlay_cb_601(r, g, b);
          v_sum += a * overlay_cr_601(r, g, b);
        }
      *sums++ = alpha_sum;
      *sums++ = u_sum;
      *sums++ = v_sum;
    }
  return plan;
}

}  // namespace detail

namespace {

// Below this many covered samples (a line of text is ~30000) one thread does
// the work: waking a team costs more than it saves, and on a busy machine a
// thread that is not scheduled holds up the whole frame.
constexpr long long kParallelSamples = 1 << 18;

bool worth_threads(const Rect &r) {
  return static_cast<long long>(r.width()) * r.height() >= kParallelSamples;
}

// f(y) for the rows of `r`, on the CPU backend's pool when it is worth it.
template <class F>
void for_rows(const Rect &r, F &&f) {
  cpu_parallel_ranges(r.y1 - r.y0, worth_threads(r) ? cpu_threads() : 1,
                      [&](long long begin, long long end) {
                        for (long long y = r.y0 + begin; y < r.y0 + end; ++y) f(int(y));
                      });
}

class CpuOverlay final : public Overlay {
 public:
  CpuOverlay(VideoFormat format, int width, int height) : Overlay(format, width, height) {}

  void set_image(const ArgbImage &image, int x, int y) override {
    plan_ = detail::plan_overlay(format_, width_, height_, image, x, y);
    covered_ = plan_.luma;
  }

  void blend(const FrameView &frame) override {
    validate(frame, "overlay frame");
    if (frame.format != format_ || frame.width != width_ || frame.height != height_)
      throw Error("overlay: frame format or size differs from the one the overlay was made for");
    if (plan_.luma.empty()) return;
    switch (detail::overlay_kind(format_)) {
      case detail::OverlayKind::PackedRgb:
        blend_packed(frame);
        break;
      case detail::OverlayKind::Gray:
        blend_value_alpha(frame);
        break;
      case detail::OverlayKind::Yuv420:
        blend_value_alpha(frame);
        blend_chroma(frame);
        break;
    }
  }

  void blend_host(const FrameView &frame) override { blend(frame); }

 private:
  void blend_packed(const FrameView &frame) {
    const FormatInfo &fi = format_info(format_);
    const int ps = fi.pixel_stride[0];
    const Rect r = plan_.luma;
    for_rows(r, [&](int y) {
      const uint8_t *src = plan_.pixels.data() + static_cast<size_t>(y - r.y0) * r.width() * 4;
      uint8_t *row = frame.row(0, y);
      for (int x = r.x0; x < r.x1; ++x, src += 4) {
        const uint32_t a = src[3];
        if (a == 0) continue;  // blend(s, c, 0) == s
        uint8_t *px = row + static_cast<size_t>(x) * ps;
        px[fi.r] = static_cast<uint8_t>(overlay_blend(px[fi.r], src[0], a));
        px[fi.g] = static_cast<uint8_t>(overlay_blend(px[fi.g], src[1], a));
        px[fi.b] = static_cast<uint8_t>(overlay_blend(px[fi.b], src[2], a));
        if (fi.a >= 0) px[fi.a] = static_cast<uint8_t>(overlay_blend(px[fi.a], 255, a));
      }
    });
  }

  // GRAY8 and the luma plane of 4:2:0: (value, alpha) per pixel.
  void blend_value_alpha(const FrameView &frame) {
    const Rect r = plan_.luma;
    for_rows(r, [&](int y) {
      const uint8_t *src = plan_.pixels.data() + static_cast<size_t>(y - r.y0) * r.width() * 2;
      uint8_t *row = frame.row(0, y);
      for (int x = r.x0; x < r.x1; ++x, src += 2)
        row[x] = static_cast<uint8_t>(overlay_blend(row[x], src[0], src[1]));
    });
  }

  void blend_chroma(const FrameView &frame) {
    const detail::ChromaLayout cl = detail::chroma_layout(format_);
    const Rect r = plan_.chroma;
    for_rows(r, [&](int y) {
      const uint32_t *sums =
          plan_.chroma_sums.data() + static_cast<size_t>(y - r.y0) * r.width() * 3;
      uint8_t *u_row = frame.row(cl.u_plane, y);
      uint8_t *v_row = frame.row(cl.v_plane, y);
      for (int x = r.x0; x < r.x1; ++x, sums += 3) {
        uint8_t *u = u_row + static_cast<size_t>(x) * cl.sample_bytes + cl.u_offset;
        uint8_t *v = v_row + static_cast<size_t>(x) * cl.sample_bytes + cl.v_offset;
        *u = static_cast<uint8_t>(overlay_blend_chroma(*u, sums[0], sums[1]));
        *v = static_cast<uint8_t>(overlay_blend_chroma(*v, sums[0], sums[2]));
      }
    });
  }

  detail::OverlayPlan plan_;
};

}  // namespace

bool Overlay::supports(VideoFormat format) {
  return is_packed_rgb(format) || format == VideoFormat::GRAY8 || format == VideoFormat::I420 ||
         format == VideoFormat::YV12 || format == VideoFormat::NV12 || format == VideoFormat::NV21;
}

std::unique_ptr<Overlay> Overlay::create(const Context &ctx, VideoFormat format, int width,
                                         int height) {
  if (!supports(format))
    throw Error(std::string("overlay: unsupported format ") + format_name(format));
  if (width <= 0 || height <= 0)
    throw Error("overlay: empty frame size " + std::to_string(width) + "x" +
                std::to_string(height));
#if CUDADIFF_HAVE_CUDA
  if (ctx.is_cuda()) return detail::make_cuda_overlay(ctx, format, width, height);
#else
  (void)ctx;
#endif
  return std::make_unique<CpuOverlay>(format, width, height);
}

}  // namespace cudadiff
