/**
 * SECTION:element-cudadiffenc
 * @title: cudadiffenc
 *
 * Bounded-error difference encoder: a keyframe, then per frame a delta
 * against the reference, the picture every decoder shows (the encoder keeps
 * exactly what the decoders rebuild, so errors never accumulate). Every shown
 * byte is within `threshold` of the input (threshold=0 is lossless).
 * Two versions of the stream (`stream-version`, default 2): version 1 sends
 * the bytes that differ from the reference by more than the threshold,
 * optionally with zstd, on the GPU or the CPU; version 2 codes 16x16 blocks
 * as skipped, predicted from the reference, from their neighbours or both,
 * quantised with step 2k+1 (k about two thirds of the threshold in deltas,
 * a third in keyframes; a byte within the threshold of the reference keeps
 * it) and entropy-coded in independent tiles, on the GPU or the CPU (the
 * same bytes). Keyframes come on the first
 * frame, every `keyframe-interval` frames, on force-key-unit events and on
 * caps changes; deltas carry GST_BUFFER_FLAG_DELTA_UNIT, so tcpserversink's
 * keyframe sync methods start late clients at a keyframe. The stream header
 * goes into the caps as `streamheader`. docs/stream-format.md specifies the
 * stream.
 *
 * With a non-live upstream (`frame-overlap=auto`) a delta's packet waits:
 * the GPU encodes the next frames while the CPU packs it (the same packets,
 * later; end of stream pushes the last ones). Version 1 and the CPU backend
 * hold one delta, version 2 on the GPU up to four. With a live upstream
 * every packet is pushed as soon as its frame is encoded. Keyframes are
 * pushed at once, after the deltas before them.
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 v4l2src ! videoconvert ! cudadiffenc threshold=20 \
 *     ! tcpserversink host=0.0.0.0 port=5000 sync-method=latest-keyframe
 * ]|
 */
#include "gstcudadiffenc.h"

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "cudadiff/codec2.h"
#include "cudadiff/diff.h"
#include "cudadiffstream.h"
#include "gstcudadiffcudamem.h"
#include "gstcudadifffilter.h"
#include "gstcudadiffpinned.h"
#include "gstcudadiffutils.h"

GST_DEBUG_CATEGORY_STATIC(gst_cudadiff_enc_debug);
#define GST_CAT_DEFAULT gst_cudadiff_enc_debug

namespace stream = cudadiff::stream;
namespace diff = cudadiff::diff;
namespace codec2 = cudadiff::codec2;

#define DEFAULT_THRESHOLD 20
// The version written unless `stream-version` says otherwise: 2, several
// times smaller on camera footage; version 1 costs less time per frame (on
// the GPU about a tenth, on the CPU far less), for senders short of it. The
// blurb and the docs follow this one constant.
#define DEFAULT_STREAM_VERSION 2
#define DEFAULT_KEYFRAME_INTERVAL 60
#define DEFAULT_COMPRESSION_LEVEL 3
#define DEFAULT_STATS_INTERVAL 0
#define DEFAULT_FRAME_OVERLAP GST_CUDADIFF_FRAME_OVERLAP_AUTO
#define MIN_COMPRESSION_LEVEL -7
#define MAX_COMPRESSION_LEVEL 19
#if CUDADIFF_HAVE_ZSTD
#define DEFAULT_COMPRESSION GST_CUDADIFF_COMPRESSION_ZSTD
#else
#define DEFAULT_COMPRESSION GST_CUDADIFF_COMPRESSION_NONE
#endif

enum {
  PROP_0,
  PROP_THRESHOLD,
  PROP_KEYFRAME_INTERVAL,
  PROP_COMPRESSION,
  PROP_COMPRESSION_LEVEL,
  PROP_STATS_INTERVAL,
  PROP_FRAME_OVERLAP,
  PROP_STATS,
  PROP_BACKEND,
  PROP_DEVICE_ID,
  PROP_ACTIVE_BACKEND,
  PROP_STREAM_VERSION,
};

#define SINK_FORMATS                                                                      \
  "{ BGR, RGB, BGRx, RGBx, xBGR, xRGB, BGRA, RGBA, ABGR, ARGB, GRAY8, I420, YV12, NV12, " \
  "NV21, YUY2, UYVY, Y444, Y42B }"

namespace {

struct EncStats {
  guint64 frames = 0;
  guint64 keyframes = 0;
  guint64 bytes_in = 0;   // canonical frame bytes given to the encoder
  guint64 bytes_out = 0;  // packet bytes (headers included; stream headers not)
  guint64 changed_bytes = 0;
  guint64 report_layout_bytes =
      0;  // the report's layout: frame for keyframes, 5 B per changed byte
  guint64 delta_bytes_out = 0;
  guint64 delta_report_layout_bytes = 0;
  guint64 blocks[4] = {0, 0, 0, 0};  // version 2: blocks per mode (codec2_rules.h, Mode)
  guint64 stream_version = 0;        // of the current caps
};

// What a frame's packet and statistics need besides its body.
struct FrameResult {
  uint64_t changed_bytes = 0;  // deltas: input bytes off the reference by more than the threshold
  uint32_t blocks[4] = {0, 0, 0, 0};  // version 2: blocks per mode
};

// Large version 2 packets leave without a copy: the pinned buffer the core
// wrote the body into, with the packet header written into the room kept
// before it (HostBytes headroom), becomes the output buffer, and comes back
// here when downstream frees it. A packet is lent when it is at least a
// quarter of the format's largest body (and 64 KiB): a random 1080p frame's
// 6 MB, not a camera delta's 0.1 MB, whose copy costs little and which would
// hold a frame-sized buffer. Smaller packets are copied, and so is every
// packet while kMaxLent are out (downstream holding many packets). Shared
// with the buffers lent: they may outlive the element's state. Bodies that
// come back after stop (close()) are freed, not kept.
class PacketBodies : public std::enable_shared_from_this<PacketBodies> {
 public:
  static constexpr size_t kMaxLent = 8;
  static constexpr size_t kMinLentPacket = size_t(64) << 10;

  // An empty body with room for the packet header, of at least `capacity`
  // bytes: one that came back, else a new one (the first large packets
  // after caps allocate them). Reopens after close(). Throws cudadiff::Error
  // or std::bad_alloc.
  cudadiff::HostBytes take(size_t capacity) {
    cudadiff::HostBytes b;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = false;
      if (kept_ > 0) b = std::move(free_[--kept_]);
    }
    if (b.base() == nullptr) b.set_headroom(stream::kHeaderSize);
    b.clear();
    b.reserve(capacity);
    return b;
  }
  // Whether a packet of `packet_size` bytes, of a format whose largest body
  // is `capacity`, is lent (else copied).
  bool lends(size_t packet_size, size_t capacity) {
    if (packet_size < std::max(kMinLentPacket, capacity / 4)) return false;
    std::lock_guard<std::mutex> lock(mutex_);
    return lent_ < kMaxLent;
  }
  // Wraps the packet that fills `body`'s first `packet_size` bytes from its
  // base() as a buffer; `body` comes back when the buffer is freed.
  GstBuffer *lend(cudadiff::HostBytes &&body, size_t packet_size) {
    auto *loan = new Loan{shared_from_this(), std::move(body)};
    {
      std::lock_guard<std::mutex> lock(mutex_);
      lent_++;
    }
    return gst_buffer_new_wrapped_full(GstMemoryFlags(0), loan->body.base(), loan->body.allocated(),
                                       0, packet_size, loan, give_back);
  }
  // Stop: the bodies kept are freed, and so are those that come back until
  // the next take().
  void close() {
    cudadiff::HostBytes dropped[kMaxLent];
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    for (size_t i = 0; i < kept_; ++i) dropped[i] = std::move(free_[i]);
    kept_ = 0;
  }

 private:
  struct Loan {
    std::shared_ptr<PacketBodies> owner;
    cudadiff::HostBytes body;
  };
  // (GDestroyNotify: on any thread; allocates nothing.)
  static void give_back(gpointer data) {
    auto *loan = static_cast<Loan *>(data);
    {
      PacketBodies &o = *loan->owner;
      std::lock_guard<std::mutex> lock(o.mutex_);
      o.lent_--;
      if (!o.closed_ && o.kept_ < kMaxLent) o.free_[o.kept_++] = std::move(loan->body);
    }
    delete loan;  // frees the body if it was not kept, outside the lock
  }

  std::mutex mutex_;
  cudadiff::HostBytes free_[kMaxLent];  // the first kept_ came back
  size_t kept_ = 0;
  size_t lent_ = 0;
  bool closed_ = false;
};

// Everything that lives from start (context) or set_format (codec) to stop.
struct EncState {
  // The encoder first: its end waits for a body still on its way.
  ~EncState() { encoder2.reset(); }
  GstCudaDiffCudaShare share;   // the pipeline's CUDA context
  bool warned_foreign = false;  // CUDA memory of another context came (since start)
  std::unique_ptr<cudadiff::Context> ctx;
  // Version 1: keeps the reference (on the device for CUDA).
  std::unique_ptr<diff::DiffEncoder> encoder;
  // Version 2: the codec2 encoder, on the element's backend (the CUDA
  // backend uploads a frame in system memory into device_input first, one
  // of kMaxInFlight: a frame stays on the device until its body is
  // collected).
  std::unique_ptr<codec2::Encoder> encoder2;
  cudadiff::DeviceFrame device_input[codec2::Encoder::kMaxInFlight];
  int next_input = 0;
  int version = DEFAULT_STREAM_VERSION;  // of the current caps
  // Pinned, with room for a packet header before it: the core writes each
  // body here (taken from `bodies`, version 2).
  cudadiff::HostBytes body;
  std::shared_ptr<PacketBodies> bodies = std::make_shared<PacketBodies>();
  size_t body_capacity = 0;                // version 2: the largest body of the format
  std::unique_ptr<stream::Writer> writer;  // its scratch and zstd context, start to stop
  GstVideoCodecState *input_state = nullptr;
  cudadiff::VideoFormat format = cudadiff::VideoFormat::Unknown;
  int width = 0, height = 0;
  size_t frame_bytes = 0;
  guint64 frame_number = 0;  // of the next frame
  guint64 last_keyframe_number = 0;
  bool need_keyframe = true;
  // Non-live upstream: a delta's GPU work is queued and its packet made
  // while the next frames are on the GPU (see handle_frame).
  bool overlap = false;
  // The deltas queued and not yet packed (overlap only), oldest first: each
  // one's frame, mapped while the core reads it, and what its packet needs.
  struct Pending {
    GstVideoCodecFrame *frame = nullptr;
    GstVideoFrame vframe;
    stream::FrameInfo info;
    stream::Compression compression = stream::Compression::None;
    int level = 0;
    // Completed in finish_pending (collect_delta for version 1, the codec2
    // encoder's finish() for version 2) or collect_oldest_async
    // (finish_async()).
    FrameResult result;
  };
  std::deque<Pending> pending;
  // The most deltas queued (overlap): kMaxInFlight - 1 (three) for version
  // 2 on a GPU (the codec2 encoder codes them while the packet before is
  // made), else one.
  size_t max_pending = 1;
  // Version 2 on a GPU with frames overlapping: the delta collected last
  // (finish_async()) while its payloads still cross the bus into
  // transit_body, so that the host packs the delta before it meanwhile (a
  // random 1080p frame's 6.2 MB take some 0.12 ms); its packet goes out
  // when the next delta is collected, or when the queue drains.
  bool async_bodies = false;
  bool in_transit = false;
  Pending transit;
  cudadiff::HostBytes transit_body;
  cudadiff::HostBytes spare_body;  // the next finish_async()'s (from `bodies` when empty)
  // A flow return of pushing the queued packet from set_format, returned by
  // the next handle_frame.
  GstFlowReturn held_flow = GST_FLOW_OK;
  // The input caps refused last and why (refuse_caps()), so that one
  // problem makes one error message; cleared by caps taken, by a frame
  // (GstVideoEncoder does not call set_format again when caps equal to the
  // current ones come back after a refusal) and at start.
  std::string refused;

  void drop_codec() {
    encoder.reset();
    encoder2.reset();
    for (auto &f : device_input) f = cudadiff::DeviceFrame();
    if (input_state) gst_video_codec_state_unref(input_state);
    input_state = nullptr;
    format = cudadiff::VideoFormat::Unknown;
  }
};

}  // namespace

struct _GstCudaDiffEnc {
  GstVideoEncoder parent;
  // Properties, under the object lock.
  guint threshold;
  guint keyframe_interval;
  GstCudaDiffCompression compression;
  gint compression_level;
  guint stats_interval;
  GstCudaDiffFrameOverlap frame_overlap;
  GstCudaDiffBackend backend;
  gint device_id;
  guint stream_version;
  EncStats stats;  // under the object lock too
  EncState *state;
};

G_DEFINE_TYPE(GstCudaDiffEnc, gst_cudadiff_enc, GST_TYPE_VIDEO_ENCODER)

static GstFlowReturn finish_pending(GstCudaDiffEnc *self);
static void discard_pending(GstCudaDiffEnc *self, bool drop);
static void collect_v2(EncState *st, FrameResult *result, cudadiff::HostBytes &body,
                       bool async = false);
GST_ELEMENT_REGISTER_DEFINE(cudadiffenc, "cudadiffenc", GST_RANK_SECONDARY, GST_TYPE_CUDADIFF_ENC)

GType gst_cudadiff_compression_get_type(void) {
  static GType type = 0;
  static const GEnumValue values[] = {
    {GST_CUDADIFF_COMPRESSION_NONE, "No compression", "none"},
#if CUDADIFF_HAVE_ZSTD
    {GST_CUDADIFF_COMPRESSION_ZSTD, "zstd (keyframes left-predicted first)", "zstd"},
#endif
    {0, nullptr, nullptr},
  };
  if (g_once_init_enter(&type)) {
    GType t = g_enum_register_static("GstCudaDiffCompression", values);
    g_once_init_leave(&type, t);
  }
  return type;
}

GType gst_cudadiff_frame_overlap_get_type(void) {
  static GType type = 0;
  static const GEnumValue values[] = {
      {GST_CUDADIFF_FRAME_OVERLAP_AUTO, "When upstream is not live", "auto"},
      // (one type for the encoder and the decoder: each property's text
      // says what the delay is there)
      {GST_CUDADIFF_FRAME_OVERLAP_ALWAYS, "Always, also when upstream is live (the delay above)",
       "always"},
      {GST_CUDADIFF_FRAME_OVERLAP_NEVER,
       "Never (each packet or frame leaves as soon as it is done)", "never"},
      {0, nullptr, nullptr},
  };
  if (g_once_init_enter(&type)) {
    GType t = g_enum_register_static("GstCudaDiffFrameOverlap", values);
    g_once_init_leave(&type, t);
  }
  return type;
}

static GstStructure *stats_structure(GstCudaDiffEnc *self) {
  const EncStats &s = self->stats;
  return gst_structure_new(
      "cudadiffenc-stats", "frames", G_TYPE_UINT64, s.frames, "keyframes", G_TYPE_UINT64,
      s.keyframes, "bytes-in", G_TYPE_UINT64, s.bytes_in, "bytes-out", G_TYPE_UINT64, s.bytes_out,
      "changed-bytes", G_TYPE_UINT64, s.changed_bytes, "report-layout-bytes", G_TYPE_UINT64,
      s.report_layout_bytes, "delta-bytes-out", G_TYPE_UINT64, s.delta_bytes_out,
      "delta-report-layout-bytes", G_TYPE_UINT64, s.delta_report_layout_bytes, "blocks-skip",
      G_TYPE_UINT64, s.blocks[0], "blocks-temporal", G_TYPE_UINT64, s.blocks[1],
      "blocks-temporal-spatial", G_TYPE_UINT64, s.blocks[2], "blocks-spatial", G_TYPE_UINT64,
      s.blocks[3], "stream-version", G_TYPE_UINT64, s.stream_version, nullptr);
}

static void gst_cudadiff_enc_set_property(GObject *object, guint prop_id, const GValue *value,
                                          GParamSpec *pspec) {
  auto *self = GST_CUDADIFF_ENC(object);
  GST_OBJECT_LOCK(self);
  switch (prop_id) {
    case PROP_THRESHOLD:
      self->threshold = g_value_get_uint(value);
      break;
    case PROP_KEYFRAME_INTERVAL:
      self->keyframe_interval = g_value_get_uint(value);
      break;
    case PROP_COMPRESSION:
      self->compression = static_cast<GstCudaDiffCompression>(g_value_get_enum(value));
      break;
    case PROP_COMPRESSION_LEVEL:
      self->compression_level = g_value_get_int(value);
      break;
    case PROP_STATS_INTERVAL:
      self->stats_interval = g_value_get_uint(value);
      break;
    case PROP_FRAME_OVERLAP:
      self->frame_overlap = static_cast<GstCudaDiffFrameOverlap>(g_value_get_enum(value));
      break;
    case PROP_BACKEND:
      self->backend = static_cast<GstCudaDiffBackend>(g_value_get_enum(value));
      break;
    case PROP_DEVICE_ID:
      self->device_id = g_value_get_int(value);
      break;
    case PROP_STREAM_VERSION:
      self->stream_version = g_value_get_uint(value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK(self);
}

static void gst_cudadiff_enc_get_property(GObject *object, guint prop_id, GValue *value,
                                          GParamSpec *pspec) {
  auto *self = GST_CUDADIFF_ENC(object);
  GST_OBJECT_LOCK(self);
  switch (prop_id) {
    case PROP_THRESHOLD:
      g_value_set_uint(value, self->threshold);
      break;
    case PROP_KEYFRAME_INTERVAL:
      g_value_set_uint(value, self->keyframe_interval);
      break;
    case PROP_COMPRESSION:
      g_value_set_enum(value, self->compression);
      break;
    case PROP_COMPRESSION_LEVEL:
      g_value_set_int(value, self->compression_level);
      break;
    case PROP_STATS_INTERVAL:
      g_value_set_uint(value, self->stats_interval);
      break;
    case PROP_FRAME_OVERLAP:
      g_value_set_enum(value, self->frame_overlap);
      break;
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
    case PROP_STREAM_VERSION:
      g_value_set_uint(value, self->stream_version);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK(self);
}

static void gst_cudadiff_enc_finalize(GObject *object) {
  auto *self = GST_CUDADIFF_ENC(object);
  delete self->state;
  self->state = nullptr;
  G_OBJECT_CLASS(gst_cudadiff_enc_parent_class)->finalize(object);
}

// Opens the backend (the CUDA context and the writer's scratch) and posts our
// error when it cannot; run by change_state before GstVideoEncoder's
// READY -> PAUSED (gst_cudadiff_change_state_opening()).
static bool open_backend(GstElement *element) {
  auto *self = GST_CUDADIFF_ENC(element);
  GST_OBJECT_LOCK(self);
  const GstCudaDiffBackend backend = self->backend;
  const gint device_id = self->device_id;
  GST_OBJECT_UNLOCK(self);
  EncState *st = self->state;
  st->ctx = gst_cudadiff_open_shared_context(GST_ELEMENT(self), backend, device_id, &st->share);
  if (!st->ctx) return false;
  try {
    cudadiff::ContextScope scope(st->ctx.get());
    st->writer = std::make_unique<stream::Writer>();
  } catch (const cudadiff::Error &e) {
    gst_cudadiff_post_error(GST_ELEMENT(self), "starting", e);
    return false;
  }
  return true;
}

// Frees what open_backend() and encoding made (also after a failed open).
static void close_backend(GstElement *element) {
  auto *self = GST_CUDADIFF_ENC(element);
  EncState *st = self->state;
  discard_pending(self, false);
  const auto release = [st] {
    st->drop_codec();
    st->writer.reset();
    st->body = cudadiff::HostBytes();
    st->transit_body = cudadiff::HostBytes();
    st->spare_body = cudadiff::HostBytes();
    st->bodies->close();
    st->ctx.reset();
  };
  try {
    // Everything that frees CUDA resources runs in the context, which is
    // popped again after (the thread is left as it was).
    cudadiff::ContextScope scope(st->ctx.get());
    if (st->ctx) st->ctx->synchronize();
    release();
  } catch (const cudadiff::Error &e) {
    GST_WARNING_OBJECT(self, "at stop: %s", e.what());
  }
  release();  // (what the context's failure left; nothing otherwise)
  st->share.release();
  gst_cudadiff_forget_backend(element);
}

static GstStateChangeReturn gst_cudadiff_enc_change_state(GstElement *element,
                                                          GstStateChange transition) {
  return gst_cudadiff_change_state_opening(element, transition,
                                           GST_ELEMENT_CLASS(gst_cudadiff_enc_parent_class),
                                           open_backend, close_backend);
}

// The backend is open (change_state); this resets the stream's state.
static gboolean gst_cudadiff_enc_start(GstVideoEncoder *encoder) {
  auto *self = GST_CUDADIFF_ENC(encoder);
  GST_OBJECT_LOCK(self);
  self->stats = EncStats();
  GST_OBJECT_UNLOCK(self);
  EncState *st = self->state;
  st->frame_number = 0;
  st->last_keyframe_number = 0;
  st->need_keyframe = true;
  st->held_flow = GST_FLOW_OK;
  st->warned_foreign = false;
  st->refused.clear();
  return TRUE;
}

static gboolean gst_cudadiff_enc_stop(GstVideoEncoder *encoder) {
  close_backend(GST_ELEMENT(encoder));
  return TRUE;
}

// The stream header buffer (also in the caps as `streamheader`); its text
// carries what the packet headers do not say of the picture: the
// colorimetry, and where the input's caps say other than the defaults of
// its format and size, the pixel aspect ratio, interleaved fields (and
// their order), the chroma siting and the packing of stereoscopic views.
static GstBuffer *make_stream_header(cudadiff::VideoFormat format, const GstVideoInfo *info,
                                     const GstCaps *caps, int version) {
  std::string text;
  if (gchar *c = gst_video_colorimetry_to_string(&info->colorimetry)) {
    text = std::string("colorimetry=") + c + "\n";
    g_free(c);
  }
  if (GST_VIDEO_INFO_PAR_N(info) > 0 && GST_VIDEO_INFO_PAR_D(info) > 0 &&
      GST_VIDEO_INFO_PAR_N(info) != GST_VIDEO_INFO_PAR_D(info))
    text += "pixel-aspect-ratio=" + std::to_string(GST_VIDEO_INFO_PAR_N(info)) + "/" +
            std::to_string(GST_VIDEO_INFO_PAR_D(info)) + "\n";
  if (GST_VIDEO_INFO_INTERLACE_MODE(info) == GST_VIDEO_INTERLACE_MODE_INTERLEAVED) {
    text += "interlace-mode=interleaved\n";
    if (GST_VIDEO_INFO_FIELD_ORDER(info) != GST_VIDEO_FIELD_ORDER_UNKNOWN)
      text += std::string("field-order=") +
              gst_video_field_order_to_string(GST_VIDEO_INFO_FIELD_ORDER(info)) + "\n";
  }
  GstVideoInfo plain;
  gst_video_info_init(&plain);
  gst_video_info_set_format(&plain, GST_VIDEO_INFO_FORMAT(info), GST_VIDEO_INFO_WIDTH(info),
                            GST_VIDEO_INFO_HEIGHT(info));
  // The caps' own chroma-site: GStreamer 1.22's video info replaces it with
  // the default of its colorimetry when the caps name no colorimetry.
  GstVideoChromaSite site = info->chroma_site;
  const GstStructure *s =
      caps && gst_caps_get_size(caps) > 0 ? gst_caps_get_structure(caps, 0) : nullptr;
  if (const gchar *named = s ? gst_structure_get_string(s, "chroma-site") : nullptr) {
    const GstVideoChromaSite given = gst_video_chroma_site_from_string(named);
    if (given != GST_VIDEO_CHROMA_SITE_UNKNOWN) site = given;
  }
  if (site != plain.chroma_site) {
    if (gchar *c = gst_video_chroma_site_to_string(site)) {
      text += std::string("chroma-site=") + c + "\n";
      g_free(c);
    }
  }
  // Stereoscopic video: how the views are packed (and their flags).
  const GstVideoMultiviewMode views = GST_VIDEO_INFO_MULTIVIEW_MODE(info);
  if (views != GST_VIDEO_MULTIVIEW_MODE_NONE && views != GST_VIDEO_MULTIVIEW_MODE_MONO) {
    if (const gchar *mode = gst_video_multiview_mode_to_caps_string(views)) {
      text += std::string("multiview-mode=") + mode + "\n";
      text += "multiview-flags=" + std::to_string(unsigned(GST_VIDEO_INFO_MULTIVIEW_FLAGS(info))) +
              "\n";
    }
  }
  const std::vector<uint8_t> bytes = stream::Writer::stream_header(
      format, GST_VIDEO_INFO_WIDTH(info), GST_VIDEO_INFO_HEIGHT(info), GST_VIDEO_INFO_FPS_N(info),
      GST_VIDEO_INFO_FPS_D(info), text, uint8_t(version));
  GstBuffer *buf = gst_buffer_new_allocate(nullptr, bytes.size(), nullptr);
  gst_buffer_fill(buf, 0, bytes.data(), bytes.size());
  GST_BUFFER_FLAG_SET(buf, GST_BUFFER_FLAG_HEADER);
  return buf;
}

// The core encoder of the version, and every buffer at its largest, so that
// no frame allocates. In the element's context scope (set_format). Throws
// cudadiff::Error (and std::bad_alloc).
static void configure_codec(EncState *st, bool v2, cudadiff::VideoFormat format, int width,
                            int height, size_t frame_bytes, bool zstd, int level) {
  if (v2) {
    st->encoder2 = codec2::Encoder::create(*st->ctx, format, width, height);
    st->body_capacity = stream::max_v2_body_size(format, width, height);
    if (st->body.headroom() != stream::kHeaderSize)  // (after start, or version 1)
      st->body = st->bodies->take(st->body_capacity);
    else
      st->body.reserve(st->body_capacity);
    if (st->ctx->backend() == cudadiff::Backend::Cuda)
      for (auto &f : st->device_input) f = cudadiff::DeviceFrame(format, width, height);
    return;
  }
  st->encoder = diff::DiffEncoder::create(*st->ctx, format, width, height);
  st->body.reserve(diff::max_delta_body_size(frame_bytes));
  st->writer->set_compression(zstd ? stream::Compression::Zstd : stream::Compression::None, level);
  st->writer->reserve(frame_bytes);
}

// Refuses the input caps (set_format returns FALSE) with an error
// message, posted once for the same caps and reason: GstVideoEncoder calls
// set_format again with them each time upstream pushes (the sticky caps
// event is sent again before every buffer), and an application should not
// see one problem as several errors.
#define refuse_caps(self, state, domain, code, text, debug) \
  refuse_caps_at(self, state, domain, code, text, debug, __FILE__, GST_FUNCTION, __LINE__)
static gboolean refuse_caps_at(GstCudaDiffEnc *self, GstVideoCodecState *state, GQuark domain,
                               gint code, const std::string &text, const std::string &debug,
                               const char *file, const char *function, int line) {
  gchar *caps = state->caps ? gst_caps_to_string(state->caps) : nullptr;
  std::string key = (caps ? caps : "") + std::string("\n") + text;
  g_free(caps);
  gst_cudadiff_post_error_once(GST_ELEMENT(self), &self->state->refused, std::move(key), domain,
                               code, text, debug, file, function, line);
  return FALSE;
}

static gboolean gst_cudadiff_enc_set_format(GstVideoEncoder *encoder, GstVideoCodecState *state) {
  auto *self = GST_CUDADIFF_ENC(encoder);
  EncState *st = self->state;
  if (!st->ctx || !st->writer) return FALSE;
  const GstVideoInfo *info = &state->info;
  const cudadiff::VideoFormat format = gst_cudadiff_format_from_gst(GST_VIDEO_INFO_FORMAT(info));
  if (format == cudadiff::VideoFormat::Unknown)
    return refuse_caps(self, state, GST_CORE_ERROR, GST_CORE_ERROR_NEGOTIATION,
                       "unsupported video format", GST_VIDEO_INFO_NAME(info));
  // Progressive frames, or interleaved fields (their order, where the caps
  // give one, goes into the stream header). Interlacing that changes from
  // frame to frame (interlace-mode=mixed, the buffers' flags) has no place
  // in a packet and would be lost: a deinterlacer after the decoder would
  // see progressive frames.
  const GstVideoInterlaceMode interlace = GST_VIDEO_INFO_INTERLACE_MODE(info);
  if (interlace != GST_VIDEO_INTERLACE_MODE_PROGRESSIVE &&
      interlace != GST_VIDEO_INTERLACE_MODE_INTERLEAVED)
    return refuse_caps(
        self, state, GST_CORE_ERROR, GST_CORE_ERROR_NEGOTIATION, "unsupported interlace mode",
        std::string("interlace-mode=") + gst_video_interlace_mode_to_string(interlace) +
            ": the stream carries progressive frames or interleaved fields; put "
            "deinterlace before the encoder");
  const int width = GST_VIDEO_INFO_WIDTH(info), height = GST_VIDEO_INFO_HEIGHT(info);
  const size_t frame_bytes = cudadiff::frame_size_packed(format, width, height);
  if (frame_bytes > stream::kMaxFrameBytes)
    return refuse_caps(self, state, GST_STREAM_ERROR, GST_STREAM_ERROR_FORMAT,
                       "frame too large for the difference stream",
                       std::to_string(width) + "x" + std::to_string(height) + " " +
                           GST_VIDEO_INFO_NAME(info) + " is " + std::to_string(frame_bytes) +
                           " bytes; the stream carries at most " +
                           std::to_string(stream::kMaxFrameBytes));
  // The queued delta goes out first, under the caps it was made for. A flow
  // return (flushing, not linked, EOS) is kept for the next frame; only an
  // error (already posted) refuses the caps.
  const GstFlowReturn flushed = finish_pending(self);
  if (flushed == GST_FLOW_ERROR) return FALSE;
  if (flushed != GST_FLOW_OK) st->held_flow = flushed;
  GST_OBJECT_LOCK(self);
  const bool zstd = self->compression == GST_CUDADIFF_COMPRESSION_ZSTD;
  const int level = self->compression_level;
  const GstCudaDiffFrameOverlap overlap = self->frame_overlap;
  const int version = int(self->stream_version);
  GST_OBJECT_UNLOCK(self);
  const bool v2 = version == stream::kVersion2;
  // Downstream must read this version (a capsfilter or a receiver's caps
  // may say which); say so plainly rather than fail later.
  GstCaps *allowed = gst_pad_get_allowed_caps(GST_VIDEO_ENCODER_SRC_PAD(encoder));
  if (allowed) {
    GstCaps *ours =
        gst_caps_new_simple("video/x-cudadiff", "version", G_TYPE_INT, version, nullptr);
    const bool accepted = gst_caps_can_intersect(allowed, ours);
    gst_caps_unref(ours);
    if (!accepted) {
      gchar *text = gst_caps_to_string(allowed);
      const std::string debug =
          std::string("downstream accepts ") + text + "; set stream-version to a version it reads";
      g_free(text);
      gst_caps_unref(allowed);
      return refuse_caps(self, state, GST_CORE_ERROR, GST_CORE_ERROR_NEGOTIATION,
                         "downstream does not accept version " + std::to_string(version) +
                             " of the difference stream",
                         debug);
    }
    gst_caps_unref(allowed);
  }
  // The caps before, whose encoder comes back if these caps' cannot be made
  // (below).
  GstVideoCodecState *previous =
      st->input_state ? gst_video_codec_state_ref(st->input_state) : nullptr;
  const cudadiff::VideoFormat previous_format = st->format;
  try {
    // A version 1 encoder of the previous caps frees device memory.
    cudadiff::ContextScope scope(st->ctx.get());
    st->drop_codec();
    try {
      configure_codec(st, v2, format, width, height, frame_bytes, zstd, level);
    } catch (const std::bad_alloc &) {
      throw cudadiff::Error("out of memory for the encoder of a " + std::to_string(width) + "x" +
                            std::to_string(height) + " " + GST_VIDEO_INFO_NAME(info) + " frame");
    }
  } catch (const cudadiff::Error &e) {
    // (posted once, as a refusal: the base class tries these caps again
    // before every buffer)
    // What was made for these caps goes (in the element's context), the
    // body too, which may have grown for them. GstVideoEncoder keeps the
    // caps before as its input, and does not call set_format when they come
    // back: their encoder is made again (from a keyframe), else every frame
    // of theirs would be refused.
    try {
      cudadiff::ContextScope scope(st->ctx.get());
      st->drop_codec();
      st->body = cudadiff::HostBytes();
      if (previous) {
        try {
          configure_codec(st, st->version == stream::kVersion2, previous_format, st->width,
                          st->height, st->frame_bytes, zstd, level);
          st->input_state = previous;
          previous = nullptr;
          st->format = previous_format;
          st->need_keyframe = true;
        } catch (const std::bad_alloc &) {
          st->drop_codec();
        } catch (const cudadiff::Error &) {
          st->drop_codec();
        }
      }
    } catch (const cudadiff::Error &) {
      st->drop_codec();  // (the context could not be made current)
    }
    if (previous) gst_video_codec_state_unref(previous);
    const GstCudaDiffErrorText why = gst_cudadiff_error_text("configuring the encoder", e);
    return refuse_caps(self, state, why.domain, why.code, why.text, why.debug);
  }
  if (previous) gst_video_codec_state_unref(previous);
  // Frames overlapping and the frames queued, for these caps (a refusal
  // above leaves those of the caps before).
  st->overlap = overlap == GST_CUDADIFF_FRAME_OVERLAP_ALWAYS ||
                (overlap == GST_CUDADIFF_FRAME_OVERLAP_AUTO &&
                 !gst_cudadiff_upstream_is_live(GST_VIDEO_ENCODER_SINK_PAD(encoder)));
  // Version 2 on the GPU keeps kMaxInFlight - 1 (three) deltas queued (the
  // GPU codes them while the packet before them is made); version 1, and
  // the CPU backend, which encodes a frame at submission, one.
  const bool v2_cuda = v2 && st->ctx->backend() == cudadiff::Backend::Cuda;
  st->max_pending = v2_cuda ? size_t(codec2::Encoder::kMaxInFlight - 1) : size_t(1);
  // ... and one more whose body is on its way to the host.
  st->async_bodies = v2_cuda && st->overlap;
  gst_cudadiff_set_overlap_latency(
      GST_ELEMENT(encoder), st->overlap ? int(st->max_pending) + (st->async_bodies ? 1 : 0) : 0,
      GST_VIDEO_INFO_FPS_N(info), GST_VIDEO_INFO_FPS_D(info));
  st->refused.clear();
  st->input_state = gst_video_codec_state_ref(state);
  st->format = format;
  st->width = width;
  st->height = height;
  st->frame_bytes = frame_bytes;
  st->version = version;
  st->need_keyframe = true;  // a caps change starts with a keyframe
  GST_OBJECT_LOCK(self);
  self->stats.stream_version = guint64(version);
  GST_OBJECT_UNLOCK(self);

  GstBuffer *header = make_stream_header(format, info, state->caps, version);
  GstCaps *caps = gst_caps_new_simple("video/x-cudadiff", "version", G_TYPE_INT, version, nullptr);
  GValue array = G_VALUE_INIT, value = G_VALUE_INIT;
  g_value_init(&array, GST_TYPE_ARRAY);
  g_value_init(&value, GST_TYPE_BUFFER);
  gst_value_set_buffer(&value, header);
  gst_value_array_append_and_take_value(&array, &value);
  gst_structure_take_value(gst_caps_get_structure(caps, 0), "streamheader", &array);
  GstVideoCodecState *out = gst_video_encoder_set_output_state(encoder, caps, state);
  gst_video_codec_state_unref(out);
  gst_video_encoder_set_headers(encoder, g_list_append(nullptr, header));
  GST_DEBUG_OBJECT(self, "configured %s %dx%d (%zu bytes per frame), stream version %d on %s%s",
                   GST_VIDEO_INFO_NAME(info), width, height, frame_bytes, version,
                   cudadiff::backend_name(st->ctx->backend()),
                   st->overlap ? ", frames overlap" : "");
  return TRUE;
}

static gboolean gst_cudadiff_enc_flush(GstVideoEncoder *encoder) {
  discard_pending(GST_CUDADIFF_ENC(encoder), false);
  GST_CUDADIFF_ENC(encoder)->state->need_keyframe = true;
  GST_CUDADIFF_ENC(encoder)->state->held_flow = GST_FLOW_OK;
  return TRUE;
}

// A drain query (an upstream decoder about to reuse its buffers, or wanting
// every output out) pushes the waiting packet first; it travels in the
// streaming thread, under the stream lock.
static gboolean gst_cudadiff_enc_sink_query(GstVideoEncoder *encoder, GstQuery *query) {
  if (GST_QUERY_TYPE(query) == GST_QUERY_DRAIN) {
    auto *self = GST_CUDADIFF_ENC(encoder);
    GST_VIDEO_ENCODER_STREAM_LOCK(encoder);
    const GstFlowReturn ret = finish_pending(self);
    if (ret != GST_FLOW_OK && ret != GST_FLOW_ERROR) self->state->held_flow = ret;
    GST_VIDEO_ENCODER_STREAM_UNLOCK(encoder);
  }
  if (GST_CUDADIFF_ENC(encoder)->state->share.handle_query(GST_ELEMENT(encoder), query))
    return TRUE;
  return GST_VIDEO_ENCODER_CLASS(gst_cudadiff_enc_parent_class)->sink_query(encoder, query);
}

// A frame not encoded because a flow other than OK came first (downstream
// not linked, flushing, an error), or whose encoding failed: handed back to
// the base class as dropped (finished without an output buffer, the way
// GStreamer before 1.26 drops a frame: nothing is pushed for it), so that
// it leaves the base class's list of frames, its input buffer is released
// and the events that came before it go downstream. A keyframe asked for
// of it comes from the next frame (the base class keeps the request
// pending, and ignores new ones, until a keyframe is finished).
static void drop_frame(GstCudaDiffEnc *self, GstVideoCodecFrame *frame) {
  if (GST_VIDEO_CODEC_FRAME_IS_FORCE_KEYFRAME(frame)) self->state->need_keyframe = true;
  gst_buffer_replace(&frame->output_buffer, nullptr);
  gst_video_encoder_finish_frame(GST_VIDEO_ENCODER(self), frame);
}

// A packet that never left takes no frame number: the next frame gets it
// (or an older one's), so that a receiver sees no gap where the sender
// dropped frames itself (an error, a seek).
static void unsent_number(EncState *st, guint64 frame_number) {
  st->frame_number = std::min(st->frame_number, frame_number);
}

// A frame that could not be encoded or packed (numbered `info`): the error
// posted, the frame dropped.
static GstFlowReturn frame_failed(GstCudaDiffEnc *self, GstVideoCodecFrame *frame,
                                  const stream::FrameInfo &info, const cudadiff::Error &e) {
  unsent_number(self->state, info.frame_number);
  gst_cudadiff_post_error(GST_ELEMENT(self), "encoding a frame", e);
  drop_frame(self, frame);
  return GST_FLOW_ERROR;
}

// The packet of an encoded frame (its body in st->body): into an output
// buffer, with flags and statistics; finishes the frame.
static GstFlowReturn push_packet(GstCudaDiffEnc *self, GstVideoCodecFrame *frame,
                                 const stream::FrameInfo &info, stream::Compression compression,
                                 int level, const FrameResult &result) {
  GstVideoEncoder *encoder = GST_VIDEO_ENCODER(self);
  EncState *st = self->state;
  // A packet that cannot be made leaves its frame in the reference, and no
  // decoder sees it (a keyframe's: the deltas after it would have none to
  // start from): the next frame is a keyframe.
  const auto lost = [st] { st->need_keyframe = true; };
  size_t packet_size = 0;
  try {
    st->writer->set_compression(compression, level);
    packet_size = st->writer->prepare(info, st->body.data(), st->body.size());
  } catch (const cudadiff::Error &e) {
    lost();
    return frame_failed(self, frame, info, e);
  }
  // A large version 2 packet: the body's own buffer, the header written in
  // front of it (PacketBodies); without a body to take its place (out of
  // memory), it is copied.
  bool lend = info.version == stream::kVersion2 && st->body.headroom() == stream::kHeaderSize &&
              st->bodies->lends(packet_size, st->body_capacity);
  if (lend) {
    cudadiff::HostBytes next;
    try {
      cudadiff::ContextScope scope(st->ctx.get());
      next = st->bodies->take(st->body_capacity);
    } catch (const std::bad_alloc &) {
      lend = false;
    } catch (const cudadiff::Error &e) {
      GST_DEBUG_OBJECT(self, "packet copied: %s", e.what());
      lend = false;
    }
    if (lend) {
      try {
        st->writer->write_in_place(st->body.base());
      } catch (const cudadiff::Error &e) {
        lost();
        return frame_failed(self, frame, info, e);
      }
      try {
        frame->output_buffer = st->bodies->lend(std::move(st->body), packet_size);
        st->body = std::move(next);
      } catch (const std::bad_alloc &) {
        lend = false;  // (the body is still st->body)
      }
    }
  }
  if (!lend) {
    GstFlowReturn ret = gst_video_encoder_allocate_output_frame(encoder, frame, packet_size);
    if (ret != GST_FLOW_OK) {
      // (GstVideoEncoder says nothing when the allocator it negotiated
      // downstream gives no buffer)
      if (ret == GST_FLOW_ERROR)
        GST_ELEMENT_ERROR(self, RESOURCE, NO_SPACE_LEFT,
                          ("cannot allocate an output buffer of %zu bytes", packet_size),
                          ("the allocator negotiated with downstream gave none: the system is "
                           "out of memory, or a downstream element proposed an allocator that "
                           "cannot hold a packet this large"));
      lost();
      drop_frame(self, frame);
      return ret;
    }
    GstMapInfo map;
    if (!gst_buffer_map(frame->output_buffer, &map, GST_MAP_WRITE)) {
      GST_ELEMENT_ERROR(self, STREAM, ENCODE, ("cannot map the output buffer"), (nullptr));
      lost();
      drop_frame(self, frame);
      return GST_FLOW_ERROR;
    }
    st->writer->write(map.data);
    gst_buffer_unmap(frame->output_buffer, &map);
  }

  if (info.keyframe) {
    GST_VIDEO_CODEC_FRAME_SET_SYNC_POINT(frame);
    GST_DEBUG_OBJECT(self, "keyframe %" G_GUINT64_FORMAT "%s: %zu bytes", info.frame_number,
                     GST_VIDEO_CODEC_FRAME_IS_FORCE_KEYFRAME(frame) ? " (forced)" : "",
                     packet_size);
  } else {
    GST_LOG_OBJECT(self,
                   "delta %" G_GUINT64_FORMAT ": %" G_GUINT64_FORMAT " changed bytes, %zu bytes",
                   info.frame_number, guint64(result.changed_bytes), packet_size);
  }

  GstMessage *stats_message = nullptr;
  GST_OBJECT_LOCK(self);
  EncStats &s = self->stats;
  s.frames++;
  s.bytes_in += st->frame_bytes;
  s.bytes_out += packet_size;
  if (info.keyframe) {
    s.keyframes++;
    s.report_layout_bytes += st->frame_bytes;
  } else {
    s.changed_bytes += result.changed_bytes;
    s.report_layout_bytes += 5 * result.changed_bytes;
    s.delta_bytes_out += packet_size;
    s.delta_report_layout_bytes += 5 * result.changed_bytes;
  }
  for (int m = 0; m < 4; ++m) s.blocks[m] += result.blocks[m];
  if (self->stats_interval > 0 && s.frames % self->stats_interval == 0)
    stats_message = gst_message_new_element(GST_OBJECT(self), stats_structure(self));
  GST_OBJECT_UNLOCK(self);
  if (stats_message) gst_element_post_message(GST_ELEMENT(self), stats_message);

  // Frames leave in their order: DTS = PTS. (Left to the base class, the
  // DTS is the lowest PTS of the frames it holds, which after a segment
  // whose times start again is a later frame's.)
  frame->dts = frame->pts;
  return gst_video_encoder_finish_frame(encoder, frame);
}

// Collects the oldest queued delta and pushes its packet.
static GstFlowReturn finish_oldest(GstCudaDiffEnc *self) {
  EncState *st = self->state;
  if (st->pending.empty()) return GST_FLOW_OK;
  EncState::Pending p = st->pending.front();
  st->pending.pop_front();
  FrameResult result = p.result;
  try {
    cudadiff::ContextScope scope(st->ctx.get());
    if (st->encoder) {  // version 1: the delta was queued on the core
      result.changed_bytes = st->encoder->collect_delta(st->body).changed_bytes;
    } else if (st->encoder2) {
      collect_v2(st, &result, st->body);
    }
  } catch (const cudadiff::Error &e) {
    // The reference may hold this frame, which no decoder will see.
    st->need_keyframe = true;
    gst_video_frame_unmap(&p.vframe);
    return frame_failed(self, p.frame, p.info, e);
  }
  gst_video_frame_unmap(&p.vframe);
  return push_packet(self, p.frame, p.info, p.compression, p.level, result);
}

// Pushes the packet of the delta in transit (async_bodies), once its body
// is complete. Its body then becomes transit_body's, and st->body (which
// push_packet may have lent) takes its place.
static GstFlowReturn push_transit(GstCudaDiffEnc *self) {
  EncState *st = self->state;
  if (!st->in_transit) return GST_FLOW_OK;
  st->in_transit = false;
  EncState::Pending p = st->transit;
  try {
    cudadiff::ContextScope scope(st->ctx.get());
    st->encoder2->wait_body(st->transit_body);
  } catch (const cudadiff::Error &e) {
    st->need_keyframe = true;
    return frame_failed(self, p.frame, p.info, e);
  }
  std::swap(st->body, st->transit_body);
  return push_packet(self, p.frame, p.info, p.compression, p.level, p.result);
}

// Collects the oldest queued delta without waiting for its body
// (async_bodies), and pushes the packet of the delta collected before it
// meanwhile. Version 2 on a GPU only.
static GstFlowReturn collect_oldest_async(GstCudaDiffEnc *self) {
  EncState *st = self->state;
  if (st->pending.empty()) return push_transit(self);
  if (!st->spare_body.base()) {
    try {
      cudadiff::ContextScope scope(st->ctx.get());
      st->spare_body = st->bodies->take(st->body_capacity);
    } catch (const std::bad_alloc &) {
    } catch (const cudadiff::Error &e) {
      GST_DEBUG_OBJECT(self, "no second body: %s", e.what());
    }
    if (!st->spare_body.base()) {
      // No room for a second body: this one is collected and sent at once.
      const GstFlowReturn first = push_transit(self);
      if (first == GST_FLOW_ERROR) return first;
      const GstFlowReturn ret = finish_oldest(self);
      return first != GST_FLOW_OK ? first : ret;
    }
  }
  EncState::Pending p = st->pending.front();
  st->pending.pop_front();
  try {
    cudadiff::ContextScope scope(st->ctx.get());
    collect_v2(st, &p.result, st->spare_body, true);
  } catch (const cudadiff::Error &e) {
    // The core has finished this frame all the same. The reference may hold
    // it, which no decoder will see: the delta before it still goes out,
    // the ones after it are dropped (handle_frame).
    st->need_keyframe = true;
    gst_video_frame_unmap(&p.vframe);
    unsent_number(st, p.info.frame_number);
    gst_cudadiff_post_error(GST_ELEMENT(self), "encoding a frame", e);
    push_transit(self);
    drop_frame(self, p.frame);  // (after the frame before it)
    return GST_FLOW_ERROR;
  }
  gst_video_frame_unmap(&p.vframe);  // (the core no longer reads the input)
  const GstFlowReturn ret = push_transit(self);
  // The body the packet before left behind takes the next one; this one's
  // is on its way.
  std::swap(st->spare_body, st->transit_body);
  st->transit = p;
  st->in_transit = true;
  return ret;
}

// Collects every queued delta, oldest first, and pushes their packets. The
// first flow return other than OK is returned; after an error the deltas
// left (coded against the frame that failed) are dropped.
static GstFlowReturn finish_pending(GstCudaDiffEnc *self) {
  GstFlowReturn first = push_transit(self);
  if (first == GST_FLOW_ERROR) {
    discard_pending(self, true);
    self->state->need_keyframe = true;
    return first;
  }
  while (!self->state->pending.empty()) {
    const GstFlowReturn ret = finish_oldest(self);
    if (first == GST_FLOW_OK) first = ret;
    if (ret == GST_FLOW_ERROR) {
      discard_pending(self, true);
      self->state->need_keyframe = true;
      return ret;
    }
  }
  return first;
}

// The queued deltas are collected (the core's queue must drain) and
// dropped; the next frame is a keyframe anyway. After an error (`drop`) the
// base class is handed them as dropped, oldest first, so that they leave its
// list of frames (which holds their input buffers) and the events that came
// with them go downstream; at a flush and at stop it forgets them itself
// right after (and would lose the events of a frame finished while its
// source pad flushes: it keeps them for after the flush).
static void discard_pending(GstCudaDiffEnc *self, bool drop) {
  EncState *st = self->state;
  // Packets that never left take no frame numbers: the next frame gets the
  // oldest dropped one's, so that a receiver sees no gap (a sender's seek is
  // not packet loss).
  if (st->in_transit)
    unsent_number(st, st->transit.info.frame_number);
  else if (!st->pending.empty())
    unsent_number(st, st->pending.front().info.frame_number);
  const auto release = [self, drop](GstVideoCodecFrame *frame) {
    if (drop)
      drop_frame(self, frame);
    else
      gst_video_codec_frame_unref(frame);
  };
  if (st->in_transit) {
    st->in_transit = false;
    try {
      cudadiff::ContextScope scope(st->ctx.get());
      st->encoder2->wait_body(st->transit_body);  // (its copy ends before the body is reused)
    } catch (const cudadiff::Error &e) {
      GST_WARNING_OBJECT(self, "dropping a queued frame: %s", e.what());
    }
    release(st->transit.frame);
  }
  while (!st->pending.empty()) {
    EncState::Pending p = st->pending.front();
    st->pending.pop_front();
    try {
      cudadiff::ContextScope scope(st->ctx.get());
      if (st->encoder)
        st->encoder->collect_delta(st->body);
      else if (st->encoder2)
        st->encoder2->finish(st->body);
    } catch (const cudadiff::Error &e) {
      GST_WARNING_OBJECT(self, "dropping a queued frame: %s", e.what());
    }
    gst_video_frame_unmap(&p.vframe);
    release(p.frame);
  }
}

// A frame that failed in handle_frame (its error posted) while deltas are
// queued before it (frame-overlap): they go out first (or are dropped, if
// one fails), then it is dropped. GstVideoEncoder sends the events of a
// frame it finishes and of every frame before it in its list: dropped
// first, it would send the events that came after the queued deltas
// before their packets.
static GstFlowReturn drop_after_pending(GstCudaDiffEnc *self, GstVideoCodecFrame *frame) {
  finish_pending(self);
  drop_frame(self, frame);
  return GST_FLOW_ERROR;
}

// Version 2: starts encoding a frame (its body is collected by collect_v2).
// The body carries its threshold: a new threshold applies from this frame
// on, keyframe or not. The CUDA core reads device memory: a frame in system
// memory is uploaded first (on the context's stream, before the encoder's
// work), into the device input the frame before did not take. Throws
// cudadiff::Error.
static void submit_v2(EncState *st, const cudadiff::FrameView &input, bool on_device, int threshold,
                      bool keyframe) {
  try {
    cudadiff::ContextScope scope(st->ctx.get());
    const cudadiff::FrameView *frame = &input;
    if (st->ctx->backend() == cudadiff::Backend::Cuda && !on_device) {
      const cudadiff::DeviceFrame &dst = st->device_input[st->next_input];
      st->next_input = (st->next_input + 1) % codec2::Encoder::kMaxInFlight;
      cudadiff::copy_to_device(input, dst.view(), *st->ctx);
      frame = &dst.view();
    }
    st->encoder2->submit(*frame, threshold, keyframe);
  } catch (const std::bad_alloc &) {
    throw cudadiff::Error("out of memory encoding a frame");
  }
}

// Version 2: the oldest frame's body into `body` (in the context's scope;
// `async`: by finish_async(), its payloads possibly still on their way).
// Throws cudadiff::Error.
static void collect_v2(EncState *st, FrameResult *result, cudadiff::HostBytes &body, bool async) {
  try {
    const codec2::FrameStats fs =
        async ? st->encoder2->finish_async(body) : st->encoder2->finish(body);
    result->changed_bytes = fs.changed_bytes;
    for (int m = 0; m < 4; ++m) result->blocks[m] = fs.blocks[m];
  } catch (const std::bad_alloc &) {
    throw cudadiff::Error("out of memory encoding a frame");
  }
}

// A keyframe is made and pushed at once.
// Version 1: a delta is queued on the core (submit_delta_host: the CUDA
// backend uploads the frame in slices, compares each as it arrives and
// compacts the changed bytes without waiting). With a live upstream its
// packet is then collected and pushed at once; otherwise it stays queued
// while the previous delta's packet is collected, checksummed and pushed, so
// that the GPU works on frame N while the CPU finishes frame N-1 (one frame
// of delay, which only a live pipeline would notice). Both give the same
// packets.
// Version 2 likewise: each frame is submitted to the core (which codes frame
// N on the GPU beside the entropy coding of frame N-1) and its body
// collected at once or, with overlap, after the next frame's submission
// (the CPU backend) or the next three frames' (the CUDA backend: the GPU
// has three frames to work on while the CPU packs the one before them), and
// on the GPU its packet leaves one frame after that (its body comes back
// from the device while the CPU packs the one before it).
static GstFlowReturn gst_cudadiff_enc_handle_frame(GstVideoEncoder *encoder,
                                                   GstVideoCodecFrame *frame) {
  auto *self = GST_CUDADIFF_ENC(encoder);
  EncState *st = self->state;
  st->refused.clear();
  // Properties under a GstController (threshold) take their values for
  // this frame.
  gst_cudadiff_sync_controlled(GST_OBJECT(self), &encoder->input_segment, frame->pts);
  if (!st->ctx || !(st->encoder || st->encoder2)) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, (nullptr), ("frame before caps were configured"));
    // (dropped through the base class where it has output caps; without
    // them it would post an error of its own, and forgets the frame at the
    // next flush or stop)
    if (GstVideoCodecState *out = gst_video_encoder_get_output_state(encoder)) {
      gst_video_codec_state_unref(out);
      drop_frame(self, frame);
    } else {
      gst_video_codec_frame_unref(frame);
    }
    return GST_FLOW_NOT_NEGOTIATED;
  }
  if (st->held_flow != GST_FLOW_OK) {
    const GstFlowReturn held = st->held_flow;
    st->held_flow = GST_FLOW_OK;
    drop_frame(self, frame);
    return held;
  }
  GST_OBJECT_LOCK(self);
  const int threshold = static_cast<int>(self->threshold);
  const guint keyframe_interval = self->keyframe_interval;
  const stream::Compression compression = self->compression == GST_CUDADIFF_COMPRESSION_ZSTD
                                              ? stream::Compression::Zstd
                                              : stream::Compression::None;
  const int level = self->compression_level;
  GST_OBJECT_UNLOCK(self);

  const bool forced = GST_VIDEO_CODEC_FRAME_IS_FORCE_KEYFRAME(frame);
  const bool keyframe =
      st->need_keyframe || forced ||
      (keyframe_interval > 0 && st->frame_number - st->last_keyframe_number >= keyframe_interval);
  if (keyframe) {
    const GstFlowReturn ret = finish_pending(self);
    if (ret != GST_FLOW_OK) {
      drop_frame(self, frame);
      return ret;
    }
  }

  EncState::Pending p;
  p.frame = frame;
  p.compression = compression;
  p.level = level;
  p.info.version = uint8_t(st->version);
  p.info.keyframe = keyframe;
  p.info.mode = stream::choose_value_mode(compression, threshold);
  p.info.frame_number = st->frame_number;
  p.info.pts = frame->pts;
  p.info.duration = frame->duration;
  p.info.format = st->format;
  p.info.width = st->width;
  p.info.height = st->height;
  p.info.fps_n = GST_VIDEO_INFO_FPS_N(&st->input_state->info);
  p.info.fps_d = GST_VIDEO_INFO_FPS_D(&st->input_state->info);

  // Version 1: CUDA memory of the pipeline's context is read where it is
  // (device pointers); the core orders its work after the producer's on the
  // shared stream and waits before the frame is released; so does version
  // 2 with the CUDA backend. Without the share (the CPU backend) the frame
  // is mapped on the host, and GStreamer copies CUDA memory down (a
  // synchronous copy, ordered after the producer's work on the shared
  // stream).
  bool on_device = false;
  if (!gst_cudadiff_frame_map(&p.vframe, &st->input_state->info, frame->input_buffer, GST_MAP_READ,
                              &st->share, &on_device)) {
    GST_ELEMENT_ERROR(
        self, STREAM, ENCODE, ("cannot map the input frame"),
        ("%s", gst_cudadiff_map_failure(&st->input_state->info, frame->input_buffer).c_str()));
    return drop_after_pending(self, frame);
  }
  if (!on_device)
    gst_cudadiff_warn_if_foreign(GST_ELEMENT(self), frame->input_buffer, &st->share,
                                 &st->warned_foreign);
  try {
    // The mapped frame as it is (pinned when upstream took our pool, or
    // device memory for version 1; any strides).
    const cudadiff::FrameView input = gst_cudadiff_frame_view(&p.vframe, &st->input_state->info);
    if (on_device) {
      // A producer's mark of another stream than ours is waited for here
      // (ours orders the core's work after it by itself).
      cudadiff::ContextScope scope(st->ctx.get());
      gst_cudadiff_buffer_ordered_input(frame->input_buffer, *st->ctx);
    }
    if (st->encoder2) {
      submit_v2(st, input, on_device, threshold, keyframe);
      if (keyframe) {
        cudadiff::ContextScope scope(st->ctx.get());
        collect_v2(st, &p.result, st->body);
      }
    } else {
      cudadiff::ContextScope scope(st->ctx.get());
      if (keyframe)
        st->encoder->keyframe_host(input, st->body);
      else
        st->encoder->submit_delta_host(input, threshold, p.info.mode);
    }
  } catch (const cudadiff::Error &e) {
    // The reference may hold part of this frame, which no decoder will see.
    st->need_keyframe = true;
    gst_video_frame_unmap(&p.vframe);
    gst_cudadiff_post_error(GST_ELEMENT(self), "encoding a frame", e);
    return drop_after_pending(self, frame);
  }
  st->frame_number++;
  if (keyframe) {
    st->last_keyframe_number = p.info.frame_number;
    st->need_keyframe = false;
    gst_video_frame_unmap(&p.vframe);
    return push_packet(self, frame, p.info, compression, level, p.result);
  }
  // The oldest delta before this one where the queue is full (overlap),
  // then this one now or later.
  const GstFlowReturn ret = st->pending.size() < st->max_pending ? GST_FLOW_OK
                            : st->async_bodies                   ? collect_oldest_async(self)
                                                                 : finish_oldest(self);
  st->pending.push_back(p);
  if (ret == GST_FLOW_ERROR) {
    // The deltas after the one that failed may have been coded against it:
    // they are dropped too, and the next frame is a keyframe.
    discard_pending(self, true);
    st->need_keyframe = true;
    return ret;
  }
  if (ret != GST_FLOW_OK || st->overlap) return ret;
  return finish_pending(self);
}

// End of stream: the queued delta's packet goes out before EOS.
static GstFlowReturn gst_cudadiff_enc_finish(GstVideoEncoder *encoder) {
  return finish_pending(GST_CUDADIFF_ENC(encoder));
}

// Upstream gets a pool of pinned buffers (with GstVideoMeta): it writes each
// frame where the GPU copies from at full speed; for CUDA memory caps a pool
// of the pipeline's CUDA context.
static gboolean gst_cudadiff_enc_propose_allocation(GstVideoEncoder *encoder, GstQuery *query) {
  GstCaps *caps = nullptr;
  gst_query_parse_allocation(query, &caps, nullptr);
  // It may keep up to kMaxInFlight (four) input frames after handle_frame
  // returns (frame-overlap, version 2 on a GPU: three queued and one whose
  // packet waits for its body; else one).
  const guint held = codec2::Encoder::kMaxInFlight;
  if (gst_cudadiff_caps_are_cuda(caps))
    return gst_cudadiff_propose_cuda_allocation(&GST_CUDADIFF_ENC(encoder)->state->share, query,
                                                held);
  return gst_cudadiff_propose_pinned_allocation(query, held);
}

// CUDA memory caps only where the element can use them (not with
// backend=cpu, nor without a device).
static GstCaps *gst_cudadiff_enc_getcaps(GstVideoEncoder *encoder, GstCaps *filter) {
  auto *self = GST_CUDADIFF_ENC(encoder);
  GST_OBJECT_LOCK(self);
  const GstCudaDiffBackend backend = self->backend;
  const gint device_id = self->device_id;
  GST_OBJECT_UNLOCK(self);
  // Nor after start failed to share the pipeline's context. (Not under the
  // object lock: the share's lock is taken before it where a context is
  // set, by its debug output.)
  const bool cuda = gst_cudadiff_cuda_caps_allowed(backend, device_id, self->state->share);
  GstCaps *caps = gst_video_encoder_proxy_getcaps(encoder, nullptr, filter);
  if (cuda) return gst_cudadiff_caps_cuda_first(caps);
  GstCaps *sys = gst_cudadiff_caps_without_cuda(caps);
  gst_caps_unref(caps);
  return sys;
}

static gboolean gst_cudadiff_enc_src_query(GstVideoEncoder *encoder, GstQuery *query) {
  if (GST_CUDADIFF_ENC(encoder)->state->share.handle_query(GST_ELEMENT(encoder), query))
    return TRUE;
  return GST_VIDEO_ENCODER_CLASS(gst_cudadiff_enc_parent_class)->src_query(encoder, query);
}

static void gst_cudadiff_enc_set_context(GstElement *element, GstContext *context) {
  auto *self = GST_CUDADIFF_ENC(element);
  GST_OBJECT_LOCK(self);
  const gint device_id = self->device_id;
  const bool cpu = self->backend == GST_CUDADIFF_BACKEND_CPU;
  GST_OBJECT_UNLOCK(self);
  // A CPU element keeps no CUDA context (and so answers no context query).
  if (!cpu) self->state->share.set_context(element, context, device_id);
  GST_ELEMENT_CLASS(gst_cudadiff_enc_parent_class)->set_context(element, context);
}

static void gst_cudadiff_enc_class_init(GstCudaDiffEncClass *klass) {
  GObjectClass *gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  GstVideoEncoderClass *encoder_class = GST_VIDEO_ENCODER_CLASS(klass);

  GST_DEBUG_CATEGORY_INIT(gst_cudadiff_enc_debug, "cudadiffenc", 0,
                          "gst-cudadiff difference encoder");

  gobject_class->set_property = gst_cudadiff_enc_set_property;
  gobject_class->get_property = gst_cudadiff_enc_get_property;
  gobject_class->finalize = gst_cudadiff_enc_finalize;

  const auto playing = static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
                                                GST_PARAM_MUTABLE_PLAYING);
  g_object_class_install_property(
      gobject_class, PROP_THRESHOLD,
      g_param_spec_uint("threshold", "Threshold",
                        "Largest difference, in levels (0-255), between an input byte and the "
                        "byte the decoders show; 0 is lossless. Version 2 keeps bytes within "
                        "threshold of the reference, skips blocks with all bytes so, and sets "
                        "the others within two thirds of threshold (step 2k+1, "
                        "k = ceil(2*threshold/3)), and every byte of a keyframe within a "
                        "third (k = ceil(threshold/3)); "
                        "version 1 sends the bytes that differ from the reference by more than "
                        "threshold. Changeable while playing: applies from the next frame, no "
                        "keyframe needed. Default: 20",
                        0, 255, DEFAULT_THRESHOLD,
                        static_cast<GParamFlags>(playing | GST_PARAM_CONTROLLABLE)));
  g_object_class_install_property(
      gobject_class, PROP_KEYFRAME_INTERVAL,
      g_param_spec_uint("keyframe-interval", "Keyframe interval",
                        "Frames from one keyframe to the next (late clients start at a "
                        "keyframe); 0 = only the first frame (and forced keyframes and caps "
                        "changes). Changeable while playing. Default: 60",
                        0, G_MAXINT, DEFAULT_KEYFRAME_INTERVAL, playing));
  g_object_class_install_property(
      gobject_class, PROP_COMPRESSION,
      g_param_spec_enum("compression", "Compression",
                        "Compression of version 1 payloads (stream-version=1): none, or zstd "
                        "(when built with libzstd; keyframes are left-predicted first, deltas of "
                        "thresholds up to 12 send differences rather than values). Version 2 "
                        "ignores it: its bodies are entropy-coded already. Changeable while "
                        "playing. "
#if CUDADIFF_HAVE_ZSTD
                        "Default: zstd",
#else
                        "Default: none (this build has no zstd)",
#endif
                        GST_TYPE_CUDADIFF_COMPRESSION, DEFAULT_COMPRESSION, playing));
  g_object_class_install_property(
      gobject_class, PROP_COMPRESSION_LEVEL,
      g_param_spec_int("compression-level", "Compression level",
                       "zstd level of version 1 payloads (-7 fastest .. 19 smallest); 1 is about "
                       "twice as fast as 3 for a few percent more bytes. Version 2 ignores it. "
                       "Changeable while playing. Default: 3",
                       MIN_COMPRESSION_LEVEL, MAX_COMPRESSION_LEVEL, DEFAULT_COMPRESSION_LEVEL,
                       playing));
  g_object_class_install_property(
      gobject_class, PROP_STATS_INTERVAL,
      g_param_spec_uint(
          "stats-interval", "Statistics interval",
          "Post the statistics (see 'stats') as an element message named "
          "cudadiffenc-stats every this many frames; 0 = never. Changeable while playing. "
          "Default: 0",
          0, G_MAXINT, DEFAULT_STATS_INTERVAL, playing));
  g_object_class_install_property(
      gobject_class, PROP_FRAME_OVERLAP,
      g_param_spec_enum(
          "frame-overlap", "Frame overlap",
          "Whether a delta's packet waits for the next frame, so that the GPU encodes frame N "
          "while the CPU packs and pushes frame N-1 (version 2 on a GPU: for the next four "
          "frames; the GPU codes three at a time, each starting while the one before is still "
          "entropy-coded, and a frame's body comes back while the packet before it is pushed; "
          "more frames per second, one frame of delay, four for version 2 on a GPU; end of "
          "stream, keyframes, caps changes and drain queries push the waiting packets): "
          "auto = when upstream is not live (latency query), always, never (each packet "
          "leaves as soon as its frame is encoded: for applications that push a frame and "
          "wait for its packet). Read when caps are set. Default: auto",
          GST_TYPE_CUDADIFF_FRAME_OVERLAP, DEFAULT_FRAME_OVERLAP,
          static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
                                   GST_PARAM_MUTABLE_PLAYING)));
  g_object_class_install_property(
      gobject_class, PROP_STATS,
      g_param_spec_boxed("stats", "Statistics",
                         "Counters since start (read-only, guint64 fields): frames, keyframes, "
                         "bytes-in (raw frame bytes), bytes-out (packet bytes), changed-bytes "
                         "(input bytes of deltas off the shown picture by more than threshold: "
                         "what version 1 sends), report-layout-bytes (the report's layout, the "
                         "baseline: whole keyframes plus 5 bytes per changed byte), "
                         "delta-bytes-out, delta-report-layout-bytes, blocks-skip, "
                         "blocks-temporal, blocks-temporal-spatial, blocks-spatial (version 2: "
                         "16x16 blocks coded in each mode, keyframes all spatial), stream-version",
                         GST_TYPE_STRUCTURE,
                         static_cast<GParamFlags>(G_PARAM_READABLE | G_PARAM_STATIC_STRINGS)));
  g_object_class_install_property(
      gobject_class, PROP_STREAM_VERSION,
      g_param_spec_uint(
          "stream-version", "Stream version",
          "Version of the stream written (the caps say it too): 2, 16x16 blocks predicted from "
          "the previous picture or their neighbours, quantised with step "
          "2*ceil(2*threshold/3)+1 and entropy-coded: several times smaller on camera footage, "
          "about twice the GPU time of version 1 with frames overlapping (several times "
          "without) and far more CPU time; or 1, the bytes "
          "that changed by more than threshold with optional zstd: the least time per frame, "
          "for senders short of it. Decoders built before version 2 "
          "read only version 1. Read when caps are set (set while playing, it applies from "
          "the next caps, whose first frame is a keyframe). Default: " G_STRINGIFY(
              DEFAULT_STREAM_VERSION),
          1, 2, DEFAULT_STREAM_VERSION,
          static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
                                   GST_PARAM_MUTABLE_PLAYING)));
  gst_cudadiff_install_backend_properties(gobject_class, PROP_BACKEND, PROP_DEVICE_ID,
                                          PROP_ACTIVE_BACKEND);

  GstCaps *sink_caps = gst_cudadiff_make_template_caps(SINK_FORMATS);
  gst_element_class_add_pad_template(
      element_class, gst_pad_template_new("sink", GST_PAD_SINK, GST_PAD_ALWAYS, sink_caps));
  gst_caps_unref(sink_caps);
  GstCaps *src_caps = gst_caps_from_string("video/x-cudadiff, version = (int) { 2, 1 }");
  gst_element_class_add_pad_template(
      element_class, gst_pad_template_new("src", GST_PAD_SRC, GST_PAD_ALWAYS, src_caps));
  gst_caps_unref(src_caps);
  gst_element_class_set_static_metadata(
      element_class, "CUDA frame-difference encoder", "Codec/Encoder/Video",
      "Sends a keyframe, then per frame what changed, with every byte within a threshold "
      "(lossless at 0): version 2 (the default) predicts and entropy-codes blocks (on the GPU, "
      "or on the CPU without one), version 1 sends the changed bytes (likewise)",
      "gst-cudadiff developers");

  encoder_class->start = GST_DEBUG_FUNCPTR(gst_cudadiff_enc_start);
  encoder_class->stop = GST_DEBUG_FUNCPTR(gst_cudadiff_enc_stop);
  encoder_class->set_format = GST_DEBUG_FUNCPTR(gst_cudadiff_enc_set_format);
  encoder_class->handle_frame = GST_DEBUG_FUNCPTR(gst_cudadiff_enc_handle_frame);
  encoder_class->flush = GST_DEBUG_FUNCPTR(gst_cudadiff_enc_flush);
  encoder_class->finish = GST_DEBUG_FUNCPTR(gst_cudadiff_enc_finish);
  encoder_class->sink_query = GST_DEBUG_FUNCPTR(gst_cudadiff_enc_sink_query);
  encoder_class->propose_allocation = GST_DEBUG_FUNCPTR(gst_cudadiff_enc_propose_allocation);
  encoder_class->getcaps = GST_DEBUG_FUNCPTR(gst_cudadiff_enc_getcaps);
  encoder_class->src_query = GST_DEBUG_FUNCPTR(gst_cudadiff_enc_src_query);
  element_class->set_context = GST_DEBUG_FUNCPTR(gst_cudadiff_enc_set_context);
  element_class->change_state = GST_DEBUG_FUNCPTR(gst_cudadiff_enc_change_state);

  gst_type_mark_as_plugin_api(GST_TYPE_CUDADIFF_COMPRESSION, static_cast<GstPluginAPIFlags>(0));
  gst_type_mark_as_plugin_api(GST_TYPE_CUDADIFF_FRAME_OVERLAP, static_cast<GstPluginAPIFlags>(0));
}

static void gst_cudadiff_enc_init(GstCudaDiffEnc *self) {
  self->threshold = DEFAULT_THRESHOLD;
  self->keyframe_interval = DEFAULT_KEYFRAME_INTERVAL;
  self->compression = DEFAULT_COMPRESSION;
  self->compression_level = DEFAULT_COMPRESSION_LEVEL;
  self->stats_interval = DEFAULT_STATS_INTERVAL;
  self->frame_overlap = DEFAULT_FRAME_OVERLAP;
  self->backend = GST_CUDADIFF_DEFAULT_BACKEND;
  self->device_id = GST_CUDADIFF_DEFAULT_DEVICE_ID;
  self->stream_version = DEFAULT_STREAM_VERSION;
  self->state = new EncState();
}
