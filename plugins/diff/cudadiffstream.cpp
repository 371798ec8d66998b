// The difference stream's wire format; docs/stream-format.md specifies it.
//
// Packet header, 64 bytes, little-endian:
//    0  4  magic "CDIF"            32  4  payload size
//    4  1  version (1 or 2)        36  4  body size
//    5  1  header size (64)        40  4  width
//    6  1  flags                   44  4  height
//    7  1  format (wire code)      48  4  framerate numerator
//    8  8  frame number            52  4  framerate denominator
//   16  8  pts (ns)                56  4  payload crc32
//   24  8  duration (ns)           60  4  header crc32 (of bytes 0..59)
#include "cudadiffstream.h"

#include <zlib.h>
#if CUDADIFF_HAVE_ISAL
#include <isa-l/crc.h>
#endif

#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <vector>

#include "cudadiff/codec2.h"
#include "cudadiff/codec2_rules.h"

#if CUDADIFF_HAVE_ZSTD
#include <zstd.h>
#endif

namespace cudadiff {
namespace stream {
namespace {

constexpr size_t kMaxDimension = 32767;  // as the elements' caps

inline void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline uint32_t get_u32(const uint8_t *p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
inline uint64_t get_u64(const uint8_t *p) {
  return uint64_t(get_u32(p)) | uint64_t(get_u32(p + 4)) << 32;
}

// zstd's documented worst case (ZSTD_COMPRESSBOUND), usable without zstd.
size_t compress_bound(size_t n) {
  return n + (n >> 8) + (n < (size_t(128) << 10) ? ((size_t(128) << 10) - n) >> 11 : 0);
}

struct WireFormat {
  uint8_t code;
  VideoFormat format;
};
// Never renumber: these codes are the stream format.
const WireFormat kWireFormats[] = {
    {1, VideoFormat::BGR},   {2, VideoFormat::RGB},    {3, VideoFormat::BGRx},
    {4, VideoFormat::RGBx},  {5, VideoFormat::xBGR},   {6, VideoFormat::xRGB},
    {7, VideoFormat::BGRA},  {8, VideoFormat::RGBA},   {9, VideoFormat::ABGR},
    {10, VideoFormat::ARGB}, {11, VideoFormat::GRAY8}, {12, VideoFormat::I420},
    {13, VideoFormat::YV12}, {14, VideoFormat::NV12},  {15, VideoFormat::NV21},
    {16, VideoFormat::YUY2}, {17, VideoFormat::UYVY},  {18, VideoFormat::Y444},
    {19, VideoFormat::Y42B},
};

// Canonical size of a frame, 0 when the format or size is not possible.
size_t checked_frame_bytes(VideoFormat format, uint64_t width, uint64_t height) {
  if (format == VideoFormat::Unknown || width == 0 || height == 0 || width > kMaxDimension ||
      height > kMaxDimension)
    return 0;
  const size_t n = frame_size_packed(format, int(width), int(height));
  return n <= kMaxFrameBytes ? n : 0;
}

// Runs fn(first_row_byte, row_bytes, pixel_stride) over every row of every
// plane of a canonical frame, rows in parallel.
template <typename Fn>
void for_each_row(VideoFormat format, int width, int height, Fn fn) {
  const FormatInfo &fi = format_info(format);
  size_t plane_start = 0;
  for (int p = 0; p < fi.n_planes; ++p) {
    const size_t row = plane_row_bytes(format, p, width);
    const long long rows = plane_height(format, p, height);
    const size_t stride = static_cast<size_t>(fi.pixel_stride[p]);
    const int threads = rows * static_cast<long long>(row) > 65536 ? cpu_threads() : 1;
    cpu_parallel_ranges(rows, threads, [&](long long begin, long long end) {
      for (long long y = begin; y < end; ++y)
        fn(plane_start + static_cast<size_t>(y) * row, row, stride);
    });
    plane_start += row * static_cast<size_t>(rows);
  }
}

}  // namespace

size_t PacketHeader::frame_bytes() const {
  return checked_frame_bytes(format, width, height);
}

uint8_t wire_format(VideoFormat format) {
  for (const WireFormat &w : kWireFormats)
    if (w.format == format) return w.code;
  return 0;
}

VideoFormat format_from_wire(uint8_t code) {
  for (const WireFormat &w : kWireFormats)
    if (w.code == code) return w.format;
  return VideoFormat::Unknown;
}

namespace {

// zlib's crc32 of n bytes continued from `crc`: ISA-L's where the build has
// it (the same values; folding with carry-less multiplication, about 13
// times zlib's speed: 56 GB/s against 4.3 on one core of an AMD EPYC).
uLong crc_update(uLong crc, const uint8_t *p, size_t n) {
#if CUDADIFF_HAVE_ISAL
  return crc32_gzip_refl(uint32_t(crc), p, n);
#else
  return ::crc32_z(crc, p, n);
#endif
}

// crc32 of `n` bytes at `src`, copying them to `dst` first when it is not
// null. From 128 KiB up (a delta body of a large frame) the bytes are split
// into one chunk per thread, each copied and checksummed while in the cache,
// combined in order with crc32_combine: the same value as one pass. At most
// 8 threads: waking more costs more than they save on a few hundred KiB
// (measured on the GPU machine: 16 threads on sleeping cores took
// milliseconds where 8 took a fraction of one).
uint32_t checksum(uint8_t *dst, const uint8_t *src, size_t n) {
  if (n == 0) return uint32_t(::crc32_z(0, nullptr, 0));
  constexpr size_t kMinChunk = size_t(32) << 10;
  constexpr int kMaxThreads = 8;
  const int threads = static_cast<int>(
      std::min<size_t>(std::min(cpu_threads(), kMaxThreads), (n + kMinChunk - 1) / kMinChunk));
  if (n < (size_t(128) << 10) || threads <= 1) {
    if (dst) std::memcpy(dst, src, n);
    return uint32_t(crc_update(0, dst ? dst : src, n));
  }
  const size_t chunk = (n + size_t(threads) - 1) / size_t(threads);
  uLong crcs[kMaxThreads];
  cpu_parallel_jobs(threads, threads, [&](int c, int) {
    const size_t begin = size_t(c) * chunk;
    const size_t len = begin < n ? std::min(chunk, n - begin) : 0;
    if (dst) std::memcpy(dst + begin, src + begin, len);
    crcs[c] = crc_update(0, (dst ? dst : src) + begin, len);
  });
  uLong crc = crcs[0];
  for (int c = 1; c < threads; ++c) {
    const size_t begin = size_t(c) * chunk;
    const size_t len = begin < n ? std::min(chunk, n - begin) : 0;
    crc = ::crc32_combine(crc, crcs[c], static_cast<z_off_t>(len));
  }
  return uint32_t(crc);
}

}  // namespace

uint32_t crc32(const uint8_t *data, size_t n) {
  return checksum(nullptr, data, n);
}

uint32_t copy_crc32(uint8_t *dst, const uint8_t *src, size_t n) {
  return checksum(dst, src, n);
}

bool have_zstd() {
#if CUDADIFF_HAVE_ZSTD
  return true;
#else
  return false;
#endif
}

void write_header(const PacketHeader &h, uint8_t out[kHeaderSize]) {
  std::memcpy(out, kMagic, 4);
  out[4] = h.version;
  out[5] = uint8_t(kHeaderSize);
  out[6] = h.flags;
  out[7] = wire_format(h.format);
  put_u64(out + 8, h.frame_number);
  put_u64(out + 16, h.pts);
  put_u64(out + 24, h.duration);
  put_u32(out + 32, h.payload_size);
  put_u32(out + 36, h.body_size);
  put_u32(out + 40, h.width);
  put_u32(out + 44, h.height);
  put_u32(out + 48, h.fps_n);
  put_u32(out + 52, h.fps_d);
  put_u32(out + 56, h.payload_crc);
  put_u32(out + 60, crc32(out, 60));
}

size_t min_v2_body_size() {
  return codec2::kBodyHeaderBytes + 2;
}

size_t max_v2_body_size(VideoFormat format, int width, int height) {
  const size_t n = checked_frame_bytes(format, uint64_t(width), uint64_t(height));
  if (n == 0) return 0;
  const codec2::LayerSet ls = codec2::layers_of(format, width, height);
  if (ls.count == 0) return 0;
  // At most one tile per block, whose size and lanes take at most 5 bytes
  // of the tile table; every tile at most its raw bytes (N in all); the
  // body header and frequency tables (at most 45 bytes per distribution,
  // 313 distributions: under 15 KB) within the 65536.
  const size_t blocks = size_t(ls.blocks_x) * size_t(ls.blocks_y);
  return n + 8 * blocks + 65536;
}

size_t max_payload_size(const PacketHeader &h) {
  if (h.stream_header()) return kMaxStreamHeaderPayload;
  if (h.version == kVersion2) return max_v2_body_size(h.format, int(h.width), int(h.height));
  const size_t n = h.frame_bytes();
  if (n == 0) return 0;
  const size_t body = h.keyframe() ? n : diff::max_delta_body_size(n);
  return h.compressed() ? compress_bound(body) : body;
}

HeaderStatus read_header(const uint8_t *data, size_t n, PacketHeader *out, std::string *why) {
  auto fail = [&](HeaderStatus s, const std::string &reason) {
    if (why) *why = reason;
    return s;
  };
  if (n < kHeaderSize || std::memcmp(data, kMagic, 4) != 0)
    return fail(HeaderStatus::NoMagic, "no packet header");
  // The checksum first: a damaged byte must not pass for a newer version.
  if (crc32(data, 60) != get_u32(data + 60))
    return fail(HeaderStatus::BadChecksum, "packet header checksum mismatch");
  if (!known_version(data[4]) || data[5] != kHeaderSize)
    return fail(HeaderStatus::Unsupported, "stream version " + std::to_string(data[4]) +
                                               " (header of " + std::to_string(data[5]) +
                                               " bytes); this reader knows versions 1 and 2");
  PacketHeader h;
  h.version = data[4];
  h.flags = data[6];
  h.format = format_from_wire(data[7]);
  h.frame_number = get_u64(data + 8);
  h.pts = get_u64(data + 16);
  h.duration = get_u64(data + 24);
  h.payload_size = get_u32(data + 32);
  h.body_size = get_u32(data + 36);
  h.width = get_u32(data + 40);
  h.height = get_u32(data + 44);
  h.fps_n = get_u32(data + 48);
  h.fps_d = get_u32(data + 52);
  h.payload_crc = get_u32(data + 56);
  h.header_crc = get_u32(data + 60);

  const bool v2 = h.version == kVersion2;
  if (h.flags & ~(v2 ? kKnownFlagsV2 : kKnownFlags))
    return fail(HeaderStatus::Invalid,
                v2 ? "flags that version 2 does not define" : "unknown flags set");
  if (h.format == VideoFormat::Unknown)
    return fail(HeaderStatus::Invalid, "unknown video format code " + std::to_string(data[7]));
  const size_t frame = h.frame_bytes();
  if (frame == 0)
    return fail(HeaderStatus::Invalid, "impossible frame size " + std::to_string(h.width) + "x" +
                                           std::to_string(h.height));
  if (h.fps_d == 0 || h.fps_n > uint32_t(std::numeric_limits<int32_t>::max()) ||
      h.fps_d > uint32_t(std::numeric_limits<int32_t>::max()))
    return fail(HeaderStatus::Invalid, "impossible framerate");

  if (h.stream_header()) {
    if (h.flags != kFlagStreamHeader)
      return fail(HeaderStatus::Invalid, "stream header with frame flags");
    if (h.body_size != h.payload_size || h.payload_size > kMaxStreamHeaderPayload)
      return fail(HeaderStatus::Invalid, "impossible stream header payload size");
  } else if (v2) {
    // A codec2 body, keyframe or delta, as it is.
    const size_t lo = min_v2_body_size();
    const size_t hi = max_v2_body_size(h.format, int(h.width), int(h.height));
    if (h.body_size < lo || h.body_size > hi)
      return fail(HeaderStatus::Invalid, "impossible version 2 body size " +
                                             std::to_string(h.body_size) + " for a frame of " +
                                             std::to_string(frame) + " bytes (" +
                                             std::to_string(lo) + ".." + std::to_string(hi) + ")");
    if (h.payload_size != h.body_size)
      return fail(HeaderStatus::Invalid, "impossible payload size " +
                                             std::to_string(h.payload_size) + " for a body of " +
                                             std::to_string(h.body_size) + " bytes");
  } else if (h.keyframe()) {
    if (h.flags & kFlagDeltaValues) return fail(HeaderStatus::Invalid, "keyframe with delta flags");
    if (h.body_size != frame)
      return fail(HeaderStatus::Invalid, "keyframe body of " + std::to_string(h.body_size) +
                                             " bytes for a frame of " + std::to_string(frame));
  } else {
    if (h.flags & kFlagPredicted) return fail(HeaderStatus::Invalid, "predicted delta");
    if (h.body_size < diff::bitmap_bytes(frame) || h.body_size > diff::max_delta_body_size(frame))
      return fail(HeaderStatus::Invalid, "impossible delta body size " +
                                             std::to_string(h.body_size) + " for a frame of " +
                                             std::to_string(frame) + " bytes");
  }
  if (!h.stream_header() && !v2) {
    if (h.compressed() ? (h.payload_size == 0 || h.payload_size > compress_bound(h.body_size))
                       : h.payload_size != h.body_size)
      return fail(HeaderStatus::Invalid, "impossible payload size " +
                                             std::to_string(h.payload_size) + " for a body of " +
                                             std::to_string(h.body_size) + " bytes");
  }
  *out = h;
  return HeaderStatus::Ok;
}

void predict(VideoFormat format, int width, int height, const uint8_t *in, uint8_t *out) {
  for_each_row(format, width, height, [&](size_t start, size_t row, size_t stride) {
    const uint8_t *src = in + start;
    uint8_t *dst = out + start;
    const size_t head = std::min(stride, row);
    for (size_t x = 0; x < head; ++x) dst[x] = src[x];
    for (size_t x = head; x < row; ++x) dst[x] = uint8_t(src[x] - src[x - stride]);
  });
}

void unpredict(VideoFormat format, int width, int height, const uint8_t *in, uint8_t *out) {
  for_each_row(format, width, height, [&](size_t start, size_t row, size_t stride) {
    const uint8_t *src = in + start;
    uint8_t *dst = out + start;
    const size_t head = std::min(stride, row);
    for (size_t x = 0; x < head; ++x) dst[x] = src[x];
    for (size_t x = head; x < row; ++x) dst[x] = uint8_t(src[x] + dst[x - stride]);
  });
}

// ---- Writer

Writer::Writer() {
#if CUDADIFF_HAVE_ZSTD
  cctx_ = ZSTD_createCCtx();
  if (!cctx_) throw Error("zstd: cannot create a compression context");
#endif
}

Writer::~Writer() {
#if CUDADIFF_HAVE_ZSTD
  ZSTD_freeCCtx(static_cast<ZSTD_CCtx *>(cctx_));
#endif
}

void Writer::set_compression(Compression c, int level) {
  if (c == Compression::Zstd && !have_zstd())
    throw Error("zstd compression requested but this build has no zstd");
  compression_ = c;
  level_ = level;
}

void Writer::reserve(size_t frame_bytes) {
  if (compression_ != Compression::Zstd) return;
  predicted_.reserve(frame_bytes);
  compressed_.reserve(compress_bound(diff::max_delta_body_size(frame_bytes)));
}

size_t Writer::prepare(const FrameInfo &info, const uint8_t *body, size_t body_size) {
  if (body_size > std::numeric_limits<uint32_t>::max())
    throw Error("difference stream: frame body too large for the stream format");
  if (!known_version(info.version))
    throw Error("difference stream: unknown stream version " + std::to_string(info.version));
  PacketHeader h;
  h.version = info.version;
  h.flags =
      info.keyframe ? kFlagKeyframe : (info.mode == diff::ValueMode::Deltas ? kFlagDeltaValues : 0);
  h.format = info.format;
  h.frame_number = info.frame_number;
  h.pts = info.pts;
  h.duration = info.duration;
  h.body_size = uint32_t(body_size);
  h.width = uint32_t(info.width);
  h.height = uint32_t(info.height);
  h.fps_n = uint32_t(std::max(info.fps_n, 0));
  h.fps_d = uint32_t(std::max(info.fps_d, 1));
  payload_ = body;
  payload_size_ = body_size;
  if (info.version == kVersion2) {
    // The codec2 body as it is: no zstd, no value mode, no prediction.
    h.flags = info.keyframe ? kFlagKeyframe : 0;
    if (body_size < min_v2_body_size() ||
        body_size > max_v2_body_size(info.format, info.width, info.height))
      throw Error("difference stream: a version 2 body of " + std::to_string(body_size) +
                  " bytes is outside the bounds of the stream format (internal error)");
  }
#if CUDADIFF_HAVE_ZSTD
  if (compression_ == Compression::Zstd && info.version == kVersion1) {
    const uint8_t *src = body;
    if (info.keyframe) {
      predicted_.resize(body_size);
      predict(info.format, info.width, info.height, body, predicted_.data());
      src = predicted_.data();
    }
    compressed_.resize(ZSTD_compressBound(body_size));
    const size_t r = ZSTD_compressCCtx(static_cast<ZSTD_CCtx *>(cctx_), compressed_.data(),
                                       compressed_.size(), src, body_size, level_);
    if (ZSTD_isError(r))
      throw Error(std::string("zstd compression failed: ") + ZSTD_getErrorName(r));
    // Incompressible bodies (pure noise) travel as they are.
    if (r < body_size) {
      h.flags |= kFlagCompressed | (info.keyframe ? kFlagPredicted : 0);
      payload_ = compressed_.data();
      payload_size_ = r;
    }
  }
#endif
  h.payload_size = uint32_t(payload_size_);
  header_ = h;  // payload_crc: write() computes it as it copies the payload
  return packet_size();
}

void Writer::write(uint8_t *dst) {
  header_.payload_crc = copy_crc32(dst + kHeaderSize, payload_, payload_size_);
  write_header(header_, dst);
}

void Writer::write_in_place(uint8_t *packet) {
  if (payload_ != packet + kHeaderSize)
    throw Error(
        "difference stream: the packet's payload is not where it is written (internal error)");
  header_.payload_crc = crc32(payload_, payload_size_);
  write_header(header_, packet);
}

std::vector<uint8_t> Writer::stream_header(VideoFormat format, int width, int height, int fps_n,
                                           int fps_d, const std::string &text, uint8_t version) {
  if (text.size() > kMaxStreamHeaderPayload) throw Error("stream header text too long");
  if (!known_version(version))
    throw Error("difference stream: unknown stream version " + std::to_string(version));
  std::vector<uint8_t> out(kHeaderSize + text.size());
  std::memcpy(out.data() + kHeaderSize, text.data(), text.size());
  PacketHeader h;
  h.version = version;
  h.flags = kFlagStreamHeader;
  h.format = format;
  h.width = uint32_t(width);
  h.height = uint32_t(height);
  h.fps_n = uint32_t(std::max(fps_n, 0));
  h.fps_d = uint32_t(std::max(fps_d, 1));
  h.payload_size = h.body_size = uint32_t(text.size());
  h.payload_crc = crc32(out.data() + kHeaderSize, text.size());
  write_header(h, out.data());
  return out;
}

std::string stream_header_value(const uint8_t *payload, size_t n, const std::string &key) {
  const std::string text(reinterpret_cast<const char *>(payload), n);
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 &&
        line[key.size()] == '=')
      return line.substr(key.size() + 1);
    at = end + 1;
  }
  return "";
}

// ---- Reader

Reader::Reader() {
#if CUDADIFF_HAVE_ZSTD
  dctx_ = ZSTD_createDCtx();
  if (!dctx_) throw Error("zstd: cannot create a decompression context");
#endif
}

Reader::~Reader() {
#if CUDADIFF_HAVE_ZSTD
  ZSTD_freeDCtx(static_cast<ZSTD_DCtx *>(dctx_));
#endif
}

void Reader::reserve(size_t frame_bytes) {
  scratch_.reserve(diff::max_delta_body_size(frame_bytes));
}

bool Reader::body(const PacketHeader &h, const uint8_t *payload, const uint8_t **body,
                  std::string *why, bool *unsupported) {
  if (unsupported) *unsupported = false;
  if (h.version == kVersion2) {
    // The body's own header must say what the packet says.
    codec2::BodyHeader bh;
    std::string reason;
    if (!codec2::read_body_header(payload, h.body_size, &bh, &reason)) {
      if (why) *why = "version 2 body: " + reason;
      return false;
    }
    if (bh.keyframe != h.keyframe()) {
      if (why)
        *why = std::string("version 2 body of a ") + (bh.keyframe ? "keyframe" : "delta") +
               " in a " + (h.keyframe() ? "keyframe" : "delta") + " packet";
      return false;
    }
    *body = payload;
    return true;
  }
  const uint8_t *src = payload;
  if (h.compressed()) {
#if CUDADIFF_HAVE_ZSTD
    scratch_.resize(h.body_size);
    const size_t r = ZSTD_decompressDCtx(static_cast<ZSTD_DCtx *>(dctx_), scratch_.data(),
                                         h.body_size, payload, h.payload_size);
    if (ZSTD_isError(r)) {
      if (why) *why = std::string("zstd payload does not decode: ") + ZSTD_getErrorName(r);
      return false;
    }
    if (r != h.body_size) {
      if (why)
        *why = "zstd payload decodes to " + std::to_string(r) + " bytes instead of " +
               std::to_string(h.body_size);
      return false;
    }
    src = scratch_.data();
#else
    if (why) *why = "the stream is zstd-compressed and this build has no zstd";
    if (unsupported) *unsupported = true;
    return false;
#endif
  }
  if (h.flags & kFlagPredicted) {
    if (src == payload) {
      scratch_.resize(h.body_size);
      unpredict(h.format, int(h.width), int(h.height), payload, scratch_.data());
      src = scratch_.data();
    } else {
      unpredict(h.format, int(h.width), int(h.height), scratch_.data(), scratch_.data());
    }
  }
  *body = src;
  return true;
}

// ---- Parser

ptrdiff_t find_magic(const uint8_t *data, size_t n, size_t from) {
  for (size_t i = from; i + 4 <= n;) {
    const void *hit = std::memchr(data + i, kMagic[0], n - 3 - i);
    if (!hit) return -1;
    i = static_cast<size_t>(static_cast<const uint8_t *>(hit) - data);
    if (std::memcmp(data + i, kMagic, 4) == 0) return static_cast<ptrdiff_t>(i);
    ++i;
  }
  return -1;
}

ptrdiff_t ArrayQueue::find_magic(size_t from) {
  return stream::find_magic(data_ + pos_, available(), from);
}

Parser::Step Parser::next(ByteQueue &q, bool at_eos) {
  Step step;
  auto skip = [&](size_t bytes, std::string problem, bool truncated = false) {
    step.kind = Kind::Skip;
    step.bytes = bytes;
    step.problem = std::move(problem);
    step.truncated = truncated;
    return step;
  };
  // (at the end nothing more comes to wait for, and the caller drops what
  // is left: the positions after it are those of another stream)
  if (at_eos) wait_until_ = 0;
  const size_t avail = q.available();
  if (avail == 0) return step;  // NeedData
  const ptrdiff_t at = avail >= 4 ? q.find_magic(0) : -1;
  if (at < 0) {
    if (at_eos)
      return skip(avail,
                  std::to_string(avail) + " bytes at the end of the stream that are not a packet");
    // Keep the last 3 bytes: they may be the start of a magic.
    if (avail <= 3) return step;
    return skip(avail - 3, std::to_string(avail - 3) + " bytes that are not a packet");
  }
  if (at > 0) return skip(size_t(at), std::to_string(at) + " bytes that are not a packet");
  if (avail < kHeaderSize) {
    if (at_eos) return skip(avail, "packet header truncated at the end of the stream", true);
    return step;
  }
  PacketHeader h;
  std::string why;
  const uint8_t *head = q.map(kHeaderSize);
  if (!head) {
    q.unmap();
    return skip(1, "cannot read the input");
  }
  const HeaderStatus status = read_header(head, kHeaderSize, &h, &why);
  q.unmap();
  if (status != HeaderStatus::Ok) {
    step.unsupported = status == HeaderStatus::Unsupported;
    return skip(1, why);
  }
  if (exceeds_pixels(h, max_pixels_)) {
    const uint64_t pixels = uint64_t(h.width) * h.height;
    step.too_large = true;
    step.header = h;
    return skip(1, "packet " + std::to_string(h.frame_number) + " announces a frame of " +
                       std::to_string(h.width) + "x" + std::to_string(h.height) + " (" +
                       std::to_string(pixels) + " pixels), more than the limit of " +
                       std::to_string(max_pixels_));
  }
  auto damaged = [&](bool superseded = false) {
    step.damaged = true;
    step.superseded = superseded;
    step.header = h;
    return skip(1, "payload checksum mismatch in packet " + std::to_string(h.frame_number) +
                       (superseded ? " (an intact copy of it follows)" : ""));
  };
  // What a check of the damaged packet around this header found.
  const uint64_t pos = q.position();
  while (!checked_.empty() && checked_.front().position < pos) checked_.pop_front();
  if (wait_until_ <= pos) wait_until_ = 0;
  const bool known = !checked_.empty() && checked_.front().position == pos &&
                     checked_.front().header_crc == h.header_crc;
  if (known && !checked_.front().intact) return damaged(checked_.front().superseded);
  const size_t total = kHeaderSize + h.payload_size;
  // NeedData for the packet whose header is at the front: `bytes` from it.
  auto need = [&](size_t bytes) {
    step.bytes = bytes;
    step.header = h;
    return step;
  };
  // A damaged packet waiting for a packet of its own frame inside it.
  const bool own = own_until_ != 0 && own_pos_ == pos && own_crc_ == h.header_crc;
  if (!own) {
    own_until_ = 0;
    waits_ = 0;
  }
  if (own && !at_eos && avail < own_until_ - pos) return need(size_t(own_until_ - pos));
  // A header found inside a damaged packet whose packet was not complete
  // then waits for the furthest of those packets, so that one check covers
  // them all. (A damaged packet that waited for a packet of its own frame
  // does not wait for the others inside it too: they come after it.)
  const size_t want =
      !known && !own && wait_until_ > pos ? std::max(total, size_t(wait_until_ - pos)) : total;
  if (avail < total && at_eos)
    return skip(1,
                "packet " + std::to_string(h.frame_number) +
                    " truncated at the end of the stream (" + std::to_string(avail) + " of " +
                    std::to_string(total) + " bytes)",
                true);
  if (avail < want && !at_eos) return need(want);
  const uint8_t *p = q.map(total);
  if (!p) {
    q.unmap();
    return skip(1, "cannot read the input");
  }
  const uint32_t crc = crc32(p + kHeaderSize, h.payload_size);
  q.unmap();
  checked_bytes_ += h.payload_size;
  if (crc != h.payload_crc) {
    const bool superseded = check_inside(q, h, total, avail);
    if (at_eos) wait_until_ = 0;
    // A packet of this frame inside it, not yet complete, or a header that
    // may be one, not yet complete: whether this frame is lost depends on
    // it, so wait for it. At most twice: once the bytes of every header
    // inside are there, once more for the packets of this frame among them.
    if (!superseded && own_reach_ != 0 && !at_eos && waits_ < 2) {
      own_pos_ = pos;
      own_crc_ = h.header_crc;
      own_until_ = own_reach_;
      ++waits_;
      return need(size_t(own_until_ - pos));
    }
    own_until_ = 0;
    waits_ = 0;
    return damaged(superseded);
  }
  step.kind = Kind::Packet;
  step.bytes = total;
  step.header = h;
  return step;
}

void Parser::reset() {
  checked_.clear();
  wait_until_ = 0;
  own_until_ = 0;
  waits_ = 0;
}

// Checks every intact header inside the damaged packet at the front (its
// first `total` bytes; `avail` are there; its header is `front`) whose
// packet ends within `avail`, and notes how far the others reach (and those
// of front's frame apart, in own_reach_).
// A packet "of the same frame" has the same version, frame number and kind
// (keyframe, delta, stream header). The payload checksum of each comes
// from those of pieces of kPiece bytes (of the bytes from the front,
// computed once) and of at most two partial pieces, joined with
// crc32_combine: a pass over the bytes and a few kilobytes per header.
bool Parser::check_inside(ByteQueue &q, const PacketHeader &front, size_t total, size_t avail) {
  constexpr size_t kPiece = 1024;
  constexpr size_t kMaxChecked = size_t(1) << 20;  // headers remembered (16 MiB)
  const uint64_t pos = q.position();
  checked_.clear();
  own_reach_ = 0;
  // A packet's frame: its number, version and kind.
  struct Key {
    uint64_t frame;
    uint8_t version, kind;
    bool operator==(const Key &o) const {
      return frame == o.frame && version == o.version && kind == o.kind;
    }
  };
  struct KeyHash {
    size_t operator()(const Key &k) const {
      return std::hash<uint64_t>()(k.frame * 4 + k.kind) ^ k.version;
    }
  };
  auto key_of = [](const PacketHeader &h) {
    return Key{h.frame_number, h.version, uint8_t(h.flags & (kFlagKeyframe | kFlagStreamHeader))};
  };
  const Key front_key = key_of(front);
  struct Found {
    size_t at, end;
    uint32_t header_crc, payload_crc;
    Key key;
  };
  std::vector<Found> inside;
  size_t reach = 0;  // the furthest end within avail
  {
    const size_t span = std::min(avail, total - 1 + kHeaderSize);
    const uint8_t *p = q.map(span);
    if (!p) {
      q.unmap();
      return false;
    }
    // Headers at 1 <= i < total that end within span (span ends before the
    // header at total).
    for (ptrdiff_t at = find_header_magic(p, span, 1); at >= 0 && inside.size() < kMaxChecked;
         at = find_header_magic(p, span, size_t(at) + 1)) {
      const size_t i = size_t(at);
      PacketHeader h;
      if (read_header(p + i, kHeaderSize, &h, nullptr) != HeaderStatus::Ok ||
          exceeds_pixels(h, max_pixels_))
        continue;
      const size_t end = i + kHeaderSize + h.payload_size;
      if (end <= avail) {
        inside.push_back({i, end, h.header_crc, h.payload_crc, key_of(h)});
        reach = std::max(reach, end);
      } else {
        wait_until_ = std::max(wait_until_, pos + end);
        if (key_of(h) == front_key) own_reach_ = std::max(own_reach_, pos + end);
      }
    }
    // A header that starts inside but does not end within span may be one
    // of the front's frame too: the bytes up to the last such header's
    // end are waited for if a magic (or its start, at the end) is there.
    if (span < total - 1 + kHeaderSize) {
      for (size_t i = span > kHeaderSize ? span - kHeaderSize + 1 : 1; i < total; ++i) {
        if (std::memcmp(p + i, kMagic, std::min(sizeof kMagic, span - i)) == 0) {
          own_reach_ = std::max(own_reach_, pos + total - 1 + kHeaderSize);
          break;
        }
      }
    }
    q.unmap();
  }
  if (inside.empty()) return false;
  const uint8_t *p = q.map(reach);
  if (!p) {
    q.unmap();
    return false;
  }
  // prefix_[k]: the checksum of the first k pieces from the front.
  prefix_.assign(reach / kPiece + 1, 0);
  for (size_t k = 0; k + 1 < prefix_.size(); ++k)
    prefix_[k + 1] = uint32_t(crc_update(prefix_[k], p + k * kPiece, kPiece));
  checked_bytes_ += reach - reach % kPiece;
  for (const Found &f : inside) {
    const size_t a = f.at + kHeaderSize, b = f.end;
    const size_t c1 = (a + kPiece - 1) / kPiece * kPiece, c2 = b / kPiece * kPiece;
    uint32_t crc;
    if (c1 >= c2) {
      crc = uint32_t(crc_update(0, p + a, b - a));
      checked_bytes_ += b - a;
    } else {
      // The whole pieces from c1 to c2: prefix(c2) = prefix(c1) followed by them.
      const uint32_t middle = prefix_[c2 / kPiece] ^
                              uint32_t(::crc32_combine(prefix_[c1 / kPiece], 0, z_off_t(c2 - c1)));
      const uint32_t first = uint32_t(crc_update(0, p + a, c1 - a));
      const uint32_t last = uint32_t(crc_update(0, p + c2, b - c2));
      checked_bytes_ += (c1 - a) + (b - c2);
      crc = uint32_t(
          ::crc32_combine(::crc32_combine(first, middle, z_off_t(c2 - c1)), last, z_off_t(b - c2)));
    }
    checked_.push_back({pos + f.at, f.header_crc, crc == f.payload_crc, false});
  }
  q.unmap();
  // Which damaged packets have an intact one of their frame inside: from
  // the last to the first, the nearest intact packet of each frame after
  // the one at hand.
  std::unordered_map<Key, size_t, KeyHash> next_intact;  // position from the front
  for (size_t n = inside.size(); n-- > 0;) {
    const Found &f = inside[n];
    if (checked_[n].intact) {
      next_intact[f.key] = f.at;
    } else {
      const auto it = next_intact.find(f.key);
      checked_[n].superseded = it != next_intact.end() && it->second < f.end;
    }
  }
  // (every packet inside starts inside the front's)
  return next_intact.count(front_key) != 0;
}

namespace {

// The time of frame `n` at h's framerate (ns, rounded down); the caller
// checked fps_n and fps_d.
u128 frame_time(const PacketHeader &h, uint64_t n) {
  return u128(n) * h.fps_d * 1000000000u / h.fps_n;
}

// Whether an untimed packet can be timed by its frame number, and the
// interval of its framerate.
bool frame_timed(const PacketHeader &h, u128 *interval) {
  if (h.pts != kNoTime || h.stream_header() || h.fps_n == 0 || h.fps_d == 0) return false;
  *interval = frame_time(h, 1);
  return *interval <= max_packet_duration(h);
}

PacketHeader at_time(const PacketHeader &h, u128 pts, u128 interval) {
  if (pts > u128(INT64_MAX)) return h;
  PacketHeader t = h;
  t.pts = uint64_t(pts);
  if (t.duration == kNoTime) t.duration = uint64_t(interval);
  return t;
}

}  // namespace

PacketHeader with_frame_time(const PacketHeader &h) {
  u128 interval = 0;
  if (!frame_timed(h, &interval)) return h;
  return at_time(h, frame_time(h, h.frame_number), interval);
}

PacketHeader Timeline::timed(const PacketHeader &h) const {
  u128 interval = 0;
  if (!frame_timed(h, &interval)) return h;
  if (!have) return at_time(h, frame_time(h, h.frame_number), interval);
  const u128 now = frame_time(h, h.frame_number), last = frame_time(h, last_frame);
  const u128 pts = now >= last ? u128(last_pts) + (now - last)
                               : (last - now < last_pts ? last_pts - (last - now) : 0);
  return at_time(h, pts, interval);
}

uint64_t Timeline::at(const TimeRun &r, uint64_t pts) {
  constexpr uint64_t kMaxTime = uint64_t(INT64_MAX);
  if (pts <= r.pts) return r.out;
  const uint64_t d = pts - r.pts;
  return d <= kMaxTime - r.out ? r.out + d : kMaxTime;
}

void Timeline::passed(const PacketHeader &h, uint64_t out) {
  last_frame = h.frame_number;
  last_pts = h.pts;
  last_out = out;
  out_known = true;
  const uint64_t dur = usable_duration(h) ? h.duration : 0;
  end = out <= uint64_t(INT64_MAX) - dur ? out + dur : out;
}

bool Timeline::restarts(const PacketHeader &h, bool keep) const {
  if (!have || keep) return false;
  // The next frame number at a time at least a frame interval earlier
  // (the packet's framerate's; at a variable framerate, the duration of
  // the packet before): not a packet late or repeated (those have an
  // earlier or the same number), nor a timestamp that jittered (one frame
  // stamped late lets the next fall back by less than an interval), but
  // the sender's times starting again by less than kReorderTime (a short
  // clip looped, each pass in a segment of its own, which does not travel
  // with the packets).
  uint64_t interval = end > last_out ? end - last_out : 0;
  if (h.fps_n != 0 && h.fps_d != 0) {
    const u128 i = frame_time(h, 1);
    interval = i < u128(kMaxFrameInterval) ? uint64_t(i) : kMaxFrameInterval;
  }
  const bool looped = h.frame_number == last_frame + 1 && h.pts < last_pts && interval > 0 &&
                      last_pts - h.pts >= interval;
  return (h.frame_number < last_frame &&
          (h.frame_number == 0 || last_frame - h.frame_number > kReorderFrames)) ||
         (h.pts < last_pts && last_pts - h.pts > kReorderTime) || looped ||
         (h.pts > last_pts && h.pts - last_pts > max_packet_duration(h));
}

uint64_t Timeline::place(const PacketHeader &h, uint64_t offset, bool keep, bool *new_run,
                         uint64_t not_before) {
  *new_run = false;
  if (!have || restarts(h, keep)) {
    uint64_t from = have ? end : 0;
    if (have && not_before != kNoTime && not_before > from) from = not_before;
    run = TimeRun{offset, h.pts, from};
    have = true;
    *new_run = true;
    remember(run);
  } else if (keep) {
    auto it = std::upper_bound(runs.begin(), runs.end(), offset,
                               [](uint64_t o, const TimeRun &r) { return o < r.offset; });
    if (it != runs.begin()) run = *std::prev(it);
    if (h.pts < run.pts) run = TimeRun{offset, h.pts, run.out};
  }
  const uint64_t out = at(run, h.pts);
  passed(h, out);
  return out;
}

void Timeline::remember(const TimeRun &r) {
  auto it = std::lower_bound(runs.begin(), runs.end(), r.offset,
                             [](const TimeRun &a, uint64_t o) { return a.offset < o; });
  if (it != runs.end() && it->offset == r.offset)
    *it = r;
  else if (runs.size() < kMaxRuns)
    runs.insert(it, r);
}

uint64_t Timeline::anchor(const PacketHeader &h, uint64_t offset, uint64_t out) {
  out = std::min(out, uint64_t(INT64_MAX));
  if (have && out_known && out < last_out) {
    out = std::max(at(run, h.pts), last_out);
  } else {
    run = TimeRun{offset, h.pts, out};
    have = true;
  }
  passed(h, out);
  return out;
}

}  // namespace stream
}  // namespace cudadiff
