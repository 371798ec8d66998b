#include "gst_test.h"

#include <gst/check/gstharness.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "cudadiff/runtime.h"

namespace gst_test {

void init(int *argc, char ***argv) {
  gst_init(argc, argv);
  // A GLib critical or warning in an element is a bug: make it fatal.
  g_log_set_always_fatal(
      static_cast<GLogLevelFlags>(G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING | G_LOG_FLAG_FATAL));
  GstPlugin *plugin = gst_registry_find_plugin(gst_registry_get(), "cudadiff");
  if (!plugin) {
    std::fprintf(stderr, "the cudadiff plugin was not found (GST_PLUGIN_PATH_1_0=%s)\n",
                 g_getenv("GST_PLUGIN_PATH_1_0") ? g_getenv("GST_PLUGIN_PATH_1_0") : "(unset)");
    std::exit(1);
  }
  std::printf("plugin: %s\n", gst_plugin_get_filename(plugin));
  gst_object_unref(plugin);
}

namespace {
std::mutex tolerated_mutex;
std::vector<std::vector<std::string>> tolerated;

gboolean fatal_unless_tolerated(const gchar *domain, GLogLevelFlags level, const gchar *message,
                                gpointer) {
  if (!(level & G_LOG_LEVEL_WARNING) || !message) return TRUE;
  std::lock_guard<std::mutex> lock(tolerated_mutex);
  for (const auto &strings : tolerated) {
    bool all = true;
    for (const std::string &s : strings) all = all && std::strstr(message, s.c_str());
    if (all) {
      std::printf("tolerated %s warning: %s\n", domain ? domain : "", message);
      return FALSE;  // not fatal
    }
  }
  return TRUE;
}
}  // namespace

void tolerate_warning(std::vector<std::string> substrings) {
  std::lock_guard<std::mutex> lock(tolerated_mutex);
  tolerated.push_back(std::move(substrings));
  g_test_log_set_fatal_handler(fatal_unless_tolerated, nullptr);
}

std::string raw_caps(const char *format, int width, int height, int fps) {
  return "video/x-raw,format=" + std::string(format) + ",width=" + std::to_string(width) +
         ",height=" + std::to_string(height) + ",framerate=" + std::to_string(fps) + "/1";
}

GstBuffer *make_buffer(const GstVideoInfo &info, const std::function<void(GstVideoFrame *)> &fill,
                       int index) {
  GstBuffer *buf = gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&info), nullptr);
  gst_buffer_memset(buf, 0, 0x77, gst_buffer_get_size(buf));  // padding: not zero
  GstVideoFrame frame;
  if (!gst_video_frame_map(&frame, const_cast<GstVideoInfo *>(&info), buf, GST_MAP_WRITE)) {
    ADD_FAILURE() << "cannot map a new buffer";
    return buf;
  }
  fill(&frame);
  gst_video_frame_unmap(&frame);
  GST_BUFFER_PTS(buf) = gst_util_uint64_scale(index, GST_SECOND, 30);
  GST_BUFFER_DURATION(buf) = gst_util_uint64_scale(1, GST_SECOND, 30);
  return buf;
}

GstBuffer *buffer_with_meta(GstVideoFormat format, int width, int height,
                            const std::vector<size_t> &memories, const std::vector<gsize> &offsets,
                            const std::vector<gint> &strides, guint8 value) {
  GstBuffer *buffer = gst_buffer_new();
  for (size_t size : memories) {
    GstMemory *mem = gst_allocator_alloc(nullptr, size, nullptr);
    GstMapInfo map;
    gst_memory_map(mem, &map, GST_MAP_WRITE);
    memset(map.data, value, map.size);
    gst_memory_unmap(mem, &map);
    gst_buffer_append_memory(buffer, mem);
  }
  gsize offset[GST_VIDEO_MAX_PLANES] = {};
  gint stride[GST_VIDEO_MAX_PLANES] = {};
  for (size_t p = 0; p < offsets.size() && p < GST_VIDEO_MAX_PLANES; ++p) offset[p] = offsets[p];
  for (size_t p = 0; p < strides.size() && p < GST_VIDEO_MAX_PLANES; ++p) stride[p] = strides[p];
  gst_buffer_add_video_meta_full(buffer, GST_VIDEO_FRAME_FLAG_NONE, format, guint(width),
                                 guint(height), guint(offsets.size()), offset, stride);
  GST_BUFFER_PTS(buffer) = 0;
  GST_BUFFER_DURATION(buffer) = GST_SECOND / 30;
  return buffer;
}

const std::vector<MetaLayout> &i420_33x17_meta_layouts() {
  static const std::vector<MetaLayout> layouts = {
      {"packed", {867}, {0, 561, 714}, {33, 17, 17}, true},
      {"padded strides", {2000}, {0, 700, 900}, {40, 20, 20}, true},
      {"one memory per plane", {561, 153, 153}, {0, 561, 714}, {33, 17, 17}, true},
      {"the third plane 77 bytes past the end", {867}, {0, 561, 791}, {33, 17, 17}, false},
      {"a stride of G_MAXINT", {2000}, {0, 600, 800}, {G_MAXINT, 17, 17}, false},
      {"the second plane across two memories", {700, 1300}, {0, 600, 800}, {33, 17, 17}, false},
  };
  return layouts;
}

void expect_filter_refuses_meta_past_memory(const char *factory,
                                            const std::function<void(GstElement *)> &setup) {
  for (const MetaLayout &c : i420_33x17_meta_layouts()) {
    SCOPED_TRACE(std::string(factory) + ": " + c.what);
    GstHarness *h = gst_harness_new(factory);
    if (setup) setup(h->element);
    GstBus *bus = gst_bus_new();
    gst_element_set_bus(h->element, bus);
    gst_harness_set_src_caps_str(h, raw_caps("I420", 33, 17).c_str());
    gst_harness_set_sink_caps_str(h, raw_caps("I420", 33, 17).c_str());
    const GstFlowReturn ret = gst_harness_push(
        h, buffer_with_meta(GST_VIDEO_FORMAT_I420, 33, 17, c.memories, c.offsets, c.strides));
    const std::vector<BusText> errors = pop_texts(bus, GST_MESSAGE_ERROR);
    gst_element_set_bus(h->element, nullptr);
    gst_object_unref(bus);
    if (c.fits) {
      EXPECT_EQ(ret, GST_FLOW_OK);
      EXPECT_TRUE(errors.empty()) << errors[0].message << " | " << errors[0].debug;
      GstBuffer *out = gst_harness_try_pull(h);
      EXPECT_NE(out, nullptr);
      if (out) gst_buffer_unref(out);
    } else {
      EXPECT_EQ(ret, GST_FLOW_ERROR);
      EXPECT_EQ(errors.size(), 1u);
      if (!errors.empty()) {
        EXPECT_NE(errors[0].debug.find("bytes past the end of the memory"), std::string::npos)
            << errors[0].message << " | " << errors[0].debug;
      }
    }
    gst_harness_teardown(h);
  }
}

GstBuffer *random_buffer(const GstVideoInfo &info, std::mt19937 &gen, int index) {
  return make_buffer(
      info,
      [&](GstVideoFrame *f) {
        for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES(f); ++p) {
          // A plane's rows: the height of a component it holds.
          guint c = 0;
          while (GST_VIDEO_FRAME_COMP_PLANE(f, c) != p) ++c;
          for (int y = 0; y < GST_VIDEO_FRAME_COMP_HEIGHT(f, c); ++y)
            for (int x = 0; x < GST_VIDEO_FRAME_PLANE_STRIDE(f, p); ++x)
              pixel(f, int(p), x, y)[0] = static_cast<guint8>(gen() >> 24);
        }
      },
      index);
}

void read_frame(GstBuffer *buffer, const GstVideoInfo &info,
                const std::function<void(GstVideoFrame *)> &check) {
  GstVideoFrame frame;
  ASSERT_TRUE(gst_video_frame_map(&frame, const_cast<GstVideoInfo *>(&info), buffer, GST_MAP_READ));
  check(&frame);
  gst_video_frame_unmap(&frame);
}

std::vector<std::string> split(const std::string &text, char separator) {
  std::vector<std::string> parts;
  size_t begin = 0;
  for (;;) {
    const size_t end = text.find(separator, begin);
    parts.push_back(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) return parts;
    begin = end + 1;
  }
}

bool have_cuda_device() {
  return cudadiff::device_count() > 0;
}

std::string run_pipeline(const std::string &description, int timeout_s, GError **error_out) {
  GError *err = nullptr;
  GstElement *pipeline = gst_parse_launch(description.c_str(), &err);
  if (!pipeline) {
    std::string msg = err ? err->message : "parse failed";
    if (error_out)
      *error_out = err;
    else
      g_clear_error(&err);
    return msg;
  }
  g_clear_error(&err);
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  GstBus *bus = gst_element_get_bus(pipeline);
  GstMessage *msg =
      gst_bus_timed_pop_filtered(bus, static_cast<GstClockTime>(timeout_s) * GST_SECOND,
                                 static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
  std::string result;
  if (!msg) {
    result = "timeout";
  } else if (GST_MESSAGE_TYPE(msg) == GST_MESSAGE_ERROR) {
    GError *gerr = nullptr;
    gchar *dbg = nullptr;
    gst_message_parse_error(msg, &gerr, &dbg);
    result = gerr->message;
    if (dbg) result += std::string(" | ") + dbg;
    if (error_out)
      *error_out = gerr;
    else
      g_error_free(gerr);
    g_free(dbg);
  }
  if (msg) gst_message_unref(msg);
  gst_object_unref(bus);
  gst_element_set_state(pipeline, GST_STATE_NULL);
  gst_object_unref(pipeline);
  return result;
}

BusText bus_text(GstMessage *message) {
  GError *err = nullptr;
  gchar *debug = nullptr;
  if (GST_MESSAGE_TYPE(message) == GST_MESSAGE_ERROR)
    gst_message_parse_error(message, &err, &debug);
  else
    gst_message_parse_warning(message, &err, &debug);
  BusText text{err ? err->message : "", debug ? debug : ""};
  if (err) g_error_free(err);
  g_free(debug);
  return text;
}

std::vector<BusText> pop_texts(GstBus *bus, GstMessageType type) {
  std::vector<BusText> texts;
  while (GstMessage *m = gst_bus_pop_filtered(bus, type)) {
    texts.push_back(bus_text(m));
    gst_message_unref(m);
  }
  return texts;
}

}  // namespace gst_test
