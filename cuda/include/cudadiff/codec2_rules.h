// The difference codec, version 2: the rules every backend follows bit for
// bit (docs/stream-format.md, "Version 2: the body", is their specification). Only small inline
// integer functions and constants live here, usable from C++ and CUDA
// (__host__ __device__ under nvcc), so that the CPU reference
// (cuda/cpu/codec2.cpp) and a CUDA implementation compute the same values:
// quantisation, the colour transform, prediction, contexts, tokens, the
// wavefront schedule of a tile and the rANS coder's constants.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cudadiff/frame.h"

#if defined(__CUDACC__)
#define CODEC2_HD __host__ __device__ __forceinline__
#else
#define CODEC2_HD inline
#endif

namespace cudadiff {
namespace codec2 {

// ---- geometry -----------------------------------------------------------
constexpr int kBlock = 16;     // a block is 16x16 samples of layer 0; one mode per block
constexpr int kMaxLanes = 32;  // rANS states per tile, one per row (mod lanes) of the tile
constexpr int kStagger = 2;    // lane l runs 2*l steps behind lane 0 (up-right neighbour ready)
constexpr int kMaxLayers = 2;  // luma (or RGB) and chroma
constexpr int kMaxComps = 4;   // components per layer (Y, Co, Cg, alpha/padding)

// ---- block modes --------------------------------------------------------
enum Mode : uint8_t {
  kSkip = 0,      // every byte is the reference's
  kTemporal = 1,  // T-domain value predicted as 0 (the reference)
  kTempSpat = 2,  // T-domain value predicted by MED of its neighbours' T-domain values
  kSpatial = 3,   // S-domain value (quantisation index) predicted by MED of its neighbours
};
constexpr int kModes = 4;
// Distribution classes: which table set a coded sample uses.
enum Class : int { kClassSpatial = 0, kClassTemporal = 1, kClassTempSpat = 2 };
constexpr int kClasses = 3;
CODEC2_HD int mode_class(int mode) {
  return mode == kSpatial ? kClassSpatial : mode == kTemporal ? kClassTemporal : kClassTempSpat;
}

// ---- quantisation -------------------------------------------------------
// Step s = 2k+1. S-domain: index u = (x + k) / s, reconstruction min(255, u*s).
// T-domain: q = Qd(x - ref) (rounding to nearest multiple of s, ties towards
// zero), reconstruction clamp(ref + q*s, 0, 255). Both keep |x - recon| <= k.
CODEC2_HD int quant_index(int x, int k) {
  return (x + k) / (2 * k + 1);
}
CODEC2_HD int dequant_index(int u, int k) {
  const int v = u * (2 * k + 1);
  return v < 0 ? 0 : v > 255 ? 255 : v;
}
CODEC2_HD int max_index(int k) {
  return (255 + k) / (2 * k + 1);
}
CODEC2_HD int quant_diff(int e, int k) {
  const int s = 2 * k + 1;
  return e >= 0 ? (e + k) / s : -((k - e) / s);
}
CODEC2_HD int dequant_diff(int ref, int q, int k) {
  const int v = ref + q * (2 * k + 1);
  return v < 0 ? 0 : v > 255 ? 255 : v;
}

// ---- the encoders' quantiser --------------------------------------------
// What every backend's encoder does with its threshold K (docs/stream-format.md,
// "The encoder"): it codes with the finer k = encoder_k(K) = ceil(2K / 3)
// (K 0, 1, 2, 3, 5, 10, 20 give k 0, 1, 2, 2, 4, 7, 14) and keeps the
// reference's byte wherever it lies within K of the input (a T-domain value
// of 0, whatever k says: the dead zone); a byte further off gets its nearest
// value on the grid of k. Every byte stays within K; a byte that was
// corrected lands within k of the input, so a camera's noise of up to K - k
// levels cannot push it out again. With k = K, the noise keeps flipping
// bytes that lie near a quantisation boundary between two cells, every frame.
//
// Keyframes take the finer still keyframe_k(K) = ceil(K / 3) (K 0, 1, 2, 3,
// 5, 10, 20 give 0, 1, 1, 1, 2, 4, 7): every byte of a keyframe lands within
// that of the input, and where the picture then stays still the reference
// keeps it, so a camera's noise of up to K - keyframe_k(K) levels (13 at 20)
// leaves those bytes alone for the whole run of deltas. With encoder_k(K)
// for keyframes too, noise of more than K - encoder_k(K) levels (6 at 20)
// pushed bytes of most blocks past K in the deltas after every keyframe, and
// the deltas coded them again and again (the demo's test pattern, noise of
// 12.75 levels peak to peak at threshold 20: 14.5 KB per delta against 1.2
// KB; on vtest.avi 4-10 % fewer bytes in all, on tree.avi from 1.6 % fewer
// to 0.7 % more, and a higher PSNR on both: docs/stream-format.md, "Design
// notes").
CODEC2_HD int encoder_k(int threshold) {
  return (2 * threshold + 2) / 3;
}
CODEC2_HD int keyframe_k(int threshold) {
  return (threshold + 2) / 3;
}
// The quantiser an encoder codes a frame with.
CODEC2_HD int frame_k(int threshold, bool keyframe) {
  return keyframe ? keyframe_k(threshold) : encoder_k(threshold);
}
CODEC2_HD int encoder_diff(int e, int k, int threshold) {
  return e <= threshold && e >= -threshold ? 0 : quant_diff(e, k);
}

// The same divisions by the step s = 2k+1 as a multiply and a shift, for
// code that runs them per sample (the CUDA encoder): exact for numerators
// 0 <= n < 2048 and k <= 255 (checked below), not beyond. With m =
// ceil(2^21 / s) = (2^21 + e) / s, 0 <= e < s, n * m / 2^21 = n / s +
// n * e / (s * 2^21), and n * e < 2^21 keeps the floor; n * m < 2^32. The
// overloads below take x + k >= 0 and |e| + k for bytes x and differences e
// of bytes (up to 510), and a texture sum g (ref_class_of_steps(div(g)), g
// up to 1020). (The CPU encoder's vector paths have their own, for 16-bit
// lanes and numerators up to 511: StepDivision in cuda/cpu/codec2.cpp.)
struct StepDiv {
  uint32_t m;
  int k;
  CODEC2_HD constexpr uint32_t div(uint32_t n) const { return (n * m) >> 21; }
};
CODEC2_HD constexpr StepDiv step_div(int k) {
  return StepDiv{((1u << 21) + uint32_t(2 * k)) / uint32_t(2 * k + 1), k};
}
// div() never decreases as n grows: it is the quotient on 0..2047 if it is
// at each multiple of s, just below it, and at 0 and 2047.
constexpr bool step_div_is_exact() {
  for (int k = 0; k <= 255; ++k) {
    const StepDiv d = step_div(k);
    const uint32_t s = uint32_t(2 * k + 1);
    if (d.div(0) != 0 || d.div(2047) != 2047 / s) return false;
    for (uint32_t q = 1; q * s <= 2047; ++q)
      if (d.div(q * s - 1) != q - 1 || d.div(q * s) != q) return false;
  }
  return true;
}
static_assert(step_div_is_exact(), "StepDiv differs from the division by the step");
CODEC2_HD int quant_index(int x, const StepDiv &d) {  // x + k >= 0
  return int(d.div(uint32_t(x + d.k)));
}
CODEC2_HD int quant_diff(int e, const StepDiv &d) {
  const int q = int(d.div(uint32_t((e >= 0 ? e : -e) + d.k)));
  return e >= 0 ? q : -q;
}
CODEC2_HD int encoder_diff(int e, const StepDiv &d, int threshold) {
  return e <= threshold && e >= -threshold ? 0 : quant_diff(e, d);
}

// ---- colour transform (YCoCg-R, lossless on any integers) ---------------
CODEC2_HD void ycocg_forward(int r, int g, int b, int *y, int *co, int *cg) {
  *co = r - b;
  const int t = b + (*co >> 1);
  *cg = g - t;
  *y = t + (*cg >> 1);
}
CODEC2_HD void ycocg_inverse(int y, int co, int cg, int *r, int *g, int *b) {
  const int t = y - (cg >> 1);
  *g = cg + t;
  *b = t - (co >> 1);
  *r = *b + co;
}
// A sample's channel values -> its component values, for a layer of
// `channels` channels (ycocg: YCoCg-R of the first three, the fourth as it
// is; otherwise unchanged), and back.
CODEC2_HD void to_components(bool ycocg, int channels, const int *ch, int *comp) {
  if (ycocg && channels >= 3) {
    ycocg_forward(ch[0], ch[1], ch[2], &comp[0], &comp[1], &comp[2]);
    if (channels == 4) comp[3] = ch[3];
  } else {
    for (int c = 0; c < channels; ++c) comp[c] = ch[c];
  }
}
CODEC2_HD void to_channels(bool ycocg, int channels, const int *comp, int *ch) {
  if (ycocg && channels >= 3) {
    ycocg_inverse(comp[0], comp[1], comp[2], &ch[0], &ch[1], &ch[2]);
    if (channels == 4) ch[3] = comp[3];
  } else {
    for (int c = 0; c < channels; ++c) ch[c] = comp[c];
  }
}

// ---- prediction ---------------------------------------------------------
// MED (LOCO-I): a left, b above, c above-left:
//   c >= max(a, b) ? min(a, b) : c <= min(a, b) ? max(a, b) : a + b - c,
// computed as a + b - c clamped to [min(a, b), max(a, b)], which is the same
// (c >= max gives a + b - c <= min, c <= min gives a + b - c >= max) and
// has no branch to mispredict.
CODEC2_HD int med(int a, int b, int c) {
  const int mx = a > b ? a : b;
  const int mn = a > b ? b : a;
  const int p = a + b - c;
  const int hi = p < mx ? p : mx;
  return hi > mn ? hi : mn;
}

// ---- contexts -----------------------------------------------------------
// Activity buckets: g -> 0..kActivityBuckets-1, the number of the edges
// 1, 2, 3, 5, 7, 10, 14, 20, 28, 40, 56, 80 that are <= g.
constexpr int kActivityBuckets = 13;
// The same as a table for g in 0..kActivityTableMax (the last edge; the
// last bucket beyond), read by bucket_from_table().
constexpr int kActivityTableMax = 80;
CODEC2_HD int bucket_from_table(const uint8_t *table, int g) {
  return table[g < kActivityTableMax ? g : kActivityTableMax];
}
struct ActivityTable {
  uint8_t bucket[kActivityTableMax + 1];
};
constexpr ActivityTable make_activity_table() {
  ActivityTable t{};
  const int edges[12] = {1, 2, 3, 5, 7, 10, 14, 20, 28, 40, 56, 80};
  for (int g = 0; g <= kActivityTableMax; ++g) {
    int n = 0;
    for (int e : edges) n += g >= e;
    t.bucket[g] = uint8_t(n);
  }
  return t;
}
#if !defined(__CUDACC__)
inline constexpr ActivityTable kActivityTable = make_activity_table();
CODEC2_HD int activity_bucket(int g) {
  return bucket_from_table(kActivityTable.bucket, g);
}
#else
CODEC2_HD int activity_bucket(int g) {
  const int edges[12] = {1, 2, 3, 5, 7, 10, 14, 20, 28, 40, 56, 80};
  int n = 0;
  for (int e : edges) n += g >= e;
  return n;
}
#endif
CODEC2_HD int iabs(int v) {
  return v < 0 ? -v : v;
}
// Components after the first also see the first component's residual at the
// same pixel (0, or not 0): twice the contexts.
constexpr int kCrossLevels = 2;
// Temporal samples of the first component also see how textured the
// reference is around them (edges move, flat areas rarely change by more than k).
constexpr int kRefClasses = 4;
CODEC2_HD bool uses_ref_class(int cls, int comp) {
  return cls == kClassTemporal && comp == 0;
}
CODEC2_HD int contexts_of(int cls, int comp) {
  return (comp == 0 ? kActivityBuckets : kActivityBuckets * kCrossLevels) *
         (uses_ref_class(cls, comp) ? kRefClasses : 1);
}
// Texture class of the reference at a sample: g = sum of |neighbour - sample|
// over 4 samples of its texture channel around it (tile_ref_texture() or
// ref_texture() below, as the body's flags say), in steps of 2k+1.
CODEC2_HD int ref_class_of_steps(int q) {
  return q < 2 ? 0 : q < 6 ? 1 : q < 16 ? 2 : 3;
}
CODEC2_HD int ref_class(int g, int k) {
  return ref_class_of_steps(g / (2 * k + 1));
}
// The samples [first, end) of a layer, in one dimension, of the tile that
// holds sample x: tiles of `tile_blocks` blocks, the layer subsampled by
// `shift` (sx or sy) against the block grid, `size` samples long (the
// layer's width or height). make_tiles() in codec2_body.h gives the same.
CODEC2_HD int tile_sample_first(int x, int shift, int tile_blocks) {
  const int span = tile_blocks * kBlock;  // samples of layer 0
  return (((x << shift) / span) * span) >> shift;
}
CODEC2_HD int tile_sample_end(int x, int shift, int tile_blocks, int size) {
  const int span = tile_blocks * kBlock;
  const int end = ((((x << shift) / span) + 1) * span) >> shift;
  return end < size ? end : size;
}
// The texture sum g of the tile rule (body flag kBodyTileClasses,
// codec2.h): the left, right, above and above-left samples of sample
// (x, y) of the texture channel `t` (rows of `stride` bytes), each replaced
// by the sample itself (adding 0) where it lies outside the sample's tile,
// whose samples in this layer are [x0, x1) x [y0, ...). It reads only the
// sample's tile of the reference, and only samples that the wavefront
// schedule decodes no later than one step after the sample (the above-right
// and below neighbours would come a step or a round later).
CODEC2_HD int tile_ref_texture(const uint8_t *t, size_t stride, int x, int y, int x0, int x1,
                               int y0) {
  const uint8_t *row = t + size_t(y) * stride;
  const int v = row[x];
  int g = 0;
  if (x > x0) g += iabs(int(row[x - 1]) - v);
  if (x + 1 < x1) g += iabs(int(row[x + 1]) - v);
  if (y > y0) {
    const uint8_t *up = row - stride;
    g += iabs(int(up[x]) - v);
    if (x > x0) g += iabs(int(up[x - 1]) - v);
  }
  return g;
}
// The texture sum of the rule before it (flag clear: what the encoders
// wrote until 2026-12-01): the 4 nearest samples (left, right, above,
// below) in a layer of w x h samples, its edges repeating the sample,
// tiles not mattering.
CODEC2_HD int ref_texture(const uint8_t *t, int w, int h, int x, int y) {
  const uint8_t *row = t + size_t(y) * w;
  const int v = row[x];
  return iabs(int(row[x > 0 ? x - 1 : 0]) - v) + iabs(int(row[x + 1 < w ? x + 1 : x]) - v) +
         iabs(int(t[size_t(y > 0 ? y - 1 : 0) * w + x]) - v) +
         iabs(int(t[size_t(y + 1 < h ? y + 1 : y) * w + x]) - v);
}
// Local activity from the neighbours in the sample's domain.
CODEC2_HD int spatial_activity(int a, int b, int c, int d) {
  return iabs(a - b) + iabs(b - c) + iabs(c - a) + iabs(b - d);
}
CODEC2_HD int temporal_activity(int a, int b, int c, int d) {
  return iabs(a) + iabs(b) + iabs(c) + iabs(d);
}
// Residuals are coded negated where the neighbours lean negative, so that
// one table serves both signs: temporal samples by the sum of the
// neighbours' T-domain values (a drift), the others by the curvature
// a + b - 2c (where the median predictor tends to err the same way).
CODEC2_HD bool flip_sign(int cls, int a, int b, int c, int d) {
  return cls == kClassTemporal ? a + b + c + d < 0 : a + b - 2 * c < 0;
}
// Context of a sample from its neighbours' values in the mode's domain
// (a left, b above, c above-left, d above-right), for comp > 0 the first
// component's residual r0 at the same pixel, and the reference's class.
// In two parts, for code that finds the bucket another way (a table): the
// activity g, and the context from activity_bucket(g).
CODEC2_HD int context_activity(int cls, int a, int b, int c, int d) {
  return cls == kClassTemporal ? temporal_activity(a, b, c, d) : spatial_activity(a, b, c, d);
}
CODEC2_HD int context_of_bucket(int cls, int comp, int bucket, int r0, int rclass) {
  int ctx = bucket;
  if (comp > 0) {
    const int m = iabs(r0);
    ctx += kActivityBuckets * (m >= kCrossLevels ? kCrossLevels - 1 : m);
  }
  if (uses_ref_class(cls, comp)) ctx = ctx * kRefClasses + rclass;
  return ctx;
}
CODEC2_HD int sample_context(int cls, int comp, int a, int b, int c, int d, int r0, int rclass) {
  return context_of_bucket(cls, comp, activity_bucket(context_activity(cls, a, b, c, d)), r0,
                           rclass);
}

// ---- tokens -------------------------------------------------------------
// A residual r is coded as v = zigzag(r) (0, -1, 1, -2, ... -> 0, 1, 2, 3, ...),
// v < 16 as token v, larger v as a token for its bit length and the bit below
// the leading one, followed by the remaining e-1 bits raw (e = bit length - 1).
constexpr int kTokens = 32;  // tokens 0..31: v < 4096
constexpr int kDirectTokens = 16;
CODEC2_HD uint32_t zigzag(int r) {
  return r >= 0 ? uint32_t(r) << 1 : (uint32_t(-r) << 1) - 1;
}
CODEC2_HD int unzigzag(uint32_t v) {
  return (v & 1) ? -int(v >> 1) - 1 : int(v >> 1);
}
CODEC2_HD int bit_length(uint32_t v) {  // index of the highest set bit, v > 0 (0 for 0)
#if defined(__CUDA_ARCH__)
  return v ? 31 - __clz(int(v)) : 0;
#else
  return v ? 31 - __builtin_clz(v) : 0;
#endif
}
// Token of v (< 4096) and its raw bits (count and value).
CODEC2_HD int token_of(uint32_t v, int *nbits, uint32_t *bits) {
  if (v < uint32_t(kDirectTokens)) {
    *nbits = 0;
    *bits = 0;
    return int(v);
  }
  const int e = bit_length(v);  // 4..11
  *nbits = e - 1;
  *bits = v & ((1u << (e - 1)) - 1);
  return kDirectTokens + 2 * (e - 4) + int((v >> (e - 1)) & 1);
}
CODEC2_HD int token_extra_bits(int token) {
  return token < kDirectTokens ? 0 : 3 + (token - kDirectTokens) / 2;
}
CODEC2_HD uint32_t token_value(int token, uint32_t bits) {
  if (token < kDirectTokens) return uint32_t(token);
  const int e = 4 + (token - kDirectTokens) / 2;
  return ((2u | uint32_t((token - kDirectTokens) & 1)) << (e - 1)) | bits;
}

// ---- integer costs --------------------------------------------------------
// floor(256 * log2(x)) for x >= 1 (costs in 1/256 bit for the mode decision
// and the tables): the integer part from the highest bit, then 8 squarings
// of the mantissa in Q16.
CODEC2_HD uint32_t log2_q8(uint32_t x) {
  const int e = bit_length(x);
  uint64_t m = (uint64_t(x) << 16) >> e;  // mantissa in [1, 2) as Q16
  uint32_t frac = 0;
  for (int i = 7; i >= 0; --i) {
    m = (m * m) >> 16;
    if (m >= (2u << 16)) {
      m >>= 1;
      frac |= 1u << i;
    }
  }
  return uint32_t(e) * 256 + frac;
}

// ---- rANS ---------------------------------------------------------------
constexpr int kProbBits = 12;  // frequencies sum to 4096
constexpr uint32_t kProbScale = 1u << kProbBits;
constexpr uint32_t kRansLow = 1u << 23;  // state in [2^23, 2^31); byte-wise renormalisation
// The state every lane's encoder starts from, which its decoder must end in.
// It holds the threshold and the lane, so that a body decoded with another
// threshold (damage) or lanes mixed up fail the check, and a 17-bit checksum
// of every symbol the lane decodes (a damaged stream can fall back into step
// with different symbols, and damaged raw bits leave the state as it was).
CODEC2_HD uint32_t lane_checksum(uint32_t h, uint32_t value) {
  // For each symbol of the lane in decoding order, from 0: the token of a
  // table symbol (block modes included), the value of raw bits.
  return (h * 33u + value) & 0x1FFFFu;
}
CODEC2_HD uint32_t lane_final_state(int threshold, int lane, uint32_t checksum) {
  return kRansLow + (checksum << 13) + uint32_t(threshold) * 32u + uint32_t(lane);
}

// A lower bound of a coded tile's size (its lanes' states and bytes), known
// before its coding: from `bits`, for each distribution the entropy of the
// tile's counts (sum over tokens of c log2(n / c), n the distribution's
// count in the tile) plus the raw bits of its tokens, and `symbols`, the
// tile's symbols. No table of frequencies f summing to kProbScale (every
// token that occurs has f >= 1) codes the tokens in fewer than
// sum c log2(kProbScale / f) bits (Gibbs' inequality). Take log2 of a
// lane's state plus 8 per byte it sent: a token's step
// x' = (x / f) kProbScale + x % f + cum >= (x - f + 1) kProbScale / f, with
// x >= 2^11 f after renormalisation, adds at least log2(kProbScale / f) -
// 2^-10.4; raw bits' step adds exactly their count; a renormalisation's
// floor loses less than 2^-10.4 before a token and 2^-12.4 before raw bits
// (at most 10 of them leave x >= 2^13): under 2^-8.6 bits per symbol in
// all, within the margin of 3/256. Over the lane, what the state itself
// gains from its final state (>= 2^23) to its initial state (< 2^31) is
// less than 8 bits, which its 4 bytes more than make up for: the lane
// takes at least its bits less the margin, over 8. (1e-9 of the bits and
// 64 more cover the sums' rounding.) The encoders store a tile whose bound
// reaches its bytes raw without coding it: coding it would not have made
// it smaller.
static_assert(3 + (kTokens - 1 - kDirectTokens) / 2 <= 10,  // token_extra_bits() of the last
              "coded_tile_bound()'s margin assumes at most 10 raw bits per token");
CODEC2_HD double coded_tile_bound(double bits, double symbols) {
  return (bits - symbols * (3.0 / 256.0) - bits * 1e-9 - 64.0) / 8.0;
}

// ---- indexed tiles ---------------------------------------------------------
// A tile of type 3 (docs/stream-format.md, "Tile types") holds the S-domain
// index of each of its bytes, in the order of a raw tile's bytes, as digits
// in base N = max_index(k) + 1 (1 .. 256), D = indexed_digits(k) of them to
// a 32-bit little-endian word, the first digit the least significant: a
// word is u0 + N u1 + ... + N^(D-1) u(D-1), and the tile's last word holds
// what is left. Noise that prediction cannot shrink costs log2 N bits per
// byte this way (nearly: 4.6 bits at k = 4 against about 5.6 coded), and
// neither encoder nor decoder runs rANS for it.
CODEC2_HD int indexed_base(int k) {
  return max_index(k) + 1;
}
// The most digits, up to 32, whose largest word N^D - 1 fits in 32 bits.
CODEC2_HD int indexed_digits(int k) {
  const uint64_t n = uint64_t(indexed_base(k));
  uint64_t p = 1;
  int d = 0;
  while (d < 32 && p * n <= (uint64_t(1) << 32)) p *= n, ++d;
  return d;
}
// A tile of `bytes` bytes, indexed (digits: indexed_digits(k)).
CODEC2_HD uint64_t indexed_bytes_of(uint64_t bytes, int digits) {
  return 4 * ((bytes + uint64_t(digits) - 1) / uint64_t(digits));
}
CODEC2_HD uint64_t indexed_bytes(uint64_t bytes, int k) {
  return indexed_bytes_of(bytes, indexed_digits(k));
}
// Exact division of any 32-bit number by a divisor 1 .. 2^31 as a
// multiplication (Granlund and Montgomery): the decoders take a word's
// digits apart with it.
struct Div32 {
  uint32_t m;
  int s1, s2;
  CODEC2_HD uint32_t div(uint32_t n) const {
#ifdef __CUDA_ARCH__
    const uint32_t t = __umulhi(m, n);
#else
    const uint32_t t = uint32_t((uint64_t(m) * n) >> 32);
#endif
    return (t + ((n - t) >> s1)) >> s2;
  }
};
CODEC2_HD Div32 div32(uint32_t d) {
  int l = 0;
  while ((uint64_t(1) << l) < d) ++l;  // ceil(log2 d)
  const uint64_t m = ((uint64_t(1) << 32) * ((uint64_t(1) << l) - d)) / d + 1;
  return Div32{uint32_t(m), l < 1 ? l : 1, l > 1 ? l - 1 : 0};
}
// The encoders' estimate of a keyframe's coded tile's bits (a delta's: the
// costs of its blocks' chosen modes), in 1/256 bit, from its histogram:
// for each distribution n log2 n less the sum of c log2 c over its tokens
// (the entropy of the tile's counts), plus the tokens' raw bits. The caller
// adds indexed_count_q8() over every distribution and token and
// indexed_total_q8() over every distribution (n its count). Integers, so
// that every backend takes the same decision (indexed_pays()).
CODEC2_HD int64_t indexed_count_q8(uint32_t c, int token) {
  return c ? int64_t(c) * (256 * int64_t(token_extra_bits(token)) - int64_t(log2_q8(c))) : 0;
}
CODEC2_HD int64_t indexed_total_q8(uint32_t n) {
  return n ? int64_t(n) * int64_t(log2_q8(n)) : 0;
}
// At quantiser k > 0 the encoders store a tile indexed instead of coding it
// when that estimate reaches the indexed tile's bits (the lanes' states and
// the coder's rounding come on top of the estimate). Its bytes are then the
// S-domain reconstruction of the input, whatever the blocks' modes.
// (At k = 1 a digit takes a byte: no tile is indexed there.)
CODEC2_HD bool indexed_pays(int64_t estimate_q8, uint64_t raw_bytes, int k, int digits) {
  const uint64_t bytes = indexed_bytes_of(raw_bytes, digits);
  return k > 0 && bytes < raw_bytes && estimate_q8 >= int64_t(2048 * bytes);
}
CODEC2_HD bool indexed_pays(int64_t estimate_q8, uint64_t raw_bytes, int k) {
  return indexed_pays(estimate_q8, raw_bytes, k, indexed_digits(k));
}

// ---- frequency tables ---------------------------------------------------
// A transmitted table gives each token a level L (0 = absent, 1..kLevels);
// level L weighs B[(L-1) % 4] << ((L-1) / 4) with B = 256, 304, 362, 431
// (256 * 2^(r/4) rounded): a quarter of an octave per level, 256 .. 2^20.
// normalize_levels() turns levels into frequencies summing to kProbScale.
constexpr int kLevels = 49;
CODEC2_HD uint32_t level_weight(int level) {
  if (level <= 0) return 0;
  const int q = (level - 1) >> 2, r = (level - 1) & 3;
  const uint32_t base = r == 0 ? 256u : r == 1 ? 304u : r == 2 ? 362u : 431u;
  return base << q;
}

// levels[0..n) -> freq[0..n): absent tokens get 0, present ones at least 1,
// the rest in proportion to their weights (floor), and the remainder (which
// may be negative) goes to the first token with the largest frequency.
// The frequencies sum to `scale`: kProbScale for rANS lanes, kTansStates
// for a palette table of tANS lanes (body flag 0x04; with at most 32
// tokens the largest keeps at least 1 either way). Returns false when no
// token is present.
CODEC2_HD bool normalize_levels_to(const uint8_t *levels, int n, uint32_t scale, uint16_t *freq) {
  uint64_t total = 0;
  for (int t = 0; t < n; ++t) total += level_weight(levels[t]);
  if (total == 0) return false;
  int32_t sum = 0;
  int largest = 0;
  for (int t = 0; t < n; ++t) {
    uint32_t f = 0;
    if (levels[t]) {
      f = uint32_t((uint64_t(level_weight(levels[t])) * scale) / total);
      if (f == 0) f = 1;
    }
    freq[t] = uint16_t(f);
    sum += int32_t(f);
    if (f > freq[largest]) largest = t;
  }
  freq[largest] = uint16_t(int32_t(freq[largest]) + int32_t(scale) - sum);
  return true;
}
CODEC2_HD bool normalize_levels(const uint8_t *levels, int n, uint16_t *freq) {
  return normalize_levels_to(levels, n, kProbScale, freq);
}

// ---- tANS lanes (body flag 0x04) ----------------------------------------
// docs/stream-format.md, "tANS lanes (flag 0x04)": a palette of at most
// kTansPalette tables of kTansStates states, 10-bit lane states, each
// lane's first bits behind a kTansFillBits fill in the tile's head.
constexpr int kTansBits = 10;
constexpr uint32_t kTansStates = 1u << kTansBits;
constexpr uint32_t kTansSpreadStep = (kTansStates >> 1) + (kTansStates >> 3) + 3;  // 643
constexpr int kTansPalette = 16;
constexpr int kTansFillBits = 5;
// The state a tANS lane must end in: its symbols' checksum (lane_checksum()
// taken mod kTansStates), the quantiser and the lane, as rANS lanes' end.
CODEC2_HD uint32_t tans_final_state(int k, int lane, uint32_t checksum) {
  return (checksum + uint32_t(k) * 32u + uint32_t(lane)) & (kTansStates - 1);
}
static_assert(kTansSpreadStep % 2 == 1, "the spread must visit every state");

// ---- layers ---------------------------------------------------------------
// A frame is coded as one or two layers of samples: packed RGB and GRAY8 as
// one layer (RGB: components Y, Co, Cg of the R, G, B bytes, then the fourth
// byte, if any, as its own component), YUV formats as a luma layer and a
// chroma layer of two components (U, V). Each component of a sample is one
// byte of the frame (a channel).
struct Layer {
  int width = 0, height = 0;  // samples
  int channels = 0;           // bytes per sample
  bool ycocg = false;         // channels 0, 1, 2 are R, G, B and are transformed
  int sx = 0, sy = 0;         // log2 subsampling against layer 0 (block of a sample)
  // Channel ch of sample (x, y): plane[ch], byte x * step[ch] + offset[ch] of row y.
  int plane[kMaxComps] = {0, 0, 0, 0};
  int step[kMaxComps] = {0, 0, 0, 0};
  int offset[kMaxComps] = {0, 0, 0, 0};
};
struct LayerSet {
  int count = 0;
  Layer layer[kMaxLayers];
  int blocks_x = 0, blocks_y = 0;  // block grid over layer 0
};
// The layers of a format and size (count 0 for an unknown format).
LayerSet layers_of(VideoFormat format, int width, int height);

// ---- tiles and the wavefront schedule -----------------------------------
// Lanes of a coded tile: one per kSamplesPerLane of its coded sample
// components (all layers), 1..32, at most the tile's rows in layer 0. Every
// lane flushes a 4-byte state, so a tile with little to code gets few lanes;
// a GPU decodes the lanes of a tile in parallel, so a full tile gets up to 32
// and no lane codes much more than kSamplesPerLane samples. The wavefront's
// length is set by the rounds (rows per lane): when one round fewer takes at
// most an eighth more lanes, it is taken (30 lanes over 128 rows need 5
// rounds, 32 need 4: a GPU decodes such a tile, a full tile of 10x8 blocks
// of RGB, in a fifth fewer steps for 8 bytes more); then as few lanes as
// give those rounds (30 lanes over 128 rows without that: 26, with the same
// 5 rounds). A delta's tile with skipped blocks may then take more lanes, so
// that its walk stays short (bounded_lanes() below).
// `per_lane` (the encoders' Geometry::lane_samples) replaces kSamplesPerLane
// when an encoder is asked for other lanes.
constexpr uint32_t kSamplesPerLane = 2048;
// The encoders' default for formats whose first layer has one component
// (planar and packed YUV, gray): default_geometry().
constexpr uint32_t kLumaSamplesPerLane = 1024;
CODEC2_HD int lanes_for_tile(uint32_t coded_samples, int rows,
                             uint32_t per_lane = kSamplesPerLane) {
  if (per_lane < 1) per_lane = 1;
  uint32_t lanes = uint32_t((uint64_t(coded_samples) + per_lane - 1) / per_lane);
  const uint32_t cap = uint32_t(rows < kMaxLanes ? rows : kMaxLanes);
  if (lanes > cap) lanes = cap;
  if (lanes < 1) return 1;
  const uint32_t r = rows < 1 ? 1u : uint32_t(rows);
  uint32_t rounds = (r + lanes - 1) / lanes;
  if (rounds > 1) {
    const uint32_t fewer = (r + rounds - 2) / (rounds - 1);  // lanes for one round fewer
    if (fewer <= cap && 8 * fewer <= 9 * lanes) rounds -= 1;
  }
  return int((r + rounds - 1) / rounds);
}

// Tiles are rectangles of tile_bx x tile_by blocks (the last row and column of
// tiles may be smaller); in layer l a tile covers the samples whose block lies
// in it. Within a tile, row j of a layer belongs to lane j % lanes; that lane
// codes it in round j / lanes. Sample (j, i) of the tile is coded at step
//   round * period + i + kStagger * (j % lanes),  period = max(tile width, kStagger * lanes),
// so its left, above-left, above and above-right neighbours come at earlier
// steps. Within a step: for each component, the tokens of every lane (in lane
// order), then the raw bits of every lane that has some (in lane order).
// The CUDA decoder's lanes walk the steps of their schedule one by one,
// except that over a run of more than kDecoderMinJump steps at which no
// lane decodes (every lane's samples skipped) they jump to the next step
// at which one does, and the warp does the samples in between (a jump
// costs a few round trips to global memory, about as much as a few steps).
// Not a rule of the format: bench/codec2_tiles models the decoder with it.
constexpr int kDecoderMinJump = 8;
CODEC2_HD int schedule_period(int tile_width, int lanes) {
  return tile_width > kStagger * lanes ? tile_width : kStagger * lanes;
}
CODEC2_HD int schedule_steps(int tile_width, int tile_height, int lanes) {
  if (tile_width <= 0 || tile_height <= 0) return 0;
  const int rounds = (tile_height + lanes - 1) / lanes;
  // The last row finishes last: earlier rounds end at least a period sooner.
  return (rounds - 1) * schedule_period(tile_width, lanes) + tile_width +
         kStagger * ((tile_height - 1) % lanes);
}

// ---- the encoders' lanes for tiles with skipped blocks -------------------
// Not a rule of the format (a decoder reads each tile's lanes from the
// body), but both encoders follow it so that they write the same bytes.
// The CUDA decoder's *walk* through layer 0 of a delta's tile: every step at
// which some lane decodes (a sample of a coded block), every run of up to
// kDecoderMinJump steps at which none does, and one step for a longer run or
// for the run that ends the schedule. A tile whose coded samples fit in a
// few lanes can walk much longer than a full tile (each lane crosses many
// rows of skipped blocks between its coded ones), and a frame decodes as
// slowly as its slowest tiles. So a delta's tile with skipped blocks takes
// the fewest lanes, from lanes_for_tile() of its coded samples up, whose walk
// is at most Geometry::walk_bound percent of the steps of its schedule with
// the lanes of all its samples (a full tile's: 702 for a tile of 10x8 blocks
// of RGB), or the most lanes (min(rows, 32)) when none is; a walk_bound of 0
// leaves the lanes of the coded samples.
constexpr int kWalkBound = 100;  // percent; Geometry::walk_bound's default

// The bound on a tile's walk: `percent` of its schedule's steps with the
// lanes of all its sample components.
CODEC2_HD int walk_bound(int w, int h, uint32_t tile_samples, uint32_t per_lane, int percent) {
  return int(int64_t(schedule_steps(w, h, lanes_for_tile(tile_samples, h, per_lane))) * percent /
             100);
}

// The first run [a, b) of coded blocks (mode not kSkip) among a row's bw
// block modes from block bx on; false when there is none.
CODEC2_HD bool coded_run(const uint8_t *modes, int bw, int bx, int &a, int &b) {
  while (bx < bw && modes[bx] == kSkip) ++bx;
  if (bx >= bw) return false;
  a = bx;
  while (bx < bw && modes[bx] != kSkip) ++bx;
  b = bx;
  return true;
}

// The walk through layer 0 of a tile of w x h samples with `lanes` lanes, or
// some value above `limit` once it exceeds it. runs(by, bx, &a, &b) gives
// the first run [a, b) of coded blocks in the tile's block row `by` with
// a >= bx (false when there is none). In round r the lanes of the rows in
// block row `by` (lanes la..lb) decode a run's samples x in [xa, xb) at steps
// r * period + x + 2l: one interval [xa + 2la, xb + 2lb) when the run is at
// least 2 samples wide, else one step per lane. A round's intervals come in
// the order of their first steps when its (up to 3) block rows are merged;
// a round's last lanes may still start intervals after the next round has
// begun, but not after the one after it has: so the intervals of two rounds
// at a time are merged, counting the steps they cover and the runs between.
template <class Runs>
CODEC2_HD int tile_walk(int w, int h, int lanes, int limit, const Runs &runs) {
  const int period = schedule_period(w, lanes), steps = schedule_steps(w, h, lanes);
  const int rounds = (h + lanes - 1) / lanes;
  struct Group {
    int base;        // the round's first step
    int by, la, lb;  // block row, its first and last lane in the round
    int next;        // the block column after the current run
    int xa, xb;      // the current run's samples; xa < 0: no more runs
    int lane;        // a run 1 sample wide: its current lane
    CODEC2_HD int start() const { return base + xa + kStagger * (xb - xa >= 2 ? la : lane); }
    CODEC2_HD int end() const { return xb - xa >= 2 ? base + xb + kStagger * lb : start() + 1; }
  };
  Group g[2][3];
  int count[2] = {0, 0};
  const auto fetch = [&](Group &q) {
    int a = 0, b = 0;
    if (!runs(q.by, q.next, a, b)) {
      q.xa = -1;
      return;
    }
    q.next = b;
    q.xa = a * kBlock;
    q.xb = b * kBlock < w ? b * kBlock : w;
    q.lane = q.la;
  };
  int next_round = 0;
  const auto refill = [&](int set) {  // the next round's block rows, if any
    count[set] = 0;
    if (next_round >= rounds) return;
    const int r = next_round++;
    const int j0 = r * lanes, j1 = j0 + lanes < h ? j0 + lanes : h;
    for (int by = j0 / kBlock; by * kBlock < j1 && count[set] < 3; ++by) {
      Group &q = g[set][count[set]++];
      q.base = r * period;
      q.by = by;
      q.la = (by * kBlock > j0 ? by * kBlock : j0) - j0;
      q.lb = (by * kBlock + kBlock < j1 ? by * kBlock + kBlock : j1) - 1 - j0;
      q.next = 0;
      fetch(q);
    }
  };
  const auto live = [&](int set) {
    for (int i = 0; i < count[set]; ++i)
      if (g[set][i].xa >= 0) return true;
    return false;
  };
  int walked = 0, cur = 0;  // every step before cur is counted
  for (;;) {
    for (int set = 0; set < 2; ++set)
      while (!live(set) && next_round < rounds) refill(set);
    Group *q = nullptr;
    for (int set = 0; set < 2; ++set)
      for (int i = 0; i < count[set]; ++i)
        if (g[set][i].xa >= 0 && (!q || g[set][i].start() < q->start())) q = &g[set][i];
    if (!q) break;
    const int a = q->start(), b = q->end();
    if (a > cur) walked += a - cur > kDecoderMinJump ? 1 : a - cur;
    if (b > cur) {
      walked += b - (a > cur ? a : cur);
      cur = b;
    }
    if (walked > limit) return walked;
    if (q->xb - q->xa < 2 && q->lane < q->lb)
      ++q->lane;
    else
      fetch(*q);
  }
  return walked + (cur < steps ? 1 : 0);
}

// The lanes of a delta's coded tile with skipped blocks (above): walk(lanes)
// gives the walk, or a value above `bound` once it exceeds it.
template <class Walk>
CODEC2_HD int bounded_lanes(int first, int rows, int bound, const Walk &walk) {
  const int cap = rows < kMaxLanes ? rows : kMaxLanes;
  for (int lanes = first; lanes < cap; ++lanes)
    if (walk(lanes) <= bound) return lanes;
  return first > cap ? first : cap;
}

}  // namespace codec2
}  // namespace cudadiff
