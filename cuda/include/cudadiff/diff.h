// The difference codec's core: an encoder that keeps the reference frame (the
// picture every decoder shows) and emits either a keyframe body or a delta
// body, and a decoder that rebuilds the reference from them. The stream
// format around these bodies (headers, checksums, compression) lives in
// plugins/diff; docs/stream-format.md specifies both.
//
// Canonical byte order: a frame is the sequence of its visible bytes, plane
// after plane, row after row, without padding (packed_view()); N bytes. A
// byte "changes" when |current - reference| > threshold; only changed bytes
// are sent and only they update the reference, so the reference is exactly
// what the decoders show and every shown byte is within `threshold` of the
// input (threshold 0: lossless).
//
// Delta body (all integers little-endian), for a frame of N bytes, with
// blocks of 32 bytes and superblocks of 32 blocks (1024 bytes):
//   1. superblock bitmap: ceil(ceil(N/1024)/8) bytes; bit s%8 of byte s/8 is
//      set when superblock s holds a changed byte;
//   2. superblock masks: one u32 per set superblock, in order; bit b set when
//      block 32*s+b holds a changed byte;
//   3. block masks: one u32 per set block, in order; bit j set when byte
//      32*block+j changed;
//   4. values: one byte per changed byte, in increasing position: the new
//      value (ValueMode::Values) or (new - old) mod 256 (ValueMode::Deltas).
// Canonical form: no zero mask is listed, no bit names a byte at or past N.
// Keyframe body: the N bytes of the frame.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cudadiff/frame.h"
#include "cudadiff/runtime.h"

namespace cudadiff {
namespace diff {

constexpr size_t kBlockBytes = 32;
constexpr size_t kBlocksPerSuper = 32;
constexpr size_t kSuperBytes = kBlockBytes * kBlocksPerSuper;

enum class ValueMode : uint8_t { Values = 0, Deltas = 1 };

struct DeltaSummary {
  uint64_t changed_bytes = 0;
  uint64_t changed_blocks = 0;
  uint64_t changed_superblocks = 0;
};

inline size_t superblock_count(size_t frame_bytes) {
  return (frame_bytes + kSuperBytes - 1) / kSuperBytes;
}
inline size_t bitmap_bytes(size_t frame_bytes) {
  return (superblock_count(frame_bytes) + 7) / 8;
}
// Size of a delta body with these counts.
inline size_t delta_body_size(size_t frame_bytes, const DeltaSummary &s) {
  return bitmap_bytes(frame_bytes) + 4 * s.changed_superblocks + 4 * s.changed_blocks +
         s.changed_bytes;
}
// Largest possible delta body (every byte changed).
size_t max_delta_body_size(size_t frame_bytes);

// One changed superblock of a checked body: where its masks and values start.
struct SuperblockEntry {
  uint32_t super;        // superblock index
  uint32_t super_mask;   // its changed blocks
  uint32_t first_block;  // index of its first block mask in section 3
  uint32_t first_value;  // index of its first value in section 4
};

// Where the sections of a checked delta body start, and how many entries each
// has. Produced by parse_delta(), which trusts nothing in the body.
struct DeltaIndex {
  size_t frame_bytes = 0;
  size_t bitmap_bytes = 0;
  size_t super_masks_offset = 0;
  size_t block_masks_offset = 0;
  size_t values_offset = 0;
  DeltaSummary summary;
  // When parse_delta() was given an entry list: its data (valid while that
  // list lives), which spares the CUDA decoder a second walk of the body.
  const SuperblockEntry *entries = nullptr;
};

// Checks that `body` (n bytes) is a canonical delta body for a frame of
// `frame_bytes` bytes: exact size, no zero masks, no bit past the frame.
// Returns false with a reason in `error` otherwise. One pass over the bitmap
// and masks. With `entries`, also lists the changed superblocks (reusing the
// vector's memory).
bool parse_delta(const uint8_t *body, size_t n, size_t frame_bytes, DeltaIndex *index,
                 std::string *error, std::vector<SuperblockEntry> *entries = nullptr);

class DiffEncoder {
 public:
  virtual ~DiffEncoder() = default;
  // The reference becomes `frame`; `body` receives the keyframe body (N bytes).
  virtual void keyframe(const FrameView &frame, HostBytes &body) = 0;
  // Compares `frame` with the reference, updates the reference where bytes
  // changed, and writes the delta body into `body`. Returns the counts.
  virtual DeltaSummary delta(const FrameView &frame, int threshold, ValueMode mode,
                             HostBytes &body) = 0;
  // The element's path: `frame` is in host memory (pinned for speed, any
  // strides). The CUDA backend uploads it in slices and compares each slice
  // while the next one crosses the bus; the CPU backend is keyframe()/delta().
  // The CUDA backend also takes a frame in device memory here (a
  // device-resident pipeline): copied on the context's stream, so ordered
  // after the work that the context's stream queued to write it.
  virtual void keyframe_host(const FrameView &frame, HostBytes &body) { keyframe(frame, body); }
  virtual DeltaSummary delta_host(const FrameView &frame, int threshold, ValueMode mode,
                                  HostBytes &body) {
    return delta(frame, threshold, mode, body);
  }
  // Frames in flight, the element's throughput path: submit_delta_host()
  // queues delta_host() of a frame and may return before it is done (the
  // CUDA backend: upload, comparison and compaction are queued, nothing
  // waits); collect_delta() waits for the oldest submitted frame and writes
  // its body, as delta_host() would have. Deltas are made in submission
  // order, each against the reference the previous one left, so submitting
  // frame N+1 before collecting frame N gives the same bodies as delta_host()
  // one after the other, while the GPU works on N+1 and the caller on N.
  // At most kMaxInFlight frames may be submitted and not yet collected (more
  // throws Error); a submitted host frame must stay valid and unchanged until
  // its collect_delta() returns. keyframe*(), delta*() and queue_delta()
  // throw Error while frames are in flight. The CPU backend computes the
  // delta in submit_delta_host() and keeps the body until collected.
  static constexpr int kMaxInFlight = 2;
  virtual void submit_delta_host(const FrameView &frame, int threshold, ValueMode mode);
  virtual DeltaSummary collect_delta(HostBytes &body);
  int in_flight() const { return in_flight_; }
  // delta() without bringing the body to the host: the CUDA backend only
  // queues the kernels (the body stays in device memory), the CPU backend
  // computes into a scratch body. Measures the device-resident core; the
  // reference is updated as by delta().
  virtual void queue_delta(const FrameView &frame, int threshold, ValueMode mode) = 0;
  // The reference in canonical order (N bytes), for tests and statistics.
  virtual void read_reference(HostBytes &out) = 0;
  size_t frame_bytes() const { return frame_bytes_; }

  // `frame` views given to keyframe()/delta() hold device pointers for the
  // CUDA backend (fastest when packed: packed_view()) and host pointers for
  // the CPU. Both calls return when `body` is complete in host memory.
  static std::unique_ptr<DiffEncoder> create(const Context &ctx, VideoFormat format, int width,
                                             int height);

 protected:
  // Throws Error when frames are in flight (`what` names the call).
  void check_idle(const char *what) const;
  size_t frame_bytes_ = 0;
  int in_flight_ = 0;
  int oldest_ = 0;  // slot of the oldest frame in flight (slots: submission order mod kMaxInFlight)

 private:
  // The default submit/collect (CPU backend): bodies made at submission.
  struct Done {
    HostBytes body;
    DeltaSummary summary;
  };
  Done done_[kMaxInFlight];
};

class DiffDecoder {
 public:
  virtual ~DiffDecoder() = default;
  // The reference becomes the keyframe body (host memory, frame_bytes() long).
  // The caller may reuse `body` as soon as a call returns.
  virtual void keyframe(const uint8_t *body) = 0;
  // Applies a delta body checked by parse_delta() (host memory). The CUDA
  // backend queues the work and write_frame() waits for it: a body in pinned
  // memory (HostBytes) is read by DMA until then (or until finish_uploads()
  // returns) and must stay unchanged; any other memory is staged first and
  // may be reused at once.
  virtual void delta(const uint8_t *body, const DeltaIndex &index, ValueMode mode) = 0;
  // Returns once the last delta()'s body has been read, so that its memory
  // may be reused, without waiting for frames on their way down.
  virtual void finish_uploads() {}
  // Copies the reference into `out`, a host frame of the stream's format and
  // size (any strides). Returns when `out` is complete.
  virtual void write_frame(const FrameView &out) = 0;
  // Frames in flight (cudadiffdec frame-overlap): submit_write_frame() queues
  // write_frame() and may return before `out` is complete (the CUDA backend
  // queues the copy: asynchronous when `out` is pinned); wait_frame() waits
  // for the oldest submitted frame. keyframe() and delta() may come in
  // between (the GPU orders them after the copy), so frame N+1's packet is
  // checked and applied while frame N comes down. At most kMaxInFlight
  // frames; `out` must stay valid until its wait_frame() returns. The CPU
  // backend writes at submission.
  static constexpr int kMaxInFlight = 2;
  virtual void submit_write_frame(const FrameView &out);
  virtual void wait_frame();
  int frames_in_flight() const { return frames_in_flight_; }
  size_t frame_bytes() const { return frame_bytes_; }

  static std::unique_ptr<DiffDecoder> create(const Context &ctx, VideoFormat format, int width,
                                             int height);

 protected:
  size_t frame_bytes_ = 0;
  int frames_in_flight_ = 0;
};

namespace detail {
std::unique_ptr<DiffEncoder> make_cuda_encoder(const Context &ctx, VideoFormat format, int width,
                                               int height);
std::unique_ptr<DiffDecoder> make_cuda_decoder(const Context &ctx, VideoFormat format, int width,
                                               int height);
}  // namespace detail

}  // namespace diff
}  // namespace cudadiff
