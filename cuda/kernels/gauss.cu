// Noise filters on the GPU: Gaussian and box as one fused kernel (both passes
// of the separable filter in shared memory), median as pruned min/max networks
// on 16-bit lanes. What is computed is specified in cudadiff/gauss.h; the
// arithmetic is the CPU reference's, so the bytes are identical.
//
// Common layout: a block produces a tile of 128 bytes x TH rows of one plane
// (32 x 8 threads, 4 bytes per thread and row). The input tile, with a halo of
// `halo` bytes left and right and the filter radius above and below, is read
// from global memory in 16-byte loads into shared memory; bytes outside the
// plane are read from the clamped pixel of the same channel, which makes every
// later access a plain shared-memory read with replicated borders. Because the
// tile starts at a multiple of 128 bytes, byte lane l of a thread's 4-byte word
// is channel l for 4-byte pixels, so alpha/padding bytes are kept with a mask.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "../src/check.h"
#include "cudadiff/gauss.h"
#include "median_networks.h"

namespace cudadiff {
namespace {

constexpr int kTileBytes = 128;  // output bytes per tile row
constexpr int kThreadsX = kTileBytes / 4;
constexpr int kThreadsY = 8;
constexpr int kBlock = kThreadsX * kThreadsY;
constexpr int kConvRowsPerThread = 4;
constexpr int kConvTileRows = kThreadsY * kConvRowsPerThread;

struct PlaneArgs {
  const uint8_t *in;
  size_t in_stride;
  uint8_t *out;
  size_t out_stride;
  int width;      // pixels
  int height;     // rows
  int row_bytes;  // width * pixel stride
  uint32_t keep;  // bytes of a 4-byte pixel copied from the input (alpha, x)
  int halo;       // bytes of halo left and right (a multiple of 16)
  int pitch;      // bytes per shared-memory tile row: kTileBytes + 2 * halo
  bool in_vec16;  // input base and stride allow 16-byte loads
  bool out_vec4;  // output base and stride allow 4-byte stores
};

struct ConvArgs {
  uint32_t w[kMaxConvKernel];  // weights (all 1 for the box)
  int radius;
  bool box;
  BoxDivisor div;
};

// Halo for a radius: covers radius * ps bytes and the 3 bytes a 4-byte word
// read at the far end may take in, rounded to 16 for aligned tile loads.
int halo_bytes(int radius, int ps) {
  return (radius * ps + 3 + 15) / 16 * 16;
}

__device__ __forceinline__ int floor_div(int a, int b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// Reads input rows [y0 - radius, y0 + rows + radius) into shared memory.
template <int PS>
__device__ void load_tile(const PlaneArgs &a, uint8_t *tile, int x0, int y0, int tile_rows,
                          int radius) {
  const int chunks = a.pitch / 16;
  const int total = (tile_rows + 2 * radius) * chunks;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  for (int i = tid; i < total; i += blockDim.x * blockDim.y) {
    const int ry = i / chunks;
    const int cx = i - ry * chunks;
    const int gy = min(max(y0 - radius + ry, 0), a.height - 1);
    const int pos = x0 - a.halo + cx * 16;
    const uint8_t *row = a.in + static_cast<size_t>(gy) * a.in_stride;
    uint4 v;
    if (a.in_vec16 && pos >= 0 && pos + 16 <= a.row_bytes) {
      v = *reinterpret_cast<const uint4 *>(row + pos);
    } else {
      uint32_t word[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint32_t acc = 0;
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const int p = pos + q * 4 + b;
          int pixel = floor_div(p, PS);
          const int channel = p - pixel * PS;
          pixel = min(max(pixel, 0), a.width - 1);
          acc |= static_cast<uint32_t>(row[pixel * PS + channel]) << (8 * b);
        }
        word[q] = acc;
      }
      v = make_uint4(word[0], word[1], word[2], word[3]);
    }
    *reinterpret_cast<uint4 *>(tile + ry * a.pitch + cx * 16) = v;
  }
}

// Writes one 4-byte word of output at byte x of row y (x a multiple of 4),
// with the kept bytes taken from `input`.
__device__ __forceinline__ void store_word(const PlaneArgs &a, int x, int y, uint32_t value,
                                           uint32_t input) {
  if (y >= a.height || x >= a.row_bytes) return;
  value = (value & ~a.keep) | (input & a.keep);
  uint8_t *dst = a.out + static_cast<size_t>(y) * a.out_stride + x;
  if (a.out_vec4 && x + 4 <= a.row_bytes) {
    *reinterpret_cast<uint32_t *>(dst) = value;
  } else {
    const int n = min(4, a.row_bytes - x);
    for (int l = 0; l < n; ++l) dst[l] = static_cast<uint8_t>(value >> (8 * l));
  }
}

// ---------------------------------------------------------------- Gaussian, box

// R > 0: the radius at compile time (unrolled, words read once); R == 0: any
// radius from c.radius.
template <int PS, int R>
__global__ void __launch_bounds__(kBlock) conv_kernel(PlaneArgs a, ConvArgs c) {
  extern __shared__ uint4 shared_raw[];
  const int r = R > 0 ? R : c.radius;
  const int x0 = blockIdx.x * kTileBytes;
  const int y0 = blockIdx.y * kConvTileRows;
  const int rows = kConvTileRows + 2 * r;
  uint8_t *tile = reinterpret_cast<uint8_t *>(shared_raw);
  uint16_t *mid = reinterpret_cast<uint16_t *>(tile + rows * a.pitch);

  load_tile<PS>(a, tile, x0, y0, kConvTileRows, r);
  __syncthreads();

  // Horizontal pass: every tile row, 4 bytes per item.
  const int tid = threadIdx.y * kThreadsX + threadIdx.x;
  for (int i = tid; i < rows * kThreadsX; i += kBlock) {
    const int ry = i / kThreadsX;
    const int cbyte = (i - ry * kThreadsX) * 4;
    const uint8_t *src = tile + ry * a.pitch + a.halo + cbyte;
    uint32_t sum[4] = {0, 0, 0, 0};
    if (R > 0) {
      // Words covering bytes [-R*PS, 3 + R*PS] around src.
      constexpr int kFirst = -((R * PS + 3) / 4);
      constexpr int kLast = (3 + R * PS) / 4;
      constexpr int kWords = kLast - kFirst + 1;
      uint32_t word[kWords];
#pragma unroll
      for (int j = 0; j < kWords; ++j)
        word[j] = reinterpret_cast<const uint32_t *>(src)[kFirst + j];
#pragma unroll
      for (int k = 0; k <= 2 * R; ++k)
#pragma unroll
        for (int l = 0; l < 4; ++l) {
          const int rel = l + (k - R) * PS - 4 * kFirst;
          sum[l] += c.w[k] * ((word[rel >> 2] >> (8 * (rel & 3))) & 0xffu);
        }
    } else {
      for (int k = 0; k <= 2 * r; ++k) {
        const uint32_t wk = c.w[k];
        const uint8_t *p = src + (k - r) * PS;
#pragma unroll
        for (int l = 0; l < 4; ++l) sum[l] += wk * p[l];
      }
    }
    uint32_t h[4];
#pragma unroll
    for (int l = 0; l < 4; ++l) h[l] = c.box ? sum[l] : gauss_round_horizontal(sum[l]);
    *reinterpret_cast<uint2 *>(mid + ry * kTileBytes + cbyte) =
        make_uint2(h[0] | (h[1] << 16), h[2] | (h[3] << 16));
  }
  __syncthreads();

  // Vertical pass: kConvRowsPerThread output rows per thread.
  const int cbyte = threadIdx.x * 4;
  const int row0 = threadIdx.y * kConvRowsPerThread;  // tile row of the first output - r
  const uint2 *col = reinterpret_cast<const uint2 *>(mid + cbyte);
  constexpr int kStride = kTileBytes / 4;  // uint2 per mid row
#pragma unroll
  for (int j = 0; j < kConvRowsPerThread; ++j) {
    uint32_t sum[4] = {0, 0, 0, 0};
    if (R > 0) {
#pragma unroll
      for (int k = 0; k <= 2 * R; ++k) {
        const uint2 v = col[(row0 + j + k) * kStride];
        sum[0] += c.w[k] * (v.x & 0xffffu);
        sum[1] += c.w[k] * (v.x >> 16);
        sum[2] += c.w[k] * (v.y & 0xffffu);
        sum[3] += c.w[k] * (v.y >> 16);
      }
    } else {
      for (int k = 0; k <= 2 * r; ++k) {
        const uint2 v = col[(row0 + j + k) * kStride];
        const uint32_t wk = c.w[k];
        sum[0] += wk * (v.x & 0xffffu);
        sum[1] += wk * (v.x >> 16);
        sum[2] += wk * (v.y & 0xffffu);
        sum[3] += wk * (v.y >> 16);
      }
    }
    uint32_t value = 0;
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint32_t q = c.box ? box_mean(sum[l], c.div) : gauss_round_vertical(sum[l]);
      value |= q << (8 * l);
    }
    const uint32_t input =
        *reinterpret_cast<const uint32_t *>(tile + (row0 + j + r) * a.pitch + a.halo + cbyte);
    store_word(a, x0 + cbyte, y0 + row0 + j, value, input);
  }
}

// ---------------------------------------------------------------- median

// 16-bit lanes holding a byte each, as unsigned integers (min.u16x2 and
// max.u16x2: native on sm_90).
struct U16Lanes {
  using T = uint32_t;
  static __device__ __forceinline__ T min(T a, T b) { return __vminu2(a, b); }
  static __device__ __forceinline__ T max(T a, T b) { return __vmaxu2(a, b); }
  static __device__ __forceinline__ T even(uint32_t w) { return w & 0x00ff00ffu; }
  static __device__ __forceinline__ T odd(uint32_t w) { return (w >> 8) & 0x00ff00ffu; }
  static __device__ __forceinline__ uint32_t pack(T even, T odd) {
    return (even & 0x00ff00ffu) | ((odd & 0x00ff00ffu) << 8);
  }
};

// 16-bit lanes as half floats 1024 + byte (exactly representable, ordered as
// the bytes): min.f16x2 and max.f16x2, native from sm_80. Older GPUs compare
// the same bits as unsigned integers, which orders them the same way.
struct F16Lanes {
  using T = uint32_t;
  static __device__ __forceinline__ T min(T a, T b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    T r;
    asm("min.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
#else
    return __vminu2(a, b);
#endif
  }
  static __device__ __forceinline__ T max(T a, T b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    T r;
    asm("max.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
#else
    return __vmaxu2(a, b);
#endif
  }
  static __device__ __forceinline__ T even(uint32_t w) {
    return (w & 0x00ff00ffu) | 0x64006400u;
  }
  static __device__ __forceinline__ T odd(uint32_t w) {
    return ((w >> 8) & 0x00ff00ffu) | 0x64006400u;
  }
  static __device__ __forceinline__ uint32_t pack(T even, T odd) {
    return (even & 0x00ff00ffu) | ((odd & 0x00ff00ffu) << 8);
  }
};

template <int K>
constexpr int median_tile_rows() {
  return kThreadsY * median_net::MedianNetwork<K>::kRows;
}

// Each thread: one 4-byte word column, Net::kRows output rows. The bytes of
// the word are split into two registers of 16-bit lanes (bytes 0 and 2, bytes
// 1 and 3), and the network runs on each.
template <int PS, int K, class L>
__global__ void __launch_bounds__(kBlock) median_kernel(PlaneArgs a) {
  using Net = median_net::MedianNetwork<K>;
  constexpr int R = K / 2;
  constexpr int kRows = Net::kRows;
  constexpr int kTileRows = median_tile_rows<K>();
  extern __shared__ uint4 shared_raw[];
  uint8_t *tile = reinterpret_cast<uint8_t *>(shared_raw);
  const int x0 = blockIdx.x * kTileBytes;
  const int y0 = blockIdx.y * kTileRows;
  load_tile<PS>(a, tile, x0, y0, kTileRows, R);
  __syncthreads();

  const int cbyte = threadIdx.x * 4;
  const int row0 = threadIdx.y * kRows;  // tile row of the first window's top row
  constexpr int kFirst = -((R * PS + 3) / 4);
  constexpr int kLast = (3 + R * PS) / 4;
  constexpr int kWords = kLast - kFirst + 1;

  typename L::T even[Net::kInputRows][K];
  typename L::T odd[Net::kInputRows][K];
#pragma unroll
  for (int i = 0; i < Net::kInputRows; ++i) {
    const uint32_t *src =
        reinterpret_cast<const uint32_t *>(tile + (row0 + i) * a.pitch + a.halo + cbyte);
    uint32_t word[kWords];
#pragma unroll
    for (int j = 0; j < kWords; ++j) word[j] = src[kFirst + j];
#pragma unroll
    for (int dx = 0; dx < K; ++dx) {
      const int rel = (dx - R) * PS - 4 * kFirst;  // byte offset into word[]
      const int wi = rel >> 2, shift = rel & 3;
      const uint32_t w =
          shift ? __funnelshift_r(word[wi], word[wi + (shift ? 1 : 0)], 8 * shift) : word[wi];
      even[i][dx] = L::even(w);
      odd[i][dx] = L::odd(w);
    }
  }
  typename L::T med_even[kRows], med_odd[kRows];
  Net::template run<L>(even, med_even);
  Net::template run<L>(odd, med_odd);
#pragma unroll
  for (int o = 0; o < kRows; ++o) {
    const uint32_t input =
        *reinterpret_cast<const uint32_t *>(tile + (row0 + o + R) * a.pitch + a.halo + cbyte);
    store_word(a, x0 + cbyte, y0 + row0 + o, L::pack(med_even[o], med_odd[o]), input);
  }
}

// ---------------------------------------------------------------- launching

enum class Lanes { U16, F16 };

// CUDADIFF_MEDIAN_LANES=f16 picks the half-float lanes (for benchmarks).
Lanes lanes_from_environment() {
  const char *v = std::getenv("CUDADIFF_MEDIAN_LANES");
  return (v && std::strcmp(v, "f16") == 0) ? Lanes::F16 : Lanes::U16;
}

template <class Kernel>
void launch(Kernel kernel, dim3 grid, size_t shared, cudaStream_t stream, const char *what,
            const PlaneArgs &a) {
  if (shared > 48 * 1024)
    CUDADIFF_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(shared)));
  kernel<<<grid, dim3(kThreadsX, kThreadsY), shared, stream>>>(a);
  CUDADIFF_CHECK_LAUNCH(what);
}

template <int PS>
void launch_conv(const PlaneArgs &a0, const ConvArgs &c, cudaStream_t stream) {
  PlaneArgs a = a0;
  a.halo = halo_bytes(c.radius, PS);
  a.pitch = kTileBytes + 2 * a.halo;
  const int rows = kConvTileRows + 2 * c.radius;
  const size_t shared = static_cast<size_t>(rows) * a.pitch + size_t(rows) * kTileBytes * 2;
  const dim3 grid((a.row_bytes + kTileBytes - 1) / kTileBytes,
                  (a.height + kConvTileRows - 1) / kConvTileRows);
  const auto go = [&](auto kernel) {
    if (shared > 48 * 1024)
      CUDADIFF_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(shared)));
    kernel<<<grid, dim3(kThreadsX, kThreadsY), shared, stream>>>(a, c);
    CUDADIFF_CHECK_LAUNCH("noise filter convolution kernel launch");
  };
  switch (c.radius) {
    case 1:
      return go(conv_kernel<PS, 1>);
    case 2:
      return go(conv_kernel<PS, 2>);
    case 3:
      return go(conv_kernel<PS, 3>);
    case 4:
      return go(conv_kernel<PS, 4>);
    default:
      return go(conv_kernel<PS, 0>);
  }
}

template <int PS, int K>
void launch_median(const PlaneArgs &a0, Lanes lanes, cudaStream_t stream) {
  PlaneArgs a = a0;
  a.halo = halo_bytes(K / 2, PS);
  a.pitch = kTileBytes + 2 * a.halo;
  constexpr int kTileRows = median_tile_rows<K>();
  const size_t shared = static_cast<size_t>(kTileRows + 2 * (K / 2)) * a.pitch;
  const dim3 grid((a.row_bytes + kTileBytes - 1) / kTileBytes,
                  (a.height + kTileRows - 1) / kTileRows);
  if (lanes == Lanes::F16)
    launch(median_kernel<PS, K, F16Lanes>, grid, shared, stream, "median kernel launch", a);
  else
    launch(median_kernel<PS, K, U16Lanes>, grid, shared, stream, "median kernel launch", a);
}

template <int PS>
void launch_median_ps(const PlaneArgs &a, int k, Lanes lanes, cudaStream_t stream) {
  switch (k) {
    case 3:
      return launch_median<PS, 3>(a, lanes, stream);
    case 5:
      return launch_median<PS, 5>(a, lanes, stream);
    case 7:
      return launch_median<PS, 7>(a, lanes, stream);
    default:
      throw Error("noise filter: median kernel size must be 3, 5 or 7");
  }
}

bool aligned(const void *p, size_t stride, unsigned bytes) {
  return ((reinterpret_cast<uintptr_t>(p) | stride) & (bytes - 1)) == 0;
}

class CudaNoiseFilter final : public NoiseFilter {
 public:
  CudaNoiseFilter(const Context &ctx, VideoFormat format, int width, int height)
      : ctx_(ctx),
        format_(format),
        width_(width),
        height_(height),
        lanes_(lanes_from_environment()) {}

  void process(const FrameView &in, const FrameView &out,
               const NoiseFilterSettings &settings) override {
    validate(in, "noise filter input");
    validate(out, "noise filter output");
    validate(settings);
    if (in.format != format_ || out.format != format_ || in.width != width_ ||
        in.height != height_ || out.width != width_ || out.height != height_)
      throw Error("noise filter: frame does not match the configured format and size");
    auto stream = static_cast<cudaStream_t>(ctx_.stream_handle());

    ConvArgs conv{};
    const int k = settings.kernel_size;
    conv.radius = k / 2;
    conv.box = settings.method == NoiseFilterMethod::Box;
    conv.div = box_divisor(k);
    if (settings.method == NoiseFilterMethod::Gaussian) {
      const std::vector<uint32_t> w = gaussian_weights(k, settings.sigma);
      for (int i = 0; i < k; ++i) conv.w[i] = w[i];
    } else {
      for (int i = 0; i < k; ++i) conv.w[i] = 1;
    }

    for (int p = 0; p < in.n_planes(); ++p) {
      const PlaneLayout layout = noise_filter_plane_layout(format_, p);
      PlaneArgs a{};
      a.in = in.data[p];
      a.in_stride = in.stride[p];
      a.out = out.data[p];
      a.out_stride = out.stride[p];
      a.width = in.plane_width(p);
      a.height = in.plane_height(p);
      a.row_bytes = static_cast<int>(in.row_bytes(p));
      a.keep = 0;
      for (int b = 0; b < 4; ++b)
        if (layout.pixel_stride == 4 && !(layout.filtered_mask >> b & 1u))
          a.keep |= 0xffu << (8 * b);
      a.in_vec16 = aligned(a.in, a.in_stride, 16);
      a.out_vec4 = aligned(a.out, a.out_stride, 4);
      if (settings.method == NoiseFilterMethod::Median) {
        switch (layout.pixel_stride) {
          case 1:
            launch_median_ps<1>(a, k, lanes_, stream);
            break;
          case 2:
            launch_median_ps<2>(a, k, lanes_, stream);
            break;
          case 3:
            launch_median_ps<3>(a, k, lanes_, stream);
            break;
          case 4:
            launch_median_ps<4>(a, k, lanes_, stream);
            break;
          default:
            throw Error("noise filter: unsupported pixel stride");
        }
      } else {
        switch (layout.pixel_stride) {
          case 1:
            launch_conv<1>(a, conv, stream);
            break;
          case 2:
            launch_conv<2>(a, conv, stream);
            break;
          case 3:
            launch_conv<3>(a, conv, stream);
            break;
          case 4:
            launch_conv<4>(a, conv, stream);
            break;
          default:
            throw Error("noise filter: unsupported pixel stride");
        }
      }
    }
  }

 private:
  const Context &ctx_;
  VideoFormat format_;
  int width_, height_;
  Lanes lanes_;
};

}  // namespace

namespace detail {
std::unique_ptr<NoiseFilter> make_cuda_noise_filter(const Context &ctx, VideoFormat format,
                                                    int width, int height) {
  return std::make_unique<CudaNoiseFilter>(ctx, format, width, height);
}
}  // namespace detail

}  // namespace cudadiff
