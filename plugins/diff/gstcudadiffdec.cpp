/**
 * SECTION:element-cudadiffdec
 * @title: cudadiffdec
 *
 * Decoder of the frame-difference stream of cudadiffenc, versions 1 and 2
 * (each packet says which; both on the element's backend: version 2 on the
 * GPU one warp per tile, or on the CPU over every core).
 * It takes packets one per buffer or as a raw byte stream (tcpclientsrc,
 * filesrc): a parser finds the packets, checks their checksums and
 * resynchronises after damage.
 * It outputs the stream's own format and size, and renegotiates when a
 * keyframe brings another. It waits for a keyframe; a packet that fails its
 * checksum, is truncated, names impossible sizes or positions, or arrives out
 * of sequence is dropped with a warning (one per loss) and decoding resumes
 * at the next keyframe. While it waits for a keyframe (it started without
 * one, or it lost a packet) it asks upstream for one with a force-key-unit
 * event (gst_video_decoder_request_sync_point()), which rtpbin turns into
 * RTCP PLI/FIR for the sender, at most once per min-force-key-unit-interval
 * (GstVideoDecoder's property, 300 ms by default here). Untimed input (a
 * byte stream) gets the sender's timestamps on a timeline from 0: a live
 * viewer's starts at its first picture, a file's at its first packet (the
 * packets dropped before the first picture keep their places); every output
 * buffer carries the sender's timestamp as a GstReferenceTimestampMeta with
 * caps timestamp/x-cudadiff-sender. A decoder
 * slower than the stream (downstream's QoS says its frames would be more than
 * max-lateness late) drops deltas undecoded until the next keyframe and asks
 * for one, so that a viewer keeps up with the live edge.
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 tcpclientsrc host=SERVER port=5000 ! cudadiffdec ! videoconvert ! autovideosink
 * gst-launch-1.0 rtspsrc location=rtsp://SERVER:8554/cam ! rtpgstdepay ! cudadiffdec \
 *     ! videoconvert ! autovideosink
 * ]|
 */
#include "gstcudadiffdec.h"

#include "gstcudadiffenc.h"  // GstCudaDiffFrameOverlap

#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "cudadiff/codec2.h"
#include "cudadiff/diff.h"
#include "cudadiffstream.h"
#include "gstcudadiffcudamem.h"
#include "gstcudadiffdescribed.h"
#include "gstcudadifffilter.h"
#include "gstcudadiffpinned.h"
#include "gstcudadiffutils.h"

GST_DEBUG_CATEGORY_STATIC(gst_cudadiff_dec_debug);
#define GST_CAT_DEFAULT gst_cudadiff_dec_debug

namespace stream = cudadiff::stream;
namespace diff = cudadiff::diff;
namespace codec2 = cudadiff::codec2;

enum {
  PROP_0,
  PROP_STATS,
  PROP_FRAME_OVERLAP,
  PROP_MAX_PIXELS,
  PROP_MAX_LATENESS,
  PROP_BACKEND,
  PROP_DEVICE_ID,
  PROP_ACTIVE_BACKEND
};

#define DEFAULT_FRAME_OVERLAP GST_CUDADIFF_FRAME_OVERLAP_NEVER
// Keyframes announce their size, and the decoder allocates for it before
// the body can tell whether the packet is genuine (about 7 bytes per frame
// byte for version 2): a limit keeps a crafted or foreign packet on the
// network from taking gigabytes. DCI 8K (8192x4320).
#define DEFAULT_MAX_PIXELS (guint64(cudadiff::stream::Parser::kDefaultMaxPixels))
// Of GstVideoDecoder's min-force-key-unit-interval (ns): a keyframe request
// reaches the encoder through RTCP in one round trip, and the keyframe
// comes back paced over part of a frame interval; requests closer than
// this would only make more keyframes.
#define DEFAULT_MIN_FORCE_KEY_UNIT_INTERVAL (300 * GST_MSECOND)

// How late (downstream's QoS) a frame may be before the decoder skips to
// the next keyframe: a viewer whose decoding is slower than the stream
// returns to the live edge instead of falling ever further behind.
#define DEFAULT_MAX_LATENESS (gint64(GST_SECOND))
// Downstream's QoS jitter is taken within +-100 days.
static constexpr GstClockTimeDiff kMaxQosJitter = 100LL * 24 * 3600 * GST_SECOND;

#define SRC_FORMATS                                                                       \
  "{ BGR, RGB, BGRx, RGBx, xBGR, xRGB, BGRA, RGBA, ABGR, ARGB, GRAY8, I420, YV12, NV12, " \
  "NV21, YUY2, UYVY, Y444, Y42B }"

namespace {

struct DecStats {
  guint64 packets = 0;    // checked packets that reached the decoder (stream headers not counted)
  guint64 keyframes = 0;  // keyframes decoded
  guint64 frames_out = 0;
  guint64 bytes_in = 0;         // bytes of those packets
  guint64 dropped_packets = 0;  // not decoded: damaged, out of sequence, repeated, no keyframe yet
  guint64 skipped_bytes = 0;    // bytes that were not part of a valid packet
  guint64 losses = 0;           // warnings posted (one per loss)
  guint64 late_skips = 0;       // skips to the next keyframe for max-lateness
};

// Downstream's last QoS report that counts (under the object lock): the
// running time of the frame it is about, how late the sink found it, and
// the element's running time when it came. Reports about frames before
// `from` are ignored: after a skip, those still queued downstream, whose
// lateness the skip has already answered (GST_CLOCK_TIME_NONE: all of
// them until the keyframe that ends the skip).
struct QosReport {
  GstClockTime timestamp = GST_CLOCK_TIME_NONE;  // none: no report
  GstClockTimeDiff jitter = 0;
  GstClockTime received = GST_CLOCK_TIME_NONE;
  GstClockTime from = 0;
};

// A GstAdapter as the parser's byte queue.
class AdapterQueue final : public stream::ByteQueue {
 public:
  // `position`: where the adapter's first byte is in the stream.
  AdapterQueue(GstAdapter *adapter, guint64 position) : adapter_(adapter), position_(position) {}
  size_t available() const override { return gst_adapter_available(adapter_); }
  ptrdiff_t find_magic(size_t from) override {
    const size_t avail = available();
    if (avail < from + 4) return -1;
    return gst_adapter_masked_scan_uint32(adapter_, 0xffffffffu, stream::kMagicBE, from,
                                          avail - from);
  }
  const uint8_t *map(size_t n) override {
    return static_cast<const uint8_t *>(gst_adapter_map(adapter_, n));
  }
  void unmap() override { gst_adapter_unmap(adapter_); }
  uint64_t position() const override { return position_; }

 private:
  GstAdapter *adapter_;
  guint64 position_;
};

struct DecState {
  GstCudaDiffCudaShare share;  // the pipeline's CUDA context
  std::unique_ptr<cudadiff::Context> ctx;
  std::unique_ptr<diff::DiffDecoder> decoder;  // version 1
  // Version 2: the codec2 decoder, on the element's backend (its picture
  // on the GPU with CUDA).
  std::unique_ptr<codec2::Decoder> decoder2;
  std::unique_ptr<stream::Reader> reader;  // its scratch and zstd context, start to stop
  stream::Parser parser;
  guint64 parsed = 0;  // bytes the parser has passed (its queue's position)
  // Where the last packet refused for max-pixels ends (a position as
  // `parsed`): its bytes, skipped as they come, are a valid packet's, not
  // counted in skipped-bytes.
  guint64 refused_until = 0;
  std::vector<diff::SuperblockEntry> entries;  // of the last delta (CUDA)
  // What the stream headers said of the picture beyond the packet headers
  // (their `key=value` text; empty: not said), and what of it the output
  // caps have.
  GstCudaDiffDescriptions descriptions;
  GstCudaDiffDescribed out_described;
  // The description of frames like `h` (the defaults without a stream
  // header of their format, size and framerate).
  GstCudaDiffDescribed described(const stream::PacketHeader &h) const {
    const GstCudaDiffDescribed *d = descriptions.find(h);
    return d ? *d : GstCudaDiffDescribed();
  }
  // The stream being decoded (from its last keyframe).
  uint8_t version = 0;
  cudadiff::VideoFormat format = cudadiff::VideoFormat::Unknown;
  uint32_t width = 0, height = 0, fps_n = 0, fps_d = 1;
  size_t frame_bytes = 0;
  bool synced = false;  // the reference is valid: a keyframe and every packet since
  // Skipping to a keyframe for max-lateness (skip_when_late()): the next
  // keyframe decoded ends it.
  bool late_skip = false;
  // The element's running time of the last keyframe request of a skip
  // (request_keyframe(), by_clock).
  GstClockTime late_request_at = GST_CLOCK_TIME_NONE;
  // Not the streaming thread's alone: held while a QoS report is kept and
  // handed to GstVideoDecoder (gst_cudadiff_dec_src_event(), any thread),
  // and while a skip replaces the reports it had (skip_when_late()), so
  // that no report reaches the base class after the skip's. Taken before
  // the object lock.
  std::mutex qos_lock;
  bool in_loss = false;  // a warning was posted since the last decoded packet
  // A frame was dropped (lost, damaged, or before the first keyframe) since
  // the last frame pushed: the next one is flagged DISCONT.
  bool discont = false;
  guint64 last_frame_number = 0;
  // The header checksums of the packets decoded last, by frame number
  // modulo the ring's size (a checksum covers the frame number, times,
  // flags, sizes and payload checksum), so that the packet just decoded or
  // a delta decoded among the last kReorderFrames + 1 frames, again, is
  // known as a repeat (repeated_packet()); forgotten at a new segment (a
  // clip looped in a segment of its own shows its packets again), another
  // stream, a stream header and when the codec is dropped.
  struct Decoded {
    guint64 frame_number = 0;
    guint32 header_crc = 0;
    bool valid = false;
  };
  Decoded recent[stream::kReorderFrames + 1];
  static size_t slot(guint64 frame_number) { return frame_number % G_N_ELEMENTS(recent); }
  void forget_decoded() {
    for (Decoded &d : recent) d = Decoded();
  }
  // A new segment came and no packet has been decoded since (a seek,
  // flushing or not, or a segment seek's next pass): a keyframe whose frame
  // number jumps ahead is then where upstream went on, not a loss.
  bool new_segment = false;
  // The stream-id of the last STREAM_START event: another one means another
  // stream (an input-selector switched, a source was relinked), whose deltas
  // have no reference here even when their frame numbers follow on. Kept
  // across flushes, cleared at start.
  std::string stream_id;
  // Bytes skipped since the last packet (not a packet, or a packet whose
  // header failed), and why the first of them were: named in the warning
  // when the next packet shows that a packet was lost among them.
  guint64 skipped_since_packet = 0;
  std::string first_skip;
  // The output timeline (set_timestamps()).
  stream::Timeline timeline;
  // Since start or the last flush: a frame was finished, or dropped. Frames
  // that were all dropped end the stream with the error GstVideoDecoder
  // posts when nothing was decoded (which, in GStreamer 1.22, counts a
  // dropped frame as output and so does not post).
  bool finished_any = false, dropped_any = false;
  // Upstream's last segment (a new one may start its times again:
  // Timeline::forget_output()).
  GstCudaDiffLastSegment last_segment;
  // Whether upstream is a file (seekable in bytes, of a known size; asked
  // at its segment in bytes after start or a flush; -1: not yet). A file's
  // untimed packets keep their places on the recording's timeline, as the
  // parser times them: the packets dropped before the first picture (a
  // damaged first keyframe, a recording that starts with deltas) count,
  // where a live viewer's line starts at its first picture.
  int upstream_file = -1;
  // Where the bytes counted in `parsed` began (the start of upstream's
  // segment in bytes), so that `parsed` gives a packet's byte offset where
  // upstream's buffers give none (packet_offset_at()), and the offset of
  // the packet handed to handle_frame.
  guint64 bytes_base = 0;
  guint64 packet_offset = 0;
  // A flush, and the timeline from before it: a flushing seek in bytes in
  // a file (its segment in bytes follows the flush) goes on with it, the
  // first packet placed taking the run its offset lies in (`seeked`), so
  // that the frames keep the recording's times, as behind the parser; and
  // the output segment, which GstVideoDecoder would start at 0, starts at
  // the first keyframe's time (`segment_pending`).
  stream::Timeline flushed_timeline;
  guint32 segment_seqnum = GST_SEQNUM_INVALID;
  bool seeked = false, segment_pending = false;
  // A flush came since start (a seek): a stream that then ends with deltas
  // only, waiting for a keyframe (a seek into the last keyframe interval),
  // has merely nothing left to show; not the error of a stream whose every
  // frame was lost.
  bool after_flush = false;
  // frame-overlap: a decoded frame is finished when the next packet has
  // been applied, so that it comes down from the GPU meanwhile (version 2:
  // so that the GPU decodes it while the next packet is checked).
  bool overlap = false;
  // Whether `overlap` was decided since start: at the input caps, or, for a
  // byte stream without caps (tcpclientsrc, filesrc: GstBaseSrc sends none
  // for ANY), at the first packet.
  bool overlap_decided = false;
  struct Pending {
    GstVideoCodecFrame *frame = nullptr;
    GstVideoFrame out;  // mapped while the GPU writes it
    guint64 sender_pts = 0, sender_duration = 0;
    // Version 2: in flight in the core, which says in finish() whether it decoded.
    bool in_core2 = false;
    bool keyframe = false;
    guint64 frame_number = 0;
  };
  Pending pending;
  bool has_pending = false;
  GstFlowReturn held_flow = GST_FLOW_OK;  // of pushing it from set_format or a drain

  void reset_stream() {
    parser.reset();
    parsed = 0;
    refused_until = 0;
    synced = false;
    late_skip = false;
    late_request_at = GST_CLOCK_TIME_NONE;
    in_loss = false;
    discont = false;
    new_segment = false;
    skipped_since_packet = 0;
    first_skip.clear();
    timeline = stream::Timeline();
    last_segment.forget();
    finished_any = dropped_any = false;
    upstream_file = -1;
    bytes_base = packet_offset = 0;
    flushed_timeline = stream::Timeline();
    segment_seqnum = GST_SEQNUM_INVALID;
    seeked = segment_pending = false;
    forget_decoded();
  }
  void drop_codec() {
    forget_decoded();
    decoder.reset();
    decoder2.reset();
    version = 0;
    format = cudadiff::VideoFormat::Unknown;
    width = height = 0;
    frame_bytes = 0;
  }
};

}  // namespace

struct _GstCudaDiffDec {
  GstVideoDecoder parent;
  GstCudaDiffBackend backend;  // under the object lock
  gint device_id;
  GstCudaDiffFrameOverlap frame_overlap;
  guint64 max_pixels;   // largest keyframe (width x height) decoded; 0: no limit
  gint64 max_lateness;  // ns; -1: never skip (under the object lock)
  QosReport qos;        // under the object lock
  DecStats stats;       // under the object lock
  DecState *state;
  // While an end of stream goes through GstVideoDecoder that must not end
  // with its "No valid frames decoded" error (gst_cudadiff_dec_post_message();
  // under the object lock).
  bool quiet_no_frames;
};

G_DEFINE_TYPE(GstCudaDiffDec, gst_cudadiff_dec, GST_TYPE_VIDEO_DECODER)

static GstFlowReturn finish_pending(GstCudaDiffDec *self);
static void discard_pending(GstCudaDiffDec *self);
GST_ELEMENT_REGISTER_DEFINE(cudadiffdec, "cudadiffdec", GST_RANK_PRIMARY, GST_TYPE_CUDADIFF_DEC)

static GstCaps *sender_timestamp_caps = nullptr;  // made once in class_init

static GstStructure *stats_structure(GstCudaDiffDec *self) {
  const DecStats &s = self->stats;
  return gst_structure_new("cudadiffdec-stats", "packets", G_TYPE_UINT64, s.packets, "keyframes",
                           G_TYPE_UINT64, s.keyframes, "frames-out", G_TYPE_UINT64, s.frames_out,
                           "bytes-in", G_TYPE_UINT64, s.bytes_in, "dropped-packets", G_TYPE_UINT64,
                           s.dropped_packets, "skipped-bytes", G_TYPE_UINT64, s.skipped_bytes,
                           "losses", G_TYPE_UINT64, s.losses, "late-skips", G_TYPE_UINT64,
                           s.late_skips, nullptr);
}

static void gst_cudadiff_dec_set_property(GObject *object, guint prop_id, const GValue *value,
                                          GParamSpec *pspec) {
  auto *self = GST_CUDADIFF_DEC(object);
  GST_OBJECT_LOCK(self);
  switch (prop_id) {
    case PROP_BACKEND:
      self->backend = static_cast<GstCudaDiffBackend>(g_value_get_enum(value));
      break;
    case PROP_DEVICE_ID:
      self->device_id = g_value_get_int(value);
      break;
    case PROP_FRAME_OVERLAP:
      self->frame_overlap = static_cast<GstCudaDiffFrameOverlap>(g_value_get_enum(value));
      break;
    case PROP_MAX_PIXELS:
      self->max_pixels = g_value_get_uint64(value);
      break;
    case PROP_MAX_LATENESS:
      self->max_lateness = g_value_get_int64(value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK(self);
}

static void gst_cudadiff_dec_get_property(GObject *object, guint prop_id, GValue *value,
                                          GParamSpec *pspec) {
  auto *self = GST_CUDADIFF_DEC(object);
  GST_OBJECT_LOCK(self);
  switch (prop_id) {
    case PROP_STATS:
      g_value_take_boxed(value, stats_structure(self));
      break;
    case PROP_BACKEND:
      g_value_set_enum(value, self->backend);
      break;
    case PROP_DEVICE_ID:
      g_value_set_int(value, self->device_id);
      break;
    case PROP_ACTIVE_BACKEND:
      g_value_set_enum(value, gst_cudadiff_active_backend(GST_ELEMENT(object)));
      break;
    case PROP_FRAME_OVERLAP:
      g_value_set_enum(value, self->frame_overlap);
      break;
    case PROP_MAX_PIXELS:
      g_value_set_uint64(value, self->max_pixels);
      break;
    case PROP_MAX_LATENESS:
      g_value_set_int64(value, self->max_lateness);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK(self);
}

static void gst_cudadiff_dec_finalize(GObject *object) {
  auto *self = GST_CUDADIFF_DEC(object);
  delete self->state;
  self->state = nullptr;
  G_OBJECT_CLASS(gst_cudadiff_dec_parent_class)->finalize(object);
}

// Opens the backend (the CUDA context and the reader's scratch) and posts our
// error when it cannot; run by change_state before GstVideoDecoder's
// READY -> PAUSED (gst_cudadiff_change_state_opening()).
static bool open_backend(GstElement *element) {
  auto *self = GST_CUDADIFF_DEC(element);
  GST_OBJECT_LOCK(self);
  const GstCudaDiffBackend backend = self->backend;
  const gint device_id = self->device_id;
  GST_OBJECT_UNLOCK(self);
  DecState *st = self->state;
  st->ctx = gst_cudadiff_open_shared_context(GST_ELEMENT(self), backend, device_id, &st->share);
  if (!st->ctx) return false;
  try {
    cudadiff::ContextScope scope(st->ctx.get());
    st->reader = std::make_unique<stream::Reader>();
  } catch (const cudadiff::Error &e) {
    gst_cudadiff_post_error(GST_ELEMENT(self), "starting", e);
    return false;
  }
  return true;
}

// Frees what open_backend() and decoding made (also after a failed open).
static void close_backend(GstElement *element) {
  auto *self = GST_CUDADIFF_DEC(element);
  DecState *st = self->state;
  discard_pending(self);
  try {
    // Everything that frees CUDA resources runs in the context, which is
    // popped again after (the thread is left as it was).
    cudadiff::ContextScope scope(st->ctx.get());
    if (st->ctx) st->ctx->synchronize();
    st->drop_codec();
    st->reader.reset();
    st->ctx.reset();
  } catch (const cudadiff::Error &e) {
    GST_WARNING_OBJECT(self, "at stop: %s", e.what());
  }
  st->drop_codec();
  st->reader.reset();
  st->entries = std::vector<diff::SuperblockEntry>();
  st->ctx.reset();
  st->share.release();
  gst_cudadiff_forget_backend(element);
}

static GstStateChangeReturn gst_cudadiff_dec_change_state(GstElement *element,
                                                          GstStateChange transition) {
  return gst_cudadiff_change_state_opening(element, transition,
                                           GST_ELEMENT_CLASS(gst_cudadiff_dec_parent_class),
                                           open_backend, close_backend);
}

// The backend is open (change_state); this resets the stream's state.
static gboolean gst_cudadiff_dec_start(GstVideoDecoder *decoder) {
  auto *self = GST_CUDADIFF_DEC(decoder);
  GST_OBJECT_LOCK(self);
  self->stats = DecStats();
  self->qos = QosReport();
  GST_OBJECT_UNLOCK(self);
  DecState *st = self->state;
  st->drop_codec();
  st->reset_stream();
  st->stream_id.clear();
  st->after_flush = false;
  st->descriptions = GstCudaDiffDescriptions();
  st->out_described = GstCudaDiffDescribed();
  st->held_flow = GST_FLOW_OK;
  st->overlap = st->overlap_decided = false;
  return TRUE;
}

static gboolean gst_cudadiff_dec_stop(GstVideoDecoder *decoder) {
  close_backend(GST_ELEMENT(decoder));
  return TRUE;
}

// Reads frame-overlap (and reports the frame it holds as latency).
static void decide_overlap(GstCudaDiffDec *self, gint fps_n, gint fps_d) {
  DecState *st = self->state;
  GST_OBJECT_LOCK(self);
  const GstCudaDiffFrameOverlap overlap = self->frame_overlap;
  GST_OBJECT_UNLOCK(self);
  st->overlap = overlap == GST_CUDADIFF_FRAME_OVERLAP_ALWAYS ||
                (overlap == GST_CUDADIFF_FRAME_OVERLAP_AUTO &&
                 !gst_cudadiff_upstream_is_live(GST_VIDEO_DECODER_SINK_PAD(self)));
  st->overlap_decided = true;
  gst_cudadiff_set_overlap_latency(GST_ELEMENT(self), st->overlap ? 1 : 0, fps_n, fps_d);
}

static gboolean gst_cudadiff_dec_set_format(GstVideoDecoder *decoder, GstVideoCodecState *state) {
  // Everything the decoder needs comes with the keyframes; the caps (with or
  // without a streamheader) only say that this is the stream.
  auto *self = GST_CUDADIFF_DEC(decoder);
  DecState *st = self->state;
  GST_DEBUG_OBJECT(decoder, "input caps %" GST_PTR_FORMAT, state->caps);
  const GstFlowReturn flushed = finish_pending(self);
  if (flushed == GST_FLOW_ERROR) return FALSE;
  if (flushed != GST_FLOW_OK) st->held_flow = flushed;
  // The stream's framerate comes with its keyframes (configure()); the
  // caps' until then.
  gint fps_n = int(st->fps_n), fps_d = int(st->fps_d);
  if (!st->decoder && !st->decoder2 &&
      !gst_structure_get_fraction(gst_caps_get_structure(state->caps, 0), "framerate", &fps_n,
                                  &fps_d))
    fps_n = 0;
  decide_overlap(self, fps_n, fps_d);
  return TRUE;
}

static gboolean gst_cudadiff_dec_flush(GstVideoDecoder *decoder) {
  auto *self = GST_CUDADIFF_DEC(decoder);
  discard_pending(self);
  self->state->held_flow = GST_FLOW_OK;
  stream::Timeline kept = std::move(self->state->timeline);
  self->state->reset_stream();
  self->state->flushed_timeline = std::move(kept);
  self->state->after_flush = true;
  GST_OBJECT_LOCK(self);
  self->qos = QosReport();  // (as GstVideoDecoder forgets its own)
  GST_OBJECT_UNLOCK(self);
  return TRUE;
}

static GstFlowReturn finish_pending(GstCudaDiffDec *self);

// The frame held by frame-overlap, pushed outside handle_frame (a drain
// query, a gap event) under the stream lock; a flow other than OK or ERROR
// is upstream's answer for the next packet (held_flow).
static void push_held_frame(GstCudaDiffDec *self) {
  GST_VIDEO_DECODER_STREAM_LOCK(self);
  const GstFlowReturn ret = finish_pending(self);
  if (ret != GST_FLOW_OK && ret != GST_FLOW_ERROR) self->state->held_flow = ret;
  GST_VIDEO_DECODER_STREAM_UNLOCK(self);
}

// The error of a stream that ended with no frame decoded: GstVideoDecoder's
// text, which the element posts too.
static const char kNoValidFrames[] = "No valid frames decoded before end of stream";

// GstVideoDecoder's "No valid frames decoded" error is dropped while
// quiet_no_frames is set (an end of stream that has nothing left to show
// after a seek, or one whose error the element posted already): it has no
// other way to be told that the frames it did not see pushed were not lost.
static gboolean gst_cudadiff_dec_post_message(GstElement *element, GstMessage *message) {
  auto *self = GST_CUDADIFF_DEC(element);
  if (GST_MESSAGE_TYPE(message) == GST_MESSAGE_ERROR &&
      GST_MESSAGE_SRC(message) == GST_OBJECT_CAST(element)) {
    GST_OBJECT_LOCK(self);
    const bool quiet = self->quiet_no_frames;
    GST_OBJECT_UNLOCK(self);
    if (quiet) {
      GError *err = nullptr;
      gst_message_parse_error(message, &err, nullptr);
      const bool no_frames = g_error_matches(err, GST_STREAM_ERROR, GST_STREAM_ERROR_DECODE) &&
                             g_strcmp0(err->message, kNoValidFrames) == 0;
      g_error_free(err);
      if (no_frames) {
        GST_DEBUG_OBJECT(self, "GstVideoDecoder's \"%s\" not posted", kNoValidFrames);
        gst_message_unref(message);
        return FALSE;
      }
    }
  }
  return GST_ELEMENT_CLASS(gst_cudadiff_dec_parent_class)->post_message(element, message);
}

// A new segment: upstream's times may start again (an application looping
// a clip, each pass in a segment of its own), so the timeline's rule that
// a timed packet's time never goes back holds within a segment. (The same
// segment sent again, as an input-selector does when it switches back, is
// not a new one.)
static gboolean gst_cudadiff_dec_sink_event(GstVideoDecoder *decoder, GstEvent *event) {
  // GstVideoDecoder sends a gap on at once (other serialized events wait
  // for the next frame): the frame held by frame-overlap, which came before
  // it, goes out first, so that time does not go back downstream.
  if (GST_EVENT_TYPE(event) == GST_EVENT_GAP) push_held_frame(GST_CUDADIFF_DEC(decoder));
  // The end of a stream whose every frame was dropped (each keyframe
  // damaged, or deltas only: a sender that stopped before its first
  // keyframe): the error GstVideoDecoder posts when no frame was decoded,
  // before the EOS goes on (a stream with no frame's packet at all gets it
  // from GstVideoDecoder).
  if (GST_EVENT_TYPE(event) == GST_EVENT_EOS) {
    auto *self = GST_CUDADIFF_DEC(decoder);
    push_held_frame(self);
    DecState *st = self->state;
    // After a flush (a seek) with no loss since, nothing shown means nothing
    // left to show (a seek into the last keyframe interval: deltas waiting
    // for a keyframe, or not even a whole packet): a plain end of stream.
    const bool nothing_left = st->after_flush && !st->in_loss;
    const bool error = st->dropped_any && !st->finished_any && !nothing_left;
    if (error)
      GST_ELEMENT_ERROR(self, STREAM, DECODE, ("%s", kNoValidFrames),
                        ("every frame's packet was lost, damaged, or a delta without its "
                         "keyframe (the warnings before say which; a stream that ends before "
                         "its first keyframe has none)"));
    // GstVideoDecoder posts its own where no frame was pushed since the
    // flush (GStreamer 1.20 also where frames were all dropped): not at such
    // a plain end, nor a second time.
    if (!st->finished_any && (nothing_left || error)) {
      GST_OBJECT_LOCK(self);
      self->quiet_no_frames = true;
      GST_OBJECT_UNLOCK(self);
      const gboolean ret =
          GST_VIDEO_DECODER_CLASS(gst_cudadiff_dec_parent_class)->sink_event(decoder, event);
      GST_OBJECT_LOCK(self);
      self->quiet_no_frames = false;
      GST_OBJECT_UNLOCK(self);
      return ret;
    }
  }
  if (GST_EVENT_TYPE(event) == GST_EVENT_STREAM_START) {
    // Another stream (input-selector switching between two senders, a
    // relinked source): its stream header went by elsewhere, so wait for its
    // keyframe as after an in-band stream header, and ask for one. The frame
    // held by frame-overlap belongs to the old stream and goes out first.
    auto *self = GST_CUDADIFF_DEC(decoder);
    GST_VIDEO_DECODER_STREAM_LOCK(self);
    DecState *st = self->state;
    if (gst_cudadiff_another_stream(&st->stream_id, event)) {
      push_held_frame(self);  // the stream lock is recursive
      if (st->synced)
        GST_DEBUG_OBJECT(self, "new stream (%s): waiting for its keyframe", st->stream_id.c_str());
      st->synced = false;
      st->forget_decoded();
      st->new_segment = true;  // its frame numbers are its own: no loss to report
      st->timeline.forget_output();
    }
    GST_VIDEO_DECODER_STREAM_UNLOCK(self);
  }
  if (GST_EVENT_TYPE(event) == GST_EVENT_SEGMENT) {
    DecState *st = GST_CUDADIFF_DEC(decoder)->state;
    const GstSegment *segment = nullptr;
    gst_event_parse_segment(event, &segment);
    GST_VIDEO_DECODER_STREAM_LOCK(decoder);
    if (segment->format == GST_FORMAT_BYTES && st->parsed == 0) {
      // (nothing parsed since start or the flush: `parsed` counts from here)
      st->bytes_base = guint64(segment->start);
      st->upstream_file = gst_cudadiff_upstream_is_file(GST_VIDEO_DECODER_SINK_PAD(decoder));
      if (st->upstream_file == 1 && st->flushed_timeline.have) {
        // A flushing seek in bytes in a file. GstVideoDecoder drops a
        // segment in bytes and would start one in time at 0 with the
        // first packet; the one in time comes with the first keyframe.
        st->timeline = std::move(st->flushed_timeline);
        st->seeked = true;
        st->segment_pending = true;
        st->segment_seqnum = gst_event_get_seqnum(event);
        gst_segment_init(&decoder->input_segment, GST_FORMAT_TIME);
      }
    } else if (segment->format != GST_FORMAT_BYTES) {
      st->upstream_file = 0;
      st->segment_pending = false;
    }
    st->flushed_timeline = stream::Timeline();
    if (st->last_segment.is_new(segment)) {
      st->timeline.forget_output();
      st->forget_decoded();
      st->new_segment = true;
    }
    GST_VIDEO_DECODER_STREAM_UNLOCK(decoder);
  }
  return GST_VIDEO_DECODER_CLASS(gst_cudadiff_dec_parent_class)->sink_event(decoder, event);
}

// End of stream and drain: the frame in flight goes out.
static GstFlowReturn gst_cudadiff_dec_finish(GstVideoDecoder *decoder) {
  return finish_pending(GST_CUDADIFF_DEC(decoder));
}

// What follows a loss, for the warning's message.
static constexpr const char *kResumes = "decoding resumes at the next keyframe";

// Damage in the stream: one warning until a packet decodes again. Skipped
// bytes alone keep the reference and post none (a lost packet shows as a
// gap in the frame numbers, which is a loss). `then` says what happens next.
static void report_damage(GstCudaDiffDec *self, const char *what, const std::string &detail,
                          const char *then = kResumes) {
  DecState *st = self->state;
  if (st->in_loss) {
    GST_DEBUG_OBJECT(self, "%s (again): %s", what, detail.c_str());
    return;
  }
  st->in_loss = true;
  GST_OBJECT_LOCK(self);
  self->stats.losses++;
  GST_OBJECT_UNLOCK(self);
  GST_ELEMENT_WARNING(self, STREAM, DECODE, ("%s; %s", what, then), ("%s", detail.c_str()));
}

// The end of the stream cut a packet: it is dropped.
static void report_truncation(GstCudaDiffDec *self, const std::string &detail) {
  self->state->in_loss = true;  // what follows it is the rest of the same packet
  GST_OBJECT_LOCK(self);
  self->stats.losses++;
  GST_OBJECT_UNLOCK(self);
  GST_ELEMENT_WARNING(self, STREAM, DECODE, ("truncated stream: its last packet is incomplete"),
                      ("%s", detail.c_str()));
}

// A loss: the reference is no longer what the sender has; deltas are
// dropped until the next keyframe.
static void report_loss(GstCudaDiffDec *self, const char *what, const std::string &detail,
                        const char *then = kResumes) {
  self->state->synced = false;
  report_damage(self, what, detail, then);
}

// The warning for a keyframe larger than max-pixels: the keyframes after it
// are most likely as large, so the message asks for the property.
static constexpr const char *kTooLarge = "keyframe larger than max-pixels";
static constexpr const char *kDeltaTooLarge = "delta larger than max-pixels";
static constexpr const char *kRaise =
    "frames are dropped until a keyframe fits; raise max-pixels to decode this stream";
static std::string too_large(const stream::PacketHeader &h, guint64 max_pixels) {
  return "frame " + std::to_string(h.frame_number) + ": " + std::to_string(h.width) + "x" +
         std::to_string(h.height) + " is " + std::to_string(guint64(h.width) * h.height) +
         " pixels, more than max-pixels=" + std::to_string(max_pixels) + " (0: no limit)";
}

static void request_keyframe(GstCudaDiffDec *self, GstVideoCodecFrame *frame,
                             bool by_clock = false);

static uint64_t place_untimed(GstCudaDiffDec *self, const stream::PacketHeader &h, bool *new_run);

// The first keyframe decoded after a flushing seek in bytes in a file, at
// output time `pts`: the output segment starts there, as a parser's after
// such a seek, so that a synchronising sink shows it at once and position
// queries give the recording's time. (GstVideoDecoder dropped the segment
// in bytes, and queues events for the frame after the one being parsed, so
// this one is pushed here, before the frame.)
static void segment_at_keyframe(GstCudaDiffDec *self, GstClockTime pts) {
  DecState *st = self->state;
  auto *decoder = GST_VIDEO_DECODER(self);
  st->segment_pending = false;
  GstSegment segment;
  gst_segment_init(&segment, GST_FORMAT_TIME);
  if (GST_CLOCK_TIME_IS_VALID(pts)) segment.start = segment.time = segment.position = pts;
  GstEvent *event = gst_event_new_segment(&segment);
  if (st->segment_seqnum != GST_SEQNUM_INVALID) gst_event_set_seqnum(event, st->segment_seqnum);
  GST_DEBUG_OBJECT(self, "seek in bytes: segment from %" GST_TIME_FORMAT,
                   GST_TIME_ARGS(segment.start));
  decoder->input_segment = segment;
  decoder->output_segment = segment;
  gst_pad_push_event(GST_VIDEO_DECODER_SRC_PAD(decoder), event);
}

// The byte offset of the bytes at the head of `adapter`, `at` where
// `parsed` counts them: in a file, the offset of the buffer that holds them
// (GstBaseSrc gives each its offset in bytes) plus theirs in it. A seek in
// bytes without a flush leaves the bytes read before it in the adapter,
// ahead of those from the new position, and `parsed` counts on across them:
// its segment cannot say where the new ones start. Else (and for buffers
// without an offset) counted from the start of upstream's segment in bytes.
static guint64 packet_offset_at(const DecState *st, GstAdapter *adapter, guint64 at) {
  if (st->upstream_file == 1) {
    guint64 distance = 0;
    const guint64 offset = gst_adapter_prev_offset(adapter, &distance);
    if (offset != GST_BUFFER_OFFSET_NONE) return offset + distance;
  }
  return st->bytes_base + at;
}

static GstFlowReturn gst_cudadiff_dec_parse(GstVideoDecoder *decoder, GstVideoCodecFrame *frame,
                                            GstAdapter *adapter, gboolean at_eos) {
  auto *self = GST_CUDADIFF_DEC(decoder);
  DecState *st = self->state;
  // A loss found here (a damaged packet) asks for a keyframe at once, not
  // when the next packet reaches handle_frame; its time is that of the
  // input that held the packet (the frame being parsed is the next one).
  auto request_now = [&] {
    guint64 distance = 0;
    const GstClockTime pts = gst_adapter_prev_pts(adapter, &distance);
    if (GST_CLOCK_TIME_IS_VALID(pts))
      frame->deadline = gst_segment_to_running_time(&decoder->input_segment, GST_FORMAT_TIME, pts);
    request_keyframe(self, frame);
  };
  GST_OBJECT_LOCK(self);
  st->parser.set_max_pixels(self->max_pixels);
  GST_OBJECT_UNLOCK(self);
  for (;;) {
    AdapterQueue queue(adapter, st->parsed);
    const stream::Parser::Step step = st->parser.next(queue, at_eos);
    if (step.kind != stream::Parser::Kind::NeedData) st->parsed += step.bytes;
    switch (step.kind) {
      case stream::Parser::Kind::NeedData:
        return GST_VIDEO_DECODER_FLOW_NEED_DATA;
      case stream::Parser::Kind::Skip: {
        const bool was_synced = st->synced;
        // (st->parsed is now the end of these bytes)
        const guint64 at = st->parsed - step.bytes;
        if (step.too_large) st->refused_until = at + stream::kHeaderSize + step.header.payload_size;
        const guint64 refused =
            st->refused_until > at ? std::min<guint64>(step.bytes, st->refused_until - at) : 0;
        GST_OBJECT_LOCK(self);
        self->stats.skipped_bytes += step.bytes - refused;
        GST_OBJECT_UNLOCK(self);
        if (step.unsupported) {
          // An error that ends the stream: the bytes after it are dropped
          // too, so that the drain at EOS does not read the next such
          // packet and post the error again.
          gst_adapter_clear(adapter);
          GST_ELEMENT_ERROR(self, STREAM, WRONG_TYPE,
                            ("the stream is of a version this decoder does not read"),
                            ("%s", step.problem.c_str()));
          return GST_FLOW_ERROR;
        }
        if (step.truncated) {
          report_truncation(self, step.problem);
        } else if (step.too_large) {
          // Dropped before its payload is collected; the payload's bytes
          // are then skipped as they arrive.
          GST_OBJECT_LOCK(self);
          self->stats.dropped_packets++;
          GST_OBJECT_UNLOCK(self);
          // (a delta of the stream's size: max-pixels was lowered while
          // playing; of another size: its header disagrees with its keyframe)
          if (step.header.keyframe())
            report_loss(self, kTooLarge, too_large(step.header, st->parser.max_pixels()), kRaise);
          else if (st->synced && step.header.width == st->width && step.header.height == st->height)
            report_loss(self, kDeltaTooLarge, too_large(step.header, st->parser.max_pixels()),
                        kRaise);
          else if (st->synced)
            report_loss(self, "damaged packet", step.problem);
          else
            GST_DEBUG_OBJECT(self, "%s (before a keyframe)", step.problem.c_str());
        } else if (step.damaged && !step.header.stream_header() && !step.superseded) {
          // A packet whose header is intact: its frame is lost, and the
          // deltas after it until a keyframe (before the first keyframe a
          // damaged delta changes nothing). (Superseded: an intact packet
          // of the same frame starts inside it, and comes next; a stray
          // copy of a header, or part of a packet resent whole.)
          GST_OBJECT_LOCK(self);
          self->stats.dropped_packets++;
          GST_OBJECT_UNLOCK(self);
          if (st->synced || step.header.keyframe())
            report_loss(self, "damaged packet", step.problem);
          else
            GST_DEBUG_OBJECT(self, "%s (before a keyframe)", step.problem.c_str());
          // In a file its intact header keeps its place on the timeline, as
          // the parser counts it: a damaged first keyframe does not move the
          // recording's times to the next one.
          const stream::PacketHeader timed = st->timeline.timed(step.header);
          if (st->upstream_file == 1 && timed.pts != stream::kNoTime) {
            bool new_run = false;
            st->packet_offset = packet_offset_at(st, adapter, at);
            place_untimed(self, timed, &new_run);
          }
        } else {
          // Garbage, the rest of a damaged packet, a damaged header: no loss
          // unless the next packet shows one.
          GST_DEBUG_OBJECT(self, "skipped: %s", step.problem.c_str());
          if (refused < step.bytes) {
            if (st->skipped_since_packet == 0) st->first_skip = step.problem;
            st->skipped_since_packet += step.bytes - refused;
          }
        }
        // (a keyframe too large for max-pixels: another one would be too)
        if (was_synced && !st->synced && !step.too_large) request_now();
        gst_adapter_flush(adapter, step.bytes);
        continue;
      }
      case stream::Parser::Kind::Packet:
        // (a packet inside a refused one's span: that one's payload never
        // came, and the bytes after this packet are counted again)
        st->refused_until = 0;
        if (step.header.stream_header()) {
          // What the packet headers do not say of the picture, used from
          // the next keyframe of the header's format, size and framerate on.
          const uint8_t *p = queue.map(step.bytes);
          const GstCudaDiffDescribed d =
              GstCudaDiffDescribed::read(p + stream::kHeaderSize, step.header.payload_size);
          queue.unmap();
          st->descriptions.add(step.header, d);
          GST_DEBUG_OBJECT(self,
                           "stream header: %s %ux%u %u/%u, colorimetry '%s', pixel aspect "
                           "ratio '%s', interlace mode '%s', field order '%s', chroma site '%s', "
                           "multiview mode '%s' (flags '%s')",
                           cudadiff::format_name(step.header.format), step.header.width,
                           step.header.height, step.header.fps_n, step.header.fps_d,
                           d.colorimetry.c_str(), d.pixel_aspect_ratio.c_str(),
                           d.interlace_mode.c_str(), d.field_order.c_str(), d.chroma_site.c_str(),
                           d.multiview_mode.c_str(), d.multiview_flags.c_str());
          // A stream header starts a stream: a keyframe follows it, and a
          // delta after it (another sender's, spliced in by a relay) has
          // no reference here, whatever its frame number says.
          if (st->synced) GST_DEBUG_OBJECT(self, "stream header: waiting for its keyframe");
          st->synced = false;
          st->forget_decoded();
          gst_adapter_flush(adapter, step.bytes);
          continue;
        }
        st->packet_offset = packet_offset_at(st, adapter, st->parsed - step.bytes);
        if (step.header.keyframe()) GST_VIDEO_CODEC_FRAME_SET_SYNC_POINT(frame);
        gst_video_decoder_add_to_frame(decoder, static_cast<int>(step.bytes));
        return gst_video_decoder_have_frame(decoder);
    }
  }
}

// A keyframe of another version, format, size or framerate: a new core
// decoder and new output caps.
static bool configured_for(const DecState *st, const stream::PacketHeader &h) {
  return (st->decoder || st->decoder2) && st->version == h.version && st->format == h.format &&
         st->width == h.width && st->height == h.height && st->fps_n == h.fps_n &&
         st->fps_d == h.fps_d && st->described(h) == st->out_described;
}

// `core2`: version 2's decoder for the keyframe's size, made (and given the
// keyframe) by the caller, so that a keyframe it refuses changes nothing,
// the output caps included; null: made here.
static bool configure(GstCudaDiffDec *self, const stream::PacketHeader &h,
                      std::unique_ptr<codec2::Decoder> core2 = nullptr) {
  DecState *st = self->state;
  if (configured_for(st, h)) return true;
  const GstVideoFormat gst_format = gst_cudadiff_format_to_gst(h.format);
  st->drop_codec();
  if (h.version == stream::kVersion2) {
    st->decoder2 = core2 ? std::move(core2)
                         : codec2::Decoder::create(*st->ctx, h.format, int(h.width), int(h.height));
  } else {
    st->decoder = diff::DiffDecoder::create(*st->ctx, h.format, int(h.width), int(h.height));
    st->reader->reserve(h.frame_bytes());
  }
  st->version = h.version;
  st->format = h.format;
  st->width = h.width;
  st->height = h.height;
  st->fps_n = h.fps_n;
  st->fps_d = h.fps_d;
  st->frame_bytes = h.frame_bytes();
  GstVideoCodecState *out = gst_video_decoder_set_output_state(GST_VIDEO_DECODER(self), gst_format,
                                                               h.width, h.height, nullptr);
  GST_VIDEO_INFO_FPS_N(&out->info) = int(h.fps_n);
  GST_VIDEO_INFO_FPS_D(&out->info) = int(h.fps_d);
  gst_cudadiff_set_overlap_latency(GST_ELEMENT(self), st->overlap ? 1 : 0, int(h.fps_n),
                                   int(h.fps_d));
  // What the sender's stream header said of the picture (else the defaults
  // of the format and size; values that do not parse are left out too):
  // colorimetry, pixel aspect ratio, interleaved fields and their order,
  // chroma siting, stereoscopic views. The frames are not checked against
  // them.
  st->out_described = st->described(h);
  st->out_described.apply(&out->info);
  // (CUDA or system memory: chosen by negotiate(), below)
  gst_video_codec_state_unref(out);
  GST_INFO_OBJECT(self, "stream version %u: %s %ux%u at %u/%u fps on %s", h.version,
                  cudadiff::format_name(h.format), h.width, h.height, h.fps_n, h.fps_d,
                  cudadiff::backend_name(st->ctx->backend()));
  if (!gst_video_decoder_negotiate(GST_VIDEO_DECODER(self))) {
    st->drop_codec();
    return false;
  }
  return true;
}

// Each negotiation (configure()'s, and again when downstream asks for a
// reconfigure) chooses the output memory anew: CUDA memory of the
// pipeline's context while downstream takes it, else system memory. The
// output state is made again from the current one, so that the base class
// sets the new caps and asks downstream for a new pool.
static gboolean gst_cudadiff_dec_negotiate(GstVideoDecoder *decoder) {
  auto *self = GST_CUDADIFF_DEC(decoder);
  DecState *st = self->state;
  if (GstVideoCodecState *current = gst_video_decoder_get_output_state(decoder)) {
    const GstVideoInfo info = current->info;
    GstVideoCodecState *out = gst_video_decoder_set_output_state(
        decoder, GST_VIDEO_INFO_FORMAT(&info), GST_VIDEO_INFO_WIDTH(&info),
        GST_VIDEO_INFO_HEIGHT(&info), current);
    gst_video_codec_state_unref(current);
    out->info = info;
    GST_OBJECT_LOCK(self);
    const GstCudaDiffBackend backend = self->backend;
    const gint device_id = self->device_id;
    GST_OBJECT_UNLOCK(self);
    const bool cuda = gst_cudadiff_cuda_caps_allowed(backend, device_id, st->share) &&
                      st->share.gst_context() != nullptr;
    gst_cudadiff_output_state_prefer_cuda(GST_VIDEO_DECODER_SRC_PAD(self), out, cuda);
    GST_DEBUG_OBJECT(self, "output caps %" GST_PTR_FORMAT, out->caps);
    gst_video_codec_state_unref(out);
  }
  return GST_VIDEO_DECODER_CLASS(gst_cudadiff_dec_parent_class)->negotiate(decoder);
}

// After a failed configure() (no decoder any more) the stream waits for a
// keyframe; returns the flow for the caps that failed.
static GstFlowReturn configure_failed(GstCudaDiffDec *self) {
  self->state->synced = false;
  return gst_cudadiff_caps_failed_flow(GST_VIDEO_DECODER_SRC_PAD(self));
}

// A packet was dropped and the decoder waits for a keyframe (none yet, or a
// loss): it asks upstream for one (a force-key-unit event, which rtpbin
// turns into RTCP PLI/FIR; other sources ignore it). The base class sends
// at most one per min-force-key-unit-interval of running time; untimed input
// (a byte stream) is given the element's running time so that the limit
// holds there too.
// `by_clock`: the interval counts in the element's running time whatever
// the frame's time (a decoder skipping to a keyframe for max-lateness
// drops a backlog of deltas much faster than their stream time passes).
// The element keeps that interval itself and hands the base class a frame
// without a deadline, which it always sends for and after which it limits
// nothing: its limit compares frames' running times, which trail the
// clock by the pipeline's latency, so a clock time left there would hold
// back the request of a loss after the skip by that latency.
static void request_keyframe(GstCudaDiffDec *self, GstVideoCodecFrame *frame, bool by_clock) {
  const GstClockTime deadline = frame->deadline;
  if (by_clock) {
    DecState *st = self->state;
    guint64 interval = 0;
    g_object_get(self, "min-force-key-unit-interval", &interval, nullptr);
    if (interval == GST_CLOCK_TIME_NONE) return;  // (never, as the base class reads it)
    const GstClockTime now = gst_element_get_current_running_time(GST_ELEMENT(self));
    if (interval > 0 && GST_CLOCK_TIME_IS_VALID(now) &&
        GST_CLOCK_TIME_IS_VALID(st->late_request_at) && now >= st->late_request_at &&
        now - st->late_request_at < interval)
      return;
    st->late_request_at = now;
    frame->deadline = GST_CLOCK_TIME_NONE;
  } else if (!GST_CLOCK_TIME_IS_VALID(frame->deadline)) {
    frame->deadline = gst_element_get_current_running_time(GST_ELEMENT(self));
  }
  GST_DEBUG_OBJECT(self, "asking upstream for a keyframe");
  gst_video_decoder_request_sync_point(GST_VIDEO_DECODER(self), frame,
                                       static_cast<GstVideoDecoderRequestSyncPointFlags>(0));
  frame->deadline = deadline;
}

// A keyframe decoded (stats).
static void count_keyframe(GstCudaDiffDec *self) {
  GST_OBJECT_LOCK(self);
  self->stats.keyframes++;
  GST_OBJECT_UNLOCK(self);
}

// Decodes the packet into the reference. Returns false when the packet is
// not decoded (reported as a loss, or waiting for a keyframe); throws
// cudadiff::Error for failures of the core.
static bool decode_packet(GstCudaDiffDec *self, const stream::PacketHeader &h,
                          const uint8_t *payload, GstFlowReturn *ret) {
  DecState *st = self->state;
  // The reader's scratch may still be read by the last delta's upload (a
  // frame in flight): wait for that upload before it is overwritten.
  if (st->decoder) st->decoder->finish_uploads();
  std::string why;
  const uint8_t *body = nullptr;
  bool unsupported = false;
  if (h.keyframe()) {
    // Before anything is allocated for the keyframe's size.
    GST_OBJECT_LOCK(self);
    const guint64 max_pixels = self->max_pixels;
    GST_OBJECT_UNLOCK(self);
    if (stream::exceeds_pixels(h, max_pixels)) {
      report_loss(self, kTooLarge, too_large(h, max_pixels), kRaise);
      return false;
    }
    // Version 2: the body goes to a decoder of its size before anything
    // changes, so that a keyframe the core refuses leaves the decoder and
    // the output caps as they were. Version 1's reader needs its scratch
    // for the size first (configure()).
    const bool v2 = h.version == stream::kVersion2;
    if (!v2 && !configure(self, h)) {
      *ret = configure_failed(self);
      return false;
    }
    if (!st->reader->body(h, payload, &body, &why, &unsupported)) {
      if (unsupported) {
        GST_ELEMENT_ERROR(self, STREAM, CODEC_NOT_FOUND, ("cannot decode this stream"),
                          ("%s", why.c_str()));
        *ret = GST_FLOW_ERROR;
        return false;
      }
      report_loss(self, "damaged keyframe", why);
      return false;
    }
    if (v2) {
      // A body the core refuses leaves its picture as it was; deltas wait
      // for the next keyframe. One it takes is in flight until
      // finish_pending(), which counts it. A keyframe that needs a new
      // decoder (another format, size or rate) is decoded at once instead,
      // before the output caps change: damage that only the GPU finds
      // (after submit()) then leaves them as they were too.
      if (!configured_for(st, h)) {
        std::unique_ptr<codec2::Decoder> fresh =
            codec2::Decoder::create(*st->ctx, h.format, int(h.width), int(h.height));
        if (!fresh->decode(body, h.body_size, &why)) {
          report_loss(self, "damaged keyframe",
                      "frame " + std::to_string(h.frame_number) + ": " + why);
          return false;
        }
        if (!configure(self, h, std::move(fresh))) {
          *ret = configure_failed(self);
          return false;
        }
        count_keyframe(self);  // (nothing in flight: handle_frame() writes it at once)
      } else if (!st->decoder2->submit(body, h.body_size, &why)) {
        report_loss(self, "damaged keyframe",
                    "frame " + std::to_string(h.frame_number) + ": " + why);
        return false;
      }
    } else {
      st->decoder->keyframe(body);
      count_keyframe(self);
    }
    // Deltas lost just before this keyframe cost no picture, but frames
    // are missing all the same: a loss like any other, which it ends (and
    // its frame is the first after a gap).
    if (st->synced && h.frame_number > st->last_frame_number + 1 && !st->new_segment) {
      st->discont = true;
      report_damage(self, "packets missing before a keyframe",
                    "frames " + std::to_string(st->last_frame_number + 1) + " to " +
                        std::to_string(h.frame_number - 1) + " missing",
                    "the keyframe resumes decoding");
    }
    st->synced = true;
    st->in_loss = false;
    st->new_segment = false;
    st->last_frame_number = h.frame_number;
    return true;
  }
  if (!st->synced) {
    GST_LOG_OBJECT(self, "delta %" G_GUINT64_FORMAT " before a keyframe: dropped", h.frame_number);
    return false;
  }
  if (h.frame_number != st->last_frame_number + 1) {
    std::string detail = "expected frame " + std::to_string(st->last_frame_number + 1) + ", got " +
                         std::to_string(h.frame_number);
    if (st->skipped_since_packet > 0)
      detail += ", after " + std::to_string(st->skipped_since_packet) +
                " bytes that were not a packet (" + st->first_skip + ")";
    report_loss(self, "packets missing or out of sequence", detail);
    return false;
  }
  st->new_segment = false;  // (a delta in sequence: upstream went on where it was)
  if (h.format != st->format || h.width != st->width || h.height != st->height) {
    report_loss(self, "delta of another format or size",
                std::string(cudadiff::format_name(h.format)) + " " + std::to_string(h.width) + "x" +
                    std::to_string(h.height) + " in a " + cudadiff::format_name(st->format) + " " +
                    std::to_string(st->width) + "x" + std::to_string(st->height) + " stream");
    return false;
  }
  if (h.version != st->version) {
    report_loss(self, "delta of another stream version",
                "a version " + std::to_string(h.version) + " delta in a version " +
                    std::to_string(st->version) + " stream");
    return false;
  }
  if (!st->reader->body(h, payload, &body, &why, &unsupported)) {
    if (unsupported) {
      GST_ELEMENT_ERROR(self, STREAM, CODEC_NOT_FOUND, ("cannot decode this stream"),
                        ("%s", why.c_str()));
      *ret = GST_FLOW_ERROR;
      return false;
    }
    report_loss(self, "damaged delta", why);
    return false;
  }
  if (st->decoder2) {
    if (!st->decoder2->submit(body, h.body_size, &why)) {
      report_loss(self, "impossible delta", "frame " + std::to_string(h.frame_number) + ": " + why);
      return false;
    }
    st->last_frame_number = h.frame_number;
    return true;
  }
  diff::DeltaIndex index;
  // The CUDA decoder takes the list of changed superblocks from the check.
  if (!diff::parse_delta(body, h.body_size, st->frame_bytes, &index, &why,
                         st->ctx->is_cuda() ? &st->entries : nullptr)) {
    report_loss(self, "impossible delta", "frame " + std::to_string(h.frame_number) + ": " + why);
    return false;
  }
  st->decoder->delta(
      body, index,
      (h.flags & stream::kFlagDeltaValues) ? diff::ValueMode::Deltas : diff::ValueMode::Values);
  st->last_frame_number = h.frame_number;
  return true;
}

// The output pts of an untimed packet `h` (Timeline::timed()) at
// `packet_offset`, placed on the timeline; the first after a seek in bytes
// (`seeked`, which this clears) in the run that its offset lies in.
static uint64_t place_untimed(GstCudaDiffDec *self, const stream::PacketHeader &h, bool *new_run) {
  DecState *st = self->state;
  stream::Timeline *tl = &st->timeline;
  const bool seeked = st->seeked;
  st->seeked = false;
  // A restarted sender's time goes on from where the last packet ended, but
  // not before the present of a playing pipeline that receives the stream
  // as it comes: a viewer whose sender stopped for a while (or a relay that
  // replays from a keyframe) would otherwise get every later frame late,
  // dropped by a synchronising sink. A file keeps its own timeline, however
  // fast it plays. (Asked only at a restart: not a clock query per frame.)
  static_assert(stream::kNoTime == GST_CLOCK_TIME_NONE, "no present: no time either way");
  const uint64_t present =
      tl->restarts(h, seeked)
          ? gst_cudadiff_live_present(GST_ELEMENT(self), GST_VIDEO_DECODER_SINK_PAD(self),
                                      &GST_VIDEO_DECODER(self)->output_segment)
          : stream::kNoTime;
  return tl->place(h, st->packet_offset, seeked, new_run, present);
}

// Output timestamps. A packet that came with a timestamp keeps it (unless
// it is before the packet before it: a timed byte stream's burst); one
// without (a byte stream: untimed, or timed buffers that each start at
// most one packet) gets the sender's on stream::Timeline: from 0 when
// nothing came timed, a restarted sender continuing the line, and after a
// timed packet at its time plus the sender's time since it.
static void set_timestamps(GstCudaDiffDec *self, GstVideoCodecFrame *frame,
                           const stream::PacketHeader &packet) {
  DecState *st = self->state;
  // (a packet without a sender pts timed by its frame number, as the parser
  // times a byte stream's: stream::Timeline::timed())
  const stream::PacketHeader h = st->timeline.timed(packet);
  // (A duration over stream::max_packet_duration() (a minute, or twice the
  // frame interval up to a day) is damage or a crafted header, as for the
  // parser and the timeline: the base class takes the framerate's instead.)
  const bool has_duration = stream::usable_duration(h);
  if (GST_CLOCK_TIME_IS_VALID(frame->pts)) {
    if (!GST_CLOCK_TIME_IS_VALID(frame->duration) && has_duration) frame->duration = h.duration;
    if (h.pts != stream::kNoTime) frame->pts = st->timeline.anchor(h, 0, frame->pts);
    return;
  }
  // (untimed at a variable framerate: the base class goes on from the last)
  if (h.pts == stream::kNoTime) return;
  bool new_run = false;
  frame->pts = place_untimed(self, h, &new_run);
  if (new_run && frame->pts != 0)
    GST_INFO_OBJECT(self,
                    "sender restarted (frame %" G_GUINT64_FORMAT
                    "): its time goes on from %" GST_TIME_FORMAT,
                    h.frame_number, GST_TIME_ARGS(frame->pts));
  if (has_duration) frame->duration = h.duration;
}

// What the core's finish() said of a version 2 frame: a keyframe that
// decoded is counted; one that did not is a loss (dropped, as are the
// deltas after it until a keyframe: the core fails those in flight), and a
// keyframe is asked for. False: not decoded.
static bool account_finished(GstCudaDiffDec *self, const DecState::Pending &p, bool decoded,
                             const std::string &why) {
  if (decoded) {
    if (p.keyframe) count_keyframe(self);
    return true;
  }
  report_loss(self, p.keyframe ? "damaged keyframe" : "impossible delta",
              "frame " + std::to_string(p.frame_number) + ": " + why);
  GST_OBJECT_LOCK(self);
  self->stats.dropped_packets++;
  GST_OBJECT_UNLOCK(self);
  request_keyframe(self, p.frame);
  return false;
}

// The core failed in a way that leaves its frames in flight unknown (a
// CUDA error, or its context not made current): the codec is dropped, so
// that the next keyframe starts a fresh one (deltas until then are losses).
static void drop_codec_after_error(GstCudaDiffDec *self) {
  DecState *st = self->state;
  try {
    cudadiff::ContextScope scope(st->ctx.get());
    st->drop_codec();
  } catch (const cudadiff::Error &e) {
    GST_WARNING_OBJECT(self, "dropping the decoder: %s", e.what());
    st->drop_codec();
  }
  st->synced = false;
}

// A frame that will not be shown (its packet lost or damaged, or waiting for
// a keyframe) is dropped as GstVideoDecoder drops frames, with a QoS message
// that counts it, and the next frame pushed is flagged DISCONT.
static void drop_lost_frame(GstCudaDiffDec *self, GstVideoCodecFrame *frame) {
  self->state->discont = true;
  self->state->dropped_any = true;
  gst_video_decoder_drop_frame(GST_VIDEO_DECODER(self), frame);
}

// The frame in flight: waits for it, then finishes it.
static GstFlowReturn finish_pending(GstCudaDiffDec *self) {
  DecState *st = self->state;
  if (!st->has_pending) return GST_FLOW_OK;
  st->has_pending = false;
  DecState::Pending p = st->pending;
  st->pending.frame = nullptr;
  if (!st->decoder && !st->decoder2) {
    // The core was dropped after an error (posted then), and this frame with it.
    gst_video_frame_unmap(&p.out);
    gst_video_decoder_release_frame(GST_VIDEO_DECODER(self), p.frame);
    return GST_FLOW_OK;
  }
  bool decoded = true;
  std::string why;
  try {
    cudadiff::ContextScope scope(st->ctx.get());
    if (p.in_core2)  // version 2: decoded and written, or damage found on the GPU
      decoded = st->decoder2->finish(&why);
    else if (st->decoder)  // version 1: the frame comes down from the GPU
      st->decoder->wait_frame();
  } catch (const cudadiff::Error &e) {
    drop_codec_after_error(self);
    gst_video_frame_unmap(&p.out);
    gst_cudadiff_post_error(GST_ELEMENT(self), "writing a decoded frame", e);
    gst_video_decoder_release_frame(GST_VIDEO_DECODER(self), p.frame);
    return GST_FLOW_ERROR;
  }
  gst_video_frame_unmap(&p.out);
  if (p.in_core2 && !account_finished(self, p, decoded, why)) {
    drop_lost_frame(self, p.frame);
    return GST_FLOW_OK;
  }
  if (st->discont) {
    GST_BUFFER_FLAG_SET(p.frame->output_buffer, GST_BUFFER_FLAG_DISCONT);
    st->discont = false;
  }
  if (p.sender_pts != stream::kNoTime)
    gst_buffer_add_reference_timestamp_meta(
        p.frame->output_buffer, sender_timestamp_caps, p.sender_pts,
        p.sender_duration != stream::kNoTime ? p.sender_duration : GST_CLOCK_TIME_NONE);
  GST_OBJECT_LOCK(self);
  self->stats.frames_out++;
  GST_OBJECT_UNLOCK(self);
  st->finished_any = true;
  return gst_video_decoder_finish_frame(GST_VIDEO_DECODER(self), p.frame);
}

// Flush and stop: the frame in flight is waited for and dropped.
static void discard_pending(GstCudaDiffDec *self) {
  DecState *st = self->state;
  if (!st->has_pending) return;
  st->has_pending = false;
  try {
    cudadiff::ContextScope scope(st->ctx.get());
    if (st->pending.in_core2) {
      // A keyframe that decoded still counts (a flush drops its frame, not it).
      if (st->decoder2 && st->decoder2->finish(nullptr) && st->pending.keyframe)
        count_keyframe(self);
    } else if (st->decoder) {
      st->decoder->wait_frame();
    }
  } catch (const cudadiff::Error &e) {
    GST_WARNING_OBJECT(self, "dropping a frame in flight: %s", e.what());
    drop_codec_after_error(self);
  }
  gst_video_frame_unmap(&st->pending.out);
  gst_video_codec_frame_unref(st->pending.frame);
  st->pending.frame = nullptr;
}

// A packet is checked and applied; its frame is queued to come down from the
// GPU into an output buffer (pinned). Without frame-overlap it is finished at
// once; with it, it stays in flight until the next packet has been applied,
// so that the GPU copies frame N down (version 2: decodes it and copies it
// down) while the CPU pushes frame N-1 and checks packet N+1. Keyframes and
// dropped packets first finish the frame in flight (output caps may change;
// frames leave in order).
static GstFlowReturn handle_packet(GstCudaDiffDec *self, GstVideoCodecFrame *frame);

// Downstream's QoS reports (a sink with sync=true qos=true: video sinks
// are) are kept for skip_when_late(), then handled by GstVideoDecoder as
// usual (it drops decoded frames that would arrive late). Reports that
// skip_when_late() ignores (during a skip, and about frames from before
// the keyframe that ended it: its lateness is answered) go upstream
// without the base class, which would otherwise drop that keyframe and the
// frames after it as late as those reports said. Throttle reports say
// nothing of lateness; a report about a frame not yet due (one from before
// a flushing seek, arriving after it) is not kept. During a skip no report
// reaches the base class.
static gboolean gst_cudadiff_dec_src_event(GstVideoDecoder *decoder, GstEvent *event) {
  if (GST_EVENT_TYPE(event) == GST_EVENT_QOS) {
    auto *self = GST_CUDADIFF_DEC(decoder);
    GstQOSType type = GST_QOS_TYPE_UNDERFLOW;
    gdouble proportion = 1.0;
    GstClockTimeDiff jitter = 0;
    GstClockTime timestamp = GST_CLOCK_TIME_NONE;
    gst_event_parse_qos(event, &type, &proportion, &jitter, &timestamp);
    const GstClockTime now = gst_element_get_current_running_time(GST_ELEMENT(self));
    bool answered = false;
    std::unique_lock<std::mutex> reports(self->state->qos_lock);
    GST_OBJECT_LOCK(self);
    if (!GST_CLOCK_TIME_IS_VALID(self->qos.from)) {
      answered = true;  // a skip
    } else if (type != GST_QOS_TYPE_THROTTLE && GST_CLOCK_TIME_IS_VALID(timestamp) &&
               GST_CLOCK_TIME_IS_VALID(now) && timestamp <= now) {
      if (timestamp >= self->qos.from) {
        self->qos.timestamp = timestamp;
        // (clamped: a crafted report must not overflow the estimate)
        self->qos.jitter = CLAMP(jitter, -kMaxQosJitter, kMaxQosJitter);
        self->qos.received = now;
      } else {
        answered = true;
      }
    }
    GST_OBJECT_UNLOCK(self);
    if (!answered)
      return GST_VIDEO_DECODER_CLASS(gst_cudadiff_dec_parent_class)->src_event(decoder, event);
    reports.unlock();
    GST_LOG_OBJECT(self,
                   "QoS report about %" GST_TIME_FORMAT
                   " (during a skip or before its keyframe): sent upstream only",
                   GST_TIME_ARGS(timestamp));
    return gst_pad_push_event(GST_VIDEO_DECODER_SINK_PAD(decoder), event);
  }
  return GST_VIDEO_DECODER_CLASS(gst_cudadiff_dec_parent_class)->src_event(decoder, event);
}

// A decoded frame (its time set) that downstream would get more than
// max-lateness late: the deltas after it are dropped undecoded until the
// next keyframe (asked for upstream, as after a loss), so that a viewer
// whose decoding is slower than the stream catches up with it instead of
// falling ever further behind (GstVideoDecoder alone drops frames after
// decoding them, which saves no decoding). The frame's lateness is
// extrapolated from the sink's last report: that frame's lateness, plus
// the time since the report, less the stream time between the two frames
// (plus the frame that frame-overlap holds). Without a report (no syncing
// sink with QoS, a file decoded as fast as it can, qos=false) nothing is
// skipped, nor in reverse playback or key-unit trick modes.
static void skip_when_late(GstCudaDiffDec *self, GstVideoCodecFrame *frame,
                           const stream::PacketHeader &h) {
  DecState *st = self->state;
  auto *decoder = GST_VIDEO_DECODER(self);
  // (frame times are in the input segment, as GstVideoDecoder's deadlines;
  // a byte stream's is made a time segment; the output segment follows
  // only when the base class pushes the next frame)
  const GstSegment *segment = &decoder->input_segment;
  const GstClockTime rt = GST_CLOCK_TIME_IS_VALID(frame->pts) && segment->format == GST_FORMAT_TIME
                              ? gst_segment_to_running_time(segment, GST_FORMAT_TIME, frame->pts)
                              : GST_CLOCK_TIME_NONE;
  if (st->late_skip && h.keyframe()) {
    // The keyframe that ends a skip: reports about it and later frames
    // count again (untimed: all of them, for the base class; the estimate
    // needs times and skips nothing there).
    st->late_skip = false;
    GST_OBJECT_LOCK(self);
    self->qos.from = GST_CLOCK_TIME_IS_VALID(rt) ? rt : 0;
    GST_OBJECT_UNLOCK(self);
  }
  if (!GST_CLOCK_TIME_IS_VALID(rt) || segment->rate < 0 ||
      (segment->flags & GST_SEGMENT_FLAG_TRICKMODE_KEY_UNITS))
    return;
  std::unique_lock<std::mutex> reports(st->qos_lock);
  GST_OBJECT_LOCK(self);
  const gint64 max_lateness = self->max_lateness;
  const QosReport q = self->qos;
  GST_OBJECT_UNLOCK(self);
  if (max_lateness < 0 || !GST_CLOCK_TIME_IS_VALID(q.timestamp)) return;
  gboolean qos = TRUE;
  g_object_get(self, "qos", &qos, nullptr);  // GstVideoDecoder's (changeable while playing)
  if (!qos) return;
  const GstClockTime now = gst_element_get_current_running_time(GST_ELEMENT(self));
  if (!GST_CLOCK_TIME_IS_VALID(now)) return;
  GstClockTimeDiff late =
      q.jitter + GST_CLOCK_DIFF(q.received, now) - GST_CLOCK_DIFF(q.timestamp, rt);
  if (st->overlap && GST_CLOCK_TIME_IS_VALID(frame->duration))  // it leaves with the next packet
    late += GstClockTimeDiff(double(frame->duration) / segment->rate);
  if (late <= max_lateness) return;
  GST_INFO_OBJECT(self,
                  "frame %" G_GUINT64_FORMAT " would be %" GST_STIME_FORMAT
                  " late (max-lateness %" GST_STIME_FORMAT
                  "): the deltas after it are dropped until the next keyframe",
                  h.frame_number, GST_STIME_ARGS(late), GST_STIME_ARGS(max_lateness));
  st->synced = false;
  st->late_skip = true;
  GST_OBJECT_LOCK(self);
  self->stats.late_skips++;
  self->qos.timestamp = GST_CLOCK_TIME_NONE;
  self->qos.from = GST_CLOCK_TIME_NONE;
  GST_OBJECT_UNLOCK(self);
  // GstVideoDecoder's own QoS keeps dropping frames until the time the
  // last reports made it expect: it is told that this frame is due now,
  // so that it lets through this frame and the keyframe that ends the skip
  // (the report also goes upstream, as every QoS report does).
  GST_VIDEO_DECODER_CLASS(gst_cudadiff_dec_parent_class)
      ->src_event(decoder, gst_event_new_qos(GST_QOS_TYPE_UNDERFLOW, 1.0, 0, rt));
  reports.unlock();
  request_keyframe(self, frame, true);
}

static GstFlowReturn gst_cudadiff_dec_handle_frame(GstVideoDecoder *decoder,
                                                   GstVideoCodecFrame *frame) {
  auto *self = GST_CUDADIFF_DEC(decoder);
  DecState *st = self->state;
  if (!st->ctx || !st->reader) {
    gst_video_decoder_release_frame(decoder, frame);
    return GST_FLOW_NOT_NEGOTIATED;
  }
  // A flow that pushing the held frame returned outside this function (a
  // drain query, new caps) or before a keyframe (handle_packet()) is
  // upstream's answer for this packet, which is decoded all the same:
  // dropped, it would break the chain of deltas.
  const GstFlowReturn held = st->held_flow;
  st->held_flow = GST_FLOW_OK;
  const GstFlowReturn ret = handle_packet(self, frame);
  const GstFlowReturn before = st->held_flow;
  st->held_flow = GST_FLOW_OK;
  if (ret != GST_FLOW_OK) return ret;
  return held != GST_FLOW_OK ? held : before;
}

// Whether `h` (an intact packet) was decoded already: the packet just
// decoded, again, or a delta decoded among the last kReorderFrames + 1
// frames (the same header checksum under the same frame number, so the
// same times, sizes and payload): a relay that repeats the last packet it
// sent when a viewer reconnects or resends older ones, a duplicating
// network. Only while synced, and for the packets decoded since the codec
// was set up, a new segment, stream-start or stream header. A keyframe of
// an earlier frame is no repeat: it may be a clip that loops without
// segments or a restarted sender as well as an old packet resent, and only
// the packets after it could tell.
static bool repeated_packet(const DecState *st, const stream::PacketHeader &h) {
  if (!st->synced || h.stream_header()) return false;
  const guint64 last = st->last_frame_number;
  if (h.frame_number > last || last - h.frame_number > stream::kReorderFrames) return false;
  if (h.frame_number < last && h.keyframe()) return false;
  const DecState::Decoded &d = st->recent[DecState::slot(h.frame_number)];
  return d.valid && d.frame_number == h.frame_number && d.header_crc == h.header_crc;
}

static GstFlowReturn handle_packet(GstCudaDiffDec *self, GstVideoCodecFrame *frame) {
  auto *decoder = GST_VIDEO_DECODER(self);
  DecState *st = self->state;
  if (!st->overlap_decided) decide_overlap(self, int(st->fps_n), int(st->fps_d));
  GstMapInfo in;
  if (!gst_buffer_map(frame->input_buffer, &in, GST_MAP_READ)) {
    GST_ELEMENT_ERROR(self, STREAM, DECODE, ("cannot map the input buffer"), (nullptr));
    gst_video_decoder_release_frame(decoder, frame);
    return GST_FLOW_ERROR;
  }
  // The parser checked this packet; read its header again (cheap) rather
  // than trust state carried between the calls.
  stream::PacketHeader h;
  std::string why;
  const bool header_ok =
      stream::read_header(in.data, in.size, &h, &why) == stream::HeaderStatus::Ok &&
      in.size == stream::kHeaderSize + h.payload_size;
  GstFlowReturn ret = GST_FLOW_OK;
  bool decoded = false;
  if (header_ok && !h.keyframe() &&
      (decoder->input_segment.flags & GST_SEGMENT_FLAG_TRICKMODE_KEY_UNITS)) {
    // Key-unit trick mode (a player's fast forward): keyframes only; a
    // delta is passed over undecoded (no loss), and the stream starts again
    // at the next keyframe.
    gst_buffer_unmap(frame->input_buffer, &in);
    GST_LOG_OBJECT(self, "key-unit trick mode: delta %" G_GUINT64_FORMAT " skipped",
                   h.frame_number);
    st->synced = false;
    gst_video_decoder_release_frame(decoder, frame);
    return GST_FLOW_OK;
  }
  if (header_ok && repeated_packet(st, h)) {
    // Nothing new, and no loss: dropped, a repeated delta would break the
    // sequence and lose the rest of the keyframe interval.
    gst_buffer_unmap(frame->input_buffer, &in);
    GST_DEBUG_OBJECT(self,
                     "packet %" G_GUINT64_FORMAT " repeated (the last decoded %" G_GUINT64_FORMAT
                     "): dropped",
                     h.frame_number, st->last_frame_number);
    GST_OBJECT_LOCK(self);
    self->stats.dropped_packets++;
    GST_OBJECT_UNLOCK(self);
    gst_video_decoder_release_frame(decoder, frame);
    return GST_FLOW_OK;
  }
  if (!header_ok) {
    report_loss(self, "damaged packet", why.empty() ? "packet size mismatch" : why);
  } else {
    if (h.keyframe()) {
      // The held frame goes out before a keyframe, which may bring new
      // caps. A flow other than OK is returned for this packet, which is
      // decoded all the same (handle_frame()), as a delta is; an error
      // (posted here or downstream) ends it here.
      const GstFlowReturn before = finish_pending(self);
      if (before == GST_FLOW_ERROR) {
        gst_buffer_unmap(frame->input_buffer, &in);
        gst_video_decoder_release_frame(decoder, frame);
        return before;
      }
      st->held_flow = before;
    }
    GST_OBJECT_LOCK(self);
    self->stats.packets++;
    self->stats.bytes_in += in.size;
    GST_OBJECT_UNLOCK(self);
    try {
      try {
        cudadiff::ContextScope scope(st->ctx.get());
        decoded = decode_packet(self, h, in.data + stream::kHeaderSize, &ret);
      } catch (const std::bad_alloc &) {
        // A keyframe of a size this machine cannot hold (version 2 keeps
        // about 7 bytes per frame byte).
        throw cudadiff::Error("out of memory for a " + std::to_string(h.width) + "x" +
                              std::to_string(h.height) + " " + cudadiff::format_name(h.format) +
                              " frame of stream version " + std::to_string(h.version));
      }
    } catch (const cudadiff::Error &e) {
      gst_buffer_unmap(frame->input_buffer, &in);
      gst_cudadiff_post_error(GST_ELEMENT(self), "decoding a frame", e);
      gst_video_decoder_release_frame(decoder, frame);
      return GST_FLOW_ERROR;
    }
  }
  gst_buffer_unmap(frame->input_buffer, &in);
  if (st->skipped_since_packet > 0) {
    if (decoded)
      GST_INFO_OBJECT(self,
                      "%" G_GUINT64_FORMAT " bytes between packets skipped (%s); no packet missing",
                      st->skipped_since_packet, st->first_skip.c_str());
    st->skipped_since_packet = 0;
    st->first_skip.clear();
  }
  if (!decoded) {
    if (ret != GST_FLOW_FLUSHING) {
      GST_OBJECT_LOCK(self);
      self->stats.dropped_packets++;
      GST_OBJECT_UNLOCK(self);
    }
    if (!st->synced && ret == GST_FLOW_OK) request_keyframe(self, frame, st->late_skip);
    const GstFlowReturn flushed = finish_pending(self);
    // A lost frame whose header is intact keeps its place on the timeline
    // (as the parser's does): left untimed, the base class would time it
    // after the last frame out, and then hold every later frame before its
    // time at that time (runs of frames with one timestamp). Not before the
    // timeline has begun: a late viewer's line starts at its first picture,
    // not at the deltas dropped before it (which would delay every picture
    // by their time in a synchronising sink).
    // (A file's line starts at its first packet, as the parser's does.)
    if (ret == GST_FLOW_OK && header_ok && !h.stream_header() &&
        (st->timeline.have || st->upstream_file == 1))
      set_timestamps(self, frame, h);
    if (ret == GST_FLOW_OK)
      drop_lost_frame(self, frame);
    else
      gst_video_decoder_release_frame(decoder, frame);
    return ret != GST_FLOW_OK ? ret : flushed;
  }

  st->recent[DecState::slot(h.frame_number)] = {h.frame_number, h.header_crc, true};
  set_timestamps(self, frame, h);
  if (st->segment_pending && h.keyframe()) segment_at_keyframe(self, frame->pts);
  skip_when_late(self, frame, h);
  DecState::Pending p;
  p.frame = frame;
  p.sender_pts = h.pts;
  p.sender_duration = h.duration;
  // (version 2 with nothing in flight: a keyframe of a new size, decoded at once)
  p.in_core2 = st->decoder2 != nullptr && st->decoder2->frames_in_flight() > 0;
  p.keyframe = h.keyframe();
  p.frame_number = h.frame_number;
  // No output for a version 2 frame in flight (or a write that failed):
  // the frame before it goes out, then the core finishes this one (its
  // picture is the reference all the same), then its output is unmapped.
  auto drop_unwritten = [&](GstFlowReturn flow, bool mapped) {
    if (p.in_core2) {
      const GstFlowReturn before = finish_pending(self);
      try {
        cudadiff::ContextScope scope(st->ctx.get());
        std::string lost;
        // (no core: dropped after an error finishing the frame before)
        if (st->decoder2) account_finished(self, p, st->decoder2->finish(&lost), lost);
      } catch (const cudadiff::Error &e) {
        GST_WARNING_OBJECT(self, "finishing a frame without output: %s", e.what());
        drop_codec_after_error(self);
      }
      if (flow == GST_FLOW_OK) flow = before;
    }
    if (mapped) gst_video_frame_unmap(&p.out);
    gst_video_decoder_release_frame(decoder, frame);
    return flow;
  };
  ret = gst_video_decoder_allocate_output_frame(decoder, frame);
  if (ret != GST_FLOW_OK) return drop_unwritten(ret, false);
  GstVideoCodecState *out_state = gst_video_decoder_get_output_state(decoder);
  // Into CUDA memory (the pipeline's context) the frame is written where it
  // is, on the GPU: version 1's wait_frame() and version 2's finish() wait
  // for it before it is pushed. The CPU backend writes through a host
  // mapping.
  bool on_device = false;
  const gboolean mapped = gst_cudadiff_frame_map(&p.out, &out_state->info, frame->output_buffer,
                                                 GST_MAP_WRITE, &st->share, &on_device);
  const GstVideoInfo out_info = out_state->info;
  gst_video_codec_state_unref(out_state);
  if (!mapped) {
    GST_ELEMENT_ERROR(self, STREAM, DECODE, ("cannot map the output buffer"), (nullptr));
    return drop_unwritten(GST_FLOW_ERROR, false);
  }
  try {
    cudadiff::ContextScope scope(st->ctx.get());
    if (p.in_core2)
      st->decoder2->submit_write_frame(gst_cudadiff_frame_view(&p.out, &out_info));
    else if (st->decoder2)
      st->decoder2->write_frame(gst_cudadiff_frame_view(&p.out, &out_info));  // waits for the copy
    else
      st->decoder->submit_write_frame(gst_cudadiff_frame_view(&p.out, &out_info));
  } catch (const cudadiff::Error &e) {
    gst_cudadiff_post_error(GST_ELEMENT(self), "writing a decoded frame", e);
    if (p.in_core2) return drop_unwritten(GST_FLOW_ERROR, true);
    gst_video_frame_unmap(&p.out);
    gst_video_decoder_release_frame(decoder, frame);
    return GST_FLOW_ERROR;
  }
  // The frame before this one (overlap), then this one now or later.
  ret = finish_pending(self);
  if (!st->decoder && !st->decoder2) {
    // The core was dropped after an error finishing the frame before (which
    // posted it): this frame, queued on it, went with it.
    gst_video_frame_unmap(&p.out);
    gst_video_decoder_release_frame(decoder, frame);
    return ret;
  }
  st->pending = p;
  st->has_pending = true;
  if (ret != GST_FLOW_OK || st->overlap) return ret;
  return finish_pending(self);
}

// Output buffers come from a pinned pool: downstream's when it is one of
// ours, else a new one; for CUDA memory caps a pool of the pipeline's CUDA
// context.
static gboolean gst_cudadiff_dec_decide_allocation(GstVideoDecoder *decoder, GstQuery *query) {
  DecState *st = GST_CUDADIFF_DEC(decoder)->state;
  // One more buffer than downstream asks for: the frame in flight.
  const guint extra = st->overlap ? 1 : 0;
  GstCaps *caps = nullptr;
  gst_query_parse_allocation(query, &caps, nullptr);
  if (gst_cudadiff_caps_are_cuda(caps)) {
    bool orders = false;  // every frame is waited for before it leaves
    return gst_cudadiff_decide_cuda_allocation(GST_ELEMENT(decoder), &st->share, query, extra,
                                               &orders);
  }
  return gst_cudadiff_decide_pinned_allocation(GST_ELEMENT(decoder), query, extra);
}

static gboolean gst_cudadiff_dec_src_query(GstVideoDecoder *decoder, GstQuery *query) {
  auto *self = GST_CUDADIFF_DEC(decoder);
  if (self->state->share.handle_query(GST_ELEMENT(decoder), query)) return TRUE;
  if (GST_QUERY_TYPE(query) == GST_QUERY_CAPS) {
    // The template's CUDA memory only where the element can use it (not
    // with backend=cpu, nor without a device, nor once it has fallen back to
    // a context of its own until it stops), as the other elements answer.
    GST_OBJECT_LOCK(self);
    const GstCudaDiffBackend backend = self->backend;
    const gint device_id = self->device_id;
    GST_OBJECT_UNLOCK(self);
    const bool cuda = gst_cudadiff_cuda_caps_allowed(backend, device_id, self->state->share);
    if (!cuda) {
      GstCaps *filter = nullptr;
      gst_query_parse_caps(query, &filter);
      GstCaps *templ = gst_pad_get_pad_template_caps(GST_VIDEO_DECODER_SRC_PAD(decoder));
      GstCaps *caps = gst_cudadiff_caps_without_cuda(templ);
      gst_caps_unref(templ);
      if (filter) {
        GstCaps *tmp = gst_caps_intersect_full(filter, caps, GST_CAPS_INTERSECT_FIRST);
        gst_caps_unref(caps);
        caps = tmp;
      }
      gst_query_set_caps_result(query, caps);
      gst_caps_unref(caps);
      return TRUE;
    }
  }
  return GST_VIDEO_DECODER_CLASS(gst_cudadiff_dec_parent_class)->src_query(decoder, query);
}

// A drain query (an application waiting for every output of what it
// pushed) pushes the frame held by frame-overlap first, as the encoder and
// the filters do; GstVideoDecoder itself only forwards it downstream.
static gboolean gst_cudadiff_dec_sink_query(GstVideoDecoder *decoder, GstQuery *query) {
  if (GST_QUERY_TYPE(query) == GST_QUERY_DRAIN) push_held_frame(GST_CUDADIFF_DEC(decoder));
  if (GST_CUDADIFF_DEC(decoder)->state->share.handle_query(GST_ELEMENT(decoder), query))
    return TRUE;
  return GST_VIDEO_DECODER_CLASS(gst_cudadiff_dec_parent_class)->sink_query(decoder, query);
}

static void gst_cudadiff_dec_set_context(GstElement *element, GstContext *context) {
  auto *self = GST_CUDADIFF_DEC(element);
  GST_OBJECT_LOCK(self);
  const gint device_id = self->device_id;
  const bool cpu = self->backend == GST_CUDADIFF_BACKEND_CPU;
  GST_OBJECT_UNLOCK(self);
  // A CPU element keeps no CUDA context (and so answers no context query).
  if (!cpu) self->state->share.set_context(element, context, device_id);
  GST_ELEMENT_CLASS(gst_cudadiff_dec_parent_class)->set_context(element, context);
}

static void gst_cudadiff_dec_class_init(GstCudaDiffDecClass *klass) {
  GObjectClass *gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  GstVideoDecoderClass *decoder_class = GST_VIDEO_DECODER_CLASS(klass);

  GST_DEBUG_CATEGORY_INIT(gst_cudadiff_dec_debug, "cudadiffdec", 0,
                          "gst-cudadiff difference decoder");
  sender_timestamp_caps = gst_caps_from_string(GST_CUDADIFF_SENDER_TIMESTAMP_CAPS);
  GST_MINI_OBJECT_FLAG_SET(sender_timestamp_caps, GST_MINI_OBJECT_FLAG_MAY_BE_LEAKED);

  gobject_class->set_property = gst_cudadiff_dec_set_property;
  gobject_class->get_property = gst_cudadiff_dec_get_property;
  gobject_class->finalize = gst_cudadiff_dec_finalize;

  g_object_class_install_property(
      gobject_class, PROP_STATS,
      g_param_spec_boxed(
          "stats", "Statistics",
          "Counters since start (read-only, guint64 fields): packets, keyframes, "
          "frames-out, bytes-in, dropped-packets (damaged, out of sequence, "
          "repeated, or before a keyframe), skipped-bytes (not part of a valid packet), "
          "losses (warnings posted), late-skips (skips to a keyframe for max-lateness)",
          GST_TYPE_STRUCTURE, static_cast<GParamFlags>(G_PARAM_READABLE | G_PARAM_STATIC_STRINGS)));
  g_object_class_install_property(
      gobject_class, PROP_FRAME_OVERLAP,
      g_param_spec_enum(
          "frame-overlap", "Frame overlap",
          "Whether a decoded frame is pushed only once the next packet has been applied, so "
          "that the GPU works on it while the CPU checks the next packet (version 1: the "
          "frame comes down from the GPU; version 2: the GPU decodes it while the frame "
          "before goes out): more frames per second, one frame of delay; end of stream, "
          "keyframes, damaged packets and caps changes push it. never (for viewers: "
          "tcpclientsrc is not flagged live but is real time), always (decoding files or "
          "recorded streams as fast as possible), auto = when upstream is not live. Read "
          "when input caps are set, or at the first packet of a byte stream without caps "
          "(tcpclientsrc, filesrc), so there a change applies at the next start. Default: "
          "never",
          GST_TYPE_CUDADIFF_FRAME_OVERLAP, DEFAULT_FRAME_OVERLAP,
          static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
                                   GST_PARAM_MUTABLE_PLAYING)));
  g_object_class_install_property(
      gobject_class, PROP_MAX_PIXELS,
      g_param_spec_uint64(
          "max-pixels", "Largest frame",
          "Largest frame (width x height, in pixels) a packet may announce: a larger keyframe is "
          "dropped with a warning before its bytes are collected or anything is allocated for "
          "it, and its deltas likewise wait for a keyframe that fits (a stream's keyframes "
          "announce their size, and a crafted packet "
          "could otherwise make the decoder take gigabytes). 0 = no limit but the stream "
          "format's 1 GiB per frame. Changeable while playing. Default: 35389440 (8192x4320)",
          0, G_MAXUINT64, DEFAULT_MAX_PIXELS,
          static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
                                   GST_PARAM_MUTABLE_PLAYING)));
  g_object_class_install_property(
      gobject_class, PROP_MAX_LATENESS,
      g_param_spec_int64(
          "max-lateness", "Maximum lateness",
          "When downstream's QoS (a sink with sync=true qos=true, as video sinks are) says "
          "that a decoded frame will be later than this (ns), the deltas after it are dropped "
          "without decoding until the next keyframe, and one is asked for upstream (a "
          "force-key-unit event, which rtpbin sends to the sender as RTCP PLI/FIR): a viewer "
          "whose decoder is slower than the stream returns to the live edge at a keyframe "
          "instead of falling ever further behind (GstVideoDecoder's qos only drops "
          "frames after decoding them). The picture stays right: no delta is applied without "
          "its predecessors. Without QoS reports (no syncing sink, qos=false) nothing is "
          "skipped. -1 = never. Changeable while playing. Default: 1000000000 (1 s)",
          -1, G_MAXINT64, DEFAULT_MAX_LATENESS,
          static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
                                   GST_PARAM_MUTABLE_PLAYING)));
  gst_cudadiff_install_backend_properties(gobject_class, PROP_BACKEND, PROP_DEVICE_ID,
                                          PROP_ACTIVE_BACKEND);

  // Any version field: each packet says its version (and caps without one,
  // "video/x-cudadiff", must be accepted as before).
  GstCaps *sink_caps = gst_caps_from_string("video/x-cudadiff");
  gst_element_class_add_pad_template(
      element_class, gst_pad_template_new("sink", GST_PAD_SINK, GST_PAD_ALWAYS, sink_caps));
  gst_caps_unref(sink_caps);
  GstCaps *src_caps = gst_cudadiff_make_template_caps(SRC_FORMATS);
  gst_element_class_add_pad_template(
      element_class, gst_pad_template_new("src", GST_PAD_SRC, GST_PAD_ALWAYS, src_caps));
  gst_caps_unref(src_caps);
  gst_element_class_set_static_metadata(
      element_class, "CUDA frame-difference decoder", "Codec/Decoder/Video",
      "Rebuilds video from the keyframes and difference packets of cudadiffenc, stream versions "
      "1 and 2 (packets or a raw byte stream from tcpclientsrc), on the GPU or on the CPU",
      "gst-cudadiff developers");

  decoder_class->start = GST_DEBUG_FUNCPTR(gst_cudadiff_dec_start);
  decoder_class->stop = GST_DEBUG_FUNCPTR(gst_cudadiff_dec_stop);
  decoder_class->set_format = GST_DEBUG_FUNCPTR(gst_cudadiff_dec_set_format);
  decoder_class->flush = GST_DEBUG_FUNCPTR(gst_cudadiff_dec_flush);
  decoder_class->finish = GST_DEBUG_FUNCPTR(gst_cudadiff_dec_finish);
  decoder_class->drain = GST_DEBUG_FUNCPTR(gst_cudadiff_dec_finish);
  decoder_class->parse = GST_DEBUG_FUNCPTR(gst_cudadiff_dec_parse);
  decoder_class->handle_frame = GST_DEBUG_FUNCPTR(gst_cudadiff_dec_handle_frame);
  decoder_class->decide_allocation = GST_DEBUG_FUNCPTR(gst_cudadiff_dec_decide_allocation);
  decoder_class->negotiate = GST_DEBUG_FUNCPTR(gst_cudadiff_dec_negotiate);
  decoder_class->src_query = GST_DEBUG_FUNCPTR(gst_cudadiff_dec_src_query);
  decoder_class->sink_query = GST_DEBUG_FUNCPTR(gst_cudadiff_dec_sink_query);
  decoder_class->sink_event = GST_DEBUG_FUNCPTR(gst_cudadiff_dec_sink_event);
  decoder_class->src_event = GST_DEBUG_FUNCPTR(gst_cudadiff_dec_src_event);
  element_class->set_context = GST_DEBUG_FUNCPTR(gst_cudadiff_dec_set_context);
  element_class->change_state = GST_DEBUG_FUNCPTR(gst_cudadiff_dec_change_state);
  element_class->post_message = GST_DEBUG_FUNCPTR(gst_cudadiff_dec_post_message);
}

static void gst_cudadiff_dec_init(GstCudaDiffDec *self) {
  self->backend = GST_CUDADIFF_DEFAULT_BACKEND;
  self->device_id = GST_CUDADIFF_DEFAULT_DEVICE_ID;
  self->frame_overlap = DEFAULT_FRAME_OVERLAP;
  self->max_pixels = DEFAULT_MAX_PIXELS;
  self->max_lateness = DEFAULT_MAX_LATENESS;
  self->quiet_no_frames = false;
  self->state = new DecState();
  // The parse vfunc splits the input into packets, whatever its buffers are.
  gst_video_decoder_set_packetized(GST_VIDEO_DECODER(self), FALSE);
  // Keyframe requests (request_keyframe): at most one per interval; the
  // base class's default, 0, would send one per dropped packet.
  g_object_set(self, "min-force-key-unit-interval", guint64(DEFAULT_MIN_FORCE_KEY_UNIT_INTERVAL),
               nullptr);
  // With automatic-request-sync-points the base class's own requests (on
  // gaps of missing data) drop the input until a keyframe, as the decoder
  // does by itself after a loss; but its default flags also mark output as
  // corrupted up to and including the keyframe the decoder resumes at,
  // which is exact (and dropped under discard-corrupted-frames).
  g_object_set(self, "automatic-request-sync-point-flags",
               GST_VIDEO_DECODER_REQUEST_SYNC_POINT_DISCARD_INPUT, nullptr);
}
