// The stream format (plugins/diff/cudadiffstream): the exact bytes of
// docs/stream-format.md's examples (versions 1 and 2), header checks of both
// versions, prediction, writer/reader round trips (version 1 with and
// without zstd, version 2 at several thresholds), the parser's
// resynchronisation, version 2 body bounds and damage, a version 1
// recording made before version 2 existed, and version 2 recordings made
// before the tile rule of the reference classes.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cudadiff/codec2.h"
#include "cudadiff/codec2_rules.h"
#include "cudadiff/diff.h"
#include "cudadiffstream.h"
#include "frames.h"

using namespace cudadiff;
using namespace cudadiff::stream;
using Bytes = std::vector<uint8_t>;

namespace {

Bytes hex(const char *s) {
  Bytes out;
  for (const char *p = s; *p;) {
    if (*p == ' ' || *p == '\n') {
      ++p;
      continue;
    }
    out.push_back(uint8_t(std::stoi(std::string(p, 2), nullptr, 16)));
    p += 2;
  }
  return out;
}

Bytes packet(Writer &w, const FrameInfo &info, const Bytes &body) {
  Bytes out(w.prepare(info, body.data(), body.size()));
  w.write(out.data());
  return out;
}

FrameInfo gray40(bool key, uint64_t n, uint64_t pts) {
  FrameInfo f;
  f.keyframe = key;
  f.frame_number = n;
  f.pts = pts;
  f.duration = 33333333;
  f.format = VideoFormat::GRAY8;
  f.width = 40;
  f.height = 1;
  f.fps_n = 30;
  f.fps_d = 1;
  return f;
}

// The example of docs/stream-format.md, byte for byte.
const char *kDocStreamHeader =
    "43 44 49 46 01 40 10 0b 00 00 00 00 00 00 00 00 ff ff ff ff ff ff ff ff ff ff ff ff ff ff "
    "ff ff 00 00 00 00 00 00 00 00 28 00 00 00 01 00 00 00 1e 00 00 00 01 00 00 00 00 00 00 00 "
    "9b 40 5d 93";
const char *kDocKeyframeHeader =
    "43 44 49 46 01 40 01 0b 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 55 a0 fc 01 00 00 "
    "00 00 28 00 00 00 28 00 00 00 28 00 00 00 01 00 00 00 1e 00 00 00 01 00 00 00 e5 d2 eb dc "
    "d3 b4 36 7c";
const char *kDocDelta =
    "43 44 49 46 01 40 00 0b 01 00 00 00 00 00 00 00 55 a0 fc 01 00 00 00 00 55 a0 fc 01 00 00 "
    "00 00 12 00 00 00 12 00 00 00 28 00 00 00 01 00 00 00 1e 00 00 00 01 00 00 00 15 a1 27 06 "
    "50 21 46 9c 01 03 00 00 00 21 08 00 00 82 00 00 00 82 82 4f 82 82";

}  // namespace

namespace {

// Bytes as docs/stream-format.md prints them (16 per line, offsets), so that
// a changed example can be pasted into the document.
std::string doc_dump(const char *title, const Bytes &b) {
  std::string out = std::string("    ") + title + " (" + std::to_string(b.size()) + " bytes)\n";
  char line[32];
  for (size_t i = 0; i < b.size(); i += 16) {
    std::snprintf(line, sizeof line, "      %04zx ", i);
    out += line;
    for (size_t j = i; j < b.size() && j < i + 16; ++j) {
      std::snprintf(line, sizeof line, " %02x", b[j]);
      out += line;
    }
    out += "\n";
  }
  return out;
}

// The version 2 packet example of docs/stream-format.md, byte for byte.
const char *kDocV2StreamHeader =
    "43 44 49 46 02 40 10 0b 00 00 00 00 00 00 00 00 ff ff ff ff ff ff ff ff ff ff ff ff ff ff "
    "ff ff 00 00 00 00 00 00 00 00 28 00 00 00 01 00 00 00 1e 00 00 00 01 00 00 00 00 00 00 00 "
    "e2 74 e2 b5";
const char *kDocV2Keyframe =
    "43 44 49 46 02 40 01 0b 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 55 a0 fc 01 00 00 "
    "00 00 15 00 00 00 15 00 00 00 28 00 00 00 01 00 00 00 1e 00 00 00 01 00 00 00 d6 5a 41 ba "
    "a3 d8 b6 3b 03 01 0a 08 a3 a8 aa aa aa aa df 00 00 81 06 df bf 96 00 62 38";
const char *kDocV2Delta =
    "43 44 49 46 02 40 00 0b 01 00 00 00 00 00 00 00 55 a0 fc 01 00 00 00 00 55 a0 fc 01 00 00 "
    "00 00 21 00 00 00 21 00 00 00 28 00 00 00 01 00 00 00 1e 00 00 00 01 00 00 00 dd 39 b2 5f "
    "bf f0 1c 12 02 02 0a 08 17 b6 c9 31 54 d5 0f a8 27 00 00 00 d8 41 55 c1 01 00 00 81 08 c1 "
    "a5 e9 01 ad af 74 40";

}  // namespace

// The portable 128-bit integer that 32-bit targets use for the stream's
// times (wide.h) computes what the compiler's own does, on the operations
// the stream's code uses: random operands, products near 2^128 and
// divisors of every size. (Where there is no native type to compare with,
// only the hand-checked cases run.)
TEST(StreamFormat, PortableWideIntegerMatchesNative) {
  using stream::WideU128;
  // Hand-checked: (2^64 - 1) * 10^9, a third of it, and a difference that wraps.
  const WideU128 big = WideU128(UINT64_MAX) * 1000000000u;
  EXPECT_EQ(big.high(), 999999999u);
  EXPECT_EQ(big.low(), uint64_t(0) - 1000000000u);
  const WideU128 third = big / 3u;
  EXPECT_EQ(third.high(), 333333333u);
  EXPECT_EQ(third.low(), (uint64_t(0) - 1000000000u) / 3);  // 999999999 = 3 * 333333333
  EXPECT_EQ(third * 3u, big);
  EXPECT_TRUE(WideU128(5) - WideU128(7) > WideU128(UINT64_MAX));  // wraps modulo 2^128
  EXPECT_EQ(WideU128(5) - WideU128(7) + WideU128(7), WideU128(5));
#if defined(__SIZEOF_INT128__)
  using N = unsigned __int128;
  auto same = [](const WideU128 &w, N n) {
    return w.high() == uint64_t(n >> 64) && w.low() == uint64_t(n);
  };
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const uint64_t a = rng() >> (rng() % 64), b = rng() >> (rng() % 64);
    const uint32_t m1 = uint32_t(rng() >> (rng() % 64)), m2 = uint32_t(rng());
    uint32_t d = uint32_t(rng() >> (rng() % 64));
    if (d == 0) d = 1;
    const WideU128 wa = WideU128(a) * m1 * m2, wb(b);
    const N na = N(a) * m1 * m2, nb = b;
    ASSERT_TRUE(same(wa, na)) << a << " * " << m1 << " * " << m2;
    ASSERT_TRUE(same(wa / d, na / d)) << a << " * " << m1 << " * " << m2 << " / " << d;
    ASSERT_TRUE(same(wa + wb, na + nb));
    ASSERT_TRUE(same(wa - wb, na - nb));
    ASSERT_TRUE(same(wb - wa, nb - na));
    ASSERT_EQ(wa < wb, na < nb);
    ASSERT_EQ(wa <= wb, na <= nb);
    ASSERT_EQ(wa > wb, na > nb);
    ASSERT_EQ(wa >= wb, na >= nb);
    ASSERT_EQ(wa == wb, na == nb);
    ASSERT_EQ(uint64_t(wa), uint64_t(na));
  }
#endif
}

TEST(StreamFormat, DocumentedExampleBytes) {
  EXPECT_EQ(Writer::stream_header(VideoFormat::GRAY8, 40, 1, 30, 1), hex(kDocStreamHeader));

  // The example of tests/core/test_diff.cpp, made by the core encoder.
  auto ctx = Context::cpu();
  auto enc = diff::DiffEncoder::create(*ctx, VideoFormat::GRAY8, 40, 1);
  testing_util::HostFrame key(VideoFormat::GRAY8, 40, 1);
  testing_util::fill_value(key, 100);
  HostBytes body;
  enc->keyframe(key.view, body);
  Writer w;
  Bytes k = packet(w, gray40(true, 0, 0), Bytes(body.data(), body.data() + body.size()));
  Bytes want = hex(kDocKeyframeHeader);
  want.insert(want.end(), 40, 100);
  EXPECT_EQ(k, want);

  testing_util::HostFrame next = key;
  uint8_t *row = next.view.data[0];
  row[0] = row[5] = row[33] = row[39] = 130;
  row[10] = 120;
  row[11] = 79;
  enc->delta(next.view, 20, diff::ValueMode::Values, body);
  Bytes d = packet(w, gray40(false, 1, 33333333), Bytes(body.data(), body.data() + body.size()));
  EXPECT_EQ(d, hex(kDocDelta));

  // The checksums are zlib's crc32 of what the doc says.
  EXPECT_EQ(::crc32(0, d.data() + 64, 18), 0x0627a115u);
  EXPECT_EQ(::crc32(0, d.data(), 60), 0x9c462150u);
}

TEST(StreamFormat, StreamHeaderText) {
  const std::string text = "colorimetry=bt709\nfuture-key=x=y\n";
  const Bytes sh = Writer::stream_header(VideoFormat::I420, 64, 48, 25, 1, text);
  const size_t n = text.size();
  ASSERT_EQ(sh.size(), kHeaderSize + n);
  PacketHeader h;
  std::string why;
  ASSERT_EQ(read_header(sh.data(), sh.size(), &h, &why), HeaderStatus::Ok) << why;
  EXPECT_TRUE(h.stream_header());
  EXPECT_EQ(h.payload_size, n);
  EXPECT_EQ(h.payload_crc, uint32_t(::crc32(0, sh.data() + 64, uInt(n))));
  EXPECT_EQ(stream_header_value(sh.data() + 64, n, "colorimetry"), "bt709");
  EXPECT_EQ(stream_header_value(sh.data() + 64, n, "future-key"), "x=y");
  EXPECT_EQ(stream_header_value(sh.data() + 64, n, "colo"), "");
  EXPECT_EQ(stream_header_value(sh.data() + 64, n - 1, "future-key"), "x=y");  // no final newline
  EXPECT_EQ(stream_header_value(nullptr, 0, "colorimetry"), "");
}

TEST(StreamFormat, HeaderRoundTripAndFields) {
  PacketHeader h;
  h.flags = kFlagKeyframe | kFlagCompressed | kFlagPredicted;
  h.format = VideoFormat::NV12;
  h.frame_number = 0x0102030405060708ull;
  h.pts = 123456789;
  h.duration = 40000000;
  h.width = 641;
  h.height = 3;
  h.body_size = uint32_t(frame_size_packed(VideoFormat::NV12, 641, 3));
  h.payload_size = 77;
  h.fps_n = 25;
  h.fps_d = 1;
  h.payload_crc = 0xdeadbeef;
  uint8_t b[kHeaderSize];
  write_header(h, b);
  EXPECT_EQ(b[7], 14);  // NV12
  EXPECT_EQ(b[8], 0x08);
  EXPECT_EQ(b[15], 0x01);
  EXPECT_EQ(b[36] | b[37] << 8, 641 * 3 + 642 * 2);  // Y + interleaved UV of ceil(641/2) pairs
  PacketHeader r;
  std::string why;
  ASSERT_EQ(read_header(b, sizeof b, &r, &why), HeaderStatus::Ok) << why;
  EXPECT_EQ(r.flags, h.flags);
  EXPECT_EQ(r.format, VideoFormat::NV12);
  EXPECT_EQ(r.frame_number, h.frame_number);
  EXPECT_EQ(r.pts, h.pts);
  EXPECT_EQ(r.duration, h.duration);
  EXPECT_EQ(r.width, 641u);
  EXPECT_EQ(r.height, 3u);
  EXPECT_EQ(r.payload_size, 77u);
  EXPECT_EQ(r.body_size, h.body_size);
  EXPECT_EQ(r.payload_crc, 0xdeadbeefu);
  EXPECT_EQ(r.fps_n, 25u);
  // The header's own checksum, bytes 60-63, as written.
  EXPECT_EQ(r.header_crc, uint32_t(::crc32(0, b, 60)));
  EXPECT_EQ(r.header_crc, uint32_t(b[60] | b[61] << 8 | b[62] << 16 | uint32_t(b[63]) << 24));
}

TEST(StreamFormat, HeaderChecks) {
  PacketHeader good;
  good.flags = 0;
  good.format = VideoFormat::BGR;
  good.width = 100;
  good.height = 10;
  good.body_size = 1;  // bitmap only: nothing changed
  good.payload_size = 1;
  good.fps_n = 30;
  uint8_t b[kHeaderSize];
  PacketHeader r;
  std::string why;

  auto status_of = [&](PacketHeader h) {
    write_header(h, b);
    return read_header(b, sizeof b, &r, &why);
  };
  EXPECT_EQ(status_of(good), HeaderStatus::Ok);
  // Short input, wrong magic, damaged byte.
  write_header(good, b);
  EXPECT_EQ(read_header(b, kHeaderSize - 1, &r, &why), HeaderStatus::NoMagic);
  b[0] = 'X';
  EXPECT_EQ(read_header(b, sizeof b, &r, &why), HeaderStatus::NoMagic);
  for (size_t i = 4; i < kHeaderSize; ++i) {
    write_header(good, b);
    b[i] ^= 0x10;
    EXPECT_EQ(read_header(b, sizeof b, &r, &why), HeaderStatus::BadChecksum) << "byte " << i;
  }
  // Another version with an intact checksum: unsupported, not damage.
  for (uint8_t version : {uint8_t(0), uint8_t(3), uint8_t(255)}) {
    PacketHeader other = good;
    other.version = version;
    EXPECT_EQ(status_of(other), HeaderStatus::Unsupported);
    EXPECT_NE(why.find("version " + std::to_string(version)), std::string::npos) << why;
  }

  auto invalid = [&](PacketHeader h, const char *what) {
    EXPECT_EQ(status_of(h), HeaderStatus::Invalid) << what;
  };
  PacketHeader h = good;
  h.flags = 0x20;
  invalid(h, "unknown flag");
  h = good;
  h.format = VideoFormat::Unknown;
  invalid(h, "format 0");
  h = good;
  h.width = 0;
  invalid(h, "width 0");
  h = good;
  h.width = 32768;
  invalid(h, "width too large");
  h = good;
  h.width = 20000;
  h.height = 20000;  // 1.2 GB of BGR
  invalid(h, "frame too large");
  h = good;
  h.fps_d = 0;
  invalid(h, "framerate denominator 0");
  h = good;
  h.body_size = 0;
  h.payload_size = 0;
  invalid(h, "delta smaller than its bitmap");
  h = good;
  h.body_size = h.payload_size = uint32_t(diff::max_delta_body_size(3000) + 1);
  invalid(h, "delta larger than the largest");
  h = good;
  h.payload_size = 2;
  invalid(h, "uncompressed payload != body");
  h = good;
  h.flags = kFlagCompressed;
  h.payload_size = 0;
  invalid(h, "empty compressed payload");
  h = good;
  h.flags = kFlagPredicted;
  invalid(h, "predicted delta");
  h = good;
  h.flags = kFlagKeyframe;
  h.body_size = h.payload_size = 2999;
  invalid(h, "keyframe body != frame");
  h.body_size = h.payload_size = 3000;
  EXPECT_EQ(status_of(h), HeaderStatus::Ok);
  h.flags = kFlagKeyframe | kFlagDeltaValues;
  invalid(h, "keyframe with delta values");
  h = good;
  h.flags = kFlagStreamHeader | kFlagKeyframe;
  invalid(h, "stream header with frame flags");
  h = good;
  h.flags = kFlagStreamHeader;
  h.payload_size = h.body_size = 0;
  EXPECT_EQ(status_of(h), HeaderStatus::Ok);
}

TEST(StreamFormat, PredictionByHand) {
  // BGR 3x1: the first pixel stays, then each byte minus the one 3 before.
  const Bytes in = {10, 20, 30, 11, 25, 29, 250, 5, 30};
  Bytes out(in.size());
  predict(VideoFormat::BGR, 3, 1, in.data(), out.data());
  EXPECT_EQ(out, (Bytes{10, 20, 30, 1, 5, 255, 239, 236, 1}));
  Bytes back(in.size());
  unpredict(VideoFormat::BGR, 3, 1, out.data(), back.data());
  EXPECT_EQ(back, in);
  unpredict(VideoFormat::BGR, 3, 1, out.data(), out.data());  // in place
  EXPECT_EQ(out, in);
  // NV12 4x2: Y rows predicted by 1, the UV row by 2.
  const Bytes nv = {1, 2, 4, 8, 16, 32, 64, 128, 50, 60, 55, 70};
  Bytes p(nv.size());
  predict(VideoFormat::NV12, 4, 2, nv.data(), p.data());
  EXPECT_EQ(p, (Bytes{1, 1, 2, 4, 16, 16, 32, 64, 50, 60, 5, 10}));
}

TEST(StreamFormat, PredictionRoundTripsEveryFormat) {
  for (int f = int(VideoFormat::BGR); f <= int(VideoFormat::Y42B); ++f) {
    const VideoFormat fmt = VideoFormat(f);
    for (auto wh : {std::make_pair(1, 1), std::make_pair(3, 2), std::make_pair(37, 5)}) {
      const size_t n = frame_size_packed(fmt, wh.first, wh.second);
      Bytes in(n), p(n), back(n);
      for (auto &b : in) b = uint8_t(testing_util::rng()() >> 24);
      predict(fmt, wh.first, wh.second, in.data(), p.data());
      unpredict(fmt, wh.first, wh.second, p.data(), back.data());
      EXPECT_EQ(back, in) << format_name(fmt);
    }
  }
}

// Every length up to 300 at every alignment within 16 bytes, and headers'
// 60 bytes: the same values as zlib's (the build's crc32 may be ISA-L's,
// whose folding handles short and unaligned inputs on paths of their own).
TEST(StreamFormat, CrcMatchesZlibOnShortInputs) {
  Bytes data(16 + 300);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 2246822519u >> 11);
  for (size_t at = 0; at < 16; ++at)
    for (size_t n = 0; n <= 300; ++n) {
      ASSERT_EQ(stream::crc32(data.data() + at, n), uint32_t(::crc32_z(0, data.data() + at, n)))
          << "offset " << at << ", " << n << " bytes";
      Bytes copy(n + 1, 0x5a);
      ASSERT_EQ(stream::copy_crc32(copy.data(), data.data() + at, n),
                uint32_t(::crc32_z(0, data.data() + at, n)))
          << "offset " << at << ", " << n << " bytes";
    }
}

TEST(StreamFormat, CrcMatchesZlibOnLargeInputs) {
  Bytes big(9 * 1024 * 1024 + 123);
  for (size_t i = 0; i < big.size(); ++i) big[i] = uint8_t(i * 2654435761u >> 13);
  EXPECT_EQ(stream::crc32(big.data(), big.size()), uint32_t(::crc32_z(0, big.data(), big.size())));
  for (size_t n : {size_t(300000), size_t(1) << 20, size_t(5000001)})
    EXPECT_EQ(stream::crc32(big.data() + 3, n), uint32_t(::crc32_z(0, big.data() + 3, n))) << n;
  EXPECT_EQ(stream::crc32(nullptr, 0), 0u);
  // The writer's copy-and-checksum: the same value, the same bytes.
  for (size_t n : {size_t(0), size_t(1000), size_t(300000), size_t(5000001)}) {
    Bytes copy(n + 1, 0xa5);
    EXPECT_EQ(stream::copy_crc32(copy.data(), big.data() + 7, n),
              uint32_t(::crc32_z(0, big.data() + 7, n)))
        << n;
    EXPECT_TRUE(std::equal(copy.begin(), copy.begin() + long(n), big.begin() + 7)) << n;
    EXPECT_EQ(copy[n], 0xa5) << "nothing written past the end";
  }
}

namespace {

// Encodes frames of a moving, noisy picture with the core of `version` and
// the writer.
struct TestStream {
  std::vector<Bytes> packets;
  std::vector<Bytes> pictures;  // what a decoder must show after each packet
  std::vector<Bytes> inputs;
};

TestStream make_stream(VideoFormat fmt, int w, int h, int frames, Compression c, int threshold,
                       int keyframe_interval = 0, uint8_t version = kVersion1) {
  auto ctx = Context::cpu();
  std::unique_ptr<diff::DiffEncoder> enc1;
  std::unique_ptr<codec2::Encoder> enc2;
  if (version == kVersion2)
    enc2 = codec2::Encoder::create(*ctx, fmt, w, h);
  else
    enc1 = diff::DiffEncoder::create(*ctx, fmt, w, h);
  Writer writer;
  writer.set_compression(c, 3);
  TestStream s;
  testing_util::HostFrame frame(fmt, w, h, 3);
  std::mt19937 &gen = testing_util::rng();
  // A smooth start with a little noise (coded tiles in version 2, not raw).
  for (int p = 0; p < frame.view.n_planes(); ++p)
    for (int y = 0; y < frame.view.plane_height(p); ++y)
      for (size_t x = 0; x < frame.view.row_bytes(p); ++x)
        frame.view.row(p, y)[x] = uint8_t(x * 2 + size_t(y) * 5 + gen() % 7);
  HostBytes body, ref;
  for (int t = 0; t < frames; ++t) {
    // Noise on a few bytes and a run that changes a lot.
    for (int p = 0; p < frame.view.n_planes(); ++p)
      for (int y = 0; y < frame.view.plane_height(p); ++y)
        for (size_t x = 0; x < frame.view.row_bytes(p); ++x) {
          uint8_t &v = frame.view.row(p, y)[x];
          if (gen() % 5 == 0) v = uint8_t(v + int(gen() % 31) - 15);
          if (x % 97 == size_t(t) % 97) v = uint8_t(v + 100);
        }
    FrameInfo info;
    info.version = version;
    info.keyframe = t == 0 || (keyframe_interval && t % keyframe_interval == 0);
    info.mode = choose_value_mode(c, threshold);
    info.frame_number = uint64_t(t);
    info.pts = uint64_t(t) * 40000000;
    info.duration = 40000000;
    info.format = fmt;
    info.width = w;
    info.height = h;
    info.fps_n = 25;
    if (enc2)
      enc2->encode(frame.view, threshold, info.keyframe, body);
    else if (info.keyframe)
      enc1->keyframe(frame.view, body);
    else
      enc1->delta(frame.view, threshold, info.mode, body);
    s.packets.push_back(packet(writer, info, Bytes(body.data(), body.data() + body.size())));
    if (enc2)
      enc2->read_reference(ref);
    else
      enc1->read_reference(ref);
    s.pictures.emplace_back(ref.data(), ref.data() + ref.size());
    Bytes in(frame_size_packed(fmt, w, h));
    copy_frame_host(frame.view, packed_view(fmt, w, h, in.data()));
    s.inputs.push_back(std::move(in));
  }
  return s;
}

// The receive path of cudadiffdec without GStreamer: the reader, the
// sequence rules, and the core decoder of each packet's version.
struct Receiver {
  std::unique_ptr<Context> ctx = Context::cpu();
  std::unique_ptr<diff::DiffDecoder> dec1;
  std::unique_ptr<codec2::Decoder> dec2;
  Reader reader;
  PacketHeader cur;
  bool synced = false;
  uint64_t last = 0;
  std::string problem;  // why the last packet was not decoded

  // True when the packet was decoded (`picture` is the new picture).
  bool packet(const PacketHeader &h, const uint8_t *payload, Bytes *picture) {
    const uint8_t *body = nullptr;
    problem.clear();
    if (h.stream_header()) return false;
    if (!h.keyframe() &&
        (!synced || h.frame_number != last + 1 || h.version != cur.version ||
         h.format != cur.format || h.width != cur.width || h.height != cur.height)) {
      synced = false;
      problem = "out of sequence or another stream";
      return false;
    }
    if (h.keyframe() && (!(dec1 || dec2) || h.version != cur.version || h.format != cur.format ||
                         h.width != cur.width || h.height != cur.height)) {
      dec1.reset();
      dec2.reset();
      if (h.version == kVersion2)
        dec2 = codec2::Decoder::create(*ctx, h.format, int(h.width), int(h.height));
      else
        dec1 = diff::DiffDecoder::create(*ctx, h.format, int(h.width), int(h.height));
    }
    if (h.keyframe()) cur = h;
    bool ok = reader.body(h, payload, &body, &problem);
    if (ok && dec2) {
      ok = dec2->decode(body, h.body_size, &problem);
    } else if (ok && h.keyframe()) {
      dec1->keyframe(body);
    } else if (ok) {
      diff::DeltaIndex idx;
      ok = diff::parse_delta(body, h.body_size, dec1->frame_bytes(), &idx, &problem);
      if (ok)
        dec1->delta(
            body, idx,
            (h.flags & kFlagDeltaValues) ? diff::ValueMode::Deltas : diff::ValueMode::Values);
    }
    synced = ok;
    if (!ok) return false;
    last = h.frame_number;
    picture->assign(cur.frame_bytes(), 0);
    const FrameView out = packed_view(cur.format, int(cur.width), int(cur.height), picture->data());
    if (dec2)
      dec2->write_frame(out);
    else
      dec1->write_frame(out);
    return true;
  }
};

// Decodes a byte stream fed in chunks, the way cudadiffdec does; returns the
// pictures shown (keyed by frame number) and counts skips.
struct Decoded {
  std::vector<std::pair<uint64_t, Bytes>> shown;
  int skips = 0;
  int truncated = 0;
  int unsupported = 0;
};

// Feeds `bytes` to `parser` `chunk` at a time (all at once: chunk = size),
// as a network delivers them, until the end; calls on_step(step, queue)
// for every Skip and Packet, then drops its bytes.
template <typename OnStep>
void feed_parser(Parser &parser, const Bytes &bytes, size_t chunk, OnStep on_step) {
  ArrayQueue q(bytes.data(), 0);
  size_t fed = 0;
  for (;;) {
    const bool eos = fed == bytes.size();
    const Parser::Step s = parser.next(q, eos);
    if (s.kind == Parser::Kind::NeedData) {
      if (eos) break;
      fed = std::min(bytes.size(), fed + chunk);
      q.set_size(fed);
      continue;
    }
    on_step(s, q);
    q.flush(s.bytes);
  }
}

Decoded decode_stream(const Bytes &bytes, size_t chunk) {
  Decoded out;
  Receiver rx;
  Parser parser;
  feed_parser(parser, bytes, chunk, [&](const Parser::Step &s, ArrayQueue &q) {
    if (s.kind == Parser::Kind::Skip) {
      // Damage by itself keeps the reference: a lost packet shows as a gap
      // in the frame numbers.
      out.skips++;
      out.truncated += s.truncated;
      out.unsupported += s.unsupported;
      return;
    }
    Bytes picture;
    const bool shown = rx.packet(s.header, q.map(s.bytes) + kHeaderSize, &picture);
    q.unmap();
    if (shown) out.shown.emplace_back(s.header.frame_number, std::move(picture));
  });
  return out;
}

Bytes concat(const std::vector<Bytes> &packets) {
  Bytes all;
  for (const Bytes &p : packets) all.insert(all.end(), p.begin(), p.end());
  return all;
}

int max_abs_diff(const Bytes &a, const Bytes &b) {
  int worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, std::abs(int(a[i]) - int(b[i])));
  return worst;
}

}  // namespace

TEST(StreamFormat, WriterReaderRoundTrips) {
  const VideoFormat formats[] = {VideoFormat::BGR,  VideoFormat::GRAY8, VideoFormat::I420,
                                 VideoFormat::NV12, VideoFormat::YUY2,  VideoFormat::RGBA};
  for (VideoFormat fmt : formats)
    for (Compression c : {Compression::None, Compression::Zstd})
      for (int thr : {0, 20}) {
        if (c == Compression::Zstd && !have_zstd()) continue;
        const TestStream s = make_stream(fmt, 67, 9, 6, c, thr);
        for (size_t chunk : {size_t(1), size_t(7), size_t(100000)}) {
          const Decoded d = decode_stream(concat(s.packets), chunk);
          ASSERT_EQ(d.skips, 0);
          ASSERT_EQ(d.shown.size(), s.pictures.size()) << format_name(fmt);
          for (size_t i = 0; i < d.shown.size(); ++i) {
            EXPECT_EQ(d.shown[i].first, i);
            EXPECT_EQ(d.shown[i].second, s.pictures[i]) << format_name(fmt) << " frame " << i;
          }
        }
        // Flags: keyframe first, then deltas with the chosen value mode.
        PacketHeader h;
        ASSERT_EQ(read_header(s.packets[0].data(), kHeaderSize, &h, nullptr), HeaderStatus::Ok);
        EXPECT_TRUE(h.keyframe());
        ASSERT_EQ(read_header(s.packets[1].data(), kHeaderSize, &h, nullptr), HeaderStatus::Ok);
        EXPECT_FALSE(h.keyframe());
        if (h.compressed()) {
          EXPECT_EQ(bool(h.flags & kFlagDeltaValues), thr <= 12);
        }
      }
}

// Version 2: the codec2 body as the payload, whatever the compression
// setting; the decoded pictures are the encoder's reference, every byte
// within the threshold of the input (exact at 0).
TEST(StreamFormat, Version2RoundTrips) {
  const VideoFormat formats[] = {VideoFormat::BGR,  VideoFormat::GRAY8, VideoFormat::I420,
                                 VideoFormat::NV12, VideoFormat::YUY2,  VideoFormat::RGBA,
                                 VideoFormat::Y42B, VideoFormat::UYVY};
  for (VideoFormat fmt : formats)
    for (int thr : {0, 5, 20}) {
      SCOPED_TRACE(std::string(format_name(fmt)) + " threshold " + std::to_string(thr));
      const Compression c = have_zstd() && thr == 5 ? Compression::Zstd : Compression::None;
      const TestStream s = make_stream(fmt, 67, 9, 7, c, thr, 4, kVersion2);
      for (size_t i = 0; i < s.packets.size(); ++i) {
        PacketHeader h;
        std::string why;
        ASSERT_EQ(read_header(s.packets[i].data(), kHeaderSize, &h, &why), HeaderStatus::Ok) << why;
        EXPECT_EQ(h.version, kVersion2);
        EXPECT_EQ(h.flags, i % 4 == 0 ? kFlagKeyframe : 0) << "no zstd in version 2";
        EXPECT_EQ(h.payload_size, h.body_size);
        EXPECT_EQ(s.packets[i].size(), kHeaderSize + h.payload_size);
        codec2::BodyHeader bh;
        ASSERT_TRUE(
            codec2::read_body_header(s.packets[i].data() + kHeaderSize, h.body_size, &bh, &why))
            << why;
        EXPECT_EQ(bh.keyframe, h.keyframe());
        EXPECT_EQ(bh.k, codec2::frame_k(thr, h.keyframe()));
        if (thr == 20) {
          EXPECT_LT(h.body_size, s.inputs[i].size() / 2) << "coded, not raw: frame " << i;
        }
        if (thr == 0) {
          EXPECT_EQ(s.pictures[i], s.inputs[i]) << "lossless, frame " << i;
        } else {
          EXPECT_LE(max_abs_diff(s.pictures[i], s.inputs[i]), thr) << "frame " << i;
        }
      }
      for (size_t chunk : {size_t(1), size_t(13), size_t(100000)}) {
        const Decoded d = decode_stream(concat(s.packets), chunk);
        ASSERT_EQ(d.skips, 0);
        ASSERT_EQ(d.shown.size(), s.pictures.size());
        for (size_t i = 0; i < d.shown.size(); ++i) {
          EXPECT_EQ(d.shown[i].first, i);
          EXPECT_EQ(d.shown[i].second, s.pictures[i]) << "frame " << i << ", chunk " << chunk;
        }
      }
    }
}

// A sender that restarts with the other version: each keyframe starts a
// stream of its own version; a delta of the other version is refused.
TEST(StreamFormat, VersionsFollowEachOther) {
  const TestStream a =
      make_stream(VideoFormat::NV12, 30, 10, 4, Compression::None, 10, 0, kVersion1);
  const TestStream b =
      make_stream(VideoFormat::NV12, 30, 10, 4, Compression::None, 10, 0, kVersion2);
  // Frame numbers run on across the switch (as after a caps change).
  std::vector<Bytes> packets = a.packets;
  for (size_t i = 0; i < b.packets.size(); ++i) {
    Bytes p = b.packets[i];
    PacketHeader h;
    ASSERT_EQ(read_header(p.data(), kHeaderSize, &h, nullptr), HeaderStatus::Ok);
    h.frame_number += a.packets.size();
    write_header(h, p.data());
    packets.push_back(p);
  }
  Decoded d = decode_stream(concat(packets), 50);
  ASSERT_EQ(d.shown.size(), 8u);
  for (size_t i = 0; i < 8; ++i)
    EXPECT_EQ(d.shown[i].second, i < 4 ? a.pictures[i] : b.pictures[i - 4]) << i;
  // A version 2 delta right after version 1 frames: out of the stream.
  std::vector<Bytes> mixed = {a.packets[0], a.packets[1]};
  Bytes delta = b.packets[1];
  PacketHeader h;
  ASSERT_EQ(read_header(delta.data(), kHeaderSize, &h, nullptr), HeaderStatus::Ok);
  h.frame_number = 2;
  write_header(h, delta.data());
  mixed.push_back(delta);
  d = decode_stream(concat(mixed), 1000);
  ASSERT_EQ(d.shown.size(), 2u);
}

TEST(StreamFormat, Version2HeaderChecks) {
  const VideoFormat fmt = VideoFormat::RGBA;
  const int w = 100, h = 40;  // 7 x 3 blocks of 16x16
  const size_t n = frame_size_packed(fmt, w, h);
  PacketHeader good;
  good.version = kVersion2;
  good.flags = kFlagKeyframe;
  good.format = fmt;
  good.width = w;
  good.height = h;
  good.body_size = good.payload_size = 900;
  good.fps_n = 30;
  uint8_t b[kHeaderSize];
  PacketHeader r;
  std::string why;
  auto status_of = [&](PacketHeader x) {
    write_header(x, b);
    return read_header(b, sizeof b, &r, &why);
  };
  ASSERT_EQ(status_of(good), HeaderStatus::Ok) << why;
  EXPECT_EQ(r.version, kVersion2);
  EXPECT_EQ(b[4], 2);
  // The bounds: 6 bytes at least, N + 8 B + 65536 at most (B = 21 blocks).
  EXPECT_EQ(min_v2_body_size(), 6u);
  EXPECT_EQ(max_v2_body_size(fmt, w, h), n + 8 * 21 + 65536);
  EXPECT_EQ(max_v2_body_size(VideoFormat::Unknown, w, h), 0u);
  EXPECT_EQ(max_v2_body_size(fmt, 0, h), 0u);
  // YUY2: blocks of the luma layer, 2 ceil(W/2) samples wide.
  EXPECT_EQ(max_v2_body_size(VideoFormat::YUY2, 33, 16),
            frame_size_packed(VideoFormat::YUY2, 33, 16) + 8 * 3 + 65536);
  for (uint8_t flags : {uint8_t(0), uint8_t(kFlagKeyframe)}) {
    PacketHeader x = good;
    x.flags = flags;
    for (uint32_t size : {uint32_t(6), uint32_t(n + 8 * 21 + 65536)}) {
      x.body_size = x.payload_size = size;
      EXPECT_EQ(status_of(x), HeaderStatus::Ok) << size << " " << why;
    }
    for (uint32_t size : {uint32_t(0), uint32_t(5), uint32_t(n + 8 * 21 + 65537)}) {
      x.body_size = x.payload_size = size;
      EXPECT_EQ(status_of(x), HeaderStatus::Invalid) << size;
    }
  }
  auto invalid = [&](PacketHeader x, const char *what) {
    EXPECT_EQ(status_of(x), HeaderStatus::Invalid) << what;
  };
  PacketHeader x = good;
  for (uint8_t flag : {uint8_t(kFlagCompressed), uint8_t(kFlagDeltaValues), uint8_t(kFlagPredicted),
                       uint8_t(0x20), uint8_t(0x80)}) {
    x = good;
    x.flags |= flag;
    invalid(x, "a flag version 2 does not have");
    x.flags = flag;
    invalid(x, "a flag version 2 does not have (delta)");
  }
  x = good;
  x.payload_size = 901;
  invalid(x, "payload != body");
  x = good;
  x.payload_size = 899;
  invalid(x, "payload != body");
  x = good;
  x.format = VideoFormat::Unknown;
  invalid(x, "format 0");
  x = good;
  x.width = 32768;
  invalid(x, "width too large");
  x = good;
  x.fps_d = 0;
  invalid(x, "framerate denominator 0");
  x = good;
  x.flags = kFlagStreamHeader | kFlagKeyframe;
  invalid(x, "stream header with frame flags");
  x = good;
  x.flags = kFlagStreamHeader;
  x.body_size = x.payload_size = 3;
  EXPECT_EQ(status_of(x), HeaderStatus::Ok) << "a stream header's text of any size";
  EXPECT_EQ(r.version, kVersion2);
  // The writer's version 2 stream header.
  const Bytes sh = Writer::stream_header(fmt, w, h, 30, 1, "colorimetry=sRGB\n", kVersion2);
  ASSERT_EQ(read_header(sh.data(), sh.size(), &r, &why), HeaderStatus::Ok) << why;
  EXPECT_EQ(r.version, kVersion2);
  EXPECT_TRUE(r.stream_header());
  // The writer refuses what the reader would.
  Writer wr;
  FrameInfo info;
  info.version = kVersion2;
  info.format = fmt;
  info.width = w;
  info.height = h;
  Bytes tiny(5, 0);
  EXPECT_THROW(wr.prepare(info, tiny.data(), tiny.size()), Error);
  info.version = 3;
  Bytes some(100, 0);
  EXPECT_THROW(wr.prepare(info, some.data(), some.size()), Error);
}

// The body's own header must agree with the packet (checked with the
// payload, before the core sees it).
TEST(StreamFormat, Version2BodyHeaderMustMatchThePacket) {
  const TestStream s =
      make_stream(VideoFormat::GRAY8, 40, 20, 2, Compression::None, 3, 0, kVersion2);
  Reader reader;
  for (size_t i = 0; i < 2; ++i) {
    PacketHeader h;
    ASSERT_EQ(read_header(s.packets[i].data(), kHeaderSize, &h, nullptr), HeaderStatus::Ok);
    const uint8_t *body = nullptr;
    std::string why;
    Bytes payload(s.packets[i].begin() + kHeaderSize, s.packets[i].end());
    ASSERT_TRUE(reader.body(h, payload.data(), &body, &why)) << why;
    EXPECT_EQ(body, payload.data()) << "the payload is the body";
    Bytes bad = payload;
    bad[0] ^= 1;  // keyframe <-> delta
    EXPECT_FALSE(reader.body(h, bad.data(), &body, &why));
    EXPECT_NE(why.find(h.keyframe() ? "delta in a keyframe" : "keyframe in a delta"),
              std::string::npos)
        << why;
    bad = payload;
    bad[0] |= 8;  // unknown body flag
    EXPECT_FALSE(reader.body(h, bad.data(), &body, &why));
    EXPECT_NE(why.find("unknown body flags"), std::string::npos) << why;
    bad[0] ^= 10;  // the rule before tile classes: a known flag cleared
    EXPECT_TRUE(reader.body(h, bad.data(), &body, &why)) << why;
    bad = payload;
    bad[2] = 0;  // tiles of 0 blocks
    EXPECT_FALSE(reader.body(h, bad.data(), &body, &why));
  }
}

// Every body the encoder writes lies within the bounds the reader checks:
// the smallest frames, deltas that change nothing, and noise at threshold 0
// (raw tiles), for every format.
TEST(StreamFormat, Version2BodiesWithinTheirBounds) {
  auto ctx = Context::cpu();
  for (int f = int(VideoFormat::BGR); f <= int(VideoFormat::Y42B); ++f) {
    const VideoFormat fmt = VideoFormat(f);
    for (auto wh : {std::make_pair(1, 1), std::make_pair(17, 3), std::make_pair(130, 70)}) {
      SCOPED_TRACE(std::string(format_name(fmt)) + " " + std::to_string(wh.first) + "x" +
                   std::to_string(wh.second));
      auto enc = codec2::Encoder::create(*ctx, fmt, wh.first, wh.second);
      testing_util::HostFrame frame(fmt, wh.first, wh.second);
      testing_util::fill_random(frame);
      HostBytes body;
      const size_t hi = max_v2_body_size(fmt, wh.first, wh.second);
      for (int t = 0; t < 3; ++t) {
        enc->encode(frame.view, 0, t == 0, body);  // noise; then nothing changes
        EXPECT_GE(body.size(), min_v2_body_size());
        EXPECT_LE(body.size(), hi);
        if (t == 0) {
          EXPECT_GE(body.size(), frame_size_packed(fmt, wh.first, wh.second))
              << "noise is not compressible";
        }
      }
    }
  }
}

// Bytes changed inside version 2 bodies with the checksums made right again:
// the core either refuses the body (and keeps its picture) or decodes it;
// it never writes outside its frame (checked by the fuzz target as well).
TEST(StreamFormat, Version2DamagedBodiesKeepThePicture) {
  const TestStream s = make_stream(VideoFormat::BGR, 70, 20, 3, Compression::None, 4, 0, kVersion2);
  auto ctx = Context::cpu();
  std::mt19937 &gen = testing_util::rng();
  int refused = 0, trials = 0;
  for (size_t i = 1; i < 3; ++i) {
    const Bytes body(s.packets[i].begin() + kHeaderSize, s.packets[i].end());
    for (int k = 0; k < 150; ++k) {
      auto dec = codec2::Decoder::create(*ctx, VideoFormat::BGR, 70, 20);
      std::string why;
      for (size_t j = 0; j < i; ++j) {
        const Bytes b(s.packets[j].begin() + kHeaderSize, s.packets[j].end());
        ASSERT_TRUE(dec->decode(b.data(), b.size(), &why)) << why;
      }
      Bytes bad = body;
      const size_t at = codec2::kBodyHeaderBytes + gen() % (bad.size() - codec2::kBodyHeaderBytes);
      bad[at] ^= uint8_t(1 + gen() % 255);
      HostBytes before, after;
      dec->read_reference(before);
      ++trials;
      if (!dec->decode(bad.data(), bad.size(), &why)) {
        ++refused;
        dec->read_reference(after);
        ASSERT_EQ(Bytes(after.data(), after.data() + after.size()),
                  Bytes(before.data(), before.data() + before.size()))
            << "a refused body changed the picture (byte " << at << ")";
      }
    }
  }
  // Coded tiles end exactly where their lanes began: most damage shows.
  EXPECT_GT(refused, trials / 2) << refused << " of " << trials;
}

TEST(StreamFormat, ZstdFlagsAndIncompressibleBodies) {
  if (!have_zstd()) GTEST_SKIP() << "built without zstd";
  Writer w;
  w.set_compression(Compression::Zstd, 3);
  // A smooth keyframe compresses (predicted); random bytes do not (sent as they are).
  Bytes smooth(300 * 4 * 3);
  for (size_t i = 0; i < smooth.size(); ++i) smooth[i] = uint8_t(i / 3);
  FrameInfo info;
  info.keyframe = true;
  info.format = VideoFormat::BGR;
  info.width = 300;
  info.height = 4;
  info.fps_n = 30;
  w.prepare(info, smooth.data(), smooth.size());
  EXPECT_EQ(w.header().flags, kFlagKeyframe | kFlagCompressed | kFlagPredicted);
  EXPECT_LT(w.header().payload_size, smooth.size() / 10);
  Bytes noise(smooth.size());
  for (auto &b : noise) b = uint8_t(testing_util::rng()() >> 24);
  w.prepare(info, noise.data(), noise.size());
  EXPECT_EQ(w.header().flags, kFlagKeyframe);
  EXPECT_EQ(w.header().payload_size, noise.size());
  // A compressed payload that decodes to the wrong size is refused.
  Reader r;
  Bytes p(w.prepare(info, smooth.data(), smooth.size()));
  w.write(p.data());
  PacketHeader h;
  ASSERT_EQ(read_header(p.data(), kHeaderSize, &h, nullptr), HeaderStatus::Ok);
  const uint8_t *body = nullptr;
  std::string why;
  ASSERT_TRUE(r.body(h, p.data() + kHeaderSize, &body, &why)) << why;
  EXPECT_EQ(Bytes(body, body + h.body_size), smooth);
  h.body_size -= 1;
  EXPECT_FALSE(r.body(h, p.data() + kHeaderSize, &body, &why));
  Bytes garbage(h.payload_size, 0x55);
  h.body_size += 1;
  EXPECT_FALSE(r.body(h, garbage.data(), &body, &why));
}

TEST(StreamFormat, ParserResynchronises) {
  for (uint8_t version : {kVersion1, kVersion2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    const TestStream s =
        make_stream(VideoFormat::BGR, 61, 7, 12, Compression::None, 20, 4, version);
    const Bytes clean = concat(s.packets);
    std::vector<size_t> starts;
    size_t at = 0;
    for (const Bytes &p : s.packets) {
      starts.push_back(at);
      at += p.size();
    }
    auto expect_recovery = [&](const Bytes &damaged, const std::vector<uint64_t> &want_frames,
                               const char *what) {
      for (size_t chunk : {size_t(3), size_t(1000)}) {
        const Decoded d = decode_stream(damaged, chunk);
        std::vector<uint64_t> got;
        for (const auto &f : d.shown) {
          got.push_back(f.first);
          EXPECT_EQ(f.second, s.pictures[f.first]) << what << " frame " << f.first;
        }
        EXPECT_EQ(got, want_frames) << what << " chunk " << chunk;
      }
    };
    // Garbage before and between packets is skipped.
    Bytes g = clean;
    g.insert(g.begin() + long(starts[2]), {'C', 'D', 'I', 'F', 1, 2, 3});
    g.insert(g.begin(), 100, 0x43);
    expect_recovery(g, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, "garbage");
    // A flipped payload byte in delta 2: 2 and 3 are lost, 4 is a keyframe.
    Bytes f = clean;
    f[starts[2] + kHeaderSize + 3] ^= 1;
    expect_recovery(f, {0, 1, 4, 5, 6, 7, 8, 9, 10, 11}, "flip in payload");
    // A flipped header byte in delta 5.
    f = clean;
    f[starts[5] + 20] ^= 0x80;
    expect_recovery(f, {0, 1, 2, 3, 4, 8, 9, 10, 11}, "flip in header");
    // Bytes dropped inside keyframe 4: 4..7 lost (deltas need it), 8 resumes.
    Bytes dr = clean;
    ASSERT_GT(s.packets[4].size(), 170u);
    dr.erase(dr.begin() + long(starts[4] + 100), dr.begin() + long(starts[4] + 170));
    expect_recovery(dr, {0, 1, 2, 3, 8, 9, 10, 11}, "drop in keyframe");
    // A whole delta dropped: out of sequence.
    dr = clean;
    dr.erase(dr.begin() + long(starts[6]), dr.begin() + long(starts[7]));
    expect_recovery(dr, {0, 1, 2, 3, 4, 5, 8, 9, 10, 11}, "packet dropped");
    // Truncated at the end: the cut packet is reported as truncated.
    Bytes t(clean.begin(), clean.begin() + long(starts[11] + 70));
    const Decoded d = decode_stream(t, 50);
    EXPECT_EQ(d.shown.size(), 11u);
    EXPECT_EQ(d.truncated, 1);
    // An intact header of an unknown version is flagged as such.
    Bytes v = clean;
    v[starts[0] + 4] = 3;
    const uint32_t crc = uint32_t(::crc32(0, v.data() + starts[0], 60));
    for (int i = 0; i < 4; ++i) v[starts[0] + 60 + i] = uint8_t(crc >> (8 * i));
    ArrayQueue q(v.data(), v.size());
    Parser p;
    const Parser::Step step = p.next(q, false);
    EXPECT_EQ(step.kind, Parser::Kind::Skip);
    EXPECT_TRUE(step.unsupported);
  }
}

// With a limit, a header announcing a larger frame is skipped at once (its
// first byte, as any bad header), before its payload has arrived; a frame
// at the limit is waited for as before, and a stream header never counts.
TEST(StreamFormat, ParserDropsFramesOverItsLimitBeforeTheirPayload) {
  Writer w;
  const Bytes key = packet(w, gray40(true, 0, 0), Bytes(40, 7));  // 40 pixels
  const Bytes head = Writer::stream_header(VideoFormat::GRAY8, 40, 1, 30, 1);
  // Only the header and half the payload are there.
  const size_t part = kHeaderSize + (key.size() - kHeaderSize) / 2;
  for (uint64_t limit : {uint64_t(0), uint64_t(40), uint64_t(39)}) {
    SCOPED_TRACE("limit " + std::to_string(limit));
    Parser p;
    p.set_max_pixels(limit);
    EXPECT_EQ(p.max_pixels(), limit);
    ArrayQueue q(key.data(), part);
    const Parser::Step step = p.next(q, false);
    if (limit == 39) {
      EXPECT_EQ(step.kind, Parser::Kind::Skip);
      EXPECT_EQ(step.bytes, 1u);
      EXPECT_TRUE(step.too_large);
      EXPECT_FALSE(step.damaged);
      EXPECT_EQ(step.header.width, 40u);
      EXPECT_NE(step.problem.find("announces a frame of 40x1 (40 pixels), more than the limit "
                                  "of 39"),
                std::string::npos)
          << step.problem;
    } else {
      EXPECT_EQ(step.kind, Parser::Kind::NeedData);
      EXPECT_EQ(step.bytes, key.size());
      EXPECT_FALSE(step.too_large);
    }
    ArrayQueue hq(head.data(), head.size());
    const Parser::Step hs = p.next(hq, false);
    EXPECT_EQ(hs.kind, Parser::Kind::Packet);
    EXPECT_TRUE(hs.header.stream_header());
  }
}

// Packet headers with the payload checksum given: a GRAY8 keyframe of
// w x h pixels (a payload of w h bytes), and a delta of a 4096x4096 GRAY8
// frame with a payload of any size from 2 KiB to 16 MiB.
void put_key_header(Bytes &b, size_t at, uint32_t w, uint32_t h, uint64_t frame, uint32_t crc) {
  PacketHeader p;
  p.flags = kFlagKeyframe;
  p.format = VideoFormat::GRAY8;
  p.frame_number = frame;
  p.payload_size = p.body_size = w * h;
  p.width = w;
  p.height = h;
  p.fps_n = 30;
  p.payload_crc = crc;
  write_header(p, b.data() + at);
}

void put_delta_header(Bytes &b, size_t at, size_t payload, uint64_t frame, uint32_t crc) {
  PacketHeader p;
  p.format = VideoFormat::GRAY8;
  p.frame_number = frame;
  p.payload_size = p.body_size = uint32_t(payload);
  p.width = p.height = 4096;
  p.fps_n = 30;
  p.payload_crc = crc;
  write_header(p, b.data() + at);
  std::string why;
  ASSERT_EQ(read_header(b.data() + at, kHeaderSize, &p, &why), HeaderStatus::Ok) << why;
}

uint32_t zlib_crc(const Bytes &b, size_t at, size_t n) {
  return uint32_t(::crc32(0, b.data() + at, uInt(n)));
}

// Appends a whole, intact packet: a GRAY8 40x1 keyframe numbered `frame`.
void append_gray_packet(Bytes &b, uint64_t frame) {
  const size_t at = b.size();
  b.resize(at + kHeaderSize + 40, 5);
  put_key_header(b, at, 40, 1, frame, zlib_crc(b, at + kHeaderSize, 40));
}

struct Parsed {
  std::vector<uint64_t> packets;  // frame numbers
  int damaged = 0;
  int superseded = 0;  // of the damaged
  uint64_t checked_bytes = 0;
};

// Parses `bytes` fed `chunk` at a time (all at once: chunk = size).
Parsed parse_all(const Bytes &bytes, size_t chunk) {
  Parsed out;
  Parser parser;
  feed_parser(parser, bytes, chunk, [&](const Parser::Step &s, ArrayQueue &) {
    if (s.kind == Parser::Kind::Packet) out.packets.push_back(s.header.frame_number);
    out.damaged += s.damaged;
    out.superseded += s.superseded;
    EXPECT_TRUE(s.damaged || !s.superseded);
  });
  out.checked_bytes = parser.checked_bytes();
  return out;
}

// Many intact headers inside one damaged packet, each announcing a packet
// that reaches to its end: each is skipped as damaged, as before, but the
// bytes are checksummed about twice in all instead of once per header.
// (Before, a crafted stream of this kind cost its payload once per header:
// 1.59 GB here; a payload of 100 MB with a header every 64 bytes, about
// 80 TB.) Among them a real small packet and one long one whose checksum
// is right; both pass.
TEST(StreamFormat, HeadersInsideADamagedPacketAreCheckedInOnePass) {
  const size_t outer = size_t(1) << 20;
  const size_t end = kHeaderSize + outer;
  constexpr int kHeaders = 4000;
  constexpr int kSmall = kHeaders / 4, kLong = kHeaders / 2;
  Bytes b(end);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(i * 131 + (i >> 9));
  std::vector<size_t> at;
  for (int i = 0; i < kHeaders; ++i) at.push_back(kHeaderSize + 100 + 256 * size_t(i));
  // Last to first, so that the bytes a right checksum covers are final.
  for (int i = kHeaders - 1; i >= 0; --i) {
    if (i == kSmall) {
      put_key_header(b, at[i], 40, 1, 1000 + i, zlib_crc(b, at[i] + kHeaderSize, 40));
      continue;
    }
    const size_t n = end - at[i] - kHeaderSize;
    put_delta_header(b, at[i], n, 1000 + i,
                     i == kLong ? zlib_crc(b, at[i] + kHeaderSize, n) : 0x12345678u);
  }
  put_key_header(b, 0, 1024, 1024, 7, 0x9abcdef0u);  // the damaged packet
  ASSERT_NE(zlib_crc(b, kHeaderSize, outer), 0x9abcdef0u);
  append_gray_packet(b, 99);
  for (size_t chunk : {b.size(), size_t(4096), size_t(777)}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    const Parsed p = parse_all(b, chunk);
    EXPECT_EQ(p.packets, (std::vector<uint64_t>{1000 + kSmall, 1000 + kLong, 99}));
    EXPECT_EQ(p.damaged,
              1 + kLong - 1);  // the outer one, those before the long one but the small one
    EXPECT_LE(p.checked_bytes, 3 * b.size() + kHeaders * 2048u);
  }
}

// Headers inside a damaged packet whose packets reach further each than
// the one before, beyond the damaged packet (a chain). Fed in pieces, as a
// network delivers them, each would be checked when its last byte came,
// and its payload checksummed again: the check of the first waits for the
// furthest and then covers them all.
TEST(StreamFormat, HeadersReachingBeyondADamagedPacketAreCheckedTogether) {
  const size_t outer = size_t(256) << 10;
  const size_t end = kHeaderSize + outer;
  constexpr int kHeaders = 3000;
  const size_t total = end + 64 * size_t(kHeaders);
  Bytes b(total);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(i * 7 + 1);
  for (int i = 0; i < kHeaders; ++i) {
    const size_t a = kHeaderSize + 64 + 80 * size_t(i);
    put_delta_header(b, a, end + 64 * size_t(i + 1) - a - kHeaderSize, 1000 + i, 1u);
  }
  put_key_header(b, 0, 512, 512, 7, 2u);
  append_gray_packet(b, 99);
  for (size_t chunk : {b.size(), size_t(4096), size_t(100)}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    const Parsed p = parse_all(b, chunk);
    EXPECT_EQ(p.packets, std::vector<uint64_t>{99});
    EXPECT_EQ(p.damaged, 1 + kHeaders);
    EXPECT_LE(p.checked_bytes, 3 * b.size() + kHeaders * 2048u);
  }
}

// A drain (the end of the stream, or a gap: the caller drops what is left)
// while headers inside a damaged packet reached beyond its bytes: the
// stream that follows is not kept waiting for them.
TEST(StreamFormat, ParserForgetsItsWaitAtTheEnd) {
  // A damaged packet of 2000 bytes with a header inside whose packet
  // reaches 1000 bytes beyond it; the stream ends (is drained) there.
  Bytes b(kHeaderSize + 2000, 9);
  put_key_header(b, 1500, 1500, 1, 2, 1u);
  put_key_header(b, 0, 2000, 1, 1, 2u);
  Bytes good;
  append_gray_packet(good, 3);
  for (bool drained : {true, false}) {
    SCOPED_TRACE(drained ? "drained" : "not drained");
    Parser parser;
    ArrayQueue q(b.data(), b.size());
    Parser::Step s = parser.next(q, drained);
    ASSERT_TRUE(s.damaged);
    q.flush(s.bytes);
    while (q.available() > 0) {  // what the caller drops at a drain
      s = parser.next(q, drained);
      if (s.kind == Parser::Kind::NeedData) break;
      q.flush(s.bytes);
    }
    // The next stream's bytes follow at the next positions.
    const uint64_t at = drained ? b.size() : q.position();
    ArrayQueue next(good.data(), good.size(), at);
    s = parser.next(next, false);
    if (drained) {
      EXPECT_EQ(s.kind, Parser::Kind::Packet);
      EXPECT_EQ(s.header.frame_number, 3u);
    } else {
      // Within the stream, a header at that position still waits for the
      // packet that reached further (the inner header's end).
      EXPECT_EQ(s.kind, Parser::Kind::NeedData);
      EXPECT_EQ(at + s.bytes, 1500 + kHeaderSize + 1500);
    }
  }
}

// What the parser remembers is by position and header: a queue at another
// position, or another header at the same position, is checked anew.
TEST(StreamFormat, ParserRemembersByPositionAndHeader) {
  // A damaged packet with a header inside whose payload is damaged too.
  Bytes b(kHeaderSize + 2000, 9);
  put_key_header(b, 500, 40, 1, 2, 1u);
  put_key_header(b, 0, 2000, 1, 1, 2u);
  Parser parser;
  ArrayQueue q(b.data(), b.size());
  Parser::Step s = parser.next(q, false);
  ASSERT_TRUE(s.damaged);
  q.flush(s.bytes);
  s = parser.next(q, false);  // the bytes up to the inner header
  ASSERT_EQ(s.kind, Parser::Kind::Skip);
  q.flush(s.bytes);
  ASSERT_EQ(q.position(), 500u);
  const uint64_t before = parser.checked_bytes();
  s = parser.next(q, false);
  EXPECT_TRUE(s.damaged);
  EXPECT_EQ(parser.checked_bytes(), before);  // known: not checked again
  // The same bytes with the right checksum at that position: checked.
  Bytes good(b.begin() + 500, b.end());
  put_key_header(good, 0, 40, 1, 2, zlib_crc(good, kHeaderSize, 40));
  ArrayQueue q2(good.data(), good.size(), 500);
  s = parser.next(q2, false);
  EXPECT_EQ(s.kind, Parser::Kind::Packet);
  EXPECT_EQ(s.header.frame_number, 2u);
  // And the damaged one at another position is checked too.
  Bytes moved(b.begin() + 500, b.end());
  ArrayQueue q3(moved.data(), moved.size(), 4);
  const uint64_t at3 = parser.checked_bytes();
  s = parser.next(q3, false);
  EXPECT_TRUE(s.damaged);
  EXPECT_EQ(parser.checked_bytes(), at3 + 40);
}

// A damaged packet inside which an intact packet of the same frame starts
// (a copy of that packet's header alone, or of its first part, before it)
// is flagged superseded: the frame is not lost. Fed a byte at a time, the
// copy's check comes when the intact packet is not complete yet; it waits
// for it. A damaged packet that swallows the start of another frame's
// packet, or whose own frame's packet is cut by the end, is not superseded.
TEST(StreamFormat, ParserSupersedesADamagedCopyByTheIntactPacketInsideIt) {
  constexpr size_t kPayload = 200;
  auto packet_of = [](uint64_t frame, uint8_t fill) {
    Bytes b(kHeaderSize + kPayload, fill);
    put_key_header(b, 0, kPayload, 1, frame, zlib_crc(b, kHeaderSize, kPayload));
    return b;
  };
  const Bytes one = packet_of(1, 11), two = packet_of(2, 22), three = packet_of(3, 33);
  auto stream = [&](const Bytes &before_two, const Bytes &two_as, const Bytes &after) {
    Bytes b = one;
    b.insert(b.end(), before_two.begin(), before_two.end());
    b.insert(b.end(), two_as.begin(), two_as.end());
    b.insert(b.end(), after.begin(), after.end());
    return b;
  };
  const Bytes header_copy(two.begin(), two.begin() + kHeaderSize);
  const Bytes part_copy(two.begin(), two.begin() + kHeaderSize + 17);
  const Bytes most_copy(two.begin(), two.end() - 1);  // the header inside ends later
  Bytes two_headers = header_copy;
  two_headers.insert(two_headers.end(), header_copy.begin(), header_copy.end());
  Bytes cut_two(two.begin(), two.end() - 10);  // bytes lost: swallows 3's start
  struct Case {
    const char *what;
    Bytes bytes;
    std::vector<uint64_t> packets;
    int damaged, superseded;
  };
  const std::vector<Case> cases = {
      {"header copy", stream(header_copy, two, three), {1, 2, 3}, 1, 1},
      {"part copy", stream(part_copy, two, three), {1, 2, 3}, 1, 1},
      {"two header copies", stream(two_headers, two, three), {1, 2, 3}, 2, 2},
      {"copy of all but the last byte", stream(most_copy, two, three), {1, 2, 3}, 1, 1},
      {"bytes lost", stream({}, cut_two, three), {1, 3}, 1, 0},
      {"copy of a frame whose packet is cut by the end",
       stream(header_copy, cut_two, {}),
       {1},
       1,
       0},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.what);
    for (size_t chunk : {size_t(1), size_t(7), size_t(100), c.bytes.size()}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk));
      const Parsed p = parse_all(c.bytes, chunk);
      EXPECT_EQ(p.packets, c.packets);
      EXPECT_EQ(p.damaged, c.damaged);
      EXPECT_EQ(p.superseded, c.superseded);
    }
  }
  // The waits. The copy's header at the front and only the bytes of its
  // own packet there: the intact packet inside it ends 64 bytes later.
  // With a copy of all but the last byte, the intact packet's header is
  // cut too: first the bytes of any header inside, then its packet.
  struct Wait {
    const char *what;
    Bytes copy;
    std::vector<size_t> waits;  // the NeedData sizes, in turn
  };
  const std::vector<Wait> waits = {
      {"header copy", header_copy, {2 * kHeaderSize + kPayload}},
      {"copy of all but the last byte",
       most_copy,
       {kHeaderSize + kPayload - 1 + kHeaderSize, most_copy.size() + two.size()}},
  };
  for (const Wait &w : waits) {
    SCOPED_TRACE(w.what);
    const Bytes b = stream(w.copy, two, {});
    Parser parser;
    ArrayQueue q(b.data(), one.size() + two.size());
    Parser::Step s = parser.next(q, false);
    ASSERT_EQ(s.kind, Parser::Kind::Packet);
    q.flush(s.bytes);
    for (size_t want : w.waits) {
      s = parser.next(q, false);
      EXPECT_EQ(s.kind, Parser::Kind::NeedData);
      EXPECT_EQ(s.bytes, want);
      const uint64_t checked = parser.checked_bytes();
      s = parser.next(q, false);  // nothing new: not checked again
      EXPECT_EQ(s.kind, Parser::Kind::NeedData);
      EXPECT_EQ(parser.checked_bytes(), checked);
      q.set_size(one.size() + want);
    }
    s = parser.next(q, false);
    EXPECT_EQ(s.kind, Parser::Kind::Skip);
    EXPECT_TRUE(s.damaged);
    EXPECT_TRUE(s.superseded);
    EXPECT_NE(s.problem.find("an intact copy of it follows"), std::string::npos) << s.problem;
  }
}

using testing_util::read_file;

// A version 1 recording made by cudadiffenc before version 2 existed
// (tests/stream/data/README.md says how): I420 32x24, threshold 10, zstd,
// a keyframe every 4 frames, 6 frames of videotestsrc's ball. The pictures
// it decodes to are the codec's definition applied to the recorded input:
// a keyframe is the frame, a delta changes the bytes that differ from the
// picture by more than 10.
TEST(StreamFormat, Version1RecordingStillDecodes) {
  const Bytes stream = read_file(std::string(CUDADIFF_TEST_DATA) + "/v1-i420-32x24-k10-zstd.cdif");
  const Bytes raw = read_file(std::string(CUDADIFF_TEST_DATA) + "/v1-i420-32x24.yuv");
  const size_t n = frame_size_packed(VideoFormat::I420, 32, 24);
  ASSERT_EQ(n, 1152u);
  ASSERT_EQ(raw.size(), 6 * n) << CUDADIFF_TEST_DATA;
  ASSERT_FALSE(stream.empty());
  // Its packets, as written: the stream header with the colorimetry, a
  // predicted zstd keyframe, deltas of differences (thresholds <= 12).
  std::vector<PacketHeader> headers;
  for (size_t at = 0; at + kHeaderSize <= stream.size();) {
    PacketHeader h;
    std::string why;
    ASSERT_EQ(read_header(stream.data() + at, kHeaderSize, &h, &why), HeaderStatus::Ok) << why;
    EXPECT_EQ(h.version, 1);
    headers.push_back(h);
    at += kHeaderSize + h.payload_size;
    if (at == stream.size()) break;
  }
  ASSERT_EQ(headers.size(), 7u);
  EXPECT_EQ(headers[0].flags, kFlagStreamHeader);
  EXPECT_EQ(
      stream_header_value(stream.data() + kHeaderSize, headers[0].payload_size, "colorimetry"),
      "bt601");
  for (size_t i = 1; i < headers.size(); ++i) {
    const bool key = (i - 1) % 4 == 0;
    EXPECT_EQ(headers[i].keyframe(), key) << i;
    EXPECT_EQ(headers[i].flags & ~kFlagCompressed,
              key ? kFlagKeyframe | kFlagPredicted : kFlagDeltaValues)
        << i;
    EXPECT_EQ(headers[i].frame_number, i - 1);
    EXPECT_EQ(headers[i].pts, (i - 1) * 1000000000ull / 30);
    EXPECT_EQ(headers[i].format, VideoFormat::I420);
  }
  EXPECT_TRUE(headers[1].compressed());
  // Decoded, in pieces of every size class.
  for (size_t chunk : {size_t(1), size_t(61), size_t(100000)}) {
    const Decoded d = decode_stream(stream, chunk);
    EXPECT_EQ(d.skips, 0);
    ASSERT_EQ(d.shown.size(), 6u);
    Bytes picture;
    for (size_t f = 0; f < 6; ++f) {
      const uint8_t *in = raw.data() + f * n;
      if (f % 4 == 0) {
        picture.assign(in, in + n);
      } else {
        for (size_t i = 0; i < n; ++i)
          if (std::abs(int(in[i]) - int(picture[i])) > 10) picture[i] = in[i];
      }
      EXPECT_EQ(d.shown[f].first, f);
      EXPECT_EQ(d.shown[f].second, picture) << "frame " << f << ", chunk " << chunk;
    }
  }
}

namespace {
// Frame t of the version 2 recordings of tests/stream/data made with the
// reference classes' rule before tile classes: a textured picture, a box
// moving across tile edges, noise in the lower half (bytes past the
// threshold: temporal blocks over a textured reference).
void old_rec_frame(const FrameView &f, int t) {
  for (int p = 0; p < f.n_planes(); ++p) {
    const int row = int(f.row_bytes(p)), rows = f.plane_height(p);
    for (int y = 0; y < rows; ++y)
      for (int x = 0; x < row; ++x) {
        int v = (x * 9 + y * 5 + 50 * p) % 230 + 10;
        if ((x / 5 + y / 4) % 3 == 0) v = 245 - v / 2;
        const int bx = (5 * t) % std::max(row - 12, 1), by = (3 * t) % std::max(rows - 8, 1);
        if (x >= bx && x < bx + 12 && y >= by && y < by + 8) v = 255 - v;
        const uint32_t r =
            testing_util::mix32(uint32_t(t * 7919 + p * 104729) ^ uint32_t(y * 65537 + x));
        if (y >= rows / 2) v += int(r % 15) - 7;
        f.row(p, y)[x] = uint8_t(std::clamp(v, 0, 255));
      }
  }
}
}  // namespace

// Version 2 recordings made by the CPU encoder before the tile rule of the
// reference classes (body flag 0x02 clear; tests/stream/data/README.md):
// they decode to exactly the pictures that encoder had (their hash), every
// byte within the threshold of the frames they were made from. Read with
// the flag set, the deltas decode to other pictures or not at all, so the
// hash tells the two rules apart.
TEST(StreamFormat, Version2RecordingWithTheOldReferenceClassesStillDecodes) {
  struct Recording {
    const char *file;
    VideoFormat format;
    int w, h, threshold;
    uint64_t pictures_hash;
  };
  const Recording recordings[] = {
      {"v2-old-classes-i420-45x37-k5.cdif", VideoFormat::I420, 45, 37, 5, 0x55b89e375e6c2045ull},
      {"v2-old-classes-bgr-50x34-k10.cdif", VideoFormat::BGR, 50, 34, 10, 0xc3c9c75dbb64fbd9ull},
  };
  auto ctx = Context::cpu();
  for (const Recording &r : recordings) {
    SCOPED_TRACE(r.file);
    const Bytes stream = read_file(std::string(CUDADIFF_TEST_DATA) + "/" + r.file);
    ASSERT_FALSE(stream.empty()) << CUDADIFF_TEST_DATA;
    std::vector<Bytes> bodies;
    for (size_t at = 0; at + kHeaderSize <= stream.size();) {
      PacketHeader h;
      std::string why;
      ASSERT_EQ(read_header(stream.data() + at, kHeaderSize, &h, &why), HeaderStatus::Ok) << why;
      EXPECT_EQ(h.version, kVersion2);
      if (!h.stream_header()) {
        const uint8_t *p = stream.data() + at + kHeaderSize;
        bodies.emplace_back(p, p + h.payload_size);
        codec2::BodyHeader bh;
        ASSERT_TRUE(codec2::read_body_header(p, h.payload_size, &bh, &why)) << why;
        EXPECT_FALSE(bh.tile_classes);
        EXPECT_EQ(bh.keyframe, h.keyframe());
        EXPECT_EQ(h.frame_number, bodies.size() - 1);
      }
      at += kHeaderSize + h.payload_size;
      ASSERT_LE(at, stream.size());
    }
    ASSERT_EQ(bodies.size(), 6u);
    const size_t n = frame_size_packed(r.format, r.w, r.h);
    auto decode = [&](bool tile_classes, std::vector<Bytes> *pictures) {
      auto dec = codec2::Decoder::create(*ctx, r.format, r.w, r.h);
      for (const Bytes &body : bodies) {
        Bytes b = body;
        if (tile_classes) b[0] |= codec2::kBodyTileClasses;
        std::string why;
        HostBytes pic;
        if (!dec->decode(b.data(), b.size(), &why)) {
          pictures->push_back(Bytes());
          continue;
        }
        dec->read_reference(pic);
        pictures->emplace_back(pic.data(), pic.data() + pic.size());
      }
    };
    std::vector<Bytes> pictures, other;
    decode(false, &pictures);
    uint64_t hash = testing_util::kFnvBasis;
    Bytes input(n);
    for (size_t t = 0; t < pictures.size(); ++t) {
      ASSERT_EQ(pictures[t].size(), n) << "frame " << t << " did not decode";
      old_rec_frame(packed_view(r.format, r.w, r.h, input.data()), int(t));
      EXPECT_LE(max_abs_diff(pictures[t], input), r.threshold) << "frame " << t;
      hash = testing_util::fnv1a(hash, pictures[t].data(), n);
    }
    EXPECT_EQ(hash, r.pictures_hash) << std::hex << "0x" << hash;
    // Through the stream reader as cudadiffdec reads it: the same pictures.
    const Decoded d = decode_stream(stream, 97);
    EXPECT_EQ(d.skips, 0);
    ASSERT_EQ(d.shown.size(), pictures.size());
    for (size_t t = 0; t < pictures.size(); ++t) EXPECT_EQ(d.shown[t].second, pictures[t]) << t;
    decode(true, &other);
    int differ = 0;
    for (size_t t = 0; t < pictures.size(); ++t) differ += other[t] != pictures[t];
    EXPECT_GT(differ, 0);
  }
}

// The version 2 example: the same pictures as the version 1 example, at
// threshold 2, coded by the codec2 core.
TEST(StreamFormat, DocumentedVersion2ExampleBytes) {
  auto ctx = Context::cpu();
  auto enc = codec2::Encoder::create(*ctx, VideoFormat::GRAY8, 40, 1);
  testing_util::HostFrame key(VideoFormat::GRAY8, 40, 1);
  testing_util::fill_value(key, 100);
  HostBytes body;
  enc->encode(key.view, 2, true, body);
  Writer w;
  FrameInfo info = gray40(true, 0, 0);
  info.version = kVersion2;
  const Bytes sh = Writer::stream_header(VideoFormat::GRAY8, 40, 1, 30, 1, "", kVersion2);
  const Bytes k = packet(w, info, Bytes(body.data(), body.data() + body.size()));
  testing_util::HostFrame next = key;
  uint8_t *row = next.view.data[0];
  row[0] = row[5] = row[33] = row[39] = 130;
  row[10] = 120;
  row[11] = 79;
  enc->encode(next.view, 2, false, body);
  info = gray40(false, 1, 33333333);
  info.version = kVersion2;
  const Bytes d = packet(w, info, Bytes(body.data(), body.data() + body.size()));
  const std::string dumps =
      doc_dump("stream header", sh) + doc_dump("keyframe", k) + doc_dump("delta", d);
  EXPECT_EQ(sh, hex(kDocV2StreamHeader)) << dumps;
  EXPECT_EQ(k, hex(kDocV2Keyframe)) << dumps;
  EXPECT_EQ(d, hex(kDocV2Delta)) << dumps;
  // What the decoder shows: 99 everywhere (the keyframe's k = 1: 100 is 1
  // from the nearest value 3u), then 129 at 0, 5, 33, 39, 119 at 10 and 79
  // at 11 (the delta's values 99 + 5q).
  Decoded dec = decode_stream(concat({sh, k, d}), 7);
  ASSERT_EQ(dec.shown.size(), 2u);
  EXPECT_EQ(dec.shown[0].second, Bytes(40, 99));
  Bytes want(40, 99);
  want[0] = want[5] = want[33] = want[39] = 129;
  want[10] = 119;
  want[11] = 79;
  EXPECT_EQ(dec.shown[1].second, want);
}
