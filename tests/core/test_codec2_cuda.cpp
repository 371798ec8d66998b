// The version 2 codec's CUDA decoder against the CPU reference: the same
// picture byte for byte after every body (every format, odd sizes, 1x1,
// 1920x1080, k = 0, 5, 20, random, smooth, moving and camera-like content,
// keyframes and runs of deltas, several tiles and up to 32 lanes), the same
// accept/reject on damaged bodies (truncated, flipped bytes, a wrong tile
// table) with the picture unchanged after a refusal, and deltas refused
// after a failure until the next keyframe.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cudadiff/codec2.h"
#include "cudadiff/codec2_rules.h"
#include "cudadiffstream.h"
#include "frames.h"

using namespace cudadiff;
using namespace cudadiff::codec2;
using testing_util::bytes_of;
using testing_util::every_format;
using testing_util::HostFrame;
using testing_util::packed_bytes;

namespace {

enum class Content { Random, Scene, Camera, Still, Patches };

// Scene: smooth ramps with edges, a moving square and some noise. Camera: a
// smooth, slowly panning picture with texture, a moving object, a slow
// change of brightness and sensor noise (what a real camera gives).
// Patches: a fixed camera where some of the 48-byte x 16-row regions of
// each plane change from frame to frame (about half of them; tiles partly
// skipped, with several lanes).
void fill(HostFrame &f, Content content, int t, std::mt19937 &gen, int noise) {
  if (content == Content::Random) {
    testing_util::fill_random(f, gen);
    return;
  }
  std::uniform_int_distribution<int> n(-noise, noise);
  for (int p = 0; p < f.view.n_planes(); ++p) {
    const size_t row = f.view.row_bytes(p);
    const int rows = f.view.plane_height(p);
    for (int y = 0; y < rows; ++y)
      for (size_t xb = 0; xb < row; ++xb) {
        const int x = int(xb);
        int v;
        if (content == Content::Scene) {
          v = int((xb * 3 + size_t(y) * 2) % 200) + 20;
          if ((xb / 7 + size_t(y) / 5) % 3 == 0) v = 240 - v / 2;
          const int sx = (2 * t) % std::max(int(row), 1), sy = t % std::max(rows, 1);
          if (x >= sx && x < sx + 9 && y >= sy && y < sy + 7) v = 30 + 11 * t;
        } else if (content == Content::Still) {
          // A fixed camera: a still textured background and three small
          // objects that move, so that most blocks are skipped and many
          // tiles code a block or two.
          v = 60 + (x * 5 + y * 3) % 47 + ((x / 11 + y / 7) % 2) * 30;
          const int objects[3][2] = {
              {(7 * t + 20) % std::max(int(row), 1), rows / 3},
              {int(row) * 2 / 3, (5 * t + 8) % std::max(rows, 1)},
              {(int(row) - 9 * t % std::max(int(row), 1) + int(row)) % std::max(int(row), 1),
               (rows * 5 / 6 + t) % std::max(rows, 1)}};
          for (const auto &o : objects)
            if (std::abs(x - o[0]) < 9 && std::abs(y - o[1]) < 6) v = 220 - 4 * std::abs(x - o[0]);
        } else if (content == Content::Patches) {
          v = 60 + (x * 5 + y * 3) % 47;
          const uint32_t cell =
              uint32_t(x / 48) * 73856093u ^ uint32_t(y / 16) * 19349663u ^ uint32_t(t) * 83492791u;
          if (t > 0 && cell % 3 == 0) v = (v + 40 + 13 * t) % 256;
        } else {
          const int px = x + 3 * t, py = y + t;  // panning
          v = 90 + (px * 7 + py * 5) % 61 + ((px / 13 + py / 9) % 2) * 40 + ((px * py) % 17);
          v += t * 2;  // brightness
          const int ox = (5 * t) % std::max(int(row), 1), oy = (3 * t) % std::max(rows, 1);
          if (std::abs(x - ox) < 12 && std::abs(y - oy) < 10) v = 200 - (x - ox) * 3;
        }
        if (noise) v += n(gen);
        f.view.row(p, y)[xb] = uint8_t(std::clamp(v, 0, 255));
      }
  }
}

struct Pair {
  std::unique_ptr<Context> cpu_ctx = Context::cpu();
  std::unique_ptr<Context> gpu_ctx = Context::cuda(0);
  std::unique_ptr<Decoder> cpu, gpu;
  VideoFormat format;
  int w, h;
  Pair(VideoFormat f, int width, int height) : format(f), w(width), h(height) {
    cpu = Decoder::create(*cpu_ctx, f, w, h);
    gpu = Decoder::create(*gpu_ctx, f, w, h);
  }
  std::vector<uint8_t> picture(Decoder &d) {
    HostBytes b;
    d.read_reference(b);
    return bytes_of(b);
  }
  // Both decode `body`; returns whether they accepted it (the same, checked)
  // and checks the pictures are equal.
  bool decode(const std::vector<uint8_t> &body, const std::string &what) {
    std::string ecpu, egpu;
    const bool ok_cpu = cpu->decode(body.data(), body.size(), &ecpu);
    const bool ok_gpu = gpu->decode(body.data(), body.size(), &egpu);
    EXPECT_EQ(ok_cpu, ok_gpu) << what << ": CPU says '" << ecpu << "', CUDA '" << egpu << "'";
    EXPECT_EQ(cpu->has_reference(), gpu->has_reference()) << what;
    const std::vector<uint8_t> a = picture(*cpu), b = picture(*gpu);
    EXPECT_EQ(a.size(), b.size());
    if (a != b) {
      size_t i = 0;
      while (i < a.size() && a[i] == b[i]) ++i;
      ADD_FAILURE() << what << ": pictures differ first at byte " << i << " of " << a.size()
                    << " (CPU " << int(a[i]) << ", CUDA " << int(b[i]) << ")";
    }
    return ok_cpu;
  }
};

// Encodes frames with the CPU encoder (key[i], k[i]) and decodes every body
// with both decoders; checks the pictures after each, and write_frame() into
// a padded host frame and a device frame once at the end.
void compare_sequence(VideoFormat f, int w, int h, Content content, const std::vector<bool> &key,
                      const std::vector<int> &k, const Geometry *geometry = nullptr,
                      int noise = 4) {
  auto cpu_ctx = Context::cpu();
  std::mt19937 &gen = testing_util::rng();
  auto enc = Encoder::create(*cpu_ctx, f, w, h, geometry);
  Pair dec(f, w, h);
  HostBytes body;
  uint32_t lanes = 0;
  for (size_t i = 0; i < key.size(); ++i) {
    HostFrame frame(f, w, h, 3);
    fill(frame, content, int(i), gen, noise);
    const FrameStats st = enc->encode(frame.view, k[i], key[i], body);
    lanes = std::max(lanes, st.lanes);
    const std::string what = std::string(format_name(f)) + " " + std::to_string(w) + "x" +
                             std::to_string(h) + " frame " + std::to_string(i) +
                             " k=" + std::to_string(k[i]) + (key[i] ? " key" : " delta");
    ASSERT_TRUE(dec.decode(bytes_of(body), what)) << what;
    HostBytes ref;
    enc->read_reference(ref);
    ASSERT_EQ(dec.picture(*dec.gpu), bytes_of(ref)) << what << ": not the encoder's reference";
    if (::testing::Test::HasFailure()) return;
  }
  HostFrame a(f, w, h, 5), b(f, w, h, 7);
  dec.cpu->write_frame(a.view);
  dec.gpu->write_frame(b.view);
  EXPECT_TRUE(b.padding_intact());
  EXPECT_EQ(packed_bytes(a.view), packed_bytes(b.view));
  DeviceFrame df(f, w, h);
  dec.gpu->write_frame(df.view());
  const HostFrame back = testing_util::download(df, *dec.gpu_ctx);
  EXPECT_EQ(packed_bytes(back.view), packed_bytes(a.view)) << "write_frame() into device memory";
}

const std::vector<bool> kKeyThenDeltas = {true, false, false, false};

}  // namespace

TEST(Codec2Cuda, EveryFormatOddSizes) {
  for (VideoFormat f : every_format())
    for (const auto &wh : std::vector<std::pair<int, int>>{{33, 17}, {1, 1}, {2, 3}})
      for (int k : {0, 5, 20}) {
        compare_sequence(f, wh.first, wh.second, Content::Scene, kKeyThenDeltas, {k, k, k, k});
        if (HasFailure()) return;
      }
}

TEST(Codec2Cuda, RandomFrames) {
  for (VideoFormat f : {VideoFormat::BGR, VideoFormat::BGRx, VideoFormat::GRAY8, VideoFormat::I420,
                        VideoFormat::NV12, VideoFormat::YUY2})
    for (int k : {0, 5, 20}) {
      compare_sequence(f, 97, 61, Content::Random, {true, false, false}, {k, k, k});
      if (HasFailure()) return;
    }
}

// Indexed tiles (frames of noise at k > 1) decode alike, full and partial
// ones; the document's indexed body, and the same with a word out of range
// or the last word out of range, are decoded or refused alike, and a
// refused one leaves the picture.
TEST(Codec2Cuda, IndexedTiles) {
  for (VideoFormat f : {VideoFormat::BGR, VideoFormat::I420, VideoFormat::YUY2})
    for (int k : {5, 20}) {
      compare_sequence(f, 330, 260, Content::Random, {true, false, false}, {k, k, 10});
      if (HasFailure()) return;
    }
  const std::vector<uint8_t> indexed = {0x01, 0x04, 0x0a, 0x08, 0x00, 0x83, 0x08, 0xdd,
                                        0x3f, 0xfd, 0x19, 0xb2, 0x71, 0xc2, 0x06};
  Pair dec(VideoFormat::GRAY8, 4, 3);
  ASSERT_TRUE(dec.decode(indexed, "indexed"));
  const std::vector<uint8_t> pic = {27, 252, 0, 126, 63, 189, 9, 18, 234, 81, 135, 45};
  EXPECT_EQ(dec.picture(*dec.gpu), pic);
  for (size_t at : {size_t(10), size_t(14)}) {
    std::vector<uint8_t> bad = indexed;
    bad[at] = 0x23;  // a word above 29^6 - 1
    EXPECT_FALSE(dec.decode(bad, "word " + std::to_string(at)));
    EXPECT_EQ(dec.picture(*dec.gpu), pic);
  }
}

TEST(Codec2Cuda, SeveralTilesAndThresholds) {
  // Small tiles: many tiles, edges of tiles everywhere, changing k.
  const Geometry small{3, 2};
  for (VideoFormat f : {VideoFormat::BGR, VideoFormat::BGRx, VideoFormat::GRAY8, VideoFormat::I420,
                        VideoFormat::NV12, VideoFormat::YUY2, VideoFormat::UYVY, VideoFormat::Y444,
                        VideoFormat::RGBA}) {
    compare_sequence(f, 161, 75, Content::Scene, {true, false, false, false, true, false},
                     {0, 0, 5, 20, 5, 3}, &small);
    if (HasFailure()) return;
    compare_sequence(f, 150, 90, Content::Camera, {true, false, false, false}, {5, 5, 20, 0},
                     &small);
    if (HasFailure()) return;
  }
}

TEST(Codec2Cuda, ManyLanesCameraLike) {
  // Default tiles (320 x 128 samples): up to 32 lanes per tile.
  for (VideoFormat f : {VideoFormat::BGR, VideoFormat::I420, VideoFormat::NV12, VideoFormat::YUY2,
                        VideoFormat::GRAY8, VideoFormat::BGRx})
    for (int k : {0, 5, 20}) {
      compare_sequence(f, 656, 280, Content::Camera, {true, false, false}, {k, k, k});
      if (HasFailure()) return;
    }
}

TEST(Codec2Cuda, SparseTiles) {
  // A fixed camera: deltas whose tiles are mostly skipped, with one or two
  // lanes walking past skipped blocks (they jump over the steps where none
  // of them decodes anything, and the warp does the samples between), odd
  // sizes (partial blocks and tiles), subsampled chroma, and small tiles.
  const Geometry small{5, 4};
  for (const Geometry *g : {static_cast<const Geometry *>(nullptr), &small})
    for (VideoFormat f : {VideoFormat::BGR, VideoFormat::I420, VideoFormat::NV12, VideoFormat::YUY2,
                          VideoFormat::GRAY8, VideoFormat::BGRx})
      for (int k : {0, 5, 20}) {
        compare_sequence(f, 333, 171, Content::Still, {true, false, false, false}, {k, k, k, k}, g,
                         k == 0 ? 0 : 2);
        if (HasFailure()) return;
      }
  compare_sequence(VideoFormat::BGR, 1920, 1080, Content::Still, {true, false, false}, {0, 0, 5},
                   nullptr, 0);
}

// Tiles skipped in frames in a row: the decoder copies a skipped tile into
// the picture it writes only when the frame before did not skip it too
// (else that picture, the one before the reference, holds its bytes
// already). Patches change about a third of their regions from frame to
// frame, so small tiles go from coded to skipped and back; the second
// keyframe starts that over. Through decode() (compare_sequence()), then
// through submit() with two frames in flight, each picture written out by
// submit_write_frame(), and bodies refused in between: a damaged delta (the
// deltas after it wait for the keyframe) and, after the keyframe, a
// damaged keyframe (then the keyframe again).
TEST(Codec2Cuda, TilesSkippedInFramesInARow) {
  const Geometry small{3, 1};
  std::vector<bool> key(10, false);
  key[0] = key[6] = true;
  const int w = 200, h = 96;
  for (VideoFormat f : {VideoFormat::BGR, VideoFormat::I420})
    for (int k : {0, 5}) {
      const std::string what = std::string(format_name(f)) + " k=" + std::to_string(k);
      compare_sequence(f, w, h, Content::Patches, key, std::vector<int>(key.size(), k), &small, 0);
      if (HasFailure()) return;

      auto cpu_ctx = Context::cpu();
      auto gpu_ctx = Context::cuda(0);
      auto enc = Encoder::create(*cpu_ctx, f, w, h, &small);
      std::mt19937 gen(7);
      std::vector<std::vector<uint8_t>> bodies, refs;
      size_t skipped = 0;
      for (size_t i = 0; i < key.size(); ++i) {
        HostFrame frame(f, w, h);
        fill(frame, Content::Patches, int(i), gen, 0);
        HostBytes body, ref;
        skipped += enc->encode(frame.view, k, key[i], body).tiles[0];
        enc->read_reference(ref);
        bodies.push_back(bytes_of(body));
        refs.push_back(bytes_of(ref));
      }
      ASSERT_GT(skipped, 10u) << what;
      // The bodies submitted: 0..3, delta 4 truncated (refused), 4 and 5
      // (refused: no reference), 6, keyframe 6 truncated (refused), 6 again,
      // 7..9; the picture each accepted one shows.
      std::vector<std::vector<uint8_t>> in;
      std::vector<int> shows;  // -1: refused
      auto add = [&](std::vector<uint8_t> body, int show) {
        in.push_back(std::move(body));
        shows.push_back(show);
      };
      for (int i = 0; i < 4; ++i) add(bodies[size_t(i)], i);
      add(std::vector<uint8_t>(bodies[4].begin(), bodies[4].end() - 1), -1);
      add(bodies[4], -1);
      add(bodies[5], -1);
      add(bodies[6], 6);
      add(std::vector<uint8_t>(bodies[6].begin(), bodies[6].begin() + 7), -1);
      add(bodies[6], 6);
      for (int i = 7; i < 10; ++i) add(bodies[size_t(i)], i);

      auto gpu = Decoder::create(*gpu_ctx, f, w, h);
      const size_t bytes = frame_size_packed(f, w, h);
      std::vector<HostBytes> out(in.size());
      std::vector<size_t> order;
      for (size_t i = 0; i < in.size(); ++i) {
        std::string why;
        std::vector<uint8_t> scratch = in[i];
        const bool ok = gpu->submit(scratch.data(), scratch.size(), &why);
        std::fill(scratch.begin(), scratch.end(), uint8_t(0x5a));  // submit() said it may
        ASSERT_EQ(ok, shows[i] >= 0) << what << ", body " << i << ": " << why;
        if (!ok) continue;
        out[i].resize(bytes);
        gpu->submit_write_frame(packed_view(f, w, h, out[i].data()));
        order.push_back(i);
        if (gpu->frames_in_flight() == 2) {
          ASSERT_TRUE(gpu->finish(&why)) << what << ", body " << order.front() << ": " << why;
          order.erase(order.begin());
        }
      }
      while (gpu->frames_in_flight() > 0) {
        std::string why;
        ASSERT_TRUE(gpu->finish(&why)) << what << ": " << why;
      }
      for (size_t i = 0; i < in.size(); ++i) {
        if (shows[i] >= 0) {
          EXPECT_EQ(bytes_of(out[i]), refs[size_t(shows[i])]) << what << ", body " << i;
        }
      }
      if (HasFailure()) return;
    }
}

// Deltas whose lanes jump over the steps at which none of them decodes
// (the warp does the skipped samples in between): tiles partly and mostly
// skipped with one to 32 lanes; the tiles' coded blocks as a word per block
// row in shared memory at the default geometry, 32 and 33 blocks a row (one
// half of the word, and both), 7x3, and 16 block rows (the most the decoder
// keeps there); the block modes read from global memory beyond that (16x17
// blocks, and 66 blocks a row on a frame 1100 wide). One test per geometry,
// so that a filtered run (compute-sanitizer's racecheck is slow) can take
// them apart.
class JumpsOverSkippedSteps : public ::testing::TestWithParam<Geometry> {};

TEST_P(JumpsOverSkippedSteps, SamePictures) {
  const Geometry g = GetParam();
  const int width = g.tile_bx > 64 ? 1100 : 530;
  for (VideoFormat f : {VideoFormat::BGR, VideoFormat::I420, VideoFormat::YUY2, VideoFormat::GRAY8})
    for (Content c : {Content::Patches, Content::Still})
      for (int k : {0, 5, 20}) {
        compare_sequence(f, width, 290, c, {true, false, false, false}, {k, k, k, k}, &g,
                         k == 0 ? 0 : 2);
        if (HasFailure()) return;
      }
}

INSTANTIATE_TEST_SUITE_P(Geometries, JumpsOverSkippedSteps,
                         ::testing::Values(Geometry{10, 8}, Geometry{32, 8}, Geometry{7, 3},
                                           Geometry{4, 16}, Geometry{16, 17}, Geometry{33, 2},
                                           Geometry{66, 2}, Geometry{3, 2, 64}),
                         [](const ::testing::TestParamInfo<Geometry> &i) {
                           return std::to_string(i.param.tile_bx) + "x" +
                                  std::to_string(i.param.tile_by) + "_" +
                                  std::to_string(i.param.lane_samples);
                         });

TEST(Codec2Cuda, WideTiles) {
  // Tiles 640 samples wide with 32 lanes: their rows of working values do not
  // fit in shared memory (global memory instead, and the decoding tables
  // too), beside a narrow tile whose rows do.
  const Geometry wide{40, 4};
  for (VideoFormat f : {VideoFormat::BGRx, VideoFormat::BGR, VideoFormat::I420}) {
    compare_sequence(f, 700, 100, Content::Camera, {true, false, false}, {0, 5, 5}, &wide);
    if (HasFailure()) return;
  }
}

TEST(Codec2Cuda, ShortLanes) {
  // An encoder's smaller budget of samples per lane (Geometry::lane_samples):
  // small tiles with 32 lanes of one or two rows each, which several warps
  // of a block decode side by side.
  const Geometry geometries[] = {{5, 4, 256}, {4, 2, 64}, {10, 8, 512}};
  for (const Geometry &g : geometries)
    for (VideoFormat f : {VideoFormat::BGR, VideoFormat::I420, VideoFormat::YUY2}) {
      compare_sequence(f, 656, 280, Content::Camera, {true, false, false}, {0, 5, 20}, &g);
      if (HasFailure()) return;
    }
}

TEST(Codec2Cuda, ManyTilesShareABlock) {
  // 600 tiles of one block each, more than any GPU has multiprocessors: the
  // decoder puts several tiles (warps) in one thread block, which share one
  // copy of the tables in shared memory and have their own rows.
  const Geometry tiny{1, 1};
  for (VideoFormat f : {VideoFormat::BGR, VideoFormat::I420, VideoFormat::BGRx}) {
    compare_sequence(f, 640, 240, Content::Camera, {true, false, false, true, false},
                     {0, 0, 5, 5, 20}, &tiny);
    if (HasFailure()) return;
  }
}

TEST(Codec2Cuda, FullHd) {
  compare_sequence(VideoFormat::BGR, 1920, 1080, Content::Camera, {true, false, false}, {5, 5, 5});
}

// Damaged bodies: both decoders accept or refuse each alike, a refusal
// leaves the picture as it was, an accepted one gives the same picture. One
// test per format, body (keyframe, delta) and part of the damaged versions
// (the delta's take longer: each is decoded after the keyframe), so that a
// sharded or filtered run (compute-sanitizer's racecheck is slow) can take
// them apart; each test builds every format's bodies and damage from the one
// fixed generator in the same order, so its bytes do not depend on which
// test runs.
namespace {
// Damaged versions of a body: its truncations (every length below 16, then
// every `cut_step`), then a byte flipped at every offset below 48 and every
// `flip_step` after (with `gen`), then the body with a byte too many. The
// truncations are the first `*cuts`.
std::vector<std::vector<uint8_t>> damaged_versions(const std::vector<uint8_t> &good,
                                                   std::mt19937 &gen, size_t cut_step,
                                                   size_t flip_step, size_t *cuts) {
  std::vector<std::vector<uint8_t>> damaged;
  for (size_t len = 0; len < good.size(); len += (len < 16 ? 1 : cut_step))
    damaged.emplace_back(good.begin(), good.begin() + long(len));
  *cuts = damaged.size();
  for (size_t at = 0; at < good.size(); at += (at < 48 ? 1 : flip_step)) {
    std::vector<uint8_t> b = good;
    b[at] ^= uint8_t(1 + gen() % 255);
    damaged.push_back(b);
  }
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  damaged.push_back(longer);
  return damaged;
}

// The bodies the damage tests damage: a keyframe (the scene) and a delta
// (camera-like) at threshold 3, by the CPU encoder with tiles `g`.
std::vector<std::vector<uint8_t>> key_and_delta(VideoFormat f, int w, int h, const Geometry &g,
                                                std::mt19937 &gen) {
  auto cpu_ctx = Context::cpu();
  auto enc = Encoder::create(*cpu_ctx, f, w, h, &g);
  std::vector<std::vector<uint8_t>> bodies;
  HostBytes body;
  for (int t = 0; t < 2; ++t) {
    HostFrame frame(f, w, h);
    fill(frame, t == 0 ? Content::Scene : Content::Camera, t, gen, 3);
    enc->encode(frame.view, 3, t == 0, body);
    bodies.push_back(bytes_of(body));
  }
  return bodies;
}

// Decodes the damaged versions `first`, `first + step`, ... of body `which`
// (0 the keyframe, 1 the delta; `keyframe` is body 0) of format `f` with
// both decoders, each from the keyframe decoded before it (a refused
// keyframe changed nothing, so the keyframe is decoded again only after an
// accepted one): they accept or refuse alike with the same pictures, every
// truncation (the first `cuts`) and a byte too many (the last) fail, and a
// refusal leaves the picture as it was and the decoder without a
// reference. `*refused` counts the refusals. Returns at the first failure.
void decode_damaged_alike(VideoFormat f, int w, int h, size_t which,
                          const std::vector<uint8_t> &keyframe,
                          const std::vector<std::vector<uint8_t>> &damaged, size_t cuts,
                          size_t first, size_t step, int *refused) {
  *refused = 0;
  Pair dec(f, w, h);
  bool changed = true;
  for (size_t v = first; v < damaged.size(); v += step) {
    // The state before: the keyframe (and for the delta nothing else); a
    // refused keyframe changed nothing.
    if (which == 1 || changed) {
      ASSERT_TRUE(dec.decode(keyframe, "keyframe"));
    }
    const std::vector<uint8_t> before = dec.picture(*dec.gpu);
    const std::string what = std::string(format_name(f)) + " body " + std::to_string(which) +
                             " damage " + std::to_string(v);
    const bool ok = dec.decode(damaged[v], what);
    changed = ok;
    // Every truncation, and a byte too many, fails.
    if (v < cuts || v + 1 == damaged.size()) {
      EXPECT_FALSE(ok) << what;
    }
    if (!ok) {
      ++*refused;
      EXPECT_EQ(dec.picture(*dec.gpu), before) << what << ": picture changed";
      EXPECT_FALSE(dec.gpu->has_reference());
    }
    if (testing::Test::HasFailure()) return;
  }
}
}  // namespace

struct DamageCase {
  VideoFormat format;
  size_t which;        // 0 the keyframe, 1 the delta
  size_t part, parts;  // damaged versions v with v % parts == part
};
class DamagedBodies : public testing::TestWithParam<DamageCase> {};

TEST_P(DamagedBodies, RefusedAlikeAndHarmless) {
  const DamageCase param = GetParam();
  std::mt19937 gen(777);  // fixed content: see Codec2Cpu.DamageIsDetectedOrHarmless
  for (VideoFormat f : {VideoFormat::I420, VideoFormat::BGR, VideoFormat::YUY2}) {
    const int w = 56, h = 36;
    const Geometry small{2, 2};
    const std::vector<std::vector<uint8_t>> bodies = key_and_delta(f, w, h, small, gen);
    for (size_t which = 0; which < bodies.size(); ++which) {
      size_t cuts;
      const std::vector<std::vector<uint8_t>> damaged =
          damaged_versions(bodies[which], gen, 17, 9, &cuts);
      if (f != param.format || which != param.which) continue;
      int refused;
      decode_damaged_alike(f, w, h, which, bodies[0], damaged, cuts, param.part, param.parts,
                           &refused);
      if (HasFailure()) return;
    }
  }
}

namespace {

// The keyframe of each format in three parts, its delta in nine: parts
// small enough for racecheck to finish each within a few minutes.
std::vector<DamageCase> damage_cases() {
  std::vector<DamageCase> cases;
  for (VideoFormat f : {VideoFormat::I420, VideoFormat::BGR, VideoFormat::YUY2}) {
    for (size_t part = 0; part < 3; ++part) cases.push_back({f, 0, part, 3});
    for (size_t part = 0; part < 9; ++part) cases.push_back({f, 1, part, 9});
  }
  return cases;
}

std::string damage_case_name(const testing::TestParamInfo<DamageCase> &info) {
  const DamageCase &c = info.param;
  std::string name = std::string(format_name(c.format)) + (c.which == 0 ? "_keyframe" : "_delta");
  if (c.parts > 1) name += "_" + std::to_string(c.part + 1) + "of" + std::to_string(c.parts);
  return name;
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Codec2Cuda, DamagedBodies, testing::ValuesIn(damage_cases()),
                         damage_case_name);

// A body whose tile table lies (a tile's type, lanes or size changed) or
// comes from another geometry; tests for the keyframe and the delta, each in
// kTableParts parts (the bytes changed in each part: every kTableParts-th
// one), small enough for racecheck to finish each within a few minutes.
constexpr size_t kTableParts = 6;
class WrongTileTable : public testing::TestWithParam<std::pair<size_t, size_t>> {};

TEST_P(WrongTileTable, Refused) {
  const size_t which = GetParam().first, part = GetParam().second;
  std::mt19937 gen(99);
  const VideoFormat f = VideoFormat::BGR;
  const int w = 128, h = 64;
  const Geometry small{2, 2};
  auto cpu_ctx = Context::cpu();
  auto enc = Encoder::create(*cpu_ctx, f, w, h, &small);
  HostBytes body;
  std::vector<std::vector<uint8_t>> bodies;
  for (int t = 0; t < 2; ++t) {
    HostFrame frame(f, w, h);
    fill(frame, Content::Camera, t, gen, 2);
    enc->encode(frame.view, 2, t == 0, body);
    bodies.push_back(bytes_of(body));
  }
  Pair dec(f, w, h);
  // Find the tile table: the bytes before the payloads; try every value at
  // each of the first bytes after the header's 4 and the tables.
  const std::vector<uint8_t> &good = bodies[which];
  for (size_t at = 4 + part; at < std::min<size_t>(good.size(), 120); at += kTableParts)
    for (int delta : {1, 2, 4, 0x80, 0x7f}) {
      std::vector<uint8_t> b = good;
      b[at] = uint8_t(b[at] + delta);
      ASSERT_TRUE(dec.decode(bodies[0], "keyframe"));
      const std::vector<uint8_t> before = dec.picture(*dec.gpu);
      const std::string what = "body " + std::to_string(which) + " byte " + std::to_string(at) +
                               " +" + std::to_string(delta);
      if (!dec.decode(b, what)) {
        EXPECT_EQ(dec.picture(*dec.gpu), before) << what;
      }
      if (HasFailure()) return;
    }
  // The geometry byte changed: another tile grid.
  if (part != 0) return;
  std::vector<uint8_t> b = good;
  b[2] = 3;
  ASSERT_TRUE(dec.decode(bodies[0], "keyframe"));
  EXPECT_FALSE(dec.decode(b, "other geometry"));
}

namespace {

std::vector<std::pair<size_t, size_t>> table_cases() {
  std::vector<std::pair<size_t, size_t>> cases;
  for (size_t which = 0; which < 2; ++which)
    for (size_t part = 0; part < kTableParts; ++part) cases.emplace_back(which, part);
  return cases;
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Codec2Cuda, WrongTileTable, testing::ValuesIn(table_cases()),
                         [](const testing::TestParamInfo<std::pair<size_t, size_t>> &info) {
                           return std::string(info.param.first == 0 ? "keyframe_" : "delta_") +
                                  std::to_string(info.param.second + 1) + "of" +
                                  std::to_string(kTableParts);
                         });

// Recordings made before the tile rule of the reference classes (body flag
// 0x02 clear; tests/stream/data/README.md): the CUDA decoder takes the old
// rule for them and gives the CPU decoder's pictures, frame by frame.
TEST(Codec2Cuda, RecordingsWithTheOldReferenceClasses) {
  struct Recording {
    const char *file;
    VideoFormat format;
    int w, h;
  };
  const Recording recordings[] = {
      {"v2-old-classes-i420-45x37-k5.cdif", VideoFormat::I420, 45, 37},
      {"v2-old-classes-bgr-50x34-k10.cdif", VideoFormat::BGR, 50, 34},
  };
  auto cpu_ctx = Context::cpu();
  auto gpu_ctx = Context::cuda(0);
  for (const Recording &r : recordings) {
    SCOPED_TRACE(r.file);
    const std::string path = std::string(CODEC2_TEST_DIR) + "/../stream/data/" + r.file;
    const std::vector<uint8_t> bytes = testing_util::read_file(path);
    ASSERT_FALSE(bytes.empty()) << path;
    auto cpu = Decoder::create(*cpu_ctx, r.format, r.w, r.h);
    auto gpu = Decoder::create(*gpu_ctx, r.format, r.w, r.h);
    int bodies = 0;
    for (size_t at = 0; at + stream::kHeaderSize <= bytes.size();) {
      stream::PacketHeader ph;
      std::string why;
      ASSERT_EQ(stream::read_header(bytes.data() + at, stream::kHeaderSize, &ph, &why),
                stream::HeaderStatus::Ok)
          << why;
      const uint8_t *body = bytes.data() + at + stream::kHeaderSize;
      const size_t size = ph.payload_size;
      at += stream::kHeaderSize + size;
      ASSERT_LE(at, bytes.size());
      if (ph.stream_header()) continue;  // (no body)
      BodyHeader bh;
      ASSERT_TRUE(read_body_header(body, size, &bh, &why)) << why;
      EXPECT_FALSE(bh.tile_classes);
      ASSERT_TRUE(cpu->decode(body, size, &why)) << "frame " << bodies << ": " << why;
      ASSERT_TRUE(gpu->decode(body, size, &why)) << "frame " << bodies << ": " << why;
      HostBytes a, b;
      cpu->read_reference(a);
      gpu->read_reference(b);
      EXPECT_EQ(bytes_of(b), bytes_of(a)) << "frame " << bodies;
      ++bodies;
    }
    EXPECT_EQ(bodies, 6);
  }
}

TEST(Codec2Cuda, DeltaAfterFailureWaitsForKeyframe) {
  std::mt19937 &gen = testing_util::rng();
  const VideoFormat f = VideoFormat::NV12;
  const int w = 90, h = 50;
  auto cpu_ctx = Context::cpu();
  auto enc = Encoder::create(*cpu_ctx, f, w, h);
  HostBytes body;
  std::vector<std::vector<uint8_t>> bodies;
  for (int t = 0; t < 4; ++t) {
    HostFrame frame(f, w, h);
    fill(frame, Content::Camera, t, gen, 3);
    enc->encode(frame.view, 4, t == 0 || t == 3, body);
    bodies.push_back(bytes_of(body));
  }
  Pair dec(f, w, h);
  // A delta first: refused (no picture yet).
  EXPECT_FALSE(dec.decode(bodies[1], "delta before any keyframe"));
  ASSERT_TRUE(dec.decode(bodies[0], "keyframe"));
  const std::vector<uint8_t> shown = dec.picture(*dec.gpu);
  std::vector<uint8_t> cut(bodies[1].begin(), bodies[1].end() - 1);
  EXPECT_FALSE(dec.decode(cut, "truncated delta"));
  EXPECT_FALSE(dec.gpu->has_reference());
  EXPECT_EQ(dec.picture(*dec.gpu), shown);
  EXPECT_FALSE(dec.decode(bodies[1], "delta after a failure"));
  EXPECT_FALSE(dec.decode(bodies[2], "next delta after a failure"));
  EXPECT_EQ(dec.picture(*dec.gpu), shown);
  EXPECT_TRUE(dec.decode(bodies[3], "next keyframe"));
  EXPECT_TRUE(dec.gpu->has_reference());
  // reset() also waits for a keyframe.
  dec.gpu->reset();
  dec.cpu->reset();
  EXPECT_FALSE(dec.decode(bodies[1], "delta after reset"));
}

// Frames in flight (submit(), submit_write_frame(), finish()), as cudadiffdec
// uses them with frame-overlap: two at a time, each written into pinned
// host memory or device memory, give the CPU's pictures. A damaged tile
// (found on the GPU, after the next delta was submitted) fails that frame
// and the delta after it; the next delta is refused on submission, and the
// next keyframe decodes. At 1920x1080 a frame's copy out lasts long enough
// that the decoding of the frame after next, which writes the same picture,
// would overtake it without its wait.
class FramesInFlight : public testing::TestWithParam<std::pair<int, int>> {};

TEST_P(FramesInFlight, SamePicturesAndFailures) {
  std::mt19937 gen(2024);  // fixed content, whose damaged byte below is found
  const VideoFormat f = VideoFormat::BGR;
  const int w = GetParam().first, h = GetParam().second;
  auto cpu_ctx = Context::cpu();
  auto enc = Encoder::create(*cpu_ctx, f, w, h);
  auto cpu = Decoder::create(*cpu_ctx, f, w, h);
  const int n = 10;
  std::vector<std::vector<uint8_t>> bodies, pictures;
  HostBytes body, ref;
  for (int t = 0; t < n; ++t) {
    HostFrame frame(f, w, h);
    fill(frame, Content::Camera, t, gen, 3);
    enc->encode(frame.view, 5, t == 0 || t == 6, body);
    bodies.push_back(bytes_of(body));
    std::string why;
    ASSERT_TRUE(cpu->decode(body.data(), body.size(), &why)) << why;
    cpu->read_reference(ref);
    pictures.push_back(bytes_of(ref));
  }
  auto gpu_ctx = Context::cuda(0);
  gpu_ctx->activate();
  const size_t bytes = frame_size_packed(f, w, h);
  std::vector<HostBytes> out(n);
  std::vector<DeviceBuffer> dev;
  for (int t = 0; t < n; ++t) {
    out[t].resize(bytes);
    dev.emplace_back(bytes);
  }
  // Submits each body (on device memory for odd frames), finishing the
  // oldest whenever two are in flight; returns submit()'s and finish()'s
  // answers per frame (-1: not submitted or refused).
  auto run = [&](const std::vector<std::vector<uint8_t>> &in, std::vector<int> *submitted,
                 std::vector<int> *finished) {
    auto gpu = Decoder::create(*gpu_ctx, f, w, h);
    submitted->assign(n, -1);
    finished->assign(n, -1);
    // Outputs not yet written hold a pattern no picture of these has.
    for (int t = 0; t < n; ++t) {
      std::memset(out[t].data(), 0xcd, bytes);
      gpu_ctx->activate();
      fill_bytes_async(dev[t].data(), 0xcd, bytes, *gpu_ctx);
    }
    gpu_ctx->synchronize();
    std::vector<int> order;
    std::vector<uint8_t> scratch;  // each body from here, overwritten once submitted
    auto finish_one = [&] {
      std::string why;
      const int t = order.front();
      order.erase(order.begin());
      (*finished)[t] = gpu->finish(&why) ? 1 : 0;
      if (!(*finished)[t]) {
        EXPECT_NE(why.find("codec2 body: "), std::string::npos) << why;
      }
    };
    for (int t = 0; t < n; ++t) {
      std::string why;
      scratch = in[t];
      const bool ok = gpu->submit(scratch.data(), scratch.size(), &why);
      std::fill(scratch.begin(), scratch.end(), uint8_t(0x5a));  // submit() said it may
      (*submitted)[t] = ok ? 1 : 0;
      if (ok) {
        order.push_back(t);
        gpu->submit_write_frame(t % 2 ? packed_view(f, w, h, dev[t].data())
                                      : packed_view(f, w, h, out[t].data()));
        EXPECT_THROW(gpu->decode(in[t].data(), in[t].size(), &why), Error);
      }
      if (gpu->frames_in_flight() == Decoder::kMaxInFlight) {
        EXPECT_THROW(gpu->submit(in[t].data(), in[t].size(), &why), Error);
        finish_one();
      }
    }
    while (gpu->frames_in_flight() > 0) finish_one();
    EXPECT_THROW(gpu->finish(nullptr), Error);
  };
  auto written = [&](int t) {
    if (t % 2 == 0) return bytes_of(out[t]);
    HostBytes back(bytes);
    gpu_ctx->activate();
    copy_bytes_async(back.data(), dev[t].data(), bytes, *gpu_ctx);
    gpu_ctx->synchronize();
    return bytes_of(back);
  };

  std::vector<int> submitted, finished;
  run(bodies, &submitted, &finished);
  for (int t = 0; t < n; ++t) {
    EXPECT_EQ(submitted[t], 1) << t;
    EXPECT_EQ(finished[t], 1) << t;
    EXPECT_EQ(written(t), pictures[t]) << "frame " << t;
  }

  // Delta 3 with its last payload byte changed: the reader takes it, its
  // tile fails on the GPU.
  std::vector<std::vector<uint8_t>> damaged = bodies;
  damaged[3].back() ^= 0x5a;
  {
    auto check = Decoder::create(*cpu_ctx, f, w, h);
    std::string why;
    for (int t = 0; t < 3; ++t)
      ASSERT_TRUE(check->decode(damaged[t].data(), damaged[t].size(), &why));
    ASSERT_FALSE(check->decode(damaged[3].data(), damaged[3].size(), &why)) << "damage not found";
  }
  run(damaged, &submitted, &finished);
  const std::vector<int> want_submitted = {1, 1, 1, 1, 1, 0, 1, 1, 1, 1};
  const std::vector<int> want_finished = {1, 1, 1, 0, 0, -1, 1, 1, 1, 1};
  EXPECT_EQ(submitted, want_submitted);
  EXPECT_EQ(finished, want_finished);
  for (int t : {0, 1, 2, 6, 7, 8, 9}) EXPECT_EQ(written(t), pictures[t]) << "frame " << t;
}

INSTANTIATE_TEST_SUITE_P(Sizes, FramesInFlight,
                         testing::Values(std::make_pair(200, 120), std::make_pair(1920, 1080)),
                         [](const testing::TestParamInfo<std::pair<int, int>> &info) {
                           return std::to_string(info.param.first) + "x" +
                                  std::to_string(info.param.second);
                         });

// ---- tANS lanes (body flag 0x04) --------------------------------------------

namespace {
Geometry tans(Geometry g) {
  g.tans_lanes = true;
  return g;
}
}  // namespace

// Bodies with tANS lanes decode alike: every format and odd sizes; small
// tiles of short lanes (the layout such bodies are for), default tiles of
// up to 32 lanes, tiles of one block that share a thread block, and wide
// tiles whose rows and tables do not fit in shared memory; camera-like,
// fixed-camera (lanes jumping over skipped steps) and random frames (raw
// and indexed tiles); keyframes and deltas at k = 0, 5, 20.
TEST(Codec2CudaTans, SamePictures) {
  for (VideoFormat f : every_format())
    for (const auto &wh : std::vector<std::pair<int, int>>{{33, 17}, {1, 1}}) {
      const Geometry g = tans({3, 2, 64});
      compare_sequence(f, wh.first, wh.second, Content::Scene, kKeyThenDeltas, {0, 5, 20, 5}, &g);
      if (HasFailure()) return;
    }
  const Geometry geometries[] = {tans({4, 2, 256}), tans({10, 8}), tans({1, 1}), tans({40, 4})};
  for (const Geometry &g : geometries)
    for (VideoFormat f : {VideoFormat::BGR, VideoFormat::I420, VideoFormat::YUY2,
                          VideoFormat::GRAY8, VideoFormat::BGRx}) {
      compare_sequence(f, 656, 280, Content::Camera, {true, false, false}, {0, 5, 20}, &g);
      if (HasFailure()) return;
      compare_sequence(f, 333, 171, Content::Still, kKeyThenDeltas, {5, 5, 20, 0}, &g, 2);
      if (HasFailure()) return;
    }
  const Geometry g = tans({4, 2, 256});
  compare_sequence(VideoFormat::BGR, 97, 61, Content::Random, {true, false, false}, {0, 5, 20}, &g);
  compare_sequence(VideoFormat::BGR, 1920, 1080, Content::Camera, {true, false, false}, {5, 5, 5},
                   &g);
}

// Damaged bodies with tANS lanes: both decoders accept or refuse each alike
// (the pictures equal), every truncation and a byte too many fail, a refusal
// leaves the picture as it was, and most damaged versions are refused. In
// parts as DamagedBodies (racecheck took more than nine minutes over the
// whole set in one test); each test draws every format's bodies and damage
// in the same order, so its bytes do not depend on which test runs.
class DamagedTansBodies : public testing::TestWithParam<DamageCase> {};

TEST_P(DamagedTansBodies, RefusedAlike) {
  const DamageCase param = GetParam();
  std::mt19937 gen(778);
  for (VideoFormat f : {VideoFormat::I420, VideoFormat::BGR}) {
    const int w = 56, h = 36;
    const Geometry g = tans({2, 2, 64});
    const std::vector<std::vector<uint8_t>> bodies = key_and_delta(f, w, h, g, gen);
    for (size_t which = 0; which < bodies.size(); ++which) {
      size_t cuts;
      const std::vector<std::vector<uint8_t>> damaged =
          damaged_versions(bodies[which], gen, 13, 5, &cuts);
      if (f != param.format || which != param.which) continue;
      int refused;
      decode_damaged_alike(f, w, h, which, bodies[0], damaged, cuts, param.part, param.parts,
                           &refused);
      if (HasFailure()) return;
      const size_t tried = (damaged.size() - param.part + param.parts - 1) / param.parts;
      EXPECT_GT(refused, int(tried) * 3 / 4) << format_name(f) << " body " << which;
    }
  }
}

namespace {
// Each format's keyframe in two parts, its delta in six.
std::vector<DamageCase> tans_damage_cases() {
  std::vector<DamageCase> cases;
  for (VideoFormat f : {VideoFormat::I420, VideoFormat::BGR}) {
    for (size_t part = 0; part < 2; ++part) cases.push_back({f, 0, part, 2});
    for (size_t part = 0; part < 6; ++part) cases.push_back({f, 1, part, 6});
  }
  return cases;
}
}  // namespace

INSTANTIATE_TEST_SUITE_P(Codec2CudaTans, DamagedTansBodies, testing::ValuesIn(tans_damage_cases()),
                         damage_case_name);

// The CUDA encoder does not write tANS lanes yet: asking for them is an
// error that says so.
TEST(Codec2CudaTans, EncoderRefusesThem) {
  auto gpu_ctx = Context::cuda(0);
  const Geometry g = tans({10, 8});
  try {
    Encoder::create(*gpu_ctx, VideoFormat::BGR, 64, 64, &g);
    ADD_FAILURE() << "no error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("tANS"), std::string::npos) << e.what();
  }
}
