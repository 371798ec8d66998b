// The fuzz target as a plain meson test: replays every file of a corpus, then
// runs random structure-aware mutations of them for a bounded time (seed
// printed; FUZZ_SEED replays a run). With --write-corpus DIR it writes the
// seed corpus (small valid streams made by the writer) instead.
//
//   fuzz_stream_replay CORPUS_DIR [SECONDS]
//   fuzz_stream_replay --write-corpus DIR
#include <dirent.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cudadiff/codec2.h"
#include "cudadiff/diff.h"
#include "cudadiffstream.h"
#include "fuzz_stream.h"

using namespace cudadiff;
using Bytes = std::vector<uint8_t>;

namespace {

Bytes read_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A valid stream: a stream header, then frames of a moving, noisy picture;
// the first byte is the fuzz target's chunking byte.
Bytes make_stream(VideoFormat fmt, int w, int h, int frames, stream::Compression c, int threshold,
                  int keyframe_interval, uint8_t chunking, uint32_t seed) {
  std::mt19937 gen(seed);
  auto ctx = Context::cpu();
  auto enc = diff::DiffEncoder::create(*ctx, fmt, w, h);
  stream::Writer writer;
  writer.set_compression(c, 3);
  Bytes out(1, chunking), frame(frame_size_packed(fmt, w, h));
  for (auto &b : frame) b = uint8_t(gen());
  const std::vector<uint8_t> sh =
      stream::Writer::stream_header(fmt, w, h, 30, 1, "colorimetry=bt601\n");
  out.insert(out.end(), sh.begin(), sh.end());
  HostBytes body;
  for (int t = 0; t < frames; ++t) {
    for (size_t i = 0; i < frame.size(); ++i) {
      if (gen() % 4 == 0) frame[i] = uint8_t(frame[i] + int(gen() % 41) - 20);
      if (i % 53 == size_t(t)) frame[i] = uint8_t(frame[i] + 128);
    }
    const FrameView view = packed_view(fmt, w, h, frame.data());
    stream::FrameInfo info;
    info.keyframe = t % keyframe_interval == 0;
    info.mode = stream::choose_value_mode(c, threshold);
    info.frame_number = uint64_t(t);
    info.pts = uint64_t(t) * 33333333;
    info.duration = 33333333;
    info.format = fmt;
    info.width = w;
    info.height = h;
    info.fps_n = 30;
    if (info.keyframe)
      enc->keyframe(view, body);
    else
      enc->delta(view, threshold, info.mode, body);
    const size_t at = out.size();
    out.resize(at + writer.prepare(info, body.data(), body.size()));
    writer.write(out.data() + at);
  }
  return out;
}

// A valid version 2 stream: a smooth picture with noise and a moving bright
// box (coded tiles, every block mode), optionally with a tile geometry of
// its own (more tiles, skipped tiles); the first byte is the chunking byte.
Bytes make_stream2(VideoFormat fmt, int w, int h, int frames, int threshold, int keyframe_interval,
                   uint8_t chunking, uint32_t seed, const codec2::Geometry *geometry = nullptr) {
  std::mt19937 gen(seed);
  auto ctx = Context::cpu();
  auto enc = codec2::Encoder::create(*ctx, fmt, w, h, geometry);
  stream::Writer writer;
  Bytes out(1, chunking), frame(frame_size_packed(fmt, w, h));
  const std::vector<uint8_t> sh =
      stream::Writer::stream_header(fmt, w, h, 30, 1, "colorimetry=bt601\n", stream::kVersion2);
  out.insert(out.end(), sh.begin(), sh.end());
  HostBytes body;
  for (int t = 0; t < frames; ++t) {
    for (size_t i = 0; i < frame.size(); ++i) {
      const size_t x = i % 23, y = i / 23;
      int v = int(x * 7 + y * 3) + int(gen() % 9) - 4;
      if (x >= size_t(t) * 3 % 20 && x < size_t(t) * 3 % 20 + 4 && y % 5 < 2) v = 240;
      frame[i] = uint8_t(std::min(255, std::max(0, v)));
    }
    const FrameView view = packed_view(fmt, w, h, frame.data());
    stream::FrameInfo info;
    info.version = stream::kVersion2;
    info.keyframe = t % keyframe_interval == 0;
    info.frame_number = uint64_t(t);
    info.pts = uint64_t(t) * 33333333;
    info.duration = 33333333;
    info.format = fmt;
    info.width = w;
    info.height = h;
    info.fps_n = 30;
    enc->encode(view, threshold, info.keyframe, body);
    const size_t at = out.size();
    out.resize(at + writer.prepare(info, body.data(), body.size()));
    writer.write(out.data() + at);
  }
  return out;
}

// Writes the generated part of the corpus. Other files of the directory stay:
// the v2-old-classes-* streams (made before the tile rule of the reference
// classes, body flag 0x02 clear, which this encoder no longer writes) and
// inputs the fuzzer found.
int write_corpus(const std::string &dir) {
  const stream::Compression zstd =
      stream::have_zstd() ? stream::Compression::Zstd : stream::Compression::None;
  const codec2::Geometry one_block_tiles{1, 1}, narrow_tiles{1, 2};
  codec2::Geometry tans_lanes{2, 2, 64};  // body flag 0x04: tANS lanes, several per tile
  tans_lanes.tans_lanes = true;
  struct Item {
    const char *name;
    Bytes data;
  };
  std::vector<Item> items = {
      {"gray8-40x1-none.cdif",
       make_stream(VideoFormat::GRAY8, 40, 1, 4, stream::Compression::None, 20, 8, 0, 1)},
      {"bgr-13x5-zstd-lossless.cdif", make_stream(VideoFormat::BGR, 13, 5, 5, zstd, 0, 3, 3, 2)},
      {"i420-9x7-zstd.cdif", make_stream(VideoFormat::I420, 9, 7, 4, zstd, 20, 4, 255, 3)},
      {"nv12-6x4-none.cdif",
       make_stream(VideoFormat::NV12, 6, 4, 4, stream::Compression::None, 20, 2, 1, 4)},
      {"rgba-33x33-none.cdif",
       make_stream(VideoFormat::RGBA, 33, 33, 3, stream::Compression::None, 5, 3, 40, 5)},
      {"yuy2-7x3-zstd.cdif", make_stream(VideoFormat::YUY2, 7, 3, 4, zstd, 12, 2, 9, 6)},
      // Version 2.
      {"v2-gray8-40x1-k2.cdif", make_stream2(VideoFormat::GRAY8, 40, 1, 3, 2, 8, 0, 7)},
      {"v2-bgr-13x5-k0.cdif", make_stream2(VideoFormat::BGR, 13, 5, 5, 0, 3, 3, 8)},
      {"v2-i420-37x21-k20.cdif", make_stream2(VideoFormat::I420, 37, 21, 4, 20, 4, 255, 9)},
      {"v2-nv12-34x18-k5-tiles1x1.cdif",
       make_stream2(VideoFormat::NV12, 34, 18, 4, 5, 4, 1, 10, &one_block_tiles)},
      {"v2-rgba-33x33-k5.cdif", make_stream2(VideoFormat::RGBA, 33, 33, 4, 5, 3, 40, 11)},
      {"v2-argb-18x18-k7-tiles1x2.cdif",
       make_stream2(VideoFormat::ARGB, 18, 18, 3, 7, 3, 17, 12, &narrow_tiles)},
      {"v2-yuy2-40x16-k12.cdif", make_stream2(VideoFormat::YUY2, 40, 16, 4, 12, 2, 9, 13)},
      {"v2-uyvy-9x5-k1.cdif", make_stream2(VideoFormat::UYVY, 9, 5, 3, 1, 2, 2, 14)},
      {"v2-y444-16x16-k1.cdif", make_stream2(VideoFormat::Y444, 16, 16, 3, 1, 3, 5, 15)},
      {"v2-y42b-20x10-k3.cdif", make_stream2(VideoFormat::Y42B, 20, 10, 3, 3, 3, 60, 16)},
      {"v2-gray8-128x64-k0-lanes.cdif",
       make_stream2(VideoFormat::GRAY8, 128, 64, 2, 0, 2, 200, 17)},
      {"v2-bgr-37x21-k5-tans.cdif",
       make_stream2(VideoFormat::BGR, 37, 21, 4, 5, 3, 30, 20, &tans_lanes)},
      {"v2-i420-35x29-k0-tans.cdif",
       make_stream2(VideoFormat::I420, 35, 29, 3, 0, 2, 70, 21, &tans_lanes)},
  };
  // A sender restarted with the other version: version 1, then version 2.
  {
    Bytes mixed =
        make_stream(VideoFormat::GRAY8, 24, 8, 3, stream::Compression::None, 10, 2, 5, 18);
    const Bytes v2 = make_stream2(VideoFormat::GRAY8, 24, 8, 3, 10, 2, 5, 19);
    mixed.insert(mixed.end(), v2.begin() + 1, v2.end());
    items.push_back({"v1-then-v2-gray8-24x8.cdif", mixed});
  }
  for (const Item &item : items) {
    const std::string path = dir + "/" + item.name;
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char *>(item.data.data()), std::streamsize(item.data.size()));
    std::printf("wrote %s (%zu bytes)\n", path.c_str(), item.data.size());
  }
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc == 3 && std::string(argv[1]) == "--write-corpus") return write_corpus(argv[2]);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR [SECONDS] | --write-corpus DIR\n", argv[0]);
    return 2;
  }
  const double seconds = argc > 2 ? std::atof(argv[2]) : 3.0;
  std::vector<Bytes> corpus;
  if (DIR *dir = opendir(argv[1])) {
    while (dirent *e = readdir(dir))
      if (e->d_name[0] != '.') corpus.push_back(read_file(std::string(argv[1]) + "/" + e->d_name));
    closedir(dir);
  }
  if (corpus.empty()) {
    std::fprintf(stderr, "no corpus files in %s\n", argv[1]);
    return 1;
  }
  for (const Bytes &b : corpus) LLVMFuzzerTestOneInput(b.data(), b.size());
  std::printf("replayed %zu corpus files\n", corpus.size());

  uint32_t seed = std::random_device{}();
  if (const char *env = std::getenv("FUZZ_SEED")) seed = uint32_t(std::strtoul(env, nullptr, 0));
  std::printf("random seed: %u (replay with FUZZ_SEED=%u)\n", seed, seed);
  std::fflush(stdout);
  std::mt19937 gen(seed);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  long runs = 0;
  while (std::chrono::steady_clock::now() < end) {
    Bytes input = corpus[gen() % corpus.size()];
    // A few stacked mutations, each one run.
    for (int k = 0, m = 1 + int(gen() % 4); k < m; ++k) {
      fuzz::mutate(input, corpus[gen() % corpus.size()], gen);
      LLVMFuzzerTestOneInput(input.data(), input.size());
      ++runs;
    }
  }
  std::printf("%ld mutated inputs in %.1f s: no crash, no write outside a frame\n", runs, seconds);
  return 0;
}
