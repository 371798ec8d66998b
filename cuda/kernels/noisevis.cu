// Noise view on the GPU: one pass over the previous frame, the current frame
// and the output. Each thread takes 16 pixels (16-byte loads of both frames,
// 16-byte stores) and finds the changed bytes four at a time: absolute
// differences with __vabsdiffu4, "greater than the threshold" as the carry out
// of each byte of |d| + ~threshold. When counts are wanted, each block sums
// its marked pixels and changed bytes (warp shuffles, then shared memory) and
// adds them to two 64-bit device counters with one atomic each. The counters
// add up frame after frame; take_counts() copies their 16 bytes back (once
// per reporting interval, not per frame) and the next counted frame zeroes
// them first. Rows whose pointers or strides are not 16-byte aligned, and the
// last group of a row, take a scalar path.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "../src/check.h"
#include "cudadiff/noisevis.h"
#include "vis_pixels.cuh"

namespace cudadiff {
namespace {

using vis::kBlock;
using vis::kGroup;

// The paint, prepared on the host in the output's byte order.
struct Paint {
  uint32_t mask_colour;    // mask mode: the colour over black, at the colour bytes
  uint32_t scaled[4];      // overlay: colour byte k times alpha, plus 127 (the rounding)
  uint32_t inverse_alpha;  // 255 - alpha
};

// 0x01 at the output's colour bytes: gray * this is gray in R, G and B.
template <int PSO, int SKO>
constexpr uint32_t colour_ones() {
  return PSO == 1 ? 0x01u : PSO == 3 ? 0x00010101u : SKO == 3 ? 0x00010101u : 0x01010100u;
}

// One output pixel (PSO bytes in the low bytes) from the current pixel `cur`
// (PSI bytes) and whether it is marked. SKO: the output's alpha or x byte
// (-1: none), the input's there (same format), or opaque for GRAY8 input.
template <int PSI, int PSO, int SKO, bool OVERLAY>
__device__ __forceinline__ uint32_t noise_pixel(bool marked, uint32_t cur, const Paint &paint) {
  uint32_t out;
  if (!OVERLAY) {
    out = marked ? paint.mask_colour : 0u;
  } else {
    // The background: the current pixel's colour bytes (GRAY8: its gray in each).
    const uint32_t background =
        PSI == 1 ? (cur & 0xffu) * colour_ones<PSO, SKO>() : cur & ~vis::byte_mask(SKO);
    if (!marked) {
      out = background;
    } else {
      out = 0;
#pragma unroll
      for (int k = 0; k < PSO; ++k) {
        if (k == SKO) continue;
        const uint32_t b = (background >> (8 * k)) & 0xffu;
        out |= ((paint.scaled[k] + b * paint.inverse_alpha) / 255u) << (8 * k);
      }
    }
  }
  if (SKO >= 0) out |= PSI == 1 ? vis::byte_mask(SKO) : (cur & vis::byte_mask(SKO));
  return out;
}

template <int PSI, int PSO, int SKO, bool OVERLAY, bool COUNT, bool VECTOR>
__global__ void __launch_bounds__(kBlock)
    noise_kernel(const uint8_t *__restrict__ prev, size_t prev_stride,
                 const uint8_t *__restrict__ cur, size_t cur_stride, uint8_t *__restrict__ out,
                 size_t out_stride, int width, int height, int groups_per_row, Paint paint,
                 uint32_t not_threshold4, unsigned long long *__restrict__ counters) {
  uint32_t marked_pixels = 0, changed_bytes = 0;
  int y = 0, x0 = 0;
  if (vis::group_position(groups_per_row, height, &y, &x0)) {
    const uint8_t *p_row = prev + y * prev_stride + static_cast<size_t>(x0) * PSI;
    const uint8_t *c_row = cur + y * cur_stride + static_cast<size_t>(x0) * PSI;
    uint8_t *o_row = out + y * out_stride + static_cast<size_t>(x0) * PSO;
    if (VECTOR && x0 + kGroup <= width) {
      uint32_t pw[4 * PSI], cw[4 * PSI], flags[4 * PSI], ow[4 * PSO];
      vis::load_group<PSI, true>(p_row, pw);   // the previous frame: last use
      vis::load_group<PSI, false>(c_row, cw);  // the current frame: read again next frame
#pragma unroll
      for (int i = 0; i < 4 * PSI; ++i) {
        flags[i] = vis::bytes_above(__vabsdiffu4(pw[i], cw[i]), not_threshold4);
        if (COUNT) changed_bytes += __popc(flags[i]);
      }
#pragma unroll
      for (int i = 0; i < 4 * PSO; ++i) ow[i] = 0;
#pragma unroll
      for (int p = 0; p < kGroup; ++p) {
        const bool marked = vis::get_pixel<PSI>(flags, p) != 0;
        if (COUNT) marked_pixels += marked ? 1u : 0u;
        vis::put_pixel<PSO>(
            ow, p, noise_pixel<PSI, PSO, SKO, OVERLAY>(marked, vis::get_pixel<PSI>(cw, p), paint));
      }
      vis::store_group<PSO>(o_row, ow);
    } else {
      const int n = min(kGroup, width - x0);
      for (int p = 0; p < n; ++p) {
        const uint32_t pp = vis::load_pixel<PSI>(p_row + p * PSI);
        const uint32_t cp = vis::load_pixel<PSI>(c_row + p * PSI);
        // The bytes above PSI are zero in both, so never "changed".
        const uint32_t f = vis::bytes_above(__vabsdiffu4(pp, cp), not_threshold4);
        if (COUNT) {
          changed_bytes += __popc(f);
          marked_pixels += f != 0 ? 1u : 0u;
        }
        vis::store_pixel<PSO>(o_row + p * PSO,
                              noise_pixel<PSI, PSO, SKO, OVERLAY>(f != 0, cp, paint));
      }
    }
  }
  if (COUNT) vis::block_add2(marked_pixels, changed_bytes, counters);
}

struct Launch {
  const FrameView *prev, *cur, *out;
  Paint paint;
  uint32_t not_threshold4;
  bool overlay;
  unsigned long long *counters;  // null: no counting
  cudaStream_t stream;
};

template <int PSI, int PSO, int SKO>
void launch(const Launch &l) {
  const bool vector = vis::aligned16(l.prev->data[0], l.prev->stride[0]) &&
                      vis::aligned16(l.cur->data[0], l.cur->stride[0]) &&
                      vis::aligned16(l.out->data[0], l.out->stride[0]);
  int groups_per_row = 0;
  const unsigned blocks = vis::group_blocks(l.cur->width, l.cur->height, &groups_per_row);
  const auto run = [&](auto kernel) {
    kernel<<<blocks, kBlock, 0, l.stream>>>(l.prev->data[0], l.prev->stride[0], l.cur->data[0],
                                            l.cur->stride[0], l.out->data[0], l.out->stride[0],
                                            l.cur->width, l.cur->height, groups_per_row, l.paint,
                                            l.not_threshold4, l.counters);
  };
  // One instantiation per (mode, counting, vector): no run-time branches in the pixel loop.
  const auto by_vector = [&](auto scalar_kernel, auto vector_kernel) {
    vector ? run(vector_kernel) : run(scalar_kernel);
  };
  if (l.overlay) {
    l.counters ? by_vector(noise_kernel<PSI, PSO, SKO, true, true, false>,
                           noise_kernel<PSI, PSO, SKO, true, true, true>)
               : by_vector(noise_kernel<PSI, PSO, SKO, true, false, false>,
                           noise_kernel<PSI, PSO, SKO, true, false, true>);
  } else {
    l.counters ? by_vector(noise_kernel<PSI, PSO, SKO, false, true, false>,
                           noise_kernel<PSI, PSO, SKO, false, true, true>)
               : by_vector(noise_kernel<PSI, PSO, SKO, false, false, false>,
                           noise_kernel<PSI, PSO, SKO, false, false, true>);
  }
  CUDADIFF_CHECK_LAUNCH("noisevis kernel launch");
}

// The alpha/x byte of a 4-byte format: at 3 (BGRx, RGBA, ...) or 0 (xRGB, ABGR, ...).
int extra_byte(VideoFormat f) {
  const FormatInfo &fi = format_info(f);
  return 6 - fi.r - fi.g - fi.b;
}

class CudaNoiseVis final : public NoiseVis {
 public:
  CudaNoiseVis(const Context &ctx, VideoFormat in_format, VideoFormat out_format, int width,
               int height)
      : ctx_(ctx),
        in_format_(in_format),
        out_format_(out_format),
        width_(width),
        height_(height),
        counters_(2 * sizeof(unsigned long long)),
        host_counters_(2 * sizeof(unsigned long long)) {
    *reinterpret_cast<unsigned long long *>(host_counters_.data()) = 0;
    reinterpret_cast<unsigned long long *>(host_counters_.data())[1] = 0;
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
    auto stream = static_cast<cudaStream_t>(ctx_.stream_handle());
    const uint32_t threshold = static_cast<uint32_t>(
        params.threshold < 0 ? 0 : (params.threshold > 255 ? 255 : params.threshold));

    Launch l{};
    // No previous frame: compare the frame with itself, so nothing changed.
    l.prev = have_previous_ ? &previous_ : &in;
    l.cur = &in;
    l.out = &out;
    l.paint = make_paint(params.color);
    l.not_threshold4 = ~(threshold * 0x01010101u);
    l.overlay = params.mode == NoiseMode::Overlay;
    l.counters = count ? counters_.as<unsigned long long>() : nullptr;
    l.stream = stream;
    if (count && counters_stale_) {  // the first counted frame of new totals
      CUDADIFF_CHECK(cudaMemsetAsync(counters_.data(), 0, counters_.size(), stream));
      counters_stale_ = false;
    }

    const int ps_out = format_info(out_format_).pixel_stride[0];
    if (in_format_ == VideoFormat::GRAY8) {
      if (out_format_ == VideoFormat::GRAY8)
        launch<1, 1, -1>(l);
      else if (ps_out == 3)
        launch<1, 3, -1>(l);
      else if (extra_byte(out_format_) == 3)
        launch<1, 4, 3>(l);
      else
        launch<1, 4, 0>(l);
    } else if (ps_out == 3) {
      launch<3, 3, -1>(l);
    } else if (extra_byte(out_format_) == 3) {
      launch<4, 4, 3>(l);
    } else {
      launch<4, 4, 0>(l);
    }

    if (count) {
      running_frames_++;
      if (have_previous_) running_compared_++;
    }
    previous_ = in;  // stays valid until the next call (the caller's contract)
    have_previous_ = true;
  }

  void take_counts() override {
    taken_frames_ = running_frames_;
    taken_compared_ = running_compared_;
    // Stale counters: no counted frame since the last take or clear, so the
    // totals are zero and there is nothing to copy.
    taken_from_device_ = !counters_stale_;
    if (taken_from_device_) {
      ctx_.activate();
      CUDADIFF_CHECK(cudaMemcpyAsync(host_counters_.data(), counters_.data(), counters_.size(),
                                     cudaMemcpyDeviceToHost,
                                     static_cast<cudaStream_t>(ctx_.stream_handle())));
    }
    clear_counts();
  }

  NoiseCounts counts() const override {
    const auto *c = reinterpret_cast<const unsigned long long *>(host_counters_.data());
    NoiseCounts counts;
    counts.frames = taken_frames_;
    counts.compared_frames = taken_compared_;
    counts.marked_pixels = taken_from_device_ ? c[0] : 0;
    counts.changed_bytes = taken_from_device_ ? c[1] : 0;
    counts.pixels = static_cast<uint64_t>(width_) * height_ * taken_compared_;
    counts.bytes = counts.pixels * format_info(in_format_).pixel_stride[0];
    return counts;
  }

  // The device counters are zeroed (queued) before the next counted frame.
  void clear_counts() override {
    counters_stale_ = true;
    running_frames_ = running_compared_ = 0;
  }

  void reset() override { have_previous_ = false; }

 private:
  Paint make_paint(uint32_t color) const {
    const uint32_t alpha = (color >> 24) & 0xffu;
    const uint32_t channel[3] = {(color >> 16) & 0xffu, (color >> 8) & 0xffu, color & 0xffu};
    Paint paint{};
    paint.inverse_alpha = 255u - alpha;
    if (out_format_ == VideoFormat::GRAY8) {
      const uint32_t gray = gray_value(GrayMethod::Bt601, channel[0], channel[1], channel[2]);
      paint.mask_colour = noise_paint(gray, 0, alpha);
      paint.scaled[0] = gray * alpha + 127u;
      return paint;
    }
    const FormatInfo &fo = format_info(out_format_);
    const int at[3] = {fo.r, fo.g, fo.b};
    for (int c = 0; c < 3; ++c) {
      paint.mask_colour |= noise_paint(channel[c], 0, alpha) << (8 * at[c]);
      paint.scaled[at[c]] = channel[c] * alpha + 127u;
    }
    return paint;
  }

  const Context &ctx_;
  VideoFormat in_format_, out_format_;
  int width_, height_;
  DeviceBuffer counters_;
  PinnedBuffer host_counters_;  // the last take's marked pixels and changed bytes
  bool counters_stale_ = true;  // counters_ hold old totals (or nothing yet)
  uint32_t running_frames_ = 0, running_compared_ = 0;  // since the last take or clear
  uint32_t taken_frames_ = 0, taken_compared_ = 0;      // the last take's
  bool taken_from_device_ = false;  // host_counters_ hold the last take's counts
  FrameView previous_;
  bool have_previous_ = false;
};

}  // namespace

namespace detail {
std::unique_ptr<NoiseVis> make_cuda_noisevis(const Context &ctx, VideoFormat in_format,
                                             VideoFormat out_format, int width, int height) {
  ctx.activate();
  return std::make_unique<CudaNoiseVis>(ctx, in_format, out_format, width, height);
}
}  // namespace detail

}  // namespace cudadiff
