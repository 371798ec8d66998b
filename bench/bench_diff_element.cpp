// cudadiffenc and cudadiffdec end to end through GStreamer, from pinned
// buffers: frames per second of
//   appsrc (buffers from the pool cudadiffenc proposes) ! cudadiffenc ! fakesink
//     (frame-overlap never, and auto, the default: on, appsrc is not live)
//   appsrc (the packets) ! cudadiffdec (output from its pinned pool) ! fakesink
//     (frame-overlap never, the default, and always)
// for stream version 1 (compression none and zstd) and version 2,
// next to the frame rate that the host-to-device bandwidth measured in the
// same run allows (one frame up per encoded frame, one down per decoded one).
//
// Frames: 1920x1080 BGR (default), random, noise within +-10 on every byte, and
// a 480x130 rectangle XOR 0x80 at a new place in each frame, so that about 6 %
// of the bytes change from one frame to the next (the rectangle leaves one
// place and appears at another), as in the peer benchmark.
//
// --clip FILE [--clip-size WxH]: real footage instead, the raw BGR frames of
// FILE (e.g. `ffmpeg -i clip.avi -f rawvideo -pix_fmt bgr24 clip.bgr`, the
// first --clip-frames, default 30, of --clip-size, default --size)
// scaled to --size by nearest neighbour (each a pinned input buffer of
// --size: 6.2 MB at 1080p), pushed forwards
// and backwards in turn (0, 1, ..., n-1, n-2, ..., 1, 0, 1, ...: no jump
// from the last frame to the first); --random: frames of random bytes
// (independent, 8 of them in turn). --threshold K: the encoder's threshold
// (default 20). --version N: only stream version N's rows; --encoder-only:
// no decoder rows.
//
// Each run is timed from the sink's --warmup-th buffer (default 30) to the
// end of the stream, so that the stream's start (the elements' allocations,
// the first keyframe, the CUDA graphs' capture) does not count; with
// --warmup 0, from the first buffer pushed.
//
//   bench_diff_element [--frames N] [--warmup N] [--size WxH] [--backend cuda|cpu]
//                      [--clip FILE [--clip-size WxH] [--clip-frames N] | --random]
//                      [--threshold K]
//                      [--version 1|2] [--encoder-only]
#include <gst/gst.h>
#include <gst/video/video.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "codec_util.h"
#include "cudadiff/diff.h"
#include "cudadiff/runtime.h"
#include "cudadiffstream.h"

namespace {

struct Options {
  int frames = 600;
  int warmup = 30;  // output buffers before the timing starts
  int width = 1920, height = 1080;
  std::string backend = "cuda";
  int threshold = 20;
  int version = 0;  // 0: both
  bool encoder_only = false;
  // --clip: its frames scaled to width x height (else synthetic or random).
  std::vector<std::vector<uint8_t>> clip;
  bool random = false;
};

std::string raw_caps(const Options &o) {
  return "video/x-raw,format=BGR,width=" + std::to_string(o.width) +
         ",height=" + std::to_string(o.height) + ",framerate=60/1";
}

// The input buffers: a clip's frames, else 8 distinct frames.
size_t input_count(const Options &o) {
  return o.clip.empty() ? 8 : o.clip.size();
}
// Which input buffer the i-th frame pushed is: a clip forwards and
// backwards in turn, else in turn.
size_t input_of(const Options &o, int i) {
  const size_t n = input_count(o);
  if (o.clip.empty() || n < 2) return size_t(i) % n;
  const size_t j = size_t(i) % (2 * n - 2);
  return j < n ? j : 2 * n - 2 - j;
}

// Distinct input frames, written into `buffers` (already allocated): the
// clip's, random ones, or the synthetic ones described above.
void fill_frames(const Options &o, std::vector<GstBuffer *> &buffers) {
  std::mt19937 gen(12345);
  const bool synthetic = o.clip.empty() && !o.random;
  const size_t row = size_t(o.width) * 3;
  std::vector<uint8_t> base;
  if (synthetic) {
    base.resize(row * o.height);
    for (auto &b : base) b = uint8_t(gen() >> 24);
  }
  GstVideoInfo info;
  GstCaps *caps = gst_caps_from_string(raw_caps(o).c_str());
  gst_video_info_from_caps(&info, caps);
  gst_caps_unref(caps);
  const int rw = std::min(o.width, 480), rh = std::min(o.height, 130);
  for (size_t k = 0; k < buffers.size(); ++k) {
    GstVideoFrame f;
    gst_video_frame_map(&f, &info, buffers[k], GST_MAP_WRITE);
    int rx = 0, ry = 0;
    if (synthetic) {
      rx = int(gen() % uint32_t(o.width - rw + 1));
      ry = int(gen() % uint32_t(o.height - rh + 1));
    }
    for (int y = 0; y < o.height; ++y) {
      uint8_t *dst = static_cast<uint8_t *>(GST_VIDEO_FRAME_PLANE_DATA(&f, 0)) +
                     size_t(y) * GST_VIDEO_FRAME_PLANE_STRIDE(&f, 0);
      if (!o.clip.empty()) {
        std::memcpy(dst, o.clip[k].data() + size_t(y) * row, row);
      } else if (o.random) {
        for (size_t x = 0; x < row; ++x) dst[x] = uint8_t(gen() >> 24);
      } else {
        const uint8_t *src = base.data() + y * row;
        for (size_t x = 0; x < row; ++x)
          dst[x] = uint8_t(std::clamp(int(src[x]) + int(gen() % 21) - 10, 0, 255));
        if (y >= ry && y < ry + rh)
          for (int x = rx * 3; x < (rx + rw) * 3; ++x) dst[x] ^= 0x80;
      }
    }
    gst_video_frame_unmap(&f);
  }
}

struct Result {
  double seconds = 0;  // from the warm-up's end to the end of stream
  int frames = 0;      // the frames within `seconds`
  int buffers = 0;     // every buffer out of the element
  bool pinned = false;
};

// Whether `buf`'s first memory is page-locked, as the driver sees it (the
// elements' allocator falls back to ordinary memory where it cannot pin).
bool buffer_pinned(GstBuffer *buf) {
  GstMapInfo map;
  if (!gst_buffer_map(buf, &map, GST_MAP_READ)) return false;
  const bool pinned = cudadiff::is_pinned_host_memory(map.data);
  gst_buffer_unmap(buf, &map);
  return pinned;
}

// Counts an element's output buffers and notes when the warm-up's last one
// arrived (the sink's handoff).
struct Timed {
  using clock = std::chrono::steady_clock;
  int warmup = 0, seen = 0;
  clock::time_point start;
  void on_buffer() {
    if (++seen == warmup) start = clock::now();
  }
  // The result of a run that began at t0 and ended at t1.
  void finish(clock::time_point t0, clock::time_point t1, bool ok, Result &r) const {
    const bool warm = warmup > 0 && seen > warmup;
    r.seconds = std::chrono::duration<double>(t1 - (warm ? start : t0)).count();
    r.frames = ok ? (warm ? seen - warmup : seen) : 0;
    r.buffers = seen;
  }
};

GstElement *launch(const std::string &desc) {
  GError *err = nullptr;
  GstElement *p = gst_parse_launch(desc.c_str(), &err);
  if (!p) {
    std::fprintf(stderr, "%s\n", err ? err->message : "parse error");
    std::exit(1);
  }
  return p;
}

bool wait_eos(GstElement *pipeline) {
  GstBus *bus = gst_element_get_bus(pipeline);
  GstMessage *msg = gst_bus_timed_pop_filtered(
      bus, 300 * GST_SECOND, static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
  const bool ok = msg && GST_MESSAGE_TYPE(msg) == GST_MESSAGE_EOS;
  if (msg && !ok) {
    GError *err = nullptr;
    gst_message_parse_error(msg, &err, nullptr);
    std::fprintf(stderr, "error: %s\n", err->message);
    g_error_free(err);
  }
  if (msg) gst_message_unref(msg);
  gst_object_unref(bus);
  return ok;
}

void run_stages(const Options &o, std::vector<GstBuffer *> &inputs, const char *compression_name);

// Encoder run; `packets` (optional) collects what it produced, caps included.
// `overlap`: the encoder's frame-overlap (auto: on, appsrc is not live).
Result run_encoder(const Options &o, int version, const char *compression, const char *overlap,
                   std::vector<GstBuffer *> *packets, GstCaps **packet_caps, size_t *bytes_out) {
  const std::string desc =
      "appsrc name=src format=time block=true max-bytes=100000000 caps=\"" + raw_caps(o) +
      "\" ! cudadiffenc name=enc stream-version=" + std::to_string(version) +
      " threshold=" + std::to_string(o.threshold) + " compression=" + compression +
      " backend=" + o.backend + " frame-overlap=" + overlap +
      " ! fakesink name=sink sync=false signal-handoffs=true";
  GstElement *pipeline = launch(desc);
  GstElement *src = gst_bin_get_by_name(GST_BIN(pipeline), "src");
  GstElement *sink = gst_bin_get_by_name(GST_BIN(pipeline), "sink");
  struct Collect {
    std::vector<GstBuffer *> *packets;
    size_t bytes = 0;
    Timed timed;
  } collect{packets, 0, Timed{o.warmup, 0, {}}};
  g_signal_connect(sink, "handoff",
                   G_CALLBACK(+[](GstElement *, GstBuffer *buf, GstPad *, gpointer data) {
                     auto *c = static_cast<Collect *>(data);
                     c->bytes += gst_buffer_get_size(buf);
                     c->timed.on_buffer();
                     if (c->packets) c->packets->push_back(gst_buffer_ref(buf));
                   }),
                   &collect);
  gst_element_set_state(pipeline, GST_STATE_PAUSED);

  // Input buffers from the pool the encoder proposes (pinned when a device exists).
  GstCaps *caps = gst_caps_from_string(raw_caps(o).c_str());
  GstQuery *query = gst_query_new_allocation(caps, TRUE);
  GstPad *srcpad = gst_element_get_static_pad(src, "src");
  GstBufferPool *pool = nullptr;
  if (gst_pad_peer_query(srcpad, query) && gst_query_get_n_allocation_pools(query) > 0)
    gst_query_parse_nth_allocation_pool(query, 0, &pool, nullptr, nullptr, nullptr);
  gst_query_unref(query);
  gst_object_unref(srcpad);
  Result r;
  std::vector<GstBuffer *> inputs(input_count(o), nullptr);
  if (pool) {
    GstStructure *config = gst_buffer_pool_get_config(pool);
    GstVideoInfo info;
    gst_video_info_from_caps(&info, caps);
    gst_buffer_pool_config_set_params(config, caps, GST_VIDEO_INFO_SIZE(&info),
                                      guint(inputs.size()), guint(inputs.size()));
    gst_buffer_pool_set_config(pool, config);
    gst_buffer_pool_set_active(pool, TRUE);
    for (auto &b : inputs)
      if (gst_buffer_pool_acquire_buffer(pool, &b, nullptr) != GST_FLOW_OK) {
        std::fprintf(stderr, "cannot get %zu input buffers of %dx%d from the encoder's pool\n",
                     inputs.size(), o.width, o.height);
        std::exit(1);
      }
    r.pinned = buffer_pinned(inputs[0]);
  } else {
    GstVideoInfo info;
    gst_video_info_from_caps(&info, caps);
    for (auto &b : inputs)
      b = gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&info), nullptr);
  }
  gst_caps_unref(caps);
  fill_frames(o, inputs);
  // Once per compression (the run that keeps the packets), before its pipeline plays.
  if (packets && version == 1) run_stages(o, inputs, compression);

  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.frames; ++i) {
    GstBuffer *b = gst_buffer_copy(inputs[input_of(o, i)]);  // shares the pinned memory
    GST_BUFFER_PTS(b) = gst_util_uint64_scale(i, GST_SECOND, 60);
    GST_BUFFER_DURATION(b) = gst_util_uint64_scale(1, GST_SECOND, 60);
    GstFlowReturn flow = GST_FLOW_OK;
    g_signal_emit_by_name(src, "push-buffer", b, &flow);
    gst_buffer_unref(b);
  }
  GstFlowReturn flow = GST_FLOW_OK;
  g_signal_emit_by_name(src, "end-of-stream", &flow);
  const bool ok = wait_eos(pipeline);
  const auto t1 = std::chrono::steady_clock::now();
  collect.timed.finish(t0, t1, ok, r);
  if (packet_caps) {
    GstElement *enc = gst_bin_get_by_name(GST_BIN(pipeline), "enc");
    GstPad *pad = gst_element_get_static_pad(enc, "src");
    *packet_caps = gst_pad_get_current_caps(pad);
    gst_object_unref(pad);
    gst_object_unref(enc);
  }
  if (bytes_out) *bytes_out = collect.bytes;
  gst_element_set_state(pipeline, GST_STATE_NULL);
  for (auto *b : inputs) gst_buffer_unref(b);
  if (pool) gst_object_unref(pool);
  gst_object_unref(src);
  gst_object_unref(sink);
  gst_object_unref(pipeline);
  return r;
}

Result run_decoder(const Options &o, const std::vector<GstBuffer *> &packets, GstCaps *caps,
                   const char *overlap) {
  gchar *caps_str = gst_caps_to_string(caps);
  const std::string desc = std::string("appsrc name=src format=time block=true caps=\"") +
                           caps_str + "\" ! cudadiffdec name=dec backend=" + o.backend +
                           " frame-overlap=" + overlap +
                           " ! fakesink name=sink sync=false signal-handoffs=true";
  g_free(caps_str);
  GstElement *pipeline = launch(desc);
  GstElement *src = gst_bin_get_by_name(GST_BIN(pipeline), "src");
  GstElement *sink = gst_bin_get_by_name(GST_BIN(pipeline), "sink");
  struct Seen {
    Timed timed;
    bool pinned = false;
  } seen;
  seen.timed.warmup = o.warmup;
  g_signal_connect(sink, "handoff",
                   G_CALLBACK(+[](GstElement *, GstBuffer *buf, GstPad *, gpointer data) {
                     auto *s = static_cast<Seen *>(data);
                     if (s->timed.seen == 0) s->pinned = buffer_pinned(buf);
                     s->timed.on_buffer();
                   }),
                   &seen);
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  const auto t0 = std::chrono::steady_clock::now();
  GstFlowReturn flow = GST_FLOW_OK;
  for (GstBuffer *p : packets) g_signal_emit_by_name(src, "push-buffer", p, &flow);
  g_signal_emit_by_name(src, "end-of-stream", &flow);
  const bool ok = wait_eos(pipeline);
  const auto t1 = std::chrono::steady_clock::now();
  Result r;
  seen.timed.finish(t0, t1, ok, r);
  r.pinned = seen.pinned;
  gst_element_set_state(pipeline, GST_STATE_NULL);
  gst_object_unref(src);
  gst_object_unref(sink);
  gst_object_unref(pipeline);
  return r;
}

// The elements' per-frame steps without GStreamer, each timed on its own
// (wall clock, mean over the frames), to show where an element's time goes:
// the encoder's core call, the writer's prepare (checksum, compression) and
// write (the copy into the output); the decoder's parser (header and payload
// checksum), reader, parse_delta, core delta and write_frame into a pinned
// frame.
void run_stages(const Options &o, std::vector<GstBuffer *> &inputs, const char *compression_name) {
  namespace diff = cudadiff::diff;
  namespace stream = cudadiff::stream;
  using clock = std::chrono::steady_clock;
  auto ctx = o.backend == "cuda" ? cudadiff::Context::cuda(0) : cudadiff::Context::cpu();
  const stream::Compression compression = std::string(compression_name) == "zstd"
                                              ? stream::Compression::Zstd
                                              : stream::Compression::None;
  const cudadiff::VideoFormat format = cudadiff::VideoFormat::BGR;
  auto encoder = diff::DiffEncoder::create(*ctx, format, o.width, o.height);
  auto decoder = diff::DiffDecoder::create(*ctx, format, o.width, o.height);
  stream::Writer writer;
  writer.reserve(encoder->frame_bytes());
  writer.set_compression(compression, 3);
  stream::Reader reader;
  reader.reserve(encoder->frame_bytes());
  cudadiff::HostBytes body, out_frame(encoder->frame_bytes());
  std::vector<uint8_t> packet(stream::kHeaderSize +
                              diff::max_delta_body_size(encoder->frame_bytes()));
  std::vector<diff::SuperblockEntry> entries;
  const diff::ValueMode mode = stream::choose_value_mode(compression, o.threshold);
  double t_core = 0, t_prepare = 0, t_write = 0;
  double t_parse = 0, t_reader = 0, t_check = 0, t_delta = 0, t_frame = 0;
  int deltas = 0;
  size_t body_bytes = 0;
  const cudadiff::FrameView out_view =
      cudadiff::packed_view(format, o.width, o.height, out_frame.data());
  const int frames = std::max(o.frames, 2);
  for (int i = 0; i < frames; ++i) {
    GstMapInfo map;
    gst_buffer_map(inputs[input_of(o, i)], &map, GST_MAP_READ);
    const cudadiff::FrameView in = cudadiff::packed_view(format, o.width, o.height, map.data);
    const bool key = i == 0;
    auto t0 = clock::now();
    if (key)
      encoder->keyframe_host(in, body);
    else
      encoder->delta_host(in, o.threshold, mode, body);
    auto t1 = clock::now();
    stream::FrameInfo info;
    info.keyframe = key;
    info.mode = mode;
    info.frame_number = uint64_t(i);
    info.format = format;
    info.width = o.width;
    info.height = o.height;
    info.fps_n = 60;
    const size_t size = writer.prepare(info, body.data(), body.size());
    auto t2 = clock::now();
    writer.write(packet.data());
    auto t3 = clock::now();
    gst_buffer_unmap(inputs[input_of(o, i)], &map);
    if (!key) {
      t_core += std::chrono::duration<double>(t1 - t0).count();
      t_prepare += std::chrono::duration<double>(t2 - t1).count();
      t_write += std::chrono::duration<double>(t3 - t2).count();
      body_bytes += body.size();
    }

    // Decoder.
    auto d0 = clock::now();
    stream::ArrayQueue queue(packet.data(), size);
    stream::Parser parser;
    const stream::Parser::Step step = parser.next(queue, false);
    if (step.kind != stream::Parser::Kind::Packet) {
      std::fprintf(stderr, "stages: the parser did not return the packet\n");
      std::exit(1);
    }
    auto d1 = clock::now();
    const uint8_t *dbody = nullptr;
    std::string why;
    if (!reader.body(step.header, packet.data() + stream::kHeaderSize, &dbody, &why)) {
      std::fprintf(stderr, "stages: %s\n", why.c_str());
      std::exit(1);
    }
    auto d2 = clock::now();
    auto d3 = d2, d4 = d2;
    if (key) {
      decoder->keyframe(dbody);
      d4 = d3 = clock::now();
    } else {
      diff::DeltaIndex index;
      if (!diff::parse_delta(dbody, step.header.body_size, encoder->frame_bytes(), &index, &why,
                             ctx->is_cuda() ? &entries : nullptr)) {
        std::fprintf(stderr, "stages: %s\n", why.c_str());
        std::exit(1);
      }
      d3 = clock::now();
      decoder->delta(dbody, index, mode);
      d4 = clock::now();
    }
    decoder->write_frame(out_view);
    auto d5 = clock::now();
    if (!key) {
      t_parse += std::chrono::duration<double>(d1 - d0).count();
      t_reader += std::chrono::duration<double>(d2 - d1).count();
      t_check += std::chrono::duration<double>(d3 - d2).count();
      t_delta += std::chrono::duration<double>(d4 - d3).count();
      t_frame += std::chrono::duration<double>(d5 - d4).count();
      ++deltas;
    }
  }
  auto us = [&](double t) { return 1e6 * t / std::max(1, deltas); };
  std::printf("stages without GStreamer, %s, compression=%s, %d deltas, body %.0f bytes:\n",
              o.backend.c_str(), compression_name, deltas,
              double(body_bytes) / std::max(1, deltas));
  std::printf(
      "  encoder: core delta_host %.1f us, writer prepare %.1f us, write %.1f us; sum %.1f us\n",
      us(t_core), us(t_prepare), us(t_write), us(t_core + t_prepare + t_write));
  std::printf(
      "  decoder: parser %.1f us, reader %.1f us, parse_delta %.1f us, core delta %.1f us, "
      "write_frame %.1f us; sum %.1f us\n",
      us(t_parse), us(t_reader), us(t_check), us(t_delta), us(t_frame),
      us(t_parse + t_reader + t_check + t_delta + t_frame));
}

}  // namespace

int main(int argc, char **argv) {
  gst_init(&argc, &argv);
  Options o;
  std::string clip;
  int clip_w = 0, clip_h = 0, clip_frames = 30;
  bool bad = false;
  // An integer argument in [lo, hi], else `bad`.
  auto integer = [&](const char *text, long lo, long hi) {
    char *end = nullptr;
    const long v = std::strtol(text, &end, 10);
    if (end == text || *end || v < lo || v > hi) bad = true;
    return int(std::clamp(v, lo, hi));
  };
  // WxH (bench::parse_size()), else `bad`.
  auto size = [&](const char *text, int &w, int &h) {
    if (!bench::parse_size(text, w, h)) bad = true;
  };
  bool clip_size_given = false, clip_frames_given = false;
  for (int i = 1; i < argc && !bad; ++i) {
    const std::string a = argv[i];
    const bool value = i + 1 < argc;
    if (a == "--frames" && value)
      o.frames = integer(argv[++i], 1, 1000000);
    else if (a == "--warmup" && value)
      o.warmup = integer(argv[++i], 0, 1000000);
    else if (a == "--backend" && value)
      o.backend = argv[++i];
    else if (a == "--size" && value)
      size(argv[++i], o.width, o.height);
    else if (a == "--clip" && value)
      clip = argv[++i];
    else if (a == "--clip-size" && value)
      size(argv[++i], clip_w, clip_h), clip_size_given = true;
    else if (a == "--clip-frames" && value)
      clip_frames = integer(argv[++i], 2, 1000), clip_frames_given = true;
    else if (a == "--random")
      o.random = true;
    else if (a == "--threshold" && value)
      o.threshold = integer(argv[++i], 0, 255);
    else if (a == "--version" && value)
      o.version = integer(argv[++i], 1, 2);
    else if (a == "--encoder-only")
      o.encoder_only = true;
    else
      bad = true;
  }
  if (!bad && clip.empty() && (clip_size_given || clip_frames_given)) bad = true;
  if (bad || (o.backend != "cuda" && o.backend != "cpu")) {
    std::fprintf(stderr,
                 "usage: bench_diff_element [--frames N] [--warmup N] [--size WxH] [--backend "
                 "cuda|cpu] [--clip FILE [--clip-size WxH] [--clip-frames 2..1000] | --random] "
                 "[--threshold 0..255] [--version 1|2] [--encoder-only]\n"
                 "  (--clip-size defaults to --size; each clip frame takes a pinned input "
                 "buffer of --size)\n");
    return 2;
  }
  if (o.random && !clip.empty()) {
    std::fprintf(stderr, "--random and --clip exclude each other\n");
    return 2;
  }
  std::string input_note = "synthetic frames";
  if (!clip.empty()) {
    if (!clip_size_given) clip_w = o.width, clip_h = o.height;
    std::ifstream f(clip, std::ios::binary | std::ios::ate);
    const long long file_bytes = f ? static_cast<long long>(f.tellg()) : -1;
    const long long frame = 3LL * clip_w * clip_h;
    if (file_bytes < 0) {
      std::fprintf(stderr, "%s: cannot read\n", clip.c_str());
      return 2;
    }
    if (file_bytes % frame != 0)
      std::fprintf(stderr,
                   "warning: %s: %lld bytes, not a whole number of %dx%d BGR frames (%lld "
                   "bytes): is --clip-size right?\n",
                   clip.c_str(), file_bytes, clip_w, clip_h, frame);
    o.clip = bench::read_scaled_clip(clip, clip_w, clip_h, o.width, o.height, clip_frames);
    if (o.clip.size() < 2) {
      std::fprintf(stderr, "%s: fewer than 2 frames of %dx%d BGR\n", clip.c_str(), clip_w, clip_h);
      return 2;
    }
    input_note = clip + ": " + std::to_string(o.clip.size()) + " frames of " +
                 std::to_string(clip_w) + "x" + std::to_string(clip_h) + ", forwards and backwards";
  } else if (o.random) {
    input_note = "random frames";
  }
  std::printf("INFO|input: %s, threshold %d\n", input_note.c_str(), o.threshold);
  if (!gst_element_factory_find("cudadiffenc")) {
    std::fprintf(stderr, "cudadiffenc not found: set GST_PLUGIN_PATH to the build's plugins/\n");
    return 1;
  }
  std::string why;
  const bool gpu = cudadiff::device_count(&why) > 0;
  if (o.backend == "cuda" && !gpu) {
    std::printf("SKIP: no CUDA device (%s)\n", why.c_str());
    return 77;
  }
  const size_t frame_bytes = size_t(o.width) * o.height * 3;
  // The ceiling: a pinned host-to-device copy of one frame, measured before
  // and after the elements' runs (a busy moment skews one of them); the
  // faster of the two medians counts.
  auto measure_h2d = [&](const char *when) {
    if (!gpu) return 0.0;
    auto ctx = cudadiff::Context::cuda(0);
    bench::Options bo;
    const bench::Row h2d = bench::measure_h2d_copy(bo, *ctx, frame_bytes);
    std::printf("INFO|H2D copy of one frame (pinned), %s: %.4f ms = %.1f GB/s -> %.0f fps\n", when,
                h2d.stats.median_ms, bench::gbs(h2d), 1000.0 / h2d.stats.median_ms);
    return h2d.stats.median_ms;
  };
  const double h2d_before = measure_h2d("before");
  struct Line {
    std::string name, note;
    double ms;
  };
  std::vector<Line> lines;
  // Stream version 1 without and with zstd, then version 2 (which has no
  // compression setting: its bodies are entropy-coded).
  const struct {
    int version;
    const char *compression;
  } configs[] = {{1, "none"}, {1, "zstd"}, {2, "none"}};
  for (const auto &cfg : configs) {
    if (o.version != 0 && cfg.version != o.version) continue;
    const char *compression = cfg.compression;
    const std::string label = cfg.version == 2 ? std::string("stream-version=2")
                                               : std::string("compression=") + compression;
    std::vector<GstBuffer *> packets;
    GstCaps *caps = nullptr;
    size_t bytes = 0;
    // Timed without keeping the packets (keeping 600 of them would make every
    // output buffer fresh, page-faulting memory); then again to collect them.
    char note[160];
    for (const char *overlap : {"never", "auto"}) {
      const Result e = run_encoder(o, cfg.version, compression, overlap, nullptr, nullptr, &bytes);
      std::snprintf(note, sizeof note, "%s; %.0f bytes per packet",
                    e.pinned ? "pinned input" : "unpinned input",
                    double(bytes) / std::max(1, e.buffers));
      lines.push_back({"cudadiffenc " + o.backend + " " + label + " frame-overlap=" + overlap, note,
                       1000 * e.seconds / std::max(1, e.frames)});
    }
    if (o.encoder_only) continue;
    run_encoder(o, cfg.version, compression, "auto", &packets, &caps, nullptr);
    for (const char *overlap : {"never", "always"}) {
      const Result d = run_decoder(o, packets, caps, overlap);
      std::snprintf(note, sizeof note, "%s; %d frames",
                    d.pinned ? "pinned output" : "unpinned output", d.buffers);
      lines.push_back({"cudadiffdec " + o.backend + " " + label + " frame-overlap=" + overlap, note,
                       1000 * d.seconds / std::max(1, d.frames)});
    }
    for (GstBuffer *p : packets) gst_buffer_unref(p);
    if (caps) gst_caps_unref(caps);
  }
  const double h2d_after = measure_h2d("after");
  const double h2d_ms = gpu ? std::min(h2d_before, h2d_after) : 0.0;
  const std::string title =
      "element, " + std::to_string(o.width) + "x" + std::to_string(o.height) + " BGR";
  std::printf("\n%-58s %10s %9s %8s %s\n", title.c_str(), "ms/frame", "fps", "% of H2D",
              "input/output memory");
  for (const Line &l : lines)
    std::printf("%-58s %10.4f %9.0f %7.0f%% %s\n", l.name.c_str(), l.ms, 1000 / l.ms,
                h2d_ms > 0 ? 100 * h2d_ms / l.ms : 0.0, l.note.c_str());
  gst_deinit();
  return 0;
}
