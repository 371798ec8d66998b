// The streaming demo: a server pipeline (camera or test pattern ->
// cudadiffenc -> tcpserversink) and a client pipeline (tcpclientsrc ->
// cudadiffdec) on 127.0.0.1, both by gst_parse_launch in this process. It
// prints the client's frame rate, the stream's bytes per second against raw
// video and the report's layout, the stream version and (version 2) how the
// blocks were coded, the PSNR of the client's picture against the server's
// input (frames matched by the sender timestamp the decoder attaches), and
// saves the client's last picture as a PNG, and a mosaic of
// the same moment: the server's input, the client's picture, cudaheatmap of
// the change and cudanoisevis's mask of the bytes that changed by more than
// the threshold, each labelled by cudatextoverlay.
//
//   cudadiff-demo [--frames N] [--source auto|camera|test] [--threshold T] ...
//   (cudadiff-demo --help lists the options)
#include <gst/gst.h>
#include <gst/video/video.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "toolcheck.h"

namespace {

using Clock = std::chrono::steady_clock;

// Ctrl-C (SIGINT): the first ends the stream (EOS) so that the report is
// still printed; a second one quits at once.
volatile std::sig_atomic_t interrupted = 0;
extern "C" void on_interrupt(int) {
  interrupted = 1;
  std::signal(SIGINT, SIG_DFL);
}

struct Options {
  gint frames = 300;
  gchar *source = nullptr;  // auto, camera, test
  gchar *camera = nullptr;  // --device: the camera's path
  gint width = 1280, height = 720, fps = 30;
  gint threshold = 20;
  gint keyframe_interval = 60;
  gint stream_version = 0;  // 0: the element's default
  gchar *compression = nullptr;
  gchar *backend = nullptr;
  gchar *png = nullptr;
  gchar *mosaic = nullptr;
  gboolean live = FALSE;
};

// Frames of the server's input, by timestamp, until the client has shown them.
struct Originals {
  std::mutex mutex;
  std::map<GstClockTime, std::vector<guint8>> frames;
  GstVideoInfo info;
  bool have_info = false;
};

struct Shown {
  std::mutex mutex;
  int frames = 0;
  int matched = 0;
  double psnr_sum = 0, psnr_min = 1e9;
  int lossless = 0;  // frames identical to the input
  GstClockTime last_sender_pts = GST_CLOCK_TIME_NONE;
  std::vector<guint8> last_picture, last_original;  // packed BGR, for the mosaic
  GstBuffer *last = nullptr;
  GstCaps *last_caps = nullptr;
  Clock::time_point first_at, last_at;
};

// The last frames of a branch of the server (heat map, noise view), packed
// BGR by timestamp, so that the mosaic finds the moment the client showed.
struct Recent {
  std::mutex mutex;
  std::map<GstClockTime, std::vector<guint8>> frames;
};

Originals originals;
Shown shown;
Recent heatmaps, noise_views;
GstCaps *sender_caps = nullptr;

// The visible bytes of a packed BGR frame, row after row.
std::vector<guint8> packed_bgr(GstBuffer *buf, const GstVideoInfo &info) {
  std::vector<guint8> out;
  GstVideoFrame frame;
  if (!gst_video_frame_map(&frame, const_cast<GstVideoInfo *>(&info), buf, GST_MAP_READ))
    return out;
  const int w = GST_VIDEO_FRAME_WIDTH(&frame), h = GST_VIDEO_FRAME_HEIGHT(&frame);
  const int stride = GST_VIDEO_FRAME_PLANE_STRIDE(&frame, 0);
  const guint8 *data = static_cast<const guint8 *>(GST_VIDEO_FRAME_PLANE_DATA(&frame, 0));
  out.resize(size_t(w) * 3 * size_t(h));
  for (int y = 0; y < h; ++y)
    std::copy(data + size_t(y) * size_t(stride), data + size_t(y) * size_t(stride) + size_t(w) * 3,
              out.begin() + long(size_t(y) * size_t(w) * 3));
  gst_video_frame_unmap(&frame);
  return out;
}

GstPadProbeReturn on_original(GstPad *pad, GstPadProbeInfo *info, gpointer) {
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER(info);
  std::lock_guard<std::mutex> lock(originals.mutex);
  if (!originals.have_info) {
    GstCaps *caps = gst_pad_get_current_caps(pad);
    originals.have_info = caps && gst_video_info_from_caps(&originals.info, caps);
    if (caps) gst_caps_unref(caps);
  }
  if (originals.have_info && originals.frames.size() < 64)
    originals.frames[GST_BUFFER_PTS(buf)] = packed_bgr(buf, originals.info);
  return GST_PAD_PROBE_OK;
}

GstPadProbeReturn on_shown(GstPad *pad, GstPadProbeInfo *info, gpointer) {
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER(info);
  GstCaps *caps = gst_pad_get_current_caps(pad);
  GstVideoInfo vinfo;
  const bool ok = caps && gst_video_info_from_caps(&vinfo, caps);
  GstReferenceTimestampMeta *meta = gst_buffer_get_reference_timestamp_meta(buf, sender_caps);
  std::vector<guint8> original;
  if (ok && meta) {
    // The input frame with the same timestamp; older ones are not needed any more.
    std::lock_guard<std::mutex> lock(originals.mutex);
    auto it = originals.frames.find(meta->timestamp);
    if (it != originals.frames.end()) original = std::move(it->second);
    originals.frames.erase(originals.frames.begin(), originals.frames.upper_bound(meta->timestamp));
  }
  double psnr = -1;
  bool identical = false;
  std::vector<guint8> picture;
  if (!original.empty()) {
    picture = packed_bgr(buf, vinfo);
    if (picture.size() == original.size()) {
      double se = 0;
      for (size_t i = 0; i < picture.size(); ++i) {
        const double d = double(picture[i]) - double(original[i]);
        se += d * d;
      }
      identical = se == 0;
      psnr = identical ? 99.0 : 10.0 * std::log10(255.0 * 255.0 / (se / double(picture.size())));
    }
  }
  std::lock_guard<std::mutex> lock(shown.mutex);
  const auto now = Clock::now();
  if (shown.frames == 0) shown.first_at = now;
  shown.last_at = now;
  shown.frames++;
  if (psnr >= 0) {
    shown.matched++;
    shown.lossless += identical;
    shown.psnr_sum += psnr;
    shown.psnr_min = std::min(shown.psnr_min, psnr);
  }
  if (meta) shown.last_sender_pts = meta->timestamp;
  if (psnr >= 0) {
    shown.last_picture = std::move(picture);
    shown.last_original = std::move(original);
  }
  gst_buffer_replace(&shown.last, buf);
  gst_caps_replace(&shown.last_caps, caps);
  if (caps) gst_caps_unref(caps);
  return GST_PAD_PROBE_OK;
}

// Keeps the last frames reaching a sink pad (user data: a Recent).
GstPadProbeReturn on_recent(GstPad *pad, GstPadProbeInfo *info, gpointer data) {
  Recent *recent = static_cast<Recent *>(data);
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER(info);
  GstCaps *caps = gst_pad_get_current_caps(pad);
  GstVideoInfo vinfo;
  if (caps && gst_video_info_from_caps(&vinfo, caps)) {
    std::vector<guint8> frame = packed_bgr(buf, vinfo);
    std::lock_guard<std::mutex> lock(recent->mutex);
    recent->frames[GST_BUFFER_PTS(buf)] = std::move(frame);
    while (recent->frames.size() > 64) recent->frames.erase(recent->frames.begin());
  }
  if (caps) gst_caps_unref(caps);
  return GST_PAD_PROBE_OK;
}

// Adds a probe on the sink pad of the element named `name`.
void probe(GstElement *pipeline, const char *name, GstPadProbeCallback callback,
           gpointer data = nullptr) {
  GstElement *el = gst_bin_get_by_name(GST_BIN(pipeline), name);
  GstPad *pad = gst_element_get_static_pad(el, "sink");
  gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_BUFFER, callback, data, nullptr);
  gst_object_unref(pad);
  gst_object_unref(el);
}

// The frame of `recent` at `pts`, or the latest one before it.
std::vector<guint8> frame_at(Recent &recent, GstClockTime pts) {
  std::lock_guard<std::mutex> lock(recent.mutex);
  auto it = recent.frames.upper_bound(pts);
  if (it == recent.frames.begin()) return {};
  return std::prev(it)->second;
}

// Writes a 2x2 mosaic of four packed BGR frames of w x h as a PNG, each
// labelled by cudatextoverlay: the elements' view of one moment.
bool write_mosaic(const std::string &path, int w, int h,
                  const std::vector<std::vector<guint8>> &tiles,
                  const std::vector<std::string> &labels, const char *backend, std::string *error) {
  // (rows of the mosaic padded to 4 bytes, as GStreamer lays out BGR)
  const size_t row = size_t(w) * 3, mosaic_row = GST_ROUND_UP_4(2 * row);
  std::vector<guint8> mosaic(mosaic_row * size_t(2 * h), 0);
  for (size_t t = 0; t < tiles.size() && t < 4; ++t) {
    if (tiles[t].size() != row * size_t(h)) continue;  // missing: stays black
    const size_t x0 = (t % 2) * row, y0 = (t / 2) * size_t(h);
    for (int y = 0; y < h; ++y)
      std::copy(tiles[t].begin() + long(size_t(y) * row),
                tiles[t].begin() + long(size_t(y + 1) * row),
                mosaic.begin() + long((y0 + size_t(y)) * mosaic_row + x0));
  }
  // appsrc ! cudatextoverlay (one per label, at the top left of its tile) !
  // videoconvert ! pngenc ! filesink, made element by element so that the
  // labels and the path need no quoting.
  GstElement *pipeline = gst_pipeline_new("mosaic");
  GstElement *src = gst_element_factory_make("appsrc", "src");
  std::vector<GstElement *> chain = {src};
  const int font_pt = std::max(9, h / 24);
  for (size_t t = 0; t < labels.size() && t < 4; ++t) {
    GstElement *overlay = gst_element_factory_make("cudatextoverlay", nullptr);
    if (!overlay) {
      std::printf("mosaic:  no labels (cudatextoverlay was built without Pango)\n");
      break;
    }
    const std::string font = "Sans Bold " + std::to_string(font_pt);
    g_object_set(overlay, "text", labels[t].c_str(), "font-desc", font.c_str(), "shaded-background",
                 TRUE, "xpad", int(t % 2) * w + 12, "ypad", int(t / 2) * h + 12, nullptr);
    if (backend) gst_util_set_object_arg(G_OBJECT(overlay), "backend", backend);
    chain.push_back(overlay);
  }
  for (const char *name : {"videoconvert", "pngenc", "filesink"})
    chain.push_back(gst_element_factory_make(name, nullptr));
  bool complete = true;
  for (GstElement *e : chain) {
    if (e)
      gst_bin_add(GST_BIN(pipeline), e);  // the pipeline owns them from here
    else
      complete = false;
  }
  if (!complete) {
    *error = "an element is missing (appsrc, videoconvert, pngenc or filesink)";
    gst_object_unref(pipeline);
    return false;
  }
  g_object_set(chain.back(), "location", path.c_str(), nullptr);
  for (size_t i = 0; i + 1 < chain.size(); ++i) gst_element_link(chain[i], chain[i + 1]);
  gst_object_ref(src);
  GError *err = nullptr;
  GstCaps *caps = gst_caps_new_simple("video/x-raw", "format", G_TYPE_STRING, "BGR", "width",
                                      G_TYPE_INT, 2 * w, "height", G_TYPE_INT, 2 * h, "framerate",
                                      GST_TYPE_FRACTION, 1, 1, nullptr);
  g_object_set(src, "caps", caps, "format", GST_FORMAT_TIME, nullptr);
  gst_caps_unref(caps);
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  GstBuffer *buf = gst_buffer_new_allocate(nullptr, mosaic.size(), nullptr);
  gst_buffer_fill(buf, 0, mosaic.data(), mosaic.size());
  GST_BUFFER_PTS(buf) = 0;
  GST_BUFFER_DURATION(buf) = GST_SECOND;
  GstFlowReturn flow;
  g_signal_emit_by_name(src, "push-buffer", buf, &flow);
  gst_buffer_unref(buf);
  g_signal_emit_by_name(src, "end-of-stream", &flow);
  GstBus *bus = gst_element_get_bus(pipeline);
  GstMessage *m = gst_bus_timed_pop_filtered(bus, 30 * GST_SECOND,
                                             GstMessageType(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
  bool ok = m && GST_MESSAGE_TYPE(m) == GST_MESSAGE_EOS;
  if (m && GST_MESSAGE_TYPE(m) == GST_MESSAGE_ERROR) {
    gst_message_parse_error(m, &err, nullptr);
    *error = err->message;
    g_clear_error(&err);
  } else if (!m) {
    *error = "timed out";
  }
  if (m) gst_message_unref(m);
  gst_object_unref(bus);
  gst_element_set_state(pipeline, GST_STATE_NULL);
  gst_object_unref(src);
  gst_object_unref(pipeline);
  return ok;
}

// Pops messages of `pipeline` for up to `ms`; returns an error message or
// "" and sets *eos.
std::string poll_bus(GstElement *pipeline, int ms, bool *eos) {
  GstBus *bus = gst_element_get_bus(pipeline);
  std::string error;
  GstMessage *m = gst_bus_timed_pop_filtered(
      bus, GstClockTime(ms) * GST_MSECOND,
      GstMessageType(GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_WARNING));
  if (m) {
    if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_EOS) *eos = true;
    if (GST_MESSAGE_TYPE(m) != GST_MESSAGE_EOS) {
      GError *err = nullptr;
      gchar *debug = nullptr;
      if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ERROR)
        gst_message_parse_error(m, &err, &debug);
      else
        gst_message_parse_warning(m, &err, &debug);
      const std::string text = std::string(GST_OBJECT_NAME(GST_MESSAGE_SRC(m))) + ": " +
                               err->message + (debug ? std::string(" (") + debug + ")" : "");
      if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ERROR)
        error = text;
      else
        std::printf("warning: %s\n", text.c_str());
      g_error_free(err);
      g_free(debug);
    }
    gst_message_unref(m);
  }
  gst_object_unref(bus);
  return error;
}

guint64 stat(const GstStructure *s, const char *field) {
  guint64 v = 0;
  gst_structure_get_uint64(s, field, &v);
  return v;
}

std::string human(double bytes) {
  char buf[32];
  if (bytes >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2f MB", bytes / 1e6);
  else if (bytes >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1f KB", bytes / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  return buf;
}

// Whether the camera gives a frame (as BGR) within 5 s; *why says why not.
// --source auto falls back to the test pattern when it does not: a device
// that is there can still be busy, not a camera, or give no format we take.
bool camera_works(const std::string &device, std::string *why) {
  if (!g_file_test(device.c_str(), G_FILE_TEST_EXISTS)) {
    *why = "no such device";
    return false;
  }
  GstElementFactory *f = gst_element_factory_find("v4l2src");
  if (!f) {
    *why = "v4l2src is missing (gst-plugins-good)";
    return false;
  }
  gst_object_unref(f);
  GError *err = nullptr;
  GstElement *p = gst_parse_launch(("v4l2src device=\"" + device +
                                    "\" num-buffers=1 ! videoconvert ! video/x-raw,format=BGR ! "
                                    "fakesink")
                                       .c_str(),
                                   &err);
  if (!p || err) {
    *why = err ? err->message : "cannot build a pipeline";
    g_clear_error(&err);
    if (p) gst_object_unref(p);
    return false;
  }
  gst_element_set_state(p, GST_STATE_PLAYING);
  bool eos = false;
  std::string error;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (!eos && error.empty() && Clock::now() < deadline) error = poll_bus(p, 50, &eos);
  gst_element_set_state(p, GST_STATE_NULL);
  gst_object_unref(p);
  if (eos) return true;
  // (the error's message, without its debug text)
  *why = error.empty() ? "no frame within 5 s" : error.substr(0, error.find(" ("));
  return false;
}

}  // namespace

int main(int argc, char **argv) {
  Options o;
  const GOptionEntry entries[] = {
      {"frames", 'n', 0, G_OPTION_ARG_INT, &o.frames, "Frames to stream (default 300)", "N"},
      {"source", 's', 0, G_OPTION_ARG_STRING, &o.source,
       "auto (the camera when it gives frames, else test), camera, or test (default auto)",
       "SOURCE"},
      {"device", 'd', 0, G_OPTION_ARG_STRING, &o.camera, "Camera device (default /dev/video0)",
       "PATH"},
      {"width", 'W', 0, G_OPTION_ARG_INT, &o.width, "Test pattern width, 16 to 8192 (default 1280)",
       "W"},
      {"height", 'H', 0, G_OPTION_ARG_INT, &o.height,
       "Test pattern height, 16 to 8192 (default 720)", "H"},
      {"fps", 'f', 0, G_OPTION_ARG_INT, &o.fps, "Test pattern frame rate, 1 to 1000 (default 30)",
       "FPS"},
      {"live", 'l', 0, G_OPTION_ARG_NONE, &o.live,
       "Test pattern in real time (default: as fast as the pipelines go)", nullptr},
      {"threshold", 't', 0, G_OPTION_ARG_INT, &o.threshold,
       "cudadiffenc threshold, 0 to 255 (default 20)", "T"},
      {"keyframe-interval", 'k', 0, G_OPTION_ARG_INT, &o.keyframe_interval,
       "cudadiffenc keyframe-interval (default 60)", "N"},
      {"stream-version", 'V', 0, G_OPTION_ARG_INT, &o.stream_version,
       "cudadiffenc stream-version: 1 or 2 (default: the element's default)", "N"},
      {"compression", 'c', 0, G_OPTION_ARG_STRING, &o.compression,
       "cudadiffenc compression of version 1: zstd or none (default: the element's)", "C"},
      {"backend", 'b', 0, G_OPTION_ARG_STRING, &o.backend, "auto, cuda or cpu (default auto)", "B"},
      {"png", 'o', 0, G_OPTION_ARG_FILENAME, &o.png,
       "Where to save the client's last picture (default demo-snapshot.png)", "PATH"},
      {"mosaic", 'm', 0, G_OPTION_ARG_FILENAME, &o.mosaic,
       "Where to save the mosaic of the same moment: input, client picture, heat map, noise "
       "view (default demo-mosaic.png; \"\" for none)",
       "PATH"},
      {nullptr, 0, 0, G_OPTION_ARG_NONE, nullptr, nullptr, nullptr},
  };
  GOptionContext *context =
      g_option_context_new("- stream video with cudadiffenc/cudadiffdec over TCP on 127.0.0.1");
  g_option_context_add_main_entries(context, entries, nullptr);
  g_option_context_add_group(context, gst_init_get_option_group());
  GError *err = nullptr;
  if (!g_option_context_parse(context, &argc, &argv, &err)) {
    std::fprintf(stderr, "%s\n", err->message);
    return 2;
  }
  g_option_context_free(context);
  if (argc > 1) {  // (what no option took)
    std::fprintf(stderr, "unexpected argument \"%s\" (see --help)\n", argv[1]);
    return 2;
  }
  std::signal(SIGINT, on_interrupt);
  if (o.frames < 1) {
    std::fprintf(stderr, "--frames must be at least 1\n");
    return 2;
  }
  if (o.stream_version < 0 || o.stream_version > 2) {
    std::fprintf(stderr, "--stream-version must be 1 or 2\n");
    return 2;
  }
  // (the elements' properties would take an out-of-range value with a
  // GLib warning only, and keep their defaults)
  if (o.threshold < 0 || o.threshold > 255) {
    std::fprintf(stderr, "--threshold must be 0 to 255\n");
    return 2;
  }
  if (o.keyframe_interval < 0) {
    std::fprintf(stderr, "--keyframe-interval must be 0 (only the first frame) or more\n");
    return 2;
  }
  if (o.width < 16 || o.height < 16 || o.width > 8192 || o.height > 8192 || o.fps < 1 ||
      o.fps > 1000) {
    std::fprintf(stderr, "--width and --height must be 16 to 8192, --fps 1 to 1000\n");
    return 2;
  }
  if (o.source && std::strcmp(o.source, "auto") != 0 && std::strcmp(o.source, "camera") != 0 &&
      std::strcmp(o.source, "test") != 0) {
    std::fprintf(stderr, "--source must be auto, camera or test, not \"%s\"\n", o.source);
    return 2;
  }
  gst_init(&argc, &argv);
  // Without GST_PLUGIN_PATH: the build tree's plugin or the installed one.
  cudadiff_tools::find_own_plugin();
  GstPluginFeature *feature =
      gst_registry_find_feature(gst_registry_get(), "cudadiffenc", GST_TYPE_ELEMENT_FACTORY);
  if (!feature) {
    std::fprintf(stderr, "cudadiffenc not found: set GST_PLUGIN_PATH to the plugin's directory\n");
    return 1;
  }
  gst_object_unref(feature);
  sender_caps = gst_caps_from_string("timestamp/x-cudadiff-sender");

  const std::string source_opt = o.source ? o.source : "auto";
  const std::string device = o.camera ? o.camera : "/dev/video0";
  bool camera = source_opt == "camera";
  if (source_opt == "auto" && g_file_test(device.c_str(), G_FILE_TEST_EXISTS)) {
    std::string why;
    camera = camera_works(device, &why);
    if (!camera)
      std::printf("camera %s gives no frame (%s): streaming the test pattern instead\n",
                  device.c_str(), why.c_str());
  }
  const std::string png = o.png ? o.png : "demo-snapshot.png";
  const std::string mosaic = o.mosaic ? o.mosaic : "demo-mosaic.png";
  const std::string frames = std::to_string(o.frames);
  std::string source;       // ends with raw BGR video
  std::string source_tail;  // more branches of the source, if any
  std::string what;
  if (camera) {
    source = "v4l2src device=\"" + device + "\" num-buffers=" + frames +
             " ! videoconvert ! video/x-raw,format=BGR";
    what = "camera " + device;
  } else {
    // A still scene (colour bars) with a moving ball and noise of a few
    // levels on every pixel (a snow pattern blended at 5%): what a fixed
    // camera sees.
    const std::string size = "width=" + std::to_string(o.width) +
                             ",height=" + std::to_string(o.height) +
                             ",framerate=" + std::to_string(o.fps) + "/1";
    const std::string live = o.live ? " is-live=true" : "";
    // (identity ends the mix after N frames: with live sources compositor
    // makes one more than its inputs; eos-after=M passes M - 1 buffers and
    // ends the stream at the M-th. Every layer is made in the mix's own
    // format, BGRA: GStreamer 1.22's compositor converts a layer of another
    // format into a newly allocated buffer for every frame, which made the
    // demo three times slower on a 2-core machine.)
    source =
        "compositor name=mix sink_2::alpha=0.05 ! video/x-raw,format=BGRA ! identity "
        "eos-after=" +
        std::to_string(gint64(o.frames) + 1) + " ! videoconvert ! video/x-raw,format=BGR," + size;
    source_tail = " videotestsrc" + live + " pattern=smpte75 num-buffers=" + frames +
                  " ! video/x-raw,format=BGRA," + size + " ! mix.sink_0 videotestsrc" + live +
                  " pattern=ball motion=wavy background-color=0x00000000 num-buffers=" + frames +
                  " ! video/x-raw,format=BGRA," + size + " ! mix.sink_1 videotestsrc" + live +
                  " pattern=snow num-buffers=" + frames + " ! video/x-raw,format=BGRA," + size +
                  " ! mix.sink_2";
    what = "test pattern " + std::to_string(o.width) + "x" + std::to_string(o.height) +
           " (colour bars, a moving ball, noise)";
  }
  std::string enc_props = "threshold=" + std::to_string(o.threshold) +
                          " keyframe-interval=" + std::to_string(o.keyframe_interval);
  if (o.stream_version) enc_props += " stream-version=" + std::to_string(o.stream_version);
  if (!cudadiff_tools::encoder_choices_are_valid(o.compression, o.backend)) return 2;
  if (o.compression) enc_props += std::string(" compression=") + o.compression;
  if (o.backend) enc_props += std::string(" backend=") + o.backend;
  // A bad value (--backend gpu, --compression zz) is an option out of range
  // too (exit 2), not a pipeline that failed.
  if (!cudadiff_tools::description_is_valid("cudadiffenc " + enc_props)) return 2;
  // For the mosaic, the same input also goes through cudaheatmap (where and how
  // much it changed) and cudanoisevis (the bytes that changed by more than the
  // threshold); their last frames are kept by timestamp.
  const std::string vis_backend = o.backend ? std::string(" backend=") + o.backend : "";
  const std::string vis_branches =
      mosaic.empty() ? ""
                     : " t. ! queue max-size-buffers=8 ! cudaheatmap" + vis_backend +
                           " ! video/x-raw,format=BGR ! fakesink name=heat sync=false"
                           " t. ! queue max-size-buffers=8 ! cudanoisevis threshold=" +
                           std::to_string(o.threshold) + vis_backend +
                           " ! video/x-raw,format=BGR ! fakesink name=noise sync=false";
  // The client connects while the server prerolls, when the sink may hold
  // the first two frames already: it starts at the oldest keyframe the sink
  // holds (burst-keyframe), not the newest (latest-keyframe, which skipped
  // the first frame when every frame was a keyframe).
  const std::string server_desc =
      source + " ! tee name=t ! queue max-size-buffers=8 ! cudadiffenc name=enc " + enc_props +
      " ! tcpserversink name=sink host=127.0.0.1 port=0 sync-method=burst-keyframe "
      "burst-format=buffers burst-value=1000 sync=false" +
      vis_branches + source_tail;

  // A missing element gives a pipeline without it and an error: both fail.
  GstElement *server = gst_parse_launch(server_desc.c_str(), &err);
  if (!server || err) {
    std::fprintf(stderr, "server pipeline: %s\n", err ? err->message : "not built");
    return 1;
  }
  probe(server, "enc", on_original);  // the encoder's input, before anything is sent
  if (!mosaic.empty()) {
    probe(server, "heat", on_recent, &heatmaps);
    probe(server, "noise", on_recent, &noise_views);
  }
  // PAUSED: the server listens (and a test pattern prerolls) before the client connects.
  gst_element_set_state(server, GST_STATE_PAUSED);
  GstElement *sink = gst_bin_get_by_name(GST_BIN(server), "sink");
  gint port = 0;
  g_object_get(sink, "current-port", &port, nullptr);
  if (port <= 0) {
    bool eos = false;
    std::fprintf(stderr, "the server did not start: %s\n", poll_bus(server, 100, &eos).c_str());
    return 1;
  }
  const std::string dec_props = o.backend ? std::string(" backend=") + o.backend : "";
  const std::string client_desc = "tcpclientsrc host=127.0.0.1 port=" + std::to_string(port) +
                                  " ! cudadiffdec name=dec" + dec_props +
                                  " ! videoconvert ! video/x-raw,format=BGR ! fakesink "
                                  "name=shown sync=false";
  std::printf("cudadiff demo: %s, %d frames, threshold %d\n", what.c_str(), o.frames, o.threshold);
  std::printf("  server: gst-launch-1.0 %s\n", server_desc.c_str());
  std::printf("  client: gst-launch-1.0 %s\n", client_desc.c_str());
  std::fflush(stdout);
  GstElement *client = gst_parse_launch(client_desc.c_str(), &err);
  if (!client || err) {
    std::fprintf(stderr, "client pipeline: %s\n", err ? err->message : "not built");
    return 1;
  }
  probe(client, "shown", on_shown);
  gst_element_set_state(client, GST_STATE_PLAYING);
  // The client is connected when the server counts a handle; an error of
  // either pipeline meanwhile (an element that cannot start: backend=cuda
  // without a GPU) ends the demo at once.
  guint handles = 0;
  std::string start_error;
  for (int i = 0; i < 500 && handles == 0 && start_error.empty(); ++i) {
    g_object_get(sink, "num-handles", &handles, nullptr);
    bool eos = false;
    start_error = poll_bus(server, 0, &eos);
    if (start_error.empty()) start_error = poll_bus(client, handles ? 0 : 10, &eos);
  }
  if (!start_error.empty()) {
    gst_element_set_state(client, GST_STATE_NULL);
    gst_element_set_state(server, GST_STATE_NULL);
    std::fprintf(stderr, "error: %s\n", start_error.c_str());
    return 1;
  }
  if (!handles)
    std::fprintf(stderr,
                 "the client has not connected to 127.0.0.1 within 5 s; streaming anyway "
                 "(frames sent before it connects are not shown)\n");
  const auto start = Clock::now();
  gst_element_set_state(server, GST_STATE_PLAYING);

  std::string error;
  bool server_eos = false, client_eos = false;
  auto last_print = Clock::now();
  bool ended = false;
  while (error.empty() && !server_eos) {
    if (interrupted && !ended) {
      ended = true;
      std::printf("  interrupted: ending the stream (Ctrl-C again quits at once)\n");
      std::fflush(stdout);
      gst_element_send_event(server, gst_event_new_eos());
    }
    error = poll_bus(server, 50, &server_eos);
    if (error.empty()) error = poll_bus(client, 0, &client_eos);
    if (Clock::now() - last_print > std::chrono::seconds(2)) {
      std::lock_guard<std::mutex> lock(shown.mutex);
      std::printf("  ... %d frames shown\n", shown.frames);
      std::fflush(stdout);
      last_print = Clock::now();
    }
  }
  // The client catches up with the last packet the server sent.
  GstElement *enc = gst_bin_get_by_name(GST_BIN(server), "enc");
  GstStructure *stats = nullptr;
  g_object_get(enc, "stats", &stats, nullptr);
  const guint64 sent = stats ? stat(stats, "frames") : 0;
  // (at most 10 s, and no more than 2 s without a new frame: a frame the
  // client never got does not hold the demo up)
  int last_count = -1;
  auto last_progress = Clock::now();
  for (int i = 0; i < 1000 && error.empty(); ++i) {
    {
      std::lock_guard<std::mutex> lock(shown.mutex);
      if (guint64(shown.frames) >= sent) break;
      if (shown.frames != last_count) {
        last_count = shown.frames;
        last_progress = Clock::now();
      } else if (Clock::now() - last_progress > std::chrono::seconds(2)) {
        break;
      }
    }
    error = poll_bus(client, 10, &client_eos);
  }
  gst_element_set_state(client, GST_STATE_NULL);
  gst_element_set_state(server, GST_STATE_NULL);
  if (!error.empty()) std::fprintf(stderr, "error: %s\n", error.c_str());

  std::lock_guard<std::mutex> lock(shown.mutex);
  const double seconds = std::chrono::duration<double>(shown.last_at - shown.first_at).count();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("\nframes:  %" G_GUINT64_FORMAT " sent, %d shown by the client\n", sent,
              shown.frames);
  if (shown.frames > 1)
    std::printf("fps:     %.1f (client, %d frames in %.2f s; whole run %.2f s)\n",
                (shown.frames - 1) / std::max(seconds, 1e-9), shown.frames, seconds, wall);
  if (stats && sent > 0) {
    GstVideoInfo &vi = originals.info;
    const int rate_n =
        originals.have_info && GST_VIDEO_INFO_FPS_N(&vi) > 0 ? GST_VIDEO_INFO_FPS_N(&vi) : o.fps;
    const int rate_d =
        originals.have_info && GST_VIDEO_INFO_FPS_N(&vi) > 0 ? GST_VIDEO_INFO_FPS_D(&vi) : 1;
    const double fps = double(rate_n) / rate_d;
    const double in = double(stat(stats, "bytes-in")), out = double(stat(stats, "bytes-out"));
    const double report = double(stat(stats, "report-layout-bytes"));
    const guint64 keys = stat(stats, "keyframes");
    const double delta_out = double(stat(stats, "delta-bytes-out"));
    const double delta_report = double(stat(stats, "delta-report-layout-bytes"));
    std::printf("stream:  %s/s at %.0f fps against %s/s raw (1/%.1f)\n",
                human(out / sent * fps).c_str(), fps, human(in / sent * fps).c_str(), in / out);
    std::printf("         %" G_GUINT64_FORMAT " keyframes of %s, %" G_GUINT64_FORMAT
                " deltas of %s on average\n",
                keys, human(keys ? (out - delta_out) / keys : 0).c_str(), sent - keys,
                human(sent > keys ? delta_out / (sent - keys) : 0).c_str());
    if (delta_out > 0)
      std::printf(
          "         deltas are 1/%.1f of the report's layout (5 bytes per changed byte); "
          "everything 1/%.1f\n",
          delta_report / delta_out, report / out);
    std::printf("         stream version %" G_GUINT64_FORMAT, stat(stats, "stream-version"));
    // Version 2: how the 16x16 blocks were coded, over all frames.
    const double skip = double(stat(stats, "blocks-skip")),
                 temporal = double(stat(stats, "blocks-temporal")),
                 both = double(stat(stats, "blocks-temporal-spatial")),
                 spatial = double(stat(stats, "blocks-spatial"));
    const double blocks = skip + temporal + both + spatial;
    if (blocks > 0)
      std::printf(
          "; blocks %.0f%% skipped, %.0f%% from the previous picture, %.0f%% from it "
          "and their neighbours, %.0f%% from their neighbours (keyframes all)",
          100 * skip / blocks, 100 * temporal / blocks, 100 * both / blocks,
          100 * spatial / blocks);
    std::printf("\n");
  }
  if (shown.matched > 0 && shown.lossless == shown.matched)
    std::printf("PSNR:    infinite: all %d frames identical to the server's input (lossless)\n",
                shown.matched);
  else if (shown.matched > 0)
    std::printf(
        "PSNR:    %.2f dB average, %.2f dB minimum over %d frames (client picture vs "
        "server input; identical frames count as 99 dB)\n",
        shown.psnr_sum / shown.matched, shown.psnr_min, shown.matched);
  bool written = true;  // the pictures asked for
  if (shown.last) {
    GstSample *sample = gst_sample_new(shown.last, shown.last_caps, nullptr, nullptr);
    GstCaps *png_caps = gst_caps_from_string("image/png");
    GError *perr = nullptr;
    GstSample *converted = gst_video_convert_sample(sample, png_caps, 10 * GST_SECOND, &perr);
    if (converted) {
      GstMapInfo map;
      GstBuffer *b = gst_sample_get_buffer(converted);
      gst_buffer_map(b, &map, GST_MAP_READ);
      GError *werr = nullptr;
      if (g_file_set_contents(png.c_str(), reinterpret_cast<const gchar *>(map.data),
                              gssize(map.size), &werr)) {
        std::printf("picture: %s (the client's last frame)\n", png.c_str());
      } else {
        std::fprintf(stderr, "could not write the PNG: %s\n", werr->message);
        g_clear_error(&werr);
        written = false;
      }
      gst_buffer_unmap(b, &map);
      gst_sample_unref(converted);
    } else {
      std::fprintf(stderr, "could not write the PNG: %s\n", perr ? perr->message : "?");
      g_clear_error(&perr);
      written = false;
    }
    gst_caps_unref(png_caps);
    gst_sample_unref(sample);
  }
  if (!mosaic.empty() && !shown.last_picture.empty() && originals.have_info) {
    const GstClockTime at = shown.last_sender_pts;
    const int w = GST_VIDEO_INFO_WIDTH(&originals.info), h = GST_VIDEO_INFO_HEIGHT(&originals.info);
    const std::vector<std::vector<guint8>> tiles = {
        shown.last_original, shown.last_picture, frame_at(heatmaps, at), frame_at(noise_views, at)};
    const std::string t = std::to_string(o.threshold);
    const std::vector<std::string> labels = {"server input", "client picture (threshold " + t + ")",
                                             "cudaheatmap: change since the previous frame",
                                             "cudanoisevis: bytes changed by more than " + t};
    std::string why;
    if (write_mosaic(mosaic, w, h, tiles, labels, o.backend, &why))
      std::printf("mosaic:  %s (input, client picture, heat map, noise view of one moment)\n",
                  mosaic.c_str());
    else {
      std::fprintf(stderr, "could not write the mosaic: %s\n", why.c_str());
      written = false;
    }
  }
  if (stats) gst_structure_free(stats);
  gst_object_unref(enc);
  gst_object_unref(sink);
  gst_object_unref(client);
  gst_object_unref(server);
  return error.empty() && shown.frames > 0 && written ? 0 : 1;
}
