// The difference stream over RTSP on 127.0.0.1: cudadiff-server's library
// (tools/cudadiffserver.h) serves a deterministic live source (a moving SMPTE
// pattern: every frame is a function of its number), clients are rtspsrc
// pipelines. A client's frames are matched to the source's frame numbers by
// the sender timestamp the decoder attaches, and each one is compared with
// the source frame rebuilt by a non-live copy of the source: every byte
// within the encoder's threshold.
#include <gst/rtp/gstrtcpbuffer.h>
#include <gst/rtp/gstrtpbuffer.h>
#include <gst/rtsp-server/rtsp-server.h>
#include <gst/video/video.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <sys/time.h>
#include <unistd.h>

#include "cudadiffserver.h"
#include "stream_test_util.h"

using namespace stream_test;

namespace {

// rtsp-server runs each media's main loop in a thread of a pool of its own,
// which lets go of the media's last references after the media has stopped,
// a moment after Server::stop() returns. Before gst_deinit(), where the
// leaks tracer counts what is still alive, the process waits for those
// threads (as rtsp-server's own tests do): one still ending would count as
// a leak. (Once, in CI, this test failed on a leak at exit after every test
// had passed; what was left was not logged then.)
class RtspThreads : public testing::Environment {
 public:
  void TearDown() override { gst_rtsp_thread_pool_cleanup(); }
};
testing::Environment *const rtsp_threads = testing::AddGlobalTestEnvironment(new RtspThreads);

constexpr int kFps = 25;
constexpr uint64_t kFrameNs = GST_SECOND / kFps;
constexpr int kThreshold = 20;

std::string source(int width, int height, bool live = true) {
  return std::string("videotestsrc ") + (live ? "is-live=true " : "") +
         "pattern=smpte horizontal-speed=4 ! video/x-raw,format=BGR,width=" +
         std::to_string(width) + ",height=" + std::to_string(height) +
         ",framerate=" + std::to_string(kFps) + "/1";
}

// What the encoder of the server's media did: frames encoded, keyframes,
// force-key-unit events that reached it from downstream.
// The source's frame number of each timestamp (live sources shift their
// timestamps by the time they started, so they are not n / 25 s): videotestsrc
// numbers its buffers (the buffer offset).
struct EncoderWatch {
  std::atomic<uint64_t> frames{0};
  std::atomic<uint64_t> keyframes{0};
  std::atomic<uint64_t> keyframe_requests{0};
  std::mutex mutex;
  std::map<uint64_t, uint64_t> numbers;  // pts -> source frame number
  std::vector<uint64_t> keyframe_numbers;
  std::string keyframe_list() {
    std::lock_guard<std::mutex> lock(mutex);
    std::string out;
    for (uint64_t n : keyframe_numbers) out += " " + std::to_string(n);
    return out;
  }

  // -1 when no frame had this timestamp.
  int64_t number(uint64_t pts) {
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = numbers.find(pts);
    return it == numbers.end() ? -1 : int64_t(it->second);
  }
  // The number of the latest frame that reached the encoder (-1: none yet).
  int64_t latest_number() {
    std::lock_guard<std::mutex> lock(mutex);
    return numbers.empty() ? -1 : int64_t(numbers.rbegin()->second);
  }

  GstElement *media = nullptr;  // the latest media's bin (not a reference)

  void attach(GstElement *media_bin) {
    media = media_bin;
    GstElement *enc = gst_bin_get_by_name(GST_BIN(media_bin), "enc");
    ASSERT_NE(enc, nullptr);
    GstPad *sink = gst_element_get_static_pad(enc, "sink");
    gst_pad_add_probe(
        sink, GST_PAD_PROBE_TYPE_BUFFER,
        [](GstPad *, GstPadProbeInfo *info, gpointer data) {
          auto *w = static_cast<EncoderWatch *>(data);
          GstBuffer *b = GST_PAD_PROBE_INFO_BUFFER(info);
          std::lock_guard<std::mutex> lock(w->mutex);
          w->numbers[GST_BUFFER_PTS(b)] = GST_BUFFER_OFFSET(b);
          return GST_PAD_PROBE_OK;
        },
        this, nullptr);
    gst_object_unref(sink);
    GstPad *pad = gst_element_get_static_pad(enc, "src");
    gst_pad_add_probe(
        pad, GST_PAD_PROBE_TYPE_BUFFER,
        [](GstPad *, GstPadProbeInfo *info, gpointer data) {
          auto *w = static_cast<EncoderWatch *>(data);
          GstBuffer *b = GST_PAD_PROBE_INFO_BUFFER(info);
          if (!GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_HEADER)) {
            w->frames++;
            if (!GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_DELTA_UNIT)) {
              w->keyframes++;
              std::lock_guard<std::mutex> lock(w->mutex);
              const auto it = w->numbers.find(GST_BUFFER_PTS(b));
              if (it != w->numbers.end()) w->keyframe_numbers.push_back(it->second);
            }
          }
          return GST_PAD_PROBE_OK;
        },
        this, nullptr);
    gst_pad_add_probe(
        pad, GST_PAD_PROBE_TYPE_EVENT_UPSTREAM,
        [](GstPad *, GstPadProbeInfo *info, gpointer data) {
          if (gst_video_event_is_force_key_unit(GST_PAD_PROBE_INFO_EVENT(info)))
            static_cast<EncoderWatch *>(data)->keyframe_requests++;
          return GST_PAD_PROBE_OK;
        },
        this, nullptr);
    gst_object_unref(pad);
    gst_object_unref(enc);
  }
};

struct TestServer {
  EncoderWatch watch;
  std::atomic<int> medias{0};  // made by the server (shared: one while anyone watches)
  std::unique_ptr<cudadiff_server::Server> server;

  explicit TestServer(cudadiff_server::Options o) {
    // gst-rtsp-server's media funnels the RTCP its clients send (UDP sources
    // and, for TCP clients, an app source) into rtpbin; when a client's
    // first RTCP races its caps, GStreamer 1.22's funnel warns of a segment
    // before caps, and rtpbin's RTCP sink pad, which the funnel's output
    // feeds, warns of the same events right after. The stream is unaffected
    // (seen about once in ten runs of the join-and-leave test).
    static const bool once = [] {
      gst_test::tolerate_warning(
          {"store_sticky_event:<funnel", "Sticky event misordering, got 'segment' before 'caps'"});
      gst_test::tolerate_warning({"store_sticky_event:<recv_rtcp_sink_",
                                  "Sticky event misordering, got 'segment' before 'caps'"});
      return true;
    }();
    (void)once;
    o.port = 0;
    o.address = "127.0.0.1";
    o.on_media = [this](GstElement *media) {
      medias++;
      watch.attach(media);
    };
    server = std::make_unique<cudadiff_server::Server>(o);
    std::string error;
    EXPECT_TRUE(server->start(&error)) << error;
  }
  std::string url() const { return server->url(); }
  // The number of frames encoded when the server has served `plays` PLAY requests.
  uint64_t frames_at_play(uint64_t plays, double timeout_s = 20) {
    EXPECT_TRUE(wait_until([&] { return server->stats().plays >= plays; }, timeout_s))
        << "PLAY " << plays << " never came";
    return watch.frames;
  }
};

std::string client(const std::string &url, const std::string &rtspsrc_props = "latency=1000") {
  return "rtspsrc location=" + url + " " + rtspsrc_props +
         " ! rtpgstdepay ! cudadiffdec ! fakesink name=out sync=false";
}

// A client that checks every frame it shows against the source: frame
// numbers from the sender timestamps, bytes within the threshold. Runs in the
// client's streaming thread.
struct CheckedClient {
  EncoderWatch &watch;
  ReferenceFrames reference;
  std::mutex mutex;
  std::vector<uint64_t> numbers;  // of the frames shown, in order
  int worst_difference = 0;
  int missing_references = 0;
  int untimed = 0;
  std::unique_ptr<Pipeline> pipeline;

  CheckedClient(EncoderWatch &w, const std::string &description, int width, int height)
      : watch(w), reference(source(width, height, false)) {
    pipeline = std::make_unique<Pipeline>(
        description, false, [this](GstBuffer *buf, GstCaps *caps, uint64_t pts) {
          std::lock_guard<std::mutex> lock(mutex);
          const int64_t n = watch.number(pts);
          if (n < 0) {
            untimed++;
            return;
          }
          numbers.push_back(uint64_t(n));
          const Bytes &want = reference.frame(uint64_t(n));
          if (want.empty()) {
            missing_references++;
            return;
          }
          worst_difference =
              std::max(worst_difference, max_difference(diff_test::canonical_of(buf, caps), want));
        });
  }
  std::vector<uint64_t> shown() {
    std::lock_guard<std::mutex> lock(mutex);
    return numbers;
  }
  // Whether it has shown frame n or a later one.
  bool shows_from(uint64_t n) {
    std::lock_guard<std::mutex> lock(mutex);
    return !numbers.empty() && numbers.back() >= n;
  }
  void check_pictures() {
    std::lock_guard<std::mutex> lock(mutex);
    EXPECT_EQ(untimed, 0) << "frames with a sender timestamp the encoder never had";
    EXPECT_EQ(missing_references, 0) << "frames the source never made";
    EXPECT_LE(worst_difference, kThreshold) << "a shown byte is farther from its source byte";
  }
};

// Frames of [first, end) that `shown` holds.
size_t count_in(const std::vector<uint64_t> &shown, uint64_t first, uint64_t end) {
  std::set<uint64_t> unique(shown.begin(), shown.end());
  size_t n = 0;
  for (uint64_t f : unique) n += f >= first && f < end;
  return n;
}

cudadiff_server::Options large_keyframes() {
  cudadiff_server::Options o;
  o.source = source(640, 480);
  // Uncompressed: a keyframe is 900 KB, hundreds of packets.
  o.encoder_properties =
      "stream-version=1 threshold=" + std::to_string(kThreshold) + " compression=none";
  return o;
}

// The stats of the client's jitterbuffers that pushed packets (lost
// packets, retransmissions), each freed with gst_structure_free().
std::vector<GstStructure *> jitterbuffer_stats(Pipeline &p) {
  std::vector<GstStructure *> out;
  GstIterator *it = gst_bin_iterate_recurse(GST_BIN(p.element()));
  GValue v = G_VALUE_INIT;
  while (gst_iterator_next(it, &v) == GST_ITERATOR_OK) {
    GstElement *e = GST_ELEMENT(g_value_get_object(&v));
    GstElementFactory *f = gst_element_get_factory(e);
    if (f && g_strcmp0(GST_OBJECT_NAME(f), "rtpjitterbuffer") == 0) {
      GstStructure *stats = nullptr;
      g_object_get(e, "stats", &stats, nullptr);
      guint64 pushed = 0;
      gst_structure_get_uint64(stats, "num-pushed", &pushed);
      if (pushed > 0)
        out.push_back(stats);
      else
        gst_structure_free(stats);
    }
    g_value_reset(&v);
  }
  g_value_unset(&v);
  gst_iterator_free(it);
  return out;
}

void print_stats(const GstStructure *stats) {
  gchar *text = gst_structure_to_string(stats);
  std::printf("client's %s\n", text);
  g_free(text);
}

void print_jitterbuffer_stats(Pipeline &p) {
  for (GstStructure *stats : jitterbuffer_stats(p)) {
    print_stats(stats);
    gst_structure_free(stats);
  }
}

// A counter of those stats, summed over the jitterbuffers.
uint64_t jitterbuffer_counter(Pipeline &p, const char *name) {
  uint64_t sum = 0;
  for (GstStructure *stats : jitterbuffer_stats(p)) {
    guint64 n = 0;
    if (gst_structure_get_uint64(stats, name, &n)) sum += n;
    gst_structure_free(stats);
  }
  return sum;
}

// The stats of the client's decoder (frames out, keyframes, packets dropped,
// losses), or null when it has none; free with gst_structure_free().
GstStructure *decoder_stats(Pipeline &p) {
  GstElement *dec = p.get_by_factory("cudadiffdec");
  if (!dec) return nullptr;
  GstStructure *stats = nullptr;
  g_object_get(dec, "stats", &stats, nullptr);
  gst_object_unref(dec);
  return stats;
}

void print_decoder_stats(Pipeline &p) {
  GstStructure *stats = decoder_stats(p);
  if (!stats) return;
  print_stats(stats);
  gst_structure_free(stats);
}

// Whether a media's pipeline says it can seek in time (what rtsp-server
// asks before it seeks a media for a PLAY with a Range); true when the
// query goes unanswered (rtsp-server then asks its streams).
bool seekable(GstElement *pipeline) {
  GstQuery *query = gst_query_new_seeking(GST_FORMAT_TIME);
  gboolean can = TRUE;
  if (gst_element_query(pipeline, query))
    gst_query_parse_seeking(query, nullptr, &can, nullptr, nullptr);
  gst_query_unref(query);
  return can;
}

void expect_clean(Pipeline &p, const char *who) {
  EXPECT_EQ(p.error(), "") << who;
}

}  // namespace

// 1 % of the server's RTP packets (retransmissions too) are dropped:
// retransmission and keyframe requests keep at least 95 % of the frames on
// the screen, each within the threshold of its source frame.
TEST(DiffRtsp, OnePercentLossShowsAtLeast95PercentOfTheFrames) {
  cudadiff_server::Options o = large_keyframes();
  o.simulate_loss = 0.01;
  TestServer server(o);
  // rtspsrc as a user types it: its default latency (2 s) is the time it
  // waits for retransmissions (with 0.5 s, 30 of 25000 packets were lost here).
  CheckedClient c(server.watch, client(server.url(), ""), 640, 480);
  ASSERT_TRUE(c.pipeline->start());
  const uint64_t joined = server.frames_at_play(1);
  ASSERT_TRUE(wait_until([&] { return c.pipeline->frame_count() > 0; }, 20)) << c.pipeline->error();
  sleep_s(10);
  // The frames sent by now arrive within the client's latency (2 s); a
  // loaded machine may take longer: until the client shows the last of
  // them or a later one, at most 12 s.
  const uint64_t sent = server.watch.frames;
  wait_until([&] { return c.shows_from(sent - 1); }, 12);
  print_jitterbuffer_stats(*c.pipeline);
  c.pipeline->stop();
  const std::vector<uint64_t> shown = c.shown();
  const size_t expected = size_t(sent - joined);
  const size_t got = count_in(shown, joined, sent);
  const cudadiff_server::Stats st = server.server->stats();
  std::printf(
      "loss 1 %%: %zu of %zu frames shown (%.1f %%); %llu keyframes; keyframe requests "
      "%llu, %llu merged\n",
      got, expected, 100.0 * double(got) / double(expected), (unsigned long long)st.keyframes,
      (unsigned long long)st.keyframe_requests, (unsigned long long)st.keyframe_requests_merged);
  EXPECT_GE(expected, 200u);
  EXPECT_GE(double(got), 0.95 * double(expected));
  EXPECT_TRUE(std::is_sorted(shown.begin(), shown.end()));
  c.check_pictures();
  expect_clean(*c.pipeline, "client");
  EXPECT_EQ(server.server->error(), "");
}

// Without loss every frame from the first one on is shown, and a client that
// joins a running stream (no periodic keyframes) starts within 5 frames.
TEST(DiffRtsp, NoLossShowsEveryFrameAndLateClientStartsWithin5Frames) {
  cudadiff_server::Options o = large_keyframes();
  o.encoder_properties += " keyframe-interval=0";  // keyframes only when asked for
  TestServer server(o);
  CheckedClient first(server.watch, client(server.url()), 640, 480);
  ASSERT_TRUE(first.pipeline->start());
  const uint64_t first_joined = server.frames_at_play(1);
  ASSERT_TRUE(wait_until([&] { return first.pipeline->frame_count() > 0; }, 20));
  sleep_s(2);
  CheckedClient late(server.watch, client(server.url()), 640, 480);
  ASSERT_TRUE(late.pipeline->start());
  const uint64_t late_joined = server.frames_at_play(2);
  ASSERT_TRUE(wait_until([&] { return late.pipeline->frame_count() > 0; }, 20));
  sleep_s(4);
  // Until both show the last frame sent by now (or a later one), at most 12 s.
  const uint64_t sent = server.watch.frames;
  wait_until([&] { return first.shows_from(sent - 1) && late.shows_from(sent - 1); }, 12);
  first.pipeline->stop();
  late.pipeline->stop();
  for (auto *c : {&first, &late}) {
    const uint64_t joined = c == &first ? first_joined : late_joined;
    const std::vector<uint64_t> shown = c->shown();
    ASSERT_FALSE(shown.empty());
    // The decoder's first frame: GstVideoDecoder drops (clips) frames whose
    // timestamps fall before the segment rtpgstdepay started at its first
    // packet; rtspsrc's rtpbin can move a late client's timestamps back when
    // it synchronises, so the first few decoded frames may not reach the
    // sink (docs/streaming.md). Frames are decoded in order without gaps, so
    // the first decoded one is the first shown less those clipped.
    GstStructure *stats = decoder_stats(*c->pipeline);
    ASSERT_NE(stats, nullptr);
    guint64 decoded = 0;
    gst_structure_get_uint64(stats, "frames-out", &decoded);
    gst_structure_free(stats);
    ASSERT_GE(decoded, shown.size());
    const uint64_t clipped = decoded - shown.size();
    ASSERT_GE(shown[0], clipped);
    const uint64_t first_decoded = shown[0] - clipped;
    std::printf(
        "%s client: joined at frame %llu, first frame decoded %llu, shown %llu, %zu frames; "
        "keyframes:%s\n",
        c == &first ? "first" : "late", (unsigned long long)joined,
        (unsigned long long)first_decoded, (unsigned long long)shown[0], shown.size(),
        server.watch.keyframe_list().c_str());
    EXPECT_LE(first_decoded, joined + 5) << "the first frame comes within 5 frames of joining";
    EXPECT_LE(clipped, 10u);
    EXPECT_EQ(count_in(shown, shown[0], sent), size_t(sent - shown[0])) << "every frame shown";
    c->check_pictures();
    expect_clean(*c->pipeline, "client");
    EXPECT_TRUE(c->pipeline->warnings().empty()) << c->pipeline->warnings()[0];
  }
  EXPECT_EQ(server.server->error(), "");
}

// The first RTP packet a viewer's depayloader gets, and the seqnum-base of
// its caps then (gst-rtsp-server's RTP-Info, as rtspsrc passes it on).
struct FirstPacket {
  std::atomic<int> seq{-1}, base{-1};
  void attach(GstElement *depay) {
    GstPad *pad = gst_element_get_static_pad(depay, "sink");
    gst_pad_add_probe(
        pad, GST_PAD_PROBE_TYPE_BUFFER,
        [](GstPad *pad, GstPadProbeInfo *info, gpointer data) {
          auto *self = static_cast<FirstPacket *>(data);
          GstRTPBuffer rtp = GST_RTP_BUFFER_INIT;
          if (gst_rtp_buffer_map(GST_PAD_PROBE_INFO_BUFFER(info), GST_MAP_READ, &rtp)) {
            const int seq = gst_rtp_buffer_get_seq(&rtp);
            gst_rtp_buffer_unmap(&rtp);
            GstCaps *caps = gst_pad_get_current_caps(pad);
            guint base = 0;
            if (caps &&
                gst_structure_get_uint(gst_caps_get_structure(caps, 0), "seqnum-base", &base))
              self->base = int(base);
            if (caps) gst_caps_unref(caps);
            self->seq = seq;
          }
          return GST_PAD_PROBE_REMOVE;
        },
        this, nullptr);
    gst_object_unref(pad);
  }
};

// Viewers joining a stream that is already playing, over UDP, several at
// once: each one's first packet is the one RTP-Info names. gst-rtsp-server
// named the last packet it had sent, whose next was the viewer's first: its
// jitter buffer waited for the one named, threw the retransmission of it
// away (it cannot time it) and showed nothing for its latency (2 s by
// default) in 10 of 25 viewers measured. It could also name a
// retransmission (whose numbers are another stream's). The server names
// the packet after the last of the stream that has left rtpbin instead; at
// most 3 of the 20 viewers here may start elsewhere, or wait 1.5 s or more
// for their first frame.
TEST(DiffRtsp, ViewersJoiningAPlayingStreamStartAtThePacketNamed) {
  cudadiff_server::Options o;
  o.source = source(320, 240);
  TestServer server(o);
  const std::string viewer = "rtspsrc location=" + server.url() +
                             " latency=2000 protocols=udp ! rtpgstdepay name=depay ! cudadiffdec "
                             "! fakesink name=out sync=false";
  Pipeline first(viewer);
  ASSERT_TRUE(first.start());
  ASSERT_TRUE(wait_until([&] { return first.frame_count() > 0 || !first.error().empty(); }, 20))
      << first.error();
  sleep_s(1);
  constexpr int kRounds = 5, kViewers = 4;
  int elsewhere = 0, slow = 0;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::unique_ptr<Pipeline>> late;
    std::vector<std::unique_ptr<FirstPacket>> packets;
    std::vector<double> first_frame_s(kViewers, -1);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kViewers; ++i) {
      late.push_back(std::make_unique<Pipeline>(viewer));
      packets.push_back(std::make_unique<FirstPacket>());
      GstElement *depay = late.back()->get("depay");
      ASSERT_NE(depay, nullptr);
      packets.back()->attach(depay);
      gst_object_unref(depay);
      ASSERT_TRUE(late.back()->start());
    }
    wait_until(
        [&] {
          bool all = true;
          for (int i = 0; i < kViewers; ++i) {
            if (first_frame_s[i] < 0 && late[i]->frame_count() > 0)
              first_frame_s[i] =
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            all = all && first_frame_s[i] >= 0;
          }
          return all;
        },
        10);
    for (int i = 0; i < kViewers; ++i) {
      std::printf(
          "round %d, viewer %d: first packet %d, seqnum-base %d, first frame after %.3f s\n", round,
          i, packets[i]->seq.load(), packets[i]->base.load(), first_frame_s[i]);
      EXPECT_GE(first_frame_s[i], 0) << "round " << round << ", viewer " << i << ": no frame";
      EXPECT_GE(packets[i]->base.load(), 0) << "round " << round << ", viewer " << i;
      if (packets[i]->seq.load() != packets[i]->base.load()) elsewhere++;
      if (first_frame_s[i] >= 1.5) slow++;
    }
    for (auto &v : late) {
      v->stop();
      expect_clean(*v, "late viewer");
    }
  }
  EXPECT_LE(elsewhere, 3) << "of " << kRounds * kViewers
                          << " viewers, these did not start at the packet named";
  EXPECT_LE(slow, 3) << "of " << kRounds * kViewers << " viewers, these waited 1.5 s or more";
  first.stop();
  EXPECT_EQ(server.server->error(), "");
}

// The RTP-Info correction alone: the number replaced (modulo 65536, also
// the wrap to 0); a header naming it already, or without one number, stays
// (the empty result).
TEST(DiffRtsp, RtpInfoNamesThePacketGiven) {
  using cudadiff_server::rtp_info_with_seq;
  const std::string url = "url=rtsp://127.0.0.1:8554/cam/stream=0;";
  EXPECT_EQ(rtp_info_with_seq(url + "seq=25251;rtptime=1234", 25252),
            url + "seq=25252;rtptime=1234");
  EXPECT_EQ(rtp_info_with_seq(url + "seq=28130;rtptime=77", 28267), url + "seq=28267;rtptime=77");
  EXPECT_EQ(rtp_info_with_seq(url + "seq=65535;rtptime=9", 65536), url + "seq=0;rtptime=9");
  EXPECT_EQ(rtp_info_with_seq(url + "seq=7", 8), url + "seq=8");
  EXPECT_EQ(rtp_info_with_seq(url + "seq=25252;rtptime=1234", 25252), "");
  EXPECT_EQ(rtp_info_with_seq(url + "rtptime=1234", 25252), "");
  EXPECT_EQ(rtp_info_with_seq(url + "seq=;rtptime=1234", 25252), "");
  EXPECT_EQ(rtp_info_with_seq(url + "seq=1234567;rtptime=1234", 25252), "");
  EXPECT_EQ(rtp_info_with_seq(url + "seq=1;rtptime=2," + url + "seq=1;rtptime=2", 2), "");
}

// Viewers that name the stream by other URLs (the server by a host name
// instead of its address, a query, a trailing slash) watch the same media:
// one source and one encoder for all (before, these four URLs made two
// medias, and a camera busy with the first would fail the second).
TEST(DiffRtsp, ViewersOfOtherUrlFormsShareTheMedia) {
  cudadiff_server::Options o;
  o.source = source(160, 120);
  TestServer server(o);
  const std::string url = server.url();
  const std::string prefix = "rtsp://127.0.0.1:";
  ASSERT_EQ(url.compare(0, prefix.size(), prefix), 0) << url;
  std::vector<std::unique_ptr<Pipeline>> viewers;
  for (const std::string &form :
       {url, "rtsp://localhost:" + url.substr(prefix.size()), url + "?viewer=3", url + "/"}) {
    SCOPED_TRACE(form);
    viewers.push_back(std::make_unique<Pipeline>(client(form, "latency=200 protocols=tcp")));
    ASSERT_TRUE(viewers.back()->start());
    Pipeline &v = *viewers.back();
    EXPECT_TRUE(wait_until([&] { return v.frame_count() > 0 || !v.error().empty(); }, 20));
    EXPECT_GT(v.frame_count(), 0u) << v.error();
  }
  EXPECT_EQ(server.medias.load(), 1);
  for (auto &v : viewers) {
    v->stop();
    expect_clean(*v, "viewer");
  }
  EXPECT_EQ(server.server->error(), "");
}

// The decoder's keyframe request crosses rtpbin both ways: without join
// keyframes and periodic ones, a late client's cudadiffdec asks for a
// keyframe (force-key-unit), the client's rtpbin sends RTCP PLI, the server's
// rtpbin turns it into a force-key-unit event at cudadiffenc.
TEST(DiffRtsp, DecoderKeyframeRequestReachesTheEncoderAsPli) {
  cudadiff_server::Options o;
  o.source = source(160, 120);
  o.encoder_properties = "stream-version=1 keyframe-interval=0";
  o.keyframe_on_join = false;
  TestServer server(o);
  Pipeline first(client(server.url()));
  ASSERT_TRUE(first.start());
  ASSERT_TRUE(wait_until([&] { return first.frame_count() > 0; }, 20)) << first.error();
  sleep_s(1);
  const uint64_t requests_before = server.watch.keyframe_requests;
  const uint64_t keyframes_before = server.watch.keyframes;
  Pipeline late(client(server.url()));
  ASSERT_TRUE(late.start());
  ASSERT_TRUE(wait_until([&] { return late.frame_count() > 0; }, 20)) << late.error();
  EXPECT_GT(server.watch.keyframe_requests.load(), requests_before);
  EXPECT_GT(server.watch.keyframes.load(), keyframes_before);
  EXPECT_EQ(server.server->stats().join_keyframes, 0u);
  expect_clean(late, "late client");
}

// More than 20 clients join and leave at random times over 30 s, over UDP
// and TCP (interleaved in the RTSP connection): each shows frames, none sees
// an error while it plays, the server posts none and ends with no client. A
// client leaves at its time once it has shown a frame: on a loaded machine
// (the test suite runs tests side by side) a visit of 2 s can end before the
// first frame comes (RTSP's exchange, the jitter buffer's 500 ms); one that
// shows none within 10 s of its start fails.
TEST(DiffRtsp, ClientsJoinAndLeaveAtRandom) {
  cudadiff_server::Options o;
  o.source = source(320, 240);
  o.encoder_properties = "stream-version=1";
  TestServer server(o);
  // A client that stays from the start to the end keeps the media running.
  Pipeline anchor(client(server.url()));
  ASSERT_TRUE(anchor.start());
  ASSERT_TRUE(wait_until([&] { return anchor.frame_count() > 0; }, 20)) << anchor.error();

  std::mt19937 rng(testing_util::test_seed());
  struct Visit {
    double start, stop;
    bool tcp;
    std::unique_ptr<Pipeline> pipeline;
    double ended = -1;  // when it was stopped
  };
  std::vector<Visit> visits;
  const int kClients = 22;
  const double kSpan = 30;
  const double kFirstFrameWithin = 10;
  for (int i = 0; i < kClients; ++i) {
    Visit v;
    v.start = std::uniform_real_distribution<double>(0, kSpan - 4)(rng);
    v.stop = std::min(kSpan, v.start + std::uniform_real_distribution<double>(2, 8)(rng));
    v.tcp = i % 3 == 0;
    visits.push_back(std::move(v));
  }
  // The anchor is judged by the source's frame numbers it shows, not by the
  // time: on a loaded machine the live source can fall behind its 25 frames
  // a second, and a client's frames can queue behind its decoder.
  auto last_shown = [&]() -> int64_t {
    const std::vector<Shown> f = anchor.frames();
    return f.empty() ? -1 : server.watch.number(f.back().sender_pts);
  };
  const int64_t anchor_from = last_shown();
  ASSERT_GE(anchor_from, 0) << "the anchor's first frame has no frame number";
  const auto t0 = Clock::now();
  auto now = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  size_t running_max = 0;
  // A visit is over at its time once its client showed a frame, or when
  // its time for the first frame is up.
  auto over = [&](const Visit &v) {
    return now() >= v.stop &&
           (v.pipeline->frame_count() > 0 || now() >= v.start + kFirstFrameWithin);
  };
  for (bool waiting = true; now() < kSpan || waiting;) {
    size_t running = 0;
    waiting = false;
    for (Visit &v : visits) {
      if (!v.pipeline && now() >= v.start) {
        v.pipeline = std::make_unique<Pipeline>(
            client(server.url(), std::string("latency=500") + (v.tcp ? " protocols=tcp" : "")));
        EXPECT_TRUE(v.pipeline->start());
      }
      if (!v.pipeline || v.ended >= 0) continue;
      if (over(v)) {
        v.pipeline->stop();
        v.ended = now();
      } else {
        ++running;
        waiting |= now() >= kSpan;
      }
    }
    running_max = std::max(running_max, running);
    sleep_s(0.05);
  }
  const double span = now();
  const int64_t made_until = server.watch.latest_number();
  std::printf("%d clients, at most %zu at once; server: %llu connections\n", kClients, running_max,
              (unsigned long long)server.server->stats().clients_connected);
  for (const Visit &v : visits)
    if (v.ended > v.stop + 0.2)
      std::printf(
          "a %s client from %.1f s stayed until %.1f s instead of %.1f s for its first frame\n",
          v.tcp ? "TCP" : "UDP", v.start, v.ended, v.stop);
  for (Visit &v : visits) {
    ASSERT_TRUE(v.pipeline);
    v.pipeline->stop();
    // (Reported, not failed: rtspsrc with TCP can find its connection gone
    // while it sends PAUSE on its way down; the stream itself was fine.)
    for (const std::string &e : v.pipeline->shutdown_errors())
      std::printf("while the %s client stopped: %s\n", v.tcp ? "TCP" : "UDP", e.c_str());
    EXPECT_GT(v.pipeline->frame_count(), 0u)
        << (v.tcp ? "TCP" : "UDP") << " client from " << v.start << " s to " << v.stop << " s";
    expect_clean(*v.pipeline, "client");
  }
  // The frames made in the span reach the anchor within its latency (1 s);
  // a loaded machine may take longer: until it shows the last of them or a
  // later one, at most 12 s. Then the anchor has shown at least 90 % of them.
  wait_until([&] { return last_shown() >= made_until; }, 12);
  std::set<int64_t> shown;
  for (const Shown &f : anchor.frames()) {
    const int64_t n = server.watch.number(f.sender_pts);
    if (n > anchor_from && n <= made_until) shown.insert(n);
  }
  const int64_t made = made_until - anchor_from;
  std::printf(
      "in %.1f s the source made frames %lld to %lld (%lld), the anchor showed %zu of them\n", span,
      (long long)anchor_from + 1, (long long)made_until, (long long)made, shown.size());
  print_jitterbuffer_stats(anchor);
  print_decoder_stats(anchor);
  EXPECT_GE(double(shown.size()), 0.9 * double(made));
  // Nothing is lost on 127.0.0.1, and the viewers over TCP that come and go
  // do not hold back the anchor's packets (the server's senders' queues): it
  // asks for few packets again, which would then come twice. (Before, 3-8 %
  // of its packets came twice.)
  const uint64_t pushed = jitterbuffer_counter(anchor, "num-pushed");
  const uint64_t duplicates = jitterbuffer_counter(anchor, "num-duplicates");
  EXPECT_GT(pushed, 0u);
  EXPECT_LE(double(duplicates), 0.01 * double(pushed))
      << "the anchor got packets twice: it asked for them before they came";
  // and the source kept going (25 frames a second; half of that on a
  // heavily loaded machine)
  EXPECT_GE(double(made), 0.5 * kSpan * kFps);
  anchor.stop();
  expect_clean(anchor, "anchor client");
  EXPECT_EQ(server.server->error(), "");
  EXPECT_TRUE(wait_until([&] { return server.server->stats().clients_now == 0; }, 10))
      << server.server->stats().clients_now << " connections left open";
  EXPECT_GE(server.server->stats().plays, uint64_t(kClients + 1));
  // Viewers that keep up are never taken for ones left behind, nor for stalled ones.
  EXPECT_EQ(server.server->stats().slow_clients_closed, 0u);
  EXPECT_EQ(server.server->stats().stalled_clients_closed, 0u);
}

// A media file written by `pipeline` (a description that ends in the
// muxer or encoder; a filesink is added), removed with this object.
struct TempMedia {
  std::string path;
  TempMedia(const std::string &name, const std::string &pipeline)
      : path(std::string(g_get_tmp_dir()) + "/cudadiff-" + std::to_string(getpid()) + "-" + name) {
    Pipeline writer(pipeline + " ! filesink location=\"" + path + "\"");
    EXPECT_TRUE(writer.start());
    EXPECT_TRUE(wait_until([&] { return writer.eos() || !writer.error().empty(); }, 20));
    EXPECT_EQ(writer.error(), "");
  }
  TempMedia(const TempMedia &) = delete;
  ~TempMedia() { std::remove(path.c_str()); }
};

// 15 frames at 25 frames a second (0.6 s), for the loop's tests.
TempMedia loop_file() {
  return TempMedia("loop.mkv",
                   "videotestsrc num-buffers=15 pattern=smpte horizontal-speed=4 ! "
                   "video/x-raw,format=I420,width=160,height=120,framerate=25/1 ! matroskamux");
}

// A 1280x720 still image of noise (its keyframe about 560 KB): many packets
// for one frame, for the still-image tests.
TempMedia noise_still(const std::string &name) {
  return TempMedia(
      name, "videotestsrc num-buffers=1 pattern=snow ! video/x-raw,width=1280,height=720 ! pngenc");
}

// The server's options for `path` played in a loop, as cudadiff-server sets
// them for a file.
cudadiff_server::Options looped(const std::string &path) {
  cudadiff_server::Options o;
  o.source = cudadiff_server::source_description(path, "", 0, 0, 0);
  o.loop = true;
  return o;
}

// A media file is played in a loop (Options::loop, as cudadiff-server sets
// for a file): a viewer watching across the file's end goes on getting
// frames, their sender timestamps increasing, and a viewer joining after the
// first end gets frames too (before, the media ended for everyone watching it
// and a viewer joining it then got nothing).
TEST(DiffRtsp, AFileIsPlayedInALoop) {
  const TempMedia file = loop_file();
  TestServer server(looped(file.path));
  Pipeline first(client(server.url()));
  ASSERT_TRUE(first.start());
  // 40 frames: the file two and a half times.
  EXPECT_TRUE(wait_until([&] { return first.frame_count() >= 40 || !first.error().empty(); }, 20))
      << first.frame_count() << " frames shown";
  Pipeline second(client(server.url()));
  ASSERT_TRUE(second.start());
  EXPECT_TRUE(wait_until([&] { return second.frame_count() >= 10 || !second.error().empty(); }, 20))
      << second.frame_count() << " frames shown by the viewer that joined later";
  const std::vector<Shown> shown = first.frames();
  for (size_t i = 1; i < shown.size(); ++i)
    EXPECT_GT(shown[i].sender_pts, shown[i - 1].sender_pts) << "frame " << i;
  EXPECT_EQ(first.error(), "");
  EXPECT_EQ(second.error(), "");
  EXPECT_EQ(server.server->error(), "");
  first.stop();
  second.stop();
  server.server->stop();
}

// A file whose frames carry no timestamps (JPEG frames in multipart, with
// no framerate in their caps) is played at Options::untimed_fps and in a
// loop, with a warning that says so. Before, clocksync passed its frames at
// once (a whole file in a fraction of a second), the run took no time, and
// the file was played once; and multipartdemux cannot seek in time, so the
// loop seeks to its first byte instead.
TEST(DiffRtsp, AFileOfUntimedFramesIsPlayedInRealTimeInALoop) {
  for (const char *name : {"jpegenc", "jpegdec", "multipartmux", "multipartdemux"}) {
    GstElementFactory *factory = gst_element_factory_find(name);
    if (!factory) GTEST_SKIP() << name << " is missing (gst-plugins-good)";
    gst_object_unref(factory);
  }
  const TempMedia file("untimed.mjpg",
                       "videotestsrc num-buffers=10 pattern=smpte horizontal-speed=4 ! "
                       "video/x-raw,width=160,height=120,framerate=10/1 ! jpegenc ! multipartmux");
  cudadiff_server::Options o = looped(file.path);
  o.untimed_fps = 20;
  std::mutex mutex;
  std::vector<std::string> warnings;
  o.on_warning = [&](const std::string &text) {
    std::lock_guard<std::mutex> lock(mutex);
    warnings.push_back(text);
  };
  TestServer server(o);
  Pipeline viewer(client(server.url()));
  ASSERT_TRUE(viewer.start());
  ASSERT_TRUE(wait_until([&] { return viewer.frame_count() >= 1 || !viewer.error().empty(); }, 20));
  const gint64 first = g_get_monotonic_time();
  // 35 frames: the file three and a half times, 1.7 s at 20 frames a second.
  EXPECT_TRUE(wait_until([&] { return viewer.frame_count() >= 35 || !viewer.error().empty(); }, 20))
      << viewer.frame_count() << " frames shown";
  const double seconds = double(g_get_monotonic_time() - first) / 1e6;
  EXPECT_GE(seconds, 1.2) << "34 frames after the first, at 20 a second";
  EXPECT_FALSE(viewer.eos());
  const std::vector<Shown> shown = viewer.frames();
  ASSERT_GE(shown.size(), 35u);
  // The sender's times a frame interval apart, runs joined without a gap (a
  // frame the viewer lost, rare on 127.0.0.1, leaves a gap of whole
  // intervals).
  size_t one_interval = 0;
  for (size_t i = 1; i < shown.size(); ++i) {
    const uint64_t step = shown[i].sender_pts - shown[i - 1].sender_pts;
    EXPECT_TRUE(step > 0 && step % (GST_SECOND / 20) == 0) << "frame " << i << ": " << step;
    one_interval += step == GST_SECOND / 20;
  }
  EXPECT_GE(double(one_interval), 0.9 * double(shown.size() - 1));
  EXPECT_EQ(viewer.error(), "");
  EXPECT_EQ(server.server->error(), "");
  viewer.stop();
  server.server->stop();
  std::lock_guard<std::mutex> lock(mutex);
  bool said = false;
  for (const std::string &w : warnings) {
    said |=
        w.find("carry no timestamps: they are played at 20 frames per second") != std::string::npos;
    EXPECT_EQ(w.find("played once"), std::string::npos) << w;
  }
  EXPECT_TRUE(said) << warnings.size() << " warnings";
}

// The looped media says that it cannot seek (rtsp-server would otherwise
// take a viewer's PLAY with a Range back to the start for every viewer); a
// flushing seek that comes all the same (an application's) is followed, and
// the loop goes on without a stall. Before, its counts went on from before
// the seek, and the next run waited for all the time played before it.
TEST(DiffRtsp, AFlushingSeekOfTheLoopedMediaDoesNotStallIt) {
  const TempMedia file = loop_file();
  TestServer server(looped(file.path));
  Pipeline viewer(client(server.url()));
  ASSERT_TRUE(viewer.start());
  // 3 s: the file five times.
  ASSERT_TRUE(wait_until([&] { return viewer.frame_count() >= 75 || !viewer.error().empty(); }, 20))
      << viewer.frame_count() << " frames shown";
  GstElement *pipeline = GST_ELEMENT(gst_object_get_parent(GST_OBJECT(server.watch.media)));
  ASSERT_NE(pipeline, nullptr);
  EXPECT_FALSE(seekable(pipeline));
  EXPECT_TRUE(gst_element_seek_simple(pipeline, GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH, 0));
  gst_object_unref(pipeline);
  const size_t before = viewer.frame_count();
  sleep_s(3);
  // 75 frames in 3 s; a stall of the time played before the seek would
  // leave about 15.
  EXPECT_GE(viewer.frame_count() - before, 50u);
  EXPECT_EQ(viewer.error(), "");
  EXPECT_EQ(server.server->error(), "");
  viewer.stop();
  server.server->stop();
}

// A live source's media says that it cannot seek either: rtsp-server seeks
// a seekable media for a PLAY with a Range (`Range: npt=0-`, which some
// RTSP clients send), and that took the one stream every viewer shares
// back to the start (a test pattern jumped for all of them) and at times
// ended in an assertion inside rtsp-server.
TEST(DiffRtsp, ALiveMediaCannotBeSeekedByAViewer) {
  TestServer server(large_keyframes());
  Pipeline viewer(client(server.url()));
  ASSERT_TRUE(viewer.start());
  ASSERT_TRUE(wait_until([&] { return viewer.frame_count() >= 5 || !viewer.error().empty(); }, 20))
      << viewer.frame_count() << " frames shown";
  GstElement *pipeline = GST_ELEMENT(gst_object_get_parent(GST_OBJECT(server.watch.media)));
  ASSERT_NE(pipeline, nullptr);
  EXPECT_FALSE(seekable(pipeline));
  gst_object_unref(pipeline);
  EXPECT_EQ(viewer.error(), "");
  EXPECT_EQ(server.server->error(), "");
  viewer.stop();
  server.server->stop();
}

// A still image (one frame without a duration) is not played again and
// again: each run would take no time, and the loop would spin. It plays once,
// and the viewer (over UDP) shows it: the server holds the end of the stream
// back, since rtspsrc ends the stream at the server's BYE and drops what its
// RTP socket still holds. A large, noisy image has many packets to read then:
// without the hold-back, its viewer showed nothing in 4 runs of 20.
TEST(DiffRtsp, AStillImageIsPlayedOnce) {
  const TempMedia still = noise_still("still.png");
  TestServer server(looped(still.path));
  Pipeline viewer(client(server.url()));
  ASSERT_TRUE(viewer.start());
  EXPECT_TRUE(wait_until([&] { return viewer.frame_count() >= 1 || !viewer.error().empty(); }, 20));
  sleep_s(1);
  EXPECT_EQ(server.watch.frames.load(), 1u) << "frames encoded";
  EXPECT_EQ(viewer.frame_count(), 1u);
  EXPECT_EQ(viewer.error(), "");
  // While the end was held back the server sent the stream's last packet
  // twice more (where the last packets were lost, the copies show the gap):
  // the viewer's jitter buffer got them after the packet itself and dropped
  // them as late (or as duplicates). Where the packet itself was lost, the
  // first copy took its place and only the second is dropped.
  print_jitterbuffer_stats(viewer);
  EXPECT_GE(
      jitterbuffer_counter(viewer, "num-late") + jitterbuffer_counter(viewer, "num-duplicates"), 1u)
      << "copies of the last packet seen";
  // The viewer's stream ends at the server's BYE (half a second after the
  // last packet), not at the source's timeout (about 25 s) as it did where
  // the stream's own BYE was refused after the retransmission stream's.
  EXPECT_TRUE(wait_until([&] { return viewer.eos(); }, 10)) << "the end reached the viewer";
  viewer.stop();
  server.server->stop();
}

// A viewer that comes after the still image has ended, while the first
// viewer is still connected, gets the image and the end too, from a media
// of its own (the second encodes the image again): before, it joined the
// ended media and got no frame, no end of stream and no error, for as long
// as it stayed. Over TCP too.
TEST(DiffRtsp, AViewerComingAfterAStillImageEndedGetsItToo) {
  const TempMedia still(
      "still-late.png",
      "videotestsrc num-buffers=1 pattern=smpte ! video/x-raw,width=320,height=240 "
      "! pngenc");
  TestServer server(looped(still.path));
  Pipeline first(client(server.url()));
  ASSERT_TRUE(first.start());
  ASSERT_TRUE(wait_until([&] { return first.eos() || !first.error().empty(); }, 20));
  EXPECT_EQ(first.frame_count(), 1u);
  for (const char *props : {"latency=1000", "latency=1000 protocols=tcp"}) {
    SCOPED_TRACE(props);
    Pipeline late(client(server.url(), props));
    ASSERT_TRUE(late.start());
    EXPECT_TRUE(wait_until([&] { return late.eos() || !late.error().empty(); }, 15))
        << late.frame_count() << " frames shown";
    EXPECT_EQ(late.frame_count(), 1u);
    EXPECT_EQ(late.error(), "");
    late.stop();
  }
  EXPECT_EQ(server.medias.load(), 3) << "a media for each viewer that came after the end";
  EXPECT_EQ(first.error(), "");
  EXPECT_EQ(server.server->error(), "");
  first.stop();
  server.server->stop();
}

// With a low pace rate the still image's packets leave the server over
// about a second (a 1280x720 image of noise, about 560 KB, at 4 Mbit/s),
// after the encoder made them: the end is held back from when the last of
// them has left, not from when the encoder made it (then the viewer was
// sent the BYE while the packets were still queued for the pacer, and got
// nothing, in every run).
TEST(DiffRtsp, AStillImageIsPlayedOnceAtALowPaceRate) {
  const TempMedia still = noise_still("still-paced.png");
  cudadiff_server::Options o = looped(still.path);
  o.pace_rate_mbit = 4;
  TestServer server(o);
  // (a jitter buffer longer than the frame's second on the way)
  Pipeline viewer(client(server.url(), "latency=3000"));
  ASSERT_TRUE(viewer.start());
  EXPECT_TRUE(wait_until([&] { return viewer.frame_count() >= 1 || !viewer.error().empty(); }, 20));
  EXPECT_TRUE(wait_until([&] { return viewer.eos() || !viewer.error().empty(); }, 10));
  EXPECT_EQ(viewer.frame_count(), 1u);
  EXPECT_EQ(viewer.error(), "");
  viewer.stop();
  server.server->stop();
}

// A BYE at the end of a stream names every source of the server's session:
// rtspsrc ends a stream at the BYE of the stream's own source, and GStreamer's
// RTP session may refuse that BYE where another source's went first.
TEST(DiffRtsp, AByeNamesEverySourceOfTheSession) {
  auto be32 = [](std::vector<guint8> &v, guint32 x) {
    for (int b = 0; b < 4; ++b) v.push_back(guint8(x >> (24 - 8 * b)));
  };
  // A receiver report of 0x11111111 (no blocks), then its BYE with the reason
  // "End Of Stream" (1 + 13 bytes, padded to 16).
  std::vector<guint8> compound = {0x80, 201, 0, 1};
  be32(compound, 0x11111111);
  const std::string reason = "End Of Stream";
  std::vector<guint8> bye = {0x81, 203, 0, 5};
  be32(bye, 0x11111111);
  bye.push_back(guint8(reason.size()));
  bye.insert(bye.end(), reason.begin(), reason.end());
  bye.resize(bye.size() + 2, 0);
  ASSERT_EQ(bye.size(), 24u);
  compound.insert(compound.end(), bye.begin(), bye.end());
  GstBuffer *packet = gst_buffer_new_memdup(compound.data(), compound.size());
  GST_BUFFER_PTS(packet) = 42;

  GstBuffer *out =
      cudadiff_server::bye_naming_all(packet, {0x22222222, 0x11111111, 0x33333333, 0x22222222});
  ASSERT_NE(out, nullptr);
  // The compound as it was, then a BYE packet of one SSRC for each missing
  // one, in the order given, once each.
  std::vector<guint8> expected = compound;
  for (guint32 ssrc : {0x22222222u, 0x33333333u}) {
    const std::vector<guint8> header = {0x81, 203, 0, 1};
    expected.insert(expected.end(), header.begin(), header.end());
    be32(expected, ssrc);
  }
  GstMapInfo map;
  ASSERT_TRUE(gst_buffer_map(out, &map, GST_MAP_READ));
  EXPECT_EQ(std::vector<guint8>(map.data, map.data + map.size), expected);
  gst_buffer_unmap(out, &map);
  EXPECT_EQ(GST_BUFFER_PTS(out), 42u);
  EXPECT_TRUE(gst_rtcp_buffer_validate(out)) << "a valid RTCP compound, as receivers check";
  // Nothing to change: every source named (in the first BYE packet; the
  // ones added are not read), or no BYE at all.
  EXPECT_EQ(cudadiff_server::bye_naming_all(packet, {0x11111111}), nullptr);
  GstBuffer *report = gst_buffer_new_memdup(compound.data(), 8);
  EXPECT_EQ(cudadiff_server::bye_naming_all(report, {0x22222222}), nullptr);
  gst_buffer_unref(report);
  gst_buffer_unref(out);
  gst_buffer_unref(packet);
}

// playbin finds the depayloader and the decoder itself (decodebin: rtpgstdepay
// by rank, cudadiffdec by the caps rtpgstdepay gives).
TEST(DiffRtsp, PlaybinPlaysTheStream) {
  cudadiff_server::Options o;
  o.source = source(160, 120);
  o.encoder_properties = "stream-version=2";  // version 2 over RTP too
  TestServer server(o);
  Pipeline p("playbin uri=" + server.url() + " video-sink=\"fakesink name=out sync=false\"");
  ASSERT_TRUE(p.start());
  ASSERT_TRUE(wait_until([&] { return p.frame_count() >= 10 || !p.error().empty(); }, 20))
      << p.error();
  EXPECT_EQ(p.error(), "");
  const std::vector<std::string> f = p.factories();
  EXPECT_NE(std::find(f.begin(), f.end(), "rtpgstdepay"), f.end());
  EXPECT_NE(std::find(f.begin(), f.end(), "cudadiffdec"), f.end());
  for (const Shown &s : p.frames()) EXPECT_GE(server.watch.number(s.sender_pts), 0);
}

// Server::stop() closes every client's RTSP connection, also one whose request
// it is reading: here two clients have sent 64 KB of a request's header (one
// line that does not end, read a byte at a time) when it stops. A connection
// closed in one thread while another one reads it is read after its input
// stream is gone, a GLib critical (fatal here): the server must read and close
// its connections in one thread.
TEST(DiffRtsp, ServerStopsWhileItReadsARequest) {
  const std::string request =
      "OPTIONS * RTSP/1.0\r\nCSeq: 1\r\nX-Filler: " + std::string(65536, 'a');
  for (int round = 0; round < 10; ++round) {
    cudadiff_server::Options o;
    o.source = source(160, 120);
    TestServer server(o);
    std::vector<int> sockets;
    for (int i = 0; i < 2; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockets.push_back(fd);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(uint16_t(server.server->port()));
      ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr), 0);
      EXPECT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL), ssize_t(request.size()));
    }
    sleep_s(0.005);
    server.server->stop();
    for (int fd : sockets) close(fd);
    EXPECT_EQ(server.server->error(), "");
  }
}

namespace {

// An RTSP client, by default over TCP (RTP interleaved in its connection),
// that plays and then reads nothing more, with a small receive buffer, so
// that the server's side of the connection fills within a second at a few
// MB/s. With `over_udp`, RTP and RTCP come to two UDP sockets of its own
// instead, which it does not read either, and it sends nothing after its
// PLAY (no RTCP, no keep-alive): a viewer over UDP that froze, or whose
// network went away.
struct NonReadingViewer {
  int fd = -1;
  int udp[2] = {-1, -1};
  std::string error;

  std::string request(const std::string &text) {
    if (send(fd, text.data(), text.size(), MSG_NOSIGNAL) != ssize_t(text.size())) return "";
    std::string in;
    char c;
    while (in.find("\r\n\r\n") == std::string::npos && recv(fd, &c, 1, 0) == 1) in += c;
    size_t length = 0;
    const size_t at = in.find("Content-Length: ");
    if (at != std::string::npos) length = std::stoul(in.substr(at + 16));
    std::string body(length, '\0');
    for (size_t got = 0; got < length;) {
      const ssize_t n = recv(fd, &body[got], length - got, 0);
      if (n <= 0) return "";
      got += size_t(n);
    }
    return in + body;
  }

  bool play(int port, const std::string &url, bool over_udp = false) {
    std::string transport = "RTP/AVPF/TCP;unicast;interleaved=0-1";
    if (over_udp) {
      int ports[2];
      for (int i = 0; i < 2; i++) {
        udp[i] = socket(AF_INET, SOCK_DGRAM, 0);
        sockaddr_in local{};
        local.sin_family = AF_INET;
        local.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t length = sizeof local;
        if (bind(udp[i], reinterpret_cast<sockaddr *>(&local), sizeof local) != 0 ||
            getsockname(udp[i], reinterpret_cast<sockaddr *>(&local), &length) != 0)
          return false;
        ports[i] = ntohs(local.sin_port);
      }
      transport = "RTP/AVPF/UDP;unicast;client_port=" + std::to_string(ports[0]) + "-" +
                  std::to_string(ports[1]);
    }
    fd = socket(AF_INET, SOCK_STREAM, 0);
    const int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(uint16_t(port));
    if (connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0) return false;
    const std::string sdp = request("DESCRIBE " + url + " RTSP/1.0\r\nCSeq: 1\r\n\r\n");
    const size_t c = sdp.find("a=control:stream=");
    if (c == std::string::npos) {
      error = "no stream control in: " + sdp;
      return false;
    }
    const std::string track = sdp.substr(c + 10, sdp.find_first_of("\r\n", c) - c - 10);
    const std::string setup =
        request("SETUP " + url + "/" + track + " RTSP/1.0\r\nCSeq: 2\r\nTransport: " + transport +
                "\r\n\r\n");
    const size_t s = setup.find("Session: ");
    if (setup.rfind("RTSP/1.0 200", 0) != 0 || s == std::string::npos) {
      error = "SETUP: " + setup;
      return false;
    }
    const std::string session = setup.substr(s + 9, setup.find_first_of(";\r\n", s) - s - 9);
    const std::string play =
        "PLAY " + url + " RTSP/1.0\r\nCSeq: 3\r\nSession: " + session + "\r\n\r\n";
    return send(fd, play.data(), play.size(), MSG_NOSIGNAL) == ssize_t(play.size());
  }

  // Reads what the connection holds until the server closes it (true) or
  // nothing comes for `timeout_s` (false).
  bool closed_by_server(double timeout_s) {
    timeval tv{};
    tv.tv_sec = time_t(timeout_s);
    tv.tv_usec = suseconds_t((timeout_s - double(tv.tv_sec)) * 1e6);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::vector<char> buf(65536);
    for (;;) {
      const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;
    }
  }

  // Reads `chunk` bytes every `interval_ms` (a viewer slower than the
  // stream) until `done()` or the server closes the connection (true), or
  // `timeout_s` has passed (false).
  bool read_slowly(size_t chunk, int interval_ms, double timeout_s,
                   const std::function<bool()> &done) {
    timeval tv{0, 100000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::vector<char> buf(chunk);
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < end) {
      if (done()) return true;
      const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
    }
    return false;
  }

  ~NonReadingViewer() {
    if (fd >= 0) close(fd);
    for (int u : udp)
      if (u >= 0) close(u);
  }
};

// A stream of about 6 MB/s: every frame a keyframe, stored uncompressed.
cudadiff_server::Options fast_stream() {
  cudadiff_server::Options o;
  o.source = source(320, 240);
  o.encoder_properties = "stream-version=1 threshold=0 compression=none keyframe-interval=1";
  return o;
}

}  // namespace

// A viewer over TCP that stops reading is disconnected after the stall
// timeout. The others go on: a viewer over UDP keeps getting frames all the
// while, and a viewer over TCP that comes later plays. (With rtsp-server
// 1.22 alone, the stalled viewer stayed connected, the server's memory grew
// by the stream's rate, after about a minute the UDP viewer froze, and a
// later TCP viewer got nothing.)
TEST(DiffRtsp, AViewerOverTcpThatStopsReadingIsDisconnected) {
#if !defined(__linux__)
  GTEST_SKIP() << "the server sees a stalled connection from Linux's TCP_INFO only";
#endif
  cudadiff_server::Options o = fast_stream();
  o.stalled_client_timeout_s = 2;
  TestServer server(o);
  Pipeline udp(client(server.url(), "protocols=udp latency=500"));
  ASSERT_TRUE(udp.start());
  ASSERT_TRUE(wait_until([&] { return udp.frame_count() >= 5 || !udp.error().empty(); }, 20))
      << udp.error();
  NonReadingViewer stalled;
  ASSERT_TRUE(stalled.play(server.server->port(), server.url())) << stalled.error;
  ASSERT_TRUE(wait_until([&] { return server.server->stats().stalled_clients_closed >= 1; }, 30))
      << "the viewer that reads nothing was not disconnected";
  EXPECT_TRUE(stalled.closed_by_server(10));
  EXPECT_EQ(server.server->stats().stalled_clients_closed, 1u);
  // The UDP viewer goes on, and a new viewer over TCP plays.
  const uint64_t shown = udp.frame_count();
  EXPECT_TRUE(wait_until([&] { return udp.frame_count() >= shown + 50; }, 10))
      << udp.frame_count() - shown << " frames in 10 s after the disconnection";
  Pipeline tcp(client(server.url(), "protocols=tcp latency=500"));
  ASSERT_TRUE(tcp.start());
  EXPECT_TRUE(wait_until([&] { return tcp.frame_count() >= 25 || !tcp.error().empty(); }, 20))
      << tcp.frame_count() << " frames over TCP; " << tcp.error();
  EXPECT_EQ(udp.error(), "");
  EXPECT_EQ(tcp.error(), "");
  EXPECT_EQ(server.server->error(), "");
  tcp.stop();
  udp.stop();
  server.server->stop();
}

// A viewer over UDP that stops (it sends no RTCP and no request any more, and
// reads nothing) loses its session at the session timeout, and the server
// closes its RTSP connection 5 s later. (With rtsp-server 1.22's default the
// connection stayed open for as long as the viewer's side of it did: for a
// viewer that was gone, for ever, one socket and client kept in the server
// for each, and counted as connected.) A viewer that plays on is kept.
TEST(DiffRtsp, AViewerOverUdpThatStopsIsDisconnectedAtItsSessionTimeout) {
  cudadiff_server::Options o;
  o.source = source(160, 120);
  o.session_timeout_s = 2;
  TestServer server(o);
  Pipeline playing(client(server.url(), "protocols=udp latency=500"));
  ASSERT_TRUE(playing.start());
  ASSERT_TRUE(
      wait_until([&] { return playing.frame_count() >= 5 || !playing.error().empty(); }, 20))
      << playing.error();
  NonReadingViewer gone;
  ASSERT_TRUE(gone.play(server.server->port(), server.url(), true)) << gone.error;
  ASSERT_TRUE(wait_until([&] { return server.server->stats().plays >= 2; }, 10));
  EXPECT_EQ(server.server->stats().clients_now, 2u);
  EXPECT_TRUE(gone.closed_by_server(20)) << "the stopped viewer's connection is still open";
  EXPECT_TRUE(wait_until([&] { return server.server->stats().clients_now == 1; }, 5))
      << server.server->stats().clients_now << " clients connected";
  // The viewer that plays (its RTCP keeps its session) goes on.
  const uint64_t shown = playing.frame_count();
  EXPECT_TRUE(wait_until([&] { return playing.frame_count() >= shown + 30; }, 10))
      << playing.frame_count() - shown << " frames in 10 s after the disconnection";
  EXPECT_EQ(playing.error(), "");
  EXPECT_EQ(server.server->error(), "");
  playing.stop();
  server.server->stop();
}

// A viewer over TCP that reads, but slower than the stream, beside one that
// keeps up: rtsp-server goes on feeding the faster one and queues the slower
// one's packets; once they span more than 10 s it stops sending to that
// viewer. The server then closes that viewer's connection, so that its client
// sees the stream end instead of a picture that stops for good. (With
// rtsp-server 1.22 alone the connection stayed open and got nothing more.)
// The faster viewer goes on.
TEST(DiffRtsp, AViewerOverTcpLeftBehindBesideAFasterOneIsDisconnected) {
  cudadiff_server::Options o = fast_stream();
  o.stalled_client_timeout_s = 0;  // (it reads: no stall; and never by that rule here)
  TestServer server(o);
  Pipeline fast(client(server.url(), "protocols=tcp latency=500"));
  ASSERT_TRUE(fast.start());
  ASSERT_TRUE(wait_until([&] { return fast.frame_count() >= 5 || !fast.error().empty(); }, 20))
      << fast.error();
  NonReadingViewer slow;
  ASSERT_TRUE(slow.play(server.server->port(), server.url())) << slow.error;
  const auto played = std::chrono::steady_clock::now();
  // 4 KB every 10 ms: at most 400 KB/s of a stream of about 6 MB/s.
  const bool ended = slow.read_slowly(
      4096, 10, 45, [&] { return server.server->stats().slow_clients_closed >= 1; });
  const double after_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - played).count();
  EXPECT_TRUE(ended);
  ASSERT_EQ(server.server->stats().slow_clients_closed, 1u)
      << "the viewer left behind was not disconnected in 45 s";
  // Not before rtsp-server gave up on it: its queue spans 10 s of the stream by then.
  EXPECT_GE(after_s, 9.0);
  EXPECT_TRUE(slow.closed_by_server(10));
  EXPECT_EQ(server.server->stats().stalled_clients_closed, 0u);
  const uint64_t shown = fast.frame_count();
  EXPECT_TRUE(wait_until([&] { return fast.frame_count() >= shown + 50; }, 10))
      << fast.frame_count() - shown << " frames in 10 s after the disconnection";
  EXPECT_EQ(fast.error(), "");
  EXPECT_EQ(server.server->error(), "");
  fast.stop();
  server.server->stop();
}

// The packets that leave rtpbin for the senders carry times that never go
// back (DTS, else PTS), retransmissions included, which keep the PTS of the
// packet they repeat. rtsp-server's queue for a viewer over TCP that reads
// slower than the stream asserts that order, and the assertion stops the
// process.
TEST(DiffRtsp, PacketsLeaveWithTimesInOrderRetransmissionsToo) {
  cudadiff_server::Options o;
  o.source = source(320, 240);
  o.simulate_loss = 0.05;
  TestServer server(o);
  Pipeline viewer(client(server.url(), "protocols=udp latency=500"));
  ASSERT_TRUE(viewer.start());
  ASSERT_TRUE(wait_until([&] { return viewer.frame_count() >= 5 || !viewer.error().empty(); }, 20))
      << viewer.error();
  struct Order {
    std::mutex mutex;
    GstClockTime latest_time = GST_CLOCK_TIME_NONE, latest_pts = GST_CLOCK_TIME_NONE;
    uint64_t packets = 0, backwards = 0, older_pts = 0;
    void see(GstBuffer *b) {
      std::lock_guard<std::mutex> lock(mutex);
      packets++;
      const GstClockTime t = GST_BUFFER_DTS_OR_PTS(b), pts = GST_BUFFER_PTS(b);
      if (!GST_CLOCK_TIME_IS_VALID(t) || (GST_CLOCK_TIME_IS_VALID(latest_time) && t < latest_time))
        backwards++;
      else
        latest_time = t;
      if (GST_CLOCK_TIME_IS_VALID(pts) && GST_CLOCK_TIME_IS_VALID(latest_pts) && pts < latest_pts)
        older_pts++;
      else if (GST_CLOCK_TIME_IS_VALID(pts))
        latest_pts = pts;
    }
  } order;
  GstObject *pipeline = gst_object_get_parent(GST_OBJECT(server.watch.media));
  ASSERT_NE(pipeline, nullptr);
  GstElement *rtpbin = find_by_factory(GST_BIN(pipeline), "rtpbin");
  gst_object_unref(pipeline);
  ASSERT_NE(rtpbin, nullptr);
  GstPad *out = gst_element_get_static_pad(rtpbin, "send_rtp_src_0");
  ASSERT_NE(out, nullptr);
  const gulong probe = gst_pad_add_probe(
      out, GstPadProbeType(GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_BUFFER_LIST),
      [](GstPad *, GstPadProbeInfo *info, gpointer data) {
        auto *order = static_cast<Order *>(data);
        if (info->type & GST_PAD_PROBE_TYPE_BUFFER) {
          order->see(GST_PAD_PROBE_INFO_BUFFER(info));
        } else {
          GstBufferList *list = GST_PAD_PROBE_INFO_BUFFER_LIST(info);
          for (guint i = 0; i < gst_buffer_list_length(list); ++i)
            order->see(gst_buffer_list_get(list, i));
        }
        return GST_PAD_PROBE_OK;
      },
      &order, nullptr);
  // Until retransmissions have gone out (the viewer's NACKs for the lost 5 %).
  EXPECT_TRUE(wait_until(
      [&] {
        std::lock_guard<std::mutex> lock(order.mutex);
        return order.older_pts >= 5;
      },
      30));
  gst_pad_remove_probe(out, probe);
  gst_object_unref(out);
  gst_object_unref(rtpbin);
  {
    std::lock_guard<std::mutex> lock(order.mutex);
    EXPECT_GE(order.older_pts, 5u) << "retransmissions seen (" << order.packets << " packets)";
    EXPECT_EQ(order.backwards, 0u) << "of " << order.packets << " packets";
  }
  EXPECT_EQ(viewer.error(), "");
  viewer.stop();
  server.server->stop();
}
