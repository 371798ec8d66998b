// backend=cuda without a usable device: a clear error at start, never a crash.
// meson runs this with CUDA_VISIBLE_DEVICES="" so that it holds on the GPU
// machine too. backend=auto in the same situation runs on the CPU.
#include <gst/check/gstharness.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gst_test.h"

TEST(BackendErrors, CudaWithoutDeviceFailsAtStart) {
  ASSERT_FALSE(gst_test::have_cuda_device()) << "run with CUDA_VISIBLE_DEVICES=\"\"";
  GError *err = nullptr;
  const std::string msg = gst_test::run_pipeline(
      "videotestsrc num-buffers=2 ! video/x-raw,format=BGR,width=32,height=8 ! "
      "cudagrayscale backend=cuda ! fakesink",
      20, &err);
  ASSERT_NE(err, nullptr) << msg;
  EXPECT_TRUE(g_error_matches(err, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND)) << msg;
  EXPECT_NE(msg.find("no CUDA device is usable for backend=cuda"), std::string::npos) << msg;
  EXPECT_NE(msg.find("backend=auto or backend=cpu"), std::string::npos) << msg;
  // Without a driver (CI) the runtime's own words speak of a version; the
  // text says what that usually means.
  if (msg.find("cudaErrorInsufficientDriver") != std::string::npos) {
    EXPECT_NE(msg.find("no NVIDIA driver is loaded"), std::string::npos) << msg;
  }
  g_error_free(err);
}

TEST(BackendErrors, AutoFallsBackToCpu) {
  const std::string msg = gst_test::run_pipeline(
      "videotestsrc num-buffers=3 ! video/x-raw,format=BGR,width=32,height=8 ! "
      "cudagrayscale backend=auto ! fakesink",
      20);
  EXPECT_EQ(msg, "");
}

TEST(BackendErrors, DeviceIdOutOfRange) {
  // Without a device, device-id does not matter for auto; with cuda it errors.
  GError *err = nullptr;
  const std::string msg = gst_test::run_pipeline(
      "videotestsrc num-buffers=1 ! cudagrayscale backend=cuda device-id=7 ! fakesink", 20, &err);
  ASSERT_NE(err, nullptr);
  EXPECT_NE(msg.find("device-id 7"), std::string::npos) << msg;
  g_error_free(err);
}

// The codec's elements: the same error for backend=cuda, and backend=auto
// (the default) runs on the CPU: a viewer machine may have no GPU.
TEST(BackendErrors, DiffElementsCudaWithoutDeviceFailAtStart) {
  for (const char *pipeline :
       {"videotestsrc num-buffers=2 ! video/x-raw,format=BGR,width=32,height=8 ! "
        "cudadiffenc stream-version=1 backend=cuda ! fakesink",
        "videotestsrc num-buffers=2 ! video/x-raw,format=BGR,width=32,height=8 ! cudadiffenc "
        "stream-version=1 ! cudadiffdec backend=cuda ! fakesink"}) {
    GError *err = nullptr;
    const std::string msg = gst_test::run_pipeline(pipeline, 20, &err);
    ASSERT_NE(err, nullptr) << pipeline;
    EXPECT_TRUE(g_error_matches(err, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND)) << msg;
    EXPECT_NE(msg.find("no CUDA device is usable for backend=cuda"), std::string::npos) << msg;
    g_error_free(err);
  }
  for (const char *version : {"1", "2"})
    EXPECT_EQ(gst_test::run_pipeline(std::string("videotestsrc num-buffers=3 ! "
                                                 "video/x-raw,format=I420,width=32,height=8 ! "
                                                 "cudadiffenc stream-version=") +
                                         version + " ! cudadiffdec ! fakesink",
                                     20),
              "")
        << "stream-version=" << version;
}

// A backend that cannot be used fails the state change with one error, the
// element's (which says what to do), and no second, generic one from the base
// class ("Could not initialize supporting library"): the codec's elements
// open their backend before GstVideoEncoder's and GstVideoDecoder's start.
TEST(BackendErrors, OneErrorWhenTheBackendCannotStart) {
  for (const char *element : {"cudadiffenc backend=cuda", "cudadiffdec backend=cuda",
                              "cudadiffdec backend=cuda "
                              "device-id=7",
                              "cudagrayscale backend=cuda"}) {
    GError *err = nullptr;
    GstElement *pipeline =
        gst_parse_launch((std::string("fakesrc ! ") + element + " ! fakesink").c_str(), &err);
    ASSERT_NE(pipeline, nullptr) << (err ? err->message : element);
    EXPECT_EQ(gst_element_set_state(pipeline, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE)
        << element;
    GstBus *bus = gst_element_get_bus(pipeline);
    const std::vector<gst_test::BusText> errors = gst_test::pop_texts(bus, GST_MESSAGE_ERROR);
    gst_object_unref(bus);
    gst_element_set_state(pipeline, GST_STATE_NULL);
    gst_object_unref(pipeline);
    std::string all;
    for (const gst_test::BusText &e : errors) all += "[" + e.message + "] ";
    ASSERT_EQ(errors.size(), 1u) << element << ": " << all;
    EXPECT_NE(errors[0].message.find("no CUDA device is usable for backend=cuda"),
              std::string::npos)
        << element << ": " << all;
  }
}

namespace {
bool has_cuda_structure(const GstCaps *caps) {
  if (!caps || gst_caps_is_any(caps)) return false;
  for (guint i = 0; i < gst_caps_get_size(caps); ++i) {
    const GstCapsFeatures *f = gst_caps_get_features(caps, i);
    if (f && !gst_caps_features_is_any(f) && gst_caps_features_contains(f, "memory:CUDAMemory"))
      return true;
  }
  return false;
}
}  // namespace

// Without a device (or with backend=cpu) an element takes and offers system
// memory only: its ACCEPT_CAPS query refuses caps in CUDA memory, as its
// CAPS query leaves them out, and cudadiffdec's source pad does not offer
// them. Before, the filters that convert (not in place) accepted them, and
// failed at their first frame ("memory:CUDAMemory needs the CUDA backend");
// the decoder offered them, and a pipeline naming them linked and then
// failed with a bare not-negotiated.
TEST(BackendErrors, NoCudaMemoryCapsWithoutTheCudaBackend) {
  ASSERT_FALSE(gst_test::have_cuda_device()) << "run with CUDA_VISIBLE_DEVICES=\"\"";
  const std::string raw = "format=BGR,width=64,height=48,framerate=30/1";
  GstCaps *sys = gst_caps_from_string(("video/x-raw," + raw).c_str());
  GstCaps *cuda = gst_caps_from_string(("video/x-raw(memory:CUDAMemory)," + raw).c_str());
  for (const char *backend : {"cpu", "auto"}) {
    for (const char *name : {"cudagauss", "cudagrayscale", "cudabinarize", "cudaheatmap",
                             "cudanoisevis", "cudatextoverlay", "cudadiffenc"}) {
      SCOPED_TRACE(std::string(name) + " backend=" + backend);
      GstElement *e = gst_element_factory_make(name, nullptr);
      ASSERT_NE(e, nullptr);
      gst_object_ref_sink(e);
      gst_util_set_object_arg(G_OBJECT(e), "backend", backend);
      GstPad *sink = gst_element_get_static_pad(e, "sink");
      EXPECT_TRUE(gst_pad_query_accept_caps(sink, sys));
      EXPECT_FALSE(gst_pad_query_accept_caps(sink, cuda));
      for (const char *pad_name : {"sink", "src"}) {
        GstPad *pad = gst_element_get_static_pad(e, pad_name);
        GstCaps *caps = gst_pad_query_caps(pad, nullptr);
        EXPECT_FALSE(has_cuda_structure(caps)) << pad_name;
        gst_caps_unref(caps);
        gst_object_unref(pad);
      }
      gst_object_unref(sink);
      gst_object_unref(e);
    }
    SCOPED_TRACE(std::string("cudadiffdec backend=") + backend);
    GstElement *dec = gst_element_factory_make("cudadiffdec", nullptr);
    ASSERT_NE(dec, nullptr);
    gst_object_ref_sink(dec);
    gst_util_set_object_arg(G_OBJECT(dec), "backend", backend);
    GstPad *src = gst_element_get_static_pad(dec, "src");
    GstCaps *caps = gst_pad_query_caps(src, nullptr);
    EXPECT_FALSE(has_cuda_structure(caps));
    EXPECT_FALSE(gst_caps_is_empty(caps));
    gst_caps_unref(caps);
    gst_object_unref(src);
    gst_object_unref(dec);
    // Refused when the pipeline is built, as a filter's would be.
    GError *err = nullptr;
    GstElement *p = gst_parse_launch((std::string("fakesrc ! cudadiffdec backend=") + backend +
                                      " ! video/x-raw(memory:CUDAMemory) ! fakesink")
                                         .c_str(),
                                     &err);
    ASSERT_NE(err, nullptr) << "linked";
    EXPECT_TRUE(g_error_matches(err, GST_PARSE_ERROR, GST_PARSE_ERROR_LINK)) << err->message;
    g_error_free(err);
    if (p) gst_object_unref(p);
  }
  gst_caps_unref(sys);
  gst_caps_unref(cuda);
}

// active-backend says what backend=auto chose once the element has
// started (here, without a device: cpu), and auto before its start, after
// its stop and when backend=cuda could not start it.
TEST(BackendErrors, ActiveBackendSaysWhatAutoChose) {
  ASSERT_FALSE(gst_test::have_cuda_device()) << "run with CUDA_VISIBLE_DEVICES=\"\"";
  std::vector<const char *> factories = {"cudagrayscale", "cudagauss",    "cudabinarize",
                                         "cudaheatmap",   "cudanoisevis", "cudadiffenc",
                                         "cudadiffdec"};
  if (GstElementFactory *f = gst_element_factory_find("cudatextoverlay")) {
    factories.push_back("cudatextoverlay");
    gst_object_unref(f);
  }
  auto active = [](GstElement *el) {
    gint v = -1;
    g_object_get(el, "active-backend", &v, nullptr);
    return v;
  };
  constexpr gint kAuto = 0, kCpu = 2;  // GstCudaDiffBackend
  for (const char *factory : factories) {
    SCOPED_TRACE(factory);
    GstElement *el = gst_element_factory_make(factory, nullptr);
    ASSERT_NE(el, nullptr);
    GParamSpec *spec = g_object_class_find_property(G_OBJECT_GET_CLASS(el), "active-backend");
    ASSERT_NE(spec, nullptr);
    EXPECT_FALSE(spec->flags & G_PARAM_WRITABLE);
    EXPECT_EQ(active(el), kAuto);
    int notified = 0;
    const gulong id = g_signal_connect(
        el, "notify::active-backend",
        G_CALLBACK(+[](GObject *, GParamSpec *, gpointer n) { ++*static_cast<int *>(n); }),
        &notified);
    ASSERT_NE(gst_element_set_state(el, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
    EXPECT_EQ(active(el), kCpu);
    EXPECT_EQ(notified, 1);
    ASSERT_EQ(gst_element_set_state(el, GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
    EXPECT_EQ(active(el), kAuto);
    EXPECT_EQ(notified, 2);
    g_signal_handler_disconnect(el, id);
    // backend=cuda cannot start without a device: nothing is active.
    gst_util_set_object_arg(G_OBJECT(el), "backend", "cuda");
    GstBus *bus = gst_bus_new();  // (takes the start's error)
    gst_element_set_bus(el, bus);
    EXPECT_EQ(gst_element_set_state(el, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
    EXPECT_EQ(active(el), kAuto);
    gst_element_set_state(el, GST_STATE_NULL);
    gst_element_set_bus(el, nullptr);
    gst_bus_set_flushing(bus, TRUE);
    gst_object_unref(bus);
    gst_object_unref(el);
  }
}

// A buffer smaller than its caps say, without a GstVideoMeta (an
// application's appsrc that packs rows without their padding): an error
// whose debug text says why, for a filter, an element in place and the
// encoder (before, only "cannot map the input frame").
TEST(BackendErrors, ABufferSmallerThanItsCapsSayIsRefusedWithTheReason) {
  for (const char *element : {"cudagauss", "cudatextoverlay text=x", "cudadiffenc"}) {
    SCOPED_TRACE(element);
    GstHarness *h = gst_harness_new_parse(element);
    GstBus *bus = gst_bus_new();
    gst_element_set_bus(h->element, bus);
    // RGB 3x2: rows of 9 bytes padded to 12, 24 bytes; 18 sent.
    gst_harness_set_src_caps_str(h, "video/x-raw,format=RGB,width=3,height=2,framerate=30/1");
    GstBuffer *buf = gst_buffer_new_allocate(nullptr, 18, nullptr);
    gst_buffer_memset(buf, 0, 0x40, 18);
    GST_BUFFER_PTS(buf) = 0;
    EXPECT_EQ(gst_harness_push(h, buf), GST_FLOW_ERROR);
    const std::vector<gst_test::BusText> errors = gst_test::pop_texts(bus, GST_MESSAGE_ERROR);
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_NE(errors[0].message.find("cannot map the input frame"), std::string::npos)
        << errors[0].message;
    EXPECT_NE(errors[0].debug.find("the buffer holds 18 bytes, fewer than the 24 that a 3x2 RGB "
                                   "frame takes"),
              std::string::npos)
        << errors[0].debug;
    EXPECT_NE(errors[0].debug.find("GstVideoMeta"), std::string::npos) << errors[0].debug;
    gst_element_set_bus(h->element, nullptr);
    gst_object_unref(bus);
    gst_harness_teardown(h);
  }
}
