// Buffers whose GstVideoMeta describes a larger frame than their caps, which
// GStreamer allows (a decoder's coded size: 1920x1088 under 1920x1080 caps;
// videoconvert takes them): the picture is the meta's top-left part, of the
// caps' size. Every element, with the backend a user gets by default, gives
// the output it gives for the same pictures packed without a meta. Before,
// the filters refused such a buffer with an error ("input and output sizes
// differ") and the encoder likewise.
#include <gst/check/gstharness.h>
#include <gst/gst.h>
#include <gst/video/video.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cudadiff_util.h"
#include "gst_test.h"

namespace {

using diff_test::Bytes;
using diff_test::bytes_of;

// Bytes of a row of plane p of `info`'s picture, formats whose planes are
// their components (packed RGB, GRAY8, I420).
int row_bytes(const GstVideoInfo *info, guint p) {
  return GST_VIDEO_INFO_COMP_WIDTH(info, p) * GST_VIDEO_INFO_COMP_PSTRIDE(info, p);
}

// The rows of each plane of `buf`'s picture of `info`'s size, one after the
// other (mapped by its GstVideoMeta where it has one).
Bytes visible(GstBuffer *buf, const GstVideoInfo *info) {
  GstVideoFrame f;
  if (!gst_video_frame_map(&f, const_cast<GstVideoInfo *>(info), buf, GST_MAP_READ)) {
    ADD_FAILURE() << "cannot map the buffer";
    return {};
  }
  Bytes out;
  for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES(&f); ++p) {
    const int rows = GST_VIDEO_INFO_COMP_HEIGHT(info, p);
    const auto *data = static_cast<const uint8_t *>(GST_VIDEO_FRAME_PLANE_DATA(&f, p));
    for (int y = 0; y < rows; ++y) {
      const uint8_t *row = data + size_t(y) * GST_VIDEO_FRAME_PLANE_STRIDE(&f, p);
      out.insert(out.end(), row, row + row_bytes(info, p));
    }
  }
  gst_video_frame_unmap(&f);
  return out;
}

// A buffer of `info`'s picture from `rows` (as visible() gives them): packed
// without a meta, or in the top-left of a frame `more` pixels wider and
// taller, described by a GstVideoMeta, the rest of it filled with 0x5a.
GstBuffer *frame_buffer(const GstVideoInfo *info, const Bytes &rows, int more, int t) {
  GstVideoInfo layout;
  gst_video_info_set_format(&layout, GST_VIDEO_INFO_FORMAT(info), GST_VIDEO_INFO_WIDTH(info) + more,
                            GST_VIDEO_INFO_HEIGHT(info) + more);
  GstBuffer *buf = gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&layout), nullptr);
  gst_buffer_memset(buf, 0, 0x5a, GST_VIDEO_INFO_SIZE(&layout));
  GstMapInfo map;
  gst_buffer_map(buf, &map, GST_MAP_WRITE);
  size_t at = 0;
  for (guint p = 0; p < GST_VIDEO_INFO_N_PLANES(info); ++p) {
    const int n = GST_VIDEO_INFO_COMP_HEIGHT(info, p);
    const size_t length = size_t(row_bytes(info, p));
    for (int y = 0; y < n; ++y, at += length)
      std::memcpy(map.data + GST_VIDEO_INFO_PLANE_OFFSET(&layout, p) +
                      size_t(y) * GST_VIDEO_INFO_PLANE_STRIDE(&layout, p),
                  rows.data() + at, length);
  }
  gst_buffer_unmap(buf, &map);
  if (more > 0)
    gst_buffer_add_video_meta_full(buf, GST_VIDEO_FRAME_FLAG_NONE, GST_VIDEO_INFO_FORMAT(&layout),
                                   GST_VIDEO_INFO_WIDTH(&layout), GST_VIDEO_INFO_HEIGHT(&layout),
                                   GST_VIDEO_INFO_N_PLANES(&layout), layout.offset, layout.stride);
  GST_BUFFER_PTS(buf) = gst_util_uint64_scale(t, GST_SECOND, 30);
  GST_BUFFER_DURATION(buf) = GST_SECOND / 30;
  return buf;
}

// What `launch` outputs for `pictures` (each buffer padded by `more`), with
// the flows and the errors posted.
struct Output {
  std::vector<Bytes> frames;
  std::vector<GstFlowReturn> flows;
  std::vector<std::string> errors;
  // Bytes other than 0x5a outside the picture in the output buffers that
  // carry the input's larger meta (an element in place): 0 when only the
  // picture was written.
  size_t padding_written = 0;
};

size_t not_padding(const Bytes &bytes) {
  size_t n = 0;
  for (uint8_t v : bytes) n += v != 0x5a;
  return n;
}
Output run(const std::string &launch, const std::string &caps, const std::vector<Bytes> &pictures,
           int more) {
  Output out;
  GstHarness *h = gst_harness_new_parse(launch.c_str());
  GstBus *bus = gst_bus_new();
  gst_element_set_bus(h->element, bus);
  gst_harness_set_src_caps_str(h, caps.c_str());
  GstVideoInfo info;
  GstCaps *c = gst_caps_from_string(caps.c_str());
  gst_video_info_from_caps(&info, c);
  gst_caps_unref(c);
  for (size_t t = 0; t < pictures.size(); ++t)
    out.flows.push_back(gst_harness_push(h, frame_buffer(&info, pictures[t], more, int(t))));
  gst_harness_push_event(h, gst_event_new_eos());
  while (GstBuffer *b = gst_harness_try_pull(h)) {
    GstCaps *oc = gst_pad_get_current_caps(h->sinkpad);
    GstVideoInfo oi;
    if (gst_video_info_from_caps(&oi, oc)) {
      out.frames.push_back(visible(b, &oi));
      const GstVideoMeta *meta = gst_buffer_get_video_meta(b);
      if (meta && int(meta->width) > GST_VIDEO_INFO_WIDTH(&oi))
        out.padding_written += not_padding(bytes_of(b)) - not_padding(out.frames.back());
    } else {  // (the encoder's packets)
      out.frames.push_back(bytes_of(b));
    }
    gst_caps_unref(oc);
    gst_buffer_unref(b);
  }
  for (const gst_test::BusText &e : gst_test::pop_texts(bus, GST_MESSAGE_ERROR))
    out.errors.push_back(e.message + " | " + e.debug);
  gst_element_set_bus(h->element, nullptr);
  gst_object_unref(bus);
  gst_harness_teardown(h);
  return out;
}

TEST(VideoMeta, LargerThanTheCapsIsThePictureAtItsTopLeft) {
  struct Case {
    const char *launch;
    std::vector<const char *> formats;
  };
  const std::vector<Case> cases = {
      {"cudagrayscale", {"BGRx", "GRAY8"}},
      {"cudagauss", {"BGRx", "GRAY8", "I420"}},
      {"cudabinarize", {"BGRx", "GRAY8", "I420"}},
      {"cudatextoverlay text=Ab", {"BGRx", "GRAY8", "I420"}},
      {"cudaheatmap", {"BGRx", "GRAY8"}},
      {"cudanoisevis", {"BGRx", "GRAY8"}},
      // (the packets, byte for byte: the same pictures coded)
      {"cudadiffenc threshold=0", {"BGRx", "GRAY8", "I420"}},
      {"cudadiffenc threshold=0 stream-version=1", {"BGRx", "I420"}},
  };
  std::mt19937 gen(7);
  for (const Case &c : cases) {
    const std::string factory = gst_test::split(c.launch, ' ')[0];
    GstElementFactory *f = gst_element_factory_find(factory.c_str());
    if (!f) {  // (cudatextoverlay without Pango)
      std::printf("no %s: not tested\n", factory.c_str());
      continue;
    }
    gst_object_unref(f);
    for (const char *format : c.formats) {
      SCOPED_TRACE(std::string(c.launch) + ", " + format);
      const std::string caps = gst_test::raw_caps(format, 13, 7);
      GstVideoInfo info;
      GstCaps *ic = gst_caps_from_string(caps.c_str());
      ASSERT_TRUE(gst_video_info_from_caps(&info, ic));
      gst_caps_unref(ic);
      size_t n = 0;
      for (guint p = 0; p < GST_VIDEO_INFO_N_PLANES(&info); ++p)
        n += size_t(GST_VIDEO_INFO_COMP_HEIGHT(&info, p)) * size_t(row_bytes(&info, p));
      std::vector<Bytes> pictures(3, Bytes(n));
      for (Bytes &pic : pictures)
        for (uint8_t &v : pic) v = uint8_t(gen());
      const Output packed = run(c.launch, caps, pictures, 0);
      const Output padded = run(c.launch, caps, pictures, 3);
      EXPECT_TRUE(packed.errors.empty()) << packed.errors[0];
      EXPECT_TRUE(padded.errors.empty()) << padded.errors[0];
      for (size_t t = 0; t < pictures.size(); ++t) {
        EXPECT_EQ(packed.flows[t], GST_FLOW_OK) << "frame " << t;
        EXPECT_EQ(padded.flows[t], GST_FLOW_OK) << "frame " << t;
      }
      ASSERT_GE(packed.frames.size(), pictures.size());
      EXPECT_EQ(padded.frames.size(), packed.frames.size());
      for (size_t i = 0; i < packed.frames.size() && i < padded.frames.size(); ++i)
        EXPECT_EQ(padded.frames[i], packed.frames[i]) << "output " << i;
      EXPECT_EQ(padded.padding_written, 0u);
    }
  }
}

}  // namespace
