// Fuzz target: the receive path of cudadiffdec without GStreamer. The input's
// first byte picks how the stream is cut into pieces (as tcpclientsrc
// delivers it); the rest is the byte stream. Every packet the parser accepts
// is decoded the way the element does it (reader, sequence rules, and per
// version: parse_delta and the version 1 CPU decoder, or the version 2
// (codec2) CPU decoder) into a frame with guard bytes around every row,
// which must stay intact: the reader never writes outside its frame,
// whatever the input. A version 2 body the decoder refuses must leave its
// picture unchanged.
#include "fuzz_stream.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "cudadiff/codec2.h"
#include "cudadiff/diff.h"
#include "cudadiffstream.h"

using namespace cudadiff;
using namespace cudadiff::stream;

namespace {

constexpr uint8_t kGuard = 0xA5;

// A host frame with a guard byte run after every row and after the frame.
struct GuardedFrame {
  std::vector<uint8_t> storage;
  FrameView view;
  void make(VideoFormat format, int width, int height) {
    size_t total = 0, offsets[kMaxPlanes], strides[kMaxPlanes];
    const int planes = format_info(format).n_planes;
    for (int p = 0; p < planes; ++p) {
      strides[p] = plane_row_bytes(format, p, width) + 7;
      offsets[p] = total;
      total += strides[p] * size_t(plane_height(format, p, height));
    }
    storage.assign(total + 16, kGuard);
    view = FrameView();
    view.format = format;
    view.width = width;
    view.height = height;
    for (int p = 0; p < planes; ++p) {
      view.data[p] = storage.data() + offsets[p];
      view.stride[p] = strides[p];
    }
  }
  bool guards_intact() const {
    for (int p = 0; p < view.n_planes(); ++p)
      for (int y = 0; y < view.plane_height(p); ++y)
        for (size_t x = view.row_bytes(p); x < view.stride[p]; ++x)
          if (view.row(p, y)[x] != kGuard) return false;
    for (size_t i = storage.size() - 16; i < storage.size(); ++i)
      if (storage[i] != kGuard) return false;
    return true;
  }
};

// The receive path of one input. The reader lives as long as the process,
// as the element's lives as long as the element: it keeps no state from one
// packet to the next, only scratch memory and a zstd context, which need
// not be created again for every input.
struct Receiver {
  explicit Receiver(Reader &r) : reader(r) {}
  std::unique_ptr<Context> ctx = Context::cpu();
  std::unique_ptr<diff::DiffDecoder> decoder;
  std::unique_ptr<codec2::Decoder> decoder2;
  Reader &reader;
  Parser parser;
  PacketHeader current;
  bool synced = false;
  uint64_t last = 0;
  GuardedFrame out;
  HostBytes before, after;
  std::unique_ptr<uint8_t[]> exact;

  // The body, copied into an allocation of exactly its size: a decoder that
  // reads past it is caught (the reader's own memory is larger).
  const uint8_t *exact_copy(const uint8_t *body, size_t n) {
    exact.reset(new uint8_t[n]);
    if (n) std::memcpy(exact.get(), body, n);
    return exact.get();
  }

  void packet(const PacketHeader &h, const uint8_t *payload) {
    if (h.stream_header()) return;
    const size_t cap =
        h.version == kVersion2 ? fuzz::kMaxFuzzV2FrameBytes : fuzz::kMaxFuzzFrameBytes;
    if (h.frame_bytes() > cap) {
      synced = false;
      return;
    }
    const uint8_t *body = nullptr;
    std::string why;
    if (h.keyframe()) {
      if (!(decoder || decoder2) || h.version != current.version || h.format != current.format ||
          h.width != current.width || h.height != current.height) {
        decoder.reset();
        decoder2.reset();
        if (h.version == kVersion2)
          decoder2 = codec2::Decoder::create(*ctx, h.format, int(h.width), int(h.height));
        else
          decoder = diff::DiffDecoder::create(*ctx, h.format, int(h.width), int(h.height));
        out.make(h.format, int(h.width), int(h.height));
      }
      current = h;
      if (!reader.body(h, payload, &body, &why)) {
        synced = false;
        return;
      }
      body = exact_copy(body, h.body_size);
      if (decoder2) {
        if (!decode2(body, h.body_size)) return;
      } else {
        decoder->keyframe(body);
      }
      synced = true;
    } else {
      if (!synced || h.frame_number != last + 1 || h.version != current.version ||
          h.format != current.format || h.width != current.width || h.height != current.height ||
          !reader.body(h, payload, &body, &why)) {
        synced = false;
        return;
      }
      body = exact_copy(body, h.body_size);
      if (decoder2) {
        if (!decode2(body, h.body_size)) return;
      } else {
        diff::DeltaIndex index;
        if (!diff::parse_delta(body, h.body_size, decoder->frame_bytes(), &index, &why)) {
          synced = false;
          return;
        }
        decoder->delta(
            body, index,
            (h.flags & kFlagDeltaValues) ? diff::ValueMode::Deltas : diff::ValueMode::Values);
      }
    }
    last = h.frame_number;
    if (decoder2)
      decoder2->write_frame(out.view);
    else
      decoder->write_frame(out.view);
    if (!out.guards_intact()) {
      std::fprintf(stderr, "the decoder wrote outside its frame\n");
      std::abort();
    }
  }

  // A version 2 body; a refused one must leave the picture as it was.
  bool decode2(const uint8_t *body, size_t n) {
    std::string why;
    const bool had = decoder2->has_reference();
    if (had) decoder2->read_reference(before);
    if (decoder2->decode(body, n, &why)) return true;
    synced = false;
    if (had) {
      decoder2->read_reference(after);
      if (after.size() != before.size() ||
          std::memcmp(after.data(), before.data(), before.size()) != 0) {
        std::fprintf(stderr, "a refused version 2 body changed the picture (%s)\n", why.c_str());
        std::abort();
      }
    }
    if (why.empty()) {
      std::fprintf(stderr, "a version 2 body refused without a reason\n");
      std::abort();
    }
    return false;
  }
};

inline uint32_t get_u32(const uint8_t *p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
inline void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}

// The offset of the first packet header that fits in data[from, size) (its
// magic at that offset and kHeaderSize bytes), or `size` (the mutator scans
// every input it changes).
size_t next_header(const uint8_t *data, size_t size, size_t from) {
  const ptrdiff_t at = find_header_magic(data, size, from);
  return at < 0 ? size : size_t(at);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  set_cpu_threads(1);
  // Pieces of `first` bytes (1 .. 1786); while the parser waits for the rest
  // of a packet, each further piece is twice the last: packets still arrive
  // cut into pieces, but one of n bytes no longer costs up to n calls of the
  // parser.
  const size_t first = size_t(data[0]) * 7 + 1;
  size_t piece = first;
  const uint8_t *bytes = data + 1;
  const size_t n = size - 1;
  static Reader reader;
  Receiver rx(reader);
  rx.parser.set_max_pixels(Parser::kDefaultMaxPixels);  // as the elements
  ArrayQueue q(bytes, 0);
  size_t fed = 0;
  // The output timeline that the elements put every packet's header on
  // (untimed packets timed by their frame numbers): from crafted headers it
  // must never give a time past INT64_MAX.
  Timeline timeline;
  uint64_t offset = 0;
  auto check_time = [&](const PacketHeader &h) {
    const uint64_t file_time = with_frame_time(h).pts;  // (an untimed packet in a file)
    if (h.pts == kNoTime && file_time != kNoTime && file_time > uint64_t(INT64_MAX)) std::abort();
    const PacketHeader t = timeline.timed(h);
    if (h.pts != kNoTime && (t.pts != h.pts || t.duration != h.duration)) std::abort();
    if (t.pts == kNoTime || t.stream_header()) return;
    bool new_run = false;
    const uint64_t out = timeline.place(t, offset, false, &new_run);
    if (out > uint64_t(INT64_MAX) || timeline.end > uint64_t(INT64_MAX)) std::abort();
  };
  for (int guard = 0; guard < 1 << 24; ++guard) {
    const bool eos = fed == n;
    const Parser::Step s = rx.parser.next(q, eos);
    if (s.kind == Parser::Kind::NeedData) {
      if (eos) break;
      fed = fed + piece < n ? fed + piece : n;
      piece = std::min(piece * 2, n);
      q.set_size(fed);
      continue;
    }
    piece = first;
    if (s.bytes == 0 || s.bytes > q.available()) std::abort();  // the parser must make progress
    if (s.kind == Parser::Kind::Packet) {
      const uint8_t *p = q.map(s.bytes);
      if (::crc32(0, p + kHeaderSize, uInt(s.header.payload_size)) != s.header.payload_crc)
        std::abort();
      if (::crc32(0, p, 60) != s.header.header_crc) std::abort();
      check_time(s.header);
      rx.packet(s.header, p + kHeaderSize);
      q.unmap();
    } else if (s.damaged)
      check_time(s.header);  // (the parser still places a damaged packet's intact header)
    q.flush(s.bytes);
    offset += s.bytes;
  }
  return 0;
}

namespace fuzz {

void fix_checksums(uint8_t *data, size_t size) {
  for (size_t i = next_header(data, size, 0); i < size; i = next_header(data, size, i + 1)) {
    const size_t payload = get_u32(data + i + 32);
    if (payload <= size - i - kHeaderSize)
      put_u32(data + i + 56, uint32_t(::crc32(0, data + i + kHeaderSize, uInt(payload))));
    put_u32(data + i + 60, uint32_t(::crc32(0, data + i, 60)));
  }
}

void mutate(std::vector<uint8_t> &d, const std::vector<uint8_t> &other, std::mt19937 &gen) {
  auto pick = [&](size_t n) { return n ? size_t(gen() % n) : 0; };
  // Packet starts, for edits that aim at header fields.
  std::vector<size_t> headers;
  for (size_t i = next_header(d.data(), d.size(), 1); i < d.size();
       i = next_header(d.data(), d.size(), i + 1))
    headers.push_back(i);
  const int kind = int(gen() % 8);
  if (d.size() < 2) {
    d.push_back(uint8_t(gen()));
    return;
  }
  switch (kind) {
    case 0:  // bit flips
      for (int k = 0, m = 1 + int(gen() % 4); k < m; ++k)
        d[1 + pick(d.size() - 1)] ^= uint8_t(1u << (gen() % 8));
      break;
    case 1:  // random bytes
      for (int k = 0, m = 1 + int(gen() % 4); k < m; ++k)
        d[1 + pick(d.size() - 1)] = uint8_t(gen());
      break;
    case 2: {  // remove a run
      const size_t at = 1 + pick(d.size() - 1);
      const size_t len = 1 + pick(std::min<size_t>(200, d.size() - at));
      d.erase(d.begin() + long(at), d.begin() + long(at + len));
      break;
    }
    case 3: {  // insert a run (random or copied from the other input)
      const size_t at = 1 + pick(d.size() - 1);
      std::vector<uint8_t> run(1 + pick(100));
      for (auto &b : run) b = uint8_t(gen());
      if (!other.empty() && gen() % 2) {
        const size_t from = pick(other.size());
        run.assign(other.begin() + long(from),
                   other.begin() + long(std::min(other.size(), from + 1 + pick(3000))));
      }
      d.insert(d.begin() + long(at), run.begin(), run.end());
      break;
    }
    case 4:  // truncate
      d.resize(1 + pick(d.size() - 1));
      break;
    case 5:
    case 6: {  // a header field set to an edge value
      if (headers.empty()) break;
      struct Field {
        size_t offset, width;
      };
      static const Field fields[] = {{4, 1},  {5, 1},  {6, 1},  {7, 1},  {8, 4},  {16, 4},
                                     {32, 4}, {36, 4}, {40, 4}, {44, 4}, {48, 4}, {52, 4}};
      static const uint32_t values[] = {0,     1,      2,       3,          0x7f,       0xff,
                                        0x100, 0xffff, 0x10000, 0x7fffffff, 0x80000000, 0xffffffff};
      const Field f = fields[pick(12)];
      const size_t at = headers[pick(headers.size())] + f.offset;
      const uint32_t v = values[pick(12)] + uint32_t(gen() % 3) - 1;
      if (f.width == 4)
        put_u32(d.data() + at, v);
      else
        d[at] = uint8_t(v);
      break;
    }
    default:  // the first byte: how the stream is cut into pieces
      d[0] = uint8_t(gen());
      break;
  }
  if (gen() % 2) fix_checksums(d.data() + 1, d.size() - 1);
}

}  // namespace fuzz

#ifdef CUDADIFF_LIBFUZZER
extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

// libFuzzer's own mutations, then (half of the time) checksums made right so
// that mutations reach the checks behind them.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size,
                                          unsigned int seed) {
  std::mt19937 gen(seed);
  if (gen() % 2) {
    std::vector<uint8_t> d(data, data + size);
    fuzz::mutate(d, {}, gen);
    if (d.size() > max_size) d.resize(max_size);
    std::memcpy(data, d.data(), d.size());
    return d.size();
  }
  size = LLVMFuzzerMutate(data, size, max_size);
  if (size > 1 && gen() % 2) fuzz::fix_checksums(data + 1, size - 1);
  return size;
}
#endif
