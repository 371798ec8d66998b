// cudadiffenc/cudadiffdec: backend=cuda and backend=cpu give identical packets
// (byte for byte, headers included) and identical pictures, for every format,
// odd sizes, lossless and lossy thresholds, with and without zstd, in stream
// versions 1 and 2 (each coded by the element's backend, the CUDA encoder
// uploading the frames from system memory), and with frames overlapping (a
// non-live upstream: version 2's CUDA encoder then keeps two frames in
// flight). Needs a device: exits 77 without one.
#include <gst/check/gstharness.h>
#include <gtest/gtest.h>

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
