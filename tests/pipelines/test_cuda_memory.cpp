// Device-resident pipelines: gst-cudadiff elements and GStreamer's own CUDA
// elements (nvcodec: cudaupload, cudadownload, nvh264dec) passing
// video/x-raw(memory:CUDAMemory), compared byte for byte with the same work
// on system memory; pad probes check the memory between the elements, and
// the elements' gst.cuda.context checks that the pipeline has one CUDA
// context. Needs a CUDA device and a build with gstreamer-cuda-1.0 (exit 77,
// skip, without them); the tests that need nvcodec's elements skip where
// they are missing (all skipped: exit 77). Also: which CUDA contexts a
// process makes (none for the CPU backend; none on device 0 for elements on
// device 1), checked in child processes; that the frames CUDA elements keep
// in system memory are page-locked; and elements on a second device (the
// MultiGpu tests skip with fewer than two).
#include <glib/gstdio.h>
#include <gst/gst.h>
#include <gst/video/video.h>
#include <gtest/gtest.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#if CUDADIFF_HAVE_GST_CUDA
#include <gst/cuda/gstcudabufferpool.h>
#include <gst/cuda/gstcudacontext.h>
#include <gst/cuda/gstcudamemory.h>
#include <gst/cuda/gstcudautils.h>
#endif

#include <gst/check/gstharness.h>

#include <atomic>
#include <thread>

#include "cudadiff/runtime.h"
#include "frames.h"
#include "gst_test.h"

namespace {

bool have_factory(const char *name) {
  GstElementFactory *f = gst_element_factory_find(name);
  if (!f) return false;
  gst_object_unref(f);
  return true;
}

bool have_nvcodec_copies() {
  return have_factory("cudaupload") && have_factory("cudadownload");
}

bool is_cuda_memory(GstMemory *mem) {
  return mem && mem->allocator && g_strcmp0(mem->allocator->mem_type, "gst.cuda.memory") == 0;
}

// The video info of BGRx frames of w x h.
GstVideoInfo bgrx_info(int w, int h) {
  GstVideoInfo info;
  gst_video_info_set_format(&info, GST_VIDEO_FORMAT_BGRx, w, h);
  return info;
}

#if CUDADIFF_HAVE_GST_CUDA
// The bytes of a frame of `info` in `buffer`, rows packed (its strides
// left out; CUDA memory is read through the host).
std::vector<guint8> packed_pixels(GstBuffer *buffer, const GstVideoInfo &info) {
  std::vector<guint8> out;
  gst_test::read_frame(buffer, info, [&](GstVideoFrame *f) {
    const int row = GST_VIDEO_INFO_WIDTH(&info) * GST_VIDEO_INFO_COMP_PSTRIDE(&info, 0);
    for (int y = 0; y < GST_VIDEO_INFO_HEIGHT(&info); ++y)
      out.insert(out.end(), gst_test::pixel(f, 0, 0, y), gst_test::pixel(f, 0, 0, y) + row);
  });
  return out;
}
#endif

// The GstCudaContext a CUDA memory belongs to (GstCudaMemory's own field),
// or nullptr.
gpointer memory_context(GstMemory *mem) {
#if CUDADIFF_HAVE_GST_CUDA
  if (mem && gst_is_cuda_memory(mem)) return GST_CUDA_MEMORY_CAST(mem)->context;
#endif
  (void)mem;
  return nullptr;
}

struct PadCount {
  int buffers = 0;
  int cuda = 0;
  gpointer context = nullptr;  // GstCudaContext of the first CUDA buffer's memory
  int other_context = 0;       // CUDA buffers whose memory is of another one
  bool count_pinned = false;   // count `pinned` (asks the CUDA runtime: makes a context)
  int pinned = 0;              // buffers in system memory that the driver knows as page-locked
};

GstPadProbeReturn count_memory(GstPad *, GstPadProbeInfo *info, gpointer data) {
  auto *count = static_cast<PadCount *>(data);
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER(info);
  count->buffers++;
  bool all_cuda = gst_buffer_n_memory(buf) > 0;
  for (guint i = 0; i < gst_buffer_n_memory(buf); ++i) {
    GstMemory *mem = gst_buffer_peek_memory(buf, i);
    all_cuda = all_cuda && is_cuda_memory(mem);
    if (gpointer ctx = memory_context(mem)) {
      if (!count->context) count->context = ctx;
      if (ctx != count->context) count->other_context++;
    }
  }
  if (all_cuda) count->cuda++;
  GstMapInfo map;
  if (count->count_pinned && !all_cuda && gst_buffer_map(buf, &map, GST_MAP_READ)) {
    if (cudadiff::is_pinned_host_memory(map.data)) count->pinned++;
    gst_buffer_unmap(buf, &map);
  }
  return GST_PAD_PROBE_OK;
}

// The visible bytes of a raw video buffer (plane by plane, row by row), or
// the whole buffer for other caps.
std::string buffer_bytes(GstBuffer *buf, GstCaps *caps) {
  std::string out;
  GstVideoInfo info;
  const GstStructure *s = gst_caps_get_structure(caps, 0);
  if (gst_structure_has_name(s, "video/x-raw") && gst_video_info_from_caps(&info, caps)) {
    GstVideoFrame f;
    if (!gst_video_frame_map(&f, &info, buf, GST_MAP_READ)) return "(unmappable)";
    for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES(&f); ++p) {
      const int comp = static_cast<int>(p);
      const gsize row = static_cast<gsize>(GST_VIDEO_FRAME_COMP_WIDTH(&f, comp)) *
                        GST_VIDEO_FRAME_COMP_PSTRIDE(&f, comp);
      for (int y = 0; y < GST_VIDEO_FRAME_COMP_HEIGHT(&f, comp); ++y)
        out.append(static_cast<const char *>(GST_VIDEO_FRAME_PLANE_DATA(&f, p)) +
                       static_cast<gsize>(y) * GST_VIDEO_FRAME_PLANE_STRIDE(&f, p),
                   row);
    }
    gst_video_frame_unmap(&f);
    return out;
  }
  GstMapInfo map;
  if (!gst_buffer_map(buf, &map, GST_MAP_READ)) return "(unmappable)";
  out.assign(reinterpret_cast<const char *>(map.data), map.size);
  gst_buffer_unmap(buf, &map);
  return out;
}

struct Collected {
  std::vector<std::string> frames;
};

// Stream headers (the encoder's first buffer) are not frames.
void on_handoff(GstElement *, GstBuffer *buf, GstPad *pad, gpointer data) {
  auto *c = static_cast<Collected *>(data);
  if (GST_BUFFER_FLAG_IS_SET(buf, GST_BUFFER_FLAG_HEADER)) return;
  GstCaps *caps = gst_pad_get_current_caps(pad);
  c->frames.push_back(caps ? buffer_bytes(buf, caps) : std::string("(no caps)"));
  if (caps) gst_caps_unref(caps);
}

struct RunResult {
  std::string error;  // "" on EOS
  std::vector<std::string> warnings;
  std::vector<std::string> frames;
  std::map<std::string, PadCount> counts;       // per "element" (its src pad)
  std::map<std::string, std::string> src_caps;  // per "element": its src pad's caps
  std::map<std::string, gpointer> contexts;     // per element: its GstCudaContext
  std::map<std::string, int> context_devices;   // per element: that context's device (-1: none)
  std::map<std::string, PadCount> sink_counts;  // per element: its sink pad
};

struct RunOptions {
  // Called once the pipeline is PLAYING (feeds an appsrc, ...).
  std::function<void(GstElement *pipeline)> feed;
  // Called before the pipeline goes to PLAYING (sets contexts, ...).
  std::function<void(GstElement *pipeline)> prepare;
  // The watched pads also count page-locked buffers (PadCount::pinned).
  bool count_pinned = false;
};

// Runs `desc` (a fakesink named "out" at the end) to EOS; probes the src
// (and sink) pads of `watch` and reads their gst.cuda.context before
// stopping; collects warnings.
RunResult run(const std::string &desc, const std::vector<std::string> &watch = {},
              const RunOptions &opts = RunOptions()) {
  RunResult r;
  GError *err = nullptr;
  GstElement *pipeline = gst_parse_launch(desc.c_str(), &err);
  if (!pipeline) {
    r.error = err ? err->message : "parse error";
    if (err) g_error_free(err);
    return r;
  }
  Collected collected;
  GstElement *out = gst_bin_get_by_name(GST_BIN(pipeline), "out");
  EXPECT_NE(out, nullptr) << desc;
  if (out) {
    g_object_set(out, "signal-handoffs", TRUE, "sync", FALSE, nullptr);
    g_signal_connect(out, "handoff", G_CALLBACK(on_handoff), &collected);
  }
  for (const std::string &name : watch) {
    GstElement *e = gst_bin_get_by_name(GST_BIN(pipeline), name.c_str());
    EXPECT_NE(e, nullptr) << name;
    if (!e) continue;
    r.counts[name].count_pinned = r.sink_counts[name].count_pinned = opts.count_pinned;
    GstPad *pad = gst_element_get_static_pad(e, "src");
    if (pad) {
      gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_BUFFER, count_memory, &r.counts[name], nullptr);
      gst_object_unref(pad);
    }
    if ((pad = gst_element_get_static_pad(e, "sink"))) {
      gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_BUFFER, count_memory, &r.sink_counts[name],
                        nullptr);
      gst_object_unref(pad);
    }
    gst_object_unref(e);
  }
  if (opts.prepare) opts.prepare(pipeline);
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  if (opts.feed) opts.feed(pipeline);
  GstBus *bus = gst_element_get_bus(pipeline);
  GstMessage *msg = nullptr;
  for (;;) {
    msg = gst_bus_timed_pop_filtered(
        bus, 60 * GST_SECOND,
        static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_WARNING));
    if (!msg || GST_MESSAGE_TYPE(msg) != GST_MESSAGE_WARNING) break;
    GError *w = nullptr;
    gst_message_parse_warning(msg, &w, nullptr);
    r.warnings.push_back(std::string(GST_OBJECT_NAME(GST_MESSAGE_SRC(msg))) + ": " + w->message);
    g_error_free(w);
    gst_message_unref(msg);
  }
  if (!msg) {
    r.error = "timeout";
  } else if (GST_MESSAGE_TYPE(msg) == GST_MESSAGE_ERROR) {
    GError *e = nullptr;
    gchar *dbg = nullptr;
    gst_message_parse_error(msg, &e, &dbg);
    r.error = std::string(GST_OBJECT_NAME(GST_MESSAGE_SRC(msg))) + ": " + e->message + " (" +
              (dbg ? dbg : "") + ")";
    g_error_free(e);
    g_free(dbg);
  }
  if (msg) gst_message_unref(msg);
  gst_object_unref(bus);
  for (const std::string &name : watch) {
    GstElement *e = gst_bin_get_by_name(GST_BIN(pipeline), name.c_str());
    if (!e) continue;
    GstPad *pad = gst_element_get_static_pad(e, "src");
    if (GstCaps *caps = pad ? gst_pad_get_current_caps(pad) : nullptr) {
      gchar *str = gst_caps_to_string(caps);
      r.src_caps[name] = str;
      g_free(str);
      gst_caps_unref(caps);
    }
    if (pad) gst_object_unref(pad);
    gpointer ctx = nullptr;
    int device = -1;
    if (GstContext *c = gst_element_get_context(e, "gst.cuda.context")) {
      const GValue *v = gst_structure_get_value(gst_context_get_structure(c), "gst.cuda.context");
      if (v && G_VALUE_HOLDS_OBJECT(v)) {
        ctx = g_value_get_object(v);
        guint id = 0;
        g_object_get(ctx, "cuda-device-id", &id, nullptr);
        device = static_cast<int>(id);
      }
      gst_context_unref(c);
    }
    r.contexts[name] = ctx;
    r.context_devices[name] = device;
    gst_object_unref(e);
  }
  gst_element_set_state(pipeline, GST_STATE_NULL);
  if (out) gst_object_unref(out);
  gst_object_unref(pipeline);
  r.frames = collected.frames;
  return r;
}

const char *kSource =
    "videotestsrc num-buffers=12 pattern=ball ! "
    "video/x-raw,format=BGR,width=320,height=240,framerate=30/1";

void expect_same_frames(const RunResult &a, const RunResult &b) {
  ASSERT_EQ(a.frames.size(), b.frames.size());
  for (size_t i = 0; i < a.frames.size(); ++i) {
    ASSERT_EQ(a.frames[i].size(), b.frames[i].size()) << "frame " << i;
    EXPECT_TRUE(a.frames[i] == b.frames[i]) << "frame " << i << " differs";
  }
}

// Runs `desc` (probing `watch`, with `opts`) and `cpu_desc`: both reach the
// end with the same 12 buffers (gtest expectations). The first run's result.
RunResult run_as_cpu(const std::string &desc, const std::string &cpu_desc,
                     const std::vector<std::string> &watch = {},
                     const RunOptions &opts = RunOptions()) {
  RunResult a = run(desc, watch, opts);
  EXPECT_EQ(a.error, "") << desc;
  const RunResult b = run(cpu_desc);
  EXPECT_EQ(b.error, "") << cpu_desc;
  EXPECT_EQ(a.frames.size(), 12u);
  expect_same_frames(a, b);
  return a;
}

void expect_one_context(const RunResult &r, const std::vector<std::string> &names) {
  gpointer first = nullptr;
  for (const std::string &n : names) {
    auto it = r.contexts.find(n);
    ASSERT_NE(it, r.contexts.end()) << n;
    EXPECT_NE(it->second, nullptr) << n << " has no gst.cuda.context";
    if (!first) first = it->second;
    EXPECT_EQ(it->second, first) << n << " has another CUDA context";
  }
}

void expect_cuda_between(const RunResult &r, const std::vector<std::string> &names, int frames) {
  for (const std::string &n : names) {
    auto it = r.counts.find(n);
    ASSERT_NE(it, r.counts.end()) << n;
    EXPECT_EQ(it->second.buffers, frames) << n;
    EXPECT_EQ(it->second.cuda, it->second.buffers) << n << " pushed system memory";
    EXPECT_NE(r.src_caps.at(n).find("memory:CUDAMemory"), std::string::npos)
        << n << ": " << r.src_caps.at(n);
    // The memory is of the element's own (the pipeline's one) context.
    EXPECT_EQ(it->second.context, r.contexts.at(n)) << n << ": memory of another CUDA context";
    EXPECT_EQ(it->second.other_context, 0) << n;
  }
}

}  // namespace

// The acceptance chain: three filters between nvcodec's upload and download.
TEST(CudaMemory, FilterChainMatchesSystemMemory) {
  if (!have_nvcodec_copies()) GTEST_SKIP() << "nvcodec's cudaupload/cudadownload missing";
  const std::string device =
      std::string(kSource) +
      " ! cudaupload name=up ! cudagauss name=gauss ! cudabinarize name=bin ! "
      "video/x-raw(memory:CUDAMemory),format=BGR ! cudaheatmap name=heat ! cudadownload name=down "
      "! video/x-raw,format=BGR ! fakesink name=out";
  const std::string system = std::string(kSource) +
                             " ! cudagauss ! video/x-raw,format=BGR ! cudabinarize ! "
                             "video/x-raw,format=BGR ! cudaheatmap ! video/x-raw,format=BGR ! "
                             "fakesink name=out";
  const RunResult a = run(device, {"up", "gauss", "bin", "heat", "down"});
  ASSERT_EQ(a.error, "");
  const RunResult b = run(system);
  ASSERT_EQ(b.error, "");
  EXPECT_EQ(a.frames.size(), 12u);
  expect_same_frames(a, b);
  expect_cuda_between(a, {"up", "gauss", "bin", "heat"}, 12);
  expect_one_context(a, {"up", "gauss", "bin", "heat", "down"});
}

TEST(CudaMemory, TextOverlayIntoEncoderMatchesSystemMemory) {
  if (!have_nvcodec_copies()) GTEST_SKIP() << "nvcodec's cudaupload/cudadownload missing";
  if (!have_factory("cudatextoverlay")) GTEST_SKIP() << "built without Pango";
  for (int version : {1, 2}) {
    // Both stream versions: each reads the device frames where they are.
    SCOPED_TRACE("stream-version " + std::to_string(version));
    const std::string tail = " cudadiffenc name=enc stream-version=" + std::to_string(version) +
                             " threshold=10 keyframe-interval=5 ! fakesink name=out";
    const RunResult a = run(std::string(kSource) +
                                " ! cudaupload name=up ! cudatextoverlay name=text text=\"device "
                                "resident\" shaded-background=true ! " +
                                tail,
                            {"up", "text", "enc"});
    ASSERT_EQ(a.error, "");
    const RunResult b = run(std::string(kSource) +
                            " ! cudatextoverlay text=\"device resident\" shaded-background=true ! "
                            "video/x-raw,format=BGR ! " +
                            tail);
    ASSERT_EQ(b.error, "");
    EXPECT_EQ(a.frames.size(), 12u);
    expect_same_frames(a, b);
    // CUDA memory from cudaupload into cudatextoverlay and from it into the
    // encoder, of the one context all three share.
    expect_cuda_between(a, {"up", "text"}, 12);
    EXPECT_EQ(a.sink_counts.at("enc").buffers, 12);
    EXPECT_EQ(a.sink_counts.at("enc").cuda, 12) << "the encoder got system memory";
    EXPECT_EQ(a.sink_counts.at("enc").context, a.contexts.at("enc"));
    expect_one_context(a, {"up", "text", "enc"});
  }
}

// The debug messages of one category about one element, collected while
// alive (the category's threshold raised to DEBUG meanwhile).
class DebugLines {
 public:
  DebugLines(const char *category, const char *element) : category_(category), element_(element) {
    for (GSList *l = gst_debug_get_all_categories(); l; l = l->next) {
      auto *cat = static_cast<GstDebugCategory *>(l->data);
      if (category_ == gst_debug_category_get_name(cat)) cat_ = cat;
    }
    if (cat_) {
      old_ = gst_debug_category_get_threshold(cat_);
      gst_debug_category_set_threshold(cat_, GST_LEVEL_DEBUG);
    }
    gst_debug_add_log_function(log, this, nullptr);
  }
  ~DebugLines() {
    gst_debug_remove_log_function_by_data(this);
    if (cat_) gst_debug_category_set_threshold(cat_, old_);
  }
  bool any_contains(const std::string &text) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const std::string &l : lines_)
      if (l.find(text) != std::string::npos) return true;
    return false;
  }

 private:
  static void log(GstDebugCategory *cat, GstDebugLevel, const gchar *, const gchar *, gint,
                  GObject *object, GstDebugMessage *message, gpointer data) {
    auto *self = static_cast<DebugLines *>(data);
    if (self->category_ != gst_debug_category_get_name(cat) || !object || !GST_IS_OBJECT(object) ||
        self->element_ != GST_OBJECT_NAME(object))
      return;
    std::lock_guard<std::mutex> lock(self->mutex_);
    self->lines_.push_back(gst_debug_message_get(message));
  }
  std::string category_, element_;
  GstDebugCategory *cat_ = nullptr;
  GstDebugLevel old_ = GST_LEVEL_NONE;
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

// cudatextoverlay works in place, between two of our filters: it learns
// from downstream (cudaheatmap) that it orders its work after marked frames
// (its debug message says so; GstBaseTransform runs no allocation query of
// its own for an element in place, so before it never learnt it and waited
// for every frame), and marks its frames instead of waiting for them. The
// pictures are those of system memory.
TEST(CudaMemory, TextOverlayBetweenFiltersMatchesSystemMemory) {
  if (!have_nvcodec_copies()) GTEST_SKIP() << "nvcodec's cudaupload/cudadownload missing";
  if (!have_factory("cudatextoverlay")) GTEST_SKIP() << "built without Pango";
  const std::string text = " ! cudatextoverlay name=text text=\"in place\" shaded-background=true";
  RunResult a;
  {
    DebugLines lines("cudadifffilter", "text");
    a = run(std::string(kSource) + " ! cudaupload name=up ! cudagauss name=gauss" + text +
                " ! video/x-raw(memory:CUDAMemory),format=BGR ! cudaheatmap name=heat ! "
                "cudadownload name=down ! video/x-raw,format=BGR ! fakesink name=out",
            {"up", "gauss", "text", "heat", "down"});
    EXPECT_TRUE(lines.any_contains("downstream orders its work after marked frames"));
  }
  ASSERT_EQ(a.error, "");
  const RunResult b = run(std::string(kSource) + " ! cudagauss ! video/x-raw,format=BGR" + text +
                          " ! cudaheatmap ! video/x-raw,format=BGR ! fakesink name=out");
  ASSERT_EQ(b.error, "");
  EXPECT_EQ(a.frames.size(), 12u);
  expect_same_frames(a, b);
  expect_cuda_between(a, {"up", "gauss", "text", "heat"}, 12);
  expect_one_context(a, {"up", "gauss", "text", "heat", "down"});
}

// NVDEC output (CUDA memory, NV12) straight into cudagauss.
TEST(CudaMemory, Nvh264decFeedsGauss) {
  if (!have_nvcodec_copies()) GTEST_SKIP() << "nvcodec's cudaupload/cudadownload missing";
  for (const char *f : {"nvh264dec", "x264enc", "h264parse"})
    if (!have_factory(f)) GTEST_SKIP() << f << " missing (no NVDEC in this driver, or no x264)";
  gchar *path = nullptr;
  const gint fd = g_file_open_tmp("cudadiff-XXXXXX.h264", &path, nullptr);
  ASSERT_GE(fd, 0);
  close(fd);
  const RunResult made =
      run(std::string("videotestsrc num-buffers=20 pattern=ball ! "
                      "video/x-raw,format=I420,width=320,height=240,framerate=30/1 ! "
                      "x264enc speed-preset=ultrafast key-int-max=10 ! h264parse ! "
                      "video/x-h264,stream-format=byte-stream ! tee name=t ! queue ! "
                      "filesink location=") +
          path + " t. ! queue ! fakesink name=out");
  ASSERT_EQ(made.error, "");
  const std::string decode = std::string("filesrc location=") + path +
                             " ! h264parse ! nvh264dec name=dec ! "
                             "video/x-raw(memory:CUDAMemory),format=NV12 ! ";
  const RunResult a = run(decode +
                              "cudagauss name=gauss kernel-size=7 ! cudadownload name=down ! "
                              "video/x-raw,format=NV12 ! fakesink name=out",
                          {"dec", "gauss", "down"});
  // The reference: system memory into cudagauss (identity answers no
  // allocation query, so no pool of either side is shared).
  const RunResult b =
      run(decode +
          "cudadownload ! video/x-raw,format=NV12 ! identity drop-allocation=true "
          "! cudagauss kernel-size=7 ! video/x-raw,format=NV12 ! fakesink name=out");
  g_unlink(path);
  g_free(path);
  ASSERT_EQ(a.error, "");
  ASSERT_EQ(b.error, "");
  EXPECT_EQ(a.frames.size(), 20u);
  expect_same_frames(a, b);
  expect_cuda_between(a, {"dec", "gauss"}, 20);
  expect_one_context(a, {"dec", "gauss", "down"});
  // What cudagauss received: NVDEC's CUDA memory, of cudagauss's context.
  EXPECT_EQ(a.sink_counts.at("gauss").buffers, 20);
  EXPECT_EQ(a.sink_counts.at("gauss").cuda, 20);
  EXPECT_EQ(a.sink_counts.at("gauss").context, a.contexts.at("gauss"));
  EXPECT_EQ(a.sink_counts.at("gauss").other_context, 0);
}

// Without GStreamer's CUDA elements: ours alone share one context and pass
// CUDA memory (the first one uploads, the encoder reads device frames;
// version 2, coded on the CPU, maps them on the host).
TEST(CudaMemory, OwnElementsShareOneContext) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("stream-version=" + std::to_string(version));
    const std::string enc = "cudadiffenc stream-version=" + std::to_string(version) + " ";
    const std::string chain =
        "videotestsrc num-buffers=8 pattern=ball ! video/x-raw,format=BGRx,width=160,height=120 "
        "! cudagauss name=a ! cudaheatmap name=b gain=4 ! " +
        enc + "name=c threshold=0 ! fakesink name=out";
    const RunResult r = run(chain, {"a", "b", "c"});
    ASSERT_EQ(r.error, "");
    EXPECT_EQ(r.frames.size(), 8u);
    expect_cuda_between(r, {"a", "b"}, 8);
    expect_one_context(r, {"a", "b", "c"});
    // The same packets as on system memory.
    const RunResult sys = run(
        "videotestsrc num-buffers=8 pattern=ball ! video/x-raw,format=BGRx,width=160,height=120 "
        "! cudagauss ! video/x-raw,format=BGRx ! cudaheatmap gain=4 ! video/x-raw,format=BGRx ! " +
        enc + "threshold=0 ! fakesink name=out");
    ASSERT_EQ(sys.error, "");
    expect_same_frames(r, sys);
  }
}

// A decoder's output into a filter in CUDA memory, same pictures (both
// versions write the picture on the device).
TEST(CudaMemory, DecoderFeedsFilterOnDevice) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("stream-version=" + std::to_string(version));
    const std::string enc =
        "videotestsrc num-buffers=10 pattern=ball ! video/x-raw,format=I420,width=176,height=144 "
        "! cudadiffenc stream-version=" +
        std::to_string(version) + " threshold=0 keyframe-interval=4 ! cudadiffdec name=dec ! ";
    const RunResult a =
        run(enc + "cudagauss name=g ! video/x-raw,format=I420 ! fakesink name=out", {"dec", "g"});
    ASSERT_EQ(a.error, "");
    EXPECT_EQ(a.counts.at("dec").cuda, 10);
    const RunResult b = run(enc +
                            "video/x-raw,format=I420 ! cudagauss ! video/x-raw,format=I420 ! "
                            "fakesink name=out");
    ASSERT_EQ(b.error, "");
    EXPECT_EQ(a.frames.size(), 10u);
    expect_same_frames(a, b);
  }
}

// I420 and YV12 of an odd height: GStreamer's CUDA memory (1.22) loses the
// third plane when mapped on the host, so the decoder gives those frames in
// system memory even to an element that asks for CUDA memory (here
// cudatextoverlay, which works in place and passes the memory it gets on to
// the sink, which maps it on the host). They arrive as encoded (threshold
// 0): before, that plane differed in every frame.
TEST(CudaMemory, OddHeightPlanarFramesReachTheHostWhole) {
  for (const char *format : {"I420", "YV12"}) {
    for (const char *size : {"width=81,height=61", "width=31,height=19"}) {
      for (int version : {1, 2}) {
        SCOPED_TRACE(std::string(format) + " " + size +
                     " stream-version=" + std::to_string(version));
        const std::string src = std::string(
                                    "videotestsrc num-buffers=6 pattern=ball ! "
                                    "video/x-raw,format=") +
                                format + "," + size + " ! ";
        const RunResult want = run(src + "fakesink name=out");
        ASSERT_EQ(want.error, "");
        const RunResult got =
            run(src + "cudadiffenc stream-version=" + std::to_string(version) +
                    " threshold=0 ! cudadiffdec name=dec ! cudatextoverlay ! fakesink name=out",
                {"dec"});
        ASSERT_EQ(got.error, "");
        EXPECT_EQ(got.counts.at("dec").cuda, 0) << "CUDA memory out of the decoder";
        EXPECT_EQ(got.frames.size(), 6u);
        expect_same_frames(want, got);
      }
    }
  }
}

// The filters likewise: cudagauss gives I420 and YV12 of an odd height in
// system memory even when the element after it (cudadownload) names CUDA
// memory, so that the sink, which maps them on the host, gets every plane.
TEST(CudaMemory, OddHeightPlanarFramesFromAFilterReachTheHostWhole) {
  if (!have_nvcodec_copies()) GTEST_SKIP() << "nvcodec's cudaupload/cudadownload missing";
  for (const char *format : {"I420", "YV12"}) {
    SCOPED_TRACE(format);
    const std::string src =
        std::string("videotestsrc num-buffers=6 pattern=ball ! video/x-raw,format=") + format +
        ",width=81,height=61 ! ";
    const RunResult want =
        run(src + "cudagauss ! video/x-raw,format=" + format + " ! fakesink name=out");
    ASSERT_EQ(want.error, "");
    const RunResult got = run(src + "cudagauss name=g ! cudadownload ! fakesink name=out", {"g"});
    ASSERT_EQ(got.error, "");
    EXPECT_EQ(got.counts.at("g").cuda, 0) << "CUDA memory out of the filter";
    EXPECT_EQ(got.frames.size(), 6u);
    expect_same_frames(want, got);
  }
}

// Frame overlap (system memory on both sides) changes nothing but timing:
// same frames, all of them (the last one leaves at EOS).
TEST(CudaMemory, FrameOverlapGivesTheSameFrames) {
  for (const char *filter :
       {"cudagauss method=median kernel-size=5", "cudaheatmap gain=3", "cudagrayscale"})
    for (int n : {1, 2, 7}) {
      const std::string src = "videotestsrc num-buffers=" + std::to_string(n) +
                              " pattern=ball ! video/x-raw,format=RGBA,width=200,height=90 ! ";
      const std::string tail = " ! video/x-raw ! fakesink name=out";
      const RunResult never = run(src + filter + " frame-overlap=never" + tail);
      const RunResult always = run(src + filter + " frame-overlap=always" + tail);
      ASSERT_EQ(never.error, "") << filter;
      ASSERT_EQ(always.error, "") << filter;
      EXPECT_EQ(never.frames.size(), static_cast<size_t>(n)) << filter;
      expect_same_frames(never, always);
    }
}

// backend=cpu offers no CUDA memory; backend=cuda does.
TEST(CudaMemory, CudaCapsOnlyWithTheCudaBackend) {
  for (const char *name : {"cudagauss", "cudaheatmap", "cudadiffenc"}) {
    for (const char *backend : {"cpu", "cuda"}) {
      GstElement *e = gst_element_factory_make(name, nullptr);
      ASSERT_NE(e, nullptr);
      gst_util_set_object_arg(G_OBJECT(e), "backend", backend);
      GstPad *sink = gst_element_get_static_pad(e, "sink");
      GstCaps *caps = gst_pad_query_caps(sink, nullptr);
      bool cuda = false;
      for (guint i = 0; i < gst_caps_get_size(caps); ++i) {
        GstCapsFeatures *f = gst_caps_get_features(caps, i);
        cuda = cuda || (f && gst_caps_features_contains(f, "memory:CUDAMemory"));
      }
      EXPECT_EQ(cuda, std::string(backend) == "cuda") << name << " backend=" << backend;
      gst_caps_unref(caps);
      gst_object_unref(sink);
      gst_object_unref(e);
    }
  }
}

// A pipeline kept across state changes: frames collected at "out".
struct Pipe {
  GstElement *pipeline = nullptr;
  Collected collected;
  explicit Pipe(const std::string &desc) {
    pipeline = gst_parse_launch(desc.c_str(), nullptr);
    EXPECT_NE(pipeline, nullptr) << desc;
    if (!pipeline) return;
    GstElement *out = gst_bin_get_by_name(GST_BIN(pipeline), "out");
    g_object_set(out, "signal-handoffs", TRUE, "sync", FALSE, nullptr);
    g_signal_connect(out, "handoff", G_CALLBACK(on_handoff), &collected);
    gst_object_unref(out);
  }
  ~Pipe() {
    if (!pipeline) return;
    gst_element_set_state(pipeline, GST_STATE_NULL);
    gst_object_unref(pipeline);
  }
  GstElement *get(const char *name) {  // transfer full
    return gst_bin_get_by_name(GST_BIN(pipeline), name);
  }
  // Waits for EOS: "" or the error.
  std::string wait_eos() {
    GstBus *bus = gst_element_get_bus(pipeline);
    GstMessage *msg = gst_bus_timed_pop_filtered(
        bus, 60 * GST_SECOND, static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
    gst_object_unref(bus);
    if (!msg) return "timeout";
    std::string error;
    if (GST_MESSAGE_TYPE(msg) == GST_MESSAGE_ERROR) {
      GError *e = nullptr;
      gst_message_parse_error(msg, &e, nullptr);
      error = std::string(GST_OBJECT_NAME(GST_MESSAGE_SRC(msg))) + ": " + e->message;
      g_error_free(e);
    }
    gst_message_unref(msg);
    return error;
  }
  std::vector<std::string> take_frames() {
    std::vector<std::string> f;
    f.swap(collected.frames);
    return f;
  }
};

// The thread that calls the codecs keeps its own current CUDA context:
// every entry point pushes the element's context and pops it again.
TEST(CudaMemory, CodecsLeaveTheCallersContextCurrent) {
#if CUDADIFF_HAVE_GST_CUDA
  GstCudaContext *mine = gst_cuda_context_new(0);  // a driver context of its own
  ASSERT_NE(mine, nullptr);
  ASSERT_TRUE(gst_cuda_context_push(mine));
  void *expected = gst_cuda_context_get_handle(mine);
  ASSERT_EQ(cudadiff::current_driver_context(), expected);
  const char *caps = "video/x-raw,format=BGRx,width=64,height=48,framerate=30/1";
  GstHarness *enc = gst_harness_new_parse(
      "cudadiffenc stream-version=1 backend=cuda threshold=0 keyframe-interval=3 "
      "frame-overlap=always");
  gst_harness_set_src_caps_str(enc, caps);
  EXPECT_EQ(cudadiff::current_driver_context(), expected) << "after start and caps";
  std::vector<GstBuffer *> packets;
  for (int t = 0; t < 6; ++t) {
    GstBuffer *in = gst_buffer_new_allocate(nullptr, 64 * 48 * 4, nullptr);
    GstMapInfo map;
    gst_buffer_map(in, &map, GST_MAP_WRITE);
    for (gsize i = 0; i < map.size; ++i) map.data[i] = static_cast<guint8>(i * 7 + t * 13);
    gst_buffer_unmap(in, &map);
    GST_BUFFER_PTS(in) = t * GST_SECOND / 30;
    ASSERT_EQ(gst_harness_push(enc, in), GST_FLOW_OK);
    EXPECT_EQ(cudadiff::current_driver_context(), expected) << "after encoding frame " << t;
    while (GstBuffer *p = gst_harness_try_pull(enc)) packets.push_back(p);
  }
  gst_harness_push_event(enc, gst_event_new_eos());
  EXPECT_EQ(cudadiff::current_driver_context(), expected) << "after the encoder's EOS";
  while (GstBuffer *p = gst_harness_try_pull(enc)) packets.push_back(p);
  gst_harness_teardown(enc);
  EXPECT_EQ(cudadiff::current_driver_context(), expected) << "after the encoder stopped";
  EXPECT_EQ(packets.size(), 7u);  // stream header + 6 packets

  GstHarness *dec = gst_harness_new_parse("cudadiffdec backend=cuda frame-overlap=always");
  gst_harness_set_src_caps_str(dec, "video/x-cudadiff");
  int frames = 0;
  for (GstBuffer *p : packets) {
    if (GST_BUFFER_FLAG_IS_SET(p, GST_BUFFER_FLAG_HEADER)) {
      gst_buffer_unref(p);
      continue;
    }
    ASSERT_EQ(gst_harness_push(dec, p), GST_FLOW_OK);
    EXPECT_EQ(cudadiff::current_driver_context(), expected) << "after decoding a packet";
    while (GstBuffer *f = gst_harness_try_pull(dec)) {
      ++frames;
      gst_buffer_unref(f);
    }
  }
  gst_harness_push_event(dec, gst_event_new_flush_start());
  gst_harness_push_event(dec, gst_event_new_flush_stop(TRUE));
  EXPECT_EQ(cudadiff::current_driver_context(), expected) << "after the decoder's flush";
  gst_harness_teardown(dec);
  EXPECT_EQ(cudadiff::current_driver_context(), expected) << "after the decoder stopped";
  EXPECT_EQ(frames, 5);  // the last one was in flight at the flush
  CUcontext popped = nullptr;
  gst_cuda_context_pop(&popped);
  EXPECT_EQ(static_cast<void *>(popped), expected);
  gst_object_unref(mine);
#else
  GTEST_SKIP() << "built without gstreamer-cuda-1.0";
#endif
}

// primary_context() leaves the calling thread as it was.
TEST(CudaMemory, PrimaryContextLeavesTheThreadAlone) {
  std::thread([] {
    EXPECT_EQ(cudadiff::current_driver_context(), nullptr);
    void *primary = cudadiff::primary_context(0);
    EXPECT_NE(primary, nullptr);
    EXPECT_EQ(cudadiff::current_driver_context(), nullptr) << "primary context left current";
    EXPECT_EQ(cudadiff::primary_context(0), primary);
  }).join();
}

// backend=cpu: no gst.cuda.context kept or given, and CUDA memory (GStreamer
// 1.22's cudadownload passes it on under system memory caps) is read
// through the host: the same pictures as from system memory.
TEST(CudaMemory, CpuBackendTakesNoDevicePointers) {
#if CUDADIFF_HAVE_GST_CUDA
  GstCudaContext *ctx = gst_cuda_context_new(0);
  ASSERT_NE(ctx, nullptr);
  GstContext *context = gst_context_new_cuda_context(ctx);
  for (const char *name : {"cudagauss", "cudagrayscale", "cudadiffenc", "cudadiffdec"}) {
    for (const char *backend : {"cpu", "cuda"}) {
      GstElement *e = gst_element_factory_make(name, nullptr);
      ASSERT_NE(e, nullptr);
      gst_util_set_object_arg(G_OBJECT(e), "backend", backend);
      gst_element_set_context(e, context);
      GstPad *src = gst_element_get_static_pad(e, "src");
      GstQuery *q = gst_query_new_context("gst.cuda.context");
      const gboolean answered = gst_pad_query(src, q);
      EXPECT_EQ(answered, std::string(backend) == "cuda") << name << " backend=" << backend;
      gst_query_unref(q);
      gst_object_unref(src);
      gst_object_unref(e);
    }
  }
  gst_context_unref(context);
  gst_object_unref(ctx);
#endif
  if (!have_nvcodec_copies()) GTEST_SKIP() << "nvcodec's cudaupload/cudadownload missing";
  const std::string src =
      "videotestsrc num-buffers=6 pattern=ball ! "
      "video/x-raw,format=BGRx,width=160,height=120,framerate=30/1 ! ";
  const RunResult a =
      run(src +
              "cudaupload ! cudadownload ! video/x-raw,format=BGRx ! "
              "cudagrayscale name=g backend=cpu ! video/x-raw,format=BGRx ! "
              "cudadiffenc stream-version=1 backend=cpu threshold=0 ! fakesink name=out",
          {"g"});
  ASSERT_EQ(a.error, "");
  const RunResult b =
      run(src +
          "cudagrayscale backend=cpu ! video/x-raw,format=BGRx ! "
          "cudadiffenc stream-version=1 backend=cpu threshold=0 ! fakesink name=out");
  ASSERT_EQ(b.error, "");
  EXPECT_EQ(a.frames.size(), 6u);
  expect_same_frames(a, b);
  std::printf("backend=cpu got %d of %d frames in CUDA memory\n", a.sink_counts.at("g").cuda,
              a.sink_counts.at("g").buffers);
}

// CUDA memory of another driver context (contexts not shared): copied
// through the host into the element's device frames, the same pictures, one
// warning that says what to do.
TEST(CudaMemory, ForeignContextIsCopiedWithAWarning) {
#if CUDADIFF_HAVE_GST_CUDA
  if (!have_nvcodec_copies()) GTEST_SKIP() << "nvcodec's cudaupload/cudadownload missing";
  GstCudaContext *ctx_up = gst_cuda_context_new(0), *ctx_filter = gst_cuda_context_new(0);
  ASSERT_NE(ctx_up, nullptr);
  ASSERT_NE(ctx_filter, nullptr);
  RunOptions opts;
  opts.prepare = [&](GstElement *pipeline) {
    for (auto pair : {std::make_pair("up", ctx_up), std::make_pair("g", ctx_filter),
                      std::make_pair("h", ctx_filter)}) {
      GstElement *e = gst_bin_get_by_name(GST_BIN(pipeline), pair.first);
      GstContext *c = gst_context_new_cuda_context(pair.second);
      gst_element_set_context(e, c);
      gst_context_unref(c);
      gst_object_unref(e);
    }
  };
  // CUDA memory out of cudaupload (through identity, which otherwise lets it
  // settle on system memory), and identity answers no allocation query:
  // cudaupload writes into a pool of its own context.
  const RunResult a = run(std::string(kSource) +
                              " ! cudaupload name=up ! video/x-raw(memory:CUDAMemory) ! "
                              "identity drop-allocation=true ! "
                              "cudagauss name=g ! cudaheatmap name=h ! "
                              "video/x-raw,format=BGR ! fakesink name=out",
                          {"up", "g", "h"}, opts);
  ASSERT_EQ(a.error, "");
  const RunResult b = run(std::string(kSource) +
                          " ! cudagauss ! video/x-raw,format=BGR ! cudaheatmap ! "
                          "video/x-raw,format=BGR ! fakesink name=out");
  ASSERT_EQ(b.error, "");
  EXPECT_EQ(a.frames.size(), 12u);
  expect_same_frames(a, b);
  // It really was CUDA memory of the other context...
  EXPECT_EQ(a.sink_counts.at("g").cuda, 12);
  EXPECT_EQ(a.sink_counts.at("g").context, static_cast<gpointer>(ctx_up));
  // ...while g and h share theirs in CUDA memory.
  EXPECT_EQ(a.counts.at("g").cuda, 12);
  EXPECT_EQ(a.counts.at("g").context, static_cast<gpointer>(ctx_filter));
  int warned = 0;
  for (const std::string &w : a.warnings)
    if (w.rfind("g: ", 0) == 0 && w.find("another CUDA context") != std::string::npos) ++warned;
  EXPECT_EQ(warned, 1) << "warnings: " << a.warnings.size();
  gst_object_unref(ctx_up);
  gst_object_unref(ctx_filter);
#else
  GTEST_SKIP() << "built without gstreamer-cuda-1.0";
#endif
}

// cudadiffenc likewise, versions 1 and 2: CUDA memory of another context
// is encoded into the same packets as the frames in system memory, with one
// warning that says what to do.
TEST(CudaMemory, EncoderWarnsOfAForeignContext) {
#if CUDADIFF_HAVE_GST_CUDA
  if (!have_nvcodec_copies()) GTEST_SKIP() << "nvcodec's cudaupload/cudadownload missing";
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    GstCudaContext *ctx_up = gst_cuda_context_new(0), *ctx_enc = gst_cuda_context_new(0);
    ASSERT_NE(ctx_up, nullptr);
    ASSERT_NE(ctx_enc, nullptr);
    RunOptions opts;
    opts.prepare = [&](GstElement *pipeline) {
      for (auto pair : {std::make_pair("up", ctx_up), std::make_pair("e", ctx_enc)}) {
        GstElement *e = gst_bin_get_by_name(GST_BIN(pipeline), pair.first);
        GstContext *c = gst_context_new_cuda_context(pair.second);
        gst_element_set_context(e, c);
        gst_context_unref(c);
        gst_object_unref(e);
      }
    };
    const std::string enc = "cudadiffenc name=e stream-version=" + std::to_string(version) +
                            " threshold=10 ! fakesink name=out";
    const RunResult a = run(std::string(kSource) +
                                " ! cudaupload name=up ! video/x-raw(memory:CUDAMemory) ! "
                                "identity drop-allocation=true ! " +
                                enc,
                            {"up", "e"}, opts);
    ASSERT_EQ(a.error, "");
    const RunResult b = run(std::string(kSource) + " ! " + enc);
    ASSERT_EQ(b.error, "");
    EXPECT_EQ(a.frames.size(), 12u);
    expect_same_frames(a, b);
    EXPECT_EQ(a.sink_counts.at("e").cuda, 12);
    EXPECT_EQ(a.sink_counts.at("e").context, static_cast<gpointer>(ctx_up));
    int warned = 0;
    for (const std::string &w : a.warnings)
      if (w.rfind("e: ", 0) == 0 && w.find("another CUDA context") != std::string::npos) ++warned;
    EXPECT_EQ(warned, 1) << "warnings: " << a.warnings.size();
    EXPECT_TRUE(b.warnings.empty());
    gst_object_unref(ctx_up);
    gst_object_unref(ctx_enc);
  }
#else
  GTEST_SKIP() << "built without gstreamer-cuda-1.0";
#endif
}

// Frame overlap engages: with it, each frame leaves only once the next one
// has entered (the last at EOS); without it, at once. Same frames either way.
// It reports its frame of delay in the latency.
TEST(CudaMemory, FrameOverlapHoldsOneFrameAndReportsItsLatency) {
  std::map<std::string, std::vector<int>> entered_at_push;
  std::map<std::string, std::vector<std::string>> frames;
  for (const char *overlap : {"never", "always"}) {
    int entered = 0;
    std::vector<int> &seen = entered_at_push[overlap];
    RunOptions opts;
    opts.prepare = [&](GstElement *pipeline) {
      GstElement *f = gst_bin_get_by_name(GST_BIN(pipeline), "f");
      GstPad *sink = gst_element_get_static_pad(f, "sink");
      GstPad *src = gst_element_get_static_pad(f, "src");
      gst_pad_add_probe(
          sink, GST_PAD_PROBE_TYPE_BUFFER,
          [](GstPad *, GstPadProbeInfo *, gpointer d) {
            ++*static_cast<int *>(d);
            return GST_PAD_PROBE_OK;
          },
          &entered, nullptr);
      struct Ctx {
        int *entered;
        std::vector<int> *seen;
      };
      gst_pad_add_probe(
          src, GST_PAD_PROBE_TYPE_BUFFER,
          [](GstPad *, GstPadProbeInfo *, gpointer d) {
            auto *c = static_cast<Ctx *>(d);
            c->seen->push_back(*c->entered);
            return GST_PAD_PROBE_OK;
          },
          new Ctx{&entered, &seen}, [](gpointer d) { delete static_cast<Ctx *>(d); });
      gst_object_unref(sink);
      gst_object_unref(src);
      gst_object_unref(f);
    };
    const RunResult r =
        run(std::string("videotestsrc num-buffers=6 pattern=ball ! "
                        "video/x-raw,format=RGBA,width=200,height=90,framerate=30/1 ! "
                        "cudagauss name=f frame-overlap=") +
                overlap + " ! video/x-raw ! fakesink name=out",
            {}, opts);
    ASSERT_EQ(r.error, "") << overlap;
    frames[overlap] = r.frames;
  }
  EXPECT_EQ(entered_at_push["never"], (std::vector<int>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(entered_at_push["always"], (std::vector<int>{2, 3, 4, 5, 6, 6}));
  ASSERT_EQ(frames["never"].size(), 6u);
  EXPECT_TRUE(frames["never"] == frames["always"]);

  // Latency of a live pipeline: one frame (1/30 s) more with overlap.
  std::map<std::string, GstClockTime> min_latency;
  for (const char *overlap : {"never", "always"}) {
    std::atomic<int> arrived{0};  // written by a probe: it outlives the pipeline
    Pipe p(std::string("videotestsrc is-live=true pattern=ball ! "
                       "video/x-raw,format=RGBA,width=200,height=90,framerate=30/1 ! "
                       "cudagauss name=f frame-overlap=") +
           overlap + " ! video/x-raw ! fakesink name=out");
    GstElement *out = p.get("out");
    GstPad *sink = gst_element_get_static_pad(out, "sink");
    gst_pad_add_probe(
        sink, GST_PAD_PROBE_TYPE_BUFFER,
        [](GstPad *, GstPadProbeInfo *, gpointer d) {
          ++*static_cast<std::atomic<int> *>(d);
          return GST_PAD_PROBE_OK;
        },
        &arrived, nullptr);
    gst_element_set_state(p.pipeline, GST_STATE_PLAYING);
    ASSERT_EQ(gst_element_get_state(p.pipeline, nullptr, nullptr, 20 * GST_SECOND),
              GST_STATE_CHANGE_SUCCESS);
    // Caps are set (and overlap decided) once frames flow.
    for (int i = 0; i < 400 && arrived < 3; ++i) g_usleep(10000);
    ASSERT_GE(arrived, 3);
    GstQuery *q = gst_query_new_latency();
    ASSERT_TRUE(gst_pad_peer_query(sink, q));
    gboolean live = FALSE;
    GstClockTime min = 0, max = 0;
    gst_query_parse_latency(q, &live, &min, &max);
    EXPECT_TRUE(live);
    min_latency[overlap] = min;
    gst_query_unref(q);
    gst_element_set_state(p.pipeline, GST_STATE_NULL);  // before `arrived` goes
    gst_object_unref(sink);
    gst_object_unref(out);
  }
  EXPECT_EQ(min_latency["always"] - min_latency["never"],
            gst_util_uint64_scale_int(GST_SECOND, 1, 30));
}

// Frame overlap with host and device frames alternating under system
// memory caps (CUDA memory of the element's own context, as GStreamer
// 1.22's cudadownload passes on). A device frame is processed at once,
// into the output slot the overlapped host frame before it may still be
// downloading from (4K frames: the download lasts far longer than the
// kernels); every frame must still come out as processed alone, in order.
TEST(CudaMemory, FrameOverlapWithHostAndDeviceFramesAlternating) {
#if CUDADIFF_HAVE_GST_CUDA
  constexpr int w = 3840, h = 2160, n = 8;
  const GstVideoInfo info = bgrx_info(w, h);
  const auto fill = [](GstVideoFrame *f, int t) {
    for (int y = 0; y < h; ++y) {
      guint8 *row = gst_test::pixel(f, 0, 0, y);
      for (int x = 0; x < w * 4; ++x) row[x] = guint8((x ^ y) * (t + 1) + t * 37 + (x * y >> 9));
    }
  };
  const auto pixels_of = [&](GstBuffer *b) { return packed_pixels(b, info); };
  std::vector<std::vector<guint8>> got[2];
  for (int overlap = 0; overlap < 2; ++overlap) {
    SCOPED_TRACE(overlap ? "frame-overlap=always, host and device frames" : "host frames alone");
    GstHarness *hr = gst_harness_new_parse(overlap ? "cudagauss backend=cuda frame-overlap=always"
                                                   : "cudagauss backend=cuda frame-overlap=never");
    gst_harness_set_src_caps_str(hr, gst_test::raw_caps("BGRx", w, h).c_str());
    GstBufferPool *pool = nullptr;
    if (overlap) {
      // The element's own CUDA context, from its answer to a context query.
      GstElement *g = gst_harness_find_element(hr, "cudagauss");
      ASSERT_NE(g, nullptr);
      GstPad *sink = gst_element_get_static_pad(g, "sink");
      GstQuery *q = gst_query_new_context("gst.cuda.context");
      ASSERT_TRUE(gst_pad_query(sink, q));
      GstContext *c = nullptr;
      gst_query_parse_context(q, &c);
      ASSERT_NE(c, nullptr);
      GstCudaContext *ctx = nullptr;
      ASSERT_TRUE(gst_structure_get(gst_context_get_structure(c), "gst.cuda.context",
                                    GST_TYPE_CUDA_CONTEXT, &ctx, nullptr));
      gst_query_unref(q);
      gst_object_unref(sink);
      gst_object_unref(g);
      pool = gst_cuda_buffer_pool_new(ctx);
      gst_object_unref(ctx);
      GstStructure *config = gst_buffer_pool_get_config(pool);
      GstCaps *caps = gst_caps_from_string(
          "video/x-raw(memory:CUDAMemory),format=BGRx,width=3840,height=2160,framerate=30/1");
      gst_buffer_pool_config_set_params(config, caps, guint(GST_VIDEO_INFO_SIZE(&info)), 0, 0);
      gst_buffer_pool_config_add_option(config, GST_BUFFER_POOL_OPTION_VIDEO_META);
      gst_caps_unref(caps);
      ASSERT_TRUE(gst_buffer_pool_set_config(pool, config));
      ASSERT_TRUE(gst_buffer_pool_set_active(pool, TRUE));
    }
    // Every input made first: the frames then follow each other at once.
    std::vector<GstBuffer *> inputs;
    for (int t = 0; t < n; ++t) {
      GstBuffer *in = nullptr;
      if (pool && t % 2 == 1) {
        ASSERT_EQ(gst_buffer_pool_acquire_buffer(pool, &in, nullptr), GST_FLOW_OK);
        GstVideoFrame f;
        ASSERT_TRUE(gst_video_frame_map(&f, &info, in, GST_MAP_WRITE));
        fill(&f, t);
        gst_video_frame_unmap(&f);
        ASSERT_TRUE(is_cuda_memory(gst_buffer_peek_memory(in, 0)));
        // Uploaded now, so that the element finds it on the device and its
        // kernels start at once (no upload in its mapping to wait for).
        GstMapInfo map;
        ASSERT_TRUE(gst_buffer_map(in, &map, GstMapFlags(GST_MAP_READ | GST_MAP_CUDA)));
        gst_buffer_unmap(in, &map);
        GST_BUFFER_PTS(in) = gst_util_uint64_scale(t, GST_SECOND, 30);
        GST_BUFFER_DURATION(in) = gst_util_uint64_scale(1, GST_SECOND, 30);
      } else {
        in = gst_test::make_buffer(
            info, [&](GstVideoFrame *f) { fill(f, t); }, t);
      }
      inputs.push_back(in);
    }
    for (int t = 0; t < n; ++t) {
      GstBuffer *in = inputs[size_t(t)];
      ASSERT_EQ(gst_harness_push(hr, in), GST_FLOW_OK);
      while (GstBuffer *out = gst_harness_try_pull(hr)) {
        EXPECT_EQ(GST_BUFFER_PTS(out), gst_util_uint64_scale(got[overlap].size(), GST_SECOND, 30));
        got[overlap].push_back(pixels_of(out));
        gst_buffer_unref(out);
      }
    }
    EXPECT_TRUE(gst_harness_push_event(hr, gst_event_new_eos()));
    while (GstBuffer *out = gst_harness_try_pull(hr)) {
      got[overlap].push_back(pixels_of(out));
      gst_buffer_unref(out);
    }
    gst_harness_teardown(hr);
    if (pool) {
      gst_buffer_pool_set_active(pool, FALSE);
      gst_object_unref(pool);
    }
    ASSERT_EQ(got[overlap].size(), size_t(n));
  }
  for (int t = 0; t < n; ++t) EXPECT_TRUE(got[0][size_t(t)] == got[1][size_t(t)]) << "frame " << t;
#else
  GTEST_SKIP() << "built without gstreamer-cuda-1.0";
#endif
}

// cudadiffdec chooses its output memory at each negotiation: CUDA memory
// while downstream takes it, system memory once downstream asks for a
// reconfigure with system memory only, CUDA memory again after the next;
// the pictures are the CPU backend's throughout.
TEST(CudaMemory, DecoderFollowsDownstreamAcrossReconfigure) {
#if CUDADIFF_HAVE_GST_CUDA
  constexpr int w = 64, h = 48, n = 9;
  const GstVideoInfo info = bgrx_info(w, h);
  GstHarness *enc = gst_harness_new_parse(
      "cudadiffenc backend=cpu threshold=0 keyframe-interval=0 frame-overlap=never");
  gst_harness_set_src_caps_str(enc, gst_test::raw_caps("BGRx", w, h).c_str());
  std::vector<GstBuffer *> packets;
  for (int t = 0; t < n; ++t) {
    ASSERT_EQ(gst_harness_push(enc, gst_test::make_buffer(
                                        info,
                                        [&](GstVideoFrame *f) {
                                          for (int y = 0; y < h; ++y)
                                            for (int x = 0; x < w * 4; ++x)
                                              *gst_test::pixel(f, 0, x, y) =
                                                  guint8(x * 3 + y * 7 + t * 29 + (x * y >> 4));
                                        },
                                        t)),
              GST_FLOW_OK);
    while (GstBuffer *p = gst_harness_try_pull(enc)) {
      if (GST_BUFFER_FLAG_IS_SET(p, GST_BUFFER_FLAG_HEADER))
        gst_buffer_unref(p);
      else
        packets.push_back(p);
    }
  }
  gst_harness_teardown(enc);
  ASSERT_EQ(packets.size(), size_t(n));
  const auto pixels_of = [&](GstBuffer *b) { return packed_pixels(b, info); };
  const char *both = "video/x-raw(memory:CUDAMemory),format=BGRx; video/x-raw,format=BGRx";
  std::vector<std::vector<guint8>> pictures[2];
  std::vector<bool> in_cuda;
  for (int cuda = 0; cuda < 2; ++cuda) {
    GstHarness *dec = gst_harness_new_parse(cuda ? "cudadiffdec backend=cuda frame-overlap=never"
                                                 : "cudadiffdec backend=cpu frame-overlap=never");
    gst_harness_set_sink_caps_str(dec, both);
    gst_harness_set_src_caps_str(dec, "video/x-cudadiff");
    for (int t = 0; t < n; ++t) {
      // Frames 3-5: downstream takes system memory only; 6-8: both again.
      if (t == 3) gst_harness_set_sink_caps_str(dec, "video/x-raw,format=BGRx");
      if (t == 6) gst_harness_set_sink_caps_str(dec, both);
      ASSERT_EQ(gst_harness_push(dec, gst_buffer_ref(packets[size_t(t)])), GST_FLOW_OK);
      GstBuffer *out = gst_harness_pull(dec);
      ASSERT_NE(out, nullptr);
      pictures[cuda].push_back(pixels_of(out));
      if (cuda) {
        in_cuda.push_back(is_cuda_memory(gst_buffer_peek_memory(out, 0)));
        GstCaps *caps = gst_pad_get_current_caps(dec->sinkpad);
        ASSERT_NE(caps, nullptr);
        const bool caps_cuda =
            gst_caps_features_contains(gst_caps_get_features(caps, 0), "memory:CUDAMemory");
        EXPECT_EQ(caps_cuda, bool(in_cuda.back())) << "frame " << t;
        gst_caps_unref(caps);
      }
      gst_buffer_unref(out);
    }
    gst_harness_teardown(dec);
  }
  EXPECT_EQ(in_cuda, (std::vector<bool>{true, true, true, false, false, false, true, true, true}));
  for (int t = 0; t < n; ++t)
    EXPECT_TRUE(pictures[0][size_t(t)] == pictures[1][size_t(t)]) << "frame " << t;
  for (GstBuffer *p : packets) gst_buffer_unref(p);
#else
  GTEST_SKIP() << "built without gstreamer-cuda-1.0";
#endif
}

// A start that fails (the device-id of a device that does not exist) does
// not keep CUDA memory off at the next start: the filters' and the
// encoder's caps offer CUDA memory again, first.
TEST(CudaMemory, FailedStartDoesNotKeepCudaMemoryOff) {
#if CUDADIFF_HAVE_GST_CUDA
  for (const char *name : {"cudagauss", "cudagrayscale", "cudadiffenc"}) {
    SCOPED_TRACE(name);
    GstElement *e = gst_element_factory_make(name, nullptr);
    ASSERT_NE(e, nullptr);
    gst_object_ref_sink(e);
    gst_util_set_object_arg(G_OBJECT(e), "backend", "cuda");
    const auto cuda_first = [&] {
      GstPad *pad =
          gst_element_get_static_pad(e, std::string(name) == "cudadiffenc" ? "sink" : "src");
      GstCaps *caps = gst_pad_query_caps(pad, nullptr);
      const bool first =
          caps && !gst_caps_is_empty(caps) && !gst_caps_is_any(caps) &&
          gst_caps_features_contains(gst_caps_get_features(caps, 0), "memory:CUDAMemory");
      if (caps) gst_caps_unref(caps);
      gst_object_unref(pad);
      return first;
    };
    g_object_set(e, "device-id", 7, nullptr);
    EXPECT_EQ(gst_element_set_state(e, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
    gst_element_set_state(e, GST_STATE_NULL);
    g_object_set(e, "device-id", 0, nullptr);
    ASSERT_NE(gst_element_set_state(e, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
    EXPECT_TRUE(cuda_first()) << "CUDA memory stayed off after the failed start";
    gst_element_set_state(e, GST_STATE_NULL);
    gst_object_unref(e);
  }
#else
  GTEST_SKIP() << "built without gstreamer-cuda-1.0";
#endif
}

// A gap in the frames, one that QoS makes (qos=true, a frame late) or one
// upstream marks (a DISCONT input), puts DISCONT on the first frame after
// it, with frames overlapping as without (with overlap the base class
// would put it on the next buffer it pushes: the frame before the gap).
TEST(CudaMemory, FrameOverlapKeepsDiscontAfterTheGap) {
  constexpr int w = 160, h = 120;
  const GstVideoInfo info = bgrx_info(w, h);
  for (const char *overlap : {"never", "always"}) {
    SCOPED_TRACE(std::string("frame-overlap=") + overlap);
    GstHarness *hr = gst_harness_new_parse(
        (std::string("cudagauss backend=cuda qos=true frame-overlap=") + overlap).c_str());
    gst_harness_set_src_caps_str(hr, gst_test::raw_caps("BGRx", w, h).c_str());
    std::vector<int> frames, discont;
    const auto pull = [&] {
      while (GstBuffer *out = gst_harness_try_pull(hr)) {
        const int t = int(gst_util_uint64_scale_round(GST_BUFFER_PTS(out), 30, GST_SECOND));
        frames.push_back(t);
        if (GST_BUFFER_FLAG_IS_SET(out, GST_BUFFER_FLAG_DISCONT) && t > 0) discont.push_back(t);
        gst_buffer_unref(out);
      }
    };
    for (int t = 0; t < 8; ++t) {
      // Frame 3 late: QoS says so before it arrives.
      if (t == 3) {
        EXPECT_TRUE(gst_harness_push_upstream_event(
            hr, gst_event_new_qos(GST_QOS_TYPE_UNDERFLOW, 1.0, 0,
                                  gst_util_uint64_scale(3, GST_SECOND, 30))));
      }
      GstBuffer *in = gst_test::make_buffer(
          info, [&](GstVideoFrame *f) { *gst_test::pixel(f, 0, 0, 0) = guint8(t); }, t);
      if (t == 6) GST_BUFFER_FLAG_SET(in, GST_BUFFER_FLAG_DISCONT);
      ASSERT_EQ(gst_harness_push(hr, in), GST_FLOW_OK);
      pull();
    }
    EXPECT_TRUE(gst_harness_push_event(hr, gst_event_new_eos()));
    pull();
    gst_harness_teardown(hr);
    EXPECT_EQ(frames, (std::vector<int>{0, 1, 2, 4, 5, 6, 7}));
    EXPECT_EQ(discont, (std::vector<int>{4, 6}));
  }
}

// cudatextoverlay in CUDA memory before a consumer that does not honour
// the pending mark (the harness, as GStreamer 1.22's own CUDA elements):
// every frame leaves finished and unmarked, blended or passed through. The
// frame at a switch to pass-through was made by cudagauss while it still
// took the overlay's word that the overlay waits for marked frames; the
// overlay now waits for it.
TEST(CudaMemory, TextOverlayPassThroughFinishesMarkedFrames) {
#if CUDADIFF_HAVE_GST_CUDA
  GstHarness *h =
      gst_harness_new_parse("cudagauss backend=cuda ! cudatextoverlay backend=cuda text=hi");
  gst_harness_set_sink_caps_str(h, "video/x-raw(memory:CUDAMemory),format=BGRx");
  gst_harness_set_src_caps_str(h, gst_test::raw_caps("BGRx", 640, 480).c_str());
  // (the mark's type, registered by the plugin)
  const GType pending = g_type_from_name("GstCudaDiffPendingMetaAPI");
  ASSERT_NE(pending, G_TYPE_INVALID);
  GstElement *overlay = gst_harness_find_element(h, "cudatextoverlay");
  ASSERT_NE(overlay, nullptr);
  const GstVideoInfo info = bgrx_info(640, 480);
  for (int t = 0; t < 6; ++t) {
    if (t == 2) g_object_set(overlay, "text", "", nullptr);  // pass-through from frame 2
    if (t == 4) g_object_set(overlay, "text", "again", nullptr);
    GstBuffer *out = gst_harness_push_and_pull(
        h, gst_test::make_buffer(
               info, [&](GstVideoFrame *f) { *gst_test::pixel(f, 0, 0, 0) = guint8(t); }, t));
    ASSERT_NE(out, nullptr);
    EXPECT_TRUE(is_cuda_memory(gst_buffer_peek_memory(out, 0))) << "frame " << t;
    EXPECT_EQ(gst_buffer_get_meta(out, pending), nullptr) << "frame " << t << " left marked";
    gst_buffer_unref(out);
  }
  gst_object_unref(overlay);
  gst_harness_teardown(h);
#else
  GTEST_SKIP() << "built without gstreamer-cuda-1.0";
#endif
}

// The reports of a cudanoisevis in CUDA memory, whose last frame stays on
// the GPU without a wait (downstream orders its work after it): at EOS that
// frame is finished (so the report's timestamp is its own) and the report
// over the frames since the last one is posted, as the CPU backend's. 5
// frames, reports every 3.
TEST(CudaMemory, LastFrameOnTheGpuIsFinishedAtEos) {
  const std::string head =
      "videotestsrc num-buffers=5 pattern=ball ! video/x-raw,format=BGR,width=320,height=240 ! ";
  auto reports = [&](const char *backend) {
    const std::string b = std::string(" backend=") + backend;
    const std::string mem = std::string(backend) == "cuda" ? "(memory:CUDAMemory)" : "";
    const std::string desc = head + "cudagauss" + b + " ! video/x-raw" + mem +
                             " ! cudanoisevis name=n stats-interval=3" + b + " ! video/x-raw" +
                             mem + " ! cudaheatmap" + b + " ! video/x-raw,format=BGR ! fakesink";
    GstElement *pipeline = gst_parse_launch(desc.c_str(), nullptr);
    EXPECT_NE(pipeline, nullptr) << desc;
    std::vector<std::string> texts;
    if (!pipeline) return texts;
    gst_element_set_state(pipeline, GST_STATE_PLAYING);
    GstBus *bus = gst_element_get_bus(pipeline);
    for (;;) {
      GstMessage *m = gst_bus_timed_pop_filtered(
          bus, 30 * GST_SECOND,
          static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_ELEMENT));
      EXPECT_NE(m, nullptr) << "timeout";
      if (!m) break;
      const GstMessageType type = GST_MESSAGE_TYPE(m);
      if (type == GST_MESSAGE_ELEMENT && std::string(GST_OBJECT_NAME(GST_MESSAGE_SRC(m))) == "n") {
        gchar *str = gst_structure_to_string(gst_message_get_structure(m));
        texts.push_back(str);
        g_free(str);
      }
      EXPECT_NE(type, GST_MESSAGE_ERROR) << desc;
      gst_message_unref(m);
      if (type != GST_MESSAGE_ELEMENT) break;
    }
    gst_object_unref(bus);
    gst_element_set_state(pipeline, GST_STATE_NULL);
    gst_object_unref(pipeline);
    return texts;
  };
  const std::vector<std::string> cuda = reports("cuda");
  const std::vector<std::string> cpu = reports("cpu");
  ASSERT_EQ(cpu.size(), 2u);
  EXPECT_NE(cpu[1].find(", frames=(uint)2,"), std::string::npos) << cpu[1];
  EXPECT_EQ(cuda, cpu);
}

// Pinned memory allocated while a CUDA context of its own is current (as
// in a pipeline whose context an nvcodec element made) outlives that
// context: the core allocates it in the device's primary context. (Before,
// it belonged to the current context and went with it: a buffer an
// application still held after the pipeline was gone pointed at nothing.)
TEST(CudaMemory, PinnedMemoryOutlivesTheContextCurrentAtItsAllocation) {
#if CUDADIFF_HAVE_GST_CUDA
  GstCudaContext *own = gst_cuda_context_new(0);
  ASSERT_NE(own, nullptr);
  ASSERT_TRUE(gst_cuda_context_push(own));
  constexpr size_t n = 1 << 20;
  bool pinned = false;
  void *p = cudadiff::host_alloc(n, &pinned);
  CUcontext popped = nullptr;
  gst_cuda_context_pop(&popped);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(pinned);
  std::memset(p, 0x5a, n);
  gst_object_unref(own);  // its driver context is destroyed
  auto *bytes = static_cast<volatile uint8_t *>(p);
  EXPECT_EQ(bytes[n / 2], 0x5a);
  std::memset(p, 0xa5, n);
  EXPECT_EQ(bytes[n - 1], 0xa5);
  cudadiff::host_free(p, pinned);
#else
  GTEST_SKIP() << "built without gstreamer-cuda-1.0";
#endif
}

// The frames a CUDA pipeline keeps in system memory are page-locked: what
// upstream writes into a filter's and the encoder's proposed pools, and what
// a filter and the decoder write into their own pools. (Ordinary memory
// would work too, only its copies to and from the GPU are slower, so no
// other test notices a fall to it.) And the pictures are the CPU backend's.
TEST(CudaMemory, CudaElementsBuffersInSystemMemoryArePinned) {
  RunOptions opts;
  opts.count_pinned = true;
  const RunResult r = run_as_cpu(
      std::string(kSource) +
          " ! cudagauss backend=cuda name=filter ! video/x-raw ! cudadiffenc backend=cuda ! "
          "cudadiffdec backend=cuda name=dec ! video/x-raw ! fakesink name=out",
      std::string(kSource) +
          " ! cudagauss backend=cpu ! video/x-raw ! cudadiffenc backend=cpu ! "
          "cudadiffdec backend=cpu ! video/x-raw ! fakesink name=out",
      {"filter", "dec"}, opts);
  ASSERT_EQ(r.error, "");
  const PadCount &into_filter = r.sink_counts.at("filter"), &out_of_filter = r.counts.at("filter"),
                 &out_of_decoder = r.counts.at("dec");
  EXPECT_EQ(into_filter.buffers, 12);
  EXPECT_EQ(into_filter.pinned, 12) << "of the source's frames in the filter's pool";
  EXPECT_EQ(out_of_filter.buffers, 12);
  EXPECT_EQ(out_of_filter.pinned, 12) << "of the filter's frames in the encoder's pool";
  EXPECT_EQ(out_of_decoder.buffers, 12);
  EXPECT_EQ(out_of_decoder.pinned, 12) << "of the decoder's frames";
}

// A flushing seek in a CUDA memory chain: the frames after it are those of
// a fresh start (the heat map forgets its previous frame).
TEST(CudaMemory, FlushingSeekInCudaMemory) {
  PadCount between;  // written by a probe: it outlives the pipeline
  Pipe p(
      "videotestsrc pattern=ball ! video/x-raw,format=BGRx,width=160,height=120,framerate=30/1 "
      "! cudagauss name=a ! cudaheatmap name=b gain=4 ! video/x-raw,format=BGRx ! fakesink "
      "name=out");
  GstElement *a = p.get("a");
  GstPad *src = gst_element_get_static_pad(a, "src");
  gst_pad_add_probe(src, GST_PAD_PROBE_TYPE_BUFFER, count_memory, &between, nullptr);
  gst_object_unref(src);
  gst_object_unref(a);
  std::vector<std::vector<std::string>> runs;
  for (int i = 0; i < 3; ++i) {
    gst_element_set_state(p.pipeline, GST_STATE_PAUSED);
    ASSERT_NE(gst_element_get_state(p.pipeline, nullptr, nullptr, 20 * GST_SECOND),
              GST_STATE_CHANGE_FAILURE);
    ASSERT_TRUE(
        gst_element_seek(p.pipeline, 1.0, GST_FORMAT_TIME,
                         static_cast<GstSeekFlags>(GST_SEEK_FLAG_FLUSH | GST_SEEK_FLAG_ACCURATE),
                         GST_SEEK_TYPE_SET, (i == 2 ? 3 : 0) * GST_SECOND / 30, GST_SEEK_TYPE_SET,
                         (i == 2 ? 11 : 8) * GST_SECOND / 30));
    ASSERT_NE(gst_element_get_state(p.pipeline, nullptr, nullptr, 20 * GST_SECOND),
              GST_STATE_CHANGE_FAILURE);
    p.take_frames();  // the preroll frame of the seek counts in the next play
    gst_element_set_state(p.pipeline, GST_STATE_PLAYING);
    ASSERT_EQ(p.wait_eos(), "") << "run " << i;
    runs.push_back(p.take_frames());
  }
  ASSERT_GE(runs[0].size(), 7u);
  EXPECT_TRUE(runs[0] == runs[1]) << "a flush did not reset the chain";
  // Started three frames later: other pictures, the same count.
  EXPECT_EQ(runs[2].size(), runs[0].size());
  EXPECT_FALSE(runs[2] == runs[0]);
  EXPECT_GT(between.buffers, 0);
  EXPECT_EQ(between.cuda, between.buffers) << "cudagauss -> cudaheatmap left CUDA memory";
}

// Caps change mid-stream (a new size) in CUDA memory: the same frames as on
// system memory.
TEST(CudaMemory, CapsChangeInCudaMemory) {
  RunOptions opts;
  opts.feed = [](GstElement *pipeline) {
    GstElement *src = gst_bin_get_by_name(GST_BIN(pipeline), "src");
    int n = 0;
    for (auto size : {std::make_pair(160, 120), std::make_pair(96, 64), std::make_pair(33, 17)}) {
      gchar *str = g_strdup_printf("video/x-raw,format=BGRx,width=%d,height=%d,framerate=30/1",
                                   size.first, size.second);
      GstCaps *caps = gst_caps_from_string(str);
      g_free(str);
      for (int t = 0; t < 4; ++t, ++n) {
        const gsize bytes = static_cast<gsize>(size.first) * size.second * 4;
        GstBuffer *buf = gst_buffer_new_allocate(nullptr, bytes, nullptr);
        GstMapInfo map;
        gst_buffer_map(buf, &map, GST_MAP_WRITE);
        guint32 x = 2463534242u + 97u * n;
        for (gsize i = 0; i < bytes; ++i) {
          x ^= x << 13;
          x ^= x >> 17;
          x ^= x << 5;
          map.data[i] = static_cast<guint8>(i % 64 < 32 ? x : (i / 97 + t * 9));
        }
        gst_buffer_unmap(buf, &map);
        GST_BUFFER_PTS(buf) = n * GST_SECOND / 30;
        GST_BUFFER_DURATION(buf) = GST_SECOND / 30;
        GstSample *sample = gst_sample_new(buf, caps, nullptr, nullptr);
        GstFlowReturn ret = GST_FLOW_ERROR;
        g_signal_emit_by_name(src, "push-sample", sample, &ret);
        EXPECT_EQ(ret, GST_FLOW_OK);
        gst_sample_unref(sample);
        gst_buffer_unref(buf);
      }
      gst_caps_unref(caps);
    }
    GstFlowReturn ret = GST_FLOW_ERROR;
    g_signal_emit_by_name(src, "end-of-stream", &ret);
    gst_object_unref(src);
  };
  const std::string src = "appsrc name=src format=time max-bytes=0 ! ";
  const RunResult a =
      run(src +
              "cudagauss name=a ! cudaheatmap name=b gain=3 ! cudadiffenc "
              "stream-version=1 threshold=0 name=c ! cudadiffdec ! video/x-raw,format=BGRx ! "
              "fakesink name=out",
          {"a", "b"}, opts);
  ASSERT_EQ(a.error, "");
  const RunResult b =
      run(src +
              "cudagauss ! video/x-raw,format=BGRx ! cudaheatmap gain=3 ! "
              "video/x-raw,format=BGRx ! cudadiffenc stream-version=1 threshold=0 ! cudadiffdec "
              "! video/x-raw,format=BGRx ! fakesink name=out",
          {}, opts);
  ASSERT_EQ(b.error, "");
  EXPECT_EQ(a.frames.size(), 12u);
  expect_same_frames(a, b);
  EXPECT_EQ(a.counts.at("a").cuda, 12) << "cudagauss -> cudaheatmap left CUDA memory";
  EXPECT_EQ(a.counts.at("b").cuda, 12) << "cudaheatmap -> cudadiffenc left CUDA memory";
}

// Stop and start again (READY/NULL and back) with CUDA memory throughout:
// the same frames each time.
TEST(CudaMemory, StopAndRestartInCudaMemory) {
  PadCount into_g;  // written by a probe: it outlives the pipeline
  Pipe p(
      "videotestsrc num-buffers=6 pattern=ball ! "
      "video/x-raw,format=BGRx,width=176,height=144,framerate=30/1 ! cudagauss ! cudaheatmap "
      "gain=4 ! cudadiffenc stream-version=1 threshold=0 keyframe-interval=4 ! cudadiffdec ! "
      "cudagauss name=g "
      "kernel-size=5 ! video/x-raw,format=BGRx ! fakesink name=out");
  GstElement *g = p.get("g");
  GstPad *sink = gst_element_get_static_pad(g, "sink");
  gst_pad_add_probe(sink, GST_PAD_PROBE_TYPE_BUFFER, count_memory, &into_g, nullptr);
  gst_object_unref(sink);
  gst_object_unref(g);
  std::vector<std::vector<std::string>> runs;
  for (GstState between : {GST_STATE_NULL, GST_STATE_READY, GST_STATE_NULL}) {
    gst_element_set_state(p.pipeline, GST_STATE_PLAYING);
    ASSERT_EQ(p.wait_eos(), "");
    runs.push_back(p.take_frames());
    gst_element_set_state(p.pipeline, between);
    ASSERT_NE(gst_element_get_state(p.pipeline, nullptr, nullptr, 20 * GST_SECOND),
              GST_STATE_CHANGE_FAILURE);
  }
  ASSERT_EQ(runs[0].size(), 6u);
  EXPECT_TRUE(runs[1] == runs[0]);
  EXPECT_TRUE(runs[2] == runs[0]);
  EXPECT_EQ(into_g.buffers, 18);
  EXPECT_EQ(into_g.cuda, 18) << "cudadiffdec -> cudagauss left CUDA memory";
}

// ---- more than one GPU: the elements on a device other than 0 -----------
// Each of these tests skips on a machine with fewer than two CUDA devices.

namespace {

// Under this environment variable main() checks, after the tests, that
// device 0 has no primary context: MultiGpu.OnlyTheSecondDeviceLeavesTheFirstAlone
// runs the SecondDevice tests so, in a process of their own.
const char *const kFirstDeviceUntouched = "CUDADIFF_TEST_FIRST_DEVICE_UNTOUCHED";

// Whether device `ordinal`'s primary context is active, from the driver
// (libcuda) itself: 1 or 0, -1 when the driver cannot say. The CUDA runtime
// makes that context for any use on a thread without a current context,
// on device 0 unless told otherwise.
int primary_context_active(int ordinal) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return -1;
  using DeviceGet = int (*)(int *, int);
  using GetState = int (*)(int, unsigned int *, int *);
  auto device_get = reinterpret_cast<DeviceGet>(dlsym(lib, "cuDeviceGet"));
  auto get_state = reinterpret_cast<GetState>(dlsym(lib, "cuDevicePrimaryCtxGetState"));
  int result = -1, device = 0, active = 0;
  unsigned int flags = 0;
  if (device_get && get_state && device_get(&device, ordinal) == 0 &&
      get_state(device, &flags, &active) == 0)
    result = active ? 1 : 0;
  dlclose(lib);
  return result;
}

bool two_devices() {
  return cudadiff::device_count() >= 2;
}

// `element` (its factory name first, then its properties) with the backend
// and device-id given.
std::string on_device(const std::string &element, const std::string &backend, int device) {
  const size_t name_end = element.find(' ');
  const std::string factory = element.substr(0, name_end);
  const std::string props = name_end == std::string::npos ? "" : element.substr(name_end);
  return factory + " backend=" + backend + " device-id=" + std::to_string(device) + props;
}

// The usual source, then `middle(backend, device)`, into fakesink "out":
// with backend=cuda on device 1 the CPU backend's buffers.
void expect_second_device_as_cpu(
    const std::function<std::string(const char *backend, int device)> &middle) {
  const std::string head = std::string(kSource) + " ! ", tail = " ! fakesink name=out";
  run_as_cpu(head + middle("cuda", 1) + tail, head + middle("cpu", 0) + tail);
}

}  // namespace

// Every element with backend=cuda device-id=1 gives the CPU backend's bytes:
// the filters' frames (into system memory), the encoder's packets (both
// stream versions) and the decoder's pictures.
TEST(MultiGpu, SecondDeviceElementsGiveTheCpuBytes) {
  if (!two_devices()) GTEST_SKIP() << "fewer than two CUDA devices";
  std::vector<std::string> filters = {"cudagrayscale",
                                      "cudagauss kernel-size=7 sigma=2.0",
                                      "cudagauss method=median kernel-size=5",
                                      "cudabinarize",
                                      "cudaheatmap gain=4",
                                      "cudanoisevis threshold=10"};
  if (have_factory("cudatextoverlay"))
    filters.push_back("cudatextoverlay text=\"device 1\" shaded-background=true");
  for (const std::string &filter : filters) {
    SCOPED_TRACE(filter);
    expect_second_device_as_cpu([&](const char *backend, int device) {
      return on_device(filter, backend, device) + " ! video/x-raw";
    });
  }
  for (const char *version : {"1", "2"}) {
    SCOPED_TRACE(std::string("stream-version ") + version);
    const std::string enc =
        std::string("cudadiffenc threshold=5 keyframe-interval=5 stream-version=") + version;
    expect_second_device_as_cpu(
        [&](const char *backend, int device) { return on_device(enc, backend, device); });
    expect_second_device_as_cpu([&](const char *backend, int device) {
      return on_device(enc, "cpu", 0) + " ! " + on_device("cudadiffdec", backend, device) +
             " ! video/x-raw";
    });
  }
}

// A device-resident chain on device 1: nvcodec's copies and every element
// there, CUDA memory between them, one context, and that context on device 1.
TEST(MultiGpu, SecondDeviceCudaMemoryChain) {
  if (!two_devices()) GTEST_SKIP() << "fewer than two CUDA devices";
  if (!have_nvcodec_copies()) GTEST_SKIP() << "nvcodec's cudaupload/cudadownload missing";
  const RunResult a = run_as_cpu(
      std::string(kSource) +
          " ! cudaupload name=up cuda-device-id=1 ! cudagauss name=g device-id=1 ! "
          "cudabinarize name=b device-id=1 ! video/x-raw(memory:CUDAMemory),format=BGR ! "
          "cudaheatmap name=h device-id=1 ! cudadiffenc name=enc device-id=1 threshold=5 "
          "keyframe-interval=5 ! cudadiffdec name=dec device-id=1 ! "
          "video/x-raw(memory:CUDAMemory) ! cudadownload name=down cuda-device-id=1 ! "
          "video/x-raw,format=BGR ! fakesink name=out",
      std::string(kSource) +
          " ! cudagauss backend=cpu ! cudabinarize backend=cpu ! "
          "video/x-raw,format=BGR ! cudaheatmap backend=cpu ! cudadiffenc "
          "backend=cpu threshold=5 keyframe-interval=5 ! cudadiffdec backend=cpu ! "
          "video/x-raw,format=BGR ! fakesink name=out",
      {"up", "g", "b", "h", "enc", "dec", "down"});
  ASSERT_EQ(a.error, "");
  expect_cuda_between(a, {"up", "g", "b", "h", "dec"}, 12);
  expect_one_context(a, {"up", "g", "b", "h", "enc", "dec", "down"});
  for (const auto &entry : a.context_devices) EXPECT_EQ(entry.second, 1) << entry.first;
  EXPECT_TRUE(a.warnings.empty()) << a.warnings.front();
}

// Elements on different devices in one pipeline. CUDA memory of device 0
// into an element on device 1 goes through the host (the same pictures,
// one warning that says what to do); the encoder on device 1 and the
// decoder on device 0 exchange packets as always.
TEST(MultiGpu, ElementsOnBothDevicesInOnePipeline) {
  if (!two_devices()) GTEST_SKIP() << "fewer than two CUDA devices";
  const RunResult a =
      run_as_cpu(std::string(kSource) +
                     " ! cudagauss name=g0 device-id=0 ! cudaheatmap name=h1 device-id=1 "
                     "gain=4 ! cudadiffenc name=enc device-id=1 threshold=5 "
                     "keyframe-interval=5 ! cudadiffdec name=dec device-id=0 ! "
                     "cudagauss name=g1 device-id=1 ! video/x-raw,format=BGR ! "
                     "fakesink name=out",
                 std::string(kSource) +
                     " ! cudagauss backend=cpu ! video/x-raw,format=BGR ! cudaheatmap "
                     "backend=cpu gain=4 ! cudadiffenc backend=cpu threshold=5 "
                     "keyframe-interval=5 ! cudadiffdec backend=cpu ! cudagauss backend=cpu ! "
                     "video/x-raw,format=BGR ! fakesink name=out",
                 {"g0", "h1", "enc", "dec", "g1"});
  ASSERT_EQ(a.error, "");
  EXPECT_EQ(a.context_devices.at("g0"), 0);
  EXPECT_EQ(a.context_devices.at("dec"), 0);
  EXPECT_EQ(a.context_devices.at("h1"), 1);
  EXPECT_EQ(a.context_devices.at("enc"), 1);
  EXPECT_EQ(a.context_devices.at("g1"), 1);
  // Where CUDA memory crossed devices, it said so; nothing else warned.
  for (const std::string &w : a.warnings)
    EXPECT_NE(w.find("another CUDA context"), std::string::npos) << w;
  if (a.counts.at("g0").cuda > 0) {
    EXPECT_EQ(a.counts.at("g0").cuda, 12);
    int warned = 0;
    for (const std::string &w : a.warnings) warned += w.rfind("h1: ", 0) == 0;
    EXPECT_EQ(warned, 1);
  }
  std::printf("device 0 -> device 1: %d of %d frames in CUDA memory; %zu warning(s)\n",
              a.counts.at("g0").cuda, a.counts.at("g0").buffers, a.warnings.size());
}

// Two pipelines at once, one on each device: each gives the CPU's bytes.
TEST(MultiGpu, OnePipelinePerDeviceAtOnce) {
  if (!two_devices()) GTEST_SKIP() << "fewer than two CUDA devices";
  auto desc = [](const char *backend, int device) {
    return "videotestsrc num-buffers=60 pattern=ball ! "
           "video/x-raw,format=BGR,width=640,height=480,framerate=30/1 ! " +
           on_device("cudagauss", backend, device) + " ! " +
           on_device("cudadiffenc threshold=5 keyframe-interval=10", backend, device) + " ! " +
           on_device("cudadiffdec", backend, device) +
           " ! video/x-raw,format=BGR ! fakesink name=out";
  };
  RunResult on[2];
  std::thread second([&] { on[1] = run(desc("cuda", 1)); });
  on[0] = run(desc("cuda", 0));
  second.join();
  const RunResult cpu = run(desc("cpu", 0));
  ASSERT_EQ(cpu.error, "");
  ASSERT_EQ(cpu.frames.size(), 60u);
  for (int device = 0; device < 2; ++device) {
    SCOPED_TRACE("device " + std::to_string(device));
    ASSERT_EQ(on[device].error, "");
    expect_same_frames(on[device], cpu);
  }
}

namespace {

// Runs the tests that `filter` selects in a process of their own, with
// kFirstDeviceUntouched set: its main() then says, after them, whether
// device 0 has a primary context. Its exit status and output.
struct Child {
  bool exited_zero = false;
  std::string output;
};
Child run_child(const std::string &filter) {
  Child child;
  const std::string filter_arg = "--gtest_filter=" + filter;
  gchar *argv[] = {const_cast<gchar *>("/proc/self/exe"), const_cast<gchar *>(filter_arg.c_str()),
                   const_cast<gchar *>("--gtest_color=no"), nullptr};
  gchar **env = g_environ_setenv(g_get_environ(), kFirstDeviceUntouched, "1", TRUE);
  // googletest's own variables (shards, a filter, colours) stay with this process.
  for (const char *name : {"GTEST_TOTAL_SHARDS", "GTEST_SHARD_INDEX", "GTEST_FILTER", "GTEST_COLOR",
                           "GTEST_SHARD_STATUS_FILE", "GTEST_OUTPUT"})
    env = g_environ_unsetenv(env, name);
  gchar *out = nullptr, *err = nullptr;
  gint status = 0;
  GError *error = nullptr;
  const gboolean spawned = g_spawn_sync(nullptr, argv, env, G_SPAWN_DEFAULT, nullptr, nullptr, &out,
                                        &err, &status, &error);
  g_strfreev(env);
  if (!spawned) {
    child.output = std::string("spawn failed: ") + (error ? error->message : "");
    if (error) g_error_free(error);
    return child;
  }
  child.output = std::string(out ? out : "") + (err ? err : "");
  g_free(out);
  g_free(err);
  child.exited_zero = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return child;
}

}  // namespace

// An application that works on device 1 alone makes no context on device 0
// (which would take memory there and show the process on that GPU): the
// SecondDevice tests above in a process of their own, then device 0's
// primary context, which the CUDA runtime makes when it is used on a thread
// without a context.
TEST(MultiGpu, OnlyTheSecondDeviceLeavesTheFirstAlone) {
  if (!two_devices()) GTEST_SKIP() << "fewer than two CUDA devices";
  if (g_getenv(kFirstDeviceUntouched)) GTEST_SKIP() << "(in the process that runs the others)";
  const Child child = run_child("MultiGpu.SecondDevice*");
  EXPECT_TRUE(child.exited_zero) << child.output;
  EXPECT_NE(child.output.find("[       OK ] MultiGpu.SecondDeviceElementsGiveTheCpuBytes"),
            std::string::npos)
      << child.output;
  EXPECT_EQ(child.output.find("[  FAILED  ]"), std::string::npos) << child.output;
  EXPECT_NE(child.output.find("device 0: no primary context"), std::string::npos) << child.output;
}

// Every element with backend=cpu, on a machine with a GPU: the frames come
// through (run by CpuBackend.MakesNoCudaContext in a process of its own).
TEST(CpuBackendAlone, EveryElementRuns) {
  if (!g_getenv(kFirstDeviceUntouched)) GTEST_SKIP() << "run by CpuBackend.MakesNoCudaContext";
  std::string chain =
      "cudagauss backend=cpu ! cudabinarize backend=cpu ! video/x-raw,format=BGR "
      "! cudaheatmap backend=cpu ! cudanoisevis backend=cpu ! "
      "video/x-raw,format=BGR ! cudagrayscale backend=cpu method=bt709 ! "
      "video/x-raw,format=BGR";
  if (have_factory("cudatextoverlay")) chain += " ! cudatextoverlay backend=cpu text=cpu";
  for (const char *version : {"1", "2"}) {
    SCOPED_TRACE(std::string("stream-version ") + version);
    const RunResult r =
        run(std::string(kSource) + " ! " + chain + " ! cudadiffenc backend=cpu threshold=5 " +
            "stream-version=" + version + " ! cudadiffdec backend=cpu ! video/x-raw,format=BGR ! " +
            "fakesink name=out");
    ASSERT_EQ(r.error, "");
    EXPECT_EQ(r.frames.size(), 12u);
  }
}

// A pipeline whose elements all run on the CPU backend makes no CUDA
// context on device 0 (its primary one, which the runtime makes), also
// where a GPU is present: nothing runs there, and a context takes GPU
// memory. Pinned host memory helps only copies to a GPU, so without one in
// use buffers are ordinary memory.
TEST(CpuBackend, MakesNoCudaContext) {
  if (g_getenv(kFirstDeviceUntouched)) GTEST_SKIP() << "(in the process that runs the others)";
  const Child child = run_child("CpuBackendAlone.*");
  EXPECT_TRUE(child.exited_zero) << child.output;
  EXPECT_NE(child.output.find("[       OK ] CpuBackendAlone.EveryElementRuns"), std::string::npos)
      << child.output;
  EXPECT_NE(child.output.find("device 0: no primary context"), std::string::npos) << child.output;
}

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::string why;
  if (cudadiff::device_count(&why) == 0) {
    std::printf("SKIP: no usable CUDA device (%s)\n", why.c_str());
    return 77;
  }
  gst_test::init(&argc, &argv);
  // A build without gstreamer-cuda-1.0 offers no CUDA memory at all.
  GstElement *probe = gst_element_factory_make("cudagauss", nullptr);
  GstPad *pad = gst_element_get_static_pad(probe, "sink");
  GstCaps *templ = gst_pad_get_pad_template_caps(pad);
  gchar *str = gst_caps_to_string(templ);
  const bool built_with_cuda_memory =
      std::string(str).find("memory:CUDAMemory") != std::string::npos;
  g_free(str);
  gst_caps_unref(templ);
  gst_object_unref(pad);
  gst_object_unref(probe);
  if (!built_with_cuda_memory) {
    std::printf("SKIP: built without gstreamer-cuda-1.0 (no memory:CUDAMemory)\n");
    return 77;
  }
  std::printf("nvcodec copies: %s, nvh264dec: %s\n", have_nvcodec_copies() ? "yes" : "no",
              have_factory("nvh264dec") ? "yes" : "no");
  testing_util::test_seed();
  int rc = RUN_ALL_TESTS();
  if (g_getenv(kFirstDeviceUntouched)) {
    const int active = primary_context_active(0);
    std::printf("device 0: %s\n", active == 0   ? "no primary context"
                                  : active == 1 ? "primary context active"
                                                : "the driver cannot say");
    if (active != 0) rc = 1;
  }
  const ::testing::UnitTest *u = ::testing::UnitTest::GetInstance();
  gst_deinit();
  if (rc == 0 && u->test_to_run_count() > 0 && u->skipped_test_count() == u->test_to_run_count())
    return 77;
  return rc;
}
