// The difference stream over SRT on 127.0.0.1: a live source, cudadiffenc,
// srtsink in listener mode (any number of callers), and a direct decode of
// the same packets through a tee; clients are srtsrc callers, one from the
// start (cudadiffdec), one joining late (decodebin: found by the typefinder in
// the middle of the stream). Every client shows, frame for frame, what the
// direct decode shows, starting at a keyframe.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "stream_test_util.h"

using namespace stream_test;

namespace {

constexpr int kKeyframeInterval = 10;

struct Sender {
  std::mutex mutex;
  std::map<uint64_t, uint64_t> numbers;  // sender pts -> frame number
  std::set<uint64_t> keyframes;          // sender pts
};

// Checks `client` against the direct decode; returns the frame numbers where
// its runs of consecutive frames start.
std::vector<uint64_t> check_against(Pipeline &direct, Sender &sender, Pipeline &client,
                                    const char *who) {
  std::map<uint64_t, Bytes> decoded;
  for (Shown &f : direct.frames()) decoded[f.sender_pts] = f.bytes;
  std::lock_guard<std::mutex> lock(sender.mutex);
  std::vector<uint64_t> runs;
  bool first = true;
  uint64_t previous = 0;
  for (const Shown &f : client.frames()) {
    const auto number = sender.numbers.find(f.sender_pts);
    if (number == sender.numbers.end()) {
      ADD_FAILURE() << who << ": a frame the server did not send";
      continue;
    }
    const uint64_t n = number->second;
    if (first || n != previous + 1) {
      EXPECT_TRUE(sender.keyframes.count(f.sender_pts))
          << who << ": frame " << n << " after a gap is not a keyframe";
      runs.push_back(n);
    }
    EXPECT_TRUE(first || n > previous) << who << ": frame " << n << " after " << previous;
    const auto it = decoded.find(f.sender_pts);
    if (it == decoded.end())
      ADD_FAILURE() << who << ": frame " << n << " is not in the direct decode";
    else if (it->second != f.bytes)
      ADD_FAILURE() << who << ": frame " << n << " differs from the direct decode";
    previous = n;
    first = false;
  }
  return runs;
}

}  // namespace

TEST(DiffSrt, ClientsFromTheStartAndLateShowWhatTheDirectDecodeShows) {
  const int port = free_udp_port();
  ASSERT_GT(port, 0);
  Sender sender;  // written by the server's probe: it outlives the server
  // The test asserts no gaps: a latency of 1 s (SRT's default is 125 ms)
  // leaves a loaded machine time for retransmissions.
  Pipeline server(
      "videotestsrc is-live=true pattern=ball ! video/x-raw,format=I420,width=160,height=120,"
      "framerate=30/1 ! cudadiffenc name=enc stream-version=1 keyframe-interval=" +
          std::to_string(kKeyframeInterval) +
          " ! tee name=t t. ! queue ! srtsink uri=srt://127.0.0.1:" + std::to_string(port) +
          "?mode=listener latency=1000 wait-for-connection=false sync=false t. ! queue ! "
          "cudadiffdec ! fakesink name=out sync=false",
      true);
  GstElement *enc = server.get("enc");
  GstPad *pad = gst_element_get_static_pad(enc, "src");
  gst_pad_add_probe(
      pad, GST_PAD_PROBE_TYPE_BUFFER,
      [](GstPad *, GstPadProbeInfo *info, gpointer data) {
        auto *s = static_cast<Sender *>(data);
        GstBuffer *b = GST_PAD_PROBE_INFO_BUFFER(info);
        if (GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_HEADER)) return GST_PAD_PROBE_OK;
        std::lock_guard<std::mutex> lock(s->mutex);
        s->numbers[GST_BUFFER_PTS(b)] = s->numbers.size();
        if (!GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_DELTA_UNIT))
          s->keyframes.insert(GST_BUFFER_PTS(b));
        return GST_PAD_PROBE_OK;
      },
      &sender, nullptr);
  gst_object_unref(pad);
  gst_object_unref(enc);
  ASSERT_TRUE(server.start());
  ASSERT_TRUE(wait_until([&] { return server.frame_count() >= 5; }, 20)) << server.error();

  const std::string uri = "srt://127.0.0.1:" + std::to_string(port);
  Pipeline early("srtsrc uri=" + uri + " latency=1000 ! cudadiffdec ! fakesink name=out sync=false",
                 true);
  ASSERT_TRUE(early.start());
  ASSERT_TRUE(wait_until([&] { return early.frame_count() >= 30; }, 20)) << early.error();
  Pipeline late("srtsrc uri=" + uri + " latency=1000 ! decodebin ! fakesink name=out sync=false",
                true);
  ASSERT_TRUE(late.start());
  ASSERT_TRUE(wait_until([&] { return late.frame_count() >= 30; }, 20)) << late.error();
  sleep_s(0.5);
  const std::vector<std::string> f = late.factories();  // (decodebin empties itself at stop)
  EXPECT_NE(std::find(f.begin(), f.end(), "cudadiffdec"), f.end());
  late.stop();
  early.stop();
  // The direct decode runs beside the clients and may be behind them (a
  // loaded machine); it decodes in order: once it has each client's last
  // frame it has all that they showed.
  for (Pipeline *p : {&early, &late}) {
    const uint64_t last = p->frames().back().sender_pts;
    EXPECT_TRUE(wait_until([&] { return server.has_frame(last); }, 20))
        << "the direct decode never showed a client's last frame";
  }
  server.stop();

  const std::vector<uint64_t> early_runs = check_against(server, sender, early, "early client");
  const std::vector<uint64_t> late_runs = check_against(server, sender, late, "late client");
  ASSERT_EQ(early_runs.size(), 1u) << "one run without gaps";
  ASSERT_EQ(late_runs.size(), 1u) << "one run without gaps";
  EXPECT_EQ(late_runs[0] % kKeyframeInterval, 0u) << "the late client starts at a keyframe";
  EXPECT_GT(late_runs[0], early_runs[0] + 20) << "the late client joined later";
  for (Pipeline *p : {&early, &late}) {
    EXPECT_EQ(p->error(), "");
    EXPECT_TRUE(p->warnings().empty()) << p->warnings()[0];
  }
  EXPECT_EQ(server.error(), "");
}
