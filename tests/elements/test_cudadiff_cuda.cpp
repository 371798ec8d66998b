// cudadiffenc/cudadiffdec: backend=cuda and backend=cpu give identical packets
// (byte for byte, headers included) and identical pictures, for every format,
// odd sizes, lossless and lossy thresholds, with and without zstd, in stream
// versions 1 and 2 (each coded by the element's backend, the CUDA encoder
// uploading the frames from system memory), and with frames overlapping (a
// non-live upstream: version 2's CUDA encoder then keeps up to four frames
// in flight, and four deltas wait for their packets). Needs a device: exits
// 77 without one.
#include <gst/check/gstharness.h>
#include <gst/video/gstvideoencoder.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cudadiff_util.h"

using namespace diff_test;

namespace {

// Encodes the same frames with one backend; returns every packet's bytes.
// live: a live upstream (each packet leaves with its frame), else frames
// overlap (frame-overlap auto).
std::vector<Bytes> encode_with(const char *backend, const std::string &format, int w, int h,
                               int threshold, const char *compression, uint32_t seed, int version,
                               bool live = true) {
  const std::string launch = std::string("cudadiffenc backend=") + backend +
                             " keyframe-interval=5 threshold=" + std::to_string(threshold) +
                             " compression=" + compression +
                             " stream-version=" + std::to_string(version);
  GstHarness *enc = gst_harness_new_parse(launch.c_str());
  gst_harness_set_live(enc, live);
  gst_harness_set_src_caps_str(enc, gst_test::raw_caps(format.c_str(), w, h).c_str());
  const GstVideoInfo info = video_info(format, w, h);
  std::vector<Bytes> packets;
  auto pull = [&] {
    while (GstBuffer *b = gst_harness_try_pull(enc)) {
      packets.push_back(bytes_of(b));
      gst_buffer_unref(b);
    }
  };
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(gst_harness_push(enc, buffer_from(info, scene(format, w, h, t, seed), t)),
              GST_FLOW_OK);
    pull();
  }
  gst_harness_push_event(enc, gst_event_new_eos());  // the packet waiting, if any
  pull();
  gst_harness_teardown(enc);
  return packets;
}

std::vector<Bytes> decode_with(const char *backend, const std::vector<Bytes> &packets) {
  const std::string launch = std::string("cudadiffdec backend=") + backend;
  GstHarness *dec = gst_harness_new_parse(launch.c_str());
  gst_harness_set_src_caps_str(dec, "video/x-cudadiff");
  std::vector<Bytes> frames;
  for (const Bytes &p : packets) {
    GstBuffer *b = gst_buffer_new_allocate(nullptr, p.size(), nullptr);
    gst_buffer_fill(b, 0, p.data(), p.size());
    EXPECT_EQ(gst_harness_push(dec, b), GST_FLOW_OK);
    while (GstBuffer *out = gst_harness_try_pull(dec)) {
      GstCaps *caps = gst_pad_get_current_caps(dec->sinkpad);
      frames.push_back(canonical_of(out, caps));
      gst_caps_unref(caps);
      gst_buffer_unref(out);
    }
  }
  gst_harness_teardown(dec);
  return frames;
}

}  // namespace

TEST(CudaDiffCuda, CudaPacketsEqualCpuPackets) {
  // Odd sizes for every format, a large frame for three (sanitizer runs stay short).
  const int sizes[][2] = {{1, 1}, {3, 1}, {1, 7}, {97, 31}, {641, 37}, {1280, 720}};
  const bool zstd = [] {
    GstElement *el = gst_element_factory_make("cudadiffenc", nullptr);
    GParamSpec *spec = g_object_class_find_property(G_OBJECT_GET_CLASS(el), "compression");
    const bool z = g_enum_get_value_by_nick(G_PARAM_SPEC_ENUM(spec)->enum_class, "zstd");
    gst_object_unref(el);
    return z;
  }();
  for (int version : {1, 2})
    for (const std::string &f : all_formats())
      for (const auto &sz : sizes)
        for (int thr : {0, 5, 20}) {
          if (sz[0] == 1280 && f != "BGR" && f != "I420" && f != "NV12") continue;
          if (version == 2 && (sz[0] == 1280 || thr == 5)) continue;  // short sanitizer runs
          const char *compression = zstd && thr != 20 ? "zstd" : "none";
          SCOPED_TRACE(f + " " + std::to_string(sz[0]) + "x" + std::to_string(sz[1]) +
                       " threshold " + std::to_string(thr) + " " + compression + " version " +
                       std::to_string(version));
          const uint32_t seed = testing_util::rng()();
          const std::vector<Bytes> gpu =
              encode_with("cuda", f, sz[0], sz[1], thr, compression, seed, version);
          const std::vector<Bytes> cpu =
              encode_with("cpu", f, sz[0], sz[1], thr, compression, seed, version);
          ASSERT_EQ(gpu.size(), cpu.size());
          ASSERT_EQ(gpu.size(), 9u);  // stream header + 8 frames
          for (size_t i = 0; i < gpu.size(); ++i) ASSERT_EQ(gpu[i], cpu[i]) << "packet " << i;
          if (version == 2) {
            const std::vector<Bytes> overlapped =
                encode_with("cuda", f, sz[0], sz[1], thr, compression, seed, version, false);
            ASSERT_EQ(overlapped, cpu) << "frames overlapping";
          }
          const std::vector<Bytes> shown_gpu = decode_with("cuda", cpu);
          const std::vector<Bytes> shown_cpu = decode_with("cpu", cpu);
          ASSERT_EQ(shown_gpu.size(), 8u);
          ASSERT_EQ(shown_gpu, shown_cpu);
        }
}

// An error of the CUDA decoder while a version 2 frame is in flight
// (CUDADIFF_CODEC2_FAIL_FINISH makes the decoder's N-th finish() fail after
// its wait, as a CUDA error found there would): one error message, and the
// element tears down. The frame submitted after the failing one goes with
// the dropped decoder; it used to be kept and finished later on the decoder
// that was gone (a crash at teardown).
TEST(CudaDiffCuda, DecoderErrorWithAFrameInFlight) {
  const std::vector<Bytes> packets = encode_with("cpu", "BGR", 64, 48, 5, "none", 7, 2);
  ASSERT_GE(packets.size(), 8u);
  for (const char *overlap : {"always", "never"}) {
    for (int fail : {0, 1, 3}) {
      SCOPED_TRACE(std::string("frame-overlap=") + overlap + ", finish() " + std::to_string(fail) +
                   " fails");
      g_setenv("CUDADIFF_CODEC2_FAIL_FINISH", std::to_string(fail).c_str(), TRUE);
      GstHarness *dec = gst_harness_new_parse(
          (std::string("cudadiffdec backend=cuda frame-overlap=") + overlap).c_str());
      GstBus *bus = gst_bus_new();
      gst_element_set_bus(dec->element, bus);
      gst_harness_set_src_caps_str(dec, "video/x-cudadiff");
      size_t shown = 0, pushed = 0;
      GstFlowReturn flow = GST_FLOW_OK;
      for (const Bytes &p : packets) {
        GstBuffer *b = gst_buffer_new_allocate(nullptr, p.size(), nullptr);
        gst_buffer_fill(b, 0, p.data(), p.size());
        flow = gst_harness_push(dec, b);
        ++pushed;
        while (GstBuffer *out = gst_harness_try_pull(dec)) {
          ++shown;
          gst_buffer_unref(out);
        }
        if (flow != GST_FLOW_OK) break;
      }
      EXPECT_EQ(flow, GST_FLOW_ERROR);
      EXPECT_LT(pushed, packets.size());
      EXPECT_LE(shown, size_t(fail));
      const std::vector<gst_test::BusText> errors = gst_test::pop_texts(bus, GST_MESSAGE_ERROR);
      for (const gst_test::BusText &e : errors)
        EXPECT_NE(e.debug.find("on purpose"), std::string::npos) << e.message << " | " << e.debug;
      EXPECT_EQ(errors.size(), 1u);
      // The bus's messages hold the element: detach it before the teardown.
      gst_element_set_bus(dec->element, nullptr);
      gst_harness_teardown(dec);
      gst_object_unref(bus);
      g_unsetenv("CUDADIFF_CODEC2_FAIL_FINISH");
    }
  }
}

// An error of the CUDA encoder while version 2 frames are in flight
// (CUDADIFF_CODEC2_ENC_FAIL_FINISH makes the core's N-th finish() fail, as
// a CUDA error found while waiting for that frame would; frames are
// finished in order, so frame N fails). cudadiffenc posts one error, the
// push that met it returns GST_FLOW_ERROR, and the stream stays valid for an
// application that keeps pushing: every frame before the failing one goes
// out, none of the frames coded against it does (they are dropped), the
// first packet after it is a keyframe, the frame numbers have no gap (the
// failing frame's number goes to the next frame), and the CPU decoder shows
// every packet as a picture within the threshold of the frame it came from.
TEST(CudaDiffCuda, EncoderErrorWithFramesInFlight) {
  constexpr int w = 64, h = 48, threshold = 5, n_frames = 14;
  const GstVideoInfo info = video_info("BGR", w, h);
  std::vector<Bytes> input;
  for (int t = 0; t < n_frames; ++t) input.push_back(scene("BGR", w, h, t, 5));
  for (const char *overlap : {"always", "never"}) {
    for (int fail : {0, 1, 3}) {
      SCOPED_TRACE(std::string("frame-overlap=") + overlap + ", finish() " + std::to_string(fail) +
                   " fails");
      g_setenv("CUDADIFF_CODEC2_ENC_FAIL_FINISH", std::to_string(fail).c_str(), TRUE);
      GstHarness *enc = gst_harness_new_parse(
          (std::string("cudadiffenc backend=cuda stream-version=2 keyframe-interval=0 "
                       "threshold=" +
                       std::to_string(threshold) + " frame-overlap=") +
           overlap)
              .c_str());
      GstBus *bus = gst_bus_new();
      gst_element_set_bus(enc->element, bus);
      gst_harness_set_src_caps_str(enc, gst_test::raw_caps("BGR", w, h).c_str());
      std::vector<GstBuffer *> packets;
      auto pull = [&] {
        while (GstBuffer *b = gst_harness_try_pull(enc)) packets.push_back(b);
      };
      int errors_returned = 0;
      for (int t = 0; t < n_frames; ++t) {
        const GstFlowReturn flow = gst_harness_push(enc, buffer_from(info, input[t], t));
        if (flow == GST_FLOW_ERROR) {
          ++errors_returned;
        } else {
          EXPECT_EQ(flow, GST_FLOW_OK) << "frame " << t;
        }
        pull();
      }
      EXPECT_TRUE(gst_harness_push_event(enc, gst_event_new_eos()));
      pull();
      EXPECT_EQ(errors_returned, 1);
      const std::vector<gst_test::BusText> errors = gst_test::pop_texts(bus, GST_MESSAGE_ERROR);
      for (const gst_test::BusText &e : errors)
        EXPECT_NE(e.debug.find("on purpose"), std::string::npos) << e.message << " | " << e.debug;
      EXPECT_EQ(errors.size(), 1u);
      g_unsetenv("CUDADIFF_CODEC2_ENC_FAIL_FINISH");

      // The frames sent: up to `fail` all of them, then from a keyframe on,
      // numbered without a gap (the frames dropped by the sender are not
      // packet loss).
      std::vector<int> sent;
      bool resumed = false;
      for (GstBuffer *b : packets) {
        if (GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_HEADER)) continue;
        const int t = int(gst_util_uint64_scale_round(GST_BUFFER_PTS(b), 30, GST_SECOND));
        const Header hd = header_of(b);
        EXPECT_EQ(hd.frame_number, sent.size()) << "frame " << t;
        if (!sent.empty()) {
          EXPECT_GT(t, sent.back()) << "packets out of order";
        }
        EXPECT_NE(t, fail) << "the failing frame was sent";
        if (t > fail && !resumed) {
          EXPECT_TRUE(hd.keyframe()) << "the first frame after the error, " << t;
          resumed = true;
        }
        sent.push_back(t);
      }
      for (int t = 0; t < fail; ++t)
        EXPECT_TRUE(std::find(sent.begin(), sent.end(), t) != sent.end()) << "frame " << t;
      EXPECT_TRUE(resumed) << "no frame after the error";

      // Every packet decodes, each picture within the threshold of its
      // frame, and the decoder sees no loss (it warns of one).
      GstHarness *dec = gst_harness_new_parse("cudadiffdec backend=cpu");
      GstBus *dec_bus = gst_bus_new();
      gst_element_set_bus(dec->element, dec_bus);
      gst_harness_set_src_caps_str(dec, "video/x-cudadiff");
      size_t shown = 0;
      for (GstBuffer *b : packets) {
        EXPECT_EQ(gst_harness_push(dec, gst_buffer_ref(b)), GST_FLOW_OK);
        while (GstBuffer *out = gst_harness_try_pull(dec)) {
          const int t = int(gst_util_uint64_scale_round(GST_BUFFER_PTS(out), 30, GST_SECOND));
          GstCaps *caps = gst_pad_get_current_caps(dec->sinkpad);
          const Bytes picture = canonical_of(out, caps);
          gst_caps_unref(caps);
          gst_buffer_unref(out);
          const bool expected = shown < sent.size() && sent[shown] == t && t >= 0 && t < n_frames;
          EXPECT_TRUE(expected) << "picture " << shown << " is frame " << t;
          ++shown;
          if (!expected) continue;
          EXPECT_LE(max_diff(picture, input[t]), threshold) << "frame " << t;
        }
      }
      EXPECT_EQ(shown, sent.size());
      for (const gst_test::BusText &e : gst_test::pop_texts(dec_bus, GST_MESSAGE_WARNING))
        ADD_FAILURE() << "decoder warning: " << e.message << " | " << e.debug;
      gst_element_set_bus(dec->element, nullptr);
      gst_harness_teardown(dec);
      gst_object_unref(dec_bus);
      for (GstBuffer *b : packets) gst_buffer_unref(b);
      gst_element_set_bus(enc->element, nullptr);
      gst_harness_teardown(enc);
      gst_object_unref(bus);
    }
  }
}

// Version 2 on the GPU with frame-overlap holds kMaxInFlight deltas back
// (the GPU codes kMaxInFlight - 1 while the packet before them is made,
// and one more waits for its body to reach the host): each
// delta's packet leaves once that many more frames have come, the encoder
// reports as many frame intervals of latency, a drain query pushes them all,
// and stopping with them waiting drops them cleanly. The packets are those
// of frame-overlap=never.
TEST(CudaDiffCuda, Version2OverlapHoldsDeltas) {
  constexpr int held = cudadiff::codec2::Encoder::kMaxInFlight;
  static_assert(held >= 2 && held <= 4, "the test pushes 6 frames, then held more");
  const GstVideoInfo info = video_info("BGRx", 40, 18, 25);
  std::vector<Bytes> sent[2];
  for (int overlap = 0; overlap < 2; ++overlap) {
    SCOPED_TRACE(overlap ? "frame-overlap=always" : "frame-overlap=never");
    GstHarness *enc = gst_harness_new_parse(
        (std::string("cudadiffenc backend=cuda stream-version=2 keyframe-interval=0 "
                     "frame-overlap=") +
         (overlap ? "always" : "never"))
            .c_str());
    gst_harness_set_src_caps_str(enc, gst_test::raw_caps("BGRx", 40, 18, 25).c_str());
    auto pull = [&] {
      while (GstBuffer *b = gst_harness_try_pull(enc)) {
        if (!GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_HEADER))
          sent[overlap].push_back(bytes_of(b));
        gst_buffer_unref(b);
      }
    };
    for (int t = 0; t < 6; ++t) {
      ASSERT_EQ(gst_harness_push(enc, buffer_from(info, scene("BGRx", 40, 18, t, 11), t)),
                GST_FLOW_OK);
      pull();
      // The keyframe leaves at once.
      EXPECT_EQ(int(sent[overlap].size()), overlap ? std::max(1, t + 1 - held) : t + 1)
          << "after frame " << t;
    }
    GstClockTime min = 1, max = 1;
    GstElement *element = gst_harness_find_element(enc, "cudadiffenc");
    ASSERT_NE(element, nullptr);
    gst_video_encoder_get_latency(GST_VIDEO_ENCODER(element), &min, &max);
    gst_object_unref(element);
    EXPECT_EQ(min, overlap ? held * GST_SECOND / 25 : 0);
    EXPECT_EQ(max, min);
    GstQuery *drain = gst_query_new_drain();
    EXPECT_TRUE(gst_pad_peer_query(enc->srcpad, drain));
    gst_query_unref(drain);
    pull();
    EXPECT_EQ(sent[overlap].size(), 6u);
    // As many deltas left waiting when the harness stops the element.
    for (int t = 6; t < 6 + held; ++t)
      ASSERT_EQ(gst_harness_push(enc, buffer_from(info, scene("BGRx", 40, 18, t, 11), t)),
                GST_FLOW_OK);
    gst_harness_teardown(enc);
  }
  EXPECT_EQ(sent[0], sent[1]);
}

// Version 2 on the GPU with frame-overlap: the delta collected last waits
// for its body to come back while the packet before it goes out. With
// random frames (raw tiles: packets large enough to leave in the body's own
// buffer, eight at most while downstream holds them, the rest copied),
// every packet is that of frame-overlap=never, in order, across a caps
// change with a body on its way (the waiting packets leave first, in the
// old size); a flush drops the waiting ones, body on its way included, and
// the next frame is a keyframe; stopping with a body on its way is clean.
TEST(CudaDiffCuda, Version2BodiesOnTheirWay) {
  constexpr int held = cudadiff::codec2::Encoder::kMaxInFlight;
  struct Size {
    int w, h;
  };
  const Size sizes[] = {{256, 192}, {160, 120}};
  std::mt19937 gen(11);
  // Frames 0-6 in the first size, 7-21 in the second (a flush after 13).
  std::vector<Bytes> inputs;
  for (int t = 0; t < 22; ++t) {
    const Size &z = sizes[t < 7 ? 0 : 1];
    Bytes in(size_t(z.w) * z.h * 3);
    for (uint8_t &b : in) b = uint8_t(gen());
    inputs.push_back(std::move(in));
  }
  std::vector<std::vector<GstBuffer *>> got(2);
  for (int overlap = 0; overlap < 2; ++overlap) {
    SCOPED_TRACE(overlap ? "frame-overlap=always" : "frame-overlap=never");
    GstHarness *enc =
        gst_harness_new_parse((std::string("cudadiffenc backend=cuda threshold=0 stream-version=2 "
                                           "keyframe-interval=0 frame-overlap=") +
                               (overlap ? "always" : "never"))
                                  .c_str());
    std::vector<GstBuffer *> &out = got[size_t(overlap)];
    auto pull = [&] {
      while (GstBuffer *b = gst_harness_try_pull(enc))
        if (GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_HEADER))
          gst_buffer_unref(b);
        else
          out.push_back(b);  // held to the end
    };
    auto push = [&](int t) {
      const Size &z = sizes[t < 7 ? 0 : 1];
      ASSERT_EQ(gst_harness_push(enc, buffer_from(video_info("BGR", z.w, z.h), inputs[t], t)),
                GST_FLOW_OK);
      pull();
    };
    gst_harness_set_src_caps_str(enc, gst_test::raw_caps("BGR", 256, 192).c_str());
    for (int t = 0; t < 7; ++t) {
      push(t);
      EXPECT_EQ(int(out.size()), overlap && t > 0 ? std::max(1, t + 1 - held) : t + 1)
          << "after frame " << t;
    }
    // New caps with deltas queued and one body on its way: they leave first.
    gst_harness_set_src_caps_str(enc, gst_test::raw_caps("BGR", 160, 120).c_str());
    for (int t = 7; t < 14; ++t) {
      push(t);
      EXPECT_EQ(int(out.size()), overlap && t > 7 ? 8 + std::max(0, t - 7 - held) : t + 1)
          << "after frame " << t;
    }
    // A flush drops what waits (overlap: frames 10-13, 10 the body on its way).
    flush_and_restart(enc, gst_test::raw_caps("BGR", 160, 120));
    for (int t = 14; t < 22; ++t) push(t);
    EXPECT_EQ(out.size(), overlap ? 10u + 1u + (22u - 15u - held) : 22u);
    gst_harness_teardown(enc);  // with deltas queued and a body on its way
  }
  // Overlap sent input frames 0-9, then 14 (a keyframe after the flush, as
  // without overlap) onwards, numbered on from 10 (the dropped packets took
  // no numbers): each the packet sent without overlap but for its number
  // (and so its header's checksum).
  ASSERT_EQ(got[0].size(), 22u);
  for (size_t i = 0; i < got[1].size(); ++i) {
    GstBuffer *b = got[1][i];
    const Header hd = header_of(b);
    EXPECT_EQ(hd.frame_number, i);
    const guint64 t = gst_util_uint64_scale_round(hd.pts, 30, GST_SECOND);  // the input frame
    ASSERT_LT(t, 22u);
    EXPECT_TRUE(t < 10 || t >= 14) << t;
    EXPECT_EQ(hd.keyframe(), t == 0 || t == 7 || t == 14) << t;
    const Bytes mine = bytes_of(b), alone = bytes_of(got[0][size_t(t)]);
    ASSERT_EQ(mine.size(), alone.size()) << "packet of frame " << t;
    ASSERT_GE(mine.size(), 64u);
    // Bytes 8-15: the frame number; 60-63: the header's checksum.
    EXPECT_TRUE(std::equal(mine.begin(), mine.begin() + 8, alone.begin()) &&
                std::equal(mine.begin() + 16, mine.begin() + 60, alone.begin() + 16) &&
                std::equal(mine.begin() + 64, mine.end(), alone.begin() + 64))
        << "packet of frame " << t;
    EXPECT_EQ(header_of(got[0][size_t(t)]).frame_number, t);
  }
  for (auto &v : got)
    for (GstBuffer *b : v) gst_buffer_unref(b);
}
