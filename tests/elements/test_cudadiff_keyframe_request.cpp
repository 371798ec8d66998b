// cudadiffdec asks upstream for a keyframe (an upstream force-key-unit
// event) when it has to wait for one: it started with deltas, or it lost a
// packet. At most one event per min-force-key-unit-interval of running time
// (GstVideoDecoder's property; cudadiffdec's default is 300 ms), timed
// input or not; none while it decodes. Both stream versions; with version 2
// also for a body the reader or the codec refuses and for a delta of the
// other version.
#include <gst/check/gstharness.h>
#include <gst/video/video.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cudadiff_util.h"

using namespace diff_test;

namespace {

// Packets of `frames` frames at 30 fps (frame i at i/30 s), stream header left out.
std::vector<GstBuffer *> packets(int frames, const std::string &props, GstCaps **caps) {
  GstHarness *enc = gst_harness_new_parse(("cudadiffenc " + props).c_str());
  gst_harness_set_src_caps_str(enc, gst_test::raw_caps("GRAY8", 32, 16).c_str());
  const GstVideoInfo info = video_info("GRAY8", 32, 16);
  std::vector<GstBuffer *> out;
  for (int t = 0; t < frames; ++t) {
    EXPECT_EQ(gst_harness_push(enc, buffer_from(info, scene("GRAY8", 32, 16, t, 7), t)),
              GST_FLOW_OK);
    while (GstBuffer *b = gst_harness_try_pull(enc)) {
      if (GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_HEADER))
        gst_buffer_unref(b);
      else
        out.push_back(b);
    }
  }
  *caps = gst_pad_get_current_caps(enc->sinkpad);
  gst_harness_teardown(enc);
  return out;
}

// Upstream force-key-unit events the decoder sent since the last call.
int keyframe_requests(GstHarness *h) {
  int n = 0;
  while (GstEvent *e = gst_harness_try_pull_upstream_event(h)) {
    if (gst_video_event_is_force_key_unit(e)) {
      gboolean all_headers = TRUE;
      EXPECT_TRUE(gst_video_event_parse_upstream_force_key_unit(e, nullptr, &all_headers, nullptr));
      ++n;
    }
    gst_event_unref(e);
  }
  return n;
}

GstHarness *decoder(GstCaps *caps, guint64 interval_ns, const char *frame_overlap = nullptr) {
  GstHarness *h = gst_harness_new("cudadiffdec");
  g_object_set(h->element, "min-force-key-unit-interval", interval_ns, nullptr);
  if (frame_overlap) gst_util_set_object_arg(G_OBJECT(h->element), "frame-overlap", frame_overlap);
  gst_harness_set_src_caps(h, gst_caps_ref(caps));
  while (GstEvent *e = gst_harness_try_pull_upstream_event(h)) gst_event_unref(e);
  return h;
}

void push(GstHarness *h, GstBuffer *packet, bool timed = true) {
  GstBuffer *b = gst_buffer_copy(packet);
  if (!timed) GST_BUFFER_PTS(b) = GST_BUFFER_DURATION(b) = GST_CLOCK_TIME_NONE;
  ASSERT_EQ(gst_harness_push(h, b), GST_FLOW_OK);
  while (GstBuffer *out = gst_harness_try_pull(h)) gst_buffer_unref(out);
}

// The decoder's keyframes and frames out so far.
void expect_decoded(GstElement *dec, guint64 keyframes, guint64 frames_out) {
  GstStructure *stats = stats_of(dec);
  EXPECT_EQ(stat(stats, "keyframes"), keyframes);
  EXPECT_EQ(stat(stats, "frames-out"), frames_out);
  gst_structure_free(stats);
}

}  // namespace

// min-force-key-unit-interval 300 ms, max-lateness (below) 1 s.
TEST(CudaDiffKeyframeRequest, Defaults) {
  GstElement *dec = gst_element_factory_make("cudadiffdec", nullptr);
  guint64 interval = 0;
  gint64 max_lateness = 0;
  g_object_get(dec, "min-force-key-unit-interval", &interval, "max-lateness", &max_lateness,
               nullptr);
  EXPECT_EQ(interval, 300 * GST_MSECOND);
  EXPECT_EQ(max_lateness, gint64(GST_SECOND));
  gst_object_unref(dec);
}

// Deltas first (a client joining late), then keyframe 12, then a lost delta.
static void at_start_and_after_a_loss(int version) {
  SCOPED_TRACE("version " + std::to_string(version));
  GstCaps *caps = nullptr;
  std::vector<GstBuffer *> p =
      packets(24, "keyframe-interval=12 stream-version=" + std::to_string(version), &caps);
  ASSERT_EQ(p.size(), 24u);
  GstHarness *h = decoder(caps, 250 * GST_MSECOND);
  // Deltas 1..11 (33 ms .. 367 ms): a request at the first, the next one at
  // least 250 ms later (delta 9, 300 ms), then none.
  for (int i = 1; i <= 8; ++i) push(h, p[size_t(i)]);
  EXPECT_EQ(keyframe_requests(h), 1) << "one request for deltas 1..8";
  for (int i = 9; i <= 11; ++i) push(h, p[size_t(i)]);
  EXPECT_EQ(keyframe_requests(h), 1) << "one more 250 ms later";
  // Keyframe 12 and deltas: decoded, no request.
  for (int i = 12; i <= 15; ++i) push(h, p[size_t(i)]);
  EXPECT_EQ(keyframe_requests(h), 0);
  // Delta 16 is lost: 17 shows the gap, a request at once (the last was
  // 267 ms of stream time ago), none for 18.
  push(h, p[17]);
  EXPECT_EQ(keyframe_requests(h), 1) << "a loss asks for a keyframe";
  push(h, p[18]);
  EXPECT_EQ(keyframe_requests(h), 0);
  expect_decoded(h->element, 1, 4);
  gst_harness_teardown(h);
  for (GstBuffer *b : p) gst_buffer_unref(b);
  gst_caps_unref(caps);
}

TEST(CudaDiffKeyframeRequest, AtStartAndAfterALossRateLimited) {
  at_start_and_after_a_loss(1);
  at_start_and_after_a_loss(2);
}

// A byte stream without timestamps (tcpclientsrc): the limit holds by the
// element's running time, so deltas in quick succession make one request.
TEST(CudaDiffKeyframeRequest, UntimedInputIsRateLimitedToo) {
  GstCaps *caps = nullptr;
  std::vector<GstBuffer *> p = packets(10, "keyframe-interval=0 stream-version=1", &caps);
  ASSERT_EQ(p.size(), 10u);
  GstHarness *h = decoder(caps, 10 * GST_SECOND);
  for (int i = 1; i < 10; ++i) push(h, p[size_t(i)], false);
  EXPECT_EQ(keyframe_requests(h), 1);
  // With no limit (0, GstVideoDecoder's own default) one per dropped packet.
  g_object_set(h->element, "min-force-key-unit-interval", guint64(0), nullptr);
  for (int i = 1; i < 10; ++i) push(h, p[size_t(i)], false);
  EXPECT_EQ(keyframe_requests(h), 9);
  gst_harness_teardown(h);
  for (GstBuffer *b : p) gst_buffer_unref(b);
  gst_caps_unref(caps);
}

// A copy of `packet` with payload byte `offset` xor `mask`, checksums made
// right again: damage only the body's own checks can see.
static GstBuffer *damaged_body(GstBuffer *packet, size_t offset, uint8_t mask) {
  Bytes b = bytes_of(packet);
  b[64 + offset] ^= mask;
  fix_checksums(b);
  return buffer_like(packet, b);
}

// Version 2: a delta of version 1 in a version 2 stream, a keyframe body
// the reader refuses (its header says delta) and a delta body the codec
// refuses (a changed byte of a coded tile) are losses: each asks for a
// keyframe, as does every packet dropped while waiting for one.
TEST(CudaDiffKeyframeRequest, Version2RefusedBodiesAndForeignDeltasAskForAKeyframe) {
  GstCaps *caps2 = nullptr, *caps1 = nullptr;
  std::vector<GstBuffer *> q = packets(12, "keyframe-interval=4 stream-version=2", &caps2);
  std::vector<GstBuffer *> r = packets(12, "keyframe-interval=4 stream-version=1", &caps1);
  ASSERT_EQ(q.size(), 12u);
  ASSERT_EQ(r.size(), 12u);
  ASSERT_EQ(bytes_of(q[2])[4], 2);
  ASSERT_EQ(bytes_of(r[2])[4], 1);
  GstHarness *h = decoder(caps2, 0);  // no limit: one request per dropped packet
  push(h, q[0]);
  push(h, q[1]);
  EXPECT_EQ(keyframe_requests(h), 0);
  push(h, r[2]);  // frame 2 in sequence, of the other version
  EXPECT_EQ(keyframe_requests(h), 1) << "a delta of the other version";
  push(h, q[3]);
  EXPECT_EQ(keyframe_requests(h), 1) << "waiting for a keyframe";
  GstBuffer *bad_key = damaged_body(q[4], 0, 0x01);  // the body's keyframe bit
  push(h, bad_key);
  gst_buffer_unref(bad_key);
  EXPECT_EQ(keyframe_requests(h), 1) << "a keyframe whose body the reader refuses";
  push(h, q[5]);
  EXPECT_EQ(keyframe_requests(h), 1);
  push(h, q[8]);
  push(h, q[9]);
  EXPECT_EQ(keyframe_requests(h), 0) << "decoding again";
  const size_t last = bytes_of(q[10]).size() - 65;
  GstBuffer *bad_delta = damaged_body(q[10], last, 0x5a);
  push(h, bad_delta);
  gst_buffer_unref(bad_delta);
  EXPECT_EQ(keyframe_requests(h), 1) << "a delta whose body the codec refuses";
  push(h, q[11]);
  EXPECT_EQ(keyframe_requests(h), 1);
  GstStructure *stats = stats_of(h->element);
  EXPECT_EQ(stat(stats, "keyframes"), 2u) << "0 and 8; the damaged keyframe 4 refused";
  EXPECT_EQ(stat(stats, "frames-out"), 4u) << "0, 1, 8, 9";
  EXPECT_EQ(stat(stats, "dropped-packets"), 6u);
  gst_structure_free(stats);
  gst_harness_teardown(h);
  for (GstBuffer *b : q) gst_buffer_unref(b);
  for (GstBuffer *b : r) gst_buffer_unref(b);
  gst_caps_unref(caps2);
  gst_caps_unref(caps1);
}

// A packet whose checksum fails (damage on a byte stream: TCP behind a
// faulty relay, SRT) asks for a keyframe as soon as the decoder finds it,
// not when the next packet arrives (one frame interval later, or never if
// none comes); the next packet's request then falls within the interval.
TEST(CudaDiffKeyframeRequest, ADamagedPacketAsksAtOnce) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    GstCaps *caps = nullptr;
    std::vector<GstBuffer *> p =
        packets(8, "keyframe-interval=0 stream-version=" + std::to_string(version), &caps);
    ASSERT_EQ(p.size(), 8u);
    GstHarness *h = decoder(caps, 250 * GST_MSECOND);
    for (int i = 0; i <= 3; ++i) push(h, p[size_t(i)]);
    EXPECT_EQ(keyframe_requests(h), 0);
    Bytes b = bytes_of(p[4]);
    b[64 + 3] ^= 0x10;  // checksums left as they were
    GstBuffer *bad = buffer_like(p[4], b);
    push(h, bad);
    gst_buffer_unref(bad);
    EXPECT_EQ(keyframe_requests(h), 1) << "at the damaged packet";
    push(h, p[5]);
    EXPECT_EQ(keyframe_requests(h), 0) << "33 ms later: within the interval";
    expect_decoded(h->element, 1, 4);
    gst_harness_teardown(h);
    for (GstBuffer *x : p) gst_buffer_unref(x);
    gst_caps_unref(caps);
  }
}

// What an RTP depayloader sends downstream for a packet that
// rtpjitterbuffer gave up on: a gap of missing data.
static GstEvent *packet_lost(GstClockTime timestamp) {
  GstEvent *gap = gst_event_new_gap(timestamp, GST_SECOND / 30);
  gst_event_set_gap_flags(gap, GST_GAP_FLAG_MISSING_DATA);
  return gap;
}

// automatic-request-sync-points (GstVideoDecoder's, off by default): the
// base class asks for a keyframe on upstream's gaps of missing data too (an
// RTP depayloader's for a lost packet), in the same
// min-force-key-unit-interval as the decoder's own requests, and drops the
// input until a keyframe; the keyframe the decoder resumes at is exact, and
// no frame comes out flagged corrupted (the decoder's default
// automatic-request-sync-point-flags).
TEST(CudaDiffKeyframeRequest, PacketLossEventsShareTheInterval) {
  GstElement *dec = gst_element_factory_make("cudadiffdec", nullptr);
  guint flags = 0;
  g_object_get(dec, "automatic-request-sync-point-flags", &flags, nullptr);
  EXPECT_EQ(flags, guint(GST_VIDEO_DECODER_REQUEST_SYNC_POINT_DISCARD_INPUT));
  gst_object_unref(dec);

  GstCaps *caps = nullptr;
  std::vector<GstBuffer *> p = packets(24, "keyframe-interval=12 stream-version=2", &caps);
  ASSERT_EQ(p.size(), 24u);
  for (bool automatic : {false, true}) {
    SCOPED_TRACE(automatic ? "automatic-request-sync-points" : "default");
    GstHarness *h = decoder(caps, 250 * GST_MSECOND);
    g_object_set(h->element, "automatic-request-sync-points", gboolean(automatic), nullptr);
    std::vector<GstClockTime> shown;
    int corrupted = 0;
    auto collect = [&] {
      while (GstBuffer *out = gst_harness_try_pull(h)) {
        shown.push_back(GST_BUFFER_PTS(out));
        if (GST_BUFFER_FLAG_IS_SET(out, GST_BUFFER_FLAG_CORRUPTED)) ++corrupted;
        gst_buffer_unref(out);
      }
    };
    auto feed = [&](int i) {
      ASSERT_EQ(gst_harness_push(h, gst_buffer_copy(p[size_t(i)])), GST_FLOW_OK);
      collect();
    };
    for (int i = 0; i <= 3; ++i) feed(i);
    EXPECT_EQ(keyframe_requests(h), 0);
    // Packet 4 lost; upstream says so before packet 5.
    EXPECT_TRUE(gst_harness_push_event(h, packet_lost(GST_BUFFER_PTS(p[4]))));
    EXPECT_EQ(keyframe_requests(h), automatic ? 1 : 0) << "the gap of missing data";
    feed(5);
    feed(6);
    EXPECT_EQ(keyframe_requests(h), automatic ? 0 : 1) << "the gap in the frame numbers, 33 ms on";
    for (int i = 7; i <= 11; ++i) feed(i);
    EXPECT_EQ(keyframe_requests(h), 0) << "within 250 ms of the first (frame 11: 367 ms)";
    for (int i = 12; i <= 14; ++i) feed(i);
    EXPECT_EQ(keyframe_requests(h), 0) << "decoding again";
    EXPECT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
    collect();
    std::vector<GstClockTime> expected;
    for (int i : {0, 1, 2, 3, 12, 13, 14}) expected.push_back(GST_BUFFER_PTS(p[size_t(i)]));
    EXPECT_EQ(shown, expected);
    EXPECT_EQ(corrupted, 0);
    expect_decoded(h->element, 2, 7);
    gst_harness_teardown(h);
  }
  for (GstBuffer *b : p) gst_buffer_unref(b);
  gst_caps_unref(caps);
}

// max-lateness: a decoder slower than the stream. A syncing sink's QoS
// report says how late the frame it rendered was; the decoder extrapolates
// that to the frame it has just decoded (the report's lateness, plus the
// clock's time since the report, less the stream time between the two
// frames). Over max-lateness, the deltas after that frame are dropped
// undecoded until the next keyframe, which is asked for. Reports about
// frames before that keyframe (still queued downstream when the decoder
// skipped) are ignored.
namespace {

GstEvent *qos_report(GstClockTime frame_time, GstClockTimeDiff late) {
  // (early by at most the frame's time, as GstEvent requires)
  late = std::max(late, -GstClockTimeDiff(frame_time));
  return gst_event_new_qos(GST_QOS_TYPE_UNDERFLOW, 1.0, late, frame_time);
}

struct LateViewer {
  GstHarness *h = nullptr;
  std::vector<GstBuffer *> p;
  // `frames` packets of a stream with keyframes every 12 frames.
  explicit LateViewer(int frames, int version = 2, const char *frame_overlap = nullptr) {
    GstCaps *caps = nullptr;
    p = packets(frames, "keyframe-interval=12 stream-version=" + std::to_string(version), &caps);
    h = decoder(caps, 300 * GST_MSECOND, frame_overlap);
    gst_caps_unref(caps);
    gst_harness_use_testclock(h);  // running time = the test clock's time
  }
  GstClockTime at(int i) const { return GST_BUFFER_PTS(p[size_t(i)]); }
  // The frames that came out (by their packet's index), and those flagged DISCONT.
  std::vector<int> shown, discont;
  // Packet i decoded at running time `now`, then the sink's report on it.
  void feed(int i, GstClockTime now, GstClockTimeDiff late) {
    gst_harness_set_time(h, now);
    ASSERT_EQ(gst_harness_push(h, gst_buffer_copy(p[size_t(i)])), GST_FLOW_OK);
    while (GstBuffer *out = gst_harness_try_pull(h)) {
      for (int k = 0; k < int(p.size()); ++k)
        if (GST_BUFFER_PTS(out) == at(k)) {
          shown.push_back(k);
          if (GST_BUFFER_FLAG_IS_SET(out, GST_BUFFER_FLAG_DISCONT) && k > 0) discont.push_back(k);
        }
      gst_buffer_unref(out);
    }
    report(i, late);
  }
  void report(int i, GstClockTimeDiff late) {
    EXPECT_TRUE(gst_harness_push_upstream_event(h, qos_report(at(i), late)));
  }
  ~LateViewer() {
    gst_harness_teardown(h);
    for (GstBuffer *b : p) gst_buffer_unref(b);
  }
};

void expect_stats(GstElement *dec, guint64 keyframes, guint64 frames_out, guint64 dropped,
                  guint64 late_skips) {
  expect_decoded(dec, keyframes, frames_out);
  GstStructure *stats = stats_of(dec);
  EXPECT_EQ(stat(stats, "dropped-packets"), dropped);
  EXPECT_EQ(stat(stats, "late-skips"), late_skips);
  EXPECT_EQ(stat(stats, "losses"), 0u) << "a skip is no loss: no warning";
  gst_structure_free(stats);
}

}  // namespace

TEST(CudaDiffMaxLateness, ADecoderFarBehindSkipsToTheNextKeyframe) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    LateViewer v(30, version);
    ASSERT_EQ(v.p.size(), 30u);
    keyframe_requests(v.h);
    // Frames 0..5 on time.
    for (int i = 0; i <= 5; ++i) v.feed(i, v.at(i), -5 * GST_MSECOND);
    EXPECT_EQ(keyframe_requests(v.h), 0);
    // Frame 5 was rendered 1.5 s late; frame 6, decoded one frame interval
    // later, would be as late: it is shown (decoded), the deltas after it
    // are not, and a keyframe is asked for.
    v.report(5, 1500 * GST_MSECOND);
    v.feed(6, v.at(6), 1500 * GST_MSECOND);
    EXPECT_EQ(keyframe_requests(v.h), 1) << "the skip asks for a keyframe";
    v.report(5, 2 * GST_SECOND);  // (a frame still queued downstream: ignored)
    for (int i = 7; i <= 11; ++i) v.feed(i, v.at(i), 2 * GST_SECOND);
    EXPECT_EQ(keyframe_requests(v.h), 0) << "one request per 300 ms";
    expect_stats(v.h->element, 1, 7, 5, 1);
    // Keyframe 12 ends the skip; a late report about frame 6 (before it) is ignored.
    v.feed(12, v.at(12), -5 * GST_MSECOND);
    v.report(6, 3 * GST_SECOND);
    for (int i = 13; i <= 17; ++i) v.feed(i, v.at(i), 900 * GST_MSECOND);
    EXPECT_EQ(keyframe_requests(v.h), 0) << "0.9 s late: within max-lateness";
    expect_stats(v.h->element, 2, 13, 5, 1);
    // Frame 17 was 0.9 s late; frame 18 is decoded 200 ms later than its
    // time (the decoder fell further behind): 1.1 s, a skip.
    v.feed(18, v.at(18) + 200 * GST_MSECOND, 0);
    EXPECT_EQ(keyframe_requests(v.h), 1);
    for (int i = 19; i <= 29; ++i) v.feed(i, v.at(i) + 200 * GST_MSECOND, 0);
    EXPECT_EQ(keyframe_requests(v.h), 0);
    expect_stats(v.h->element, 3, 14 + 6, 5 + 5, 2);
    // What came out: GstVideoDecoder's own QoS drops decoded frames that
    // the reports make late (14 to 17 after frame 13's report of 0.9 s),
    // but the frame of each skip and the keyframe that ends it come out:
    // the late reports it had are replaced by one that makes the skip's
    // frame due, and those that come during the skip, or about frames
    // before its keyframe, go upstream without it.
    EXPECT_EQ(v.shown, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 12, 13, 18, 24, 25, 26, 27, 28, 29}));
    for (int k : {12, 24})
      EXPECT_NE(std::find(v.discont.begin(), v.discont.end(), k), v.discont.end())
          << "frame " << k << " follows dropped frames: DISCONT";
    for (int k : {1, 2, 3, 4, 5, 6, 13, 25, 26, 27, 28, 29})
      EXPECT_EQ(std::find(v.discont.begin(), v.discont.end(), k), v.discont.end()) << k;
  }
}

// The same reports with max-lateness=-1, with GstVideoDecoder's qos=false,
// or a decoder behind the clock without any report (no syncing sink): every
// packet is decoded.
TEST(CudaDiffMaxLateness, NeverWithoutReportsOrWhenTurnedOff) {
  for (const char *setting : {"max-lateness=-1", "qos=false", "no reports"}) {
    SCOPED_TRACE(setting);
    LateViewer v(24);
    ASSERT_EQ(v.p.size(), 24u);
    const std::string s = setting;
    if (s == "max-lateness=-1") g_object_set(v.h->element, "max-lateness", gint64(-1), nullptr);
    if (s == "qos=false") g_object_set(v.h->element, "qos", FALSE, nullptr);
    keyframe_requests(v.h);
    for (int i = 0; i < 24; ++i) {
      gst_harness_set_time(v.h, v.at(i) + 3 * GST_SECOND);
      push(v.h, v.p[size_t(i)]);
      if (s != "no reports") v.report(i, 3 * GST_SECOND);
    }
    EXPECT_EQ(keyframe_requests(v.h), 0);
    expect_stats(v.h->element, 2, 24, 0, 0);
  }
}

// A live viewer 2 s behind the clock (the pipeline's latency: frames'
// running times trail the clock by it). A skip asks for a keyframe; a loss
// after the skip's keyframe asks again at once: the skip's request, timed
// by the clock, does not hold back the loss's, timed by its frame.
TEST(CudaDiffMaxLateness, ALossAfterASkipIsAskedForAtOnce) {
  LateViewer v(24);
  ASSERT_EQ(v.p.size(), 24u);
  const GstClockTime latency = 2 * GST_SECOND;
  keyframe_requests(v.h);
  for (int i = 0; i <= 5; ++i) v.feed(i, v.at(i) + latency, -5 * GST_MSECOND);
  v.report(5, 1500 * GST_MSECOND);
  v.feed(6, v.at(6) + latency, 1500 * GST_MSECOND);
  EXPECT_EQ(keyframe_requests(v.h), 1) << "the skip";
  for (int i = 7; i <= 11; ++i) v.feed(i, v.at(i) + latency, 0);
  EXPECT_EQ(keyframe_requests(v.h), 0);
  v.feed(12, v.at(12) + latency, -5 * GST_MSECOND);
  v.feed(13, v.at(13) + latency, -5 * GST_MSECOND);
  // Packet 14 lost: 15 to 23 wait for a keyframe, and one is asked for.
  for (int i = 15; i <= 23; ++i) v.feed(i, v.at(i) + latency, 0);
  EXPECT_EQ(keyframe_requests(v.h), 1) << "the loss, right after the skip's keyframe";
  EXPECT_EQ(v.shown, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 12, 13}));
  GstStructure *stats = stats_of(v.h->element);
  EXPECT_EQ(stat(stats, "late-skips"), 1u);
  EXPECT_EQ(stat(stats, "losses"), 1u);
  gst_structure_free(stats);
}

// A flushing seek forgets the reports and the skip: a late report from
// before it neither makes the frames after it skip nor is kept.
TEST(CudaDiffMaxLateness, AFlushForgetsTheReportsAndTheSkip) {
  LateViewer v(24);
  ASSERT_EQ(v.p.size(), 24u);
  keyframe_requests(v.h);
  for (int i = 0; i <= 4; ++i) v.feed(i, v.at(i), -5 * GST_MSECOND);
  v.report(4, 900 * GST_MSECOND);  // (kept: 0.9 s, no skip yet)
  ASSERT_TRUE(gst_harness_push_event(v.h, gst_event_new_flush_start()));
  ASSERT_TRUE(gst_harness_push_event(v.h, gst_event_new_flush_stop(FALSE)));
  GstSegment segment;
  gst_segment_init(&segment, GST_FORMAT_TIME);
  ASSERT_TRUE(gst_harness_push_event(v.h, gst_event_new_segment(&segment)));
  // Frames 12 to 17 decoded 200 ms behind their time: with frame 4's
  // report still kept, 1.1 s late and skipped.
  for (int i = 12; i <= 17; ++i) {
    gst_harness_set_time(v.h, v.at(i) + 200 * GST_MSECOND);
    push(v.h, v.p[size_t(i)]);
  }
  expect_stats(v.h->element, 2, 11, 0, 0);
}

// With frame-overlap a decoded frame leaves with the next packet, a frame
// interval later: that counts. Frame 5 was 0.98 s late, frame 6 is decoded
// on the same schedule: 0.98 s, within max-lateness, or 1.013 s when it is
// held for a frame.
TEST(CudaDiffMaxLateness, FrameOverlapCountsTheFrameItHolds) {
  for (const char *overlap : {"never", "always"}) {
    SCOPED_TRACE(overlap);
    LateViewer v(12, 2, overlap);
    ASSERT_EQ(v.p.size(), 12u);
    for (int i = 0; i <= 4; ++i) v.feed(i, v.at(i), -5 * GST_MSECOND);
    v.feed(5, v.at(5), 980 * GST_MSECOND);
    v.feed(6, v.at(6), 980 * GST_MSECOND);
    GstStructure *stats = stats_of(v.h->element);
    EXPECT_EQ(stat(stats, "late-skips"), std::string(overlap) == "always" ? 1u : 0u);
    gst_structure_free(stats);
  }
}
