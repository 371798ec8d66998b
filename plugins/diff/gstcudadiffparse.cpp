/* cudadiffparse: the difference stream's parser (a GstBaseParse).
 *
 * It finds the packets of a byte stream with the decoder's own reader
 * (cudadiffstream.h: magic, header checks, payload checksum), drops what is
 * not a packet, and pushes one packet per buffer: keyframes without
 * GST_BUFFER_FLAG_DELTA_UNIT, the stream header packet with
 * GST_BUFFER_FLAG_HEADER, timestamps from the packet headers (the sender's,
 * shifted so that the stream starts at 0) on a byte stream. That is
 * what GstBaseParse needs to answer duration queries and seek in time in a
 * recording (its index of keyframes, or a scan of the file). Upstream
 * timestamps (a segment in time: RTP, a timed appsrc) are kept.
 *
 * Caps: sink video/x-cudadiff, src video/x-cudadiff with
 * parsed=true and the stream's version, width, height and framerate.
 */
#include "gstcudadiffparse.h"

#include <string>

#include "cudadiffstream.h"

GST_DEBUG_CATEGORY_STATIC(gst_cudadiff_parse_debug);
#define GST_CAT_DEFAULT gst_cudadiff_parse_debug

namespace stream = cudadiff::stream;

struct _GstCudaDiffParse {
  GstBaseParse parent;
  // The stream's first sender timestamp (in a file, output pts = sender
  // pts - base).
  bool have_base;
  guint64 base;
  // A byte stream pushed from upstream (a live sender): output pts = sender
  // pts - offset, where offset moves when the sender's timestamps go back
  // (it restarted) so that the output continues from `next` (the end of
  // the last packet), as cudadiffdec does on untimed input; not once after
  // a seek (`seeked`, from the application's thread).
  bool have_offset;
  guint64 offset, next;
  gint seeked;   // atomic
  bool scanned;  // the duration from the last packets (pull mode), once
  // What the src caps say.
  int version, width, height, fps_n, fps_d;
  cudadiff::VideoFormat format;
  guint64 max_pixels;  // property (object lock)
  // A packet was dropped for max-pixels since the last frame passed (one
  // warning until one passes again).
  bool warned;
};

enum { PROP_0, PROP_MAX_PIXELS };

G_DEFINE_TYPE(GstCudaDiffParse, gst_cudadiff_parse, GST_TYPE_BASE_PARSE)
GST_ELEMENT_REGISTER_DEFINE(cudadiffparse, "cudadiffparse", GST_RANK_PRIMARY + 1,
                            GST_TYPE_CUDADIFF_PARSE)

static GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE(
    "sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS("video/x-cudadiff"));
static GstStaticPadTemplate src_template =
    GST_STATIC_PAD_TEMPLATE("src", GST_PAD_SRC, GST_PAD_ALWAYS,
                            GST_STATIC_CAPS("video/x-cudadiff, parsed = (boolean) true"));

static void reset(GstCudaDiffParse *self) {
  self->have_base = false;
  self->scanned = false;
  self->base = 0;
  self->have_offset = false;
  self->offset = self->next = 0;
  g_atomic_int_set(&self->seeked, 0);
  self->version = self->width = self->height = self->fps_n = 0;
  self->fps_d = 1;
  self->format = cudadiff::VideoFormat::Unknown;
  self->warned = false;
}

static gboolean gst_cudadiff_parse_start(GstBaseParse *parse) {
  auto *self = GST_CUDADIFF_PARSE(parse);
  reset(self);
  gst_base_parse_set_min_frame_size(parse, stream::kHeaderSize);
  gst_base_parse_set_has_timing_info(parse, TRUE);
  gst_base_parse_set_syncable(parse, TRUE);
  // The packets' own timestamps, not ones made up from the framerate.
  gst_base_parse_set_pts_interpolation(parse, FALSE);
  return TRUE;
}

static gboolean gst_cudadiff_parse_stop(GstBaseParse *parse) {
  reset(GST_CUDADIFF_PARSE(parse));
  return TRUE;
}

// Src caps from a packet's header: when the version, format, size or
// framerate change (the stream header, a keyframe of another stream).
static bool update_caps(GstCudaDiffParse *self, const stream::PacketHeader &h) {
  if (self->version == h.version && self->format == h.format && self->width == int(h.width) &&
      self->height == int(h.height) && self->fps_n == int(h.fps_n) && self->fps_d == int(h.fps_d))
    return true;
  GstCaps *caps = gst_caps_new_simple("video/x-cudadiff", "parsed", G_TYPE_BOOLEAN, TRUE, "version",
                                      G_TYPE_INT, int(h.version), "width", G_TYPE_INT, int(h.width),
                                      "height", G_TYPE_INT, int(h.height), "framerate",
                                      GST_TYPE_FRACTION, int(h.fps_n), int(h.fps_d), nullptr);
  const gboolean ok = gst_pad_set_caps(GST_BASE_PARSE_SRC_PAD(self), caps);
  gst_caps_unref(caps);
  if (!ok) return false;
  self->version = h.version;
  self->format = h.format;
  self->width = int(h.width);
  self->height = int(h.height);
  self->fps_n = int(h.fps_n);
  self->fps_d = int(h.fps_d);
  if (h.fps_n > 0 && h.fps_d > 0)
    gst_base_parse_set_frame_rate(GST_BASE_PARSE(self), guint(h.fps_n), guint(h.fps_d), 0, 0);
  return true;
}

// In pull mode (a file): the duration from the end of the last whole packet
// in the file's last kTailBytes, so that players show it from the start
// (else GstBaseParse estimates it from the bytes per frame so far).
constexpr guint64 kTailBytes = 4u << 20;
static void scan_duration(GstCudaDiffParse *self) {
  self->scanned = true;
  GstPad *sink = GST_BASE_PARSE_SINK_PAD(self);
  if (GST_PAD_MODE(sink) != GST_PAD_MODE_PULL) return;
  gint64 size = 0;
  if (!gst_pad_peer_query_duration(sink, GST_FORMAT_BYTES, &size) || size <= 0) return;
  const guint64 from = guint64(size) > kTailBytes ? guint64(size) - kTailBytes : 0;
  GstBuffer *tail = nullptr;
  if (gst_pad_pull_range(sink, from, guint(guint64(size) - from), &tail) != GST_FLOW_OK) return;
  GstMapInfo map;
  if (!gst_buffer_map(tail, &map, GST_MAP_READ)) {
    gst_buffer_unref(tail);
    return;
  }
  guint64 end = 0;
  bool found = false;
  stream::ArrayQueue all(map.data, map.size);
  for (ptrdiff_t at = all.find_magic(0); at >= 0;) {
    stream::ArrayQueue rest(map.data + at, map.size - size_t(at));
    const stream::Parser::Step step = stream::Parser().next(rest, true);
    if (step.kind == stream::Parser::Kind::Packet && !step.header.stream_header() &&
        step.header.pts != stream::kNoTime && step.header.pts >= self->base) {
      const guint64 e = step.header.pts - self->base +
                        (step.header.duration != stream::kNoTime ? step.header.duration : 0);
      if (e > end) end = e;
      found = true;
      at = all.find_magic(size_t(at) + step.bytes);
    } else {
      at = all.find_magic(size_t(at) + 1);
    }
  }
  gst_buffer_unmap(tail, &map);
  gst_buffer_unref(tail);
  if (!found) return;
  GST_DEBUG_OBJECT(self, "duration %" GST_TIME_FORMAT " from the file's last packets",
                   GST_TIME_ARGS(end));
  gst_base_parse_set_duration(GST_BASE_PARSE(self), GST_FORMAT_TIME, gint64(end), 0);
}

static GstFlowReturn gst_cudadiff_parse_handle_frame(GstBaseParse *parse, GstBaseParseFrame *frame,
                                                     gint *skipsize) {
  auto *self = GST_CUDADIFF_PARSE(parse);
  GstMapInfo map;
  if (!gst_buffer_map(frame->buffer, &map, GST_MAP_READ)) {
    GST_ELEMENT_ERROR(self, RESOURCE, READ, ("cannot map the input buffer"), (nullptr));
    return GST_FLOW_ERROR;
  }
  stream::ArrayQueue queue(map.data, map.size);
  stream::Parser parser;
  GST_OBJECT_LOCK(self);
  parser.set_max_pixels(self->max_pixels);
  GST_OBJECT_UNLOCK(self);
  const stream::Parser::Step step = parser.next(queue, GST_BASE_PARSE_DRAINING(parse));
  switch (step.kind) {
    case stream::Parser::Kind::NeedData:
      // The whole header first, then the whole packet.
      gst_buffer_unmap(frame->buffer, &map);
      gst_base_parse_set_min_frame_size(
          parse, guint(step.bytes > 0 ? step.bytes : size_t(stream::kHeaderSize)));
      *skipsize = 0;
      return GST_FLOW_OK;
    case stream::Parser::Kind::Skip:
      gst_buffer_unmap(frame->buffer, &map);
      if (step.unsupported) {
        GST_ELEMENT_ERROR(self, STREAM, WRONG_TYPE,
                          ("the stream is of a version this parser does not read"),
                          ("%s", step.problem.c_str()));
        return GST_FLOW_ERROR;
      }
      if (step.too_large && !self->warned) {
        self->warned = true;
        GST_ELEMENT_WARNING(
            self, STREAM, DECODE,
            ("packets announce frames larger than max-pixels; they are dropped"),
            ("%s; raise max-pixels (0: no limit) to pass this stream", step.problem.c_str()));
      }
      GST_DEBUG_OBJECT(self, "skipping %zu bytes: %s", step.bytes, step.problem.c_str());
      *skipsize = gint(step.bytes);
      return GST_FLOW_OK;
    case stream::Parser::Kind::Packet:
      break;
  }
  gst_buffer_unmap(frame->buffer, &map);
  const stream::PacketHeader &h = step.header;
  gst_base_parse_set_min_frame_size(parse, stream::kHeaderSize);
  if (!h.stream_header()) self->warned = false;
  GstBuffer *buf = frame->buffer;
  // (a stream header names the stream's format and size too)
  if (!update_caps(self, h)) return GST_FLOW_NOT_NEGOTIATED;
  if (h.stream_header()) {
    GST_BUFFER_FLAG_SET(buf, GST_BUFFER_FLAG_HEADER);
    GST_BUFFER_PTS(buf) = GST_BUFFER_DTS(buf) = GST_CLOCK_TIME_NONE;
    GST_BUFFER_DURATION(buf) = GST_CLOCK_TIME_NONE;
  } else {
    if (h.keyframe())
      GST_BUFFER_FLAG_UNSET(buf, GST_BUFFER_FLAG_DELTA_UNIT);
    else
      GST_BUFFER_FLAG_SET(buf, GST_BUFFER_FLAG_DELTA_UNIT);
    // The sender's, from 0 (GstBaseParse replaces them with upstream's
    // when upstream's segment is in time: RTP, a timed appsrc).
    if (h.pts != stream::kNoTime) {
      if (!self->have_base) {
        self->base = h.pts;
        self->have_base = true;
      }
      if (!self->scanned) scan_duration(self);
      const guint64 dur = h.duration != stream::kNoTime ? h.duration : 0;
      GstClockTime pts = GST_CLOCK_TIME_NONE;
      if (GST_PAD_MODE(GST_BASE_PARSE_SINK_PAD(parse)) == GST_PAD_MODE_PULL) {
        // A file, read and searched in any order by GstBaseParse: one
        // offset. A packet before the first (a sender that restarted in
        // the recording) gets no timestamp.
        if (h.pts >= self->base) pts = h.pts - self->base;
      } else {
        const bool seeked = g_atomic_int_compare_and_exchange(&self->seeked, 1, 0);
        if (!self->have_offset) {
          self->offset = h.pts;  // the first packet at 0
          self->have_offset = true;
        } else if (seeked) {
          if (h.pts < self->offset) self->offset = h.pts;
        } else if (h.pts < self->offset || h.pts - self->offset < self->next) {
          self->offset = h.pts - self->next;
        }
        pts = h.pts - self->offset;
        self->next = pts + dur;
      }
      GST_BUFFER_PTS(buf) = GST_BUFFER_DTS(buf) = pts;
      if (GST_CLOCK_TIME_IS_VALID(pts) && h.duration != stream::kNoTime)
        GST_BUFFER_DURATION(buf) = h.duration;
    }
  }
  return gst_base_parse_finish_frame(parse, frame, gint(step.bytes));
}

static gboolean gst_cudadiff_parse_src_event(GstBaseParse *parse, GstEvent *event) {
  if (GST_EVENT_TYPE(event) == GST_EVENT_SEEK)
    g_atomic_int_set(&GST_CUDADIFF_PARSE(parse)->seeked, 1);
  return GST_BASE_PARSE_CLASS(gst_cudadiff_parse_parent_class)->src_event(parse, event);
}

static void gst_cudadiff_parse_set_property(GObject *object, guint prop_id, const GValue *value,
                                            GParamSpec *pspec) {
  auto *self = GST_CUDADIFF_PARSE(object);
  switch (prop_id) {
    case PROP_MAX_PIXELS:
      GST_OBJECT_LOCK(self);
      self->max_pixels = g_value_get_uint64(value);
      GST_OBJECT_UNLOCK(self);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
      break;
  }
}

static void gst_cudadiff_parse_get_property(GObject *object, guint prop_id, GValue *value,
                                            GParamSpec *pspec) {
  auto *self = GST_CUDADIFF_PARSE(object);
  switch (prop_id) {
    case PROP_MAX_PIXELS:
      GST_OBJECT_LOCK(self);
      g_value_set_uint64(value, self->max_pixels);
      GST_OBJECT_UNLOCK(self);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
      break;
  }
}

static void gst_cudadiff_parse_class_init(GstCudaDiffParseClass *klass) {
  GObjectClass *gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  GstBaseParseClass *parse_class = GST_BASE_PARSE_CLASS(klass);
  GST_DEBUG_CATEGORY_INIT(gst_cudadiff_parse_debug, "cudadiffparse", 0, "difference stream parser");
  gst_element_class_add_static_pad_template(element_class, &sink_template);
  gst_element_class_add_static_pad_template(element_class, &src_template);
  gst_element_class_set_static_metadata(
      element_class, "Difference stream parser", "Codec/Parser/Video",
      "Splits a byte stream of cudadiffenc's packets (a recording, tcpclientsrc) into packets "
      "timestamped from their headers, keyframes marked, so that players get a duration and can "
      "seek in time; damaged bytes are dropped (cudadiffdec sees the gap)",
      "gst-cudadiff");
  gobject_class->set_property = gst_cudadiff_parse_set_property;
  gobject_class->get_property = gst_cudadiff_parse_get_property;
  g_object_class_install_property(
      gobject_class, PROP_MAX_PIXELS,
      g_param_spec_uint64(
          "max-pixels", "Largest frame",
          "Largest frame (width x height, in pixels) a packet may announce: the packets of a "
          "larger one are dropped with a warning before their bytes are collected (a crafted "
          "header could otherwise make the parser wait for up to 1 GiB). 0 = no limit but the "
          "stream format's 1 GiB per frame. Default: 35389440 (8192x4320), as cudadiffdec's",
          0, G_MAXUINT64, stream::Parser::kDefaultMaxPixels,
          static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
                                   GST_PARAM_MUTABLE_PLAYING)));
  parse_class->start = GST_DEBUG_FUNCPTR(gst_cudadiff_parse_start);
  parse_class->stop = GST_DEBUG_FUNCPTR(gst_cudadiff_parse_stop);
  parse_class->handle_frame = GST_DEBUG_FUNCPTR(gst_cudadiff_parse_handle_frame);
  parse_class->src_event = GST_DEBUG_FUNCPTR(gst_cudadiff_parse_src_event);
}

static void gst_cudadiff_parse_init(GstCudaDiffParse *self) {
  self->max_pixels = stream::Parser::kDefaultMaxPixels;
  reset(self);
}
