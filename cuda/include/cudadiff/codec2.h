// The difference codec, version 2: bounded-error coding of a frame against
// the reference frame every decoder holds. docs/stream-format.md, "Version 2: the body", specifies
// the body; cudadiff/codec2_rules.h holds the per-sample rules shared by every backend.
//
// In short: per 16x16 block a mode (skip, temporal, temporal+spatial,
// spatial; keyframes are all spatial), values quantised with step 2k+1 (the
// encoders take k = encoder_k(threshold), about two thirds of it, for
// deltas and keyframe_k(threshold), a third, for keyframes, and keep
// the reference's byte wherever it is within the threshold, so every byte
// stays within the threshold of the input; 0 is lossless),
// RGB as YCoCg-R of the quantised values, YUV as a luma and a chroma layer,
// residuals of a median predictor coded as tokens with per-frame frequency
// tables selected by local activity, by up to 32 interleaved rANS coders
// (lanes) per tile. Tiles are independent, so both directions run in
// parallel over tiles (and a GPU over the lanes of a tile).
//
// The encoder owns the reference (the picture every decoder shows) and the
// previous frame's tables; a body depends on both, except a keyframe's,
// which depends on nothing. The decoder trusts nothing in a body: every
// size, count and offset is checked, every lane ends in a state that holds
// a checksum of its symbols, it never writes outside its frame, and a
// damaged body leaves its picture and tables unchanged (and makes it wait
// for a keyframe).
//
// For a CUDA implementation: detail::make_cuda_encoder/decoder below, the
// same bytes as the CPU's (codec2_rules.h has every per-sample function as
// __host__ __device__); Encoder::create()/Decoder::create() pick it for a
// CUDA context. For the stream format: a version 2 packet's payload is a
// body; its keyframe flag must match read_body_header()'s.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "cudadiff/frame.h"
#include "cudadiff/runtime.h"

namespace cudadiff {
namespace codec2 {

// Tile geometry, written in every body: tiles of tile_bx x tile_by blocks
// (16x16 samples of the first layer). Each coded tile has its own number of
// rANS lanes (1..32, in the tile table), chosen by the encoder from the
// tile's samples (codec2_rules.h, lanes_for_tile() and bounded_lanes()):
// one lane per lane_samples coded sample components, and in a delta's tile
// with skipped blocks enough lanes that a GPU decoder's walk through the
// tile stays within walk_bound percent of a full tile's (0: no such bound).
// lane_samples and walk_bound are the encoder's choice alone (a decoder
// reads each tile's lanes from the body): fewer samples per lane give a GPU
// decoder shorter chains of dependent steps at the cost of 4 bytes per lane
// (docs/performance.md, "The CUDA decoder", "Real footage on the GPU").
struct Geometry {
  int tile_bx = 10;
  int tile_by = 8;
  int lane_samples = 2048;  // 1 .. 2^24; kSamplesPerLane (default_geometry(): 1024 for YUV, gray)
  int walk_bound = 100;     // percent, 0 .. 1000 (0: none); kWalkBound in codec2_rules.h
  // Body flag 0x04: tANS lanes with a palette of at most 16 small tables
  // instead of rANS lanes (docs/stream-format.md, "tANS lanes (flag
  // 0x04)"). Being built, not the default: the CPU encoder writes it, both
  // decoders read it, and the CUDA encoder refuses it (Encoder::create()
  // throws Error).
  bool tans_lanes = false;
};
// The geometry the encoders use for a format and size (deterministic, so
// that every backend writes the same bytes).
Geometry default_geometry(VideoFormat format, int width, int height);

// What one encoded frame holds.
struct FrameStats {
  bool keyframe = false;
  int threshold = 0;  // the bound: every byte within it of the input
  int k = 0;          // the body's quantiser, frame_k(threshold, keyframe) (codec2_rules.h)
  size_t body_bytes = 0;
  size_t model_bytes = 0;            // header and frequency tables
  size_t table_bytes = 0;            // the tile table (sizes)
  uint32_t tiles[4] = {0, 0, 0, 0};  // skipped, coded, raw, indexed
  // Of the raw tiles, those stored raw without being coded, since a lower
  // bound of their coded size already reached their bytes (codec2_rules.h,
  // coded_tile_bound()). Work saved, not bytes: the body is the same. The
  // CUDA encoder looks for them at quantiser 0 only, the CPU's everywhere.
  uint32_t raw_by_bound = 0;
  uint32_t lanes = 0;                 // rANS lanes of the coded tiles
  uint32_t blocks[4] = {0, 0, 0, 0};  // per mode (Mode in codec2_rules.h; indexed tiles' spatial)
  // Deltas: bytes of the input more than the threshold off the reference
  // (what a version 1 delta would send); 0 for keyframes.
  uint64_t changed_bytes = 0;
};

// Fixed fields at the start of every body.
struct BodyHeader {
  bool keyframe = false;
  bool tile_classes = false;  // flag 0x02: reference classes within the tile
  int k = 0;                  // the quantiser (step 2k + 1)
  Geometry geometry;
};
constexpr size_t kBodyHeaderBytes = 4;
constexpr uint8_t kBodyTileClasses = 0x02;
constexpr uint8_t kBodyTansLanes = 0x04;
// Reads and checks the fixed fields (flags, threshold, geometry); false with
// a reason otherwise. The stream layer uses it to match the packet's flags.
bool read_body_header(const uint8_t *body, size_t n, BodyHeader *h, std::string *error);

class Encoder {
 public:
  virtual ~Encoder() = default;
  // Encodes `frame` (host pointers for the CPU backend, device pointers for
  // CUDA) with every byte within `threshold` (0..255) of it. A keyframe
  // uses neither the reference nor the previous tables; a delta needs a
  // previous frame (else Error). Afterwards the reference is what a decoder
  // of `body` shows. Returns when `body` is complete in host memory.
  virtual FrameStats encode(const FrameView &frame, int threshold, bool keyframe,
                            HostBytes &body) = 0;
  // Frames in flight (cudadiffenc frame-overlap), so that the GPU codes
  // frame N+1 while the entropy coder still works on frame N and the caller
  // sends frame N-1 (or, more in flight, while frames N+2 and N+3 wait to
  // start; cudadiffenc keeps kMaxInFlight - 1 deltas queued):
  // - submit() starts encoding `frame` as encode() does (same checks, same
  //   body); the next frame may be submitted at once (the reference and the
  //   tables are taken as this frame leaves them). `frame` must stay valid
  //   and unchanged until this frame's finish() returns.
  // - finish() waits for the oldest frame in flight and writes its body.
  // At most kMaxInFlight frames; encode() only when none is (the CUDA
  // backend throws otherwise, and from read_reference()). If submit() or
  // finish() throws, the encoder's reference is undefined: finish() and
  // discard a frame still in flight (it was coded against the lost one),
  // then encode a keyframe (has_reference() is false after a failed
  // finish()), or make a new encoder after a CUDA error. The CPU backend
  // encodes at submission.
  // Four: with three, cudadiffenc's frames waited for the host's packing of
  // the one three frames before (docs/performance.md, "Four frames in
  // flight").
  static constexpr int kMaxInFlight = 4;
  virtual void submit(const FrameView &frame, int threshold, bool keyframe);
  virtual FrameStats finish(HostBytes &body);
  // finish() for a caller with work to do while a large body comes back
  // from the device (cudadiffenc packs frame N-1 while frame N's payloads
  // cross the bus): the same body and statistics, but its payloads may
  // still be on their way into `body` on return. Until wait_body(body) the
  // caller must not read, resize, reallocate or free `body` (moving the
  // HostBytes is fine: its storage stays). At most kMaxInFlight bodies on
  // their way at once (a further one waits for the oldest first). The
  // frame itself is finished as by finish() (the next may be submitted, and
  // its input is no longer read). The CPU backend returns complete bodies.
  virtual FrameStats finish_async(HostBytes &body) { return finish(body); }
  // Waits until the payloads of `body`, from finish_async(), are in place;
  // returns at once for any other body. Throws Error when their copy
  // failed (the body is then incomplete; a CUDA error: make a new encoder).
  virtual void wait_body(const HostBytes &body) { (void)body; }
  int frames_in_flight() const { return in_flight_; }
  // The reference in canonical order (docs/stream-format.md), for tests.
  virtual void read_reference(HostBytes &out) = 0;
  bool has_reference() const { return has_reference_; }
  VideoFormat format() const { return format_; }
  int width() const { return width_; }
  int height() const { return height_; }
  const Geometry &geometry() const { return geometry_; }

  // Throws Error for an unknown format or an empty size. `geometry` null:
  // default_geometry().
  static std::unique_ptr<Encoder> create(const Context &ctx, VideoFormat format, int width,
                                         int height, const Geometry *geometry = nullptr);

 protected:
  VideoFormat format_ = VideoFormat::Unknown;
  int width_ = 0, height_ = 0;
  Geometry geometry_;
  bool has_reference_ = false;
  int in_flight_ = 0;

 private:
  // The base submit()/finish(): bodies encoded at submission, oldest first.
  struct Encoded {
    HostBytes body;
    FrameStats stats;
  };
  Encoded encoded_[kMaxInFlight];
  int oldest_ = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Decodes a body (host memory). True: the picture is the decoded frame.
  // False with a reason in `error`: the body is damaged, truncated, or a
  // delta without a picture to apply it to. The picture stays as it was,
  // but after a failure only a keyframe is decoded (a delta made against
  // what was lost would not fit; so the previous tables no longer matter):
  // has_reference() is false until then, as after reset().
  virtual bool decode(const uint8_t *body, size_t n, std::string *error) = 0;
  // Copies the picture into `out` (host memory, this format and size, any strides).
  virtual void write_frame(const FrameView &out) = 0;
  // The picture in canonical order, for tests.
  virtual void read_reference(HostBytes &out) = 0;

  // Frames in flight (cudadiffdec frame-overlap), so that the GPU decodes
  // frame N while the caller pushes frame N-1 and checks packet N+1:
  // - submit() checks a body as decode() does and starts decoding it. False
  //   with a reason: refused on the host (damaged header, tables or tile
  //   table, a delta without a picture); nothing is in flight then. True: the
  //   frame is in flight, and a delta may follow it at once (its tables and
  //   picture are taken as decoded). `body` may be reused on return.
  // - submit_write_frame() queues write_frame() of the frame just submitted
  //   (host or device memory; `out` must stay valid until its finish()).
  // - finish() waits for the oldest frame in flight (and its write) and
  //   says whether it decoded. False: its tiles were damaged (found on the
  //   GPU), or it is a delta after such a frame of the same keyframe's run;
  //   its `out` and the picture are then undefined, and has_reference() is
  //   false until a keyframe is submitted (unless one is in flight already).
  // At most kMaxInFlight frames; decode() and write_frame() only when none
  // is (the CUDA backend throws otherwise). The CPU backend decodes and
  // writes at submission (refusing damaged tiles there), so finish() only
  // counts.
  static constexpr int kMaxInFlight = 2;
  virtual bool submit(const uint8_t *body, size_t n, std::string *error);
  virtual void submit_write_frame(const FrameView &out);
  virtual bool finish(std::string *error);
  int frames_in_flight() const { return in_flight_; }

  // True when a delta can be decoded (a keyframe was, and nothing failed since).
  bool has_reference() const { return has_reference_; }
  // Wait for a keyframe (the picture stays for write_frame()).
  void reset() { has_reference_ = false; }

  // Throws Error for an unknown format or an empty size.
  static std::unique_ptr<Decoder> create(const Context &ctx, VideoFormat format, int width,
                                         int height);

 protected:
  VideoFormat format_ = VideoFormat::Unknown;
  int width_ = 0, height_ = 0;
  bool has_reference_ = false;
  int in_flight_ = 0;
};

namespace detail {
// The CPU reference; create() returns these for a CPU context.
std::unique_ptr<Encoder> make_cpu_encoder(VideoFormat format, int width, int height,
                                          const Geometry &geometry);
std::unique_ptr<Decoder> make_cpu_decoder(VideoFormat format, int width, int height);
// The CUDA implementation (cuda/kernels): create() returns these for a CUDA
// context when the build has CUDA (as diff.h's classes do). The encoder
// (codec2_enc.cu) takes frames in device memory and keeps its reference there.
std::unique_ptr<Encoder> make_cuda_encoder(const Context &ctx, VideoFormat format, int width,
                                           int height, const Geometry &geometry);
std::unique_ptr<Decoder> make_cuda_decoder(const Context &ctx, VideoFormat format, int width,
                                           int height);
}  // namespace detail

}  // namespace codec2
}  // namespace cudadiff
