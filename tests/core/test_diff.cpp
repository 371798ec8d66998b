// Difference codec, the reference: hand-made bodies, the checks of
// parse_delta, and round trips (lossless at threshold 0, every byte within
// the threshold otherwise, decoder == encoder reference).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cudadiff/diff.h"
#include "frames.h"

using namespace cudadiff;
using namespace cudadiff::diff;
using testing_util::bytes_of;
using testing_util::HostFrame;
using testing_util::packed_bytes;

namespace {

std::unique_ptr<Context> cpu = Context::cpu();

}  // namespace

TEST(DiffCpu, HandMadeDelta) {
  HostFrame key(VideoFormat::GRAY8, 40, 1, 3);
  testing_util::fill_value(key, 100);
  auto enc = DiffEncoder::create(*cpu, VideoFormat::GRAY8, 40, 1);
  HostBytes body;
  enc->keyframe(key.view, body);
  EXPECT_EQ(bytes_of(body), std::vector<uint8_t>(40, 100));

  HostFrame next = key;
  uint8_t *row = next.view.data[0];
  row[0] = 130;
  row[5] = 130;
  row[10] = 120;  // +20: not above the threshold
  row[11] = 79;   // -21
  row[33] = 130;
  row[39] = 130;
  const DeltaSummary s = enc->delta(next.view, 20, ValueMode::Values, body);
  EXPECT_EQ(s.changed_bytes, 5u);
  EXPECT_EQ(s.changed_blocks, 2u);
  EXPECT_EQ(s.changed_superblocks, 1u);
  const std::vector<uint8_t> want = {0x01,                    // superblock 0 changed
                                     0x03, 0x00, 0x00, 0x00,  // blocks 0 and 1
                                     0x21, 0x08, 0x00, 0x00,  // block 0: bytes 0, 5, 11
                                     0x82, 0x00, 0x00, 0x00,  // block 1: bytes 33, 39
                                     130,  130,  79,   130,  130};
  EXPECT_EQ(bytes_of(body), want);

  HostBytes ref;
  enc->read_reference(ref);
  std::vector<uint8_t> want_ref(40, 100);
  want_ref[0] = want_ref[5] = want_ref[33] = want_ref[39] = 130;
  want_ref[11] = 79;
  EXPECT_EQ(bytes_of(ref), want_ref);  // byte 10 keeps 100: the "negative feedback"

  // Deltas mode: (new - old) mod 256. Same change again from the new reference.
  auto enc2 = DiffEncoder::create(*cpu, VideoFormat::GRAY8, 40, 1);
  enc2->keyframe(key.view, body);
  enc2->delta(next.view, 20, ValueMode::Deltas, body);
  std::vector<uint8_t> want_d = want;
  want_d[13] = 30;
  want_d[14] = 30;
  want_d[15] = 235;
  want_d[16] = 30;
  want_d[17] = 30;
  EXPECT_EQ(bytes_of(body), want_d);

  // Decoding both gives the encoder's reference.
  for (auto [mode, b] :
       {std::make_pair(ValueMode::Values, want), std::make_pair(ValueMode::Deltas, want_d)}) {
    auto dec = DiffDecoder::create(*cpu, VideoFormat::GRAY8, 40, 1);
    dec->keyframe(std::vector<uint8_t>(40, 100).data());
    DeltaIndex idx;
    std::string err;
    std::vector<SuperblockEntry> entries;
    ASSERT_TRUE(parse_delta(b.data(), b.size(), 40, &idx, &err, &entries)) << err;
    EXPECT_EQ(idx.summary.changed_bytes, 5u);
    EXPECT_EQ(idx.values_offset, 13u);
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_EQ(entries[0].super, 0u);
    EXPECT_EQ(entries[0].super_mask, 3u);
    EXPECT_EQ(entries[0].first_block, 0u);
    EXPECT_EQ(entries[0].first_value, 0u);
    EXPECT_EQ(idx.entries, entries.data());
    dec->delta(b.data(), idx, mode);
    HostFrame out(VideoFormat::GRAY8, 40, 1, 5);
    dec->write_frame(out.view);
    EXPECT_EQ(packed_bytes(out.view), want_ref);
    EXPECT_TRUE(out.padding_intact());
  }
}

TEST(DiffCpu, NothingChangedIsJustTheBitmap) {
  HostFrame f(VideoFormat::BGR, 500, 3);  // 4500 bytes: 5 superblocks
  testing_util::fill_random(f);
  auto enc = DiffEncoder::create(*cpu, VideoFormat::BGR, 500, 3);
  HostBytes body;
  enc->keyframe(f.view, body);
  EXPECT_EQ(body.size(), 4500u);
  const DeltaSummary s = enc->delta(f.view, 0, ValueMode::Values, body);
  EXPECT_EQ(s.changed_bytes, 0u);
  EXPECT_EQ(bytes_of(body), std::vector<uint8_t>(1, 0));
  EXPECT_EQ(bitmap_bytes(4500), 1u);
  EXPECT_EQ(max_delta_body_size(4500), 1u + 5 * 4 + 141 * 4 + 4500);
}

TEST(DiffCpu, ParseRejectsMalformedBodies) {
  const size_t n = 40;
  const std::vector<uint8_t> good = {0x01, 0x03, 0, 0, 0,   0x21, 0x08, 0,   0,
                                     0x82, 0,    0, 0, 130, 130,  79,   130, 130};
  DeltaIndex idx;
  std::string err;
  ASSERT_TRUE(parse_delta(good.data(), good.size(), n, &idx, &err)) << err;
  // Every truncation fails, and so does an extra byte.
  for (size_t len = 0; len < good.size(); ++len)
    EXPECT_FALSE(parse_delta(good.data(), len, n, &idx, &err)) << len;
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  EXPECT_FALSE(parse_delta(longer.data(), longer.size(), n, &idx, &err));
  EXPECT_NE(err.find("does not match"), std::string::npos) << err;
  // A superblock past the frame.
  std::vector<uint8_t> b = good;
  b[0] = 0x03;
  EXPECT_FALSE(parse_delta(b.data(), b.size(), n, &idx, &err));
  // An empty superblock mask.
  b = {0x01, 0, 0, 0, 0};
  EXPECT_FALSE(parse_delta(b.data(), b.size(), n, &idx, &err));
  EXPECT_NE(err.find("empty superblock"), std::string::npos) << err;
  // A block past the frame (block 2 starts at byte 64 > 40).
  b = good;
  b[1] = 0x07;
  EXPECT_FALSE(parse_delta(b.data(), b.size(), n, &idx, &err));
  // A byte past the frame: bit 8 of block 1 is byte 40.
  b = good;
  b[10] = 0x01;
  EXPECT_FALSE(parse_delta(b.data(), b.size(), n, &idx, &err));
  EXPECT_NE(err.find("past the frame"), std::string::npos) << err;
  // An empty block mask.
  b = good;
  b[9] = 0;
  EXPECT_FALSE(parse_delta(b.data(), b.size(), n, &idx, &err));
  // A zero frame size.
  EXPECT_FALSE(parse_delta(good.data(), good.size(), 0, &idx, &err));
}

namespace {

// A moving bright square plus per-byte noise on a random background.
void make_sequence_frame(HostFrame &f, const HostFrame &background, int t, std::mt19937 &gen) {
  std::uniform_int_distribution<int> noise(-25, 25);
  for (int p = 0; p < f.view.n_planes(); ++p) {
    const size_t row = f.view.row_bytes(p);
    for (int y = 0; y < f.view.plane_height(p); ++y)
      for (size_t x = 0; x < row; ++x) {
        int v = background.view.row(p, y)[x];
        if ((gen() & 7) == 0) v += noise(gen);
        const int sq_x = (3 * t) % std::max<size_t>(1, row),
                  sq_y = t % std::max(1, f.view.plane_height(p));
        if (x >= size_t(sq_x) && x < size_t(sq_x) + 12 && y >= sq_y && y < sq_y + 4) v = 255 - v;
        f.view.row(p, y)[x] = static_cast<uint8_t>(std::clamp(v, 0, 255));
      }
  }
}

void round_trip(VideoFormat fmt, int w, int h, int threshold, ValueMode mode) {
  std::mt19937 &gen = testing_util::rng();
  HostFrame background(fmt, w, h);
  testing_util::fill_random(background, gen);
  auto enc = DiffEncoder::create(*cpu, fmt, w, h);
  auto dec = DiffDecoder::create(*cpu, fmt, w, h);
  HostBytes body, ref;
  for (int t = 0; t < 6; ++t) {
    HostFrame frame(fmt, w, h, 9);
    make_sequence_frame(frame, background, t, gen);
    if (t == 0) {
      enc->keyframe(frame.view, body);
      ASSERT_EQ(body.size(), enc->frame_bytes());
      dec->keyframe(body.data());
    } else {
      enc->delta(frame.view, threshold, mode, body);
      DeltaIndex idx;
      std::string err;
      ASSERT_TRUE(parse_delta(body.data(), body.size(), enc->frame_bytes(), &idx, &err)) << err;
      dec->delta(body.data(), idx, mode);
    }
    HostFrame out(fmt, w, h, 4);
    dec->write_frame(out.view);
    enc->read_reference(ref);
    ASSERT_EQ(packed_bytes(out.view), bytes_of(ref)) << "decoder == encoder reference";
    ASSERT_LE(testing_util::max_abs_difference(out.view, frame.view), threshold)
        << format_name(fmt) << " " << w << "x" << h << " frame " << t;
    ASSERT_TRUE(out.padding_intact());
  }
}

}  // namespace

TEST(DiffCpu, RoundTripsEveryFormatOddSizes) {
  const VideoFormat formats[] = {VideoFormat::BGR,   VideoFormat::RGBA, VideoFormat::xRGB,
                                 VideoFormat::GRAY8, VideoFormat::I420, VideoFormat::YV12,
                                 VideoFormat::NV12,  VideoFormat::NV21, VideoFormat::YUY2,
                                 VideoFormat::UYVY,  VideoFormat::Y444, VideoFormat::Y42B};
  const int sizes[][2] = {{1, 1}, {3, 1}, {1, 5}, {33, 17}, {97, 31}, {640, 48}};
  for (VideoFormat f : formats)
    for (const auto &sz : sizes)
      for (int thr : {0, 20}) {
        round_trip(f, sz[0], sz[1], thr, ValueMode::Values);
        round_trip(f, sz[0], sz[1], thr, ValueMode::Deltas);
      }
}

TEST(DiffCpu, RejectsMismatchedFrames) {
  auto enc = DiffEncoder::create(*cpu, VideoFormat::BGR, 8, 8);
  HostFrame wrong(VideoFormat::BGR, 8, 7);
  HostBytes body;
  EXPECT_THROW(enc->keyframe(wrong.view, body), Error);
  HostFrame right(VideoFormat::BGR, 8, 8);
  EXPECT_THROW(enc->delta(right.view, 256, ValueMode::Values, body), Error);
  EXPECT_THROW(DiffEncoder::create(*cpu, VideoFormat::Unknown, 8, 8), Error);
  EXPECT_THROW(DiffDecoder::create(*cpu, VideoFormat::BGR, 0, 8), Error);
}

// The CPU backend's frames in flight (the base class's submit/collect): the
// bodies of delta() one after the other, collected in submission order; the
// limits of the queue are errors.
TEST(DiffCpu, FramesInFlightGiveTheSequentialBodies) {
  const VideoFormat fmt = VideoFormat::I420;
  const int w = 97, h = 31, thr = 20;
  std::mt19937 &gen = testing_util::rng();
  HostFrame background(fmt, w, h);
  testing_util::fill_random(background, gen);
  std::vector<std::unique_ptr<HostFrame>> input;
  for (int t = 0; t < 7; ++t) {
    input.push_back(std::make_unique<HostFrame>(fmt, w, h, 3));
    make_sequence_frame(*input.back(), background, t, gen);
  }
  auto seq = DiffEncoder::create(*cpu, fmt, w, h);
  auto pipe = DiffEncoder::create(*cpu, fmt, w, h);
  HostBytes body, expected;
  seq->keyframe(input[0]->view, expected);
  pipe->keyframe(input[0]->view, body);
  EXPECT_THROW(pipe->collect_delta(body), Error);
  pipe->submit_delta_host(input[1]->view, thr, ValueMode::Deltas);
  for (int t = 1; t < 7; ++t) {
    if (t + 1 < 7) {
      pipe->submit_delta_host(input[t + 1]->view, thr, ValueMode::Deltas);
      EXPECT_EQ(pipe->in_flight(), 2);
      EXPECT_THROW(pipe->submit_delta_host(input[t]->view, thr, ValueMode::Deltas), Error);
      EXPECT_THROW(pipe->keyframe(input[t]->view, body), Error);
      EXPECT_THROW(pipe->delta(input[t]->view, thr, ValueMode::Deltas, body), Error);
      EXPECT_EQ(pipe->in_flight(), 2) << "a refused call leaves the queue as it was";
    }
    const DeltaSummary ps = pipe->collect_delta(body);
    const DeltaSummary ss = seq->delta(input[t]->view, thr, ValueMode::Deltas, expected);
    EXPECT_EQ(ps.changed_bytes, ss.changed_bytes);
    ASSERT_EQ(bytes_of(body), bytes_of(expected)) << "frame " << t;
  }
  EXPECT_EQ(pipe->in_flight(), 0);
  // A submission that fails (bad threshold) leaves nothing in flight.
  EXPECT_THROW(pipe->submit_delta_host(input[0]->view, 256, ValueMode::Values), Error);
  EXPECT_EQ(pipe->in_flight(), 0);
  HostBytes a, b;
  seq->read_reference(a);
  pipe->read_reference(b);
  EXPECT_EQ(bytes_of(a), bytes_of(b));
}

// The CPU decoder's frames in flight (the base class's submit/wait): frames
// are written at submission; the queue's limits are errors.
TEST(DiffCpu, DecoderFramesInFlight) {
  const VideoFormat fmt = VideoFormat::YUY2;
  const int w = 10, h = 3;
  auto dec = DiffDecoder::create(*cpu, fmt, w, h);
  std::vector<uint8_t> key(dec->frame_bytes());
  for (size_t i = 0; i < key.size(); ++i) key[i] = uint8_t(i * 7);
  dec->keyframe(key.data());
  HostFrame a(fmt, w, h, 2), b(fmt, w, h, 2);
  EXPECT_THROW(dec->wait_frame(), Error);
  dec->submit_write_frame(a.view);
  EXPECT_EQ(packed_bytes(a.view), key) << "written at submission";
  dec->submit_write_frame(b.view);
  EXPECT_EQ(dec->frames_in_flight(), 2);
  EXPECT_THROW(dec->submit_write_frame(a.view), Error);
  dec->wait_frame();
  dec->wait_frame();
  EXPECT_EQ(dec->frames_in_flight(), 0);
  EXPECT_EQ(packed_bytes(b.view), key);
  EXPECT_TRUE(a.padding_intact());
}
