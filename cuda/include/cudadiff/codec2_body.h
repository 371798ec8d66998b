// The difference codec, version 2: reading a body's header, frequency
// tables and tile table (docs/stream-format.md, "Decoding a body", steps 1
// to 3), shared by the CPU and CUDA decoders so that both accept and refuse
// the same bodies. The CPU reference (cuda/cpu/codec2.cpp) implements it;
// decoding the tiles (steps 4 to 6) is each backend's own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cudadiff/codec2.h"
#include "cudadiff/codec2_rules.h"

namespace cudadiff {
namespace codec2 {
namespace detail {

// A tile's blocks and, per layer, its samples (docs/stream-format.md, "Tiles").
struct Tile {
  int bx0, by0, bx1, by1;              // blocks [bx0, bx1) x [by0, by1)
  int x0[kMaxLayers], y0[kMaxLayers];  // first sample per layer
  int w[kMaxLayers], h[kMaxLayers];    // samples per layer
  size_t raw_bytes = 0;                // bytes of a raw tile
};
std::vector<Tile> make_tiles(const LayerSet &ls, const Geometry &g);

// A tile's entry of the tile table: type (0 skipped, 1 coded, 2 raw), rANS
// lanes, and where its payload lies (bytes from the first payload).
struct TileEntry {
  int type = 0;
  int lanes = 1;
  size_t offset = 0;
  size_t size = 0;
};

// Reads bodies of one format and size, keeping the tables of the last
// body that was committed (the previous frame's, which a delta may reuse).
class BodyReader {
 public:
  BodyReader(VideoFormat format, int width, int height);
  ~BodyReader();
  BodyReader(const BodyReader &) = delete;
  BodyReader &operator=(const BodyReader &) = delete;

  // Steps 1 to 3 for a body of n bytes; `has_reference`: a delta may be
  // decoded. False with the reason (the CPU decoder's words, without its
  // "codec2 body: " prefix). Changes nothing a later read() sees until commit().
  bool read(const uint8_t *body, size_t n, bool has_reference, std::string *why);
  // The tables of the last read() become the previous frame's (after its
  // tiles decoded).
  void commit();

  // Of the last successful read():
  const BodyHeader &header() const;
  size_t payload_offset() const;  // where the first tile's payload starts in the body
  const std::vector<Tile> &tiles() const;
  const std::vector<TileEntry> &entries() const;
  // Distributions: their count, the block-mode one, the first of each layer,
  // class and component (docs/stream-format.md, "Distributions").
  const LayerSet &layers() const;
  int distributions() const;
  int mode_distribution() const;
  int base(int layer, int cls, int comp) const;
  // Whether distribution d has a table, and per token cum | freq << 16
  // (tokens the table does not code: cum 4096, freq 0).
  bool used(int d) const;
  void symbols(int d, uint32_t out[kTokens]) const;
  // Body flag 0x04 (tANS lanes): the palette's tables (0 without the
  // flag), distribution d's table in it (-1: unused), and table i's
  // frequencies (summing to kTansStates; 0 past its tokens).
  int palette_size() const;
  int palette_of(int d) const;
  void palette_freq(int i, uint16_t out[kTokens]) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace detail
}  // namespace codec2
}  // namespace cudadiff
