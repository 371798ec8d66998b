// The RTSP server of the difference stream (cudadiffserver.h says what it
// serves). Pieces, in the order a packet meets them:
//
//   source ! queue ! videoconvert ! cudadiffenc name=enc ! pay0:(rtpgstpay ! capsfilter)
//     ! rtpbin: [rtprtxsend] -> rtpsession -> [queue ! pacer ! netsim] -> UDP / TCP senders
//
// - pay0 is a bin: rtsp-server takes its "src" pad and finds the payloader in
//   it. The capsfilter adds rtcp-fb-nack, rtcp-fb-nack-pli and rtcp-fb-ccm-fir
//   to the RTP caps: the SDP then announces them and the clients' rtpbin sends
//   NACK, PLI and FIR.
// - retransmission: rtsp-server's own rtprtxsend (RTP/AVPF, rtx payload type
//   in the SDP), told to keep every packet of retransmission_ms.
// - pacer and simulated loss sit in the slot rtpbin offers after the session
//   (the "RTP encoder", where SRTP would go), so that retransmissions are
//   paced and dropped like the other packets. The pacer lets packets leave
//   at most at a given rate after a short burst, so that a large frame (a
//   keyframe) does not flood a receiver's socket buffer; it runs in its
//   queue's thread, so neither the session nor the encoder waits for it.
// - keyframes: a force-key-unit event for each client that starts playing;
//   rtpbin makes one for each PLI/FIR; requests while one is pending are
//   dropped (a probe on the encoder's output).
// - clients: every second, a connection that has taken none of the data
//   waiting for it for stalled_client_timeout_s, or a viewer over TCP that
//   rtsp-server stopped sending to (more than 10 s behind), is closed
//   (watch_clients()), and rtsp-server's sender to TCP viewers is woken where
//   it sleeps with packets waiting (wake_stuck_senders()).
#include "cudadiffserver.h"

#include <gst/rtp/gstrtpbuffer.h>
#include <gst/rtsp-server/rtsp-server.h>
#include <gst/video/video.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <linux/sockios.h>  // SIOCOUTQ
#include <linux/tcp.h>      // struct tcp_info with tcpi_bytes_acked (glibc's has none)
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#endif

GST_DEBUG_CATEGORY_STATIC(cudadiff_server_debug);
#define GST_CAT_DEFAULT cudadiff_server_debug

namespace cudadiff_server {

// ---------------------------------------------------------------------------
// The pacer: an element private to the server (not in the plugin).

namespace {

// A token bucket: packets leave at most at `rate` bytes per second, after a
// pause up to `burst` bytes at once, whatever their sizes. Retransmissions
// share it.
struct PacerState {
  std::mutex mutex;  // guards everything below
  std::condition_variable wake;
  bool flushing = false;
  double rate = 50e6;  // bytes per second
  double burst = 65536;
  double tokens = 0;   // bytes that may leave now
  gint64 last_us = 0;  // when tokens were last refilled

  void reset() {
    flushing = false;
    tokens = burst;
    last_us = g_get_monotonic_time();
  }
  void refill(gint64 now) {
    tokens = std::min(burst, tokens + double(now - last_us) * 1e-6 * rate);
    last_us = now;
  }
};

// Packets whose time comes within half a millisecond leave together.
constexpr double kPacerSlackSeconds = 0.0005;

}  // namespace

struct CudaDiffPacer {
  GstElement parent;
  GstPad *sinkpad;
  GstPad *srcpad;
  PacerState *state;
};
struct CudaDiffPacerClass {
  GstElementClass parent_class;
};

G_DEFINE_TYPE(CudaDiffPacer, cudadiff_pacer, GST_TYPE_ELEMENT)

static GstStaticPadTemplate pacer_sink_template = GST_STATIC_PAD_TEMPLATE(
    "sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS("application/x-rtp"));
static GstStaticPadTemplate pacer_src_template = GST_STATIC_PAD_TEMPLATE(
    "src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS("application/x-rtp"));

// Waits until the bucket holds `bytes` (less the slack); false when flushing.
static bool pacer_take(PacerState *st, std::unique_lock<std::mutex> &lock, double bytes) {
  for (;;) {
    if (st->flushing) return false;
    st->refill(g_get_monotonic_time());
    const double missing = bytes - st->tokens - kPacerSlackSeconds * st->rate;
    if (missing <= 0 || st->tokens >= st->burst) {  // (a packet larger than the bucket)
      st->tokens -= bytes;
      return true;
    }
    st->wake.wait_for(lock, std::chrono::microseconds(gint64(missing / st->rate * 1e6) + 1));
  }
}

static GstFlowReturn pacer_chain_list(GstPad *, GstObject *parent, GstBufferList *list) {
  auto *self = reinterpret_cast<CudaDiffPacer *>(parent);
  PacerState *st = self->state;
  const guint n = gst_buffer_list_length(list);
  GstBufferList *batch = gst_buffer_list_new();
  GstFlowReturn ret = GST_FLOW_OK;
  for (guint i = 0; i < n; ++i) {
    GstBuffer *buf = gst_buffer_list_get(list, i);
    const double size = double(gst_buffer_get_size(buf));
    std::unique_lock<std::mutex> lock(st->mutex);
    st->refill(g_get_monotonic_time());
    // Before waiting, what may leave already leaves.
    if (st->tokens + kPacerSlackSeconds * st->rate < size && gst_buffer_list_length(batch) > 0) {
      lock.unlock();
      ret = gst_pad_push_list(self->srcpad, batch);
      batch = gst_buffer_list_new();
      if (ret != GST_FLOW_OK) break;
      lock.lock();
    }
    if (!pacer_take(st, lock, size)) {
      ret = GST_FLOW_FLUSHING;
      break;
    }
    lock.unlock();
    gst_buffer_list_add(batch, gst_buffer_ref(buf));
  }
  if (ret == GST_FLOW_OK && gst_buffer_list_length(batch) > 0)
    ret = gst_pad_push_list(self->srcpad, batch);
  else
    gst_buffer_list_unref(batch);
  gst_buffer_list_unref(list);
  return ret;
}

static GstFlowReturn pacer_chain(GstPad *pad, GstObject *parent, GstBuffer *buf) {
  GstBufferList *list = gst_buffer_list_new_sized(1);
  gst_buffer_list_add(list, buf);
  return pacer_chain_list(pad, parent, list);
}

static gboolean pacer_sink_event(GstPad *pad, GstObject *parent, GstEvent *event) {
  PacerState *st = reinterpret_cast<CudaDiffPacer *>(parent)->state;
  if (GST_EVENT_TYPE(event) == GST_EVENT_FLUSH_START) {
    std::lock_guard<std::mutex> lock(st->mutex);
    st->flushing = true;
    st->wake.notify_all();
  } else if (GST_EVENT_TYPE(event) == GST_EVENT_FLUSH_STOP) {
    std::lock_guard<std::mutex> lock(st->mutex);
    st->flushing = false;
  }
  return gst_pad_event_default(pad, parent, event);
}

static GstStateChangeReturn pacer_change_state(GstElement *element, GstStateChange transition) {
  PacerState *st = reinterpret_cast<CudaDiffPacer *>(element)->state;
  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY) {
    // Wake a waiting chain before the pads are deactivated (they wait for it).
    std::lock_guard<std::mutex> lock(st->mutex);
    st->flushing = true;
    st->wake.notify_all();
  } else if (transition == GST_STATE_CHANGE_READY_TO_PAUSED) {
    std::lock_guard<std::mutex> lock(st->mutex);
    st->reset();
  }
  return GST_ELEMENT_CLASS(cudadiff_pacer_parent_class)->change_state(element, transition);
}

static void cudadiff_pacer_finalize(GObject *object) {
  delete reinterpret_cast<CudaDiffPacer *>(object)->state;
  G_OBJECT_CLASS(cudadiff_pacer_parent_class)->finalize(object);
}

static void cudadiff_pacer_class_init(CudaDiffPacerClass *klass) {
  GObjectClass *gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  gobject_class->finalize = cudadiff_pacer_finalize;
  element_class->change_state = pacer_change_state;
  gst_element_class_add_static_pad_template(element_class, &pacer_sink_template);
  gst_element_class_add_static_pad_template(element_class, &pacer_src_template);
  gst_element_class_set_static_metadata(element_class, "RTP pacer", "Filter/Network/RTP",
                                        "Spreads the packets of large frames over time",
                                        "gst-cudadiff developers");
}

static void cudadiff_pacer_init(CudaDiffPacer *self) {
  self->state = new PacerState();
  self->sinkpad = gst_pad_new_from_static_template(&pacer_sink_template, "sink");
  gst_pad_set_chain_function(self->sinkpad, pacer_chain);
  gst_pad_set_chain_list_function(self->sinkpad, pacer_chain_list);
  gst_pad_set_event_function(self->sinkpad, pacer_sink_event);
  GST_PAD_SET_PROXY_CAPS(self->sinkpad);
  GST_PAD_SET_PROXY_ALLOCATION(self->sinkpad);
  gst_element_add_pad(GST_ELEMENT(self), self->sinkpad);
  self->srcpad = gst_pad_new_from_static_template(&pacer_src_template, "src");
  GST_PAD_SET_PROXY_CAPS(self->srcpad);
  gst_element_add_pad(GST_ELEMENT(self), self->srcpad);
}

// ---------------------------------------------------------------------------
// Media and factory.

namespace {

// What the server, its clients and its medias share. Their callbacks may
// run after Server::stop() (a media finishing in rtsp-server's threads), so
// each holds a reference.
struct Shared {
  Options options;
  mutable std::mutex mutex;  // everything below
  Stats stats;
  std::string error;                   // the first
  gint64 keyframe_requested_us = 0;    // when a request went to the encoder; 0: none pending
  std::vector<GstRTSPMedia *> medias;  // references, unprepared at stop
  guint64 ended_medias = 0;            // medias whose stream has ended (cudadiff_factory_gen_key())

  void set_error(const std::string &text) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (error.empty()) error = text;
      stats.media_errors++;
    }
    if (options.on_error) options.on_error(text);
  }
};

using SharedPtr = std::shared_ptr<Shared>;

Shared *shared_of(gpointer data) {
  return static_cast<SharedPtr *>(data)->get();
}
gpointer new_ref(const SharedPtr &shared) {
  return new SharedPtr(shared);
}
void delete_ref(gpointer data) {
  delete static_cast<SharedPtr *>(data);
}
void delete_ref_closure(gpointer data, GClosure *) {
  delete static_cast<SharedPtr *>(data);
}

}  // namespace

struct Server::Impl {
  SharedPtr shared = std::make_shared<Shared>();
  GstRTSPServer *server = nullptr;
  GstRTSPMediaFactory *factory = nullptr;
  GMainContext *context = nullptr;
  GMainLoop *loop = nullptr;
  std::thread thread;
  guint server_source = 0;
  int bound_port = 0;
  bool running = false;
};

namespace {

// The packets of a stream that have left rtpbin towards the senders: the
// payload type of the stream's own packets (the first to leave; the
// retransmissions have another) and the sequence number of the last of
// them (-1: none yet).
struct SentPackets {
  std::atomic<int> pt{-1};
  std::atomic<int> last_seq{-1};
};

// The media: rtpbin gets the pacer and the simulated loss after its session.
struct CudaDiffMedia {
  GstRTSPMedia parent;
  double loss;
  double pace_rate;                    // bytes per second; 0: no pacing
  double pace_burst;                   // bytes
  SharedPtr *shared;                   // for its errors
  std::shared_ptr<SentPackets> *sent;  // stream 0's
};
struct CudaDiffMediaClass {
  GstRTSPMediaClass parent_class;
};

}  // namespace

G_DEFINE_TYPE(CudaDiffMedia, cudadiff_media, GST_TYPE_RTSP_MEDIA)

// Times that never go back, on the packets that leave rtpbin.
//
// rtsp-server queues the packets of a viewer over TCP that reads slower than
// they come (its backlog) and asserts that each packet's time (DTS, else PTS)
// is not before the first one's queued (GStreamer 1.22's
// gst_rtsp_stream_transport_backlog_push(), still so later): g_assert, which
// stops the process. A retransmission carries the time of the packet it
// repeats, up to the retransmission time earlier, and packets without a time
// fail the same assertion. So every packet leaves with a DTS no earlier than
// any before it: its own time, or the latest seen. The PTS stays.
namespace {
struct SendTimes {
  std::mutex mutex;
  GstClockTime latest = GST_CLOCK_TIME_NONE;
};

// Whether `buf` needs a DTS of `latest` (and moves `latest` on otherwise).
bool behind_latest(GstBuffer *buf, GstClockTime &latest) {
  const GstClockTime t = GST_BUFFER_DTS_OR_PTS(buf);
  if (GST_CLOCK_TIME_IS_VALID(t) && (!GST_CLOCK_TIME_IS_VALID(latest) || t >= latest)) {
    latest = t;
    return false;
  }
  return GST_CLOCK_TIME_IS_VALID(latest);
}
}  // namespace

static GstPadProbeReturn keep_times_in_order(GstPad *, GstPadProbeInfo *info, gpointer data) {
  auto *times = static_cast<SendTimes *>(data);
  std::lock_guard<std::mutex> lock(times->mutex);
  if (info->type & GST_PAD_PROBE_TYPE_BUFFER) {
    GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER(info);
    if (behind_latest(buf, times->latest)) {
      buf = gst_buffer_make_writable(buf);
      GST_BUFFER_DTS(buf) = times->latest;
      info->data = buf;
    }
  } else if (info->type & GST_PAD_PROBE_TYPE_BUFFER_LIST) {
    GstBufferList *list = GST_PAD_PROBE_INFO_BUFFER_LIST(info);
    for (guint i = 0; i < gst_buffer_list_length(list); ++i) {
      if (!behind_latest(gst_buffer_list_get(list, i), times->latest)) continue;
      list = gst_buffer_list_make_writable(list);  // (once)
      GST_BUFFER_DTS(gst_buffer_list_get_writable(list, i)) = times->latest;
    }
    info->data = list;
  }
  return GST_PAD_PROBE_OK;
}

// rtpbin's "RTP encoder" slot (where SRTP would go): after the session and
// the retransmission sender, before the UDP and TCP senders, so that
// retransmitted packets are paced and dropped like the others. The pads of
// the element must be named rtp_sink_N / rtp_src_N.
static GstElement *make_send_element(GstElement *, guint session, gpointer data) {
  auto *media = static_cast<CudaDiffMedia *>(data);
  GstElement *bin = gst_bin_new(nullptr);
  GstElement *first = nullptr, *last = nullptr;
  auto append = [&](GstElement *e) {
    gst_bin_add(GST_BIN(bin), e);
    if (last) gst_element_link(last, e);
    if (!first) first = e;
    last = e;
  };
  if (media->pace_rate > 0) {
    // The queue's thread waits for the pacer; the session's does not.
    GstElement *queue = gst_element_factory_make("queue", nullptr);
    g_object_set(queue, "max-size-buffers", 0u, "max-size-time", guint64(0), "max-size-bytes",
                 256u << 20, nullptr);
    append(queue);
    auto *pacer =
        reinterpret_cast<CudaDiffPacer *>(g_object_new(cudadiff_pacer_get_type(), nullptr));
    pacer->state->rate = media->pace_rate;
    pacer->state->burst = media->pace_burst;
    pacer->state->reset();
    append(GST_ELEMENT(pacer));
  }
  if (media->loss > 0) {
    GstElement *netsim = gst_element_factory_make("netsim", nullptr);
    if (netsim) {
      g_object_set(netsim, "drop-probability", float(media->loss), nullptr);
      append(netsim);
    } else if (media->shared) {
      media->shared->get()->set_error("--simulate-loss needs netsim (gst-plugins-bad)");
    }
  }
  if (!first) append(gst_element_factory_make("identity", nullptr));  // for the probe below
  GstPad *sink = gst_element_get_static_pad(first, "sink");
  GstPad *src = gst_element_get_static_pad(last, "src");
  gchar *sink_name = g_strdup_printf("rtp_sink_%u", session);
  gchar *src_name = g_strdup_printf("rtp_src_%u", session);
  gst_element_add_pad(bin, gst_ghost_pad_new(sink_name, sink));
  gst_element_add_pad(bin, gst_ghost_pad_new(src_name, src));
  gst_pad_add_probe(
      src, GstPadProbeType(GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_BUFFER_LIST),
      keep_times_in_order, new SendTimes(), [](gpointer p) { delete static_cast<SendTimes *>(p); });
  g_free(sink_name);
  g_free(src_name);
  gst_object_unref(sink);
  gst_object_unref(src);
  return bin;
}

// rtsp-server's rtprtxsend keeps at most 100 packets (its default
// max-size-packets), fewer than one keyframe: keep every packet of the
// retransmission time instead.
static void keep_packets_for_retransmission(GstElement *element) {
  GstElementFactory *factory = gst_element_get_factory(element);
  if (factory && g_strcmp0(GST_OBJECT_NAME(factory), "rtprtxsend") == 0)
    g_object_set(element, "max-size-packets", 0u, nullptr);
}

static void on_rtpbin_element(GstBin *, GstBin *, GstElement *element, gpointer) {
  keep_packets_for_retransmission(element);
  if (!GST_IS_BIN(element)) return;
  GstIterator *it = gst_bin_iterate_recurse(GST_BIN(element));
  GValue item = G_VALUE_INIT;
  while (gst_iterator_next(it, &item) == GST_ITERATOR_OK) {
    keep_packets_for_retransmission(GST_ELEMENT(g_value_get_object(&item)));
    g_value_reset(&item);
  }
  g_value_unset(&item);
  gst_iterator_free(it);
}

// Every BYE at the end of a stream comes with BYEs of all the session's own
// sources.
//
// At the end of a stream rtpsession sends a BYE for each source of its own,
// one RTCP packet each: the stream's, and with retransmission on, that of
// the retransmission stream. Once it has made them all, it pushes the end of
// the stream on its RTCP output after each packet, if the end has reached
// the session's RTP input by then (GStreamer 1.22's rtp_session_on_timeout(),
// still so in later versions), and the pad then refuses the packets after
// it. Where the stream's own BYE was not the first, a viewer never got it
// (rtspsrc ends its stream at the BYE of the stream's SSRC) and waited for
// the source's timeout, about 25 s: in 8 of 40 runs of a still image on
// one machine. So each compound with a BYE that leaves rtpbin gets a BYE
// packet for every other source the session has of its own: whichever goes
// first ends the viewer's stream. Only after the end of the stream has
// reached the session (a probe on its RTP input): a BYE of one source alone
// (an SSRC collision) stays as it is.
namespace {
// The sessions of an rtpbin whose RTP input has taken the end of the stream.
struct EndedSessions {
  std::mutex mutex;
  std::set<guint> ids;
};
struct RtcpSession {
  guint id;
  std::shared_ptr<EndedSessions> ended;
  GObject *session = nullptr;  // the RTPSession (a reference), for its sources
  ~RtcpSession() {
    if (session) g_object_unref(session);
  }
};
constexpr const char *kEndedSessionsKey = "cudadiff-ended-sessions";
}  // namespace

static std::shared_ptr<EndedSessions> ended_sessions(GstElement *rtpbin) {
  auto *ended = static_cast<std::shared_ptr<EndedSessions> *>(
      g_object_get_data(G_OBJECT(rtpbin), kEndedSessionsKey));
  return ended ? *ended : nullptr;
}

// The SSRCs of the session's own sources, the session's own SSRC (the
// stream's) first.
static std::vector<guint32> internal_ssrcs(const RtcpSession &rs) {
  std::vector<guint32> ssrcs;
  if (!rs.session) return ssrcs;
  guint own = 0;
  g_object_get(rs.session, "internal-ssrc", &own, nullptr);
  GValueArray *sources = nullptr;
  g_object_get(rs.session, "sources", &sources, nullptr);
  G_GNUC_BEGIN_IGNORE_DEPRECATIONS
  for (guint i = 0; sources && i < sources->n_values; ++i) {
    GObject *source = G_OBJECT(g_value_get_object(g_value_array_get_nth(sources, i)));
    GstStructure *stats = nullptr;
    g_object_get(source, "stats", &stats, nullptr);
    gboolean internal = FALSE;
    guint ssrc = 0;
    if (stats && gst_structure_get_boolean(stats, "internal", &internal) && internal &&
        gst_structure_get_uint(stats, "ssrc", &ssrc))
      ssrcs.push_back(guint32(ssrc));
    if (stats) gst_structure_free(stats);
  }
  if (sources) g_value_array_free(sources);
  G_GNUC_END_IGNORE_DEPRECATIONS
  std::stable_partition(ssrcs.begin(), ssrcs.end(), [own](guint32 s) { return s == own; });
  return ssrcs;
}

static guint32 read_be32(const guint8 *p) {
  return guint32(p[0]) << 24 | guint32(p[1]) << 16 | guint32(p[2]) << 8 | p[3];
}

std::string rtp_info_with_seq(const std::string &rtp_info, unsigned seq) {
  const size_t at = rtp_info.find("seq=");
  if (at == std::string::npos || rtp_info.find("seq=", at + 4) != std::string::npos) return "";
  size_t end = at + 4;
  while (end < rtp_info.size() && g_ascii_isdigit(rtp_info[end])) end++;
  if (end == at + 4 || end - at - 4 > 5) return "";
  const std::string value = std::to_string(seq & 0xffffu);
  if (rtp_info.compare(at + 4, end - at - 4, value) == 0) return "";
  return rtp_info.substr(0, at + 4) + value + rtp_info.substr(end);
}

GstBuffer *bye_naming_all(GstBuffer *packet, const std::vector<guint32> &ssrcs) {
  GstMapInfo map;
  if (!gst_buffer_map(packet, &map, GST_MAP_READ)) return nullptr;
  const guint8 *d = map.data;
  const gsize size = map.size;
  GstBuffer *out = nullptr;
  for (gsize at = 0; at + 4 <= size;) {
    const gsize length = (gsize(d[at + 2]) << 8 | d[at + 3]) * 4 + 4;
    if ((d[at] >> 6) != 2 || at + length > size) break;  // not RTCP as rtpsession makes it
    const guint count = d[at] & 0x1f;
    if (d[at + 1] != 203 || 4 + 4 * gsize(count) > length) {  // not a BYE
      at += length;
      continue;
    }
    // (padding, which only the last packet may have: not rtpsession's)
    if (d[at] & 0x20) break;
    std::vector<guint32> missing;
    for (guint32 ssrc : ssrcs) {
      bool named = false;
      for (guint i = 0; i < count && !named; ++i) named = read_be32(d + at + 4 + 4 * i) == ssrc;
      if (!named && std::find(missing.begin(), missing.end(), ssrc) == missing.end())
        missing.push_back(ssrc);
    }
    if (missing.empty() || missing.size() > 31) break;
    // A BYE packet of its own for each: a receiver stops reading a BYE's
    // SSRCs at the first it does not know (GStreamer 1.22 does), so that an
    // unknown one takes nothing else with it.
    const gsize end = at + length;
    std::vector<guint8> bytes(d, d + end);
    for (guint32 ssrc : missing) {
      const guint8 bye[8] = {
          0x81, 203, 0, 1, guint8(ssrc >> 24), guint8(ssrc >> 16), guint8(ssrc >> 8), guint8(ssrc)};
      bytes.insert(bytes.end(), bye, bye + 8);
    }
    bytes.insert(bytes.end(), d + end, d + size);
    out = gst_buffer_new_memdup(bytes.data(), bytes.size());
    gst_buffer_copy_into(out, packet, GST_BUFFER_COPY_METADATA, 0, -1);
    break;
  }
  gst_buffer_unmap(packet, &map);
  return out;
}

static GstPadProbeReturn name_every_source_in_bye(GstPad *pad, GstPadProbeInfo *info,
                                                  gpointer data) {
  const auto &rs = *static_cast<RtcpSession *>(data);
  {
    std::lock_guard<std::mutex> lock(rs.ended->mutex);
    if (!rs.ended->ids.count(rs.id)) return GST_PAD_PROBE_OK;
  }
  // (a compound without a BYE comes back unchanged: nullptr)
  GstBuffer *packet = GST_PAD_PROBE_INFO_BUFFER(info);
  GstBuffer *changed = bye_naming_all(packet, internal_ssrcs(rs));
  if (!changed) return GST_PAD_PROBE_OK;
  GST_DEBUG_OBJECT(pad, "BYEs of the session's other sources added to a BYE");
  gst_buffer_unref(packet);
  GST_PAD_PROBE_INFO_DATA(info) = changed;
  return GST_PAD_PROBE_OK;
}

static GstPadProbeReturn note_end_of_stream(GstPad *, GstPadProbeInfo *info, gpointer data) {
  const auto &rs = *static_cast<RtcpSession *>(data);
  const GstEventType type = GST_EVENT_TYPE(GST_PAD_PROBE_INFO_EVENT(info));
  std::lock_guard<std::mutex> lock(rs.ended->mutex);
  if (type == GST_EVENT_EOS)
    rs.ended->ids.insert(rs.id);
  else if (type == GST_EVENT_FLUSH_STOP || type == GST_EVENT_STREAM_START)
    rs.ended->ids.erase(rs.id);
  return GST_PAD_PROBE_OK;
}

// The RTPSession behind rtpbin's pad `pad` (a ghost of the rtpsession
// element's pad), a reference; nullptr where there is none. Taken here, not
// with rtpbin's "get-internal-session" in the probe: that takes rtpbin's lock
// in the RTCP thread, which rtpbin's release of the pad holds while it waits
// for that thread.
static GObject *session_behind(GstPad *pad) {
  if (!GST_IS_GHOST_PAD(pad)) return nullptr;
  GstPad *target = gst_ghost_pad_get_target(GST_GHOST_PAD(pad));
  if (!target) return nullptr;
  GstElement *element = gst_pad_get_parent_element(target);
  gst_object_unref(target);
  if (!element) return nullptr;
  GObject *session = nullptr;
  if (g_object_class_find_property(G_OBJECT_GET_CLASS(element), "internal-session"))
    g_object_get(element, "internal-session", &session, nullptr);
  gst_object_unref(element);
  return session;
}

static void note_sent(SentPackets *sent, GstBuffer *buf) {
  GstRTPBuffer rtp = GST_RTP_BUFFER_INIT;
  if (!gst_rtp_buffer_map(buf, GST_MAP_READ, &rtp)) return;
  const int pt = gst_rtp_buffer_get_payload_type(&rtp);
  const int seq = gst_rtp_buffer_get_seq(&rtp);
  gst_rtp_buffer_unmap(&rtp);
  int expected = -1;
  sent->pt.compare_exchange_strong(expected, pt);
  if (sent->pt.load() == pt) sent->last_seq.store(seq);
}

static GstPadProbeReturn on_rtp_sent(GstPad *, GstPadProbeInfo *info, gpointer data) {
  SentPackets *sent = static_cast<std::shared_ptr<SentPackets> *>(data)->get();
  if (info->type & GST_PAD_PROBE_TYPE_BUFFER) {
    note_sent(sent, GST_PAD_PROBE_INFO_BUFFER(info));
  } else if (info->type & GST_PAD_PROBE_TYPE_BUFFER_LIST) {
    GstBufferList *list = GST_PAD_PROBE_INFO_BUFFER_LIST(info);
    const guint n = gst_buffer_list_length(list);
    for (guint i = 0; i < n; ++i) note_sent(sent, gst_buffer_list_get(list, i));
  }
  return GST_PAD_PROBE_OK;
}

// rtpbin's pads of the sending side: the RTCP out (BYEs at the end), the RTP
// in (the end of the stream) and stream 0's RTP out (the packets sent, into
// `data`, the media's SentPackets).
static void on_rtpbin_pad(GstElement *rtpbin, GstPad *pad, gpointer data) {
  guint id = 0;
  if (sscanf(GST_PAD_NAME(pad), "send_rtp_src_%u", &id) == 1) {
    if (id != 0) return;
    auto *sent =
        new std::shared_ptr<SentPackets>(*static_cast<std::shared_ptr<SentPackets> *>(data));
    gst_pad_add_probe(pad,
                      GstPadProbeType(GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_BUFFER_LIST),
                      on_rtp_sent, sent,
                      [](gpointer p) { delete static_cast<std::shared_ptr<SentPackets> *>(p); });
    return;
  }
  const bool rtcp_out = sscanf(GST_PAD_NAME(pad), "send_rtcp_src_%u", &id) == 1;
  const bool rtp_in = !rtcp_out && sscanf(GST_PAD_NAME(pad), "send_rtp_sink_%u", &id) == 1;
  std::shared_ptr<EndedSessions> ended = ended_sessions(rtpbin);
  if (!ended || !(rtcp_out || rtp_in)) return;
  auto *rs = new RtcpSession{id, ended};
  auto destroy = [](gpointer p) { delete static_cast<RtcpSession *>(p); };
  if (rtcp_out) {
    rs->session = session_behind(pad);
    if (!rs->session)
      GST_WARNING_OBJECT(pad, "no RTP session behind the pad: BYEs stay as they are");
    gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_BUFFER, name_every_source_in_bye, rs, destroy);
  } else {
    gst_pad_add_probe(
        pad, GstPadProbeType(GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM | GST_PAD_PROBE_TYPE_EVENT_FLUSH),
        note_end_of_stream, rs, destroy);
  }
}

static gboolean cudadiff_media_setup_rtpbin(GstRTSPMedia *media, GstElement *rtpbin) {
  auto *self = reinterpret_cast<CudaDiffMedia *>(media);
  auto *parent = GST_RTSP_MEDIA_CLASS(cudadiff_media_parent_class);
  if (parent->setup_rtpbin && !parent->setup_rtpbin(media, rtpbin)) return FALSE;
  g_signal_connect(rtpbin, "deep-element-added", G_CALLBACK(on_rtpbin_element), nullptr);
  g_object_set_data_full(
      G_OBJECT(rtpbin), kEndedSessionsKey,
      new std::shared_ptr<EndedSessions>(std::make_shared<EndedSessions>()),
      [](gpointer p) { delete static_cast<std::shared_ptr<EndedSessions> *>(p); });
  g_signal_connect(rtpbin, "pad-added", G_CALLBACK(on_rtpbin_pad), self->sent);
  if (self->pace_rate > 0 || self->loss > 0)
    g_signal_connect(rtpbin, "request-rtp-encoder", G_CALLBACK(make_send_element), self);
  return TRUE;
}

static void cudadiff_media_finalize(GObject *object) {
  delete reinterpret_cast<CudaDiffMedia *>(object)->shared;
  delete reinterpret_cast<CudaDiffMedia *>(object)->sent;
  G_OBJECT_CLASS(cudadiff_media_parent_class)->finalize(object);
}

static void cudadiff_media_class_init(CudaDiffMediaClass *klass) {
  G_OBJECT_CLASS(klass)->finalize = cudadiff_media_finalize;
  GST_RTSP_MEDIA_CLASS(klass)->setup_rtpbin = cudadiff_media_setup_rtpbin;
}

static void cudadiff_media_init(CudaDiffMedia *self) {
  self->loss = 0;
  self->pace_rate = 0;
  self->pace_burst = 0;
  self->shared = nullptr;
  self->sent = new std::shared_ptr<SentPackets>(std::make_shared<SentPackets>());
}

namespace {

struct CudaDiffFactory {
  GstRTSPMediaFactory parent;
  SharedPtr *shared;
};
struct CudaDiffFactoryClass {
  GstRTSPMediaFactoryClass parent_class;
};

}  // namespace

G_DEFINE_TYPE(CudaDiffFactory, cudadiff_factory, GST_TYPE_RTSP_MEDIA_FACTORY)

// Keyframe requests at the encoder (force-key-unit events from rtpbin, for
// PLI/FIR, and the server's own for joining clients). One need makes many
// requests (every client asks, and asks again while the keyframe is on its
// way), and each keyframe goes to every client: a request is dropped while
// another one is pending, that is until the next keyframe leaves the
// encoder (at most one second, in case none comes).
constexpr gint64 kPendingKeyframeUs = 1000000;

static GstPadProbeReturn on_keyframe_request(GstPad *, GstPadProbeInfo *info, gpointer data) {
  Shared *impl = shared_of(data);
  GstEvent *event = GST_PAD_PROBE_INFO_EVENT(info);
  if (!gst_video_event_is_force_key_unit(event)) return GST_PAD_PROBE_OK;
  const gint64 now = g_get_monotonic_time();
  std::lock_guard<std::mutex> lock(impl->mutex);
  impl->stats.keyframe_requests++;
  if (impl->keyframe_requested_us > 0 && now - impl->keyframe_requested_us < kPendingKeyframeUs) {
    impl->stats.keyframe_requests_merged++;
    return GST_PAD_PROBE_DROP;
  }
  impl->keyframe_requested_us = now;
  return GST_PAD_PROBE_OK;
}

// The end of the media's stream (a still image, a file that cannot be played
// again) leaves the encoder: later viewers get a media of their own.
static GstPadProbeReturn on_encoder_event(GstPad *, GstPadProbeInfo *info, gpointer data) {
  if (GST_EVENT_TYPE(GST_PAD_PROBE_INFO_EVENT(info)) != GST_EVENT_EOS) return GST_PAD_PROBE_OK;
  Shared *impl = shared_of(data);
  std::lock_guard<std::mutex> lock(impl->mutex);
  impl->ended_medias++;
  return GST_PAD_PROBE_OK;
}

static GstPadProbeReturn on_encoded(GstPad *, GstPadProbeInfo *info, gpointer data) {
  Shared *impl = shared_of(data);
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER(info);
  if (GST_BUFFER_FLAG_IS_SET(buf, GST_BUFFER_FLAG_HEADER) ||
      GST_BUFFER_FLAG_IS_SET(buf, GST_BUFFER_FLAG_DELTA_UNIT))
    return GST_PAD_PROBE_OK;
  std::lock_guard<std::mutex> lock(impl->mutex);
  impl->keyframe_requested_us = 0;
  impl->stats.keyframes++;
  return GST_PAD_PROBE_OK;
}

// The end of the stream is held back a moment at the payloader's output
// (the capsfilter's sink pad in the pay0 bin). rtpbin sends an RTCP BYE as
// soon as the end of the stream reaches it, and rtspsrc ends the viewer's
// stream at that BYE: what its RTP socket holds then is never read. The last
// frame's packets were still on their way (in the senders' queues, in the
// viewer's socket), so a viewer over UDP lost the last frame, and of a still
// image played once everything (its decoder then failed with "No valid
// frames decoded").
//
// A receiver finds a lost packet by the gap before the next one, so it never
// finds the loss of a stream's last packets: no packet comes after them.
// While the end is held back, the last packet is sent again (twice): where
// the last packets were lost, the copy shows the gap, and the viewer asks for
// them (NACK) in time; where they arrived, the viewer's jitter buffer drops
// the copy. The wait ends early when the media is being shut down.
//
// With pacing, the last frame's packets leave the server later than they
// pass here: up to the frame's bytes at --pace-rate (a large keyframe at a
// low rate, seconds). The times below count from when the pacer will have
// sent the last packet, by the pacer's own rate applied to every packet
// that passes (retransmissions, which share the pacer, can only make it
// later; the burst it allows, earlier).
constexpr gint64 kEosHoldBackUs = 500000;
constexpr gint64 kTailResendUs[] = {50000, 200000};  // after the last packet left

namespace {
struct TailState {
  explicit TailState(double pace_rate) : pace_rate(pace_rate) {}
  const double pace_rate;     // bytes per second; 0: no pacing
  std::mutex mutex;           // guards what follows
  GstBuffer *last = nullptr;  // the last RTP packet that passed
  gint64 paced_until_us = 0;  // when the pacer will have sent what passed
  ~TailState() { gst_clear_buffer(&last); }
};
}  // namespace

static void remember_last(TailState *tail, GstBuffer *buf, guint64 bytes) {
  std::lock_guard<std::mutex> lock(tail->mutex);
  gst_buffer_replace(&tail->last, buf);
  if (tail->pace_rate > 0 && bytes > 0) {
    const gint64 now = g_get_monotonic_time();
    tail->paced_until_us =
        std::max(now, tail->paced_until_us) + gint64(double(bytes) / tail->pace_rate * 1e6);
  }
}

static guint64 list_bytes(GstBufferList *list) {
  guint64 bytes = 0;
  for (guint i = 0, n = gst_buffer_list_length(list); i < n; ++i)
    bytes += gst_buffer_get_size(gst_buffer_list_get(list, i));
  return bytes;
}

static GstPadProbeReturn hold_back_eos(GstPad *pad, GstPadProbeInfo *info, gpointer data) {
  auto *tail = static_cast<TailState *>(data);
  if (info->type & GST_PAD_PROBE_TYPE_BUFFER) {
    GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER(info);
    remember_last(tail, buf, gst_buffer_get_size(buf));
    return GST_PAD_PROBE_OK;
  }
  if (info->type & GST_PAD_PROBE_TYPE_BUFFER_LIST) {
    GstBufferList *list = GST_PAD_PROBE_INFO_BUFFER_LIST(info);
    const guint n = gst_buffer_list_length(list);
    if (n > 0) remember_last(tail, gst_buffer_list_get(list, n - 1), list_bytes(list));
    return GST_PAD_PROBE_OK;
  }
  if (!(info->type & GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM)) return GST_PAD_PROBE_OK;
  GstEvent *event = GST_PAD_PROBE_INFO_EVENT(info);
  if (GST_EVENT_TYPE(event) == GST_EVENT_FLUSH_STOP) {
    std::lock_guard<std::mutex> lock(tail->mutex);
    gst_clear_buffer(&tail->last);
    tail->paced_until_us = 0;  // the pacer drops what it held
  }
  if (GST_EVENT_TYPE(event) != GST_EVENT_EOS) return GST_PAD_PROBE_OK;
  gint64 start = g_get_monotonic_time();
  {
    std::lock_guard<std::mutex> lock(tail->mutex);
    if (tail->paced_until_us > start) {
      GST_DEBUG("end of stream: the pacer sends the last packet in %" G_GINT64_FORMAT " ms",
                (tail->paced_until_us - start) / 1000);
      start = tail->paced_until_us;
    }
  }
  size_t resent = 0;
  while (!GST_PAD_IS_FLUSHING(pad)) {
    const gint64 now = g_get_monotonic_time();
    if (now - start >= kEosHoldBackUs) break;
    if (resent < G_N_ELEMENTS(kTailResendUs) && now - start >= kTailResendUs[resent]) {
      ++resent;
      GstBuffer *copy = nullptr;
      {
        std::lock_guard<std::mutex> lock(tail->mutex);
        if (tail->last) copy = gst_buffer_ref(tail->last);
      }
      // This pad has not taken the end yet (its probes run first): the copy
      // goes the way of every packet, through the capsfilter into rtpbin.
      if (copy && gst_pad_chain(pad, copy) != GST_FLOW_OK)
        GST_DEBUG("the last packet, sent again, was not taken");
    }
    g_usleep(10000);
  }
  return GST_PAD_PROBE_OK;
}

// A source played again from its start at its end (Options::loop). At the
// sink pad of the source's element named "loop" (or of the server's queue
// after the source): EOS is held back and a flushing seek to the start goes
// upstream from another thread. Its flushes (known by the seek's sequence
// number) stop at this pad, so what comes after (the clock's wait, the
// encoder, the RTP sessions) sees one stream: each run's timestamps and
// segments are moved on to where the run before ended, in stream time (the
// encoder's packets carry it) and in running time. Where the source cannot
// seek, the EOS goes on after a warning. The media answers that it cannot
// seek (add_no_seeking(), as every media does); a flushing seek that comes
// all the same (an application's) passes, and the loop starts counting
// again from it.
namespace {

struct LoopState {
  std::mutex mutex;    // everything below
  GstSegment segment;  // the last segment sent on (moved)
  bool have_segment = false;
  GstClockTime shift = 0;        // added to the timestamps of this run
  GstClockTime base_offset = 0;  // added to the base of this run's segments
  GstClockTime end_pts = 0;      // where the frames so far end (moved timestamps)
  GstClockTime end_running = 0;  // the same in running time
  GstClockTime interval = 0;     // between the last two frames (for frames without a duration)
  GstClockTime last_pts = GST_CLOCK_TIME_NONE;
  GstClockTime run_start_pts = 0;  // end_pts when this run began
  bool seeking = false;            // our seek's segment is on its way
  guint32 seek_seqnum = GST_SEQNUM_INVALID;
  bool ended = false;  // the source could not seek, or a run took no time: its EOS passes
  guint64 runs = 1;
  // Frames without a timestamp are timed one interval apart: the caps'
  // framerate's, else untimed_interval (Options::untimed_fps).
  GstClockTime caps_interval = 0;
  GstClockTime untimed_interval = GST_SECOND / 30;
  bool warned_untimed = false;
  bool dropping_flush = false;  // the loop's flush started: its stop is dropped too

  // After a flush that is not ours: running time starts again at 0.
  void restart() {
    shift = base_offset = end_pts = end_running = interval = run_start_pts = 0;
    last_pts = GST_CLOCK_TIME_NONE;
    seeking = false;
    seek_seqnum = GST_SEQNUM_INVALID;
    ended = false;
  }
};

// Seeks the source back to its start: in time, or else to its first byte
// (a file without an index of times, such as JPEG frames in multipart).
void loop_seek(GstElement *element, gpointer data) {
  auto *st = static_cast<LoopState *>(data);
  GstPad *pad = gst_element_get_static_pad(element, "sink");
  auto seek_to_start = [&](GstFormat format) {
    GstEvent *seek = gst_event_new_seek(1.0, format, GST_SEEK_FLAG_FLUSH, GST_SEEK_TYPE_SET, 0,
                                        GST_SEEK_TYPE_NONE, -1);
    {
      std::lock_guard<std::mutex> lock(st->mutex);
      st->seeking = true;
      st->seek_seqnum = gst_event_get_seqnum(seek);
    }
    return gst_pad_push_event(pad, seek) != FALSE;
  };
  if (!seek_to_start(GST_FORMAT_TIME) && !seek_to_start(GST_FORMAT_BYTES)) {
    {
      std::lock_guard<std::mutex> lock(st->mutex);
      st->seeking = false;
      st->ended = true;
    }
    // (not when the media is being shut down: its pads are flushing then)
    if (!GST_PAD_IS_FLUSHING(pad))
      GST_ELEMENT_WARNING(element, STREAM, FAILED,
                          ("The source cannot seek back to its start: it is played once"),
                          ("a seek to its start at its end failed, in time and in bytes"));
    gst_pad_send_event(pad, gst_event_new_eos());
  }
  gst_object_unref(pad);
}

GstPadProbeReturn on_loop_pad(GstPad *pad, GstPadProbeInfo *info, gpointer data) {
  auto *st = static_cast<LoopState *>(data);
  if (info->type & GST_PAD_PROBE_TYPE_BUFFER) {
    std::lock_guard<std::mutex> lock(st->mutex);
    GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER(info);
    if (st->shift > 0) {
      buf = gst_buffer_make_writable(buf);
      if (GST_BUFFER_PTS_IS_VALID(buf)) GST_BUFFER_PTS(buf) += st->shift;
      if (GST_BUFFER_DTS_IS_VALID(buf)) GST_BUFFER_DTS(buf) += st->shift;
      GST_PAD_PROBE_INFO_DATA(info) = buf;
    }
    if (st->have_segment && !GST_BUFFER_PTS_IS_VALID(buf)) {
      // A frame without a timestamp (JPEG frames in multipart): clocksync
      // would pass it at once, a whole file in a burst, and the run would
      // take no time. It follows the frame before by an interval; the
      // first of a run comes where the run begins, without a duration, so
      // that a single one (a still image) still takes no time.
      const GstClockTime interval = st->caps_interval ? st->caps_interval : st->untimed_interval;
      buf = gst_buffer_make_writable(buf);
      if (GST_CLOCK_TIME_IS_VALID(st->last_pts)) {
        GST_BUFFER_PTS(buf) = st->last_pts + interval;
        GST_BUFFER_DURATION(buf) = interval;
        if (!st->warned_untimed) {
          st->warned_untimed = true;
          GST_ELEMENT_WARNING(GST_PAD_PARENT(pad), STREAM, FORMAT,
                              ("The source's frames carry no timestamps: they are played at "
                               "%.5g frames per second",
                               double(GST_SECOND) / double(interval)),
                              ("one frame interval apart: its caps' framerate, or the server's "
                               "rate for untimed frames where they name none"));
        }
      } else {
        // (not before the segment: the encoder would drop it)
        GST_BUFFER_PTS(buf) = std::max(st->end_pts, st->segment.start);
      }
      GST_PAD_PROBE_INFO_DATA(info) = buf;
    }
    if (!st->have_segment || !GST_BUFFER_PTS_IS_VALID(buf)) return GST_PAD_PROBE_OK;
    const GstClockTime pts = GST_BUFFER_PTS(buf);
    if (GST_CLOCK_TIME_IS_VALID(st->last_pts) && pts > st->last_pts)
      st->interval = pts - st->last_pts;
    st->last_pts = pts;
    const GstClockTime duration =
        GST_BUFFER_DURATION_IS_VALID(buf) ? GST_BUFFER_DURATION(buf) : st->interval;
    const GstClockTime running = gst_segment_to_running_time(&st->segment, GST_FORMAT_TIME, pts);
    st->end_pts = std::max(st->end_pts, pts + duration);
    if (GST_CLOCK_TIME_IS_VALID(running))
      st->end_running = std::max(st->end_running, running + duration);
    return GST_PAD_PROBE_OK;
  }
  GstEvent *event = GST_PAD_PROBE_INFO_EVENT(info);
  std::lock_guard<std::mutex> lock(st->mutex);
  switch (GST_EVENT_TYPE(event)) {
    // The loop's seek's flush (downstream never sees it): by its seqnum, or
    // one that starts while that seek is on its way (a seek in bytes: a
    // demuxer, such as multipartdemux, may flush with a seqnum of its own).
    // Its stop goes with its start, dropped or passed alike.
    case GST_EVENT_FLUSH_START:
      if (gst_event_get_seqnum(event) == st->seek_seqnum || st->seeking) {
        st->dropping_flush = true;
        return GST_PAD_PROBE_DROP;
      }
      return GST_PAD_PROBE_OK;
    case GST_EVENT_FLUSH_STOP:
      if (st->dropping_flush || gst_event_get_seqnum(event) == st->seek_seqnum) {
        st->dropping_flush = false;
        return GST_PAD_PROBE_DROP;
      }
      GST_DEBUG_OBJECT(pad, "a flush not of the loop: its counts start again");
      st->restart();
      return GST_PAD_PROBE_OK;
    case GST_EVENT_CAPS: {
      GstCaps *caps = nullptr;
      gst_event_parse_caps(event, &caps);
      gint n = 0, d = 0;
      st->caps_interval = 0;
      if (caps && gst_caps_get_size(caps) > 0 &&
          gst_structure_get_fraction(gst_caps_get_structure(caps, 0), "framerate", &n, &d) &&
          n > 0 && d > 0)
        st->caps_interval = gst_util_uint64_scale_int(GST_SECOND, d, n);
      return GST_PAD_PROBE_OK;
    }
    case GST_EVENT_SEGMENT: {
      const GstSegment *in = nullptr;
      gst_event_parse_segment(event, &in);
      const bool new_run = st->seeking;
      st->seeking = false;
      if (in->format != GST_FORMAT_TIME) {
        st->have_segment = false;
        return GST_PAD_PROBE_OK;
      }
      if (new_run) {
        // The new run starts where the frames before it ended.
        st->shift = st->end_pts > in->start ? st->end_pts - in->start : 0;
        st->base_offset = st->end_running > in->base ? st->end_running - in->base : 0;
        st->last_pts = GST_CLOCK_TIME_NONE;
      }
      GstSegment moved;
      gst_segment_copy_into(in, &moved);
      moved.base += st->base_offset;
      moved.start += st->shift;
      if (GST_CLOCK_TIME_IS_VALID(moved.stop)) moved.stop += st->shift;
      if (GST_CLOCK_TIME_IS_VALID(moved.time)) moved.time += st->shift;
      if (GST_CLOCK_TIME_IS_VALID(moved.position)) moved.position += st->shift;
      st->segment = moved;
      st->have_segment = true;
      if (st->shift > 0 || st->base_offset > 0) {
        GstEvent *out = gst_event_new_segment(&moved);
        gst_event_set_seqnum(out, gst_event_get_seqnum(event));
        gst_event_unref(event);
        GST_PAD_PROBE_INFO_DATA(info) = out;
      }
      return GST_PAD_PROBE_OK;
    }
    case GST_EVENT_EOS:
      if (st->ended || st->seeking) return GST_PAD_PROBE_OK;
      if (st->end_pts <= st->run_start_pts) {
        // A still image (one frame without a duration), or no frame: played
        // again, it would come back at once, again and again.
        st->ended = true;
        GST_ELEMENT_WARNING(GST_PAD_PARENT(pad), STREAM, FAILED,
                            ("The source's run took no time (a still image?): it is played once"),
                            ("no frame with a later end than the run before"));
        return GST_PAD_PROBE_OK;
      }
      st->run_start_pts = st->end_pts;
      st->runs++;
      GST_INFO_OBJECT(pad,
                      "the source ended: played again from its start (run %" G_GUINT64_FORMAT ")",
                      st->runs);
      gst_element_call_async(GST_PAD_PARENT(pad), loop_seek, st, nullptr);
      return GST_PAD_PROBE_DROP;
    default:
      return GST_PAD_PROBE_OK;
  }
}

// Every media answers that it cannot seek: it is one live stream shared by
// its viewers, and rtsp-server seeks it for a PLAY with a Range (an RTSP
// client may send `Range: npt=0-`), which took the stream back for every
// viewer watching (a test source's pattern jumped) and at times ended in an
// assertion inside rtsp-server.
GstPadProbeReturn refuse_seeking(GstPad *, GstPadProbeInfo *info, gpointer) {
  GstQuery *query = GST_PAD_PROBE_INFO_QUERY(info);
  if (GST_QUERY_TYPE(query) != GST_QUERY_SEEKING) return GST_PAD_PROBE_OK;
  GstFormat format = GST_FORMAT_UNDEFINED;
  gst_query_parse_seeking(query, &format, nullptr, nullptr, nullptr);
  gst_query_set_seeking(query, format, FALSE, 0, -1);
  return GST_PAD_PROBE_HANDLED;
}

void add_no_seeking(GstElement *source) {
  GstElement *queue = gst_bin_get_by_name(GST_BIN(source), "sourcequeue");
  GstPad *pad = gst_element_get_static_pad(queue, "src");
  gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_QUERY_UPSTREAM, refuse_seeking, nullptr, nullptr);
  gst_object_unref(pad);
  gst_object_unref(queue);
}

void add_loop(GstElement *source, int untimed_fps) {
  GstElement *at = gst_bin_get_by_name(GST_BIN(source), "loop");
  if (!at) at = gst_bin_get_by_name(GST_BIN(source), "sourcequeue");
  GstPad *pad = gst_element_get_static_pad(at, "sink");
  auto *st = new LoopState();
  gst_segment_init(&st->segment, GST_FORMAT_TIME);
  if (untimed_fps > 0) st->untimed_interval = GST_SECOND / guint64(untimed_fps);
  gst_pad_add_probe(
      pad,
      GstPadProbeType(GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM |
                      GST_PAD_PROBE_TYPE_EVENT_FLUSH),
      on_loop_pad, st, [](gpointer p) { delete static_cast<LoopState *>(p); });
  gst_object_unref(pad);
  gst_object_unref(at);
}

}  // namespace

// The media: source ! queue ! videoconvert ! cudadiffenc ! pay0, where pay0
// is a bin of rtpgstpay and a capsfilter that adds the RTCP feedback the
// server answers (NACK, PLI, FIR) to the caps, hence to the SDP.
static GstElement *cudadiff_factory_create_element(GstRTSPMediaFactory *factory,
                                                   const GstRTSPUrl *) {
  const SharedPtr &shared = *reinterpret_cast<CudaDiffFactory *>(factory)->shared;
  Shared *impl = shared.get();
  const Options &o = impl->options;
  const std::string description =
      o.source +
      " ! queue name=sourcequeue max-size-buffers=4 ! videoconvert ! cudadiffenc "
      "name=enc " +
      o.encoder_properties;
  GError *err = nullptr;
  // (Unlinked pads are not ghosted: a decodebin's pads link later.)
  GstElement *source = gst_parse_bin_from_description(description.c_str(), FALSE, &err);
  if (!source) {
    impl->set_error(std::string("media: ") + (err ? err->message : "cannot parse") + ": " +
                    description);
    g_clear_error(&err);
    return nullptr;
  }
  g_clear_error(&err);
  if (o.loop) add_loop(source, o.untimed_fps);
  add_no_seeking(source);
  {
    GstElement *enc = gst_bin_get_by_name(GST_BIN(source), "enc");
    GstPad *enc_src = gst_element_get_static_pad(enc, "src");
    gst_element_add_pad(source, gst_ghost_pad_new("src", enc_src));
    gst_object_unref(enc_src);
    gst_object_unref(enc);
  }
  GstElement *pay = gst_element_factory_make("rtpgstpay", "pay");
  GstElement *feedback = gst_element_factory_make("capsfilter", nullptr);
  if (!pay || !feedback) {
    impl->set_error("media: rtpgstpay or capsfilter is missing (gst-plugins-good, -base)");
    if (pay) gst_object_unref(pay);
    if (feedback) gst_object_unref(feedback);
    gst_object_unref(source);
    return nullptr;
  }
  GstElement *top = gst_bin_new(nullptr);
  GstElement *pay_bin = gst_bin_new("pay0");
  GstCaps *caps = gst_caps_from_string(
      "application/x-rtp, rtcp-fb-nack=(boolean)true, rtcp-fb-nack-pli=(boolean)true, "
      "rtcp-fb-ccm-fir=(boolean)true");
  g_object_set(feedback, "caps", caps, nullptr);
  gst_caps_unref(caps);
  gst_bin_add_many(GST_BIN(pay_bin), pay, feedback, nullptr);
  gst_element_link(pay, feedback);
  GstPad *pad = gst_element_get_static_pad(pay, "sink");
  gst_element_add_pad(pay_bin, gst_ghost_pad_new("sink", pad));
  gst_object_unref(pad);
  pad = gst_element_get_static_pad(feedback, "sink");
  gst_pad_add_probe(
      pad,
      GstPadProbeType(GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM | GST_PAD_PROBE_TYPE_EVENT_FLUSH |
                      GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_BUFFER_LIST),
      hold_back_eos, new TailState(o.pace_rate_mbit * 1e6 / 8),
      [](gpointer data) { delete static_cast<TailState *>(data); });
  gst_object_unref(pad);
  pad = gst_element_get_static_pad(feedback, "src");
  gst_element_add_pad(pay_bin, gst_ghost_pad_new("src", pad));
  gst_object_unref(pad);
  gst_bin_add_many(GST_BIN(top), source, pay_bin, nullptr);
  if (!gst_element_link(source, pay_bin)) {
    impl->set_error("media: the source does not link to cudadiffenc and rtpgstpay: " + description);
    gst_object_unref(top);
    return nullptr;
  }
  if (GstElement *enc = gst_bin_get_by_name(GST_BIN(top), "enc")) {
    GstPad *src = gst_element_get_static_pad(enc, "src");
    gst_pad_add_probe(src, GST_PAD_PROBE_TYPE_EVENT_UPSTREAM, on_keyframe_request, new_ref(shared),
                      delete_ref);
    gst_pad_add_probe(src, GST_PAD_PROBE_TYPE_BUFFER, on_encoded, new_ref(shared), delete_ref);
    gst_pad_add_probe(src, GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM, on_encoder_event, new_ref(shared),
                      delete_ref);
    gst_object_unref(src);
    gst_object_unref(enc);
  }
  {
    std::lock_guard<std::mutex> lock(impl->mutex);
    impl->stats.medias++;
  }
  if (o.on_media) o.on_media(top);
  return top;
}

static void cudadiff_factory_finalize(GObject *object);

// One media for every viewer of the mount point, whatever the URL it asked
// for: rtsp-server's default key is the request URL, so viewers whose URLs
// differed (a host name instead of the address, for one) got a media each,
// with a source and an encoder each (a camera busy with the first then
// fails the second).
//
// Until the media's stream has ended (a still image, or a file that cannot be
// played again, played once): a viewer that joined such a media while an
// earlier one was still connected to it got no frame, no end of stream and no
// error, for as long as it stayed. The key counts the medias that ended, so
// a viewer that comes after the end gets a new media, played from its start.
static gchar *cudadiff_factory_gen_key(GstRTSPMediaFactory *factory, const GstRTSPUrl *) {
  Shared *impl = reinterpret_cast<CudaDiffFactory *>(factory)->shared->get();
  std::lock_guard<std::mutex> lock(impl->mutex);
  return g_strdup_printf("cudadiff-%" G_GUINT64_FORMAT, impl->ended_medias);
}

static void cudadiff_factory_class_init(CudaDiffFactoryClass *klass) {
  G_OBJECT_CLASS(klass)->finalize = cudadiff_factory_finalize;
  GST_RTSP_MEDIA_FACTORY_CLASS(klass)->create_element = cudadiff_factory_create_element;
  GST_RTSP_MEDIA_FACTORY_CLASS(klass)->gen_key = cudadiff_factory_gen_key;
}

static void cudadiff_factory_finalize(GObject *object) {
  delete reinterpret_cast<CudaDiffFactory *>(object)->shared;
  G_OBJECT_CLASS(cudadiff_factory_parent_class)->finalize(object);
}

static void cudadiff_factory_init(CudaDiffFactory *self) {
  self->shared = nullptr;
}

// ---------------------------------------------------------------------------
// The server.

namespace {

// The media's settings, before it is prepared (setup_rtpbin comes later).
// The first error of a media's pipeline is kept (Server::error()), as it is
// posted: one that stops the media from starting (a camera that is not
// there) is gone from the bus before rtsp-server's watch would see it.
// Warnings go to Options::on_warning.
GstBusSyncReply record_error(GstBus *, GstMessage *message, gpointer data) {
  if (GST_MESSAGE_TYPE(message) == GST_MESSAGE_ERROR) {
    GError *err = nullptr;
    gchar *debug = nullptr;
    gst_message_parse_error(message, &err, &debug);
    shared_of(data)->set_error(std::string(GST_OBJECT_NAME(GST_MESSAGE_SRC(message))) + ": " +
                               err->message + (debug ? std::string(" (") + debug + ")" : ""));
    g_clear_error(&err);
    g_free(debug);
  } else if (GST_MESSAGE_TYPE(message) == GST_MESSAGE_WARNING) {
    const Options &o = shared_of(data)->options;
    if (o.on_warning) {
      GError *err = nullptr;
      gst_message_parse_warning(message, &err, nullptr);
      o.on_warning(std::string(GST_OBJECT_NAME(GST_MESSAGE_SRC(message))) + ": " + err->message);
      g_clear_error(&err);
    }
  }
  return GST_BUS_PASS;
}

// The media's network senders (gst-rtsp-server's, added to the media's
// pipeline as viewers come):
// - they send each packet at once: the source is live (a file is played in
//   real time before the encoder), so waiting for the clock there would only
//   add the pipeline's latency;
// - they do not hold each other back. rtsp-server feeds them from one tee
//   per stream, each through a queue of one buffer: the UDP viewers' sender,
//   and an appsink whose thread hands packets to the TCP viewers' connections.
//   Whenever that thread fell behind, the tee waited for it, and with it every
//   UDP viewer's packets: with viewers over TCP coming and going, a UDP
//   viewer's jitter went from 0.05-0.2 ms to 7.5 ms, and its NACKs for
//   packets that were only late made 3-8 % of its packets come twice (which
//   part of rtsp-server's TCP path falls behind then was not pinned down).
//   Each branch's queue now holds up to kSenderQueueBytes, so a branch that
//   falls behind catches up by itself; when full, it drops its oldest
//   packets rather than stop the tee (a viewer over TCP slower than the
//   stream, with no faster TCP viewer beside it, gets that far behind, then
//   loses packets; one beside a faster one, and one that stops reading, is
//   closed: watch_clients()).
constexpr guint kSenderQueueBytes = 32u << 20;

// What an appsink of rtsp-server's sender to TCP viewers has taken, for
// wake_stuck_senders().
struct SinkWatch {
  std::atomic<guint64> taken{0};    // buffers and lists that reached it
  std::atomic<bool> undrop{false};  // the next buffer sets "drop" back (wake_stuck_senders())
  guint64 last = 0;                 // `taken` at the last tick (server's thread only)
  guint64 tick = 0;                 // the last tick that looked at it (server's thread only)
  bool woke = false;                // "drop" set at that tick (server's thread only)
};
constexpr const char *kSinkWatchKey = "cudadiff-sink-watch";

void watch_appsink(GstElement *appsink) {
  if (g_object_get_data(G_OBJECT(appsink), kSinkWatchKey)) return;
  GstPad *pad = gst_element_get_static_pad(appsink, "sink");
  if (!pad) return;
  auto *watch = new SinkWatch();
  gst_pad_add_probe(
      pad, GstPadProbeType(GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_BUFFER_LIST),
      [](GstPad *pad, GstPadProbeInfo *, gpointer data) {
        auto *watch = static_cast<SinkWatch *>(data);
        watch->taken++;
        // (In the streaming thread, before the appsink sees the buffer.)
        if (watch->undrop.exchange(false))
          g_object_set(GST_PAD_PARENT(pad), "drop", FALSE, nullptr);
        return GST_PAD_PROBE_OK;
      },
      watch, nullptr);
  // (The probe goes with the pad, before the appsink's data goes.)
  g_object_set_data_full(G_OBJECT(appsink), kSinkWatchKey, watch,
                         [](gpointer p) { delete static_cast<SinkWatch *>(p); });
  gst_object_unref(pad);
}

void configure_sender(GstBin *pipeline, GstBin *parent, GstElement *element, gpointer) {
  GstElementFactory *factory = gst_element_get_factory(element);
  if (!factory) return;
  const char *name = GST_OBJECT_NAME(factory);
  if (g_strcmp0(name, "multiudpsink") == 0 || g_strcmp0(name, "appsink") == 0)
    g_object_set(element, "sync", FALSE, nullptr);
  if (g_strcmp0(name, "appsink") == 0) watch_appsink(element);
  // (The media's own queues are inside its bin and rtpbin; rtsp-server adds
  // the senders' queues to the pipeline itself.)
  if (parent == pipeline && g_strcmp0(name, "queue") == 0)
    g_object_set(element, "max-size-buffers", 0u, "max-size-time", guint64(0), "max-size-bytes",
                 kSenderQueueBytes, "leaky", 2 /* downstream: the oldest go */, nullptr);
}

void on_media_configure(GstRTSPMediaFactory *, GstRTSPMedia *media, gpointer data) {
  Shared *impl = shared_of(data);
  auto *m = reinterpret_cast<CudaDiffMedia *>(media);
  m->loss = impl->options.simulate_loss;
  m->pace_rate = impl->options.pace_rate_mbit * 1e6 / 8;
  m->pace_burst = double(impl->options.pace_burst_bytes);
  delete m->shared;
  m->shared = new SharedPtr(*static_cast<SharedPtr *>(data));
  {
    // Medias that ended (every client left) are let go.
    std::lock_guard<std::mutex> lock(impl->mutex);
    auto &list = impl->medias;
    for (auto it = list.begin(); it != list.end();) {
      if (gst_rtsp_media_get_status(*it) == GST_RTSP_MEDIA_STATUS_UNPREPARED) {
        g_object_unref(*it);
        it = list.erase(it);
      } else {
        ++it;
      }
    }
    list.push_back(GST_RTSP_MEDIA(g_object_ref(media)));
  }
  GstElement *element = gst_rtsp_media_get_element(media);
  if (GstObject *pipeline = gst_object_get_parent(GST_OBJECT(element))) {
    g_signal_connect(pipeline, "deep-element-added", G_CALLBACK(configure_sender), nullptr);
    GstBus *bus = gst_element_get_bus(GST_ELEMENT(pipeline));
    gst_bus_set_sync_handler(bus, record_error, new_ref(*static_cast<SharedPtr *>(data)),
                             delete_ref);
    gst_object_unref(bus);
    gst_object_unref(pipeline);
  }
  gst_object_unref(element);
}

void on_play_request(GstRTSPClient *, GstRTSPContext *ctx, gpointer data) {
  Shared *impl = shared_of(data);
  {
    std::lock_guard<std::mutex> lock(impl->mutex);
    impl->stats.plays++;
  }
  if (!impl->options.keyframe_on_join || !ctx->media) return;
  GstElement *element = gst_rtsp_media_get_element(ctx->media);
  if (!element) return;
  if (GstElement *enc = gst_bin_get_by_name(GST_BIN(element), "enc")) {
    // all-headers: the stream header (colorimetry) goes out again before it.
    GstEvent *event = gst_video_event_new_upstream_force_key_unit(GST_CLOCK_TIME_NONE, TRUE, 0);
    GstPad *src = gst_element_get_static_pad(enc, "src");
    {
      std::lock_guard<std::mutex> lock(impl->mutex);
      impl->stats.join_keyframes++;
    }
    gst_pad_send_event(src, event);
    gst_object_unref(src);
    gst_object_unref(enc);
  }
  gst_object_unref(element);
}

// What watch_clients() saw of a client's connection the last time.
struct StallWatch {
  guint64 acked = 0;    // bytes the peer had acknowledged at `since_us`
  gint64 since_us = 0;  // since when nothing more was acknowledged with data queued
  bool seen = false;
  int dropped_ticks = 0;  // ticks in a row with a viewer rtsp-server no longer sends to
};
constexpr const char *kStallWatchKey = "cudadiff-stall-watch";

void on_client_closed(GstRTSPClient *, gpointer data) {
  Shared *impl = shared_of(data);
  std::lock_guard<std::mutex> lock(impl->mutex);
  if (impl->stats.clients_now > 0) impl->stats.clients_now--;
}

// The PLAY response tells rtspsrc how often it may send RTCP (the
// RTCP-Interval header sets its session's rtcp-min-interval): with RTP/AVPF
// a receiver sends one early feedback packet (NACK, PLI) per regular RTCP
// interval, which is 5 s by default, too rare for retransmissions to come in
// time. Other clients ignore the header.
//
// It also corrects the sequence number in RTP-Info for a viewer joining a
// stream that is already playing. gst-rtsp-server gives there the number
// of the last packet its UDP sender sent (or of a retransmission, whose
// numbers are another stream's), while the viewer's first packet is the one
// after the stream's last: rtspsrc's jitter buffer then waits for the one
// named, asks for it again, throws the retransmission away (it cannot time
// it) and shows nothing for its whole latency (2 s by default), for 10 of
// 25 viewers joining a running stream together over UDP. The number becomes
// the one after the last packet of the stream that has left rtpbin; a
// stream still blocked (its first viewer) names the packet waiting, which
// is right.
void on_send_message(GstRTSPClient *, GstRTSPContext *ctx, GstRTSPMessage *message, gpointer data) {
  Shared *impl = shared_of(data);
  if (!ctx || ctx->method != GST_RTSP_PLAY ||
      gst_rtsp_message_get_type(message) != GST_RTSP_MESSAGE_RESPONSE)
    return;
  if (impl->options.rtcp_interval_ms != 0)
    gst_rtsp_message_add_header(message, GST_RTSP_HDR_RTCP_INTERVAL,
                                std::to_string(impl->options.rtcp_interval_ms).c_str());
  if (!ctx->media || !G_TYPE_CHECK_INSTANCE_TYPE(ctx->media, cudadiff_media_get_type()) ||
      gst_rtsp_media_n_streams(ctx->media) != 1)
    return;
  GstRTSPStream *stream = gst_rtsp_media_get_stream(ctx->media, 0);
  gchar *info = nullptr;
  if (!stream || gst_rtsp_stream_is_blocking(stream) ||
      gst_rtsp_message_get_header(message, GST_RTSP_HDR_RTP_INFO, &info, 0) != GST_RTSP_OK)
    return;
  const int last_sent = reinterpret_cast<CudaDiffMedia *>(ctx->media)->sent->get()->last_seq;
  if (last_sent < 0) return;
  const std::string corrected = rtp_info_with_seq(info, unsigned(last_sent) + 1);
  if (corrected.empty()) return;
  GST_DEBUG("RTP-Info of a PLAY response: %s instead of %s", corrected.c_str(), info);
  gst_rtsp_message_remove_header(message, GST_RTSP_HDR_RTP_INFO, -1);
  gst_rtsp_message_add_header(message, GST_RTSP_HDR_RTP_INFO, corrected.c_str());
}

void connect_shared(gpointer instance, const char *signal, GCallback callback, gpointer data) {
  g_signal_connect_data(instance, signal, callback, new_ref(*static_cast<SharedPtr *>(data)),
                        delete_ref_closure, GConnectFlags(0));
}

void on_new_session(GstRTSPClient *, GstRTSPSession *session, gpointer data) {
  gst_rtsp_session_set_timeout(session, shared_of(data)->options.session_timeout_s);
}

void on_client_connected(GstRTSPServer *, GstRTSPClient *client, gpointer data) {
  Shared *impl = shared_of(data);
  {
    std::lock_guard<std::mutex> lock(impl->mutex);
    impl->stats.clients_connected++;
    impl->stats.clients_now++;
  }
  // A client whose session has ended (timed out: a viewer over UDP that
  // froze or whose network went away, sending no RTCP and no keep-alive; or
  // torn down) has its connection closed 5 s later unless it sets up a new
  // session on it meanwhile. rtsp-server 1.22 keeps it open by default
  // (post-session-timeout -1) for as long as the peer's TCP connection
  // lives, which for a peer that is gone is for ever: the server kept a
  // socket and a client for each such viewer for as long as it ran, and
  // counted it among the clients connected.
  g_object_set(client, "post-session-timeout", 5, nullptr);
  connect_shared(client, "new-session", G_CALLBACK(on_new_session), data);
  connect_shared(client, "play-request", G_CALLBACK(on_play_request), data);
  connect_shared(client, "closed", G_CALLBACK(on_client_closed), data);
  connect_shared(client, "send-message", G_CALLBACK(on_send_message), data);
}

gboolean cleanup_sessions(gpointer data) {
  auto *server = static_cast<GstRTSPServer *>(data);
  GstRTSPSessionPool *pool = gst_rtsp_server_get_session_pool(server);
  gst_rtsp_session_pool_cleanup(pool);
  g_object_unref(pool);
  return G_SOURCE_CONTINUE;
}

GstRTSPFilterResult remove_client(GstRTSPServer *, GstRTSPClient *, gpointer) {
  return GST_RTSP_FILTER_REMOVE;
}

// Clients that take no data. A viewer over TCP (RTP interleaved in its RTSP
// connection) that stops reading is never dropped by rtsp-server 1.22: its
// connection's socket fills, its packets queue up in the server (measured:
// +1 MB/s for a 640x480 stream at threshold 0) and after about a minute the
// other viewers of the media froze as well. A connection whose kernel send
// queue holds data of which the peer has acknowledged nothing new for
// stalled_client_timeout_s is closed; that ends its session and frees its
// queue. A viewer that reads slowly still acknowledges, and an idle RTSP
// connection (a viewer over UDP) has nothing queued.

// The bytes acknowledged by the peer of a TCP socket, and whether its send
// queue holds any; false where the system does not say (not Linux, a kernel
// before 4.1, not TCP).
bool tcp_progress(int fd, guint64 *acked, bool *queued) {
#if defined(__linux__)
  struct tcp_info info {};
  socklen_t size = sizeof info;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &size) != 0 ||
      size < offsetof(struct tcp_info, tcpi_bytes_acked) + sizeof info.tcpi_bytes_acked)
    return false;
  int outq = 0;
  if (ioctl(fd, SIOCOUTQ, &outq) != 0) return false;
  *acked = info.tcpi_bytes_acked;
  *queued = outq > 0;
  return true;
#else
  (void)fd;
  (void)acked;
  (void)queued;
  return false;
#endif
}

// Whether a buffer is on its way into `sink` now (its render waits): its
// pad's stream lock is held while it is.
bool push_in_progress(GstElement *sink) {
  GstPad *pad = gst_element_get_static_pad(sink, "sink");
  if (!pad) return false;
  const bool busy = !GST_PAD_STREAM_TRYLOCK(pad);
  if (!busy) GST_PAD_STREAM_UNLOCK(pad);
  gst_object_unref(pad);
  return busy;
}

// rtsp-server's thread that hands packets to the TCP viewers (one per
// stream) handles one packet each time it wakes, the RTCP appsink's before
// the RTP appsink's (each holds one packet), and wakes when an appsink takes
// a packet or a viewer's packet has gone out. While every TCP viewer's
// connection is full it takes nothing, and the RTP appsink, full, takes
// nothing either. When that viewer has gone, only the RTCP packets woke the
// thread, and each time it handled the RTCP packet and slept again
// (GStreamer 1.22): the RTP packets of every TCP viewer, later ones too,
// piled up in the queue before the appsink (measured: +0.6 MB/s for a
// 640x480 stream at threshold 0, long after the viewer was closed). The
// same sleep may follow an RTP and an RTCP packet that come together: with
// no TCP viewer left, the thread was found asleep again 1 and 2 s, and 1, 3
// and 9 s, after the viewer was closed, in two runs.
//
// So an appsink (of a playing media) that took nothing for a whole tick
// while a buffer waits to go in, with no client's connection holding data
// (no TCP viewer is behind: the thread is asleep, not held back), drops the
// packet it holds for the waiting one: "drop" is set, which lets the
// waiting render go on, and the next buffer's probe sets it back (the tick
// after, at the latest). The packet dropped was waiting for no viewer; the
// new one wakes the thread, which takes the RTP packets again. Where a
// connection's queue cannot be read (not Linux), only with no client at
// all.
void wake_stuck_senders(Shared *shared, bool some_client_behind, guint64 tick) {
  std::vector<GstRTSPMedia *> medias;
  {
    std::lock_guard<std::mutex> lock(shared->mutex);
    for (GstRTSPMedia *m : shared->medias) medias.push_back(GST_RTSP_MEDIA(g_object_ref(m)));
  }
  for (GstRTSPMedia *media : medias) {
    GstElement *element = gst_rtsp_media_get_element(media);
    GstObject *pipeline = element ? gst_object_get_parent(GST_OBJECT(element)) : nullptr;
    if (pipeline && GST_IS_BIN(pipeline)) {
      GstIterator *it = gst_bin_iterate_sinks(GST_BIN(pipeline));
      GValue item = G_VALUE_INIT;
      for (bool done = false; !done;) {
        switch (gst_iterator_next(it, &item)) {
          case GST_ITERATOR_OK: {
            GstElement *sink = GST_ELEMENT(g_value_get_object(&item));
            auto *watch =
                static_cast<SinkWatch *>(g_object_get_data(G_OBJECT(sink), kSinkWatchKey));
            if (watch && watch->tick != tick) {
              watch->tick = tick;
              const guint64 taken = watch->taken.load();
              GstState state = GST_STATE_VOID_PENDING, pending = GST_STATE_VOID_PENDING;
              gst_element_get_state(sink, &state, &pending, 0);
              if (watch->woke) {
                // (Where no buffer came since, or one came before "drop" was set.)
                watch->undrop = false;
                g_object_set(sink, "drop", FALSE, nullptr);
                watch->woke = false;
              } else if (taken == watch->last && !some_client_behind &&
                         state == GST_STATE_PLAYING && pending == GST_STATE_VOID_PENDING &&
                         push_in_progress(sink)) {
                GST_INFO(
                    "waking rtsp-server's sender to TCP viewers (%s took nothing for a "
                    "second)",
                    GST_OBJECT_NAME(sink));
                watch->undrop = true;
                watch->woke = true;
                g_object_set(sink, "drop", TRUE, nullptr);
              }
              watch->last = taken;
            }
            g_value_reset(&item);
            break;
          }
          case GST_ITERATOR_RESYNC:
            gst_iterator_resync(it);
            break;
          default:
            done = true;
        }
      }
      g_value_unset(&item);
      gst_iterator_free(it);
    }
    if (pipeline) gst_object_unref(pipeline);
    if (element) gst_object_unref(element);
    g_object_unref(media);
  }
}

struct StallCheck {
  StallCheck(GstRTSPServer *s, SharedPtr sh) : server(s), shared(std::move(sh)) {}
  GstRTSPServer *server;  // not a reference: the timer goes before the server
  SharedPtr shared;
  bool some_client_behind = false;  // this tick: a connection had data waiting, or cannot say
  guint64 ticks = 0;
  std::set<GstRTSPClient *> dropped;  // this tick: clients to close for a dropped viewer
};

// Whether a stream that `client` plays over TCP (RTP interleaved in its RTSP
// connection) no longer has the client's transport among those it sends to.
// rtsp-server (rtsp-stream.c, GStreamer 1.22) drops a TCP viewer whose queue
// of packets spans more than 10 s (and 100 packets) while another viewer of
// the stream keeps up ("Dropping slow transport" in its log), but leaves its
// session playing and its connection open: that viewer's picture stops for
// good without an error. In the server's thread, which also serves the
// clients' requests, so that sessions do not change meanwhile.
bool playing_tcp_viewer_dropped(GstRTSPClient *client) {
  bool dropped = false;
  GList *sessions = gst_rtsp_client_session_filter(client, nullptr, nullptr);
  for (GList *s = sessions; s && !dropped; s = s->next) {
    GList *medias = gst_rtsp_session_filter(GST_RTSP_SESSION(s->data), nullptr, nullptr);
    for (GList *m = medias; m && !dropped; m = m->next) {
      auto *session_media = GST_RTSP_SESSION_MEDIA(m->data);
      if (gst_rtsp_session_media_get_rtsp_state(session_media) != GST_RTSP_STATE_PLAYING) continue;
      GPtrArray *transports = gst_rtsp_session_media_get_transports(session_media);
      for (guint i = 0; transports && i < transports->len && !dropped; ++i) {
        auto *transport = static_cast<GstRTSPStreamTransport *>(g_ptr_array_index(transports, i));
        const GstRTSPTransport *t =
            transport ? gst_rtsp_stream_transport_get_transport(transport) : nullptr;
        if (!t || t->lower_transport != GST_RTSP_LOWER_TRANS_TCP) continue;
        GList *sent_to = gst_rtsp_stream_transport_filter(
            gst_rtsp_stream_transport_get_stream(transport), nullptr, nullptr);
        dropped = !g_list_find(sent_to, transport);
        g_list_free_full(sent_to, g_object_unref);
      }
      if (transports) g_ptr_array_unref(transports);
    }
    g_list_free_full(medias, g_object_unref);
  }
  g_list_free_full(sessions, g_object_unref);
  return dropped;
}

// Clients to close: a viewer that rtsp-server stopped sending to (seen on two
// ticks in a row), or a connection that took no data for the stall timeout.
GstRTSPFilterResult find_client_to_close(GstRTSPServer *, GstRTSPClient *client, gpointer data) {
  auto *check = static_cast<StallCheck *>(data);
  auto *watch = static_cast<StallWatch *>(g_object_get_data(G_OBJECT(client), kStallWatchKey));
  if (!watch) {
    watch = new StallWatch();
    g_object_set_data_full(G_OBJECT(client), kStallWatchKey, watch,
                           [](gpointer p) { delete static_cast<StallWatch *>(p); });
  }
  watch->dropped_ticks = playing_tcp_viewer_dropped(client) ? watch->dropped_ticks + 1 : 0;
  if (watch->dropped_ticks >= 2) {
    check->dropped.insert(client);
    return GST_RTSP_FILTER_REF;
  }
  GstRTSPConnection *connection = gst_rtsp_client_get_connection(client);
  GSocket *socket = connection ? gst_rtsp_connection_get_write_socket(connection) : nullptr;
  guint64 acked = 0;
  bool queued = false;
  if (!socket || !tcp_progress(g_socket_get_fd(socket), &acked, &queued)) {
    check->some_client_behind = true;  // (cannot say)
    return GST_RTSP_FILTER_KEEP;
  }
  if (queued) check->some_client_behind = true;
  const gint64 now = g_get_monotonic_time();
  if (!watch->seen || !queued || acked != watch->acked) {
    watch->seen = true;
    watch->acked = acked;
    watch->since_us = now;
    return GST_RTSP_FILTER_KEEP;
  }
  const guint timeout_s = check->shared->options.stalled_client_timeout_s;
  return timeout_s > 0 && now - watch->since_us >= gint64(timeout_s) * G_USEC_PER_SEC
             ? GST_RTSP_FILTER_REF
             : GST_RTSP_FILTER_KEEP;
}

// Every second: clients that take no data, or that rtsp-server stopped
// sending to, are closed, and rtsp-server's senders to TCP viewers are woken
// where they sleep with packets waiting.
gboolean watch_clients(gpointer data) {
  auto *check = static_cast<StallCheck *>(data);
  check->some_client_behind = false;
  check->dropped.clear();
  GList *to_close = gst_rtsp_server_client_filter(check->server, find_client_to_close, data);
  for (GList *l = to_close; l; l = l->next) {
    auto *client = GST_RTSP_CLIENT(l->data);
    GstRTSPConnection *connection = gst_rtsp_client_get_connection(client);
    const char *who = connection ? gst_rtsp_connection_get_ip(connection) : "a client";
    const bool dropped = check->dropped.count(client) > 0;
    if (dropped)
      GST_WARNING(
          "closing the connection of %s: it fell more than 10 s behind the stream beside a "
          "faster viewer over TCP, and rtsp-server stopped sending to it",
          who);
    else
      GST_WARNING("closing the connection of %s: it took no data for %u s", who,
                  check->shared->options.stalled_client_timeout_s);
    {
      std::lock_guard<std::mutex> lock(check->shared->mutex);
      if (dropped)
        check->shared->stats.slow_clients_closed++;
      else
        check->shared->stats.stalled_clients_closed++;
    }
    gst_rtsp_client_close(client);
  }
  check->dropped.clear();
  g_list_free_full(to_close, g_object_unref);
  wake_stuck_senders(check->shared.get(), check->some_client_behind, ++check->ticks);
  return G_SOURCE_CONTINUE;
}

}  // namespace

Server::Server(Options options) : impl_(new Impl) {
  impl_->shared->options = std::move(options);
}

Server::~Server() {
  stop();
}

bool Server::start(std::string *error) {
  Impl *impl = impl_.get();
  if (!cudadiff_server_debug)
    GST_DEBUG_CATEGORY_INIT(cudadiff_server_debug, "cudadiff-server", 0, "cudadiff RTSP server");
  if (impl->running) return true;
  const Options &options = impl->shared->options;
  impl->context = g_main_context_new();
  impl->loop = g_main_loop_new(impl->context, FALSE);
  impl->server = gst_rtsp_server_new();
  // The clients' RTSP connections are served in this server's thread, not in
  // rtsp-server's thread pool (by default one thread of its own): stop()
  // closes them from here, and a GstRTSPConnection closed in one thread while
  // its watch reads in another is read with its input stream gone (a GLib
  // critical in g_pollable_input_stream_read_nonblocking).
  GstRTSPThreadPool *pool = gst_rtsp_server_get_thread_pool(impl->server);
  gst_rtsp_thread_pool_set_max_threads(pool, 0);
  g_object_unref(pool);
  gst_rtsp_server_set_address(impl->server, options.address.c_str());
  const std::string service = std::to_string(options.port);
  gst_rtsp_server_set_service(impl->server, service.c_str());

  auto *factory =
      static_cast<CudaDiffFactory *>(g_object_new(cudadiff_factory_get_type(), nullptr));
  factory->shared = new SharedPtr(impl->shared);
  impl->factory = GST_RTSP_MEDIA_FACTORY(factory);
  gst_rtsp_media_factory_set_shared(impl->factory, TRUE);
  gst_rtsp_media_factory_set_media_gtype(impl->factory, cudadiff_media_get_type());
  // AVPF: early RTCP feedback (NACK, PLI) and the rtx payload type in the SDP.
  gst_rtsp_media_factory_set_profiles(impl->factory, GST_RTSP_PROFILE_AVPF);
  if (options.retransmission_ms > 0)
    gst_rtsp_media_factory_set_retransmission_time(
        impl->factory, GstClockTime(options.retransmission_ms) * GST_MSECOND);
  gst_rtsp_media_factory_set_protocols(
      impl->factory, GstRTSPLowerTrans(GST_RTSP_LOWER_TRANS_UDP | GST_RTSP_LOWER_TRANS_TCP));
  gpointer ref = &impl->shared;  // connect_shared copies it
  connect_shared(impl->factory, "media-configure", G_CALLBACK(on_media_configure), ref);
  GstRTSPMountPoints *mounts = gst_rtsp_server_get_mount_points(impl->server);
  gst_rtsp_mount_points_add_factory(mounts, options.mount.c_str(),
                                    GST_RTSP_MEDIA_FACTORY(g_object_ref(impl->factory)));
  g_object_unref(mounts);
  connect_shared(impl->server, "client-connected", G_CALLBACK(on_client_connected), ref);

  GError *err = nullptr;
  GSource *source = gst_rtsp_server_create_source(impl->server, nullptr, &err);
  if (!source) {
    if (error)
      *error = "cannot listen on " + options.address + ":" + service + ": " +
               (err ? err->message : "unknown error");
    g_clear_error(&err);
    // Nothing runs yet: let go of what was made, so that start() may be tried again.
    g_object_unref(impl->factory);
    g_object_unref(impl->server);
    g_main_loop_unref(impl->loop);
    g_main_context_unref(impl->context);
    impl->factory = nullptr;
    impl->server = nullptr;
    impl->loop = nullptr;
    impl->context = nullptr;
    return false;
  }
  impl->server_source = g_source_attach(source, impl->context);
  g_source_unref(source);
  impl->bound_port = gst_rtsp_server_get_bound_port(impl->server);
  GSource *timeout = g_timeout_source_new_seconds(2);
  g_source_set_callback(timeout, cleanup_sessions, impl->server, nullptr);
  g_source_attach(timeout, impl->context);
  g_source_unref(timeout);
  GSource *watch = g_timeout_source_new_seconds(1);
  g_source_set_callback(watch, watch_clients, new StallCheck(impl->server, impl->shared),
                        [](gpointer p) { delete static_cast<StallCheck *>(p); });
  g_source_attach(watch, impl->context);
  g_source_unref(watch);
  impl->running = true;
  impl->thread = std::thread([impl] {
    g_main_context_push_thread_default(impl->context);
    g_main_loop_run(impl->loop);
    g_main_context_pop_thread_default(impl->context);
  });
  return true;
}

void Server::stop() {
  Impl *impl = impl_.get();
  if (!impl->running) return;
  impl->running = false;
  // In the server's thread: close every client (their medias stop), then quit.
  g_main_context_invoke(
      impl->context,
      [](gpointer data) -> gboolean {
        auto *impl = static_cast<Impl *>(data);
        GSource *s = g_main_context_find_source_by_id(impl->context, impl->server_source);
        if (s) g_source_destroy(s);
        gst_rtsp_server_client_filter(impl->server, remove_client, nullptr);
        g_main_loop_quit(impl->loop);
        return G_SOURCE_REMOVE;
      },
      impl);
  impl->thread.join();
  // Sources still pending (client removals) run to their end.
  while (g_main_context_iteration(impl->context, FALSE)) {
  }
  // Every media stops now (rtsp-server would finish them in its own threads).
  std::vector<GstRTSPMedia *> medias;
  {
    std::lock_guard<std::mutex> lock(impl->shared->mutex);
    medias.swap(impl->shared->medias);
  }
  for (GstRTSPMedia *media : medias) {
    if (gst_rtsp_media_get_status(media) != GST_RTSP_MEDIA_STATUS_UNPREPARED)
      gst_rtsp_media_unprepare(media);
    g_object_unref(media);
  }
  g_object_unref(impl->factory);
  g_object_unref(impl->server);
  g_main_loop_unref(impl->loop);
  g_main_context_unref(impl->context);
  impl->factory = nullptr;
  impl->server = nullptr;
}

int Server::port() const {
  return impl_->bound_port;
}

std::string Server::url(const std::string &host) const {
  return "rtsp://" + host + ":" + std::to_string(impl_->bound_port) + impl_->shared->options.mount;
}

Stats Server::stats() const {
  std::lock_guard<std::mutex> lock(impl_->shared->mutex);
  return impl_->shared->stats;
}

std::string Server::error() const {
  std::lock_guard<std::mutex> lock(impl_->shared->mutex);
  return impl_->shared->error;
}

std::string source_description(const std::string &source, const std::string &device, int width,
                               int height, int fps) {
  const std::string size = "width=" + std::to_string(width) + ",height=" + std::to_string(height) +
                           ",framerate=" + std::to_string(fps) + "/1";
  if (source == "camera")
    return "v4l2src device=\"" + (device.empty() ? std::string("/dev/video0") : device) + "\"";
  if (source == "test")
    return "videotestsrc is-live=true pattern=smpte horizontal-speed=2 ! video/x-raw," + size;
  // A media file: decoded and played in real time (clocksync) like a camera,
  // so that the encoder works on the frames being sent (a keyframe asked for
  // now is the next frame on the wire).
  gchar *uri = gst_filename_to_uri(source.c_str(), nullptr);
  std::string description = std::string("uridecodebin uri=\"") + (uri ? uri : source.c_str()) +
                            "\" ! clocksync name=loop";
  g_free(uri);
  return description;
}

}  // namespace cudadiff_server
