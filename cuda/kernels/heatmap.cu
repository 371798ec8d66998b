// Heat map on the GPU: one pass over the previous frame, the current frame
// and the output. Each thread takes 16 pixels (16-byte loads of both frames,
// 16-byte stores), looks each difference up in the colour table (766 words in
// shared memory, copied from a device table that the host builds as the CPU
// backend does and uploads only when the colormap or gain changes) and
// blends when alpha < 1. Rows whose pointers or strides are not 16-byte
// aligned, and the last group of a row, take a scalar path, so any stride and
// width work.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../src/check.h"
#include "cudadiff/heatmap.h"
#include "vis_pixels.cuh"

namespace cudadiff {
namespace {

using vis::kBlock;
using vis::kGroup;

// Byte weights that make __dp4a of a pixel's absolute differences its d: 1 at
// the colour bytes, 0 at the alpha/x byte (SKI), 3 for the one GRAY8 byte.
template <int PSI, int SKI>
constexpr uint32_t colour_weights() {
  return PSI == 1 ? 3u : PSI == 3 ? 0x00010101u : SKI == 3 ? 0x00010101u : 0x01010100u;
}

// One output pixel (PSO bytes in the low bytes) from the absolute differences
// `ad` and the current pixel `cur` (PSI bytes each). SKO: the output's alpha
// or x byte (-1: none), the input's there (same format), or opaque for GRAY8
// input.
template <int PSI, int SKI, int PSO, int SKO, bool BLEND>
__device__ __forceinline__ uint32_t heat_pixel(uint32_t ad, uint32_t cur, const uint32_t *table,
                                               unsigned weight) {
  const uint32_t colour = table[__dp4a(ad, colour_weights<PSI, SKI>(), 0u)];
  uint32_t out = 0;
  if (BLEND) {
#pragma unroll
    for (int k = 0; k < PSO; ++k) {
      if (k == SKO) continue;
      const uint32_t background = PSI == 1 ? (cur & 0xffu) : (cur >> (8 * k)) & 0xffu;
      out |= static_cast<uint32_t>(heat_blend((colour >> (8 * k)) & 0xffu, background, weight))
             << (8 * k);
    }
  } else {
    out = colour;
  }
  if (SKO >= 0) out |= PSI == 1 ? vis::byte_mask(SKO) : (cur & vis::byte_mask(SKO));
  return out;
}

template <int PSI, int SKI, int PSO, int SKO, bool BLEND, bool VECTOR>
__global__ void __launch_bounds__(kBlock)
    heatmap_kernel(const uint8_t *__restrict__ prev, size_t prev_stride,
                   const uint8_t *__restrict__ cur, size_t cur_stride, uint8_t *__restrict__ out,
                   size_t out_stride, int width, int height, int groups_per_row,
                   const uint32_t *__restrict__ lut, unsigned weight) {
  __shared__ uint32_t table[kHeatTableSize];
  int y = 0, x0 = 0;
  const bool active = vis::group_position(groups_per_row, height, &y, &x0);
  const uint8_t *p_row = prev + y * prev_stride + static_cast<size_t>(x0) * PSI;
  const uint8_t *c_row = cur + y * cur_stride + static_cast<size_t>(x0) * PSI;
  uint8_t *o_row = out + y * out_stride + static_cast<size_t>(x0) * PSO;
  const bool full = VECTOR && active && x0 + kGroup <= width;

  // Both frames' loads are issued before the table copy and the barrier, so
  // their latency overlaps it.
  uint32_t pw[4 * PSI], cw[4 * PSI];
  if (full) {
    vis::load_group<PSI, true>(p_row, pw);   // the previous frame: last use
    vis::load_group<PSI, false>(c_row, cw);  // the current frame: read again next frame
  }
  for (int i = threadIdx.x; i < kHeatTableSize; i += kBlock) table[i] = lut[i];
  __syncthreads();
  if (!active) return;

  if (full) {
    uint32_t ad[4 * PSI], ow[4 * PSO];
#pragma unroll
    for (int i = 0; i < 4 * PSI; ++i) ad[i] = __vabsdiffu4(pw[i], cw[i]);
#pragma unroll
    for (int i = 0; i < 4 * PSO; ++i) ow[i] = 0;
#pragma unroll
    for (int p = 0; p < kGroup; ++p)
      vis::put_pixel<PSO>(
          ow, p,
          heat_pixel<PSI, SKI, PSO, SKO, BLEND>(vis::get_pixel<PSI>(ad, p),
                                                vis::get_pixel<PSI>(cw, p), table, weight));
    vis::store_group<PSO>(o_row, ow);
    return;
  }

  const int n = min(kGroup, width - x0);
  for (int p = 0; p < n; ++p) {
    const uint32_t pp = vis::load_pixel<PSI>(p_row + p * PSI);
    const uint32_t cp = vis::load_pixel<PSI>(c_row + p * PSI);
    vis::store_pixel<PSO>(o_row + p * PSO, heat_pixel<PSI, SKI, PSO, SKO, BLEND>(
                                               __vabsdiffu4(pp, cp), cp, table, weight));
  }
}

struct Launch {
  const FrameView *prev, *cur, *out;
  const uint32_t *lut;
  unsigned weight;
  cudaStream_t stream;
};

template <int PSI, int SKI, int PSO, int SKO>
void launch(const Launch &l) {
  const bool vector = vis::aligned16(l.prev->data[0], l.prev->stride[0]) &&
                      vis::aligned16(l.cur->data[0], l.cur->stride[0]) &&
                      vis::aligned16(l.out->data[0], l.out->stride[0]);
  const bool blend = l.weight != 256;
  int groups_per_row = 0;
  const unsigned blocks = vis::group_blocks(l.cur->width, l.cur->height, &groups_per_row);
  const auto run = [&](auto kernel) {
    kernel<<<blocks, kBlock, 0, l.stream>>>(
        l.prev->data[0], l.prev->stride[0], l.cur->data[0], l.cur->stride[0], l.out->data[0],
        l.out->stride[0], l.cur->width, l.cur->height, groups_per_row, l.lut, l.weight);
  };
  if (blend) {
    vector ? run(heatmap_kernel<PSI, SKI, PSO, SKO, true, true>)
           : run(heatmap_kernel<PSI, SKI, PSO, SKO, true, false>);
  } else {
    vector ? run(heatmap_kernel<PSI, SKI, PSO, SKO, false, true>)
           : run(heatmap_kernel<PSI, SKI, PSO, SKO, false, false>);
  }
  CUDADIFF_CHECK_LAUNCH("heatmap kernel launch");
}

// The alpha/x byte of a 4-byte format: at 3 (BGRx, RGBA, ...) or 0 (xRGB, ABGR, ...).
int extra_byte(VideoFormat f) {
  const FormatInfo &fi = format_info(f);
  return 6 - fi.r - fi.g - fi.b;
}

class CudaHeatmap final : public Heatmap {
 public:
  CudaHeatmap(const Context &ctx, VideoFormat in_format, VideoFormat out_format, int width,
              int height)
      : ctx_(ctx),
        in_format_(in_format),
        out_format_(out_format),
        width_(width),
        height_(height),
        lut_(kHeatTableSize * sizeof(uint32_t)) {}

  void process(const FrameView &in, const FrameView &out, const HeatmapParams &params) override {
    validate(in, "heatmap input");
    validate(out, "heatmap output");
    if (in.format != in_format_ || out.format != out_format_ || in.width != width_ ||
        in.height != height_ || out.width != width_ || out.height != height_)
      throw Error(std::string("heatmap: frames do not match the negotiated ") +
                  format_name(in_format_) + " -> " + format_name(out_format_) + " " +
                  std::to_string(width_) + "x" + std::to_string(height_));
    auto stream = static_cast<cudaStream_t>(ctx_.stream_handle());
    if (!table_valid_ || params.colormap != table_colormap_ || params.gain != table_gain_) {
      // The CPU backend's table (the same doubles, on the host: the device's
      // sin and cos may round differently), each entry the colour's bytes
      // where the output format puts R, G and B (GRAY8 output: the BT.601
      // luma in byte 0), copied up in order before the frame's kernel.
      HeatColour colours[kHeatTableSize];
      heat_table(params.colormap, params.gain, colours);
      const FormatInfo &fo = format_info(out_format_);
      const bool gray_out = out_format_ == VideoFormat::GRAY8;
      for (int d = 0; d < kHeatTableSize; ++d) {
        const HeatColour &c = colours[d];
        host_table_[size_t(d)] = gray_out ? gray_value(GrayMethod::Bt601, c.r, c.g, c.b)
                                          : (uint32_t(c.r) << (8 * fo.r)) |
                                                (uint32_t(c.g) << (8 * fo.g)) |
                                                (uint32_t(c.b) << (8 * fo.b));
      }
      // (pageable source: the call returns once it has been read)
      CUDADIFF_CHECK(cudaMemcpyAsync(lut_.data(), host_table_.data(),
                                     host_table_.size() * sizeof(uint32_t), cudaMemcpyHostToDevice,
                                     stream));
      table_colormap_ = params.colormap;
      table_gain_ = params.gain;
      table_valid_ = true;
    }
    // No previous frame: compare the frame with itself, so d = 0 everywhere.
    const FrameView &previous = have_previous_ ? previous_ : in;
    const Launch l{&previous, &in, &out, lut_.as<uint32_t>(), heat_blend_weight(params.alpha),
                   stream};
    const int ps_out = format_info(out_format_).pixel_stride[0];
    if (in_format_ == VideoFormat::GRAY8) {
      if (out_format_ == VideoFormat::GRAY8)
        launch<1, -1, 1, -1>(l);
      else if (ps_out == 3)
        launch<1, -1, 3, -1>(l);
      else if (extra_byte(out_format_) == 3)
        launch<1, -1, 4, 3>(l);
      else
        launch<1, -1, 4, 0>(l);
    } else if (ps_out == 3) {
      launch<3, -1, 3, -1>(l);
    } else if (extra_byte(out_format_) == 3) {
      launch<4, 3, 4, 3>(l);
    } else {
      launch<4, 0, 4, 0>(l);
    }
    previous_ = in;  // stays valid until the next call (the caller's contract)
    have_previous_ = true;
  }

  void reset() override { have_previous_ = false; }

 private:
  const Context &ctx_;
  VideoFormat in_format_, out_format_;
  int width_, height_;
  DeviceBuffer lut_;
  std::vector<uint32_t> host_table_ = std::vector<uint32_t>(kHeatTableSize);
  bool table_valid_ = false;
  HeatColormap table_colormap_ = HeatColormap::Sine;
  double table_gain_ = 0.0;
  FrameView previous_;
  bool have_previous_ = false;
};

}  // namespace

namespace detail {
std::unique_ptr<Heatmap> make_cuda_heatmap(const Context &ctx, VideoFormat in_format,
                                           VideoFormat out_format, int width, int height) {
  ctx.activate();
  return std::make_unique<CudaHeatmap>(ctx, in_format, out_format, width, height);
}
}  // namespace detail

}  // namespace cudadiff
