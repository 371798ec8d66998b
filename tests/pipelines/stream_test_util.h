// Helpers of the network pipeline tests (RTSP, SRT): pipelines by
// gst_parse_launch with their bus watched from the streaming threads, the
// frames a client shows (by the sender timestamp cudadiffdec attaches), free
// UDP ports, and the reference frames of a deterministic source.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gst/app/gstappsink.h>
#include <gst/gst.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../elements/cudadiff_util.h"
#include "gst_test.h"

namespace stream_test {

using Bytes = diff_test::Bytes;
using Clock = std::chrono::steady_clock;

inline bool wait_until(const std::function<bool()> &done, double seconds) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

inline void sleep_s(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

// A UDP port nobody uses now on 127.0.0.1 (the system picks it).
inline int free_udp_port() {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) == 0) {
    socklen_t len = sizeof addr;
    getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len);
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// What a client showed: the sender's timestamp of each frame (from the
// decoder's GstReferenceTimestampMeta), its own PTS and, when asked, its bytes.
struct Shown {
  uint64_t sender_pts = GST_CLOCK_TIME_NONE;
  GstClockTime pts = GST_CLOCK_TIME_NONE;
  Bytes bytes;  // empty unless kept
};

// A pipeline whose bus is watched from the streaming threads (warnings,
// errors, EOS), with the frames reaching the sink named "out" (or playbin's
// video-sink) recorded.
// `on_frame`, when set, sees each frame (buffer, caps) in the streaming thread.
// The first element of `bin` made by `factory`, recursively (a new
// reference; null: none).
inline GstElement *find_by_factory(GstBin *bin, const char *factory) {
  GstElement *found = nullptr;
  GstIterator *it = gst_bin_iterate_recurse(bin);
  GValue v = G_VALUE_INIT;
  while (!found && gst_iterator_next(it, &v) == GST_ITERATOR_OK) {
    GstElement *e = GST_ELEMENT(g_value_get_object(&v));
    GstElementFactory *f = gst_element_get_factory(e);
    if (f && g_strcmp0(GST_OBJECT_NAME(f), factory) == 0) found = GST_ELEMENT(gst_object_ref(e));
    g_value_reset(&v);
  }
  g_value_unset(&v);
  gst_iterator_free(it);
  return found;
}

class Pipeline {
 public:
  using FrameCallback = std::function<void(GstBuffer *, GstCaps *, uint64_t sender_pts)>;

  explicit Pipeline(const std::string &description, bool keep_bytes = false,
                    FrameCallback on_frame = nullptr)
      : description_(description), keep_bytes_(keep_bytes), on_frame_(std::move(on_frame)) {
    GError *err = nullptr;
    pipeline_ = gst_parse_launch(description.c_str(), &err);
    EXPECT_NE(pipeline_, nullptr) << (err ? err->message : "") << "\n" << description;
    g_clear_error(&err);
    if (!pipeline_) return;
    GstBus *bus = gst_element_get_bus(pipeline_);
    gst_bus_set_sync_handler(bus, on_message, this, nullptr);
    gst_object_unref(bus);
    GstElement *out = gst_bin_get_by_name(GST_BIN(pipeline_), "out");
    // playbin: the sink given as its video-sink (not in the bin before it plays).
    if (!out && g_object_class_find_property(G_OBJECT_GET_CLASS(pipeline_), "video-sink"))
      g_object_get(pipeline_, "video-sink", &out, nullptr);
    if (out) {
      watch_sink(out);
      gst_object_unref(out);
    }
  }
  ~Pipeline() {
    stop();
    if (pipeline_) gst_object_unref(pipeline_);
  }
  // Records the frames reaching `sink` (for sinks inside playbin).
  void watch_sink(GstElement *sink) {
    GstPad *pad = gst_element_get_static_pad(sink, "sink");
    gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_BUFFER, on_buffer, this, nullptr);
    gst_object_unref(pad);
  }
  bool start() {
    if (!pipeline_) return false;
    stopping_ = false;
    started_at_ = Clock::now();
    return gst_element_set_state(pipeline_, GST_STATE_PLAYING) != GST_STATE_CHANGE_FAILURE;
  }
  // Errors from here on are the shutdown's (rtspsrc over TCP can find its
  // connection closed while it sends PAUSE): error() leaves them out.
  void stop() {
    stopping_ = true;
    if (pipeline_) gst_element_set_state(pipeline_, GST_STATE_NULL);
  }
  GstElement *element() { return pipeline_; }
  GstElement *get(const char *name) { return gst_bin_get_by_name(GST_BIN(pipeline_), name); }
  // The first element made by `factory`, recursively (a new reference; null: none).
  GstElement *get_by_factory(const char *factory) {
    return find_by_factory(GST_BIN(pipeline_), factory);
  }

  std::vector<Shown> frames() {
    std::lock_guard<std::mutex> lock(mutex_);
    return frames_;
  }
  size_t frame_count() {
    std::lock_guard<std::mutex> lock(mutex_);
    return frames_.size();
  }
  bool has_frame(uint64_t sender_pts) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Shown &f : frames_)
      if (f.sender_pts == sender_pts) return true;
    return false;
  }
  // Forgets the frames shown so far (before a restart).
  void clear_frames() {
    std::lock_guard<std::mutex> lock(mutex_);
    frames_.clear();
  }
  // The PTS of each frame shown, in order.
  std::vector<GstClockTime> output_pts() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<GstClockTime> pts;
    for (const Shown &f : frames_) pts.push_back(f.pts);
    return pts;
  }
  // Seconds from start() to the first frame, < 0 before it.
  double first_frame_after() {
    std::lock_guard<std::mutex> lock(mutex_);
    return first_frame_s_;
  }
  std::vector<std::string> warnings() {
    std::lock_guard<std::mutex> lock(mutex_);
    return warnings_;
  }
  // The first error while it ran ("" when none).
  std::string error() {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }
  std::vector<std::string> shutdown_errors() {
    std::lock_guard<std::mutex> lock(mutex_);
    return shutdown_errors_;
  }
  bool eos() const { return eos_; }
  // Factory names of every element, recursively.
  std::vector<std::string> factories() {
    std::vector<std::string> names;
    GstIterator *it = gst_bin_iterate_recurse(GST_BIN(pipeline_));
    GValue v = G_VALUE_INIT;
    while (gst_iterator_next(it, &v) == GST_ITERATOR_OK) {
      GstElementFactory *f = gst_element_get_factory(GST_ELEMENT(g_value_get_object(&v)));
      if (f) names.push_back(GST_OBJECT_NAME(f));
      g_value_reset(&v);
    }
    g_value_unset(&v);
    gst_iterator_free(it);
    return names;
  }

 private:
  static GstBusSyncReply on_message(GstBus *, GstMessage *m, gpointer data) {
    auto *self = static_cast<Pipeline *>(data);
    if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_EOS) self->eos_ = true;
    if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_WARNING || GST_MESSAGE_TYPE(m) == GST_MESSAGE_ERROR) {
      const gst_test::BusText t = gst_test::bus_text(m);
      const std::string text =
          std::string(GST_OBJECT_NAME(GST_MESSAGE_SRC(m))) + ": " + t.message + " | " + t.debug;
      std::lock_guard<std::mutex> lock(self->mutex_);
      if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_WARNING)
        self->warnings_.push_back(text);
      else if (self->stopping_)
        self->shutdown_errors_.push_back(text);
      else if (self->error_.empty())
        self->error_ = text;
    }
    // A sync handler that drops a message owns it.
    gst_message_unref(m);
    return GST_BUS_DROP;
  }
  static GstPadProbeReturn on_buffer(GstPad *pad, GstPadProbeInfo *info, gpointer data) {
    auto *self = static_cast<Pipeline *>(data);
    GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER(info);
    static GstCaps *sender = [] {
      GstCaps *caps = gst_caps_from_string("timestamp/x-cudadiff-sender");
      GST_MINI_OBJECT_FLAG_SET(caps, GST_MINI_OBJECT_FLAG_MAY_BE_LEAKED);  // kept for the process
      return caps;
    }();
    GstReferenceTimestampMeta *meta = gst_buffer_get_reference_timestamp_meta(buf, sender);
    const uint64_t pts = meta ? meta->timestamp : GST_CLOCK_TIME_NONE;
    GstCaps *caps = gst_pad_get_current_caps(pad);
    if (self->on_frame_) self->on_frame_(buf, caps, pts);
    Shown shown;
    shown.sender_pts = pts;
    shown.pts = GST_BUFFER_PTS(buf);
    if (self->keep_bytes_ && caps) shown.bytes = diff_test::canonical_of(buf, caps);
    if (caps) gst_caps_unref(caps);
    std::lock_guard<std::mutex> lock(self->mutex_);
    if (self->frames_.empty())
      self->first_frame_s_ =
          std::chrono::duration<double>(Clock::now() - self->started_at_).count();
    self->frames_.push_back(std::move(shown));
    return GST_PAD_PROBE_OK;
  }

  std::string description_;
  bool keep_bytes_;
  FrameCallback on_frame_;
  GstElement *pipeline_ = nullptr;
  std::mutex mutex_;
  std::vector<Shown> frames_;
  std::vector<std::string> warnings_;
  std::string error_;
  std::vector<std::string> shutdown_errors_;
  std::atomic<bool> eos_{false};
  std::atomic<bool> stopping_{false};
  Clock::time_point started_at_ = Clock::now();
  double first_frame_s_ = -1;
};

// The frames of a non-live copy of a deterministic source (videotestsrc
// patterns depend on the frame number only, which it writes into the buffer
// offset), produced on demand in order: frame(n) for increasing n.
class ReferenceFrames {
 public:
  // `source` ends in raw video caps with a framerate.
  explicit ReferenceFrames(const std::string &source) {
    GError *err = nullptr;
    pipeline_ =
        gst_parse_launch((source + " ! appsink name=ref sync=false max-buffers=4").c_str(), &err);
    EXPECT_NE(pipeline_, nullptr) << (err ? err->message : "");
    g_clear_error(&err);
    if (!pipeline_) return;
    sink_ = gst_bin_get_by_name(GST_BIN(pipeline_), "ref");
    gst_element_set_state(pipeline_, GST_STATE_PLAYING);
  }
  ~ReferenceFrames() {
    if (pipeline_) {
      gst_element_set_state(pipeline_, GST_STATE_NULL);
      gst_object_unref(sink_);
      gst_object_unref(pipeline_);
    }
  }
  // The canonical bytes of frame `number` (the source's buffer offset; empty
  // when the source has passed it or ended).
  const Bytes &frame(uint64_t number) {
    static const Bytes none;
    while (!have_ || current_ < number) {
      GstSample *sample = gst_app_sink_try_pull_sample(GST_APP_SINK(sink_), 10 * GST_SECOND);
      if (!sample) return none;
      current_ = GST_BUFFER_OFFSET(gst_sample_get_buffer(sample));
      bytes_ = diff_test::canonical_of(gst_sample_get_buffer(sample), gst_sample_get_caps(sample));
      have_ = true;
      gst_sample_unref(sample);
    }
    return current_ == number ? bytes_ : none;
  }

 private:
  GstElement *pipeline_ = nullptr;
  GstElement *sink_ = nullptr;
  bool have_ = false;
  uint64_t current_ = 0;
  Bytes bytes_;
};

// The largest |a - b| over two byte strings of the same size (256: sizes differ).
inline int max_difference(const Bytes &a, const Bytes &b) {
  if (a.size() != b.size()) return 256;
  int worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(int(a[i]) - int(b[i])));
  return worst;
}

}  // namespace stream_test
