// Properties that an application can drive with a GstController over the
// stream's time (as videobalance's and textoverlay's): each element flags
// them GST_PARAM_CONTROLLABLE and takes their values at each frame's stream
// time before it processes the frame. Before, no property was flagged,
// gst_object_add_control_binding() failed with a critical, and no element
// synchronised its values.
#include <gst/check/gstharness.h>
#include <gst/controller/gstdirectcontrolbinding.h>
#include <gst/controller/gstinterpolationcontrolsource.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gst_test.h"

namespace {

struct Controlled {
  const char *factory;
  const char *property;
  double at_0, at_1;  // the values at stream time 0 and 1 s (linear between)
  const char *format;
};

// Each element's controllable properties, with values within their ranges
// and away from their defaults.
const std::vector<Controlled> kControlled = {
    {"cudadiffenc", "threshold", 4, 40, "BGR"},
    {"cudabinarize", "threshold", 10, 110, "BGR"},
    {"cudabinarize", "min-threshold", 2, 22, "BGR"},
    {"cudabinarize", "max-threshold", 200, 240, "BGR"},
    {"cudagauss", "sigma", 0.5, 2.5, "BGR"},
    {"cudaheatmap", "gain", 2, 10, "BGR"},
    {"cudaheatmap", "alpha", 0.25, 0.75, "BGR"},
    {"cudanoisevis", "threshold", 8, 60, "BGR"},
    {"cudanoisevis", "color", 0xff000010, 0xff000030, "BGR"},
    {"cudatextoverlay", "xpad", 2, 30, "BGRx"},
    {"cudatextoverlay", "ypad", 4, 12, "BGRx"},
    {"cudatextoverlay", "shading-value", 20, 100, "BGRx"},
    {"cudatextoverlay", "color", 0xff102030, 0xff102050, "BGRx"},
};

double read_number(GstElement *el, const char *property) {
  GParamSpec *spec = g_object_class_find_property(G_OBJECT_GET_CLASS(el), property);
  GValue v = G_VALUE_INIT;
  g_value_init(&v, spec->value_type);
  g_object_get_property(G_OBJECT(el), property, &v);
  double d = 0;
  if (G_VALUE_HOLDS_UINT(&v))
    d = g_value_get_uint(&v);
  else if (G_VALUE_HOLDS_INT(&v))
    d = g_value_get_int(&v);
  else if (G_VALUE_HOLDS_DOUBLE(&v))
    d = g_value_get_double(&v);
  else
    ADD_FAILURE() << property << " is not a number";
  g_value_unset(&v);
  return d;
}

}  // namespace

TEST(Controllable, PropertiesFollowTheirControlSourceFrameByFrame) {
  for (const Controlled &c : kControlled) {
    const std::string what = std::string(c.factory) + " " + c.property;
    SCOPED_TRACE(what);
    GstElement *probe = gst_element_factory_make(c.factory, nullptr);
    if (!probe) {
      // (cudatextoverlay exists only in builds with Pango and Cairo)
      EXPECT_STREQ(c.factory, "cudatextoverlay");
      continue;
    }
    gst_object_unref(gst_object_ref_sink(probe));
    GstHarness *h = gst_harness_new(c.factory);
    GstElement *el = h->element;
    if (std::string(c.factory) == "cudabinarize")
      gst_util_set_object_arg(G_OBJECT(el), "method", "fixed");
    GParamSpec *spec = g_object_class_find_property(G_OBJECT_GET_CLASS(el), c.property);
    ASSERT_NE(spec, nullptr);
    EXPECT_TRUE(spec->flags & GST_PARAM_CONTROLLABLE);
    EXPECT_TRUE(spec->flags & GST_PARAM_MUTABLE_PLAYING);
    GstControlSource *cs = gst_interpolation_control_source_new();
    g_object_set(cs, "mode", GST_INTERPOLATION_MODE_LINEAR, nullptr);
    GstTimedValueControlSource *tv = GST_TIMED_VALUE_CONTROL_SOURCE(cs);
    ASSERT_TRUE(gst_timed_value_control_source_set(tv, 0, c.at_0));
    ASSERT_TRUE(gst_timed_value_control_source_set(tv, GST_SECOND, c.at_1));
    ASSERT_TRUE(gst_object_add_control_binding(
        GST_OBJECT(el), gst_direct_control_binding_new_absolute(GST_OBJECT(el), c.property, cs)));
    gst_harness_set_src_caps_str(h, gst_test::raw_caps(c.format, 32, 16).c_str());
    GstVideoInfo info;
    GstCaps *caps = gst_caps_from_string(gst_test::raw_caps(c.format, 32, 16).c_str());
    ASSERT_TRUE(gst_video_info_from_caps(&info, caps));
    gst_caps_unref(caps);
    std::mt19937 gen(7);
    for (int i = 0; i <= 4; ++i) {
      const GstClockTime t = GstClockTime(i) * GST_SECOND / 4;
      GstBuffer *in = gst_test::random_buffer(info, gen, i);
      GST_BUFFER_PTS(in) = t;
      GST_BUFFER_DURATION(in) = GST_SECOND / 4;
      ASSERT_EQ(gst_harness_push(h, in), GST_FLOW_OK) << "frame " << i;
      const double want = c.at_0 + (c.at_1 - c.at_0) * i / 4.0;
      EXPECT_NEAR(read_number(el, c.property), want, 1e-6) << "frame " << i;
    }
    // A binarization with a fixed threshold uses the value of its frame.
    if (std::string(c.factory) == "cudabinarize" && std::string(c.property) == "threshold") {
      guint last = 0;
      g_object_get(el, "last-threshold", &last, nullptr);
      EXPECT_EQ(last, guint(c.at_1));
    }
    gst_object_unref(cs);
    gst_harness_teardown(h);
  }
}

// A segment in bytes (an appsrc's default format, with timestamps on its
// buffers all the same): frames pass, no control values are taken, and no
// critical (gst_segment_to_stream_time() in time on a segment in bytes) is
// logged; the tests make criticals fatal. Before, every filter logged one
// per buffer.
TEST(Controllable, BuffersInASegmentInBytesPass) {
  for (const char *factory : {"cudagauss", "cudadiffenc"}) {
    SCOPED_TRACE(factory);
    GstHarness *h = gst_harness_new(factory);
    gst_harness_set_src_caps_str(h, gst_test::raw_caps("BGR", 32, 16).c_str());
    GstSegment bytes;
    gst_segment_init(&bytes, GST_FORMAT_BYTES);
    gst_harness_push_event(h, gst_event_new_segment(&bytes));
    GstVideoInfo info;
    GstCaps *caps = gst_caps_from_string(gst_test::raw_caps("BGR", 32, 16).c_str());
    ASSERT_TRUE(gst_video_info_from_caps(&info, caps));
    gst_caps_unref(caps);
    std::mt19937 gen(3);
    for (int i = 0; i < 3; ++i) {
      GstBuffer *in = gst_test::random_buffer(info, gen, i);
      EXPECT_TRUE(GST_BUFFER_PTS_IS_VALID(in));
      gst_harness_push(h, in);
    }
    gst_harness_teardown(h);
  }
}
