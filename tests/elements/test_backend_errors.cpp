// backend=cuda without a usable device: a clear error at start, never a crash.
// meson runs this with CUDA_VISIBLE_DEVICES="" so that it holds on the GPU
// machine too. backend=auto in the same situation runs on the CPU.
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
