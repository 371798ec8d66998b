// The version 2 encoder on the GPU writes the CPU reference's bodies byte for
// byte: every format, odd sizes, thresholds 0, 5 and 20, keyframes and runs
// of deltas on random frames (raw tiles), smooth moving scenes, and scenes
// with static regions (skipped, temporal and spatial blocks), from packed
// and padded device frames, one at a time and two to four in flight; the reference
// and the frame statistics are the CPU's too, and the CPU and CUDA decoders
// show the encoder's reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cudadiff/codec2.h"
#include "cudadiff/codec2_rules.h"
#include "frames.h"

using namespace cudadiff;
using namespace cudadiff::codec2;
using testing_util::bytes_of;
using testing_util::HostFrame;
using testing_util::ScopedEnv;

namespace {

// Content of a frame: random bytes, a smooth scene with a moving square and
// noise (fill_scene), or a static background with noise below the threshold
// in one part, a moving object and a region changing by much more; or a
// static picture of which one more block column in every ten changes in
// each frame (Columns), or a static picture in which one 16x16 square
// changes in each frame (Spot), or noise of five amplitudes in five
// vertical bands (NearRaw: tiles coded, raw after coding and raw by their
// bound, coded_tile_bound()).
enum class Content { Random, Scene, Static, Columns, Spot, NearRaw };

void fill_scene(HostFrame &f, int t, std::mt19937 &gen, int noise) {
  testing_util::fill_codec_scene(f, t, gen, noise, /*pan=*/true);
}

// A fixed camera: a textured background, noise of up to `noise` on the left
// half only, an object moving right, and a flickering patch.
void fill_static(HostFrame &f, int t, std::mt19937 &gen, int noise) {
  std::uniform_int_distribution<int> n(-noise, noise);
  for (int p = 0; p < f.view.n_planes(); ++p) {
    const size_t row = f.view.row_bytes(p);
    const int rows = f.view.plane_height(p);
    for (int y = 0; y < rows; ++y)
      for (size_t x = 0; x < row; ++x) {
        int v = 60 + int((x * 7) % 50) + (y / 9) * 3 + int((x / 13 + size_t(y) / 11) % 2) * 40;
        if (x < row / 2 && noise) v += n(gen);
        const size_t ox = size_t(5 * t) % std::max<size_t>(row, 1);
        if (x >= ox && x < ox + 24 && y >= rows / 3 && y < rows / 3 + 20) v = 200 - int(x - ox) * 3;
        if (x + 30 > row && y + 12 > rows && t % 2) v = 255 - v;
        f.view.row(p, y)[x] = uint8_t(std::clamp(v, 0, 255));
      }
  }
}

// Every byte of every plane: row(p, y)[x] = value(px, x, y), px the pixel
// column of byte x in the frame's pixels.
template <class Value>
void fill_bytes(HostFrame &f, const Value &value) {
  const int w = f.view.width;
  for (int p = 0; p < f.view.n_planes(); ++p) {
    const size_t row = f.view.row_bytes(p);
    for (int y = 0; y < f.view.plane_height(p); ++y)
      for (size_t x = 0; x < row; ++x)
        f.view.row(p, y)[x] = uint8_t(value(int(x * size_t(w) / row), x, y));
  }
}

// A textured picture; in frame t >= 1 the block columns bx (in the frame's
// pixels, 16 per block) with bx % 10 == (t - 1) % 10 become brighter by 97
// (modulo 256) and stay so: each delta changes one block column in ten.
void fill_columns(HostFrame &f, int t) {
  fill_bytes(f, [t](int px, size_t x, int y) {
    const int bx = px / 16;
    int v = 40 + int((x * 7 + size_t(y) * 3) % 90) + int((x / 3 + size_t(y)) % 5);
    for (int u = 1; u <= t; ++u)
      if ((bx % 10) == (u - 1) % 10) v += 97;
    return v & 255;
  });
}

// A textured picture; in frame t >= 1 the square of pixels
// (16 (t % 5), 16 (7 t % 11)) .. + 16 is inverted.
void fill_spot(HostFrame &f, int t) {
  fill_bytes(f, [t](int px, size_t x, int y) {
    const int v = 40 + int((x * 7 + size_t(y) * 3) % 90);
    return t > 0 && px / 16 == t % 5 && y / 16 == 7 * t % 11 ? 255 - v : v;
  });
}

void fill(HostFrame &f, Content c, int t, std::mt19937 &gen, int k) {
  switch (c) {
    case Content::NearRaw: {
      const uint32_t amplitude[5] = {120, 136, 144, 160, 256};
      testing_util::fill_noise_bands(f, gen, amplitude, 5);
      break;
    }
    case Content::Random:
      testing_util::fill_random(f, gen);
      break;
    case Content::Scene:
      fill_scene(f, t, gen, 3);
      break;
    case Content::Static:
      fill_static(f, t, gen, std::max(1, k));
      break;
    case Content::Columns:
      fill_columns(f, t);
      break;
    case Content::Spot:
      fill_spot(f, t);
      break;
  }
}

void expect_same_stats(const FrameStats &a, const FrameStats &b, const std::string &where) {
  EXPECT_EQ(a.keyframe, b.keyframe) << where;
  EXPECT_EQ(a.threshold, b.threshold) << where;
  EXPECT_EQ(a.body_bytes, b.body_bytes) << where;
  EXPECT_EQ(a.model_bytes, b.model_bytes) << where;
  EXPECT_EQ(a.table_bytes, b.table_bytes) << where;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a.tiles[i], b.tiles[i]) << where << " tiles " << i;
  EXPECT_EQ(a.lanes, b.lanes) << where;
  for (int i = 0; i < kModes; ++i) EXPECT_EQ(a.blocks[i], b.blocks[i]) << where << " mode " << i;
  EXPECT_EQ(a.changed_bytes, b.changed_bytes) << where;
}

struct Totals {
  uint64_t blocks[kModes] = {};
  uint64_t tiles[4] = {};
  uint64_t delta_lanes = 0;   // the lanes of the deltas' coded tiles
  uint64_t raw_by_bound = 0;  // the CUDA encoder's (FrameStats::raw_by_bound)
};

// Encodes `frames` frames of `content` on both backends (keyframes where
// t % key_every == 0, thresholds ks[t % size]) and compares everything.
// Padded: the device frame has rows padded to 256 bytes, else packed.
Totals compare(VideoFormat fmt, int w, int h, Content content, const std::vector<int> &ks,
               int frames, int key_every, bool padded, const Geometry *geometry = nullptr) {
  auto cpu = Context::cpu();
  auto gpu = Context::cuda(0);
  std::mt19937 &gen = testing_util::rng();
  auto cenc = Encoder::create(*cpu, fmt, w, h, geometry);
  auto genc = Encoder::create(*gpu, fmt, w, h, geometry);
  auto dec = Decoder::create(*cpu, fmt, w, h);
  auto gdec = Decoder::create(*gpu, fmt, w, h);
  DeviceBuffer packed(frame_size_packed(fmt, w, h));
  HostBytes cbody, gbody, cref, gref, dref, gdref;
  Totals totals;
  for (int t = 0; t < frames; ++t) {
    const int k = ks[size_t(t) % ks.size()];
    const bool key = t % key_every == 0;
    const std::string where = std::string(format_name(fmt)) + " " + std::to_string(w) + "x" +
                              std::to_string(h) + " k " + std::to_string(k) + " frame " +
                              std::to_string(t) + (key ? " (keyframe)" : " (delta)");
    HostFrame frame(fmt, w, h, 3);
    fill(frame, content, t, gen, k);
    DeviceFrame strided;
    FrameView dview;
    if (padded) {
      strided = testing_util::upload(frame, *gpu);
      dview = strided.view();
    } else {
      dview = packed_view(fmt, w, h, packed.data());
      copy_to_device(frame.view, dview, *gpu);
      gpu->synchronize();
    }
    const FrameStats cs = cenc->encode(frame.view, k, key, cbody);
    const FrameStats gs = genc->encode(dview, k, key, gbody);
    expect_same_stats(cs, gs, where);
    EXPECT_EQ(cbody.size(), gbody.size()) << where;
    const size_t n = std::min(cbody.size(), gbody.size());
    size_t first = n;
    for (size_t i = 0; i < n && first == n; ++i)
      if (cbody.data()[i] != gbody.data()[i]) first = i;
    EXPECT_EQ(first, n) << where << ": bodies differ first at byte " << first << " of "
                        << cbody.size();
    cenc->read_reference(cref);
    genc->read_reference(gref);
    EXPECT_TRUE(bytes_of(cref) == bytes_of(gref)) << where << ": references differ";
    std::string err;
    EXPECT_TRUE(dec->decode(gbody.data(), gbody.size(), &err)) << where << ": " << err;
    dec->read_reference(dref);
    EXPECT_TRUE(bytes_of(dref) == bytes_of(gref)) << where << ": the decoder shows another picture";
    EXPECT_TRUE(gdec->decode(gbody.data(), gbody.size(), &err)) << where << ": " << err;
    gdec->read_reference(gdref);
    EXPECT_TRUE(bytes_of(gdref) == bytes_of(gref))
        << where << ": the CUDA decoder shows another picture";
    for (int i = 0; i < kModes; ++i) totals.blocks[i] += gs.blocks[i];
    for (int i = 0; i < 4; ++i) totals.tiles[i] += gs.tiles[i];
    totals.raw_by_bound += gs.raw_by_bound;
    if (!key) totals.delta_lanes += gs.lanes;
    if (::testing::Test::HasFailure()) break;
  }
  return totals;
}

const VideoFormat kFormats[] = {VideoFormat::BGR,  VideoFormat::BGRx, VideoFormat::GRAY8,
                                VideoFormat::I420, VideoFormat::NV12, VideoFormat::YUY2};

}  // namespace

TEST(Codec2CudaEncoder, EveryFormatOddSizesAndThresholds) {
  const int sizes[][2] = {{1, 1}, {33, 17}, {70, 45}};
  for (VideoFormat f : kFormats)
    for (const auto &sz : sizes)
      for (int k : {0, 5, 20}) {
        compare(f, sz[0], sz[1], Content::Scene, {k}, 4, 3, (sz[0] + k) % 2 == 0);
        if (HasFailure()) return;
      }
}

TEST(Codec2CudaEncoder, OtherFormats) {
  const VideoFormat formats[] = {VideoFormat::RGB,  VideoFormat::RGBA, VideoFormat::ARGB,
                                 VideoFormat::YV12, VideoFormat::NV21, VideoFormat::UYVY,
                                 VideoFormat::Y444, VideoFormat::Y42B};
  for (VideoFormat f : formats) {
    compare(f, 37, 21, Content::Scene, {5}, 3, 3, true);
    if (HasFailure()) return;
  }
}

TEST(Codec2CudaEncoder, RandomFramesGiveRawTiles) {
  Totals all;
  for (VideoFormat f : kFormats)
    for (int k : {0, 5}) {
      const Totals t = compare(f, 100, 70, Content::Random, {k}, 3, 2, k == 0);
      for (int i = 0; i < 4; ++i) all.tiles[i] += t.tiles[i];
      if (HasFailure()) return;
    }
  EXPECT_GT(all.tiles[2], 0u);  // raw tiles occurred
}

// Noise at quantisers above 1: tiles indexed (codec2_rules.h,
// indexed_pays()) on both backends alike, beside coded ones (a frame's
// partial tiles), in keyframes and deltas, packed and padded, every format
// of one and of two layers; the reconstruction of those tiles rewritten on
// the device before the next frame reads it.
TEST(Codec2CudaEncoder, NoiseIsIndexed) {
  Totals all;
  for (VideoFormat f : kFormats) {
    const Totals t =
        compare(f, 330, 260, Content::Random, {5, 20, 10, 2}, 5, 3, f != VideoFormat::BGR);
    for (int i = 0; i < 4; ++i) all.tiles[i] += t.tiles[i];
    EXPECT_GT(t.tiles[3], 0u) << format_name(f);
    if (HasFailure()) return;
  }
  EXPECT_GT(all.tiles[1], 0u);
}

// Tiles near the raw limit: those the CUDA encoder stores raw by their
// bound without coding them are the CPU's raw tiles too, with both
// backends' bounds on, and with both off (CUDADIFF_CODEC2_RAW_BOUND=0).
TEST(Codec2CudaEncoder, TilesNearTheRawLimit) {
  for (const bool bound : {true, false}) {
    std::unique_ptr<ScopedEnv> off;
    if (!bound) off = std::make_unique<ScopedEnv>("CUDADIFF_CODEC2_RAW_BOUND", "0");
    Totals all;
    for (VideoFormat f : {VideoFormat::BGR, VideoFormat::I420})
      for (int k : {0, 1}) {
        const Totals t = compare(f, 800, 128, Content::NearRaw, {k}, 4, 3, k == 1);
        for (int i = 0; i < 4; ++i) all.tiles[i] += t.tiles[i];
        all.raw_by_bound += t.raw_by_bound;
        if (HasFailure()) return;
      }
    EXPECT_GT(all.tiles[1], 0u) << "bound " << bound;
    EXPECT_GT(all.tiles[2], all.raw_by_bound) << "bound " << bound;  // raw after coding
    if (bound)
      EXPECT_GT(all.raw_by_bound, 0u);
    else
      EXPECT_EQ(all.raw_by_bound, 0u);
  }
}

// Static regions: every block mode occurs, and whole skipped tiles.
TEST(Codec2CudaEncoder, StaticRegionsAndEveryMode) {
  Totals all;
  for (VideoFormat f : kFormats)
    for (int k : {0, 5, 20}) {
      const Totals t = compare(f, 700, 300, Content::Static, {k}, 5, 100, k == 5);
      for (int i = 0; i < kModes; ++i) all.blocks[i] += t.blocks[i];
      for (int i = 0; i < 4; ++i) all.tiles[i] += t.tiles[i];
      if (HasFailure()) return;
    }
  for (int i = 0; i < kModes; ++i) EXPECT_GT(all.blocks[i], 0u) << "mode " << i;
  EXPECT_GT(all.tiles[0], 0u);  // skipped tiles
}

// Lanes that bound the walk (codec2_rules.h, bounded_lanes()): at 320x256
// BGR each delta codes one block column in each of the 4 tiles of 10x8
// blocks; its 6,144 sample components would take 3 lanes, whose walk (901
// steps) exceeds a full tile's 702, as 4 lanes' (736) does, so each tile
// takes 5, on both backends alike; with a bound of 120 % (842 steps), 4.
// (The walk's tests are four, so that racecheck can take them one by one.)
TEST(Codec2CudaEncoder, LanesThatBoundTheWalk) {
  Geometry bound120;
  bound120.walk_bound = 120;
  for (int k : {0, 5, 20}) {
    Totals t = compare(VideoFormat::BGR, 320, 256, Content::Columns, {k}, 5, 100, k == 5);
    EXPECT_EQ(t.tiles[1], 4u * 5) << "k " << k;
    EXPECT_EQ(t.delta_lanes, 4u * 4 * 5) << "k " << k;
    t = compare(VideoFormat::BGR, 320, 256, Content::Columns, {k}, 5, 100, k != 5, &bound120);
    EXPECT_EQ(t.delta_lanes, 4u * 4 * 4) << "k " << k << ", bound 120 %";
    if (HasFailure()) return;
  }
}

// The same on odd sizes, planar and packed YUV, and 1080p.
TEST(Codec2CudaEncoder, LanesThatBoundTheWalkOtherFormats) {
  compare(VideoFormat::I420, 330, 250, Content::Columns, {0, 20, 5}, 12, 100, false);
  compare(VideoFormat::YUY2, 333, 141, Content::Columns, {3, 0}, 6, 100, true);
  compare(VideoFormat::BGR, 1920, 1080, Content::Columns, {10}, 4, 100, true);
}

// No bound, and tiles too large for the CUDA encoder's bitmaps of coded
// blocks.
TEST(Codec2CudaEncoder, LanesThatBoundTheWalkLargeTiles) {
  Geometry none, wide, tall;
  none.walk_bound = 0;
  wide.tile_bx = 70;  // wider than 64 blocks: the modes in global memory
  wide.tile_by = 3;
  tall.tile_bx = 2;
  tall.tile_by = 66;
  compare(VideoFormat::BGR, 320, 256, Content::Columns, {5}, 4, 100, false, &none);
  compare(VideoFormat::BGR, 1200, 70, Content::Columns, {0, 5}, 5, 100, true, &wide);
  compare(VideoFormat::GRAY8, 70, 1100, Content::Columns, {0, 20}, 5, 100, false, &tall);
  compare(VideoFormat::BGR, 1040, 90, Content::Columns, {0}, 4, 100, false, &wide);
}

// A tile too large for the CUDA encoder's bitmaps of steps (one tile of
// 20x60 blocks of which a delta codes one or two: the bitmaps of the
// candidates, one lane to 31, would take 38,774 words, so each candidate's
// thread walks the tile's runs of coded blocks instead).
TEST(Codec2CudaEncoder, LanesThatBoundTheWalkOneTile) {
  Geometry whole;
  whole.tile_bx = 20;
  whole.tile_by = 60;
  const Totals t = compare(VideoFormat::BGR, 320, 960, Content::Spot, {0, 5}, 4, 100, true, &whole);
  EXPECT_EQ(t.tiles[1], 4u);  // the keyframe's and the deltas' one tile, coded
  // the first delta codes the square, the others the one they leave too
  EXPECT_EQ(t.blocks[kSkip], 1199u + 2 * 1198);
}

TEST(Codec2CudaEncoder, ChangingThresholdsAndKeyframes) {
  compare(VideoFormat::BGR, 200, 130, Content::Scene, {0, 5, 20, 3, 255, 12}, 12, 5, true);
  compare(VideoFormat::I420, 201, 131, Content::Static, {20, 0, 7}, 9, 4, false);
}

// Other tile geometries (the body's header carries it): many small tiles
// with few lanes, tall and wide tiles; and other budgets of samples per
// lane (small tiles with up to 32 lanes, a lane per row). A test per
// geometry.
class TileGeometries : public testing::TestWithParam<Geometry> {};

TEST_P(TileGeometries, SameBodies) {
  const Geometry g = GetParam();
  for (VideoFormat f : {VideoFormat::BGR, VideoFormat::I420, VideoFormat::YUY2}) {
    compare(f, 150, 90, Content::Static, {5}, 4, 3, true, &g);
    compare(f, 61, 37, Content::Scene, {0}, 3, 2, false, &g);
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Codec2CudaEncoder, TileGeometries,
                         testing::Values(Geometry{1, 1}, Geometry{3, 2}, Geometry{1, 9},
                                         Geometry{255, 255}, Geometry{5, 4, 256},
                                         Geometry{2, 2, 16}),
                         [](const testing::TestParamInfo<Geometry> &info) {
                           const Geometry &g = info.param;
                           return std::to_string(g.tile_bx) + "x" + std::to_string(g.tile_by) +
                                  "_" + std::to_string(g.lane_samples);
                         });

// The rANS pass in batches of one step, which a device with 64 KB of shared
// memory per block takes for formats of 4 components (the ring of 8 steps
// does not fit beside the tables); CUDADIFF_CODEC2_RANS_BATCH=1 makes every
// device take it. The same bodies as the CPU's.
TEST(Codec2CudaEncoder, RansBatchesOfOneStep) {
  const ScopedEnv batches("CUDADIFF_CODEC2_RANS_BATCH", "1");
  for (VideoFormat f : {VideoFormat::BGRx, VideoFormat::BGR, VideoFormat::I420}) {
    compare(f, 200, 130, Content::Scene, {0, 5, 20}, 6, 4, true);
    compare(f, 320, 256, Content::Columns, {5}, 4, 100, false);
    if (HasFailure()) break;
  }
}

// The device makes the tables by the CPU's rules (codec2_tables.h): deltas
// of similar content reuse the previous frame's tables or copy the table
// listed before (long runs of copies among the many distributions of four
// components), a change of content or threshold makes new ones; the bodies
// (their model sections included) must be the CPU's.
TEST(Codec2CudaEncoder, TablesPreviousCopyAndNew) {
  compare(VideoFormat::BGRx, 160, 96, Content::Static, {0, 0, 0, 3, 3, 3}, 12, 12, false);
  compare(VideoFormat::GRAY8, 97, 61, Content::Scene, {2, 2, 9}, 9, 9, true);
}

TEST(Codec2CudaEncoder, FullHd) {
  const Totals t = compare(VideoFormat::BGR, 1920, 1080, Content::Scene, {5}, 3, 10, true);
  EXPECT_GT(t.tiles[1], 0u);
}

TEST(Codec2CudaEncoder, RefusesWhatTheCpuRefuses) {
  auto gpu = Context::cuda(0);
  auto enc = Encoder::create(*gpu, VideoFormat::GRAY8, 16, 16);
  DeviceFrame frame(VideoFormat::GRAY8, 16, 16);
  HostBytes body;
  EXPECT_THROW(enc->encode(frame.view(), 5, false, body), Error);  // no reference yet
  EXPECT_THROW(enc->encode(frame.view(), 256, true, body), Error);
  HostFrame host(VideoFormat::GRAY8, 16, 16);
  EXPECT_THROW(enc->encode(host.view, 5, true, body), Error);  // host memory
  DeviceFrame other(VideoFormat::GRAY8, 16, 17);
  EXPECT_THROW(enc->encode(other.view(), 5, true, body), Error);
  EXPECT_FALSE(enc->has_reference());
}

namespace {

// Frames in flight (submit() and finish(), `depth` at a time: 2 up to
// Encoder::kMaxInFlight, as cudadiffenc keeps them): the bodies, statistics
// and final reference are the CPU's, with keyframes and changing thresholds
// between deltas, raw tiles (random frames) and tiles with few lanes. As
// cudadiffenc does: each frame is copied up asynchronously on the context's
// stream into one of `depth` device frames, which the frame `depth` later
// overwrites once this one is finished. `lag` > 0: each body comes from
// finish_async() and is waited for (wait_body()) and compared only after
// `lag` more frames were finished (cudadiffenc waits after one), each into
// its own buffer.
struct InFlightCase {
  VideoFormat fmt;
  int w, h;
  Content content;
  std::vector<int> ks;
  int frames, key_every;
  int depth = Encoder::kMaxInFlight;
  int lag = 0;
  // > 0: each GPU body's buffer reserved that large before the first frame,
  // so that none grows while frames are in flight (pinned memory is freed
  // with cudaFreeHost, which waits for the whole device).
  size_t reserve = 0;
};
void compare_in_flight(const InFlightCase &c) {
  auto cpu = Context::cpu();
  auto gpu = Context::cuda(0);
  std::mt19937 &gen = testing_util::rng();
  // (before the encoder, which waits for any body still on its way when it goes)
  std::vector<HostBytes> gbodies(size_t(c.lag + 1));
  if (c.reserve)
    for (HostBytes &b : gbodies) b.reserve(c.reserve);
  auto cenc = Encoder::create(*cpu, c.fmt, c.w, c.h);
  auto genc = Encoder::create(*gpu, c.fmt, c.w, c.h);
  std::vector<HostBytes> cbodies(size_t(c.frames));
  std::vector<FrameStats> cstats(size_t(c.frames));
  std::vector<HostFrame> frames;  // each kept until its upload is surely done
  frames.reserve(size_t(c.frames));
  std::vector<DeviceFrame> inputs;
  for (int i = 0; i < c.depth; ++i) inputs.emplace_back(c.fmt, c.w, c.h);
  auto where = [&](int t) {
    return std::string(format_name(c.fmt)) + " " + std::to_string(c.w) + "x" + std::to_string(c.h) +
           " frame " + std::to_string(t) + " (" + std::to_string(c.depth) + " in flight" +
           (c.lag ? ", bodies waited for " + std::to_string(c.lag) + " frames later" : "") + ")";
  };
  auto compare_body = [&](int t) {
    HostBytes &gbody = gbodies[size_t(t) % gbodies.size()];
    if (c.lag) genc->wait_body(gbody);
    EXPECT_TRUE(bytes_of(cbodies[size_t(t)]) == bytes_of(gbody)) << where(t) << ": bodies differ";
    // The body's buffer is reused by a later finish(): overwrite it.
    std::memset(gbody.data(), 0xA5, gbody.size());
  };
  int finished = 0;
  auto finish_and_compare = [&](int t) {
    EXPECT_EQ(t, finished);
    HostBytes &gbody = gbodies[size_t(t) % gbodies.size()];
    const FrameStats gs = c.lag ? genc->finish_async(gbody) : genc->finish(gbody);
    finished++;
    expect_same_stats(cstats[size_t(t)], gs, where(t));
    // One frame at a time the device writes the payloads into the body
    // (mapped): complete on return.
    if (c.lag && c.depth == 1) {
      EXPECT_TRUE(bytes_of(cbodies[size_t(t)]) == bytes_of(gbody)) << where(t) << ": not complete";
    }
    if (t >= c.lag) compare_body(t - c.lag);
  };
  auto k_of = [&](int t) { return c.ks[size_t(t) % c.ks.size()]; };
  // The CPU's bodies first, so that the GPU's frames follow each other
  // closely (each submitted while the ones before are still being coded).
  for (int t = 0; t < c.frames; ++t) {
    frames.emplace_back(c.fmt, c.w, c.h, 3);
    fill(frames.back(), c.content, t, gen, k_of(t));
    cstats[size_t(t)] =
        cenc->encode(frames.back().view, k_of(t), t % c.key_every == 0, cbodies[size_t(t)]);
  }
  for (int t = 0; t < c.frames; ++t) {
    const FrameView &input = inputs[size_t(t % c.depth)].view();
    copy_to_device(frames[size_t(t)].view, input, *gpu);
    genc->submit(input, k_of(t), t % c.key_every == 0);
    EXPECT_EQ(genc->frames_in_flight(), std::min(t + 1, c.depth)) << where(t);
    if (t + 1 >= c.depth) finish_and_compare(t + 1 - c.depth);
    if (::testing::Test::HasFailure()) return;
  }
  for (int t = std::max(0, c.frames + 1 - c.depth); t < c.frames; ++t) finish_and_compare(t);
  for (int t = std::max(0, c.frames - c.lag); t < c.frames; ++t) compare_body(t);
  EXPECT_EQ(genc->frames_in_flight(), 0);
  HostBytes cref, gref;
  cenc->read_reference(cref);
  genc->read_reference(gref);
  EXPECT_TRUE(bytes_of(cref) == bytes_of(gref)) << where(c.frames) << ": references differ";
}

}  // namespace

TEST(Codec2CudaEncoder, FramesInFlight) {
  const InFlightCase cases[] = {
      {VideoFormat::BGR, 200, 120, Content::Random, {0, 5}, 6, 3},
      {VideoFormat::BGR, 320, 256, Content::Columns, {5, 0, 20}, 6, 100},
      {VideoFormat::I420, 201, 131, Content::Static, {20, 0, 7}, 8, 5},
      {VideoFormat::BGR, 200, 120, Content::Random, {0, 5}, 6, 3, 2},
      {VideoFormat::BGR, 320, 256, Content::Columns, {5, 0, 20}, 7, 100, 2},
      {VideoFormat::I420, 201, 131, Content::Static, {20, 0, 7}, 8, 5, 2},
      {VideoFormat::BGR, 200, 120, Content::Random, {0, 5}, 7, 3, 3},
      {VideoFormat::I420, 201, 131, Content::Static, {20, 0, 7}, 9, 5, 3},
  };
  for (const InFlightCase &c : cases) {
    compare_in_flight(c);
    if (HasFailure()) return;
  }
}

TEST(Codec2CudaEncoder, FramesInFlightFullHd) {
  compare_in_flight({VideoFormat::BGR, 1920, 1080, Content::Scene, {5, 5, 20, 0}, 7, 4});
  compare_in_flight({VideoFormat::BGR, 1920, 1080, Content::Random, {20, 0, 5}, 7, 100});
}

// finish_async(): the same bodies once wait_body() says they are complete,
// each waited for one frame later (as cudadiffenc does: random frames' raw
// tiles, megabytes each, still on their way), several frames later, and
// later than the encoder keeps bodies on their way (kMaxInFlight: a further
// one waits for the oldest); one frame at a time (the device writes the
// payloads into a mapped body: complete on return), and wait_body() of a
// body that is not on its way returns at once.
TEST(Codec2CudaEncoder, BodiesOnTheirWay) {
  constexpr int most = Encoder::kMaxInFlight;
  compare_in_flight({VideoFormat::BGR, 1920, 1080, Content::Random, {0, 20, 0}, 8, 100, most, 1});
  compare_in_flight({VideoFormat::BGR, 200, 120, Content::Random, {0, 5}, 9, 3, 3, 2});
  compare_in_flight(
      {VideoFormat::I420, 201, 131, Content::Static, {20, 0, 7}, 12, 5, most, most + 2});
  compare_in_flight({VideoFormat::BGR, 320, 256, Content::Columns, {5, 0}, 5, 100, 1, 1});
  // A body still on its way given to finish_async() again: the encoder
  // waits for its copy before it writes the next body into it.
  auto gpu = Context::cuda(0);
  auto cpu = Context::cpu();
  constexpr int w = 640, h = 360, n = 6;
  HostBytes body;  // (before the encoder, which waits for its copy when it goes)
  auto genc = Encoder::create(*gpu, VideoFormat::BGR, w, h);
  auto cenc = Encoder::create(*cpu, VideoFormat::BGR, w, h);
  std::mt19937 &gen = testing_util::rng();
  std::vector<HostFrame> frames;
  std::vector<HostBytes> cbodies(n);
  std::vector<DeviceFrame> inputs;
  frames.reserve(n);  // (each read by its upload until the frame is finished)
  inputs.reserve(n);
  for (int t = 0; t < n; ++t) {
    frames.emplace_back(VideoFormat::BGR, w, h, 3);
    fill(frames.back(), Content::Random, t, gen, 0);
    cenc->encode(frames.back().view, 0, t == 0, cbodies[size_t(t)]);
    inputs.emplace_back(VideoFormat::BGR, w, h);
    copy_to_device(frames.back().view, inputs.back().view(), *gpu);
    genc->submit(inputs.back().view(), 0, t == 0);
    if (t >= 2) genc->finish_async(body);  // frames 0 .. n-3, each into the same body
  }
  genc->finish_async(body);
  genc->finish_async(body);
  genc->wait_body(body);
  EXPECT_TRUE(bytes_of(cbodies[n - 1]) == bytes_of(body)) << "the last body";
  // wait_body() of a body that is not on its way returns at once.
  HostBytes never;
  genc->wait_body(never);
  never.resize(100);
  genc->wait_body(never);
}

// A frame's kernels after prepare_kernel go as a CUDA graph, made per slot,
// threshold, kind of frame and place of the rotating buffers, 32 kept.
// CUDADIFF_CODEC2_GRAPHS=require makes a graph that the runtime cannot make
// or launch an error (else the encoder launches the kernels one by one from
// then on): seven thresholds over keyframes and deltas need more graphs than
// are kept (one frame at a time, the rotation's four places, seven
// thresholds and a keyframe every fifth frame make each of the 60 frames'
// graphs a new one), so that some give way and are made again, one frame
// at a time and kMaxInFlight in flight. The same bodies as the CPU's.
TEST(Codec2CudaEncoder, KernelsInGraphs) {
  const ScopedEnv graphs("CUDADIFF_CODEC2_GRAPHS", "require");
  compare(VideoFormat::BGR, 96, 64, Content::Scene, {0, 5, 20, 3, 255, 12, 7}, 60, 5, true);
  compare(VideoFormat::I420, 97, 61, Content::Static, {20, 0, 7}, 14, 5, false);
}

TEST(Codec2CudaEncoder, KernelsInGraphsInFlight) {
  const ScopedEnv graphs("CUDADIFF_CODEC2_GRAPHS", "require");
  compare_in_flight({VideoFormat::BGR, 200, 120, Content::Scene, {5, 0, 20, 9, 3}, 16, 5});
}

// CODEC2_CUDA_TIMES's marks inside the frames' graphs (the timing sees a
// frame as it runs by default): the same bodies, no graph refused, and every
// frame's timing says it ran as a graph (timing that turned the graphs off
// would say "kernels launched one by one").
TEST(Codec2CudaEncoder, PhaseTimesInGraphs) {
  const ScopedEnv times("CODEC2_CUDA_TIMES", "1");
  const ScopedEnv graphs("CUDADIFF_CODEC2_GRAPHS", "require");
  testing::internal::CaptureStderr();
  compare(VideoFormat::BGR, 96, 64, Content::Scene, {0, 5, 20}, 6, 4, true);
  compare_in_flight({VideoFormat::BGR, 200, 120, Content::Scene, {5, 0, 20}, 7, 5});
  const std::string err = testing::internal::GetCapturedStderr();
  size_t graphed = 0;
  for (size_t at = err.find("as a CUDA graph"); at != std::string::npos;
       at = err.find("as a CUDA graph", at + 1))
    ++graphed;
  EXPECT_GE(graphed, 6u + 7u) << err.substr(0, 2000);
  EXPECT_EQ(err.find("kernels launched one by one"), std::string::npos);
  EXPECT_NE(err.find("host timeline"), std::string::npos);
}

// CUDADIFF_CODEC2_GRAPHS=0 launches the kernels one by one, as where the
// runtime cannot make graphs: the same bodies.
TEST(Codec2CudaEncoder, KernelsLaunchedOneByOne) {
  const ScopedEnv graphs("CUDADIFF_CODEC2_GRAPHS", "0");
  compare(VideoFormat::BGR, 200, 130, Content::Scene, {0, 5, 20}, 7, 4, true);
  compare(VideoFormat::I420, 201, 131, Content::Static, {20, 0}, 5, 3, false);
  compare_in_flight({VideoFormat::BGR, 320, 256, Content::Columns, {5, 0, 20}, 6, 100});
}

// CUDADIFF_CODEC2_PDL=0 launches the front part's kernels the ordinary way
// (as on devices before compute capability 9.0 and runtimes before CUDA
// 12.3), in graphs and one by one, frames in flight and one at a time,
// keyframes and deltas, one layer and two: the same bodies.
TEST(Codec2CudaEncoder, KernelsWithoutProgrammaticLaunches) {
  const ScopedEnv pdl("CUDADIFF_CODEC2_PDL", "0");
  compare(VideoFormat::BGR, 200, 130, Content::Scene, {0, 5, 20}, 7, 4, true);
  compare(VideoFormat::I420, 201, 131, Content::Static, {20, 0}, 5, 3, false);
  compare_in_flight({VideoFormat::BGR, 200, 120, Content::Random, {0, 5}, 7, 3, 3});
  compare_in_flight({VideoFormat::I420, 201, 131, Content::Static, {20, 0, 7}, 9, 5, 3});
  const ScopedEnv graphs("CUDADIFF_CODEC2_GRAPHS", "0");
  compare_in_flight({VideoFormat::BGR, 320, 256, Content::Columns, {5, 0, 20}, 7, 100, 2});
}

// A frame whose symbols start late (CUDADIFF_CODEC2_DELAY_SYMBOLS, a test
// aid: the fourth frame's, by 20 ms) while the frames after it go on: the
// front part of the frame two after, which writes the same set of the
// scratch (the input's and the reconstruction's working values, the
// texture classes), must wait for them, not only for the frame before's
// reconstruction. Moving frames, so that the two frames' working values
// differ; the bodies' buffers reserved, so that nothing waits for the
// whole device in between. The same bodies.
TEST(Codec2CudaEncoder, LateSymbolsInFlight) {
  const ScopedEnv late("CUDADIFF_CODEC2_DELAY_SYMBOLS", "3:20000");
  InFlightCase rgb{VideoFormat::BGR, 320, 256, Content::Scene, {5, 0, 20}, 8, 100};
  rgb.reserve = size_t(4) << 20;
  compare_in_flight(rgb);
  InFlightCase yuv{VideoFormat::I420, 201, 131, Content::Scene, {20, 7}, 8, 100, 3};
  yuv.reserve = size_t(4) << 20;
  compare_in_flight(yuv);
}

// CUDADIFF_CODEC2_MAPPED_BACK=0: what finish() reads first (the tables'
// choices, the modes, the tiles' types and sizes, the counts) comes back by
// copies instead of through mapped host memory, as where the host memory
// cannot be mapped for the device: the same bodies.
TEST(Codec2CudaEncoder, CountsCopiedBack) {
  const ScopedEnv copies("CUDADIFF_CODEC2_MAPPED_BACK", "0");
  compare(VideoFormat::BGR, 200, 130, Content::Scene, {0, 5, 20}, 7, 4, true);
  compare(VideoFormat::I420, 201, 131, Content::Static, {20, 0}, 5, 3, false);
  compare_in_flight({VideoFormat::BGR, 200, 120, Content::Random, {0, 5}, 7, 3, 3, 1});
}

// Frames in flight: at most kMaxInFlight; encode() and read_reference()
// only when none is; finish() only when one is.
TEST(Codec2CudaEncoder, FramesInFlightLimits) {
  constexpr int most = Encoder::kMaxInFlight;
  static_assert(most >= 2, "a keyframe, then deltas");
  auto gpu = Context::cuda(0);
  auto enc = Encoder::create(*gpu, VideoFormat::GRAY8, 64, 48);
  std::vector<std::unique_ptr<DeviceFrame>> frames;
  for (int i = 0; i <= most; ++i) {
    frames.push_back(std::make_unique<DeviceFrame>(VideoFormat::GRAY8, 64, 48));
    // The last frame submitted: 30; the one refused after it: 200.
    const uint8_t v = i == most ? 200 : i + 1 == most ? 30 : uint8_t(7 + 2 * i);
    fill_bytes_async(frames.back()->view().data[0], v, frames.back()->size(), *gpu);
  }
  HostBytes body;
  EXPECT_THROW(enc->finish(body), Error);
  for (int i = 0; i < most; ++i) enc->submit(frames[size_t(i)]->view(), 3, i == 0);
  const FrameView &extra = frames.back()->view();
  EXPECT_THROW(enc->submit(extra, 3, false), Error);
  EXPECT_THROW(enc->encode(extra, 3, false, body), Error);
  HostBytes ref;
  EXPECT_THROW(enc->read_reference(ref), Error);
  EXPECT_EQ(enc->frames_in_flight(), most);
  EXPECT_TRUE(enc->finish(body).keyframe);
  for (int i = 1; i < most; ++i) EXPECT_FALSE(enc->finish(body).keyframe);
  EXPECT_EQ(enc->frames_in_flight(), 0);
  enc->read_reference(ref);
  // Every byte within the threshold of the last frame's.
  EXPECT_TRUE(std::all_of(ref.data(), ref.data() + ref.size(),
                          [](uint8_t v) { return v >= 30 - 3 && v <= 30 + 3; }));
}
