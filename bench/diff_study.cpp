// The difference codec on real footage (docs/performance.md): for a video
// file (e.g. OpenCV's sample vtest.avi), bytes per frame of raw video, of the
// report's layout (one value byte plus a 4-byte position per changed byte),
// and of our packets without and with zstd, plus the PSNR of the decoded
// picture against the input; and, for the lossless case, the same footage
// through FFV1 and x264 (qp 0) when those encoders are installed.
//
//   diff_study [--backend cpu|cuda|auto] [--frames N] FILE
//
// Each configuration runs one pipeline:
//   filesrc ! decodebin ! videoconvert ! FORMAT ! identity(orig)
//     ! cudadiffenc ! identity(pkt) ! cudadiffdec ! identity(dec) ! fakesink
// with pad probes: the input frames are kept until their decoded twins
// arrive (matched by timestamp), packets are counted as they pass.
#include <gst/gst.h>
#include <gst/video/video.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace {

struct Frame {
  GstClockTime pts;
  std::vector<uint8_t> bytes;  // visible bytes, planes in order, rows without padding
};

std::vector<uint8_t> visible_bytes(GstBuffer *buffer, GstCaps *caps) {
  GstVideoInfo info;
  std::vector<uint8_t> out;
  if (!gst_video_info_from_caps(&info, caps)) return out;
  GstVideoFrame frame;
  if (!gst_video_frame_map(&frame, &info, buffer, GST_MAP_READ)) return out;
  for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES(&frame); ++p) {
    const int comp_w =
        GST_VIDEO_FRAME_COMP_WIDTH(&frame, p) * GST_VIDEO_FRAME_COMP_PSTRIDE(&frame, p);
    const int rows = GST_VIDEO_FRAME_COMP_HEIGHT(&frame, p);
    const guint8 *data = static_cast<const guint8 *>(GST_VIDEO_FRAME_PLANE_DATA(&frame, p));
    const int stride = GST_VIDEO_FRAME_PLANE_STRIDE(&frame, p);
    // NV12's chroma plane: one component width covers the U,V pair.
    const int row_bytes = GST_VIDEO_FRAME_FORMAT(&frame) == GST_VIDEO_FORMAT_NV12 && p == 1
                              ? GST_VIDEO_FRAME_COMP_WIDTH(&frame, 1) * 2
                              : comp_w;
    for (int y = 0; y < rows; ++y)
      out.insert(out.end(), data + y * stride, data + y * stride + row_bytes);
  }
  gst_video_frame_unmap(&frame);
  return out;
}

struct Run {
  std::deque<Frame> originals;
  GstCaps *caps = nullptr;
  size_t frames_decoded = 0;
  double squared_error = 0;
  double samples = 0;
  size_t raw_bytes = 0;  // per frame
  // packets
  size_t packets = 0, keyframes = 0, packet_bytes = 0, key_bytes = 0, header_bytes = 0;
};

GstPadProbeReturn on_original(GstPad *pad, GstPadProbeInfo *info, gpointer data) {
  auto *run = static_cast<Run *>(data);
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER(info);
  if (!run->caps) run->caps = gst_pad_get_current_caps(pad);
  Frame f{GST_BUFFER_PTS(buf), visible_bytes(buf, run->caps)};
  run->raw_bytes = f.bytes.size();
  run->originals.push_back(std::move(f));
  return GST_PAD_PROBE_OK;
}

GstPadProbeReturn on_packet(GstPad *, GstPadProbeInfo *info, gpointer data) {
  auto *run = static_cast<Run *>(data);
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER(info);
  const size_t size = gst_buffer_get_size(buf);
  if (GST_BUFFER_FLAG_IS_SET(buf, GST_BUFFER_FLAG_HEADER)) {
    run->header_bytes += size;
    return GST_PAD_PROBE_OK;
  }
  run->packets++;
  run->packet_bytes += size;
  if (!GST_BUFFER_FLAG_IS_SET(buf, GST_BUFFER_FLAG_DELTA_UNIT)) {
    run->keyframes++;
    run->key_bytes += size;
  }
  return GST_PAD_PROBE_OK;
}

GstPadProbeReturn on_decoded(GstPad *pad, GstPadProbeInfo *info, gpointer data) {
  auto *run = static_cast<Run *>(data);
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER(info);
  GstCaps *caps = gst_pad_get_current_caps(pad);
  const std::vector<uint8_t> got = visible_bytes(buf, caps);
  gst_caps_unref(caps);
  while (!run->originals.empty() && run->originals.front().pts < GST_BUFFER_PTS(buf))
    run->originals.pop_front();  // a frame the decoder did not show (should not happen)
  if (run->originals.empty() || run->originals.front().pts != GST_BUFFER_PTS(buf)) {
    std::fprintf(stderr, "decoded frame with no matching input\n");
    return GST_PAD_PROBE_OK;
  }
  const std::vector<uint8_t> &want = run->originals.front().bytes;
  if (want.size() == got.size()) {
    double se = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double d = double(got[i]) - double(want[i]);
      se += d * d;
    }
    run->squared_error += se;
    run->samples += double(got.size());
  }
  run->originals.pop_front();
  run->frames_decoded++;
  return GST_PAD_PROBE_OK;
}

void probe(GstElement *pipeline, const char *name, GstPadProbeCallback cb, Run *run) {
  GstElement *el = gst_bin_get_by_name(GST_BIN(pipeline), name);
  GstPad *pad = gst_element_get_static_pad(el, "src");
  gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_BUFFER, cb, run, nullptr);
  gst_object_unref(pad);
  gst_object_unref(el);
}

bool run_pipeline(GstElement *pipeline) {
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  GstBus *bus = gst_element_get_bus(pipeline);
  GstMessage *msg = gst_bus_timed_pop_filtered(
      bus, GST_CLOCK_TIME_NONE, static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
  bool ok = GST_MESSAGE_TYPE(msg) == GST_MESSAGE_EOS;
  if (!ok) {
    GError *err = nullptr;
    gst_message_parse_error(msg, &err, nullptr);
    std::fprintf(stderr, "error: %s\n", err->message);
    g_error_free(err);
  }
  gst_message_unref(msg);
  gst_object_unref(bus);
  gst_element_set_state(pipeline, GST_STATE_NULL);
  return ok;
}

struct Config {
  const char *format;
  int threshold;
  const char *compression;
};

std::string source(const std::string &file, int frames, const char *format) {
  std::string s = "filesrc location=\"" + file + "\" ! decodebin ! videoconvert";
  if (frames > 0) s += " ! identity eos-after=" + std::to_string(frames);
  return s + " ! video/x-raw,format=" + format;
}

void study(const std::string &file, int frames, const char *backend, const Config &c) {
  const std::string desc =
      source(file, frames, c.format) +
      " ! identity name=orig ! cudadiffenc name=enc stream-version=1 threshold=" +
      std::to_string(c.threshold) + " compression=" + c.compression + " backend=" + backend +
      " ! identity name=pkt ! cudadiffdec backend=" + backend +
      " ! identity name=dec ! fakesink sync=false";
  GError *err = nullptr;
  GstElement *pipeline = gst_parse_launch(desc.c_str(), &err);
  if (!pipeline) {
    std::fprintf(stderr, "%s\n", err ? err->message : "parse error");
    return;
  }
  Run run;
  probe(pipeline, "orig", on_original, &run);
  probe(pipeline, "pkt", on_packet, &run);
  probe(pipeline, "dec", on_decoded, &run);
  if (!run_pipeline(pipeline)) {
    gst_object_unref(pipeline);
    return;
  }
  GstElement *enc = gst_bin_get_by_name(GST_BIN(pipeline), "enc");
  GstStructure *stats = nullptr;
  g_object_get(enc, "stats", &stats, nullptr);
  guint64 delta_report = 0, delta_out = 0, changed = 0;
  gst_structure_get_uint64(stats, "delta-report-layout-bytes", &delta_report);
  gst_structure_get_uint64(stats, "delta-bytes-out", &delta_out);
  gst_structure_get_uint64(stats, "changed-bytes", &changed);
  gst_structure_free(stats);
  gst_object_unref(enc);

  const size_t deltas = run.packets - run.keyframes;
  const double psnr = run.squared_error == 0
                          ? INFINITY
                          : 10 * std::log10(255.0 * 255.0 * run.samples / run.squared_error);
  std::printf(
      "RESULT|%s|threshold %d|%s|frames %zu|keyframes %zu|raw %zu|report %.0f|deltas %.0f|"
      "all %.0f|report/deltas %.2f|psnr %.2f|decoded %zu\n",
      c.format, c.threshold, c.compression, run.packets, run.keyframes, run.raw_bytes,
      deltas ? double(delta_report) / deltas : 0.0,
      deltas ? double(run.packet_bytes - run.key_bytes) / deltas : 0.0,
      run.packets ? double(run.packet_bytes) / run.packets : 0.0,
      delta_out ? double(delta_report) / double(run.packet_bytes - run.key_bytes) : 0.0, psnr,
      run.frames_decoded);
  std::fflush(stdout);
  if (run.caps) gst_caps_unref(run.caps);
  gst_object_unref(pipeline);
}

// Another lossless encoder on the same footage: bytes per frame.
void other_encoder(const std::string &file, int frames, const char *format, const char *encoder,
                   const char *label) {
  GstElementFactory *f = gst_element_factory_find(
      std::string(encoder).substr(0, std::string(encoder).find(' ')).c_str());
  if (!f) {
    std::printf("INFO|%s not installed: skipped\n", label);
    return;
  }
  gst_object_unref(f);
  const std::string desc =
      source(file, frames, format) + " ! " + encoder + " ! identity name=pkt ! fakesink sync=false";
  GError *err = nullptr;
  GstElement *pipeline = gst_parse_launch(desc.c_str(), &err);
  if (!pipeline) {
    std::fprintf(stderr, "%s\n", err ? err->message : "parse error");
    return;
  }
  Run run;
  probe(pipeline, "pkt", on_packet, &run);
  if (run_pipeline(pipeline))
    std::printf("RESULT|%s|lossless|%s|packets %zu|bytes per packet %.0f\n", format, label,
                run.packets, run.packets ? double(run.packet_bytes) / run.packets : 0.0);
  gst_object_unref(pipeline);
}

}  // namespace

int main(int argc, char **argv) {
  gst_init(&argc, &argv);
  std::string backend = "cpu", file;
  int frames = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--backend" && i + 1 < argc)
      backend = argv[++i];
    else if (a == "--frames" && i + 1 < argc)
      frames = std::atoi(argv[++i]);
    else
      file = a;
  }
  if (file.empty()) {
    std::fprintf(stderr, "usage: %s [--backend cpu|cuda|auto] [--frames N] VIDEO_FILE\n", argv[0]);
    return 2;
  }
  const Config configs[] = {
      {"BGR", 20, "none"},  {"BGR", 20, "zstd"}, {"I420", 20, "none"},
      {"I420", 20, "zstd"}, {"BGR", 0, "zstd"},  {"I420", 0, "zstd"},
  };
  for (const Config &c : configs) study(file, frames, backend.c_str(), c);
  other_encoder(file, frames, "BGRx", "avenc_ffv1", "FFV1 (avenc_ffv1, BGRx, defaults)");
  other_encoder(file, frames, "BGRx", "avenc_ffv1 coder=range_tab context=1",
                "FFV1 (avenc_ffv1, BGRx, range coder, large context)");
  other_encoder(file, frames, "Y444", "x264enc pass=quant quantizer=0 speed-preset=medium",
                "x264 qp 0 (Y444, medium)");
  other_encoder(file, frames, "I420", "x264enc pass=quant quantizer=0 speed-preset=medium",
                "x264 qp 0 (I420, medium)");
  gst_deinit();
  return 0;
}
