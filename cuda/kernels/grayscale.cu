// Grayscale on the GPU. Each thread converts 16 pixels: 48 or 64 input bytes
// in 16-byte loads, 16 gray bytes in one 16-byte store (or the whole pixels
// back when the output keeps the input format). Rows whose pointer or stride
// is not 16-byte aligned, and the last group of a row, take a scalar path, so
// any stride works.
#include <cuda_runtime.h>

#include <cstdint>

#include "../src/check.h"
#include "cudadiff/grayscale.h"

namespace cudadiff {
namespace {

constexpr int kGroup = 16;  // pixels per thread
constexpr int kBlock = 256;

template <int PS, int R, int G, int B, bool SAME_FORMAT, bool VECTOR>
__global__ void gray_packed_kernel(const uint8_t *__restrict__ in, size_t in_stride,
                                   uint8_t *__restrict__ out, size_t out_stride, int width,
                                   int height, int groups_per_row, GrayWeights w) {
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<long long>(groups_per_row) * height) return;
  const int y = static_cast<int>(idx / groups_per_row);
  const int x0 = static_cast<int>(idx - static_cast<long long>(y) * groups_per_row) * kGroup;
  const uint8_t *src = in + y * in_stride + static_cast<size_t>(x0) * PS;
  uint8_t *dst = out + y * out_stride + static_cast<size_t>(x0) * (SAME_FORMAT ? PS : 1);

  if (VECTOR && x0 + kGroup <= width) {
    constexpr int kWords = PS * kGroup / 4;
    uint32_t word[kWords];
#pragma unroll
    for (int i = 0; i < kWords / 4; ++i) {
      // Streaming loads and stores: every byte is touched once, keep L2 for others.
      const uint4 v = __ldcs(reinterpret_cast<const uint4 *>(src) + i);
      word[4 * i + 0] = v.x;
      word[4 * i + 1] = v.y;
      word[4 * i + 2] = v.z;
      word[4 * i + 3] = v.w;
    }
    // Byte k of the group; k is a compile-time constant after unrolling.
#define GRAY_BYTE(k) ((word[(k) >> 2] >> (((k)&3) * 8)) & 0xffu)
    if (!SAME_FORMAT) {
      uint32_t packed[4] = {0, 0, 0, 0};
#pragma unroll
      for (int p = 0; p < kGroup; ++p) {
        const uint32_t gray =
            gray_weighted(w, GRAY_BYTE(p * PS + R), GRAY_BYTE(p * PS + G), GRAY_BYTE(p * PS + B));
        packed[p >> 2] |= gray << ((p & 3) * 8);
      }
      __stcs(reinterpret_cast<uint4 *>(dst),
             make_uint4(packed[0], packed[1], packed[2], packed[3]));
    } else {
#pragma unroll
      for (int p = 0; p < kGroup; ++p) {
        const uint32_t gray =
            gray_weighted(w, GRAY_BYTE(p * PS + R), GRAY_BYTE(p * PS + G), GRAY_BYTE(p * PS + B));
        const int kr = p * PS + R, kg = p * PS + G, kb = p * PS + B;
        word[kr >> 2] = (word[kr >> 2] & ~(0xffu << ((kr & 3) * 8))) | (gray << ((kr & 3) * 8));
        word[kg >> 2] = (word[kg >> 2] & ~(0xffu << ((kg & 3) * 8))) | (gray << ((kg & 3) * 8));
        word[kb >> 2] = (word[kb >> 2] & ~(0xffu << ((kb & 3) * 8))) | (gray << ((kb & 3) * 8));
      }
#pragma unroll
      for (int i = 0; i < kWords / 4; ++i)
        __stcs(reinterpret_cast<uint4 *>(dst) + i,
               make_uint4(word[4 * i], word[4 * i + 1], word[4 * i + 2], word[4 * i + 3]));
    }
#undef GRAY_BYTE
    return;
  }

  const int n = min(kGroup, width - x0);
  for (int p = 0; p < n; ++p) {
    const uint8_t *px = src + p * PS;
    const uint8_t gray = gray_weighted(w, px[R], px[G], px[B]);
    if (SAME_FORMAT) {
      uint8_t *o = dst + p * PS;
#pragma unroll
      for (int k = 0; k < PS; ++k) o[k] = (k == R || k == G || k == B) ? gray : px[k];
    } else {
      dst[p] = gray;
    }
  }
}

template <int PS, int R, int G, int B>
void launch_packed(const FrameView &in, const FrameView &out, GrayWeights w, cudaStream_t stream) {
  const bool same = out.format == in.format;
  const auto aligned = [](const void *p, size_t stride) {
    return ((reinterpret_cast<uintptr_t>(p) | stride) & 15u) == 0;
  };
  const bool vector = aligned(in.data[0], in.stride[0]) && aligned(out.data[0], out.stride[0]);
  const int groups_per_row = (in.width + kGroup - 1) / kGroup;
  const long long threads = static_cast<long long>(groups_per_row) * in.height;
  const unsigned blocks = static_cast<unsigned>((threads + kBlock - 1) / kBlock);
  const auto args = [&](auto kernel) {
    kernel<<<blocks, kBlock, 0, stream>>>(in.data[0], in.stride[0], out.data[0], out.stride[0],
                                          in.width, in.height, groups_per_row, w);
  };
  if (same) {
    vector ? args(gray_packed_kernel<PS, R, G, B, true, true>)
           : args(gray_packed_kernel<PS, R, G, B, true, false>);
  } else {
    vector ? args(gray_packed_kernel<PS, R, G, B, false, true>)
           : args(gray_packed_kernel<PS, R, G, B, false, false>);
  }
  CUDADIFF_CHECK_LAUNCH("grayscale kernel launch");
}

class CudaGrayscale final : public Grayscale {
 public:
  explicit CudaGrayscale(const Context &ctx) : ctx_(ctx) {}

  void process(const FrameView &in, const FrameView &out, GrayMethod method) override {
    validate(in, "grayscale input");
    validate(out, "grayscale output");
    if (in.width != out.width || in.height != out.height || !supports(in.format, out.format))
      throw Error("grayscale: input and output do not match");
    auto stream = static_cast<cudaStream_t>(ctx_.stream_handle());
    if (in.format == VideoFormat::GRAY8) {
      CUDADIFF_CHECK(cudaMemcpy2DAsync(out.data[0], out.stride[0], in.data[0], in.stride[0],
                                       in.row_bytes(0), in.height, cudaMemcpyDefault, stream));
      return;
    }
    const GrayWeights w = gray_weights(method);
    switch (in.format) {
      case VideoFormat::BGR:
        return launch_packed<3, 2, 1, 0>(in, out, w, stream);
      case VideoFormat::RGB:
        return launch_packed<3, 0, 1, 2>(in, out, w, stream);
      case VideoFormat::BGRx:
      case VideoFormat::BGRA:
        return launch_packed<4, 2, 1, 0>(in, out, w, stream);
      case VideoFormat::RGBx:
      case VideoFormat::RGBA:
        return launch_packed<4, 0, 1, 2>(in, out, w, stream);
      case VideoFormat::xBGR:
      case VideoFormat::ABGR:
        return launch_packed<4, 3, 2, 1>(in, out, w, stream);
      case VideoFormat::xRGB:
      case VideoFormat::ARGB:
        return launch_packed<4, 1, 2, 3>(in, out, w, stream);
      default:
        throw Error(std::string("grayscale: unsupported format ") + format_name(in.format));
    }
  }

 private:
  const Context &ctx_;
};

}  // namespace

namespace detail {
std::unique_ptr<Grayscale> make_cuda_grayscale(const Context &ctx) {
  return std::make_unique<CudaGrayscale>(ctx);
}
}  // namespace detail

}  // namespace cudadiff
