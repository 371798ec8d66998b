// codec2_tiles: what a GPU decoder walks in each coded tile of version 2
// deltas, from the bodies alone (CPU only, no timing): the clip's frames
// scaled to --size (default 1920x1080, nearest neighbour), coded by the CPU
// encoder at each threshold, each body's tile table read back, and each
// delta's block modes found by comparing the pictures before and after it
// (a block is coded exactly when some byte of it changed: a byte the
// encoder moves lies more than the threshold off the old picture and at
// most k < threshold off the input, or differs at threshold 0).
//
//   codec2_tiles --clip FILE --clip-size WxH [--frames N] [--size WxH]
//                [--tiles BXxBY] [--lane-samples N] [--walk-bound P]
//
// Per threshold and per kind of coded tile (full: no block skipped; partly
// skipped; sparse: at least three quarters skipped), the
// tiles per delta and the longest walk in wavefront steps as the CUDA
// decoder walks a tile: the steps at which some lane decodes, and runs of
// fewer than kDecoderMinJump steps at which none does; over a longer run
// the lanes jump (one step walked, then the warp does the skipped samples;
// the walk's jumps in brackets). For sparse tiles also the fewest lanes;
// the deltas' average body in bytes, and their lanes (each ends with a
// state of 4 bytes: the lanes' price); and the deltas' frequency tables:
// the distributions that have one, and how many different tables they use
// (the average and the most of a delta), which a decoder keeps at hand.
// The frame's decoding time follows its longest walk (docs/performance.md,
// "Real footage on the GPU"), so this tells on any machine which tiles a
// change of the lane rule would shorten. (The encoders bound the same walk,
// codec2_rules.h, bounded_lanes(); this counts it independently, step by
// step.)
#include <algorithm>
#include <array>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "codec2_walk.h"
#include "codec_util.h"
#include "cudadiff/codec2.h"
#include "cudadiff/codec2_body.h"
#include "cudadiff/codec2_rules.h"
#include "frames.h"

using namespace cudadiff;
using namespace cudadiff::codec2;

namespace {

using Walk = testing_util::StepWalk;

struct Kind {
  long tiles = 0;
  Walk longest;           // the most steps walked, with that walk's jumps
  int fewest_lanes = 33;  // the fewest lanes of a tile
};

bool sparse_tile(int skipped, int blocks) {
  return 4 * skipped >= 3 * blocks;
}

// The steps the CUDA decoder walks through a tile's schedule (layer 0;
// `coded` per block of the tile, row by row; tests/common/codec2_walk.h).
Walk walk_of(const detail::Tile &t, int lanes, const std::vector<uint8_t> &coded) {
  return testing_util::walk_by_steps(t.w[0], t.h[0], lanes, t.bx1 - t.bx0, coded);
}

}  // namespace

int main(int argc, char **argv) {
  int w = 1920, h = 1080, clip_w = 0, clip_h = 0, frames = 30;
  std::string clip;
  auto usage = [] {
    std::fprintf(stderr,
                 "usage: codec2_tiles --clip FILE --clip-size WxH [--frames N (>= 2)] "
                 "[--size WxH] [--tiles BXxBY] [--lane-samples N] [--walk-bound P]\n");
    return 2;
  };
  if (argc % 2 == 0) return usage();
  // The size first: the default geometry depends on it.
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--size" && !bench::parse_size(argv[i + 1], w, h)) return usage();
  Geometry geometry = default_geometry(VideoFormat::BGR, w, h);
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string o = argv[i], v = argv[i + 1];
    int r = bench::clip_option(o, v, clip, clip_w, clip_h);
    if (r == 0) r = bench::geometry_option(o, v, geometry);
    if (r == 0 && o == "--frames") r = (frames = std::atoi(v.c_str())) >= 2 ? 1 : -1;
    if (r == 0 && o == "--size") r = 1;
    if (r <= 0) return usage();
  }
  if (clip.empty() || clip_w == 0) return usage();
  const auto input = bench::read_scaled_clip(clip, clip_w, clip_h, w, h, frames);
  if (input.size() < 2) {
    std::fprintf(stderr, "%s: fewer than 2 frames of %dx%d BGR\n", clip.c_str(), clip_w, clip_h);
    return 2;
  }
  const auto cpu = Context::cpu();
  const LayerSet ls = layers_of(VideoFormat::BGR, w, h);
  const std::vector<detail::Tile> tiles = detail::make_tiles(ls, geometry);
  const size_t row = size_t(w) * 3;
  std::printf(
      "%s: %zu frames of %dx%d scaled to %dx%d, tiles of %dx%d blocks, %d per lane, walk bound %d "
      "%%\n",
      clip.c_str(), input.size(), clip_w, clip_h, w, h, geometry.tile_bx, geometry.tile_by,
      geometry.lane_samples, geometry.walk_bound);
  std::printf(
      "| threshold | full tiles | longest walk (jumps) | partly skipped | longest walk (jumps) "
      "| fewest lanes | sparse | longest walk (jumps) | fewest lanes | delta bytes | lanes "
      "| tables: used | different | most different |\n"
      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int threshold : {0, 5, 10, 20}) {
    auto enc = Encoder::create(*cpu, VideoFormat::BGR, w, h, &geometry);
    detail::BodyReader reader(VideoFormat::BGR, w, h);
    HostBytes body, before, after;
    Kind full, partly, sparse;
    size_t delta_bytes = 0, delta_lanes = 0, tables_used = 0, tables_different = 0;
    size_t most_different = 0;
    for (size_t t = 0; t < input.size(); ++t) {
      testing_util::HostFrame f(VideoFormat::BGR, w, h);
      bench::copy_clip_frame(input[t], f.view);
      enc->encode(f.view, threshold, t == 0, body);
      std::string why;
      if (!reader.read(body.data(), body.size(), t > 0, &why)) {
        std::fprintf(stderr, "frame %zu: %s\n", t, why.c_str());
        return 1;
      }
      reader.commit();
      if (t > 0) {
        delta_bytes += body.size();
        std::set<std::array<uint32_t, kTokens>> different;
        for (int d = 0; d < reader.distributions(); ++d) {
          if (!reader.used(d)) continue;
          std::array<uint32_t, kTokens> table;
          reader.symbols(d, table.data());
          different.insert(table);
          ++tables_used;
        }
        tables_different += different.size();
        most_different = std::max(most_different, different.size());
      }
      enc->read_reference(after);
      const std::vector<detail::TileEntry> &entries = reader.entries();
      for (size_t ti = 0; t > 0 && ti < tiles.size(); ++ti) {
        if (entries[ti].type != 1) continue;
        const detail::Tile &tl = tiles[ti];
        const int bw = tl.bx1 - tl.bx0, blocks = bw * (tl.by1 - tl.by0);
        std::vector<uint8_t> coded(size_t(blocks), 0);
        int skipped = 0;
        for (int by = tl.by0; by < tl.by1; ++by)
          for (int bx = tl.bx0; bx < tl.bx1; ++bx) {
            bool changed = false;
            for (int y = by * kBlock; y < std::min(h, (by + 1) * kBlock) && !changed; ++y) {
              const size_t from = size_t(y) * row + size_t(bx) * kBlock * 3;
              const size_t to = std::min(row, size_t(bx + 1) * kBlock * 3) + size_t(y) * row;
              changed = !std::equal(after.data() + from, after.data() + to, before.data() + from);
            }
            coded[size_t(by - tl.by0) * bw + (bx - tl.bx0)] = changed;
            skipped += !changed;
          }
        const int lanes = entries[ti].lanes;
        delta_lanes += size_t(lanes);
        Kind &kind = skipped == 0 ? full : sparse_tile(skipped, blocks) ? sparse : partly;
        ++kind.tiles;
        const Walk walk = walk_of(tl, lanes, coded);
        if (walk.steps > kind.longest.steps) kind.longest = walk;
        kind.fewest_lanes = std::min(kind.fewest_lanes, lanes);
      }
      std::swap(before, after);
    }
    const double deltas = double(input.size() - 1);
    std::printf(
        "| %d | %.1f | %d (%d) | %.1f | %d (%d) | %d | %.1f | %d (%d) | %d | %.0f | %.0f | %.1f "
        "| %.1f | %zu |\n",
        threshold, full.tiles / deltas, full.longest.steps, full.longest.jumps,
        partly.tiles / deltas, partly.longest.steps, partly.longest.jumps,
        partly.tiles ? partly.fewest_lanes : 0, sparse.tiles / deltas, sparse.longest.steps,
        sparse.longest.jumps, sparse.tiles ? sparse.fewest_lanes : 0, double(delta_bytes) / deltas,
        double(delta_lanes) / deltas, double(tables_used) / deltas,
        double(tables_different) / deltas, most_different);
  }
  return 0;
}
