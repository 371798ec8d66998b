// The stream parser (cudadiffdec's and cudadiffparse's) on a byte stream
// fed in pieces, as a network delivers it: CPU time per byte for packets of
// several sizes. Payloads are random bytes (compressed bodies look so) with
// right checksums, so every packet passes; the time is the parser's: the
// scan for packets inside a packet while its bytes come, and the payload's
// checksum once it is whole.
//
//   bench_parser [--mb N] [--runs N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cudadiffstream.h"

using namespace cudadiff;
using namespace cudadiff::stream;

namespace {

std::vector<uint8_t> make_stream(size_t packet, size_t total, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> b;
  b.reserve(total + packet + kHeaderSize);
  uint64_t frame = 0;
  while (b.size() < total) {
    const size_t at = b.size();
    b.resize(at + kHeaderSize + packet);
    for (size_t i = at + kHeaderSize; i < b.size(); i += 4) {
      const uint32_t v = gen();
      std::memcpy(&b[i], &v, std::min<size_t>(4, b.size() - i));
    }
    PacketHeader h;
    h.flags = kFlagKeyframe;
    h.format = VideoFormat::GRAY8;
    h.frame_number = frame++;
    h.width = 1000;  // (packet: a multiple of 1000)
    h.height = uint32_t(packet / 1000);
    h.payload_size = h.body_size = uint32_t(packet);
    h.fps_n = 30;
    h.payload_crc = crc32(&b[at + kHeaderSize], packet);
    write_header(h, &b[at]);
  }
  return b;
}

// Seconds to parse `b` fed `piece` bytes at a time; every packet must pass.
double parse(const std::vector<uint8_t> &b, size_t piece, size_t packets) {
  Parser parser;
  ArrayQueue q(b.data(), 0);
  size_t fed = 0, passed = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const bool eos = fed == b.size();
    const Parser::Step s = parser.next(q, eos);
    if (s.kind == Parser::Kind::NeedData) {
      if (eos) break;
      fed = std::min(b.size(), fed + piece);
      q.set_size(fed);
      continue;
    }
    passed += s.kind == Parser::Kind::Packet;
    q.flush(s.bytes);
  }
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (passed != packets) {
    std::fprintf(stderr, "%zu of %zu packets passed\n", passed, packets);
    std::exit(1);
  }
  return t;
}

}  // namespace

int main(int argc, char **argv) {
  size_t mb = 256;
  int runs = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--mb") mb = size_t(std::atoi(argv[i + 1]));
    if (std::string(argv[i]) == "--runs") runs = std::atoi(argv[i + 1]);
  }
  std::printf("%zu MB per stream, best of %d runs; GB/s of stream bytes parsed\n", mb, runs);
  std::printf("%10s %8s %10s\n", "packet", "piece", "GB/s");
  for (size_t packet : {size_t(2000), size_t(50000), size_t(4000000)}) {
    const std::vector<uint8_t> b = make_stream(packet, mb << 20, 1);
    const size_t packets = b.size() / (kHeaderSize + packet);
    for (size_t piece : {size_t(1448), size_t(65536), b.size()}) {
      double best = 1e30;
      for (int r = 0; r < runs; ++r) best = std::min(best, parse(b, piece, packets));
      std::printf("%10zu %8s %10.2f\n", packet,
                  piece == b.size() ? "all" : std::to_string(piece).c_str(),
                  double(b.size()) / best / 1e9);
    }
  }
  return 0;
}
