// The difference codec, version 2: the CPU reference of the encoder and the
// decoder (docs/stream-format.md, "Version 2: the body", specifies the body,
// cudadiff/codec2_rules.h the per-sample rules). Written as the phases a GPU runs: per-sample work
// that depends on nothing but the input and the reference (quantisation,
// mode costs, reconstruction, symbols), per-frame tables from histograms,
// and one sequential rANS pass per tile.
#include "cudadiff/codec2.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "cudadiff/codec2_body.h"
#include "cudadiff/codec2_rules.h"
#include "../src/codec2_encoder.h"
#include "../src/codec2_tables.h"
#include "fast.h"

#if defined(__SSE2__) && !defined(CODEC2_NO_SIMD)
#define CODEC2_SSE2 1
#include <emmintrin.h>
#else
#define CODEC2_SSE2 0
#endif
// The decoder's tile loop is compiled twice on x86-64 with GCC or clang:
// for the baseline and for AVX2 with BMI1/2 and POPCNT (shifts by a
// register without the count in cl, three-operand vector instructions),
// picked at run time. The same integer operations either way: the same
// pictures.
#if CODEC2_SSE2 && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CODEC2_AVX2 1
#include <immintrin.h>
#define CODEC2_TARGET_AVX2 __attribute__((target("avx2,bmi,bmi2,popcnt")))
#else
#define CODEC2_AVX2 0
#endif
#if defined(__GNUC__) || defined(__clang__)
#define CODEC2_ALWAYS_INLINE inline __attribute__((always_inline))
#define CODEC2_LAMBDA_INLINE __attribute__((always_inline))
#else
#define CODEC2_ALWAYS_INLINE inline
#define CODEC2_LAMBDA_INLINE
#endif

namespace cudadiff {
namespace codec2 {

// ---------------------------------------------------------------------------
// Layers and geometry

LayerSet layers_of(VideoFormat format, int width, int height) {
  LayerSet s;
  const FormatInfo &fi = format_info(format);
  if (fi.n_planes == 0 || width <= 0 || height <= 0) return s;
  auto set_channel = [](Layer &l, int ch, int plane, int step, int offset) {
    l.plane[ch] = plane;
    l.step[ch] = step;
    l.offset[ch] = offset;
  };
  const int cw = (width + 1) / 2, ch = (height + 1) / 2;
  Layer &y = s.layer[0];
  Layer &c = s.layer[1];
  if (fi.packed_rgb) {
    const int ps = fi.pixel_stride[0];
    s.count = 1;
    y.width = width;
    y.height = height;
    y.channels = ps;
    y.ycocg = true;
    set_channel(y, 0, 0, ps, fi.r);
    set_channel(y, 1, 0, ps, fi.g);
    set_channel(y, 2, 0, ps, fi.b);
    if (ps == 4) set_channel(y, 3, 0, ps, 6 - fi.r - fi.g - fi.b);  // alpha or padding
  } else {
    s.count = format == VideoFormat::GRAY8 ? 1 : 2;
    y.width = width;
    y.height = height;
    y.channels = 1;
    set_channel(y, 0, 0, 1, 0);
    c.channels = 2;
    switch (format) {
      case VideoFormat::GRAY8:
        break;
      case VideoFormat::I420:
      case VideoFormat::YV12: {
        const bool yv12 = format == VideoFormat::YV12;
        c.width = cw;
        c.height = ch;
        c.sx = c.sy = 1;
        set_channel(c, 0, yv12 ? 2 : 1, 1, 0);
        set_channel(c, 1, yv12 ? 1 : 2, 1, 0);
        break;
      }
      case VideoFormat::NV12:
      case VideoFormat::NV21: {
        const bool nv21 = format == VideoFormat::NV21;
        c.width = cw;
        c.height = ch;
        c.sx = c.sy = 1;
        set_channel(c, 0, 1, 2, nv21 ? 1 : 0);
        set_channel(c, 1, 1, 2, nv21 ? 0 : 1);
        break;
      }
      case VideoFormat::YUY2:
      case VideoFormat::UYVY: {
        const bool uyvy = format == VideoFormat::UYVY;
        y.width = 2 * cw;  // the row holds ceil(W/2) pairs
        set_channel(y, 0, 0, 2, uyvy ? 1 : 0);
        c.width = cw;
        c.height = height;
        c.sx = 1;
        set_channel(c, 0, 0, 4, uyvy ? 0 : 1);
        set_channel(c, 1, 0, 4, uyvy ? 2 : 3);
        break;
      }
      case VideoFormat::Y444:
        c.width = width;
        c.height = height;
        set_channel(c, 0, 1, 1, 0);
        set_channel(c, 1, 2, 1, 0);
        break;
      case VideoFormat::Y42B:
        c.width = cw;
        c.height = height;
        c.sx = 1;
        set_channel(c, 0, 1, 1, 0);
        set_channel(c, 1, 2, 1, 0);
        break;
      default:
        return LayerSet{};
    }
  }
  s.blocks_x = (y.width + kBlock - 1) / kBlock;
  s.blocks_y = (y.height + kBlock - 1) / kBlock;
  return s;
}

// Tiles of 10 x 8 blocks (160 x 128 samples of layer 0, about 20,000): 108
// tiles at 1920x1080, enough work for every core and, with up to 32 lanes of
// about 640 pixels each (kSamplesPerLane, lanes_for_tile()), for a GPU, whose decoder's and
// encoder's time is the longest lane's wavefront. Tiles of 20 x 8 blocks
// coded 0.3-0.9 % smaller on the project's clips but give a lane 1,280
// pixels of a 1080p frame (the 32-lane cap); smaller tiles (8 x 8) cost
// another 0.2 %. The same tiles for every format and size; the lanes'
// budget depends on the format.
Geometry default_geometry(VideoFormat format, int width, int height) {
  Geometry g;  // its members' defaults (codec2.h), but:
  // where a step of the first layer codes one component (luma or gray), a
  // lane of kSamplesPerLane components would walk about three times the
  // steps of an RGB lane; with half the budget a full tile of I420 walks
  // 924 steps instead of 1,660, for a few percent more bytes
  // (docs/performance.md, "Planar formats on the GPU").
  const LayerSet ls = layers_of(format, width > 0 ? width : 16, height > 0 ? height : 16);
  if (ls.count > 0 && ls.layer[0].channels == 1) g.lane_samples = int(kLumaSamplesPerLane);
  return g;
}

// The body's flags (byte 0; docs/stream-format.md, "Body layout"): 0x01
// keyframe, 0x02 (kBodyTileClasses) the tile rule of the reference classes
// (tile_ref_texture() in codec2_rules.h; clear: ref_texture(), the rule
// before it, which old recordings hold). The encoders set 0x02 in every
// body, keyframes too. Other bits are refused.
constexpr uint8_t kBodyKeyframe = 0x01;
constexpr uint8_t kBodyKnownFlags = kBodyKeyframe | kBodyTileClasses | kBodyTansLanes;

bool read_body_header(const uint8_t *body, size_t n, BodyHeader *h, std::string *error) {
  auto fail = [&](const char *why) {
    if (error) *error = why;
    return false;
  };
  if (n < kBodyHeaderBytes) return fail("body shorter than its header");
  if (body[0] & ~unsigned(kBodyKnownFlags)) return fail("unknown body flags");
  BodyHeader r;
  r.keyframe = body[0] & kBodyKeyframe;
  r.tile_classes = body[0] & kBodyTileClasses;
  r.geometry.tans_lanes = (body[0] & kBodyTansLanes) != 0;
  r.k = body[1];
  r.geometry.tile_bx = body[2];
  r.geometry.tile_by = body[3];
  if (r.geometry.tile_bx == 0 || r.geometry.tile_by == 0) return fail("zero tile size");
  *h = r;
  return true;
}

namespace detail {
std::vector<Tile> make_tiles(const LayerSet &ls, const Geometry &g) {
  std::vector<Tile> tiles;
  for (int by = 0; by < ls.blocks_y; by += g.tile_by)
    for (int bx = 0; bx < ls.blocks_x; bx += g.tile_bx) {
      Tile t;
      t.bx0 = bx;
      t.by0 = by;
      t.bx1 = std::min(ls.blocks_x, bx + g.tile_bx);
      t.by1 = std::min(ls.blocks_y, by + g.tile_by);
      for (int l = 0; l < ls.count; ++l) {
        const Layer &ly = ls.layer[l];
        const int x0 = (t.bx0 * kBlock) >> ly.sx,
                  x1 = std::min(ly.width, (t.bx1 * kBlock) >> ly.sx);
        const int y0 = (t.by0 * kBlock) >> ly.sy,
                  y1 = std::min(ly.height, (t.by1 * kBlock) >> ly.sy);
        t.x0[l] = x0;
        t.y0[l] = y0;
        t.w[l] = std::max(0, x1 - x0);
        t.h[l] = std::max(0, y1 - y0);
        t.raw_bytes += size_t(t.w[l]) * t.h[l] * ly.channels;
      }
      tiles.push_back(t);
    }
  return tiles;
}
}  // namespace detail

namespace {

using detail::kNoSymbol;
using detail::Symbol;
using detail::TileSymbols;

#if CODEC2_AVX2
bool use_avx2();  // below, with the encoder
#endif

// ---------------------------------------------------------------------------
// Integer costs (1/256 bit), the same on every backend.

// The first estimate of a token's cost in the mode decision: about
// 1 + 2 log2(1 + |r|) bits (1/256 bit), r the smallest residual of the token.
struct FirstCosts {
  uint32_t of_token[kTokens];
  FirstCosts() {
    for (int t = 0; t < kTokens; ++t)
      of_token[t] = 256 + 2 * log2_q8(1 + (token_value(t, 0) + 1) / 2);
  }
};
const FirstCosts kFirstCost;

struct Costs {
  uint16_t of_freq[kProbScale + 1];  // cost of a symbol of frequency f: 256 * log2(4096 / f)
  Costs() {
    of_freq[0] = 0;
    for (uint32_t f = 1; f <= kProbScale; ++f) of_freq[f] = uint16_t(detail::symbol_cost(f));
  }
};
const Costs &costs() {
  static const Costs c;
  return c;
}

// ---------------------------------------------------------------------------
// Distributions and their tables

struct DistLayout {
  int count = 0;
  int mode = 0;  // the block-mode distribution (deltas only)
  int base[kMaxLayers][kClasses][kMaxComps] = {};
  int end_of_class[kMaxLayers][kClasses] = {};
  DistLayout() = default;
  explicit DistLayout(const LayerSet &ls) {
    count = 1;  // 0: modes
    for (int l = 0; l < ls.count; ++l)
      for (int cls = 0; cls < kClasses; ++cls) {
        for (int c = 0; c < ls.layer[l].channels; ++c) {
          base[l][cls][c] = count;
          count += contexts_of(cls, c);
        }
        end_of_class[l][cls] = count;
      }
  }
};

struct Table {
  bool used = false;
  uint8_t n = 0;  // tokens 0..n-1 may occur
  uint8_t levels[kTokens] = {};
  uint16_t freq[kTokens] = {};
  uint16_t cum[kTokens + 1] = {};
  void finish() {
    cum[0] = 0;
    for (int t = 0; t < kTokens; ++t) cum[t + 1] = uint16_t(cum[t] + (t < n ? freq[t] : 0));
  }
};

// Per token: raw bits and the value with those bits 0.
struct TokenTables {
  uint8_t extra[kTokens];
  uint32_t base[kTokens];
  TokenTables() {
    for (int t = 0; t < kTokens; ++t) {
      extra[t] = uint8_t(token_extra_bits(t));
      base[t] = token_value(t, 0);
    }
  }
};
const TokenTables kTokenInfo;

// token_of() as a table for every value a token codes (v < 4096): the
// token and its raw bit count (the raw bits are the low bits of v).
struct TokenOfValue {
  uint8_t token[1u << 12], nbits[1u << 12];
  TokenOfValue() {
    for (uint32_t v = 0; v < (1u << 12); ++v) {
      int n;
      uint32_t bits;
      token[v] = uint8_t(token_of(v, &n, &bits));
      nbits[v] = uint8_t(n);
    }
  }
};
const TokenOfValue kTokenOfValue;
inline int token_of_table(uint32_t v, int *nbits, uint32_t *bits) {
  if (v >= (1u << 12)) return token_of(v, nbits, bits);  // never for a valid residual
  *nbits = kTokenOfValue.nbits[v];
  *bits = v & ((1u << *nbits) - 1);
  return kTokenOfValue.token[v];
}
const uint8_t *const kTokenExtra = kTokenInfo.extra;
const uint32_t *const kTokenBase = kTokenInfo.base;

// The decoder's form of a table: e[t] the first slot of token t (t = 1..32:
// the end of token t - 1; absent tokens and those past n span no slot, so
// e[32] = 4096) and e[0] = 0. The token of a slot is the first t with
// e[t + 1] > slot (there is one: e[32] > slot): a search of e[1..32], which
// fill one cache line (e[0] ends the line before), so the frame's tables
// stay in the first-level cache, where a slot-to-token array (4 KB a table)
// would not.
struct alignas(64) DecodeTable {
  uint16_t unused_[31];  // puts e[1] on a cache line
  uint16_t e[kTokens + 1];
  // An unused table: every slot gives token 31, of frequency kUnusedSpan,
  // whose bit no table's frequency (at most 4096) has: the decoder ORs the
  // frequencies of the symbols it decodes to find out that one came from
  // an unused table (the state then changes, but the tile is bad anyway).
  static constexpr uint32_t kUnusedSpan = 2 * kProbScale;
  bool used() const { return e[kTokens] == kProbScale; }
  void set(const Table &t) {
    e[0] = 0;
    for (int i = 1; i <= kTokens; ++i) e[i] = t.cum[i];  // cum[i] = 4096 for i >= n
  }
  void set_unused() {
    for (int i = 0; i < kTokens; ++i) e[i] = 0;
    e[kTokens] = uint16_t(kUnusedSpan);
  }
  // The first t with e[t + 1] > slot (slot < 4096), which is also the last
  // t with e[t] <= slot.
  inline int token_of_slot(uint32_t slot) const {
#if CODEC2_SSE2
    // Slots and e[] (at most 8192) compare as signed 16-bit values.
    const __m128i s = _mm_set1_epi16(int16_t(slot));
    const __m128i *v = reinterpret_cast<const __m128i *>(e + 1);
    const __m128i g01 = _mm_packs_epi16(_mm_cmpgt_epi16(_mm_load_si128(v), s),
                                        _mm_cmpgt_epi16(_mm_load_si128(v + 1), s));
    const __m128i g23 = _mm_packs_epi16(_mm_cmpgt_epi16(_mm_load_si128(v + 2), s),
                                        _mm_cmpgt_epi16(_mm_load_si128(v + 3), s));
    // Bit t: e[t + 1] > slot (bit 31 always).
    const uint32_t gt = uint32_t(_mm_movemask_epi8(g01)) | uint32_t(_mm_movemask_epi8(g23)) << 16;
    return __builtin_ctz(gt);
#else
    int t = 0;
    t += int(e[t + 16] <= slot) << 4;
    t += int(e[t + 8] <= slot) << 3;
    t += int(e[t + 4] <= slot) << 2;
    t += int(e[t + 2] <= slot) << 1;
    t += int(e[t + 1] <= slot);
    return t;
#endif
  }
};
static_assert(sizeof(DecodeTable) == 128 && offsetof(DecodeTable, e) == 62,
              "a table's e[1..32] fill one cache line");

// Bits, least significant first, packed into bytes.
class BitWriter {
 public:
  void put(uint32_t value, int bits) {
    for (int i = 0; i < bits; ++i) {
      if (used_ == 0) bytes_.push_back(0);
      bytes_.back() |= uint8_t(((value >> i) & 1u) << used_);
      used_ = (used_ + 1) & 7;
    }
  }
  const std::vector<uint8_t> &bytes() const { return bytes_; }
  size_t bit_count() const { return bytes_.size() * 8 - (used_ ? 8 - used_ : 0); }

 private:
  std::vector<uint8_t> bytes_;
  int used_ = 0;
};

class BitReader {
 public:
  BitReader(const uint8_t *p, size_t n) : p_(p), n_(n) {}
  bool get(int bits, uint32_t *value) {
    uint32_t v = 0;
    for (int i = 0; i < bits; ++i) {
      if (pos_ >= n_ * 8) return false;
      v |= uint32_t((p_[pos_ >> 3] >> (pos_ & 7)) & 1u) << i;
      ++pos_;
    }
    *value = v;
    return true;
  }
  size_t bytes_used() const { return (pos_ + 7) / 8; }
  size_t bits_used() const { return pos_; }

 private:
  const uint8_t *p_;
  size_t n_;
  size_t pos_ = 0;
};

// A table's description: the token count n (5 bits, n - 1), then each
// token's level as a change from the previous present token's level (the
// first from kLevels), by a prefix code (bits in the order written):
//   00 same level        01 absent (level 0)
//   10 s m               level change of 1 + m (s: 1 = down)
//   110 s vv             3 + vv
//   1110 s vvv           7 + vvv
//   1111 s vvvvvv        15 + vvvvvv
// The last token is present; every level lies in 1..kLevels.
uint32_t table_description_bits(const Table &t) {
  return detail::table_description_bits(t.levels, t.n);
}
void write_table(BitWriter &w, const Table &t) {
  w.put(t.n - 1, 5);
  int prev = kLevels;
  for (int i = 0; i < t.n; ++i) {
    const int l = t.levels[i];
    if (!l) {
      w.put(0, 1);
      w.put(1, 1);
      continue;
    }
    const int delta = l - prev, d = delta < 0 ? -delta : delta, down = delta < 0;
    prev = l;
    if (d == 0) {
      w.put(0, 2);
    } else if (d <= 2) {
      w.put(1, 1), w.put(0, 1), w.put(down, 1), w.put(d - 1, 1);
    } else if (d <= 6) {
      w.put(3, 2), w.put(0, 1), w.put(down, 1), w.put(d - 3, 2);
    } else if (d <= 14) {
      w.put(7, 3), w.put(0, 1), w.put(down, 1), w.put(d - 7, 3);
    } else {
      w.put(15, 4), w.put(down, 1), w.put(d - 15, 6);
    }
  }
}
bool read_table(BitReader &r, Table *t) {
  uint32_t v, bit;
  if (!r.get(5, &v)) return false;
  *t = Table{};
  t->n = uint8_t(v + 1);
  int prev = kLevels;
  for (int i = 0; i < t->n; ++i) {
    if (!r.get(1, &bit)) return false;
    if (!bit) {
      if (!r.get(1, &bit)) return false;
      t->levels[i] = uint8_t(bit ? 0 : prev);
      continue;
    }
    int ones = 1;
    while (ones < 4) {
      if (!r.get(1, &bit)) return false;
      if (!bit) break;
      ++ones;
    }
    uint32_t down, m;
    static const int kBits[5] = {0, 1, 2, 3, 6}, kBase[5] = {0, 1, 3, 7, 15};
    if (!r.get(1, &down) || !r.get(kBits[ones], &m)) return false;
    const int d = kBase[ones] + int(m);
    const int l = down ? prev - d : prev + d;
    if (l < 1 || l > kLevels) return false;
    t->levels[i] = uint8_t(l);
    prev = l;
  }
  if (t->levels[t->n - 1] == 0) return false;
  if (!normalize_levels(t->levels, t->n, t->freq)) return false;
  t->used = true;
  t->finish();
  return true;
}

// The table of a histogram (detail::levels_from_histogram()), its
// frequencies summing to `scale` (kTansStates: a palette table of tANS
// lanes, body flag 0x04).
void table_from_histogram(const uint32_t *hist, Table *t, uint32_t scale = kProbScale) {
  *t = Table{};
  const int n = detail::levels_from_histogram(hist, t->levels);
  if (n == 0) return;
  t->n = uint8_t(n);
  normalize_levels_to(t->levels, n, scale, t->freq);
  t->used = true;
  t->finish();
}

// The same levels with frequencies summing to `scale` (a palette table as
// rANS lanes use it, or the other way round).
Table rescaled(Table t, uint32_t scale) {
  normalize_levels_to(t.levels, t.n, scale, t.freq);
  t.finish();
  return t;
}

// Cost (1/256 bit) of coding `hist` with table `t`; ~0u when a token has no frequency.
uint64_t coding_cost(const uint32_t *hist, const Table &t) {
  uint64_t c = 0;
  for (int i = 0; i < kTokens; ++i) {
    if (!hist[i]) continue;
    if (i >= t.n || t.freq[i] == 0) return ~uint64_t(0);
    c += uint64_t(hist[i]) * costs().of_freq[t.freq[i]];
  }
  return c;
}

struct Model {
  std::vector<Table> tables;
  // Body flag 0x04: the palette (frequencies summing to kTansStates) and
  // each distribution's table in it (-1: unused); `tables` then holds the
  // palette tables' levels (with rANS frequencies), for a later body that
  // takes them over.
  bool tans = false;
  std::vector<Table> palette;
  std::vector<int8_t> palette_of;
};

// Which distributions a body lists: modes only in deltas, the temporal
// classes only in deltas.
// The distributions a body lists, in order, as groups: the block modes
// (deltas only), then per layer its classes (keyframes: spatial only), each
// class's components and contexts in order. A group starts with one bit,
// 0 when none of its distributions is used.
struct DistGroup {
  int first, end;
};
std::vector<DistGroup> listed_groups(const DistLayout &dl, const LayerSet &ls, bool keyframe) {
  std::vector<DistGroup> g;
  if (!keyframe) g.push_back({dl.mode, dl.mode + 1});
  for (int l = 0; l < ls.count; ++l)
    for (int cls = 0; cls < (keyframe ? 1 : kClasses); ++cls)
      g.push_back({dl.base[l][cls][0], dl.end_of_class[l][cls]});
  return g;
}

// ---------------------------------------------------------------------------
// rANS, byte-wise, 32-bit state (docs/stream-format.md, "Version 2: the body", "Coded tiles")

// The encoder's steps on a lane's state x. The stream grows downwards, from
// the end of its buffer towards its start: p is the first byte written so
// far, and each step returns the new p.
struct RansEncoder {
  // A token's entry: its frequency and start, and what put() needs to take
  // the division by the frequency as a multiplication (below).
  struct Symbol {
    uint32_t x_max, reciprocal;
    uint16_t freq, cum;
    uint8_t shift;
  };
  static Symbol symbol(uint32_t freq, uint32_t cum) {
    Symbol s{((kRansLow >> kProbBits) << 8) * freq, 0, uint16_t(freq), uint16_t(cum), 0};
    if (freq == 0) return s;  // never coded
    int l = 0;
    while ((1u << l) < freq) ++l;
    s.shift = uint8_t(31 + l);
    s.reciprocal = uint32_t(((uint64_t(1) << s.shift) + freq - 1) / freq);
    return s;
  }
  // x / freq for x < 2^31 (a state about to take a symbol is below x_max <=
  // 2^31): with l = ceil(log2(freq)) and m = ceil(2^(31+l) / freq),
  // x * m / 2^(31+l) exceeds x / freq by less than x / (freq * 2^31) < 1/freq,
  // so its floor is the quotient.
  static constexpr uint32_t quotient(uint32_t x, uint32_t reciprocal, int shift) {
    return uint32_t((uint64_t(x) * reciprocal) >> shift);
  }
  // The renormalisation before a step whose state must be below x_max
  // (>= 2^15): while x >= x_max, the byte x & 255 goes out and x >>= 8. A
  // state below 2^31 sends at most two bytes, so without a branch on the
  // data: x's two low bytes are stored below p (x & 255 the higher) and p
  // moves down by the number sent. A byte stored below the new p is
  // overwritten by the next one sent (the lanes' final states come last),
  // so the buffer needs 2 bytes of slack at its start.
  static CODEC2_ALWAYS_INLINE uint8_t *renorm(uint32_t &x, uint32_t x_max, uint8_t *p) {
    const uint32_t n = uint32_t(x >= x_max) + uint32_t((x >> 8) >= x_max);
    p[-1] = uint8_t(x);
    p[-2] = uint8_t(x >> 8);
    x >>= 8 * n;
    return p - n;
  }
  static CODEC2_ALWAYS_INLINE uint8_t *put(uint32_t &x, const Symbol &s, uint8_t *p) {
    p = renorm(x, s.x_max, p);
    const uint32_t q = quotient(x, s.reciprocal, s.shift);
    x = (q << kProbBits) + (x - q * s.freq) + s.cum;
    return p;
  }
  // n raw bits, 0..16 (none: x is unchanged).
  static CODEC2_ALWAYS_INLINE uint8_t *put_bits(uint32_t &x, uint32_t bits, int n, uint8_t *p) {
    p = renorm(x, (kRansLow >> n) << 8, p);
    x = (x << n) | bits;
    return p;
  }
  // A lane's final state: 4 bytes, the decoder's first.
  static uint8_t *flush(uint32_t x, uint8_t *p) {
    p -= 4;
    for (int b = 0; b < 4; ++b) p[b] = uint8_t(x >> (8 * b));
    return p;
  }
};

// RansEncoder::quotient() is the quotient for every frequency, at the ends
// of the range and around multiples of the frequency.
constexpr bool rans_quotient_is_exact() {
  for (uint32_t f = 1; f <= kProbScale; ++f) {
    int l = 0;
    while ((1u << l) < f) ++l;
    const uint32_t m = uint32_t(((uint64_t(1) << (31 + l)) + f - 1) / f);
    const uint32_t top = 0x7fffffffu / f * f;
    const uint32_t xs[7] = {0, f - 1, f, 2 * f - 1, top - 1, top, 0x7fffffffu};
    for (uint32_t x : xs)
      if (RansEncoder::quotient(x, m, 31 + l) != x / f) return false;
  }
  return true;
}
static_assert(rans_quotient_is_exact(), "rANS encoder's division by multiplication is inexact");

// Planes of bytes[k] bytes (k < count) in one zeroed buffer `buf`, plane k
// starting (salt + k) cache lines after a 4 KB boundary; start[k] gets
// where. Planes that all start on such a boundary (as separate large
// allocations do) put the same rows of every plane in the same cache sets,
// so code that reads or writes a row of several planes at once would evict
// its own lines.
void stagger_planes(std::vector<uint8_t> &buf, const size_t *bytes, int count, int salt,
                    uint8_t **start) {
  constexpr size_t kPage = 4096, kLine = 64;
  std::vector<size_t> offset(static_cast<size_t>(count));
  size_t total = 0;
  for (int k = 0; k < count; ++k) {
    total = (total + kPage - 1) / kPage * kPage + size_t((salt + k) % 64) * kLine;
    offset[size_t(k)] = total;
    total += bytes[k];
  }
  buf.assign(total + kPage, 0);
  // The buffer's own start, moved to a 4 KB boundary.
  const size_t align =
      (kPage - (reinterpret_cast<uintptr_t>(buf.data()) & (kPage - 1))) & (kPage - 1);
  for (int k = 0; k < count; ++k) start[k] = buf.data() + align + offset[size_t(k)];
}

// The mode decision's proxy symbols: per layer, class and component a plane
// of uint16 (stagger_planes(): proxy_layer() writes the same row of all of
// them at once, 9 planes for RGB). The planes start on cache lines, so
// tiles whose columns start on one (as 1920 wide frames' do) write no line
// together.
struct IdPlanes {
  static constexpr int kSalt = 16;
  std::vector<uint8_t> buf;
  uint16_t *p[kMaxLayers][kClasses][kMaxComps] = {};
  void allocate(const LayerSet &ls) {
    size_t bytes[kMaxLayers * kClasses * kMaxComps];
    uint8_t *start[kMaxLayers * kClasses * kMaxComps];
    int n = 0;
    for (int l = 0; l < ls.count; ++l)
      for (int cls = 0; cls < kClasses; ++cls)
        for (int c = 0; c < ls.layer[l].channels; ++c)
          bytes[n++] = size_t(ls.layer[l].width) * ls.layer[l].height * sizeof(uint16_t);
    stagger_planes(buf, bytes, n, kSalt, start);
    n = 0;
    for (int l = 0; l < ls.count; ++l)
      for (int cls = 0; cls < kClasses; ++cls)
        for (int c = 0; c < ls.layer[l].channels; ++c)
          p[l][cls][c] = reinterpret_cast<uint16_t *>(start[n++]);
  }
  bool empty() const { return buf.empty(); }
};

#if CODEC2_AVX2
// The tables of the encoder's AVX2 rANS steps (rans_layer_avx2()).
struct RansVectorTable {
  // Per distribution and token, then a no-op entry (frequency 4096: no
  // byte, the state unchanged) for skipped samples and idle lanes: the
  // reciprocal | (freq | cum << 13 | (shift - 31) << 25) << 32.
  std::vector<uint64_t> entry;
  void assign(const std::vector<RansEncoder::Symbol> &symbols) {
    entry.resize(symbols.size() + 1);
    for (size_t i = 0; i <= symbols.size(); ++i) {
      const RansEncoder::Symbol s =
          i < symbols.size() ? symbols[i] : RansEncoder::symbol(kProbScale, 0);
      const uint32_t packed =
          s.freq | uint32_t(s.cum) << 13 | uint32_t(s.freq ? s.shift - 31 : 0) << 25;
      entry[i] = s.reciprocal | uint64_t(packed) << 32;
    }
  }
};
#endif

struct RansDecoder {
  const uint8_t *p;
  const uint8_t *end;
  bool underflow = false;
  // After a step the state is at least 2^11 (frequency >= 1, x >> 12 >= 2^11),
  // so at most two bytes bring it back to [2^23, 2^31). Branch-free where
  // two bytes are left to read.
  inline void renorm(uint32_t &x) {
    if (end - p >= 2) {
      renorm_unchecked(x);
      return;
    }
    while (x < kRansLow) {
      if (p == end) {
        underflow = true;
        x = kRansLow;  // stop; the tile is reported damaged
        return;
      }
      x = (x << 8) | *p++;
    }
  }
  // renorm() where two bytes are left: bytes needed 0 for x >= 2^23, 1 for
  // x >= 2^15, else 2 (x >= 2^11 after a step, < 2^31).
  inline void renorm_unchecked(uint32_t &x) {
    const uint32_t n = uint32_t(x < kRansLow) + uint32_t(x < (1u << 15));
    const uint32_t two = uint32_t(p[0]) << 8 | p[1];
    x = uint32_t(((uint64_t(x) << 16) | two) >> (16 - 8 * n));
    p += n;
  }
  // A symbol's step without the renormalisation (renorm() follows); the
  // symbol's frequency is ORed into `spans`.
  static inline int decode(uint32_t &x, const DecodeTable &t, uint32_t &spans) {
    const uint32_t slot = x & (kProbScale - 1);
    const int s = t.token_of_slot(slot);
    const uint32_t start = t.e[s], freq = t.e[s + 1] - start;
    spans |= freq;
    x = freq * (x >> kProbBits) + slot - start;
    return s;
  }
  // A symbol of a used table.
  inline int get(uint32_t &x, const DecodeTable &t) {
    uint32_t spans = 0;
    const int s = decode(x, t, spans);
    renorm(x);
    return s;
  }
  inline uint32_t get_bits(uint32_t &x, int n) {
    const uint32_t v = x & ((1u << n) - 1);
    x >>= n;
    renorm(x);
    return v;
  }
};

// ---------------------------------------------------------------------------
// tANS lanes (body flag 0x04; docs/stream-format.md, "tANS lanes (flag 0x04)")

// A palette table of kTansStates states from its frequencies (summing to
// kTansStates): dec[x] = token | nb << 5 | base << 9 for state x (the token
// of the state, the bits to read, the next state's base); enc[start[t] + q
// - f_t] the state that decodes token t and leads to q (f_t <= q < 2 f_t).
// An unused distribution's decoder points at unused(): bit 31 set in every
// entry, which fails the tile.
struct TansTable {
  uint32_t dec[kTansStates];
  uint16_t enc[kTansStates];
  uint16_t start[kTokens], freq[kTokens];
  void build(const uint16_t *f, int n) {
    uint8_t sym[kTansStates];
    uint32_t pos = 0, at = 0;
    for (int t = 0; t < kTokens; ++t) {
      freq[t] = t < n ? f[t] : 0;
      start[t] = uint16_t(at);
      at += freq[t];
      for (uint32_t i = 0; i < freq[t]; ++i) {
        sym[pos] = uint8_t(t);
        pos = (pos + kTansSpreadStep) & (kTansStates - 1);
      }
    }
    uint32_t next[kTokens];
    for (int t = 0; t < kTokens; ++t) next[t] = freq[t];
    for (uint32_t x = 0; x < kTansStates; ++x) {
      const int t = sym[x];
      const uint32_t q = next[t]++;
      const uint32_t nb = uint32_t(kTansBits) - uint32_t(bit_length(q));
      dec[x] = uint32_t(t) | nb << 5 | ((q << nb) - kTansStates) << 9;
      enc[start[t] + q - freq[t]] = uint16_t(x);
    }
  }
  static const TansTable &unused() {
    static const TansTable t = [] {
      TansTable u{};
      for (uint32_t x = 0; x < kTansStates; ++x) u.dec[x] = 1u << 31;
      return u;
    }();
    return t;
  }
  // The encoder's step backwards for token t from X (kTansStates + state):
  // the bits emitted (*nb of them) and the new X.
  inline uint32_t encode(uint32_t X, int t, uint32_t *bits, uint32_t *nb) const {
    const uint32_t f = freq[t];
    uint32_t n = uint32_t(kTansBits) - uint32_t(bit_length(f));
    if ((X >> n) < f) --n;
    *bits = X & ((1u << n) - 1);
    *nb = n;
    return kTansStates + enc[start[t] + (X >> n) - f];
  }
};

// A distribution's palette table in the decoder, at the stride of a
// DecodeTable (so that a context's table is found by the same offsets).
struct alignas(64) TansDist {
  const uint32_t *dec;
  uint8_t pad_[128 - sizeof(const uint32_t *)];
};
static_assert(sizeof(TansDist) == sizeof(DecodeTable), "the contexts' offsets are the same");

// The lanes' bits of a tANS tile: per lane a buffer (the oldest bit
// lowest) and its count; the tile's words, taken in the order the lanes
// ask for them. Reading past the words sets underflow (the tile fails).
struct TansReader {
  const uint8_t *p = nullptr, *end = nullptr;
  bool underflow = false;
  uint64_t buf[kMaxLanes] = {};
  uint32_t n[kMaxLanes] = {};
  // The `bits` (0..20) oldest bits of a lane.
  inline uint32_t take(int lane, uint32_t bits) {
    if (n[lane] < bits) {
      uint32_t w = 0;
      if (end - p >= 4) {
        w = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
        p += 4;
      } else {
        underflow = true;
      }
      buf[lane] |= uint64_t(w) << n[lane];
      n[lane] += 32;
    }
    const uint32_t v = uint32_t(buf[lane]) & ((1u << bits) - 1);
    buf[lane] >>= bits;
    n[lane] -= bits;
    return v;
  }
  // A symbol from state x (updated): its token, and its raw bits in *raw,
  // read with the token's bits as one field; bit 31 of `flags` set for an
  // unused table (whose entries keep x below kTansStates all the same).
  inline int symbol(int lane, uint32_t &x, const uint32_t *dec, uint32_t &flags, uint32_t *raw) {
    const uint32_t e = dec[x];
    flags |= e;
    const int t = int(e & 31);
    const uint32_t nb = (e >> 5) & 15, v = take(lane, nb + kTokenExtra[t]);
    x = ((e >> 9) & (kTansStates - 1)) + (v & ((1u << nb) - 1));
    *raw = v >> nb;
    return t;
  }
};

// ---------------------------------------------------------------------------
// Pictures as channel planes

// One channel plane of a picture (width x height bytes, rows packed).
struct Plane {
  uint8_t *p = nullptr;
  size_t n = 0;
  uint8_t *data() const { return p; }
  size_t size() const { return n; }
  uint8_t &operator[](size_t i) const { return p[i]; }
};

// A picture's planes, in one buffer (stagger_planes(): the decoder's lanes
// read and write up to 32 rows of several planes at once).
struct Picture {
  std::vector<uint8_t> buf;
  Plane ch[kMaxLayers][kMaxComps];
  Picture() = default;
  Picture(const Picture &) = delete;
  Picture &operator=(const Picture &) = delete;
  Picture(Picture &&) = default;  // the buffer moves, the planes' pointers stay valid
  Picture &operator=(Picture &&) = default;
  void allocate(const LayerSet &ls, int salt = 0) {
    size_t bytes[kMaxLayers * kMaxComps];
    uint8_t *start[kMaxLayers * kMaxComps];
    int n = 0;
    for (int l = 0; l < ls.count; ++l)
      for (int c = 0; c < ls.layer[l].channels; ++c)
        bytes[n++] = size_t(ls.layer[l].width) * ls.layer[l].height;
    stagger_planes(buf, bytes, n, salt, start);
    n = 0;
    for (int l = 0; l < ls.count; ++l)
      for (int c = 0; c < ls.layer[l].channels; ++c, ++n) ch[l][c] = Plane{start[n], bytes[n]};
  }
};

#if CODEC2_AVX2
// The byte shuffles that take the bytes at 3 i + k (k = 0, 1, 2) of 48
// bytes, from each of their three 16-byte thirds, to byte i of a channel
// (0x80: none from that third).
struct Deinterleave3 {
  uint8_t take[3][3][16];  // [k][third][i]
  constexpr Deinterleave3() : take() {
    for (int k = 0; k < 3; ++k)
      for (int third = 0; third < 3; ++third)
        for (int i = 0; i < 16; ++i) {
          const int at = 3 * i + k - 16 * third;
          take[k][third][i] = uint8_t(at >= 0 && at < 16 ? at : 0x80);
        }
  }
};
constexpr Deinterleave3 kDeinterleave3;

// Pixels [0, n) of a row of 3-byte pixels: byte k of each into dst[k], 16
// pixels at a time; returns the number done.
CODEC2_TARGET_AVX2 int deinterleave3_avx2(const uint8_t *src, uint8_t *const *dst, int n) {
  int x = 0;
  for (; x + 16 <= n; x += 16) {
    __m128i third[3];
    for (int t = 0; t < 3; ++t)
      third[t] = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + 3 * x + 16 * t));
    for (int k = 0; k < 3; ++k) {
      __m128i v = _mm_setzero_si128();
      for (int t = 0; t < 3; ++t)
        v = _mm_or_si128(
            v, _mm_shuffle_epi8(third[t], _mm_loadu_si128(reinterpret_cast<const __m128i *>(
                                              kDeinterleave3.take[k][t]))));
      _mm_storeu_si128(reinterpret_cast<__m128i *>(dst[k] + x), v);
    }
  }
  return x;
}
#endif

// Parallel loops, on the CPU backend's pool of threads (fast.h), not
// OpenMP teams: a pool thread watches for work for 100 us after its last
// job and then sleeps, where libgomp's threads spin for milliseconds after
// every parallel loop (a frame has about twenty), which kept a live
// encoder at 10 frames per second at a whole core and made it several
// times slower when other processes wanted the cores. Iterations are taken
// in order as threads become free; which thread runs one changes no result.
// f(i) for i in [0, n) on up to `threads` threads.
template <class F>
void parallel_each(long long n, int threads, F &&f) {
  if (n <= 0) return;
  fast::parallel_jobs(int(n), threads, [&](int j, int) { f((long long)j); });
}
// The same with the index of the thread that runs it (below `threads`): f(i, thread).
template <class F>
void parallel_each_in(long long n, int threads, F &&f) {
  if (n <= 0) return;
  fast::parallel_jobs(int(n), threads, [&](int j, int thread) { f((long long)j, thread); });
}
// Rows [0, n) in contiguous runs (cpu_parallel_ranges()): f(row).
template <class F>
void parallel_rows(int n, int threads, F &&f) {
  cpu_parallel_ranges(n, threads, [&](long long begin, long long end) {
    for (long long y = begin; y < end; ++y) f(int(y));
  });
}

// Rows of a packed 3-byte layer (BGR, RGB) into its channel planes.
void extract_packed3(const FrameView &f, const Layer &ly, int l, Picture &pic) {
  // The plane of the byte at offset k of a pixel.
  uint8_t *by_offset[3] = {};
  for (int c = 0; c < 3; ++c) by_offset[ly.offset[c]] = pic.ch[l][c].data();
  const int w = ly.width;
  parallel_rows(ly.height, cpu_threads_for(size_t(w) * ly.height), [&](int y) {
    const uint8_t *src = f.row(ly.plane[0], y);
    uint8_t *d[3];
    for (int k = 0; k < 3; ++k) d[k] = by_offset[k] + size_t(y) * w;
    int x = 0;
#if CODEC2_AVX2
    if (use_avx2()) x = deinterleave3_avx2(src, d, w);
#endif
    for (; x < w; ++x)
      for (int k = 0; k < 3; ++k) d[k][x] = src[3 * x + k];
  });
}

void extract(const FrameView &f, const LayerSet &ls, Picture &pic) {
  for (int l = 0; l < ls.count; ++l) {
    const Layer &ly = ls.layer[l];
    // A packed 3-byte layer whose channels are its pixels' bytes 0, 1 and 2.
    if (ly.channels == 3 && ly.plane[1] == ly.plane[0] && ly.plane[2] == ly.plane[0] &&
        ly.step[0] == 3 && ly.step[1] == 3 && ly.step[2] == 3 && ly.offset[0] < 3 &&
        ly.offset[1] < 3 && ly.offset[2] < 3 && ly.offset[0] != ly.offset[1] &&
        ly.offset[1] != ly.offset[2] && ly.offset[0] != ly.offset[2]) {
      extract_packed3(f, ly, l, pic);
      continue;
    }
    for (int c = 0; c < ly.channels; ++c) {
      uint8_t *dst = pic.ch[l][c].data();
      parallel_rows(ly.height, cpu_threads_for(size_t(ly.width) * ly.height), [&](int y) {
        const uint8_t *src = f.row(ly.plane[c], y) + ly.offset[c];
        uint8_t *d = dst + size_t(y) * ly.width;
        const int step = ly.step[c];
        for (int x = 0; x < ly.width; ++x) d[x] = src[size_t(x) * step];
      });
    }
  }
}

// Rows of a packed 3-byte layer (BGR, RGB): the three channels interleaved
// in one loop, which the compiler vectorises.
void store_packed3(const Picture &pic, const Layer &ly, int l, const FrameView &f) {
  const uint8_t *src[3] = {pic.ch[l][0].data(), pic.ch[l][1].data(), pic.ch[l][2].data()};
  const int o0 = ly.offset[0], o1 = ly.offset[1], o2 = ly.offset[2];
  parallel_rows(ly.height, cpu_threads_for(size_t(ly.width) * ly.height), [&](int y) {
    uint8_t *dst = f.row(ly.plane[0], y);
    const size_t at = size_t(y) * ly.width;
    const uint8_t *s0 = src[0] + at, *s1 = src[1] + at, *s2 = src[2] + at;
    for (int x = 0; x < ly.width; ++x) {
      dst[3 * x + o0] = s0[x];
      dst[3 * x + o1] = s1[x];
      dst[3 * x + o2] = s2[x];
    }
  });
}

void store(const Picture &pic, const LayerSet &ls, const FrameView &f) {
  for (int l = 0; l < ls.count; ++l) {
    const Layer &ly = ls.layer[l];
    if (ly.channels == 3 && ly.plane[1] == ly.plane[0] && ly.plane[2] == ly.plane[0] &&
        ly.step[0] == 3 && ly.step[1] == 3 && ly.step[2] == 3) {
      store_packed3(pic, ly, l, f);
      continue;
    }
    for (int c = 0; c < ly.channels; ++c) {
      const uint8_t *src = pic.ch[l][c].data();
      parallel_rows(ly.height, cpu_threads_for(size_t(ly.width) * ly.height), [&](int y) {
        uint8_t *dst = f.row(ly.plane[c], y) + ly.offset[c];
        const uint8_t *s = src + size_t(y) * ly.width;
        const int step = ly.step[c];
        for (int x = 0; x < ly.width; ++x) dst[size_t(x) * step] = s[x];
      });
    }
  }
}

// ---------------------------------------------------------------------------
// Tiles

using detail::make_tiles;
using detail::Tile;

// An int16 plane with kPlanePad elements of slack before and after it: the
// encoder's vector paths load a block row's neighbours (one sample before
// the row and the row above) and the lanes past a partial block without
// bounds checks, and discard what those lanes compute.
constexpr size_t kPlanePad = 32;
struct PaddedPlane {
  std::vector<int16_t> buf;
  void assign(size_t n) { buf.assign(n + 2 * kPlanePad, 0); }
  int16_t *data() { return buf.data() + kPlanePad; }
  const int16_t *data() const { return buf.data() + kPlanePad; }
};

// Working values of one layer: per component, S-domain (quantisation
// indices after the colour transform) and T-domain (quantised differences to
// the reference after the colour transform), int16 per sample.
struct Planes {
  PaddedPlane s[kMaxComps], t[kMaxComps];
  void allocate(const Layer &ly, bool temporal) {
    const size_t n = size_t(ly.width) * ly.height;
    for (int c = 0; c < ly.channels; ++c) {
      s[c].assign(n);
      if (temporal) t[c].assign(n);
    }
  }
};

// Domain values of one sample from its channel bytes (and the reference's).
struct Quantizer {
  int k = 0;
  uint8_t index[256];    // quant_index
  int16_t diff[511];     // quant_diff(e), e = -255..255 at [e + 255]
  int16_t coded[511];    // encoder_diff(e) with the encoder's threshold (the decoder's: diff)
  uint8_t dequant[256];  // dequant_index for indices 0..max_index
  int max_index = 0;
  // `threshold`: the encoder's bound (k for a decoder).
  void set(int k_, int threshold) {
    k = k_;
    for (int x = 0; x < 256; ++x) index[x] = uint8_t(quant_index(x, k));
    for (int e = -255; e <= 255; ++e) {
      diff[e + 255] = int16_t(quant_diff(e, k));
      coded[e + 255] = int16_t(encoder_diff(e, k, threshold));
    }
    max_index = codec2::max_index(k);
    for (int u = 0; u < 256; ++u) dequant[u] = uint8_t(u <= max_index ? dequant_index(u, k) : 0);
  }
};

// Samples [x0, x1) of a layer's row lie in block column bx.
struct BlockSpan {
  int x0, x1;
};
inline BlockSpan block_span(const Layer &ly, int bx) {
  const int x0 = (bx * kBlock) >> ly.sx;
  return {x0, std::min(ly.width, x0 + (kBlock >> ly.sx))};
}

// Calls f(y, x0, x1) for every row y of layer `l` and every run [x0, x1) of
// samples whose blocks are flagged in `blocks` (one flag per block of the
// frame; null: every block), rows in parallel.
template <class F>
void for_each_block_span(const LayerSet &ls, int l, const uint8_t *blocks, int threads, F f) {
  const Layer &ly = ls.layer[l];
  parallel_rows(ly.height, threads, [&](int y) {
    if (!blocks) {
      f(y, 0, ly.width);
      return;
    }
    const uint8_t *brow = blocks + size_t((y << ly.sy) / kBlock) * ls.blocks_x;
    for (int bx = 0; bx < ls.blocks_x; ++bx) {
      if (!brow[bx]) continue;
      int last = bx;  // the run of flagged blocks
      while (last + 1 < ls.blocks_x && brow[last + 1]) ++last;
      const int x0 = block_span(ly, bx).x0, x1 = block_span(ly, last).x1;
      if (x0 < x1) f(y, x0, x1);
      bx = last;
    }
  });
}

// ref_class() as the number of its thresholds g reaches: q = g / (2k + 1)
// is at least m exactly where g >= m (2k + 1).
constexpr int kRefClassSteps[kRefClasses - 1] = {2, 6, 16};
constexpr bool ref_class_thresholds_are_exact() {
  for (int k = 0; k <= 255; ++k) {
    const int s = 2 * k + 1;
    for (int m : kRefClassSteps)
      for (int g : {m * s - 1, m * s}) {
        const int q = g / s;
        const int rule = q < 2 ? 0 : q < 6 ? 1 : q < 16 ? 2 : 3;  // ref_class() (not constexpr)
        int n = 0;
        for (int e : kRefClassSteps) n += g >= e * s;
        if (rule != n) return false;
      }
  }
  return true;
}
static_assert(ref_class_thresholds_are_exact(), "the reference class thresholds differ");
struct RefClassThresholds {
  int at[kRefClasses - 1];
  explicit RefClassThresholds(int k) {
    for (int i = 0; i < kRefClasses - 1; ++i) at[i] = kRefClassSteps[i] * (2 * k + 1);
  }
  uint8_t operator()(int g) const { return uint8_t((g >= at[0]) + (g >= at[1]) + (g >= at[2])); }
};

// The texture classes of the reference around samples [x0, x1) of row y of
// layer `l`, into `out` (a class per sample of the layer), from the texture
// channel (G for RGB, else the first). The rule of bodies without
// kBodyTileClasses (ref_texture() in codec2_rules.h: the 4 nearest
// samples, the layer's edges repeating the sample); only decoders use it.
void reference_class_span(const Layer &ly, const Picture &ref, int l, int k, int y, int x0, int x1,
                          uint8_t *out) {
  const uint8_t *t = ref.ch[l][ly.ycocg ? 1 : 0].data();
  const RefClassThresholds cls(k);
  for (int x = x0; x < x1; ++x)
    out[size_t(y) * ly.width + x] = cls(ref_texture(t, ly.width, ly.height, x, y));
}

// The same by the tile rule (kBodyTileClasses; tile_ref_texture() in
// codec2_rules.h) for samples of the tile whose samples in this layer are
// [tx0, tx1) x [ty0, ...): left, right, above and above-left, those
// outside the tile replaced by the sample.
void tile_reference_class_span(const Layer &ly, const Picture &ref, int l, int k, int y, int x0,
                               int x1, int tx0, int tx1, int ty0, uint8_t *out) {
  const uint8_t *t = ref.ch[l][ly.ycocg ? 1 : 0].data();
  const RefClassThresholds cls(k);
  for (int x = x0; x < x1; ++x)
    out[size_t(y) * ly.width + x] = cls(tile_ref_texture(t, size_t(ly.width), x, y, tx0, tx1, ty0));
}

// ---------------------------------------------------------------------------
// The encoder's symbols, one block row at a time
//
// The mode decision (every coded block in each of three classes) and the
// final symbols compute, for every sample component, the symbol of
// docs/stream-format.md ("A sample component"): neighbours, prediction,
// context, token and raw bits. They do it for the samples of one block in
// one row of a tile at a time (a block row: 16 samples of layer 0, 8 of a
// subsampled layer, fewer at the frame's right edge), where every sample
// has the same class and only the block's first and last samples and the
// tile's first row meet the tile's edge rules. row_symbols_scalar() is the
// reference; row_symbols_vec() computes the same with GCC/clang vector
// extensions, 8 or 16 samples at once (SSE2, AVX2 or NEON instructions,
// whichever the function it is inlined into is compiled for).

// The samples of one block in one row of a tile and the tile's edge rules
// that apply to them.
struct BlockRow {
  size_t at;         // plane index of the first sample
  ptrdiff_t stride;  // the layer's width
  int n;             // samples, 1..kBlock
  bool top;          // the tile's first row: a = left (0 in the first column), b = c = d = a
  bool first;        // sample 0 is in the tile's first column: a = c = b
  bool last;         // sample n - 1 is in the tile's last column: d = b
};

// Block bx's samples in row y (row j of tile t) of a layer, over `span`.
inline BlockRow block_row(const Layer &ly, const Tile &t, int y, int j, int bx, BlockSpan span) {
  BlockRow br;
  br.at = size_t(y) * size_t(ly.width) + size_t(span.x0);
  br.stride = ly.width;
  br.n = span.x1 - span.x0;
  br.top = j == 0;
  br.first = bx == t.bx0;
  br.last = bx == t.bx1 - 1;
  return br;
}

// What one class codes from: per component, the plane its neighbours come
// from (the class's domain) and the plane of its values, the reference
// classes (temporal class) and the first distribution of each component.
struct ClassPlanes {
  const int16_t *nb[kMaxComps];
  const int16_t *val[kMaxComps];
  const uint8_t *rclass;
  const int *base;
};

// Per component and sample of a block row: the symbol as distribution *
// kTokens + token (the histograms' index), and its raw bits.
struct RowSymbols {
  uint16_t id[kMaxComps][kBlock];
  uint16_t bits[kMaxComps][kBlock];
};

// The reference: the per-sample rules of codec2_rules.h as the decoder
// applies them. NC components; BITS: the raw bits too.
template <int CLS, int NC, bool BITS>
CODEC2_ALWAYS_INLINE void row_symbols_scalar(const BlockRow &br, const ClassPlanes &cp,
                                             RowSymbols &out) {
  const ptrdiff_t st = br.stride;
  for (int s = 0; s < br.n; ++s) {
    const size_t at = br.at + size_t(s);
    const bool first = br.first && s == 0, last = br.last && s == br.n - 1;
    const int rcl = uses_ref_class(CLS, 0) ? cp.rclass[at] : 0;
    int r0 = 0;
    for (int c = 0; c < NC; ++c) {
      const int16_t *p = cp.nb[c] + at;
      int a, b, cc, d;
      if (br.top) {
        a = first ? 0 : p[-1];
        b = cc = d = a;
      } else {
        b = p[-st];
        a = first ? b : p[-1];
        cc = first ? b : p[-st - 1];
        d = last ? b : p[-st + 1];
      }
      const int pred = CLS == kClassTemporal ? 0 : med(a, b, cc);
      const int r = cp.val[c][at] - pred;
      if (c == 0) r0 = r;
      const int ctx = sample_context(CLS, c, a, b, cc, d, r0, rcl);
      int nbits;
      uint32_t bits;
      const int token = token_of_table(zigzag(flip_sign(CLS, a, b, cc, d) ? -r : r), &nbits, &bits);
      out.id[c][s] = uint16_t((cp.base[c] + ctx) * kTokens + token);
      if (BITS) out.bits[c][s] = uint16_t(bits);
    }
  }
}

// The edges of the activity buckets (activity_bucket(): the number of them
// that are <= g) and the token of a value v >= 16 as 16 plus the number of
// these thresholds that are <= v (token_of(): v in [2^e, 2^(e+1)) is token
// 16 + 2 (e - 4) + bit e-1 of v, so each power of two from 32 and each
// 3 * 2^(e-1) from 24 adds one), checked below for every g and v.
constexpr int kActivityEdges[kActivityBuckets - 1] = {1, 2, 3, 5, 7, 10, 14, 20, 28, 40, 56, 80};
constexpr int kTokenThresholds[kTokens - kDirectTokens - 1] = {
    24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072};
constexpr bool row_rules_are_exact() {
  for (int g = 0; g < 200; ++g) {
    int n = 0;
    for (int e : kActivityEdges) n += g >= e;
    if (n != make_activity_table().bucket[g < 80 ? g : 80]) return false;
  }
  for (uint32_t v = kDirectTokens; v < 4096; ++v) {
    int t = kDirectTokens;
    for (int th : kTokenThresholds) t += int(v) >= th;
    // token_of() (not constexpr) as docs/stream-format.md words it.
    int e = 0;
    while (v >> (e + 1)) ++e;
    const uint32_t bits = v & ((1u << (e - 1)) - 1);
    if (t != kDirectTokens + 2 * (e - 4) + int((v >> (e - 1)) & 1)) return false;
    // The raw bits: v's bits below its highest but one (every bit from the
    // highest down set, shifted right twice).
    uint32_t ones = v | v >> 1;
    ones |= ones >> 2;
    ones |= ones >> 4;
    ones |= ones >> 8;
    if ((v & (ones >> 2)) != bits) return false;
  }
  return true;
}
static_assert(row_rules_are_exact(), "the block-row rules differ from codec2_rules.h");

#if (defined(__GNUC__) || defined(__clang__)) && !defined(CODEC2_NO_SIMD)
#define CODEC2_VECTORS 1
template <int N>
struct Lanes;
template <>
struct Lanes<8> {
  typedef int16_t I __attribute__((vector_size(16)));
  typedef uint16_t U __attribute__((vector_size(16)));
  typedef uint8_t B __attribute__((vector_size(8)));
};
template <>
struct Lanes<16> {
  typedef int16_t I __attribute__((vector_size(32)));
  typedef uint16_t U __attribute__((vector_size(32)));
  typedef uint8_t B __attribute__((vector_size(16)));
};

// Element-wise |x|, min and max of vectors (macros: a function that takes
// or returns a 32-byte vector draws an ABI note where AVX is not enabled).
#define CODEC2_VABS(x) ((x) < 0 ? -(x) : (x))
#define CODEC2_VMIN(x, y) ((x) < (y) ? (x) : (y))
#define CODEC2_VMAX(x, y) ((x) > (y) ? (x) : (y))

// row_symbols_scalar() for samples [o, o + N) of a block row (N = 8 or 16
// lanes of int16). Lanes at or past br.n read samples after the block (the
// planes' slack, PaddedPlane) and compute values nobody reads. Every value
// fits in int16: working values lie within -510..510, activities below
// 4 * 1020, zigzag values below 4096.
template <int N, int CLS, int NC, bool BITS>
CODEC2_ALWAYS_INLINE void row_symbols_vec(const BlockRow &br, const ClassPlanes &cp, int o,
                                          RowSymbols &out) {
  using I = typename Lanes<N>::I;
  using U = typename Lanes<N>::U;
  using B = typename Lanes<N>::B;
  const ptrdiff_t st = br.stride;
  const size_t at = br.at + size_t(o);
  I lane;
  for (int s = 0; s < N; ++s) lane[s] = int16_t(s);
  // Masks of the lanes of the tile's first and last column.
  const int16_t first_lane = int16_t(br.first && o == 0 ? 0 : -1);
  const int16_t last_lane = int16_t(br.last ? br.n - 1 - o : -1);
  const I first = lane == first_lane;
  const I last = lane == last_lane;
  const I zero = I{};
  I r0 = zero;
  for (int c = 0; c < NC; ++c) {
    const int16_t *p = cp.nb[c] + at;
    I a, b, cc, d, v;
    std::memcpy(&a, p - 1, sizeof a);
    if (br.top) {
      a = first ? zero : a;
      b = cc = d = a;
    } else {
      std::memcpy(&b, p - st, sizeof b);
      std::memcpy(&cc, p - st - 1, sizeof cc);
      std::memcpy(&d, p - st + 1, sizeof d);
      a = first ? b : a;
      cc = first ? b : cc;
      d = last ? b : d;
    }
    std::memcpy(&v, cp.val[c] + at, sizeof v);
    I pred, g, flip;
    if constexpr (CLS == kClassTemporal) {
      pred = zero;
      g = CODEC2_VABS(a) + CODEC2_VABS(b) + CODEC2_VABS(cc) + CODEC2_VABS(d);
      flip = (a + b + cc + d) < 0;
    } else {
      // med(): a + b - c clamped to [min(a, b), max(a, b)].
      const I mx = CODEC2_VMAX(a, b), mn = CODEC2_VMIN(a, b), e = a + b - cc;
      const I hi = CODEC2_VMIN(e, mx);
      pred = CODEC2_VMAX(hi, mn);
      const I ab = a - b, bc = b - cc, ca = cc - a, bd = b - d;
      g = CODEC2_VABS(ab) + CODEC2_VABS(bc) + CODEC2_VABS(ca) + CODEC2_VABS(bd);
      flip = (a + b - cc - cc) < 0;
    }
    const I r = v - pred;
    if (c == 0) r0 = r;
    // Masks are -1: subtracting one counts it.
    I ctx = zero;
    for (int e : kActivityEdges) ctx -= g >= int16_t(e);
    if (c > 0) {
      const I m = CODEC2_VABS(r0), top = zero + int16_t(kCrossLevels - 1);
      ctx += int16_t(kActivityBuckets) * CODEC2_VMIN(m, top);
    }
    if (uses_ref_class(CLS, c)) {
      B rc;
      std::memcpy(&rc, cp.rclass + at, sizeof rc);
      ctx = ctx * int16_t(kRefClasses) + __builtin_convertvector(rc, I);
    }
    const I rf = (r ^ flip) - flip;      // -r where flip is -1
    const I z = (rf + rf) ^ (rf >> 15);  // zigzag()
    const I big = z >= int16_t(kDirectTokens);
    I token = zero + int16_t(kDirectTokens);
    for (int th : kTokenThresholds) token -= z >= int16_t(th);
    token = big ? token : z;
    const U id = (U)(ctx + int16_t(cp.base[c])) * uint16_t(kTokens) + (U)token;
    std::memcpy(&out.id[c][o], &id, sizeof id);
    if (BITS) {
      I ones = z | z >> 1;
      ones |= ones >> 2;
      ones |= ones >> 4;
      ones |= ones >> 8;
      const I bits = z & (ones >> 2) & big;
      std::memcpy(&out.bits[c][o], &bits, sizeof bits);
    }
  }
}
#undef CODEC2_VABS
#undef CODEC2_VMIN
#undef CODEC2_VMAX
#else
#define CODEC2_VECTORS 0
#endif

// The widest vectors of the baseline: 8 lanes of int16 (SSE2, NEON), none
// without vector extensions.
constexpr int kBaseLanes = CODEC2_VECTORS ? 8 : 0;

// The symbols of a block row by the widest path at hand: VW lanes (16:
// AVX2, 8: the baseline's vectors, 0: scalar).
template <int VW, int CLS, int NC, bool BITS>
CODEC2_ALWAYS_INLINE void row_symbols(const BlockRow &br, const ClassPlanes &cp, RowSymbols &out) {
#if CODEC2_VECTORS
  if constexpr (VW >= 16) {
    if (br.n > 8) return row_symbols_vec<16, CLS, NC, BITS>(br, cp, 0, out);
  }
  if constexpr (VW >= 8) {
    row_symbols_vec<8, CLS, NC, BITS>(br, cp, 0, out);
    if (br.n > 8) row_symbols_vec<8, CLS, NC, BITS>(br, cp, 8, out);
    return;
  }
#endif
  row_symbols_scalar<CLS, NC, BITS>(br, cp, out);
}
// The same with the class chosen at run time.
template <int VW, int NC, bool BITS>
CODEC2_ALWAYS_INLINE void row_symbols(int cls, const BlockRow &br, const ClassPlanes &cp,
                                      RowSymbols &out) {
  if (cls == kClassSpatial)
    row_symbols<VW, kClassSpatial, NC, BITS>(br, cp, out);
  else if (cls == kClassTemporal)
    row_symbols<VW, kClassTemporal, NC, BITS>(br, cp, out);
  else
    row_symbols<VW, kClassTempSpat, NC, BITS>(br, cp, out);
}

// flip ? -unzigzag(v) : unzigzag(v), without branches (the decoder's lanes
// flip at random): unzigzag(v) = (v >> 1) ^ -(v & 1), and -r = (r ^ -1) + 1.
constexpr int residual_of(uint32_t v, bool flip) {
  const int r = int(v >> 1) ^ -int(v & 1);
  return (r ^ -int(flip)) + int(flip);
}
constexpr bool residual_of_is_exact() {  // for every value a token codes
  for (uint32_t v = 0; v < 4096; ++v)
    for (int flip = 0; flip <= 1; ++flip) {
      const int u = (v & 1) ? -int(v >> 1) - 1 : int(v >> 1);  // unzigzag()
      if (residual_of(v, flip != 0) != (flip ? -u : u)) return false;
    }
  return true;
}
static_assert(residual_of_is_exact(), "residual_of() differs from unzigzag()");

constexpr int kMaxThreads = 256;

int default_threads(size_t samples, size_t tiles) {
  if (tiles < 2) return 1;
  return std::max(1, std::min(int(std::min<size_t>(tiles, kMaxThreads)), cpu_threads_for(samples)));
}

// The CPU encoder's symbols between tile_symbols() and encode_tile(): 32
// bits each, the distribution and token as dist * kTokens + token (the
// index of the token's table entry) in the low 16 bits or kNoCode for a
// sample of a skipped block, the value of the raw bits in the high 16 (their
// number follows from the token, token_extra_bits()). Symbols from another
// backend (write_body()) are turned into codes first.
constexpr uint32_t kNoCode = 0xFFE0;  // token 0, above every dist * kTokens + token
inline uint32_t code_of(const Symbol &s) {
  return s.dist == kNoSymbol ? kNoCode
                             : (uint32_t(s.dist) * kTokens + s.token) | uint32_t(s.bits) << 16;
}

// lane_checksum() is h * 33 + value mod 2^17: the encoder takes it mod 2^32
// (2^17 divides 2^32) and reduces once, at the end. A sample component's
// symbol (docs/stream-format.md, "Coded tiles": its token, then its raw bits
// if it has any) multiplies h by 33 per value it adds; a skipped one (token
// 0, no raw bits) leaves h as it is.
CODEC2_ALWAYS_INLINE uint32_t checksum_step(uint32_t h, uint32_t code) {
  // Without branches: with raw bits (a token of 16 or more) h * 33^2 + 33
  // token + bits, else coded h * 33 + token, skipped h.
  const uint32_t token = code & (kTokens - 1), raw = token >= uint32_t(kDirectTokens);
  const uint32_t coded = (code & 0xFFFF) != kNoCode;
  return h * (1u + 32u * coded + 1056u * raw) + token * (1u + 32u * raw) + (code >> 16);
}
constexpr uint32_t kChecksumMask = 0x1FFFFu;
constexpr bool checksum_steps_are_exact() {
  uint32_t h = 0, wide = 0;
  for (uint32_t v = 0; v < 5000; ++v) {
    h = (h * 33u + v) & kChecksumMask;  // lane_checksum() (not constexpr)
    wide = wide * 33u + v;
    if ((wide & kChecksumMask) != h) return false;
  }
  return true;
}
static_assert(checksum_steps_are_exact(), "lane checksums taken mod 2^32 differ");

// checksum_step() over G rows of n symbols each (`stride` symbols apart),
// row g into h[g]: G independent chains of multiplications, interleaved.
template <int G>
CODEC2_ALWAYS_INLINE void checksum_rows(const uint32_t *row, size_t n, size_t stride, uint32_t *h) {
  uint32_t x[G];
  for (int g = 0; g < G; ++g) x[g] = h[g];
  for (size_t i = 0; i < n; ++i)
    for (int g = 0; g < G; ++g) x[g] = checksum_step(x[g], row[size_t(g) * stride + i]);
  for (int g = 0; g < G; ++g) h[g] = x[g];
}

#if CODEC2_VECTORS
// checksum_step() of every symbol of samples [o, o + N) of a block row
// (RowSymbols with raw bits), each sample's components composed: its
// symbols take a checksum h to h * m[i] + v[i] (mod 2^32). A token of 16 or
// more has raw bits.
template <int N, int NC>
CODEC2_ALWAYS_INLINE void checksum_maps_vec(const RowSymbols &rs, int o, uint32_t *m, uint32_t *v) {
  typedef uint32_t W __attribute__((vector_size(4 * N)));
  using U = typename Lanes<N>::U;
  W sm = W{} + 1u, sv = W{};
  for (int c = 0; c < NC; ++c) {
    U id, bits;
    std::memcpy(&id, &rs.id[c][o], sizeof id);
    std::memcpy(&bits, &rs.bits[c][o], sizeof bits);
    const W token = __builtin_convertvector(id & uint16_t(kTokens - 1), W);
    const W raw = (W)(token >= uint32_t(kDirectTokens));
    const W cm = 33u + (raw & 1056u);
    sm *= cm;
    sv = sv * cm + token + (raw & (32u * token + __builtin_convertvector(bits, W)));
  }
  std::memcpy(m + o, &sm, sizeof sm);
  std::memcpy(v + o, &sv, sizeof sv);
}
#endif

// ---------------------------------------------------------------------------
// The encoder's quantiser, sample by sample and in vectors

// The quotient n / (2k + 1) of any n in 0..511 as a multiplication,
// (n * mul) >> (16 + shift) with shift = floor(log2(2k + 1)) and mul =
// ceil(2^(16 + shift) / (2k + 1)) < 2^16 (for k = 0, mul 0: the quotient is
// n): quant_index() and quant_diff() in the encoder's vector paths.
struct StepDivision {
  uint16_t mul = 0;
  int shift = 0;
  constexpr explicit StepDivision(int k) {
    const uint32_t s = 2 * uint32_t(k) + 1;
    if (s == 1) return;
    while ((2u << shift) <= s) ++shift;
    mul = uint16_t(((1u << (16 + shift)) + s - 1) / s);
  }
  constexpr int of(int n) const { return mul ? int((uint32_t(n) * mul) >> (16 + shift)) : n; }
};
constexpr bool step_division_is_exact() {
  for (int k = 0; k <= 255; ++k) {
    const StepDivision d(k);
    const int s = 2 * k + 1;
    // of() never decreases as n grows: it is the quotient on 0..511 if it
    // is at each multiple of s, just below it, and at 0 and 511.
    if (d.of(0) != 0 || d.of(511) != 511 / s) return false;
    for (int m = 1; m * s <= 511; ++m)
      if (d.of(m * s - 1) != m - 1 || d.of(m * s) != m) return false;
  }
  return true;
}
static_assert(step_division_is_exact(), "StepDivision differs from the division by the step");

// What the encoder's vector paths quantise with: k, its step division and
// the T-domain's dead zone (encoder_diff()'s threshold; 0: none, as
// quant_diff()).
struct VectorQuantizer {
  StepDivision div{0};
  int k = 0, dead = 0;
};

#if CODEC2_VECTORS
// (a * b) >> 16 in each unsigned 16-bit lane, into a.
template <int N>
CODEC2_ALWAYS_INLINE void mulhi_u16(typename Lanes<N>::U &a, const typename Lanes<N>::U &b) {
#if CODEC2_SSE2 && defined(__has_builtin)
#if __has_builtin(__builtin_shufflevector)
#define CODEC2_MULHI_SSE2 1
  if constexpr (N == 16) {  // two halves (AVX2 functions: vextracti128, vpmulhuw, vinserti128)
    using H = typename Lanes<8>::U;
    H lo = __builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7);
    H hi = __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15);
    lo = (H)_mm_mulhi_epu16((__m128i)lo,
                            (__m128i)__builtin_shufflevector(b, b, 0, 1, 2, 3, 4, 5, 6, 7));
    hi = (H)_mm_mulhi_epu16((__m128i)hi,
                            (__m128i)__builtin_shufflevector(b, b, 8, 9, 10, 11, 12, 13, 14, 15));
    a = __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  } else {
    a = (typename Lanes<N>::U)_mm_mulhi_epu16((__m128i)a, (__m128i)b);
  }
#endif
#endif
#ifndef CODEC2_MULHI_SSE2
  typedef uint32_t W __attribute__((vector_size(4 * N)));
  a = __builtin_convertvector((__builtin_convertvector(a, W) * __builtin_convertvector(b, W)) >> 16,
                              typename Lanes<N>::U);
#endif
}
#undef CODEC2_MULHI_SSE2

// A VectorQuantizer's numbers in every lane of N.
template <int N>
struct QuantLanes {
  typename Lanes<N>::U mul;
  typename Lanes<N>::I k, dead, step;
  int shift;
  bool divide;
  CODEC2_ALWAYS_INLINE explicit QuantLanes(const VectorQuantizer &vq) {
    mul = typename Lanes<N>::U{} + vq.div.mul;
    k = typename Lanes<N>::I{} + int16_t(vq.k);
    dead = typename Lanes<N>::I{} + int16_t(vq.dead);
    step = typename Lanes<N>::I{} + int16_t(2 * vq.k + 1);
    shift = vq.div.shift;
    divide = vq.div.mul != 0;
  }
};

// quant_index() of bytes x, in place (by reference: a 32-byte vector
// passed by value changes the ABI where AVX is not enabled).
template <int N>
CODEC2_ALWAYS_INLINE void quant_index_vec(const QuantLanes<N> &ql, typename Lanes<N>::I &x) {
  using U = typename Lanes<N>::U;
  if (!ql.divide) return;
  U n = (U)(x + ql.k);
  mulhi_u16<N>(n, ql.mul);
  x = (typename Lanes<N>::I)(n >> ql.shift);
}
// encoder_diff() (quant_diff() with dead zone 0) of differences e, in place.
template <int N>
CODEC2_ALWAYS_INLINE void quant_diff_vec(const QuantLanes<N> &ql, typename Lanes<N>::I &e) {
  using I = typename Lanes<N>::I;
  const I m = e < 0 ? -e : e;
  I q = m;
  quant_index_vec<N>(ql, q);  // (|e| + k) / (2k + 1)
  q = m > ql.dead ? q : I{};
  e = e < 0 ? -q : q;
}
// to_components() of N samples, component c in v[c].
template <int N, int NC, bool YCOCG>
CODEC2_ALWAYS_INLINE void to_components_vec(typename Lanes<N>::I *v) {
  if constexpr (YCOCG) {
    const typename Lanes<N>::I r = v[0], g = v[1], b = v[2];
    const typename Lanes<N>::I co = r - b, t = b + (co >> 1), cg = g - t;
    v[0] = t + (cg >> 1);
    v[1] = co;
    v[2] = cg;
  }
}

// working_values_run() of samples [a, a + N).
template <int N, int NC, bool YCOCG>
CODEC2_ALWAYS_INLINE void working_values_vec(const QuantLanes<N> &ql, const uint8_t *const *pic,
                                             const uint8_t *const *ref, size_t a, int16_t *const *s,
                                             int16_t *const *t) {
  using I = typename Lanes<N>::I;
  using B = typename Lanes<N>::B;
  I x[NC], v[NC];
  for (int c = 0; c < NC; ++c) {
    B b;
    std::memcpy(&b, pic[c] + a, sizeof b);
    x[c] = __builtin_convertvector(b, I);
    v[c] = x[c];
    quant_index_vec<N>(ql, v[c]);
  }
  to_components_vec<N, NC, YCOCG>(v);
  for (int c = 0; c < NC; ++c) std::memcpy(s[c] + a, &v[c], sizeof v[c]);
  if (!ref) return;
  for (int c = 0; c < NC; ++c) {
    B b;
    std::memcpy(&b, ref[c] + a, sizeof b);
    v[c] = x[c] - __builtin_convertvector(b, I);
    quant_diff_vec<N>(ql, v[c]);
  }
  to_components_vec<N, NC, YCOCG>(v);
  for (int c = 0; c < NC; ++c) std::memcpy(t[c] + a, &v[c], sizeof v[c]);
}

// The reconstruction of bytes [x, x + N) of a row in mode `mode` (not
// skipped): dequant_index(quant_index()) of the input, or
// dequant_diff() of its T-domain value.
template <int N>
CODEC2_ALWAYS_INLINE void reconstruct_vec(const QuantLanes<N> &ql, int mode, const uint8_t *cur,
                                          const uint8_t *ref, uint8_t *rec, int x) {
  using I = typename Lanes<N>::I;
  using B = typename Lanes<N>::B;
  B b;
  std::memcpy(&b, cur + x, sizeof b);
  I v = __builtin_convertvector(b, I), d;
  if (mode == kSpatial) {
    quant_index_vec<N>(ql, v);
    d = v * ql.step;  // 0 .. 255 + k
  } else {
    std::memcpy(&b, ref + x, sizeof b);
    const I r = __builtin_convertvector(b, I);
    v -= r;
    quant_diff_vec<N>(ql, v);
    d = r + v * ql.step;  // -255 - k .. 510 + k
    d = d < 0 ? I{} : d;
  }
  d = d > 255 ? I{} + 255 : d;
  b = __builtin_convertvector(d, B);
  std::memcpy(rec + x, &b, sizeof b);
}
#endif

// Working values of samples [at, at + n) of a layer of NC channels (YCOCG:
// colour transformed) from a picture's channels (and the reference's, with
// T-domain values from `diff`: q.diff, or q.coded for the encoder's input,
// as vq says), VW at a time where VW > 0 (vectors of 16 or 8 lanes), then
// one by one.
template <int VW, int NC, bool YCOCG>
CODEC2_ALWAYS_INLINE void working_values_run(const Quantizer &q, const VectorQuantizer &vq,
                                             const int16_t *diff, const uint8_t *const *pic,
                                             const uint8_t *const *ref, size_t at, size_t n,
                                             int16_t *const *s, int16_t *const *t) {
  size_t a = at;
  const size_t end = at + n;
#if CODEC2_VECTORS
  if constexpr (VW >= 16) {
    const QuantLanes<16> ql(vq);
    for (; a + 16 <= end; a += 16) working_values_vec<16, NC, YCOCG>(ql, pic, ref, a, s, t);
  }
  if constexpr (VW >= 8) {
    const QuantLanes<8> ql(vq);
    for (; a + 8 <= end; a += 8) working_values_vec<8, NC, YCOCG>(ql, pic, ref, a, s, t);
  }
#else
  (void)vq;
#endif
  int ch[NC], comp[NC];
  for (; a < end; ++a) {
    for (int c = 0; c < NC; ++c) ch[c] = q.index[pic[c][a]];
    to_components(YCOCG, NC, ch, comp);
    for (int c = 0; c < NC; ++c) s[c][a] = int16_t(comp[c]);
    if (!ref) continue;
    for (int c = 0; c < NC; ++c) ch[c] = diff[int(pic[c][a]) - int(ref[c][a]) + 255];
    to_components(YCOCG, NC, ch, comp);
    for (int c = 0; c < NC; ++c) t[c][a] = int16_t(comp[c]);
  }
}

// What working_values() computes in a layer.
struct WorkingValuesJob {
  const Quantizer *q;
  VectorQuantizer vq;
  const int16_t *diff;
  const uint8_t *p[kMaxComps];
  const uint8_t *const *ref;  // p's reference (null: no T-domain)
  int16_t *s[kMaxComps], *t[kMaxComps];
  int channels;
  bool ycocg;
};
template <int VW>
CODEC2_ALWAYS_INLINE void working_values_span(const WorkingValuesJob &j, size_t at, size_t n) {
  if (j.ycocg && j.channels == 3)
    working_values_run<VW, 3, true>(*j.q, j.vq, j.diff, j.p, j.ref, at, n, j.s, j.t);
  else if (j.ycocg)
    working_values_run<VW, 4, true>(*j.q, j.vq, j.diff, j.p, j.ref, at, n, j.s, j.t);
  else if (j.channels == 1)
    working_values_run<VW, 1, false>(*j.q, j.vq, j.diff, j.p, j.ref, at, n, j.s, j.t);
  else
    working_values_run<VW, 2, false>(*j.q, j.vq, j.diff, j.p, j.ref, at, n, j.s, j.t);
}
// Compiled for the baseline and for AVX2 (picked at run time, use_avx2()).
void working_values_span_base(const WorkingValuesJob &j, size_t at, size_t n) {
  working_values_span<kBaseLanes>(j, at, n);
}
#if CODEC2_AVX2
CODEC2_TARGET_AVX2 void working_values_span_avx2(const WorkingValuesJob &j, size_t at, size_t n) {
  working_values_span<16>(j, at, n);
}
#endif

// Fills the working values of layer `l` from a picture (and the reference
// for the T-domain) in the blocks flagged in `blocks` (null: all); other
// samples keep their values (nothing reads them). `input`: the encoder's
// input, whose T-domain values have the dead zone (Quantizer::coded) of
// the encoder's threshold.
void working_values(const LayerSet &ls, int l, const Quantizer &q, bool input, int threshold,
                    const Picture &pic, const Picture *ref, const uint8_t *blocks, int threads,
                    Planes &out) {
  const Layer &ly = ls.layer[l];
  WorkingValuesJob j{};
  j.q = &q;
  j.vq.div = StepDivision(q.k);
  j.vq.k = q.k;
  j.vq.dead = input ? threshold : 0;
  j.diff = input ? q.coded : q.diff;
  const uint8_t *r[kMaxComps] = {};
  for (int c = 0; c < ly.channels; ++c) {
    j.p[c] = pic.ch[l][c].data();
    if (ref) r[c] = ref->ch[l][c].data();
    j.s[c] = out.s[c].data();
    j.t[c] = out.t[c].data();
  }
  j.ref = ref ? r : nullptr;
  j.channels = ly.channels;
  j.ycocg = ly.ycocg;
  for_each_block_span(ls, l, blocks, threads, [&](int y, int x0, int x1) {
    const size_t at = size_t(y) * ly.width + x0, n = size_t(x1 - x0);
#if CODEC2_AVX2
    if (use_avx2()) return working_values_span_avx2(j, at, n);
#endif
    working_values_span_base(j, at, n);
  });
}

#if CODEC2_VECTORS
// tile_reference_class_span() of samples [x, x + N) of row `row` inside
// their tile's columns (none in its first or last column), `up` the row
// above (TOP: the tile's first row, which has no neighbours above in the
// tile).
template <int N, bool TOP>
CODEC2_ALWAYS_INLINE void tile_reference_class_vec(const uint8_t *row, const uint8_t *up, int x,
                                                   int16_t step, uint8_t *out) {
  using I = typename Lanes<N>::I;
  using B = typename Lanes<N>::B;
  constexpr int kLoads = TOP ? 3 : 5;
  I v[5];
  const uint8_t *at[5] = {row + x, row + x - 1, row + x + 1, up + x, up + x - 1};
  for (int i = 0; i < kLoads; ++i) {
    B b;
    std::memcpy(&b, at[i], sizeof b);
    v[i] = __builtin_convertvector(b, I);
  }
  I g = I{};
  for (int i = 1; i < kLoads; ++i) {
    const I d = v[i] - v[0];
    g += d < 0 ? -d : d;
  }
  I cls = I{};
  for (int m : kRefClassSteps) cls -= g >= int16_t(m * step);  // masks are -1
  const B b = __builtin_convertvector(cls, B);
  std::memcpy(out + x, &b, sizeof b);
}

// Samples [x, end) of a row, all inside their tile's columns, N at a time;
// the last vector overlaps the one before it rather than leaving a
// remainder (at least N samples from `first` on). Returns where it stopped.
template <int N, bool TOP>
CODEC2_ALWAYS_INLINE int tile_reference_class_vecs(const uint8_t *row, const uint8_t *up, int first,
                                                   int x, int end, int16_t step, uint8_t *out) {
  for (; x + N <= end; x += N) tile_reference_class_vec<N, TOP>(row, up, x, step, out);
  if (x < end && end - N >= first) {
    tile_reference_class_vec<N, TOP>(row, up, end - N, step, out);
    x = end;
  }
  return x;
}
#endif

// tile_reference_class_span() of samples [x0, x1) of row y of the tile
// [tx0, tx1) x [ty0, ...), VW at a time where VW > 0 (the tile's first and
// last columns one at a time).
template <int VW>
CODEC2_ALWAYS_INLINE void tile_reference_class_run(const Layer &ly, const Picture &ref, int l,
                                                   int k, int y, int x0, int x1, int tx0, int tx1,
                                                   int ty0, uint8_t *out) {
  const int first = std::max(x0, tx0 + 1), end = std::min(x1, tx1 - 1);
  if (VW == 0 || end - first < 8)
    return tile_reference_class_span(ly, ref, l, k, y, x0, x1, tx0, tx1, ty0, out);
  tile_reference_class_span(ly, ref, l, k, y, x0, first, tx0, tx1, ty0, out);
  int x = first;
#if CODEC2_VECTORS
  const uint8_t *row = ref.ch[l][ly.ycocg ? 1 : 0].data() + size_t(y) * ly.width;
  const uint8_t *up = row - (y > ty0 ? ly.width : 0);  // not read in the tile's first row
  uint8_t *o = out + size_t(y) * ly.width;
  const int16_t step = int16_t(2 * k + 1);
  if (y == ty0) {
    if constexpr (VW >= 16)
      if (end - first >= 16)
        x = tile_reference_class_vecs<16, true>(row, up, first, x, end, step, o);
    x = tile_reference_class_vecs<8, true>(row, up, first, x, end, step, o);
  } else {
    if constexpr (VW >= 16)
      if (end - first >= 16)
        x = tile_reference_class_vecs<16, false>(row, up, first, x, end, step, o);
    x = tile_reference_class_vecs<8, false>(row, up, first, x, end, step, o);
  }
#endif
  tile_reference_class_span(ly, ref, l, k, y, x, x1, tx0, tx1, ty0, out);
}
void tile_reference_class_run_base(const Layer &ly, const Picture &ref, int l, int k, int y, int x0,
                                   int x1, int tx0, int tx1, int ty0, uint8_t *out) {
  tile_reference_class_run<kBaseLanes>(ly, ref, l, k, y, x0, x1, tx0, tx1, ty0, out);
}
#if CODEC2_AVX2
CODEC2_TARGET_AVX2 void tile_reference_class_run_avx2(const Layer &ly, const Picture &ref, int l,
                                                      int k, int y, int x0, int x1, int tx0,
                                                      int tx1, int ty0, uint8_t *out) {
  tile_reference_class_run<16>(ly, ref, l, k, y, x0, x1, tx0, tx1, ty0, out);
}
#endif
// Either of them, as the CPU allows.
void tile_reference_class_run_any(const Layer &ly, const Picture &ref, int l, int k, int y, int x0,
                                  int x1, int tx0, int tx1, int ty0, uint8_t *out) {
#if CODEC2_AVX2
  if (use_avx2())
    return tile_reference_class_run_avx2(ly, ref, l, k, y, x0, x1, tx0, tx1, ty0, out);
#endif
  tile_reference_class_run_base(ly, ref, l, k, y, x0, x1, tx0, tx1, ty0, out);
}

// The encoder's reference classes (the tile rule, kBodyTileClasses) of the
// samples of layer `l` in the blocks flagged in `blocks` (null: all) of
// tiles of geometry `g`; the others keep their values (nothing reads
// them). With kBlock bytes of slack after the plane: the encoder's vector
// paths load a whole block row of classes past a partial block.
void reference_classes(const LayerSet &ls, int l, const Picture &ref, int k, const Geometry &g,
                       const uint8_t *blocks, int threads, std::vector<uint8_t> &out) {
  const Layer &ly = ls.layer[l];
  out.resize(size_t(ly.width) * ly.height + kBlock);
  for_each_block_span(ls, l, blocks, threads, [&](int y, int x0, int x1) {
    const int ty0 = tile_sample_first(y, ly.sy, g.tile_by);
    for (int x = x0; x < x1;) {  // the run's part in each tile
      const int tx0 = tile_sample_first(x, ly.sx, g.tile_bx);
      const int tx1 = tile_sample_end(x, ly.sx, g.tile_bx, ly.width);
      const int e = std::min(x1, tx1);
      tile_reference_class_run_any(ly, ref, l, k, y, x, e, tx0, tx1, ty0, out.data());
      x = e;
    }
  });
}

// The reconstruction of row y of a layer (the decoder's picture) from the
// input, the reference and the blocks' modes (`modes`: the row's blocks),
// VW bytes at a time where VW > 0.
template <int VW>
CODEC2_ALWAYS_INLINE void reconstruct_row_inline(const Quantizer &q, const VectorQuantizer &vq,
                                                 const Layer &ly, int blocks_x,
                                                 const uint8_t *modes, const uint8_t *cur,
                                                 const uint8_t *ref, uint8_t *rec) {
#if CODEC2_VECTORS
  const QuantLanes<VW >= 16 ? 16 : 8> wide(vq);
  const QuantLanes<8> narrow(vq);
#endif
  for (int bx = 0; bx < blocks_x; ++bx) {
    const BlockSpan span = block_span(ly, bx);
    const int mode = modes[bx];
    if (span.x1 <= span.x0) continue;
    if (mode == kSkip) {
      std::memcpy(rec + span.x0, ref + span.x0, size_t(span.x1 - span.x0));
      continue;
    }
    int x = span.x0;
#if CODEC2_VECTORS
    if constexpr (VW >= 16)
      for (; x + 16 <= span.x1; x += 16) reconstruct_vec<16>(wide, mode, cur, ref, rec, x);
    if constexpr (VW >= 8)
      for (; x + 8 <= span.x1; x += 8) reconstruct_vec<8>(narrow, mode, cur, ref, rec, x);
#else
    (void)vq;
#endif
    for (; x < span.x1; ++x) {
      const int v = cur[x];
      if (mode == kSpatial) {
        rec[x] = q.dequant[q.index[v]];
      } else {
        const int r = ref[x];
        rec[x] = uint8_t(dequant_diff(r, q.coded[v - r + 255], q.k));
      }
    }
  }
}
void reconstruct_row_base(const Quantizer &q, const VectorQuantizer &vq, const Layer &ly,
                          int blocks_x, const uint8_t *modes, const uint8_t *cur,
                          const uint8_t *ref, uint8_t *rec) {
  reconstruct_row_inline<kBaseLanes>(q, vq, ly, blocks_x, modes, cur, ref, rec);
}
#if CODEC2_AVX2
CODEC2_TARGET_AVX2 void reconstruct_row_avx2(const Quantizer &q, const VectorQuantizer &vq,
                                             const Layer &ly, int blocks_x, const uint8_t *modes,
                                             const uint8_t *cur, const uint8_t *ref, uint8_t *rec) {
  reconstruct_row_inline<16>(q, vq, ly, blocks_x, modes, cur, ref, rec);
}
#endif

// ---------------------------------------------------------------------------
// The encoder

class CpuEncoder final : public Encoder, public detail::EncoderBackEnd {
 public:
  // back_end_only: used as another backend's EncoderBackEnd (no pictures).
  CpuEncoder(VideoFormat format, int width, int height, const Geometry &g,
             bool back_end_only = false) {
    format_ = format;
    width_ = width;
    height_ = height;
    geometry_ = g;
    ls_ = layers_of(format, width, height);
    if (ls_.count == 0) throw Error("codec2 encoder: unknown format or empty size");
    if (g.tile_bx < 1 || g.tile_bx > 255 || g.tile_by < 1 || g.tile_by > 255)
      throw Error("codec2 encoder: tile geometry out of range");
    if (g.lane_samples < 1 || g.lane_samples > (1 << 24))
      throw Error("codec2 encoder: samples per lane out of range (1 .. 2^24)");
    if (g.walk_bound < 0 || g.walk_bound > 1000)
      throw Error("codec2 encoder: walk bound out of range (0 .. 1000 percent)");
    dl_ = DistLayout(ls_);
    // (Each code of a distribution and token lies below kNoCode.)
    if (size_t(dl_.count) * kTokens > kNoCode)
      throw Error("codec2 encoder: too many distributions");
    tiles_ = make_tiles(ls_, g);
    modes_.assign(size_t(ls_.blocks_x) * ls_.blocks_y, kSpatial);
    prev_.tables.assign(dl_.count, Table{});
    if (back_end_only) return;
    cur_.allocate(ls_);
    // Staggered so that no plane of one shares cache sets with the other's.
    ref_.allocate(ls_, 0);
    rec_.allocate(ls_, kMaxLayers * kMaxComps / 2 - 1);
    for (int l = 0; l < ls_.count; ++l) {
      in_[l].allocate(ls_.layer[l], true);
      work_[l].allocate(ls_.layer[l], true);
    }
  }

  FrameStats encode(const FrameView &frame, int threshold, bool keyframe, HostBytes &body) override;

  void read_reference(HostBytes &out) override {
    out.resize(frame_size_packed(format_, width_, height_));
    store(ref_, ls_, packed_view(format_, width_, height_, out.data()));
  }

  // EncoderBackEnd
  const std::vector<Tile> &tiles() const override { return tiles_; }
  const LayerSet &layers() const override { return ls_; }
  int dist_count() const override { return dl_.count; }
  int dist_base(int layer, int cls, int comp) const override { return dl_.base[layer][cls][comp]; }
  FrameStats write_body(bool keyframe, int k, const uint8_t *modes, const TileSymbols *tiles,
                        const std::function<void(size_t, uint8_t *)> &raw,
                        HostBytes &body) override;
  const std::vector<int> &tile_types() const override { return tile_type_; }
  void make_tables(bool keyframe, const uint32_t *hist, uint32_t *freq_cum) override;
  void set_tables(bool keyframe, const detail::ChosenTable *tables) override;
  size_t head_bytes() const override { return kBodyHeaderBytes + model_bytes_.size(); }
  FrameStats assemble(bool keyframe, int k, const uint8_t *modes, const int *types,
                      const int *lanes, const size_t *sizes,
                      const std::function<void(uint8_t *)> &payloads, HostBytes &body) override;

 private:
  void find_coded_blocks(bool keyframe, int threads);
  uint64_t count_changed(int threads) const;
  void decide_modes(int threads);
  // The per-tile work of the mode decision and of the symbols, compiled
  // for the baseline and for AVX2 (picked at run time, use_avx2()).
  void proxy_symbols(const Tile &t, uint64_t *cost);
  void tile_symbols(size_t ti);
#if CODEC2_AVX2
  CODEC2_TARGET_AVX2 void proxy_symbols_avx2(const Tile &t, uint64_t *cost);
  CODEC2_TARGET_AVX2 void tile_symbols_avx2(size_t ti);
#endif
  template <int VW>
  CODEC2_ALWAYS_INLINE void proxy_symbols_inline(const Tile &t, uint64_t *cost);
  template <int VW, int NC>
  CODEC2_ALWAYS_INLINE void proxy_layer(const Tile &t, int l, uint64_t *cost);
  template <int VW>
  CODEC2_ALWAYS_INLINE void tile_symbols_inline(size_t ti);
  template <int VW, int NC>
  CODEC2_ALWAYS_INLINE void symbols_layer(const Tile &t, int l, uint32_t *codes, uint32_t *hist,
                                          uint64_t *maps);
  ClassPlanes class_planes(int l, int cls, const Planes &nb) const;
  template <class F>
  void for_each_proxy_row(const Tile &t, F f) const;
  void build_model(const uint32_t *hist, bool keyframe, BitWriter &bw, Model &model);
  FrameStats write_tiles(bool keyframe, int k, const uint8_t *modes,
                         const std::function<void(size_t, uint8_t *)> &raw, HostBytes &body);
  bool encode_tile(size_t ti, int k, int thread);  // thread: which scratch buffer
  void build_palette_model(const uint32_t *hist, bool keyframe, BitWriter &bw, Model &model);
  bool encode_tile_tans(size_t ti, int k, int lanes, size_t n_modes, const size_t *layer_first,
                        const uint32_t *checksum, int thread);
  template <int NC>
  uint8_t *rans_layer_steps(const uint32_t *codes, int w, int h, int lanes, uint32_t *state,
                            uint8_t *p);
  void store_raw(size_t ti, uint8_t *out);
  int64_t tile_estimate_q8(const uint32_t *hist) const;
  void index_tile(size_t ti, int k);
  void debug_sizes(const Model &model);

  LayerSet ls_;
  DistLayout dl_;
  std::vector<Tile> tiles_;
  Quantizer q_;
  int threshold_ = 0;  // of the frame being encoded (q_.k is its frame_k())
  Picture cur_, ref_, rec_;
  Planes in_[kMaxLayers];                    // working values of the input (the values coded)
  Planes work_[kMaxLayers];                  // working values of the reconstruction (neighbours)
  std::vector<uint8_t> rclass_[kMaxLayers];  // reference texture classes (deltas)
  std::vector<uint8_t> modes_;
  // Per block: not skipped; and needed (coded, or holding neighbours of a
  // coded block's samples: left, right, above-left, above or above-right of it).
  std::vector<uint8_t> coded_, needed_;
  // The mode decision's symbols (distribution * kTokens + token) per layer,
  // class and component, a plane of samples each.
  IdPlanes ids_;
  Model prev_;
  // Per tile its symbols as codes (kNoCode): block modes, then layer by
  // layer; the number in use (0: skipped tile); their histogram; the
  // checksum maps of its rows in layer order (from tile_symbols() in vector
  // builds: maps_ready_).
  std::vector<std::vector<uint32_t>> codes_;
  std::vector<size_t> code_count_;
  std::vector<std::vector<uint32_t>> tile_hist_;
  const bool raw_bound_ = detail::raw_bound_enabled();  // encode_tile()
  std::vector<uint8_t> bound_raw_;  // per tile: stored raw by its bound (FrameStats::raw_by_bound)
  std::vector<std::vector<uint64_t>> row_maps_;
  bool maps_ready_ = false;
  const uint32_t *const *tile_hists_ = nullptr;  // write_tiles()'s histograms, per tile
  Model pending_;                                // make_tables()'s tables (prev_ after assemble())
  std::vector<uint8_t> model_bytes_;             // and the model section
  std::vector<std::vector<uint8_t>> streams_;
  std::vector<int> tile_type_;    // 0 skipped, 1 coded, 2 raw, 3 indexed
  std::vector<uint8_t> indexed_;  // per tile: indexed (step 4b; empty: none)
  std::vector<int> tile_lanes_;   // lanes of a coded tile
  std::vector<std::vector<uint8_t>> rans_buffers_{size_t(kMaxThreads)};
  std::vector<RansEncoder::Symbol> rans_symbols_;  // per distribution and token: the model's
#if CODEC2_AVX2
  RansVectorTable rans_vectors_;  // the same for the AVX2 steps
#endif
  // Body flag 0x04 (geometry_.tans_lanes): the palette's tables, each
  // distribution's (null: unused), and per thread encode_tile_tans()'s
  // scratch, kept between tiles: the lanes' fields, each lane's words and
  // the lane that takes each word.
  std::vector<TansTable> tans_tables_;
  std::vector<const TansTable *> tans_of_;
  struct TansScratch {
    std::vector<uint32_t> items;
    std::vector<uint32_t> words[kMaxLanes];
    std::vector<uint8_t> order;
  };
  std::vector<TansScratch> tans_scratch_{size_t(kMaxThreads)};
  // Development aid (CODEC2_DEBUG_TANS_EAGER set): per tile, the bits that
  // lanes refilled eagerly would waste (tans_eager_waste()).
  std::vector<uint64_t> tans_eager_waste_;
  bool keyframe_ = true;
};

// Whether the encoder's and the decoder's AVX2 variants run: on a CPU with
// AVX2, BMI1, BMI2 and POPCNT, unless CODEC2_NO_AVX2 is set (the tests run the
// baseline that way).
#if CODEC2_AVX2
bool use_avx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi") &&
                           __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt") &&
                           !std::getenv("CODEC2_NO_AVX2");
  return avx2;
}
#endif

// The first estimate of each token's cost with its raw bits (1/256 bit),
// for the sums of the mode decision's first round.
// Below 2^14 each (at most 256 + 2 log2_q8(1537) + 10 * 256 for token 31),
// so 4 components' sum fits 16 bits; also as byte tables for
// first_cost_sum_avx2(): the low and high bytes of tokens 0..15 and
// 16..31, each twice (both halves of a 32-byte register).
struct FirstCostsWithBits {
  uint32_t of_token[kTokens];
  alignas(32) uint8_t low[2][32], high[2][32];
  FirstCostsWithBits() {
    for (int t = 0; t < kTokens; ++t) {
      of_token[t] = kFirstCost.of_token[t] + 256u * uint32_t(token_extra_bits(t));
      for (int half = 0; half < 2; ++half) {
        low[t / 16][16 * half + t % 16] = uint8_t(of_token[t]);
        high[t / 16][16 * half + t % 16] = uint8_t(of_token[t] >> 8);
      }
    }
  }
};
const FirstCostsWithBits kFirstCostWithBits;

#if CODEC2_AVX2
// The sum of kFirstCostWithBits over the tokens of samples [0, n) of a
// block row's NC components (16 lanes, by byte shuffles).
CODEC2_TARGET_AVX2 inline uint32_t first_cost_sum_avx2(const RowSymbols &rs, int nc, int n) {
  const __m256i low0 =
      _mm256_load_si256(reinterpret_cast<const __m256i *>(kFirstCostWithBits.low[0]));
  const __m256i low1 =
      _mm256_load_si256(reinterpret_cast<const __m256i *>(kFirstCostWithBits.low[1]));
  const __m256i high0 =
      _mm256_load_si256(reinterpret_cast<const __m256i *>(kFirstCostWithBits.high[0]));
  const __m256i high1 =
      _mm256_load_si256(reinterpret_cast<const __m256i *>(kFirstCostWithBits.high[1]));
  const __m256i lane = _mm256_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m256i live = _mm256_cmpgt_epi16(_mm256_set1_epi16(int16_t(n)), lane);
  __m256i sum = _mm256_setzero_si256();
  for (int c = 0; c < nc; ++c) {
    const __m256i token =
        _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(rs.id[c])),
                         _mm256_set1_epi16(kTokens - 1));
    // Byte indexes: the token's low 4 bits in a lane's low (high) byte,
    // 0x80 (a zero byte) in the other.
    const __m256i four = _mm256_and_si256(token, _mm256_set1_epi16(15));
    const __m256i at_low = _mm256_or_si256(four, _mm256_set1_epi16(int16_t(0x8000)));
    const __m256i at_high = _mm256_or_si256(_mm256_slli_epi16(four, 8), _mm256_set1_epi16(0x80));
    const __m256i below =
        _mm256_or_si256(_mm256_shuffle_epi8(low0, at_low), _mm256_shuffle_epi8(high0, at_high));
    const __m256i above =
        _mm256_or_si256(_mm256_shuffle_epi8(low1, at_low), _mm256_shuffle_epi8(high1, at_high));
    const __m256i cost =
        _mm256_blendv_epi8(below, above, _mm256_cmpgt_epi16(token, _mm256_set1_epi16(15)));
    sum = _mm256_add_epi16(sum, _mm256_and_si256(cost, live));
  }
  // 16 sums below 2^16 -> 8 of 32 bits -> one.
  __m256i wide = _mm256_add_epi32(_mm256_unpacklo_epi16(sum, _mm256_setzero_si256()),
                                  _mm256_unpackhi_epi16(sum, _mm256_setzero_si256()));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(wide), _mm256_extracti128_si256(wide, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
  return uint32_t(_mm_cvtsi128_si32(s4));
}
#endif

// The planes class `cls` of layer `l` codes from: neighbours from `nb`
// (the input's working values for the mode decision, the reconstruction's
// for the symbols), values from the input's.
ClassPlanes CpuEncoder::class_planes(int l, int cls, const Planes &nb) const {
  ClassPlanes cp{};
  const bool s = cls == kClassSpatial;
  for (int c = 0; c < ls_.layer[l].channels; ++c) {
    cp.nb[c] = s ? nb.s[c].data() : nb.t[c].data();
    cp.val[c] = s ? in_[l].s[c].data() : in_[l].t[c].data();
  }
  cp.rclass = rclass_[l].empty() ? nullptr : rclass_[l].data();
  cp.base = dl_.base[l][cls];
  return cp;
}

// The tile loops read many planes at once, row by row and a tile wide,
// which the hardware prefetchers follow poorly (the planes were written a
// whole frame earlier and have left the cache): the loops ask for the rows
// kPrefetchRows ahead themselves.
constexpr int kPrefetchRows = 2;
inline void prefetch_run(const void *p, size_t bytes) {
#if defined(__GNUC__) || defined(__clang__)
  for (size_t o = 0; o < bytes + 63; o += 64) __builtin_prefetch(static_cast<const char *>(p) + o);
#else
  (void)p, (void)bytes;
#endif
}

// The proxy symbols of every coded block of a tile in each of the three
// coded modes' classes, each sample predicted as if its neighbours had the
// same mode (from the input's working values), kept in ids_; and the first
// estimate of each mode's cost, by a fixed cost per residual.
void CpuEncoder::proxy_symbols(const Tile &t, uint64_t *cost) {
#if CODEC2_AVX2
  if (use_avx2()) return proxy_symbols_avx2(t, cost);
#endif
  proxy_symbols_inline<kBaseLanes>(t, cost);
}
#if CODEC2_AVX2
CODEC2_TARGET_AVX2 void CpuEncoder::proxy_symbols_avx2(const Tile &t, uint64_t *cost) {
  proxy_symbols_inline<16>(t, cost);
}
#endif
template <int VW>
CODEC2_ALWAYS_INLINE void CpuEncoder::proxy_symbols_inline(const Tile &t, uint64_t *cost) {
  for (int l = 0; l < ls_.count; ++l) {
    switch (ls_.layer[l].channels) {
      case 1:
        proxy_layer<VW, 1>(t, l, cost);
        break;
      case 2:
        proxy_layer<VW, 2>(t, l, cost);
        break;
      case 3:
        proxy_layer<VW, 3>(t, l, cost);
        break;
      default:
        proxy_layer<VW, 4>(t, l, cost);
    }
  }
}
template <int VW, int NC>
CODEC2_ALWAYS_INLINE void CpuEncoder::proxy_layer(const Tile &t, int l, uint64_t *cost) {
  const Layer &ly = ls_.layer[l];
  const ClassPlanes cp[kClasses] = {class_planes(l, kClassSpatial, in_[l]),
                                    class_planes(l, kClassTemporal, in_[l]),
                                    class_planes(l, kClassTempSpat, in_[l])};
  const int mode_of_class[kClasses] = {kSpatial, kTemporal, kTempSpat};
  RowSymbols rs;
  for (int j = 0; j < t.h[l]; ++j) {
    const int y = t.y0[l] + j;
    const size_t brow = size_t((y << ly.sy) / kBlock) * ls_.blocks_x;
    if (j + kPrefetchRows < t.h[l]) {
      const size_t ahead = size_t(y + kPrefetchRows) * ly.width + size_t(t.x0[l]);
      const size_t n = size_t(t.w[l]);
      for (int c = 0; c < NC; ++c) {
        prefetch_run(in_[l].s[c].data() + ahead, n * sizeof(int16_t));
        prefetch_run(in_[l].t[c].data() + ahead, n * sizeof(int16_t));
      }
      prefetch_run(rclass_[l].data() + ahead, n);
    }
    for (int bx = t.bx0; bx < t.bx1; ++bx) {
      const size_t block = brow + size_t(bx);
      if (!coded_[block]) continue;
      const BlockSpan span = block_span(ly, bx);
      const int n = span.x1 - span.x0;
      if (n <= 0) continue;
      const BlockRow br = block_row(ly, t, y, j, bx, span);
      for (int cls = 0; cls < kClasses; ++cls) {
        row_symbols<VW, NC, false>(cls, br, cp[cls], rs);
        uint32_t sum = 0;
        // A full block row's copy with its length known at compile time:
        // inlined, where a copy of n bytes calls the library.
        if (n == kBlock) {
          for (int c = 0; c < NC; ++c)
            std::memcpy(ids_.p[l][cls][c] + br.at, rs.id[c], sizeof(uint16_t) * kBlock);
        } else {
          for (int c = 0; c < NC; ++c)
            std::memcpy(ids_.p[l][cls][c] + br.at, rs.id[c], sizeof(uint16_t) * size_t(n));
        }
#if CODEC2_AVX2
        if constexpr (VW >= 16) {
          sum = first_cost_sum_avx2(rs, NC, n);
        } else
#endif
        {
          for (int c = 0; c < NC; ++c)
            for (int i = 0; i < n; ++i) sum += kFirstCostWithBits.of_token[rs.id[c][i] % kTokens];
        }
        cost[block * kModes + size_t(mode_of_class[cls])] += sum;
      }
    }
  }
}

// Calls f(block, cls, ids, n) for every block row of the coded blocks of a
// tile, every class and component: ids, the n proxy symbols of its samples.
template <class F>
void CpuEncoder::for_each_proxy_row(const Tile &t, F f) const {
  for (int l = 0; l < ls_.count; ++l) {
    const Layer &ly = ls_.layer[l];
    for (int y = t.y0[l]; y < t.y0[l] + t.h[l]; ++y) {
      const size_t brow = size_t((y << ly.sy) / kBlock) * ls_.blocks_x;
      if (y + kPrefetchRows < t.y0[l] + t.h[l]) {
        const size_t ahead = size_t(y + kPrefetchRows) * ly.width + size_t(t.x0[l]);
        for (int cls = 0; cls < kClasses; ++cls)
          for (int c = 0; c < ly.channels; ++c)
            prefetch_run(ids_.p[l][cls][c] + ahead, size_t(t.w[l]) * sizeof(uint16_t));
      }
      for (int bx = t.bx0; bx < t.bx1; ++bx) {
        const size_t block = brow + size_t(bx);
        if (!coded_[block]) continue;
        const BlockSpan span = block_span(ly, bx);
        const int n = span.x1 - span.x0;
        if (n <= 0) continue;
        const size_t at = size_t(y) * ly.width + size_t(span.x0);
        for (int cls = 0; cls < kClasses; ++cls)
          for (int c = 0; c < ly.channels; ++c) f(block, cls, ids_.p[l][cls][c] + at, n);
      }
    }
  }
}

// coded_: every block of a keyframe; in a delta the blocks with a byte
// more than the threshold from the reference (exactly those with a T-domain
// value other than 0: encoder_diff() is 0 only within the threshold, and
// YCoCg-R maps 0 to 0).
// needed_: the coded blocks and the blocks their samples' neighbours lie in.
// Bytes of the input more than the threshold off the reference (every byte
// of the frame is one channel of one sample).
uint64_t CpuEncoder::count_changed(int threads) const {
  uint64_t changed = 0;
  for (int l = 0; l < ls_.count; ++l) {
    const Layer &ly = ls_.layer[l];
    for (int c = 0; c < ly.channels; ++c) {
      const uint8_t *cur = cur_.ch[l][c].data(), *ref = ref_.ch[l][c].data();
      const long long n = (long long)ly.width * ly.height;
      std::atomic<uint64_t> total{0};
      cpu_parallel_ranges(n, threads, [&](long long begin, long long end) {
        uint64_t part = 0;
        for (long long i = begin; i < end; ++i)
          part += iabs(int(cur[i]) - int(ref[i])) > threshold_;
        total.fetch_add(part, std::memory_order_relaxed);
      });
      changed += total.load();
    }
  }
  return changed;
}

void CpuEncoder::find_coded_blocks(bool keyframe, int threads) {
  const int bxs = ls_.blocks_x, bys = ls_.blocks_y;
  coded_.assign(size_t(bxs) * bys, keyframe ? 1 : 0);
  needed_.assign(coded_.size(), keyframe ? 1 : 0);
  if (keyframe) return;
  const int bound = threshold_;
  parallel_rows(bys, threads, [&](int by) {
    uint8_t *coded = coded_.data() + size_t(by) * bxs;
    for (int l = 0; l < ls_.count; ++l) {
      const Layer &ly = ls_.layer[l];
      const int y1 = std::min(ly.height, ((by + 1) * kBlock) >> ly.sy);
      for (int y = (by * kBlock) >> ly.sy; y < y1; ++y)
        for (int c = 0; c < ly.channels; ++c) {
          const uint8_t *cur = cur_.ch[l][c].data() + size_t(y) * ly.width;
          const uint8_t *ref = ref_.ch[l][c].data() + size_t(y) * ly.width;
          for (int bx = 0; bx < bxs; ++bx) {
            if (coded[bx]) continue;
            const BlockSpan span = block_span(ly, bx);
            int far = 0;
            for (int x = span.x0; x < span.x1; ++x) far |= iabs(int(cur[x]) - int(ref[x])) > bound;
            coded[bx] = uint8_t(far);
          }
        }
    }
  });
  for (int by = 0; by < bys; ++by)
    for (int bx = 0; bx < bxs; ++bx) {
      // A sample's neighbours lie in its block and the blocks left, right
      // (above-right of a sample at the block's right edge), above-left,
      // above and above-right of it.
      uint8_t n = 0;
      for (int dy = 0; dy <= 1 && by + dy < bys; ++dy)
        for (int dx = -1; dx <= 1; ++dx)
          if (bx + dx >= 0 && bx + dx < bxs) n |= coded_[size_t(by + dy) * bxs + bx + dx];
      needed_[size_t(by) * bxs + bx] = n;
    }
}

void CpuEncoder::decide_modes(int threads) {
  const size_t n_blocks = modes_.size();
  std::vector<uint64_t> cost(n_blocks * kModes);
  // Two rounds: a first choice by a fixed cost per residual, then by the
  // costs of the tables that choice would produce (of the same symbols,
  // computed once).
  const long long n_tiles = (long long)tiles_.size();
  if (ids_.empty()) ids_.allocate(ls_);
  const int mode_of_class[kClasses] = {kSpatial, kTemporal, kTempSpat};
  const int class_of_mode[kModes] = {-1, kClassTemporal, kClassTempSpat, kClassSpatial};
  // The tiles column by column: the threads then work on tiles above each
  // other, not side by side, whose blocks' costs and proxy symbols would
  // share cache lines at their common edge (the threads take their first
  // rows at about the same time, and would take turns at those lines).
  const long long tiles_x = (ls_.blocks_x + geometry_.tile_bx - 1) / geometry_.tile_bx;
  const long long tiles_y = n_tiles / tiles_x;
  auto tile_order = [&](long long i) { return (i % tiles_y) * tiles_x + i / tiles_y; };
  // The cheapest mode of each block of a tile by `cost` (a block's costs
  // come from its tile alone).
  auto choose = [&](const Tile &t) {
    for (int by = t.by0; by < t.by1; ++by)
      for (int bx = t.bx0; bx < t.bx1; ++bx) {
        const size_t b = size_t(by) * ls_.blocks_x + size_t(bx);
        if (!coded_[b]) {
          modes_[b] = kSkip;
          continue;
        }
        const uint64_t *c = &cost[b * kModes];
        int best = kTemporal;
        if (c[kTempSpat] < c[best]) best = kTempSpat;
        if (c[kSpatial] < c[best]) best = kSpatial;
        modes_[b] = uint8_t(best);
      }
  };
  // Round 0, per tile while its proxy symbols are in the cache: the symbols,
  // the first choice, and the histograms of the symbols under that choice.
  const size_t n_ids = size_t(dl_.count) * kTokens;
  std::vector<uint32_t> hist(n_ids, 0);
  {
    std::vector<std::vector<uint32_t>> mine(size_t(std::max(1, threads)),
                                            std::vector<uint32_t>(n_ids, 0));
    parallel_each_in(n_tiles, threads, [&](long long i, int thread) {
      const long long ti = tile_order(i);
      const Tile &t = tiles_[ti];
      proxy_symbols(t, cost.data());
      choose(t);
      for_each_proxy_row(t, [&](size_t block, int cls, const uint16_t *ids, int n) {
        if (class_of_mode[modes_[block]] != cls) return;
        uint32_t *h = mine[size_t(thread)].data();
        for (int i = 0; i < n; ++i) h[ids[i]]++;
      });
    });
    for (const std::vector<uint32_t> &m : mine)
      for (size_t i = 0; i < n_ids; ++i) hist[i] += m[i];
  }
  // Costs from the histograms (with the raw bits: 256 per bit), then round
  // 1: each mode's cost by them, and the final choice.
  std::vector<uint32_t> id_cost(n_ids);  // per distribution and token: 1/256 bit
  for (int d = 0; d < dl_.count; ++d) {
    // Costs with one extra count per token, so that unseen tokens cost a lot but not infinity.
    uint32_t total = 0;
    for (int tk = 0; tk < kTokens; ++tk) total += hist[size_t(d) * kTokens + tk] + 1;
    const uint32_t lt = log2_q8(total);
    for (int tk = 0; tk < kTokens; ++tk)
      id_cost[size_t(d) * kTokens + tk] =
          lt - log2_q8(hist[size_t(d) * kTokens + tk] + 1) + 256u * uint32_t(kTokenExtra[tk]);
  }
  std::fill(cost.begin(), cost.end(), 0);
  const uint32_t *ic = id_cost.data();
  const int k = q_.k;
  parallel_each(n_tiles, threads, [&](long long i) {
    const long long ti = tile_order(i);
    const Tile &t = tiles_[ti];
    for_each_proxy_row(t, [&](size_t block, int cls, const uint16_t *ids, int n) {
      uint32_t sum = 0;
      for (int i = 0; i < n; ++i) sum += ic[ids[i]];
      cost[block * kModes + size_t(mode_of_class[cls])] += sum;
    });
    choose(t);
    // Indexed (docs/stream-format.md, "The encoder", step 4b): by the
    // chosen modes' costs; every block of the tile then spatial.
    if (k == 0) return;
    uint64_t est = 0;
    for (int by = t.by0; by < t.by1; ++by)
      for (int bx = t.bx0; bx < t.bx1; ++bx) {
        const size_t b = size_t(by) * ls_.blocks_x + size_t(bx);
        if (modes_[b] != kSkip) est += cost[b * kModes + modes_[b]];
      }
    if (!indexed_pays(int64_t(est), t.raw_bytes, k)) return;
    indexed_[size_t(ti)] = 1;
    for (int by = t.by0; by < t.by1; ++by)
      std::fill_n(modes_.begin() + long(size_t(by) * ls_.blocks_x + size_t(t.bx0)), t.bx1 - t.bx0,
                  uint8_t(kSpatial));
  });
}

// The symbols of a tile (its block modes, then each layer's samples in
// raster order; skipped samples hold no symbol) and their histogram. A tile
// whose blocks are all skipped has none and is marked skipped.
void CpuEncoder::tile_symbols(size_t ti) {
  if (!indexed_.empty() && indexed_[ti]) {  // a delta's indexed tile: none
    code_count_[ti] = 0;
    tile_hist_[ti].assign(size_t(dl_.count) * kTokens, 0);
    return;
  }
#if CODEC2_AVX2
  if (use_avx2()) return tile_symbols_avx2(ti);
#endif
  tile_symbols_inline<kBaseLanes>(ti);
}
#if CODEC2_AVX2
CODEC2_TARGET_AVX2 void CpuEncoder::tile_symbols_avx2(size_t ti) {
  tile_symbols_inline<16>(ti);
}
#endif
template <int VW>
CODEC2_ALWAYS_INLINE void CpuEncoder::tile_symbols_inline(size_t ti) {
  const Tile &t = tiles_[ti];
  std::vector<uint32_t> &codes = codes_[ti];
  std::vector<uint32_t> &h = tile_hist_[ti];
  h.assign(size_t(dl_.count) * kTokens, 0);
  const size_t n_modes = keyframe_ ? 0 : size_t(t.bx1 - t.bx0) * (t.by1 - t.by0);
  size_t total = n_modes;
  for (int l = 0; l < ls_.count; ++l) total += size_t(t.w[l]) * t.h[l] * ls_.layer[l].channels;
  if (codes.size() < total) codes.resize(total);
  code_count_[ti] = total;
  if (!keyframe_) {
    bool all_skip = true;
    size_t b = 0;
    for (int by = t.by0; by < t.by1; ++by)
      for (int bx = t.bx0; bx < t.bx1; ++bx) {
        const int m = modes_[size_t(by) * ls_.blocks_x + bx];
        all_skip &= m == kSkip;
        codes[b++] = uint32_t(dl_.mode) * kTokens + uint32_t(m);
        h[size_t(dl_.mode) * kTokens + m]++;
      }
    if (all_skip) {
      std::fill(h.begin(), h.end(), 0);
      code_count_[ti] = 0;
      tile_type_[ti] = 0;
      streams_[ti].clear();
      return;
    }
  }
  // The rows' checksum maps come with the vector paths (the scalar one
  // leaves them to encode_tile()).
  std::vector<uint64_t> &maps = row_maps_[ti];
  if (VW > 0) maps.resize(size_t(t.h[0]) + (ls_.count > 1 ? size_t(t.h[1]) : 0));
  size_t first = n_modes, first_row = 0;
  for (int l = 0; l < ls_.count; ++l) {
    uint32_t *layer_codes = codes.data() + first;
    uint64_t *layer_maps = VW > 0 ? maps.data() + first_row : nullptr;
    switch (ls_.layer[l].channels) {
      case 1:
        symbols_layer<VW, 1>(t, l, layer_codes, h.data(), layer_maps);
        break;
      case 2:
        symbols_layer<VW, 2>(t, l, layer_codes, h.data(), layer_maps);
        break;
      case 3:
        symbols_layer<VW, 3>(t, l, layer_codes, h.data(), layer_maps);
        break;
      default:
        symbols_layer<VW, 4>(t, l, layer_codes, h.data(), layer_maps);
    }
    first += size_t(t.w[l]) * t.h[l] * ls_.layer[l].channels;
    first_row += size_t(t.h[l]);
  }
}
// The symbols of layer `l` of a tile, its w x h samples in raster order
// from `codes`, NC components each, with neighbours from the
// reconstruction's working values and values from the input's.
template <int VW, int NC>
CODEC2_ALWAYS_INLINE void CpuEncoder::symbols_layer(const Tile &t, int l, uint32_t *codes,
                                                    uint32_t *hist, uint64_t *maps) {
  const Layer &ly = ls_.layer[l];
  const ClassPlanes cp[kClasses] = {class_planes(l, kClassSpatial, work_[l]),
                                    class_planes(l, kClassTemporal, work_[l]),
                                    class_planes(l, kClassTempSpat, work_[l])};
  const int class_of_mode[kModes] = {-1, kClassTemporal, kClassTempSpat, kClassSpatial};
  RowSymbols rs;
  for (int j = 0; j < t.h[l]; ++j) {
    const int y = t.y0[l] + j;
    const size_t brow = size_t((y << ly.sy) / kBlock) * ls_.blocks_x;
    uint32_t row_m = 1, row_v = 0;  // the row's checksum map (maps)
    if (j + kPrefetchRows < t.h[l]) {
      const size_t ahead = size_t(y + kPrefetchRows) * ly.width + size_t(t.x0[l]);
      const size_t n = size_t(t.w[l]);
      // Only the planes of the classes that row's blocks code in (a
      // delta's blocks are mostly temporal: its S-domain planes would take
      // as much memory traffic again, for nothing).
      const uint8_t *mrow =
          modes_.data() + size_t(((y + kPrefetchRows) << ly.sy) / kBlock) * ls_.blocks_x;
      bool spatial = false, temporal = false, refc = false;
      for (int bx = t.bx0; bx < t.bx1; ++bx) {
        spatial |= mrow[bx] == kSpatial;
        temporal |= mrow[bx] == kTemporal || mrow[bx] == kTempSpat;
        refc |= mrow[bx] == kTemporal;
      }
      for (int c = 0; c < NC; ++c) {
        if (spatial) {
          prefetch_run(work_[l].s[c].data() + ahead, n * sizeof(int16_t));
          prefetch_run(in_[l].s[c].data() + ahead, n * sizeof(int16_t));
        }
        if (temporal) {
          prefetch_run(work_[l].t[c].data() + ahead, n * sizeof(int16_t));
          prefetch_run(in_[l].t[c].data() + ahead, n * sizeof(int16_t));
        }
      }
      if (refc) prefetch_run(rclass_[l].data() + ahead, n);
    }
    for (int bx = t.bx0; bx < t.bx1; ++bx) {
      const BlockSpan span = block_span(ly, bx);
      const int n = span.x1 - span.x0;
      if (n <= 0) continue;
      uint32_t *out = codes + (size_t(j) * t.w[l] + size_t(span.x0 - t.x0[l])) * NC;
      const int mode = modes_[brow + size_t(bx)];
      if (mode == kSkip) {
        std::fill(out, out + size_t(n) * NC, kNoCode);
        continue;
      }
      const BlockRow br = block_row(ly, t, y, j, bx, span);
      row_symbols<VW, NC, true>(class_of_mode[mode], br, cp[class_of_mode[mode]], rs);
      for (int i = 0; i < n; ++i)
        for (int c = 0; c < NC; ++c) {
          const uint16_t id = rs.id[c][i];
          out[i * NC + c] = id | uint32_t(rs.bits[c][i]) << 16;
          hist[id]++;
        }
#if CODEC2_VECTORS
      if constexpr (VW > 0) {
        alignas(64) uint32_t m[kBlock], v[kBlock];
        checksum_maps_vec<VW, NC>(rs, 0, m, v);
        if (VW < kBlock && n > VW) checksum_maps_vec<VW, NC>(rs, VW, m, v);
        // The samples' maps composed in order: quarters of the block row
        // first (4 short chains of multiplications instead of one long one).
        for (int i = n; i < kBlock; ++i) m[i] = 1, v[i] = 0;
        uint32_t qm[4], qv[4];
        for (int q = 0; q < 4; ++q) {
          qm[q] = m[4 * q];
          qv[q] = v[4 * q];
          for (int i = 4 * q + 1; i < 4 * q + 4; ++i) {
            qm[q] *= m[i];
            qv[q] = qv[q] * m[i] + v[i];
          }
        }
        for (int q = 0; q < 4; ++q) {
          row_m *= qm[q];
          row_v = row_v * qm[q] + qv[q];
        }
      }
#endif
    }
    if (maps) maps[j] = row_m | uint64_t(row_v) << 32;
  }
}

// The model section: for each listed group a bit (any table used), then for
// each distribution of a used group: unused, the previous frame's table, a
// new one, or a copy of the last table listed before it, whichever costs
// least (ties in that order after unused).
void CpuEncoder::build_model(const uint32_t *hist, bool keyframe, BitWriter &bw, Model &model) {
  if (geometry_.tans_lanes) {
    build_palette_model(hist, keyframe, bw, model);
    return;
  }
  model.tans = false;
  model.palette.clear();
  model.palette_of.clear();
  model.tables.assign(dl_.count, Table{});
  int last_used = -1;
  for (const DistGroup &g : listed_groups(dl_, ls_, keyframe)) {
    bool any = false;
    for (int d = g.first; d < g.end && !any; ++d)
      for (int tk = 0; tk < kTokens; ++tk) any |= hist[size_t(d) * kTokens + tk] != 0;
    bw.put(any, 1);
    if (!any) continue;
    for (int d = g.first; d < g.end; ++d) {
      const uint32_t *h = &hist[size_t(d) * kTokens];
      Table fresh;
      table_from_histogram(h, &fresh);
      if (!fresh.used) {
        bw.put(0, 1);
        continue;
      }
      using detail::flagged_cost;
      using detail::kNeverCost;
      const uint64_t cost_reuse = keyframe || !prev_.tables[d].used
                                      ? kNeverCost
                                      : flagged_cost(coding_cost(h, prev_.tables[d]), 2);
      const uint64_t cost_copy = last_used < 0
                                     ? kNeverCost
                                     : flagged_cost(coding_cost(h, model.tables[last_used]),
                                                    detail::copy_flag_bits(keyframe));
      const uint64_t cost_new = coding_cost(h, fresh) + 256ull * (table_description_bits(fresh) +
                                                                  detail::new_flag_bits(keyframe));
      const int choice = detail::choose_table(cost_reuse, cost_copy, cost_new);
      if (choice == detail::kTablePrevious) {
        bw.put(1, 1), bw.put(0, 1);
        model.tables[d] = prev_.tables[d];
      } else if (choice == detail::kTableCopy) {
        bw.put(1, 1), bw.put(1, 1);
        if (!keyframe) bw.put(1, 1);
        model.tables[d] = model.tables[last_used];
      } else {
        bw.put(1, 1);
        if (!keyframe) bw.put(1, 1);
        bw.put(0, 1);
        write_table(bw, fresh);
        model.tables[d] = fresh;
      }
      last_used = d;
    }
  }
}

// c * log2_q8(c) for c below 2^16, made once (the palette's grouping asks
// for it millions of times per frame; log2_q8() takes eight squarings).
constexpr uint32_t kClogCount = 1u << 16;
const uint32_t *clog_q8_table() {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(kClogCount, 0);
    for (uint32_t c = 1; c < kClogCount; ++c) t[c] = c * log2_q8(c);  // < 2^29
    return t;
  }();
  return table.data();
}

// The bits (1/256 bit) that coding `n` counts `c` with their own
// frequencies takes: n log2 n - sum c log2 c (log2_q8()).
int64_t entropy_q8(const uint32_t *c) {
  const uint32_t *clog = clog_q8_table();
  uint64_t n = 0;
  int64_t sum = 0;
  for (int t = 0; t < kTokens; ++t) {
    const uint32_t v = c[t];
    n += v;
    sum += v < kClogCount ? int64_t(clog[v]) : int64_t(v) * int64_t(log2_q8(v));
  }
  return n ? int64_t(n) * int64_t(log2_q8(uint32_t(n))) - sum : 0;
}

// A palette table from summed counts: the levels of a new table (step 5),
// frequencies summing to kTansStates.
Table palette_table(const uint32_t *counts) {
  Table t;
  table_from_histogram(counts, &t, kTansStates);
  return t;
}

// Bits (1/256) of `hist` with a palette table; -1 when a token is missing.
int64_t palette_cost(const uint32_t *hist, const Table &t) {
  int64_t c = 0;
  for (int i = 0; i < kTokens; ++i) {
    if (!hist[i]) continue;
    if (i >= t.n || t.freq[i] == 0) return -1;
    c += int64_t(hist[i]) * (int64_t(kTansBits) * 256 - int64_t(log2_q8(t.freq[i])));
  }
  return c;
}

// The palette of a body with tANS lanes (docs/stream-format.md, "tANS lanes
// (flag 0x04)", the encoders' palette): the used distributions `used` (in
// the model's order) grouped into at most kTansPalette groups; returns
// each one's group, groups numbered in the order of their first members.
// used[alone] (the block modes; -1: none) keeps a group of its own (its
// table must have at most four tokens).
std::vector<int> palette_groups(const uint32_t *hist, const std::vector<int> &used, int alone) {
  const int u = int(used.size());
  std::vector<int> of(static_cast<size_t>(u));
  for (int i = 0; i < u; ++i) of[size_t(i)] = i;
  if (u > kTansPalette) {
    // Merge the two groups whose merge adds the fewest bits, until
    // kTansPalette remain (the lowest pair on ties; a merge keeps the lower).
    std::vector<std::array<uint32_t, kTokens>> sum(static_cast<size_t>(u));
    std::vector<int64_t> own(static_cast<size_t>(u));
    std::vector<uint8_t> alive(static_cast<size_t>(u), 1);
    for (int i = 0; i < u; ++i) {
      for (int t = 0; t < kTokens; ++t)
        sum[size_t(i)][t] = hist[size_t(used[size_t(i)]) * kTokens + t];
      own[size_t(i)] = entropy_q8(sum[size_t(i)].data());
    }
    auto merged = [&](int a, int b) {
      uint32_t c[kTokens];
      for (int t = 0; t < kTokens; ++t) c[t] = sum[size_t(a)][t] + sum[size_t(b)][t];
      return entropy_q8(c) - own[size_t(a)] - own[size_t(b)];
    };
    std::vector<int64_t> cost(static_cast<size_t>(u) * u, 0);
    for (int a = 0; a < u; ++a)
      for (int b = a + 1; b < u; ++b)
        if (a != alone && b != alone) cost[size_t(a) * u + b] = merged(a, b);
    // Each row's cheapest partner after it (the first on ties), so that the
    // cheapest pair overall (the first row's on ties: the lowest pair) is
    // found without scanning every pair at each merge.
    std::vector<int> best(static_cast<size_t>(u), -1);
    auto row_best = [&](int a) {
      int bb = -1;
      for (int b = a + 1; b < u; ++b)
        if (alive[size_t(b)] && b != alone &&
            (bb < 0 || cost[size_t(a) * u + b] < cost[size_t(a) * u + bb]))
          bb = b;
      best[size_t(a)] = bb;
    };
    for (int a = 0; a < u; ++a)
      if (a != alone) row_best(a);
    for (int groups = u; groups > kTansPalette; --groups) {
      int ba = -1;
      for (int a = 0; a < u; ++a) {
        const int b = best[size_t(a)];
        if (!alive[size_t(a)] || a == alone || b < 0) continue;
        if (ba < 0 || cost[size_t(a) * u + b] < cost[size_t(ba) * u + best[size_t(ba)]]) ba = a;
      }
      const int bb = best[size_t(ba)];
      for (int t = 0; t < kTokens; ++t) sum[size_t(ba)][t] += sum[size_t(bb)][t];
      own[size_t(ba)] = entropy_q8(sum[size_t(ba)].data());
      alive[size_t(bb)] = 0;
      for (int i = 0; i < u; ++i)
        if (of[size_t(i)] == bb) of[size_t(i)] = ba;
      for (int x = 0; x < u; ++x)
        if (alive[size_t(x)] && x != ba && x != alone)
          cost[size_t(std::min(x, ba)) * u + std::max(x, ba)] =
              merged(std::min(x, ba), std::max(x, ba));
      // Rows whose partner merged or died look again; rows before ba
      // compare their new cost with ba against their partner.
      row_best(ba);
      for (int a = 0; a < u; ++a) {
        if (!alive[size_t(a)] || a == alone || a == ba) continue;
        const int b = best[size_t(a)];
        if (b == ba || b == bb) {
          row_best(a);
        } else if (a < ba && (b < 0 || cost[size_t(a) * u + ba] < cost[size_t(a) * u + b] ||
                              (cost[size_t(a) * u + ba] == cost[size_t(a) * u + b] && ba < b))) {
          best[size_t(a)] = ba;
        }
      }
    }
    // Twice: each distribution to the group whose table codes it cheapest.
    for (int round = 0; round < 2; ++round) {
      std::vector<Table> tables(static_cast<size_t>(u));
      std::vector<std::array<uint32_t, kTokens>> counts(static_cast<size_t>(u));
      for (auto &c : counts) c.fill(0);
      for (int i = 0; i < u; ++i)
        for (int t = 0; t < kTokens; ++t)
          counts[size_t(of[size_t(i)])][t] += hist[size_t(used[size_t(i)]) * kTokens + t];
      for (int g = 0; g < u; ++g)
        if (alive[size_t(g)]) tables[size_t(g)] = palette_table(counts[size_t(g)].data());
      std::vector<int> next(of);
      for (int i = 0; i < u; ++i) {
        if (i == alone) continue;
        const uint32_t *h = hist + size_t(used[size_t(i)]) * kTokens;
        int64_t best = -1;
        for (int g = 0; g < u; ++g) {
          if (!alive[size_t(g)] || g == alone) continue;
          const int64_t c = palette_cost(h, tables[size_t(g)]);
          if (c >= 0 && (best < 0 || c < best)) best = c, next[size_t(i)] = g;
        }
      }
      of = next;
      std::fill(alive.begin(), alive.end(), 0);
      for (int i = 0; i < u; ++i) alive[size_t(of[size_t(i)])] = 1;
    }
  }
  // Number the groups in the order of their first members.
  std::vector<int> number(static_cast<size_t>(u), -1);
  int count = 0;
  for (int i = 0; i < u; ++i) {
    int &nb = number[size_t(of[size_t(i)])];
    if (nb < 0) nb = count++;
    of[size_t(i)] = nb;
  }
  return of;
}

// The model section of a body with tANS lanes: the palette (its tables from
// each group's summed counts), then for each listed group a bit (any
// distribution used) and for each distribution of a used group whether it
// is used and its table's number.
void CpuEncoder::build_palette_model(const uint32_t *hist, bool keyframe, BitWriter &bw,
                                     Model &model) {
  model.tables.assign(dl_.count, Table{});
  model.tans = true;
  model.palette_of.assign(dl_.count, -1);
  const std::vector<DistGroup> groups = listed_groups(dl_, ls_, keyframe);
  std::vector<int> used;
  for (const DistGroup &g : groups)
    for (int d = g.first; d < g.end; ++d)
      for (int t = 0; t < kTokens; ++t)
        if (hist[size_t(d) * kTokens + t]) {
          used.push_back(d);
          break;
        }
  const std::vector<int> of =
      palette_groups(hist, used, !used.empty() && used[0] == dl_.mode && !keyframe ? 0 : -1);
  int p = 0;
  for (int g : of) p = std::max(p, g + 1);
  std::vector<std::array<uint32_t, kTokens>> counts(size_t(std::max(p, 1)));
  for (auto &c : counts) c.fill(0);
  for (size_t i = 0; i < used.size(); ++i) {
    model.palette_of[size_t(used[i])] = int8_t(of[i]);
    for (int t = 0; t < kTokens; ++t)
      counts[size_t(of[i])][t] += hist[size_t(used[i]) * kTokens + t];
  }
  if (p == 0) {  // nothing coded: one table of token 0 (a palette has at least one)
    counts[0][0] = 1;
    p = 1;
  }
  model.palette.resize(size_t(p));
  bw.put(uint32_t(p - 1), 4);
  for (int g = 0; g < p; ++g) {
    model.palette[size_t(g)] = palette_table(counts[size_t(g)].data());
    write_table(bw, model.palette[size_t(g)]);
  }
  const int index_bits = p > 1 ? bit_length(uint32_t(p - 1)) + 1 : 0;
  for (const DistGroup &g : groups) {
    bool any = false;
    for (int d = g.first; d < g.end; ++d) any |= model.palette_of[size_t(d)] >= 0;
    bw.put(any, 1);
    if (!any) continue;
    for (int d = g.first; d < g.end; ++d) {
      const int i = model.palette_of[size_t(d)];
      bw.put(i >= 0, 1);
      if (i < 0) continue;
      bw.put(uint32_t(i), index_bits);
      // with rANS frequencies, for a later body
      model.tables[size_t(d)] = rescaled(model.palette[size_t(i)], kProbScale);
    }
  }
}

// f(std::integral_constant<int, NC>()) with NC a layer's channels (1 to 4):
// the layer steps of encode_tile() and encode_tile_tans(), which take NC as
// a template argument.
template <class F>
void with_channels(int channels, F f) {
  switch (channels) {
    case 1:
      f(std::integral_constant<int, 1>());
      break;
    case 2:
      f(std::integral_constant<int, 2>());
      break;
    case 3:
      f(std::integral_constant<int, 3>());
      break;
    default:
      f(std::integral_constant<int, 4>());
  }
}

// The steps of one layer of a tile in reverse schedule order, as
// rans_layer() takes them: per step and component (from the last), the raw
// bits of the lanes with a sample (from the last lane), then their tokens;
// raw(lane, code) and token(lane, code) for each.
template <int NC, class Raw, class Token>
void reverse_steps(const uint32_t *codes, int w, int h, int lanes, Raw raw, Token token) {
  const int period = schedule_period(w, lanes);
  const int steps = schedule_steps(w, h, lanes);
  int col[kMaxLanes], row[kMaxLanes];
  for (int ln = 0; ln < lanes; ++ln) {
    const int tt = steps - 1 - kStagger * ln;
    col[ln] = tt < 0 ? 0 : tt % period;
    row[ln] = tt < 0 ? -1 : tt / period * lanes + ln;
  }
  for (int st = steps - 1; st >= 0; --st) {
    const uint32_t *sample[kMaxLanes];
    int lane[kMaxLanes];
    int n = 0;
    for (int ln = 0; ln < lanes; ++ln) {
      if (row[ln] >= 0 && row[ln] < h && col[ln] < w) {
        const uint32_t *s = codes + (size_t(row[ln]) * w + col[ln]) * NC;
        if ((*s & 0xFFFF) != kNoCode) sample[n] = s, lane[n++] = ln;
      }
      if (--col[ln] < 0) {
        col[ln] = period - 1;
        row[ln] -= lanes;
      }
    }
    for (int c = NC - 1; c >= 0; --c) {
      for (int a = n - 1; a >= 0; --a) raw(lane[a], sample[a][c]);
      for (int a = n - 1; a >= 0; --a) token(lane[a], sample[a][c]);
    }
  }
}

// Development aid: the bits a lane would waste at its end if it took a
// word before each read whenever it held fewer than 20 bits (the most a
// read takes; a rule a GPU can follow before it knows what it reads), the
// encoder choosing the bits in the lane's first word (0..31) that waste
// the fewest: summed over the lanes of a tile. `items` as in
// encode_tile_tans().
uint64_t tans_eager_waste(const std::vector<uint32_t> &items, int lanes) {
  uint64_t waste = 0;
  for (int ln = 0; ln < lanes; ++ln) {
    uint32_t best = ~0u;
    for (uint32_t h = 0; h < 32; ++h) {
      uint32_t n = h;
      for (size_t i = items.size(); i-- > 0;) {
        if (int(items[i] & 31) != ln) continue;
        if (n < 20) n += 32;
        n -= (items[i] >> 5) & 31;
      }
      best = std::min(best, n);
    }
    waste += best;
  }
  return waste;
}

// A coded tile with tANS lanes (flag 0x04): each lane's reads backwards
// from its final state (items: lane | bits << 5 | value << 10, in
// reverse reading order; a symbol's token bits and raw bits are one read),
// then forwards: each lane's string of bits split into its fill and words,
// and the words put in the order the decoder's lanes take them. False when
// the payload is no smaller than the tile's bytes (the tile is then raw).
bool CpuEncoder::encode_tile_tans(size_t ti, int k, int lanes, size_t n_modes,
                                  const size_t *layer_first, const uint32_t *checksum, int thread) {
  const Tile &t = tiles_[ti];
  const uint32_t *const codes = codes_[ti].data();
  TansScratch &scratch = tans_scratch_[size_t(thread)];
  std::vector<uint32_t> &items = scratch.items;
  items.clear();
  uint32_t X[kMaxLanes], raw_bits[kMaxLanes] = {}, raw_n[kMaxLanes] = {};
  for (int ln = 0; ln < lanes; ++ln) X[ln] = kTansStates + tans_final_state(k, ln, checksum[ln]);
  auto token = [&](int ln, uint32_t code) {
    const TansTable *tb = tans_of_[(code & 0xFFFF) / kTokens];
    if (!tb) throw Error("codec2 encoder: a symbol of a distribution without a table");
    uint32_t bits, nb;
    X[ln] = tb->encode(X[ln], int(code & (kTokens - 1)), &bits, &nb);
    items.push_back(uint32_t(ln) | (nb + raw_n[ln]) << 5 | (bits | raw_bits[ln] << nb) << 10);
    raw_n[ln] = raw_bits[ln] = 0;
  };
  auto raw = [&](int ln, uint32_t code) {  // the symbol's raw bits, before its token
    raw_n[ln] = kTokenExtra[code & (kTokens - 1)];
    raw_bits[ln] = code >> 16;
  };
  for (int l = ls_.count - 1; l >= 0; --l) {
    const int w = t.w[l], h = t.h[l];
    if (w == 0 || h == 0) continue;
    const uint32_t *s = codes + layer_first[l];
    with_channels(ls_.layer[l].channels,
                  [&](auto nc) { reverse_steps<decltype(nc)::value>(s, w, h, lanes, raw, token); });
  }
  for (size_t b = n_modes; b-- > 0;) token(int(b % size_t(lanes)), codes[b]);
  for (int ln = lanes - 1; ln >= 0; --ln)
    items.push_back(uint32_t(ln) | uint32_t(kTansBits) << 5 | (X[ln] - kTansStates) << 10);

  // Forwards.
  uint64_t total[kMaxLanes] = {};
  for (uint32_t it : items) total[it & 31] += (it >> 5) & 31;
  uint32_t fill[kMaxLanes], held[kMaxLanes], head[kMaxLanes] = {}, accn[kMaxLanes] = {};
  uint64_t acc[kMaxLanes] = {};
  bool in_head[kMaxLanes];
  std::vector<uint32_t> *const words = scratch.words;
  for (int ln = 0; ln < lanes; ++ln) {
    words[ln].clear();
    fill[ln] = uint32_t(total[ln] % 32);
    held[ln] = fill[ln];
    in_head[ln] = true;
  }
  std::vector<uint8_t> &order = scratch.order;  // the lane that takes each word of the tile
  order.clear();
  for (size_t i = items.size(); i-- > 0;) {
    const uint32_t it = items[i], ln = it & 31, nb = (it >> 5) & 31;
    if (held[ln] < nb) {  // the decoder takes a word
      order.push_back(uint8_t(ln));
      held[ln] += 32;
    }
    held[ln] -= nb;
    acc[ln] |= uint64_t(it >> 10) << accn[ln];
    accn[ln] += nb;
    if (in_head[ln] && accn[ln] >= fill[ln]) {
      head[ln] = uint32_t(acc[ln] & ((uint64_t(1) << fill[ln]) - 1));
      acc[ln] >>= fill[ln];
      accn[ln] -= fill[ln];
      in_head[ln] = false;
    }
    if (!in_head[ln])
      for (; accn[ln] >= 32; accn[ln] -= 32, acc[ln] >>= 32) words[ln].push_back(uint32_t(acc[ln]));
  }
  if (!tans_eager_waste_.empty()) tans_eager_waste_[ti] = tans_eager_waste(items, lanes);
  size_t n_words = 0;
  for (int ln = 0; ln < lanes; ++ln) {
    if (in_head[ln] || accn[ln] != 0 || held[ln] != 0)
      throw Error("codec2 encoder: a tANS lane's bits do not add up");
    n_words += words[ln].size();
  }
  if (n_words != order.size()) throw Error("codec2 encoder: a tANS tile's words do not add up");
  BitWriter bw;
  for (int ln = 0; ln < lanes; ++ln) bw.put(fill[ln], kTansFillBits);
  for (int ln = 0; ln < lanes; ++ln) bw.put(head[ln], int(fill[ln]));
  const size_t size = bw.bytes().size() + 4 * n_words;
  if (size >= t.raw_bytes) {
    tile_type_[ti] = 2;
    streams_[ti].clear();
    return false;
  }
  std::vector<uint8_t> &out = streams_[ti];
  out.assign(bw.bytes().begin(), bw.bytes().end());
  out.resize(size);
  uint8_t *p = out.data() + bw.bytes().size();
  size_t next[kMaxLanes] = {};
  for (uint8_t ln : order) {
    const uint32_t w = words[ln][next[ln]++];
    for (int b = 0; b < 4; ++b) *p++ = uint8_t(w >> (8 * b));
  }
  return true;
}

// How many steps ahead the rANS steps prefetch a lane's codes.
constexpr int kCodesAhead = 16;

// The rANS steps of one layer of a tile (w x h samples of NC components
// from `codes`) in reverse schedule order, the lanes' states in `state`,
// the stream below p; returns the new p.
template <int NC>
uint8_t *rans_layer(const uint32_t *codes, int w, int h, int lanes,
                    const RansEncoder::Symbol *table, uint32_t *state, uint8_t *p) {
  const int period = schedule_period(w, lanes);
  const int steps = schedule_steps(w, h, lanes);
  // Lane ln codes row j = round * lanes + ln, column i at step
  // round * period + i + kStagger * ln (codec2_rules.h). Per lane at step
  // st, stepped backwards from the last step: its column, its row (< 0:
  // idle from there on; i >= w or j >= h: idle at this step) and where its
  // sample's symbols are (while it is not idle).
  int col[kMaxLanes], row[kMaxLanes];
  ptrdiff_t at[kMaxLanes];
  for (int ln = 0; ln < lanes; ++ln) {
    const int tt = steps - 1 - kStagger * ln;
    col[ln] = tt < 0 ? 0 : tt % period;
    row[ln] = tt < 0 ? -1 : tt / period * lanes + ln;
    at[ln] = (ptrdiff_t(row[ln]) * w + col[ln]) * NC;
  }
  static const uint32_t kSkipped = kNoCode;
  for (int st = steps - 1; st >= 0; --st) {
    // The lanes whose sample is coded at this step, in lane order (the
    // components of a sample are all coded or all skipped).
    const uint32_t *sample[kMaxLanes];
    uint32_t *x[kMaxLanes];
    int n = 0;
    for (int ln = 0; ln < lanes; ++ln) {
      // As rans_layer_avx2(): each lane's codes kCodesAhead steps ahead,
      // every 4 steps (less than a cache line).
      if ((st & 3) == 0) prefetch_run(codes + std::max<ptrdiff_t>(at[ln] - kCodesAhead * NC, 0), 1);
      const bool busy = row[ln] >= 0 && row[ln] < h && col[ln] < w;
      const uint32_t *s = busy ? codes + at[ln] : &kSkipped;
      sample[n] = s;
      x[n] = &state[ln];
      n += (*s & 0xFFFF) != kNoCode;
      at[ln] -= NC;
      if (--col[ln] < 0) {  // the lane's previous round
        col[ln] = period - 1;
        row[ln] -= lanes;
        at[ln] = (ptrdiff_t(row[ln]) * w + period - 1) * NC;
      }
    }
    // Per component: the raw bits of every lane (none: no change), then the tokens.
    for (int c = NC - 1; c >= 0; --c) {
      for (int a = n - 1; a >= 0; --a)
        p = RansEncoder::put_bits(*x[a], sample[a][c] >> 16,
                                  kTokenExtra[sample[a][c] & (kTokens - 1)], p);
      for (int a = n - 1; a >= 0; --a) p = RansEncoder::put(*x[a], table[sample[a][c] & 0xFFFF], p);
    }
  }
  return p;
}

#if CODEC2_AVX2
// Per 4 lanes, which send a byte (bits 0..3) and which a second one (bits
// 4..7): the byte shuffle that packs their bytes (lane 0's lowest; a
// lane's second byte, bits 8..15 of its state, before its first) at the
// end of 16 bytes, and their number.
struct EmitTable {
  uint8_t shuffle[256][16];
  uint8_t count[256];
  constexpr EmitTable() : shuffle(), count() {
    for (int key = 0; key < 256; ++key) {
      uint8_t seq[8] = {};
      int n = 0;
      for (int i = 0; i < 4; ++i) {
        if ((key >> i) & (key >> (4 + i)) & 1) seq[n++] = uint8_t(4 * i + 1);
        if ((key >> i) & 1) seq[n++] = uint8_t(4 * i);
      }
      for (int b = 0; b < 16; ++b) shuffle[key][b] = 0x80;
      for (int m = 0; m < n; ++m) shuffle[key][16 - n + m] = seq[m];
      count[key] = uint8_t(n);
    }
  }
};
constexpr EmitTable kEmitTable;

// RansEncoder::renorm()'s bytes for 8 lanes, lanes 7 to 0 in turn: lane i
// sends its state's low byte where one[i] is set and the byte above it
// too where two[i] is (masks of -1). 16 bytes are stored below p.
CODEC2_TARGET_AVX2 CODEC2_ALWAYS_INLINE uint8_t *emit8(__m256i x, __m256i one, __m256i two,
                                                       uint8_t *p) {
  const int m1 = _mm256_movemask_ps(_mm256_castsi256_ps(one));
  const int m2 = _mm256_movemask_ps(_mm256_castsi256_ps(two));
  const int hi = (m1 >> 4) | (m2 & 0xF0), lo = (m1 & 15) | (m2 & 15) << 4;
  const __m128i shuffle_hi =
      _mm_loadu_si128(reinterpret_cast<const __m128i *>(kEmitTable.shuffle[hi]));
  const __m128i shuffle_lo =
      _mm_loadu_si128(reinterpret_cast<const __m128i *>(kEmitTable.shuffle[lo]));
  _mm_storeu_si128(reinterpret_cast<__m128i *>(p - 16),
                   _mm_shuffle_epi8(_mm256_extracti128_si256(x, 1), shuffle_hi));
  p -= kEmitTable.count[hi];
  _mm_storeu_si128(reinterpret_cast<__m128i *>(p - 16),
                   _mm_shuffle_epi8(_mm256_castsi256_si128(x), shuffle_lo));
  return p - kEmitTable.count[lo];
}

// 8 lanes of 64 bits (lanes 0..3 in lo, 4..7 in hi) -> their low and high
// 32-bit halves, 8 lanes each.
CODEC2_TARGET_AVX2 CODEC2_ALWAYS_INLINE void split64(__m256i lo, __m256i hi, __m256i &low,
                                                     __m256i &high) {
  const __m256 a = _mm256_castsi256_ps(lo), b = _mm256_castsi256_ps(hi);
  low = _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(a, b, 0x88)), 0xD8);
  high = _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8);
}

// The AVX2 variant of rans_layer(): the same steps and bytes, 8 lanes per
// vector (G vectors). Every lane takes every step; a skipped sample or an
// idle lane takes the table's no-op entry and no raw bits. A token's entry
// comes from rans_vectors_ (RansVectorTable); the bytes of 8
// renormalisations are packed by a byte shuffle (EmitTable) and stored at
// once.
template <int NC, int G>
CODEC2_TARGET_AVX2 uint8_t *rans_layer_avx2(const uint32_t *codes, int w, int h, int lanes,
                                            const RansVectorTable &table, uint32_t *state,
                                            uint8_t *p) {
  const int period = schedule_period(w, lanes);
  const int steps = schedule_steps(w, h, lanes);
  // Per lane as in rans_layer(); lanes past `lanes` idle throughout.
  alignas(32) int col0[8 * G], row0[8 * G], at0[8 * G];
  for (int ln = 0; ln < 8 * G; ++ln) {
    const int tt = steps - 1 - kStagger * ln;
    col0[ln] = tt < 0 ? 0 : tt % period;
    row0[ln] = tt < 0 || ln >= lanes ? -1 : tt / period * lanes + ln;
    at0[ln] = (row0[ln] * w + col0[ln]) * NC;
  }
  __m256i x[G], col[G], row[G], at[G];
  for (int g = 0; g < G; ++g) {
    x[g] = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(state + 8 * g));
    col[g] = _mm256_load_si256(reinterpret_cast<const __m256i *>(col0 + 8 * g));
    row[g] = _mm256_load_si256(reinterpret_cast<const __m256i *>(row0 + 8 * g));
    at[g] = _mm256_load_si256(reinterpret_cast<const __m256i *>(at0 + 8 * g));
  }
  const __m256i zero = _mm256_setzero_si256(), minus_one = _mm256_set1_epi32(-1);
  const __m256i width = _mm256_set1_epi32(w), height = _mm256_set1_epi32(h);
  const __m256i low16 = _mm256_set1_epi32(0xFFFF), low5 = _mm256_set1_epi32(kTokens - 1);
  const __m256i low32 = _mm256_set1_epi64x(0xFFFFFFFF);
  const __m256i noop = _mm256_set1_epi32(int(table.entry.size() - 1));
  const __m256i skipped = _mm256_set1_epi32(int(kNoCode));
  const __m256i codes_ahead = _mm256_set1_epi32(kCodesAhead * NC);
  const long long *const entries = reinterpret_cast<const long long *>(table.entry.data());
  for (int st = steps - 1; st >= 0; --st) {
    // The lanes walk 8 * G rows of the tile's codes backwards at once, too
    // many streams for the hardware prefetchers, and the codes are no
    // longer in the cache (tile_symbols() ran over every tile since): each
    // step prefetches one group's samples kCodesAhead steps ahead, so each
    // lane every G steps (less than a cache line apart).
    {
      alignas(32) int ahead[8];
      _mm256_store_si256(reinterpret_cast<__m256i *>(ahead),
                         _mm256_max_epi32(_mm256_sub_epi32(at[st % G], codes_ahead), zero));
      for (int i = 0; i < 8; ++i)
        _mm_prefetch(reinterpret_cast<const char *>(codes + ahead[i]), _MM_HINT_T0);
    }
    __m256i busy[G];
    for (int g = 0; g < G; ++g)
      busy[g] = _mm256_and_si256(_mm256_and_si256(_mm256_cmpgt_epi32(row[g], minus_one),
                                                  _mm256_cmpgt_epi32(height, row[g])),
                                 _mm256_cmpgt_epi32(width, col[g]));
    for (int c = NC - 1; c >= 0; --c) {
      __m256i code[G];
      for (int g = 0; g < G; ++g)
        code[g] = _mm256_mask_i32gather_epi32(skipped, reinterpret_cast<const int *>(codes + c),
                                              at[g], busy[g], 4);
      // Raw bits (none: no byte, no change): x must be below 2^(31 - n),
      // n = token_extra_bits(): token / 2 - 5 from token 16 on.
      for (int g = G - 1; g >= 0; --g) {
        const __m256i token = _mm256_and_si256(code[g], low5);
        const __m256i n =
            _mm256_and_si256(_mm256_cmpgt_epi32(token, _mm256_set1_epi32(kDirectTokens - 1)),
                             _mm256_sub_epi32(_mm256_srli_epi32(token, 1), _mm256_set1_epi32(5)));
        const __m256i bits = _mm256_srli_epi32(code[g], 16);
        const __m256i one = _mm256_cmpgt_epi32(
            _mm256_srlv_epi32(x[g], _mm256_sub_epi32(_mm256_set1_epi32(31), n)), zero);
        const __m256i two = _mm256_cmpgt_epi32(
            _mm256_srlv_epi32(x[g], _mm256_sub_epi32(_mm256_set1_epi32(39), n)), zero);
        p = emit8(x[g], one, two, p);
        const __m256i sent =
            _mm256_slli_epi32(_mm256_sub_epi32(zero, _mm256_add_epi32(one, two)), 3);
        x[g] = _mm256_or_si256(_mm256_sllv_epi32(_mm256_srlv_epi32(x[g], sent), n), bits);
      }
      // Tokens: x must be below freq << 19.
      for (int g = G - 1; g >= 0; --g) {
        const __m256i idx = _mm256_min_epu32(_mm256_and_si256(code[g], low16), noop);
        __m256i r, f;
        split64(_mm256_i32gather_epi64(entries, _mm256_castsi256_si128(idx), 8),
                _mm256_i32gather_epi64(entries, _mm256_extracti128_si256(idx, 1), 8), r, f);
        const __m256i freq = _mm256_and_si256(f, _mm256_set1_epi32(0x1FFF));
        const __m256i cum = _mm256_and_si256(_mm256_srli_epi32(f, 13), _mm256_set1_epi32(0xFFF));
        const __m256i shift = _mm256_add_epi32(_mm256_srli_epi32(f, 25), _mm256_set1_epi32(31));
        const __m256i below = _mm256_sub_epi32(freq, _mm256_set1_epi32(1));
        const __m256i one = _mm256_cmpgt_epi32(_mm256_srli_epi32(x[g], 19), below);
        const __m256i two = _mm256_cmpgt_epi32(_mm256_srli_epi32(x[g], 27), below);
        p = emit8(x[g], one, two, p);
        const __m256i sent =
            _mm256_slli_epi32(_mm256_sub_epi32(zero, _mm256_add_epi32(one, two)), 3);
        const __m256i y = _mm256_srlv_epi32(x[g], sent);
        // RansEncoder::quotient() in the even lanes, then the odd ones.
        const __m256i even =
            _mm256_srlv_epi64(_mm256_mul_epu32(y, r), _mm256_and_si256(shift, low32));
        const __m256i odd =
            _mm256_srlv_epi64(_mm256_mul_epu32(_mm256_srli_epi64(y, 32), _mm256_srli_epi64(r, 32)),
                              _mm256_srli_epi64(shift, 32));
        const __m256i q = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
        x[g] = _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(q, kProbBits),
                                                 _mm256_sub_epi32(y, _mm256_mullo_epi32(q, freq))),
                                cum);
      }
    }
    // Each lane's previous sample, or the end of its previous round.
    for (int g = 0; g < G; ++g) {
      col[g] = _mm256_sub_epi32(col[g], _mm256_set1_epi32(1));
      const __m256i wrap = _mm256_cmpgt_epi32(zero, col[g]);
      col[g] = _mm256_add_epi32(col[g], _mm256_and_si256(wrap, _mm256_set1_epi32(period)));
      row[g] = _mm256_sub_epi32(row[g], _mm256_and_si256(wrap, _mm256_set1_epi32(lanes)));
      const __m256i round_end = _mm256_mullo_epi32(
          _mm256_add_epi32(_mm256_mullo_epi32(row[g], width), _mm256_set1_epi32(period - 1)),
          _mm256_set1_epi32(NC));
      at[g] = _mm256_blendv_epi8(_mm256_sub_epi32(at[g], _mm256_set1_epi32(NC)), round_end, wrap);
    }
  }
  for (int g = 0; g < G; ++g) _mm256_storeu_si256(reinterpret_cast<__m256i *>(state + 8 * g), x[g]);
  return p;
}
template <int NC>
CODEC2_TARGET_AVX2 uint8_t *rans_layer_avx2(const uint32_t *codes, int w, int h, int lanes,
                                            const RansVectorTable &table, uint32_t *state,
                                            uint8_t *p) {
  switch ((lanes + 7) / 8) {
    case 1:
      return rans_layer_avx2<NC, 1>(codes, w, h, lanes, table, state, p);
    case 2:
      return rans_layer_avx2<NC, 2>(codes, w, h, lanes, table, state, p);
    case 3:
      return rans_layer_avx2<NC, 3>(codes, w, h, lanes, table, state, p);
    default:
      return rans_layer_avx2<NC, 4>(codes, w, h, lanes, table, state, p);
  }
}
#endif

// rANS of one tile's symbols with the frame's tables (rans_symbols_) in
// reverse schedule order (the decoder reads them forwards). False when the
// stream is no smaller than the tile's bytes: the tile is then marked raw.
bool CpuEncoder::encode_tile(size_t ti, int k, int thread) {
  const Tile &t = tiles_[ti];
  // A tile that coding would not make smaller than its bytes
  // (coded_tile_bound(), from its histogram) is not coded.
  if (raw_bound_ && !pending_.tans) {  // the bound holds for rANS lanes
    double bits = 0.0, symbols = 0.0;
    const uint32_t *h = tile_hists_[ti];
    for (int d = 0; d < dl_.count; ++d, h += kTokens) {
      uint32_t n = 0;
      double part = 0.0;
      for (int tk = 0; tk < kTokens; ++tk)
        if (h[tk]) {
          n += h[tk];
          part += double(h[tk]) * (token_extra_bits(tk) - std::log2(double(h[tk])));
        }
      if (n) bits += part + double(n) * std::log2(double(n)), symbols += double(n);
    }
    if (coded_tile_bound(bits, symbols) >= double(t.raw_bytes)) {
      tile_type_[ti] = 2;
      bound_raw_[ti] = 1;
      streams_[ti].clear();
      return false;
    }
  }
  const uint32_t *const codes = codes_[ti].data();
  const size_t n_syms = code_count_[ti];
  const size_t n_modes = keyframe_ ? 0 : size_t(t.bx1 - t.bx0) * (t.by1 - t.by0);
  // The coded sample components and the skipped blocks, from the tile's
  // histogram; the lanes from those, and from the walk of a delta's tile
  // with skipped blocks (bounded_lanes()).
  uint32_t coded_samples = 0;
  for (int d = 0; d < dl_.count; ++d)
    if (d != dl_.mode)
      for (int tk = 0; tk < kTokens; ++tk)
        coded_samples += tile_hists_[ti][size_t(d) * kTokens + tk];
  const uint32_t per_lane = uint32_t(geometry_.lane_samples);
  const int skipped = n_modes ? int(tile_hists_[ti][size_t(dl_.mode) * kTokens + kSkip]) : 0;
  int lanes = lanes_for_tile(coded_samples, t.h[0], per_lane);
  if (skipped > 0 && geometry_.walk_bound > 0) {
    const uint8_t *const modes = modes_.data() + size_t(t.by0) * ls_.blocks_x + t.bx0;
    const int stride = ls_.blocks_x, bw = t.bx1 - t.bx0, w = t.w[0], h = t.h[0];
    const auto runs = [&](int by, int bx, int &a, int &b) {
      return coded_run(modes + size_t(by) * stride, bw, bx, a, b);
    };
    const int bound = walk_bound(w, h, uint32_t(t.raw_bytes), per_lane, geometry_.walk_bound);
    lanes = bounded_lanes(lanes, h, bound, [&](int n) { return tile_walk(w, h, n, bound, runs); });
  }
  tile_lanes_[ti] = lanes;
  size_t layer_first[kMaxLayers] = {};
  {
    size_t at = n_modes;
    for (int l = 0; l < ls_.count; ++l) {
      layer_first[l] = at;
      at += size_t(t.w[l]) * t.h[l] * ls_.layer[l].channels;
    }
  }
  // At most 2 bytes per token and per raw bits, 4 per lane at the end, and
  // renorm()'s slack.
  const size_t bound = 4 * size_t(lanes) + 4 * n_syms + 16;
  std::vector<uint8_t> &buf = rans_buffers_[size_t(thread)];
  if (buf.size() < bound) buf.resize(bound);
  uint8_t *const end = buf.data() + bound;
  // Each lane's symbols in its decoding order: its block modes, then its
  // rows layer by layer. Rows j0 .. j0 + lanes - 1 are lanes 0 .. lanes - 1:
  // their maps from tile_symbols(), or their symbols.
  uint32_t checksum[kMaxLanes] = {};
  for (size_t b = 0; b < n_modes; ++b)
    checksum[b % lanes] = checksum[b % lanes] * 33u + (codes[b] & (kTokens - 1));
  const uint64_t *maps = maps_ready_ ? row_maps_[ti].data() : nullptr;
  for (int l = 0; l < ls_.count; ++l) {
    const size_t row = size_t(t.w[l]) * ls_.layer[l].channels;
    for (int j0 = 0; j0 < t.h[l]; j0 += lanes) {
      const int rows = std::min(lanes, t.h[l] - j0);
      if (maps) {
        for (int g = 0; g < rows; ++g, ++maps)
          checksum[g] = checksum[g] * uint32_t(*maps) + uint32_t(*maps >> 32);
        continue;
      }
      const uint32_t *first = codes + layer_first[l] + size_t(j0) * row;
      int g = 0;
      for (; g + 8 <= rows; g += 8)
        checksum_rows<8>(first + size_t(g) * row, row, row, &checksum[g]);
      for (; g + 4 <= rows; g += 4)
        checksum_rows<4>(first + size_t(g) * row, row, row, &checksum[g]);
      for (; g < rows; ++g) checksum_rows<1>(first + size_t(g) * row, row, row, &checksum[g]);
    }
  }
  if (pending_.tans) return encode_tile_tans(ti, k, lanes, n_modes, layer_first, checksum, thread);
  // The lanes past `lanes` (which the AVX2 steps carry along idle) hold a
  // state that sends no byte.
  uint32_t state[kMaxLanes];
  for (int ln = 0; ln < kMaxLanes; ++ln)
    state[ln] = ln < lanes ? lane_final_state(k, ln, checksum[ln] & kChecksumMask) : kRansLow;
  const RansEncoder::Symbol *const table = rans_symbols_.data();
  uint8_t *p = end;
  for (int l = ls_.count - 1; l >= 0; --l) {
    const int w = t.w[l], h = t.h[l];
    if (w == 0 || h == 0) continue;
    const uint32_t *s = codes + layer_first[l];
    with_channels(ls_.layer[l].channels, [&](auto nc) {
      p = rans_layer_steps<decltype(nc)::value>(s, w, h, lanes, state, p);
    });
  }
  if (!keyframe_) {
    for (size_t b = n_modes; b-- > 0;) p = RansEncoder::put(state[b % lanes], table[codes[b]], p);
  }
  for (int ln = lanes - 1; ln >= 0; --ln) p = RansEncoder::flush(state[ln], p);
  const size_t coded = size_t(end - p);
  if (coded >= t.raw_bytes) {
    tile_type_[ti] = 2;
    streams_[ti].clear();
    return false;
  }
  streams_[ti].assign(p, end);
  return true;
}

// The rANS steps of one layer of a tile (rans_layer()), by the AVX2 steps
// where they are faster.
template <int NC>
uint8_t *CpuEncoder::rans_layer_steps(const uint32_t *codes, int w, int h, int lanes,
                                      uint32_t *state, uint8_t *p) {
#if CODEC2_AVX2
  // Every lane of the vectors takes every step: with few lanes (tiles with
  // few coded samples) the scalar steps, which skip idle lanes and skipped
  // samples, are faster (measured on vtest.avi at k = 0 and 20).
  if (use_avx2() && lanes > 16)
    return rans_layer_avx2<NC>(codes, w, h, lanes, rans_vectors_, state, p);
#endif
  return rans_layer<NC>(codes, w, h, lanes, rans_symbols_.data(), state, p);
}

// Development aid (CODEC2_DEBUG set): the ideal size of each layer, class
// and component with the frame's tables, on stderr.
void CpuEncoder::debug_sizes(const Model &model) {
  std::vector<uint64_t> hist(size_t(dl_.count) * kTokens, 0);
  for (size_t ti = 0; ti < tiles_.size(); ++ti)
    if (tile_type_[ti] == 1)
      for (size_t i = 0; i < hist.size(); ++i) hist[i] += tile_hists_[ti][i];
  for (int l = 0; l < ls_.count; ++l)
    for (int cls = 0; cls < kClasses; ++cls)
      for (int c = 0; c < ls_.layer[l].channels; ++c) {
        double bits = 0;
        uint64_t n = 0;
        for (int d = dl_.base[l][cls][c]; d < dl_.base[l][cls][c] + contexts_of(cls, c); ++d)
          for (int tk = 0; tk < kTokens; ++tk) {
            const uint64_t h = hist[size_t(d) * kTokens + tk];
            if (!h) continue;
            n += h;
            bits += double(h) *
                    (costs().of_freq[model.tables[d].freq[tk]] / 256.0 + token_extra_bits(tk));
          }
        if (n)
          std::fprintf(stderr, "layer %d class %d comp %d: %8.0f bytes, %7llu samples, %.2f b/s\n",
                       l, cls, c, bits / 8, (unsigned long long)n, bits / double(n));
      }
}

// A raw tile: its reconstruction's bytes (step 3), layer by layer, row by
// row, sample by sample, channel by channel.
void CpuEncoder::store_raw(size_t ti, uint8_t *out) {
  const Tile &t = tiles_[ti];
  size_t at = 0;
  for (int l = 0; l < ls_.count; ++l) {
    const Layer &ly = ls_.layer[l];
    for (int y = t.y0[l]; y < t.y0[l] + t.h[l]; ++y)
      for (int x = t.x0[l]; x < t.x0[l] + t.w[l]; ++x)
        for (int c = 0; c < ly.channels; ++c) out[at++] = rec_.ch[l][c][size_t(y) * ly.width + x];
  }
}

// indexed_pays()'s estimate from a tile's histogram.
int64_t CpuEncoder::tile_estimate_q8(const uint32_t *h) const {
  int64_t est = 0;
  for (int d = 0; d < dl_.count; ++d, h += kTokens) {
    uint32_t n = 0;
    for (int tk = 0; tk < kTokens; ++tk) {
      n += h[tk];
      est += indexed_count_q8(h[tk], tk);
    }
    est += indexed_total_q8(n);
  }
  return est;
}

// An indexed tile's reconstruction: the S-domain one of the input.
void CpuEncoder::index_tile(size_t ti, int k) {
  const Tile &t = tiles_[ti];
  for (int l = 0; l < ls_.count; ++l) {
    const Layer &ly = ls_.layer[l];
    for (int c = 0; c < ly.channels; ++c)
      for (int y = t.y0[l]; y < t.y0[l] + t.h[l]; ++y) {
        const size_t at = size_t(y) * ly.width + t.x0[l];
        const uint8_t *cur = cur_.ch[l][c].data() + at;
        uint8_t *rec = rec_.ch[l][c].data() + at;
        for (int i = 0; i < t.w[l]; ++i) rec[i] = uint8_t(dequant_index(quant_index(cur[i], k), k));
      }
  }
}

// A raw tile's `n` bytes (an indexed tile's reconstruction) as the indexed
// tile's words (codec2_rules.h, indexed_digits()).
static void pack_indexed(const uint8_t *bytes, size_t n, int k, uint8_t *out) {
  const uint32_t base = uint32_t(indexed_base(k));
  const size_t digits = size_t(indexed_digits(k));
  for (size_t i0 = 0; i0 < n; i0 += digits, out += 4) {
    uint32_t w = 0;
    for (size_t i = std::min(n, i0 + digits); i-- > i0;)
      w = w * base + uint32_t(quant_index(bytes[i], k));
    for (int b = 0; b < 4; ++b) out[b] = uint8_t(w >> (8 * b));
  }
}

FrameStats CpuEncoder::encode(const FrameView &frame, int threshold, bool keyframe,
                              HostBytes &body) {
  validate(frame, "codec2 encoder input");
  if (frame.format != format_ || frame.width != width_ || frame.height != height_)
    throw Error("codec2 encoder: frame does not match the encoder's format and size");
  if (threshold < 0 || threshold > 255) throw Error("codec2 encoder: threshold not in 0..255");
  if (!keyframe && !has_reference_) throw Error("codec2 encoder: a delta needs a previous frame");
  // The finer quantisers, with the dead zone in deltas (codec2_rules.h,
  // encoder_k(), keyframe_k()).
  const int k = frame_k(threshold, keyframe);
  q_.set(k, threshold);
  threshold_ = threshold;
  keyframe_ = keyframe;
  extract(frame, ls_, cur_);
  size_t samples = 0;
  for (int l = 0; l < ls_.count; ++l) samples += size_t(ls_.layer[l].width) * ls_.layer[l].height;
  const int threads = default_threads(samples, tiles_.size());

  // 1. Blocks to code (deltas: those with a byte more than the threshold
  // from the reference; the others are skipped and cost only this
  // comparison), the
  // working values of the input where they are read, the reference's
  // texture where it is read.
  find_coded_blocks(keyframe, threads);
  const uint8_t *needed = keyframe ? nullptr : needed_.data();
  for (int l = 0; l < ls_.count; ++l) {
    if (keyframe)
      rclass_[l].clear();
    else
      reference_classes(ls_, l, ref_, k, geometry_, coded_.data(), threads, rclass_[l]);
    working_values(ls_, l, q_, true, threshold, cur_, keyframe ? nullptr : &ref_, needed, threads,
                   in_[l]);
  }

  // 2. Block modes, and a delta's indexed tiles.
  indexed_.assign(tiles_.size(), 0);
  if (keyframe)
    std::fill(modes_.begin(), modes_.end(), uint8_t(kSpatial));
  else
    decide_modes(threads);

  // 3. Reconstruction and its working values (what the decoder will see).
  VectorQuantizer vq;
  vq.div = StepDivision(k);
  vq.k = k;
  vq.dead = threshold;
  for (int l = 0; l < ls_.count; ++l) {
    const Layer &ly = ls_.layer[l];
    for_each_block_span(ls_, l, nullptr, threads, [&](int y, int, int) {
      const uint8_t *mrow = modes_.data() + size_t((y << ly.sy) / kBlock) * ls_.blocks_x;
      for (int c = 0; c < ly.channels; ++c) {
        const size_t row = size_t(y) * ly.width;
        const uint8_t *cur = cur_.ch[l][c].data() + row, *ref = ref_.ch[l][c].data() + row;
        uint8_t *rec = rec_.ch[l][c].data() + row;
#if CODEC2_AVX2
        if (use_avx2()) {
          reconstruct_row_avx2(q_, vq, ly, ls_.blocks_x, mrow, cur, ref, rec);
          continue;
        }
#endif
        reconstruct_row_base(q_, vq, ly, ls_.blocks_x, mrow, cur, ref, rec);
      }
    });
    working_values(ls_, l, q_, false, threshold, rec_, keyframe ? nullptr : &ref_, needed, threads,
                   work_[l]);
  }

  // 4. Symbols and their histograms, per tile.
  const size_t n_tiles = tiles_.size();
  codes_.resize(n_tiles);
  code_count_.resize(n_tiles);
  tile_hist_.resize(n_tiles);
  row_maps_.resize(n_tiles);
  streams_.resize(n_tiles);
  tile_type_.assign(n_tiles, 1);
  parallel_each((long long)n_tiles, threads, [&](long long ti) { tile_symbols(size_t(ti)); });
  std::vector<const uint32_t *> hists(n_tiles);
  for (size_t ti = 0; ti < n_tiles; ++ti) hists[ti] = tile_hist_[ti].data();

  // 4b. A keyframe's tiles that coding would not make smaller than their
  // indices (indexed_pays(), by their histograms) are indexed: their
  // reconstruction becomes the S-domain one of the input
  // (docs/stream-format.md, "The encoder", step 4b; a delta's were found
  // with its modes).
  if (k > 0 && keyframe) {
    parallel_each((long long)n_tiles, threads, [&](long long ti) {
      if (code_count_[size_t(ti)] > 0 &&
          indexed_pays(tile_estimate_q8(tile_hist_[size_t(ti)].data()),
                       tiles_[size_t(ti)].raw_bytes, k)) {
        indexed_[size_t(ti)] = 1;
        index_tile(size_t(ti), k);
      }
    });
  }

  // 5.-8. Tables, tiles, the body.
  maps_ready_ = CODEC2_VECTORS;
  tile_hists_ = hists.data();
  FrameStats st = write_tiles(
      keyframe, k, modes_.data(), [&](size_t ti, uint8_t *out) { store_raw(ti, out); }, body);
  st.threshold = threshold;
  if (!keyframe) st.changed_bytes = count_changed(threads);
  std::swap(ref_, rec_);
  has_reference_ = true;
  return st;
}

// Another backend's symbols: as codes, then as the encoder's own.
FrameStats CpuEncoder::write_body(bool keyframe, int k, const uint8_t *modes,
                                  const TileSymbols *tiles,
                                  const std::function<void(size_t, uint8_t *)> &raw,
                                  HostBytes &body) {
  const size_t n_tiles = tiles_.size();
  codes_.resize(n_tiles);
  code_count_.resize(n_tiles);
  std::vector<const uint32_t *> hists(n_tiles);
  for (size_t ti = 0; ti < n_tiles; ++ti) {
    codes_[ti].resize(tiles[ti].count);
    for (size_t i = 0; i < tiles[ti].count; ++i) codes_[ti][i] = code_of(tiles[ti].symbols[i]);
    code_count_[ti] = tiles[ti].count;
    hists[ti] = tiles[ti].hist;
  }
  maps_ready_ = false;
  tile_hists_ = hists.data();
  indexed_.clear();
  return write_tiles(keyframe, k, modes, raw, body);
}

// The body from codes_, code_count_ and tile_hists_ (and row_maps_ when
// maps_ready_).
FrameStats CpuEncoder::write_tiles(bool keyframe, int k, const uint8_t *modes,
                                   const std::function<void(size_t, uint8_t *)> &raw,
                                   HostBytes &body) {
  keyframe_ = keyframe;
  const size_t n_tiles = tiles_.size();
  size_t samples = 0;
  for (int l = 0; l < ls_.count; ++l) samples += size_t(ls_.layer[l].width) * ls_.layer[l].height;
  const int threads = default_threads(samples, n_tiles);
  streams_.resize(n_tiles);
  tile_type_.assign(n_tiles, 1);
  tile_lanes_.assign(n_tiles, 1);
  const bool indexed = indexed_.size() == n_tiles;
  for (size_t ti = 0; ti < n_tiles; ++ti)
    if (indexed && indexed_[ti]) {
      tile_type_[ti] = 3;
    } else if (code_count_[ti] == 0) {  // every block skipped
      tile_type_[ti] = 0;
      streams_[ti].clear();
    }

  // 5. Tables from the histograms of the tiles not skipped, then each
  // tile's stream. Tiles that come out no smaller than their bytes are
  // stored raw (their reconstruction's bytes); the tables stay as they are,
  // so that they and the reference are final before the entropy coding
  // (docs/stream-format.md, "The encoder", step 8).
  {
    std::vector<uint32_t> hist(size_t(dl_.count) * kTokens, 0);
    for (size_t ti = 0; ti < n_tiles; ++ti)
      if (tile_type_[ti] == 1)
        for (size_t i = 0; i < hist.size(); ++i) hist[i] += tile_hists_[ti][i];
    make_tables(keyframe, hist.data(), nullptr);
    rans_symbols_.resize(size_t(dl_.count) * kTokens);
    for (int d = 0; d < dl_.count; ++d)
      for (int tk = 0; tk < kTokens; ++tk)
        rans_symbols_[size_t(d) * kTokens + tk] =
            RansEncoder::symbol(pending_.tables[d].freq[tk], pending_.tables[d].cum[tk]);
#if CODEC2_AVX2
    if (use_avx2()) rans_vectors_.assign(rans_symbols_);
#endif
    if (pending_.tans) {
      tans_tables_.resize(pending_.palette.size());
      for (size_t i = 0; i < tans_tables_.size(); ++i)
        tans_tables_[i].build(pending_.palette[i].freq, pending_.palette[i].n);
      tans_of_.assign(size_t(dl_.count), nullptr);
      for (int d = 0; d < dl_.count; ++d)
        if (pending_.palette_of[size_t(d)] >= 0)
          tans_of_[size_t(d)] = &tans_tables_[size_t(pending_.palette_of[size_t(d)])];
    }
    bound_raw_.assign(n_tiles, 0);
    if (pending_.tans && std::getenv("CODEC2_DEBUG_TANS_EAGER"))
      tans_eager_waste_.assign(n_tiles, 0);
    parallel_each_in((long long)n_tiles, threads, [&](long long ti, int thread) {
      if (tile_type_[ti] == 1) encode_tile(size_t(ti), k, thread);
    });
  }
  std::vector<uint8_t> bytes;
  for (size_t ti = 0; ti < n_tiles; ++ti)
    if (tile_type_[ti] == 2) {
      streams_[ti].resize(tiles_[ti].raw_bytes);
      raw(ti, streams_[ti].data());
    } else if (tile_type_[ti] == 3) {
      bytes.resize(tiles_[ti].raw_bytes);
      raw(ti, bytes.data());
      streams_[ti].resize(size_t(indexed_bytes(bytes.size(), k)));
      pack_indexed(bytes.data(), bytes.size(), k, streams_[ti].data());
    }
  if (std::getenv("CODEC2_DEBUG")) debug_sizes(pending_);
  if (!tans_eager_waste_.empty()) {
    uint64_t waste = 0, lanes = 0;
    for (size_t ti = 0; ti < n_tiles; ++ti)
      if (tile_type_[ti] == 1) waste += tans_eager_waste_[ti], lanes += uint64_t(tile_lanes_[ti]);
    size_t bytes = 0;
    for (size_t ti = 0; ti < n_tiles; ++ti) bytes += streams_[ti].size();
    std::fprintf(stderr, "tans eager: %llu lanes, %llu bits wasted, payloads %zu bytes\n",
                 (unsigned long long)lanes, (unsigned long long)waste, bytes);
  }
  std::vector<size_t> sizes(n_tiles);
  for (size_t ti = 0; ti < n_tiles; ++ti) sizes[ti] = streams_[ti].size();
  FrameStats st = assemble(
      keyframe, k, modes, tile_type_.data(), tile_lanes_.data(), sizes.data(),
      [&](uint8_t *p) {
        for (size_t ti = 0; ti < n_tiles; ++ti) {
          if (!streams_[ti].empty()) std::memcpy(p, streams_[ti].data(), streams_[ti].size());
          p += streams_[ti].size();
        }
      },
      body);
  st.raw_by_bound = uint32_t(std::count(bound_raw_.begin(), bound_raw_.end(), uint8_t(1)));
  tile_hists_ = nullptr;
  return st;
}

void CpuEncoder::make_tables(bool keyframe, const uint32_t *hist, uint32_t *freq_cum) {
  BitWriter bw;
  build_model(hist, keyframe, bw, pending_);
  model_bytes_ = bw.bytes();
  if (freq_cum)
    for (int d = 0; d < dl_.count; ++d)
      for (int tk = 0; tk < kTokens; ++tk)
        freq_cum[size_t(d) * kTokens + tk] =
            uint32_t(pending_.tables[d].cum[tk]) | uint32_t(pending_.tables[d].freq[tk]) << 16;
}

void CpuEncoder::set_tables(bool keyframe, const detail::ChosenTable *tables) {
  if (geometry_.tans_lanes)
    throw Error("codec2 encoder: tANS lanes take no tables chosen elsewhere");
  // The model section as build_model() writes it, from the choices.
  BitWriter bw;
  Model &model = pending_;
  model.tables.assign(dl_.count, Table{});
  int last_used = -1;
  for (const DistGroup &g : listed_groups(dl_, ls_, keyframe)) {
    bool any = false;
    for (int d = g.first; d < g.end; ++d) any |= tables[d].choice != detail::kTableUnused;
    bw.put(any, 1);
    if (!any) continue;
    for (int d = g.first; d < g.end; ++d) {
      const detail::ChosenTable &c = tables[d];
      if (c.choice == detail::kTableUnused) {
        bw.put(0, 1);
        continue;
      }
      if (c.choice == detail::kTablePrevious && !keyframe && prev_.tables[d].used) {
        bw.put(1, 1), bw.put(0, 1);
        model.tables[d] = prev_.tables[d];
      } else if (c.choice == detail::kTableCopy && last_used >= 0) {
        bw.put(1, 1), bw.put(1, 1);
        if (!keyframe) bw.put(1, 1);
        model.tables[d] = model.tables[last_used];
      } else if (c.choice == detail::kTableNew && c.n >= 1 && c.n <= kTokens) {
        Table t;
        t.n = c.n;
        std::copy(c.levels, c.levels + kTokens, t.levels);
        if (!normalize_levels(t.levels, t.n, t.freq))
          throw Error("codec2 encoder: a new table without tokens");
        t.used = true;
        t.finish();
        bw.put(1, 1);
        if (!keyframe) bw.put(1, 1);
        bw.put(0, 1);
        write_table(bw, t);
        model.tables[d] = t;
      } else {
        throw Error("codec2 encoder: a table choice the body cannot express");
      }
      last_used = d;
    }
  }
  model_bytes_ = bw.bytes();
}

FrameStats CpuEncoder::assemble(bool keyframe, int k, const uint8_t *modes, const int *types,
                                const int *lanes_of, const size_t *sizes,
                                const std::function<void(uint8_t *)> &payloads, HostBytes &body) {
  // 7. The body: header, tables, tile sizes, tile streams.
  const Geometry &g = geometry_;
  const size_t n_tiles = tiles_.size();
  FrameStats st;
  st.keyframe = keyframe;
  st.threshold = k;  // encode() sets its own
  st.k = k;
  std::vector<uint8_t> head(kBodyHeaderBytes + model_bytes_.size());
  head[0] = uint8_t((keyframe ? kBodyKeyframe : 0) | kBodyTileClasses |
                    (pending_.tans ? kBodyTansLanes : 0));
  head[1] = uint8_t(k);
  head[2] = uint8_t(g.tile_bx);
  head[3] = uint8_t(g.tile_by);
  std::copy(model_bytes_.begin(), model_bytes_.end(), head.begin() + kBodyHeaderBytes);
  st.model_bytes = head.size();
  std::vector<uint8_t> table;
  size_t payload = 0;
  for (size_t ti = 0; ti < n_tiles; ++ti) {
    const int type = types[ti];
    const size_t size = sizes[ti];
    st.tiles[type]++;
    const int lanes = type == 1 ? lanes_of[ti] : 1;
    if (type == 1) st.lanes += lanes;
    uint64_t v = (uint64_t(size) << 7) | uint64_t(lanes - 1) << 2 | uint64_t(type);
    do {
      const uint8_t byte = uint8_t(v & 0x7f);
      v >>= 7;
      table.push_back(uint8_t(byte | (v ? 0x80 : 0)));
    } while (v);
    payload += size;
  }
  st.table_bytes = table.size();
  body.resize(head.size() + table.size() + payload);
  uint8_t *p = body.data();
  std::memcpy(p, head.data(), head.size());
  p += head.size();
  std::memcpy(p, table.data(), table.size());
  p += table.size();
  payloads(p);
  st.body_bytes = body.size();
  for (size_t b = 0; b < size_t(ls_.blocks_x) * ls_.blocks_y; ++b) st.blocks[modes[b]]++;

  prev_ = pending_;
  return st;
}

// ---------------------------------------------------------------------------
// The decoder

#if CODEC2_AVX2
// RansDecoder::renorm_unchecked() of states x[0..n) in order, 8 at a time:
// each state's byte count (0, 1 or 2) and their prefix sum for where its
// bytes start; the 16 bytes that 8 states can take are loaded once and each
// state's two bytes picked out by a byte shuffle (no gather: a gather costs
// many times a shuffle on some CPUs). Needs 2 * n + 16 bytes left (a load
// reads 16 bytes from where the 8 states' bytes start). Entries past n of x
// (up to the next multiple of 8, inside x's kMaxLanes) are read and written
// but read no byte.
CODEC2_TARGET_AVX2 void renorm_avx2(uint32_t *x, int n, const uint8_t *&p) {
  const __m256i low = _mm256_set1_epi32(int(kRansLow)), low15 = _mm256_set1_epi32(1 << 15);
  const __m256i ctrl0 = _mm256_set1_epi32(int(0x80800001u));  // bytes a + 1, a, none, none
  const uint8_t *q = p;
  for (int k = 0; k < n; k += 8) {
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x + k));
    // States lie in [2^11, 2^31): signed compares are exact. Bytes needed:
    // (x < 2^23) + (x < 2^15).
    const __m256i one = _mm256_cmpgt_epi32(low, v), two = _mm256_cmpgt_epi32(low15, v);
    const __m256i cnt = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_add_epi32(one, two));
    // Inclusive prefix sum of the 8 counts, then each state's first byte.
    __m256i incl = _mm256_add_epi32(cnt, _mm256_slli_si256(cnt, 4));
    incl = _mm256_add_epi32(incl, _mm256_slli_si256(incl, 8));
    incl =
        _mm256_add_epi32(incl, _mm256_permute2x128_si256(_mm256_shuffle_epi32(incl, 0xFF),
                                                         _mm256_shuffle_epi32(incl, 0xFF), 0x08));
    const __m256i at = _mm256_sub_epi32(incl, cnt);  // 0..14 where a byte is taken
    // Bytes at and at + 1 of the window as the low 16 bits, big-endian.
    const __m256i window =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(q)));
    const __m256i w = _mm256_shuffle_epi8(
        window, _mm256_add_epi32(ctrl0, _mm256_add_epi32(at, _mm256_slli_epi32(at, 8))));
    const __m256i s = _mm256_slli_epi32(cnt, 3);  // 8 * bytes: 0, 8, 16
    v = _mm256_or_si256(_mm256_sllv_epi32(v, s),
                        _mm256_srlv_epi32(w, _mm256_sub_epi32(_mm256_set1_epi32(16), s)));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(x + k), v);
    // The bytes the live states took (those past n take none).
    const unsigned live = n - k >= 8 ? 0xFFu : (1u << (n - k)) - 1;
    q += __builtin_popcount(unsigned(_mm256_movemask_ps(_mm256_castsi256_ps(one))) & live) +
         __builtin_popcount(unsigned(_mm256_movemask_ps(_mm256_castsi256_ps(two))) & live);
  }
  p = q;
}

// The tokens of n coded samples, one component each: sample k's state
// xs[k] takes a symbol of table tab[k] (an address; RansDecoder::decode()
// without the renormalisation), tk[k] its token. ORs the symbols'
// frequencies into `spans` and returns the OR of the tokens. The search for
// the token by one 32-byte compare per half of the table's line.
CODEC2_TARGET_AVX2 uint32_t tokens_avx2(const uintptr_t *tab, uint32_t *xs, uint32_t *tk, int n,
                                        uint32_t &spans) {
  uint32_t tokens = 0, sp = 0;
  for (int k = 0; k < n; ++k) {
    const uint16_t *e = reinterpret_cast<const DecodeTable *>(tab[k])->e;
    const uint32_t x = xs[k], slot = x & (kProbScale - 1);
    const __m256i s = _mm256_set1_epi16(int16_t(slot));
    const __m256i *v = reinterpret_cast<const __m256i *>(e + 1);
    // Bytes of e[1..8], e[17..24], e[9..16], e[25..32] > slot, then in order.
    const __m256i g = _mm256_packs_epi16(_mm256_cmpgt_epi16(_mm256_load_si256(v), s),
                                         _mm256_cmpgt_epi16(_mm256_load_si256(v + 1), s));
    const uint32_t token = _tzcnt_u32(
        uint32_t(_mm256_movemask_epi8(_mm256_permute4x64_epi64(g, 0xD8))));  // bit 31 always
    const uint16_t *at = e + token;
    const uint32_t start = at[0], freq = at[1] - start;
    sp |= freq;
    xs[k] = freq * (x >> kProbBits) + slot - start;
    tk[k] = token;
    tokens |= token;
  }
  spans |= sp;
  return tokens;
}

// The raw bits after tokens tk[0..n) (any token, none below 16) from states
// xs, 8 at a time: each state loses token_extra_bits() bits, its checksum hs
// takes their value if there are any, and vs gets the token's value with
// them (token_value()). Entries past n (up to the next multiple of 8) are
// read and written.
CODEC2_TARGET_AVX2 void raw_bits_avx2(uint32_t *xs, uint32_t *hs, const uint32_t *tk, uint32_t *vs,
                                      int n) {
  const __m256i one = _mm256_set1_epi32(1);
  for (int k = 0; k < n; k += 8) {
    const __m256i t = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(tk + k));
    // token_extra_bits(): 3 + (t - 16) / 2 = t / 2 - 5 for t >= 16, else 0.
    const __m256i raw = _mm256_cmpgt_epi32(t, _mm256_set1_epi32(kDirectTokens - 1));
    const __m256i nb =
        _mm256_and_si256(raw, _mm256_sub_epi32(_mm256_srli_epi32(t, 1), _mm256_set1_epi32(5)));
    // token_value(t, 0): t below 16, else (2 | (t & 1)) << nb.
    const __m256i base = _mm256_blendv_epi8(
        t, _mm256_sllv_epi32(_mm256_or_si256(_mm256_set1_epi32(2), _mm256_and_si256(t, one)), nb),
        raw);
    __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xs + k));
    const __m256i bits = _mm256_and_si256(x, _mm256_sub_epi32(_mm256_sllv_epi32(one, nb), one));
    x = _mm256_srlv_epi32(x, nb);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(xs + k), x);
    // h * 33 + bits where there are raw bits.
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(hs + k));
    h = _mm256_add_epi32(h, _mm256_and_si256(raw, _mm256_add_epi32(_mm256_slli_epi32(h, 5), bits)));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(hs + k), h);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(vs + k), _mm256_or_si256(base, bits));
  }
}
#endif

#if CODEC2_SSE2
// The offset of the table of activity g's context from that of context 0:
// activity_bucket(g) tables, for g up to 80 (bucket 12 beyond).
struct BucketOffsets {
  uint16_t of[81];
  constexpr BucketOffsets() : of() {
    for (int g = 0; g <= 80; ++g) of[g] = uint16_t(kActivityTable.bucket[g] * sizeof(DecodeTable));
  }
};
constexpr BucketOffsets kBucketOffsets;
#endif

// floor(a / s) = (a * ceil(2^20 / s)) >> 20 for every step s = 2k + 1 of
// a byte k and every a up to 510 (the decoder's quant_index() and
// quant_diff() without a division): a * ceil(2^20 / s) / 2^20 exceeds a / s
// by less than 510 * 511 / 2^20 / s < 1 / s.
constexpr bool quotient20_is_exact() {
  for (uint32_t s = 1; s <= 511; s += 2) {
    const uint32_t recip = ((1u << 20) + s - 1) / s;
    for (uint32_t a = 0; a <= 510; ++a)
      if (((a * recip) >> 20) != a / s) return false;
  }
  return true;
}
static_assert(quotient20_is_exact(), "the decoder's division by multiplication is inexact");

// The class of each block mode but kSkip.
constexpr int kClassOfMode[kModes] = {kClassSpatial, kClassTemporal, kClassTempSpat, kClassSpatial};

// int16 per sample in the decoder's working values (S-domain components,
// then T-domain, then padding): a power of two, so that a sample's values
// are written by one store and read by one load of the same size (a load
// that spans several recent stores waits for them to reach the cache).
constexpr int work_stride(int channels) {
  return channels == 3 ? 8 : 2 * channels;
}

// The tile table of a body: per tile its type, lanes and payload offset
// (from the first payload; offset[n] is the payloads' total), and where the
// first payload starts in the body.
struct TileTable {
  std::vector<int> type, lanes;
  std::vector<size_t> offset;
  size_t payload_at = 0;
};

// The model section of a body with tANS lanes (flag 0x04): the palette,
// then each used distribution's table in it.
bool read_palette(const DistLayout &dl, const LayerSet &ls, bool keyframe, BitReader &br,
                  Model &model, std::string *why) {
  auto fail_with = [&](const char *reason) {
    *why = reason;
    return false;
  };
  uint32_t v;
  if (!br.get(4, &v)) return fail_with("truncated in its tables");
  const int p = int(v) + 1;
  // Each table as read (rANS frequencies, what a distribution keeps for a
  // later body) and in the palette.
  std::vector<Table> read(static_cast<size_t>(p));
  model.palette.assign(size_t(p), Table{});
  for (int i = 0; i < p; ++i) {
    if (!read_table(br, &read[size_t(i)])) return fail_with("damaged frequency table");
    model.palette[size_t(i)] = rescaled(read[size_t(i)], kTansStates);
  }
  const int index_bits = p > 1 ? bit_length(uint32_t(p - 1)) + 1 : 0;
  for (const DistGroup &g : listed_groups(dl, ls, keyframe)) {
    uint32_t any;
    if (!br.get(1, &any)) return fail_with("truncated in its tables");
    if (!any) continue;
    for (int d = g.first; d < g.end; ++d) {
      uint32_t used, index = 0;
      if (!br.get(1, &used)) return fail_with("truncated in its tables");
      if (!used) continue;
      if (!br.get(index_bits, &index)) return fail_with("truncated in its tables");
      if (int(index) >= p) return fail_with("a table number past the palette");
      model.palette_of[size_t(d)] = int8_t(index);
      model.tables[size_t(d)] = read[index];
    }
  }
  return true;
}

// Steps 2 and 3 of decoding a body (docs/stream-format.md, "Decoding a
// body"): its tables (`prev`: the previous frame's) and its tile table;
// false with the reason.
bool read_tables_and_tile_table(const DistLayout &dl, const LayerSet &ls,
                                const std::vector<Tile> &tiles, const BodyHeader &h,
                                const uint8_t *body, size_t n, const Model &prev, Model &model,
                                TileTable &tt, std::string *why) {
  auto fail_with = [&](const char *reason) {
    *why = reason;
    return false;
  };
  // Tables.
  BitReader br(body + kBodyHeaderBytes, n - kBodyHeaderBytes);
  model.tables.assign(dl.count, Table{});
  model.tans = h.geometry.tans_lanes;
  model.palette.clear();
  model.palette_of.assign(dl.count, -1);
  if (model.tans && !read_palette(dl, ls, h.keyframe, br, model, why)) return false;
  int last_used = -1;
  for (const DistGroup &g :
       model.tans ? std::vector<DistGroup>() : listed_groups(dl, ls, h.keyframe)) {
    uint32_t any;
    if (!br.get(1, &any)) return fail_with("truncated in its tables");
    if (!any) continue;
    for (int d = g.first; d < g.end; ++d) {
      uint32_t used, reuse = 0, copy = 0;
      if (!br.get(1, &used)) return fail_with("truncated in its tables");
      if (!used) continue;
      if (!h.keyframe) {
        if (!br.get(1, &reuse)) return fail_with("truncated in its tables");
        reuse = !reuse;  // 0: the previous frame's table
      }
      if (!reuse && !br.get(1, &copy)) return fail_with("truncated in its tables");
      if (reuse) {
        if (!prev.tables[d].used)
          return fail_with("reuses a table the previous frame did not have");
        model.tables[d] = prev.tables[d];
      } else if (copy) {
        if (last_used < 0) return fail_with("copies a table before the first one");
        model.tables[d] = model.tables[last_used];
      } else if (!read_table(br, &model.tables[d])) {
        return fail_with("damaged frequency table");
      }
      last_used = d;
    }
  }
  if (!h.keyframe && model.tables[dl.mode].used && model.tables[dl.mode].n > kModes)
    return fail_with("block-mode table with more than four modes");
  size_t at = kBodyHeaderBytes + br.bytes_used();

  // Tile sizes.
  const size_t n_tiles = tiles.size();
  std::vector<int> &type = tt.type, &lanes = tt.lanes;
  std::vector<size_t> &offset = tt.offset;
  type.assign(n_tiles, 0);
  lanes.assign(n_tiles, 1);
  offset.assign(n_tiles + 1, 0);
  size_t total = 0;
  for (size_t ti = 0; ti < n_tiles; ++ti) {
    uint64_t v = 0;
    int shift = 0;
    for (;;) {
      if (at >= n) return fail_with("truncated in its tile table");
      if (shift > 35) return fail_with("tile size too large");
      const uint8_t byte = body[at++];
      v |= uint64_t(byte & 0x7f) << shift;
      shift += 7;
      if (!(byte & 0x80)) break;
    }
    type[ti] = int(v & 3);
    lanes[ti] = int((v >> 2) & 31) + 1;
    const uint64_t size = v >> 7;
    if (type[ti] != 1 && lanes[ti] != 1) return fail_with("lanes given for an uncoded tile");
    if (type[ti] == 0 && (h.keyframe || size != 0)) return fail_with("bad skipped tile");
    if (type[ti] == 2 && size != tiles[ti].raw_bytes)
      return fail_with("raw tile of the wrong size");
    if (type[ti] == 3 && size != indexed_bytes(tiles[ti].raw_bytes, h.k))
      return fail_with("indexed tile of the wrong size");
    if (type[ti] == 1 &&
        size < (h.geometry.tans_lanes ? (uint64_t(kTansFillBits) * lanes[ti] + 7) / 8
                                      : 4u * lanes[ti]))
      return fail_with("coded tile shorter than its states");
    if (size > n) return fail_with("tile larger than the body");
    offset[ti] = total;
    total += size_t(size);
  }
  offset[n_tiles] = total;
  if (total != n - at) return fail_with("tile sizes do not add up to the body size");
  tt.payload_at = at;
  return true;
}

class CpuDecoder final : public Decoder {
 public:
  CpuDecoder(VideoFormat format, int width, int height) {
    format_ = format;
    width_ = width;
    height_ = height;
    ls_ = layers_of(format, width, height);
    if (ls_.count == 0) throw Error("codec2 decoder: unknown format or empty size");
    dl_ = DistLayout(ls_);
    // Staggered so that no plane of one shares cache sets with the other's.
    ref_.allocate(ls_, 0);
    rec_.allocate(ls_, kMaxLayers * kMaxComps / 2 - 1);
    for (int l = 0; l < ls_.count; ++l)
      work_[l].assign(
          size_t(ls_.layer[l].width) * ls_.layer[l].height * work_stride(ls_.layer[l].channels) + 8,
          0);
    modes_.assign(size_t(ls_.blocks_x) * ls_.blocks_y, kSpatial);
    prev_.tables.assign(dl_.count, Table{});
  }

  bool decode(const uint8_t *body, size_t n, std::string *error) override;

  void write_frame(const FrameView &out) override {
    validate(out, "codec2 decoder output");
    if (out.format != format_ || out.width != width_ || out.height != height_)
      throw Error("codec2 decoder: output frame does not match the stream's format and size");
    store(ref_, ls_, out);
  }

  void read_reference(HostBytes &out) override {
    out.resize(frame_size_packed(format_, width_, height_));
    store(ref_, ls_, packed_view(format_, width_, height_, out.data()));
  }

 private:
  bool decode_indexed(const Tile &t, const uint8_t *p);
  // tile_classes: the body's kBodyTileClasses (the reference classes' rule).
  // tans: the body's kBodyTansLanes.
  bool decode_tile(const Tile &t, int type, int lanes, const uint8_t *p, size_t size, bool keyframe,
                   bool tile_classes, bool tans);
  // TANS: the lanes are tANS lanes, read by `tr` (`state` their states,
  // `checksum` their symbols' checksums; `dec` unused); otherwise rANS lanes
  // (`tr` null).
  template <int NC, bool YCOCG, bool KEY, bool AVX2, bool TANS>
  CODEC2_ALWAYS_INLINE bool decode_layer(const Tile &t, int l, int lanes, uint32_t *state,
                                         uint32_t *checksum, RansDecoder &dec, TansReader *tr);
  template <bool AVX2, bool TANS>
  CODEC2_ALWAYS_INLINE bool decode_layers_inline(const Tile &t, bool keyframe, int lanes,
                                                 uint32_t *state, uint32_t *checksum,
                                                 RansDecoder &dec, TansReader *tr);
  bool decode_layers(const Tile &t, bool keyframe, int lanes, uint32_t *state, uint32_t *checksum,
                     RansDecoder &dec, TansReader *tr);
#if CODEC2_AVX2
  CODEC2_TARGET_AVX2 bool decode_layers_avx2(const Tile &t, bool keyframe, int lanes,
                                             uint32_t *state, uint32_t *checksum, RansDecoder &dec,
                                             TansReader *tr);
#endif

  LayerSet ls_;
  DistLayout dl_;
  Quantizer q_;
  Picture ref_, rec_;
  std::vector<DecodeTable> dtab_;  // the frame's tables, decoding form
  std::vector<TansTable> tans_;    // body flag 0x04: the palette
  std::vector<TansDist> tdist_;    // and each distribution's table in it
  // Working values of the picture being decoded, per sample: the S-domain
  // components, then the T-domain components.
  std::vector<int16_t> work_[kMaxLayers];
  std::vector<uint8_t> rclass_[kMaxLayers];
  std::vector<uint8_t> modes_;
  std::vector<uint32_t> order_;  // the order the tiles are handed to the threads
  Model prev_;
  std::vector<Tile> tiles_;
  Geometry tiles_geometry_{0, 0};
};

bool CpuDecoder::decode(const uint8_t *body, size_t n, std::string *error) {
  auto fail = [&](const std::string &why) {
    if (error) *error = "codec2 body: " + why;
    has_reference_ = false;  // deltas wait for the next keyframe
    return false;
  };
  BodyHeader h;
  std::string why;
  if (!read_body_header(body, n, &h, &why)) return fail(why);
  if (!h.keyframe && !has_reference_)
    return fail("a delta without a previous frame (waiting for a keyframe)");
  const Geometry &g = h.geometry;
  if (g.tile_bx != tiles_geometry_.tile_bx || g.tile_by != tiles_geometry_.tile_by) {
    tiles_ = make_tiles(ls_, g);
    tiles_geometry_ = g;
  }
  q_.set(h.k, h.k);

  // Tables and tile table.
  Model model;
  TileTable tt;
  if (!read_tables_and_tile_table(dl_, ls_, tiles_, h, body, n, prev_, model, tt, &why))
    return fail(why);
  const size_t at = tt.payload_at;
  const std::vector<int> &type = tt.type, &lanes = tt.lanes;
  const std::vector<size_t> &offset = tt.offset;
  const size_t n_tiles = tiles_.size();

  // Unused tables decode (any slot gives some token, the state stays) but
  // mark the tile bad.
  dtab_.resize(dl_.count);
  for (int d = 0; d < dl_.count; ++d) {
    if (model.tables[d].used)
      dtab_[d].set(model.tables[d]);
    else
      dtab_[d].set_unused();
  }
  if (model.tans) {
    tans_.resize(model.palette.size());
    for (size_t i = 0; i < tans_.size(); ++i)
      tans_[i].build(model.palette[i].freq, model.palette[i].n);
    tdist_.resize(dl_.count);
    for (int d = 0; d < dl_.count; ++d)
      tdist_[d].dec = model.palette_of[d] >= 0 ? tans_[size_t(model.palette_of[d])].dec
                                               : TansTable::unused().dec;
  }

  size_t samples = 0;
  for (int l = 0; l < ls_.count; ++l) samples += size_t(ls_.layer[l].width) * ls_.layer[l].height;
  const int threads = default_threads(samples, n_tiles);
  // The reference's texture classes: each tile computes those of its
  // temporal blocks (the only samples that read them) once their modes are known.
  for (int l = 0; l < ls_.count; ++l)
    rclass_[l].resize(h.keyframe ? 0 : size_t(ls_.layer[l].width) * ls_.layer[l].height);

  // Tiles, in parallel; the picture is replaced only when every tile decoded.
  // Largest payloads first (a coded tile's time grows with its bytes; raw
  // and skipped tiles are copies): the threads run out of work together.
  order_.resize(n_tiles);
  for (size_t ti = 0; ti < n_tiles; ++ti) order_[ti] = uint32_t(ti);
  if (threads > 1) {
    auto cost = [&](uint32_t ti) { return type[ti] & 1 ? offset[ti + 1] - offset[ti] : 0; };
    std::stable_sort(order_.begin(), order_.end(),
                     [&](uint32_t a, uint32_t b) { return cost(a) > cost(b); });
  }
  std::atomic<int> failed{0};
  parallel_each((long long)n_tiles, threads, [&](long long o) {
    const size_t ti = order_[o];
    if (!decode_tile(tiles_[ti], type[ti], lanes[ti], body + at + offset[ti],
                     offset[ti + 1] - offset[ti], h.keyframe, h.tile_classes, model.tans))
      failed.store(1, std::memory_order_relaxed);
  });
  if (failed.load()) return fail("a tile failed to decode (damaged data)");
  std::swap(ref_, rec_);
  prev_ = std::move(model);
  has_reference_ = true;
  return true;
}

// An indexed tile (type 3): each byte's S-domain index, digits of 32-bit
// words (indexed_digits() in codec2_rules.h), in a raw tile's order. A word
// larger than its digits allow fails the tile.
bool CpuDecoder::decode_indexed(const Tile &t, const uint8_t *p) {
  const int k = q_.k, n = indexed_base(k), digits = indexed_digits(k);
  const Div32 by_n = div32(uint32_t(n));
  uint32_t w = 0;
  int left = 0;  // digits left in w
  bool bad = false;
  for (int l = 0; l < ls_.count; ++l) {
    const Layer &ly = ls_.layer[l];
    const int nc = ly.channels;
    for (int y = t.y0[l]; y < t.y0[l] + t.h[l]; ++y) {
      const size_t at = size_t(y) * ly.width + t.x0[l];
      uint8_t *dst[kMaxComps];
      for (int c = 0; c < nc; ++c) dst[c] = rec_.ch[l][c].data() + at;
      for (int i = 0; i < t.w[l]; ++i)
        for (int c = 0; c < nc; ++c) {
          if (left == 0) {
            bad |= w != 0;
            w = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
            p += 4;
            left = digits;
          }
          const uint32_t q = by_n.div(w);
          const int u = int(w - q * uint32_t(n));
          w = q;
          --left;
          dst[c][i] = uint8_t(dequant_index(u, k));
        }
    }
  }
  return !bad && w == 0;
}

bool CpuDecoder::decode_tile(const Tile &t, int type, int lanes, const uint8_t *p, size_t size,
                             bool keyframe, bool tile_classes, bool tans) {
  // Skipped tiles: the reference's rows; raw tiles: the payload's samples.
  if (type == 0) {
    for (int l = 0; l < ls_.count; ++l) {
      const Layer &ly = ls_.layer[l];
      for (int c = 0; c < ly.channels; ++c)
        for (int y = t.y0[l]; y < t.y0[l] + t.h[l]; ++y) {
          const size_t at = size_t(y) * ly.width + t.x0[l];
          std::memcpy(rec_.ch[l][c].data() + at, ref_.ch[l][c].data() + at, size_t(t.w[l]));
        }
    }
    return true;
  }
  if (type == 2) {
    for (int l = 0; l < ls_.count; ++l) {
      const Layer &ly = ls_.layer[l];
      const int nc = ly.channels;
      for (int y = t.y0[l]; y < t.y0[l] + t.h[l]; ++y) {
        const size_t at = size_t(y) * ly.width + t.x0[l];
        for (int c = 0; c < nc; ++c) {
          uint8_t *dst = rec_.ch[l][c].data() + at;
          const uint8_t *src = p + c;
          for (int i = 0; i < t.w[l]; ++i) dst[i] = src[size_t(i) * nc];
        }
        p += size_t(t.w[l]) * nc;
      }
    }
    return true;
  }
  if (type == 3) return decode_indexed(t, p);
  RansDecoder dec{p + 4 * lanes, p + size};
  uint32_t state[kMaxLanes], checksum[kMaxLanes] = {};
  TansReader tr;
  uint32_t tans_flags = 0;  // bit 31: a token of an unused table
  if (tans) {
    // The lanes' fills and first bits, then the words; each lane's state.
    BitReader head(p, size);
    for (int ln = 0; ln < lanes; ++ln)
      if (!head.get(kTansFillBits, &tr.n[ln])) return false;
    for (int ln = 0; ln < lanes; ++ln) {
      uint32_t bits;
      if (!head.get(int(tr.n[ln]), &bits)) return false;
      tr.buf[ln] = bits;
    }
    const size_t head_bytes = head.bytes_used();
    uint32_t pad;
    if (!head.get(int(8 * head_bytes - head.bits_used()), &pad) || pad != 0) return false;
    if ((size - head_bytes) % 4 != 0) return false;
    tr.p = p + head_bytes;
    tr.end = p + size;
    for (int ln = 0; ln < lanes; ++ln) state[ln] = tr.take(ln, kTansBits);
  } else {
    for (int ln = 0; ln < lanes; ++ln) {
      state[ln] = uint32_t(p[4 * ln]) | uint32_t(p[4 * ln + 1]) << 8 |
                  uint32_t(p[4 * ln + 2]) << 16 | uint32_t(p[4 * ln + 3]) << 24;
      if (state[ln] < kRansLow || state[ln] >= (kRansLow << 8)) return false;
    }
  }
  // Block modes.
  const int tbw = t.bx1 - t.bx0;
  const int n_blocks = tbw * (t.by1 - t.by0);
  for (int b = 0; b < n_blocks; ++b) {
    const size_t at = size_t(t.by0 + b / tbw) * ls_.blocks_x + t.bx0 + b % tbw;
    if (keyframe) {
      modes_[at] = kSpatial;
      continue;
    }
    if (!dtab_[dl_.mode].used()) return false;
    uint32_t raw;
    modes_[at] = tans ? uint8_t(tr.symbol(b % lanes, state[b % lanes], tdist_[dl_.mode].dec,
                                          tans_flags, &raw))
                      : uint8_t(dec.get(state[b % lanes], dtab_[dl_.mode]));
    checksum[b % lanes] = lane_checksum(checksum[b % lanes], modes_[at]);
  }
  if (!keyframe)
    for (int l = 0; l < ls_.count; ++l) {
      const Layer &ly = ls_.layer[l];
      for (int y = t.y0[l]; y < t.y0[l] + t.h[l]; ++y) {
        const uint8_t *mrow = modes_.data() + size_t((y << ly.sy) / kBlock) * ls_.blocks_x;
        for (int bx = t.bx0; bx < t.bx1; ++bx)
          if (mrow[bx] == kTemporal) {
            const BlockSpan span = block_span(ly, bx);
            if (tile_classes)
              tile_reference_class_run_any(ly, ref_, l, q_.k, y, span.x0, span.x1, t.x0[l],
                                           t.x0[l] + t.w[l], t.y0[l], rclass_[l].data());
            else
              reference_class_span(ly, ref_, l, q_.k, y, span.x0, span.x1, rclass_[l].data());
          }
      }
    }
  bool ok;
  TansReader *const trp = tans ? &tr : nullptr;
#if CODEC2_AVX2
  if (use_avx2())
    ok = decode_layers_avx2(t, keyframe, lanes, state, checksum, dec, trp);
  else
#endif
    ok = decode_layers(t, keyframe, lanes, state, checksum, dec, trp);
  // Every lane must end where its encoder began, with every byte read.
  if (tans) {
    for (int ln = 0; ln < lanes; ++ln)
      if (state[ln] != tans_final_state(q_.k, ln, checksum[ln]) || tr.n[ln] != 0) ok = false;
    return ok && !(tans_flags >> 31) && !tr.underflow && tr.p == tr.end;
  }
  for (int ln = 0; ln < lanes; ++ln)
    if (state[ln] != lane_final_state(q_.k, ln, checksum[ln])) ok = false;
  if (dec.underflow || dec.p != dec.end) ok = false;
  return ok;
}

// Every layer of a coded tile (decode_layer() inlined, so that each
// variant below compiles it for its instruction set).
template <bool AVX2, bool TANS>
CODEC2_ALWAYS_INLINE bool CpuDecoder::decode_layers_inline(const Tile &t, bool keyframe, int lanes,
                                                           uint32_t *state, uint32_t *checksum,
                                                           RansDecoder &dec, TansReader *tr) {
  bool ok = true;
  for (int l = 0; l < ls_.count && ok; ++l) {
    const Layer &ly = ls_.layer[l];
    if (t.w[l] == 0 || t.h[l] == 0) continue;
    const int key = keyframe;
    switch (ly.channels * 4 + ly.ycocg * 2 + key) {
#define CODEC2_LAYER(NC, YC)                                                             \
  case NC * 4 + YC * 2 + 0:                                                              \
    ok = decode_layer<NC, YC, false, AVX2, TANS>(t, l, lanes, state, checksum, dec, tr); \
    break;                                                                               \
  case NC * 4 + YC * 2 + 1:                                                              \
    ok = decode_layer<NC, YC, true, AVX2, TANS>(t, l, lanes, state, checksum, dec, tr);  \
    break;
      CODEC2_LAYER(1, 0)
      CODEC2_LAYER(2, 0)
      CODEC2_LAYER(3, 1)
      CODEC2_LAYER(4, 1)
#undef CODEC2_LAYER
      default:
        ok = false;
    }
  }
  return ok;
}
bool CpuDecoder::decode_layers(const Tile &t, bool keyframe, int lanes, uint32_t *state,
                               uint32_t *checksum, RansDecoder &dec, TansReader *tr) {
  if (tr) return decode_layers_inline<false, true>(t, keyframe, lanes, state, checksum, dec, tr);
  return decode_layers_inline<false, false>(t, keyframe, lanes, state, checksum, dec, tr);
}
#if CODEC2_AVX2
CODEC2_TARGET_AVX2 bool CpuDecoder::decode_layers_avx2(const Tile &t, bool keyframe, int lanes,
                                                       uint32_t *state, uint32_t *checksum,
                                                       RansDecoder &dec, TansReader *tr) {
  if (tr) return decode_layers_inline<true, true>(t, keyframe, lanes, state, checksum, dec, tr);
  return decode_layers_inline<true, false>(t, keyframe, lanes, state, checksum, dec, tr);
}
#endif

// One layer of a coded tile, in the schedule's order (codec2_rules.h):
// NC components, YCOCG colour transform, KEY keyframe (no reference).
template <int NC, bool YCOCG, bool KEY, bool AVX2, bool TANS>
CODEC2_ALWAYS_INLINE bool CpuDecoder::decode_layer(const Tile &t, int l, int lanes, uint32_t *state,
                                                   uint32_t *checksum, RansDecoder &dec,
                                                   TansReader *tr) {
  constexpr int W2 = work_stride(NC);  // int16 per sample in work_: S-domain, T-domain
  const Layer &ly = ls_.layer[l];
  const int w = t.w[l], h = t.h[l], x0 = t.x0[l], y0 = t.y0[l];
  const ptrdiff_t stride = ly.width;
  const ptrdiff_t wstride = stride * W2;
  int16_t *work = work_[l].data();
  const uint8_t *modes = modes_.data();
  const int bx_count = ls_.blocks_x, sx = ly.sx, sy = ly.sy;
  const Quantizer &q = q_;
  const int step = 2 * q.k + 1;
  uint8_t *rec[kMaxComps];
  const uint8_t *ref[kMaxComps];
  for (int c = 0; c < NC; ++c) {
    rec[c] = rec_.ch[l][c].data();
    ref[c] = ref_.ch[l][c].data();
  }
  const uint8_t *rclass = KEY ? nullptr : rclass_[l].data();
  uintptr_t table0[kClasses][NC];  // context 0 of each class and component
  for (int cls = 0; cls < kClasses; ++cls)
    for (int c = 0; c < NC; ++c)
      table0[cls][c] = TANS ? reinterpret_cast<uintptr_t>(tdist_.data() + dl_.base[l][cls][c])
                            : reinterpret_cast<uintptr_t>(dtab_.data() + dl_.base[l][cls][c]);

  // Which blocks' samples neighbours will ask for in which domain: a sample
  // is a neighbour of samples in its own block and in the blocks left,
  // right, below-left, below and below-right of it; only spatial samples
  // read S-domain values, only temporal ones T-domain values.
  const int tbw = t.bx1 - t.bx0, tbh = t.by1 - t.by0;
  std::vector<uint8_t> need_blocks(size_t(tbw) * tbh);  // 1: S-domain, 2: T-domain
  uint8_t *need = need_blocks.data();
  for (int by = 0; by < tbh; ++by)
    for (int bx = 0; bx < tbw; ++bx) {
      uint8_t n = KEY ? 1 : 0;
      if (!KEY)
        for (int dy = 0; dy <= 1; ++dy)
          for (int dx = -1; dx <= 1; ++dx) {
            const int nx = bx + dx, ny = by + dy;
            if (nx < 0 || nx >= tbw || ny >= tbh) continue;
            const int m = modes[size_t(t.by0 + ny) * bx_count + t.bx0 + nx];
            n |= m == kSpatial ? 1 : m == kSkip ? 0 : 2;
          }
      need[by * tbw + bx] = n;
    }
  auto store_s = [&](size_t at) CODEC2_LAMBDA_INLINE {
    int ch[NC], comp[NC];
    for (int c = 0; c < NC; ++c) ch[c] = q.index[rec[c][at]];
    to_components(YCOCG, NC, ch, comp);
    for (int c = 0; c < NC; ++c) work[at * W2 + c] = int16_t(comp[c]);
  };

  // Skipped samples: the reference, block by block along each row.
  if (!KEY)
    for (int y = y0; y < y0 + h; ++y) {
      const int by = int(unsigned(y << sy) / kBlock);
      const uint8_t *mrow = modes + size_t(by) * bx_count;
      const uint8_t *nrow_need = need + size_t(by - t.by0) * tbw - t.bx0;
      for (int bx = t.bx0; bx < t.bx1; ++bx) {
        if (mrow[bx] != kSkip) continue;
        const BlockSpan span = block_span(ly, bx);
        const int xa = std::max(span.x0, x0), xb = std::min(span.x1, x0 + w);
        if (xa >= xb) continue;
        const size_t at = size_t(y) * stride + xa;
        for (int c = 0; c < NC; ++c) std::memcpy(rec[c] + at, ref[c] + at, size_t(xb - xa));
        const int nb = nrow_need[bx];
        if (nb & 1)
          for (size_t a = at; a < at + size_t(xb - xa); ++a) store_s(a);
        if (nb & 2)
          for (size_t a = at; a < at + size_t(xb - xa); ++a)
            for (int c = 0; c < NC; ++c) work[a * W2 + NC + c] = 0;
      }
    }

  const int period = schedule_period(w, lanes);
  const int steps = schedule_steps(w, h, lanes);
  // Per lane its position (column ci, row cj of the tile) and where its
  // row starts: in the layer (row_at), in the frame's block modes (mrow) and
  // in the tile's `need` (nrow), the latter two to be added to bcol[ci].
  struct Lane {
    size_t row_at;
    int ci, cj, mrow, nrow;
  } lane_pos[kMaxLanes];
  auto set_row = [&](Lane &L) CODEC2_LAMBDA_INLINE {
    const int y = y0 + L.cj;
    const int by = int(unsigned(y << sy) / kBlock);
    L.row_at = size_t(y) * stride + x0;
    L.mrow = by * bx_count;
    L.nrow = (by - t.by0) * tbw - t.bx0;
  };
  for (int ln = 0; ln < lanes; ++ln) {
    lane_pos[ln].ci = -kStagger * ln;
    lane_pos[ln].cj = ln;
    set_row(lane_pos[ln]);
  }
  std::vector<int> bcol_v(static_cast<size_t>(w));  // block column of each column of the tile
  for (int i = 0; i < w; ++i) bcol_v[i] = int(unsigned((x0 + i) << sx) / kBlock);
  const int *bcol = bcol_v.data();
  // The lanes' states, checksums and the byte stream in locals (nothing
  // else can write them, so they stay in registers across the stores below).
  uint32_t x_[kMaxLanes], h_[kMaxLanes];
  for (int ln = 0; ln < lanes; ++ln) {
    x_[ln] = state[ln];
    h_[ln] = checksum[ln];
  }
  RansDecoder rd = dec;
  // The coded samples of the current step, in lane order: where each lies
  // and, per component (arrays the compiler vectorises over the samples),
  // the table of its context (the address), its prediction and sign flip,
  // all computed when the step starts (a component's neighbours are
  // decoded by then; after the first component's tokens, the later ones'
  // tables move on by kActivityBuckets where its residual r0 is not 0),
  // then its value. With m = -flip (all ones or 0) the value
  // P + (flip ? -r : r) is (P - m) + (r ^ m): pm holds P - m. Entries past
  // the step's samples (up to a multiple of 8) are computed too and unused.
  struct Active {
    size_t at;
    int lane;
  } act[kMaxLanes];
  alignas(32) uintptr_t tab[NC][kMaxLanes] = {};
  alignas(32) int16_t pm[NC][kMaxLanes] = {}, m[NC][kMaxLanes] = {};
  alignas(32) int value[NC][kMaxLanes] = {};
  // For the reconstruction, per coded sample: its class, the domains its
  // neighbours need (deltas), the reference's bytes (deltas), then the
  // reconstructed bytes and both domains' working values.
  alignas(32) int cls_of[kMaxLanes] = {}, need_of[kMaxLanes] = {}, ref_of[NC][kMaxLanes] = {};
  alignas(32) int out_of[NC][kMaxLanes], s_of[NC][kMaxLanes], t_of[NC][kMaxLanes];
  // The reconstruction of a step's samples by a loop the compiler
  // vectorises with AVX2 (and NEON), whose 32-bit multiplications and
  // selections SSE2 lacks: with SSE2 sample by sample instead.
  constexpr bool kVectorRecon = AVX2 || !CODEC2_SSE2;
  // quant_index() and quant_diff() divide numbers up to 510 by the step:
  // floor(a / step) = (a * recip) >> 20 for those (quotient20_is_exact()).
  const uint32_t recip = ((1u << 20) + uint32_t(step) - 1) / uint32_t(step);
  uint32_t spans = 0;       // the OR of the frequencies of the symbols decoded
  uint32_t tans_flags = 0;  // TANS: the OR of the entries decoded (bit 31: an unused table)
  bool bad = false;
  static_assert(kCrossLevels == 2, "the cross context below is 13 * (r0 != 0)");

#if CODEC2_SSE2
  // A sample's working values (both domains) as one load of the size of
  // put_work()'s store; the vector's lanes past 2 * NC are 0 or unused.
  auto load_work = [](const int16_t *p) CODEC2_LAMBDA_INLINE {
    if constexpr (NC == 1) {
      int32_t v;
      std::memcpy(&v, p, 4);
      return _mm_cvtsi32_si128(v);
    } else if constexpr (NC == 2) {
      return _mm_loadl_epi64(reinterpret_cast<const __m128i *>(p));
    } else {
      return _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
    }
  };
#endif
  // A coded sample's working values, S-domain `sv` and T-domain `tv`, by one
  // store (the next samples read them as neighbours soon after).
  auto put_work = [](int16_t *p, const int *sv, const int *tv) CODEC2_LAMBDA_INLINE {
#if CODEC2_SSE2
    if constexpr (NC == 1) {
      const uint32_t v = uint32_t(uint16_t(sv[0])) | uint32_t(uint16_t(tv[0])) << 16;
      std::memcpy(p, &v, 4);
    } else if constexpr (NC == 2) {
      const uint64_t v = uint64_t(uint16_t(sv[0])) | uint64_t(uint16_t(sv[1])) << 16 |
                         uint64_t(uint16_t(tv[0])) << 32 | uint64_t(uint16_t(tv[1])) << 48;
      std::memcpy(p, &v, 8);
    } else if constexpr (NC == 3) {
      _mm_storeu_si128(reinterpret_cast<__m128i *>(p),
                       _mm_setr_epi16(int16_t(sv[0]), int16_t(sv[1]), int16_t(sv[2]),
                                      int16_t(tv[0]), int16_t(tv[1]), int16_t(tv[2]), 0, 0));
    } else {
      _mm_storeu_si128(
          reinterpret_cast<__m128i *>(p),
          _mm_setr_epi16(int16_t(sv[0]), int16_t(sv[1]), int16_t(sv[2]), int16_t(sv[3]),
                         int16_t(tv[0]), int16_t(tv[1]), int16_t(tv[2]), int16_t(tv[3])));
    }
#else
    for (int c = 0; c < NC; ++c) {
      p[c] = int16_t(sv[c]);
      p[NC + c] = int16_t(tv[c]);
    }
#endif
  };

  // Neighbours on the tile's edges (first row, first column, last column).
  auto edge_neighbours = [&](const int16_t *p, int i, int j, int &a, int &b, int &cc, int &d)
                             CODEC2_LAMBDA_INLINE {
                               if (j == 0) {
                                 a = i > 0 ? p[-W2] : 0;
                                 b = cc = d = a;
                               } else {
                                 b = p[-wstride];
                                 if (i > 0) {
                                   a = p[-W2];
                                   cc = p[-wstride - W2];
                                 } else {
                                   a = cc = b;
                                 }
                                 d = i + 1 < w ? p[-wstride + W2] : b;
                               }
                             };
  // Contexts of every component of a sample of class CLS (sample_context()
  // in codec2_rules.h without r0's part).
  auto contexts = [&](auto cls_tag, int idx, bool edge, int i, int j,
                      int rclass) CODEC2_LAMBDA_INLINE {
    const Active &A = act[idx];
    constexpr int CLS = decltype(cls_tag)::value;
    constexpr int off = CLS == kClassSpatial ? 0 : NC;  // the class's domain
    const int16_t *p = work + A.at * W2 + off;
#if CODEC2_SSE2
    if (!edge) {
      // Every component of both domains at once, in 8 int16 (working values
      // and these sums stay within +-6200; the lanes past 2 * NC are unused).
      const int16_t *q0 = work + A.at * W2;
      const __m128i a = load_work(q0 - W2);
      const __m128i b = load_work(q0 - wstride);
      const __m128i c = load_work(q0 - wstride - W2);
      const __m128i d = load_work(q0 - wstride + W2);
      const __m128i zero = _mm_setzero_si128();
      // The class's domain moved to lanes 0..NC-1.
      auto own = [](__m128i v) { return _mm_srli_si128(v, 2 * off); };
      __m128i gv, mv, pmv;
      if (CLS == kClassTemporal) {
        auto abs16 = [&](__m128i v) { return _mm_max_epi16(v, _mm_sub_epi16(zero, v)); };
        gv = own(
            _mm_add_epi16(_mm_add_epi16(abs16(a), abs16(b)), _mm_add_epi16(abs16(c), abs16(d))));
        const __m128i sum = _mm_add_epi16(_mm_add_epi16(a, b), _mm_add_epi16(c, d));
        mv = own(_mm_cmplt_epi16(sum, zero));
        pmv = _mm_sub_epi16(zero, mv);
      } else {
        auto absdiff = [&](__m128i u, __m128i v) CODEC2_LAMBDA_INLINE {
          return _mm_sub_epi16(_mm_max_epi16(u, v), _mm_min_epi16(u, v));
        };
        const __m128i mx = _mm_max_epi16(a, b), mn = _mm_min_epi16(a, b);
        const __m128i ab = _mm_add_epi16(a, b);
        const __m128i pred = _mm_max_epi16(_mm_min_epi16(_mm_sub_epi16(ab, c), mx), mn);
        gv = own(_mm_add_epi16(_mm_add_epi16(absdiff(a, b), absdiff(b, c)),
                               _mm_add_epi16(absdiff(c, a), absdiff(b, d))));
        mv = own(_mm_cmplt_epi16(_mm_sub_epi16(ab, _mm_add_epi16(c, c)), zero));
        pmv = _mm_sub_epi16(own(pred), mv);
      }
      // The activities up to 80 (as unsigned: >= 0 unless the tile is
      // already bad).
      const __m128i g80 = _mm_subs_epu16(gv, _mm_subs_epu16(gv, _mm_set1_epi16(80)));
      auto lane = [](__m128i v, auto k_tag)
                      CODEC2_LAMBDA_INLINE { return _mm_extract_epi16(v, decltype(k_tag)::value); };
      auto put = [&](auto k_tag) CODEC2_LAMBDA_INLINE {
        constexpr int k = decltype(k_tag)::value;
        uintptr_t offset = kBucketOffsets.of[lane(g80, k_tag)];
        if (CLS == kClassTemporal && k == 0)
          offset = offset * kRefClasses + uintptr_t(rclass) * sizeof(DecodeTable);
        tab[k][idx] = table0[CLS][k] + offset;
        pm[k][idx] = int16_t(lane(pmv, k_tag));
        m[k][idx] = int16_t(lane(mv, k_tag));
      };
      put(std::integral_constant<int, 0>());
      if constexpr (NC > 1) put(std::integral_constant<int, 1>());
      if constexpr (NC > 2) put(std::integral_constant<int, 2>());
      if constexpr (NC > 3) put(std::integral_constant<int, 3>());
      return;
    }
#endif
    for (int c = 0; c < NC; ++c) {
      int a, b, cc, d;
      if (!edge) {
        a = p[c - W2];
        b = p[c - wstride];
        cc = p[c - wstride - W2];
        d = p[c - wstride + W2];
      } else {
        edge_neighbours(p + c, i, j, a, b, cc, d);
      }
      int ctx, pred;
      if (CLS == kClassTemporal) {
        pred = 0;
        ctx = activity_bucket(temporal_activity(a, b, cc, d));
        if (c == 0) ctx = ctx * kRefClasses + rclass;
      } else {
        pred = med(a, b, cc);
        ctx = activity_bucket(spatial_activity(a, b, cc, d));
      }
      const int flip = flip_sign(CLS, a, b, cc, d);
      pm[c][idx] = int16_t(pred + flip);
      m[c][idx] = int16_t(-flip);
      tab[c][idx] = table0[CLS][c] + uintptr_t(ctx) * sizeof(DecodeTable);
    }
  };

  // Per coded sample of a step, in lane order: its lane's state and
  // checksum (xs, hs), the token of the current component (tk) and its
  // value with the raw bits (vs).
  alignas(32) uint32_t xs[kMaxLanes] = {}, hs[kMaxLanes] = {};
  alignas(32) uint32_t tk[kMaxLanes] = {}, vs[kMaxLanes] = {};
  for (int st = 0; st < steps; ++st) {
    int n = 0;
    bool temporal = false;  // a temporal or temporal-spatial sample in the step
    for (int ln = 0; ln < lanes; ++ln) {
      Lane &L = lane_pos[ln];
      const int i = L.ci, j = L.cj;
      const size_t at = L.row_at + size_t(i);
      const int mr = L.mrow, nr = L.nrow;
      if (++L.ci == period) {
        L.ci = 0;
        L.cj += lanes;
        set_row(L);
      }
      if (unsigned(i) >= unsigned(w) || j >= h) continue;
#if defined(__GNUC__) || defined(__clang__)
      // The lane's working values and bytes some samples ahead, which no
      // other lane touched in this frame (32 lanes' rows of several planes
      // are too many streams for the hardware's prefetchers).
      __builtin_prefetch(work + (at + 16) * W2, 1);
      if ((i & 15) == 0)
        for (int c = 0; c < NC; ++c) {
          __builtin_prefetch(rec[c] + at + 64, 1);
          if (!KEY) __builtin_prefetch(ref[c] + at + 64);
        }
#endif
      const int bc = bcol[i];
      const int mode = KEY ? int(kSpatial) : modes[mr + bc];
      if (!KEY && mode == kSkip) continue;
      Active &A = act[n];
      A.at = at;
      A.lane = ln;
      if (!KEY) {
        temporal |= mode != kSpatial;
        cls_of[n] = kClassOfMode[mode];
        need_of[n] = need[nr + bc];
        for (int c = 0; c < NC; ++c) ref_of[c][n] = ref[c][at];
      }
      // The lane's state and checksum (the checksums unreduced:
      // lane_checksum()'s mod 2^17 once at the end).
      xs[n] = x_[ln];
      hs[n] = h_[ln];
      // The first column, the first row or the last column (for w >= 1).
      const bool edge = (unsigned(i - 1) >= unsigned(w - 2)) | (j == 0);
      if (KEY || mode == kSpatial)
        contexts(std::integral_constant<int, kClassSpatial>(), n, edge, i, j, 0);
      else if (mode == kTemporal)
        contexts(std::integral_constant<int, kClassTemporal>(), n, edge, i, j, rclass[at]);
      else
        contexts(std::integral_constant<int, kClassTempSpat>(), n, edge, i, j, 0);
      ++n;
    }
    if (n == 0) continue;
    // The step's samples rounded up to 8 (the loops below that the
    // compiler vectorises run over groups of 8).
    const int n8 = (n + 7) & ~7;
    // One sub-step per component (c a constant in each).
    auto component = [&](auto c_tag) CODEC2_LAMBDA_INLINE {
      constexpr int c = decltype(c_tag)::value;
      // The tokens of every coded sample in lane order, then their
      // renormalisations in lane order: no token reads a byte, so the bytes
      // read are those of a renormalisation after each token, and the
      // lanes' decodes (independent chains) overlap.
      uint32_t tokens;  // the OR of the tokens: >= 16 where raw bits follow
      if constexpr (TANS) {
        // tANS lanes: each symbol, in lane order, reads its token's bits
        // and its raw bits as one field (a word taken first where needed).
        tokens = 0;
        for (int k = 0; k < n; ++k) {
          const uint32_t *dec = reinterpret_cast<const TansDist *>(tab[c][k])->dec;
          const int t = tr->symbol(act[k].lane, xs[k], dec, tans_flags, &vs[k]);
          tk[k] = uint32_t(t);
          tokens |= uint32_t(t);
          // the checksum: the token, then a field of raw bits
          hs[k] = hs[k] * 33u + uint32_t(t);
          if (kTokenExtra[t]) hs[k] = hs[k] * 33u + vs[k];
        }
        if constexpr (c == 0 && NC > 1)
          for (int k = 0; k < n; ++k) {
            const uintptr_t cross = tk[k] != 0 ? kActivityBuckets * sizeof(DecodeTable) : 0;
            for (int cc = 1; cc < NC; ++cc) tab[cc][k] += cross;
          }
        const uint32_t *v = tk;
        if (tokens >= uint32_t(kDirectTokens)) {
          for (int k = 0; k < n; ++k) vs[k] |= kTokenBase[tk[k]];  // (raw bits 0 below 16)
          for (int k = n; k < n8; ++k) vs[k] = 0;
          v = vs;
        }
        for (int k8 = 0; k8 < n8; k8 += 8)
          for (int k = k8; k < k8 + 8; ++k)
            value[c][k] =
                int(uint32_t(pm[c][k]) + (((v[k] >> 1) ^ (0u - (v[k] & 1))) ^ uint32_t(m[c][k])));
        return;
      }
#if CODEC2_AVX2
      if constexpr (AVX2) {
        tokens = tokens_avx2(tab[c], xs, tk, n, spans);
      } else
#endif
      {
        tokens = 0;
        for (int k = 0; k < n; ++k) {
          const int t =
              RansDecoder::decode(xs[k], *reinterpret_cast<const DecodeTable *>(tab[c][k]), spans);
          tk[k] = uint32_t(t);
          tokens |= uint32_t(t);
        }
      }
      // The checksums (unreduced: lane_checksum()'s mod 2^17 once at the
      // end), and for the later components' tables whether r0 is 0 (exactly
      // for token 0: raw bits follow only tokens >= 16).
      for (int k8 = 0; k8 < n8; k8 += 8)
        for (int k = k8; k < k8 + 8; ++k) hs[k] = hs[k] * 33u + tk[k];
      if constexpr (c == 0 && NC > 1)
        for (int k8 = 0; k8 < n8; k8 += 8)
          for (int k = k8; k < k8 + 8; ++k) {
            const uintptr_t cross = tk[k] != 0 ? kActivityBuckets * sizeof(DecodeTable) : 0;
            for (int cc = 1; cc < NC; ++cc) tab[cc][k] += cross;
          }
      // Each renormalisation reads at most two bytes: with 2n left, none
      // needs the check for the end of the payload.
      auto renorm_all = [&]() CODEC2_LAMBDA_INLINE {
#if CODEC2_AVX2
        if constexpr (AVX2) {
          if (rd.end - rd.p >= 2 * n + 16) {
            renorm_avx2(xs, n, rd.p);
            return;
          }
        }
#endif
        if (rd.end - rd.p >= 2 * n) {
          for (int k = 0; k < n; ++k) rd.renorm_unchecked(xs[k]);
        } else {
          for (int k = 0; k < n; ++k) rd.renorm(xs[k]);
        }
      };
      renorm_all();
      // The values the tokens code: the tokens themselves below 16, else
      // with their raw bits (none below token 16), read without a branch on
      // the token, then renormalised in lane order.
      const uint32_t *v = tk;
      if (tokens >= uint32_t(kDirectTokens)) {
#if CODEC2_AVX2
        if constexpr (AVX2) {
          raw_bits_avx2(xs, hs, tk, vs, n);
        } else
#endif
        {
          for (int k = 0; k < n; ++k) {
            const int nbits = kTokenExtra[tk[k]];
            const uint32_t bits = xs[k] & ((1u << nbits) - 1);
            xs[k] >>= nbits;
            // Only a field of raw bits is a symbol (h * 33 + bits without a
            // branch: h + (32 h + bits) or h + 0).
            const uint32_t use = 0u - uint32_t(nbits != 0);
            hs[k] += (hs[k] * 32u + bits) & use;
            vs[k] = kTokenBase[tk[k]] | bits;
          }
          for (int k = n; k < n8; ++k) vs[k] = 0;
        }
        renorm_all();
        v = vs;
      }
      // pm + (unzigzag(v) ^ m), unzigzag(v) = (v >> 1) ^ -(v & 1).
      for (int k8 = 0; k8 < n8; k8 += 8)
        for (int k = k8; k < k8 + 8; ++k)
          value[c][k] =
              int(uint32_t(pm[c][k]) + (((v[k] >> 1) ^ (0u - (v[k] & 1))) ^ uint32_t(m[c][k])));
    };
    component(std::integral_constant<int, 0>());
    if constexpr (NC > 1) component(std::integral_constant<int, 1>());
    if constexpr (NC > 2) component(std::integral_constant<int, 2>());
    if constexpr (NC > 3) component(std::integral_constant<int, 3>());
    for (int k = 0; k < n; ++k) {
      x_[act[k].lane] = xs[k];
      h_[act[k].lane] = hs[k];
    }
    (void)tr;
    // Reconstruct each coded sample and its working values: the coded
    // domain's are the decoded values (exactly, unless a T-domain value
    // was clamped), the other domain's follow from the reconstruction.
    // The other domain's values are computed only where a neighbour will
    // read them (0 elsewhere: nothing reads them).
    if constexpr (!kVectorRecon) {
      // Sample by sample, in its class's way.
      for (int k = 0; k < n; ++k) {
        const size_t at = act[k].at;
        int val[NC], ch[NC];
        for (int c = 0; c < NC; ++c) val[c] = value[c][k];
        to_channels(YCOCG, NC, val, ch);
        if (KEY || cls_of[k] == kClassSpatial) {
          uint8_t out[NC];
          for (int c = 0; c < NC; ++c) {
            if (unsigned(ch[c]) > unsigned(q.max_index)) {
              bad = true;
              ch[c] = 0;
            }
            out[c] = q.dequant[ch[c]];
            rec[c][at] = out[c];
          }
          int tv[NC] = {};
          if (!KEY && (need_of[k] & 2)) {
            int d[NC];
            for (int c = 0; c < NC; ++c) d[c] = q.diff[int(out[c]) - ref_of[c][k] + 255];
            to_components(YCOCG, NC, d, tv);
          }
          put_work(work + at * W2, val, tv);
          continue;
        }
        bool clamped = false;
        uint8_t out[NC];
        for (int c = 0; c < NC; ++c) {
          if (ch[c] < -255 || ch[c] > 255) {
            bad = true;
            ch[c] = 0;
          }
          const int v = ref_of[c][k] + ch[c] * step;
          clamped |= unsigned(v) > 255u;
          out[c] = uint8_t(v < 0 ? 0 : v > 255 ? 255 : v);
          rec[c][at] = out[c];
        }
        int tv[NC], sv[NC] = {};
        if (clamped) {
          int d[NC];
          for (int c = 0; c < NC; ++c) d[c] = q.diff[int(out[c]) - ref_of[c][k] + 255];
          to_components(YCOCG, NC, d, tv);
        } else {
          for (int c = 0; c < NC; ++c) tv[c] = val[c];
        }
        if (need_of[k] & 1) {
          int u[NC];
          for (int c = 0; c < NC; ++c) u[c] = q.index[out[c]];
          to_components(YCOCG, NC, u, sv);
        }
        put_work(work + at * W2, sv, tv);
      }
      continue;
    }
    // Every sample reconstructed both ways, spatial and temporal, taking its
    // class's way (a loop over groups of 8 that the compiler vectorises;
    // the tables of quant_index(), quant_diff() and dequant_index() as
    // arithmetic); then its bytes and working values are stored.
    int oob = 0;  // a decoded value out of its domain's range: the tile is bad
    // Selections by masks (all ones or 0), which the compiler vectorises
    // where it would not vectorise branches.
    auto pick = [](int mask, int a, int b)
                    CODEC2_LAMBDA_INLINE { return (a & mask) | (b & ~mask); };
    // ALL_SPATIAL: every sample of the step is spatial (keyframes, and
    // often frames of noise), which saves the temporal way.
    auto reconstruct = [&](auto all_spatial_tag) CODEC2_LAMBDA_INLINE {
      constexpr bool ALL_SPATIAL = decltype(all_spatial_tag)::value;
      for (int k8 = 0; k8 < n8; k8 += 8)
        for (int k = k8; k < k8 + 8; ++k) {
          int val[NC], ch[NC];
          for (int c = 0; c < NC; ++c) val[c] = value[c][k];
          to_channels(YCOCG, NC, val, ch);
          const int spatial = ALL_SPATIAL ? -1 : -int(cls_of[k] == kClassSpatial);
          int out[NC], ok = -1, clamped = 0;
          for (int c = 0; c < NC; ++c) {
            // Spatial: an index 0..max_index, dequant_index().
            const int ok_s = -int(unsigned(ch[c]) <= unsigned(q.max_index));
            const int ps = (ch[c] & ok_s) * step;
            const int out_s = ps < 255 ? ps : 255;
            if (ALL_SPATIAL) {
              out[c] = out_s;
              ok &= ok_s;
              continue;
            }
            // Temporal: a difference -255..255 to the reference, clamped.
            const int ok_t = -int(unsigned(ch[c] + 255) <= 510u);
            const int v = ref_of[c][k] + (ch[c] & ok_t) * step;
            clamped |= -int(unsigned(v) > 255u);
            const int out_t = v < 0 ? 0 : v > 255 ? 255 : v;
            out[c] = pick(spatial, out_s, out_t);
            ok &= pick(spatial, ok_s, ok_t);
          }
          oob |= ~ok & -int(k < n);
          for (int c = 0; c < NC; ++c) out_of[c][k] = out[c];
          if (KEY) {
            for (int c = 0; c < NC; ++c) {
              s_of[c][k] = val[c];
              t_of[c][k] = 0;
            }
            continue;
          }
          // The other domain: quant_index(out) and quant_diff(out - ref)
          // (the quotient of |e| + k, with e's sign).
          int u[NC], d[NC], su[NC], td[NC];
          for (int c = 0; c < NC; ++c) {
            u[c] = int((uint32_t(out[c] + q.k) * recip) >> 20);
            const int e = out[c] - ref_of[c][k], neg = -int(e < 0);
            const int qd = int((uint32_t(((e ^ neg) - neg) + q.k) * recip) >> 20);
            d[c] = (qd ^ neg) - neg;
          }
          if (!ALL_SPATIAL) to_components(YCOCG, NC, u, su);
          to_components(YCOCG, NC, d, td);
          const int need_s = -(need_of[k] & 1), need_t = -((need_of[k] >> 1) & 1);
          for (int c = 0; c < NC; ++c) {
            if (ALL_SPATIAL) {
              s_of[c][k] = val[c];
              t_of[c][k] = td[c] & need_t;
              continue;
            }
            s_of[c][k] = pick(spatial, val[c], su[c] & need_s);
            t_of[c][k] = pick(spatial, td[c] & need_t, pick(clamped, td[c], val[c]));
          }
        }
    };
    if (KEY || !temporal)
      reconstruct(std::true_type());
    else
      reconstruct(std::false_type());
    bad |= oob != 0;
    for (int k = 0; k < n; ++k) {
      const size_t at = act[k].at;
      int sv[NC], tv[NC];
      for (int c = 0; c < NC; ++c) {
        rec[c][at] = uint8_t(out_of[c][k]);
        sv[c] = s_of[c][k];
        tv[c] = t_of[c][k];
      }
      put_work(work + at * W2, sv, tv);
    }
  }
  for (int ln = 0; ln < lanes; ++ln) {
    state[ln] = x_[ln];
    checksum[ln] = h_[ln] & 0x1FFFFu;  // lane_checksum()'s reduction
  }
  dec = rd;
  return !bad && spans < DecodeTable::kUnusedSpan && !(tans_flags >> 31);
}

}  // namespace

namespace detail {

struct BodyReader::State {
  LayerSet ls;
  DistLayout dl;
  Geometry geometry{0, 0};
  std::vector<Tile> tiles;
  BodyHeader header;
  Model prev, model;
  TileTable tt;
  std::vector<TileEntry> entries;
};

BodyReader::BodyReader(VideoFormat format, int width, int height) : state_(new State) {
  state_->ls = layers_of(format, width, height);
  if (state_->ls.count == 0) throw Error("codec2 decoder: unknown format or empty size");
  state_->dl = DistLayout(state_->ls);
  state_->prev.tables.assign(state_->dl.count, Table{});
}
BodyReader::~BodyReader() = default;

bool BodyReader::read(const uint8_t *body, size_t n, bool has_reference, std::string *why) {
  State &s = *state_;
  BodyHeader h;
  if (!read_body_header(body, n, &h, why)) return false;
  if (!h.keyframe && !has_reference) {
    *why = "a delta without a previous frame (waiting for a keyframe)";
    return false;
  }
  if (h.geometry.tile_bx != s.geometry.tile_bx || h.geometry.tile_by != s.geometry.tile_by) {
    s.tiles = make_tiles(s.ls, h.geometry);
    s.geometry = h.geometry;
  }
  if (!read_tables_and_tile_table(s.dl, s.ls, s.tiles, h, body, n, s.prev, s.model, s.tt, why))
    return false;
  s.header = h;
  s.entries.resize(s.tiles.size());
  for (size_t ti = 0; ti < s.tiles.size(); ++ti) {
    TileEntry &e = s.entries[ti];
    e.type = s.tt.type[ti];
    e.lanes = s.tt.lanes[ti];
    e.offset = s.tt.offset[ti];
    e.size = s.tt.offset[ti + 1] - s.tt.offset[ti];
  }
  return true;
}
void BodyReader::commit() {
  std::swap(state_->prev, state_->model);
}
const BodyHeader &BodyReader::header() const {
  return state_->header;
}
size_t BodyReader::payload_offset() const {
  return state_->tt.payload_at;
}
const std::vector<Tile> &BodyReader::tiles() const {
  return state_->tiles;
}
const std::vector<TileEntry> &BodyReader::entries() const {
  return state_->entries;
}
const LayerSet &BodyReader::layers() const {
  return state_->ls;
}
int BodyReader::distributions() const {
  return state_->dl.count;
}
int BodyReader::mode_distribution() const {
  return state_->dl.mode;
}
int BodyReader::base(int layer, int cls, int comp) const {
  return state_->dl.base[layer][cls][comp];
}
bool BodyReader::used(int d) const {
  return state_->model.tables[d].used;
}
int BodyReader::palette_size() const {
  return state_->model.tans ? int(state_->model.palette.size()) : 0;
}
int BodyReader::palette_of(int d) const {
  return state_->model.tans ? state_->model.palette_of[size_t(d)] : -1;
}
void BodyReader::palette_freq(int i, uint16_t out[kTokens]) const {
  const Table &t = state_->model.palette[size_t(i)];
  for (int k = 0; k < kTokens; ++k) out[k] = k < t.n ? t.freq[k] : 0;
}
void BodyReader::symbols(int d, uint32_t out[kTokens]) const {
  const Table &t = state_->model.tables[d];
  for (int i = 0; i < kTokens; ++i)
    out[i] = i < t.n ? uint32_t(t.cum[i]) | uint32_t(t.freq[i]) << 16 : kProbScale;
}

}  // namespace detail

namespace detail {
std::unique_ptr<Encoder> make_cpu_encoder(VideoFormat format, int width, int height,
                                          const Geometry &geometry) {
  return std::make_unique<CpuEncoder>(format, width, height, geometry);
}
std::unique_ptr<EncoderBackEnd> make_encoder_back_end(VideoFormat format, int width, int height,
                                                      const Geometry &geometry) {
  return std::make_unique<CpuEncoder>(format, width, height, geometry, true);
}
std::unique_ptr<Decoder> make_cpu_decoder(VideoFormat format, int width, int height) {
  return std::make_unique<CpuDecoder>(format, width, height);
}
}  // namespace detail

std::unique_ptr<Encoder> Encoder::create(const Context &ctx, VideoFormat format, int width,
                                         int height, const Geometry *geometry) {
  const Geometry g = geometry ? *geometry : default_geometry(format, width, height);
#if CUDADIFF_HAVE_CUDA
  if (ctx.is_cuda() && g.tans_lanes)
    throw Error(
        "codec2: tANS lanes (body flag 0x04) are not in the CUDA encoder yet; use a CPU context");
  if (ctx.is_cuda()) return detail::make_cuda_encoder(ctx, format, width, height, g);
#else
  if (ctx.is_cuda()) throw Error("codec2: this build has no CUDA backend; use a CPU context");
#endif
  return detail::make_cpu_encoder(format, width, height, g);
}

std::unique_ptr<Decoder> Decoder::create(const Context &ctx, VideoFormat format, int width,
                                         int height) {
#if CUDADIFF_HAVE_CUDA
  if (ctx.is_cuda()) return detail::make_cuda_decoder(ctx, format, width, height);
#else
  if (ctx.is_cuda()) throw Error("codec2: this build has no CUDA backend; use a CPU context");
#endif
  return detail::make_cpu_decoder(format, width, height);
}

// Frames in flight, for a backend that encodes at submission (the CPU's).
void Encoder::submit(const FrameView &frame, int threshold, bool keyframe) {
  if (in_flight_ >= kMaxInFlight)
    throw Error("codec2 encoder: more than " + std::to_string(kMaxInFlight) +
                " frames submitted and not finished");
  Encoded &e = encoded_[(oldest_ + in_flight_) % kMaxInFlight];
  e.stats = encode(frame, threshold, keyframe, e.body);
  in_flight_++;
}

FrameStats Encoder::finish(HostBytes &body) {
  if (in_flight_ == 0) throw Error("codec2 encoder: no frame submitted to finish");
  Encoded &e = encoded_[oldest_];
  // A copy, not a swap: the caller's buffer keeps its capacity (the element
  // reserves the largest body once), and so do the encoder's.
  body.resize(e.body.size());
  if (e.body.size()) std::memcpy(body.data(), e.body.data(), e.body.size());
  oldest_ = (oldest_ + 1) % kMaxInFlight;
  in_flight_--;
  return e.stats;
}

// Frames in flight, for a backend that decodes at submission (the CPU's).
bool Decoder::submit(const uint8_t *body, size_t n, std::string *error) {
  if (in_flight_ >= kMaxInFlight)
    throw Error("codec2 decoder: more than " + std::to_string(kMaxInFlight) +
                " frames submitted and not finished");
  if (!decode(body, n, error)) return false;
  in_flight_++;
  return true;
}

void Decoder::submit_write_frame(const FrameView &out) {
  if (in_flight_ == 0) throw Error("codec2 decoder: no frame submitted to write");
  write_frame(out);
}

bool Decoder::finish(std::string *) {
  if (in_flight_ == 0) throw Error("codec2 decoder: no frame submitted to finish");
  in_flight_--;
  return true;
}

}  // namespace codec2
}  // namespace cudadiff
