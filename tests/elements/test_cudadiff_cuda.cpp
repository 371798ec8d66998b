// cudadiffenc/cudadiffdec: backend=cuda and backend=cpu give identical packets
// (byte for byte, headers included) and identical pictures, for every format,
// odd sizes, lossless and lossy thresholds, with and without zstd, in stream
// versions 1 and 2 (each coded by the element's backend, the CUDA encoder
// uploading the frames from system memory), and with frames overlapping (a
// non-live upstream: version 2's CUDA encoder then keeps up to four frames
// in flight, three deltas waiting for their packets). Needs a device: exits 77
// without one.
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

// Version 2 on the GPU with frame-overlap holds kMaxInFlight - 1 deltas
// back (the GPU codes them while the packet before them is made): each
// delta's packet leaves once that many more frames have come, the encoder
// reports as many frame intervals of latency, a drain query pushes them all,
// and stopping with them waiting drops them cleanly. The packets are those
// of frame-overlap=never.
TEST(CudaDiffCuda, Version2OverlapHoldsDeltas) {
  constexpr int held = cudadiff::codec2::Encoder::kMaxInFlight - 1;
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
