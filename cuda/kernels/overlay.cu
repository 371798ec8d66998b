// Overlay on the GPU. The image is prepared on the host by the same code as
// the CPU reference (plan_overlay: colour conversion, chroma sums) and
// uploaded once per image; each frame then costs one thread per covered pixel
// (and one per covered chroma sample) of the text's rectangle only, never the
// whole frame. Threads of a warp take consecutive pixels of a row, so loads
// and stores are coalesced; 4-byte pixels move as one 32-bit word when the
// frame's rows allow it. Not 16 bytes per thread: a text's rectangle is a few
// tens of thousands of pixels, and its per-frame time is the launch and the
// two copies of the rectangle, not the kernel's bandwidth. From host memory
// (blend_host) only the covered rectangle of each plane crosses the bus, both
// ways.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "../src/check.h"
#include "cudadiff/overlay.h"

namespace cudadiff {
namespace {

constexpr int kBlockX = 64;
constexpr int kBlockY = 4;

struct DevRect {
  int x0, y0, width, height;
};

DevRect dev_rect(const Rect &r) {
  return {r.x0, r.y0, r.width(), r.height()};
}

dim3 grid_for(const DevRect &r) {
  return dim3(static_cast<unsigned>((r.width + kBlockX - 1) / kBlockX),
              static_cast<unsigned>((r.height + kBlockY - 1) / kBlockY));
}

// pixels: R, G, B, A per covered pixel, rows of r.width pixels.
template <int PS, int R, int G, int B, int A, bool WORD>
__global__ void overlay_packed_kernel(uint8_t *__restrict__ frame, size_t stride,
                                      const uint32_t *__restrict__ pixels, DevRect r) {
  const int dx = blockIdx.x * blockDim.x + threadIdx.x;
  const int dy = blockIdx.y * blockDim.y + threadIdx.y;
  constexpr int kA = A < 0 ? 0 : A;  // alpha byte, when the format has one (A >= 0)
  if (dx >= r.width || dy >= r.height) return;
  const uint32_t o = pixels[static_cast<size_t>(dy) * r.width + dx];  // little-endian: R | G<<8 ..
  const uint32_t a = o >> 24;
  if (a == 0) return;  // blend(s, c, 0) == s
  const uint32_t c[3] = {o & 0xffu, (o >> 8) & 0xffu, (o >> 16) & 0xffu};
  uint8_t *px =
      frame + static_cast<size_t>(r.y0 + dy) * stride + static_cast<size_t>(r.x0 + dx) * PS;
  if (WORD) {
    // PS == 4 and the pixel is 4-byte aligned (checked at launch).
    uint32_t w = *reinterpret_cast<uint32_t *>(px);
    const auto put = [&](int k, uint32_t v) { w = (w & ~(0xffu << (8 * k))) | (v << (8 * k)); };
    const auto get = [&](int k) { return (w >> (8 * k)) & 0xffu; };
    const uint32_t nr = overlay_blend(get(R), c[0], a);
    const uint32_t ng = overlay_blend(get(G), c[1], a);
    const uint32_t nb = overlay_blend(get(B), c[2], a);
    put(R, nr);
    put(G, ng);
    put(B, nb);
    if (A >= 0) put(kA, overlay_blend(get(kA), 255u, a));
    *reinterpret_cast<uint32_t *>(px) = w;
  } else {
    px[R] = static_cast<uint8_t>(overlay_blend(px[R], c[0], a));
    px[G] = static_cast<uint8_t>(overlay_blend(px[G], c[1], a));
    px[B] = static_cast<uint8_t>(overlay_blend(px[B], c[2], a));
    if (A >= 0) px[kA] = static_cast<uint8_t>(overlay_blend(px[kA], 255u, a));
  }
}

// GRAY8 and 4:2:0 luma. pixels: value, alpha per covered pixel.
__global__ void overlay_value_kernel(uint8_t *__restrict__ plane, size_t stride,
                                     const uint16_t *__restrict__ pixels, DevRect r) {
  const int dx = blockIdx.x * blockDim.x + threadIdx.x;
  const int dy = blockIdx.y * blockDim.y + threadIdx.y;
  if (dx >= r.width || dy >= r.height) return;
  const uint32_t o = pixels[static_cast<size_t>(dy) * r.width + dx];  // value | alpha << 8
  const uint32_t a = o >> 8;
  if (a == 0) return;
  uint8_t *s = plane + static_cast<size_t>(r.y0 + dy) * stride + (r.x0 + dx);
  *s = static_cast<uint8_t>(overlay_blend(*s, o & 0xffu, a));
}

// 4:2:0 chroma. sums: S, P(U), P(V) per covered chroma sample.
__global__ void overlay_chroma_kernel(uint8_t *__restrict__ u_plane, size_t u_stride,
                                      uint8_t *__restrict__ v_plane, size_t v_stride,
                                      int sample_bytes, int u_offset, int v_offset,
                                      const uint32_t *__restrict__ sums, DevRect r) {
  const int dx = blockIdx.x * blockDim.x + threadIdx.x;
  const int dy = blockIdx.y * blockDim.y + threadIdx.y;
  if (dx >= r.width || dy >= r.height) return;
  const uint32_t *sum = sums + (static_cast<size_t>(dy) * r.width + dx) * 3;
  const uint32_t alpha_sum = sum[0];
  if (alpha_sum == 0) return;
  const size_t x = static_cast<size_t>(r.x0 + dx) * sample_bytes;
  uint8_t *u = u_plane + static_cast<size_t>(r.y0 + dy) * u_stride + x + u_offset;
  uint8_t *v = v_plane + static_cast<size_t>(r.y0 + dy) * v_stride + x + v_offset;
  *u = static_cast<uint8_t>(overlay_blend_chroma(*u, alpha_sum, sum[1]));
  *v = static_cast<uint8_t>(overlay_blend_chroma(*v, alpha_sum, sum[2]));
}

template <int PS, int R, int G, int B, int A>
void launch_packed(const FrameView &frame, const uint32_t *pixels, const Rect &rect,
                   cudaStream_t stream) {
  const DevRect r = dev_rect(rect);
  const bool word =
      PS == 4 && ((reinterpret_cast<uintptr_t>(frame.data[0]) | frame.stride[0]) & 3u) == 0;
  if (word)
    overlay_packed_kernel<PS, R, G, B, A, PS == 4>
        <<<grid_for(r), dim3(kBlockX, kBlockY), 0, stream>>>(frame.data[0], frame.stride[0], pixels,
                                                             r);
  else
    overlay_packed_kernel<PS, R, G, B, A, false>
        <<<grid_for(r), dim3(kBlockX, kBlockY), 0, stream>>>(frame.data[0], frame.stride[0], pixels,
                                                             r);
  CUDADIFF_CHECK_LAUNCH("overlay kernel launch");
}

// A rectangle of one plane, `bytes_per_sample` bytes per sample, copied
// between two views of the same format and size.
void copy_rect(const FrameView &src, const FrameView &dst, int plane, const Rect &r,
               int bytes_per_sample, cudaStream_t stream) {
  const size_t x_bytes = static_cast<size_t>(r.x0) * bytes_per_sample;
  const size_t width_bytes = static_cast<size_t>(r.width()) * bytes_per_sample;
  CUDADIFF_CHECK(cudaMemcpy2DAsync(dst.row(plane, r.y0) + x_bytes, dst.stride[plane],
                                   src.row(plane, r.y0) + x_bytes, src.stride[plane], width_bytes,
                                   static_cast<size_t>(r.height()), cudaMemcpyDefault, stream));
}

class CudaOverlay final : public Overlay {
 public:
  CudaOverlay(const Context &ctx, VideoFormat format, int width, int height)
      : Overlay(format, width, height), ctx_(ctx) {}

  void set_image(const ArgbImage &image, int x, int y) override {
    detail::OverlayPlan plan = detail::plan_overlay(format_, width_, height_, image, x, y);
    ctx_.activate();
    // Kernels of earlier frames may still read the buffers replaced below.
    ctx_.synchronize();
    covered_ = Rect();
    chroma_ = Rect();
    if (plan.luma.empty()) return;
    auto stream = static_cast<cudaStream_t>(ctx_.stream_handle());
    upload(pixels_, plan.pixels.data(), plan.pixels.size(), stream);
    if (!plan.chroma_sums.empty())
      upload(chroma_sums_, plan.chroma_sums.data(), plan.chroma_sums.size() * sizeof(uint32_t),
             stream);
    // The plan is freed on return: wait for the copies (once per image).
    ctx_.synchronize();
    covered_ = plan.luma;
    chroma_ = plan.chroma;
  }

  void blend(const FrameView &frame) override {
    validate(frame, "overlay frame");
    if (frame.format != format_ || frame.width != width_ || frame.height != height_)
      throw Error("overlay: frame format or size differs from the one the overlay was made for");
    if (covered_.empty()) return;
    auto stream = static_cast<cudaStream_t>(ctx_.stream_handle());
    const auto *rgba = pixels_.as<uint32_t>();
    switch (format_) {
      case VideoFormat::BGR:
        return launch_packed<3, 2, 1, 0, -1>(frame, rgba, covered_, stream);
      case VideoFormat::RGB:
        return launch_packed<3, 0, 1, 2, -1>(frame, rgba, covered_, stream);
      case VideoFormat::BGRx:
        return launch_packed<4, 2, 1, 0, -1>(frame, rgba, covered_, stream);
      case VideoFormat::RGBx:
        return launch_packed<4, 0, 1, 2, -1>(frame, rgba, covered_, stream);
      case VideoFormat::xBGR:
        return launch_packed<4, 3, 2, 1, -1>(frame, rgba, covered_, stream);
      case VideoFormat::xRGB:
        return launch_packed<4, 1, 2, 3, -1>(frame, rgba, covered_, stream);
      case VideoFormat::BGRA:
        return launch_packed<4, 2, 1, 0, 3>(frame, rgba, covered_, stream);
      case VideoFormat::RGBA:
        return launch_packed<4, 0, 1, 2, 3>(frame, rgba, covered_, stream);
      case VideoFormat::ABGR:
        return launch_packed<4, 3, 2, 1, 0>(frame, rgba, covered_, stream);
      case VideoFormat::ARGB:
        return launch_packed<4, 1, 2, 3, 0>(frame, rgba, covered_, stream);
      default:
        break;
    }
    const DevRect r = dev_rect(covered_);
    overlay_value_kernel<<<grid_for(r), dim3(kBlockX, kBlockY), 0, stream>>>(
        frame.data[0], frame.stride[0], pixels_.as<uint16_t>(), r);
    CUDADIFF_CHECK_LAUNCH("overlay luma kernel launch");
    if (detail::overlay_kind(format_) != detail::OverlayKind::Yuv420) return;
    const detail::ChromaLayout cl = detail::chroma_layout(format_);
    const DevRect c = dev_rect(chroma_);
    overlay_chroma_kernel<<<grid_for(c), dim3(kBlockX, kBlockY), 0, stream>>>(
        frame.data[cl.u_plane], frame.stride[cl.u_plane], frame.data[cl.v_plane],
        frame.stride[cl.v_plane], cl.sample_bytes, cl.u_offset, cl.v_offset,
        chroma_sums_.as<uint32_t>(), c);
    CUDADIFF_CHECK_LAUNCH("overlay chroma kernel launch");
  }

  void blend_host(const FrameView &frame) override {
    validate(frame, "overlay frame");
    if (frame.format != format_ || frame.width != width_ || frame.height != height_)
      throw Error("overlay: frame format or size differs from the one the overlay was made for");
    if (covered_.empty()) return;
    // One device frame, made on first use and kept: only the covered
    // rectangles of it are ever written or read.
    if (staging_.empty()) staging_ = DeviceFrame(format_, width_, height_);
    auto stream = static_cast<cudaStream_t>(ctx_.stream_handle());
    const FrameView &dev = staging_.view();
    const bool yuv = detail::overlay_kind(format_) == detail::OverlayKind::Yuv420;
    const detail::ChromaLayout cl = detail::chroma_layout(format_);
    copy_rect(frame, dev, 0, covered_, format_info(format_).pixel_stride[0], stream);
    if (yuv) {
      copy_rect(frame, dev, cl.u_plane, chroma_, cl.sample_bytes, stream);
      if (cl.v_plane != cl.u_plane) copy_rect(frame, dev, cl.v_plane, chroma_, 1, stream);
    }
    blend(dev);
    copy_rect(dev, frame, 0, covered_, format_info(format_).pixel_stride[0], stream);
    if (yuv) {
      copy_rect(dev, frame, cl.u_plane, chroma_, cl.sample_bytes, stream);
      if (cl.v_plane != cl.u_plane) copy_rect(dev, frame, cl.v_plane, chroma_, 1, stream);
    }
  }

 private:
  void upload(DeviceBuffer &buffer, const void *data, size_t bytes, cudaStream_t stream) {
    if (buffer.size() < bytes) buffer = DeviceBuffer(bytes);
    CUDADIFF_CHECK(cudaMemcpyAsync(buffer.data(), data, bytes, cudaMemcpyHostToDevice, stream));
  }

  const Context &ctx_;
  DeviceBuffer pixels_;       // the plan's pixels
  DeviceBuffer chroma_sums_;  // the plan's chroma sums (4:2:0)
  Rect chroma_;
  DeviceFrame staging_;  // for blend_host
};

}  // namespace

namespace detail {
std::unique_ptr<Overlay> make_cuda_overlay(const Context &ctx, VideoFormat format, int width,
                                           int height) {
  return std::make_unique<CudaOverlay>(ctx, format, width, height);
}
}  // namespace detail

}  // namespace cudadiff
