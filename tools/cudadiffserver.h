// The RTSP server of the difference stream, as a small library: cudadiff-server
// is its command line, the RTSP tests and the latency benchmark run it in
// their own process. One shared media per mount: a raw video source, one
// cudadiffenc for every client, rtpgstpay, then rtpbin with retransmission
// (RTP/AVPF, NACK), RTCP feedback (PLI/FIR become force-key-unit events at the
// encoder), a keyframe for each client that starts playing, and pacing of
// large frames so that a keyframe does not arrive as one burst. RTP over UDP,
// or interleaved in the RTSP connection (TCP) for clients that ask for it.
// docs/streaming.md describes it for users.
#pragma once

#include <gst/gst.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace cudadiff_server {

struct Options {
  // gst-launch description of the raw video source (its last element gives
  // raw video in any format cudadiffenc takes; videoconvert follows it).
  std::string source = "videotestsrc is-live=true pattern=ball";
  std::string address = "0.0.0.0";
  int port = 8554;  // 0: any free port (Server::port() says which)
  std::string mount = "/cam";
  // At the source's end (EOS), play it again from its start, its running time
  // going on where it ended, as a camera's would: for a media file, so that
  // every viewer gets frames whenever it joins. The seek goes upstream from
  // the sink pad of the source's element named "loop" (source_description()
  // names a file's clocksync so: the clock's wait comes after the jump), or
  // from the server's queue after the source. A source that cannot seek is
  // played once, with a warning.
  bool loop = false;
  // The frame rate at which a looped source's frames that carry no
  // timestamps (a file of JPEG frames in multipart) are played, when its caps
  // name none: each such frame then follows the one before by a frame
  // interval (a warning says so). A single one per run (a still image) still
  // takes no time, and is played once.
  int untimed_fps = 30;
  // Properties of cudadiffenc, gst-launch syntax: "threshold=20 backend=cpu".
  std::string encoder_properties;
  // Fraction of the outgoing RTP packets dropped (netsim), after the
  // retransmission sender: retransmitted packets are dropped alike.
  double simulate_loss = 0;
  // Pacing: RTP packets leave at most at pace_rate_mbit (Mbit/s), after a
  // pause up to pace_burst_bytes at once (0: no pacing).
  double pace_rate_mbit = 200;
  unsigned pace_burst_bytes = 65536;
  // How long sent packets are kept for retransmission (0: no retransmission):
  // at least the time a viewer waits for one (rtspsrc's latency, 2 s by
  // default), or its last retries come too late.
  unsigned retransmission_ms = 2000;
  // How often (ms) clients may send RTCP, told to them in the PLAY response
  // (the RTCP-Interval header, which rtspsrc follows): their retransmission
  // requests and keyframe requests go out at this pace. 0: not sent.
  unsigned rtcp_interval_ms = 50;
  // A keyframe for every client that starts playing.
  bool keyframe_on_join = true;
  // A client whose RTSP connection has taken none of the data waiting for it
  // for this many seconds (a viewer over TCP that stopped reading) is
  // disconnected, so that its queue neither grows without bound nor holds up
  // the other viewers of the media. 0: never. Linux only (elsewhere: never).
  // (Whatever this is, a viewer over TCP that rtsp-server stopped sending to,
  // more than 10 s behind while a faster TCP viewer keeps up, is closed.)
  unsigned stalled_client_timeout_s = 10;
  // Seconds a session lives without word from its client (RTCP, or an RTSP
  // request such as a keep-alive; clients are told it in the Session header)
  // before it is ended and its client's connection closed: a viewer over UDP
  // that froze or whose network went away. rtsp-server's default, 60.
  unsigned session_timeout_s = 60;
  // Called with the media's top-level bin when a media is made (for tests:
  // probes on the element named "enc", the encoder). In the server's thread.
  std::function<void(GstElement *)> on_media;
  // Called with each error of a media pipeline (or of making one) as it is
  // posted, in the thread that posts it.
  std::function<void(const std::string &)> on_error;
  // Called likewise with each warning of a media pipeline (a source played
  // once, its frames untimed), in the thread that posts it (a streaming
  // thread, maybe holding a lock of the server's: it must not wait for the
  // media).
  std::function<void(const std::string &)> on_warning;
};

struct Stats {
  uint64_t clients_connected = 0;         // RTSP connections accepted so far
  uint64_t clients_now = 0;               // connections open now
  uint64_t plays = 0;                     // PLAY requests served
  uint64_t join_keyframes = 0;            // keyframes asked for because a client started playing
  uint64_t keyframe_requests = 0;         // force-key-unit events on their way to the encoder
                                          // (RTCP PLI/FIR, and the joins above)
  uint64_t keyframe_requests_merged = 0;  // of those, dropped while one was pending
  uint64_t keyframes = 0;                 // keyframes encoded (periodic ones included)
  uint64_t medias = 0;        // media pipelines made (a new one when the last client left)
  uint64_t media_errors = 0;  // errors the media pipelines posted (a camera unplugged...)
  uint64_t stalled_clients_closed = 0;  // connections closed for taking no data (above)
  uint64_t slow_clients_closed = 0;     // connections closed after rtsp-server stopped
                                        // sending to them (a TCP viewer more than 10 s
                                        // behind while another keeps up)
};

class Server {
 public:
  explicit Server(Options options);
  ~Server();  // stops
  Server(const Server &) = delete;
  Server &operator=(const Server &) = delete;

  // Binds the port and serves from a thread of its own. False with *error
  // set when the port cannot be bound or the source cannot be parsed.
  bool start(std::string *error);
  void stop();
  int port() const;
  // rtsp://HOST:PORT/MOUNT
  std::string url(const std::string &host = "127.0.0.1") const;
  Stats stats() const;
  // The first error a media pipeline posted, "" when none
  // (Stats::media_errors counts them, Options::on_error sees each).
  std::string error() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The media's source for --source: "camera" (v4l2src, DEVICE = /dev/video0
// when empty), "test" (a live test pattern of the given size and rate), or a
// media file path (decoded by decodebin, played in real time; its clocksync
// is named "loop", for Options::loop).
std::string source_description(const std::string &source, const std::string &device, int width,
                               int height, int fps);

// The RTCP compound `packet` with a BYE packet of its own for each of
// `ssrcs` that its BYE packet does not name, right after that one; nullptr
// where it has no BYE, that BYE names them all already or has padding, or
// more than 31 are missing. The server makes the BYEs at the end of a stream
// name every source of the session this way.
GstBuffer *bye_naming_all(GstBuffer *packet, const std::vector<guint32> &ssrcs);

// A PLAY response's RTP-Info header (of one stream) naming `seq` (modulo
// 65536) as the first packet; "" where it names it already or has not
// exactly one "seq=" with a number.
std::string rtp_info_with_seq(const std::string &rtp_info, unsigned seq);

}  // namespace cudadiff_server
