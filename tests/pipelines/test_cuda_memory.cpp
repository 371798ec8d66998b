// Device-resident pipelines: gst-cudadiff elements and GStreamer's own CUDA
// elements (nvcodec: cudaupload, cudadownload, nvh264dec) passing
// video/x-raw(memory:CUDAMemory), compared byte for byte with the same work
// on system memory; pad probes check the memory between the elements, and
// the elements' gst.cuda.context checks that the pipeline has one CUDA
// context. Needs a CUDA device and a build with gstreamer-cuda-1.0 (exit 77,
// skip, without them); the tests that need nvcodec's elements skip where
// they are missing (all skipped: exit 77).
#include <glib/gstdio.h>
#include <gst/gst.h>
#include <gst/video/video.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

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

struct PadCount {
  int buffers = 0;
  int cuda = 0;
};

GstPadProbeReturn count_memory(GstPad *, GstPadProbeInfo *info, gpointer data) {
  auto *count = static_cast<PadCount *>(data);
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER(info);
  count->buffers++;
  bool all_cuda = gst_buffer_n_memory(buf) > 0;
  for (guint i = 0; i < gst_buffer_n_memory(buf); ++i)
    all_cuda = all_cuda && is_cuda_memory(gst_buffer_peek_memory(buf, i));
  if (all_cuda) count->cuda++;
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
  std::vector<std::string> frames;
  std::map<std::string, PadCount> counts;       // per "element" (its src pad)
  std::map<std::string, std::string> src_caps;  // per "element": its src pad's caps
  std::map<std::string, gpointer> contexts;     // per element: its GstCudaContext
};

// Runs `desc` (a fakesink named "out" at the end) to EOS; probes the src pads
// of `watch` and reads their gst.cuda.context before stopping.
RunResult run(const std::string &desc, const std::vector<std::string> &watch = {}) {
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
    GstPad *pad = gst_element_get_static_pad(e, "src");
    gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_BUFFER, count_memory, &r.counts[name], nullptr);
    gst_object_unref(pad);
    gst_object_unref(e);
  }
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  GstBus *bus = gst_element_get_bus(pipeline);
  GstMessage *msg = gst_bus_timed_pop_filtered(
      bus, 60 * GST_SECOND, static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
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
    if (GstCaps *caps = gst_pad_get_current_caps(pad)) {
      gchar *str = gst_caps_to_string(caps);
      r.src_caps[name] = str;
      g_free(str);
      gst_caps_unref(caps);
    }
    gst_object_unref(pad);
    gpointer ctx = nullptr;
    if (GstContext *c = gst_element_get_context(e, "gst.cuda.context")) {
      const GValue *v = gst_structure_get_value(gst_context_get_structure(c), "gst.cuda.context");
      if (v && G_VALUE_HOLDS_OBJECT(v)) ctx = g_value_get_object(v);
      gst_context_unref(c);
    }
    r.contexts[name] = ctx;
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
  const std::string tail =
      " cudadiffenc name=enc stream-version=1 threshold=10 keyframe-interval=5 ! fakesink "
      "name=out";
  const RunResult a = run(std::string(kSource) +
                              " ! cudaupload name=up ! cudatextoverlay name=text text=\"device "
                              "resident\" shaded-background=true ! " +
                              tail,
                          {"up", "text"});
  ASSERT_EQ(a.error, "");
  const RunResult b = run(std::string(kSource) +
                          " ! cudatextoverlay text=\"device resident\" shaded-background=true ! "
                          "video/x-raw,format=BGR ! " +
                          tail);
  ASSERT_EQ(b.error, "");
  EXPECT_EQ(a.frames.size(), 12u);
  expect_same_frames(a, b);
  expect_cuda_between(a, {"up", "text"}, 12);
  expect_one_context(a, {"up", "text", "enc"});
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
  const RunResult b = run(decode +
                          "cudadownload ! video/x-raw,format=NV12 ! cudagauss kernel-size=7 ! "
                          "video/x-raw,format=NV12 ! fakesink name=out");
  g_unlink(path);
  g_free(path);
  ASSERT_EQ(a.error, "");
  ASSERT_EQ(b.error, "");
  EXPECT_EQ(a.frames.size(), 20u);
  expect_same_frames(a, b);
  expect_cuda_between(a, {"dec", "gauss"}, 20);
  expect_one_context(a, {"dec", "gauss", "down"});
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

// A decoder's output into a filter in CUDA memory, same pictures (version
// 2 writes the CUDA memory through a host mapping).
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
  const int rc = RUN_ALL_TESTS();
  const ::testing::UnitTest *u = ::testing::UnitTest::GetInstance();
  gst_deinit();
  if (rc == 0 && u->test_to_run_count() > 0 && u->skipped_test_count() == u->test_to_run_count())
    return 77;
  return rc;
}
