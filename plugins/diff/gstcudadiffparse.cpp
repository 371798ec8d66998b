/* cudadiffparse: the difference stream's parser (a GstBaseParse).
 *
 * It finds the packets of a byte stream with the decoder's own reader
 * (cudadiffstream.h: magic, header checks, payload checksum), drops what is
 * not a packet, and pushes one packet per buffer: keyframes without
 * GST_BUFFER_FLAG_DELTA_UNIT, the stream header packet with
 * GST_BUFFER_FLAG_HEADER, timestamps from the packet headers on a byte
 * stream (stream::Timeline: from 0, a restarted sender continuing the line).
 * In a file it first walks the packet headers (scan_file()): the duration,
 * and every keyframe in GstBaseParse's index, which is what a seek in time
 * needs. Upstream timestamps (a segment in time: RTP, srtsrc, a timed
 * appsrc) are kept; a packet that starts no upstream buffer follows the
 * last timed one at the sender's pace (pre_push_frame()).
 *
 * Caps: sink video/x-cudadiff, src video/x-cudadiff with
 * parsed=true and the stream's version, width, height and framerate, and
 * once a stream header has passed, what it says of the picture as the
 * decoder's caps will say it (pixel aspect ratio, interlace mode and field
 * order, colorimetry, chroma siting), as an encoder's caps carry them.
 */
#include "gstcudadiffparse.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cudadiffstream.h"
#include "gstcudadiffdescribed.h"
#include "gstcudadiffutils.h"

GST_DEBUG_CATEGORY_STATIC(gst_cudadiff_parse_debug);
#define GST_CAT_DEFAULT gst_cudadiff_parse_debug

namespace stream = cudadiff::stream;

// The output timeline: stream::Timeline (cudadiffstream.h).
using Run = stream::TimeRun;
using stream::Timeline;

// What a scan of a file's packet headers found (pull mode).
struct FileMap {
  bool scanned = false, valid = false;
  std::vector<Run> runs;                               // by offset
  std::vector<std::pair<guint64, guint64>> keyframes;  // offset, output pts
  // Stream headers: offset, output pts of the first timed packet after it.
  std::vector<std::pair<guint64, guint64>> headers;
  guint64 end = 0;   // the last packet's end
  guint64 size = 0;  // the file's
};

struct ParseState {
  Timeline live;  // push mode, and pull mode without a scan
  FileMap file;
  // Upstream's segment is in time (RTP, srtsrc, a timed appsrc): GstBaseParse
  // gives a packet the time of the upstream buffer it starts in, the first
  // of that buffer's packets only; pre_push_frame() times the others.
  bool upstream_time = false;
  // The time of a packet without a sender pts (the stream header) that
  // started an upstream buffer: the next packet with one came in the same
  // buffer (none: GST_CLOCK_TIME_NONE).
  guint64 upstream_pending = GST_CLOCK_TIME_NONE;
  // The packet being finished has no time (a stream header or a frame at a
  // variable framerate, without sender timestamps): pre_push_frame() takes
  // away the one GstBaseParse interpolated from the packets before it.
  bool untimed = false;
  // Whether a keyframe has passed since start, a flush or a jump in the
  // offsets (a seek in pull mode): a damaged keyframe before one is where
  // decoding would have started, which the decoder cannot see (it gets
  // deltas only, as on a late join), so the parser reports it.
  bool keyframe_passed = false;
  // That warning was posted since then (once until a keyframe passes: a
  // run of damaged keyframes, or crafted ones, gives one warning).
  bool warned_start = false;
  // Whether a keyframe has passed since the start (not reset by flushes):
  // before one, the deltas of a live byte stream joined between keyframes
  // are dropped (live_join_delta()).
  bool first_keyframe_passed = false;
  // The stream headers that passed, or that the scan of a file found, by
  // offset (whole packets, of a few hundred bytes; at most kMaxHeaders, the
  // lowest offsets forgotten first), and where the last packet that passed
  // ended if it was one. A seek lands on a keyframe past the stream header
  // of its part: that header goes out again before it (header_before()).
  static constexpr size_t kMaxHeaders = 64;
  std::map<guint64, std::vector<uint8_t>> headers;
  guint64 header_end = GST_BUFFER_OFFSET_NONE;
  // A copy of the header kept before it (of the same stream, the same
  // description: a sender sends it again with keyframes, e.g. at each
  // client's PLAY) is not kept, so that the limit counts the parts of the
  // stream.
  void keep_header(guint64 offset, const uint8_t *data, size_t n) {
    auto it = headers.lower_bound(offset);
    if (it != headers.begin() && same_header(std::prev(it)->second, data, n)) return;
    headers[offset].assign(data, data + n);
    while (headers.size() > kMaxHeaders) headers.erase(headers.begin());
  }
  static bool same_header(const std::vector<uint8_t> &a, const uint8_t *b, size_t n) {
    stream::PacketHeader ha, hb;
    return a.size() == n &&
           stream::read_header(a.data(), n, &ha, nullptr) == stream::HeaderStatus::Ok &&
           stream::read_header(b, n, &hb, nullptr) == stream::HeaderStatus::Ok &&
           ha.version == hb.version && ha.format == hb.format && ha.width == hb.width &&
           ha.height == hb.height && ha.fps_n == hb.fps_n && ha.fps_d == hb.fps_d &&
           std::equal(a.begin() + stream::kHeaderSize, a.end(), b + stream::kHeaderSize);
  }
  // Decoding starts again (a flush, a jump in the offsets): no keyframe
  // has passed, nothing has been said about one.
  void start_again() {
    keyframe_passed = warned_start = false;
    header_end = GST_BUFFER_OFFSET_NONE;  // (a header on its way may have been flushed)
    parser.reset();
  }
  guint64 next_offset = GST_BUFFER_OFFSET_NONE;  // where the last frame ended
  // What it found inside damaged packets, by offset, from one frame to the
  // next.
  stream::Parser parser;
  // Upstream's last segment (a new one may start its times again:
  // Timeline::forget_output()).
  GstCudaDiffLastSegment last_segment;
  // Push mode from an upstream that seeks in bytes (filesrc ! queue): the
  // keyframes put into GstBaseParse's index as they pass (offsets, sorted).
  // -1: not asked yet.
  int byte_seekable = -1;
  std::vector<guint64> indexed;
  // Where the stream ended when EOS came in push mode (a byte offset and
  // the output time there; 0: not yet): index_end().
  guint64 end_offset = 0, end_pts = 0;
  // The latest time of a keyframe put into the index (push mode).
  guint64 last_key_pts = 0;
  // What the stream headers said of the picture, and what of it the src
  // caps say (!caps_described_seen: nothing, no stream header of their
  // format, size and framerate having passed).
  GstCudaDiffDescriptions descriptions;
  GstCudaDiffDescribed caps_described;
  bool caps_described_seen = false;
};

struct _GstCudaDiffParse {
  GstBaseParse parent;
  ParseState *state;
  // Push mode: the seqnums of the seeks sent upstream and not answered yet,
  // oldest first (object lock; an application may seek again before the
  // last seek has landed, and each seek's answer counts), and whether the
  // segment that answered one came (the packets after it do not start a
  // run: no restart).
  guint32 seek_seqnums[8];
  guint n_seeks;
  bool seeked;
  // Pull mode: the file's scan put every keyframe into GstBaseParse's index
  // (atomic: read by seeks from the application's thread).
  gint file_indexed;
  // Push mode: EOS arrived (its drain is the end of the stream; the base
  // class also drains at a DISCONT buffer and at a new segment, a gap).
  bool at_eos;
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
  // (under the object lock: convert() reads the file's map from other threads)
  GST_OBJECT_LOCK(self);
  g_atomic_int_set(&self->file_indexed, 0);
  *self->state = ParseState();
  self->n_seeks = 0;
  GST_OBJECT_UNLOCK(self);
  self->at_eos = false;
  self->seeked = false;
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
  ParseState *st = self->state;
  const GstCudaDiffDescribed *described = st->descriptions.find(h);
  if (self->version == h.version && self->format == h.format && self->width == int(h.width) &&
      self->height == int(h.height) && self->fps_n == int(h.fps_n) && self->fps_d == int(h.fps_d) &&
      st->caps_described_seen == (described != nullptr) &&
      (!described || st->caps_described == *described))
    return true;
  GstCaps *caps = gst_caps_new_simple("video/x-cudadiff", "parsed", G_TYPE_BOOLEAN, TRUE, "version",
                                      G_TYPE_INT, int(h.version), "width", G_TYPE_INT, int(h.width),
                                      "height", G_TYPE_INT, int(h.height), "framerate",
                                      GST_TYPE_FRACTION, int(h.fps_n), int(h.fps_d), nullptr);
  // The fields of the raw video caps the decoder will give.
  GstVideoInfo info;
  gst_video_info_init(&info);
  if (described &&
      gst_video_info_set_format(&info, gst_cudadiff_format_to_gst(h.format), h.width, h.height)) {
    described->apply(&info);
    if (GstCaps *raw = gst_video_info_to_caps(&info)) {
      const GstStructure *from = gst_caps_get_structure(raw, 0);
      GstStructure *to = gst_caps_get_structure(caps, 0);
      for (const char *field : {"pixel-aspect-ratio", "interlace-mode", "field-order",
                                "colorimetry", "chroma-site", "multiview-mode", "multiview-flags"})
        if (const GValue *v = gst_structure_get_value(from, field))
          gst_structure_set_value(to, field, v);
      gst_caps_unref(raw);
    }
  }
  const gboolean ok = gst_pad_set_caps(GST_BASE_PARSE_SRC_PAD(self), caps);
  gst_caps_unref(caps);
  if (!ok) {
    // On a flushing pad the caps are stored but not pushed: the next
    // packet sets its own again, whatever they are.
    self->version = 0;
    return false;
  }
  self->version = h.version;
  self->format = h.format;
  self->width = int(h.width);
  self->height = int(h.height);
  self->fps_n = int(h.fps_n);
  self->fps_d = int(h.fps_d);
  st->caps_described = described ? *described : GstCudaDiffDescribed();
  st->caps_described_seen = described != nullptr;
  // At a variable framerate (0/1) GstBaseParse forgets the frame duration
  // of a framerate before it, which it would otherwise give untimed packets
  // (and their dts) after a change of caps.
  const bool fixed_rate = !gst_cudadiff_framerate_unknown(self->fps_n, self->fps_d);
  // (0/0, not 0/1: GstBaseParse's conversion of frames to time divides by
  // the numerator whenever the denominator is not 0.)
  gst_base_parse_set_frame_rate(GST_BASE_PARSE(self), fixed_rate ? guint(h.fps_n) : 0,
                                fixed_rate ? guint(h.fps_d) : 0, 0, 0);
  return true;
}

// Pull mode (a file): walks the packet headers from the start, jumping
// over each payload (64 bytes read per packet, as avidemux walks its chunk
// headers), resynchronising on the magic after a header that fails, to
// learn before the first packet goes out:
// - the timeline's runs by offset, so that each packet's output pts does
//   not depend on the order GstBaseParse reads the file in (it seeks);
// - every keyframe's offset and time, given to GstBaseParse's index, so
//   that a seek starts at the keyframe before its target;
// - the duration: where the last packet ends.
// Payloads are not checked here; a packet that turns out damaged is
// dropped when it is read.
constexpr guint kResyncChunk = 64 * 1024;
// An entry at the end of the stream (its size in bytes, its end in time)
// in GstBaseParse's index, after the keyframes': GstBaseParse also indexes
// every frame that passes with a time, deltas included, and checks only
// that it lies beyond its last keyframe entry; without this entry each
// pass over the frames after the last keyframe (a recording looped, or
// seeked in again and again) added them all once more, and its index grew
// for as long as the stream played. A seek to the end or after it lands
// at the end.
// `last_key_pts`: the time of the last keyframe in the index; an end at
// that time (a last keyframe without a duration) would take that
// keyframe's place in the index's lookup by time, so it is left out.
static void index_end(GstCudaDiffParse *self, guint64 offset, guint64 pts, guint64 last_key_pts) {
  if (offset == 0 || pts == stream::kNoTime || pts <= last_key_pts) return;
  gst_base_parse_add_index_entry(GST_BASE_PARSE(self), offset, pts, TRUE, TRUE);
}

// A stream header's payload (what describes the picture) is a few hundred
// bytes; a larger one is not kept for seeks.
constexpr guint32 kMaxHeaderPayload = 4096;

static void scan_file(GstCudaDiffParse *self, guint64 max_pixels) {
  FileMap &fm = self->state->file;
  fm.scanned = true;
  GstPad *sink = GST_BASE_PARSE_SINK_PAD(self);
  if (GST_PAD_MODE(sink) != GST_PAD_MODE_PULL) return;
  gint64 size = 0;
  if (!gst_pad_peer_query_duration(sink, GST_FORMAT_BYTES, &size) || size <= 0) return;
  // A view of the file from o holding at least n bytes, *avail of them: in
  // the last buffer pulled where that holds them, else in a new pull of
  // `want` (>= n) bytes at o (fewer at the end); null past the end. (The
  // search for the next magic after a crafted header reads the same 64 KiB
  // window again instead of pulling it anew at every header.)
  GstBuffer *buf = nullptr;
  GstMapInfo map;
  guint64 buf_at = 0;
  auto release = [&] {
    if (buf) {
      gst_buffer_unmap(buf, &map);
      gst_buffer_unref(buf);
      buf = nullptr;
    }
  };
  auto view = [&](guint64 o, guint n, guint want, gsize *avail) -> const uint8_t * {
    if (buf && o >= buf_at && o - buf_at + n <= map.size) {
      *avail = map.size - gsize(o - buf_at);
      return map.data + (o - buf_at);
    }
    release();
    if (o >= guint64(size)) return nullptr;
    if (gst_pad_pull_range(sink, o, want, &buf) != GST_FLOW_OK) {
      buf = nullptr;
      return nullptr;
    }
    if (!gst_buffer_map(buf, &map, GST_MAP_READ)) {
      gst_buffer_unref(buf);
      buf = nullptr;
      return nullptr;
    }
    buf_at = o;
    *avail = map.size;
    return map.data;
  };
  Timeline tl;
  guint64 o = 0;
  // The last packet accepted, until the jump over its payload lands on a
  // packet: if it does not (its payload size is wrong: a crafted header),
  // the search starts again inside that payload.
  guint64 back = G_MAXUINT64;
  guint64 header = G_MAXUINT64;  // a stream header waiting for its time
  bool ok = true;
  // (a jump past the end is a wrong payload size too, or a cut last packet)
  while (ok && (o < guint64(size) || (o > guint64(size) && back != G_MAXUINT64))) {
    gsize avail = 0;
    const uint8_t *p = o + stream::kHeaderSize <= guint64(size)
                           ? view(o, stream::kHeaderSize, stream::kHeaderSize, &avail)
                           : nullptr;
    stream::PacketHeader h;
    if (p && avail >= stream::kHeaderSize &&
        stream::read_header(p, stream::kHeaderSize, &h, nullptr) == stream::HeaderStatus::Ok &&
        !stream::exceeds_pixels(h, max_pixels)) {
      h = stream::with_frame_time(h);
      // (a packet cut by the end of the file, a writer killed mid-packet, is
      // not shown: neither its time nor its keyframe counts)
      const bool whole = o + stream::kHeaderSize + guint64(h.payload_size) <= guint64(size);
      if (h.stream_header()) {
        header = o;
        // (its bytes, for a seek past it: header_before(), which checks
        // them)
        const guint n = guint(stream::kHeaderSize + h.payload_size);
        gsize have = 0;
        const uint8_t *q =
            whole && h.payload_size <= kMaxHeaderPayload ? view(o, n, n, &have) : nullptr;
        if (q && have >= n) self->state->keep_header(o, q, n);
      } else if (h.pts != stream::kNoTime && whole) {
        bool new_run = false;
        const guint64 out = tl.place(h, o, false, &new_run);
        if (new_run) fm.runs.push_back(tl.run);
        // (times kept in order for convert(): a jittered timestamp may fall
        // back by less than a frame within a run)
        if (h.keyframe())
          fm.keyframes.emplace_back(
              o, fm.keyframes.empty() ? out : std::max<guint64>(out, fm.keyframes.back().second));
        if (header != G_MAXUINT64) fm.headers.emplace_back(header, out);
        header = G_MAXUINT64;
        fm.end = tl.end;
      }
      back = o;
      o += stream::kHeaderSize + guint64(h.payload_size);
      continue;
    }
    if (o + stream::kHeaderSize > guint64(size) && back == G_MAXUINT64) break;  // a tail
    // Not a packet here: the next magic after o, or after the packet that
    // jumped here.
    guint64 from = back != G_MAXUINT64 && back + 1 < o ? back + 1 : o + 1;
    back = G_MAXUINT64;
    o = guint64(size);
    while (from + 4 <= guint64(size)) {
      p = view(from, 4, kResyncChunk, &avail);
      if (!p) {
        ok = false;
        break;
      }
      stream::ArrayQueue chunk(p, avail);
      const ptrdiff_t at = chunk.find_magic(0);
      if (at >= 0) {
        o = from + guint64(at);
        break;
      }
      if (avail < 4) break;
      from += avail - 3;  // a magic may straddle the chunks
    }
  }
  release();
  fm.size = guint64(size);
  fm.valid = !fm.runs.empty();
  if (!fm.valid) return;
  for (const auto &k : fm.keyframes)
    gst_base_parse_add_index_entry(GST_BASE_PARSE(self), k.first, k.second, TRUE, TRUE);
  index_end(self, guint64(size), fm.end, fm.keyframes.empty() ? 0 : fm.keyframes.back().second);
  g_atomic_int_set(&self->file_indexed, 1);
  GST_DEBUG_OBJECT(self,
                   "file of %" G_GINT64_FORMAT
                   " bytes: %zu runs, %zu keyframes, ends at %" GST_TIME_FORMAT,
                   size, fm.runs.size(), fm.keyframes.size(), GST_TIME_ARGS(fm.end));
  gst_base_parse_set_duration(GST_BASE_PARSE(self), GST_FORMAT_TIME, gint64(fm.end), 0);
}

// Push mode: whether upstream seeks in bytes within a known size (a file
// through a queue), as GstBaseParse asks before it indexes what passes.
static bool byte_seekable(GstCudaDiffParse *self) {
  ParseState *st = self->state;
  if (st->byte_seekable < 0)
    st->byte_seekable = gst_cudadiff_upstream_is_file(GST_BASE_PARSE_SINK_PAD(self)) ? 1 : 0;
  return st->byte_seekable > 0;
}

// Push mode: a keyframe at `offset`, output time `pts`, into GstBaseParse's
// index (once). GstBaseParse indexes what passes too, but every 100 ms at
// most, deltas included, and never the first keyframe (it is within its
// byte interval of the start). Its index's lookup of a key unit before a
// time then returned that earliest delta for targets before its first
// indexed keyframe, and an accurate seek there started on a delta: the
// decoder showed nothing until the next keyframe.
static void index_keyframe(GstCudaDiffParse *self, guint64 offset, guint64 pts) {
  std::vector<guint64> &indexed = self->state->indexed;
  auto it = std::lower_bound(indexed.begin(), indexed.end(), offset);
  if (it != indexed.end() && *it == offset) return;
  if (!byte_seekable(self)) return;
  indexed.insert(it, offset);
  gst_base_parse_add_index_entry(GST_BASE_PARSE(self), offset, pts, TRUE, TRUE);
  // (GstBaseParse's mark of how far it has indexed moved back to this
  // keyframe: the end again, once it is known)
  ParseState *st = self->state;
  st->last_key_pts = std::max(st->last_key_pts, pts);
  index_end(self, st->end_offset, st->end_pts, st->last_key_pts);
}

// Output pts of a packet at `offset` in a scanned file.
static guint64 file_pts(const FileMap &fm, guint64 offset, guint64 pts) {
  auto it = std::upper_bound(fm.runs.begin(), fm.runs.end(), offset,
                             [](guint64 o, const Run &r) { return o < r.offset; });
  if (it != fm.runs.begin()) --it;
  return Timeline::at(*it, pts);
}

// A restarted sender's run starts not before the present of a playing
// pipeline that receives the stream as it comes (stream::Timeline::place():
// else a live viewer's later frames would all be late), asked only when
// `h` begins such a run; kNoTime otherwise.
static guint64 live_now(GstBaseParse *parse, const stream::PacketHeader &h, bool keep) {
  if (!GST_CUDADIFF_PARSE(parse)->state->live.restarts(h, keep)) return stream::kNoTime;
  return gst_cudadiff_live_present(GST_ELEMENT(parse), GST_BASE_PARSE_SINK_PAD(parse),
                                   &parse->segment);
}

// Before the first keyframe of a byte stream that comes as it is sent
// (tcpclientsrc joined between keyframes, as tcpserversink's default
// sync-method has it; not a file, nor a timed byte stream): a delta cannot
// be shown, and placed on the timeline it started the times there, so that
// the first frame shown (the keyframe) came that much after 0 and a
// synchronising sink showed every frame that much late, for as long as it
// played (up to a keyframe interval). Such deltas are dropped, and neither
// they nor damaged packets count for the timeline: it starts at the first
// keyframe, as cudadiffdec's own does on such a stream.
static bool before_live_start(GstCudaDiffParse *self, bool pull) {
  const ParseState *st = self->state;
  return !pull && !st->first_keyframe_passed && !st->upstream_time && !byte_seekable(self);
}
static bool live_join_delta(GstCudaDiffParse *self, const stream::PacketHeader &h, bool pull) {
  return !h.stream_header() && !h.keyframe() && before_live_start(self, pull);
}

// Push mode: upstream's end in bytes now, where upstream seeks in bytes
// within a known size (byte_seekable()); 0 otherwise.
static guint64 upstream_end(GstCudaDiffParse *self) {
  gint64 size = 0;
  if (!byte_seekable(self) ||
      !gst_pad_peer_query_duration(GST_BASE_PARSE_SINK_PAD(self), GST_FORMAT_BYTES, &size))
    return 0;
  return size > 0 ? guint64(size) : 0;
}

// Push mode from a file: an end of stream that came before upstream's end
// in bytes, where `data_end` is the end of the bytes received. GstBaseParse
// answers a frame past a seek's stop with EOS upstream, and the file source
// then ends the stream in the middle of the file: the packet that the
// bytes received cut off is whole in the file.
static bool ended_before_upstream_end(GstCudaDiffParse *self, guint64 data_end) {
  return data_end != GST_BUFFER_OFFSET_NONE && data_end < upstream_end(self);
}

// What a skipped piece at `offset` says: warnings, and the time of a
// damaged packet's intact header. `data_end`: where the bytes at hand end.
static void skipped(GstCudaDiffParse *self, const stream::Parser::Step &step, guint64 offset,
                    guint64 data_end, bool pull) {
  ParseState *st = self->state;
  if (step.too_large && !self->warned) {
    self->warned = true;
    GST_ELEMENT_WARNING(
        self, STREAM, DECODE, ("packets announce frames larger than max-pixels; they are dropped"),
        ("%s; raise max-pixels (0: no limit) to pass this stream", step.problem.c_str()));
  }
  // A damaged packet's intact header still says where the sender's
  // time was (as the file's walk counts it).
  // (after a seek it is the first packet after it, as a good one would be)
  // (an untimed one too, timed as a byte stream's: Timeline::timed())
  if (step.damaged && !(pull && st->file.valid) && !st->upstream_time) {
    const stream::PacketHeader timed = st->live.timed(step.header);
    if (!timed.stream_header() && timed.pts != stream::kNoTime && !before_live_start(self, pull)) {
      const bool seeked = self->seeked;
      self->seeked = false;
      bool new_run = false;
      st->live.place(timed, offset, seeked, &new_run,
                     live_now(GST_BASE_PARSE(self), timed, seeked));
    }
  }
  if (step.damaged && !step.superseded && step.header.keyframe() && !step.header.stream_header() &&
      !st->keyframe_passed && !st->warned_start) {
    st->warned_start = true;
    GST_ELEMENT_WARNING(self, STREAM, DECODE,
                        ("damaged keyframe where decoding starts; decoding starts at the next "
                         "keyframe"),
                        ("%s", step.problem.c_str()));
  }
  if (!step.truncated) return;
  if (pull || (self->at_eos && !ended_before_upstream_end(self, data_end)))
    GST_ELEMENT_WARNING(self, STREAM, DECODE, ("truncated stream: its last packet is incomplete"),
                        ("%s", step.problem.c_str()));
  else if (self->at_eos)
    GST_DEBUG_OBJECT(self,
                     "the end of stream came before upstream's end in bytes (a seek's stop): "
                     "the packet it cut is dropped");
  else  // (the decoder reports the gap in the frame numbers)
    GST_DEBUG_OBJECT(self,
                     "a packet cut by a gap in the input (a DISCONT buffer or a new "
                     "segment) is dropped");
}

// The first keyframe after decoding starts again (a seek, a flush, a jump
// in the offsets) that does not follow its stream header: the last stream
// header before it in the stream, if it is of the keyframe's version,
// format, size and framerate, goes out again first (untimed, as it was
// recorded), so that the decoder and the caps describe the picture (pixel
// aspect ratio, interlacing, colorimetry) as that part's sender did. Else a
// seek ahead past it showed the defaults, and a seek back the description
// of a later part of the same format, size and framerate. Not on a timed
// byte stream (RTP, SRT: no seeks, and GstBaseParse times its packets).
static GstFlowReturn header_before(GstCudaDiffParse *self, const stream::PacketHeader &key,
                                   guint64 offset) {
  ParseState *st = self->state;
  if (st->upstream_time || offset == GST_BUFFER_OFFSET_NONE || st->header_end == offset)
    return GST_FLOW_OK;
  auto it = st->headers.lower_bound(offset);
  if (it == st->headers.begin()) return GST_FLOW_OK;
  --it;
  const std::vector<uint8_t> &bytes = it->second;
  stream::PacketHeader h;
  if (stream::read_header(bytes.data(), bytes.size(), &h, nullptr) != stream::HeaderStatus::Ok ||
      !h.stream_header() || bytes.size() != stream::kHeaderSize + h.payload_size ||
      stream::crc32(bytes.data() + stream::kHeaderSize, h.payload_size) != h.payload_crc ||
      h.version != key.version || h.format != key.format || h.width != key.width ||
      h.height != key.height || h.fps_n != key.fps_n || h.fps_d != key.fps_d)
    return GST_FLOW_OK;
  GST_DEBUG_OBJECT(self,
                   "the stream header at %" G_GUINT64_FORMAT
                   " again before the keyframe at %" G_GUINT64_FORMAT,
                   it->first, offset);
  st->descriptions.add(
      h, GstCudaDiffDescribed::read(bytes.data() + stream::kHeaderSize, h.payload_size));
  if (!update_caps(self, h)) return gst_cudadiff_caps_failed_flow(GST_BASE_PARSE_SRC_PAD(self));
  GstBuffer *buf = gst_buffer_new_memdup(bytes.data(), bytes.size());
  GST_BUFFER_FLAG_SET(buf, GST_BUFFER_FLAG_HEADER);
  GST_BUFFER_OFFSET(buf) = it->first;
  // (not a frame: GstBaseParse's counts of frames and bytes leave it out)
  GstBaseParseFrame *frame = gst_base_parse_frame_new(buf, GST_BASE_PARSE_FRAME_FLAG_NO_FRAME, 0);
  gst_buffer_unref(buf);
  const GstFlowReturn ret = gst_base_parse_push_frame(GST_BASE_PARSE(self), frame);
  gst_base_parse_frame_free(frame);
  return ret;
}

static GstFlowReturn gst_cudadiff_parse_handle_frame(GstBaseParse *parse, GstBaseParseFrame *frame,
                                                     gint *skipsize) {
  auto *self = GST_CUDADIFF_PARSE(parse);
  ParseState *st = self->state;
  const bool pull = GST_PAD_MODE(GST_BASE_PARSE_SINK_PAD(parse)) == GST_PAD_MODE_PULL;
  if (st->next_offset != GST_BUFFER_OFFSET_NONE && frame->offset != st->next_offset) {
    st->start_again();
    st->next_offset = frame->offset;
  }
  GST_OBJECT_LOCK(self);
  st->parser.set_max_pixels(self->max_pixels);
  GST_OBJECT_UNLOCK(self);
  // Skipped pieces one after the other are dropped together: in push mode
  // GstBaseParse copies all the bytes it holds into the frame's buffer at
  // every call when they came in several buffers, and after a damaged
  // packet of N bytes (as many held), one call for each header inside it
  // cost N each. The step after them is taken again at the next call.
  GstMapInfo map;
  if (!gst_buffer_map(frame->buffer, &map, GST_MAP_READ)) {
    GST_ELEMENT_ERROR(self, RESOURCE, READ, ("cannot map the input buffer"), (nullptr));
    return GST_FLOW_ERROR;
  }
  stream::ArrayQueue queue(map.data, map.size, frame->offset);
  stream::Parser::Step step;
  size_t dropped = 0;
  for (;;) {
    step = st->parser.next(queue, GST_BASE_PARSE_DRAINING(parse));
    if (step.kind != stream::Parser::Kind::Skip || step.unsupported) break;
    skipped(
        self, step, frame->offset + dropped,
        frame->offset == GST_BUFFER_OFFSET_NONE ? GST_BUFFER_OFFSET_NONE : frame->offset + map.size,
        pull);
    GST_DEBUG_OBJECT(self, "dropping %zu bytes: %s", step.bytes, step.problem.c_str());
    dropped += step.bytes;
    queue.flush(step.bytes);
  }
  gst_buffer_unmap(frame->buffer, &map);
  if (dropped > 0) {
    // Dropped as a frame, not skipped: GstBaseParse stops with an error
    // once it has skipped 2 MiB without finding a frame, and the scan
    // through a damaged packet of a large keyframe passes over its whole
    // payload. Back to waiting for a header, not for that packet.
    st->next_offset = frame->offset + dropped;
    gst_base_parse_set_min_frame_size(parse, stream::kHeaderSize);
    frame->flags |= GST_BASE_PARSE_FRAME_FLAG_DROP;
    return gst_base_parse_finish_frame(parse, frame, gint(dropped));
  }
  if (step.kind != stream::Parser::Kind::NeedData) st->next_offset = frame->offset + step.bytes;
  switch (step.kind) {
    case stream::Parser::Kind::NeedData:
      // The whole header first, then the whole packet.
      gst_base_parse_set_min_frame_size(
          parse, guint(std::min<size_t>(step.bytes > 0 ? step.bytes : size_t(stream::kHeaderSize),
                                        G_MAXUINT)));
      *skipsize = 0;
      return GST_FLOW_OK;
    case stream::Parser::Kind::Skip:  // (only one of a version it does not read)
      GST_ELEMENT_ERROR(self, STREAM, WRONG_TYPE,
                        ("the stream is of a version this parser does not read"),
                        ("%s", step.problem.c_str()));
      return GST_FLOW_ERROR;
    case stream::Parser::Kind::Packet:
      break;
  }
  gst_base_parse_set_min_frame_size(parse, stream::kHeaderSize);
  if (pull && !st->file.scanned) {
    GST_OBJECT_LOCK(self);
    const guint64 max_pixels = self->max_pixels;
    GST_OBJECT_UNLOCK(self);
    scan_file(self, max_pixels);
  }
  // (untimed packets: a scanned file's at their frame number's time, as the
  // scan put them; a byte stream's following the packet before:
  // stream::with_frame_time(), Timeline::timed())
  const stream::PacketHeader h =
      pull && st->file.valid ? stream::with_frame_time(step.header) : st->live.timed(step.header);
  if (!h.stream_header()) self->warned = false;
  if (h.keyframe() && !h.stream_header() && !st->keyframe_passed) {
    const GstFlowReturn ret = header_before(self, h, frame->offset);
    if (ret != GST_FLOW_OK) return ret;
  }
  if (live_join_delta(self, h, pull)) {
    GST_DEBUG_OBJECT(self, "delta %" G_GUINT64_FORMAT " before the first keyframe dropped",
                     h.frame_number);
    frame->flags |= GST_BASE_PARSE_FRAME_FLAG_DROP;
    return gst_base_parse_finish_frame(parse, frame, gint(step.bytes));
  }
  if (h.keyframe() && !h.stream_header()) st->keyframe_passed = st->first_keyframe_passed = true;
  st->header_end = h.stream_header() ? frame->offset + step.bytes : GST_BUFFER_OFFSET_NONE;
  GstBuffer *buf = frame->buffer;
  if (h.stream_header()) {
    GstMapInfo map;
    if (gst_buffer_map(buf, &map, GST_MAP_READ)) {
      if (map.size >= stream::kHeaderSize + h.payload_size) {
        st->descriptions.add(
            h, GstCudaDiffDescribed::read(map.data + stream::kHeaderSize, h.payload_size));
        if (frame->offset != GST_BUFFER_OFFSET_NONE && h.payload_size <= kMaxHeaderPayload)
          st->keep_header(frame->offset, map.data, stream::kHeaderSize + h.payload_size);
      }
      gst_buffer_unmap(buf, &map);
    }
  }
  // (a stream header names the stream's format and size too)
  if (!update_caps(self, h)) return gst_cudadiff_caps_failed_flow(GST_BASE_PARSE_SRC_PAD(self));
  // Timestamps: the sender's, on the timeline above (GstBaseParse replaces
  // them with upstream's when upstream's segment is in time: RTP, a timed
  // appsrc).
  if (h.stream_header()) {
    GST_BUFFER_FLAG_SET(buf, GST_BUFFER_FLAG_HEADER);
    // (not counted as a frame by GstBaseParse, as header_before()'s are not)
    frame->flags |= GST_BASE_PARSE_FRAME_FLAG_NO_FRAME;
    GST_BUFFER_PTS(buf) = GST_BUFFER_DTS(buf) = GST_CLOCK_TIME_NONE;
    GST_BUFFER_DURATION(buf) = GST_CLOCK_TIME_NONE;
    // In a file, the time of the packet after it: GstBaseParse takes its
    // first buffer's time as the file's start when it searches the file
    // for a time.
    if (pull && st->file.valid) {
      auto it = std::lower_bound(
          st->file.headers.begin(), st->file.headers.end(), guint64(frame->offset),
          [](const std::pair<guint64, guint64> &k, guint64 o) { return k.first < o; });
      if (it != st->file.headers.end() && it->first == frame->offset)
        GST_BUFFER_PTS(buf) = GST_BUFFER_DTS(buf) = it->second;
    }
  } else {
    if (h.keyframe())
      GST_BUFFER_FLAG_UNSET(buf, GST_BUFFER_FLAG_DELTA_UNIT);
    else
      GST_BUFFER_FLAG_SET(buf, GST_BUFFER_FLAG_DELTA_UNIT);
    if (h.pts != stream::kNoTime && st->upstream_time) {
      // (GstBaseParse sets the time from upstream's: pre_push_frame())
      if (stream::usable_duration(h)) GST_BUFFER_DURATION(buf) = h.duration;
    } else if (h.pts != stream::kNoTime) {
      guint64 pts;
      if (pull && st->file.valid) {
        pts = file_pts(st->file, frame->offset, h.pts);
      } else {
        // Push mode: in the order the packets come; after a seek upstream
        // the timeline goes on (the packets' time falls back on purpose).
        const bool seeked = self->seeked;
        self->seeked = false;
        bool new_run = false;
        pts = st->live.place(h, frame->offset, seeked, &new_run, live_now(parse, h, seeked));
        if (new_run && pts != 0)
          GST_INFO_OBJECT(self,
                          "sender restarted (frame %" G_GUINT64_FORMAT
                          "): its time goes on from %" GST_TIME_FORMAT,
                          h.frame_number, GST_TIME_ARGS(pts));
        if (h.keyframe() && !pull) index_keyframe(self, frame->offset, pts);
      }
      GST_BUFFER_PTS(buf) = GST_BUFFER_DTS(buf) = pts;
      if (stream::usable_duration(h)) GST_BUFFER_DURATION(buf) = h.duration;
    }
  }
  st->untimed = h.pts == stream::kNoTime && !GST_BUFFER_PTS_IS_VALID(buf) && !st->upstream_time &&
                gst_cudadiff_framerate_unknown(self->fps_n, self->fps_d);
  const GstFlowReturn ret = gst_base_parse_finish_frame(parse, frame, gint(step.bytes));
  st->untimed = false;
  return ret;
}

// Upstream's segment in time: a packet keeps the time GstBaseParse gave it
// (that of the upstream buffer it started in; stream::Timeline::anchor():
// not before the packet before it), and the packets after it in the same
// buffer, which have none, follow it at the sender's pace. The stream
// header passes its buffer's time on to the packet after it.
static GstFlowReturn gst_cudadiff_parse_pre_push_frame(GstBaseParse *parse,
                                                       GstBaseParseFrame *frame) {
  auto *self = GST_CUDADIFF_PARSE(parse);
  ParseState *st = self->state;
  frame->flags |= GST_BASE_PARSE_FRAME_FLAG_CLIP;  // as without this function
  GstBuffer *buf = frame->buffer;
  // A stream header is no frame: GstBaseParse gave it a frame's duration
  // (the framerate's).
  if (GST_BUFFER_FLAG_IS_SET(buf, GST_BUFFER_FLAG_HEADER))
    GST_BUFFER_DURATION(buf) = GST_CLOCK_TIME_NONE;
  if (st->untimed) {
    GST_BUFFER_PTS(buf) = GST_BUFFER_DTS(buf) = GST_CLOCK_TIME_NONE;
    GST_BUFFER_DURATION(buf) = GST_CLOCK_TIME_NONE;
    return GST_FLOW_OK;
  }
  if (!st->upstream_time) return GST_FLOW_OK;
  stream::PacketHeader h;
  std::string why;
  uint8_t bytes[stream::kHeaderSize];
  if (gst_buffer_extract(buf, 0, bytes, sizeof bytes) != sizeof bytes ||
      stream::read_header(bytes, sizeof bytes, &h, &why) != stream::HeaderStatus::Ok)
    return GST_FLOW_OK;
  h = st->live.timed(h);
  if (h.stream_header()) {
    if (GST_BUFFER_PTS_IS_VALID(buf)) st->upstream_pending = GST_BUFFER_PTS(buf);
    GST_BUFFER_PTS(buf) = GST_BUFFER_DTS(buf) = GST_CLOCK_TIME_NONE;
    return GST_FLOW_OK;
  }
  const GstClockTime pending = st->upstream_pending;
  st->upstream_pending = GST_CLOCK_TIME_NONE;
  if (!GST_BUFFER_PTS_IS_VALID(buf)) GST_BUFFER_PTS(buf) = pending;
  if (h.pts != stream::kNoTime) {
    if (GST_BUFFER_PTS_IS_VALID(buf)) {
      GST_BUFFER_PTS(buf) = st->live.anchor(h, frame->offset, GST_BUFFER_PTS(buf));
    } else {
      bool new_run = false;
      GST_BUFFER_PTS(buf) =
          st->live.place(h, frame->offset, false, &new_run, live_now(parse, h, false));
    }
  }
  GST_BUFFER_DTS(buf) = GST_BUFFER_PTS(buf);
  return GST_FLOW_OK;
}

static gboolean gst_cudadiff_parse_sink_event(GstBaseParse *parse, GstEvent *event) {
  auto *self = GST_CUDADIFF_PARSE(parse);
  ParseState *st = self->state;
  const GstEventType type = GST_EVENT_TYPE(event);
  const guint32 seqnum = gst_event_get_seqnum(event);
  bool time = false, new_segment = false;
  if (type == GST_EVENT_SEGMENT) {
    const GstSegment *segment = nullptr;
    gst_event_parse_segment(event, &segment);
    time = segment->format == GST_FORMAT_TIME;
    new_segment = st->last_segment.is_new(segment);
  }
  if (type == GST_EVENT_EOS)
    self->at_eos = true;  // (before the base class drains)
  else if (type == GST_EVENT_FLUSH_STOP || type == GST_EVENT_STREAM_START)
    self->at_eos = false;
  // (the base class may first finish the packets of the segment before)
  const gboolean ret =
      GST_BASE_PARSE_CLASS(gst_cudadiff_parse_parent_class)->sink_event(parse, event);
  if (type == GST_EVENT_SEGMENT) {
    st->upstream_time = time;
    // Upstream's times may start again in a new segment (a looped clip):
    // they never go back within one (the same segment sent again, as an
    // input-selector does when it switches back, is not a new one).
    if (new_segment) st->live.forget_output();
    // The segment that answers a seek carries its seqnum; packets parsed
    // before it (already queued when the seek went out) do not count.
    // Seeks answer in the order they went out: that one and the ones
    // before it are done.
    GST_OBJECT_LOCK(self);
    for (guint i = 0; i < self->n_seeks; ++i) {
      if (self->seek_seqnums[i] != seqnum) continue;
      self->seeked = true;
      std::copy(self->seek_seqnums + i + 1, self->seek_seqnums + self->n_seeks, self->seek_seqnums);
      self->n_seeks -= i + 1;
      break;
    }
    GST_OBJECT_UNLOCK(self);
  } else if (type == GST_EVENT_EOS) {
    // Push mode from a file: its end (where the last packet ended, after
    // the drain) into GstBaseParse's index, as the scan of a file does in
    // pull mode (index_end()), when that is upstream's end in bytes (not
    // a file still growing, an end of stream sent early, or a seek with a
    // stop).
    if (GST_PAD_MODE(GST_BASE_PARSE_SINK_PAD(parse)) == GST_PAD_MODE_PUSH && !st->upstream_time &&
        st->next_offset != GST_BUFFER_OFFSET_NONE && st->live.out_known &&
        st->next_offset > st->end_offset && upstream_end(self) == st->next_offset) {
      st->end_offset = st->next_offset;
      st->end_pts = st->live.end;
      index_end(self, st->end_offset, st->end_pts, st->last_key_pts);
    }
  } else if (type == GST_EVENT_FLUSH_STOP) {
    st->upstream_pending = GST_CLOCK_TIME_NONE;
    st->last_segment.forget();
    st->start_again();
    st->next_offset = GST_BUFFER_OFFSET_NONE;
    st->live.forget_output();  // (in time, upstream's times may go back now)
  }
  return ret;
}

// Bytes and time in a scanned file, from its keyframes (GstBaseParse's
// default guesses from the bit rate, which put a seek in bytes seconds away
// from its byte): a byte is at the time of the first keyframe at or after
// it, where decoding from it shows pictures again (the end of the stream
// after the last keyframe), and a time at the offset of the keyframe before
// it, where decoding for it starts (the start of the file before the first
// keyframe, its size from the end of the stream on). Other formats, and
// files not scanned (push mode), get the default.
static gboolean gst_cudadiff_parse_convert(GstBaseParse *parse, GstFormat src_format,
                                           gint64 src_value, GstFormat dest_format,
                                           gint64 *dest_value) {
  auto *self = GST_CUDADIFF_PARSE(parse);
  const bool bytes_time = src_format == GST_FORMAT_BYTES && dest_format == GST_FORMAT_TIME;
  const bool time_bytes = src_format == GST_FORMAT_TIME && dest_format == GST_FORMAT_BYTES;
  if ((bytes_time || time_bytes) && src_value >= 0) {
    bool done = false;
    GST_OBJECT_LOCK(self);
    if (g_atomic_int_get(&self->file_indexed)) {
      const FileMap &fm = self->state->file;
      const auto &keys = fm.keyframes;  // by offset, and so by time
      const guint64 v = guint64(src_value);
      if (bytes_time) {
        auto it = std::lower_bound(
            keys.begin(), keys.end(), v,
            [](const std::pair<guint64, guint64> &k, guint64 o) { return k.first < o; });
        *dest_value = gint64(it == keys.end() ? fm.end : std::min(it->second, fm.end));
      } else if (v >= fm.end) {
        *dest_value = gint64(fm.size);
      } else {
        auto it = std::upper_bound(
            keys.begin(), keys.end(), v,
            [](guint64 t, const std::pair<guint64, guint64> &k) { return t < k.second; });
        *dest_value = it == keys.begin() ? 0 : gint64(std::prev(it)->first);
      }
      done = true;
    }
    GST_OBJECT_UNLOCK(self);
    if (done) return TRUE;
  }
  return gst_base_parse_convert_default(parse, src_format, src_value, dest_format, dest_value);
}

// Seeks. Reverse playback is refused: GstBaseParse would read the file
// backwards in fragments that cut packets (each cut packet lost, with a
// warning). In a scanned file every seek in time is made accurate:
// GstBaseParse then takes the keyframe before the target from the index,
// which it otherwise does only for targets within 20 s after one (else it
// goes to a guess from the bit rate, and decoding starts at the first
// keyframe after that byte, or never with keyframe-interval=0); the
// decoder clips the frames before the target either way.
static gboolean gst_cudadiff_parse_src_event(GstBaseParse *parse, GstEvent *event) {
  auto *self = GST_CUDADIFF_PARSE(parse);
  if (GST_EVENT_TYPE(event) == GST_EVENT_SEEK) {
    gdouble rate = 1.0;
    GstFormat format = GST_FORMAT_UNDEFINED;
    GstSeekFlags flags = GST_SEEK_FLAG_NONE;
    GstSeekType start_type = GST_SEEK_TYPE_NONE, stop_type = GST_SEEK_TYPE_NONE;
    gint64 start = 0, stop = 0;
    gst_event_parse_seek(event, &rate, &format, &flags, &start_type, &start, &stop_type, &stop);
    if (rate < 0) {
      GST_WARNING_OBJECT(self, "reverse playback (rate %g) is not supported", rate);
      gst_event_unref(event);
      return FALSE;
    }
    if (format == GST_FORMAT_TIME &&
        !(flags & (GST_SEEK_FLAG_ACCURATE | GST_SEEK_FLAG_INSTANT_RATE_CHANGE)) &&
        g_atomic_int_get(&self->file_indexed)) {
      GstEvent *accurate =
          gst_event_new_seek(rate, format, GstSeekFlags(flags | GST_SEEK_FLAG_ACCURATE), start_type,
                             start, stop_type, stop);
      gst_event_set_seqnum(accurate, gst_event_get_seqnum(event));
      gst_event_unref(event);
      event = accurate;
    }
    // (when full, the oldest goes: its answer is the least likely to come)
    GST_OBJECT_LOCK(self);
    constexpr guint kKept = G_N_ELEMENTS(self->seek_seqnums);
    if (self->n_seeks == kKept) {
      std::copy(self->seek_seqnums + 1, self->seek_seqnums + kKept, self->seek_seqnums);
      self->n_seeks--;
    }
    self->seek_seqnums[self->n_seeks++] = gst_event_get_seqnum(event);
    GST_OBJECT_UNLOCK(self);
  }
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

static void gst_cudadiff_parse_finalize(GObject *object);

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
      "gst-cudadiff developers");
  gobject_class->finalize = gst_cudadiff_parse_finalize;
  gobject_class->set_property = gst_cudadiff_parse_set_property;
  gobject_class->get_property = gst_cudadiff_parse_get_property;
  g_object_class_install_property(
      gobject_class, PROP_MAX_PIXELS,
      g_param_spec_uint64(
          "max-pixels", "Largest frame",
          "Largest frame (width x height, in pixels) a packet may announce: the packets of a "
          "larger one are dropped with a warning before their bytes are collected (a crafted "
          "header could otherwise make the parser wait for up to 1 GiB). 0 = no limit but the "
          "stream format's 1 GiB per frame. Changeable while playing. Default: 35389440 "
          "(8192x4320), as cudadiffdec's",
          0, G_MAXUINT64, stream::Parser::kDefaultMaxPixels,
          static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
                                   GST_PARAM_MUTABLE_PLAYING)));
  parse_class->start = GST_DEBUG_FUNCPTR(gst_cudadiff_parse_start);
  parse_class->stop = GST_DEBUG_FUNCPTR(gst_cudadiff_parse_stop);
  parse_class->handle_frame = GST_DEBUG_FUNCPTR(gst_cudadiff_parse_handle_frame);
  parse_class->src_event = GST_DEBUG_FUNCPTR(gst_cudadiff_parse_src_event);
  parse_class->convert = GST_DEBUG_FUNCPTR(gst_cudadiff_parse_convert);
  parse_class->sink_event = GST_DEBUG_FUNCPTR(gst_cudadiff_parse_sink_event);
  parse_class->pre_push_frame = GST_DEBUG_FUNCPTR(gst_cudadiff_parse_pre_push_frame);
}

static void gst_cudadiff_parse_init(GstCudaDiffParse *self) {
  self->state = new ParseState();
  self->max_pixels = stream::Parser::kDefaultMaxPixels;
  reset(self);
}

static void gst_cudadiff_parse_finalize(GObject *object) {
  auto *self = GST_CUDADIFF_PARSE(object);
  delete self->state;
  self->state = nullptr;
  G_OBJECT_CLASS(gst_cudadiff_parse_parent_class)->finalize(object);
}
