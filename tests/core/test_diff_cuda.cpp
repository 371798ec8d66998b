// Difference codec: the CUDA encoder writes the same bodies as the CPU
// reference, byte for byte, and the CUDA decoder rebuilds the same frames.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cudadiff/diff.h"
#include "frames.h"

using namespace cudadiff;
using namespace cudadiff::diff;
using testing_util::bytes_of;
using testing_util::HostFrame;

namespace {

// Frames of a sequence: background, noise on a fraction of bytes, a moving block.
void next_frame(HostFrame &f, const HostFrame &bg, int t, double noise_fraction,
                std::mt19937 &gen) {
  std::uniform_real_distribution<double> u(0, 1);
  std::uniform_int_distribution<int> noise(-40, 40);
  for (int p = 0; p < f.view.n_planes(); ++p) {
    const size_t row = f.view.row_bytes(p);
    for (int y = 0; y < f.view.plane_height(p); ++y)
      for (size_t x = 0; x < row; ++x) {
        int v = bg.view.row(p, y)[x];
        if (u(gen) < noise_fraction) v += noise(gen);
        if ((x / 64 + y / 16 + t) % 11 == 0) v += 60;
        f.view.row(p, y)[x] = static_cast<uint8_t>(std::clamp(v, 0, 255));
      }
  }
}

struct Pair {
  std::unique_ptr<Context> cpu = Context::cpu();
  std::unique_ptr<Context> gpu = Context::cuda(0);
};

// How the CUDA encoder gets its frames: a packed device frame, a strided
// device frame, or the host frame itself (uploaded in slices).
enum class Input { DevicePacked, DeviceStrided, Host };

void compare(VideoFormat fmt, int w, int h, int thr, ValueMode mode, double noise, Input input,
             int frames = 5) {
  Pair ctx;
  std::mt19937 &gen = testing_util::rng();
  HostFrame bg(fmt, w, h);
  testing_util::fill_random(bg, gen);
  auto cenc = DiffEncoder::create(*ctx.cpu, fmt, w, h);
  auto genc = DiffEncoder::create(*ctx.gpu, fmt, w, h);
  auto cdec = DiffDecoder::create(*ctx.cpu, fmt, w, h);
  auto gdec = DiffDecoder::create(*ctx.gpu, fmt, w, h);
  const size_t n = frame_size_packed(fmt, w, h);
  DeviceBuffer packed_in(n);
  HostBytes cbody, gbody, cref, gref;
  for (int t = 0; t < frames; ++t) {
    HostFrame frame(fmt, w, h, 5);
    next_frame(frame, bg, t, noise, gen);
    DeviceFrame strided;
    FrameView dview;
    if (input == Input::DevicePacked) {
      dview = packed_view(fmt, w, h, packed_in.data());
      copy_to_device(frame.view, dview, *ctx.gpu);
    } else if (input == Input::DeviceStrided) {
      strided = testing_util::upload(frame, *ctx.gpu);
      dview = strided.view();
    }
    if (t == 0) {
      cenc->keyframe(frame.view, cbody);
      if (input == Input::Host)
        genc->keyframe_host(frame.view, gbody);
      else
        genc->keyframe(dview, gbody);
      ASSERT_EQ(bytes_of(cbody), bytes_of(gbody));
      cdec->keyframe(cbody.data());
      gdec->keyframe(gbody.data());
    } else {
      const DeltaSummary cs = cenc->delta(frame.view, thr, mode, cbody);
      const DeltaSummary gs = input == Input::Host ? genc->delta_host(frame.view, thr, mode, gbody)
                                                   : genc->delta(dview, thr, mode, gbody);
      ASSERT_EQ(cs.changed_bytes, gs.changed_bytes);
      ASSERT_EQ(cs.changed_blocks, gs.changed_blocks);
      ASSERT_EQ(cs.changed_superblocks, gs.changed_superblocks);
      ASSERT_EQ(cbody.size(), gbody.size()) << format_name(fmt) << " " << w << "x" << h;
      ASSERT_TRUE(std::equal(cbody.data(), cbody.data() + cbody.size(), gbody.data()))
          << format_name(fmt) << " " << w << "x" << h << " frame " << t << ": bodies differ";
      DeltaIndex idx;
      std::string err;
      std::vector<SuperblockEntry> entries;  // listed by the reader on some frames
      ASSERT_TRUE(
          parse_delta(gbody.data(), gbody.size(), n, &idx, &err, t % 3 ? &entries : nullptr))
          << err;
      cdec->delta(cbody.data(), idx, mode);
      if (t % 2) {
        gdec->delta(gbody.data(), idx, mode);  // pinned: read in place
      } else {
        const std::vector<uint8_t> pageable = bytes_of(gbody);  // staged, then freed
        gdec->delta(pageable.data(), idx, mode);
      }
    }
    cenc->read_reference(cref);
    genc->read_reference(gref);
    ASSERT_EQ(bytes_of(cref), bytes_of(gref));
    HostFrame cout(fmt, w, h, 3), gout(fmt, w, h, 7);
    cdec->write_frame(cout.view);
    gdec->write_frame(gout.view);
    ASSERT_EQ(testing_util::compare_frames(cout.view, gout.view), "");
    ASSERT_LE(testing_util::max_abs_difference(gout.view, frame.view), thr);
    ASSERT_TRUE(gout.padding_intact());
  }
}

}  // namespace

TEST(DiffCuda, SmallAndOddSizes) {
  const VideoFormat formats[] = {VideoFormat::BGR,  VideoFormat::GRAY8, VideoFormat::I420,
                                 VideoFormat::NV12, VideoFormat::YUY2,  VideoFormat::RGBA};
  const int sizes[][2] = {{1, 1}, {3, 1}, {5, 7}, {33, 17}, {341, 9}, {640, 480}};
  for (VideoFormat f : formats)
    for (const auto &sz : sizes)
      for (int thr : {0, 20})
        for (Input in : {Input::DevicePacked, Input::DeviceStrided, Input::Host}) {
          compare(f, sz[0], sz[1], thr, ValueMode::Values, 0.06, in);
          compare(f, sz[0], sz[1], thr, ValueMode::Deltas, 0.06, in);
        }
}

TEST(DiffCuda, FullHdBgr) {
  compare(VideoFormat::BGR, 1920, 1080, 20, ValueMode::Values, 0.06, Input::DevicePacked, 4);
  compare(VideoFormat::BGR, 1920, 1080, 20, ValueMode::Values, 0.06, Input::Host, 4);
  compare(VideoFormat::BGR, 1920, 1080, 0, ValueMode::Deltas, 0.5, Input::DeviceStrided, 3);
  compare(VideoFormat::I420, 1919, 1081, 0, ValueMode::Deltas, 0.5, Input::Host, 3);
  compare(VideoFormat::BGR, 1920, 1080, 255, ValueMode::Values, 1.0, Input::Host, 3);  // no change
}

// Frames in flight: submitting frame t+1 before collecting frame t gives the
// CPU's bodies, frame for frame, and the reference ends where it would.
TEST(DiffCuda, FramesInFlightMatchTheCpu) {
  const VideoFormat formats[] = {VideoFormat::BGR, VideoFormat::I420, VideoFormat::GRAY8};
  const int sizes[][2] = {{1, 1}, {33, 17}, {640, 480}, {1920, 1080}};
  for (VideoFormat fmt : formats)
    for (const auto &sz : sizes) {
      const int w = sz[0], h = sz[1], thr = 20;
      Pair ctx;
      std::mt19937 &gen = testing_util::rng();
      HostFrame bg(fmt, w, h);
      testing_util::fill_random(bg, gen);
      auto cenc = DiffEncoder::create(*ctx.cpu, fmt, w, h);
      auto genc = DiffEncoder::create(*ctx.gpu, fmt, w, h);
      const int frames = w * h > 100000 ? 5 : 9;
      std::vector<std::unique_ptr<HostFrame>> input;
      // Odd frames (every frame at 1920x1080) from pinned memory (packed
      // copies): their uploads are truly asynchronous, so a missing wait
      // between the streams would show as wrong bodies.
      std::vector<HostBytes> pinned(frames);
      for (int t = 0; t < frames; ++t) {
        input.push_back(std::make_unique<HostFrame>(fmt, w, h, 5));
        next_frame(*input.back(), bg, t, 0.06, gen);
        pinned[t].resize(frame_size_packed(fmt, w, h));
        copy_frame_host(input.back()->view, packed_view(fmt, w, h, pinned[t].data()));
      }
      auto view = [&](int t) {
        return t % 2 || w >= 1920 ? packed_view(fmt, w, h, pinned[t].data()) : input[t]->view;
      };
      HostBytes cbody, gbody, cref, gref;
      cenc->keyframe(input[0]->view, cbody);
      genc->keyframe_host(input[0]->view, gbody);
      ASSERT_EQ(bytes_of(cbody), bytes_of(gbody));
      genc->submit_delta_host(view(1), thr, ValueMode::Values);
      for (int t = 1; t < frames; ++t) {
        if (t + 1 < frames) genc->submit_delta_host(view(t + 1), thr, ValueMode::Values);
        EXPECT_EQ(genc->in_flight(), t + 1 < frames ? 2 : 1);
        if (t + 1 < frames) {
          EXPECT_THROW(genc->submit_delta_host(input[t]->view, thr, ValueMode::Values), Error);
          EXPECT_THROW(genc->keyframe_host(input[t]->view, gbody), Error);
          EXPECT_THROW(genc->delta_host(input[t]->view, thr, ValueMode::Values, gbody), Error);
        }
        const DeltaSummary gs = genc->collect_delta(gbody);
        const DeltaSummary cs = cenc->delta(input[t]->view, thr, ValueMode::Values, cbody);
        ASSERT_EQ(cs.changed_bytes, gs.changed_bytes);
        ASSERT_EQ(bytes_of(cbody), bytes_of(gbody))
            << format_name(fmt) << " " << w << "x" << h << " frame " << t;
      }
      EXPECT_EQ(genc->in_flight(), 0);
      EXPECT_THROW(genc->collect_delta(gbody), Error);
      cenc->read_reference(cref);
      genc->read_reference(gref);
      ASSERT_EQ(bytes_of(cref), bytes_of(gref));
      // Idle again: the waiting calls work, on the slot the ring is at.
      cenc->delta(input[0]->view, thr, ValueMode::Deltas, cbody);
      genc->delta_host(input[0]->view, thr, ValueMode::Deltas, gbody);
      ASSERT_EQ(bytes_of(cbody), bytes_of(gbody));
    }
}

// The decoder with frames in flight: frame t comes down (into pinned memory)
// while delta t+1 is applied; one pinned body buffer is reused for every
// packet once finish_uploads() says the last one has been read. Every frame
// equals the CPU decoder's.
TEST(DiffCuda, DecoderFramesInFlightMatchTheCpu) {
  const VideoFormat formats[] = {VideoFormat::BGR, VideoFormat::NV12};
  const int sizes[][2] = {{7, 3}, {640, 480}, {1920, 1080}};
  for (VideoFormat fmt : formats)
    for (const auto &sz : sizes) {
      const int w = sz[0], h = sz[1], thr = 20, frames = 6;
      Pair ctx;
      std::mt19937 &gen = testing_util::rng();
      HostFrame bg(fmt, w, h);
      testing_util::fill_random(bg, gen);
      auto enc = DiffEncoder::create(*ctx.cpu, fmt, w, h);
      auto cdec = DiffDecoder::create(*ctx.cpu, fmt, w, h);
      auto gdec = DiffDecoder::create(*ctx.gpu, fmt, w, h);
      const size_t n = frame_size_packed(fmt, w, h);
      std::vector<HostBytes> out(frames);  // pinned frames, in flight until waited for
      std::vector<std::vector<uint8_t>> expected(frames);
      HostBytes body, packet;  // packet: the one pinned body buffer the GPU decoder reads
      int waited = 0;
      for (int t = 0; t < frames; ++t) {
        HostFrame frame(fmt, w, h, 3);
        next_frame(frame, bg, t, 0.06, gen);
        if (t == 0) {
          enc->keyframe(frame.view, body);
          cdec->keyframe(body.data());
          gdec->keyframe(body.data());
        } else {
          enc->delta(frame.view, thr, ValueMode::Values, body);
          DeltaIndex idx;
          std::string err;
          std::vector<SuperblockEntry> entries;
          ASSERT_TRUE(parse_delta(body.data(), body.size(), n, &idx, &err, &entries)) << err;
          cdec->delta(body.data(), idx, ValueMode::Values);
          gdec->finish_uploads();  // the last packet has been read: reuse its memory
          packet.resize(body.size());
          std::memcpy(packet.data(), body.data(), body.size());
          gdec->delta(packet.data(), idx, ValueMode::Values);
        }
        HostFrame cout(fmt, w, h, 0);
        cdec->write_frame(cout.view);
        expected[t].assign(n, 0);
        copy_frame_host(cout.view, packed_view(fmt, w, h, expected[t].data()));
        out[t].resize(n);
        gdec->submit_write_frame(packed_view(fmt, w, h, out[t].data()));
        if (t > 0) {
          EXPECT_EQ(gdec->frames_in_flight(), 2);
          EXPECT_THROW(gdec->submit_write_frame(packed_view(fmt, w, h, out[t].data())), Error);
          gdec->wait_frame();
          ASSERT_EQ(bytes_of(out[waited]), expected[waited])
              << format_name(fmt) << " " << w << "x" << h << " frame " << waited;
          ++waited;
        }
      }
      gdec->wait_frame();
      ASSERT_EQ(bytes_of(out[waited]), expected[waited]);
      EXPECT_EQ(gdec->frames_in_flight(), 0);
      EXPECT_THROW(gdec->wait_frame(), Error);
    }
}
