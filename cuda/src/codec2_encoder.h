// Private to the core: the parts of the version 2 encoder that every backend
// shares with the CPU reference (cuda/cpu/codec2.cpp), so that their bodies
// are the same bytes by construction. A backend computes the per-sample work
// (working values, block modes, reconstruction, every tile's symbols and
// histograms) its own way, in exactly the layout below, and hands the
// symbols to an EncoderBackEnd, which makes the tables, codes the tiles
// (rANS, or raw) and writes the body (docs/stream-format.md, "The encoder",
// steps 5 to 8).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "cudadiff/codec2.h"
#include "cudadiff/codec2_body.h"  // Tile, make_tiles()
#include "cudadiff/codec2_rules.h"

namespace cudadiff {
namespace codec2 {
namespace detail {

// One coded symbol: a block mode (dist = the block-mode distribution,
// token = the mode) or a sample component (its distribution, token and raw
// bits). kNoSymbol as dist: a sample of a skipped block (nothing coded).
struct Symbol {
  uint16_t dist;
  uint8_t token;
  uint8_t nbits;
  uint16_t bits;
};
static_assert(sizeof(Symbol) == 6, "Symbol is copied between backends as 6 bytes");
constexpr uint16_t kNoSymbol = 0xffff;

// A tile's symbols as the back end reads them: its block modes in raster
// order (deltas only), then layer by layer its w x h samples in raster
// order, each with its components in order (kNoSymbol where skipped); and
// their histogram (dist_count() x kTokens counts, block modes included).
// count 0: every block of the tile is skipped (deltas).
struct TileSymbols {
  const Symbol *symbols = nullptr;
  size_t count = 0;
  const uint32_t *hist = nullptr;
};

// A distribution's table as a backend that makes the tables itself chose it
// (by codec2_tables.h's rules): the choice (kTableUnused, kTablePrevious,
// kTableCopy or kTableNew) and, for a new table, its tokens and levels.
struct ChosenTable {
  uint8_t choice;
  uint8_t n;
  uint8_t levels[kTokens];
};

class EncoderBackEnd {
 public:
  virtual ~EncoderBackEnd() = default;
  virtual const std::vector<Tile> &tiles() const = 0;
  virtual const LayerSet &layers() const = 0;
  // Distributions: 0 the block modes, then base(l, cls, c) + context.
  virtual int dist_count() const = 0;
  virtual int dist_base(int layer, int cls, int comp) const = 0;
  // Tables from the coded tiles' histograms, each tile's rANS stream (or raw
  // bytes, from `raw(tile, out)`, which writes the tiles()[tile].raw_bytes
  // bytes of the tile's reconstruction), the body. `modes`: every block's
  // mode (stats). Keeps the tables for the next delta. Afterwards
  // tile_types() holds 0 skipped, 1 coded, 2 raw, 3 indexed (none from this
  // call: an encode() of the back end's own decides those). `k`: the body's
  // quantiser (frame_k() of the encoder's threshold).
  virtual FrameStats write_body(bool keyframe, int k, const uint8_t *modes,
                                const TileSymbols *tiles,
                                const std::function<void(size_t, uint8_t *)> &raw,
                                HostBytes &body) = 0;
  virtual const std::vector<int> &tile_types() const = 0;

  // The same in pieces, for a backend that codes the tiles itself. Step 5:
  // the tables from the summed histogram of the coded tiles (the model
  // section is kept for assemble()); each distribution's tokens as
  // cum | freq << 16 into freq_cum (dist_count() x kTokens) when not null.
  virtual void make_tables(bool keyframe, const uint32_t *hist, uint32_t *freq_cum) = 0;
  // Instead of make_tables(): the tables another backend made from the
  // coded tiles' histogram, one per distribution (dist_count()); the model
  // section is written from them and kept for assemble().
  virtual void set_tables(bool keyframe, const ChosenTable *tables) = 0;
  // The bytes of the body's header and model section (after make_tables()
  // or set_tables()): where assemble() writes the tile table.
  virtual size_t head_bytes() const = 0;
  // The body from the last make_tables() and the tiles: per tile its type
  // (0 skipped, 1 coded, 2 raw, 3 indexed: `payloads` writes its words),
  // lanes (coded tiles) and payload size; payloads(p) writes every payload,
  // in tile order, from p, which lies head_bytes() plus the tile table's
  // bytes into `body`. `body` is resized to the body's bytes (within its
  // capacity nothing moves, so bytes written there beforehand stay). The
  // tables become the previous ones for the next delta.
  virtual FrameStats assemble(bool keyframe, int k, const uint8_t *modes, const int *types,
                              const int *lanes, const size_t *sizes,
                              const std::function<void(uint8_t *)> &payloads, HostBytes &body) = 0;
};

// Whether the environment variable `name` leaves a switch that is on by
// default on: unset, or set to anything but "0" (the encoders' switches for
// the tests and for timing comparisons).
inline bool env_switch_on(const char *name) {
  const char *v = std::getenv(name);
  return !(v && std::strcmp(v, "0") == 0);
}

// Whether the encoders store a tile raw without coding it when
// coded_tile_bound() (codec2_rules.h) shows that coding would not make it
// smaller. CUDADIFF_CODEC2_RAW_BOUND=0 in the environment codes every tile
// not skipped (the same bodies, more work; for the tests and for timing
// comparisons). Read when an encoder is made.
inline bool raw_bound_enabled() {
  return env_switch_on("CUDADIFF_CODEC2_RAW_BOUND");
}

// The CPU reference's back end, for `format`, size and geometry (throws Error
// as Encoder::create() does).
std::unique_ptr<EncoderBackEnd> make_encoder_back_end(VideoFormat format, int width, int height,
                                                      const Geometry &geometry);

}  // namespace detail
}  // namespace codec2
}  // namespace cudadiff
