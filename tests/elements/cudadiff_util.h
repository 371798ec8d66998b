// Helpers of the cudadiffenc/cudadiffdec tests: synthetic video with motion
// and noise in every format, canonical bytes of GStreamer buffers, the
// codec's models (what a decoder must show: version 1 computed here byte by
// byte, version 2 by the codec2 CPU core run here on the same frames), and
// a reader of packet headers written from docs/stream-format.md
// (independent of the plugin's own reader).
#pragma once

#include <gst/check/gstharness.h>
#include <gst/gst.h>
#include <gst/video/video.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cudadiff/codec2.h"
#include "cudadiff/frame.h"
#include "cudadiff/runtime.h"
#include "frames.h"
#include "gst_test.h"

namespace diff_test {

using Bytes = std::vector<uint8_t>;

inline const std::vector<std::string> &all_formats() {
  static const std::vector<std::string> f = {
      "BGR",   "RGB",  "BGRx", "RGBx", "xBGR", "xRGB", "BGRA", "RGBA", "ABGR", "ARGB",
      "GRAY8", "I420", "YV12", "NV12", "NV21", "YUY2", "UYVY", "Y444", "Y42B"};
  return f;
}

inline cudadiff::VideoFormat core_format(const std::string &name) {
  for (int i = 1; i < 64; ++i) {
    const auto f = static_cast<cudadiff::VideoFormat>(i);
    if (cudadiff::format_info(f).n_planes == 0) break;
    if (name == cudadiff::format_name(f)) return f;
  }
  return cudadiff::VideoFormat::Unknown;
}

inline GstVideoInfo video_info(const std::string &format, int w, int h, int fps = 30) {
  GstCaps *caps = gst_caps_from_string(gst_test::raw_caps(format.c_str(), w, h, fps).c_str());
  GstVideoInfo info;
  gst_video_info_from_caps(&info, caps);
  gst_caps_unref(caps);
  return info;
}

// A frame of the scene at time t in canonical order: a smooth background, a
// bright block moving right and down, noise of +-25 on one byte in six
// (some under threshold 20, some over).
inline Bytes scene(const std::string &format, int w, int h, int t, uint32_t seed) {
  const cudadiff::VideoFormat f = core_format(format);
  Bytes out(cudadiff::frame_size_packed(f, w, h));
  std::mt19937 gen(seed * 7919u + uint32_t(t));
  size_t i = 0;
  for (int p = 0; p < cudadiff::format_info(f).n_planes; ++p) {
    const size_t row = cudadiff::plane_row_bytes(f, p, w);
    const int rows = cudadiff::plane_height(f, p, h);
    for (int y = 0; y < rows; ++y)
      for (size_t x = 0; x < row; ++x, ++i) {
        int v = int((x * 3 + size_t(y) * 5 + size_t(p) * 40) & 255);
        const size_t bx = size_t(t) * 4 % (row + 1), by = size_t(t) % size_t(rows + 1);
        if (x >= bx && x < bx + 9 && size_t(y) >= by && size_t(y) < by + 3) v = 255 - v / 4;
        if (gen() % 6 == 0) v += int(gen() % 51) - 25;
        out[i] = uint8_t(std::min(255, std::max(0, v)));
      }
  }
  return out;
}

inline cudadiff::FrameView view_of(GstVideoFrame *frame, cudadiff::VideoFormat f) {
  cudadiff::FrameView v;
  v.format = f;
  v.width = GST_VIDEO_FRAME_WIDTH(frame);
  v.height = GST_VIDEO_FRAME_HEIGHT(frame);
  for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES(frame); ++p) {
    v.data[p] = static_cast<uint8_t *>(GST_VIDEO_FRAME_PLANE_DATA(frame, p));
    v.stride[p] = size_t(GST_VIDEO_FRAME_PLANE_STRIDE(frame, p));
  }
  return v;
}

// A buffer of `info` holding canonical bytes; padding is 0x77. pts from
// `index` at 30 fps (none when index < 0).
inline GstBuffer *buffer_from(const GstVideoInfo &info, const Bytes &canonical, int index) {
  const cudadiff::VideoFormat f = core_format(GST_VIDEO_INFO_NAME(&info));
  GstBuffer *buf = gst_test::make_buffer(
      info,
      [&](GstVideoFrame *frame) {
        Bytes copy = canonical;
        cudadiff::copy_frame_host(cudadiff::packed_view(f, GST_VIDEO_INFO_WIDTH(&info),
                                                        GST_VIDEO_INFO_HEIGHT(&info), copy.data()),
                                  view_of(frame, f));
      },
      index < 0 ? 0 : index);
  if (index < 0) GST_BUFFER_PTS(buf) = GST_BUFFER_DURATION(buf) = GST_CLOCK_TIME_NONE;
  return buf;
}

// The canonical bytes of a raw video buffer with caps `caps`.
inline Bytes canonical_of(GstBuffer *buf, GstCaps *caps) {
  GstVideoInfo info;
  EXPECT_TRUE(gst_video_info_from_caps(&info, caps));
  const cudadiff::VideoFormat f = core_format(GST_VIDEO_INFO_NAME(&info));
  Bytes out(
      cudadiff::frame_size_packed(f, GST_VIDEO_INFO_WIDTH(&info), GST_VIDEO_INFO_HEIGHT(&info)));
  GstVideoFrame frame;
  if (!gst_video_frame_map(&frame, &info, buf, GST_MAP_READ)) {
    ADD_FAILURE() << "cannot map a decoded buffer";
    return out;
  }
  cudadiff::copy_frame_host(view_of(&frame, f),
                            cudadiff::packed_view(f, GST_VIDEO_INFO_WIDTH(&info),
                                                  GST_VIDEO_INFO_HEIGHT(&info), out.data()));
  gst_video_frame_unmap(&frame);
  return out;
}

// The codec by definition: a keyframe becomes the picture; a delta changes
// the bytes that differ by more than the threshold. Returns the changed count.
struct Model {
  Bytes picture;
  uint64_t apply(const Bytes &input, bool keyframe, int threshold) {
    if (keyframe || picture.size() != input.size()) {
      picture = input;
      return 0;
    }
    uint64_t changed = 0;
    for (size_t i = 0; i < input.size(); ++i)
      if (std::abs(int(input[i]) - int(picture[i])) > threshold) {
        picture[i] = input[i];
        ++changed;
      }
    return changed;
  }
};

// Version 2: the codec2 encoder (CPU core) run on the same frames as the
// element, with the same keyframes and thresholds; the element's packets
// must carry exactly its bodies and decoders must show its reference.
struct Codec2Model {
  std::unique_ptr<cudadiff::Context> ctx = cudadiff::Context::cpu();
  std::unique_ptr<cudadiff::codec2::Encoder> enc;
  cudadiff::HostBytes body, ref;
  Bytes picture;
  cudadiff::codec2::FrameStats stats;
  // Encodes `input` (canonical bytes of `format` w x h); returns the body.
  Bytes apply(const std::string &format, int w, int h, const Bytes &input, bool keyframe,
              int threshold) {
    const cudadiff::VideoFormat f = core_format(format);
    if (!enc || enc->format() != f || enc->width() != w || enc->height() != h)
      enc = cudadiff::codec2::Encoder::create(*ctx, f, w, h);
    Bytes copy = input;
    stats = enc->encode(cudadiff::packed_view(f, w, h, copy.data()), threshold, keyframe, body);
    enc->read_reference(ref);
    picture.assign(ref.data(), ref.data() + ref.size());
    return Bytes(body.data(), body.data() + body.size());
  }
};

// A packet header read by the layout of docs/stream-format.md.
struct Header {
  std::string magic;
  int version = 0, header_size = 0, flags = 0, format = 0;
  uint64_t frame_number = 0, pts = 0, duration = 0;
  uint32_t payload_size = 0, body_size = 0, width = 0, height = 0, fps_n = 0, fps_d = 0;
  bool keyframe() const { return flags & 1; }
};

inline uint64_t le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

inline Header header_of(GstBuffer *buf) {
  Header h;
  GstMapInfo map;
  gst_buffer_map(buf, &map, GST_MAP_READ);
  if (map.size >= 64) {
    const uint8_t *p = map.data;
    h.magic.assign(reinterpret_cast<const char *>(p), 4);
    h.version = p[4];
    h.header_size = p[5];
    h.flags = p[6];
    h.format = p[7];
    h.frame_number = le(p + 8, 8);
    h.pts = le(p + 16, 8);
    h.duration = le(p + 24, 8);
    h.payload_size = uint32_t(le(p + 32, 4));
    h.body_size = uint32_t(le(p + 36, 4));
    h.width = uint32_t(le(p + 40, 4));
    h.height = uint32_t(le(p + 44, 4));
    h.fps_n = uint32_t(le(p + 48, 4));
    h.fps_d = uint32_t(le(p + 52, 4));
  }
  gst_buffer_unmap(buf, &map);
  return h;
}

// A flush through the harness, then the caps again and a time segment: the
// element takes frames (or packets) again, as after a seek.
inline void flush_and_restart(GstHarness *h, const std::string &caps) {
  EXPECT_TRUE(gst_harness_push_event(h, gst_event_new_flush_start()));
  EXPECT_TRUE(gst_harness_push_event(h, gst_event_new_flush_stop(TRUE)));
  gst_harness_set_src_caps_str(h, caps.c_str());
  GstSegment segment;
  gst_segment_init(&segment, GST_FORMAT_TIME);
  EXPECT_TRUE(gst_harness_push_event(h, gst_event_new_segment(&segment)));
}

inline Bytes bytes_of(GstBuffer *buf) {
  Bytes out(gst_buffer_get_size(buf));
  gst_buffer_extract(buf, 0, out.data(), out.size());
  return out;
}

// The largest difference between bytes of a and b at the same place.
inline int max_diff(const Bytes &a, const Bytes &b) {
  int worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, std::abs(int(a[i]) - int(b[i])));
  return worst;
}

inline GstStructure *stats_of(GstElement *el) {
  GstStructure *s = nullptr;
  g_object_get(el, "stats", &s, nullptr);
  return s;
}

inline guint64 stat(const GstStructure *s, const char *field) {
  guint64 v = 0;
  EXPECT_TRUE(gst_structure_get_uint64(s, field, &v)) << field;
  return v;
}

// Makes a packet's checksums right again after its bytes were changed: the
// payload's crc32, then the header's, which covers it (what a crafted
// packet can do, and damage that only the body's own checks can see).
inline void fix_checksums(Bytes &b) {
  const uint32_t crc = uint32_t(::crc32(0, b.data() + 64, uInt(b.size() - 64)));
  for (int i = 0; i < 4; ++i) b[56 + i] = uint8_t(crc >> (8 * i));
  const uint32_t hcrc = uint32_t(::crc32(0, b.data(), 60));
  for (int i = 0; i < 4; ++i) b[60 + i] = uint8_t(hcrc >> (8 * i));
}

// A buffer of the bytes `b` with the metadata (timestamps, flags) of `packet`.
inline GstBuffer *buffer_like(GstBuffer *packet, const Bytes &b) {
  GstBuffer *out = gst_buffer_new_allocate(nullptr, b.size(), nullptr);
  gst_buffer_fill(out, 0, b.data(), b.size());
  gst_buffer_copy_into(out, packet, GST_BUFFER_COPY_METADATA, 0, -1);
  return out;
}

// Runs frames through cudadiffenc: returns the packets (stream header
// excluded; it is checked) and keeps the model of what decoders must show.
struct Encoded {
  int version = 2;
  std::vector<GstBuffer *> packets;
  std::vector<Bytes> inputs, pictures;  // per frame
  GstCaps *caps = nullptr;              // the encoder's output caps
  ~Encoded() {
    for (GstBuffer *b : packets) gst_buffer_unref(b);
    if (caps) gst_caps_unref(caps);
  }
};

}  // namespace diff_test
