// Device-resident pipelines and overlapped transfers, end to end through
// GStreamer, next to the copies and kernels they are made of, measured in the
// same run (1920x1080 BGR by default):
//
//  chain    appsrc (pinned) ! cudaupload ! cudagauss ! cudabinarize ! cudaheatmap
//           ! cudadownload ! fakesink (pinned pool offered to cudadownload; each
//           frame mapped for reading at the sink, which is where GStreamer
//           1.22's CUDA memory comes down when cudadownload passes it on):
//           ms per frame against one H2D + one D2H + the three kernels (CUDA
//           events, core operations on device frames). Also the same with a
//           queue after cudaupload and before cudadownload (three threads),
//           and with cudatextoverlay (in place) after cudagauss.
//  filter   appsrc (pinned, cudagauss's proposed pool) ! cudagauss ! fakesink
//           with frame-overlap=never and always: frames per second against the
//           host-to-device frame rate (1 / H2D time).
//  density  N pipelines in one process, appsrc (pinned) ! cudagauss !
//           cudatextoverlay ! cudadiffenc ! fakesink, N = 1, 8, 32, 64 (--density),
//           each fed by its own thread: aggregate frames per second over a
//           timed window.
// Each measurement is repeated (--repeats, default 5; density 3) and the
// median, minimum and maximum are printed.
//
//   bench_device [--size WxH] [--frames N] [--repeats N] [--density 1,8,32,64]
//                [--window SECONDS] [--only chain|filter|density]
#include <gst/gst.h>
#include <gst/video/video.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "cudadiff/binarize.h"
#include "cudadiff/gauss.h"
#include "cudadiff/heatmap.h"
#include "cudadiff/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int width = 1920, height = 1080;
  int frames = 300;  // timed frames per pipeline run (chain, filter)
  int repeats = 5;
  std::vector<int> density = {1, 8, 32, 64};
  double window = 3.0;  // seconds counted per density run
  std::string only;
};

std::string raw_caps(const Options &o, const char *format = "BGR") {
  return std::string("video/x-raw,format=") + format + ",width=" + std::to_string(o.width) +
         ",height=" + std::to_string(o.height) + ",framerate=60/1";
}

GstElement *launch(const std::string &desc) {
  GError *err = nullptr;
  GstElement *p = gst_parse_launch(desc.c_str(), &err);
  if (!p) {
    std::fprintf(stderr, "%s: %s\n", desc.c_str(), err ? err->message : "parse error");
    std::exit(1);
  }
  return p;
}

std::string bus_error(GstElement *pipeline, GstClockTime timeout) {
  GstBus *bus = gst_element_get_bus(pipeline);
  GstMessage *msg = gst_bus_timed_pop_filtered(
      bus, timeout, static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
  std::string error = msg ? "" : "timeout";
  if (msg && GST_MESSAGE_TYPE(msg) == GST_MESSAGE_ERROR) {
    GError *e = nullptr;
    gst_message_parse_error(msg, &e, nullptr);
    error = e->message;
    g_error_free(e);
  }
  if (msg) gst_message_unref(msg);
  gst_object_unref(bus);
  return error;
}

// `n` frames of noise within +-10 around a random picture, each with a
// 480x130 rectangle XOR 0x80 at another place (a few percent of the bytes
// change from one frame to the next), in buffers of the pinned allocator the
// plugin registers (pageable memory without it).
std::vector<GstBuffer *> make_frames(const Options &o, int n, unsigned seed) {
  GstVideoInfo info;
  GstCaps *caps = gst_caps_from_string(raw_caps(o).c_str());
  gst_video_info_from_caps(&info, caps);
  gst_caps_unref(caps);
  GstAllocator *pinned = gst_allocator_find("CudaDiffPinned");
  GstAllocationParams params;
  gst_allocation_params_init(&params);
  params.align = 63;
  std::mt19937 gen(seed);
  const size_t row = size_t(o.width) * 3;
  std::vector<uint8_t> base(row * o.height);
  for (auto &b : base) b = uint8_t(gen() >> 24);
  std::vector<GstBuffer *> frames;
  const int rw = std::min(o.width, 480), rh = std::min(o.height, 130);
  for (int k = 0; k < n; ++k) {
    GstBuffer *buf = gst_buffer_new_allocate(pinned, GST_VIDEO_INFO_SIZE(&info), &params);
    gst_buffer_add_video_meta_full(buf, GST_VIDEO_FRAME_FLAG_NONE, GST_VIDEO_INFO_FORMAT(&info),
                                   o.width, o.height, 1, info.offset, info.stride);
    GstMapInfo map;
    gst_buffer_map(buf, &map, GST_MAP_WRITE);
    const int rx = int(gen() % uint32_t(o.width - rw + 1)),
              ry = int(gen() % uint32_t(o.height - rh + 1));
    for (int y = 0; y < o.height; ++y) {
      uint8_t *dst = map.data + size_t(y) * GST_VIDEO_INFO_PLANE_STRIDE(&info, 0);
      const uint8_t *src = base.data() + y * row;
      for (size_t x = 0; x < row; ++x)
        dst[x] = uint8_t(std::clamp(int(src[x]) + int(gen() % 21) - 10, 0, 255));
      if (y >= ry && y < ry + rh)
        for (int x = rx * 3; x < (rx + rw) * 3; ++x) dst[x] ^= 0x80;
    }
    gst_buffer_unmap(buf, &map);
    frames.push_back(buf);
  }
  if (pinned) gst_object_unref(pinned);
  return frames;
}

bool buffer_pinned(GstBuffer *b) {
  return gst_buffer_n_memory(b) > 0 &&
         gst_memory_is_type(gst_buffer_peek_memory(b, 0), "CudaDiffPinned");
}

// Answers the ALLOCATION query at the sink with a pool of pinned buffers, so
// that a download (cudadownload) lands in pinned memory, as the H2D/D2H
// ceilings assume.
GstPadProbeReturn offer_pinned_pool(GstPad *, GstPadProbeInfo *info, gpointer) {
  GstQuery *query = GST_PAD_PROBE_INFO_QUERY(info);
  if (GST_QUERY_TYPE(query) != GST_QUERY_ALLOCATION) return GST_PAD_PROBE_OK;
  GstCaps *caps = nullptr;
  gst_query_parse_allocation(query, &caps, nullptr);
  GstVideoInfo vinfo;
  if (!caps || !gst_video_info_from_caps(&vinfo, caps)) return GST_PAD_PROBE_OK;
  GstAllocator *pinned = gst_allocator_find("CudaDiffPinned");
  if (!pinned) return GST_PAD_PROBE_OK;
  GstBufferPool *pool = gst_video_buffer_pool_new();
  GstStructure *config = gst_buffer_pool_get_config(pool);
  gst_buffer_pool_config_set_params(config, caps, GST_VIDEO_INFO_SIZE(&vinfo), 0, 0);
  GstAllocationParams params;
  gst_allocation_params_init(&params);
  params.align = 63;
  gst_buffer_pool_config_set_allocator(config, pinned, &params);
  gst_buffer_pool_config_add_option(config, GST_BUFFER_POOL_OPTION_VIDEO_META);
  gst_buffer_pool_set_config(pool, config);
  gst_query_add_allocation_pool(query, pool, GST_VIDEO_INFO_SIZE(&vinfo), 0, 0);
  gst_query_add_allocation_param(query, pinned, &params);
  gst_query_add_allocation_meta(query, GST_VIDEO_META_API_TYPE, nullptr);
  gst_object_unref(pool);
  gst_object_unref(pinned);
  return GST_PAD_PROBE_HANDLED;
}

struct SinkCount {
  std::atomic<int> buffers{0};
  std::atomic<bool> pinned{true};
  std::atomic<bool> cuda{false};            // a buffer of GStreamer's CUDA memory came
  std::vector<Clock::time_point> arrivals;  // single streaming thread: no lock
  bool keep_arrivals = false;
};

// Each frame is mapped for reading, as a consumer of the pictures would:
// GStreamer 1.22's cudadownload passes CUDA memory on to a consumer that can
// map it, and the download to the host happens only at that map.
GstPadProbeReturn count_buffer(GstPad *, GstPadProbeInfo *info, gpointer data) {
  auto *c = static_cast<SinkCount *>(data);
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER(info);
  GstMapInfo map;
  if (gst_buffer_map(buf, &map, GST_MAP_READ)) gst_buffer_unmap(buf, &map);
  if (c->keep_arrivals) c->arrivals.push_back(Clock::now());
  if (!buffer_pinned(buf)) c->pinned = false;
  if (gst_buffer_n_memory(buf) > 0 &&
      gst_memory_is_type(gst_buffer_peek_memory(buf, 0), "gst.cuda.memory"))
    c->cuda = true;
  c->buffers++;
  return GST_PAD_PROBE_OK;
}

void push(GstElement *src, GstBuffer *frame, int i) {
  GstBuffer *b = gst_buffer_copy(frame);  // shares the pinned memory
  GST_BUFFER_PTS(b) = gst_util_uint64_scale(i, GST_SECOND, 60);
  GST_BUFFER_DURATION(b) = gst_util_uint64_scale(1, GST_SECOND, 60);
  GstFlowReturn flow = GST_FLOW_OK;
  g_signal_emit_by_name(src, "push-buffer", b, &flow);
  gst_buffer_unref(b);
}

struct Timed {
  double ms_per_frame = 0;
  bool out_pinned = false;
  bool out_cuda = false;
  std::string error;
};

// Pushes warm-up + frames through `middle` (between appsrc and fakesink);
// ms per frame between the arrivals of the first and last timed frame.
Timed run_pipeline(const Options &o, const std::string &middle, std::vector<GstBuffer *> &frames,
                   int warmup) {
  const std::string desc = "appsrc name=src format=time block=true max-buffers=4 caps=\"" +
                           raw_caps(o) + "\" ! " + middle + " ! fakesink name=sink sync=false";
  GstElement *pipeline = launch(desc);
  GstElement *src = gst_bin_get_by_name(GST_BIN(pipeline), "src");
  GstElement *sink = gst_bin_get_by_name(GST_BIN(pipeline), "sink");
  GstPad *sinkpad = gst_element_get_static_pad(sink, "sink");
  SinkCount count;
  count.keep_arrivals = true;
  count.arrivals.reserve(warmup + o.frames + 4);
  gst_pad_add_probe(sinkpad, GST_PAD_PROBE_TYPE_BUFFER, count_buffer, &count, nullptr);
  gst_pad_add_probe(sinkpad, GST_PAD_PROBE_TYPE_QUERY_DOWNSTREAM, offer_pinned_pool, nullptr,
                    nullptr);
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  for (int i = 0; i < warmup + o.frames; ++i) push(src, frames[i % frames.size()], i);
  GstFlowReturn flow = GST_FLOW_OK;
  g_signal_emit_by_name(src, "end-of-stream", &flow);
  Timed t;
  t.error = bus_error(pipeline, 120 * GST_SECOND);
  gst_element_set_state(pipeline, GST_STATE_NULL);
  if (t.error.empty() && int(count.arrivals.size()) == warmup + o.frames) {
    const double s =
        std::chrono::duration<double>(count.arrivals.back() - count.arrivals[warmup - 1]).count();
    t.ms_per_frame = s * 1e3 / o.frames;
  } else if (t.error.empty()) {
    t.error = "frames lost: " + std::to_string(count.arrivals.size());
  }
  t.out_pinned = count.pinned;
  t.out_cuda = count.cuda;
  gst_object_unref(sinkpad);
  gst_object_unref(src);
  gst_object_unref(sink);
  gst_object_unref(pipeline);
  return t;
}

struct Spread {
  double median = 0, min = 0, max = 0;
};

Spread spread(std::vector<double> v) {
  Spread s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.median = v[v.size() / 2];
  s.min = v.front();
  s.max = v.back();
  return s;
}

void result(const char *what, const std::string &impl, const Spread &s, const char *unit,
            const std::string &note) {
  std::printf("RESULT|%s|%s|%.4f|%.4f|%.4f|%s|%s\n", what, impl.c_str(), s.median, s.min, s.max,
              unit, note.c_str());
  std::fflush(stdout);
}

// What reached the sink: pinned (our allocator), CUDA memory, or other.
Spread repeat_pipeline(const Options &o, const std::string &middle,
                       std::vector<GstBuffer *> &frames, std::string *out_memory, int repeats) {
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    const Timed t = run_pipeline(o, middle, frames, 30);
    if (!t.error.empty()) {
      std::fprintf(stderr, "%s: %s\n", middle.c_str(), t.error.c_str());
      std::exit(1);
    }
    if (out_memory) *out_memory = t.out_pinned ? "pinned" : t.out_cuda ? "CUDA memory" : "pageable";
    ms.push_back(t.ms_per_frame);
  }
  return spread(ms);
}

// --- density: N pipelines, each fed by its own thread

struct DensityPipeline {
  GstElement *pipeline = nullptr;
  GstElement *src = nullptr;
  SinkCount count;
  std::thread feeder;
};

// Every pipeline reads the same pinned input frames (shallow copies: read only).
double run_density(const Options &o, int n, const std::string &compression,
                   const std::vector<GstBuffer *> &frames) {
  std::vector<std::unique_ptr<DensityPipeline>> ps;
  std::atomic<bool> stop{false};
  for (int k = 0; k < n; ++k) {
    auto p = std::make_unique<DensityPipeline>();
    const std::string desc =
        "appsrc name=src format=time block=true max-buffers=3 caps=\"" + raw_caps(o) +
        "\" ! cudagauss ! cudatextoverlay text=\"camera " + std::to_string(k) +
        "\" ! cudadiffenc stream-version=1 threshold=20 compression=" + compression +
        " ! fakesink name=sink sync=false";
    p->pipeline = launch(desc);
    p->src = gst_bin_get_by_name(GST_BIN(p->pipeline), "src");
    GstElement *sink = gst_bin_get_by_name(GST_BIN(p->pipeline), "sink");
    GstPad *pad = gst_element_get_static_pad(sink, "sink");
    gst_pad_add_probe(
        pad, GST_PAD_PROBE_TYPE_BUFFER,
        +[](GstPad *, GstPadProbeInfo *, gpointer d) -> GstPadProbeReturn {
          static_cast<SinkCount *>(d)->buffers++;
          return GST_PAD_PROBE_OK;
        },
        &p->count, nullptr);
    gst_object_unref(pad);
    gst_object_unref(sink);
    gst_element_set_state(p->pipeline, GST_STATE_PLAYING);
    ps.push_back(std::move(p));
  }
  for (size_t k = 0; k < ps.size(); ++k) {
    DensityPipeline *raw = ps[k].get();
    // Pipelines start at different frames, so that they do not all change at once.
    raw->feeder = std::thread([raw, &stop, &frames, k] {
      for (size_t i = 0; !stop.load(std::memory_order_relaxed); ++i)
        push(raw->src, frames[(k + i) % frames.size()], int(i));
      GstFlowReturn flow = GST_FLOW_OK;
      g_signal_emit_by_name(raw->src, "end-of-stream", &flow);
    });
  }
  auto total = [&] {
    long long s = 0;
    for (auto &p : ps) s += p->count.buffers.load();
    return s;
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // warm-up
  const long long c0 = total();
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.window));
  const long long c1 = total();
  const auto t1 = Clock::now();
  stop = true;
  for (auto &p : ps) p->feeder.join();
  for (auto &p : ps) {
    const std::string err = bus_error(p->pipeline, 60 * GST_SECOND);
    if (!err.empty()) {
      std::fprintf(stderr, "density pipeline: %s\n", err.c_str());
      std::exit(1);
    }
    gst_element_set_state(p->pipeline, GST_STATE_NULL);
    gst_object_unref(p->src);
    gst_object_unref(p->pipeline);
  }
  return double(c1 - c0) / std::chrono::duration<double>(t1 - t0).count();
}

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--size") {
      if (std::sscanf(next().c_str(), "%dx%d", &o.width, &o.height) != 2) std::exit(2);
    } else if (a == "--frames") {
      o.frames = std::atoi(next().c_str());
    } else if (a == "--repeats") {
      o.repeats = std::atoi(next().c_str());
    } else if (a == "--window") {
      o.window = std::atof(next().c_str());
    } else if (a == "--only") {
      o.only = next();
    } else if (a == "--density") {
      o.density.clear();
      std::string list = next();
      for (size_t p = 0; p <= list.size();) {
        const size_t q = std::min(list.find(',', p), list.size());
        o.density.push_back(std::atoi(list.substr(p, q - p).c_str()));
        p = q + 1;
      }
    } else {
      std::printf(
          "usage: bench_device [--size WxH] [--frames N] [--repeats N] [--density 1,8,32,64] "
          "[--window SECONDS] [--only chain|filter|density]\n");
      std::exit(a == "--help" ? 0 : 2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char **argv) {
  gst_init(&argc, &argv);
  const Options o = parse(argc, argv);
  std::string why;
  if (cudadiff::device_count(&why) == 0) {
    std::printf("SKIP: no usable CUDA device (%s)\n", why.c_str());
    return 77;
  }
  for (const char *f : {"cudagauss", "cudadiffenc"})
    if (!gst_element_factory_find(f)) {
      std::printf("SKIP: %s not found (GST_PLUGIN_PATH)\n", f);
      return 77;
    }
  const bool nvcodec = gst_element_factory_find("cudaupload") != nullptr &&
                       gst_element_factory_find("cudadownload") != nullptr;
  // The plugin registers its pinned allocator when an element first offers it.
  {
    GstElement *once = launch(
        "videotestsrc num-buffers=1 ! video/x-raw,format=BGR,width=64,height=64 ! cudagauss ! "
        "fakesink");
    gst_element_set_state(once, GST_STATE_PLAYING);
    bus_error(once, 30 * GST_SECOND);
    gst_element_set_state(once, GST_STATE_NULL);
    gst_object_unref(once);
  }
  auto ctx = cudadiff::Context::cuda(0);
  bench::Report info;
  bench::describe_machine(info, ctx.get());
  std::printf("INFO|%dx%d BGR, %d timed frames per run, %d repeats\n", o.width, o.height, o.frames,
              o.repeats);

  // Ceilings and kernels, same run: CUDA events, median of many.
  const size_t frame_bytes = size_t(o.width) * o.height * 3;
  bench::Options bo;
  bo.width = o.width;
  bo.height = o.height;
  const double h2d = bench::measure_h2d_copy(bo, *ctx, frame_bytes).stats.median_ms;
  const double d2h = bench::measure_d2h_copy(bo, *ctx, frame_bytes).stats.median_ms;
  cudadiff::DeviceFrame a(cudadiff::VideoFormat::BGR, o.width, o.height);
  cudadiff::DeviceFrame b(cudadiff::VideoFormat::BGR, o.width, o.height);
  cudadiff::DeviceFrame c(cudadiff::VideoFormat::BGR, o.width, o.height);
  cudadiff::fill_bytes_async(a.view().data[0], 77, a.size(), *ctx);
  auto gauss = cudadiff::NoiseFilter::create(*ctx, cudadiff::VideoFormat::BGR, o.width, o.height);
  auto binarize = cudadiff::Binarize::create(*ctx, cudadiff::VideoFormat::BGR,
                                             cudadiff::VideoFormat::BGR, o.width, o.height);
  auto heatmap = cudadiff::Heatmap::create(*ctx, cudadiff::VideoFormat::BGR,
                                           cudadiff::VideoFormat::BGR, o.width, o.height);
  const cudadiff::NoiseFilterSettings gs;
  const cudadiff::BinarizeParams bp;
  const cudadiff::HeatmapParams hp;
  const double k_gauss =
      bench::time_device(bo, *ctx, [&](int) { gauss->process(a.view(), b.view(), gs); }).median_ms;
  const double k_bin = bench::time_device(bo, *ctx, [&](int) {
                         binarize->process(b.view(), c.view(), bp);
                       }).median_ms;
  const double k_heat = bench::time_device(bo, *ctx, [&](int i) {
                          heatmap->process(i % 2 ? c.view() : a.view(), b.view(), hp);
                        }).median_ms;
  std::printf("RESULT|h2d|pinned|%.4f|||ms|one frame\nRESULT|d2h|pinned|%.4f|||ms|one frame\n", h2d,
              d2h);
  std::printf("RESULT|kernel|cudagauss|%.4f|||ms|gaussian 5x5\n", k_gauss);
  std::printf("RESULT|kernel|cudabinarize|%.4f|||ms|otsu, BGR out\n", k_bin);
  std::printf("RESULT|kernel|cudaheatmap|%.4f|||ms|sine\n", k_heat);
  const double budget = h2d + d2h + k_gauss + k_bin + k_heat;
  std::vector<std::string> table;
  char line[256];

  std::vector<GstBuffer *> frames = make_frames(o, 8, 12345);
  if (!buffer_pinned(frames[0])) std::printf("INFO|input frames are NOT pinned\n");

  if (o.only.empty() || o.only == "chain") {
    if (!nvcodec) {
      std::printf("INFO|chain: nvcodec's cudaupload/cudadownload not found: skipped\n");
    } else {
      const std::string chain =
          "cudaupload ! cudagauss ! cudabinarize ! video/x-raw(memory:CUDAMemory),format=BGR ! "
          "cudaheatmap ! cudadownload ! video/x-raw,format=BGR";
      const std::string system =
          "cudagauss ! video/x-raw,format=BGR ! cudabinarize ! "
          "video/x-raw,format=BGR ! cudaheatmap ! video/x-raw,format=BGR";
      std::string out_memory;
      const Spread dev = repeat_pipeline(o, chain, frames, &out_memory, o.repeats);
      const Spread threads = repeat_pipeline(
          o,
          "cudaupload ! queue max-size-buffers=3 ! cudagauss ! cudabinarize ! "
          "video/x-raw(memory:CUDAMemory),format=BGR ! cudaheatmap ! queue max-size-buffers=3 "
          "! cudadownload ! video/x-raw,format=BGR",
          frames, nullptr, o.repeats);
      const Spread sys = repeat_pipeline(o, system, frames, nullptr, o.repeats);
      // The same chain with cudatextoverlay (in place) between two filters.
      const Spread text = repeat_pipeline(
          o,
          "cudaupload ! cudagauss ! cudatextoverlay text=\"device resident\" ! cudabinarize ! "
          "video/x-raw(memory:CUDAMemory),format=BGR ! cudaheatmap ! cudadownload ! "
          "video/x-raw,format=BGR",
          frames, nullptr, o.repeats);
      result("chain", "device-resident", dev, "ms/frame", "output in " + out_memory);
      result("chain", "device-resident+textoverlay", text, "ms/frame",
             "cudatextoverlay after cudagauss");
      result("chain", "device-resident+queues", threads, "ms/frame", "3 threads");
      result("chain", "system-memory", sys, "ms/frame", "each filter uploads and downloads");
      std::snprintf(line, sizeof line,
                    "chain of 3 filters, device-resident: %.3f ms/frame (%.3f..%.3f) = %.2f x "
                    "(H2D %.3f + D2H %.3f + kernels %.3f = %.3f ms; target <= 1.2)",
                    dev.median, dev.min, dev.max, dev.median / budget, h2d, d2h,
                    k_gauss + k_bin + k_heat, budget);
      table.push_back(line);
      std::snprintf(line, sizeof line,
                    "  with cudatextoverlay after cudagauss: %.3f ms/frame (%.3f..%.3f)",
                    text.median, text.min, text.max);
      table.push_back(line);
      std::snprintf(line, sizeof line, "  with queues (3 threads): %.3f ms/frame = %.2f x",
                    threads.median, threads.median / budget);
      table.push_back(line);
      std::snprintf(line, sizeof line, "  same filters on system memory: %.3f ms/frame = %.2f x",
                    sys.median, sys.median / budget);
      table.push_back(line);
    }
  }

  if (o.only.empty() || o.only == "filter") {
    const double h2d_fps = 1e3 / h2d;
    for (const char *overlap : {"never", "always"}) {
      std::string out_memory;
      const Spread s = repeat_pipeline(
          o, std::string("cudagauss frame-overlap=") + overlap + " ! video/x-raw,format=BGR",
          frames, &out_memory, o.repeats);
      const Spread fps{1e3 / s.median, 1e3 / s.max, 1e3 / s.min};
      result("filter", std::string("cudagauss frame-overlap=") + overlap, fps, "frames/s",
             "output in " + out_memory);
      std::snprintf(line, sizeof line,
                    "cudagauss on pinned system memory, frame-overlap=%s: %.0f frames/s "
                    "(%.0f..%.0f) = %.0f %% of the H2D frame rate %.0f (target >= 80 %%)",
                    overlap, fps.median, fps.min, fps.max, 100.0 * fps.median / h2d_fps, h2d_fps);
      table.push_back(line);
    }
  }

  if (o.only.empty() || o.only == "density") {
    if (!gst_element_factory_find("cudatextoverlay")) {
      std::printf("INFO|density: cudatextoverlay not built: skipped\n");
    } else {
      for (int n : o.density) {
        std::vector<double> fps;
        for (int r = 0; r < std::max(1, std::min(o.repeats, 3)); ++r)
          fps.push_back(run_density(o, n, "zstd", frames));
        const Spread s = spread(fps);
        result("density", std::to_string(n) + " pipelines", s, "frames/s", "aggregate, zstd");
        std::snprintf(line, sizeof line,
                      "density, %2d pipelines (gauss, textoverlay, diffenc): %6.0f frames/s "
                      "aggregate (%.0f..%.0f; goal >= 4000)",
                      n, s.median, s.min, s.max);
        table.push_back(line);
      }
    }
  }

  for (auto *f : frames) gst_buffer_unref(f);
  std::printf("\n");
  for (const std::string &l : table) std::printf("%s\n", l.c_str());
  return 0;
}
