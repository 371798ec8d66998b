// Glass-to-glass latency of the difference stream on one host over
// loopback, for each transport: from the moment cudadiffenc receives a frame
// to the moment cudadiffdec outputs it, matched by the sender timestamp the
// packets carry (the decoder attaches it as a GstReferenceTimestampMeta with
// caps timestamp/x-cudadiff-sender). Live source: an appsrc fed at the frame
// rate from the encoder's own (pinned) buffer pool: a still textured
// background and a block of moving texture, a quarter of the width by an
// eighth of the height (about 3 % of the bytes change per frame), plus a
// keyframe every --keyframe-interval frames.
//
//   bench_latency [--transports tcp,rtsp,srt] [--sizes 1920x1080,1280x720] [--fps 30]
//                 [--seconds 10] [--backend auto|cpu|cuda] [--format BGR] ...
//
// Prints one RESULT line per run and a table (p50, p99, max in ms).
#include <gst/app/gstappsrc.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cudadiffserver.h"

#ifndef CUDADIFF_BUILD_PLUGIN_DIR
#define CUDADIFF_BUILD_PLUGIN_DIR ""
#endif

namespace {

struct Options {
  std::vector<std::string> transports = {"tcp", "rtsp", "srt"};
  std::vector<std::pair<int, int>> sizes = {{1920, 1080}, {1280, 720}};
  int fps = 30;
  double seconds = 10;
  double warmup = 2;
  std::string backend = "auto";
  std::string format = "BGR";
  std::string compression;  // the encoder's default when empty
  int keyframe_interval = 60;
  int stream_version = 2;  // named: the measured path, whatever the element's default
  int threshold = 20;
  int rtsp_latency_ms = 2000;  // rtspsrc's default
  double pace_rate = 200;      // Mbit/s (cudadiff-server's default)
  int srt_latency_ms = 20;
};

std::vector<std::string> split(const std::string &text, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

int free_udp_port() {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) == 0) {
    socklen_t len = sizeof addr;
    getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len);
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// Latency samples: encoder input time by pts, decoder output time.
struct Meter {
  std::mutex mutex;
  std::map<guint64, gint64> sent_us;  // pts -> monotonic us at the encoder's input
  std::vector<double> latency_ms;
  gint64 measure_from_us = 0;  // samples before this (warm-up) are ignored
  guint64 frames_in = 0, frames_out = 0, unmatched = 0;
  std::atomic<bool> counting{false};
};

GstCaps *sender_caps() {
  static GstCaps *caps = gst_caps_from_string("timestamp/x-cudadiff-sender");
  return caps;
}

GstPadProbeReturn on_encoder_input(GstPad *, GstPadProbeInfo *info, gpointer data) {
  auto *m = static_cast<Meter *>(data);
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER(info);
  const gint64 now = g_get_monotonic_time();
  std::lock_guard<std::mutex> lock(m->mutex);
  m->sent_us[GST_BUFFER_PTS(buf)] = now;
  if (now >= m->measure_from_us) m->frames_in++;
  while (m->sent_us.size() > 2000) m->sent_us.erase(m->sent_us.begin());
  return GST_PAD_PROBE_OK;
}

GstPadProbeReturn on_decoder_output(GstPad *, GstPadProbeInfo *info, gpointer data) {
  auto *m = static_cast<Meter *>(data);
  const gint64 now = g_get_monotonic_time();
  GstReferenceTimestampMeta *meta =
      gst_buffer_get_reference_timestamp_meta(GST_PAD_PROBE_INFO_BUFFER(info), sender_caps());
  std::lock_guard<std::mutex> lock(m->mutex);
  if (!meta) {
    m->unmatched++;
    return GST_PAD_PROBE_OK;
  }
  const auto it = m->sent_us.find(meta->timestamp);
  if (it == m->sent_us.end()) {
    m->unmatched++;
    return GST_PAD_PROBE_OK;
  }
  if (it->second >= m->measure_from_us && m->counting) {
    m->frames_out++;
    m->latency_ms.push_back(double(now - it->second) / 1000.0);
  }
  return GST_PAD_PROBE_OK;
}

void probe(GstElement *bin, const char *name, const char *pad_name, GstPadProbeCallback cb,
           Meter *m) {
  GstElement *e = gst_bin_get_by_name(GST_BIN(bin), name);
  if (!e) return;
  GstPad *pad = gst_element_get_static_pad(e, pad_name);
  gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_BUFFER, cb, m, nullptr);
  gst_object_unref(pad);
  gst_object_unref(e);
}

// The frames: a still textured background and a block moving across it.
class Scene {
 public:
  Scene(const std::string &format, int w, int h, int fps) {
    std::string caps = "video/x-raw,format=" + format + ",width=" + std::to_string(w) +
                       ",height=" + std::to_string(h) + ",framerate=" + std::to_string(fps) + "/1";
    caps_ = gst_caps_from_string(caps.c_str());
    gst_video_info_from_caps(&info_, caps_);
    background_.resize(GST_VIDEO_INFO_SIZE(&info_));
    uint32_t x = 12345;
    for (size_t i = 0; i < background_.size(); ++i) {
      x = x * 1664525u + 1013904223u;
      background_[i] = uint8_t((i * 7 / 5 + (x >> 28)) & 0xff);
    }
  }
  ~Scene() { gst_caps_unref(caps_); }
  GstCaps *caps() const { return caps_; }
  const GstVideoInfo &info() const { return info_; }
  // Frame t into a mapped frame of info().
  void draw(GstVideoFrame *frame, int t) const {
    const int w = GST_VIDEO_INFO_WIDTH(&info_), h = GST_VIDEO_INFO_HEIGHT(&info_);
    for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES(frame); ++p) {
      auto *dst = static_cast<uint8_t *>(GST_VIDEO_FRAME_PLANE_DATA(frame, p));
      const int stride = GST_VIDEO_FRAME_PLANE_STRIDE(frame, p);
      const int rows = GST_VIDEO_FRAME_COMP_HEIGHT(frame, p);
      const size_t offset = GST_VIDEO_INFO_PLANE_OFFSET(&info_, p);
      const int src_stride = GST_VIDEO_INFO_PLANE_STRIDE(&info_, p);
      const int row_bytes = std::min(stride, src_stride);
      // The block: a quarter of the width, an eighth of the height, moving.
      const int bw = row_bytes / 4, bh = std::max(1, rows / 8);
      const int bx = (t * 16) % std::max(1, row_bytes - bw), by = (t * 4) % std::max(1, rows - bh);
      for (int y = 0; y < rows; ++y) {
        uint8_t *row = dst + size_t(y) * size_t(stride);
        std::memcpy(row, background_.data() + offset + size_t(y) * size_t(src_stride),
                    size_t(row_bytes));
        // Inside the block a piece of the texture that moves with t.
        if (y >= by && y < by + bh) {
          const size_t sy = size_t((y + 3 * t) % rows), sx = size_t((7 * t) % (row_bytes - bw + 1));
          std::memcpy(row + bx, background_.data() + offset + sy * size_t(src_stride) + sx,
                      size_t(bw));
        }
      }
    }
    (void)w;
    (void)h;
  }

 private:
  GstCaps *caps_;
  GstVideoInfo info_;
  std::vector<uint8_t> background_;
};

// Feeds an appsrc at the frame rate from the encoder's proposed pool.
class Feeder {
 public:
  Feeder(const Scene &scene, int fps) : scene_(scene), fps_(fps) {}
  ~Feeder() { stop(); }
  void set_appsrc(GstElement *appsrc) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (appsrc_) gst_object_unref(appsrc_);
    appsrc_ = GST_ELEMENT(gst_object_ref(appsrc));
    if (pool_) {
      gst_buffer_pool_set_active(pool_, FALSE);
      gst_object_unref(pool_);
      pool_ = nullptr;
    }
  }
  void start() {
    running_ = true;
    thread_ = std::thread([this] { run(); });
  }
  void stop() {
    running_ = false;
    if (thread_.joinable()) thread_.join();
    std::lock_guard<std::mutex> lock(mutex_);
    if (pool_) {
      gst_buffer_pool_set_active(pool_, FALSE);
      gst_object_unref(pool_);
      pool_ = nullptr;
    }
    if (appsrc_) gst_object_unref(appsrc_);
    appsrc_ = nullptr;
  }

 private:
  // The pool the encoder proposes (pinned memory), asked for once caps are set.
  void get_pool() {
    GstPad *pad = gst_element_get_static_pad(appsrc_, "src");
    GstQuery *query = gst_query_new_allocation(scene_.caps(), TRUE);
    if (gst_pad_peer_query(pad, query) && gst_query_get_n_allocation_pools(query) > 0) {
      GstBufferPool *pool = nullptr;
      guint size = 0, min = 0, max = 0;
      gst_query_parse_nth_allocation_pool(query, 0, &pool, &size, &min, &max);
      if (pool) {
        GstStructure *config = gst_buffer_pool_get_config(pool);
        gst_buffer_pool_config_set_params(config, scene_.caps(), size, std::max(min, 4u), 0);
        gst_buffer_pool_config_add_option(config, GST_BUFFER_POOL_OPTION_VIDEO_META);
        if (gst_buffer_pool_set_config(pool, config) && gst_buffer_pool_set_active(pool, TRUE))
          pool_ = pool;
        else
          gst_object_unref(pool);
      }
    }
    gst_query_unref(query);
    gst_object_unref(pad);
  }
  void run() {
    const gint64 period_us = 1000000 / fps_;
    gint64 next = g_get_monotonic_time();
    int t = 0;
    while (running_) {
      const gint64 now = g_get_monotonic_time();
      if (now < next) {
        g_usleep(gulong(next - now));
        continue;
      }
      next += period_us;
      std::lock_guard<std::mutex> lock(mutex_);
      if (!appsrc_) continue;
      GstPad *pad = gst_element_get_static_pad(appsrc_, "src");
      const bool linked = gst_pad_is_linked(pad);
      gst_object_unref(pad);
      if (!linked) continue;
      if (!pool_) get_pool();
      GstBuffer *buf = nullptr;
      if (!pool_ || gst_buffer_pool_acquire_buffer(pool_, &buf, nullptr) != GST_FLOW_OK)
        buf = gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&scene_.info()), nullptr);
      GstVideoFrame frame;
      if (gst_video_frame_map(&frame, const_cast<GstVideoInfo *>(&scene_.info()), buf,
                              GST_MAP_WRITE)) {
        scene_.draw(&frame, t);
        gst_video_frame_unmap(&frame);
      }
      ++t;
      gst_app_src_push_buffer(GST_APP_SRC(appsrc_), buf);  // do-timestamp stamps it
    }
  }

  const Scene &scene_;
  int fps_;
  std::mutex mutex_;
  GstElement *appsrc_ = nullptr;
  GstBufferPool *pool_ = nullptr;
  std::atomic<bool> running_{false};
  std::thread thread_;
};

std::string appsrc_description(const Scene &scene) {
  gchar *caps = gst_caps_to_string(scene.caps());
  std::string d = std::string(
                      "appsrc name=src is-live=true format=time do-timestamp=true "
                      "max-buffers=4 leaky-type=downstream caps=\"") +
                  caps + "\"";
  g_free(caps);
  return d;
}

std::string encoder_properties(const Options &o) {
  std::string p = "stream-version=" + std::to_string(o.stream_version) + " backend=" + o.backend +
                  " threshold=" + std::to_string(o.threshold) +
                  " keyframe-interval=" + std::to_string(o.keyframe_interval);
  if (!o.compression.empty()) p += " compression=" + o.compression;
  return p;
}

GstElement *launch(const std::string &description) {
  GError *err = nullptr;
  GstElement *p = gst_parse_launch(description.c_str(), &err);
  if (!p) {
    std::fprintf(stderr, "pipeline: %s\n  %s\n", err ? err->message : "?", description.c_str());
    g_clear_error(&err);
  }
  return p;
}

// The first error on the bus, "" when none.
std::string bus_error(GstElement *pipeline) {
  GstBus *bus = gst_element_get_bus(pipeline);
  std::string text;
  while (GstMessage *m = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR)) {
    GError *err = nullptr;
    gst_message_parse_error(m, &err, nullptr);
    if (text.empty())
      text = std::string(GST_OBJECT_NAME(GST_MESSAGE_SRC(m))) + ": " + (err ? err->message : "");
    g_clear_error(&err);
    gst_message_unref(m);
  }
  gst_object_unref(bus);
  return text;
}

struct Result {
  std::string transport;
  int width = 0, height = 0;
  guint64 frames_in = 0, frames_out = 0;
  double p50 = 0, p99 = 0, max = 0;
  double keyframe_kb = 0, delta_kb = 0;  // mean packet sizes from the encoder's stats
  long long rcvbuf_errors = -1;          // UDP datagrams this host dropped (full socket buffers)
  std::string error;
};

// Linux's count of UDP datagrams dropped for a full receive buffer (-1: unknown).
long long udp_rcvbuf_errors() {
  FILE *f = std::fopen("/proc/net/snmp", "r");
  if (!f) return -1;
  char header[1024], values[1024];
  long long result = -1;
  while (std::fgets(header, sizeof header, f) && std::fgets(values, sizeof values, f)) {
    if (std::strncmp(header, "Udp:", 4) != 0) continue;
    std::istringstream names(header + 4), numbers(values + 4);
    std::string name;
    long long number = 0;
    while (names >> name && numbers >> number)
      if (name == "RcvbufErrors") result = number;
    break;
  }
  std::fclose(f);
  return result;
}

// Mean keyframe and delta packet sizes (KB) from cudadiffenc's stats.
void read_sizes(GstElement *enc, Result *r) {
  if (!enc) return;
  GstStructure *s = nullptr;
  g_object_get(enc, "stats", &s, nullptr);
  if (!s) return;
  guint64 frames = 0, keyframes = 0, bytes = 0, delta_bytes = 0;
  gst_structure_get_uint64(s, "frames", &frames);
  gst_structure_get_uint64(s, "keyframes", &keyframes);
  gst_structure_get_uint64(s, "bytes-out", &bytes);
  gst_structure_get_uint64(s, "delta-bytes-out", &delta_bytes);
  gst_structure_free(s);
  if (keyframes) r->keyframe_kb = double(bytes - delta_bytes) / double(keyframes) / 1e3;
  if (frames > keyframes) r->delta_kb = double(delta_bytes) / double(frames - keyframes) / 1e3;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, size_t(std::ceil(q * double(v.size()))) - 1);
  return v[i];
}

// Runs one transport: sender and receiver in this process, `measure`
// seconds after the warm-up.
Result run(const Options &o, const std::string &transport, int w, int h) {
  Result r;
  r.transport = transport;
  r.width = w;
  r.height = h;
  Scene scene(o.format, w, h, o.fps);
  Meter meter;
  const long long rcvbuf_before = udp_rcvbuf_errors();
  Feeder feeder(scene, o.fps);
  const std::string enc = "cudadiffenc name=enc " + encoder_properties(o);
  const std::string dec = "cudadiffdec name=dec backend=" + o.backend;
  GstElement *sender = nullptr, *receiver = nullptr;
  GstElement *encoder = nullptr;  // for its stats
  std::unique_ptr<cudadiff_server::Server> rtsp;

  if (transport == "tcp") {
    sender = launch(appsrc_description(scene) + " ! " + enc +
                    " ! tcpserversink name=sink host=127.0.0.1 port=0 sync-method=latest-keyframe "
                    "sync=false");
    if (!sender) return r;
    gst_element_set_state(sender, GST_STATE_PLAYING);
    gst_element_get_state(sender, nullptr, nullptr, 5 * GST_SECOND);
    GstElement *sink = gst_bin_get_by_name(GST_BIN(sender), "sink");
    int port = 0;
    g_object_get(sink, "current-port", &port, nullptr);
    gst_object_unref(sink);
    receiver = launch("tcpclientsrc host=127.0.0.1 port=" + std::to_string(port) + " ! " + dec +
                      " ! fakesink sync=false");
  } else if (transport == "srt") {
    const std::string port = std::to_string(free_udp_port());
    const std::string latency = std::to_string(o.srt_latency_ms);
    sender =
        launch(appsrc_description(scene) + " ! " + enc + " ! srtsink uri=srt://127.0.0.1:" + port +
               "?mode=listener latency=" + latency + " wait-for-connection=false sync=false");
    if (!sender) return r;
    gst_element_set_state(sender, GST_STATE_PLAYING);
    receiver = launch("srtsrc uri=srt://127.0.0.1:" + port + " latency=" + latency + " ! " + dec +
                      " ! fakesink sync=false");
  } else if (transport == "rtsp" || transport.rfind("rtsp:", 0) == 0) {
    cudadiff_server::Options so;
    so.source = appsrc_description(scene);
    so.address = "127.0.0.1";
    so.port = 0;
    so.encoder_properties = encoder_properties(o);
    // "rtsp:R": the server paces at R Mbit/s.
    so.pace_rate_mbit = transport.size() > 5 ? std::atof(transport.c_str() + 5) : o.pace_rate;
    so.on_media = [&](GstElement *media) {
      probe(media, "enc", "sink", on_encoder_input, &meter);
      if (encoder) gst_object_unref(encoder);
      encoder = gst_bin_get_by_name(GST_BIN(media), "enc");
      GstElement *src = gst_bin_get_by_name(GST_BIN(media), "src");
      feeder.set_appsrc(src);
      gst_object_unref(src);
    };
    rtsp = std::make_unique<cudadiff_server::Server>(so);
    std::string error;
    if (!rtsp->start(&error)) {
      r.error = error;
      return r;
    }
    receiver =
        launch("rtspsrc location=" + rtsp->url() + " latency=" + std::to_string(o.rtsp_latency_ms) +
               " ! rtpgstdepay ! " + dec + " ! fakesink sync=false");
  } else {
    r.error = "unknown transport " + transport;
    return r;
  }
  if (!receiver) {
    r.error = "cannot make the receiver";
    return r;
  }
  if (sender) {
    probe(sender, "enc", "sink", on_encoder_input, &meter);
    encoder = gst_bin_get_by_name(GST_BIN(sender), "enc");
    GstElement *src = gst_bin_get_by_name(GST_BIN(sender), "src");
    feeder.set_appsrc(src);
    gst_object_unref(src);
  }
  probe(receiver, "dec", "src", on_decoder_output, &meter);
  gst_element_set_state(receiver, GST_STATE_PLAYING);
  {
    std::lock_guard<std::mutex> lock(meter.mutex);
    meter.measure_from_us = g_get_monotonic_time() + gint64(o.warmup * 1e6);
  }
  meter.counting = true;
  feeder.start();
  g_usleep(gulong((o.warmup + o.seconds) * 1e6));
  {
    // Frames sent in the last half second may still be on their way.
    std::lock_guard<std::mutex> lock(meter.mutex);
    meter.counting = false;
  }
  feeder.stop();
  read_sizes(encoder, &r);
  const long long rcvbuf_after = udp_rcvbuf_errors();
  if (rcvbuf_before >= 0 && rcvbuf_after >= 0) r.rcvbuf_errors = rcvbuf_after - rcvbuf_before;
  if (encoder) gst_object_unref(encoder);
  r.error = bus_error(receiver);
  if (sender && r.error.empty()) r.error = bus_error(sender);
  if (rtsp && r.error.empty()) r.error = rtsp->error();
  gst_element_set_state(receiver, GST_STATE_NULL);
  if (sender) gst_element_set_state(sender, GST_STATE_NULL);
  if (rtsp) rtsp->stop();
  gst_object_unref(receiver);
  if (sender) gst_object_unref(sender);
  std::lock_guard<std::mutex> lock(meter.mutex);
  r.frames_in = meter.frames_in;
  r.frames_out = meter.frames_out;
  r.p50 = percentile(meter.latency_ms, 0.5);
  r.p99 = percentile(meter.latency_ms, 0.99);
  r.max = meter.latency_ms.empty()
              ? 0
              : *std::max_element(meter.latency_ms.begin(), meter.latency_ms.end());
  return r;
}

}  // namespace

int main(int argc, char **argv) {
  Options o;
  gchar *transports = nullptr, *sizes = nullptr, *backend = nullptr, *format = nullptr,
        *compression = nullptr;
  gdouble seconds = o.seconds, warmup = o.warmup;
  const GOptionEntry entries[] = {
      {"transports", 0, 0, G_OPTION_ARG_STRING, &transports,
       "Comma-separated: tcp, rtsp, srt; rtsp:R for the server pacing at R Mbit/s (default "
       "tcp,rtsp,srt)",
       "LIST"},
      {"sizes", 0, 0, G_OPTION_ARG_STRING, &sizes,
       "Comma-separated WxH (default 1920x1080,1280x720)", "LIST"},
      {"fps", 0, 0, G_OPTION_ARG_INT, &o.fps, "Frame rate (default 30)", "N"},
      {"seconds", 0, 0, G_OPTION_ARG_DOUBLE, &seconds, "Measured seconds per run (default 10)",
       "S"},
      {"warmup", 0, 0, G_OPTION_ARG_DOUBLE, &warmup, "Seconds not measured first (default 2)", "S"},
      {"backend", 0, 0, G_OPTION_ARG_STRING, &backend, "auto, cpu or cuda (default auto)", "B"},
      {"format", 0, 0, G_OPTION_ARG_STRING, &format, "Video format (default BGR)", "F"},
      {"compression", 0, 0, G_OPTION_ARG_STRING, &compression,
       "cudadiffenc compression (default: the element's)", "C"},
      {"keyframe-interval", 0, 0, G_OPTION_ARG_INT, &o.keyframe_interval,
       "cudadiffenc keyframe-interval (default 60)", "N"},
      {"stream-version", 0, 0, G_OPTION_ARG_INT, &o.stream_version,
       "cudadiffenc stream-version, 1 or 2 (default 2, the element's default and the latency "
       "table's)",
       "N"},
      {"rtsp-latency", 0, 0, G_OPTION_ARG_INT, &o.rtsp_latency_ms,
       "rtspsrc latency in ms (default 2000, its own default)", "MS"},
      {"pace-rate", 0, 0, G_OPTION_ARG_DOUBLE, &o.pace_rate,
       "cudadiff-server --pace-rate in Mbit/s (default 200)", "MBIT"},
      {"srt-latency", 0, 0, G_OPTION_ARG_INT, &o.srt_latency_ms,
       "SRT latency in ms on both ends (default 20)", "MS"},
      {nullptr, 0, 0, G_OPTION_ARG_NONE, nullptr, nullptr, nullptr},
  };
  GOptionContext *context =
      g_option_context_new("- latency of the difference stream per transport");
  g_option_context_add_main_entries(context, entries, nullptr);
  g_option_context_add_group(context, gst_init_get_option_group());
  GError *err = nullptr;
  if (!g_option_context_parse(context, &argc, &argv, &err)) {
    std::fprintf(stderr, "%s\n", err->message);
    return 2;
  }
  g_option_context_free(context);
  gst_init(&argc, &argv);
  if (transports) o.transports = split(transports, ',');
  if (sizes) {
    o.sizes.clear();
    for (const std::string &s : split(sizes, ',')) {
      int w = 0, h = 0;
      if (std::sscanf(s.c_str(), "%dx%d", &w, &h) != 2 || w <= 0 || h <= 0) {
        std::fprintf(stderr, "bad size %s\n", s.c_str());
        return 2;
      }
      o.sizes.emplace_back(w, h);
    }
  }
  if (backend) o.backend = backend;
  if (format) o.format = format;
  if (compression) o.compression = compression;
  if (o.stream_version != 1 && o.stream_version != 2) {
    std::fprintf(stderr, "--stream-version must be 1 or 2\n");
    return 2;
  }
  o.seconds = seconds;
  o.warmup = warmup;
  if (!gst_registry_find_feature(gst_registry_get(), "cudadiffenc", GST_TYPE_ELEMENT_FACTORY) &&
      CUDADIFF_BUILD_PLUGIN_DIR[0])
    gst_registry_scan_path(gst_registry_get(), CUDADIFF_BUILD_PLUGIN_DIR);

  std::vector<Result> results;
  for (const auto &size : o.sizes) {
    for (const std::string &t : o.transports) {
      std::printf("running %s %dx%d %s at %d fps, %.0f s ...\n", t.c_str(), size.first, size.second,
                  o.format.c_str(), o.fps, o.seconds);
      std::fflush(stdout);
      Result r = run(o, t, size.first, size.second);
      std::printf(
          "RESULT|latency|%s|%dx%d|%s|backend=%s|frames_in=%llu|frames_out=%llu|"
          "p50_ms=%.2f|p99_ms=%.2f|max_ms=%.2f|keyframe_kb=%.0f|delta_kb=%.1f|"
          "udp_rcvbuf_errors=%lld|%s\n",
          t.c_str(), size.first, size.second, o.format.c_str(), o.backend.c_str(),
          (unsigned long long)r.frames_in, (unsigned long long)r.frames_out, r.p50, r.p99, r.max,
          r.keyframe_kb, r.delta_kb, r.rcvbuf_errors, r.error.empty() ? "ok" : r.error.c_str());
      std::fflush(stdout);
      results.push_back(r);
    }
  }
  const double frame_ms = 1000.0 / o.fps;
  std::printf(
      "\nencoder input -> decoder output, %s, %d fps, backend %s, keyframe every %d "
      "frames (one frame = %.1f ms)\n",
      o.format.c_str(), o.fps, o.backend.c_str(), o.keyframe_interval, frame_ms);
  std::printf("%-8s %-10s %7s %7s %8s %8s %8s %9s %8s\n", "", "size", "frames", "shown", "p50 ms",
              "p99 ms", "max ms", "key KB", "delta KB");
  bool ok = true;
  for (const Result &r : results) {
    std::printf("%-8s %4dx%-5d %7llu %7llu %8.2f %8.2f %8.2f %9.0f %8.1f %s\n", r.transport.c_str(),
                r.width, r.height, (unsigned long long)r.frames_in,
                (unsigned long long)r.frames_out, r.p50, r.p99, r.max, r.keyframe_kb, r.delta_kb,
                r.error.c_str());
    ok = ok && r.error.empty() && r.frames_out > 0;
  }
  return ok ? 0 : 1;
}
