// Noise filters, the CPU backend's fast path. It computes the same bytes as
// the reference in gauss.cpp (which defines the filters, as specified in
// cudadiff/gauss.h); tests/core/test_cpu_fast.cpp compares the two on random
// frames of every format, odd sizes and padded strides.
//
// Where the speed comes from:
//  - each thread walks down a block of rows of one plane with a small ring
//    of rows that stays in cache: an input row is filtered horizontally once
//    into the ring and the vertical pass reads the ring. No loop tests for
//    edges: the interior of a row is read in place, the few bytes at each
//    end from small copies with the border pixel replicated (TapRing);
//  - the Gaussian in 16-bit lanes when its weights allow it (every weight a
//    multiple of 2^12, as OpenCV's kernels for K = 3 and 5 that the default
//    sigma gives: see small_gauss()), in 32-bit lanes otherwise; the weights
//    are symmetric, so two taps share one multiply;
//  - the box's vertical sums kept as running column sums (one add and one
//    subtract per byte for any K), and its rounded division done as one float
//    multiply, exact for every sum a window can have (gauss_fast.h, tested on
//    every sum);
//  - the median as the CUDA kernel's min/max networks (median_networks.h),
//    one byte per lane and several output rows per pass;
//  - every inner loop a plain loop over the bytes of a row that the compiler
//    vectorises for AVX-512, AVX2 or SSE2 (fast.h), or NEON.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "../kernels/median_networks.h"
#include "cudadiff/gauss.h"
#include "fast.h"
#include "gauss_fast.h"

namespace cudadiff {
namespace {

// ------------------------------------------------------------- row kernels
// The K taps of output byte b are in[b + i * ps], i = 0..K-1 (TapRing says
// where `in` points).

// 16-bit horizontal sum: out[b] = sum_i w[i] in[b + i ps] (the caller makes
// sure it fits). ONES: every weight is 1 (box).
template <int K, bool ONES>
CUDADIFF_ALWAYS_INLINE void hsum16_k(const uint8_t *CUDADIFF_RESTRICT in, int ps, const uint16_t *w,
                                     size_t n, uint16_t *CUDADIFF_RESTRICT out) {
  constexpr int R = K / 2;
  uint16_t wk[K];
  for (int i = 0; i < K; ++i) wk[i] = w[i];
  for (size_t b = 0; b < n; ++b) {
    uint16_t s = ONES ? in[b + R * ps] : static_cast<uint16_t>(wk[R] * in[b + R * ps]);
    for (int i = 0; i < R; ++i) {
      const uint16_t pair = static_cast<uint16_t>(in[b + i * ps] + in[b + (K - 1 - i) * ps]);
      s = static_cast<uint16_t>(s + (ONES ? pair : wk[i] * pair));
    }
    out[b] = s;
  }
}

CUDADIFF_CPU_CLONES void hsum16(const uint8_t *CUDADIFF_RESTRICT in, int ps, int k, bool ones,
                                const uint16_t *w, size_t n, uint16_t *CUDADIFF_RESTRICT out) {
  if (ones) {
    switch (k) {
      case 3:
        return hsum16_k<3, true>(in, ps, w, n, out);
      case 5:
        return hsum16_k<5, true>(in, ps, w, n, out);
      case 7:
        return hsum16_k<7, true>(in, ps, w, n, out);
      case 9:
        return hsum16_k<9, true>(in, ps, w, n, out);
    }
  } else {
    switch (k) {
      case 3:
        return hsum16_k<3, false>(in, ps, w, n, out);
      case 5:
        return hsum16_k<5, false>(in, ps, w, n, out);
    }
  }
  // Any K: one pass over the row per tap.
  const int r = k / 2;
  for (size_t b = 0; b < n; ++b) out[b] = static_cast<uint16_t>(w[r] * in[b + r * ps]);
  for (int i = 0; i < r; ++i) {
    const uint8_t *left = in + i * ps, *right = in + (k - 1 - i) * ps;
    const uint16_t wi = w[i];
    for (size_t b = 0; b < n; ++b)
      out[b] = static_cast<uint16_t>(out[b] + wi * (left[b] + right[b]));
  }
}

// 32-bit Gaussian horizontal pass: out[b] = gauss_round_horizontal(sum_i w[i] in[b + i ps]).
template <int K>
CUDADIFF_ALWAYS_INLINE void hgauss32_k(const uint8_t *CUDADIFF_RESTRICT in, int ps,
                                       const uint32_t *w, size_t n,
                                       uint16_t *CUDADIFF_RESTRICT out) {
  constexpr int R = K / 2;
  uint32_t wk[K];
  for (int i = 0; i < K; ++i) wk[i] = w[i];
  for (size_t b = 0; b < n; ++b) {
    uint32_t s = wk[R] * in[b + R * ps];
    for (int i = 0; i < R; ++i)
      s += wk[i] * static_cast<uint32_t>(in[b + i * ps] + in[b + (K - 1 - i) * ps]);
    out[b] = static_cast<uint16_t>((s + 128u) >> 8);
  }
}

CUDADIFF_CPU_CLONES void hgauss32(const uint8_t *CUDADIFF_RESTRICT in, int ps, int k,
                                  const uint32_t *w, size_t n, uint16_t *CUDADIFF_RESTRICT out,
                                  uint32_t *CUDADIFF_RESTRICT acc) {
  switch (k) {
    case 3:
      return hgauss32_k<3>(in, ps, w, n, out);
    case 5:
      return hgauss32_k<5>(in, ps, w, n, out);
    case 7:
      return hgauss32_k<7>(in, ps, w, n, out);
    case 9:
      return hgauss32_k<9>(in, ps, w, n, out);
  }
  const int r = k / 2;
  for (size_t b = 0; b < n; ++b) acc[b] = w[r] * in[b + r * ps];
  for (int i = 0; i < r; ++i) {
    const uint8_t *left = in + i * ps, *right = in + (k - 1 - i) * ps;
    const uint32_t wi = w[i];
    for (size_t b = 0; b < n; ++b) acc[b] += wi * static_cast<uint32_t>(left[b] + right[b]);
  }
  for (size_t b = 0; b < n; ++b) out[b] = static_cast<uint16_t>(gauss_round_horizontal(acc[b]));
}

// 16-bit Gaussian vertical pass: out[b] = (sum_i w[i] rows[i][b] + bias) >> shift.
template <int K>
CUDADIFF_ALWAYS_INLINE void vgauss16_k(const uint16_t *const *rows, const uint16_t *w,
                                       uint16_t bias, int shift, size_t n,
                                       uint8_t *CUDADIFF_RESTRICT out) {
  constexpr int R = K / 2;
  const uint16_t *r[K];
  uint16_t wk[K];
  for (int i = 0; i < K; ++i) {
    r[i] = rows[i];
    wk[i] = w[i];
  }
  for (size_t b = 0; b < n; ++b) {
    uint16_t s = static_cast<uint16_t>(bias + wk[R] * r[R][b]);
    for (int i = 0; i < R; ++i)
      s = static_cast<uint16_t>(s + wk[i] * static_cast<uint16_t>(r[i][b] + r[K - 1 - i][b]));
    out[b] = static_cast<uint8_t>(s >> shift);
  }
}

CUDADIFF_CPU_CLONES void vgauss16(const uint16_t *const *rows, int k, const uint16_t *w,
                                  uint16_t bias, int shift, size_t n,
                                  uint8_t *CUDADIFF_RESTRICT out) {
  // small_gauss() takes this path for K = 3 and 5 only.
  if (k == 3) return vgauss16_k<3>(rows, w, bias, shift, n, out);
  return vgauss16_k<5>(rows, w, bias, shift, n, out);
}

// 32-bit Gaussian vertical pass: out[b] = gauss_round_vertical(sum_i w[i] rows[i][b]).
template <int K>
CUDADIFF_ALWAYS_INLINE void vgauss32_k(const uint16_t *const *rows, const uint32_t *w, size_t n,
                                       uint8_t *CUDADIFF_RESTRICT out) {
  constexpr int R = K / 2;
  const uint16_t *r[K];
  uint32_t wk[K];
  for (int i = 0; i < K; ++i) {
    r[i] = rows[i];
    wk[i] = w[i];
  }
  for (size_t b = 0; b < n; ++b) {
    uint32_t s = wk[R] * r[R][b];
    for (int i = 0; i < R; ++i) s += wk[i] * (static_cast<uint32_t>(r[i][b]) + r[K - 1 - i][b]);
    out[b] = gauss_round_vertical(s);
  }
}

CUDADIFF_CPU_CLONES void vgauss32(const uint16_t *const *rows, int k, const uint32_t *w, size_t n,
                                  uint8_t *CUDADIFF_RESTRICT out, uint32_t *CUDADIFF_RESTRICT acc) {
  switch (k) {
    case 3:
      return vgauss32_k<3>(rows, w, n, out);
    case 5:
      return vgauss32_k<5>(rows, w, n, out);
    case 7:
      return vgauss32_k<7>(rows, w, n, out);
    case 9:
      return vgauss32_k<9>(rows, w, n, out);
  }
  const int r = k / 2;
  for (size_t b = 0; b < n; ++b) acc[b] = w[r] * static_cast<uint32_t>(rows[r][b]);
  for (int i = 0; i < r; ++i) {
    const uint16_t *top = rows[i], *bottom = rows[k - 1 - i];
    const uint32_t wi = w[i];
    for (size_t b = 0; b < n; ++b) acc[b] += wi * (static_cast<uint32_t>(top[b]) + bottom[b]);
  }
  for (size_t b = 0; b < n; ++b) out[b] = gauss_round_vertical(acc[b]);
}

using fast::box_mean_float;
using fast::BoxFloat;

// Box vertical pass with running column sums: out[b] = mean(sums[b]), then
// sums[b] += add[b] - sub[b] (the row entering the window and the row leaving
// it). SUM is uint16_t while K x K x 255 fits (K <= 15), else uint32_t; the
// wrap-around of unsigned arithmetic cancels in the add and subtract.
template <class SUM>
CUDADIFF_ALWAYS_INLINE void vbox_k(SUM *CUDADIFF_RESTRICT sums,
                                   const uint16_t *CUDADIFF_RESTRICT add,
                                   const uint16_t *CUDADIFF_RESTRICT sub, BoxFloat d, size_t n,
                                   uint8_t *CUDADIFF_RESTRICT out) {
  for (size_t b = 0; b < n; ++b) {
    const SUM s = sums[b];
    out[b] = box_mean_float(s, d);
    sums[b] = static_cast<SUM>(s + add[b] - sub[b]);
  }
}

CUDADIFF_CPU_CLONES void vbox16(uint16_t *CUDADIFF_RESTRICT sums,
                                const uint16_t *CUDADIFF_RESTRICT add,
                                const uint16_t *CUDADIFF_RESTRICT sub, BoxFloat d, size_t n,
                                uint8_t *CUDADIFF_RESTRICT out) {
  vbox_k<uint16_t>(sums, add, sub, d, n, out);
}

CUDADIFF_CPU_CLONES void vbox32(uint32_t *CUDADIFF_RESTRICT sums,
                                const uint16_t *CUDADIFF_RESTRICT add,
                                const uint16_t *CUDADIFF_RESTRICT sub, BoxFloat d, size_t n,
                                uint8_t *CUDADIFF_RESTRICT out) {
  vbox_k<uint32_t>(sums, add, sub, d, n, out);
}

template <class SUM>
CUDADIFF_ALWAYS_INLINE void add_row(SUM *CUDADIFF_RESTRICT sums,
                                    const uint16_t *CUDADIFF_RESTRICT row, size_t n) {
  for (size_t b = 0; b < n; ++b) sums[b] = static_cast<SUM>(sums[b] + row[b]);
}

// One byte per lane: the networks of median_networks.h, as the CUDA kernel
// runs them on 16-bit lanes.
struct ByteLanes {
  using T = uint8_t;
  static T min(T a, T b) { return a < b ? a : b; }
  static T max(T a, T b) { return a < b ? b : a; }
};

// Net::kRows output rows (o0, o1, and o2 for K = 7) from Net::kInputRows
// input rows.
template <int K>
CUDADIFF_ALWAYS_INLINE void median_k(const uint8_t *const *rows, int ps, size_t n,
                                     uint8_t *CUDADIFF_RESTRICT o0, uint8_t *CUDADIFF_RESTRICT o1,
                                     uint8_t *CUDADIFF_RESTRICT o2) {
  using Net = median_net::MedianNetwork<K>;
  const uint8_t *tap[Net::kInputRows][K];
  for (int i = 0; i < Net::kInputRows; ++i)
    for (int dx = 0; dx < K; ++dx) tap[i][dx] = rows[i] + dx * ps;
  for (size_t b = 0; b < n; ++b) {
    uint8_t in[Net::kInputRows][K];
    for (int i = 0; i < Net::kInputRows; ++i)
      for (int dx = 0; dx < K; ++dx) in[i][dx] = tap[i][dx][b];
    uint8_t med[Net::kRows];
    Net::template run<ByteLanes>(in, med);
    o0[b] = med[0];
    o1[b] = med[1];
    if (Net::kRows > 2) o2[b] = med[Net::kRows - 1];
  }
}

int median_rows_per_pass(int k) {
  return k == 3   ? median_net::MedianNetwork<3>::kRows
         : k == 5 ? median_net::MedianNetwork<5>::kRows
                  : median_net::MedianNetwork<7>::kRows;
}

CUDADIFF_CPU_CLONES void median_rows(int k, const uint8_t *const *rows, int ps, size_t n,
                                     uint8_t *CUDADIFF_RESTRICT o0, uint8_t *CUDADIFF_RESTRICT o1,
                                     uint8_t *CUDADIFF_RESTRICT o2) {
  static_assert(median_net::MedianNetwork<3>::kRows == 2 &&
                    median_net::MedianNetwork<5>::kRows == 2 &&
                    median_net::MedianNetwork<7>::kRows == 3,
                "median_k writes 2 or 3 rows");
  if (k == 3) return median_k<3>(rows, ps, n, o0, o1, o2);
  if (k == 5) return median_k<5>(rows, ps, n, o0, o1, o2);
  return median_k<7>(rows, ps, n, o0, o1, o2);
}

// Bytes of 4-byte pixels that are not filtered (alpha, x): copied from the input.
CUDADIFF_CPU_CLONES void keep_bytes(const uint8_t *CUDADIFF_RESTRICT in,
                                    uint8_t *CUDADIFF_RESTRICT out, int pixels, uint32_t keep) {
  for (int x = 0; x < pixels; ++x) {
    uint32_t i, o;
    std::memcpy(&i, in + 4 * x, 4);
    std::memcpy(&o, out + 4 * x, 4);
    o = (o & ~keep) | (i & keep);
    std::memcpy(out + 4 * x, &o, 4);
  }
}

// ------------------------------------------------------------ the passes

struct Plane {
  const uint8_t *in;
  size_t in_stride;
  uint8_t *out;
  size_t out_stride;
  int width;  // pixels
  int height;
  int ps;            // bytes per pixel
  size_t row_bytes;  // width * ps
  uint32_t keep;     // 4-byte pixels: the bytes copied unfiltered (0: none)
};

// What one frame's filter needs, prepared once per process().
struct Setup {
  NoiseFilterMethod method;
  int k, r;
  bool small;  // Gaussian in 16-bit lanes
  uint16_t w16[kMaxConvKernel];
  uint32_t w32[kMaxConvKernel];
  uint16_t bias16;  // small Gaussian: rounding term and shift of the vertical pass
  int shift16;
  BoxFloat box;
};

// OpenCV's small kernels have weights w[i] = 2^s w'[i] with s >= 12. Then
// the reference's horizontal value is exactly 2^(s-8) S' (S' = sum w' p, no
// rounding: the 128 it adds is below the 2^(s-8) grain) and its vertical sum
// is 2^(2s-8) T (T = sum w' S'), so out = (T + 2^(31-2s)) >> (32-2s): the
// same bytes, with S' <= 2^(16-s) 255 and T <= 2^(32-2s) 255 in 16 bits.
void small_gauss(const std::vector<uint32_t> &w, Setup *s) {
  int shift = 15;  // a common power of two (capped: 2s - 8 <= 23 keeps the vertical step exact)
  for (uint32_t v : w)
    if (v != 0) shift = std::min(shift, __builtin_ctz(v));
  s->small = shift >= 12 && s->k <= 5;
  if (!s->small) return;
  for (int i = 0; i < s->k; ++i) s->w16[i] = static_cast<uint16_t>(w[i] >> shift);
  s->bias16 = static_cast<uint16_t>(1u << (31 - 2 * shift));
  s->shift16 = 32 - 2 * shift;
}

Setup make_setup(const NoiseFilterSettings &settings) {
  Setup s{};
  s.method = settings.method;
  s.k = settings.kernel_size;
  s.r = s.k / 2;
  if (s.method == NoiseFilterMethod::Gaussian) {
    const std::vector<uint32_t> w = gaussian_weights(s.k, settings.sigma);
    for (int i = 0; i < s.k; ++i) s.w32[i] = w[i];
    small_gauss(w, &s);
  } else if (s.method == NoiseFilterMethod::Box) {
    for (int i = 0; i < s.k; ++i) s.w16[i] = 1;
    s.box = fast::box_float(s.k);
  }
  return s;
}

// Per-thread memory, kept between frames.
struct Scratch {
  std::vector<uint8_t> padded;  // the edges of input rows, or narrow rows padded (slots)
  std::vector<int> padded_row;  // which input row each slot holds (-1: none)
  std::vector<uint16_t> mid;    // horizontal results (slots)
  std::vector<int> mid_row;
  std::vector<uint32_t> acc;     // 32-bit row accumulator
  std::vector<uint16_t> sums16;  // the box's column sums
  std::vector<uint32_t> sums32;
  std::vector<uint8_t> spare;  // output rows past the end of a block
};

// Where the taps of an input row come from. The kernels read tap i of output
// byte b at in[b + i ps]; for the interior bytes of a row (b from e = r ps to
// row_bytes - e) that is the plane row itself, read in place from in =
// row. The e bytes at each end read small copies in which the border pixel
// is replicated: `left` holds r copies of the first pixel and then the first
// 2r pixels (3e bytes), `right` the last 2r pixels and then r copies of the
// last one. A row narrower than 2r pixels is copied whole, padded (`whole`).
enum Part { kLeft, kInterior, kRight, kWhole };
struct Taps {
  const uint8_t *part[4];  // by Part; kWhole for narrow rows only, the others otherwise
};

// The taps of input rows, the edge copies kept for `slots` rows (row y in
// slot y % slots).
class TapRing {
 public:
  TapRing(const Plane &p, int r, int slots, Scratch &s)
      : p_(p),
        slots_(slots),
        r_(r),
        e_(size_t(r) * p.ps),
        narrow_(p.width < 2 * r),
        stride_(narrow_ ? p.row_bytes + 2 * e_ : 6 * e_),
        s_(s) {
    if (s.padded.size() < stride_ * slots) s.padded.resize(stride_ * slots);
    s.padded_row.assign(slots, -1);
  }
  bool narrow() const { return narrow_; }
  size_t edge() const { return e_; }

  // Row y, clamped into the plane.
  Taps row(int y) {
    y = std::clamp(y, 0, p_.height - 1);
    const uint8_t *src = p_.in + size_t(y) * p_.in_stride;
    const int slot = y % slots_;
    uint8_t *buf = s_.padded.data() + stride_ * slot;
    const size_t ps = p_.ps;
    const uint8_t *last = src + p_.row_bytes - ps;
    if (s_.padded_row[slot] != y) {
      s_.padded_row[slot] = y;
      if (narrow_) {
        std::memcpy(buf + e_, src, p_.row_bytes);
        for (int i = 0; i < r_; ++i) {
          std::memcpy(buf + i * ps, src, ps);
          std::memcpy(buf + e_ + p_.row_bytes + i * ps, last, ps);
        }
      } else {
        uint8_t *left = buf, *right = buf + 3 * e_;
        for (int i = 0; i < r_; ++i) {
          std::memcpy(left + i * ps, src, ps);
          std::memcpy(right + 2 * e_ + i * ps, last, ps);
        }
        std::memcpy(left + e_, src, 2 * e_);
        std::memcpy(right, src + p_.row_bytes - 2 * e_, 2 * e_);
      }
    }
    if (narrow_) return {{nullptr, nullptr, nullptr, buf}};
    return {{buf, src, buf + 3 * e_, nullptr}};
  }

 private:
  const Plane &p_;
  int slots_, r_;
  size_t e_;
  bool narrow_;
  size_t stride_;
  Scratch &s_;
};

// Runs kernel(part, n, offset) for the parts of a row: the taps in
// Taps::part[part] give output bytes [offset, offset + n).
template <class Kernel>
void by_parts(const TapRing &ring, size_t row_bytes, Kernel kernel) {
  if (ring.narrow()) {
    kernel(kWhole, row_bytes, size_t(0));
    return;
  }
  const size_t e = ring.edge();
  kernel(kLeft, e, size_t(0));
  kernel(kInterior, row_bytes - 2 * e, e);
  kernel(kRight, e, row_bytes - e);
}

// A ring of horizontally filtered rows (16 bits per byte).
class MidRing {
 public:
  MidRing(const Plane &p, const Setup &setup, int slots, Scratch &s)
      : p_(p), setup_(setup), slots_(slots), taps_(p, setup.r, 1, s), s_(s) {
    if (s.mid.size() < p.row_bytes * slots) s.mid.resize(p.row_bytes * slots);
    if (s.acc.size() < p.row_bytes) s.acc.resize(p.row_bytes);
    s.mid_row.assign(slots, -1);
  }
  const uint16_t *row(int y) {
    y = std::clamp(y, 0, p_.height - 1);
    const int slot = y % slots_;
    uint16_t *dst = s_.mid.data() + p_.row_bytes * slot;
    if (s_.mid_row[slot] != y) {
      const bool wide = setup_.method == NoiseFilterMethod::Gaussian && !setup_.small;
      const Taps taps = taps_.row(y);
      by_parts(taps_, p_.row_bytes, [&](int part, size_t n, size_t at) {
        const uint8_t *in = taps.part[part];
        if (wide)
          hgauss32(in, p_.ps, setup_.k, setup_.w32, n, dst + at, s_.acc.data());
        else
          hsum16(in, p_.ps, setup_.k, setup_.method == NoiseFilterMethod::Box, setup_.w16, n,
                 dst + at);
      });
      s_.mid_row[slot] = y;
    }
    return dst;
  }

 private:
  const Plane &p_;
  const Setup &setup_;
  int slots_;
  TapRing taps_;
  Scratch &s_;
};

void finish_row(const Plane &p, int y) {
  if (p.keep)
    keep_bytes(p.in + size_t(y) * p.in_stride, p.out + size_t(y) * p.out_stride, p.width, p.keep);
}

void gauss_block(const Plane &p, const Setup &setup, int y0, int y1, Scratch &s) {
  MidRing mid(p, setup, setup.k + 1, s);
  const uint16_t *rows[kMaxConvKernel];
  for (int y = y0; y < y1; ++y) {
    for (int i = 0; i < setup.k; ++i) rows[i] = mid.row(y - setup.r + i);
    uint8_t *out = p.out + size_t(y) * p.out_stride;
    if (setup.small)
      vgauss16(rows, setup.k, setup.w16, setup.bias16, setup.shift16, p.row_bytes, out);
    else
      vgauss32(rows, setup.k, setup.w32, p.row_bytes, out, s.acc.data());
    finish_row(p, y);
  }
}

template <class SUM>
void box_block(const Plane &p, const Setup &setup, int y0, int y1, Scratch &s,
               std::vector<SUM> &sum_buffer) {
  MidRing mid(p, setup, setup.k + 1, s);
  sum_buffer.assign(p.row_bytes, SUM(0));
  SUM *sums = sum_buffer.data();
  for (int i = -setup.r; i <= setup.r; ++i) add_row(sums, mid.row(y0 + i), p.row_bytes);
  for (int y = y0; y < y1; ++y) {
    const uint16_t *add = mid.row(y + setup.r + 1);
    const uint16_t *sub = mid.row(y - setup.r);
    uint8_t *out = p.out + size_t(y) * p.out_stride;
    if constexpr (sizeof(SUM) == 2)
      vbox16(sums, add, sub, setup.box, p.row_bytes, out);
    else
      vbox32(sums, add, sub, setup.box, p.row_bytes, out);
    finish_row(p, y);
  }
}

void median_block(const Plane &p, const Setup &setup, int y0, int y1, Scratch &s) {
  const int k = setup.k, r = setup.r;
  const int out_rows = median_rows_per_pass(k);
  const int in_rows = k + out_rows - 1;
  TapRing taps(p, r, in_rows, s);
  // Outputs past the block's end go to spare rows (one per output row, as the
  // output pointers must not alias).
  if (s.spare.size() < 3 * p.row_bytes) s.spare.resize(3 * p.row_bytes);
  Taps rows[9];
  uint8_t *outs[3];
  for (int y = y0; y < y1; y += out_rows) {
    for (int i = 0; i < in_rows; ++i) rows[i] = taps.row(y - r + i);
    for (int j = 0; j < 3; ++j)
      outs[j] = j < out_rows && y + j < y1 ? p.out + size_t(y + j) * p.out_stride
                                           : s.spare.data() + j * p.row_bytes;
    by_parts(taps, p.row_bytes, [&](int part, size_t n, size_t at) {
      const uint8_t *in[9];
      for (int i = 0; i < in_rows; ++i) in[i] = rows[i].part[part];
      median_rows(k, in, p.ps, n, outs[0] + at, outs[1] + at, outs[2] + at);
    });
    for (int j = 0; j < out_rows && y + j < y1; ++j) finish_row(p, y + j);
  }
}

class FastNoiseFilter final : public NoiseFilter {
 public:
  FastNoiseFilter(VideoFormat format, int width, int height)
      : format_(format), width_(width), height_(height) {}

  void process(const FrameView &in, const FrameView &out,
               const NoiseFilterSettings &settings) override {
    validate(in, "noise filter input");
    validate(out, "noise filter output");
    validate(settings);
    if (in.format != format_ || out.format != format_ || in.width != width_ ||
        in.height != height_ || out.width != width_ || out.height != height_)
      throw Error("noise filter: frame does not match the configured format and size");
    const Setup setup = make_setup(settings);

    // Jobs: blocks of rows of every plane, each plane cut in proportion to
    // its share of the bytes; a block is at least a few windows tall, so the
    // halo it recomputes stays small.
    std::vector<Plane> planes;
    size_t total = 0;
    for (int p = 0; p < in.n_planes(); ++p) {
      const PlaneLayout layout = noise_filter_plane_layout(format_, p);
      Plane pl{in.data[p],          in.stride[p],      out.data[p],
               out.stride[p],       in.plane_width(p), in.plane_height(p),
               layout.pixel_stride, in.row_bytes(p),   0};
      if (layout.pixel_stride == 4)
        for (int b = 0; b < 4; ++b)
          if (!(layout.filtered_mask >> b & 1u)) pl.keep |= 0xffu << (8 * b);
      planes.push_back(pl);
      total += pl.row_bytes * pl.height;
    }
    // The median costs far more per byte than the passes of the others.
    const size_t work = settings.method == NoiseFilterMethod::Median ? total * 8 : total;
    const int threads = fast::threads_for_bytes(work);
    struct Job {
      int plane, y0, y1;
    };
    std::vector<Job> jobs;
    for (int p = 0; p < static_cast<int>(planes.size()); ++p) {
      const Plane &pl = planes[p];
      const double share = double(pl.row_bytes) * pl.height / double(total);
      int blocks = std::max(1, static_cast<int>(threads * share * 2 + 0.5));
      blocks = std::min(blocks, std::max(1, pl.height / (4 * setup.k)));
      if (threads == 1) blocks = 1;
      for (int b = 0; b < blocks; ++b) {
        Job j{p, 0, 0};
        fast::block_rows(pl.height, blocks, b, &j.y0, &j.y1);
        jobs.push_back(j);
      }
    }
    if (scratch_.size() < static_cast<size_t>(threads)) scratch_.resize(threads);
    fast::parallel_jobs(static_cast<int>(jobs.size()), threads, [&](int j, int t) {
      const Job &job = jobs[j];
      const Plane &pl = planes[job.plane];
      Scratch &s = scratch_[t];
      switch (setup.method) {
        case NoiseFilterMethod::Gaussian:
          gauss_block(pl, setup, job.y0, job.y1, s);
          break;
        case NoiseFilterMethod::Box:
          if (setup.k <= 15)  // 15 x 15 x 255 < 2^16
            box_block(pl, setup, job.y0, job.y1, s, s.sums16);
          else
            box_block(pl, setup, job.y0, job.y1, s, s.sums32);
          break;
        case NoiseFilterMethod::Median:
          median_block(pl, setup, job.y0, job.y1, s);
          break;
      }
    });
  }

 private:
  VideoFormat format_;
  int width_, height_;
  std::vector<Scratch> scratch_;
};

}  // namespace

namespace detail {
std::unique_ptr<NoiseFilter> make_fast_noise_filter(VideoFormat format, int width, int height) {
  return std::make_unique<FastNoiseFilter>(format, width, height);
}
}  // namespace detail

}  // namespace cudadiff
