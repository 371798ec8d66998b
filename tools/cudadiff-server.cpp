// cudadiff-server: serves rtsp://HOST:PORT/cam, the difference stream of a
// camera, a test pattern or a media file, to any number of clients through
// one shared encoder. docs/streaming.md explains the options and the clients.
//
//   cudadiff-server [--source camera|test|FILE] [--port 8554] [--threshold 20] ...
//   (cudadiff-server --help lists the options)
#include <glib-unix.h>
#include <gst/gst.h>
#include <gst/pbutils/pbutils.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include "cudadiffserver.h"
#include "toolcheck.h"

namespace {

constexpr gint kUnset = G_MININT;

struct Args {
  gint port = 8554;
  gchar *address = nullptr;
  gchar *source = nullptr;
  gchar *camera = nullptr;
  gint width = 1280, height = 720, fps = 30;
  // kUnset: the element's default (a value given is checked, -1 included)
  gint threshold = kUnset;
  gint keyframe_interval = kUnset;
  gint stream_version = kUnset;
  gchar *compression = nullptr;
  gchar *backend = nullptr;
  gdouble simulate_loss = 0;
  gdouble pace_rate = 200;
  gint pace_burst = 65536;
  gint retransmission_time = 2000;
  gint rtcp_interval = 50;
  gint stalled_timeout = 10;
  gint stats_interval = 10;
};

GMainLoop *main_loop = nullptr;

gboolean on_signal(gpointer) {
  std::printf("stopping\n");
  g_main_loop_quit(main_loop);
  return G_SOURCE_REMOVE;
}

gboolean print_stats(gpointer data) {
  auto *server = static_cast<cudadiff_server::Server *>(data);
  const cudadiff_server::Stats s = server->stats();
  std::printf(
      "clients: %llu now, %llu so far; %llu plays; %llu keyframes; keyframe requests: "
      "%llu (%llu for joins), %llu merged; %llu stalled clients disconnected; %llu TCP "
      "viewers disconnected for falling behind\n",
      (unsigned long long)s.clients_now, (unsigned long long)s.clients_connected,
      (unsigned long long)s.plays, (unsigned long long)s.keyframes,
      (unsigned long long)s.keyframe_requests, (unsigned long long)s.join_keyframes,
      (unsigned long long)s.keyframe_requests_merged, (unsigned long long)s.stalled_clients_closed,
      (unsigned long long)s.slow_clients_closed);
  std::fflush(stdout);
  return G_SOURCE_CONTINUE;
}

// A --source file is looked at now (GstDiscoverer): one that GStreamer cannot
// play, or that has no video, is refused before serving rather than when the
// first viewer connects.
bool media_file_has_video(const std::string &path) {
  GError *err = nullptr;
  GstDiscoverer *discoverer = gst_discoverer_new(10 * GST_SECOND, &err);
  if (!discoverer) {  // (cannot look: the first viewer will tell)
    g_clear_error(&err);
    return true;
  }
  gchar *uri = gst_filename_to_uri(path.c_str(), nullptr);
  GstDiscovererInfo *info = uri ? gst_discoverer_discover_uri(discoverer, uri, &err) : nullptr;
  bool ok = false;
  const GstDiscovererResult result =
      info ? gst_discoverer_info_get_result(info) : GST_DISCOVERER_ERROR;
  // Plugins missing for its other streams (an audio decoder) do not matter:
  // only the video is played.
  bool video_missing = false;
  if (result == GST_DISCOVERER_MISSING_PLUGINS) {
    const gchar **details = gst_discoverer_info_get_missing_elements_installer_details(info);
    for (const gchar **d = details; d && *d; ++d)
      if (!strstr(*d, "|decoder-audio/") && !strstr(*d, "|decoder-text/") &&
          !strstr(*d, "|decoder-subpicture/"))
        video_missing = true;
    if (!details) video_missing = true;
  }
  if (video_missing) {
    std::fprintf(stderr, "--source %s: a plugin that plays it is missing (%s)\n", path.c_str(),
                 err ? err->message : "see gst-discoverer-1.0");
  } else if (result == GST_DISCOVERER_TIMEOUT) {
    std::fprintf(stderr, "--source %s: GStreamer took too long to read it\n", path.c_str());
  } else if (result != GST_DISCOVERER_OK && result != GST_DISCOVERER_MISSING_PLUGINS) {
    std::fprintf(stderr, "--source %s: not a media file GStreamer can play (%s)\n", path.c_str(),
                 err ? err->message : "unknown error");
  } else if (GList *video = gst_discoverer_info_get_video_streams(info)) {
    gst_discoverer_stream_info_list_free(video);
    ok = true;
  } else {
    std::fprintf(stderr, "--source %s: has no video stream\n", path.c_str());
  }
  g_clear_error(&err);
  if (info) gst_discoverer_info_unref(info);
  g_free(uri);
  g_object_unref(discoverer);
  return ok;
}

}  // namespace

int main(int argc, char **argv) {
  Args a;
  const GOptionEntry entries[] = {
      {"port", 'p', 0, G_OPTION_ARG_INT, &a.port, "RTSP port (default 8554; 0: any free port)",
       "N"},
      {"address", 'a', 0, G_OPTION_ARG_STRING, &a.address,
       "Address to listen on (default 0.0.0.0: every IPv4 interface; :: for IPv6 too)", "ADDR"},
      {"source", 's', 0, G_OPTION_ARG_STRING, &a.source,
       "camera, test (a moving test pattern), or the path of a media file, played in a loop "
       "(default test)",
       "SRC"},
      {"device", 'd', 0, G_OPTION_ARG_STRING, &a.camera, "Camera device (default /dev/video0)",
       "PATH"},
      {"width", 'W', 0, G_OPTION_ARG_INT, &a.width, "Test pattern width (default 1280)", "W"},
      {"height", 'H', 0, G_OPTION_ARG_INT, &a.height, "Test pattern height (default 720)", "H"},
      {"fps", 'f', 0, G_OPTION_ARG_INT, &a.fps,
       "Test pattern frame rate, and that of a file whose frames carry no timestamps (default 30)",
       "FPS"},
      {"threshold", 't', 0, G_OPTION_ARG_INT, &a.threshold,
       "cudadiffenc threshold, 0 to 255 (default: the element's, 20)", "T"},
      {"keyframe-interval", 'k', 0, G_OPTION_ARG_INT, &a.keyframe_interval,
       "cudadiffenc keyframe-interval in frames (default: the element's, 60)", "N"},
      {"stream-version", 'V', 0, G_OPTION_ARG_INT, &a.stream_version,
       "cudadiffenc stream-version: 1 or 2 (default: the element's, 2; version 1 takes less "
       "time per frame)",
       "N"},
      {"compression", 'c', 0, G_OPTION_ARG_STRING, &a.compression,
       "cudadiffenc compression: zstd or none (default: the element's)", "C"},
      {"backend", 'b', 0, G_OPTION_ARG_STRING, &a.backend,
       "cudadiffenc backend: auto, cuda or cpu (default auto)", "B"},
      {"simulate-loss", 'l', 0, G_OPTION_ARG_DOUBLE, &a.simulate_loss,
       "Drop this fraction (0..1) of the outgoing RTP packets, retransmissions included, over "
       "UDP and TCP alike (for tests and demos; default 0)",
       "P"},
      {"pace-rate", 0, 0, G_OPTION_ARG_DOUBLE, &a.pace_rate,
       "Send RTP packets at most at this many Mbit/s, so that a large keyframe does not arrive "
       "at a viewer faster than it can read it (default 200; 0: no pacing)",
       "MBIT"},
      {"pace-burst", 0, 0, G_OPTION_ARG_INT, &a.pace_burst,
       "Bytes that may leave at once after a pause (default 65536)", "BYTES"},
      {"retransmission-time", 0, 0, G_OPTION_ARG_INT, &a.retransmission_time,
       "Milliseconds sent packets are kept for retransmission on a NACK; keep it at least the "
       "viewers' latency (rtspsrc: 2000) (default 2000; 0: off)",
       "MS"},
      {"rtcp-interval", 0, 0, G_OPTION_ARG_INT, &a.rtcp_interval,
       "Tell clients (RTCP-Interval in the PLAY response, which rtspsrc follows) to send RTCP, "
       "hence retransmission and keyframe requests, this often in milliseconds (default 50; 0: "
       "do not tell)",
       "MS"},
      {"stalled-timeout", 0, 0, G_OPTION_ARG_INT, &a.stalled_timeout,
       "Disconnect a client whose connection has taken none of the data waiting for it for "
       "this many seconds (a viewer over TCP that stopped reading; Linux) (default 10; 0: never; "
       "a TCP viewer more than 10 s behind a faster one is disconnected whatever this is)",
       "S"},
      {"stats-interval", 0, 0, G_OPTION_ARG_INT, &a.stats_interval,
       "Print the client counts every this many seconds (default 10; 0: never)", "S"},
      {nullptr, 0, 0, G_OPTION_ARG_NONE, nullptr, nullptr, nullptr},
  };
  GOptionContext *context = g_option_context_new(
      "- serve the difference stream of cudadiffenc over RTSP (rtsp://HOST:PORT/cam)");
  g_option_context_add_main_entries(context, entries, nullptr);
  g_option_context_add_group(context, gst_init_get_option_group());
  GError *err = nullptr;
  if (!g_option_context_parse(context, &argc, &argv, &err)) {
    std::fprintf(stderr, "%s\n", err->message);
    return 2;
  }
  g_option_context_free(context);
  if (argc > 1) {  // (what no option took: a file meant for --source, say)
    std::fprintf(
        stderr,
        "unexpected argument \"%s\" (a file to serve is given as --source PATH; see --help)\n",
        argv[1]);
    return 2;
  }
  gst_init(&argc, &argv);
  // Each option within its range, or the message names it and the range.
  // (cudadiffenc would take an out-of-range threshold with a GLib warning
  // only, and keep its default; sizes beyond its caps' 32767 would fail each
  // viewer instead of the start.)
  bool in_range = true;
  auto check = [&](const char *option, double value, double low, double high) {
    if (value >= low && value <= high) return;
    // (no upper bound but the type's: "at least", not 2.14748e+09 or 1.79769e+308)
    if (high == G_MAXINT || high == G_MAXDOUBLE)
      std::fprintf(stderr, "--%s %g is out of range: at least %g\n", option, value, low);
    else
      std::fprintf(stderr, "--%s %g is out of range: %g to %g\n", option, value, low, high);
    in_range = false;
  };
  check("port", a.port, 0, 65535);
  check("width", a.width, 1, 32767);
  check("height", a.height, 1, 32767);
  check("fps", a.fps, 1, G_MAXINT);
  check("simulate-loss", a.simulate_loss, 0, 1);
  check("pace-rate", a.pace_rate, 0, G_MAXDOUBLE);
  check("pace-burst", a.pace_burst, 0, G_MAXINT);
  check("retransmission-time", a.retransmission_time, 0, G_MAXINT);
  check("rtcp-interval", a.rtcp_interval, 0, G_MAXINT);
  check("stalled-timeout", a.stalled_timeout, 0, G_MAXINT);
  check("stats-interval", a.stats_interval, 0, G_MAXINT);
  if (a.stream_version != kUnset) check("stream-version", a.stream_version, 1, 2);
  if (a.threshold != kUnset) check("threshold", a.threshold, 0, 255);
  if (a.keyframe_interval != kUnset) check("keyframe-interval", a.keyframe_interval, 0, G_MAXINT);
  if (!in_range) return 2;
  // Without GST_PLUGIN_PATH: the build tree's plugin or the installed one.
  cudadiff_tools::find_own_plugin();
  for (const char *needed : {"cudadiffenc", "rtpgstpay", "rtpbin", "udpsink"}) {
    GstElementFactory *f = gst_element_factory_find(needed);
    if (!f) {
      std::fprintf(stderr,
                   "element %s not found (cudadiffenc: set GST_PLUGIN_PATH to the plugin's "
                   "directory; the others: gst-plugins-good)\n",
                   needed);
      return 1;
    }
    gst_object_unref(f);
  }
  if (a.simulate_loss > 0) {
    GstElementFactory *f = gst_element_factory_find("netsim");
    if (!f) {
      std::fprintf(stderr, "--simulate-loss needs netsim (gst-plugins-bad)\n");
      return 1;
    }
    gst_object_unref(f);
  }

  cudadiff_server::Options o;
  const std::string source = a.source ? a.source : "test";
  if (a.camera && source != "camera")
    std::fprintf(stderr, "--device applies to --source camera only (the source is %s)\n",
                 source.c_str());
  // The source is built when the first viewer connects: a file that is not
  // there is refused now, a camera not (yet) there is said now.
  if (source != "camera" && source != "test" &&
      !g_file_test(source.c_str(), G_FILE_TEST_IS_REGULAR)) {
    std::fprintf(stderr, "--source %s: no such file (a media file, camera or test)\n",
                 source.c_str());
    return 2;
  }
  if (source != "camera" && source != "test" && !media_file_has_video(source)) return 2;
  if (source == "camera") {
    const char *device = a.camera ? a.camera : "/dev/video0";
    if (!g_file_test(device, G_FILE_TEST_EXISTS))
      std::fprintf(stderr,
                   "camera %s not found (yet): viewers get an error until it is there; "
                   "--device names another\n",
                   device);
  }
  o.source = cudadiff_server::source_description(source, a.camera ? a.camera : "", a.width,
                                                 a.height, a.fps);
  // A file is played in a loop, as a camera keeps sending.
  o.loop = source != "camera" && source != "test";
  o.address = a.address ? a.address : "0.0.0.0";
  o.port = a.port;
  if (a.threshold != kUnset) o.encoder_properties += " threshold=" + std::to_string(a.threshold);
  if (a.keyframe_interval != kUnset)
    o.encoder_properties += " keyframe-interval=" + std::to_string(a.keyframe_interval);
  if (a.stream_version != kUnset)
    o.encoder_properties += " stream-version=" + std::to_string(a.stream_version);
  if (!cudadiff_tools::encoder_choices_are_valid(a.compression, a.backend)) return 2;
  if (a.compression) o.encoder_properties += std::string(" compression=") + a.compression;
  if (a.backend) o.encoder_properties += std::string(" backend=") + a.backend;
  // A bad value (--backend gpu, --compression zz) is refused now rather
  // than when the first viewer connects.
  if (!cudadiff_tools::description_is_valid("cudadiffenc" + o.encoder_properties)) return 2;
  o.simulate_loss = a.simulate_loss;
  o.pace_rate_mbit = a.pace_rate;
  o.pace_burst_bytes = unsigned(a.pace_burst);
  o.retransmission_ms = unsigned(a.retransmission_time);
  o.rtcp_interval_ms = unsigned(a.rtcp_interval);
  o.stalled_client_timeout_s = unsigned(a.stalled_timeout);

  // Media errors (a camera unplugged, a decoder failing) are printed as they
  // come; the run's exit status is then 1.
  o.on_error = [](const std::string &text) {
    std::fprintf(stderr, "media error: %s\n", text.c_str());
  };
  // Warnings (a file played once, or at --fps for want of timestamps) are
  // printed too, each text once.
  o.on_warning = [](const std::string &text) {
    static std::mutex mutex;
    static std::set<std::string> printed;
    std::lock_guard<std::mutex> lock(mutex);
    if (printed.size() < 1000 && printed.insert(text).second)
      std::fprintf(stderr, "media warning: %s\n", text.c_str());
  };
  o.untimed_fps = a.fps;
  cudadiff_server::Server server(o);
  std::string error;
  if (!server.start(&error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  // (an IPv6 address goes in brackets in a URL)
  const std::string host = o.address == "0.0.0.0" || o.address == "::" ? "HOST"
                           : o.address.find(':') != std::string::npos  ? "[" + o.address + "]"
                                                                       : o.address;
  std::printf("serving %s\n", server.url(host).c_str());
  std::printf("  media: %s ! videoconvert ! cudadiffenc%s ! rtpgstpay\n", o.source.c_str(),
              o.encoder_properties.c_str());
  if (o.simulate_loss > 0)
    std::printf("  dropping %.2f %% of the outgoing RTP packets (retransmissions too)\n",
                100.0 * o.simulate_loss);
  std::printf(
      "  watch it with:\n    gst-launch-1.0 rtspsrc location=%s ! rtpgstdepay ! "
      "cudadiffdec ! videoconvert ! autovideosink\n",
      server.url(host).c_str());
  std::fflush(stdout);

  main_loop = g_main_loop_new(nullptr, FALSE);
  g_unix_signal_add(SIGINT, on_signal, nullptr);
  g_unix_signal_add(SIGTERM, on_signal, nullptr);
  if (a.stats_interval > 0) g_timeout_add_seconds(guint(a.stats_interval), print_stats, &server);
  g_main_loop_run(main_loop);
  if (a.stats_interval > 0) print_stats(&server);  // the counts at the end (Ctrl-C, SIGTERM)
  server.stop();
  g_main_loop_unref(main_loop);
  // Exit status 1 when a media failed at some time.
  const uint64_t errors = server.stats().media_errors;
  if (errors > 0) {
    std::fprintf(stderr, "%llu media error%s in this run, the first: %s\n",
                 (unsigned long long)errors, errors > 1 ? "s" : "", server.error().c_str());
    return 1;
  }
  return 0;
}
