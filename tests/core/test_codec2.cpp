// The version 2 codec, CPU reference: the per-sample rules, the layers of
// every format, round trips (every byte within k of the input, exact at
// k = 0, the decoder's picture equal to the encoder's reference) for every
// format, odd sizes and padded strides, keyframes and long runs of deltas,
// a decoder starting at a later keyframe, changing thresholds, damaged
// bodies, the body header's flags, the tile rule of the reference classes
// across tiles' edges, tANS lanes (body flag 0x04), and the worked example
// of docs/stream-format.md and the bodies of codec2_tiles.example and
// codec2_tans.example byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "cudadiff/codec2.h"
#include "codec2_walk.h"
#include "cudadiff/codec2_rules.h"
#include "frames.h"

using namespace cudadiff;
using namespace cudadiff::codec2;
using testing_util::bytes_of;
using testing_util::every_format;
using testing_util::HostFrame;
using testing_util::packed_bytes;

namespace {

std::unique_ptr<Context> cpu = Context::cpu();

// Smooth content with edges, a moving square and some noise: what cameras
// give, so that every block mode occurs.
void fill_scene(HostFrame &f, int t, std::mt19937 &gen, int noise) {
  testing_util::fill_codec_scene(f, t, gen, noise);
}

struct Sequence {
  std::vector<HostFrame> frames;
  std::vector<std::vector<uint8_t>> bodies;
  std::vector<std::vector<uint8_t>> references;  // the encoder's, canonical order
  std::vector<FrameStats> stats;
};

// Encodes `frames` (keyframe where `key[i]`), checking every byte within k.
Sequence encode_sequence(VideoFormat fmt, int w, int h, const std::vector<HostFrame> &frames,
                         const std::vector<bool> &key, const std::vector<int> &k,
                         const Geometry *geometry = nullptr) {
  Sequence s;
  s.frames = frames;
  auto enc = Encoder::create(*cpu, fmt, w, h, geometry);
  HostBytes body, ref;
  for (size_t i = 0; i < frames.size(); ++i) {
    s.stats.push_back(enc->encode(frames[i].view, k[i], key[i], body));
    s.bodies.push_back(bytes_of(body));
    enc->read_reference(ref);
    s.references.push_back(bytes_of(ref));
    const std::vector<uint8_t> in = packed_bytes(frames[i].view);
    int worst = 0;
    for (size_t b = 0; b < in.size(); ++b)
      worst = std::max(worst, std::abs(int(in[b]) - ref.data()[b]));
    EXPECT_LE(worst, k[i]) << format_name(fmt) << " " << w << "x" << h << " frame " << i;
  }
  return s;
}

// Decodes a sequence from `first` on and checks each picture against the
// encoder's reference, through write_frame() into a padded frame.
void decode_sequence(VideoFormat fmt, int w, int h, const Sequence &s, size_t first = 0) {
  auto dec = Decoder::create(*cpu, fmt, w, h);
  for (size_t i = first; i < s.bodies.size(); ++i) {
    std::string err;
    ASSERT_TRUE(dec->decode(s.bodies[i].data(), s.bodies[i].size(), &err))
        << format_name(fmt) << " " << w << "x" << h << " frame " << i << ": " << err;
    HostFrame out(fmt, w, h, 5);
    dec->write_frame(out.view);
    ASSERT_TRUE(out.padding_intact());
    ASSERT_EQ(packed_bytes(out.view), s.references[i])
        << format_name(fmt) << " " << w << "x" << h << " frame " << i;
  }
}

}  // namespace

// ---- the rules --------------------------------------------------------------

TEST(Codec2Rules, QuantisationKeepsTheBound) {
  for (int k = 0; k <= 255; ++k) {
    for (int x = 0; x < 256; ++x) {
      const int u = quant_index(x, k);
      ASSERT_LE(u, max_index(k));
      ASSERT_LE(std::abs(dequant_index(u, k) - x), k) << x << " " << k;
      ASSERT_EQ(quant_index(dequant_index(u, k), k), u) << "indices are fixed points";
    }
    for (int ref = 0; ref < 256; ref += (k < 3 ? 1 : 7))
      for (int x = 0; x < 256; ++x) {
        const int q = quant_diff(x - ref, k);
        ASSERT_LE(std::abs(dequant_diff(ref, q, k) - x), k) << x << " " << ref << " " << k;
        if (std::abs(x - ref) <= k) {
          ASSERT_EQ(q, 0) << "within k of the reference: unchanged";
        }
      }
  }
  EXPECT_EQ(quant_index(30, 10), 1);  // (30 + 10) / 21
  EXPECT_EQ(dequant_index(12, 10), 252);
  EXPECT_EQ(dequant_index(13, 10), 255);  // 273 clamped
  EXPECT_EQ(quant_diff(-11, 5), -1);      // -((5 + 11) / 11)
  EXPECT_EQ(quant_diff(16, 5), 1);
  EXPECT_EQ(quant_diff(17, 5), 2);
}

// The divisions by 2k+1 as a multiply and a shift (StepDiv, for the CUDA
// encoder) give the quotients of the divisions for every numerator below
// 2048 (as the header's static_assert checks by another route), and the
// quantisers built on them the same values over the inputs they take.
TEST(Codec2Rules, StepDivisionIsExact) {
  for (int k = 0; k <= 255; ++k) {
    const StepDiv d = step_div(k);
    for (uint32_t n = 0; n < 2048; ++n)
      ASSERT_EQ(d.div(n), n / uint32_t(2 * k + 1)) << n << " " << k;
    for (int x = 0; x < 256; ++x) ASSERT_EQ(quant_index(x, d), quant_index(x, k)) << x << " " << k;
    for (int e = -255; e <= 255; ++e) {
      ASSERT_EQ(quant_diff(e, d), quant_diff(e, k)) << e << " " << k;
      for (int t : {0, k, 255})
        ASSERT_EQ(encoder_diff(e, d, t), encoder_diff(e, k, t)) << e << " " << k << " " << t;
    }
    for (int g = 0; g <= 4 * 255; ++g)
      ASSERT_EQ(ref_class_of_steps(int(d.div(uint32_t(g)))), ref_class(g, k)) << g << " " << k;
  }
}

TEST(Codec2Rules, ColourTransformIsLossless) {
  for (int r = -300; r <= 300; r += 7)
    for (int g = -300; g <= 300; g += 11)
      for (int b = -300; b <= 300; b += 13) {
        int y, co, cg, r2, g2, b2;
        ycocg_forward(r, g, b, &y, &co, &cg);
        ycocg_inverse(y, co, cg, &r2, &g2, &b2);
        ASSERT_EQ(r2, r);
        ASSERT_EQ(g2, g);
        ASSERT_EQ(b2, b);
      }
  int y, co, cg;
  ycocg_forward(200, 100, 50, &y, &co, &cg);  // co 150, t 125, cg -25, y 112
  EXPECT_EQ(co, 150);
  EXPECT_EQ(cg, -25);
  EXPECT_EQ(y, 112);
}

TEST(Codec2Rules, TokensAndContexts) {
  for (uint32_t v = 0; v < 4096; ++v) {
    int nbits;
    uint32_t bits;
    const int t = token_of(v, &nbits, &bits);
    ASSERT_LT(t, kTokens);
    ASSERT_EQ(nbits, token_extra_bits(t));
    ASSERT_EQ(token_value(t, bits), v);
  }
  int nbits;
  uint32_t bits;
  EXPECT_EQ(token_of(15, &nbits, &bits), 15);
  EXPECT_EQ(token_of(16, &nbits, &bits), 16);
  EXPECT_EQ(nbits, 3);
  EXPECT_EQ(token_of(100, &nbits, &bits), 16 + 2 * 2 + 1);  // 1100100: e 6, next bit 1
  EXPECT_EQ(bits, 4u);
  EXPECT_EQ(nbits, 5);
  for (int r = -2000; r <= 2000; ++r) ASSERT_EQ(unzigzag(zigzag(r)), r);
  EXPECT_EQ(zigzag(-1), 1u);
  EXPECT_EQ(zigzag(2), 4u);
  EXPECT_EQ(med(10, 20, 5), 20);
  EXPECT_EQ(med(10, 20, 25), 10);
  EXPECT_EQ(med(10, 20, 15), 15);
  // The specification's form of MED, against the branch-free one it is
  // computed by, over values of both domains' range.
  for (int a = -40; a <= 40; a += 3)
    for (int b = -40; b <= 40; b += 2)
      for (int c = -45; c <= 45; ++c) {
        const int mx = std::max(a, b), mn = std::min(a, b);
        ASSERT_EQ(med(a, b, c), c >= mx   ? mn
                                : c <= mn ? mx
                                          : a + b - c)
            << a << " " << b << " " << c;
      }
  const int edges[] = {1, 2, 3, 5, 7, 10, 14, 20, 28, 40, 56, 80};
  for (int g = 0; g < 300; ++g) {
    int n = 0;
    for (int e : edges) n += g >= e;
    ASSERT_EQ(activity_bucket(g), n) << g;
  }
}

// coded_tile_bound() never exceeds what the coder writes, and comes close
// to it: symbols drawn from skewed to nearly uniform token distributions,
// with their raw bits, coded by 1 to 32 lanes with tables proportional to
// the counts (the nearest the coder gets to the counts' entropy) or further
// off, by the rANS steps of docs/stream-format.md ("The encoder", step 7),
// written here again.
TEST(Codec2Rules, CodedTileBoundLiesBelowTheCodedSize) {
  std::mt19937 gen(5);
  double closest = 0.0;  // the largest bound / coded size
  for (int trial = 0; trial < 400; ++trial) {
    const int n_dist = 1 + int(gen() % 4), lanes = 1 + int(gen() % 32);
    const int n_sym = 100 + int(gen() % 30000);
    std::vector<std::discrete_distribution<int>> draw;
    for (int d = 0; d < n_dist; ++d) {
      const int n_tok = 1 + int(gen() % kTokens);
      const double ratio = std::uniform_real_distribution<double>(0.3, 1.0)(gen);
      std::vector<double> w(n_tok);
      for (int t = 0; t < n_tok; ++t) w[t] = std::pow(ratio, t);
      draw.emplace_back(w.begin(), w.end());
    }
    struct Sym {
      int d, tk, nbits;
      uint32_t bits;
    };
    std::vector<Sym> syms(static_cast<size_t>(n_sym));
    std::vector<std::array<uint32_t, kTokens>> count(static_cast<size_t>(n_dist));
    for (auto &c : count) c.fill(0);
    double bits = 0.0;
    for (Sym &y : syms) {
      y.d = int(gen() % uint32_t(n_dist));
      y.tk = draw[size_t(y.d)](gen);
      y.nbits = token_extra_bits(y.tk);
      y.bits = gen() & ((1u << y.nbits) - 1u);
      count[size_t(y.d)][size_t(y.tk)]++;
      bits += y.nbits;
    }
    // The tables: frequencies proportional to the counts (at least 1 for a
    // token that occurs), in a third of the trials to counts with noise.
    const bool off = trial % 3 == 2;
    std::vector<std::array<uint32_t, kTokens>> freq(static_cast<size_t>(n_dist)),
        cum(static_cast<size_t>(n_dist));
    for (int d = 0; d < n_dist; ++d) {
      const auto &c = count[size_t(d)];
      double n = 0.0, wsum = 0.0, w[kTokens];
      for (int t = 0; t < kTokens; ++t) {
        n += c[size_t(t)];
        w[t] = c[size_t(t)] * (off ? std::uniform_real_distribution<double>(0.5, 2.0)(gen) : 1.0);
        wsum += w[t];
        if (c[size_t(t)]) bits -= c[size_t(t)] * std::log2(double(c[size_t(t)]));
      }
      if (n > 0) bits += n * std::log2(n);
      auto &f = freq[size_t(d)];
      uint32_t sum = 0;
      int largest = 0;
      for (int t = 0; t < kTokens; ++t) {
        f[size_t(t)] = c[size_t(t)] ? std::max<uint32_t>(1, uint32_t(w[t] * kProbScale / wsum)) : 0;
        sum += f[size_t(t)];
        if (f[size_t(t)] > f[size_t(largest)]) largest = t;
      }
      if (sum == 0) continue;                  // a distribution without symbols
      f[size_t(largest)] += kProbScale - sum;  // (never below 1 here: sum stays near 4096)
      uint32_t at = 0;
      for (int t = 0; t < kTokens; ++t) cum[size_t(d)][size_t(t)] = at, at += f[size_t(t)];
    }
    // Lane l codes symbols l, l + lanes, ... from its final state backwards:
    // each symbol's raw bits, then its token.
    size_t coded = 0;
    for (int l = 0; l < lanes; ++l) {
      uint32_t x = lane_final_state(0, l, 0);
      for (int i = l + (n_sym - 1 - l) / lanes * lanes; i >= l; i -= lanes) {
        const Sym &y = syms[size_t(i)];
        if (y.nbits) {
          while (x >= (1u << (31 - y.nbits))) x >>= 8, ++coded;
          x = (x << y.nbits) | y.bits;
        }
        const uint32_t f = freq[size_t(y.d)][size_t(y.tk)], c = cum[size_t(y.d)][size_t(y.tk)];
        while (x >= (f << 19)) x >>= 8, ++coded;
        x = (x / f) * kProbScale + x % f + c;
      }
      coded += 4;  // the lane's state
    }
    const double bound = coded_tile_bound(bits, double(n_sym));
    ASSERT_LE(bound, double(coded))
        << "trial " << trial << ": " << n_sym << " symbols, " << lanes << " lanes";
    closest = std::max(closest, bound / double(coded));
  }
  // Close: a bound 1 % higher would have exceeded some coded size.
  EXPECT_GT(closest, 0.99);
}

TEST(Codec2Rules, LevelsNormaliseToTheScale) {
  std::mt19937 &gen = testing_util::rng();
  for (int round = 0; round < 2000; ++round) {
    uint8_t levels[kTokens] = {};
    const int n = 1 + int(gen() % kTokens);
    for (int i = 0; i < n; ++i) levels[i] = (gen() % 3) ? uint8_t(gen() % (kLevels + 1)) : 0;
    levels[n - 1] = uint8_t(1 + gen() % kLevels);
    uint16_t freq[kTokens];
    ASSERT_TRUE(normalize_levels(levels, n, freq));
    uint32_t sum = 0;
    for (int i = 0; i < n; ++i) {
      sum += freq[i];
      ASSERT_EQ(freq[i] == 0, levels[i] == 0) << "present tokens get >= 1, absent 0";
    }
    ASSERT_EQ(sum, kProbScale);
  }
  // Two tokens of levels 49 and 45 (weights 2^20 and 2^19): 2731 and 1365,
  // remainder 0... checked by hand: floor(4096 * 2/3) = 2730, floor(4096/3) = 1365,
  // the first largest gets the 1 left over.
  const uint8_t two[2] = {49, 45};
  uint16_t f2[2];
  ASSERT_TRUE(normalize_levels(two, 2, f2));
  EXPECT_EQ(f2[0], 2731);
  EXPECT_EQ(f2[1], 1365);
  const uint8_t none[3] = {0, 0, 0};
  EXPECT_FALSE(normalize_levels(none, 3, f2));
}

TEST(Codec2Rules, ScheduleVisitsEverySampleAfterItsNeighbours) {
  for (int lanes : {1, 2, 5, 32})
    for (int w : {1, 2, 3, 8, 63, 64, 65, 100})
      for (int h : {1, 2, 7, 32, 33, 70}) {
        const int period = schedule_period(w, lanes);
        const int steps = schedule_steps(w, h, lanes);
        std::vector<int> when(size_t(w) * h, -1);
        for (int t = 0; t < steps; ++t)
          for (int l = 0; l < lanes; ++l) {
            const int tt = t - kStagger * l;
            if (tt < 0) continue;
            const int i = tt % period, j = (tt / period) * lanes + l;
            if (i >= w || j >= h) continue;
            ASSERT_EQ(when[size_t(j) * w + i], -1) << "visited twice";
            when[size_t(j) * w + i] = t;
          }
        for (int j = 0; j < h; ++j)
          for (int i = 0; i < w; ++i) {
            const int t = when[size_t(j) * w + i];
            ASSERT_GE(t, 0) << "never visited " << i << "," << j << " w" << w << " h" << h;
            if (i > 0) {
              ASSERT_LT(when[size_t(j) * w + i - 1], t);
            }
            if (j > 0) {
              ASSERT_LT(when[size_t(j - 1) * w + i], t);
              if (i > 0) {
                ASSERT_LT(when[size_t(j - 1) * w + i - 1], t);
              }
              if (i + 1 < w) {
                ASSERT_LT(when[size_t(j - 1) * w + i + 1], t);
              }
            }
          }
        // The last step does something.
        bool last_used = false;
        for (int v : when) last_used |= v == steps - 1;
        ASSERT_TRUE(last_used);
      }
}

TEST(Codec2Rules, LanesPerTile) {
  EXPECT_EQ(lanes_for_tile(0, 128), 1);
  EXPECT_EQ(lanes_for_tile(2048, 128), 1);
  EXPECT_EQ(lanes_for_tile(2049, 128), 2);
  EXPECT_EQ(lanes_for_tile(1u << 30, 128), 32);
  EXPECT_EQ(lanes_for_tile(1u << 30, 5), 5);
  // One round fewer when it takes at most an eighth more lanes: 30 lanes
  // over 128 rows need 5 rounds, 32 need 4 (a full tile of 10x8 blocks of
  // RGB); 28 would take 32 (more than an eighth more), so 5 rounds, which
  // 26 lanes give too; 17 lanes need 8 rounds, 19 need 7; 3 lanes over 5
  // rows need 2 rounds, as 3 do.
  EXPECT_EQ(lanes_for_tile(30 * 2048, 128), 32);
  EXPECT_EQ(lanes_for_tile(29 * 2048, 128), 32);
  EXPECT_EQ(lanes_for_tile(28 * 2048, 128), 26);
  EXPECT_EQ(lanes_for_tile(26 * 2048, 128), 26);
  EXPECT_EQ(lanes_for_tile(17 * 2048, 128), 19);
  EXPECT_EQ(lanes_for_tile(2 * 2048, 128), 2);
  EXPECT_EQ(lanes_for_tile(3 * 2048, 5), 3);
  EXPECT_EQ(lanes_for_tile(4 * 2048, 5), 3);
  auto rounds = [](int rows, int lanes) { return (rows + lanes - 1) / lanes; };
  for (int rows = 1; rows <= 300; ++rows)
    for (uint32_t n = 1; n <= 40; ++n) {
      const int want = int(std::min<uint32_t>(n, std::min(rows, 32)));
      const int lanes = lanes_for_tile(n * 2048, rows);
      ASSERT_LE(lanes, std::min(rows, 32)) << rows << " rows, " << n;
      // The rounds of `want` lanes, or fewer for at most an eighth more lanes.
      const int r = rounds(rows, lanes), r0 = rounds(rows, want);
      ASSERT_TRUE(r == r0 || (r < r0 && 8 * lanes <= 9 * want)) << rows << " rows, " << n;
      // As few lanes as give those rounds.
      if (lanes > 1) {
        ASSERT_GT(rounds(rows, lanes - 1), r) << rows << " rows, " << n;
      }
    }
  // Another budget per lane (Geometry::lane_samples): 1000 samples at 256
  // per lane take 4 lanes (4 give 32 rounds over 128 rows); a budget below
  // 1 counts as 1; the cap of 32 lanes and of the rows stays.
  EXPECT_EQ(lanes_for_tile(1000, 128, 256), 4);
  EXPECT_EQ(lanes_for_tile(1024, 128, 256), 4);
  EXPECT_EQ(lanes_for_tile(1025, 128, 256), 5);
  EXPECT_EQ(lanes_for_tile(15360, 64, 256), 32);  // a tile of 5x4 blocks, BGR
  EXPECT_EQ(lanes_for_tile(100, 128, 1), 32);
  EXPECT_EQ(lanes_for_tile(5, 128, 0), 5);
  EXPECT_EQ(lanes_for_tile(0xffffffffu, 7, 1u << 24), 7);
}

namespace {
// The step-by-step walk (tests/common/codec2_walk.h), its steps.
int walk_by_steps(int w, int h, int lanes, int bw, const std::vector<uint8_t> &coded) {
  return testing_util::walk_by_steps(w, h, lanes, bw, coded).steps;
}
}  // namespace

TEST(Codec2Rules, TileWalk) {
  // A tile's walk counted from the runs of coded blocks (tile_walk()) is the
  // step-by-step count of the schedule's steps: a full tile of 10x8 blocks
  // with 32 lanes walks its 702 steps; the default bound is 100 % of that
  // for a tile of 10x8 blocks of RGB (the lanes of its 61,440 components).
  // (coded: 1 per coded block; as block modes, kSkip is 0.)
  static_assert(kSkip == 0, "coded blocks as modes");
  const auto runs_of = [](const std::vector<uint8_t> &coded, int bw) {
    return [&coded, bw](int by, int bx, int &a, int &b) {
      return coded_run(coded.data() + size_t(by) * bw, bw, bx, a, b);
    };
  };
  const std::vector<uint8_t> all(80, 1);
  EXPECT_EQ(tile_walk(160, 128, 32, 1 << 20, runs_of(all, 10)), 702);
  EXPECT_EQ(walk_by_steps(160, 128, 32, 10, all), 702);
  EXPECT_EQ(kWalkBound, 100);
  EXPECT_EQ(Geometry().walk_bound, kWalkBound);
  EXPECT_EQ(walk_bound(160, 128, 61440, 2048, 100), 702);
  EXPECT_EQ(walk_bound(160, 128, 61440, 2048, 120), 842);
  EXPECT_EQ(walk_bound(160, 128, 61440, 256, 100), 702);
  // Random tiles: edge tiles of any width (runs 1 sample wide too) and
  // height, every density of coded blocks, any lanes; above the limit once
  // the walk passes it; and bounded_lanes(): the fewest lanes from `first`
  // up whose walk is within the bound, else the most.
  // The last 30 trials: tiles up to 255 blocks wide (a lane's round then
  // has period w, and its last lanes still start after the next round has).
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3030; ++trial) {
    const bool large = trial >= 3000;
    const int w = 1 + int(rng() % (large ? 4080 : 200)), h = 1 + int(rng() % (large ? 600 : 140));
    const int bw = (w + kBlock - 1) / kBlock, bh = (h + kBlock - 1) / kBlock;
    std::vector<uint8_t> coded(size_t(bw * bh));
    const unsigned density = rng() % 9;
    for (auto &c : coded) c = rng() % 8 < density;
    const auto runs = runs_of(coded, bw);
    const int lanes = large ? std::min(h, 17 + int(rng() % 16)) : 1 + int(rng() % std::min(h, 32));
    const int want = walk_by_steps(w, h, lanes, bw, coded);
    ASSERT_EQ(tile_walk(w, h, lanes, 1 << 20, runs), want)
        << trial << ": " << w << "x" << h << ", " << lanes << " lanes";
    const int limit = int(rng() % 900);
    const int got = tile_walk(w, h, lanes, limit, runs);
    ASSERT_TRUE(want <= limit ? got == want : got > limit) << trial;
    const int bound = int(rng() % 900);
    const int chosen =
        bounded_lanes(lanes, h, bound, [&](int n) { return tile_walk(w, h, n, bound, runs); });
    int expect = std::min(h, 32);
    for (int n = lanes; n < std::min(h, 32); ++n)
      if (walk_by_steps(w, h, n, bw, coded) <= bound) {
        expect = n;
        break;
      }
    ASSERT_EQ(chosen, expect) << trial;
  }
}

// The encoder's lanes for tiles with some blocks skipped (bounded_lanes()):
// one tile of 10x8 blocks, BGR; a keyframe, then deltas that change a block
// column's worth of blocks more each time. A delta's tile takes one lane
// per 2048 coded sample components, then more while the walk through it
// would exceed a full tile's 702 steps: one block column coded takes 5
// lanes instead of 3 (whose walk would be 901 steps; 4 would walk 736).
TEST(Codec2Cpu, LanesOfPartlySkippedTiles) {
  const int w = 160, h = 128;
  HostFrame base(VideoFormat::BGR, w, h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < 3 * w; ++x)
      base.at(0, x, y) = uint8_t(40 + (x * 7 + y * 3) % 90 + (x / 3 + y) % 5);
  for (int threshold : {0, 20}) {
    auto enc = Encoder::create(*cpu, VideoFormat::BGR, w, h);
    auto dec = Decoder::create(*cpu, VideoFormat::BGR, w, h);
    HostBytes body, ref, pic;
    const FrameStats key = enc->encode(base.view, threshold, true, body);
    ASSERT_EQ(key.tiles[1], 1u);
    EXPECT_EQ(key.lanes, 32u);
    std::string err;
    ASSERT_TRUE(dec->decode(body.data(), body.size(), &err)) << err;
    for (int cols : {1, 2, 3, 5, 8, 10}) {
      // The first `cols` block columns change (8 blocks each).
      HostFrame f = base;
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < 3 * 16 * cols; ++x) f.at(0, x, y) = uint8_t(f.at(0, x, y) + 40 + y % 3);
      const FrameStats st = enc->encode(f.view, threshold, false, body);
      ASSERT_EQ(st.tiles[1], 1u) << cols;
      ASSERT_EQ(st.blocks[kSkip], uint32_t(80 - 8 * cols)) << cols;
      const uint32_t coded = uint32_t(8 * cols) * 256 * 3;
      std::vector<uint8_t> blocks(80, 0);
      for (int b = 0; b < 80; ++b) blocks[size_t(b)] = b % 10 < cols;
      int want = 32;
      for (int n = lanes_for_tile(coded, h); n < 32; ++n)
        if (walk_by_steps(w, h, n, 10, blocks) <= 702) {
          want = n;
          break;
        }
      if (cols == 1) {
        EXPECT_EQ(lanes_for_tile(coded, h), 3);
        EXPECT_EQ(walk_by_steps(w, h, 3, 10, blocks), 901);
        EXPECT_EQ(walk_by_steps(w, h, 4, 10, blocks), 736);
        EXPECT_EQ(want, 5);
      }
      EXPECT_EQ(st.lanes, uint32_t(want))
          << cols << " block columns coded, threshold " << threshold;
      ASSERT_TRUE(dec->decode(body.data(), body.size(), &err)) << err;
      dec->read_reference(pic);
      enc->read_reference(ref);
      ASSERT_EQ(bytes_of(pic), bytes_of(ref)) << cols;
      const std::vector<uint8_t> in = packed_bytes(f.view);
      for (size_t b = 0; b < in.size(); ++b)
        ASSERT_LE(std::abs(int(in[b]) - int(ref.data()[b])), threshold) << cols;
      enc->encode(base.view, threshold, true, body);  // back to the base picture
      ASSERT_TRUE(dec->decode(body.data(), body.size(), &err)) << err;
    }
  }
}

TEST(Codec2Rules, LayersOfEveryFormat) {
  // Every byte of the canonical frame belongs to exactly one sample channel.
  for (VideoFormat f : every_format())
    for (auto [w, h] : {std::pair{1, 1}, {3, 5}, {16, 16}, {33, 17}}) {
      const LayerSet ls = layers_of(f, w, h);
      ASSERT_GT(ls.count, 0) << format_name(f);
      FrameView v = packed_view(f, w, h, nullptr);
      std::vector<int> hits(frame_size_packed(f, w, h), 0);
      for (int l = 0; l < ls.count; ++l) {
        const Layer &ly = ls.layer[l];
        ASSERT_LT(((ly.width - 1) << ly.sx) >> 4, ls.blocks_x) << format_name(f);
        ASSERT_LT(((ly.height - 1) << ly.sy) >> 4, ls.blocks_y) << format_name(f);
        for (int y = 0; y < ly.height; ++y)
          for (int x = 0; x < ly.width; ++x)
            for (int c = 0; c < ly.channels; ++c) {
              const size_t at =
                  size_t(v.row(ly.plane[c], y) - v.data[0]) + size_t(x) * ly.step[c] + ly.offset[c];
              ASSERT_LT(at, hits.size()) << format_name(f);
              hits[at]++;
            }
      }
      for (size_t b = 0; b < hits.size(); ++b)
        ASSERT_EQ(hits[b], 1) << format_name(f) << " " << w << "x" << h << " byte " << b;
    }
  const LayerSet yuy2 = layers_of(VideoFormat::YUY2, 5, 3);
  EXPECT_EQ(yuy2.layer[0].width, 6);  // three pairs
  EXPECT_EQ(yuy2.layer[1].width, 3);
  EXPECT_EQ(yuy2.layer[1].height, 3);
  EXPECT_EQ(yuy2.layer[1].offset[1], 3);  // V
  const LayerSet nv21 = layers_of(VideoFormat::NV21, 5, 3);
  EXPECT_EQ(nv21.layer[1].width, 3);
  EXPECT_EQ(nv21.layer[1].height, 2);
  EXPECT_EQ(nv21.layer[1].offset[0], 1);  // U after V
  const LayerSet bgrx = layers_of(VideoFormat::BGRx, 2, 2);
  EXPECT_TRUE(bgrx.layer[0].ycocg);
  EXPECT_EQ(bgrx.layer[0].channels, 4);
  EXPECT_EQ(bgrx.layer[0].offset[0], 2);  // R
  EXPECT_EQ(bgrx.layer[0].offset[3], 3);  // x
}

// ---- round trips ------------------------------------------------------------

TEST(Codec2Cpu, EveryFormatAndOddSizes) {
  std::mt19937 &gen = testing_util::rng();
  for (VideoFormat f : every_format())
    for (auto [w, h] : {std::pair{1, 1}, {2, 1}, {1, 3}, {5, 3}, {17, 9}, {37, 21}})
      for (int k : {0, 4, 20}) {
        std::vector<HostFrame> frames;
        for (int t = 0; t < 4; ++t) {
          frames.emplace_back(f, w, h, 3 + t);  // padded strides, different per frame
          fill_scene(frames.back(), t, gen, 3);
        }
        const Sequence s =
            encode_sequence(f, w, h, frames, {true, false, false, false}, {k, k, k, k});
        decode_sequence(f, w, h, s);
        if (k == 0) {
          for (size_t i = 0; i < frames.size(); ++i)
            ASSERT_EQ(s.references[i], packed_bytes(frames[i].view)) << "lossless";
        }
      }
}

// The encoder's budget of coded samples per lane (Geometry::lane_samples):
// a smaller one gives more lanes, and the bodies stay valid, within the
// bound and decodable by a decoder that knows nothing of it; an invalid
// budget is refused.
TEST(Codec2Cpu, SamplesPerLane) {
  std::mt19937 &gen = testing_util::rng();
  for (VideoFormat f : {VideoFormat::BGR, VideoFormat::I420, VideoFormat::YUY2}) {
    std::vector<HostFrame> frames;
    for (int t = 0; t < 4; ++t) {
      frames.emplace_back(f, 161, 97, 3);
      fill_scene(frames.back(), t, gen, 3);
    }
    const std::vector<bool> key = {true, false, false, false};
    const std::vector<int> k = {0, 0, 5, 20};
    const Geometry tiles{5, 4}, shorter{5, 4, 64};
    const Sequence usual = encode_sequence(f, 161, 97, frames, key, k, &tiles);
    const Sequence more = encode_sequence(f, 161, 97, frames, key, k, &shorter);
    decode_sequence(f, 161, 97, more);
    for (size_t i = 0; i < frames.size(); ++i) {
      // No tile is stored raw, so the lanes change the bytes sent and not
      // the picture.
      ASSERT_EQ(usual.stats[i].tiles[2] + more.stats[i].tiles[2], 0u) << format_name(f);
      EXPECT_EQ(more.references[i], usual.references[i]) << format_name(f) << " frame " << i;
      EXPECT_GT(more.stats[i].lanes, 2 * usual.stats[i].lanes) << format_name(f) << " frame " << i;
      EXPECT_GT(more.stats[i].body_bytes, usual.stats[i].body_bytes) << format_name(f);
    }
  }
  for (int bad : {0, -3, (1 << 24) + 1}) {
    const Geometry g{10, 8, bad};
    EXPECT_THROW(Encoder::create(*cpu, VideoFormat::BGR, 64, 64, &g), Error) << bad;
  }
}

TEST(Codec2Cpu, BoundOnRandomAndStructuredFrames) {
  std::mt19937 &gen = testing_util::rng();
  for (VideoFormat f : {VideoFormat::BGR, VideoFormat::I420, VideoFormat::RGBA})
    for (int k : {0, 1, 2, 7, 31, 127, 255}) {
      std::vector<HostFrame> frames;
      for (int t = 0; t < 5; ++t) {
        frames.emplace_back(f, 70, 45, 2);
        if (t % 2)
          testing_util::fill_random(frames.back(), gen);
        else
          fill_scene(frames.back(), t, gen, 30);
      }
      const Sequence s =
          encode_sequence(f, 70, 45, frames, {true, false, false, true, false}, {k, k, k, k, k});
      decode_sequence(f, 70, 45, s);
    }
}

TEST(Codec2Cpu, RandomFramesAreStoredRaw) {
  HostFrame f(VideoFormat::BGR, 64, 64);
  testing_util::fill_random(f);
  auto enc = Encoder::create(*cpu, VideoFormat::BGR, 64, 64);
  HostBytes body;
  const FrameStats st = enc->encode(f.view, 0, true, body);
  EXPECT_EQ(st.tiles[2], 1u) << "the one tile is raw";
  EXPECT_GE(body.size(), 64u * 64 * 3);
  // On top: the header, the tile table, and the tables, which the encoder
  // makes before it finds the tile larger than raw (about 230 bytes here).
  EXPECT_LT(body.size(), 64u * 64 * 3 + 400) << "header and tables only on top";
  // A smooth frame is coded.
  fill_scene(f, 0, testing_util::rng(), 0);
  const FrameStats st2 = enc->encode(f.view, 0, true, body);
  EXPECT_EQ(st2.tiles[1], 1u);
  EXPECT_LT(body.size(), 64u * 64 * 3 / 2);
}

// Tiles of noise whose coded size lies below, near and above their bytes.
// The encoder stores a tile raw without coding it where coded_tile_bound()
// shows that coding would not make it smaller: its bodies are those of an
// encoder that codes every tile (CUDADIFF_CODEC2_RAW_BOUND=0), and tiles
// coded, raw after coding and raw by their bound all occur.
TEST(Codec2Cpu, TilesNearTheRawLimit) {
  const int w = 1280, h = 128;  // eight tiles of 10x8 blocks side by side
  const uint32_t amplitude[8] = {120, 136, 140, 142, 143, 144, 160, 256};
  std::mt19937 gen(11);
  uint32_t tiles[3] = {0, 0, 0}, by_bound = 0;
  for (VideoFormat f : {VideoFormat::BGR, VideoFormat::I420})
    for (int k : {0, 1}) {
      auto with = Encoder::create(*cpu, f, w, h);
      std::unique_ptr<Encoder> without;
      {
        const testing_util::ScopedEnv off("CUDADIFF_CODEC2_RAW_BOUND", "0");
        without = Encoder::create(*cpu, f, w, h);
      }
      HostBytes a, b;
      for (int t = 0; t < 4; ++t) {
        HostFrame frame(f, w, h);
        testing_util::fill_noise_bands(frame, gen, amplitude, 8);
        const FrameStats sa = with->encode(frame.view, k, t % 3 == 0, a);
        const FrameStats sb = without->encode(frame.view, k, t % 3 == 0, b);
        const std::string where =
            std::string(format_name(f)) + " k " + std::to_string(k) + " frame " + std::to_string(t);
        ASSERT_EQ(bytes_of(a), bytes_of(b)) << where;
        for (int i = 0; i < 3; ++i) {
          EXPECT_EQ(sa.tiles[i], sb.tiles[i]) << where;
          tiles[i] += sa.tiles[i];
        }
        EXPECT_LE(sa.raw_by_bound, sa.tiles[2]) << where;
        EXPECT_EQ(sb.raw_by_bound, 0u) << where;
        by_bound += sa.raw_by_bound;
      }
    }
  EXPECT_GT(tiles[1], 0u);             // coded
  EXPECT_GT(by_bound, 0u);             // raw by the bound
  EXPECT_GT(tiles[2] - by_bound, 0u);  // raw after coding
}

TEST(Codec2Rules, IndexedDigitsAndDivision) {
  // Base N = max_index(k) + 1, D digits to a 32-bit word: N^D - 1 fits, N^(D+1) - 1 not.
  const int expect[][3] = {{0, 256, 4}, {1, 86, 4},  {2, 52, 5},   {4, 29, 6},
                           {7, 18, 7},  {14, 10, 9}, {170, 2, 32}, {255, 1, 32}};
  for (const auto &e : expect) {
    EXPECT_EQ(indexed_base(e[0]), e[1]) << e[0];
    EXPECT_EQ(indexed_digits(e[0]), e[2]) << e[0];
  }
  EXPECT_EQ(indexed_bytes(61440, 4), 4u * 10240);  // 6 digits a word
  EXPECT_EQ(indexed_bytes(61441, 4), 4u * 10241);
  EXPECT_EQ(indexed_bytes(10, 255), 4u);
  for (int k = 0; k <= 255; ++k) {
    const uint64_t n = uint64_t(indexed_base(k));
    uint64_t most = 1;
    for (int d = 0; d < indexed_digits(k); ++d) most *= n;
    ASSERT_LE(most, uint64_t(1) << 32) << k;
    if (n > 1) {
      ASSERT_GT(most * n, uint64_t(1) << 32) << k;
    }
  }
  // Div32: every divisor a base can be, on the edges of the quotients and
  // on random numbers.
  std::mt19937 gen(5);
  for (uint32_t d = 1; d <= 256; ++d) {
    const Div32 q = div32(d);
    for (uint32_t n : {0u, 1u, d - 1, d, d + 1, 0x7fffffffu, 0x80000000u, 0xfffffffeu, 0xffffffffu})
      ASSERT_EQ(q.div(n), n / d) << n << " / " << d;
    for (uint64_t m = 1; m <= 0xffffffffu / d; m = m * 3 + 1) {
      ASSERT_EQ(q.div(uint32_t(m * d - 1)), m - 1) << d;
      ASSERT_EQ(q.div(uint32_t(m * d)), m) << d;
    }
    for (int i = 0; i < 2000; ++i) {
      const uint32_t n = uint32_t(gen());
      ASSERT_EQ(q.div(n), n / d) << n << " / " << d;
    }
  }
  // The decision: never where a digit takes a byte, nor below the words' bits.
  EXPECT_FALSE(indexed_pays(int64_t(1) << 40, 1000, 0));
  EXPECT_FALSE(indexed_pays(int64_t(1) << 40, 1000, 1));
  EXPECT_TRUE(indexed_pays(2048 * int64_t(indexed_bytes(1000, 4)), 1000, 4));
  EXPECT_FALSE(indexed_pays(2048 * int64_t(indexed_bytes(1000, 4)) - 1, 1000, 4));
}

// Frames of noise at a threshold above 1: every tile not skipped is
// indexed (smaller than coded, and without rANS), the reference is the
// S-domain reconstruction of the input there, and the decoder shows it.
// Beside smooth tiles, which stay coded. A damaged word fails the body.
TEST(Codec2Cpu, NoiseIsIndexed) {
  std::mt19937 gen(17);
  for (VideoFormat f : {VideoFormat::BGR, VideoFormat::I420, VideoFormat::GRAY8})
    for (int threshold : {2, 5, 10, 20, 100})
      for (int size = 0; size < 2; ++size) {
        // 2 x 2 full tiles of 10x8 blocks; or 3 x 2 whose last column and
        // row are partial (10 and 2 samples: their few symbols spread over
        // many distributions, whose counts then tell too little for the
        // estimate, which keeps some of them coded).
        const int w = size ? 330 : 320, h = size ? 130 : 256;
        const std::vector<bool> keyframes = {true, false, false, true};
        std::vector<HostFrame> frames;
        for (int t = 0; t < 4; ++t) {
          frames.emplace_back(f, w, h, 3);
          testing_util::fill_random(frames.back(), gen);
        }
        const Sequence s =
            encode_sequence(f, w, h, frames, keyframes, std::vector<int>(4, threshold));
        decode_sequence(f, w, h, s);
        const std::string where = std::string(format_name(f)) + " threshold " +
                                  std::to_string(threshold) + " " + std::to_string(w);
        for (size_t i = 0; i < s.stats.size(); ++i) {
          const size_t raw = packed_bytes(frames[i].view).size();
          const int k = frame_k(threshold, keyframes[i]);
          EXPECT_EQ(s.stats[i].k, k) << where << " frame " << i;
          const std::string what =
              where + " frame " + std::to_string(i) + " (k " + std::to_string(k) + ", tiles " +
              std::to_string(s.stats[i].tiles[0]) + " " + std::to_string(s.stats[i].tiles[1]) +
              " " + std::to_string(s.stats[i].tiles[2]) + " " +
              std::to_string(s.stats[i].tiles[3]) + ")";
          // At k = 1 a word holds 4 digits: an index takes a byte, no less
          // than raw, and no tile is indexed (a keyframe at threshold 2).
          if (indexed_bytes(raw, k) >= raw) {
            EXPECT_EQ(s.stats[i].tiles[3], 0u) << what;
            continue;
          }
          // The body: at most the tiles' words, the header, the tile table
          // and the tables (of symbols that no tile codes).
          EXPECT_LE(s.stats[i].body_bytes, indexed_bytes(raw / 4, k) * 4 + 1500) << what;
          // (At k = 2 a digit takes 6.4 bits, about what coding one byte of
          // noise of one channel of YUV takes: either may win. So may a
          // delta's tile at threshold 100, whose differences within the
          // dead zone cost about what a digit of base 3 does: 2.5 % fewer
          // bytes coded than indexed in I420, where each tile went the
          // cheaper way by the estimate.)
          if (k == 2 && f != VideoFormat::BGR) continue;
          if (threshold == 100 && !keyframes[i]) continue;
          if (size) {
            EXPECT_GE(s.stats[i].tiles[3], 2u) << what;
            continue;
          }
          EXPECT_EQ(s.stats[i].tiles[3], 4u) << what;
          for (size_t b = 0; b < raw; ++b) {
            const int v = s.references[i][b];
            ASSERT_EQ(v, dequant_index(quant_index(v, k), k)) << where << " byte " << b;
          }
        }
        // A word past the largest its digits allow (the body's last, in an
        // indexed tile): the decoder refuses the body.
        if (indexed_digits(frame_k(threshold, true)) < 32 && s.stats[0].tiles[3] == 4 && !size) {
          std::vector<uint8_t> bad = s.bodies[0];
          for (size_t b = bad.size() - 4; b < bad.size(); ++b) bad[b] = 0xff;
          auto dec = Decoder::create(*cpu, f, w, h);
          std::string err;
          EXPECT_FALSE(dec->decode(bad.data(), bad.size(), &err)) << where;
          EXPECT_NE(err.find("damaged"), std::string::npos) << err;
        }
      }
  // Half noise, half a smooth picture: the noise's tiles indexed, the rest coded.
  HostFrame frame(VideoFormat::BGR, 320, 128);
  fill_scene(frame, 0, gen, 0);
  for (int y = 0; y < 128; ++y)
    for (int x = 0; x < 160 * 3; ++x)
      frame.view.data[0][size_t(y) * frame.view.stride[0] + x] = uint8_t(gen());
  auto enc = Encoder::create(*cpu, VideoFormat::BGR, 320, 128);
  HostBytes body;
  const FrameStats st = enc->encode(frame.view, 5, true, body);
  EXPECT_EQ(st.tiles[3], 1u);
  EXPECT_EQ(st.tiles[1], 1u);
}

TEST(Codec2Cpu, StillFramesCostAlmostNothing) {
  HostFrame f(VideoFormat::I420, 320, 240);
  fill_scene(f, 0, testing_util::rng(), 2);
  auto enc = Encoder::create(*cpu, VideoFormat::I420, 320, 240);
  HostBytes body, ref;
  enc->encode(f.view, 5, true, body);
  enc->read_reference(ref);
  // Every byte within k = 5 of the reference: every block and tile skipped.
  HostFrame g(VideoFormat::I420, 320, 240);
  std::uniform_int_distribution<int> noise(-5, 5);
  std::vector<uint8_t> next(ref.size());
  for (size_t i = 0; i < next.size(); ++i)
    next[i] = uint8_t(std::clamp(int(ref.data()[i]) + noise(testing_util::rng()), 0, 255));
  copy_frame_host(packed_view(VideoFormat::I420, 320, 240, next.data()), g.view);
  const FrameStats st = enc->encode(g.view, 5, false, body);
  EXPECT_EQ(st.tiles[1] + st.tiles[2], 0u);
  EXPECT_EQ(st.blocks[kSkip], 20u * 15);
  EXPECT_LT(body.size(), 16u);
  HostBytes after;
  enc->read_reference(after);
  EXPECT_EQ(bytes_of(after), bytes_of(ref)) << "the reference stays";
}

TEST(Codec2Cpu, LongRunOfDeltasWithChangingThresholds) {
  std::mt19937 &gen = testing_util::rng();
  const VideoFormat f = VideoFormat::NV12;
  const int w = 95, h = 61;
  std::vector<HostFrame> frames;
  std::vector<bool> key;
  std::vector<int> k;
  for (int t = 0; t < 40; ++t) {
    frames.emplace_back(f, w, h, 1);
    fill_scene(frames.back(), t, gen, 4);
    key.push_back(t == 0 || t == 25);
    k.push_back(t < 10 ? 3 : t < 20 ? 0 : t < 30 ? 12 : int(gen() % 40));
  }
  const Sequence s = encode_sequence(f, w, h, frames, key, k);
  decode_sequence(f, w, h, s);
  // A decoder can start at the second keyframe.
  decode_sequence(f, w, h, s, 25);
  // ... but not at a delta.
  auto dec = Decoder::create(*cpu, f, w, h);
  std::string err;
  EXPECT_FALSE(dec->decode(s.bodies[5].data(), s.bodies[5].size(), &err));
  EXPECT_NE(err.find("without a previous frame"), std::string::npos) << err;
}

TEST(Codec2Cpu, DeterministicAndIndependentOfStrides) {
  std::mt19937 &gen = testing_util::rng();
  std::vector<HostFrame> a, b;
  for (int t = 0; t < 4; ++t) {
    a.emplace_back(VideoFormat::BGRx, 50, 30, 0);
    fill_scene(a.back(), t, gen, 8);
    b.emplace_back(VideoFormat::BGRx, 50, 30, 13);
    copy_frame_host(a.back().view, b.back().view);
  }
  const std::vector<bool> key = {true, false, false, false};
  const std::vector<int> k = {2, 2, 2, 2};
  const Sequence sa = encode_sequence(VideoFormat::BGRx, 50, 30, a, key, k);
  const Sequence sb = encode_sequence(VideoFormat::BGRx, 50, 30, b, key, k);
  EXPECT_EQ(sa.bodies, sb.bodies);
}

TEST(Codec2Cpu, ThreadsGiveTheSameBytes) {
  // Large enough for several threads (and several tiles).
  std::mt19937 &gen = testing_util::rng();
  std::vector<HostFrame> frames;
  for (int t = 0; t < 3; ++t) {
    frames.emplace_back(VideoFormat::BGR, 400, 300);
    fill_scene(frames.back(), t, gen, 6);
  }
  const std::vector<bool> key = {true, false, false};
  const std::vector<int> k = {1, 1, 1};
  set_cpu_threads(1);
  const Sequence one = encode_sequence(VideoFormat::BGR, 400, 300, frames, key, k);
  set_cpu_threads(2);
  const Sequence two = encode_sequence(VideoFormat::BGR, 400, 300, frames, key, k);
  EXPECT_EQ(one.bodies, two.bodies);
  decode_sequence(VideoFormat::BGR, 400, 300, one);
  set_cpu_threads(1);
  decode_sequence(VideoFormat::BGR, 400, 300, one);
  set_cpu_threads(0);
  EXPECT_GT(one.stats[1].tiles[1], 1u);
}

// ---- damage -----------------------------------------------------------------

namespace {

// Damaged bodies, fixed content (smooth, so no raw tiles, whose bytes only
// the packet checksum covers), a keyframe and a delta, with rANS lanes
// (`geometry` null) or the tANS lanes of `geometry`: every truncation
// fails; a failed body (truncated or flipped) leaves the picture as it was
// and makes the decoder wait for a keyframe; every flipped byte fails or
// (in unused bits) decodes to the same picture, and detections dominate;
// extra bytes, an impossible geometry and unknown flags fail. A flip that
// keeps the lanes in step goes unnoticed with probability 2^-17 for rANS
// lanes (the end state's checksum), about 2^-10 for tANS lanes (10 bits of
// it), so the content is checked once and for all rather than a new one
// each run.
void check_damage_detected_or_harmless(const Geometry *geometry) {
  const bool tans = geometry && geometry->tans_lanes;
  std::mt19937 gen(12345);
  const VideoFormat f = VideoFormat::I420;
  const int w = 40, h = 36;
  std::vector<HostFrame> frames;
  for (int t = 0; t < 3; ++t) {
    frames.emplace_back(f, w, h);
    fill_scene(frames.back(), t, gen, 5);
  }
  const Sequence s = encode_sequence(f, w, h, frames, {true, false, false}, {2, 2, 2}, geometry);
  for (const FrameStats &st : s.stats) {
    ASSERT_EQ(st.tiles[2], 0u);
    if (tans) {  // several tiles of several lanes
      ASSERT_GT(st.tiles[1], 1u);
      ASSERT_GT(st.lanes, st.tiles[1]);
    }
  }
  for (size_t frame = 0; frame < 2; ++frame) {  // a keyframe, then a delta
    const std::vector<uint8_t> &body = s.bodies[frame];
    ASSERT_EQ(body[0] & kBodyTansLanes, tans ? kBodyTansLanes : 0);
    auto fresh = [&]() {
      auto dec = Decoder::create(*cpu, f, w, h);
      std::string err;
      if (frame == 1) {
        EXPECT_TRUE(dec->decode(s.bodies[0].data(), s.bodies[0].size(), &err)) << err;
      }
      return dec;
    };
    const std::vector<uint8_t> before = frame == 1 ? s.references[0] : std::vector<uint8_t>();
    for (size_t len = 0; len < body.size(); ++len) {
      auto dec = fresh();
      std::string err;
      ASSERT_FALSE(dec->decode(body.data(), len, &err)) << "truncated to " << len;
      if (frame == 1) {
        HostBytes pic;
        dec->read_reference(pic);
        ASSERT_EQ(bytes_of(pic), before) << "picture unchanged after a failure";
        // Deltas wait for a keyframe now; the keyframe and then the delta decode.
        ASSERT_FALSE(dec->has_reference());
        ASSERT_FALSE(dec->decode(body.data(), body.size(), &err));
        ASSERT_TRUE(dec->decode(s.bodies[0].data(), s.bodies[0].size(), &err)) << err;
        ASSERT_TRUE(dec->decode(body.data(), body.size(), &err)) << err;
        dec->read_reference(pic);
        ASSERT_EQ(bytes_of(pic), s.references[1]);
      }
    }
    int detected = 0, harmless = 0, undetected = 0;
    for (size_t at = 0; at < body.size(); ++at)
      for (uint8_t flip : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xff)}) {
        std::vector<uint8_t> bad = body;
        bad[at] ^= flip;
        auto dec = fresh();
        std::string err;
        if (!dec->decode(bad.data(), bad.size(), &err)) {
          detected++;
          if (frame == 1) {
            HostBytes pic;
            dec->read_reference(pic);
            EXPECT_EQ(bytes_of(pic), before)
                << "picture unchanged after a failure, byte " << at << " (^" << int(flip) << ")";
            EXPECT_FALSE(dec->has_reference()) << "byte " << at << " (^" << int(flip) << ")";
          }
          continue;
        }
        HostBytes pic;
        dec->read_reference(pic);
        if (bytes_of(pic) != s.references[frame]) {
          undetected++;
          ADD_FAILURE() << "undetected damage at byte " << at << " of " << body.size() << " (^"
                        << int(flip) << "), frame " << frame;
          continue;
        }
        harmless++;
      }
    EXPECT_GT(detected, 10 * (harmless + undetected + 1))
        << detected << " detected, " << harmless << " harmless, " << undetected
        << " undetected (frame " << frame << ")";
  }
  // Extra bytes at the end, an impossible geometry, unknown flags.
  std::vector<uint8_t> longer = s.bodies[0];
  longer.push_back(0);
  auto dec = Decoder::create(*cpu, f, w, h);
  std::string err;
  EXPECT_FALSE(dec->decode(longer.data(), longer.size(), &err));
  std::vector<uint8_t> bad = s.bodies[0];
  bad[2] = 0;
  EXPECT_FALSE(dec->decode(bad.data(), bad.size(), &err));
  bad = s.bodies[0];
  bad[0] = 0x81;
  EXPECT_FALSE(dec->decode(bad.data(), bad.size(), &err));
  EXPECT_NE(err.find("flags"), std::string::npos) << err;
  bad = s.bodies[0];
  bad[0] |= 0x08;
  EXPECT_FALSE(dec->decode(bad.data(), bad.size(), &err));
  EXPECT_NE(err.find("flags"), std::string::npos) << err;
}

}  // namespace

// rANS lanes: check_damage_detected_or_harmless().
TEST(Codec2Cpu, DamageIsDetectedOrHarmless) {
  check_damage_detected_or_harmless(nullptr);
}

// Frames in flight on the CPU backend: each decodes and writes at
// submission (a damaged one is refused there), finish() counts them, and
// more than kMaxInFlight, or a finish() with none, throw.
TEST(Codec2Cpu, FramesInFlightDecodeAtSubmission) {
  const VideoFormat fmt = VideoFormat::BGRx;
  const int w = 70, h = 40;
  std::mt19937 gen(2024);  // fixed content, whose damaged byte below is found
  std::vector<HostFrame> frames;
  for (int t = 0; t < 4; ++t) {
    frames.emplace_back(fmt, w, h);
    fill_scene(frames.back(), t, gen, 3);
  }
  const Sequence s = encode_sequence(fmt, w, h, frames, {true, false, false, false}, {3, 3, 3, 3});
  auto dec = Decoder::create(*cpu, fmt, w, h);
  std::string err;
  HostFrame a(fmt, w, h, 5), b(fmt, w, h, 5);
  ASSERT_TRUE(dec->submit(s.bodies[0].data(), s.bodies[0].size(), &err)) << err;
  dec->submit_write_frame(a.view);
  ASSERT_TRUE(dec->submit(s.bodies[1].data(), s.bodies[1].size(), &err)) << err;
  dec->submit_write_frame(b.view);
  EXPECT_EQ(dec->frames_in_flight(), 2);
  EXPECT_THROW(dec->submit(s.bodies[2].data(), s.bodies[2].size(), &err), Error);
  EXPECT_TRUE(dec->finish(&err));
  EXPECT_TRUE(dec->finish(&err));
  EXPECT_THROW(dec->finish(&err), Error);
  EXPECT_EQ(packed_bytes(a.view), s.references[0]);
  EXPECT_EQ(packed_bytes(b.view), s.references[1]);
  std::vector<uint8_t> bad = s.bodies[2];
  bad.back() ^= 0x5a;
  EXPECT_FALSE(dec->submit(bad.data(), bad.size(), &err));
  EXPECT_EQ(dec->frames_in_flight(), 0);
  EXPECT_FALSE(dec->submit(s.bodies[3].data(), s.bodies[3].size(), &err)) << "after a failure";
  EXPECT_THROW(dec->submit_write_frame(a.view), Error);
}

// Frames in flight on the CPU backend's encoder: each is encoded at
// submission, finish() and finish_async() hand the bodies back in order
// (the same bytes as encode()), and more than kMaxInFlight, or a finish()
// with none, throw.
TEST(Codec2Cpu, FramesInFlightEncodeAtSubmission) {
  const VideoFormat fmt = VideoFormat::I420;
  const int w = 66, h = 50;
  std::mt19937 &gen = testing_util::rng();
  std::vector<HostFrame> frames;
  for (int t = 0; t < 5; ++t) {
    frames.emplace_back(fmt, w, h);
    if (t == 2)
      testing_util::fill_random(frames.back(), gen);
    else
      fill_scene(frames.back(), t, gen, 3);
  }
  const std::vector<bool> key = {true, false, false, true, false};
  const std::vector<int> ks = {3, 3, 0, 7, 7};
  const Sequence s = encode_sequence(fmt, w, h, frames, key, ks);
  auto enc = Encoder::create(*cpu, fmt, w, h);
  HostBytes body;
  EXPECT_THROW(enc->finish(body), Error);
  constexpr size_t most = Encoder::kMaxInFlight;
  for (size_t t = 0; t < frames.size(); ++t) {
    enc->submit(frames[t].view, ks[t], key[t]);
    if (t + 1 < most) continue;
    EXPECT_EQ(enc->frames_in_flight(), int(most));
    EXPECT_THROW(enc->submit(frames[t].view, ks[t], false), Error);
    const size_t oldest = t + 1 - most;
    const FrameStats st = enc->finish(body);
    EXPECT_EQ(st.keyframe, key[oldest]) << oldest;
    EXPECT_EQ(bytes_of(body), s.bodies[oldest]) << "frame " << oldest;
  }
  // The rest by finish_async(), whose bodies are complete on return here
  // (and wait_body() has nothing to wait for).
  for (size_t t = frames.size() + 1 - most; t < frames.size(); ++t) {
    const FrameStats st = enc->finish_async(body);
    EXPECT_EQ(st.keyframe, key[t]) << t;
    EXPECT_EQ(bytes_of(body), s.bodies[t]) << "frame " << t;
    enc->wait_body(body);
    EXPECT_EQ(bytes_of(body), s.bodies[t]) << "frame " << t;
  }
  EXPECT_EQ(enc->frames_in_flight(), 0);
  EXPECT_THROW(enc->finish(body), Error);
  EXPECT_THROW(enc->finish_async(body), Error);
}

TEST(Codec2Cpu, RandomBodiesNeverCrash) {
  // Random bytes after a valid header, for each format: decode fails cleanly
  // (or, very rarely, succeeds) and never writes outside the frame. Deltas
  // get a picture to apply to first.
  std::mt19937 &gen = testing_util::rng();
  for (VideoFormat f : every_format()) {
    auto dec = Decoder::create(*cpu, f, 19, 11);
    auto enc = Encoder::create(*cpu, f, 19, 11);
    HostFrame key(f, 19, 11);
    fill_scene(key, 0, gen, 5);
    HostBytes key_body;
    enc->encode(key.view, 3, true, key_body);
    for (int round = 0; round < 40; ++round) {
      std::string err;
      if (round % 2 == 0) {
        ASSERT_TRUE(dec->decode(key_body.data(), key_body.size(), &err)) << err;
      }
      std::vector<uint8_t> body(4 + gen() % 300);
      for (uint8_t &b : body) b = uint8_t(gen());
      body[0] = uint8_t((round / 2) % 2 | ((round / 4) % 2) << 1);  // both rules of the classes
      body[2] = uint8_t(1 + gen() % 3);
      body[3] = uint8_t(1 + gen() % 3);
      dec->decode(body.data(), body.size(), &err);
      HostFrame out(f, 19, 11, 3);
      if (dec->has_reference()) {
        dec->write_frame(out.view);
        ASSERT_TRUE(out.padding_intact());
      }
    }
  }
}

// docs/stream-format.md, "Example: three bodies": the same bytes (also decoded by
// tests/core/codec2_reference.py from the document).
TEST(Codec2Cpu, WorkedExample) {
  const std::vector<uint8_t> key_in = {10, 12, 15, 15, 40, 11, 13, 14, 20, 41};
  const std::vector<uint8_t> delta_in = {10, 13, 17, 15, 44, 11, 12, 14, 26, 41};
  const std::vector<uint8_t> key_body = {0x03, 0x01, 0x0a, 0x08, 0x83, 0x9b, 0x93, 0xba, 0xa9,
                                         0xaa, 0xca, 0x2f, 0xa2, 0x8a, 0x84, 0x02, 0x00, 0x81,
                                         0x06, 0x3c, 0x1c, 0xb0, 0x33, 0x7d, 0x53};
  const std::vector<uint8_t> key_pic = {9, 12, 15, 15, 39, 12, 12, 15, 21, 42};
  const std::vector<uint8_t> delta_body = {
      0x02, 0x01, 0x0a, 0x08, 0x17, 0xc4, 0x09, 0xdc, 0x3e, 0xa2, 0x0a, 0x03, 0x00, 0x8c,
      0xa0, 0x02, 0x07, 0x00, 0x00, 0x00, 0x00, 0x81, 0x05, 0x71, 0xe8, 0x5c, 0x0a, 0x20};
  const std::vector<uint8_t> delta_pic = {9, 12, 18, 15, 45, 12, 12, 15, 27, 42};
  auto enc = Encoder::create(*cpu, VideoFormat::GRAY8, 5, 2);
  auto dec = Decoder::create(*cpu, VideoFormat::GRAY8, 5, 2);
  HostBytes body, pic;
  std::vector<uint8_t> in = key_in;
  enc->encode(packed_view(VideoFormat::GRAY8, 5, 2, in.data()), 1, true, body);
  EXPECT_EQ(bytes_of(body), key_body);
  std::string err;
  ASSERT_TRUE(dec->decode(key_body.data(), key_body.size(), &err)) << err;
  dec->read_reference(pic);
  EXPECT_EQ(bytes_of(pic), key_pic);
  in = delta_in;
  enc->encode(packed_view(VideoFormat::GRAY8, 5, 2, in.data()), 1, false, body);
  EXPECT_EQ(bytes_of(body), delta_body);
  ASSERT_TRUE(dec->decode(delta_body.data(), delta_body.size(), &err)) << err;
  dec->read_reference(pic);
  EXPECT_EQ(bytes_of(pic), delta_pic);
  // The same delta as the encoders wrote it before tile classes (flag 0x02
  // clear): the same picture from other tables and another lane state,
  // decoded by the rule before (read by the tile rule, it fails).
  const std::vector<uint8_t> old_delta_body = {
      0x00, 0x01, 0x0a, 0x08, 0x17, 0xc4, 0x09, 0xe4, 0x23, 0xaa, 0x18, 0xe0, 0x00, 0x23,
      0xa8, 0xe0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x81, 0x05, 0xc0, 0x22, 0x61, 0x10, 0x20};
  ASSERT_TRUE(dec->decode(key_body.data(), key_body.size(), &err)) << err;
  ASSERT_TRUE(dec->decode(old_delta_body.data(), old_delta_body.size(), &err)) << err;
  dec->read_reference(pic);
  EXPECT_EQ(bytes_of(pic), delta_pic);
  std::vector<uint8_t> flagged = old_delta_body;
  flagged[0] |= kBodyTileClasses;
  ASSERT_TRUE(dec->decode(key_body.data(), key_body.size(), &err)) << err;
  EXPECT_FALSE(dec->decode(flagged.data(), flagged.size(), &err));
  // The indexed tile (a body written by hand), and the same damaged: a
  // word past 29^6 - 1, the last word past 29^6 - 1 too, a size that is
  // not the tile's.
  const std::vector<uint8_t> indexed = {0x01, 0x04, 0x0a, 0x08, 0x00, 0x83, 0x08, 0xdd,
                                        0x3f, 0xfd, 0x19, 0xb2, 0x71, 0xc2, 0x06};
  const std::vector<uint8_t> indexed_pic = {27, 252, 0, 126, 63, 189, 9, 18, 234, 81, 135, 45};
  auto dec43 = Decoder::create(*cpu, VideoFormat::GRAY8, 4, 3);
  ASSERT_TRUE(dec43->decode(indexed.data(), indexed.size(), &err)) << err;
  dec43->read_reference(pic);
  EXPECT_EQ(bytes_of(pic), indexed_pic);
  for (const auto &[at, value] : std::vector<std::pair<size_t, uint8_t>>{{10, 0x23}, {14, 0x23}}) {
    std::vector<uint8_t> bad = indexed;
    bad[at] = value;  // 0x23fd3fdd = 603799517, 0x23c271b2 = 599945650
    EXPECT_FALSE(dec43->decode(bad.data(), bad.size(), &err)) << at;
    EXPECT_NE(err.find("damaged"), std::string::npos) << err;
  }
  std::vector<uint8_t> longer = indexed;
  longer[6] = 0x0a;  // 10 bytes
  longer.push_back(0), longer.push_back(0);
  EXPECT_FALSE(dec43->decode(longer.data(), longer.size(), &err));
  EXPECT_NE(err.find("indexed tile of the wrong size"), std::string::npos) << err;
}

TEST(Codec2Cpu, BodyHeader) {
  const uint8_t b[4] = {0x01, 20, 20, 8};
  BodyHeader h;
  std::string err;
  ASSERT_TRUE(read_body_header(b, 4, &h, &err)) << err;
  EXPECT_TRUE(h.keyframe);
  EXPECT_FALSE(h.tile_classes);
  EXPECT_EQ(h.k, 20);
  EXPECT_EQ(h.geometry.tile_bx, 20);
  EXPECT_EQ(h.geometry.tile_by, 8);
  EXPECT_FALSE(read_body_header(b, 3, &h, &err));
  EXPECT_FALSE(h.geometry.tans_lanes);
  // Flags: bit 0 keyframe, bit 1 the tile rule of the reference classes,
  // bit 2 tANS lanes; any other bit is refused.
  EXPECT_EQ(kBodyTileClasses, 0x02);
  EXPECT_EQ(kBodyTansLanes, 0x04);
  for (int flags = 0; flags < 256; ++flags) {
    const uint8_t f[4] = {uint8_t(flags), 3, 10, 8};
    BodyHeader fh;
    fh.geometry.tans_lanes = (flags & 4) == 0;  // the opposite: read_body_header() sets it
    const bool ok = read_body_header(f, 4, &fh, &err);
    EXPECT_EQ(ok, flags < 8) << flags;
    if (ok) {
      EXPECT_EQ(fh.keyframe, (flags & 1) != 0) << flags;
      EXPECT_EQ(fh.tile_classes, (flags & 2) != 0) << flags;
      EXPECT_EQ(fh.geometry.tans_lanes, (flags & 4) != 0) << flags;
      EXPECT_EQ(fh.k, 3) << flags;
    } else {
      EXPECT_EQ(err, "unknown body flags") << flags;
    }
  }
  // A decoder refuses a body with flag 0x08 (a keyframe it would decode
  // otherwise) and keeps its picture; with flag 0x04 it reads the body's
  // rANS lanes as tANS lanes, and fails too.
  std::vector<uint8_t> in(12 * 10);
  for (size_t i = 0; i < in.size(); ++i) in[i] = uint8_t(i * 7);
  auto enc = Encoder::create(*cpu, VideoFormat::GRAY8, 12, 10);
  auto dec = Decoder::create(*cpu, VideoFormat::GRAY8, 12, 10);
  HostBytes body, pic, before;
  enc->encode(packed_view(VideoFormat::GRAY8, 12, 10, in.data()), 4, true, body);
  std::vector<uint8_t> key = bytes_of(body);
  ASSERT_EQ(key[0], 0x01 | kBodyTileClasses);
  ASSERT_TRUE(dec->decode(key.data(), key.size(), &err)) << err;
  dec->read_reference(before);
  for (size_t i = 0; i < in.size(); ++i) in[i] = uint8_t(255 - i);
  enc->encode(packed_view(VideoFormat::GRAY8, 12, 10, in.data()), 4, true, body);
  key = bytes_of(body);
  key[0] |= 0x08;
  EXPECT_FALSE(dec->decode(key.data(), key.size(), &err));
  EXPECT_EQ(err, "codec2 body: unknown body flags");
  dec->read_reference(pic);
  EXPECT_EQ(bytes_of(pic), bytes_of(before));
  key[0] &= uint8_t(~0x08);
  key[0] |= kBodyTansLanes;
  EXPECT_FALSE(dec->decode(key.data(), key.size(), &err));
  dec->read_reference(pic);
  EXPECT_EQ(bytes_of(pic), bytes_of(before));
  key[0] &= uint8_t(~kBodyTansLanes);
  EXPECT_TRUE(dec->decode(key.data(), key.size(), &err)) << err;
  dec->read_reference(pic);
  EXPECT_NE(bytes_of(pic), bytes_of(before));
  const Geometry g = default_geometry(VideoFormat::BGR, 1920, 1080);
  EXPECT_EQ(g.tile_bx, 10);
  EXPECT_EQ(g.tile_by, 8);
}

// The bytes of a multi-frame stream, pinned: every body of a synthetic
// sequence (static areas, a moving square, a noisy patch, a cut) hashed per
// format and k. The sequence uses no std distributions, so it is the same
// with every standard library. A faster encoder must keep these hashes;
// a change here changes the bytes of every backend (the format or the
// reference encoder's choices, docs/stream-format.md).
namespace {
using testing_util::fnv1a;
using testing_util::kFnvBasis;
using testing_util::mix32;
void fill_pinned_scene(HostFrame &f, int t) {
  for (int p = 0; p < f.view.n_planes(); ++p) {
    const int row = int(f.view.row_bytes(p)), rows = f.view.plane_height(p);
    for (int y = 0; y < rows; ++y)
      for (int x = 0; x < row; ++x) {
        int v = (x * 5 + y * 3 + 40 * p) % 220 + 10;
        if ((x / 9 + y / 6) % 4 == 0) v = 250 - v / 3;
        const int sx = (7 * t) % std::max(row - 24, 1), sy = (4 * t) % std::max(rows - 16, 1);
        if (x >= sx && x < sx + 24 && y >= sy && y < sy + 16) v = 255 - v;
        const uint32_t r = mix32(uint32_t(t * 7919 + p * 104729) ^ uint32_t(y * 65537 + x));
        if (y > rows / 2 && x < row / 3) v += int(r % 9) - 4;  // noise in one corner
        if (t == 3 && y < rows / 4) v = int(r & 255);          // a cut across the top
        f.view.row(p, y)[x] = uint8_t(std::clamp(v, 0, 255));
      }
  }
}
}  // namespace

TEST(Codec2Cpu, PinnedStreamBytes) {
  struct Case {
    VideoFormat format;
    int k;
    uint64_t hash;
  };
  const Case cases[] = {
      {VideoFormat::BGR, 0, 0x2f2b90f7a3186b4eull},   {VideoFormat::BGR, 5, 0x72e9719178a31458ull},
      {VideoFormat::BGR, 20, 0x12012405fda2ad27ull},  {VideoFormat::I420, 0, 0x0057955218e95aecull},
      {VideoFormat::I420, 10, 0x1dfb6c2dcb0a3829ull},
  };
  const int w = 203, h = 141, frames = 7;
  for (const Case &c : cases) {
    auto enc = Encoder::create(*cpu, c.format, w, h);
    auto dec = Decoder::create(*cpu, c.format, w, h);
    uint64_t hash = kFnvBasis;
    uint32_t modes[kModes] = {0, 0, 0, 0};
    HostBytes body, ref, pic;
    for (int t = 0; t < frames; ++t) {
      HostFrame f(c.format, w, h);
      fill_pinned_scene(f, t);
      const FrameStats st = enc->encode(f.view, c.k, t == 0 || t == 5, body);
      for (int m = 0; m < kModes; ++m) modes[m] += st.blocks[m];
      hash = fnv1a(hash, body.data(), body.size());
      std::string err;
      ASSERT_TRUE(dec->decode(body.data(), body.size(), &err)) << err;
      dec->read_reference(pic);
      enc->read_reference(ref);
      ASSERT_EQ(bytes_of(pic), bytes_of(ref)) << format_name(c.format) << " k=" << c.k;
    }
    // Every block mode occurs, so the hash covers every path of the coder.
    for (int m = 0; m < kModes; ++m)
      EXPECT_GT(modes[m], 0u) << format_name(c.format) << " k=" << c.k << " mode " << m;
    EXPECT_EQ(hash, c.hash) << format_name(c.format) << " k=" << c.k << std::hex << " hash 0x"
                            << hash;
  }
}

// ---- the reference classes' rules (body flag kBodyTileClasses) -------------

namespace {
// Frame t of a scene for the tile rule: texture, a box moving across the
// tiles' edges, noise of +-7 new in every frame over the right two thirds
// and sparse peaks moving over the right half (temporal blocks over a
// textured reference, at every threshold up to 20). No std
// distributions: the same bytes with every standard library.
void fill_tile_scene(HostFrame &f, int t) {
  for (int p = 0; p < f.view.n_planes(); ++p) {
    const int row = int(f.view.row_bytes(p)), rows = f.view.plane_height(p);
    for (int y = 0; y < rows; ++y)
      for (int x = 0; x < row; ++x) {
        int v = (x * 11 + y * 7 + 30 * p) % 200 + 20;
        if ((x / 3 + y / 2) % 4 == 0) v = 230 - v / 2;
        const int bx = (6 * t) % std::max(row - 10, 1), by = (5 * t) % std::max(rows - 8, 1);
        if (x >= bx && x < bx + 10 && y >= by && y < by + 8) v = 255 - v;
        if (x >= row / 3)
          v += int(mix32(uint32_t(t * 7919 + p * 104729) ^ uint32_t(y * 65537 + x)) % 15) - 7;
        if (x >= row / 2 && (x * 7 + y * 3 + t) % 11 == 0) v += 40;  // sparse, past 20
        f.view.row(p, y)[x] = uint8_t(std::clamp(v, 0, 255));
      }
  }
}
}  // namespace

// Bodies of the encoder carry kBodyTileClasses (keyframes too), and round
// trip within the bound across the tiles' edges: tiles of 1x1 to 3x2
// blocks on odd sizes (tiles cut by the frame's edges), subsampled layers
// whose tiles hold half a block's samples, every byte within the threshold
// and the decoder's picture the encoder's. The bodies' hash is pinned: the
// encoder's vector paths (AVX2, SSE2: codec2, codec2_sse2) and its scalar
// one (codec2_scalar) find the same classes at every tile edge.
TEST(Codec2Cpu, TileClassesAcrossTileEdges) {
  uint64_t hash = kFnvBasis;
  for (VideoFormat f : {VideoFormat::BGR, VideoFormat::I420, VideoFormat::YUY2, VideoFormat::RGBA})
    for (const Geometry g : {Geometry{1, 1}, Geometry{2, 1}, Geometry{3, 2}})
      for (auto [w, h] : {std::pair{83, 61}, {50, 35}})
        for (int k : {0, 5, 20}) {
          SCOPED_TRACE(std::string(format_name(f)) + " " + std::to_string(w) + "x" +
                       std::to_string(h) + " tiles " + std::to_string(g.tile_bx) + "x" +
                       std::to_string(g.tile_by) + " threshold " + std::to_string(k));
          std::vector<HostFrame> frames;
          for (int t = 0; t < 5; ++t) {
            frames.emplace_back(f, w, h, 2);
            fill_tile_scene(frames.back(), t);
          }
          const Sequence s = encode_sequence(f, w, h, frames, {true, false, false, true, false},
                                             {k, k, k, k, k}, &g);
          decode_sequence(f, w, h, s);
          uint32_t temporal = 0;
          for (size_t i = 0; i < s.bodies.size(); ++i) {
            hash = fnv1a(hash, s.bodies[i].data(), s.bodies[i].size());
            BodyHeader bh;
            std::string err;
            ASSERT_TRUE(read_body_header(s.bodies[i].data(), s.bodies[i].size(), &bh, &err)) << err;
            EXPECT_TRUE(bh.tile_classes) << "frame " << i;
            EXPECT_EQ(s.bodies[i][0], (i == 0 || i == 3 ? 0x03 : 0x02)) << "frame " << i;
            const FrameStats &st = s.stats[i];
            EXPECT_GE(st.tiles[0] + st.tiles[1] + st.tiles[2] + st.tiles[3], 4u);
            temporal += st.blocks[kTemporal];
          }
          EXPECT_GT(temporal, 0u) << "temporal blocks read the reference classes";
          if (k == 0) {
            for (size_t i = 0; i < frames.size(); ++i)
              ASSERT_EQ(s.references[i], packed_bytes(frames[i].view)) << "lossless";
          }
        }
  EXPECT_EQ(hash, 0xdf60543fa84b8607ull) << std::hex << "hash 0x" << hash;
}

namespace {
// The bytes as the example files write them: two hex digits each, a space between.
std::string hex_of(const std::vector<uint8_t> &bytes) {
  std::string s;
  char b[4];
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::snprintf(b, sizeof b, i ? " %02x" : "%02x", bytes[i]);
    s += b;
  }
  return s;
}
// An example file of tests/core must hold `text` (CODEC2_WRITE_TILE_EXAMPLES
// set: it is rewritten first).
void check_example_file(const char *name, const std::string &text) {
  const std::string path = std::string(CODEC2_TEST_DIR) + "/" + name;
  if (std::getenv("CODEC2_WRITE_TILE_EXAMPLES")) {
    std::ofstream(path, std::ios::binary) << text;
    std::printf("wrote %s\n", path.c_str());
  }
  std::ifstream in(path, std::ios::binary);
  const std::string stored((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(stored, text) << path << " (CODEC2_WRITE_TILE_EXAMPLES=1 rewrites it)";
}
// A format and size of an example file.
struct ExampleCase {
  VideoFormat format;
  int w, h;
};
// An example file's sequence: three frames of fill_tile_scene() (a keyframe
// and two deltas) encoded at `threshold` with tiles `g` and decoded
// (decode_sequence()); its "format" line goes into `text`.
Sequence example_sequence(const ExampleCase &c, const Geometry &g, int threshold,
                          std::string &text) {
  std::vector<HostFrame> frames;
  for (int t = 0; t < 3; ++t) {
    frames.emplace_back(c.format, c.w, c.h);
    fill_tile_scene(frames.back(), t);
  }
  const Sequence s = encode_sequence(c.format, c.w, c.h, frames, {true, false, false},
                                     {threshold, threshold, threshold}, &g);
  decode_sequence(c.format, c.w, c.h, s);
  text += std::string("format ") + format_name(c.format) + " " + std::to_string(c.w) + " " +
          std::to_string(c.h) + "\n";
  return s;
}
// Frame i of `s` as an example file writes it.
std::string example_lines(const Sequence &s, size_t i) {
  return std::string(i == 0 ? "# keyframe\n" : "# delta\n") + "body    " + hex_of(s.bodies[i]) +
         "\npicture " + hex_of(s.references[i]) + "\n";
}
}  // namespace

// tests/core/codec2_tiles.example: bodies of several tiles each (tiles of
// one block, the frames' edges cutting tiles), which the CPU encoder writes
// exactly and tests/core/codec2_reference.py, written from
// docs/stream-format.md alone, decodes to the same pictures (the meson test
// codec2_spec): so the tile rule of the reference classes is the one the
// document states, at the tiles' edges too. Read with the rule before it
// (the flag cleared), the deltas decode to other pictures or not at all.
// CODEC2_WRITE_TILE_EXAMPLES=1 rewrites the file (after a deliberate
// change of the encoder's bytes).
TEST(Codec2Cpu, TileClassExamples) {
  const ExampleCase cases[] = {
      {VideoFormat::GRAY8, 21, 18}, {VideoFormat::I420, 23, 19}, {VideoFormat::BGR, 19, 17}};
  const Geometry g{1, 1};
  const int threshold = 5;
  std::string text =
      "# Bodies of several tiles each (tiles of 1 x 1 blocks, cut by the frames'\n"
      "# edges), threshold 5: a keyframe and two deltas per format, written by\n"
      "# the CPU encoder (tests/core/test_codec2.cpp, Codec2Cpu.TileClassExamples,\n"
      "# checks it still writes them; CODEC2_WRITE_TILE_EXAMPLES=1 rewrites this\n"
      "# file), decoded by tests/core/codec2_reference.py (the codec2_spec test).\n";
  for (const ExampleCase &c : cases) {
    SCOPED_TRACE(format_name(c.format));
    const Sequence s = example_sequence(c, g, threshold, text);
    for (size_t i = 0; i < s.bodies.size(); ++i) {
      const FrameStats &st = s.stats[i];
      EXPECT_EQ(st.tiles[0] + st.tiles[1] + st.tiles[2] + st.tiles[3], 4u);
      if (i > 0) {
        EXPECT_EQ(st.tiles[1], 4u) << "every tile of a delta coded, frame " << i;
        EXPECT_GT(st.blocks[kTemporal], 0u) << "frame " << i;
      }
      text += example_lines(s, i);
    }
    // The same bodies read with the rule before (flag cleared): the deltas'
    // reference classes differ, so a lane's symbols or the picture do.
    auto dec = Decoder::create(*cpu, c.format, c.w, c.h);
    int differ = 0;
    for (size_t i = 0; i < s.bodies.size(); ++i) {
      std::vector<uint8_t> old = s.bodies[i];
      old[0] &= uint8_t(~kBodyTileClasses);
      std::string err;
      HostBytes pic;
      if (!dec->decode(old.data(), old.size(), &err)) {
        EXPECT_GT(i, 0u) << err;
        ++differ;
        break;  // deltas wait for a keyframe now
      }
      dec->read_reference(pic);
      if (bytes_of(pic) != s.references[i]) ++differ;
      if (i == 0) {
        EXPECT_EQ(bytes_of(pic), s.references[0]) << "a keyframe reads no classes";
      }
    }
    EXPECT_GT(differ, 0) << "the flag must matter for these bodies";
  }
  check_example_file("codec2_tiles.example", text);
}

// ---- tANS lanes (body flag 0x04) --------------------------------------------

namespace {
Geometry tans_geometry(int bx, int by, int lane_samples = 2048) {
  Geometry g{bx, by, lane_samples};
  g.tans_lanes = true;
  return g;
}
}  // namespace

// Bodies with tANS lanes: every format, odd sizes, keyframes and deltas
// at several k, in several tiles of several lanes; every byte within k
// (exact at 0), the flag set, and the decoder's picture the encoder's.
TEST(Codec2Tans, EveryFormatAndOddSizes) {
  std::mt19937 &gen = testing_util::rng();
  for (VideoFormat f : every_format())
    for (auto [w, h] : {std::pair{1, 1}, {5, 3}, {37, 21}, {161, 97}})
      for (int k : {0, 4, 20}) {
        std::vector<HostFrame> frames;
        for (int t = 0; t < 4; ++t) {
          frames.emplace_back(f, w, h, 3 + t);
          fill_scene(frames.back(), t, gen, 3);
        }
        const Geometry g = tans_geometry(3, 2, 256);
        const Sequence s =
            encode_sequence(f, w, h, frames, {true, false, false, false}, {k, k, k, k}, &g);
        for (const std::vector<uint8_t> &b : s.bodies)
          ASSERT_EQ(b[0] & kBodyTansLanes, kBodyTansLanes);
        decode_sequence(f, w, h, s);
        if (k == 0) {
          for (size_t i = 0; i < frames.size(); ++i)
            ASSERT_EQ(s.references[i], packed_bytes(frames[i].view)) << "lossless";
        }
      }
}

// tests/core/codec2_tans.example: bodies with tANS lanes (flag 0x04) of
// several tiles of several lanes each (tiles of 2x2 blocks, a lane per 32
// samples), which the CPU encoder writes exactly, the CPU decoder decodes
// to the encoder's references, and tests/core/codec2_reference.py, written
// from docs/stream-format.md alone, decodes to the same pictures (the meson
// test codec2_spec): so the palette, the fills and the word order of the
// lanes are the ones the document states. CODEC2_WRITE_TILE_EXAMPLES=1
// rewrites the file (after a deliberate change of the encoder's bytes).
TEST(Codec2Tans, Examples) {
  const ExampleCase cases[] = {
      {VideoFormat::GRAY8, 37, 35}, {VideoFormat::I420, 35, 29}, {VideoFormat::BGR, 33, 19}};
  const Geometry g = tans_geometry(2, 2, 32);
  const int threshold = 5;
  std::string text =
      "# Bodies with tANS lanes (flag 0x04) of several tiles (tiles of 2 x 2\n"
      "# blocks, cut by the frames' edges) of several lanes each (a lane per 32\n"
      "# samples), threshold 5: a keyframe and two deltas per format, written by\n"
      "# the CPU encoder (tests/core/test_codec2.cpp, Codec2Tans.Examples, checks\n"
      "# it still writes them; CODEC2_WRITE_TILE_EXAMPLES=1 rewrites this file),\n"
      "# decoded by tests/core/codec2_reference.py (the codec2_spec test).\n";
  for (const ExampleCase &c : cases) {
    SCOPED_TRACE(format_name(c.format));
    const Sequence s = example_sequence(c, g, threshold, text);
    for (size_t i = 0; i < s.bodies.size(); ++i) {
      const FrameStats &st = s.stats[i];
      EXPECT_EQ(s.bodies[i][0], (i == 0 ? 0x07 : 0x06)) << "frame " << i;
      BodyHeader bh;
      std::string err;
      ASSERT_TRUE(read_body_header(s.bodies[i].data(), s.bodies[i].size(), &bh, &err)) << err;
      EXPECT_TRUE(bh.geometry.tans_lanes) << "frame " << i;
      EXPECT_EQ(bh.geometry.tile_bx, 2);
      EXPECT_EQ(bh.geometry.tile_by, 2);
      EXPECT_GE(st.tiles[0] + st.tiles[1] + st.tiles[2] + st.tiles[3], 2u);
      EXPECT_GT(st.tiles[1], 0u) << "frame " << i;
      EXPECT_GT(st.lanes, st.tiles[1]) << "a coded tile of several lanes, frame " << i;
      if (i > 0) {
        EXPECT_GT(st.blocks[kTemporal], 0u) << "frame " << i;
      }
      text += example_lines(s, i);
    }
    // Read as rANS lanes (the flag cleared) the keyframe fails or gives
    // another picture.
    auto dec = Decoder::create(*cpu, c.format, c.w, c.h);
    std::vector<uint8_t> old = s.bodies[0];
    old[0] &= uint8_t(~kBodyTansLanes);
    std::string err;
    HostBytes pic;
    if (dec->decode(old.data(), old.size(), &err)) {
      dec->read_reference(pic);
      EXPECT_NE(bytes_of(pic), s.references[0]) << "the flag must matter for these bodies";
    }
  }
  check_example_file("codec2_tans.example", text);
}

// Damaged bodies with tANS lanes, as Codec2Cpu.DamageIsDetectedOrHarmless
// for rANS lanes (check_damage_detected_or_harmless()). A tANS lane's end
// state holds only 10 bits of its symbols' checksum (a rANS lane's 17), so
// a flip may go unnoticed with probability about 2^-10 where the lanes stay
// in step: this content (fixed, several tiles of several lanes) is checked
// once and for all, and detections must dominate. (With state 0 as the end,
// before the checksum, 26 of these flips changed the picture unnoticed.)
TEST(Codec2Tans, DamageIsDetectedOrHarmless) {
  const Geometry g = tans_geometry(2, 2, 128);
  check_damage_detected_or_harmless(&g);
}

// tANS lanes change the bytes, not the picture: the same frames encoded
// with and without them (the same tiles and lanes per tile) give the same
// block modes, tile types and lanes, the same references and the same
// decoded pictures, keyframes and deltas at k = 0 and 10, in every
// format's layers. Fixed content without raw tiles (whether a tile is
// raw depends on its coded size, so it could differ).
TEST(Codec2Tans, SamePicturesAsRansLanes) {
  for (VideoFormat f : {VideoFormat::GRAY8, VideoFormat::I420, VideoFormat::YUY2, VideoFormat::BGR,
                        VideoFormat::RGBA})
    for (int k : {0, 10}) {
      SCOPED_TRACE(std::string(format_name(f)) + " threshold " + std::to_string(k));
      const int w = 83, h = 61;
      std::vector<HostFrame> frames;
      for (int t = 0; t < 4; ++t) {
        frames.emplace_back(f, w, h);
        fill_tile_scene(frames.back(), t);
      }
      const Geometry tans = tans_geometry(2, 2, 256);
      Geometry rans = tans;
      rans.tans_lanes = false;
      const std::vector<bool> key = {true, false, false, false};
      const Sequence a = encode_sequence(f, w, h, frames, key, {k, k, k, k}, &tans);
      const Sequence b = encode_sequence(f, w, h, frames, key, {k, k, k, k}, &rans);
      decode_sequence(f, w, h, a);
      decode_sequence(f, w, h, b);
      for (size_t i = 0; i < frames.size(); ++i) {
        SCOPED_TRACE("frame " + std::to_string(i));
        const FrameStats &sa = a.stats[i], &sb = b.stats[i];
        ASSERT_EQ(sa.tiles[2], 0u);
        ASSERT_EQ(sb.tiles[2], 0u);
        EXPECT_GT(sa.tiles[1], 1u);
        for (int t = 0; t < 4; ++t) EXPECT_EQ(sa.tiles[t], sb.tiles[t]) << "tile type " << t;
        for (int m = 0; m < kModes; ++m) EXPECT_EQ(sa.blocks[m], sb.blocks[m]) << "mode " << m;
        EXPECT_EQ(sa.lanes, sb.lanes);
        EXPECT_GT(sa.lanes, sa.tiles[1]);
        EXPECT_EQ(a.references[i], b.references[i]);
        EXPECT_EQ(a.bodies[i][0], b.bodies[i][0] | kBodyTansLanes);
        EXPECT_EQ(b.bodies[i][0] & kBodyTansLanes, 0);
        EXPECT_NE(std::vector<uint8_t>(a.bodies[i].begin() + 1, a.bodies[i].end()),
                  std::vector<uint8_t>(b.bodies[i].begin() + 1, b.bodies[i].end()));
        if (k == 0) {
          EXPECT_EQ(a.references[i], packed_bytes(frames[i].view)) << "lossless";
        }
      }
      uint32_t temporal = 0;
      for (size_t i = 1; i < frames.size(); ++i) temporal += a.stats[i].blocks[kTemporal];
      EXPECT_GT(temporal, 0u) << "deltas with temporal blocks";
    }
}
