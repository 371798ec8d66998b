// The difference stream over TCP on 127.0.0.1, by gst_parse_launch: a server
// (live test pattern -> cudadiffenc -> tcpserversink sync-method=
// latest-keyframe, port chosen by the system) whose encoder output is also
// decoded directly through a tee; clients (tcpclientsrc -> cudadiffdec or
// decodebin). A client's frames are matched to the direct decode by the
// sender's timestamp the decoder attaches (GstReferenceTimestampMeta):
// every client must show, frame for frame, exactly what the direct decode
// shows, starting at a keyframe. Damage comes from an in-test TCP proxy that
// flips, drops or cuts bytes between server and client, placed by packet
// (the proxy follows the packet headers), so that the same test holds for
// both stream versions whatever their sizes.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <cstdio>
#include <functional>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../elements/cudadiff_util.h"
#include "gst_test.h"
#include "stream_test_util.h"

using diff_test::Bytes;

namespace {

using stream_test::Pipeline;
using stream_test::wait_until;

// The clients' and the direct decode's frames, with their bytes.
constexpr bool kKeepBytes = true;

constexpr int kFps = 60;
constexpr int kKeyframeInterval = 10;

// The server: a live moving pattern, the encoder, tcpserversink on a free
// port, and a direct decode of the same packets (fakesink "out"). Records
// which sender timestamps are keyframes.
class Server {
 public:
  Server(int frames, const std::string &encoder_props) {
    pipeline_ = std::make_unique<Pipeline>(
        "videotestsrc is-live=true pattern=ball num-buffers=" + std::to_string(frames) +
            " ! video/x-raw,format=I420,width=96,height=64,framerate=" + std::to_string(kFps) +
            "/1 ! cudadiffenc name=enc keyframe-interval=" + std::to_string(kKeyframeInterval) +
            " " + encoder_props +
            " ! tee name=t t. ! queue ! tcpserversink name=sink host=127.0.0.1 port=0 "
            "sync-method=latest-keyframe sync=false t. ! queue ! cudadiffdec ! fakesink name=out "
            "sync=false",
        kKeepBytes);
    GstElement *enc = pipeline_->get("enc");
    GstPad *pad = gst_element_get_static_pad(enc, "src");
    gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_BUFFER, on_packet, this, nullptr);
    gst_object_unref(pad);
    gst_object_unref(enc);
  }
  // Stops the pipeline before the members its probe writes go: a test may end
  // while the server still streams.
  ~Server() { pipeline_->stop(); }
  Server(const Server &) = delete;
  Server &operator=(const Server &) = delete;
  // Listens (PAUSED: the live source does not run yet, tcpserversink
  // accepts clients); false when it could not.
  bool listen() {
    GstElement *p = pipeline_->element();
    if (!p || gst_element_set_state(p, GST_STATE_PAUSED) == GST_STATE_CHANGE_FAILURE) return false;
    GstElement *sink = pipeline_->get("sink");
    g_object_get(sink, "current-port", &port_, nullptr);
    gst_object_unref(sink);
    return port_ > 0;
  }
  // Streams from the first frame on, once `clients` are connected (a loaded
  // machine may take a while to connect one: the damage is placed by the
  // packets a client receives, so it must see them from the start).
  bool play_when_connected(guint clients) {
    GstElement *sink = pipeline_->get("sink");
    const bool connected = wait_until(
        [&] {
          guint handles = 0;
          g_object_get(sink, "num-handles", &handles, nullptr);
          return handles >= clients;
        },
        20);
    gst_object_unref(sink);
    return connected && pipeline_->start();
  }
  // Listens and streams at once.
  bool start() { return listen() && pipeline_->start(); }
  int port() const { return port_; }
  Pipeline &direct() { return *pipeline_; }
  bool is_keyframe(uint64_t pts) {
    std::lock_guard<std::mutex> lock(mutex_);
    return keyframes_.count(pts) > 0;
  }
  // The frame number of a sender timestamp (live timestamps are not n/fps),
  // -1 when no packet had it.
  int64_t frame_number(uint64_t pts) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = numbers_.find(pts);
    return it == numbers_.end() ? -1 : int64_t(it->second);
  }
  uint64_t last_pts() {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_pts_;
  }

 private:
  static GstPadProbeReturn on_packet(GstPad *, GstPadProbeInfo *info, gpointer data) {
    auto *self = static_cast<Server *>(data);
    GstBuffer *b = GST_PAD_PROBE_INFO_BUFFER(info);
    if (GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_HEADER)) return GST_PAD_PROBE_OK;
    std::lock_guard<std::mutex> lock(self->mutex_);
    self->numbers_[GST_BUFFER_PTS(b)] = self->numbers_.size();
    self->last_pts_ = GST_BUFFER_PTS(b);
    if (!GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_DELTA_UNIT))
      self->keyframes_.insert(GST_BUFFER_PTS(b));
    return GST_PAD_PROBE_OK;
  }
  std::unique_ptr<Pipeline> pipeline_;
  int port_ = 0;
  std::mutex mutex_;
  std::set<uint64_t> keyframes_;
  std::map<uint64_t, size_t> numbers_;
  uint64_t last_pts_ = GST_CLOCK_TIME_NONE;
};

std::string client_pipeline(int port, const char *decoder = "cudadiffdec") {
  return "tcpclientsrc host=127.0.0.1 port=" + std::to_string(port) + " ! " + decoder +
         " ! fakesink name=out sync=false";
}

// Each run of consecutive frames of `client` starts at a keyframe and equals
// the direct decode frame for frame. Returns the runs' first frame numbers.
std::vector<uint64_t> check_against_direct(Server &server, Pipeline &client, const char *who) {
  // The direct decode runs beside the clients and may be behind them (a
  // loaded machine): it decodes in order, so once it has the client's last
  // frame it has all of them.
  const std::vector<stream_test::Shown> shown = client.frames();
  if (!shown.empty()) {
    EXPECT_TRUE(wait_until([&] { return server.direct().has_frame(shown.back().sender_pts); }, 20))
        << who << ": the direct decode never showed the client's last frame";
  }
  std::map<uint64_t, Bytes> direct;
  for (auto &f : server.direct().frames()) direct[f.sender_pts] = f.bytes;
  std::vector<uint64_t> run_starts;
  uint64_t previous = 0;
  bool first = true;
  for (const auto &f : shown) {
    EXPECT_NE(f.sender_pts, GST_CLOCK_TIME_NONE) << who << ": no sender timestamp";
    const int64_t number = server.frame_number(f.sender_pts);
    EXPECT_GE(number, 0) << who << ": a frame the server did not send";
    const uint64_t n = uint64_t(number);
    if (first || n != previous + 1) {
      EXPECT_TRUE(server.is_keyframe(f.sender_pts))
          << who << ": frame " << n << " after a gap is not a keyframe";
      run_starts.push_back(n);
    }
    EXPECT_TRUE(first || n > previous) << who << ": frame " << n << " after " << previous;
    const auto it = direct.find(f.sender_pts);
    if (it == direct.end()) {
      ADD_FAILURE() << who << ": frame " << n << " is not in the direct decode";
    } else if (it->second != f.bytes) {
      ADD_FAILURE() << who << ": frame " << n << " differs from the direct decode";
    }
    previous = n;
    first = false;
  }
  return run_starts;
}

// Forwards one TCP connection to the server, damaging the bytes from server
// to client: one byte flipped, a run dropped, or the connection cut, in the
// middle of the payload of given packets of what the client receives (0 is
// the stream header, 1 the first frame it gets).
class Proxy {
 public:
  struct Damage {
    size_t flip_packet = SIZE_MAX;
    size_t drop_packet = SIZE_MAX, drop_len = 0;
    size_t cut_packet = SIZE_MAX;
  };
  Proxy(int server_port, Damage damage) : server_port_(server_port), damage_(damage) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr *>(&addr), sizeof addr), 0);
    EXPECT_EQ(listen(listen_fd_, 1), 0);
    socklen_t len = sizeof addr;
    getsockname(listen_fd_, reinterpret_cast<sockaddr *>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~Proxy() {
    stop_ = true;
    thread_.join();
    close(listen_fd_);
  }
  int port() const { return port_; }
  size_t forwarded() const { return forwarded_; }

 private:
  void run() {
    pollfd p{listen_fd_, POLLIN, 0};
    while (!stop_ && poll(&p, 1, 20) == 0) {
    }
    if (stop_) return;
    const int client = accept(listen_fd_, nullptr, nullptr);
    const int server = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(uint16_t(server_port_));
    if (connect(server, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0) {
      close(client);
      close(server);
      return;
    }
    size_t offset = 0;  // of the server's byte stream
    // The packet the byte at `offset` belongs to: its index, start, header
    // bytes so far and (once the header is complete) its size; where its
    // damage goes.
    size_t packet = 0, packet_start = 0, packet_size = SIZE_MAX;
    std::vector<uint8_t> header;
    size_t flip_at = SIZE_MAX, drop_at = SIZE_MAX, cut_at = SIZE_MAX;
    std::vector<uint8_t> buf(65536), out;
    while (!stop_) {
      pollfd fds[2] = {{server, POLLIN, 0}, {client, POLLIN, 0}};
      if (poll(fds, 2, 20) <= 0) continue;
      if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {  // the client: EOF or its bytes
        const ssize_t n = recv(client, buf.data(), buf.size(), 0);
        if (n <= 0) break;
        send(server, buf.data(), size_t(n), MSG_NOSIGNAL);
      }
      if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = recv(server, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      out.clear();
      bool cut = false;
      for (ssize_t i = 0; i < n; ++i, ++offset) {
        if (offset == packet_start + packet_size) {
          ++packet;
          packet_start = offset;
          packet_size = SIZE_MAX;
          header.clear();
        }
        if (header.size() < 64) {
          header.push_back(buf[size_t(i)]);
          if (header.size() == 64) {
            const size_t payload = size_t(header[32]) | size_t(header[33]) << 8 |
                                   size_t(header[34]) << 16 | size_t(header[35]) << 24;
            packet_size = 64 + payload;
            const size_t middle = packet_start + 64 + payload / 2;
            if (packet == damage_.flip_packet) flip_at = middle;
            if (packet == damage_.drop_packet) drop_at = middle;
            if (packet == damage_.cut_packet) cut_at = middle;
          }
        }
        if (offset >= cut_at) {
          cut = true;
          break;
        }
        if (offset >= drop_at && offset < drop_at + damage_.drop_len) continue;
        out.push_back(offset == flip_at ? uint8_t(buf[size_t(i)] ^ 0x20) : buf[size_t(i)]);
      }
      for (size_t sent = 0; sent < out.size();) {
        const ssize_t s = send(client, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
        if (s <= 0) break;
        sent += size_t(s);
      }
      forwarded_ += out.size();
      if (cut) break;
    }
    close(client);
    close(server);
  }

  int server_port_;
  Damage damage_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> forwarded_{0};
};

// The client shows the server's last frame.
bool got_last(Server &server, Pipeline &p) {
  return server.direct().eos() && p.has_frame(server.last_pts());
}

}  // namespace

TEST(DiffTcp, TwoClientsOneLateShowWhatTheDirectDecodeShows) {
  const int frames = 150;
  Server server(frames, "stream-version=2");
  ASSERT_TRUE(server.start());
  Pipeline early(client_pipeline(server.port()), kKeepBytes);
  ASSERT_TRUE(early.start());
  // The late client joins after about half a second (30 frames).
  ASSERT_TRUE(wait_until([&] { return server.direct().frame_count() >= 30; }, 20));
  Pipeline late(client_pipeline(server.port()), kKeepBytes);
  ASSERT_TRUE(late.start());
  ASSERT_TRUE(wait_until([&] { return server.direct().eos(); }, 30)) << server.direct().error();
  ASSERT_TRUE(wait_until([&] { return got_last(server, early) && got_last(server, late); }, 20))
      << "early " << early.frame_count() << ", late " << late.frame_count() << " frames";
  EXPECT_EQ(server.direct().frame_count(), size_t(frames));

  const std::vector<uint64_t> early_runs = check_against_direct(server, early, "early client");
  const std::vector<uint64_t> late_runs = check_against_direct(server, late, "late client");
  ASSERT_EQ(early_runs.size(), 1u) << "one run without gaps";
  ASSERT_EQ(late_runs.size(), 1u) << "one run without gaps";
  EXPECT_GE(late_runs[0], 20u) << "the late client starts at a recent keyframe";
  EXPECT_EQ(late_runs[0] % kKeyframeInterval, 0u);
  EXPECT_EQ(late.frame_count(), size_t(frames) - late_runs[0]);
  EXPECT_EQ(early.frame_count(), size_t(frames) - early_runs[0]);
  // The late client's own timeline starts at 0.
  const std::vector<GstClockTime> pts = late.output_pts();
  const auto late_frames = late.frames();
  ASSERT_GE(pts.size(), 2u);
  EXPECT_EQ(pts[0], 0u);
  EXPECT_EQ(pts[1], late_frames[1].sender_pts - late_frames[0].sender_pts);
  for (Pipeline *p : {&early, &late}) {
    EXPECT_TRUE(p->warnings().empty()) << p->warnings()[0];
    EXPECT_EQ(p->error(), "");
  }
}

TEST(DiffTcp, ClientDisconnectsAndReconnects) {
  const int frames = 180;
  Server server(frames, "stream-version=2");
  ASSERT_TRUE(server.start());
  Pipeline client(client_pipeline(server.port()), kKeepBytes);
  ASSERT_TRUE(client.start());
  ASSERT_TRUE(wait_until([&] { return client.frame_count() >= 20; }, 20));
  client.stop();
  const std::vector<uint64_t> first = check_against_direct(server, client, "first connection");
  ASSERT_EQ(first.size(), 1u);
  const size_t first_count = client.frame_count();
  client.clear_frames();
  // Away for 40 frames after its last one, then back: it starts again at a
  // keyframe.
  ASSERT_TRUE(
      wait_until([&] { return server.direct().frame_count() >= first[0] + first_count + 40; }, 20));
  ASSERT_TRUE(client.start());
  ASSERT_TRUE(wait_until([&] { return server.direct().eos(); }, 30)) << server.direct().error();
  ASSERT_TRUE(wait_until([&] { return got_last(server, client); }, 20));
  const std::vector<uint64_t> second = check_against_direct(server, client, "second connection");
  ASSERT_EQ(second.size(), 1u);
  EXPECT_GT(second[0], first[0] + first_count) << "the reconnected client resumes later";
  EXPECT_EQ(client.output_pts()[0], 0u) << "a new start: the timeline starts at 0 again";
  EXPECT_TRUE(client.warnings().empty());
  EXPECT_EQ(client.error(), "");
  EXPECT_TRUE(client.shutdown_errors().empty()) << client.shutdown_errors()[0];
}

// A byte flipped in the 25th packet, 100 bytes dropped inside the 75th: each
// loss ends at the next keyframe.
void corrupted_and_dropped(const std::string &encoder_props) {
  const int frames = 150;
  Server server(frames, encoder_props);
  ASSERT_TRUE(server.listen());
  Proxy::Damage damage;
  damage.flip_packet = 25;
  damage.drop_packet = 75;
  damage.drop_len = 100;
  Proxy proxy(server.port(), damage);
  Pipeline client(client_pipeline(proxy.port()), kKeepBytes);
  ASSERT_TRUE(client.start());
  ASSERT_TRUE(server.play_when_connected(1)) << "the client never connected";
  ASSERT_TRUE(wait_until([&] { return server.direct().eos(); }, 30)) << server.direct().error();
  ASSERT_TRUE(wait_until([&] { return got_last(server, client); }, 20))
      << client.frame_count() << " frames; forwarded " << proxy.forwarded();
  const std::vector<uint64_t> runs = check_against_direct(server, client, "damaged client");
  EXPECT_GE(runs.size(), 3u) << "two losses, each ended by a keyframe";
  EXPECT_LT(client.frame_count(), size_t(frames) - runs[0]) << "frames were lost";
  const std::vector<std::string> w = client.warnings();
  EXPECT_GE(w.size(), 2u);
  EXPECT_LE(w.size(), 4u);
  for (const std::string &text : w) EXPECT_NE(text.find("cudadiffdec"), std::string::npos) << text;
  EXPECT_EQ(client.error(), "");
}

TEST(DiffTcp, CorruptedAndDroppedBytesRecoverAtTheNextKeyframe) {
  corrupted_and_dropped("stream-version=2");
}

TEST(DiffTcp, CorruptedAndDroppedBytesRecoverAtTheNextKeyframeVersion1) {
  corrupted_and_dropped("stream-version=1 compression=none");
}

// The connection closes in the middle of the 60th packet.
void cut_mid_packet(const std::string &encoder_props) {
  const int frames = 120;
  Server server(frames, encoder_props);
  ASSERT_TRUE(server.listen());
  Proxy::Damage damage;
  damage.cut_packet = 60;
  Proxy proxy(server.port(), damage);
  Pipeline client(client_pipeline(proxy.port()), kKeepBytes);
  ASSERT_TRUE(client.start());
  ASSERT_TRUE(server.play_when_connected(1)) << "the client never connected";
  ASSERT_TRUE(wait_until([&] { return client.eos(); }, 30)) << client.error();
  const std::vector<uint64_t> runs = check_against_direct(server, client, "cut client");
  EXPECT_EQ(runs.size(), 1u);
  EXPECT_EQ(client.frame_count(), 59u) << "every whole packet before the cut";
  const std::vector<std::string> w = client.warnings();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("truncated"), std::string::npos) << w[0];
  EXPECT_EQ(client.error(), "");
}

TEST(DiffTcp, StreamCutMidPacketEndsWithTruncationWarning) {
  cut_mid_packet("stream-version=2");
}

TEST(DiffTcp, StreamCutMidPacketEndsWithTruncationWarningVersion1) {
  cut_mid_packet("stream-version=1 compression=none");
}

TEST(DiffTcp, DecodebinFindsTheDecoderByTypefind) {
  const int frames = 90;
  Server server(frames, "stream-version=2");
  ASSERT_TRUE(server.start());
  Pipeline client(client_pipeline(server.port(), "decodebin"), kKeepBytes);
  ASSERT_TRUE(client.start());
  ASSERT_TRUE(wait_until([&] { return server.direct().eos(); }, 30)) << server.direct().error();
  ASSERT_TRUE(wait_until([&] { return got_last(server, client); }, 20)) << client.error();
  const std::vector<uint64_t> runs = check_against_direct(server, client, "decodebin client");
  EXPECT_EQ(runs.size(), 1u);
  const std::vector<std::string> f = client.factories();
  EXPECT_NE(std::find(f.begin(), f.end(), "cudadiffdec"), f.end());
  EXPECT_NE(std::find(f.begin(), f.end(), "typefind"), f.end());
}

// A recording of each version: decodebin and playbin plug cudadiffdec by
// the typefinder and show what cudadiffdec shows.
TEST(DiffTcp, RecordedFileThroughDecodebinAndPlaybin) {
  for (int version : {2, 1}) {
    SCOPED_TRACE("version " + std::to_string(version));
    const std::string path =
        std::string(g_get_tmp_dir()) + "/cudadiff-test-" + std::to_string(getpid()) + ".cdif";
    const std::string record = gst_test::run_pipeline(
        "videotestsrc num-buffers=40 pattern=smpte horizontal-speed=3 ! "
        "video/x-raw,format=BGRx,width=80,height=48 ! cudadiffenc keyframe-interval=16 "
        "stream-version=" +
        std::to_string(version) + " ! filesink location=" + path);
    ASSERT_EQ(record, "");
    {
      FILE *f = std::fopen(path.c_str(), "rb");
      ASSERT_NE(f, nullptr);
      uint8_t head[8] = {0};
      EXPECT_EQ(std::fread(head, 1, 8, f), 8u);
      std::fclose(f);
      EXPECT_EQ(head[4], version) << "the recording's version";
    }
    Pipeline direct("filesrc location=" + path + " ! cudadiffdec ! fakesink name=out sync=false",
                    kKeepBytes);
    Pipeline bin("filesrc location=" + path + " ! decodebin ! fakesink name=out sync=false",
                 kKeepBytes);
    Pipeline play("playbin uri=file://" + path +
                      " video-sink=\"fakesink sync=false\" audio-sink=\"fakesink sync=false\"",
                  kKeepBytes);
    for (Pipeline *p : {&direct, &bin, &play}) {
      ASSERT_TRUE(p->start());
      ASSERT_TRUE(wait_until([&] { return p->eos() || !p->error().empty(); }, 20));
      EXPECT_EQ(p->error(), "");
    }
    const auto a = direct.frames(), b = bin.frames(), c = play.frames();
    ASSERT_EQ(a.size(), 40u);
    ASSERT_EQ(b.size(), 40u);
    ASSERT_EQ(c.size(), 40u);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].sender_pts, b[i].sender_pts);
      EXPECT_EQ(a[i].bytes, b[i].bytes) << i;
      EXPECT_EQ(a[i].sender_pts, c[i].sender_pts);
      EXPECT_EQ(a[i].bytes, c[i].bytes) << i;
    }
    const std::vector<std::string> f = play.factories();
    EXPECT_NE(std::find(f.begin(), f.end(), "cudadiffdec"), f.end()) << "playbin plugged it";
    std::remove(path.c_str());
  }
}

// A recording through decodebin and playbin, which plug cudadiffparse
// before cudadiffdec: it has a duration (the end of its last packet) and
// seeks in time; the frames after a seek are those of a decode from the
// start, each version.
TEST(DiffTcp, RecordedFileHasADurationAndSeeksInTime) {
  for (int version : {2, 1}) {
    SCOPED_TRACE("version " + std::to_string(version));
    const std::string path =
        std::string(g_get_tmp_dir()) + "/cudadiff-seek-" + std::to_string(getpid()) + ".cdif";
    const std::string record = gst_test::run_pipeline(
        "videotestsrc num-buffers=90 pattern=smpte horizontal-speed=3 ! "
        "video/x-raw,format=I420,width=64,height=48,framerate=30/1 ! "
        "cudadiffenc keyframe-interval=30 stream-version=" +
        std::to_string(version) + " ! filesink location=" + path);
    ASSERT_EQ(record, "");
    Pipeline direct("filesrc location=" + path + " ! cudadiffdec ! fakesink name=out sync=false",
                    kKeepBytes);
    ASSERT_TRUE(direct.start());
    ASSERT_TRUE(wait_until([&] { return direct.eos() || !direct.error().empty(); }, 20));
    ASSERT_EQ(direct.error(), "");
    std::map<uint64_t, Bytes> whole;  // by the sender's timestamp
    for (const stream_test::Shown &f : direct.frames()) whole[f.sender_pts] = f.bytes;
    ASSERT_EQ(whole.size(), 90u);
    for (const std::string &desc :
         {"filesrc location=" + path + " ! decodebin ! fakesink name=out sync=false",
          "playbin uri=file://" + path + " video-sink=\"fakesink sync=false\""}) {
      SCOPED_TRACE(desc);
      Pipeline p(desc, kKeepBytes);
      GstElement *e = p.element();
      ASSERT_NE(gst_element_set_state(e, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
      ASSERT_EQ(gst_element_get_state(e, nullptr, nullptr, 10 * GST_SECOND),
                GST_STATE_CHANGE_SUCCESS);
      gint64 duration = -1;
      ASSERT_TRUE(gst_element_query_duration(e, GST_FORMAT_TIME, &duration));
      EXPECT_EQ(duration, 3 * gint64(GST_SECOND));  // 90 frames at 30 fps
      ASSERT_TRUE(gst_element_seek_simple(
          e, GST_FORMAT_TIME, GstSeekFlags(GST_SEEK_FLAG_FLUSH | GST_SEEK_FLAG_KEY_UNIT),
          gint64(GST_SECOND) * 3 / 2));
      ASSERT_EQ(gst_element_get_state(e, nullptr, nullptr, 10 * GST_SECOND),
                GST_STATE_CHANGE_SUCCESS);
      p.clear_frames();  // the frame prerolled before the seek, and the one after it
      ASSERT_TRUE(p.start());
      ASSERT_TRUE(wait_until([&] { return p.eos() || !p.error().empty(); }, 20));
      EXPECT_EQ(p.error(), "");
      const std::vector<stream_test::Shown> after = p.frames();
      // Decoded from the keyframe at 1 s (the parser's index), shown from
      // the target on (frame 45, prerolled and cleared above), to the last
      // frame. (GstBaseParse's own estimate from the bytes landed after the
      // target, or on a delta.)
      ASSERT_EQ(after.size(), 44u);
      EXPECT_EQ(after.front().sender_pts, gst_util_uint64_scale(46, GST_SECOND, 30));
      EXPECT_EQ(after.front().pts, gst_util_uint64_scale(46, GST_SECOND, 30));
      EXPECT_EQ(after.back().sender_pts, gst_util_uint64_scale(89, GST_SECOND, 30));
      for (const stream_test::Shown &f : after) {
        ASSERT_EQ(whole.count(f.sender_pts), 1u) << f.sender_pts;
        EXPECT_EQ(f.bytes, whole[f.sender_pts]) << "frame at " << f.sender_pts;
      }
      const std::vector<std::string> f = p.factories();
      EXPECT_NE(std::find(f.begin(), f.end(), "cudadiffparse"), f.end());
    }
    std::remove(path.c_str());
  }
}

namespace {

// A file's bytes ("" when it cannot be read).
std::string file_bytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

namespace {

// Records `frames` frames of the moving test pattern (I420, `size` as
// "width=W,height=H", `fps` frames per second) with cudadiffenc's
// `enc_props` into `path`: "" or the pipeline's error.
std::string record_file(const std::string &path, int frames, const std::string &size, int fps,
                        const std::string &enc_props) {
  return gst_test::run_pipeline(
      "videotestsrc num-buffers=" + std::to_string(frames) +
          " pattern=smpte horizontal-speed=3 ! video/x-raw,format=I420," + size + ",framerate=" +
          std::to_string(fps) + "/1 ! cudadiffenc " + enc_props + " ! filesink location=" + path,
      120);  // (under compute-sanitizer, beside other tests, 30 s were not enough)
}

// Every frame of the recording at `path` decoded from its start, by the
// sender's timestamp (empty on an error, which the test then reports).
std::map<uint64_t, Bytes> decode_file(const std::string &path) {
  std::map<uint64_t, Bytes> whole;
  Pipeline direct("filesrc location=" + path + " ! cudadiffdec ! fakesink name=out sync=false",
                  kKeepBytes);
  if (!direct.start() || !wait_until([&] { return direct.eos() || !direct.error().empty(); }, 120))
    return whole;
  EXPECT_EQ(direct.error(), "");
  for (const stream_test::Shown &f : direct.frames()) whole[f.sender_pts] = f.bytes;
  return whole;
}

// `p` set to PAUSED: whether it prerolled within 10 s.
bool preroll(Pipeline &p) {
  GstElement *e = p.element();
  return gst_element_set_state(e, GST_STATE_PAUSED) != GST_STATE_CHANGE_FAILURE &&
         gst_element_get_state(e, nullptr, nullptr, 10 * GST_SECOND) == GST_STATE_CHANGE_SUCCESS;
}

// A flushing seek of the prerolled pipeline `p` to `target` (`flags`): the
// first frame shown is the one showing at the target (the stream at `fps`),
// clipped to start there, with the bytes of a decode from the start.
void expect_seek_shows_target(Pipeline &p, GstSeekFlags flags, GstClockTime target, int fps,
                              const std::map<uint64_t, Bytes> &whole) {
  SCOPED_TRACE("seek to " + std::to_string(target) + " ns");
  GstElement *e = p.element();
  p.clear_frames();  // the pipeline is prerolled: nothing flows until the seek
  ASSERT_TRUE(gst_element_seek_simple(e, GST_FORMAT_TIME, flags, gint64(target)));
  // (a seek far from its keyframe decodes everything from there: slow under
  // a memory checker)
  ASSERT_EQ(gst_element_get_state(e, nullptr, nullptr, 120 * GST_SECOND), GST_STATE_CHANGE_SUCCESS);
  const std::vector<stream_test::Shown> shown = p.frames();
  ASSERT_FALSE(shown.empty());
  const uint64_t frame_pts =
      gst_util_uint64_scale(gst_util_uint64_scale(target, fps, GST_SECOND), GST_SECOND, fps);
  EXPECT_EQ(shown.front().pts, target);
  EXPECT_EQ(shown.front().sender_pts, frame_pts);
  const auto it = whole.find(shown.front().sender_pts);
  ASSERT_NE(it, whole.end()) << shown.front().sender_pts;
  EXPECT_EQ(shown.front().bytes, it->second);
}

}  // namespace

// Seeks in a recording long enough that GstBaseParse's own estimate from
// the bytes misses (60 s, a keyframe each second): every seek shows the
// frame at its target first, decoded from the keyframe before it. Flushing
// key-unit and accurate seeks in a file (the parser's index of keyframes),
// accurate seeks on a byte stream (filesrc ! queue: GstBaseParse searches
// by time). The targets jump back and forth. With a parser that left the
// index and the file's start time to GstBaseParse, seeks in a file in this
// order landed 0.2 s and 0.76 s after the targets at 50.8 s and 0.236 s;
// with a parser that did not index keyframes on a byte stream, accurate
// seeks there to 0.588 s and 0.236 s showed the keyframe at 1 s first
// (GstBaseParse's index had not taken the first keyframe, and its lookup
// of a key unit returned a delta).
TEST(DiffTcp, SeeksInALongRecordingShowTheFrameAtTheirTarget) {
  const std::string path =
      std::string(g_get_tmp_dir()) + "/cudadiff-long-" + std::to_string(getpid()) + ".cdif";
  ASSERT_EQ(record_file(path, 1800, "width=64,height=48", 30, "keyframe-interval=30"), "");
  const std::map<uint64_t, Bytes> whole = decode_file(path);
  ASSERT_EQ(whole.size(), 1800u);
  const std::vector<GstClockTime> targets = {
      33009 * GST_MSECOND, 588 * GST_MSECOND, 13229 * GST_MSECOND, 50800 * GST_MSECOND,
      5010 * GST_MSECOND,  236 * GST_MSECOND, 19400 * GST_MSECOND};
  struct Mode {
    const char *upstream;
    GstSeekFlags flags;
  };
  const GstSeekFlags key = GstSeekFlags(GST_SEEK_FLAG_FLUSH | GST_SEEK_FLAG_KEY_UNIT);
  const GstSeekFlags accurate = GstSeekFlags(GST_SEEK_FLAG_FLUSH | GST_SEEK_FLAG_ACCURATE);
  for (const Mode &mode : {Mode{"", key}, Mode{"", accurate}, Mode{" ! queue", accurate}}) {
    SCOPED_TRACE(std::string(mode.upstream) +
                 (mode.flags & GST_SEEK_FLAG_KEY_UNIT ? " key unit" : " accurate"));
    Pipeline p("filesrc location=" + path + mode.upstream +
                   " ! cudadiffparse ! cudadiffdec ! fakesink name=out sync=false",
               kKeepBytes);
    ASSERT_TRUE(preroll(p));
    // (through the queue the first seek decodes from the first keyframe,
    // the only one indexed yet: 990 frames)
    for (GstClockTime target : targets) expect_seek_shows_target(p, mode.flags, target, 30, whole);
    EXPECT_EQ(p.error(), "");
    EXPECT_TRUE(p.warnings().empty()) << p.warnings().front();
  }
  std::remove(path.c_str());
}

// A recording whose only keyframe is its first (keyframe-interval=0): a
// seek in it more than 20 s after that keyframe, without
// GST_SEEK_FLAG_ACCURATE (gst-play-1.0's seeks), still decodes from the
// keyframe and shows the frame at its target first. (GstBaseParse uses its
// index for such seeks only within 20 s after a keyframe; beyond, its guess
// from the bit rate landed on deltas and nothing was shown.) Reverse
// playback is refused.
TEST(DiffTcp, SeeksFarFromAKeyframeShowTheirTarget) {
  const std::string path =
      std::string(g_get_tmp_dir()) + "/cudadiff-nokey-" + std::to_string(getpid()) + ".cdif";
  ASSERT_EQ(record_file(path, 250, "width=320,height=240", 10, "keyframe-interval=0"), "");
  const std::map<uint64_t, Bytes> whole = decode_file(path);
  ASSERT_EQ(whole.size(), 250u);
  for (GstSeekFlags flags : {GstSeekFlags(GST_SEEK_FLAG_FLUSH),
                             GstSeekFlags(GST_SEEK_FLAG_FLUSH | GST_SEEK_FLAG_KEY_UNIT)}) {
    SCOPED_TRACE(flags & GST_SEEK_FLAG_KEY_UNIT ? "key unit" : "plain");
    Pipeline p("filesrc location=" + path +
                   " ! cudadiffparse ! cudadiffdec ! fakesink name=out sync=false",
               kKeepBytes);
    ASSERT_TRUE(preroll(p));
    GstElement *e = p.element();
    for (GstClockTime target : {22300 * GST_MSECOND, 21000 * GST_MSECOND, 24950 * GST_MSECOND})
      expect_seek_shows_target(p, flags, target, 10, whole);
    EXPECT_FALSE(gst_element_seek(e, -1.0, GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH, GST_SEEK_TYPE_SET,
                                  0, GST_SEEK_TYPE_SET, gint64(10 * GST_SECOND)))
        << "reverse playback accepted";
    EXPECT_EQ(p.error(), "");
    EXPECT_TRUE(p.warnings().empty()) << p.warnings().front();
  }
  std::remove(path.c_str());
}

// A recording cut in the middle of its last packet (its writer killed):
// the file's scan leaves that packet out, so the duration ends where the
// last whole packet ends (before, the cut packet counted).
TEST(DiffTcp, CutLastPacketIsNotCounted) {
  const std::string path =
      std::string(g_get_tmp_dir()) + "/cudadiff-cut-" + std::to_string(getpid()) + ".cdif";
  const std::string record = gst_test::run_pipeline(
      "videotestsrc num-buffers=31 pattern=smpte horizontal-speed=3 ! "
      "video/x-raw,format=I420,width=160,height=120,framerate=30/1 ! "
      "cudadiffenc keyframe-interval=30 ! filesink location=" +
      path);
  ASSERT_EQ(record, "");
  std::string bytes = file_bytes(path);
  // The last packet (frame 30, a keyframe): cut in its middle.
  const size_t last = bytes.rfind("CDIF");
  ASSERT_NE(last, std::string::npos);
  ASSERT_GT(bytes.size() - last, 200u);
  bytes.resize(last + (bytes.size() - last) / 2);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  Pipeline p("filesrc location=" + path +
             " ! cudadiffparse ! cudadiffdec ! fakesink name=out sync=false");
  GstElement *e = p.element();
  ASSERT_NE(gst_element_set_state(e, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
  ASSERT_EQ(gst_element_get_state(e, nullptr, nullptr, 10 * GST_SECOND), GST_STATE_CHANGE_SUCCESS);
  gint64 duration = -1;
  ASSERT_TRUE(gst_element_query_duration(e, GST_FORMAT_TIME, &duration));
  EXPECT_EQ(duration, gint64(GST_SECOND));  // frames 0-29 at 30 fps, not 31 frames' time
  gst_element_set_state(e, GST_STATE_NULL);
  std::remove(path.c_str());
}

// Two recordings in one file (cat, or a sender restarted into the same
// file): the parser's timeline goes on through the second from where the
// first ended, in a file (pull mode: the duration is both) as on a byte
// stream (push mode).
TEST(DiffTcp, ConcatenatedRecordingsPlayOneAfterTheOther) {
  const std::string dir =
      std::string(g_get_tmp_dir()) + "/cudadiff-cat-" + std::to_string(getpid());
  const std::string one = dir + "-1.cdif", two = dir + "-2.cdif";
  const std::string record = gst_test::run_pipeline(
      "videotestsrc num-buffers=60 pattern=smpte horizontal-speed=3 ! "
      "video/x-raw,format=I420,width=64,height=48,framerate=30/1 ! "
      "cudadiffenc keyframe-interval=30 ! filesink location=" +
      one);
  ASSERT_EQ(record, "");
  {
    const std::string bytes = file_bytes(one);
    ASSERT_GT(bytes.size(), 64u);
    std::ofstream out(two, std::ios::binary);
    out << bytes << bytes;
  }
  for (const char *mode : {"", " ! queue"}) {
    SCOPED_TRACE(mode);
    // The parser's stream headers (GST_BUFFER_FLAG_HEADER) and their times
    // (declared before the pipeline, whose probe writes them).
    struct Headers {
      std::mutex mutex;
      std::vector<GstClockTime> pts;
    } headers;
    Pipeline p("filesrc location=" + two + mode +
               " ! cudadiffparse name=parse ! cudadiffdec ! fakesink name=out sync=false");
    GstElement *e = p.element();
    GstElement *parse = p.get("parse");
    GstPad *parse_src = gst_element_get_static_pad(parse, "src");
    gst_pad_add_probe(
        parse_src, GST_PAD_PROBE_TYPE_BUFFER,
        [](GstPad *, GstPadProbeInfo *info, gpointer data) {
          GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER(info);
          auto *h = static_cast<Headers *>(data);
          if (GST_BUFFER_FLAG_IS_SET(buf, GST_BUFFER_FLAG_HEADER)) {
            std::lock_guard<std::mutex> lock(h->mutex);
            h->pts.push_back(GST_BUFFER_PTS(buf));
          }
          return GST_PAD_PROBE_OK;
        },
        &headers, nullptr);
    gst_object_unref(parse_src);
    gst_object_unref(parse);
    ASSERT_NE(gst_element_set_state(e, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
    ASSERT_EQ(gst_element_get_state(e, nullptr, nullptr, 10 * GST_SECOND),
              GST_STATE_CHANGE_SUCCESS);
    gint64 duration = -1;
    if (*mode == '\0') {
      ASSERT_TRUE(gst_element_query_duration(e, GST_FORMAT_TIME, &duration));
      EXPECT_EQ(duration, 4 * gint64(GST_SECOND)) << "both recordings";
    }
    ASSERT_TRUE(p.start());
    ASSERT_TRUE(wait_until([&] { return p.eos() || !p.error().empty(); }, 20));
    EXPECT_EQ(p.error(), "");
    const std::vector<stream_test::Shown> shown = p.frames();
    ASSERT_EQ(shown.size(), 120u);
    for (size_t i = 0; i < shown.size(); ++i)
      EXPECT_EQ(shown[i].pts, gst_util_uint64_scale(i, GST_SECOND, 30)) << i;
    // Each recording's stream header: in a file it takes the time of the
    // packet after it (GstBaseParse reads a file's start time from its first
    // buffer); on a byte stream none.
    p.stop();
    std::lock_guard<std::mutex> lock(headers.mutex);
    if (*mode == '\0')
      EXPECT_EQ(headers.pts, (std::vector<GstClockTime>{0, 2 * GST_SECOND}));
    else
      EXPECT_EQ(headers.pts, (std::vector<GstClockTime>{GST_CLOCK_TIME_NONE, GST_CLOCK_TIME_NONE}));
  }
  std::remove(one.c_str());
  std::remove(two.c_str());
}

// A packet of more than 2 MiB whose payload is damaged: the parser drops it
// and the rest plays (GstBaseParse stops with "Failed to parse stream" once
// a parser has skipped 2 MiB without a frame).
TEST(DiffTcp, DamagedLargePacketIsDroppedAndPlaybackGoesOn) {
  const std::string path =
      std::string(g_get_tmp_dir()) + "/cudadiff-big-" + std::to_string(getpid()) + ".cdif";
  // Keyframes of noise (gray: the same in every channel), lossless: about 2.9 MB each.
  const std::string record = gst_test::run_pipeline(
      "videotestsrc num-buffers=3 pattern=snow ! "
      "video/x-raw,format=BGR,width=2048,height=1024,framerate=1/1 ! "
      "cudadiffenc keyframe-interval=1 threshold=0 ! filesink location=" +
      path);
  ASSERT_EQ(record, "");
  std::string bytes = file_bytes(path);
  // The packets, by their payload sizes: the stream header, then the
  // keyframes; the second keyframe's payload gets a flipped bit.
  std::vector<size_t> packets;
  for (size_t o = 0; o + 64 <= bytes.size();) {
    packets.push_back(o);
    uint32_t payload = 0;
    std::memcpy(&payload, bytes.data() + o + 32, 4);
    o += 64 + payload;
  }
  ASSERT_EQ(packets.size(), 4u);
  const size_t at = packets[2];
  ASSERT_GT(packets[3] - at, size_t(2) << 20) << "a keyframe of more than 2 MiB";
  bytes[at + 64 + 1000] ^= 1;  // in its payload
  {
    std::ofstream out(path, std::ios::binary);
    out << bytes;
  }
  for (const char *mode : {"", " ! queue"}) {
    SCOPED_TRACE(mode);
    Pipeline p("filesrc location=" + path + mode +
               " ! cudadiffparse ! cudadiffdec ! fakesink name=out sync=false");
    ASSERT_TRUE(p.start());
    ASSERT_TRUE(wait_until([&] { return p.eos() || !p.error().empty(); }, 30));
    EXPECT_EQ(p.error(), "");
    const std::vector<stream_test::Shown> shown = p.frames();
    ASSERT_EQ(shown.size(), 2u);
    EXPECT_EQ(shown[0].pts, 0u);
    EXPECT_EQ(shown[1].pts, 2 * GST_SECOND);
  }
  std::remove(path.c_str());
}

// Caps change in a running pipeline: the encoder starts over with a keyframe
// and new caps, the decoder renegotiates; lossless across the change.
TEST(DiffPipeline, CapsChangeMidStreamIsLossless) {
  // The encoder's input by timestamp, to compare with what the decoder shows
  // (declared before the pipeline, whose probe writes it, so that it outlives
  // the pipeline when an assertion ends the test early).
  struct Inputs {
    std::mutex mutex;
    std::map<uint64_t, Bytes> frames;
  } inputs;
  Pipeline p(
      "videotestsrc is-live=true pattern=smpte horizontal-speed=2 ! capsfilter name=cf "
      "caps=video/x-raw,format=I420,width=64,height=48,framerate=60/1 ! identity name=in ! "
      "cudadiffenc stream-version=2 threshold=0 keyframe-interval=0 ! cudadiffdec ! fakesink "
      "name=out sync=false",
      kKeepBytes);
  GstElement *in = p.get("in");
  GstPad *pad = gst_element_get_static_pad(in, "src");
  gst_pad_add_probe(
      pad, GST_PAD_PROBE_TYPE_BUFFER,
      [](GstPad *pad, GstPadProbeInfo *info, gpointer data) {
        auto *inputs = static_cast<Inputs *>(data);
        GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER(info);
        GstCaps *caps = gst_pad_get_current_caps(pad);
        Bytes bytes = diff_test::canonical_of(buf, caps);
        gst_caps_unref(caps);
        std::lock_guard<std::mutex> lock(inputs->mutex);
        inputs->frames[GST_BUFFER_PTS(buf)] = std::move(bytes);
        return GST_PAD_PROBE_OK;
      },
      &inputs, nullptr);
  gst_object_unref(pad);
  gst_object_unref(in);
  ASSERT_TRUE(p.start());
  ASSERT_TRUE(wait_until([&] { return p.frame_count() >= 10; }, 20)) << p.error();
  GstElement *cf = p.get("cf");
  GstCaps *bgr = gst_caps_from_string("video/x-raw,format=BGR,width=80,height=30,framerate=60/1");
  g_object_set(cf, "caps", bgr, nullptr);
  gst_caps_unref(bgr);
  gst_object_unref(cf);
  const size_t small = 80 * 30 * 3;
  auto bgr_frames = [&] {
    size_t n = 0;
    for (const auto &f : p.frames()) n += f.bytes.size() == small;
    return n;
  };
  ASSERT_TRUE(wait_until([&] { return bgr_frames() >= 10; }, 20)) << p.error();
  p.stop();
  EXPECT_EQ(p.error(), "");
  EXPECT_TRUE(p.warnings().empty());
  const auto shown = p.frames();
  size_t i420 = 0, bgr_count = 0;
  std::lock_guard<std::mutex> lock(inputs.mutex);
  for (const auto &f : shown) {
    const auto it = inputs.frames.find(f.sender_pts);
    ASSERT_NE(it, inputs.frames.end());
    EXPECT_EQ(f.bytes, it->second) << "frame at " << f.sender_pts;
    i420 += f.bytes.size() == 64 * 48 * 3 / 2;
    bgr_count += f.bytes.size() == small;
  }
  EXPECT_GE(i420, 10u);
  EXPECT_GE(bgr_count, 10u);
  EXPECT_EQ(i420 + bgr_count, shown.size());
}

// Upstream writes into the pinned pool the encoder proposes, and the decoder
// outputs from a pinned pool (page-locked with a device, plain host memory of
// the same allocator without one).
TEST(DiffPipeline, PinnedBuffersInAndOut) {
  // The counts the probes write outlive the pipeline.
  std::atomic<int> in_pinned{0}, in_total{0};
  int out_pinned = 0;
  struct Counts {
    std::atomic<int> *pinned, *total;
  } counts{&in_pinned, &in_total};
  Pipeline p(
      "videotestsrc num-buffers=5 ! video/x-raw,format=NV12,width=64,height=32 ! "
      "cudadiffenc name=enc stream-version=2 ! cudadiffdec ! fakesink name=out sync=false",
      kKeepBytes);
  GstElement *enc = p.get("enc");
  GstPad *pad = gst_element_get_static_pad(enc, "sink");
  gst_pad_add_probe(
      pad, GST_PAD_PROBE_TYPE_BUFFER,
      [](GstPad *, GstPadProbeInfo *info, gpointer data) {
        auto *c = static_cast<Counts *>(data);
        GstMemory *mem = gst_buffer_peek_memory(GST_PAD_PROBE_INFO_BUFFER(info), 0);
        (*c->total)++;
        if (gst_memory_is_type(mem, "CudaDiffPinned") || gst_memory_is_type(mem, "CudaDiffHost"))
          (*c->pinned)++;
        return GST_PAD_PROBE_OK;
      },
      &counts, nullptr);
  gst_object_unref(pad);
  gst_object_unref(enc);
  GstElement *out = p.get("out");
  pad = gst_element_get_static_pad(out, "sink");
  gst_pad_add_probe(
      pad, GST_PAD_PROBE_TYPE_BUFFER,
      [](GstPad *, GstPadProbeInfo *info, gpointer data) {
        GstMemory *mem = gst_buffer_peek_memory(GST_PAD_PROBE_INFO_BUFFER(info), 0);
        if (gst_memory_is_type(mem, "CudaDiffPinned") || gst_memory_is_type(mem, "CudaDiffHost"))
          ++*static_cast<int *>(data);
        return GST_PAD_PROBE_OK;
      },
      &out_pinned, nullptr);
  gst_object_unref(pad);
  gst_object_unref(out);
  ASSERT_TRUE(p.start());
  ASSERT_TRUE(wait_until([&] { return p.eos() || !p.error().empty(); }, 20));
  EXPECT_EQ(p.error(), "");
  p.stop();
  EXPECT_EQ(in_total.load(), 5);
  EXPECT_EQ(in_pinned.load(), 5);
  EXPECT_EQ(out_pinned, 5);
  EXPECT_EQ(p.frame_count(), 5u);
}
