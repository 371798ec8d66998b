// The difference stream's wire format (docs/stream-format.md is its
// specification): one reader/writer shared by cudadiffenc, cudadiffdec, the
// typefinder and the fuzz target. No GStreamer here, so the fuzz target and
// the tests can link it without the plugin's GTypes.
//
// A stream is a sequence of packets, each a fixed 64-byte little-endian
// header followed by its payload. The header's version byte says what the
// payload is. Version 2: the body of the version 2 codec (cudadiff/codec2.h),
// as it is. Version 1: a keyframe is the frame in the codec's canonical byte
// order, a delta the delta body of cudadiff/diff.h; either may be
// zstd-compressed, a keyframe may be left-predicted first. Every size, count
// and position read from the wire is checked before it is used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "cudadiff/diff.h"
#include "cudadiff/frame.h"
#include "cudadiff/runtime.h"
#include "wide.h"

namespace cudadiff {
namespace stream {

constexpr size_t kHeaderSize = 64;
// Versions of the stream. A reader reads both; the version byte of each
// packet decides, and a delta belongs to the version of its keyframe.
constexpr uint8_t kVersion1 = 1;  // bodies of cudadiff/diff.h, optional zstd
constexpr uint8_t kVersion2 = 2;  // bodies of cudadiff/codec2.h (entropy-coded)
constexpr uint8_t kLatestVersion = kVersion2;
inline bool known_version(uint8_t v) {
  return v == kVersion1 || v == kVersion2;
}
// "CDIF" as it appears on the wire, and as a big-endian u32 (for scanners).
constexpr uint8_t kMagic[4] = {'C', 'D', 'I', 'F'};
constexpr uint32_t kMagicBE = 0x43444946u;
// Offset of the first kMagic in data[from, n) (all four bytes before n), or
// -1. memchr finds the candidates instead of a comparison at every offset.
ptrdiff_t find_magic(const uint8_t *data, size_t n, size_t from);
// Offset of the first kMagic in data[from, n) that has a whole header
// (kHeaderSize bytes) before n, or -1.
inline ptrdiff_t find_header_magic(const uint8_t *data, size_t n, size_t from) {
  return n < kHeaderSize ? -1 : find_magic(data, n - kHeaderSize + 4, from);
}
// No timestamp (GST_CLOCK_TIME_NONE).
constexpr uint64_t kNoTime = ~uint64_t(0);
// Largest frame (canonical bytes) a stream may carry: 1 GiB (16384x16384 RGBA).
constexpr size_t kMaxFrameBytes = size_t(1) << 30;
// Largest payload of a stream header packet (reserved for extensions).
constexpr size_t kMaxStreamHeaderPayload = 65536;

// Bits of the flags byte.
enum Flags : uint8_t {
  kFlagKeyframe = 1u << 0,      // the payload is a whole frame (depends on no other packet)
  kFlagCompressed = 1u << 1,    // version 1: the payload is zstd (one or more frames) of the body
  kFlagDeltaValues = 1u << 2,   // version 1: delta values are (new - old) mod 256
  kFlagPredicted = 1u << 3,     // version 1: keyframe body is left-predicted per plane row
  kFlagStreamHeader = 1u << 4,  // the stream header: describes the stream, carries no frame
  kKnownFlags = 0x1f,           // version 1
  kKnownFlagsV2 = kFlagKeyframe | kFlagStreamHeader,
};

// A packet header as numbers (the wire layout is in the .cpp and the doc).
struct PacketHeader {
  uint8_t version = kVersion1;
  uint8_t flags = 0;
  VideoFormat format = VideoFormat::Unknown;
  uint64_t frame_number = 0;
  uint64_t pts = kNoTime;       // nanoseconds
  uint64_t duration = kNoTime;  // nanoseconds
  uint32_t payload_size = 0;    // bytes following the header
  uint32_t body_size = 0;       // bytes of the body after decompression
  uint32_t width = 0;
  uint32_t height = 0;
  uint32_t fps_n = 0;
  uint32_t fps_d = 1;
  uint32_t payload_crc = 0;  // zlib crc32 of the payload bytes
  // Bytes 60-63, the header's own crc32: set by read_header() (which checked
  // it), ignored by write_header() (which computes it). Two packets with the
  // same header checksum are, for a receiver, the same packet sent twice.
  uint32_t header_crc = 0;

  bool keyframe() const { return flags & kFlagKeyframe; }
  bool stream_header() const { return flags & kFlagStreamHeader; }
  bool compressed() const { return flags & kFlagCompressed; }
  // Canonical frame size of the described format and size (0 when invalid).
  size_t frame_bytes() const;
};

// Stable on-the-wire codes of the video formats (independent of the core's
// enum values). 0 is never valid.
uint8_t wire_format(VideoFormat format);
VideoFormat format_from_wire(uint8_t code);

// zlib's crc32 of `n` bytes (computed by ISA-L where the build has it, the
// same values; large inputs are split across threads and combined with
// crc32_combine, which gives the same value).
uint32_t crc32(const uint8_t *data, size_t n);
// Copies `n` bytes from `src` to `dst` (not overlapping) and returns their
// crc32, in one pass over the memory.
uint32_t copy_crc32(uint8_t *dst, const uint8_t *src, size_t n);

// True when this build can read and write zstd payloads.
bool have_zstd();

// Bounds of a version 2 body (codec2) for a frame of this format and size,
// N canonical bytes in B blocks of 16x16 samples: at least the body header
// and 2 bytes (tables, tile table), at most N + 8 B + 65536 (raw tiles, the
// tile table, the frequency tables). 0 for an impossible format or size.
size_t min_v2_body_size();
size_t max_v2_body_size(VideoFormat format, int width, int height);

// Writes the 64 header bytes of `h` (computing the header checksum).
void write_header(const PacketHeader &h, uint8_t out[kHeaderSize]);

enum class HeaderStatus {
  Ok,
  NoMagic,      // the bytes do not start with the magic
  BadChecksum,  // the header checksum does not match
  Unsupported,  // a version or header size this reader does not know
  Invalid,      // checksum fine but the fields are impossible (sizes, format, flags)
};

// Reads and checks a header: magic, version (1 or 2), checksum, and that
// every field is possible (known format, frame size within kMaxFrameBytes,
// body and payload sizes that a frame of that size can have in that
// version, flags of that version in allowed combinations). `n` must be >=
// kHeaderSize. `why` gets the reason otherwise.
HeaderStatus read_header(const uint8_t *data, size_t n, PacketHeader *h, std::string *why);

// The value of `key` in the text of a stream header payload ("key=value"
// lines; version 1 writes "colorimetry", GStreamer's colorimetry string).
// "" when absent. Unknown keys are ignored, so later versions can add more.
std::string stream_header_value(const uint8_t *payload, size_t n, const std::string &key);

// Largest payload a packet of this header's kind and frame size can have.
size_t max_payload_size(const PacketHeader &h);

// Whether a frame's header announces more than `max_pixels` (width x
// height; 0: no limit). Stream headers never do.
inline bool exceeds_pixels(const PacketHeader &h, uint64_t max_pixels) {
  return max_pixels != 0 && !h.stream_header() && uint64_t(h.width) * h.height > max_pixels;
}

// Left prediction of a keyframe body (canonical order): in every row of every
// plane, each byte minus the byte one pixel stride (format_info) before it;
// the first pixel of a row is kept. unpredict() inverts it (in place is fine).
void predict(VideoFormat format, int width, int height, const uint8_t *in, uint8_t *out);
void unpredict(VideoFormat format, int width, int height, const uint8_t *in, uint8_t *out);

enum class Compression { None = 0, Zstd = 1 };

// Which delta values compress best: differences (new - old) under zstd at
// small thresholds (noise-like changes), the new values otherwise. Measured
// on vtest.avi: the crossover lies between thresholds 12 and 14.
inline diff::ValueMode choose_value_mode(Compression c, int threshold) {
  return c == Compression::Zstd && threshold <= 12 ? diff::ValueMode::Deltas
                                                   : diff::ValueMode::Values;
}

// What the encoder knows about a frame besides its body.
struct FrameInfo {
  uint8_t version = kVersion1;  // kVersion2: `body` is a codec2 body
  bool keyframe = false;
  diff::ValueMode mode = diff::ValueMode::Values;  // version 1 deltas
  uint64_t frame_number = 0;
  uint64_t pts = kNoTime;
  uint64_t duration = kNoTime;
  VideoFormat format = VideoFormat::Unknown;
  int width = 0, height = 0;
  int fps_n = 0, fps_d = 1;
};

// Builds packets. Owns its scratch memory (pinned) and its zstd context, so a
// packet costs no allocation once the sizes have been seen.
class Writer {
 public:
  Writer();
  ~Writer();
  Writer(const Writer &) = delete;
  Writer &operator=(const Writer &) = delete;

  // Compression for the following version 1 packets (Zstd without zstd:
  // throws Error). Version 2 packets are never compressed: their bodies are
  // entropy-coded already.
  void set_compression(Compression c, int level);
  Compression compression() const { return compression_; }
  // Allocates the scratch memory for frames of `frame_bytes` up front, so
  // that no packet allocates.
  void reserve(size_t frame_bytes);

  // Prepares the packet of a frame whose body (keyframe or delta body of
  // info.version) is `body`: for version 1 predicts and compresses as
  // configured; fills the header but for the payload checksum. `body` must
  // stay valid until write(). Returns the packet size. Throws Error for a
  // body the stream cannot carry.
  size_t prepare(const FrameInfo &info, const uint8_t *body, size_t body_size);
  // The prepared packet's header; its payload_crc is set by write().
  const PacketHeader &header() const { return header_; }
  size_t packet_size() const { return kHeaderSize + payload_size_; }
  // Writes the prepared packet (packet_size() bytes) to `dst`: copies the
  // payload and checksums it in the same pass, then writes the header.
  void write(uint8_t *dst);
  // Writes the prepared packet where its payload already lies, at `packet`
  // + kHeaderSize (a version 2 body given to prepare() in a buffer with
  // room for the header before it): checksums the payload in place and
  // writes the header in front, copying nothing. Throws Error when the
  // prepared payload is elsewhere (a compressed version 1 packet).
  void write_in_place(uint8_t *packet);

  // The stream header packet describing the stream: 64 bytes, then `text`
  // as its payload (key=value lines, see stream_header_value()); its
  // version byte is the stream's.
  static std::vector<uint8_t> stream_header(VideoFormat format, int width, int height, int fps_n,
                                            int fps_d, const std::string &text = "",
                                            uint8_t version = kVersion1);

 private:
  Compression compression_ = Compression::None;
  int level_ = 3;
  PacketHeader header_;
  const uint8_t *payload_ = nullptr;
  size_t payload_size_ = 0;
  HostBytes predicted_, compressed_;
  void *cctx_ = nullptr;  // ZSTD_CCtx
};

// Turns packet payloads back into bodies. Owns its scratch memory and zstd
// context.
class Reader {
 public:
  Reader();
  ~Reader();
  Reader(const Reader &) = delete;
  Reader &operator=(const Reader &) = delete;

  // The body of a packet whose header passed read_header() and whose payload
  // (h.payload_size bytes) passed the checksum. Version 1: decompressed and
  // unpredicted as the flags say. Version 2: the payload itself, once its
  // body header (codec2::read_body_header) is valid and agrees with the
  // packet's keyframe flag. *body points into `payload` or into the reader's
  // scratch (valid until the next call); its size is h.body_size. Returns
  // false with a reason when the payload does not decode to that size or
  // its body header is wrong, or when it is compressed and this build has
  // no zstd (*unsupported = true).
  bool body(const PacketHeader &h, const uint8_t *payload, const uint8_t **body, std::string *why,
            bool *unsupported = nullptr);
  // Allocates the scratch memory for frames of `frame_bytes` up front.
  void reserve(size_t frame_bytes);

 private:
  HostBytes scratch_;
  void *dctx_ = nullptr;  // ZSTD_DCtx
};

// A stream's output timeline, from its packets' sender timestamps (the
// parser and the decoder share it; docs/elements.md, cudadiffparse). The
// sender's timestamps in runs: a run begins at the first packet and
// wherever the sender restarted (its frame numbers fall back to 0 or by
// more than kReorderFrames, or its timestamps by more than kReorderTime,
// or by a frame interval or more at the next frame number: not a packet
// merely late or repeated, nor a jittered timestamp) or its timestamps
// jump ahead by
// more than max_packet_duration() (a sender that stood still that long, or a
// damaged or crafted timestamp, which would otherwise move every packet
// after it as far). In a run, output pts = out +
// (sender pts - pts), and a run after the first begins where the packet
// before it ended, so that time never jumps back. A packet that came with
// an output time of its own (a timed byte stream, whose buffers start
// packets anywhere) begins a run at that time, the packets after it that
// have none following it at the sender's pace; but where that time is
// before the last packet's output (a burst: the packets timed at the
// sender's pace ran ahead of the buffers' arrival), it continues the run
// instead, so that time never goes back there either.
constexpr uint64_t kReorderFrames = 16;
constexpr uint64_t kReorderTime = 1000000000;  // 1 s
// A packet's duration counts for the timeline up to this, and a step of
// the sender's time from one packet to the next up to this is not a jump
// (a longer one is damage or a crafted header, and would push the rest of
// the stream away)...
constexpr uint64_t kMaxPacketDuration = 60 * kReorderTime;
// ...or up to twice the frame interval of the packet's framerate where
// that is longer (a time-lapse camera at a frame a minute or slower), up
// to a day.
constexpr uint64_t kMaxFrameInterval = 86400 * kReorderTime;
inline uint64_t max_packet_duration(const PacketHeader &h) {
  if (h.fps_n == 0 || h.fps_d == 0) return kMaxPacketDuration;
  const u128 twice = u128(2) * h.fps_d * 1000000000u / h.fps_n;
  if (twice <= kMaxPacketDuration) return kMaxPacketDuration;
  return twice < kMaxFrameInterval ? uint64_t(twice) : kMaxFrameInterval;
}
// Whether a packet's duration is one to use: present and at most that
// (the timeline, the parser's and the decoder's output buffers).
inline bool usable_duration(const PacketHeader &h) {
  return h.duration != kNoTime && h.duration <= max_packet_duration(h);
}
// A packet without a sender pts (the sender's input was untimed: an appsrc
// without timestamps, a raw file) read as if its pts were its frame number
// times the frame interval (`frame_number * fps_d * 10^9 / fps_n` ns,
// rounded down), and its duration (when it has none) one frame interval:
// how a file's untimed packets are timed (the parser's walk of a file and
// its reads after it). Anything else comes back unchanged: a packet with a
// pts, a stream header, a variable framerate (0/1), a frame interval over
// max_packet_duration() (a day), a time past INT64_MAX.
PacketHeader with_frame_time(const PacketHeader &h);

struct TimeRun {
  uint64_t offset;  // its first packet's byte offset (the parser's pull mode)
  uint64_t pts;     // that packet's sender pts
  uint64_t out;     // its output pts
};

struct Timeline {
  bool have = false;
  TimeRun run{0, 0, 0};
  // The runs begun so far, by offset (at most kMaxRuns): after a seek a
  // packet takes the run its offset lies in.
  std::vector<TimeRun> runs;
  static constexpr size_t kMaxRuns = 4096;
  uint64_t last_frame = 0;  // the last packet's frame number
  uint64_t last_pts = 0;    // and its sender pts
  uint64_t end = 0;         // where the last packet ended (output time)
  // The last packet's output time, and whether anchor() compares with it
  // (forget_output(): not after a flush, whose new times may go back).
  uint64_t last_out = 0;
  bool out_known = false;

  // The output pts of a packet with a sender pts (h.pts != kNoTime), at
  // byte `offset`; a new run when the sender restarted (never after a
  // seek, `keep`: then the run that began last before `offset`), from
  // where the last packet ended, or from `not_before` if that is later (a
  // live viewer's present: kNoTime for none).
  uint64_t place(const PacketHeader &h, uint64_t offset, bool keep, bool *new_run,
                 uint64_t not_before = kNoTime);
  // Whether place() would begin a new run for this packet after others (the
  // sender restarted), so that a caller asks for `not_before` only then.
  bool restarts(const PacketHeader &h, bool keep) const;
  // A packet with a sender pts whose output pts is `out` (upstream's): a
  // run begins there, unless `out` is before the last packet's output time
  // (then the run goes on). Returns its output time.
  uint64_t anchor(const PacketHeader &h, uint64_t offset, uint64_t out);
  void forget_output() { out_known = false; }
  // An untimed packet (as for with_frame_time()) read as if its pts were
  // the last packet's plus the frame intervals between their frame numbers
  // (at this packet's framerate; back where the numbers fall back), or its
  // with_frame_time() one when it is the first: how a stream's untimed
  // packets are timed as they come (the decoder, the parser on a byte
  // stream), so that they go on from timed packets before them, a lost
  // packet keeps its gap and a change of framerate moves nothing before it.
  PacketHeader timed(const PacketHeader &h) const;
  // Output pts in `r`, saturating (a packet before the run's first: at it).
  static uint64_t at(const TimeRun &r, uint64_t pts);

 private:
  void passed(const PacketHeader &h, uint64_t out);
  void remember(const TimeRun &r);
};

// The bytes a parser reads from: a queue it may look into but not consume
// (the caller drops or takes bytes as the parser says). GstAdapter in the
// decoder, a plain array in the fuzz target and the tests.
class ByteQueue {
 public:
  virtual ~ByteQueue() = default;
  virtual size_t available() const = 0;
  // Offset of the first occurrence of kMagic at or after `from`, or -1.
  virtual ptrdiff_t find_magic(size_t from) = 0;
  // A contiguous view of the first `n` bytes (n <= available()); valid until
  // unmap(), which must come before the next call.
  virtual const uint8_t *map(size_t n) = 0;
  virtual void unmap() = 0;
  // Where the front is in the stream: a count of bytes that grows by what
  // is dropped from the front (any origin). The parser remembers by
  // position what it found inside a damaged packet.
  virtual uint64_t position() const = 0;
};

// Splits a byte stream into checked packets and resynchronises after damage:
// garbage is skipped up to the next magic, a header that fails its checksum
// or names impossible sizes is skipped by one byte (the scan resumes inside
// it), so does a packet whose payload fails its checksum (bytes lost inside a
// packet make it swallow the start of the next; the scan finds that one).
// A header that announces a frame larger than the caller's limit is skipped
// the same way before its payload arrives, so that a crafted header cannot
// make the caller collect up to the format's 1 GiB.
class Parser {
 public:
  // The elements' default limit (their max-pixels property): 8192x4320.
  static constexpr uint64_t kDefaultMaxPixels = uint64_t(8192) * 4320;
  enum class Kind { NeedData, Skip, Packet };
  struct Step {
    Kind kind = Kind::NeedData;
    // Skip: bytes to drop from the front; Packet: its size; NeedData: the
    // size of the packet whose valid header is at the front (0: no header
    // yet), so that a caller can wait for that many bytes.
    size_t bytes = 0;
    PacketHeader header;       // Packet, and NeedData once `bytes` is known
    std::string problem;       // Skip: what was wrong
    bool truncated = false;    // Skip at end of stream: an incomplete packet
    bool unsupported = false;  // Skip: an intact header of a version this reader does not know
    // Skip: a packet with an intact header (in `header`) whose payload fails
    // its checksum; its first byte is skipped and the scan goes on inside it.
    bool damaged = false;
    // With damaged: an intact packet of the same frame starts inside this
    // one (the damaged one was a stray copy of its header, or a partial
    // copy of it, as a relay that resends a packet it had begun may
    // leave), so the frame is not lost: the scan comes to it next.
    bool superseded = false;
    // Skip: an intact header (in `header`) of a frame of more than
    // max_pixels() pixels; its first byte is skipped without waiting for
    // the payload, which the scan then passes over as bytes that are not a
    // packet.
    bool too_large = false;
  };
  // Frames (width x height) larger than this are skipped (too_large;
  // exceeds_pixels()); 0: no limit.
  void set_max_pixels(uint64_t pixels) { max_pixels_ = pixels; }
  uint64_t max_pixels() const { return max_pixels_; }
  // Looks at the front of `q`. At end of stream (at_eos) whatever is left
  // that is not a whole packet is skipped (truncated = true when it began
  // with a valid header). Between calls the caller drops the bytes of each
  // Skip and Packet from the front (and nothing else without reset()).
  //
  // A packet whose payload fails its checksum is skipped by one byte, and
  // every intact header inside it comes to the front in turn. Checking
  // each of those against its payload, which may reach as far as the
  // damaged packet's, would cost the payload's bytes again for every
  // header: crafted input with many headers in one large payload would
  // take hours. So when a payload fails, the parser checks every header
  // inside that packet at once, in one pass over the bytes (checksums of
  // the pieces, combined), and remembers the result by position; a header
  // whose packet reaches beyond the bytes there makes the next check wait
  // (NeedData) until the furthest such packet is there. A header inside of
  // the damaged packet's own frame (or one not yet complete) makes that
  // packet itself wait for it, so as to say whether it is superseded.
  Step next(ByteQueue &q, bool at_eos);
  // Forgets what it remembered of the bytes ahead (a flush, a seek).
  void reset();
  // Payload bytes checksummed so far (a measure of the work done).
  uint64_t checked_bytes() const { return checked_bytes_; }

 private:
  // A header inside a damaged packet, checked with it.
  struct Checked {
    uint64_t position;    // of its first byte
    uint32_t header_crc;  // its header checksum: another header there is not this one
    bool intact;          // its payload passed
    bool superseded;      // not intact, and an intact packet of its frame starts inside it
  };
  // Returns whether an intact packet of `front`'s frame starts inside it.
  bool check_inside(ByteQueue &q, const PacketHeader &front, size_t total, size_t avail);
  uint64_t max_pixels_ = 0;
  std::deque<Checked> checked_;  // by position
  // Headers inside the last damaged packet whose packets reach up to here
  // (a position; 0: none) were not complete when it was checked.
  uint64_t wait_until_ = 0;
  // A damaged packet at the front (position, header checksum) waits for a
  // packet of its own frame inside it to end here (a position; 0: none);
  // waits_: how many times it has waited (at most twice).
  uint64_t own_pos_ = 0;
  uint32_t own_crc_ = 0;
  uint64_t own_until_ = 0;
  int waits_ = 0;
  // check_inside(): how far the bytes must reach to say whether a packet
  // of the front's frame starts inside it, when they do not yet (a
  // position; 0: they do).
  uint64_t own_reach_ = 0;
  uint64_t checked_bytes_ = 0;
  std::vector<uint32_t> prefix_;  // check_inside()'s checksums of the first k pieces
};

// A ByteQueue over memory the caller owns (fuzz target, tests).
class ArrayQueue final : public ByteQueue {
 public:
  // `origin`: the position in the stream of data[0].
  ArrayQueue(const uint8_t *data, size_t size, uint64_t origin = 0)
      : data_(data), size_(size), origin_(origin) {}
  size_t available() const override { return size_ - pos_; }
  ptrdiff_t find_magic(size_t from) override;
  const uint8_t *map(size_t n) override { return n <= available() ? data_ + pos_ : nullptr; }
  void unmap() override {}
  void flush(size_t n) { pos_ += n < available() ? n : available(); }
  // How many bytes of the array are visible (feeding it in chunks).
  void set_size(size_t size) { size_ = size; }
  uint64_t position() const override { return origin_ + pos_; }

 private:
  const uint8_t *data_;
  size_t size_;
  uint64_t origin_;
  size_t pos_ = 0;
};

}  // namespace stream
}  // namespace cudadiff
