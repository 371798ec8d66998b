// cudadiffenc and cudadiffdec through GstHarness, with the backend a user
// gets by default (auto: CUDA on the GPU machine, the CPU here), for both
// stream versions: the outputs are checked against the codec's definition
// (version 1: Model, computed in the test; version 2: Codec2Model, the
// codec2 core run in the test on the same frames, whose bodies the packets
// must carry byte for byte) and against the input (every byte within the
// threshold, exact at 0), the packets against docs/stream-format.md's
// layout. test_cudadiff_cuda compares the backends byte for byte.
#include <gst/base/gsttypefindhelper.h>
#include <gst/check/gstharness.h>
#include <glib/gstdio.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cudadiff/codec2_rules.h"
#include "cudadiff_util.h"

using namespace diff_test;

namespace {

// Whether the plugin was built with zstd (its compression enum says).
bool have_zstd() {
  static const bool zstd = [] {
    GstElement *el = gst_element_factory_make("cudadiffenc", nullptr);
    GParamSpec *spec = g_object_class_find_property(G_OBJECT_GET_CLASS(el), "compression");
    const bool z = g_enum_get_value_by_nick(G_PARAM_SPEC_ENUM(spec)->enum_class, "zstd");
    gst_object_unref(el);
    return z;
  }();
  return zstd;
}

// The deltas cudadiffenc (backend auto) holds back with frame-overlap:
// version 2 on a GPU keeps kMaxInFlight - 1 queued and one more whose body
// is on its way to the host while it packs the one before, version 1 and
// the CPU backend one.
int frames_held(int version) {
  return version == 2 && cudadiff::device_count() > 0 ? cudadiff::codec2::Encoder::kMaxInFlight : 1;
}

GstBuffer *pull_packet(GstHarness *h, std::vector<GstBuffer *> *headers = nullptr) {
  for (;;) {
    GstBuffer *b = gst_harness_try_pull(h);
    if (!b) return nullptr;
    if (!GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_HEADER)) return b;
    if (headers)
      headers->push_back(b);
    else
      gst_buffer_unref(b);
  }
}

// The frames (numbers at 30 fps) of the packets left in `h`, keyframes and
// deltas apart; each packet's header says what its buffer's flag says.
struct KeysAndDeltas {
  std::vector<int> keys, deltas;
};
KeysAndDeltas pull_keys_and_deltas(GstHarness *h) {
  KeysAndDeltas out;
  while (GstBuffer *p = pull_packet(h)) {
    const int t = int(gst_util_uint64_scale_round(GST_BUFFER_PTS(p), 30, GST_SECOND));
    const bool delta = GST_BUFFER_FLAG_IS_SET(p, GST_BUFFER_FLAG_DELTA_UNIT);
    (delta ? out.deltas : out.keys).push_back(t);
    EXPECT_EQ(header_of(p).keyframe(), !delta) << "frame " << t;
    gst_buffer_unref(p);
  }
  return out;
}

// The frames in GstVideoEncoder's list of `encoder`.
guint encoder_frames(GstElement *encoder) {
  GList *frames = gst_video_encoder_get_frames(GST_VIDEO_ENCODER(encoder));
  const guint n = g_list_length(frames);
  g_list_free_full(frames, reinterpret_cast<GDestroyNotify>(gst_video_codec_frame_unref));
  return n;
}

struct EncodeOptions {
  std::string props;  // extra properties of cudadiffenc
  int threshold = 20;
  int frames = 6;
  uint32_t seed = 1;
  int version = 2;         // stream-version
  std::string caps_extra;  // fields added to the input caps (", name=value...")
  int fps = 30;            // the input caps' framerate, fps/1 (0: 0/1, variable)
};

// Appends the packets' bytes to `to`, one after the other (a byte stream,
// a recording).
void append_packets(Bytes &to, const std::vector<GstBuffer *> &packets) {
  for (GstBuffer *p : packets) {
    const Bytes b = bytes_of(p);
    to.insert(to.end(), b.begin(), b.end());
  }
}

// A file in the temporary directory holding `bytes` (`name_template` as
// g_file_open_tmp() takes it), removed with the object; path() is null
// where it could not be written.
class TempFile {
 public:
  TempFile(const Bytes &bytes, const char *name_template) {
    const int fd = g_file_open_tmp(name_template, &path_, nullptr);
    if (fd < 0) return;
    const bool written = write(fd, bytes.data(), bytes.size()) == ssize_t(bytes.size());
    close(fd);
    if (!written) {
      g_unlink(path_);
      g_clear_pointer(&path_, g_free);
    }
  }
  ~TempFile() {
    if (path_) g_unlink(path_);
    g_free(path_);
  }
  TempFile(const TempFile &) = delete;
  TempFile &operator=(const TempFile &) = delete;
  const char *path() const { return path_; }

 private:
  gchar *path_ = nullptr;
};

Bytes payload_of(GstBuffer *packet) {
  const Bytes b = bytes_of(packet);
  return b.size() < 64 ? Bytes() : Bytes(b.begin() + 64, b.end());
}

// The codec's model of `version` for a packet the element made from `in`:
// returns the picture a decoder must show. Version 2 also checks that the
// packet carries the body the core writes for the same frame.
struct Models {
  Model v1;
  Codec2Model v2;
  const Bytes &apply(int version, const std::string &format, int w, int h, const Bytes &in,
                     GstBuffer *packet, int threshold) {
    const bool key = !GST_BUFFER_FLAG_IS_SET(packet, GST_BUFFER_FLAG_DELTA_UNIT);
    if (version == 1) {
      v1.apply(in, key, threshold);
      return v1.picture;
    }
    const Bytes body = v2.apply(format, w, h, in, key, threshold);
    EXPECT_EQ(payload_of(packet), body) << "the packet's payload is the codec2 body";
    return v2.picture;
  }
};

void encode(Encoded &e, const std::string &format, int w, int h, const EncodeOptions &o) {
  const std::string launch = "cudadiffenc threshold=" + std::to_string(o.threshold) +
                             " stream-version=" + std::to_string(o.version) + " " + o.props;
  GstHarness *enc = gst_harness_new_parse(launch.c_str());
  gst_harness_set_src_caps_str(
      enc, (gst_test::raw_caps(format.c_str(), w, h, o.fps) + o.caps_extra).c_str());
  const GstVideoInfo info = video_info(format, w, h);
  Models models;
  e.version = o.version;
  for (int t = 0; t < o.frames; ++t) {
    Bytes in = scene(format, w, h, t, o.seed);
    ASSERT_EQ(gst_harness_push(enc, buffer_from(info, in, t)), GST_FLOW_OK);
    GstBuffer *packet = pull_packet(enc);
    ASSERT_NE(packet, nullptr) << format << " frame " << t;
    e.pictures.push_back(models.apply(o.version, format, w, h, in, packet, o.threshold));
    e.packets.push_back(packet);
    e.inputs.push_back(std::move(in));
  }
  e.caps = gst_pad_get_current_caps(enc->sinkpad);
  gst_harness_teardown(enc);
}

// The stream header packet that `e`'s encoder put into its caps
// (`streamheader`), owned by e.caps; nullptr when they have none.
GstBuffer *stream_header_of(const Encoded &e) {
  const GValue *headers =
      e.caps ? gst_structure_get_value(gst_caps_get_structure(e.caps, 0), "streamheader") : nullptr;
  return headers && gst_value_array_get_size(headers) > 0
             ? gst_value_get_buffer(gst_value_array_get_value(headers, 0))
             : nullptr;
}

struct Decoded {
  std::vector<Bytes> frames;
  std::vector<GstBuffer *> buffers;
  std::vector<std::string> caps;  // per frame
  std::vector<std::string> warnings;
  std::vector<std::string> errors;
  // The decoder's stats at the end: packets, dropped-packets, skipped-bytes,
  // losses.
  guint64 packets = 0, dropped = 0, skipped = 0, losses = 0;
  // QoS messages posted (GstVideoDecoder posts one per dropped frame).
  size_t qos = 0;
  ~Decoded() {
    for (GstBuffer *b : buffers) gst_buffer_unref(b);
  }
};

// Feeds `inputs` to cudadiffdec; collects frames (with the caps they came
// with) and the warnings posted.
void decode(Decoded &d, const std::vector<GstBuffer *> &inputs, bool send_eos = false,
            const char *launch = "cudadiffdec") {
  GstHarness *dec = gst_harness_new_parse(launch);
  GstBus *bus = gst_bus_new();
  // (QoS messages counted as they are posted: pop_texts() below discards
  // the messages of other types)
  gst_bus_set_sync_handler(
      bus,
      [](GstBus *, GstMessage *m, gpointer qos) {
        if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_QOS) ++*static_cast<size_t *>(qos);
        return GST_BUS_PASS;
      },
      &d.qos, nullptr);
  gst_element_set_bus(dec->element, bus);
  gst_harness_set_src_caps_str(dec, "video/x-cudadiff");
  auto collect = [&] {
    while (GstBuffer *out = gst_harness_try_pull(dec)) {
      GstCaps *caps = gst_pad_get_current_caps(dec->sinkpad);
      d.frames.push_back(canonical_of(out, caps));
      gchar *s = gst_caps_to_string(caps);
      d.caps.push_back(s);
      g_free(s);
      gst_caps_unref(caps);
      d.buffers.push_back(out);
    }
  };
  for (GstBuffer *in : inputs) {
    if (!in) {  // the segment again (the harness's, as an input-selector re-sends it)
      GstSegment segment;
      gst_segment_init(&segment, GST_FORMAT_TIME);
      EXPECT_TRUE(gst_harness_push_event(dec, gst_event_new_segment(&segment)));
      continue;
    }
    const GstFlowReturn ret = gst_harness_push(dec, gst_buffer_ref(in));
    EXPECT_EQ(ret, GST_FLOW_OK);
    collect();
  }
  if (send_eos) {
    gst_harness_push_event(dec, gst_event_new_eos());
    collect();
  }
  while (GstMessage *m = gst_bus_pop_filtered(
             bus, static_cast<GstMessageType>(GST_MESSAGE_WARNING | GST_MESSAGE_ERROR))) {
    const gst_test::BusText t = gst_test::bus_text(m);
    (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ERROR ? d.errors : d.warnings)
        .push_back(t.message + " | " + t.debug);
    gst_message_unref(m);
  }
  GstStructure *stats = nullptr;
  GstElement *el = dec->element;  // the harness wraps a launch line in a bin
  if (GST_IS_BIN(el)) {
    GstIterator *it = gst_bin_iterate_elements(GST_BIN(el));
    GValue v = G_VALUE_INIT;
    el = nullptr;
    while (!el && gst_iterator_next(it, &v) == GST_ITERATOR_OK) {
      GstElement *child = GST_ELEMENT(g_value_get_object(&v));
      GstElementFactory *f = gst_element_get_factory(child);
      if (f && std::string(GST_OBJECT_NAME(f)) == "cudadiffdec") el = child;
      g_value_reset(&v);
    }
    g_value_unset(&v);
    gst_iterator_free(it);
  }
  if (el) g_object_get(el, "stats", &stats, nullptr);
  if (stats) {
    gst_structure_get_uint64(stats, "packets", &d.packets);
    gst_structure_get_uint64(stats, "dropped-packets", &d.dropped);
    gst_structure_get_uint64(stats, "skipped-bytes", &d.skipped);
    gst_structure_get_uint64(stats, "losses", &d.losses);
    gst_structure_free(stats);
  }
  gst_element_set_bus(dec->element, nullptr);
  gst_object_unref(bus);
  gst_harness_teardown(dec);
}

// A harness of cudadiffdec frame-overlap=always on packets; *src: the
// decoder's source pad (the caller unrefs it), for probes.
GstHarness *overlapping_decoder(GstPad **src) {
  GstHarness *h = gst_harness_new_parse("cudadiffdec frame-overlap=always");
  gst_harness_set_src_caps_str(h, "video/x-cudadiff");
  GstElement *dec = gst_harness_find_element(h, "cudadiffdec");
  *src = gst_element_get_static_pad(dec, "src");
  gst_object_unref(dec);
  return h;
}

// Makes `src` answer NOT_LINKED to the next *refuse buffers (dropping
// them), counting down.
void refuse_buffers(GstPad *src, std::atomic<int> *refuse) {
  gst_pad_add_probe(
      src, GST_PAD_PROBE_TYPE_BUFFER,
      [](GstPad *, GstPadProbeInfo *info, gpointer data) {
        auto *n = static_cast<std::atomic<int> *>(data);
        if (n->load() == 0) return GST_PAD_PROBE_OK;
        n->fetch_sub(1);
        gst_buffer_unref(GST_PAD_PROBE_INFO_BUFFER(info));
        GST_PAD_PROBE_INFO_FLOW_RETURN(info) = GST_FLOW_NOT_LINKED;
        return GST_PAD_PROBE_HANDLED;
      },
      refuse, nullptr);
}

// The pictures waiting at the harness's sink, each by its caps.
std::vector<Bytes> pull_pictures(GstHarness *h) {
  std::vector<Bytes> shown;
  while (GstBuffer *out = gst_harness_try_pull(h)) {
    GstCaps *caps = gst_pad_get_current_caps(h->sinkpad);
    shown.push_back(canonical_of(out, caps));
    gst_caps_unref(caps);
    gst_buffer_unref(out);
  }
  return shown;
}

// Encodes, checks the packets, decodes and checks every frame.
void round_trip(const std::string &format, int w, int h, int threshold, const char *compression,
                int version = 1) {
  SCOPED_TRACE(format + " " + std::to_string(w) + "x" + std::to_string(h) + " threshold " +
               std::to_string(threshold) + " " + compression + " version " +
               std::to_string(version));
  Encoded e;
  EncodeOptions o;
  o.threshold = threshold;
  o.version = version;
  o.props = std::string("compression=") + compression + " keyframe-interval=4";
  encode(e, format, w, h, o);
  ASSERT_EQ(e.packets.size(), 6u);
  for (size_t i = 0; i < e.packets.size(); ++i) {
    const Header hd = header_of(e.packets[i]);
    EXPECT_EQ(hd.magic, "CDIF");
    EXPECT_EQ(hd.version, version);
    EXPECT_EQ(hd.header_size, 64);
    EXPECT_EQ(hd.frame_number, i);
    EXPECT_EQ(hd.pts, gst_util_uint64_scale(i, GST_SECOND, 30));
    EXPECT_EQ(hd.duration, gst_util_uint64_scale(1, GST_SECOND, 30));
    EXPECT_EQ(hd.width, uint32_t(w));
    EXPECT_EQ(hd.height, uint32_t(h));
    EXPECT_EQ(hd.fps_n, 30u);
    EXPECT_EQ(hd.fps_d, 1u);
    EXPECT_EQ(hd.payload_size + 64, gst_buffer_get_size(e.packets[i]));
    const bool key = i % 4 == 0;
    EXPECT_EQ(hd.keyframe(), key) << i;
    EXPECT_EQ(GST_BUFFER_FLAG_IS_SET(e.packets[i], GST_BUFFER_FLAG_DELTA_UNIT), !key) << i;
    if (version == 2) {
      // The body as it is, whatever `compression` says.
      EXPECT_EQ(hd.flags, key ? 1 : 0);
      EXPECT_EQ(hd.payload_size, hd.body_size);
      continue;
    }
    EXPECT_EQ(hd.body_size, key ? e.inputs[i].size() : hd.body_size);
    if (std::string(compression) == "none") {
      EXPECT_EQ(hd.flags & ~1, 0);
      EXPECT_EQ(hd.payload_size, hd.body_size);
    }
  }
  Decoded d;
  decode(d, e.packets);
  EXPECT_TRUE(d.warnings.empty()) << d.warnings[0];
  ASSERT_EQ(d.frames.size(), e.pictures.size());
  for (size_t i = 0; i < d.frames.size(); ++i) {
    ASSERT_EQ(d.frames[i], e.pictures[i]) << "decoder == the codec's model, frame " << i;
    if (threshold == 0) {
      ASSERT_EQ(d.frames[i], e.inputs[i]) << "lossless, frame " << i;
    } else {
      ASSERT_LE(max_diff(d.frames[i], e.inputs[i]), threshold) << "frame " << i;
    }
    EXPECT_EQ(GST_BUFFER_PTS(d.buffers[i]), gst_util_uint64_scale(i, GST_SECOND, 30));
  }
  EXPECT_NE(d.caps[0].find("format=(string)" + format), std::string::npos) << d.caps[0];
  EXPECT_NE(d.caps[0].find("framerate=(fraction)30/1"), std::string::npos) << d.caps[0];
}

}  // namespace

TEST(CudaDiff, PropertiesAndDefaults) {
  GstElement *enc = gst_element_factory_make("cudadiffenc", nullptr);
  GstElement *dec = gst_element_factory_make("cudadiffdec", nullptr);
  ASSERT_NE(enc, nullptr);
  ASSERT_NE(dec, nullptr);
  for (const char *name :
       {"threshold", "keyframe-interval", "compression", "compression-level", "stats-interval",
        "frame-overlap", "stats", "backend", "device-id", "stream-version"}) {
    GParamSpec *spec = g_object_class_find_property(G_OBJECT_GET_CLASS(enc), name);
    ASSERT_NE(spec, nullptr) << name;
    if (std::string(name) != "stats") {
      EXPECT_NE(std::string(g_param_spec_get_blurb(spec)).find("Default"), std::string::npos)
          << name;
    }
  }
  for (const char *name : {"stats", "frame-overlap", "max-pixels", "backend", "device-id"})
    EXPECT_NE(g_object_class_find_property(G_OBJECT_GET_CLASS(dec), name), nullptr) << name;
  guint64 max_pixels = 0;
  g_object_get(dec, "max-pixels", &max_pixels, nullptr);
  EXPECT_EQ(max_pixels, 8192u * 4320u) << "DCI 8K";
  EXPECT_NE(std::string(g_param_spec_get_blurb(
                            g_object_class_find_property(G_OBJECT_GET_CLASS(dec), "max-pixels")))
                .find("Default: 35389440"),
            std::string::npos);
  gint dec_overlap = -1;
  g_object_get(dec, "frame-overlap", &dec_overlap, nullptr);
  EXPECT_EQ(dec_overlap, 2) << "never: a viewer behind tcpclientsrc gets no added delay";
  guint threshold = 0, interval = 0, stats_interval = 1, version = 0;
  gint compression = -1, level = 0, backend = -1, overlap = -1;
  g_object_get(enc, "threshold", &threshold, "keyframe-interval", &interval, "compression",
               &compression, "compression-level", &level, "stats-interval", &stats_interval,
               "backend", &backend, "frame-overlap", &overlap, "stream-version", &version, nullptr);
  // The one test of the default (DEFAULT_STREAM_VERSION in the encoder):
  // every other test names the version it tests.
  EXPECT_EQ(version, 2u) << "version 2 by default";
  GParamSpec *vspec = g_object_class_find_property(G_OBJECT_GET_CLASS(enc), "stream-version");
  EXPECT_EQ(G_PARAM_SPEC_UINT(vspec)->minimum, 1u);
  EXPECT_EQ(G_PARAM_SPEC_UINT(vspec)->maximum, 2u);
  for (const char *name : {"compression", "compression-level", "frame-overlap"}) {
    const std::string blurb =
        g_param_spec_get_blurb(g_object_class_find_property(G_OBJECT_GET_CLASS(enc), name));
    EXPECT_NE(blurb.find("ersion 2"), std::string::npos) << name << ": what it does under v2";
  }
  EXPECT_EQ(overlap, 0) << "auto";
  EXPECT_EQ(threshold, 20u);
  EXPECT_EQ(interval, 60u);
  EXPECT_EQ(compression, have_zstd() ? 1 : 0);
  EXPECT_EQ(level, 3);
  EXPECT_EQ(stats_interval, 0u);
  EXPECT_EQ(backend, 0);
  GParamSpec *stats = g_object_class_find_property(G_OBJECT_GET_CLASS(enc), "stats");
  EXPECT_FALSE(stats->flags & G_PARAM_WRITABLE);
  EXPECT_STREQ(
      gst_element_factory_get_metadata(gst_element_get_factory(enc), GST_ELEMENT_METADATA_KLASS),
      "Codec/Encoder/Video");
  EXPECT_STREQ(
      gst_element_factory_get_metadata(gst_element_get_factory(dec), GST_ELEMENT_METADATA_KLASS),
      "Codec/Decoder/Video");
  GstStructure *s = stats_of(enc);
  EXPECT_EQ(stat(s, "frames"), 0u);
  gst_structure_free(s);
  gst_object_unref(enc);
  gst_object_unref(dec);
}

TEST(CudaDiff, StreamHeaderInCapsAndFirst) {
  for (int v : {2, 1}) {
    SCOPED_TRACE("version " + std::to_string(v));
    GstHarness *enc =
        gst_harness_new_parse(("cudadiffenc stream-version=" + std::to_string(v)).c_str());
    gst_harness_set_src_caps_str(enc, gst_test::raw_caps("I420", 17, 9, 25).c_str());
    const GstVideoInfo info = video_info("I420", 17, 9, 25);
    ASSERT_EQ(gst_harness_push(enc, buffer_from(info, scene("I420", 17, 9, 0, 1), 0)), GST_FLOW_OK);
    std::vector<GstBuffer *> headers;
    GstBuffer *key = pull_packet(enc, &headers);
    ASSERT_NE(key, nullptr);
    ASSERT_EQ(headers.size(), 1u) << "the stream header comes first";
    const Header sh = header_of(headers[0]);
    EXPECT_EQ(sh.magic, "CDIF");
    EXPECT_EQ(sh.version, v);
    EXPECT_EQ(header_of(key).version, v);
    EXPECT_EQ(sh.flags, 0x10);
    EXPECT_EQ(sh.format, 12);  // I420
    EXPECT_EQ(sh.width, 17u);
    EXPECT_EQ(sh.height, 9u);
    EXPECT_EQ(sh.fps_n, 25u);
    EXPECT_EQ(sh.pts, ~uint64_t(0));
    // Its payload: the colorimetry of the input caps (I420 at this size: bt601).
    const Bytes b = bytes_of(headers[0]);
    EXPECT_EQ(std::string(b.begin() + 64, b.end()), "colorimetry=bt601\n");
    EXPECT_EQ(sh.payload_size, b.size() - 64);

    GstCaps *caps = gst_pad_get_current_caps(enc->sinkpad);
    const GstStructure *st = gst_caps_get_structure(caps, 0);
    EXPECT_TRUE(gst_structure_has_name(st, "video/x-cudadiff"));
    gint version = 0, width = 0;
    EXPECT_TRUE(gst_structure_get_int(st, "version", &version));
    EXPECT_EQ(version, v);
    EXPECT_TRUE(gst_structure_get_int(st, "width", &width));
    EXPECT_EQ(width, 17);
    const GValue *array = gst_structure_get_value(st, "streamheader");
    ASSERT_NE(array, nullptr);
    ASSERT_TRUE(GST_VALUE_HOLDS_ARRAY(array));
    ASSERT_EQ(gst_value_array_get_size(array), 1u);
    GstBuffer *in_caps = gst_value_get_buffer(gst_value_array_get_value(array, 0));
    EXPECT_EQ(bytes_of(in_caps), bytes_of(headers[0]));
    EXPECT_TRUE(GST_BUFFER_FLAG_IS_SET(in_caps, GST_BUFFER_FLAG_HEADER));
    gst_caps_unref(caps);
    for (GstBuffer *b : headers) gst_buffer_unref(b);
    gst_buffer_unref(key);
    gst_harness_teardown(enc);
  }
}

// What the packet headers do not say of the picture travels in the stream
// header's text when the input's caps say other than the defaults of the
// format and size (pixel aspect ratio, interleaved fields and their order,
// chroma siting; the colorimetry always), and the decoder's output caps
// have it, from the encoder's packets and from a byte stream through the
// parser.
TEST(CudaDiff, StreamHeaderCarriesThePicturesDescription) {
  for (int version : {2, 1}) {
    SCOPED_TRACE("version " + std::to_string(version));
    Encoded e;
    EncodeOptions o;
    o.frames = 3;
    o.version = version;
    o.caps_extra =
        ", pixel-aspect-ratio=(fraction)10/11, interlace-mode=(string)interleaved, "
        "field-order=(string)top-field-first, colorimetry=(string)bt601, "
        "chroma-site=(string)mpeg2, multiview-mode=(string)side-by-side, "
        "multiview-flags=(GstVideoMultiviewFlagsSet)0x2:0xffffffff";
    encode(e, "I420", 64, 48, o);
    GstBuffer *header = stream_header_of(e);
    ASSERT_NE(header, nullptr);
    const Bytes hb = bytes_of(header);
    EXPECT_EQ(std::string(hb.begin() + 64, hb.end()),
              "colorimetry=bt601\npixel-aspect-ratio=10/11\ninterlace-mode=interleaved\n"
              "field-order=top-field-first\nchroma-site=mpeg2\nmultiview-mode=side-by-side\n"
              "multiview-flags=2\n");
    Bytes stream = hb;
    append_packets(stream, e.packets);
    GstBuffer *untimed = gst_buffer_new_allocate(nullptr, stream.size(), nullptr);
    gst_buffer_fill(untimed, 0, stream.data(), stream.size());
    std::vector<GstBuffer *> packets = {gst_buffer_ref(header)};
    packets.insert(packets.end(), e.packets.begin(), e.packets.end());
    for (const char *launch : {"cudadiffdec", "cudadiffparse ! cudadiffdec"}) {
      for (bool byte_stream : {false, true}) {
        SCOPED_TRACE(std::string(launch) + (byte_stream ? ", a byte stream" : ", packets"));
        Decoded d;
        decode(d, byte_stream ? std::vector<GstBuffer *>{untimed} : packets, true, launch);
        ASSERT_EQ(d.frames.size(), 3u);
        for (size_t i = 0; i < 3; ++i) EXPECT_EQ(d.frames[i], e.pictures[i]);
        GstCaps *caps = gst_caps_from_string(d.caps[0].c_str());
        GstVideoInfo info;
        ASSERT_TRUE(gst_video_info_from_caps(&info, caps)) << d.caps[0];
        gst_caps_unref(caps);
        EXPECT_EQ(GST_VIDEO_INFO_PAR_N(&info), 10) << d.caps[0];
        EXPECT_EQ(GST_VIDEO_INFO_PAR_D(&info), 11);
        EXPECT_EQ(GST_VIDEO_INFO_INTERLACE_MODE(&info), GST_VIDEO_INTERLACE_MODE_INTERLEAVED);
        EXPECT_EQ(GST_VIDEO_INFO_FIELD_ORDER(&info), GST_VIDEO_FIELD_ORDER_TOP_FIELD_FIRST);
        EXPECT_EQ(info.chroma_site, GST_VIDEO_CHROMA_SITE_MPEG2);
        EXPECT_TRUE(gst_video_colorimetry_matches(&info.colorimetry, "bt601"));
        EXPECT_EQ(GST_VIDEO_INFO_MULTIVIEW_MODE(&info), GST_VIDEO_MULTIVIEW_MODE_SIDE_BY_SIDE);
        EXPECT_EQ(GST_VIDEO_INFO_MULTIVIEW_FLAGS(&info), GST_VIDEO_MULTIVIEW_FLAGS_LEFT_FLIPPED);
      }
    }
    gst_buffer_unref(packets[0]);
    gst_buffer_unref(untimed);
  }
}

// A chroma-site in caps without a colorimetry: GStreamer 1.22's video info
// replaces it with its default, and the stream header says the caps' own.
TEST(CudaDiff, StreamHeaderKeepsChromaSiteWithoutColorimetry) {
  Encoded e;
  EncodeOptions o;
  o.frames = 2;
  o.caps_extra = ", chroma-site=(string)mpeg2";
  encode(e, "I420", 64, 48, o);
  GstBuffer *header = stream_header_of(e);
  ASSERT_NE(header, nullptr);
  const Bytes hb = bytes_of(header);
  const std::string text(hb.begin() + 64, hb.end());
  EXPECT_NE(text.find("chroma-site=mpeg2\n"), std::string::npos) << text;
  Decoded d;
  std::vector<GstBuffer *> packets = {gst_buffer_ref(header)};
  packets.insert(packets.end(), e.packets.begin(), e.packets.end());
  decode(d, packets, true, "cudadiffdec");
  gst_buffer_unref(packets[0]);
  ASSERT_EQ(d.frames.size(), 2u);
  EXPECT_NE(d.caps[0].find("chroma-site=(string)mpeg2"), std::string::npos) << d.caps[0];
}

namespace {

// Where `needle` is in the text of the stream header of `e` (npos: not
// there).
size_t header_text_at(const Encoded &e, const std::string &needle) {
  GstBuffer *header = stream_header_of(e);
  if (!header) return std::string::npos;
  const Bytes hb = bytes_of(header);
  return std::string(hb.begin() + 64, hb.end()).find(needle);
}

// The description of the first picture that `launch` decodes from `e`'s
// packets after its stream header with `value` written over the header's
// text at `at` (its checksums made right again): its caps, and `info` from
// them. "" when no single picture came.
std::string caps_with_header_text(const Encoded &e, size_t at, const std::string &value,
                                  const char *launch, GstVideoInfo *info) {
  GstBuffer *header = stream_header_of(e);
  Bytes changed = bytes_of(header);
  std::memcpy(changed.data() + 64 + at, value.data(), value.size());
  fix_checksums(changed);
  GstBuffer *h = buffer_like(header, changed);
  std::vector<GstBuffer *> packets = {h};
  packets.insert(packets.end(), e.packets.begin(), e.packets.end());
  Decoded d;
  decode(d, packets, true, launch);
  gst_buffer_unref(h);
  EXPECT_EQ(d.frames.size(), 1u);
  if (d.frames.size() != 1) return "";
  GstCaps *caps = gst_caps_from_string(d.caps[0].c_str());
  const bool ok = gst_video_info_from_caps(info, caps);
  gst_caps_unref(caps);
  EXPECT_TRUE(ok) << d.caps[0];
  return ok ? d.caps[0] : "";
}

}  // namespace

// Multiview flags in a stream header that GStreamer does not define (a bit
// it has no flag for, or a value that is not plain digits: sscanf took
// "-5" as 4294967291) are not used, nor is the mode with them: the picture
// is described as mono rather than with flags made up (half aspect among
// them, which changed the pixel aspect ratio).
TEST(CudaDiff, StreamHeaderMultiviewFlagsOutsideGStreamersAreIgnored) {
  Encoded e;
  EncodeOptions o;
  o.frames = 1;
  o.caps_extra =
      ", multiview-mode=(string)side-by-side, "
      "multiview-flags=(GstVideoMultiviewFlagsSet)0x4000:0xffffffff";
  encode(e, "BGR", 32, 16, o);
  const size_t at = header_text_at(e, "multiview-flags=16384\n");
  ASSERT_NE(at, std::string::npos);
  for (const char *value : {"16384", "65536", "-1638"}) {
    SCOPED_TRACE(value);
    GstVideoInfo info;
    const std::string caps = caps_with_header_text(e, at + 16, value, "cudadiffdec", &info);
    ASSERT_NE(caps, "");
    // (GStreamer's caps carry half aspect in the pixel aspect ratio)
    if (std::string(value) == "16384") {
      EXPECT_EQ(GST_VIDEO_INFO_MULTIVIEW_MODE(&info), GST_VIDEO_MULTIVIEW_MODE_SIDE_BY_SIDE);
      EXPECT_EQ(GST_VIDEO_INFO_PAR_N(&info), 2) << caps;
      EXPECT_EQ(GST_VIDEO_INFO_PAR_D(&info), 1) << caps;
    } else {
      EXPECT_TRUE(GST_VIDEO_INFO_MULTIVIEW_MODE(&info) == GST_VIDEO_MULTIVIEW_MODE_MONO ||
                  GST_VIDEO_INFO_MULTIVIEW_MODE(&info) == GST_VIDEO_MULTIVIEW_MODE_NONE)
          << caps;
      EXPECT_EQ(GST_VIDEO_INFO_MULTIVIEW_FLAGS(&info), 0) << caps;
      EXPECT_EQ(GST_VIDEO_INFO_PAR_N(&info), 1) << caps;
      EXPECT_EQ(GST_VIDEO_INFO_PAR_D(&info), 1) << caps;
    }
  }
}

// A stream header's text comes from the wire: a pixel aspect ratio out of
// int's range (sscanf's %d wrapped 9999999999 to 1410065407) and a multiview
// mode GStreamer does not know (gst_video_multiview_mode_from_caps_string()
// printed a GLib warning for it, fatal where warnings are, as in these
// tests: gst_test::init()) are not used.
TEST(CudaDiff, StreamHeaderValuesOutOfRangeAreIgnored) {
  Encoded e;
  EncodeOptions o;
  o.frames = 1;
  o.caps_extra = ", pixel-aspect-ratio=(fraction)1000000000/1, multiview-mode=(string)side-by-side";
  encode(e, "BGR", 32, 16, o);
  const size_t par = header_text_at(e, "pixel-aspect-ratio=1000000000/1\n");
  const size_t mode = header_text_at(e, "multiview-mode=side-by-side\n");
  ASSERT_NE(par, std::string::npos);
  ASSERT_NE(mode, std::string::npos);
  for (const char *launch : {"cudadiffdec", "cudadiffparse ! cudadiffdec"}) {
    SCOPED_TRACE(launch);
    GstVideoInfo info;
    std::string caps = caps_with_header_text(e, par + 19, "9999999999", launch, &info);
    ASSERT_NE(caps, "");
    EXPECT_EQ(GST_VIDEO_INFO_PAR_N(&info), 1) << caps;
    EXPECT_EQ(GST_VIDEO_INFO_PAR_D(&info), 1) << caps;
    EXPECT_EQ(GST_VIDEO_INFO_MULTIVIEW_MODE(&info), GST_VIDEO_MULTIVIEW_MODE_SIDE_BY_SIDE);
    caps = caps_with_header_text(e, mode + 15, "side-by-sid_", launch, &info);
    ASSERT_NE(caps, "");
    EXPECT_EQ(GST_VIDEO_INFO_PAR_N(&info), 1000000000) << caps;
    EXPECT_TRUE(GST_VIDEO_INFO_MULTIVIEW_MODE(&info) == GST_VIDEO_MULTIVIEW_MODE_MONO ||
                GST_VIDEO_INFO_MULTIVIEW_MODE(&info) == GST_VIDEO_MULTIVIEW_MODE_NONE)
        << caps;
  }
}

// Interlacing that changes from frame to frame (interlace-mode=mixed, the
// buffers' INTERLACED and TFF flags) has no place in a packet, so the
// encoder refuses it with an error that says so, rather than lose it:
// before, the decoder's output said progressive and the flags were gone.
// Interleaved fields (whose order the stream header carries) and progressive
// frames are encoded (StreamHeaderCarriesThePicturesDescription).
TEST(CudaDiff, EncoderRefusesMixedInterlacing) {
  GError *error = nullptr;
  const std::string message = gst_test::run_pipeline(
      "videotestsrc num-buffers=2 ! video/x-raw, format=I420, width=64, height=48, "
      "interlace-mode=mixed ! cudadiffenc ! fakesink",
      30, &error);
  ASSERT_NE(error, nullptr) << "a mixed stream was encoded";
  EXPECT_TRUE(g_error_matches(error, GST_CORE_ERROR, GST_CORE_ERROR_NEGOTIATION)) << message;
  EXPECT_NE(message.find("interlace mode"), std::string::npos) << message;
  g_error_free(error);
  EXPECT_EQ(gst_test::run_pipeline("videotestsrc num-buffers=2 ! video/x-raw, format=I420, "
                                   "width=64, height=48, interlace-mode=interleaved ! "
                                   "cudadiffenc ! cudadiffdec ! fakesink"),
            "");
}

// The texts of the ERROR messages the element named `name` posts while
// `pipeline` runs: to EOS, or for a second after the first error of any
// element (an element that posted once may post again as upstream pushes).
static std::vector<std::string> errors_of(const std::string &pipeline, const char *name) {
  GstElement *p = gst_parse_launch(pipeline.c_str(), nullptr);
  EXPECT_NE(p, nullptr) << pipeline;
  if (!p) return {};
  GstBus *bus = gst_element_get_bus(p);
  gst_element_set_state(p, GST_STATE_PLAYING);
  std::vector<std::string> texts;
  gint64 end = g_get_monotonic_time() + 30 * G_TIME_SPAN_SECOND;
  bool errored = false;
  while (g_get_monotonic_time() < end) {
    GstMessage *m = gst_bus_timed_pop_filtered(bus, 50 * GST_MSECOND,
                                               GstMessageType(GST_MESSAGE_ERROR | GST_MESSAGE_EOS));
    if (!m) continue;
    const bool eos = GST_MESSAGE_TYPE(m) == GST_MESSAGE_EOS;
    if (!eos) {
      if (!errored) end = g_get_monotonic_time() + G_TIME_SPAN_SECOND;
      errored = true;
      if (g_strcmp0(GST_MESSAGE_SRC_NAME(m), name) == 0)
        texts.push_back(gst_test::bus_text(m).message);
    }
    gst_message_unref(m);
    if (eos) break;
  }
  gst_element_set_state(p, GST_STATE_NULL);
  gst_object_unref(bus);
  gst_object_unref(p);
  return texts;
}

// One refused input makes one error: GstVideoEncoder asks again with the
// same caps at every buffer upstream pushes after the refusal.
TEST(CudaDiff, EncoderRefusesCapsWithOneError) {
  const std::string src =
      "videotestsrc num-buffers=8 ! video/x-raw, format=I420, width=64, "
      "height=48, interlace-mode=";
  std::vector<std::string> errors =
      errors_of(src + "mixed ! cudadiffenc name=enc ! fakesink", "enc");
  EXPECT_EQ(errors, std::vector<std::string>{"unsupported interlace mode"});
  errors = errors_of(src +
                         "progressive ! cudadiffenc name=enc stream-version=1 ! "
                         "video/x-cudadiff, version=2 ! fakesink",
                     "enc");
  EXPECT_EQ(errors, std::vector<std::string>{
                        "downstream does not accept version 1 of the difference stream"});
  // Refused caps that come again after frames of other caps were encoded
  // are a new refusal (GstVideoEncoder does not call set_format for the
  // good caps that come back between them).
  GstHarness *h = gst_harness_new("cudadiffenc");
  GstBus *bus = gst_bus_new();
  gst_element_set_bus(h->element, bus);
  gst_harness_set_src_caps_str(h, gst_test::raw_caps("GRAY8", 16, 8).c_str());
  const GstVideoInfo info = video_info("GRAY8", 16, 8);
  const std::string mixed = gst_test::raw_caps("GRAY8", 16, 8) + ", interlace-mode=mixed";
  size_t refusals = 0;
  for (int round = 0; round < 2; ++round) {
    GstCaps *refused = gst_caps_from_string(mixed.c_str());
    gst_harness_push_event(h, gst_event_new_caps(refused));  // (the event refs the caps)
    gst_caps_unref(refused);
    EXPECT_NE(gst_harness_push(h, buffer_from(info, scene("GRAY8", 16, 8, 0, 1), 2 * round)),
              GST_FLOW_OK);
    refusals += gst_test::pop_texts(bus, GST_MESSAGE_ERROR).size();
    EXPECT_EQ(refusals, size_t(round + 1)) << "round " << round;
    GstCaps *good = gst_caps_from_string(gst_test::raw_caps("GRAY8", 16, 8).c_str());
    gst_harness_push_event(h, gst_event_new_caps(good));
    gst_caps_unref(good);
    EXPECT_EQ(gst_harness_push(h, buffer_from(info, scene("GRAY8", 16, 8, 0, 1), 2 * round + 1)),
              GST_FLOW_OK);
  }
  gst_element_set_bus(h->element, nullptr);
  gst_object_unref(bus);
  gst_harness_teardown(h);
}

// The encoder that cannot be configured (out of memory) posts one error
// for the caps, though GstVideoEncoder tries them again before each
// buffer; when the caps before come back (GstVideoEncoder kept them as its
// input and does not configure them again), their frames are encoded again,
// from a keyframe, and decode to what they were (threshold 0). Run in a
// process of its own: the address space is limited to what the process
// holds and 48 MB more, which a 4096x4096 encoder (CPU backend) does not
// fit in.
static GstBuffer *small_frame(int t) {  // GRAY8 16x8, frame t
  GstBuffer *b = gst_buffer_new_allocate(nullptr, 16 * 8, nullptr);
  GstMapInfo map;
  gst_buffer_map(b, &map, GST_MAP_WRITE);
  for (size_t i = 0; i < map.size; ++i) map.data[i] = uint8_t(37 * t + 5 * int(i));
  gst_buffer_unmap(b, &map);
  GST_BUFFER_PTS(b) = gst_util_uint64_scale(t, GST_SECOND, 30);
  return b;
}
static int configure_out_of_memory() {
  GstHarness *h = gst_harness_new_parse("cudadiffenc backend=cpu threshold=0");
  GstBus *bus = gst_bus_new();
  gst_element_set_bus(h->element, bus);
  gst_harness_set_src_caps_str(h, gst_test::raw_caps("GRAY8", 16, 8).c_str());
  // The decoder of the packets, started (and its first frames decoded)
  // before the address space is limited.
  GstHarness *dec = gst_harness_new_parse("cudadiffdec backend=cpu");
  gst_harness_set_src_caps_str(dec, "video/x-cudadiff");
  int decoded = 0;  // frames out of the decoder, each checked against its input
  auto to_decoder = [&]() {
    while (GstBuffer *p = gst_harness_try_pull(h)) {
      const bool header = GST_BUFFER_FLAG_IS_SET(p, GST_BUFFER_FLAG_HEADER);
      if (!header && gst_harness_push(dec, p) != GST_FLOW_OK) return false;
      if (header) gst_buffer_unref(p);
    }
    while (GstBuffer *out = gst_harness_try_pull(dec)) {
      GstBuffer *in = small_frame(decoded == 0 ? 0 : decoded == 1 ? 1 : decoded + 4);
      const bool same = gst_buffer_memcmp(out, 0, bytes_of(in).data(), 16 * 8) == 0 &&
                        gst_buffer_get_size(out) == 16 * 8;
      gst_buffer_unref(in);
      gst_buffer_unref(out);
      if (!same) {
        fprintf(stderr, "error: decoded frame %d differs from its input\n", decoded);
        return false;
      }
      ++decoded;
    }
    return true;
  };
  // Two frames of these caps: the encoder's reference is theirs.
  for (int t = 0; t < 2; ++t)
    if (gst_harness_push(h, small_frame(t)) != GST_FLOW_OK) return 11;
  if (!to_decoder()) return 12;
  GstVideoInfo info = video_info("GRAY8", 4096, 4096);
  GstBuffer *frame = gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&info), nullptr);
  gst_buffer_memset(frame, 0, 7, GST_VIDEO_INFO_SIZE(&info));
  gst_buffer_add_video_meta_full(frame, GST_VIDEO_FRAME_FLAG_NONE, GST_VIDEO_FORMAT_GRAY8, 4096,
                                 4096, 1, info.offset, info.stride);
  unsigned long pages = 0;
  if (FILE *f = fopen("/proc/self/statm", "r")) {
    if (fscanf(f, "%lu", &pages) != 1) pages = 0;
    fclose(f);
  }
  if (pages == 0) return 3;
  struct rlimit limit;
  getrlimit(RLIMIT_AS, &limit);
  limit.rlim_cur = rlim_t(pages) * rlim_t(sysconf(_SC_PAGESIZE)) + (rlim_t(48) << 20);
  if (setrlimit(RLIMIT_AS, &limit) != 0) return 4;
  GstCaps *big = gst_caps_from_string(gst_test::raw_caps("GRAY8", 4096, 4096).c_str());
  gst_harness_push_event(h, gst_event_new_caps(big));
  gst_caps_unref(big);
  int pushed_ok = 0;
  for (int i = 2; i < 6; ++i) {
    GstBuffer *b = gst_buffer_ref(frame);
    GST_BUFFER_PTS(b) = i * GST_SECOND / 30;
    if (gst_harness_push(h, b) == GST_FLOW_OK) ++pushed_ok;
  }
  const std::vector<gst_test::BusText> errors = gst_test::pop_texts(bus, GST_MESSAGE_ERROR);
  for (const auto &e : errors) fprintf(stderr, "error: %s\n", e.message.c_str());
  if (pushed_ok != 0) return 5;
  if (errors.size() != 1) return 6;
  if (errors[0].message.find("configuring the encoder") == std::string::npos) return 7;
  // (frame 1, held back by frame-overlap, went out before the new caps)
  if (!to_decoder() || decoded != 2) return 13;
  // The caps before come back: frames 6, 7, 8 of theirs.
  GstCaps *small = gst_caps_from_string(gst_test::raw_caps("GRAY8", 16, 8).c_str());
  gst_harness_push_event(h, gst_event_new_caps(small));
  gst_caps_unref(small);
  bool first = true;
  for (int t = 6; t < 9; ++t) {
    const GstFlowReturn ret = gst_harness_push(h, small_frame(t));
    if (ret != GST_FLOW_OK) {
      fprintf(stderr, "error: frame %d after the caps came back: %s\n", t, gst_flow_get_name(ret));
      return 8;
    }
    // Its first packet is a keyframe (the encoder was made again: its
    // reference is not frame 1).
    GstBuffer *p = gst_harness_try_pull(h);
    while (p && GST_BUFFER_FLAG_IS_SET(p, GST_BUFFER_FLAG_HEADER)) {
      gst_buffer_unref(p);
      p = gst_harness_try_pull(h);
    }
    if (p) {
      if (first && GST_BUFFER_FLAG_IS_SET(p, GST_BUFFER_FLAG_DELTA_UNIT)) return 9;
      first = false;
      if (gst_harness_push(dec, p) != GST_FLOW_OK) return 14;
    }
  }
  gst_harness_push_event(h, gst_event_new_eos());
  if (!to_decoder()) return 15;
  gst_harness_push_event(dec, gst_event_new_eos());
  if (!to_decoder() || decoded != 5) return 16;
  if (!gst_test::pop_texts(bus, GST_MESSAGE_ERROR).empty()) return 10;
  return 0;
}

TEST(CudaDiff, EncoderOutOfMemoryPostsOneErrorAndTheCapsBeforeStillWork) {
  // Under compute-sanitizer (which sets this variable) the test's child
  // process hangs (CUDA 13.0's memcheck); the test runs the CPU backend
  // only, so the sanitizer has nothing in it to check.
  if (getenv("NV_SANITIZER_INJECTION_PORT_BASE"))
    GTEST_SKIP() << "a process of its own in a limited address space hangs under compute-sanitizer";
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer's operator new ends the process where it cannot
  // allocate, instead of throwing std::bad_alloc.
  GTEST_SKIP() << "ThreadSanitizer ends the process on a failed allocation";
#endif
#if defined(__SANITIZE_ADDRESS__)
  // So does AddressSanitizer's (whatever allocator_may_return_null says),
  // and its own allocator runs out of the limited address space as well.
  GTEST_SKIP() << "AddressSanitizer ends the process on a failed allocation";
#endif
  testing::GTEST_FLAG(death_test_style) = "threadsafe";
  EXPECT_EXIT(_exit(configure_out_of_memory()), testing::ExitedWithCode(0), "error: ");
}

// A GstVideoMeta whose planes do not fit the memory that holds them (a
// stride or an offset that reaches past the buffer, a plane that runs from
// one GstMemory into the next) is refused with an error that says so. The
// encoder read past the buffer before: a crash (SIGSEGV) with a stride of
// G_MAXINT, wrong bytes sent without a word for a plane past the end. A
// meta with padded strides that fits is encoded as before.
TEST(CudaDiff, EncoderRefusesAVideoMetaThatReachesPastItsMemory) {
  for (int version : {1, 2}) {
    for (const gst_test::MetaLayout &c : gst_test::i420_33x17_meta_layouts()) {
      SCOPED_TRACE(std::string(c.what) + ", version " + std::to_string(version));
      GstHarness *h = gst_harness_new("cudadiffenc");
      g_object_set(h->element, "stream-version", guint(version), nullptr);
      GstBus *bus = gst_bus_new();
      gst_element_set_bus(h->element, bus);
      gst_harness_set_src_caps_str(h, gst_test::raw_caps("I420", 33, 17).c_str());
      const GstFlowReturn ret =
          gst_harness_push(h, gst_test::buffer_with_meta(GST_VIDEO_FORMAT_I420, 33, 17, c.memories,
                                                         c.offsets, c.strides));
      const std::vector<gst_test::BusText> errors = gst_test::pop_texts(bus, GST_MESSAGE_ERROR);
      gst_element_set_bus(h->element, nullptr);
      gst_object_unref(bus);
      if (c.fits) {
        EXPECT_EQ(ret, GST_FLOW_OK);
        EXPECT_TRUE(errors.empty()) << errors[0].message << " | " << errors[0].debug;
        size_t packets = 0;
        while (GstBuffer *b = gst_harness_try_pull(h)) {
          if (!GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_HEADER)) ++packets;
          gst_buffer_unref(b);
        }
        EXPECT_EQ(packets, 1u);
      } else {
        EXPECT_EQ(ret, GST_FLOW_ERROR);
        ASSERT_EQ(errors.size(), 1u);
        EXPECT_NE(errors[0].debug.find("bytes past the end of the memory"), std::string::npos)
            << errors[0].message << " | " << errors[0].debug;
      }
      gst_harness_teardown(h);
    }
  }
}

TEST(CudaDiff, RoundTripEveryFormatVersion1) {
  for (const std::string &f : all_formats())
    for (int thr : {0, 20}) {
      round_trip(f, 33, 17, thr, "none", 1);
      if (have_zstd()) round_trip(f, 33, 17, thr, "zstd", 1);
    }
}

// Every format at k = 0, 5, 20: the packets carry the codec2 core's bodies,
// the decoder shows its reference, every byte within k of the input (exact
// at 0). `compression` is ignored.
TEST(CudaDiff, RoundTripEveryFormatVersion2) {
  int n = 0;
  for (const std::string &f : all_formats())
    for (int thr : {0, 5, 20})
      round_trip(f, 33, 17, thr, (have_zstd() && (n++ % 2)) ? "zstd" : "none", 2);
}

TEST(CudaDiff, OddSizes) {
  const int sizes[][2] = {{1, 1}, {3, 1}, {1, 5}, {2, 2}, {97, 31}, {641, 3}};
  for (int version : {1, 2})
    for (const char *f : {"BGR", "RGBA", "GRAY8", "I420", "NV21", "YUY2", "Y42B"})
      for (const auto &sz : sizes)
        for (int thr : {0, 20})
          round_trip(f, sz[0], sz[1], thr, have_zstd() ? "zstd" : "none", version);
}

TEST(CudaDiff, KeyframeInterval) {
  for (int version : {1, 2})
    for (int interval : {0, 1, 3}) {
      Encoded e;
      EncodeOptions o;
      o.frames = 8;
      o.version = version;
      o.props = "keyframe-interval=" + std::to_string(interval);
      encode(e, "BGR", 16, 4, o);
      for (size_t i = 0; i < e.packets.size(); ++i) {
        const bool want = i == 0 || (interval > 0 && i % size_t(interval) == 0);
        EXPECT_EQ(!GST_BUFFER_FLAG_IS_SET(e.packets[i], GST_BUFFER_FLAG_DELTA_UNIT), want)
            << "interval " << interval << " frame " << i;
        EXPECT_EQ(header_of(e.packets[i]).keyframe(), want);
        EXPECT_EQ(header_of(e.packets[i]).version, version);
      }
    }
}

TEST(CudaDiff, ForceKeyUnit) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    GstHarness *enc = gst_harness_new_parse(
        ("cudadiffenc keyframe-interval=0 stream-version=" + std::to_string(version)).c_str());
    gst_harness_set_src_caps_str(enc, gst_test::raw_caps("RGBx", 20, 6).c_str());
    const GstVideoInfo info = video_info("RGBx", 20, 6);
    std::vector<bool> keys;
    for (int t = 0; t < 7; ++t) {
      if (t == 3) {  // downstream asks (as a sink or a muxer does)
        EXPECT_TRUE(gst_harness_push_upstream_event(
            enc, gst_video_event_new_upstream_force_key_unit(GST_CLOCK_TIME_NONE, TRUE, 1)));
      }
      if (t == 5) {  // upstream asks, for the frame at its running time
        EXPECT_TRUE(gst_harness_push_event(
            enc, gst_video_event_new_downstream_force_key_unit(
                     gst_util_uint64_scale(5, GST_SECOND, 30), GST_CLOCK_TIME_NONE,
                     gst_util_uint64_scale(5, GST_SECOND, 30), TRUE, 1)));
      }
      ASSERT_EQ(gst_harness_push(enc, buffer_from(info, scene("RGBx", 20, 6, t, 2), t)),
                GST_FLOW_OK);
      GstBuffer *p = pull_packet(enc);
      ASSERT_NE(p, nullptr);
      keys.push_back(!GST_BUFFER_FLAG_IS_SET(p, GST_BUFFER_FLAG_DELTA_UNIT));
      EXPECT_EQ(header_of(p).keyframe(), keys.back());
      gst_buffer_unref(p);
    }
    EXPECT_EQ(keys, (std::vector<bool>{true, false, false, true, false, true, false}));
    gst_harness_teardown(enc);
  }
}

// A keyframe asked for while a queued delta's push fails (downstream not
// linked, e.g. an input-selector's inactive pad) is not lost: the frame that
// was to be it is dropped through the base class (so that it leaves the
// base class's list and its request stays served), the next frame is the
// keyframe, and later requests are honoured. Before, the frame was only
// unreffed: no keyframe came of that request, and the base class ignored
// every later one.
TEST(CudaDiff, ForceKeyUnitAfterAFailedPush) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    GstHarness *enc = gst_harness_new_parse(
        ("cudadiffenc keyframe-interval=0 frame-overlap=always stream-version=" +
         std::to_string(version))
            .c_str());
    gst_harness_set_src_caps_str(enc, gst_test::raw_caps("BGR", 24, 8).c_str());
    const GstVideoInfo info = video_info("BGR", 24, 8);
    // The packet of frame 2, pushed when frame 3 (a keyframe asked for)
    // sends the queued deltas out first, is refused as not linked.
    const GstClockTime refused = gst_util_uint64_scale(2, GST_SECOND, 30);
    GstElement *encoder = gst_harness_find_element(enc, "cudadiffenc");
    GstPad *src = gst_element_get_static_pad(encoder, "src");
    const gulong probe = gst_pad_add_probe(
        src, GST_PAD_PROBE_TYPE_BUFFER,
        [](GstPad *, GstPadProbeInfo *pi, gpointer data) {
          GstBuffer *b = GST_PAD_PROBE_INFO_BUFFER(pi);
          if (GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_HEADER) ||
              GST_BUFFER_PTS(b) != *static_cast<GstClockTime *>(data))
            return GST_PAD_PROBE_OK;
          gst_buffer_unref(b);
          GST_PAD_PROBE_INFO_DATA(pi) = nullptr;
          GST_PAD_PROBE_INFO_FLOW_RETURN(pi) = GST_FLOW_NOT_LINKED;
          return GST_PAD_PROBE_HANDLED;
        },
        const_cast<GstClockTime *>(&refused), nullptr);
    std::vector<GstFlowReturn> flows;
    for (int t = 0; t < 10; ++t) {
      if (t == 3 || t == 7) {
        EXPECT_TRUE(gst_harness_push_event(
            enc, gst_video_event_new_downstream_force_key_unit(
                     GST_CLOCK_TIME_NONE, GST_CLOCK_TIME_NONE, GST_CLOCK_TIME_NONE, FALSE, 1)));
      }
      flows.push_back(gst_harness_push(enc, buffer_from(info, scene("BGR", 24, 8, t, 3), t)));
    }
    EXPECT_TRUE(gst_harness_push_event(enc, gst_event_new_eos()));
    // Frame 3 sent the refused packet first.
    for (int t = 0; t < 10; ++t)
      EXPECT_EQ(flows[t], t == 3 ? GST_FLOW_NOT_LINKED : GST_FLOW_OK) << "frame " << t;
    // Packets by frame: 3 is dropped, 4 is the keyframe asked for before 3,
    // 7 the one asked for before it.
    const KeysAndDeltas packets = pull_keys_and_deltas(enc);
    EXPECT_EQ(packets.keys, (std::vector<int>{0, 4, 7}));
    EXPECT_EQ(packets.deltas, (std::vector<int>{1, 5, 6, 8, 9}));
    // Every frame left the base class's list.
    EXPECT_EQ(encoder_frames(encoder), 0u);
    gst_pad_remove_probe(src, probe);
    gst_object_unref(src);
    gst_object_unref(encoder);
    gst_harness_teardown(enc);
  }
}

namespace {

// An allocator that gives no memory (a downstream element's that cannot
// hold the size asked for).
struct FailingAllocator {
  GstAllocator parent;
};
struct FailingAllocatorClass {
  GstAllocatorClass parent_class;
};
G_DEFINE_TYPE(FailingAllocator, failing_allocator, GST_TYPE_ALLOCATOR)
void failing_allocator_class_init(FailingAllocatorClass *klass) {
  GST_ALLOCATOR_CLASS(klass)->alloc = [](GstAllocator *, gsize, GstAllocationParams *) {
    return static_cast<GstMemory *>(nullptr);
  };
  GST_ALLOCATOR_CLASS(klass)->free = [](GstAllocator *, GstMemory *) {};
}
void failing_allocator_init(FailingAllocator *) {}

}  // namespace

// No buffer from the allocator negotiated downstream: an error that says
// so, not a bare flow error.
TEST(CudaDiff, EncoderSaysWhenDownstreamsAllocatorGivesNoBuffer) {
  GstHarness *enc = gst_harness_new_parse("cudadiffenc stream-version=1");
  GstAllocator *failing = GST_ALLOCATOR(g_object_new(failing_allocator_get_type(), nullptr));
  gst_harness_set_propose_allocator(enc, failing, nullptr);
  GstBus *bus = gst_bus_new();
  GstElement *encoder = gst_harness_find_element(enc, "cudadiffenc");
  gst_element_set_bus(encoder, bus);
  gst_harness_set_src_caps_str(enc, gst_test::raw_caps("GRAY8", 32, 16).c_str());
  const GstVideoInfo info = video_info("GRAY8", 32, 16);
  EXPECT_EQ(gst_harness_push(enc, buffer_from(info, scene("GRAY8", 32, 16, 0, 3), 0)),
            GST_FLOW_ERROR);
  GstMessage *m = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR);
  ASSERT_NE(m, nullptr) << "no error message";
  GError *err = nullptr;
  gchar *debug = nullptr;
  gst_message_parse_error(m, &err, &debug);
  EXPECT_EQ(GST_MESSAGE_SRC(m), GST_OBJECT(encoder));
  EXPECT_NE(std::string(err->message).find("cannot allocate an output buffer"), std::string::npos)
      << err->message;
  g_error_free(err);
  g_free(debug);
  gst_message_unref(m);
  gst_element_set_bus(encoder, nullptr);
  gst_object_unref(bus);
  gst_object_unref(encoder);
  gst_harness_teardown(enc);
}

namespace {

// An allocator of system memory that fails while `flaky_allocations_left`
// is 0 (counted down from a positive value, never with -1): a downstream
// element's that runs out of memory for a while.
std::atomic<int> flaky_allocations_left{-1};
struct FlakyAllocator {
  GstAllocator parent;
};
struct FlakyAllocatorClass {
  GstAllocatorClass parent_class;
};
G_DEFINE_TYPE(FlakyAllocator, flaky_allocator, GST_TYPE_ALLOCATOR)
void flaky_allocator_class_init(FlakyAllocatorClass *klass) {
  GST_ALLOCATOR_CLASS(klass)->alloc = [](GstAllocator *, gsize size, GstAllocationParams *params) {
    int left = flaky_allocations_left.load();
    while (left > 0 && !flaky_allocations_left.compare_exchange_weak(left, left - 1)) {
    }
    // (system memory: it goes back to the system allocator)
    return left == 0 ? static_cast<GstMemory *>(nullptr)
                     : gst_allocator_alloc(nullptr, size, params);
  };
  GST_ALLOCATOR_CLASS(klass)->free = [](GstAllocator *, GstMemory *) {};
}
void flaky_allocator_init(FlakyAllocator *) {}

}  // namespace

// A frame whose packet cannot be made (here downstream's allocator gives no
// buffer), and the deltas queued after it (frame-overlap), leave
// GstVideoEncoder's list of frames as dropped, and their input buffers are
// freed; an application that goes on pushing after the error gets a
// keyframe next and the stream goes on. Before, they were only unreffed:
// they stayed in the list, each holding its input frame, until a flush or
// stop.
TEST(CudaDiff, FramesOfAFailedPacketLeaveTheEncoder) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    GstHarness *enc = gst_harness_new_parse(
        ("cudadiffenc keyframe-interval=0 frame-overlap=always stream-version=" +
         std::to_string(version))
            .c_str());
    GstAllocator *flaky = GST_ALLOCATOR(g_object_new(flaky_allocator_get_type(), nullptr));
    gst_harness_set_propose_allocator(enc, flaky, nullptr);
    GstBus *bus = gst_bus_new();
    GstElement *encoder = gst_harness_find_element(enc, "cudadiffenc");
    gst_element_set_bus(encoder, bus);
    gst_harness_set_src_caps_str(enc, gst_test::raw_caps("GRAY8", 32, 16).c_str());
    const GstVideoInfo info = video_info("GRAY8", 32, 16);
    // Input buffers freed so far.
    std::atomic<int> freed{0};
    auto push = [&](int t) {
      GstBuffer *b = buffer_from(info, scene("GRAY8", 32, 16, t, 3), t);
      gst_mini_object_weak_ref(
          GST_MINI_OBJECT(b),
          [](gpointer data, GstMiniObject *) { ++*static_cast<std::atomic<int> *>(data); }, &freed);
      return gst_harness_push(enc, b);
    };
    // The packets of frames 0 (a keyframe), 1 and 2 are allocated; frame
    // 3's is not: frame 3 fails, and the frames queued after it are dropped
    // with it. Its packet is made when a later frame arrives (frame 4 on
    // the CPU; on a GPU, version 2 sends a packet one frame later still, its
    // body copied while the next frame is coded), whose push fails.
    flaky_allocations_left = 3;
    int failed = 0;
    GstFlowReturn ret = GST_FLOW_OK;
    for (; failed < 8 && ret == GST_FLOW_OK; ++failed) ret = push(failed);
    --failed;
    ASSERT_EQ(ret, GST_FLOW_ERROR);
    EXPECT_GE(failed, 4);
    EXPECT_EQ(gst_test::pop_texts(bus, GST_MESSAGE_ERROR).size(), 1u);
    EXPECT_EQ(encoder_frames(encoder), 0u);
    EXPECT_EQ(freed.load(), failed + 1);
    // Downstream has memory again.
    flaky_allocations_left = -1;
    for (int t = failed + 1; t < failed + 4; ++t) EXPECT_EQ(push(t), GST_FLOW_OK) << "frame " << t;
    EXPECT_TRUE(gst_harness_push_event(enc, gst_event_new_eos()));
    const KeysAndDeltas packets = pull_keys_and_deltas(enc);
    EXPECT_EQ(packets.keys, (std::vector<int>{0, failed + 1}));
    EXPECT_EQ(packets.deltas, (std::vector<int>{1, 2, failed + 2, failed + 3}));
    EXPECT_EQ(encoder_frames(encoder), 0u);
    EXPECT_EQ(freed.load(), failed + 4);
    EXPECT_TRUE(gst_test::pop_texts(bus, GST_MESSAGE_ERROR).empty());
    gst_element_set_bus(encoder, nullptr);
    gst_object_unref(bus);
    gst_object_unref(encoder);
    gst_harness_teardown(enc);
  }
}

// A keyframe whose packet cannot be made (downstream's allocator gives no
// buffer) is followed by a keyframe: the deltas after it would have none
// to start from. Before, the next frame was a delta, and with
// keyframe-interval=0 no keyframe came at all.
TEST(CudaDiff, AKeyframeWhosePacketFailsIsFollowedByAKeyframe) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    GstHarness *enc = gst_harness_new_parse(
        ("cudadiffenc keyframe-interval=0 stream-version=" + std::to_string(version)).c_str());
    GstAllocator *flaky = GST_ALLOCATOR(g_object_new(flaky_allocator_get_type(), nullptr));
    gst_harness_set_propose_allocator(enc, flaky, nullptr);
    GstBus *bus = gst_bus_new();
    GstElement *encoder = gst_harness_find_element(enc, "cudadiffenc");
    gst_element_set_bus(encoder, bus);
    gst_harness_set_src_caps_str(enc, gst_test::raw_caps("GRAY8", 32, 16).c_str());
    const GstVideoInfo info = video_info("GRAY8", 32, 16);
    auto push = [&](int t) {
      return gst_harness_push(enc, buffer_from(info, scene("GRAY8", 32, 16, t, 3), t));
    };
    // Frame 0's packet (the first keyframe) gets no buffer.
    flaky_allocations_left = 0;
    EXPECT_EQ(push(0), GST_FLOW_ERROR);
    EXPECT_EQ(gst_test::pop_texts(bus, GST_MESSAGE_ERROR).size(), 1u);
    flaky_allocations_left = -1;
    for (int t = 1; t < 4; ++t) EXPECT_EQ(push(t), GST_FLOW_OK) << "frame " << t;
    EXPECT_TRUE(gst_harness_push_event(enc, gst_event_new_eos()));
    const KeysAndDeltas packets = pull_keys_and_deltas(enc);
    EXPECT_EQ(packets.keys, (std::vector<int>{1}));
    EXPECT_EQ(packets.deltas, (std::vector<int>{2, 3}));
    gst_element_set_bus(encoder, nullptr);
    gst_object_unref(bus);
    gst_object_unref(encoder);
    gst_harness_teardown(enc);
  }
}

// A first frame that cannot be read (a buffer shorter than its caps say)
// is dropped through GstVideoEncoder: the events that came before it
// (stream-start, segment) go downstream with the caps, before the end of
// stream. Before, the frame stayed in the base class's list with its
// events, and downstream got an end of stream without a stream-start, caps
// or segment.
TEST(CudaDiff, EventsBeforeAFrameThatCannotBeReadGoDownstream) {
  GstHarness *enc = gst_harness_new("cudadiffenc");
  GstBus *bus = gst_bus_new();
  gst_element_set_bus(enc->element, bus);
  gst_harness_set_src_caps_str(enc, gst_test::raw_caps("GRAY8", 32, 16).c_str());
  GstBuffer *shorter = gst_buffer_new_allocate(nullptr, 32 * 16 - 1, nullptr);
  GST_BUFFER_PTS(shorter) = 0;
  EXPECT_EQ(gst_harness_push(enc, shorter), GST_FLOW_ERROR);
  const std::vector<gst_test::BusText> errors = gst_test::pop_texts(bus, GST_MESSAGE_ERROR);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].message.find("cannot map the input frame"), std::string::npos)
      << errors[0].message;
  EXPECT_EQ(encoder_frames(enc->element), 0u);
  EXPECT_TRUE(gst_harness_push_event(enc, gst_event_new_eos()));
  std::vector<std::string> events;
  while (GstEvent *e = gst_harness_try_pull_event(enc)) {
    events.push_back(GST_EVENT_TYPE_NAME(e));
    gst_event_unref(e);
  }
  EXPECT_EQ(events, (std::vector<std::string>{"stream-start", "caps", "segment", "eos"}));
  gst_element_set_bus(enc->element, nullptr);
  gst_object_unref(bus);
  gst_harness_teardown(enc);
}

// A frame that cannot be read while a delta is queued before it
// (frame-overlap) is dropped after that delta's packet has gone out: the
// events that came between the two (here a custom one; a segment or tags
// alike) go downstream after the delta, as they came, not before it.
TEST(CudaDiff, EventsBeforeAFrameThatCannotBeReadFollowTheQueuedDelta) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    GstHarness *enc = gst_harness_new_parse(
        ("cudadiffenc keyframe-interval=0 frame-overlap=always stream-version=" +
         std::to_string(version))
            .c_str());
    GstBus *bus = gst_bus_new();
    GstElement *encoder = gst_harness_find_element(enc, "cudadiffenc");
    gst_element_set_bus(encoder, bus);
    // What leaves the encoder, in order: packets by frame, custom events
    // by name, the end of stream.
    std::vector<std::string> out;
    GstPad *src = gst_element_get_static_pad(encoder, "src");
    gst_pad_add_probe(
        src, GstPadProbeType(GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM),
        [](GstPad *, GstPadProbeInfo *info, gpointer data) {
          auto *log = static_cast<std::vector<std::string> *>(data);
          if (GST_PAD_PROBE_INFO_TYPE(info) & GST_PAD_PROBE_TYPE_BUFFER) {
            GstBuffer *b = GST_PAD_PROBE_INFO_BUFFER(info);
            if (!GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_HEADER))
              log->push_back("frame " + std::to_string(gst_util_uint64_scale_round(
                                            GST_BUFFER_PTS(b), 30, GST_SECOND)));
          } else {
            GstEvent *e = GST_PAD_PROBE_INFO_EVENT(info);
            if (GST_EVENT_TYPE(e) == GST_EVENT_CUSTOM_DOWNSTREAM)
              log->push_back(gst_structure_get_name(gst_event_get_structure(e)));
            else if (GST_EVENT_TYPE(e) == GST_EVENT_EOS)
              log->push_back("eos");
          }
          return GST_PAD_PROBE_OK;
        },
        &out, nullptr);
    gst_object_unref(src);
    gst_harness_set_src_caps_str(enc, gst_test::raw_caps("GRAY8", 32, 16).c_str());
    const GstVideoInfo info = video_info("GRAY8", 32, 16);
    // Frame 0 (a keyframe) goes out, frame 1 (a delta) is queued.
    for (int t = 0; t < 2; ++t)
      EXPECT_EQ(gst_harness_push(enc, buffer_from(info, scene("GRAY8", 32, 16, t, 3), t)),
                GST_FLOW_OK)
          << "frame " << t;
    EXPECT_TRUE(gst_harness_push_event(
        enc, gst_event_new_custom(GST_EVENT_CUSTOM_DOWNSTREAM, gst_structure_new_empty("marker"))));
    GstBuffer *shorter = gst_buffer_new_allocate(nullptr, 32 * 16 - 1, nullptr);
    GST_BUFFER_PTS(shorter) = gst_util_uint64_scale_int(2, GST_SECOND, 30);
    EXPECT_EQ(gst_harness_push(enc, shorter), GST_FLOW_ERROR);
    EXPECT_EQ(gst_test::pop_texts(bus, GST_MESSAGE_ERROR).size(), 1u);
    EXPECT_TRUE(gst_harness_push_event(enc, gst_event_new_eos()));
    EXPECT_EQ(out, (std::vector<std::string>{"frame 0", "frame 1", "marker", "eos"}));
    EXPECT_EQ(encoder_frames(encoder), 0u);
    gst_element_set_bus(encoder, nullptr);
    gst_object_unref(bus);
    gst_object_unref(encoder);
    gst_harness_teardown(enc);
  }
}

// Without a live upstream the encoder keeps one delta queued while it packs
// the previous one (GstHarness reports a live upstream unless told), in
// both versions. The packets are those of the live path, byte for byte, one
// frame later; a keyframe, end of stream, a caps change and a flush each
// deal with the queued delta.
TEST(CudaDiff, NonLiveUpstreamOverlapsFramesWithTheSamePackets) {
  for (int version : {1, 2})
    for (const char *format : {"BGR", "I420"}) {
      SCOPED_TRACE(std::string(format) + ", version " + std::to_string(version));
      const int w = 37, h = 11, frames = 13;
      Encoded live;
      EncodeOptions o;
      o.frames = frames;
      o.version = version;
      o.props = "keyframe-interval=6 compression=none";
      encode(live, format, w, h, o);

      GstHarness *enc = gst_harness_new_parse(
          ("cudadiffenc threshold=20 keyframe-interval=6 compression=none stream-version=" +
           std::to_string(version))
              .c_str());
      gst_harness_set_live(enc, FALSE);
      gst_harness_set_src_caps_str(enc, gst_test::raw_caps(format, w, h).c_str());
      const GstVideoInfo info = video_info(format, w, h);
      std::vector<GstBuffer *> got;
      for (int t = 0; t < frames; ++t) {
        ASSERT_EQ(gst_harness_push(enc, buffer_from(info, scene(format, w, h, t, o.seed), t)),
                  GST_FLOW_OK);
        while (GstBuffer *p = pull_packet(enc)) got.push_back(p);
        // Frame 0 and 6, 12 (keyframes) leave at once, with the deltas before
        // them; a delta waits for the next frames_held() frames (five deltas
        // in a row: the queue fills, and the oldest leaves as each comes).
        const bool key = t % 6 == 0;
        EXPECT_EQ(got.size(), size_t(key ? t + 1 : t + 1 - std::min(frames_held(version), t % 6)))
            << "after frame " << t;
      }
      gst_harness_push_event(enc, gst_event_new_eos());
      while (GstBuffer *p = pull_packet(enc)) got.push_back(p);
      ASSERT_EQ(got.size(), size_t(frames));
      for (int t = 0; t < frames; ++t) {
        EXPECT_EQ(bytes_of(got[t]), bytes_of(live.packets[t])) << "packet " << t;
        EXPECT_EQ(GST_BUFFER_PTS(got[t]), GST_BUFFER_PTS(live.packets[t])) << "packet " << t;
        EXPECT_EQ(GST_BUFFER_FLAG_IS_SET(got[t], GST_BUFFER_FLAG_DELTA_UNIT),
                  GST_BUFFER_FLAG_IS_SET(live.packets[t], GST_BUFFER_FLAG_DELTA_UNIT));
        gst_buffer_unref(got[t]);
      }
      gst_harness_teardown(enc);
    }
}

TEST(CudaDiff, NonLiveQueuedDeltaAtCapsChangeAndFlush) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    GstHarness *enc = gst_harness_new_parse(
        ("cudadiffenc keyframe-interval=0 threshold=0 stream-version=" + std::to_string(version))
            .c_str());
    gst_harness_set_live(enc, FALSE);
    gst_harness_set_src_caps_str(enc, gst_test::raw_caps("GRAY8", 24, 8).c_str());
    GstVideoInfo info = video_info("GRAY8", 24, 8);
    std::vector<GstBuffer *> got;
    auto pull_all = [&] {
      while (GstBuffer *p = pull_packet(enc)) got.push_back(p);
    };
    for (int t = 0; t < 3; ++t)
      ASSERT_EQ(gst_harness_push(enc, buffer_from(info, scene("GRAY8", 24, 8, t, 3), t)),
                GST_FLOW_OK);
    pull_all();
    // Frame 2 is queued (and frame 1, where two deltas are held).
    ASSERT_EQ(got.size(), size_t(3 - std::min(2, frames_held(version))));
    // New caps: the queued deltas leave first, in the old size, then a keyframe.
    gst_harness_set_src_caps_str(enc, gst_test::raw_caps("GRAY8", 16, 6).c_str());
    info = video_info("GRAY8", 16, 6);
    ASSERT_EQ(gst_harness_push(enc, buffer_from(info, scene("GRAY8", 16, 6, 3, 3), 3)),
              GST_FLOW_OK);
    pull_all();
    ASSERT_EQ(got.size(), 4u);
    EXPECT_EQ(header_of(got[2]).width, 24u);
    EXPECT_FALSE(header_of(got[2]).keyframe());
    EXPECT_EQ(header_of(got[2]).frame_number, 2u);
    EXPECT_EQ(header_of(got[3]).width, 16u);
    EXPECT_TRUE(header_of(got[3]).keyframe());
    ASSERT_EQ(gst_harness_push(enc, buffer_from(info, scene("GRAY8", 16, 6, 4, 3), 4)),
              GST_FLOW_OK);
    pull_all();
    EXPECT_EQ(got.size(), 4u);  // frame 4 queued
    // A flush drops the queued delta; the next frame is a keyframe, out at once.
    flush_and_restart(enc, gst_test::raw_caps("GRAY8", 16, 6));
    ASSERT_EQ(gst_harness_push(enc, buffer_from(info, scene("GRAY8", 16, 6, 5, 3), 5)),
              GST_FLOW_OK);
    pull_all();
    ASSERT_EQ(got.size(), 5u);
    EXPECT_TRUE(header_of(got[4]).keyframe());
    // The dropped delta never left, so the keyframe takes its number (4): a
    // receiver sees consecutive numbers, no packets missing.
    EXPECT_EQ(header_of(got[4]).frame_number, 4u);
    for (GstBuffer *b : got) gst_buffer_unref(b);
    gst_harness_teardown(enc);
  }
}

// frame-overlap overrides the latency query both ways; a drain query pushes
// the waiting packets; stopping with a packet waiting drops it cleanly.
TEST(CudaDiff, FrameOverlapPropertyAndDrain) {
  struct Case {
    const char *overlap;
    bool live;
    bool delayed;
  };
  for (int version : {1, 2})
    for (const Case c : {Case{"never", false, false}, Case{"always", true, true},
                         Case{"auto", true, false}, Case{"auto", false, true}}) {
      SCOPED_TRACE(std::string(c.overlap) + (c.live ? " live" : " not live") + ", version " +
                   std::to_string(version));
      GstHarness *enc = gst_harness_new_parse(
          ("cudadiffenc keyframe-interval=0 stream-version=" + std::to_string(version) +
           " frame-overlap=" + c.overlap)
              .c_str());
      gst_harness_set_live(enc, c.live);
      gst_harness_set_src_caps_str(enc, gst_test::raw_caps("BGRx", 12, 5).c_str());
      const GstVideoInfo info = video_info("BGRx", 12, 5);
      int out = 0;
      for (int t = 0; t < 4; ++t) {
        ASSERT_EQ(gst_harness_push(enc, buffer_from(info, scene("BGRx", 12, 5, t, 4), t)),
                  GST_FLOW_OK);
        while (GstBuffer *p = pull_packet(enc)) {
          EXPECT_EQ(header_of(p).frame_number, uint64_t(out));
          ++out;
          gst_buffer_unref(p);
        }
        // The keyframe leaves at once, each delta once frames_held() follow it.
        const int held = frames_held(version);
        EXPECT_EQ(out, c.delayed && t > 0 ? std::max(1, t + 1 - held) : t + 1)
            << "after frame " << t;
      }
      // A drain query (serialized, from upstream) pushes what waits.
      GstQuery *drain = gst_query_new_drain();
      EXPECT_TRUE(gst_pad_peer_query(enc->srcpad, drain));
      gst_query_unref(drain);
      while (GstBuffer *p = pull_packet(enc)) {
        EXPECT_EQ(header_of(p).frame_number, uint64_t(out));
        ++out;
        gst_buffer_unref(p);
      }
      EXPECT_EQ(out, 4);
      // One more delta left waiting when the harness stops the element.
      ASSERT_EQ(gst_harness_push(enc, buffer_from(info, scene("BGRx", 12, 5, 4, 4), 4)),
                GST_FLOW_OK);
      gst_harness_teardown(enc);
    }
}

// Upstream of the harness answers LATENCY with live, min 0, max 100 ms
// (GstHarness's own answer has no max); other queries as before.
static GstPadQueryFunction harness_src_query = nullptr;
static gboolean bounded_latency_query(GstPad *pad, GstObject *parent, GstQuery *query) {
  if (GST_QUERY_TYPE(query) != GST_QUERY_LATENCY) return harness_src_query(pad, parent, query);
  gst_query_set_latency(query, TRUE, 0, 100 * GST_MSECOND);
  return TRUE;
}

// The element's LATENCY answer (min, max) with upstream at 0 to 100 ms.
static void query_latency(GstHarness *h, GstClockTime *min, GstClockTime *max) {
  if (GST_PAD_QUERYFUNC(h->srcpad) != bounded_latency_query) {
    harness_src_query = GST_PAD_QUERYFUNC(h->srcpad);
    gst_pad_set_query_function(h->srcpad, bounded_latency_query);
  }
  GstQuery *q = gst_query_new_latency();
  ASSERT_TRUE(gst_pad_peer_query(h->sinkpad, q));
  gboolean live = FALSE;
  gst_query_parse_latency(q, &live, min, max);
  gst_query_unref(q);
}

// A frame held back by frame-overlap is one frame interval of latency: the
// encoder (frames_held() of them) and the decoder (one), of either version,
// report it (min and max) in LATENCY queries, and nothing without overlap
// (the decoder reports the caps' frame until a keyframe).
TEST(CudaDiff, FrameOverlapReportsItsFramesOfLatency) {
  for (int version : {1, 2})
    for (const char *overlap : {"never", "always"}) {
      SCOPED_TRACE(std::string(overlap) + ", version " + std::to_string(version));
      const bool on = std::string(overlap) == "always";
      const bool held = on;  // by the encoder
      GstHarness *enc = gst_harness_new_parse(
          ("cudadiffenc keyframe-interval=3 stream-version=" + std::to_string(version) +
           " frame-overlap=" + overlap)
              .c_str());
      gst_harness_set_src_caps_str(enc, gst_test::raw_caps("BGRx", 12, 5, 25).c_str());
      const GstVideoInfo info = video_info("BGRx", 12, 5, 25);
      std::vector<GstBuffer *> packets;
      for (int t = 0; t < 4; ++t) {
        ASSERT_EQ(gst_harness_push(enc, buffer_from(info, scene("BGRx", 12, 5, t, 5), t)),
                  GST_FLOW_OK);
        while (GstBuffer *p = pull_packet(enc)) packets.push_back(p);
      }
      GstClockTime min = 1, max = 1;
      query_latency(enc, &min, &max);
      const GstClockTime delay = held ? frames_held(version) * GST_SECOND / 25 : 0;
      EXPECT_EQ(min, delay) << "encoder min";
      EXPECT_EQ(max, 100 * GST_MSECOND + delay) << "encoder max";
      gst_harness_push_event(enc, gst_event_new_eos());
      while (GstBuffer *p = pull_packet(enc)) packets.push_back(p);
      EXPECT_EQ(packets.size(), 4u);
      gst_harness_teardown(enc);

      // The decoder: the caps' framerate until a keyframe says (25 fps here).
      GstHarness *dec =
          gst_harness_new_parse((std::string("cudadiffdec frame-overlap=") + overlap).c_str());
      gst_harness_set_src_caps_str(dec, "video/x-cudadiff, framerate=(fraction)50/1");
      query_latency(dec, &min, &max);
      EXPECT_EQ(min, on ? GST_SECOND / 50 : 0) << "decoder min, from the caps";
      EXPECT_EQ(max, 100 * GST_MSECOND + (on ? GST_SECOND / 50 : 0))
          << "decoder max, from the caps";
      int frames = 0;
      for (GstBuffer *p : packets) {
        ASSERT_EQ(gst_harness_push(dec, p), GST_FLOW_OK);
        while (GstBuffer *f = gst_harness_try_pull(dec)) {
          ++frames;
          gst_buffer_unref(f);
        }
      }
      query_latency(dec, &min, &max);
      EXPECT_EQ(min, on ? GST_SECOND / 25 : 0) << "decoder min, from the stream";
      EXPECT_EQ(max, 100 * GST_MSECOND + (on ? GST_SECOND / 25 : 0))
          << "decoder max, from the stream";
      EXPECT_EQ(frames, on ? 3 : 4);  // one frame in flight with overlap
      gst_harness_push_event(dec, gst_event_new_eos());
      while (GstBuffer *f = gst_harness_try_pull(dec)) {
        ++frames;
        gst_buffer_unref(f);
      }
      EXPECT_EQ(frames, 4);
      gst_harness_teardown(dec);
    }
}

// With a variable framerate (0/1) the frames held by frame-overlap are
// reported at 25 frames per second, as GStreamer's own encoders assume,
// rather than as no latency at all (a live pipeline's sink would drop them).
TEST(CudaDiff, FrameOverlapAtAVariableFramerateReportsLatencyAt25Fps) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    GstHarness *enc = gst_harness_new_parse(
        ("cudadiffenc frame-overlap=always stream-version=" + std::to_string(version)).c_str());
    gst_harness_set_src_caps_str(enc, gst_test::raw_caps("BGRx", 12, 5, 0).c_str());
    const GstVideoInfo info = video_info("BGRx", 12, 5, 0);
    ASSERT_EQ(gst_harness_push(enc, buffer_from(info, scene("BGRx", 12, 5, 0, 5), 0)), GST_FLOW_OK);
    GstClockTime min = 1, max = 1;
    query_latency(enc, &min, &max);
    EXPECT_EQ(min, frames_held(version) * GST_SECOND / 25) << "encoder min";
    EXPECT_EQ(max, 100 * GST_MSECOND + frames_held(version) * GST_SECOND / 25) << "encoder max";
    gst_harness_teardown(enc);
  }
  GstHarness *dec = gst_harness_new_parse("cudadiffdec frame-overlap=always");
  gst_harness_set_src_caps_str(dec, "video/x-cudadiff, framerate=(fraction)0/1");
  GstClockTime min = 1, max = 1;
  query_latency(dec, &min, &max);
  EXPECT_EQ(min, GST_SECOND / 25) << "decoder min";
  EXPECT_EQ(max, 100 * GST_MSECOND + GST_SECOND / 25) << "decoder max";
  gst_harness_teardown(dec);
}

TEST(CudaDiff, CapsChangeGivesKeyframeAndDecoderRenegotiates) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    GstHarness *enc = gst_harness_new_parse(
        ("cudadiffenc keyframe-interval=0 threshold=0 stream-version=" + std::to_string(version))
            .c_str());
    std::vector<GstBuffer *> packets;
    std::vector<Bytes> inputs;
    struct Part {
      const char *format;
      int w, h;
    } parts[] = {{"BGR", 12, 5}, {"NV12", 10, 6}, {"NV12", 31, 3}};
    for (const Part &part : parts) {
      gst_harness_set_src_caps_str(enc, gst_test::raw_caps(part.format, part.w, part.h).c_str());
      const GstVideoInfo info = video_info(part.format, part.w, part.h);
      for (int t = 0; t < 3; ++t) {
        const int index = int(packets.size());
        inputs.push_back(scene(part.format, part.w, part.h, t, 3));
        ASSERT_EQ(gst_harness_push(enc, buffer_from(info, inputs.back(), index)), GST_FLOW_OK);
        GstBuffer *p = pull_packet(enc);
        ASSERT_NE(p, nullptr);
        EXPECT_EQ(!GST_BUFFER_FLAG_IS_SET(p, GST_BUFFER_FLAG_DELTA_UNIT), t == 0)
            << part.format << " " << part.w << " frame " << t;
        EXPECT_EQ(header_of(p).frame_number, uint64_t(index)) << "frame numbers run on";
        packets.push_back(p);
      }
    }
    gst_harness_teardown(enc);
    Decoded d;
    decode(d, packets);
    ASSERT_EQ(d.frames.size(), inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) EXPECT_EQ(d.frames[i], inputs[i]) << i;
    EXPECT_NE(d.caps[0].find("BGR"), std::string::npos) << d.caps[0];
    EXPECT_NE(d.caps[3].find("NV12"), std::string::npos) << d.caps[3];
    EXPECT_NE(d.caps[3].find("width=(int)10"), std::string::npos) << d.caps[3];
    EXPECT_NE(d.caps[6].find("width=(int)31"), std::string::npos) << d.caps[6];
    EXPECT_TRUE(d.warnings.empty());
    for (GstBuffer *p : packets) {
      EXPECT_EQ(header_of(p).version, version);
      gst_buffer_unref(p);
    }
  }
}

TEST(CudaDiff, StatsAndMessagesVersion1) {
  GstHarness *enc =
      gst_harness_new_parse("cudadiffenc stream-version=1 stats-interval=2 keyframe-interval=3");
  GstBus *bus = gst_bus_new();
  gst_element_set_bus(enc->element, bus);
  gst_harness_set_src_caps_str(enc, gst_test::raw_caps("BGR", 40, 10).c_str());
  const GstVideoInfo info = video_info("BGR", 40, 10);
  Model model;
  guint64 bytes_out = 0, changed = 0, delta_out = 0;
  const int frames = 7;
  for (int t = 0; t < frames; ++t) {
    const Bytes in = scene("BGR", 40, 10, t, 4);
    ASSERT_EQ(gst_harness_push(enc, buffer_from(info, in, t)), GST_FLOW_OK);
    GstBuffer *p = pull_packet(enc);
    ASSERT_NE(p, nullptr);
    const bool key = !GST_BUFFER_FLAG_IS_SET(p, GST_BUFFER_FLAG_DELTA_UNIT);
    const uint64_t c = model.apply(in, key, 20);
    changed += c;
    bytes_out += gst_buffer_get_size(p);
    if (!key) delta_out += gst_buffer_get_size(p);
    gst_buffer_unref(p);
  }
  GstElement *el = gst_harness_find_element(enc, "cudadiffenc");
  GstStructure *s = stats_of(el);
  gst_object_unref(el);
  EXPECT_EQ(stat(s, "frames"), guint64(frames));
  EXPECT_EQ(stat(s, "keyframes"), 3u);  // 0, 3, 6
  EXPECT_EQ(stat(s, "bytes-in"), guint64(frames) * 1200);
  EXPECT_EQ(stat(s, "bytes-out"), bytes_out);
  EXPECT_EQ(stat(s, "changed-bytes"), changed);
  EXPECT_EQ(stat(s, "report-layout-bytes"), 3 * 1200 + 5 * changed);
  EXPECT_EQ(stat(s, "delta-bytes-out"), delta_out);
  EXPECT_EQ(stat(s, "delta-report-layout-bytes"), 5 * changed);
  EXPECT_GT(changed, 0u);
  EXPECT_EQ(stat(s, "stream-version"), 1u);
  for (const char *blocks :
       {"blocks-skip", "blocks-temporal", "blocks-temporal-spatial", "blocks-spatial"})
    EXPECT_EQ(stat(s, blocks), 0u) << blocks << " counts version 2 blocks only";
  gst_structure_free(s);
  int messages = 0;
  while (GstMessage *m = gst_bus_pop_filtered(bus, GST_MESSAGE_ELEMENT)) {
    const GstStructure *ms = gst_message_get_structure(m);
    if (gst_structure_has_name(ms, "cudadiffenc-stats")) {
      ++messages;
      EXPECT_EQ(stat(ms, "frames"), guint64(2 * messages));
    }
    gst_message_unref(m);
  }
  EXPECT_EQ(messages, 3);  // after frames 2, 4, 6
  gst_element_set_bus(enc->element, nullptr);
  gst_object_unref(bus);
  gst_harness_teardown(enc);
}

// Version 2: the same counters, with changed-bytes measured against the
// version 2 picture (what a version 1 delta would have sent from it), and
// the blocks of each mode as the core reports them.
TEST(CudaDiff, StatsAndMessagesVersion2) {
  GstHarness *enc =
      gst_harness_new_parse("cudadiffenc stream-version=2 stats-interval=3 keyframe-interval=4");
  GstBus *bus = gst_bus_new();
  gst_element_set_bus(enc->element, bus);
  const int w = 70, h = 40;  // 5 x 3 blocks of 16x16
  gst_harness_set_src_caps_str(enc, gst_test::raw_caps("RGB", w, h).c_str());
  const GstVideoInfo info = video_info("RGB", w, h);
  Codec2Model model;
  guint64 bytes_out = 0, changed = 0, delta_out = 0, blocks[4] = {0, 0, 0, 0};
  const int frames = 9;
  for (int t = 0; t < frames; ++t) {
    const Bytes in = scene("RGB", w, h, t, 6);
    ASSERT_EQ(gst_harness_push(enc, buffer_from(info, in, t)), GST_FLOW_OK);
    GstBuffer *p = pull_packet(enc);
    ASSERT_NE(p, nullptr);
    const bool key = !GST_BUFFER_FLAG_IS_SET(p, GST_BUFFER_FLAG_DELTA_UNIT);
    if (!key)
      for (size_t i = 0; i < in.size(); ++i)
        changed += std::abs(int(in[i]) - int(model.picture[i])) > 20;
    EXPECT_EQ(payload_of(p), model.apply("RGB", w, h, in, key, 20));
    for (int m = 0; m < 4; ++m) blocks[m] += model.stats.blocks[m];
    bytes_out += gst_buffer_get_size(p);
    if (!key) delta_out += gst_buffer_get_size(p);
    gst_buffer_unref(p);
  }
  GstElement *el = gst_harness_find_element(enc, "cudadiffenc");
  GstStructure *s = stats_of(el);
  gst_object_unref(el);
  EXPECT_EQ(stat(s, "stream-version"), 2u);
  EXPECT_EQ(stat(s, "frames"), guint64(frames));
  EXPECT_EQ(stat(s, "keyframes"), 3u);  // 0, 4, 8
  EXPECT_EQ(stat(s, "bytes-in"), guint64(frames) * w * h * 3);
  EXPECT_EQ(stat(s, "bytes-out"), bytes_out);
  EXPECT_EQ(stat(s, "delta-bytes-out"), delta_out);
  EXPECT_EQ(stat(s, "changed-bytes"), changed);
  EXPECT_GT(changed, 0u);
  EXPECT_EQ(stat(s, "report-layout-bytes"), 3u * w * h * 3 + 5 * changed);
  EXPECT_EQ(stat(s, "delta-report-layout-bytes"), 5 * changed);
  const char *names[4] = {"blocks-skip", "blocks-temporal", "blocks-temporal-spatial",
                          "blocks-spatial"};
  guint64 total = 0;
  for (int m = 0; m < 4; ++m) {
    EXPECT_EQ(stat(s, names[m]), blocks[m]) << names[m];
    total += stat(s, names[m]);
  }
  EXPECT_EQ(total, guint64(frames) * 15) << "every block of every frame, once";
  EXPECT_GE(stat(s, "blocks-spatial"), 3u * 15) << "keyframes are all spatial";
  EXPECT_GT(
      stat(s, "blocks-skip") + stat(s, "blocks-temporal") + stat(s, "blocks-temporal-spatial"), 0u);
  gst_structure_free(s);
  int messages = 0;
  while (GstMessage *m = gst_bus_pop_filtered(bus, GST_MESSAGE_ELEMENT)) {
    const GstStructure *ms = gst_message_get_structure(m);
    if (gst_structure_has_name(ms, "cudadiffenc-stats")) {
      ++messages;
      EXPECT_EQ(stat(ms, "frames"), guint64(3 * messages));
      EXPECT_EQ(stat(ms, "stream-version"), 2u);
    }
    gst_message_unref(m);
  }
  EXPECT_EQ(messages, 3);
  gst_element_set_bus(enc->element, nullptr);
  gst_object_unref(bus);
  gst_harness_teardown(enc);
}

TEST(CudaDiff, ThresholdChangesWhilePlayingVersion1) {
  GstHarness *enc =
      gst_harness_new_parse("cudadiffenc stream-version=1 threshold=30 keyframe-interval=0");
  gst_harness_set_src_caps_str(enc, gst_test::raw_caps("GRAY8", 64, 8).c_str());
  const GstVideoInfo info = video_info("GRAY8", 64, 8);
  std::vector<GstBuffer *> packets;
  std::vector<Bytes> pictures;
  Model model;
  for (int t = 0; t < 6; ++t) {
    const int thr = t < 3 ? 30 : 0;
    if (t == 3) {
      GstElement *el = gst_harness_find_element(enc, "cudadiffenc");
      g_object_set(el, "threshold", 0u, nullptr);
      gst_object_unref(el);
    }
    const Bytes in = scene("GRAY8", 64, 8, t, 5);
    ASSERT_EQ(gst_harness_push(enc, buffer_from(info, in, t)), GST_FLOW_OK);
    packets.push_back(pull_packet(enc));
    model.apply(in, t == 0, thr);
    pictures.push_back(model.picture);
    if (t >= 3) {
      EXPECT_EQ(model.picture, in);
    }
  }
  gst_harness_teardown(enc);
  Decoded d;
  decode(d, packets);
  ASSERT_EQ(d.frames.size(), pictures.size());
  for (size_t i = 0; i < pictures.size(); ++i) EXPECT_EQ(d.frames[i], pictures[i]) << i;
  for (GstBuffer *p : packets) gst_buffer_unref(p);
}

// Version 2: each body carries its threshold, so a change applies from the
// next frame without a keyframe: frames after a change to 0 are exact, each
// frame is within its own threshold, and the decoder follows.
TEST(CudaDiff, ThresholdChangesWhilePlayingVersion2) {
  GstHarness *enc =
      gst_harness_new_parse("cudadiffenc stream-version=2 threshold=30 keyframe-interval=0");
  const int w = 50, h = 20;
  gst_harness_set_src_caps_str(enc, gst_test::raw_caps("I420", w, h).c_str());
  const GstVideoInfo info = video_info("I420", w, h);
  GstElement *el = gst_harness_find_element(enc, "cudadiffenc");
  std::vector<GstBuffer *> packets;
  std::vector<Bytes> pictures;
  Codec2Model model;
  const int thresholds[9] = {30, 30, 30, 0, 0, 0, 12, 12, 12};
  for (int t = 0; t < 9; ++t) {
    if (t > 0 && thresholds[t] != thresholds[t - 1])
      g_object_set(el, "threshold", guint(thresholds[t]), nullptr);
    const Bytes in = scene("I420", w, h, t, 5);
    ASSERT_EQ(gst_harness_push(enc, buffer_from(info, in, t)), GST_FLOW_OK);
    GstBuffer *p = pull_packet(enc);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(GST_BUFFER_FLAG_IS_SET(p, GST_BUFFER_FLAG_DELTA_UNIT), t > 0)
        << "no keyframe at a threshold change, frame " << t;
    const Bytes body = payload_of(p);
    ASSERT_GT(body.size(), 4u);
    EXPECT_EQ(body[1], cudadiff::codec2::frame_k(thresholds[t], t == 0))
        << "the body's quantiser, frame " << t;
    EXPECT_EQ(body, model.apply("I420", w, h, in, t == 0, thresholds[t])) << "frame " << t;
    int worst = 0;
    for (size_t i = 0; i < in.size(); ++i)
      worst = std::max(worst, std::abs(int(in[i]) - int(model.picture[i])));
    EXPECT_LE(worst, thresholds[t]) << "frame " << t;
    if (thresholds[t] == 0) {
      EXPECT_EQ(model.picture, in) << "frame " << t;
    }
    packets.push_back(p);
    pictures.push_back(model.picture);
  }
  gst_object_unref(el);
  gst_harness_teardown(enc);
  Decoded d;
  decode(d, packets);
  EXPECT_TRUE(d.warnings.empty());
  ASSERT_EQ(d.frames.size(), pictures.size());
  for (size_t i = 0; i < pictures.size(); ++i) EXPECT_EQ(d.frames[i], pictures[i]) << i;
  for (GstBuffer *p : packets) gst_buffer_unref(p);
}

TEST(CudaDiff, DecoderWaitsForKeyframe) {
  for (int version : {1, 2}) {
    Encoded e;
    EncodeOptions o;
    o.frames = 8;
    o.version = version;
    o.props = "keyframe-interval=5";
    encode(e, "BGRA", 21, 7, o);
    // A client that starts with deltas 2, 3, 4: nothing until keyframe 5, no warning.
    Decoded d;
    decode(d, std::vector<GstBuffer *>(e.packets.begin() + 2, e.packets.end()));
    EXPECT_TRUE(d.warnings.empty());
    ASSERT_EQ(d.frames.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(d.frames[i], e.pictures[5 + i]) << version;
  }
}

namespace {

// A copy of `packet` with one byte of its payload changed; with
// `fix_checksum` the payload crc is made right again (damage the checksum
// cannot see, which the delta's own checks must).
GstBuffer *damaged(GstBuffer *packet, size_t payload_offset, uint8_t value, bool fix_checksum) {
  Bytes b = bytes_of(packet);
  b[64 + payload_offset] = value;
  if (fix_checksum) fix_checksums(b);
  return buffer_like(packet, b);
}

// A copy of `packet` whose header announces a frame of w x h (both
// checksums right: what a crafted packet can do).
GstBuffer *announcing(GstBuffer *packet, uint32_t w, uint32_t h) {
  Bytes b = bytes_of(packet);
  for (int i = 0; i < 4; ++i) {
    b[40 + i] = uint8_t(w >> (8 * i));
    b[44 + i] = uint8_t(h >> (8 * i));
  }
  fix_checksums(b);
  return buffer_like(packet, b);
}

}  // namespace

namespace {

// Sets or clears `pad`'s flushing flag alone: what a flush-start leaves a
// source pad in while the streaming thread is still inside the element.
void set_flushing(GstPad *pad, bool flushing) {
  GST_OBJECT_LOCK(pad);
  if (flushing)
    GST_PAD_SET_FLUSHING(pad);
  else
    GST_PAD_UNSET_FLUSHING(pad);
  GST_OBJECT_UNLOCK(pad);
}

}  // namespace

// A keyframe of a new size reaching the decoder or the parser while its
// source pad flushes (a seek or a stop meanwhile): pushing its new caps
// fails, which is a flush, not a negotiation error (that stopped the
// pipeline with "not-negotiated"), and no packet is counted as dropped.
// After the flush a keyframe of the old size gets its caps again (the
// flushing pad kept the new ones: a file's seek back before the change),
// then the new size.
TEST(CudaDiff, NewCapsWhileTheOutputFlushes) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    Encoded small, large;
    EncodeOptions o;
    o.frames = 2;
    o.version = version;
    encode(small, "BGR", 16, 8, o);
    encode(large, "BGR", 24, 8, o);
    for (const char *factory : {"cudadiffdec", "cudadiffparse"}) {
      SCOPED_TRACE(factory);
      const bool decoder = std::string(factory) == "cudadiffdec";
      GstHarness *h = gst_harness_new(factory);
      gst_harness_set_src_caps_str(h, "video/x-cudadiff");
      GstPad *src = gst_element_get_static_pad(h->element, "src");
      EXPECT_EQ(gst_harness_push(h, gst_buffer_ref(small.packets[0])), GST_FLOW_OK);
      set_flushing(src, true);
      EXPECT_EQ(gst_harness_push(h, gst_buffer_ref(large.packets[0])), GST_FLOW_FLUSHING);
      // The flush's events; then the old size, then the new one.
      set_flushing(src, false);
      gst_harness_push_event(h, gst_event_new_flush_start());
      gst_harness_push_event(h, gst_event_new_flush_stop(TRUE));
      GstSegment segment;
      gst_segment_init(&segment, GST_FORMAT_TIME);
      EXPECT_TRUE(gst_harness_push_event(h, gst_event_new_segment(&segment)));
      while (GstBuffer *out = gst_harness_try_pull(h)) gst_buffer_unref(out);
      const std::vector<const Encoded *> sent = {&small, &large, &large};
      const std::vector<size_t> frame = {0, 0, 1};
      for (size_t i = 0; i < sent.size(); ++i) {
        EXPECT_EQ(gst_harness_push(h, gst_buffer_ref(sent[i]->packets[frame[i]])), GST_FLOW_OK);
        if (i == sent.size() - 1) gst_harness_push_event(h, gst_event_new_eos());
        GstBuffer *out = gst_harness_try_pull(h);
        ASSERT_NE(out, nullptr) << i;
        GstCaps *caps = gst_pad_get_current_caps(h->sinkpad);
        ASSERT_NE(caps, nullptr) << i;
        int width = 0;
        EXPECT_TRUE(gst_structure_get_int(gst_caps_get_structure(caps, 0), "width", &width));
        EXPECT_EQ(width, sent[i] == &small ? 16 : 24) << i;
        if (decoder)
          EXPECT_EQ(canonical_of(out, caps), sent[i]->pictures[frame[i]]) << i;
        else
          EXPECT_EQ(bytes_of(out), bytes_of(sent[i]->packets[frame[i]])) << i;
        gst_caps_unref(caps);
        gst_buffer_unref(out);
      }
      EXPECT_EQ(gst_harness_try_pull(h), nullptr);
      if (decoder) {
        GstStructure *stats = nullptr;
        g_object_get(h->element, "stats", &stats, nullptr);
        ASSERT_NE(stats, nullptr);
        guint64 dropped = 1;
        EXPECT_TRUE(gst_structure_get_uint64(stats, "dropped-packets", &dropped));
        EXPECT_EQ(dropped, 0u);
        gst_structure_free(stats);
      }
      gst_object_unref(src);
      gst_harness_teardown(h);
    }
  }
}

// A keyframe announcing a frame larger than max-pixels is dropped before
// anything is allocated for it, with one warning that names the property,
// and decoding resumes at the next keyframe that fits.
TEST(CudaDiff, DecoderRefusesKeyframesLargerThanMaxPixels) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    Encoded e;
    EncodeOptions o;
    o.frames = 8;
    o.version = version;
    o.props = "keyframe-interval=4 compression=none";
    encode(e, "BGR", 45, 11, o);  // 495 pixels
    const std::vector<GstBuffer *> all(e.packets.begin(), e.packets.end());
    if (version == 2) {
      // A header with right checksums announcing 16384x16384 (805 MB of BGR,
      // several GB of decoder state) over a small body: refused by default.
      std::vector<GstBuffer *> in = all;
      in[0] = announcing(e.packets[0], 16384, 16384);
      Decoded d;
      decode(d, in);
      gst_buffer_unref(in[0]);
      ASSERT_EQ(d.frames.size(), 4u);
      for (size_t i = 0; i < 4; ++i) EXPECT_EQ(d.frames[i], e.pictures[4 + i]) << i;
      ASSERT_EQ(d.warnings.size(), 1u);
      EXPECT_NE(d.warnings[0].find("larger than max-pixels"), std::string::npos) << d.warnings[0];
      EXPECT_NE(d.warnings[0].find("16384x16384 is 268435456 pixels, more than "
                                   "max-pixels=35389440"),
                std::string::npos)
          << d.warnings[0];
    }
    // A limit one pixel below the stream's frames: both keyframes refused,
    // one warning for the loss; at the frames' size or without a limit,
    // every frame.
    Decoded below, at, unlimited;
    decode(below, all, false, "cudadiffdec max-pixels=494");
    EXPECT_TRUE(below.frames.empty());
    ASSERT_EQ(below.warnings.size(), 1u);
    EXPECT_NE(below.warnings[0].find("45x11 is 495 pixels, more than max-pixels=494"),
              std::string::npos)
        << below.warnings[0];
    // The message asks for the property: the next keyframe is as large.
    EXPECT_EQ(below.warnings[0].rfind("keyframe larger than max-pixels; frames are dropped until "
                                      "a keyframe fits; raise max-pixels to decode this stream | ",
                                      0),
              0u)
        << below.warnings[0];
    decode(at, all, false, "cudadiffdec max-pixels=495");
    decode(unlimited, all, false, "cudadiffdec max-pixels=0");
    // The limit lowered while playing, before a delta: one warning that
    // says so (not "damaged packet"), nothing more until a keyframe fits.
    {
      GstHarness *dec = gst_harness_new("cudadiffdec");
      GstBus *bus = gst_bus_new();
      gst_element_set_bus(dec->element, bus);
      gst_harness_set_src_caps_str(dec, "video/x-cudadiff");
      size_t shown = 0;
      for (size_t i = 0; i < all.size(); ++i) {
        if (i == 2) g_object_set(dec->element, "max-pixels", guint64(494), nullptr);
        EXPECT_EQ(gst_harness_push(dec, gst_buffer_ref(all[i])), GST_FLOW_OK);
        while (GstBuffer *out = gst_harness_try_pull(dec)) {
          ++shown;
          gst_buffer_unref(out);
        }
      }
      EXPECT_EQ(shown, 2u);
      const std::vector<gst_test::BusText> warnings = gst_test::pop_texts(bus, GST_MESSAGE_WARNING);
      ASSERT_EQ(warnings.size(), 1u);
      EXPECT_EQ(warnings[0].message,
                "delta larger than max-pixels; frames are dropped until a keyframe fits; raise "
                "max-pixels to decode this stream");
      // The bus's messages hold the element: detach it before the teardown.
      gst_element_set_bus(dec->element, nullptr);
      gst_harness_teardown(dec);
      gst_object_unref(bus);
    }
    for (const Decoded *d : {&at, &unlimited}) {
      EXPECT_TRUE(d->warnings.empty());
      ASSERT_EQ(d->frames.size(), 8u);
      for (size_t i = 0; i < 8; ++i) EXPECT_EQ(d->frames[i], e.pictures[i]) << i;
    }
  }
}

// A header announcing a frame larger than max-pixels, and with it a payload
// of up to 805 MB, is dropped at once: neither the decoder nor the parser
// waits for its payload, so the packets after it decode before the end of
// the stream (before, both collected the announced bytes, and a live stream
// stalled until they came).
TEST(CudaDiff, HeaderLargerThanMaxPixelsIsDroppedWithoutWaitingForItsPayload) {
  GstElement *parse = gst_element_factory_make("cudadiffparse", nullptr);
  ASSERT_NE(parse, nullptr);
  guint64 max_pixels = 0;
  g_object_get(parse, "max-pixels", &max_pixels, nullptr);
  EXPECT_EQ(max_pixels, 8192u * 4320u) << "as cudadiffdec's";
  gst_object_unref(parse);
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    Encoded e;
    EncodeOptions o;
    o.frames = 8;
    o.version = version;
    o.props = "keyframe-interval=4 compression=none";
    encode(e, "BGR", 45, 11, o);
    // Packet 0's header alone, announcing a 16384x16384 keyframe (version 1:
    // its 805,306,368 raw bytes; version 2: a body of 100 MB), both
    // checksums right for a payload that never comes; then one announcing
    // 16384x8192.
    auto header_alone = [&](uint32_t w, uint32_t h) {
      Bytes header = bytes_of(e.packets[0]);
      header.resize(64);
      const uint32_t payload = version == 1 ? w * h * 3 : 100000000u;
      for (int i = 0; i < 4; ++i) {
        header[32 + i] = header[36 + i] = uint8_t(payload >> (8 * i));
        header[40 + i] = uint8_t(w >> (8 * i));
        header[44 + i] = uint8_t(h >> (8 * i));
      }
      fix_checksums(header);
      return buffer_like(e.packets[0], header);
    };
    std::vector<GstBuffer *> in(e.packets.begin(), e.packets.end());
    in.insert(in.begin(), {header_alone(16384, 16384), header_alone(16384, 8192)});
    for (const char *launch : {"cudadiffdec", "cudadiffparse ! cudadiffdec"}) {
      SCOPED_TRACE(launch);
      Decoded d;
      decode(d, in, false, launch);
      ASSERT_EQ(d.frames.size(), 8u);
      for (size_t i = 0; i < 8; ++i) EXPECT_EQ(d.frames[i], e.pictures[i]) << i;
      ASSERT_EQ(d.warnings.size(), 1u) << "one for both headers";
      if (std::string(launch) == "cudadiffdec") {
        EXPECT_NE(d.warnings[0].find("keyframe larger than max-pixels"), std::string::npos)
            << d.warnings[0];
        EXPECT_NE(d.warnings[0].find("16384x16384 is 268435456 pixels, more than "
                                     "max-pixels=35389440"),
                  std::string::npos)
            << d.warnings[0];
        EXPECT_EQ(d.dropped, 2u);
        // (the headers are those of packets refused, counted as dropped,
        // not bytes that were not a packet)
        EXPECT_EQ(d.skipped, 0u);
      } else {
        // The parser drops it; the decoder sees the packets in sequence.
        EXPECT_NE(d.warnings[0].find("packets announce frames larger than max-pixels"),
                  std::string::npos)
            << d.warnings[0];
        EXPECT_NE(d.warnings[0].find("16384x16384 (268435456 pixels), more than the limit of "
                                     "35389440"),
                  std::string::npos)
            << d.warnings[0];
        EXPECT_EQ(d.dropped, 0u);
      }
    }
    gst_buffer_unref(in[0]);
    gst_buffer_unref(in[1]);
    // A whole stream over the limit (max-pixels=100 for 45x11): every
    // packet is dropped, and none of its bytes counts as skipped (they
    // were, as bytes that were not a packet), however it is cut into
    // buffers; garbage after a refused packet still counts.
    Bytes all;
    append_packets(all, e.packets);
    all.insert(all.end(), 50, 0x33);
    for (size_t piece : {all.size(), size_t(100), size_t(7)}) {
      SCOPED_TRACE("pieces of " + std::to_string(piece));
      std::vector<GstBuffer *> stream;
      for (size_t at = 0; at < all.size(); at += piece)
        stream.push_back(buffer_like(
            e.packets[0],
            Bytes(all.begin() + long(at), all.begin() + long(std::min(all.size(), at + piece)))));
      Decoded d;
      decode(d, stream, true, "cudadiffdec max-pixels=100");
      for (GstBuffer *b : stream) gst_buffer_unref(b);
      EXPECT_EQ(d.frames.size(), 0u);
      EXPECT_EQ(d.dropped, 8u);
      EXPECT_EQ(d.skipped, 50u);
    }
  }
}

// cudadiffparse splits a byte stream, in pieces of any size with garbage
// between packets, into the encoder's packets: keyframes without
// DELTA_UNIT, timestamps from the packets' headers from 0 (the input is
// untimed), src caps with parsed=true and the stream's size.
TEST(CudaDiff, ParserSplitsAByteStreamIntoPackets) {
  for (int version : {2, 1}) {
    SCOPED_TRACE("version " + std::to_string(version));
    Encoded e;
    EncodeOptions o;
    o.frames = 12;
    o.version = version;
    o.props = "keyframe-interval=5";
    encode(e, "BGR", 45, 11, o);
    Bytes stream;
    for (size_t t = 0; t < e.packets.size(); ++t) {
      const Bytes b = bytes_of(e.packets[t]);
      stream.insert(stream.end(), b.begin(), b.end());
      if (t == 3) stream.insert(stream.end(), 333, 0xa5);  // garbage between packets
    }
    for (size_t piece : {size_t(7), size_t(4096)}) {
      SCOPED_TRACE("pieces of " + std::to_string(piece));
      GstHarness *h = gst_harness_new("cudadiffparse");
      gst_harness_set_src_caps_str(h, "video/x-cudadiff");
      GstSegment bytes;  // a byte stream (the harness's segment is in time)
      gst_segment_init(&bytes, GST_FORMAT_BYTES);
      ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_segment(&bytes)));
      for (size_t at = 0; at < stream.size(); at += piece) {
        const size_t n = std::min(piece, stream.size() - at);
        GstBuffer *b = gst_buffer_new_allocate(nullptr, n, nullptr);
        gst_buffer_fill(b, 0, stream.data() + at, n);
        ASSERT_EQ(gst_harness_push(h, b), GST_FLOW_OK);
      }
      gst_harness_push_event(h, gst_event_new_eos());
      std::vector<GstBuffer *> out;
      while (GstBuffer *b = gst_harness_try_pull(h)) out.push_back(b);
      ASSERT_EQ(out.size(), e.packets.size());
      for (size_t t = 0; t < out.size(); ++t) {
        EXPECT_EQ(bytes_of(out[t]), bytes_of(e.packets[t])) << "packet " << t;
        EXPECT_EQ(GST_BUFFER_FLAG_IS_SET(out[t], GST_BUFFER_FLAG_DELTA_UNIT), t % 5 != 0)
            << "packet " << t;
        EXPECT_EQ(GST_BUFFER_PTS(out[t]), gst_util_uint64_scale(t, GST_SECOND, 30)) << t;
        gst_buffer_unref(out[t]);
      }
      GstCaps *caps = gst_pad_get_current_caps(h->sinkpad);
      ASSERT_NE(caps, nullptr);
      const GstStructure *st = gst_caps_get_structure(caps, 0);
      gboolean parsed = FALSE;
      int w = 0, v = 0;
      EXPECT_TRUE(gst_structure_get_boolean(st, "parsed", &parsed) && parsed);
      EXPECT_TRUE(gst_structure_get_int(st, "width", &w));
      EXPECT_EQ(w, 45);
      EXPECT_TRUE(gst_structure_get_int(st, "version", &v));
      EXPECT_EQ(v, version);
      gst_caps_unref(caps);
      gst_harness_teardown(h);
    }
  }
}

namespace {

// cudadiffparse fed an untimed byte stream (a segment in bytes, buffers
// without timestamps, one packet each), as `filesrc ! queue` or
// tcpclientsrc feed it.
struct ParserOnBytes {
  GstHarness *h = gst_harness_new("cudadiffparse");
  GstSegment bytes;
  ParserOnBytes() {
    gst_harness_set_src_caps_str(h, "video/x-cudadiff");
    gst_segment_init(&bytes, GST_FORMAT_BYTES);
    EXPECT_TRUE(gst_harness_push_event(h, gst_event_new_segment(&bytes)));
  }
  ~ParserOnBytes() { gst_harness_teardown(h); }
  ParserOnBytes(const ParserOnBytes &) = delete;
  ParserOnBytes &operator=(const ParserOnBytes &) = delete;
  void push(const Bytes &packet) {
    GstBuffer *untimed = gst_buffer_new_allocate(nullptr, packet.size(), nullptr);
    gst_buffer_fill(untimed, 0, packet.data(), packet.size());
    EXPECT_EQ(gst_harness_push(h, untimed), GST_FLOW_OK);
  }
  // The timestamps of what it has pushed since the last pull().
  std::vector<GstClockTime> pull() {
    std::vector<GstClockTime> pts;
    while (GstBuffer *out = gst_harness_try_pull(h)) {
      pts.push_back(GST_BUFFER_PTS(out));
      gst_buffer_unref(out);
    }
    return pts;
  }
  // A flushing seek to `target` sent upstream; returns its seqnum.
  guint32 seek(GstClockTime target) {
    GstEvent *seek = gst_event_new_seek(1.0, GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH,
                                        GST_SEEK_TYPE_SET, gint64(target), GST_SEEK_TYPE_NONE, -1);
    const guint32 seqnum = gst_event_get_seqnum(seek);
    gst_harness_push_upstream_event(h, seek);
    return seqnum;
  }
  // What upstream answers a seek with: a flush (what it pushed before is
  // dropped), then a segment from byte `offset` with the seek's seqnum.
  void answer_seek(guint32 seqnum, guint64 offset) {
    gst_harness_push_event(h, gst_event_new_flush_start());
    gst_harness_push_event(h, gst_event_new_flush_stop(TRUE));
    pull();
    GstSegment from = bytes;
    from.start = from.time = from.position = offset;
    GstEvent *segment = gst_event_new_segment(&from);
    gst_event_set_seqnum(segment, seqnum);
    gst_harness_push_event(h, segment);
  }
  void eos() { gst_harness_push_event(h, gst_event_new_eos()); }
};

// A keyframe is described by the stream header of its own format, size and
// framerate, not by the last one seen: after a seek back in a recording
// whose caps changed (or in recordings joined end to end), the last stream
// header is another part's. Stream A (BGRx, bt709), stream B (I420,
// bt2020), A's second keyframe (as after a seek back, no stream header
// again) and stream C (BGRx of another size, its stream header left out):
// C gets the defaults of its format (sRGB), as a stream joined without its
// stream header does.
TEST(CudaDiff, KeyframesTakeTheStreamHeaderOfTheirOwnFormat) {
  for (int version : {2, 1}) {
    SCOPED_TRACE("version " + std::to_string(version));
    Encoded a, b, c;
    EncodeOptions o;
    o.version = version;
    o.frames = 3;
    o.props = "keyframe-interval=2";
    o.caps_extra = ", colorimetry=(string)bt709";
    encode(a, "BGRx", 32, 24, o);
    o.frames = 2;
    o.caps_extra = ", colorimetry=(string)bt2020";
    encode(b, "I420", 32, 24, o);
    o.frames = 1;
    o.caps_extra = "";
    encode(c, "BGRx", 48, 32, o);
    ASSERT_NE(stream_header_of(a), nullptr);
    ASSERT_NE(stream_header_of(b), nullptr);
    // (frames 0 and 2 of A are keyframes)
    ASSERT_FALSE(GST_BUFFER_FLAG_IS_SET(a.packets[2], GST_BUFFER_FLAG_DELTA_UNIT));
    const std::vector<GstBuffer *> packets = {stream_header_of(a), a.packets[0], a.packets[1],
                                              stream_header_of(b), b.packets[0], b.packets[1],
                                              a.packets[2],        c.packets[0]};
    const std::vector<const Bytes *> want = {&a.pictures[0], &a.pictures[1], &b.pictures[0],
                                             &b.pictures[1], &a.pictures[2], &c.pictures[0]};
    // The same bytes as an untimed byte stream, a buffer per packet (so that
    // each frame is pulled under its own caps).
    std::vector<GstBuffer *> untimed;
    for (GstBuffer *p : packets) {
      const Bytes bytes = bytes_of(p);
      GstBuffer *u = gst_buffer_new_allocate(nullptr, bytes.size(), nullptr);
      gst_buffer_fill(u, 0, bytes.data(), bytes.size());
      untimed.push_back(u);
    }
    // The colorimetry of stream A's caps (bt709 in RGB), of stream B's,
    // and the default of stream C's format and size.
    const auto colorimetry_of = [](const std::string &caps_text) {
      GstCaps *caps = gst_caps_from_string(caps_text.c_str());
      GstVideoInfo info;
      EXPECT_TRUE(gst_video_info_from_caps(&info, caps)) << caps_text;
      gst_caps_unref(caps);
      gchar *s = gst_video_colorimetry_to_string(&info.colorimetry);
      const std::string text = s ? s : "";
      g_free(s);
      return text;
    };
    GstVideoInfo defaults;
    ASSERT_TRUE(gst_video_info_set_format(&defaults, GST_VIDEO_FORMAT_BGRx, 48, 32));
    gchar *def = gst_video_colorimetry_to_string(&defaults.colorimetry);
    const std::string c_colorimetry = def;
    g_free(def);
    for (const char *launch : {"cudadiffdec", "cudadiffparse ! cudadiffdec"}) {
      for (bool byte_stream : {false, true}) {
        SCOPED_TRACE(std::string(launch) + (byte_stream ? ", a byte stream" : ", packets"));
        Decoded d;
        decode(d, byte_stream ? untimed : packets, true, launch);
        ASSERT_EQ(d.frames.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(d.frames[i], *want[i]) << "frame " << i;
        std::vector<std::string> got;
        for (const std::string &caps : d.caps) got.push_back(colorimetry_of(caps));
        const std::string a_colorimetry = got[0];
        EXPECT_NE(a_colorimetry, c_colorimetry);  // (else the test shows nothing)
        EXPECT_EQ(got, (std::vector<std::string>{a_colorimetry, a_colorimetry, "bt2020", "bt2020",
                                                 a_colorimetry, c_colorimetry}));
      }
    }
    // The parser's own src caps likewise, per packet (C's without a
    // colorimetry: the parser says only what a stream header said).
    ParserOnBytes p;
    std::vector<std::string> frame_caps;
    for (GstBuffer *packet : packets) {
      p.push(bytes_of(packet));
      if (packet == packets.back()) p.eos();
      ASSERT_EQ(p.pull().size(), 1u);
      if (GST_BUFFER_FLAG_IS_SET(packet, GST_BUFFER_FLAG_HEADER)) continue;
      GstCaps *caps = gst_pad_get_current_caps(p.h->sinkpad);
      const gchar *cv = gst_structure_get_string(gst_caps_get_structure(caps, 0), "colorimetry");
      frame_caps.push_back(cv ? cv : "");
      gst_caps_unref(caps);
    }
    ASSERT_EQ(frame_caps.size(), 6u);
    EXPECT_NE(frame_caps[0], "");
    EXPECT_EQ(frame_caps, (std::vector<std::string>{frame_caps[0], frame_caps[0], "bt2020",
                                                    "bt2020", frame_caps[0], ""}));
    for (GstBuffer *u : untimed) gst_buffer_unref(u);
  }
}

// cudadiffparse's src caps describe the picture as the encoder's caps do
// (pixel aspect ratio, interlace mode, field order, colorimetry, chroma
// siting), from the stream header's text, once one has passed; a stream
// joined without one says only what the packet headers say.
TEST(CudaDiff, ParserCapsDescribeThePicture) {
  const char *fields[] = {"pixel-aspect-ratio", "interlace-mode", "field-order", "colorimetry",
                          "chroma-site"};
  for (const char *extra :
       {", pixel-aspect-ratio=(fraction)10/11, interlace-mode=(string)interleaved, "
        "field-order=(string)bottom-field-first, colorimetry=(string)bt709, "
        "chroma-site=(string)mpeg2",
        ", colorimetry=(string)bt601"}) {
    SCOPED_TRACE(extra);
    const bool all_named = std::string(extra).find("chroma-site") != std::string::npos;
    Encoded e;
    EncodeOptions o;
    o.frames = 2;
    o.caps_extra = extra;
    encode(e, "I420", 64, 48, o);
    GstBuffer *header = stream_header_of(e);
    ASSERT_NE(header, nullptr);
    const GstStructure *enc = gst_caps_get_structure(e.caps, 0);
    auto caps_of = [](ParserOnBytes &p) {
      GstCaps *caps = gst_pad_get_current_caps(p.h->sinkpad);
      gchar *text = caps ? gst_caps_to_string(caps) : g_strdup("(none)");
      const std::string out = text;
      g_free(text);
      if (caps) gst_caps_unref(caps);
      return out;
    };
    auto serialized = [](const GValue *v) {
      gchar *text = gst_value_serialize(v);
      const std::string out = text ? text : "";
      g_free(text);
      return out;
    };
    {
      ParserOnBytes p;
      p.push(bytes_of(header));
      for (GstBuffer *b : e.packets) p.push(bytes_of(b));
      p.eos();
      EXPECT_EQ(p.pull().size(), 3u);
      GstCaps *caps = gst_pad_get_current_caps(p.h->sinkpad);
      ASSERT_NE(caps, nullptr);
      const GstStructure *st = gst_caps_get_structure(caps, 0);
      for (const char *f : fields) {
        const GValue *want = gst_structure_get_value(enc, f);
        const GValue *got = gst_structure_get_value(st, f);
        // (the first input's caps name all five; where the encoder's
        // caps leave one out, the parser may give the format's default, as
        // the decoder's caps do)
        if (all_named) {
          ASSERT_NE(want, nullptr) << f;
        }
        if (!want) continue;
        ASSERT_NE(got, nullptr) << f << ": " << caps_of(p);
        EXPECT_EQ(gst_value_compare(want, got), GST_VALUE_EQUAL)
            << f << ": " << serialized(got) << " (the encoder's " << serialized(want) << ")";
      }
      gst_caps_unref(caps);
    }
    {
      ParserOnBytes p;
      for (GstBuffer *b : e.packets) p.push(bytes_of(b));
      EXPECT_EQ(p.pull().size(), 2u);
      GstCaps *caps = gst_pad_get_current_caps(p.h->sinkpad);
      ASSERT_NE(caps, nullptr);
      const GstStructure *st = gst_caps_get_structure(caps, 0);
      for (const char *f : fields) EXPECT_FALSE(gst_structure_has_field(st, f)) << f;
      gst_caps_unref(caps);
      // A stream header later (a sender that starts again) adds them.
      p.push(bytes_of(header));
      p.push(bytes_of(e.packets[0]));
      p.eos();
      EXPECT_EQ(p.pull().size(), 2u);
      caps = gst_pad_get_current_caps(p.h->sinkpad);
      ASSERT_NE(caps, nullptr);
      EXPECT_TRUE(gst_structure_has_field(gst_caps_get_structure(caps, 0), "colorimetry"))
          << caps_of(p);
      gst_caps_unref(caps);
    }
  }
}

// A crafted file: stream headers 64 bytes apart, each announcing a payload
// of 1 byte, so that every jump over a payload lands inside the next header
// and the parser's walk over the file's headers (pull mode, before its first
// packet goes out) searches for the next magic after each. It reads the
// file about once, not 64 KiB per header (4,000 headers: 229 MB before).
TEST(CudaDiff, ParserScansACraftedFileInLinearTime) {
  Encoded e;
  EncodeOptions o;
  o.frames = 1;
  encode(e, "GRAY8", 16, 8, o);
  // A stream header (flag 0x10 alone) of frame 0 without pts or duration,
  // whose payload and body are 1 byte: the first byte of the next header.
  Bytes h = bytes_of(e.packets[0]);
  h.resize(64);
  h[6] = 1u << 4;
  const uint64_t frame = 0, none = G_MAXUINT64;
  const uint32_t one = 1;
  std::memcpy(h.data() + 8, &frame, 8);
  std::memcpy(h.data() + 16, &none, 8);
  std::memcpy(h.data() + 24, &none, 8);
  std::memcpy(h.data() + 32, &one, 4);
  std::memcpy(h.data() + 36, &one, 4);
  h.push_back(h[0]);
  fix_checksums(h);
  h.pop_back();
  const size_t headers = 4000;
  gchar *path = nullptr;
  const int fd = g_file_open_tmp("cudadiff-crafted-XXXXXX.cdiff", &path, nullptr);
  ASSERT_GE(fd, 0);
  for (size_t i = 0; i < headers; ++i) ASSERT_EQ(write(fd, h.data(), h.size()), 64);
  close(fd);

  GstElement *p = gst_parse_launch(
      (std::string("filesrc name=src location=") + path + " ! cudadiffparse name=parse ! fakesink")
          .c_str(),
      nullptr);
  ASSERT_NE(p, nullptr);
  GstElement *src = gst_bin_get_by_name(GST_BIN(p), "src");
  GstPad *pad = gst_element_get_static_pad(src, "src");
  guint64 pulled = 0, before_first = 0;
  GstElement *parse = gst_bin_get_by_name(GST_BIN(p), "parse");
  GstPad *out = gst_element_get_static_pad(parse, "src");
  struct Counts {
    guint64 *pulled, *before_first;
  } counts{&pulled, &before_first};
  gst_pad_add_probe(
      out, GST_PAD_PROBE_TYPE_BUFFER,
      [](GstPad *, GstPadProbeInfo *, gpointer data) {
        auto *c = static_cast<Counts *>(data);
        *c->before_first = *c->pulled;
        return GST_PAD_PROBE_REMOVE;
      },
      &counts, nullptr);
  gst_pad_add_probe(
      pad, GstPadProbeType(GST_PAD_PROBE_TYPE_PULL | GST_PAD_PROBE_TYPE_BUFFER),
      [](GstPad *, GstPadProbeInfo *info, gpointer data) {
        if (GstBuffer *b = GST_PAD_PROBE_INFO_BUFFER(info))
          *static_cast<guint64 *>(data) += gst_buffer_get_size(b);
        return GST_PAD_PROBE_OK;
      },
      &pulled, nullptr);
  gst_element_set_state(p, GST_STATE_PLAYING);
  GstBus *bus = gst_element_get_bus(p);
  GstMessage *m = gst_bus_timed_pop_filtered(bus, 60 * GST_SECOND,
                                             GstMessageType(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
  ASSERT_NE(m, nullptr) << "neither end of stream nor an error within 60 s";
  gst_message_unref(m);
  gst_element_set_state(p, GST_STATE_NULL);
  EXPECT_GT(before_first, 0u) << "nothing came out, or the parser did not pull";
  EXPECT_LT(before_first, 4 * headers * 64)
      << "bytes pulled before the first packet, for a file of " << headers * 64;
  gst_object_unref(bus);
  gst_object_unref(pad);
  gst_object_unref(src);
  gst_object_unref(out);
  gst_object_unref(parse);
  gst_object_unref(p);
  g_unlink(path);
  g_free(path);
}

// A packet header (docs/stream-format.md) of a GRAY8 frame of w x h whose
// payload of `payload` bytes has the checksum `crc`, at b[at].
void put_gray8_header(Bytes &b, size_t at, bool key, uint32_t w, uint32_t h, uint32_t payload,
                      uint64_t frame, uint32_t crc) {
  uint8_t *p = b.data() + at;
  auto put = [&](int off, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) p[off + i] = uint8_t(v >> (8 * i));
  };
  std::memcpy(p, "CDIF", 4);
  p[4] = 1;
  p[5] = 64;
  p[6] = key ? 1 : 0;
  p[7] = 11;  // GRAY8
  put(8, frame, 8);
  put(16, frame * 33333333, 8);
  put(24, 33333333, 8);
  put(32, payload, 4);
  put(36, payload, 4);
  put(40, w, 4);
  put(44, h, 4);
  put(48, 30, 4);
  put(52, 1, 4);
  put(56, crc, 4);
  put(60, uint32_t(::crc32(0, p, 60)), 4);
}

// A crafted damaged packet: an 8192x4096 GRAY8 keyframe (32 MiB) whose
// payload fails its checksum and holds an intact header every 128 bytes,
// each of a delta of such a frame whose payload (failing too) reaches the
// packet's end (a delta body of 4 KiB to 32 MiB is possible there).
Bytes damaged_packet_full_of_headers(size_t *headers) {
  const size_t payload = size_t(8192) * 4096, end = 64 + payload;
  Bytes b(end);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(i * 131 + (i >> 9));
  *headers = 0;
  for (size_t at = 64 + 100; at + 64 + 4096 <= end; at += 128, ++*headers)
    put_gray8_header(b, at, false, 8192, 4096, uint32_t(end - at - 64), 1000 + *headers, 1);
  put_gray8_header(b, 0, true, 8192, 4096, uint32_t(payload), 500, 2);
  return b;
}

// Such a packet before a stream, through the parser and the decoder, pulled
// from a file and pushed in pieces: the frames after it come out, within a
// second or two. Each header inside used to be checked against a payload
// of its own (on average 16 MiB, about 262,000 times): on a 2-core
// machine a packet of half this size took 185 s through these three
// pipelines before, against 0.8 s since. The file's end is waited for 60 s.
TEST(CudaDiff, HeadersInsideADamagedPacketAreNotReadOncePerHeader) {
  Encoded e;
  EncodeOptions o;
  o.frames = 6;
  encode(e, "GRAY8", 16, 8, o);
  size_t headers = 0;
  Bytes stream = damaged_packet_full_of_headers(&headers);
  ASSERT_GT(headers, 260000u);
  append_packets(stream, e.packets);
  // Pulled from a file.
  const TempFile file(stream, "cudadiff-damaged-XXXXXX.cdiff");
  const char *path = file.path();
  ASSERT_NE(path, nullptr);
  GstElement *p = gst_parse_launch((std::string("filesrc name=src location=") + path +
                                    " ! cudadiffparse ! cudadiffdec ! fakesink name=sink")
                                       .c_str(),
                                   nullptr);
  ASSERT_NE(p, nullptr);
  GstElement *src = gst_bin_get_by_name(GST_BIN(p), "src");
  GstElement *sink = gst_bin_get_by_name(GST_BIN(p), "sink");
  GstPad *pad = gst_element_get_static_pad(src, "src");
  GstPad *in = gst_element_get_static_pad(sink, "sink");
  struct Counts {
    guint64 pulled = 0, before_first = 0;
    int frames = 0;
  } counts;
  gst_pad_add_probe(
      in, GST_PAD_PROBE_TYPE_BUFFER,
      [](GstPad *, GstPadProbeInfo *, gpointer data) {
        auto *c = static_cast<Counts *>(data);
        if (c->frames++ == 0) c->before_first = c->pulled;
        return GST_PAD_PROBE_OK;
      },
      &counts, nullptr);
  gst_pad_add_probe(
      pad, GstPadProbeType(GST_PAD_PROBE_TYPE_PULL | GST_PAD_PROBE_TYPE_BUFFER),
      [](GstPad *, GstPadProbeInfo *info, gpointer data) {
        if (GstBuffer *b = GST_PAD_PROBE_INFO_BUFFER(info))
          static_cast<Counts *>(data)->pulled += gst_buffer_get_size(b);
        return GST_PAD_PROBE_OK;
      },
      &counts, nullptr);
  gst_element_set_state(p, GST_STATE_PLAYING);
  GstBus *bus = gst_element_get_bus(p);
  GstMessage *m = gst_bus_timed_pop_filtered(bus, 60 * GST_SECOND,
                                             GstMessageType(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
  ASSERT_NE(m, nullptr) << "neither end of stream nor an error within 60 s";
  EXPECT_EQ(GST_MESSAGE_TYPE(m), GST_MESSAGE_EOS);
  gst_message_unref(m);
  gst_element_set_state(p, GST_STATE_NULL);
  EXPECT_EQ(counts.frames, 6);
  EXPECT_LT(counts.before_first, 4 * stream.size())
      << "bytes pulled before the first frame, for a file of " << stream.size();
  gst_object_unref(bus);
  gst_object_unref(in);
  gst_object_unref(pad);
  gst_object_unref(sink);
  gst_object_unref(src);
  gst_object_unref(p);
  // Pushed in pieces of 64 KiB, as a network delivers them: through the
  // parser, and to the decoder alone.
  std::vector<GstBuffer *> pieces;
  for (size_t at = 0; at < stream.size(); at += 65536) {
    const size_t n = std::min<size_t>(65536, stream.size() - at);
    GstBuffer *b = gst_buffer_new_allocate(nullptr, n, nullptr);
    gst_buffer_fill(b, 0, stream.data() + at, n);
    pieces.push_back(b);
  }
  for (const char *launch : {"cudadiffparse ! cudadiffdec", "cudadiffdec"}) {
    SCOPED_TRACE(launch);
    Decoded d;
    decode(d, pieces, true, launch);
    ASSERT_EQ(d.frames.size(), 6u);
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(d.frames[i], e.pictures[i]) << i;
  }
  for (GstBuffer *b : pieces) gst_buffer_unref(b);
}

// The timestamps cudadiffparse gives `packets` pushed as an untimed byte
// stream.
std::vector<GstClockTime> parser_pts(const std::vector<Bytes> &packets) {
  ParserOnBytes parser;
  for (const Bytes &v : packets) parser.push(v);
  parser.eos();
  return parser.pull();
}

// `packets` decoded by cudadiffdec alone, pushed as untimed buffers.
void decode_untimed(Decoded &d, const std::vector<Bytes> &packets) {
  std::vector<GstBuffer *> untimed;
  for (const Bytes &b : packets) {
    GstBuffer *buf = gst_buffer_new_allocate(nullptr, b.size(), nullptr);
    gst_buffer_fill(buf, 0, b.data(), b.size());
    untimed.push_back(buf);
  }
  decode(d, untimed, true);
  for (GstBuffer *b : untimed) gst_buffer_unref(b);
}

// The packets of `frames` GRAY8 16x8 frames (stream header excluded).
std::vector<Bytes> gray_packets(int frames) {
  Encoded e;
  EncodeOptions o;
  o.frames = frames;
  encode(e, "GRAY8", 16, 8, o);
  std::vector<Bytes> packets;
  for (GstBuffer *b : e.packets) packets.push_back(bytes_of(b));
  return packets;
}

// A packet's sender pts made `by` later (its checksums right again).
void shift_pts(Bytes &packet, uint64_t by) {
  uint64_t pts = 0;
  std::memcpy(&pts, packet.data() + 16, 8);
  pts += by;
  std::memcpy(packet.data() + 16, &pts, 8);
  fix_checksums(packet);
}

// The packets of two recordings of `frames` GRAY8 16x8 frames each, one
// after the other (the second a sender that restarted).
std::vector<Bytes> two_recordings(int frames) {
  Encoded a, b;
  EncodeOptions o;
  o.frames = frames;
  encode(a, "GRAY8", 16, 8, o);
  encode(b, "GRAY8", 16, 8, o);
  std::vector<Bytes> packets;
  for (const Encoded *e : {&a, &b})
    for (GstBuffer *p : e->packets) packets.push_back(bytes_of(p));
  return packets;
}

}  // namespace

// A sender that restarts (its timestamps from 0 again) in a byte stream:
// cudadiffparse's timestamps continue from the end of the last packet, as
// cudadiffdec's do on untimed input, so that a sink does not drop the rest
// as late.
TEST(CudaDiff, ParserContinuesTheTimelineOfARestartedSender) {
  const std::vector<Bytes> packets = two_recordings(4);
  const std::vector<GstClockTime> pts = parser_pts(packets);
  ASSERT_EQ(pts.size(), 8u);
  // (the packets' durations are rounded to the nanosecond: the second run
  // follows the first's last packet's end, within a nanosecond per packet)
  for (size_t t = 0; t < 8; ++t) {
    const double want = double(gst_util_uint64_scale(t, GST_SECOND, 30));
    EXPECT_NEAR(double(pts[t]), want, t < 4 ? 0.0 : 4.0) << "packet " << t;
    if (t > 0) {
      EXPECT_GT(pts[t], pts[t - 1]);
    }
  }
}

// A live byte stream joined between keyframes (tcpserversink's default
// sync-method, latest: the stream header, then the packets as they come,
// deltas first): the deltas before the first keyframe are dropped, and the
// times start at 0 with that keyframe, as cudadiffdec's own do on such a
// stream. Before, they started at the first delta, which nothing can show,
// so the first frame shown came two frames after 0 here (on a real stream,
// up to a keyframe interval) and a synchronising sink (decodebin, playbin)
// showed every frame that much late.
TEST(CudaDiff, ParserStartsALiveByteStreamJoinedBetweenKeyframesAtItsFirstKeyframe) {
  Encoded e;
  EncodeOptions o;
  o.frames = 10;
  o.props = "keyframe-interval=4";
  encode(e, "GRAY8", 16, 8, o);
  ASSERT_NE(stream_header_of(e), nullptr);
  ASSERT_EQ(e.packets.size(), 10u);
  ParserOnBytes parser;
  parser.push(bytes_of(stream_header_of(e)));
  for (size_t t = 2; t < 10; ++t) parser.push(bytes_of(e.packets[t]));
  parser.eos();
  std::vector<GstClockTime> pts;
  std::vector<bool> delta;
  while (GstBuffer *out = gst_harness_try_pull(parser.h)) {
    if (!GST_BUFFER_FLAG_IS_SET(out, GST_BUFFER_FLAG_HEADER)) {
      pts.push_back(GST_BUFFER_PTS(out));
      delta.push_back(GST_BUFFER_FLAG_IS_SET(out, GST_BUFFER_FLAG_DELTA_UNIT));
    }
    gst_buffer_unref(out);
  }
  // Frames 4 to 9, from 0 at the sender's pace.
  ASSERT_EQ(pts.size(), 6u);
  EXPECT_FALSE(delta[0]) << "the keyframe first";
  for (size_t i = 0; i < pts.size(); ++i)
    EXPECT_NEAR(double(pts[i]), double(gst_util_uint64_scale(i, GST_SECOND, 30)), double(i))
        << "frame " << i + 4;
}

// What is not a restart: a packet repeated (frame numbers fall back by one)
// keeps its time and moves nothing after it; a sender's timestamps falling
// back by more than a second while its frame numbers go on do start a run,
// so that the output never goes back.
TEST(CudaDiff, ParserTimelineRepeatedPacketsAndTimeFallingBack) {
  auto at = [](int t) { return gst_util_uint64_scale(t, GST_SECOND, 30); };
  const std::vector<Bytes> p = gray_packets(4);
  ASSERT_EQ(p.size(), 4u);
  // Packet 1 twice.
  const std::vector<GstClockTime> dup = parser_pts({p[0], p[1], p[1], p[2], p[3]});
  EXPECT_EQ(dup, (std::vector<GstClockTime>{at(0), at(1), at(1), at(2), at(3)}));
  // Packets 0 and 1 2 s later than the sender's clock for 2 and 3.
  std::vector<Bytes> late = p;
  for (int t : {0, 1}) shift_pts(late[t], 2 * GST_SECOND);
  const std::vector<GstClockTime> back = parser_pts(late);
  ASSERT_EQ(back.size(), 4u);
  EXPECT_EQ(back[0], at(0));
  EXPECT_EQ(back[1], at(1));
  // From where packet 1 ended (its duration is rounded to the nanosecond).
  EXPECT_NEAR(double(back[2]), double(at(2)), 1.0);
  EXPECT_NEAR(double(back[3]), double(at(3)), 1.0);
}

// A sender's timestamp that jumps ahead by more than 60 s (a sender that
// stood still that long, or a crafted header) starts a run where the packet
// before ended, as a restart does: neither that packet nor the ones after
// it are pushed that far (before, one such packet moved the rest of the
// stream by the jump). A jump of 59 s is kept.
TEST(CudaDiff, ParserTimelineJumpsAheadOnlyUpToAMinute) {
  auto at = [](int t) { return gst_util_uint64_scale(t, GST_SECOND, 30); };
  const std::vector<Bytes> p = gray_packets(4);
  ASSERT_EQ(p.size(), 4u);
  for (uint64_t jump :
       {uint64_t(59) * GST_SECOND, uint64_t(61) * GST_SECOND, uint64_t(1000000) * GST_SECOND}) {
    SCOPED_TRACE("packets 2 and 3 " + std::to_string(jump / GST_SECOND) + " s later");
    std::vector<Bytes> moved = p;
    for (int t : {2, 3}) shift_pts(moved[t], jump);
    const std::vector<GstClockTime> got = parser_pts(moved);
    ASSERT_EQ(got.size(), 4u);
    EXPECT_EQ(got[0], at(0));
    EXPECT_EQ(got[1], at(1));
    const double shift = jump <= 60 * GST_SECOND ? double(jump) : 0.0;
    // (from where packet 1 ended: its duration is rounded to the nanosecond)
    EXPECT_NEAR(double(got[2]), double(at(2)) + shift, 1.0);
    EXPECT_NEAR(double(got[3]), double(at(3)) + shift, 1.0);
  }
}

// A sender whose times start again by less than a second while its frame
// numbers go on (an application looping a clip of a few frames, each pass
// in a segment of its own, which does not travel with the packets): the
// packets from there on follow the one before, through the parser and
// through the decoder alone. Before, they all came out at the time of the
// last packet before (a sink that syncs showed them at once, or dropped
// them).
TEST(CudaDiff, TimelineOfASenderWhoseTimesStartAgainWithinASecond) {
  auto at = [](int t) { return gst_util_uint64_scale(t, GST_SECOND, 30); };
  std::vector<Bytes> p = gray_packets(6);
  ASSERT_EQ(p.size(), 6u);
  for (int t : {3, 4, 5}) shift_pts(p[t], uint64_t(0) - at(3));  // 0, 1/30, 2/30 s again
  // (from where packet 2 ended: its duration is rounded to the nanosecond)
  const std::vector<GstClockTime> parsed = parser_pts(p);
  ASSERT_EQ(parsed.size(), 6u);
  for (int t = 0; t < 6; ++t) EXPECT_NEAR(double(parsed[t]), double(at(t)), 2.0) << "packet " << t;
  Decoded d;
  decode_untimed(d, p);
  ASSERT_EQ(d.buffers.size(), 6u);
  for (int t = 0; t < 6; ++t)
    EXPECT_NEAR(double(GST_BUFFER_PTS(d.buffers[t])), double(at(t)), 2.0) << "frame " << t;
  EXPECT_TRUE(d.warnings.empty()) << d.warnings[0];
}

// One frame stamped late by more than a frame interval (capture jitter)
// lets the next fall back by less than one: not a restart, so the frames
// after it keep the sender's times, through the parser and through the
// decoder alone (with the rule above taking any fall back at the next frame
// number as a restart, each such frame moved every later one, and the
// moves added up).
TEST(CudaDiff, TimelineKeepsTheSendersTimesAcrossAJitteredTimestamp) {
  auto at = [](int t) { return gst_util_uint64_scale(t, GST_SECOND, 30); };
  std::vector<Bytes> p = gray_packets(6);
  ASSERT_EQ(p.size(), 6u);
  shift_pts(p[2], 40 * GST_MSECOND);  // 6.7 ms after packet 3's time
  std::vector<GstClockTime> want;
  for (int t = 0; t < 6; ++t) want.push_back(at(t) + (t == 2 ? 40 * GST_MSECOND : 0));
  EXPECT_EQ(parser_pts(p), want);
  Decoded d;
  decode_untimed(d, p);
  ASSERT_EQ(d.buffers.size(), 6u);
  // (frame 3, earlier than frame 2, comes out at frame 2's time: GstVideoDecoder
  // lets no output time go back)
  for (int t : {0, 1, 2, 4, 5}) EXPECT_EQ(GST_BUFFER_PTS(d.buffers[t]), want[t]) << "frame " << t;
}

// A time-lapse stream (a frame every 120 s, framerate 1/120) keeps its
// timestamps through a byte stream, with the parser and with the decoder
// alone: its frames' steps and durations are within twice its frame
// interval. Before, every step of over 60 s started a new run of the
// timeline, and each frame came out at the time of the one before (0, 0,
// 0... through a file).
TEST(CudaDiff, TimeLapseStreamKeepsItsTimestamps) {
  const GstClockTime interval = 120 * GST_SECOND;
  GstHarness *enc = gst_harness_new("cudadiffenc");
  g_object_set(enc->element, "frame-overlap", 2 /* never */, nullptr);
  gst_harness_set_src_caps_str(enc, "video/x-raw,format=GRAY8,width=16,height=8,framerate=1/120");
  const GstVideoInfo info = video_info("GRAY8", 16, 8);
  std::vector<Bytes> packets;
  Bytes all;
  for (int t = 0; t < 4; ++t) {
    GstBuffer *in = buffer_from(info, scene("GRAY8", 16, 8, t, 1), t);
    GST_BUFFER_PTS(in) = GstClockTime(t) * interval;
    GST_BUFFER_DURATION(in) = interval;
    ASSERT_EQ(gst_harness_push(enc, in), GST_FLOW_OK);
    while (GstBuffer *b = gst_harness_try_pull(enc)) {
      const Bytes bytes = bytes_of(b);
      all.insert(all.end(), bytes.begin(), bytes.end());
      if (!GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_HEADER)) packets.push_back(bytes);
      gst_buffer_unref(b);
    }
  }
  gst_harness_teardown(enc);
  ASSERT_EQ(packets.size(), 4u);
  const std::vector<GstClockTime> want = {0, interval, 2 * interval, 3 * interval};
  EXPECT_EQ(parser_pts(packets), want);
  GstBuffer *stream = gst_buffer_new_allocate(nullptr, all.size(), nullptr);  // untimed
  gst_buffer_fill(stream, 0, all.data(), all.size());
  Decoded d;
  decode(d, {stream}, true);
  gst_buffer_unref(stream);
  ASSERT_EQ(d.buffers.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(GST_BUFFER_PTS(d.buffers[i]), want[i]) << i;
    EXPECT_EQ(GST_BUFFER_DURATION(d.buffers[i]), interval) << i;
  }
}

// The parser's seek tests' stream: 60 GRAY8 frames of 16x8, a keyframe
// every 10.
static void encode_seek_stream(Encoded &e) {
  EncodeOptions o;
  o.frames = 60;
  o.props = "keyframe-interval=10";
  encode(e, "GRAY8", 16, 8, o);
}

// A keyframe whose frame number jumps ahead after a new segment (a
// non-flushing seek in a recording, or a segment seek's next pass) is where
// upstream went on, not a loss: no warning, and its frames decode. Without
// the new segment the same jump is a loss ("packets missing before a
// keyframe"); before, the seek's got that warning too. So is a jump after
// deltas that went on in sequence after a new segment.
TEST(CudaDiff, KeyframeAfterANewSegmentIsNoLoss) {
  Encoded e;
  encode_seek_stream(e);
  ASSERT_EQ(e.packets.size(), 60u);
  struct Case {
    const char *what;
    bool new_segment;
    std::vector<size_t> after;  // the packets after packets 0 to 3 (and the segment)
    bool loss;
  };
  const Case cases[] = {
      {"a new segment before keyframe 30", true, {30, 31, 32, 33}, false},
      {"no new segment", false, {30, 31, 32, 33}, true},
      {"a new segment, deltas 4 to 7, then keyframe 30", true, {4, 5, 6, 7, 30, 31}, true},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.what);
    GstHarness *dec = gst_harness_new("cudadiffdec");
    GstBus *bus = gst_bus_new();
    gst_element_set_bus(dec->element, bus);
    gst_harness_set_src_caps_str(dec, "video/x-cudadiff");
    std::vector<size_t> sent = {0, 1, 2, 3};
    for (size_t t : sent)
      EXPECT_EQ(gst_harness_push(dec, gst_buffer_ref(e.packets[t])), GST_FLOW_OK);
    if (c.new_segment) {
      GstSegment segment;
      gst_segment_init(&segment, GST_FORMAT_TIME);
      segment.start = segment.time = GST_BUFFER_PTS(e.packets[c.after[0]]);
      segment.base = GST_BUFFER_PTS(e.packets[4]);
      EXPECT_TRUE(gst_harness_push_event(dec, gst_event_new_segment(&segment)));
    }
    for (size_t t : c.after) {
      EXPECT_EQ(gst_harness_push(dec, gst_buffer_ref(e.packets[t])), GST_FLOW_OK);
      sent.push_back(t);
    }
    EXPECT_TRUE(gst_harness_push_event(dec, gst_event_new_eos()));
    std::vector<GstClockTime> pts;
    while (GstBuffer *out = gst_harness_try_pull(dec)) {
      pts.push_back(GST_BUFFER_PTS(out));
      gst_buffer_unref(out);
    }
    std::vector<GstClockTime> want;
    for (size_t t : sent) want.push_back(GST_BUFFER_PTS(e.packets[t]));
    EXPECT_EQ(pts, want);
    std::vector<std::string> warnings;
    while (GstMessage *m = gst_bus_pop_filtered(bus, GST_MESSAGE_WARNING)) {
      warnings.push_back(gst_test::bus_text(m).message);
      gst_message_unref(m);
    }
    if (!c.loss) {
      EXPECT_TRUE(warnings.empty()) << warnings[0];
    } else {
      ASSERT_EQ(warnings.size(), 1u);
      EXPECT_NE(warnings[0].find("packets missing before a keyframe"), std::string::npos)
          << warnings[0];
    }
    gst_element_set_bus(dec->element, nullptr);
    gst_object_unref(bus);
    gst_harness_teardown(dec);
  }
}

namespace {

// Two senders' streams of the same caps (GRAY8 16x8, 16 frames, a keyframe
// every 12), the second with other pictures.
void encode_two_senders(Encoded &a, Encoded &b, int version) {
  EncodeOptions o;
  o.frames = 16;
  o.threshold = 0;
  o.version = version;
  o.props = "keyframe-interval=12";
  encode(a, "GRAY8", 16, 8, o);
  o.seed = 2;
  encode(b, "GRAY8", 16, 8, o);
  ASSERT_EQ(a.packets.size(), 16u);
  ASSERT_EQ(b.packets.size(), 16u);
}

// The pictures `dec` showed after EOS: `a`'s frames 0 to 5, then `b`'s from
// its keyframe 12 on.
void expect_first_six_then_keyframe_on(GstHarness *dec, const Encoded &a, const Encoded &b) {
  EXPECT_TRUE(gst_harness_push_event(dec, gst_event_new_eos()));
  const std::vector<Bytes> frames = pull_pictures(dec);
  std::vector<Bytes> want(a.pictures.begin(), a.pictures.begin() + 6);
  want.insert(want.end(), b.pictures.begin() + 12, b.pictures.end());
  ASSERT_EQ(frames.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(frames[i], want[i]) << "frame " << i;
}

}  // namespace

// The decoder's input switched to another stream (an input-selector
// between two senders of the same caps: a stream-start with another
// stream-id, the other stream's header having gone by on the inactive pad):
// its deltas are dropped until its keyframe, even where their frame numbers
// follow on, and the decoder asks upstream for a keyframe. Before, it
// applied them to the first stream's picture (in version 1: frames of
// neither stream, without a warning).
TEST(CudaDiff, AnotherStreamStartWaitsForItsKeyframe) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    Encoded a, b;
    encode_two_senders(a, b, version);
    ASSERT_FALSE(HasFatalFailure());
    GstHarness *dec = gst_harness_new("cudadiffdec");
    gst_harness_set_src_caps_str(dec, "video/x-cudadiff");
    for (size_t t = 0; t < 6; ++t)
      EXPECT_EQ(gst_harness_push(dec, gst_buffer_ref(a.packets[t])), GST_FLOW_OK);
    while (GstEvent *ev = gst_harness_try_pull_upstream_event(dec)) gst_event_unref(ev);
    EXPECT_TRUE(gst_harness_push_event(dec, gst_event_new_stream_start("another-sender")));
    for (size_t t = 6; t < 16; ++t)  // deltas 6 to 11, keyframe 12, deltas 13 to 15
      EXPECT_EQ(gst_harness_push(dec, gst_buffer_ref(b.packets[t])), GST_FLOW_OK);
    expect_first_six_then_keyframe_on(dec, a, b);
    int requests = 0;
    while (GstEvent *ev = gst_harness_try_pull_upstream_event(dec)) {
      requests += gst_video_event_is_force_key_unit(ev) ? 1 : 0;
      gst_event_unref(ev);
    }
    EXPECT_GE(requests, 1);
    gst_harness_teardown(dec);
  }
}

// The same switch in the middle of a packet of a byte stream (no parser
// before the decoder: tcpclientsrc, an input-selector): the first stream
// ends there (GstVideoDecoder drains at a stream-start as at EOS), so its
// partial packet is dropped with the warning of a truncated stream, and is
// not read on into the second stream's bytes: that stream's keyframe right
// after the switch decodes.
TEST(CudaDiff, AnotherStreamStartDropsAPartialPacket) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    Encoded a, b;
    encode_two_senders(a, b, version);
    ASSERT_FALSE(HasFatalFailure());
    GstHarness *dec = gst_harness_new("cudadiffdec");
    GstBus *bus = gst_bus_new();
    gst_element_set_bus(dec->element, bus);
    gst_harness_set_src_caps_str(dec, "video/x-cudadiff");
    for (size_t t = 0; t < 6; ++t)
      EXPECT_EQ(gst_harness_push(dec, gst_buffer_ref(a.packets[t])), GST_FLOW_OK);
    const Bytes six = bytes_of(a.packets[6]);
    const Bytes half(six.begin(), six.begin() + six.size() / 2);
    EXPECT_EQ(gst_harness_push(dec, buffer_like(a.packets[6], half)), GST_FLOW_OK);
    EXPECT_TRUE(gst_harness_push_event(dec, gst_event_new_stream_start("another-sender")));
    for (size_t t = 12; t < 16; ++t)  // keyframe 12, deltas 13 to 15
      EXPECT_EQ(gst_harness_push(dec, gst_buffer_ref(b.packets[t])), GST_FLOW_OK);
    expect_first_six_then_keyframe_on(dec, a, b);
    const std::vector<gst_test::BusText> warnings = gst_test::pop_texts(bus, GST_MESSAGE_WARNING);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_EQ(warnings[0].message, "truncated stream: its last packet is incomplete");
    gst_element_set_bus(dec->element, nullptr);
    gst_object_unref(bus);
    gst_harness_teardown(dec);
  }
}

// A byte stream seeked back to its start (push mode: the seek goes
// upstream, which flushes and sends a segment with the seek's seqnum): the
// packets after the seek's segment go on from the timeline's start, not
// from where the stream was (their time falls back on purpose: not a
// restarted sender). Packets that were already on their way when the seek
// went out, parsed before the flush, do not count as the first after it.
TEST(CudaDiff, ParserSeekBackInAByteStream) {
  Encoded e;
  encode_seek_stream(e);
  ASSERT_EQ(e.packets.size(), 60u);
  // The first packet after the seek damaged (its payload's checksum fails)
  // or not: a damaged one counts as the first after the seek too (it used
  // to start a run of its own, which the packets after it then took).
  for (bool damaged_first : {false, true}) {
    SCOPED_TRACE(damaged_first ? "the first packet after the seek damaged" : "no damage");
    ParserOnBytes parser;
    for (size_t t = 0; t < 50; ++t) parser.push(bytes_of(e.packets[t]));
    std::vector<GstClockTime> before = parser.pull();
    ASSERT_FALSE(before.empty());
    EXPECT_EQ(before.back(), gst_util_uint64_scale(before.size() - 1, GST_SECOND, 30));
    const guint32 seqnum = parser.seek(0);
    for (size_t t = 50; t < 53; ++t) parser.push(bytes_of(e.packets[t]));  // already on their way
    parser.answer_seek(seqnum, 0);
    for (size_t t = 0; t < 10; ++t) {
      Bytes b = bytes_of(e.packets[t]);
      if (damaged_first && t == 0) b[64 + 5] ^= 0x5a;
      parser.push(b);
    }
    parser.eos();
    const std::vector<GstClockTime> after = parser.pull();
    ASSERT_GE(after.size(), 8u);
    const size_t first = 10 - after.size();  // (a packet may wait for the next)
    EXPECT_EQ(first, damaged_first ? 1u : 0u);
    for (size_t i = 0; i < after.size(); ++i)
      EXPECT_EQ(after[i], gst_util_uint64_scale(first + i, GST_SECOND, 30))
          << "packet " << first + i;
  }
}

// Two recordings one after the other in a byte stream (the second's time
// goes on from the first's end), seeked back into the first: its packets
// take their own run's time again, found by their byte offset (they took
// the second recording's run, 20 frames late).
TEST(CudaDiff, ParserSeekBackIntoAnEarlierRecording) {
  const std::vector<Bytes> packets = two_recordings(20);
  std::vector<guint64> offsets;
  guint64 at = 0;
  for (const Bytes &p : packets) {
    offsets.push_back(at);
    at += p.size();
  }
  ParserOnBytes parser;
  for (size_t t = 0; t < 40; ++t) parser.push(packets[t]);
  const std::vector<GstClockTime> before = parser.pull();
  ASSERT_GE(before.size(), 39u);
  // (the second run follows the first's end: durations rounded to the ns)
  EXPECT_NEAR(double(before[25]), double(gst_util_uint64_scale(25, GST_SECOND, 30)), 20.0);
  parser.answer_seek(parser.seek(gst_util_uint64_scale(5, GST_SECOND, 30)), offsets[5]);
  for (size_t t = 5; t < 10; ++t) parser.push(packets[t]);
  parser.eos();
  const std::vector<GstClockTime> after = parser.pull();
  ASSERT_GE(after.size(), 4u);
  const size_t first = 10 - after.size();
  for (size_t i = 0; i < after.size(); ++i)
    EXPECT_EQ(after[i], gst_util_uint64_scale(first + i, GST_SECOND, 30)) << "packet " << first + i;
}

// Two seeks sent upstream one right after the other (an application that
// seeks again before the first has landed; in push mode GstBaseParse sends
// each upstream as a seek in bytes), each answered in turn: the packets
// after each answer take the time of their place in the stream, and so do
// those after a later seek there. The parser remembered only the last
// seek's seqnum: the first answer then did not count as a seek, its first
// packet (frame 0, after frame 49) was taken for a restarted sender, and
// that run, remembered by offset, shifted every later seek into it.
TEST(CudaDiff, ParserTwoSeeksBackToBackInAByteStream) {
  Encoded e;
  encode_seek_stream(e);
  ASSERT_EQ(e.packets.size(), 60u);
  std::vector<guint64> offsets;
  guint64 at = 0;
  for (GstBuffer *b : e.packets) {
    offsets.push_back(at);
    at += gst_buffer_get_size(b);
  }
  auto frame_time = [](size_t t) { return gst_util_uint64_scale(t, GST_SECOND, 30); };
  // Packets first .. last - 1 pushed after a seek's answer: each has its
  // own frame's time (the last may wait for the next packet, or for EOS).
  auto expect_frames = [&](ParserOnBytes &parser, size_t first, size_t last, bool eos) {
    for (size_t t = first; t < last; ++t) parser.push(bytes_of(e.packets[t]));
    if (eos) parser.eos();
    const std::vector<GstClockTime> got = parser.pull();
    ASSERT_GE(got.size() + 1, last - first);
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i], frame_time(first + i)) << "packet " << first + i;
  };
  ParserOnBytes parser;
  expect_frames(parser, 0, 50, false);
  const guint32 to_start = parser.seek(0);
  const guint32 to_20 = parser.seek(frame_time(20));
  {
    SCOPED_TRACE("the first seek's answer");
    parser.answer_seek(to_start, offsets[0]);
    expect_frames(parser, 0, 10, false);
  }
  {
    SCOPED_TRACE("the second seek's answer");
    parser.answer_seek(to_20, offsets[20]);
    expect_frames(parser, 20, 30, false);
  }
  {
    SCOPED_TRACE("a later seek to the start");
    parser.answer_seek(parser.seek(0), offsets[0]);
    expect_frames(parser, 0, 10, true);
  }
}

namespace {

// A packet's framerate fields set to `fps_n`/`fps_d`, checksums made right.
Bytes with_framerate(Bytes b, uint32_t fps_n, uint32_t fps_d) {
  std::memcpy(b.data() + 48, &fps_n, 4);
  std::memcpy(b.data() + 52, &fps_d, 4);
  fix_checksums(b);
  return b;
}

// A packet's sender pts and duration set to `pts` and `duration`
// (GST_CLOCK_TIME_NONE: none), checksums made right.
Bytes with_time(Bytes b, uint64_t pts, uint64_t duration) {
  std::memcpy(b.data() + 16, &pts, 8);
  std::memcpy(b.data() + 24, &duration, 8);
  fix_checksums(b);
  return b;
}

// The output pts of `launch` (cudadiffdec, or the parser before it) for
// buffers holding `packets`, `groups[i]` packets in buffer i, untimed (a
// byte stream from tcpclientsrc) or, where `arrival` is given, buffer i
// timed arrival[i] (a timed byte stream: srtsrc, udpsrc); the segment is
// sent again before buffer `segment_again` (none: SIZE_MAX).
std::vector<GstClockTime> output_pts(const std::vector<Bytes> &packets,
                                     const std::vector<size_t> &groups,
                                     const std::vector<GstClockTime> &arrival = {},
                                     const char *launch = "cudadiffdec",
                                     size_t segment_again = SIZE_MAX) {
  std::vector<GstBuffer *> in;
  size_t next = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (g == segment_again) in.push_back(nullptr);
    Bytes group;
    for (size_t j = 0; j < groups[g]; ++j, ++next)
      group.insert(group.end(), packets.at(next).begin(), packets.at(next).end());
    GstBuffer *b = gst_buffer_new_allocate(nullptr, group.size(), nullptr);
    gst_buffer_fill(b, 0, group.data(), group.size());
    if (!arrival.empty()) GST_BUFFER_PTS(b) = arrival.at(g);
    in.push_back(b);
  }
  EXPECT_EQ(next, packets.size());
  Decoded d;
  decode(d, in, true, launch);
  EXPECT_TRUE(d.warnings.empty()) << d.warnings.front();
  std::vector<GstClockTime> pts;
  for (GstBuffer *b : d.buffers) pts.push_back(GST_BUFFER_PTS(b));
  for (GstBuffer *b : in)
    if (b) gst_buffer_unref(b);
  return pts;
}

// Each packet in a buffer of its own, untimed.
std::vector<GstClockTime> output_pts(const std::vector<Bytes> &packets,
                                     const char *launch = "cudadiffdec") {
  return output_pts(packets, std::vector<size_t>(packets.size(), 1), {}, launch);
}

}  // namespace

// A camera's timestamps jitter about their frame interval, while each
// packet's duration is the nominal one. On a byte stream the decoder's
// output follows the sender's timestamps from 0 exactly: a packet a little
// earlier than the one before it ended is not a restart (which moved the
// rest of the stream later, so that the output ran further ahead of the
// sender with every such packet).
TEST(CudaDiff, DecoderTimestampsFollowTheSendersJitter) {
  Encoded e;
  EncodeOptions o;
  o.frames = 8;
  encode(e, "GRAY8", 16, 8, o);
  const int64_t jitter_ms[8] = {0, 2, -2, 1, -1, 2, -2, 0};
  const uint64_t interval = gst_util_uint64_scale(1, GST_SECOND, 30);
  std::vector<Bytes> packets;
  std::vector<GstClockTime> want;
  for (size_t t = 0; t < 8; ++t) {
    const uint64_t pts = 5 * GST_SECOND + t * interval + jitter_ms[t] * GST_MSECOND;
    packets.push_back(with_time(bytes_of(e.packets[t]), pts, interval));
    want.push_back(pts - 5 * GST_SECOND);
  }
  EXPECT_EQ(output_pts(packets), want);
  EXPECT_EQ(output_pts(packets, "cudadiffparse ! cudadiffdec"), want);
}

// The PTS of what `launch` (ending in a sink named "sink") pushes for a file
// holding `stream`, pulled by filesrc, and the pipeline's duration at its end
// (unless `duration` is null: the decoder alone answers none).
std::vector<GstClockTime> file_pts(const Bytes &stream, const char *launch, gint64 *duration) {
  const TempFile file(stream, "cudadiff-untimed-XXXXXX.cdif");
  const char *path = file.path();
  EXPECT_NE(path, nullptr);
  std::vector<GstClockTime> pts;
  if (!path) return pts;
  GstElement *p =
      gst_parse_launch((std::string("filesrc location=") + path + " ! " + launch).c_str(), nullptr);
  EXPECT_NE(p, nullptr);
  GstElement *sink = gst_bin_get_by_name(GST_BIN(p), "sink");
  GstPad *in = gst_element_get_static_pad(sink, "sink");
  gst_pad_add_probe(
      in, GST_PAD_PROBE_TYPE_BUFFER,
      [](GstPad *, GstPadProbeInfo *info, gpointer data) {
        static_cast<std::vector<GstClockTime> *>(data)->push_back(
            GST_BUFFER_PTS(GST_PAD_PROBE_INFO_BUFFER(info)));
        return GST_PAD_PROBE_OK;
      },
      &pts, nullptr);
  gst_element_set_state(p, GST_STATE_PLAYING);
  GstBus *bus = gst_element_get_bus(p);
  GstMessage *m = gst_bus_timed_pop_filtered(bus, 30 * GST_SECOND,
                                             GstMessageType(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
  EXPECT_NE(m, nullptr) << "neither end of stream nor an error within 30 s";
  if (m) {
    EXPECT_EQ(GST_MESSAGE_TYPE(m), GST_MESSAGE_EOS);
    gst_message_unref(m);
  }
  if (duration) {
    *duration = -1;
    EXPECT_TRUE(gst_element_query_duration(p, GST_FORMAT_TIME, duration));
  }
  gst_element_set_state(p, GST_STATE_NULL);
  gst_object_unref(bus);
  gst_object_unref(in);
  gst_object_unref(sink);
  gst_object_unref(p);
  return pts;
}

// GstBaseParse's index entries that cudadiffparse's frames add (its LOG
// lines "Adding key=... index entry" less those that say why an entry was
// not added), counted while a recording plays, looped by a flushing seek
// back to the start at each end of stream.
struct IndexCount {
  std::atomic<int> tried{0}, refused{0};
  static void log(GstDebugCategory *category, GstDebugLevel level, const gchar *, const gchar *,
                  gint, GObject *, GstDebugMessage *message, gpointer data) {
    if (level != GST_LEVEL_LOG || std::strcmp(gst_debug_category_get_name(category), "baseparse"))
      return;
    const char *text = gst_debug_message_get(message);
    if (!text) return;
    auto *c = static_cast<IndexCount *>(data);
    if (std::strstr(text, "index entry") && std::strncmp(text, "Adding", 6) == 0) ++c->tried;
    if (std::strstr(text, "already have entries") || std::strstr(text, "entry too close"))
      ++c->refused;
  }
  int added() const { return tried - refused; }
};

// A recording played again and again (looped by a seek to its start at each
// end, as a player or the RTSP server's file source loops): GstBaseParse's
// index stops growing once the stream has been played through. Before, each
// pass added every frame after the last keyframe again (an index entry and
// a list node each: 76 kB per pass of a 20 s recording with a single
// keyframe), for as long as it played, in pull mode and in push mode.
TEST(CudaDiff, ParserIndexStopsGrowingWhenARecordingLoops) {
  Encoded e;
  EncodeOptions o;
  o.frames = 40;
  o.props = "keyframe-interval=0";  // the first frame only
  encode(e, "GRAY8", 16, 8, o);
  Bytes stream;
  append_packets(stream, e.packets);
  const TempFile file(stream, "cudadiff-loop-XXXXXX.cdif");
  const char *path = file.path();
  ASSERT_NE(path, nullptr);
  gst_debug_set_threshold_for_name("baseparse", GST_LEVEL_LOG);
  for (const char *mode : {"", "queue ! "}) {
    SCOPED_TRACE(*mode ? "push mode" : "pull mode");
    GstElement *p = gst_parse_launch((std::string("filesrc location=") + path + " ! " + mode +
                                      "cudadiffparse ! fakesink sync=false")
                                         .c_str(),
                                     nullptr);
    ASSERT_NE(p, nullptr);
    GstBus *bus = gst_element_get_bus(p);
    IndexCount count;
    gst_debug_add_log_function(&IndexCount::log, &count, nullptr);
    gst_element_set_state(p, GST_STATE_PLAYING);
    std::vector<int> added;  // after each pass
    for (int pass = 0; pass < 4; ++pass) {
      GstMessage *m = gst_bus_timed_pop_filtered(
          bus, 30 * GST_SECOND, GstMessageType(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
      ASSERT_NE(m, nullptr) << "pass " << pass;
      EXPECT_EQ(GST_MESSAGE_TYPE(m), GST_MESSAGE_EOS) << "pass " << pass;
      gst_message_unref(m);
      added.push_back(count.added());
      EXPECT_TRUE(gst_element_seek_simple(p, GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH, 0));
    }
    gst_element_set_state(p, GST_STATE_NULL);
    gst_debug_remove_log_function(&IndexCount::log);
    gst_object_unref(bus);
    gst_object_unref(p);
    // The first pass indexes the stream; the passes after it add nothing.
    // (Entries were seen at all: GStreamer's debug log is built in.)
    ASSERT_EQ(added.size(), 4u);
    ASSERT_GT(added[0], 0);
    EXPECT_EQ(added[3], added[1]) << "entries after passes 1-4: " << added[0] << ", " << added[1]
                                  << ", " << added[2] << ", " << added[3];
  }
  gst_debug_unset_threshold_for_name("baseparse");
}

// A seek with a stop in a recording read in push mode (filesrc ! queue):
// GstBaseParse answers the first packet past the stop with EOS upstream, and
// the file source ends the stream in the middle of the file, so the bytes
// received end inside a packet that is whole in the file. That is no
// truncated stream: the seek's range plays and ends with EOS, no warning
// (before, 5 of 6 stops warned "truncated stream" in push mode). The same
// file cut inside its last packet still gets the warning, in both modes.
TEST(CudaDiff, ParserSeekWithAStopInPushModeIsNoTruncatedStream) {
  Encoded e;
  EncodeOptions o;
  o.frames = 60;
  o.threshold = 0;
  o.props = "keyframe-interval=10";
  encode(e, "BGR", 64, 48, o);
  ASSERT_FALSE(HasFatalFailure());
  Bytes stream;
  append_packets(stream, e.packets);
  const TempFile file(stream, "cudadiff-stop-XXXXXX.cdif");
  ASSERT_NE(file.path(), nullptr);
  // (its header whole: the parser knows the packet's size)
  ASSERT_GT(bytes_of(e.packets.back()).size(), 64u + 10u);
  const Bytes cut_bytes(stream.begin(), stream.end() - 10);
  const TempFile cut(cut_bytes, "cudadiff-cut-XXXXXX.cdif");
  ASSERT_NE(cut.path(), nullptr);
  // (blocks of 1000 bytes: the stream's packets are of other sizes, so the
  // bytes received at a stop end inside a packet)
  auto play = [](const char *path, const char *mode, GstClockTime stop, int *frames,
                 std::vector<gst_test::BusText> *warnings) {
    GstElement *p =
        gst_parse_launch((std::string("filesrc blocksize=1000 location=") + path + " ! " + mode +
                          "cudadiffparse ! cudadiffdec ! fakesink name=sink sync=false "
                          "signal-handoffs=true")
                             .c_str(),
                         nullptr);
    ASSERT_NE(p, nullptr);
    GstElement *sink = gst_bin_get_by_name(GST_BIN(p), "sink");
    *frames = 0;
    g_signal_connect(sink, "handoff",
                     G_CALLBACK(+[](GstElement *, GstBuffer *, GstPad *, gpointer n) {
                       g_atomic_int_inc(static_cast<int *>(n));
                     }),
                     frames);
    GstBus *bus = gst_element_get_bus(p);
    gst_element_set_state(p, GST_STATE_PAUSED);
    ASSERT_EQ(gst_element_get_state(p, nullptr, nullptr, 10 * GST_SECOND),
              GST_STATE_CHANGE_SUCCESS);
    if (stop != GST_CLOCK_TIME_NONE) {
      EXPECT_TRUE(gst_element_seek(
          p, 1.0, GST_FORMAT_TIME, GstSeekFlags(GST_SEEK_FLAG_FLUSH | GST_SEEK_FLAG_ACCURATE),
          GST_SEEK_TYPE_SET, 0, GST_SEEK_TYPE_SET, GstClockTimeDiff(stop)));
      gst_element_get_state(p, nullptr, nullptr, 10 * GST_SECOND);
    }
    g_atomic_int_set(frames, 0);
    gst_element_set_state(p, GST_STATE_PLAYING);
    // (the warnings as they come: popping up to EOS discards the others)
    warnings->clear();
    for (;;) {
      GstMessage *m = gst_bus_timed_pop_filtered(
          bus, 30 * GST_SECOND,
          GstMessageType(GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_WARNING));
      ASSERT_NE(m, nullptr);
      const GstMessageType type = GST_MESSAGE_TYPE(m);
      if (type == GST_MESSAGE_WARNING) warnings->push_back(gst_test::bus_text(m));
      gst_message_unref(m);
      if (type == GST_MESSAGE_WARNING) continue;
      EXPECT_EQ(type, GST_MESSAGE_EOS);
      break;
    }
    gst_element_set_state(p, GST_STATE_NULL);
    gst_object_unref(sink);
    gst_object_unref(bus);
    gst_object_unref(p);
  };
  for (const char *mode : {"", "queue ! "}) {
    SCOPED_TRACE(*mode ? "push mode" : "pull mode");
    // 60 frames at 30 fps: stops at frames 5.5 to 50.5 (the frames of
    // [0, stop] shown, those after the stop not)
    for (int tenth = 55; tenth <= 505; tenth += 50) {
      SCOPED_TRACE("stop at frame " + std::to_string(tenth / 10.0));
      int frames = 0;
      std::vector<gst_test::BusText> warnings;
      play(file.path(), mode, GstClockTime(tenth) * GST_SECOND / 300, &frames, &warnings);
      ASSERT_FALSE(HasFatalFailure());
      EXPECT_EQ(frames, tenth / 10 + 1);
      for (const gst_test::BusText &w : warnings) ADD_FAILURE() << "warning: " << w.message;
    }
    int frames = 0;
    std::vector<gst_test::BusText> warnings;
    play(cut.path(), mode, GST_CLOCK_TIME_NONE, &frames, &warnings);
    ASSERT_FALSE(HasFatalFailure());
    EXPECT_EQ(frames, 59);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_EQ(warnings[0].message, "truncated stream: its last packet is incomplete");
  }
}

// A recording whose second part differs from the first only in its pixel
// aspect ratio (20 BGRx 64x48 frames at 25 fps of 1/1, then 20 of 4/3, a
// keyframe every 10 frames, a stream header before each part): after a
// seek into either part the decoded frames have that part's pixel aspect
// ratio, in pull mode and in push mode, and so do the parser's caps. The
// seek lands on a keyframe past its part's stream header, which the parser
// sends again before it. Before, a seek ahead into the second part (from
// the preroll) kept the first part's 1/1, and a seek back into the first
// part after the second had been seen took 4/3. The same with the second
// part's stream header followed by 70 copies of it (a sender sends it again
// with keyframes, e.g. at each client's PLAY): the parser keeps 64 headers,
// which copies must not take from the first part's.
TEST(CudaDiff, SeekIntoAPartOfARecordingShowsItsPixelAspectRatio) {
  GstHarness *enc = gst_harness_new("cudadiffenc");
  g_object_set(enc->element, "keyframe-interval", 10u, "frame-overlap", 2 /* never */, nullptr);
  std::vector<Bytes> packets;
  size_t second_header = 0;  // its index in `packets`
  const GstVideoInfo info = video_info("BGRx", 64, 48, 25);
  for (int part = 0; part < 2; ++part) {
    gst_harness_set_src_caps_str(
        enc, part == 0 ? "video/x-raw,format=BGRx,width=64,height=48,framerate=25/1,"
                         "pixel-aspect-ratio=1/1,interlace-mode=progressive"
                       : "video/x-raw,format=BGRx,width=64,height=48,framerate=25/1,"
                         "pixel-aspect-ratio=4/3,interlace-mode=progressive");
    for (int i = 0; i < 20; ++i) {
      const int t = part * 20 + i;
      GstBuffer *in = buffer_from(info, scene("BGRx", 64, 48, t, 3), t);
      GST_BUFFER_PTS(in) = GstClockTime(t) * 40 * GST_MSECOND;
      GST_BUFFER_DURATION(in) = 40 * GST_MSECOND;
      ASSERT_EQ(gst_harness_push(enc, in), GST_FLOW_OK);
      while (GstBuffer *b = gst_harness_try_pull(enc)) {
        if (part == 1 && GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_HEADER))
          second_header = packets.size();
        packets.push_back(bytes_of(b));
        gst_buffer_unref(b);
      }
    }
  }
  gst_harness_teardown(enc);
  ASSERT_GT(second_header, 0u);
  for (int copies : {0, 70})
    for (const char *mode : {"", "queue ! "}) {
      SCOPED_TRACE(std::string(*mode ? "push mode" : "pull mode") + ", " + std::to_string(copies) +
                   " copies of the second part's stream header");
      Bytes stream;
      for (size_t i = 0; i < packets.size(); ++i)
        for (int n = 0; n <= (i == second_header ? copies : 0); ++n)
          stream.insert(stream.end(), packets[i].begin(), packets[i].end());
      const TempFile file(stream, "cudadiff-parts-XXXXXX.cdif");
      const char *path = file.path();
      ASSERT_NE(path, nullptr);
      GstElement *p =
          gst_parse_launch((std::string("filesrc location=") + path + " ! " + mode +
                            "cudadiffparse name=parse ! cudadiffdec ! appsink name=sink "
                            "sync=false max-buffers=1")
                               .c_str(),
                           nullptr);
      ASSERT_NE(p, nullptr);
      GstElement *sink = gst_bin_get_by_name(GST_BIN(p), "sink");
      GstElement *parse = gst_bin_get_by_name(GST_BIN(p), "parse");
      // The first frame after the preroll or a seek: its time, and the pixel
      // aspect ratio of its caps and of the parser's.
      auto first = [&](GstClockTime *pts, int *num, int *den, int *parse_num, int *parse_den) {
        *pts = GST_CLOCK_TIME_NONE;
        *num = *den = *parse_num = *parse_den = 0;
        EXPECT_EQ(gst_element_get_state(p, nullptr, nullptr, 30 * GST_SECOND),
                  GST_STATE_CHANGE_SUCCESS);
        GstSample *sample = nullptr;
        g_signal_emit_by_name(sink, "pull-preroll", &sample);
        ASSERT_NE(sample, nullptr);
        *pts = GST_BUFFER_PTS(gst_sample_get_buffer(sample));
        gst_structure_get_fraction(gst_caps_get_structure(gst_sample_get_caps(sample), 0),
                                   "pixel-aspect-ratio", num, den);
        gst_sample_unref(sample);
        GstPad *src = gst_element_get_static_pad(parse, "src");
        GstCaps *caps = gst_pad_get_current_caps(src);
        ASSERT_NE(caps, nullptr);
        gst_structure_get_fraction(gst_caps_get_structure(caps, 0), "pixel-aspect-ratio", parse_num,
                                   parse_den);
        gst_caps_unref(caps);
        gst_object_unref(src);
      };
      gst_element_set_state(p, GST_STATE_PAUSED);
      GstClockTime pts;
      int n, d, pn, pd;
      first(&pts, &n, &d, &pn, &pd);
      EXPECT_EQ(pts, 0u);
      EXPECT_TRUE(n == 1 && d == 1) << n << "/" << d;
      // Frame 33 (the second part, its keyframe 30), then frame 12 (the
      // first, its keyframe 10).
      for (int frame : {33, 12}) {
        SCOPED_TRACE("seek to frame " + std::to_string(frame));
        const GstClockTime at = GstClockTime(frame) * 40 * GST_MSECOND;
        ASSERT_TRUE(gst_element_seek_simple(
            p, GST_FORMAT_TIME, GstSeekFlags(GST_SEEK_FLAG_FLUSH | GST_SEEK_FLAG_ACCURATE), at));
        first(&pts, &n, &d, &pn, &pd);
        EXPECT_EQ(pts, at);
        const int want_n = frame >= 20 ? 4 : 1, want_d = frame >= 20 ? 3 : 1;
        EXPECT_TRUE(n == want_n && d == want_d) << "decoded frames: " << n << "/" << d;
        EXPECT_TRUE(pn == want_n && pd == want_d) << "the parser's caps: " << pn << "/" << pd;
      }
      gst_element_set_state(p, GST_STATE_NULL);
      gst_object_unref(parse);
      gst_object_unref(sink);
      gst_object_unref(p);
    }
}

// Bytes and time in a recording, through the parser as playbin and
// decodebin plug it: a byte is at the time of the first keyframe at or after
// it, a time at the offset of the keyframe before it, and a seek in bytes
// shows pictures again from that keyframe (as the decoder alone does).
// Before, the parser answered with GstBaseParse's guess from the bit rate: a
// byte in frame 13 of 40 was at 5.35 s of a 1.6 s file, and a seek there
// landed about anywhere.
// The parser's stream header is no frame: no duration (GstBaseParse gave it
// the framerate's, 40 ms here), in pull and in push mode; the packets have
// theirs.
TEST(CudaDiff, ParserGivesTheStreamHeaderNoDuration) {
  Encoded e;
  EncodeOptions o;
  o.frames = 4;
  o.fps = 25;
  encode(e, "GRAY8", 16, 8, o);
  ASSERT_NE(stream_header_of(e), nullptr);
  Bytes stream = bytes_of(stream_header_of(e));
  append_packets(stream, e.packets);
  const TempFile file(stream, "cudadiff-header-XXXXXX.cdif");
  ASSERT_NE(file.path(), nullptr);
  for (const char *mode : {"", "queue ! "}) {
    SCOPED_TRACE(*mode ? "push mode" : "pull mode");
    const std::string desc = std::string("filesrc location=") + file.path() + " ! " + mode +
                             "cudadiffparse ! fakesink name=out signal-handoffs=true";
    GstElement *pipeline = gst_parse_launch(desc.c_str(), nullptr);
    ASSERT_NE(pipeline, nullptr);
    using Seen = std::vector<std::pair<bool, GstClockTime>>;  // header?, duration
    Seen seen;
    GstElement *out = gst_bin_get_by_name(GST_BIN(pipeline), "out");
    g_signal_connect(
        out, "handoff", G_CALLBACK(+[](GstElement *, GstBuffer *b, GstPad *, gpointer data) {
          static_cast<Seen *>(data)->push_back(
              {GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_HEADER), GST_BUFFER_DURATION(b)});
        }),
        &seen);
    gst_object_unref(out);
    gst_element_set_state(pipeline, GST_STATE_PLAYING);
    GstBus *bus = gst_element_get_bus(pipeline);
    GstMessage *m = gst_bus_timed_pop_filtered(
        bus, 20 * GST_SECOND, static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(GST_MESSAGE_TYPE(m), GST_MESSAGE_EOS);
    gst_message_unref(m);
    gst_object_unref(bus);
    gst_element_set_state(pipeline, GST_STATE_NULL);
    gst_object_unref(pipeline);
    ASSERT_EQ(seen.size(), 5u);  // the stream header and 4 packets
    EXPECT_TRUE(seen[0].first);
    EXPECT_EQ(seen[0].second, GST_CLOCK_TIME_NONE);
    for (size_t i = 1; i < seen.size(); ++i) {
      EXPECT_FALSE(seen[i].first) << i;
      EXPECT_TRUE(GST_CLOCK_TIME_IS_VALID(seen[i].second)) << i;
    }
  }
}

// A recording of 40 frames at 25 fps (64x48 BGRx, a keyframe every 10
// frames, times from 0), in `stream`, and the offset of each frame's packet
// in it, in `at`.
static void keyframed_recording(Bytes *stream, std::vector<guint64> *at) {
  GstHarness *enc = gst_harness_new("cudadiffenc");
  g_object_set(enc->element, "keyframe-interval", 10u, "frame-overlap", 2 /* never */, nullptr);
  gst_harness_set_src_caps_str(enc, "video/x-raw,format=BGRx,width=64,height=48,framerate=25/1");
  const GstVideoInfo info = video_info("BGRx", 64, 48, 25);
  for (int t = 0; t < 40; ++t) {
    GstBuffer *in = buffer_from(info, scene("BGRx", 64, 48, t, 3), t);
    GST_BUFFER_PTS(in) = GstClockTime(t) * 40 * GST_MSECOND;
    GST_BUFFER_DURATION(in) = 40 * GST_MSECOND;
    ASSERT_EQ(gst_harness_push(enc, in), GST_FLOW_OK);
    while (GstBuffer *b = gst_harness_try_pull(enc)) {
      if (!GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_HEADER)) at->push_back(stream->size());
      const Bytes bytes = bytes_of(b);
      stream->insert(stream->end(), bytes.begin(), bytes.end());
      gst_buffer_unref(b);
    }
  }
  gst_harness_teardown(enc);
}

TEST(CudaDiff, BytesAndTimeInARecordingThroughTheParser) {
  Bytes stream;
  std::vector<guint64> at;  // each frame's packet's offset
  keyframed_recording(&stream, &at);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(at.size(), 40u);
  auto ms = [](int n) { return gint64(n) * 40 * GST_MSECOND; };
  const TempFile file(stream, "cudadiff-bytes-XXXXXX.cdif");
  ASSERT_NE(file.path(), nullptr);
  GstElement *p = gst_parse_launch((std::string("filesrc location=") + file.path() +
                                    " ! cudadiffparse name=parse ! cudadiffdec ! appsink "
                                    "name=sink sync=false max-buffers=1")
                                       .c_str(),
                                   nullptr);
  ASSERT_NE(p, nullptr);
  GstElement *sink = gst_bin_get_by_name(GST_BIN(p), "sink");
  GstElement *parse = gst_bin_get_by_name(GST_BIN(p), "parse");
  auto first_pts = [&]() -> GstClockTime {
    EXPECT_EQ(gst_element_get_state(p, nullptr, nullptr, 30 * GST_SECOND),
              GST_STATE_CHANGE_SUCCESS);
    GstSample *sample = nullptr;
    g_signal_emit_by_name(sink, "pull-preroll", &sample);
    if (!sample) return GST_CLOCK_TIME_NONE;
    const GstClockTime pts = GST_BUFFER_PTS(gst_sample_get_buffer(sample));
    gst_sample_unref(sample);
    return pts;
  };
  gst_element_set_state(p, GST_STATE_PAUSED);
  EXPECT_EQ(first_pts(), 0u);
  GstPad *src = gst_element_get_static_pad(parse, "src");
  auto convert = [&](GstFormat from, gint64 value, GstFormat to) {
    gint64 out = -2;
    EXPECT_TRUE(gst_pad_query_convert(src, from, value, to, &out))
        << gst_format_get_name(from) << " " << value;
    return out;
  };
  // Bytes to time.
  EXPECT_EQ(convert(GST_FORMAT_BYTES, gint64(at[13]) + 10, GST_FORMAT_TIME), ms(20));
  EXPECT_EQ(convert(GST_FORMAT_BYTES, gint64(at[10]), GST_FORMAT_TIME), ms(10));
  EXPECT_EQ(convert(GST_FORMAT_BYTES, gint64(at[10]) + 1, GST_FORMAT_TIME), ms(20));
  EXPECT_EQ(convert(GST_FORMAT_BYTES, 0, GST_FORMAT_TIME), 0);
  EXPECT_EQ(convert(GST_FORMAT_BYTES, gint64(at[31]), GST_FORMAT_TIME), ms(40));  // the end
  EXPECT_EQ(convert(GST_FORMAT_BYTES, gint64(stream.size()), GST_FORMAT_TIME), ms(40));
  // Time to bytes.
  EXPECT_EQ(convert(GST_FORMAT_TIME, ms(13), GST_FORMAT_BYTES), gint64(at[10]));
  EXPECT_EQ(convert(GST_FORMAT_TIME, ms(10), GST_FORMAT_BYTES), gint64(at[10]));
  EXPECT_EQ(convert(GST_FORMAT_TIME, ms(10) - 1, GST_FORMAT_BYTES), gint64(at[0]));
  EXPECT_EQ(convert(GST_FORMAT_TIME, 0, GST_FORMAT_BYTES), gint64(at[0]));
  EXPECT_EQ(convert(GST_FORMAT_TIME, ms(39), GST_FORMAT_BYTES), gint64(at[30]));
  EXPECT_EQ(convert(GST_FORMAT_TIME, ms(40), GST_FORMAT_BYTES), gint64(stream.size()));
  EXPECT_EQ(convert(GST_FORMAT_TIME, -1, GST_FORMAT_BYTES), -1);
  gst_object_unref(src);
  // Seeks in bytes, into frame 13's packet and then frame 27's.
  for (int frame : {13, 27}) {
    SCOPED_TRACE("a seek to a byte of frame " + std::to_string(frame));
    ASSERT_TRUE(gst_element_seek_simple(p, GST_FORMAT_BYTES, GST_SEEK_FLAG_FLUSH,
                                        gint64(at[size_t(frame)]) + 10));
    EXPECT_EQ(first_pts(), GstClockTime(ms((frame / 10 + 1) * 10)));
  }
  gst_element_set_state(p, GST_STATE_NULL);
  gst_object_unref(parse);
  gst_object_unref(sink);
  gst_object_unref(p);
}

// A seek in bytes in a recording read by the decoder alone (`filesrc !
// cudadiffdec`) shows the recording's times, as the parser does: the first
// keyframe at or after the byte, at its time, in a segment that starts
// there (so a synchronising sink shows it at once and position queries
// give the recording's time). Before, the times started again at 0 after
// the seek. A seek into the last keyframe interval, which leaves only
// deltas, or into the last packet, which leaves not even a whole one, ends
// with EOS; before, with "No valid frames decoded before end of stream"
// (the latter with GStreamer 1.22, both with 1.20).
TEST(CudaDiff, BytesSeekInARecordingWithTheDecoderAlone) {
  Bytes stream;
  std::vector<guint64> at;  // each frame's packet's offset
  keyframed_recording(&stream, &at);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(at.size(), 40u);
  auto ms = [](int n) { return GstClockTime(n) * 40 * GST_MSECOND; };
  const TempFile file(stream, "cudadiff-bytes-XXXXXX.cdif");
  ASSERT_NE(file.path(), nullptr);
  GstElement *p = gst_parse_launch((std::string("filesrc location=") + file.path() +
                                    " ! cudadiffdec ! appsink name=sink sync=false max-buffers=1")
                                       .c_str(),
                                   nullptr);
  ASSERT_NE(p, nullptr);
  GstElement *sink = gst_bin_get_by_name(GST_BIN(p), "sink");
  // The preroll's time, its segment's start and time, and its picture.
  struct Preroll {
    GstClockTime pts = GST_CLOCK_TIME_NONE, start = GST_CLOCK_TIME_NONE, time = GST_CLOCK_TIME_NONE;
    Bytes picture;
  };
  auto preroll = [&]() {
    Preroll r;
    EXPECT_EQ(gst_element_get_state(p, nullptr, nullptr, 30 * GST_SECOND),
              GST_STATE_CHANGE_SUCCESS);
    GstSample *sample = nullptr;
    g_signal_emit_by_name(sink, "pull-preroll", &sample);
    if (!sample) return r;
    r.pts = GST_BUFFER_PTS(gst_sample_get_buffer(sample));
    const GstSegment *segment = gst_sample_get_segment(sample);
    EXPECT_EQ(segment->format, GST_FORMAT_TIME);
    r.start = segment->start;
    r.time = segment->time;
    r.picture = canonical_of(gst_sample_get_buffer(sample), gst_sample_get_caps(sample));
    gst_sample_unref(sample);
    return r;
  };
  gst_element_set_state(p, GST_STATE_PAUSED);
  const Preroll first = preroll();
  EXPECT_EQ(first.pts, 0u);
  EXPECT_EQ(first.start, 0u);
  // The pictures of a decode from the start, by time.
  std::map<GstClockTime, Bytes> full;
  gst_element_set_state(p, GST_STATE_PLAYING);
  for (;;) {
    GstSample *sample = nullptr;
    g_signal_emit_by_name(sink, "try-pull-sample", GstClockTime(10 * GST_SECOND), &sample);
    if (!sample) break;
    full[GST_BUFFER_PTS(gst_sample_get_buffer(sample))] =
        canonical_of(gst_sample_get_buffer(sample), gst_sample_get_caps(sample));
    gst_sample_unref(sample);
  }
  ASSERT_EQ(full.size(), 40u);
  gst_element_set_state(p, GST_STATE_PAUSED);
  // Into frame 13's packet, then frame 27's, then back to frame 5's; then
  // to the first byte of keyframes 10 and 20 and of the first packet (the
  // first packet read is then a keyframe, no delta dropped before it).
  for (int frame : {13, 27, 5, 10, 20, 0}) {
    SCOPED_TRACE("a seek to a byte of frame " + std::to_string(frame));
    const bool exact = frame % 10 == 0;
    ASSERT_TRUE(gst_element_seek_simple(p, GST_FORMAT_BYTES, GST_SEEK_FLAG_FLUSH,
                                        gint64(at[size_t(frame)]) + (exact ? 0 : 10)));
    const Preroll r = preroll();
    const GstClockTime key = exact ? ms(frame) : ms((frame / 10 + 1) * 10);
    EXPECT_EQ(r.pts, key);
    EXPECT_EQ(r.start, key);
    EXPECT_EQ(r.time, key);
    EXPECT_TRUE(r.picture == full[key]);
  }
  // Into frame 33's: deltas only until the end; into the last packet, past
  // its first byte: not even a whole packet (GstVideoDecoder's own "No
  // valid frames decoded" error, before, where it saw no frame at all, and
  // with GStreamer 1.20 also where it saw only dropped ones).
  GstBus *bus = gst_element_get_bus(p);
  for (int frame : {33, 39}) {
    SCOPED_TRACE("a seek to a byte of frame " + std::to_string(frame) + ", then play");
    gst_element_set_state(p, GST_STATE_PAUSED);
    ASSERT_TRUE(gst_element_seek_simple(p, GST_FORMAT_BYTES, GST_SEEK_FLAG_FLUSH,
                                        gint64(at[size_t(frame)]) + 10));
    gst_element_set_state(p, GST_STATE_PLAYING);
    GstMessage *m = gst_bus_timed_pop_filtered(bus, 30 * GST_SECOND,
                                               GstMessageType(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
    ASSERT_NE(m, nullptr);
    if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ERROR) {
      GError *err = nullptr;
      gst_message_parse_error(m, &err, nullptr);
      ADD_FAILURE() << "error: " << err->message;
      g_error_free(err);
    }
    gst_message_unref(m);
    // (nor an error after the end of stream)
    m = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR);
    EXPECT_EQ(m, nullptr);
    if (m) gst_message_unref(m);
  }
  gst_object_unref(bus);
  gst_element_set_state(p, GST_STATE_NULL);
  gst_object_unref(sink);
  gst_object_unref(p);
}

// The decoder alone after a file source, a recording joined to itself (the
// second copy's times start again, so it takes a run of its own on the
// timeline), read in 256-byte blocks: a seek in bytes without a flush, back
// to the start while the first blocks are read, then flushing seeks in
// bytes to the second copy's keyframes 0 and 10. Each keyframe comes at the
// time it had when the file was played through after the first seek.
// Before, the bytes after the seek were counted on from where the first
// read had got to (the adapter still held the bytes read before it), so
// that every packet after it was placed past its offset, and the flushing
// seek put the second copy's keyframe in the run of the first copy.
TEST(CudaDiff, BytesSeekAfterASeekWithoutAFlushWithTheDecoderAlone) {
  Bytes one;
  std::vector<guint64> at;  // each frame's packet's offset
  keyframed_recording(&one, &at);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(at.size(), 40u);
  Bytes stream = one;
  stream.insert(stream.end(), one.begin(), one.end());
  const guint64 second = one.size();  // where the second copy starts
  const TempFile file(stream, "cudadiff-joined-XXXXXX.cdif");
  ASSERT_NE(file.path(), nullptr);
  GstElement *p =
      gst_parse_launch((std::string("filesrc name=src blocksize=256 location=") + file.path() +
                        " ! cudadiffdec ! appsink name=sink sync=false max-buffers=1")
                           .c_str(),
                       nullptr);
  ASSERT_NE(p, nullptr);
  GstElement *sink = gst_bin_get_by_name(GST_BIN(p), "sink");
  GstElement *src = gst_bin_get_by_name(GST_BIN(p), "src");
  // The seek without a flush, from the streaming thread (where it cannot
  // wait for a frame the application has not pulled yet), when the block
  // at byte 1024 goes out.
  struct Seek {
    GstElement *src;
    bool done = false;
  } seek{src};
  GstPad *src_pad = gst_element_get_static_pad(src, "src");
  gst_pad_add_probe(
      src_pad, GST_PAD_PROBE_TYPE_BUFFER,
      [](GstPad *, GstPadProbeInfo *info, gpointer data) {
        auto *s = static_cast<Seek *>(data);
        if (!s->done && GST_BUFFER_OFFSET(GST_PAD_PROBE_INFO_BUFFER(info)) >= 1024) {
          s->done = true;
          EXPECT_TRUE(gst_element_seek(s->src, 1.0, GST_FORMAT_BYTES, GST_SEEK_FLAG_NONE,
                                       GST_SEEK_TYPE_SET, 0, GST_SEEK_TYPE_NONE, -1));
        }
        return GST_PAD_PROBE_OK;
      },
      &seek, nullptr);
  gst_object_unref(src_pad);
  // Played through: the frames' times, in order; the second copy's 40
  // frames come last.
  gst_element_set_state(p, GST_STATE_PLAYING);
  std::vector<GstClockTime> played;
  for (;;) {
    GstSample *sample = nullptr;
    g_signal_emit_by_name(sink, "try-pull-sample", GstClockTime(10 * GST_SECOND), &sample);
    if (!sample) break;
    played.push_back(GST_BUFFER_PTS(gst_sample_get_buffer(sample)));
    gst_sample_unref(sample);
  }
  EXPECT_TRUE(seek.done);
  ASSERT_GE(played.size(), 80u);
  const std::vector<GstClockTime> copy(played.end() - 40, played.end());
  gst_element_set_state(p, GST_STATE_PAUSED);
  for (int frame : {0, 10}) {
    SCOPED_TRACE("a seek to the second copy's keyframe " + std::to_string(frame));
    ASSERT_TRUE(gst_element_seek_simple(p, GST_FORMAT_BYTES, GST_SEEK_FLAG_FLUSH,
                                        gint64(second + at[size_t(frame)])));
    EXPECT_EQ(gst_element_get_state(p, nullptr, nullptr, 30 * GST_SECOND),
              GST_STATE_CHANGE_SUCCESS);
    GstSample *sample = nullptr;
    g_signal_emit_by_name(sink, "pull-preroll", &sample);
    ASSERT_NE(sample, nullptr);
    EXPECT_EQ(GST_BUFFER_PTS(gst_sample_get_buffer(sample)), copy[size_t(frame)]);
    gst_sample_unref(sample);
  }
  gst_element_set_state(p, GST_STATE_NULL);
  gst_object_unref(src);
  gst_object_unref(sink);
  gst_object_unref(p);
}

// A sender whose input had no timestamps (an appsrc without them) sends
// packets without a pts. Every reader times them by their frame number at
// the stream's framerate, from 0: the decoder alone, the parser on a byte
// stream and on a file (whose duration is the frames'), and the decoder
// after it. The stream header takes no time of its own (before, the parser
// gave it a frame's slot and no PTS to the packets: every frame came a
// frame late and the file's duration was a frame too long); a lost packet
// keeps its gap; a viewer joining at a later keyframe starts at 0.
TEST(CudaDiff, UntimedPacketsAreTimedByTheirFrameNumber) {
  Encoded e;
  EncodeOptions o;
  o.frames = 8;
  o.props = "keyframe-interval=4";
  encode(e, "GRAY8", 16, 8, o);
  ASSERT_NE(stream_header_of(e), nullptr);
  const Bytes header = bytes_of(stream_header_of(e));
  std::vector<Bytes> packets;
  for (GstBuffer *p : e.packets)
    packets.push_back(with_time(bytes_of(p), GST_CLOCK_TIME_NONE, GST_CLOCK_TIME_NONE));
  ASSERT_EQ(packets.size(), 8u);
  auto at = [](size_t t) { return gst_util_uint64_scale(t, GST_SECOND, 30); };
  std::vector<GstClockTime> want;
  for (size_t t = 0; t < 8; ++t) want.push_back(at(t));
  std::vector<Bytes> with_header = {header};
  with_header.insert(with_header.end(), packets.begin(), packets.end());

  // A byte stream, one packet per buffer.
  for (const char *launch : {"cudadiffdec", "cudadiffparse ! cudadiffdec"}) {
    SCOPED_TRACE(launch);
    EXPECT_EQ(output_pts(with_header, launch), want);
  }
  std::vector<GstClockTime> parsed = parser_pts(with_header);
  ASSERT_EQ(parsed.size(), 9u);
  EXPECT_EQ(std::vector<GstClockTime>(parsed.begin() + 1, parsed.end()), want);
  // Packet 2 lost: the parser keeps its gap.
  std::vector<Bytes> lost = with_header;
  lost.erase(lost.begin() + 3);
  parsed = parser_pts(lost);
  ASSERT_EQ(parsed.size(), 8u);
  EXPECT_EQ(std::vector<GstClockTime>(parsed.begin() + 1, parsed.end()),
            (std::vector<GstClockTime>{at(0), at(1), at(3), at(4), at(5), at(6), at(7)}));
  // A late viewer: the header, then from the keyframe of frame 4.
  std::vector<Bytes> late = {header};
  late.insert(late.end(), packets.begin() + 4, packets.end());
  for (const char *launch : {"cudadiffdec", "cudadiffparse ! cudadiffdec"}) {
    SCOPED_TRACE(std::string("late: ") + launch);
    EXPECT_EQ(output_pts(late, launch),
              (std::vector<GstClockTime>{0, at(5) - at(4), at(6) - at(4), at(7) - at(4)}));
  }

  // A file, pulled.
  Bytes file;
  for (const Bytes &b : with_header) file.insert(file.end(), b.begin(), b.end());
  gint64 duration = -1;
  parsed = file_pts(file, "cudadiffparse ! fakesink name=sink", &duration);
  ASSERT_EQ(parsed.size(), 9u);
  EXPECT_EQ(std::vector<GstClockTime>(parsed.begin() + 1, parsed.end()), want);
  EXPECT_EQ(duration, gint64(at(8)));
  EXPECT_EQ(file_pts(file, "cudadiffparse ! cudadiffdec ! fakesink name=sink", &duration), want);
}

// A stream without sender timestamps whose framerate changes from 30/1 to
// 0/1 (two recordings joined, or a sender whose caps changed): the frames at
// 0/1 stay untimed through the parser, in a file and on a byte stream, as
// through the decoder alone. (The parser's base class used to time them, and
// the stream header before them, at the framerate before.)
TEST(CudaDiff, UntimedPacketsAtAVariableFramerateStayUntimedAfterAFixedOne) {
  Encoded fixed, variable;
  EncodeOptions o;
  o.frames = 3;
  encode(fixed, "GRAY8", 16, 8, o);
  o.fps = 0;
  encode(variable, "GRAY8", 8, 8, o);
  std::vector<Bytes> packets;
  for (const Encoded *e : {&fixed, &variable}) {
    ASSERT_NE(stream_header_of(*e), nullptr);
    packets.push_back(bytes_of(stream_header_of(*e)));
    for (GstBuffer *p : e->packets)
      packets.push_back(with_time(bytes_of(p), GST_CLOCK_TIME_NONE, GST_CLOCK_TIME_NONE));
  }
  const std::vector<GstClockTime> want = {0,
                                          gst_util_uint64_scale(1, GST_SECOND, 30),
                                          gst_util_uint64_scale(2, GST_SECOND, 30),
                                          GST_CLOCK_TIME_NONE,
                                          GST_CLOCK_TIME_NONE,
                                          GST_CLOCK_TIME_NONE};
  for (const char *launch : {"cudadiffdec", "cudadiffparse ! cudadiffdec"}) {
    SCOPED_TRACE(launch);
    EXPECT_EQ(output_pts(packets, launch), want);
  }
  Bytes file;
  for (const Bytes &b : packets) file.insert(file.end(), b.begin(), b.end());
  gint64 duration = -1;
  EXPECT_EQ(file_pts(file, "cudadiffparse ! cudadiffdec ! fakesink name=sink", &duration), want);

  // The parser's own buffers after the change (stream header, frames): no
  // pts, dts or duration; and frames convert to no time at 0/1 (the query
  // fails, without a division by 0).
  ParserOnBytes parser;
  for (const Bytes &b : packets) parser.push(b);
  std::vector<GstBuffer *> out;
  while (GstBuffer *b = gst_harness_try_pull(parser.h)) out.push_back(b);
  ASSERT_EQ(out.size(), packets.size());
  for (size_t i = 4; i < out.size(); ++i) {
    EXPECT_FALSE(GST_BUFFER_PTS_IS_VALID(out[i])) << i;
    EXPECT_FALSE(GST_BUFFER_DTS_IS_VALID(out[i])) << i;
    EXPECT_FALSE(GST_BUFFER_DURATION_IS_VALID(out[i])) << i;
  }
  for (GstBuffer *b : out) gst_buffer_unref(b);
  gint64 time = 0;
  GstPad *src = gst_element_get_static_pad(parser.h->element, "src");
  EXPECT_FALSE(gst_pad_query_convert(src, GST_FORMAT_DEFAULT, 3, GST_FORMAT_TIME, &time)) << time;
  gst_object_unref(src);
}

// Untimed packets among timed ones, as they come (the decoder, the parser on
// a byte stream): each follows the packet before it by the frame intervals
// between their frame numbers, at its own framerate. So a sender whose
// timestamps are missing for a while (here frames 4-7 of a sender timed at
// 10 s + n/30) gives one line from 0, not a jump back to frame 4's own time
// and then 10 s ahead; a change of framerate (30 to 60 fps from frame 6,
// frame numbers going on) moves nothing before it; a framerate whose frames
// are over a minute apart is not timed by frame numbers (the decoder's base
// class spaces them by the framerate).
TEST(CudaDiff, UntimedPacketsFollowThePacketBefore) {
  Encoded e;
  EncodeOptions o;
  o.frames = 12;
  o.props = "keyframe-interval=1";
  encode(e, "GRAY8", 16, 8, o);
  ASSERT_EQ(e.packets.size(), 12u);
  auto at = [](uint64_t t, int fps = 30) { return gst_util_uint64_scale(t, GST_SECOND, fps); };
  std::vector<Bytes> mixed;
  for (size_t t = 0; t < 12; ++t) {
    const bool untimed = t >= 4 && t < 8;
    mixed.push_back(with_time(bytes_of(e.packets[t]),
                              untimed ? GST_CLOCK_TIME_NONE : 10 * GST_SECOND + at(t),
                              untimed ? GST_CLOCK_TIME_NONE : at(1)));
  }
  std::vector<GstClockTime> want;
  for (size_t t = 0; t < 12; ++t) want.push_back(at(t));
  for (const char *launch : {"cudadiffdec", "cudadiffparse ! cudadiffdec"}) {
    SCOPED_TRACE(launch);
    const std::vector<GstClockTime> got = output_pts(mixed, launch);
    ASSERT_EQ(got.size(), 12u);
    // (the sender's times were rounded to the nanosecond at 10 s + n/30)
    for (size_t t = 0; t < 12; ++t) EXPECT_NEAR(double(got[t]), double(want[t]), 1.0) << t;
  }
  EXPECT_EQ(parser_pts(mixed).size(), 12u);
  // 30 fps, then 60 fps from frame 6 (the parser reads the framerate of
  // each packet; frame numbers go on).
  std::vector<Bytes> faster;
  for (size_t t = 0; t < 12; ++t)
    faster.push_back(
        with_framerate(with_time(bytes_of(e.packets[t]), GST_CLOCK_TIME_NONE, GST_CLOCK_TIME_NONE),
                       t < 6 ? 30 : 60, 1));
  const std::vector<GstClockTime> pts = parser_pts(faster);
  ASSERT_EQ(pts.size(), 12u);
  for (size_t t = 0; t < 6; ++t) EXPECT_EQ(pts[t], at(t)) << t;
  for (size_t t = 6; t < 12; ++t)
    EXPECT_EQ(pts[t], at(5) + at(t, 60) - at(5, 60)) << t;  // (60 fps: frame 5 at 83.3 ms)
  // One frame every two minutes.
  std::vector<Bytes> slow;
  for (size_t t = 0; t < 4; ++t)
    slow.push_back(with_framerate(
        with_time(bytes_of(e.packets[t]), GST_CLOCK_TIME_NONE, GST_CLOCK_TIME_NONE), 1, 120));
  EXPECT_EQ(output_pts(slow),
            (std::vector<GstClockTime>{0, 120 * GST_SECOND, 240 * GST_SECOND, 360 * GST_SECOND}));
}

// A packet's duration over a minute is damage or a crafted header (as the
// parser and the timeline take it): the decoder's output gets the
// framerate's instead, on a byte stream and on timed buffers alike.
TEST(CudaDiff, DecoderIgnoresImplausibleDurations) {
  Encoded e;
  EncodeOptions o;
  o.frames = 3;
  encode(e, "GRAY8", 16, 8, o);
  const uint64_t interval = gst_util_uint64_scale(1, GST_SECOND, 30);
  for (bool timed : {false, true}) {
    SCOPED_TRACE(timed ? "timed buffers" : "a byte stream");
    std::vector<GstBuffer *> in;
    const uint64_t durations[3] = {interval, 61 * GST_SECOND, G_MAXUINT64 - 1};
    for (size_t t = 0; t < 3; ++t) {
      const Bytes b = with_time(bytes_of(e.packets[t]), t * interval, durations[t]);
      GstBuffer *buf = gst_buffer_new_allocate(nullptr, b.size(), nullptr);
      gst_buffer_fill(buf, 0, b.data(), b.size());
      if (timed) GST_BUFFER_PTS(buf) = t * interval;
      in.push_back(buf);
    }
    Decoded d;
    decode(d, in, true);
    ASSERT_EQ(d.buffers.size(), 3u);
    for (size_t t = 0; t < 3; ++t) {
      EXPECT_EQ(GST_BUFFER_PTS(d.buffers[t]), t * interval) << "frame " << t;
      EXPECT_EQ(GST_BUFFER_DURATION(d.buffers[t]), interval) << "frame " << t;
    }
    for (GstBuffer *b : in) gst_buffer_unref(b);
  }
}

// Two senders' streams of 4 GRAY8 frames (the second as if restarted).
void two_senders(Encoded &a, Encoded &b) {
  EncodeOptions o;
  o.frames = 4;
  encode(a, "GRAY8", 16, 8, o);
  encode(b, "GRAY8", 16, 8, o);
}

// A sender that restarted (its timestamps from 0 again, here 2 frame
// intervals apart): the decoder's output goes on from where the last packet
// ended and keeps the new run's spacing; without durations, from the last
// packet's time.
TEST(CudaDiff, DecoderTimestampsOfARestartedSender) {
  Encoded a, b;
  two_senders(a, b);
  const uint64_t interval = gst_util_uint64_scale(1, GST_SECOND, 30);
  for (bool durations : {true, false}) {
    SCOPED_TRACE(durations ? "with durations" : "without durations");
    const uint64_t dur = durations ? interval : GST_CLOCK_TIME_NONE;
    std::vector<Bytes> packets;
    for (size_t t = 0; t < 4; ++t)
      packets.push_back(with_time(bytes_of(a.packets[t]), t * interval, dur));
    for (size_t t = 0; t < 4; ++t)
      packets.push_back(with_time(bytes_of(b.packets[t]), 2 * t * interval, dur));
    const uint64_t second = 3 * interval + (durations ? interval : 0);
    const std::vector<GstClockTime> want = {0,
                                            interval,
                                            2 * interval,
                                            3 * interval,
                                            second,
                                            second + 2 * interval,
                                            second + 4 * interval,
                                            second + 6 * interval};
    EXPECT_EQ(output_pts(packets), want);
    EXPECT_EQ(output_pts(packets, "cudadiffparse ! cudadiffdec"), want);
  }
}

// A relay splices a second sender into a byte stream from one of its deltas
// on (a late join): the decoder drops those deltas until the keyframe. They
// keep their places on the timeline, so the decoder's output is timed as the
// parser's: before, dropped frames left untimed were timed by the base class
// after the last frame out, and every frame after them that came before
// their end was held at it (here the keyframe and the deltas after it, all
// at one time).
TEST(CudaDiff, DroppedFramesKeepTheirPlaceOnTheTimeline) {
  Encoded a, b;
  EncodeOptions o;
  o.frames = 12;
  o.props = "keyframe-interval=8";
  encode(a, "GRAY8", 16, 8, o);
  o.seed = 7;  // another scene
  encode(b, "GRAY8", 16, 8, o);
  ASSERT_EQ(b.packets.size(), 12u);
  const uint64_t interval = gst_util_uint64_scale(1, GST_SECOND, 30);
  std::vector<Bytes> packets;
  for (size_t t = 0; t < 4; ++t)
    packets.push_back(with_time(bytes_of(a.packets[t]), t * interval, interval));
  // B from delta 1 on, its times and frame numbers from 0 again (too close
  // to A's for a restart of the timeline: B's packets keep their times):
  // deltas 1-7 dropped, keyframe 8 and the deltas after it shown.
  for (size_t t = 1; t < 12; ++t)
    packets.push_back(with_time(bytes_of(b.packets[t]), t * interval, interval));
  std::vector<GstClockTime> want;
  for (size_t t : {0, 1, 2, 3, 8, 9, 10, 11}) want.push_back(t * interval);
  for (const char *launch : {"cudadiffdec", "cudadiffparse ! cudadiffdec"}) {
    SCOPED_TRACE(launch);
    std::vector<GstBuffer *> in;
    for (const Bytes &p : packets) {
      GstBuffer *buf = gst_buffer_new_allocate(nullptr, p.size(), nullptr);  // untimed
      gst_buffer_fill(buf, 0, p.data(), p.size());
      in.push_back(buf);
    }
    Decoded d;
    decode(d, in, true, launch);
    std::vector<GstClockTime> pts;
    for (GstBuffer *out : d.buffers) pts.push_back(GST_BUFFER_PTS(out));
    EXPECT_EQ(pts, want);
    ASSERT_EQ(d.frames.size(), 8u);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(d.frames[i], a.pictures[i]) << "frame " << i;
    for (size_t i = 4; i < 8; ++i) EXPECT_EQ(d.frames[i], b.pictures[i + 4]) << "frame " << i;
    for (GstBuffer *buf : in) gst_buffer_unref(buf);
  }
}

// Upstream that answers as a file does: seekable in bytes, of a known size.
gboolean file_like_query(GstPad *pad, GstObject *parent, GstQuery *query) {
  if (GST_QUERY_TYPE(query) == GST_QUERY_SEEKING) {
    GstFormat format;
    gst_query_parse_seeking(query, &format, nullptr, nullptr, nullptr);
    if (format == GST_FORMAT_BYTES) {
      gst_query_set_seeking(query, GST_FORMAT_BYTES, TRUE, 0, 1 << 20);
      return TRUE;
    }
  }
  return gst_pad_query_default(pad, parent, query);
}

// A live viewer (a byte stream, the pipeline playing): a sender that
// restarts after a pause of 3 s goes on from the present, not from where its
// last packet ended, which was 3 s in the past: a synchronising sink dropped
// every later frame as late. A restart whose present is before that end
// still goes on from the end (DecoderTimestampsOfARestartedSender), and so
// does one in a file (two recordings joined), whose timeline seeks and the
// parser's index follow: the first version of this rule moved the second
// recording's times in a file played in push mode, and seeks into it then
// showed other frames than their times said.
TEST(CudaDiff, RestartedSenderGoesOnFromThePresent) {
  Encoded a, b;
  two_senders(a, b);
  const uint64_t interval = gst_util_uint64_scale(1, GST_SECOND, 30);
  for (bool file : {false, true})
    for (const char *launch : {"cudadiffdec", "cudadiffparse ! cudadiffdec"}) {
      SCOPED_TRACE(std::string(launch) + (file ? ", a file" : ", a live stream"));
      GstHarness *h = gst_harness_new_parse(launch);
      if (file) gst_pad_set_query_function(h->srcpad, file_like_query);
      gst_harness_set_src_caps_str(h, "video/x-cudadiff");
      auto push = [&](const Encoded &e, size_t t, uint64_t pts) {
        const Bytes packet = with_time(bytes_of(e.packets[t]), pts, interval);
        GstBuffer *buf = gst_buffer_new_allocate(nullptr, packet.size(), nullptr);  // untimed
        gst_buffer_fill(buf, 0, packet.data(), packet.size());
        EXPECT_EQ(gst_harness_push(h, buf), GST_FLOW_OK);
      };
      ASSERT_TRUE(gst_harness_set_time(h, 0));
      for (size_t t = 0; t < 4; ++t) push(a, t, 10 * GST_SECOND + t * interval);
      ASSERT_TRUE(gst_harness_set_time(h, 3 * GST_SECOND));
      for (size_t t = 0; t < 4; ++t) push(b, t, t * interval);  // its frame numbers from 0
      gst_harness_push_event(h, gst_event_new_eos());
      std::vector<GstClockTime> pts;
      while (GstBuffer *out = gst_harness_try_pull(h)) {
        pts.push_back(GST_BUFFER_PTS(out));
        gst_buffer_unref(out);
      }
      const GstClockTime second = file ? 4 * interval : 3 * GST_SECOND;  // where B starts
      const std::vector<GstClockTime> want = {
          0,      interval,          2 * interval,          3 * interval,
          second, second + interval, second + 2 * interval, second + 3 * interval};
      EXPECT_EQ(pts, want);
      gst_harness_teardown(h);
    }
}

// An application that loops a clip pushes each pass in a segment of its
// own whose times start again (appsrc handle-segment-change=true). The
// encoder's packets keep their times with DTS = PTS (the base class gave a
// packet held across the segment the lowest PTS it held, a later frame's,
// as DTS, and GstBaseParse then moved the next packet's PTS up to its DTS),
// and the decoder's and parser's outputs keep them (they held every time of
// the second pass at the first pass's last, since times never went back).
TEST(CudaDiff, SegmentWhoseTimesStartAgain) {
  const uint64_t interval = 40 * GST_MSECOND;
  for (int version : {1, 2})
    for (const char *tail : {"", " ! cudadiffdec", " ! cudadiffparse ! cudadiffdec"}) {
      SCOPED_TRACE(std::string("version ") + std::to_string(version) + tail);
      GstHarness *h =
          gst_harness_new_parse(("cudadiffenc threshold=0 frame-overlap=always stream-version=" +
                                 std::to_string(version) + tail)
                                    .c_str());
      gst_harness_set_src_caps_str(h, gst_test::raw_caps("GRAY8", 16, 8).c_str());
      const GstVideoInfo info = video_info("GRAY8", 16, 8);
      for (int pass = 0; pass < 2; ++pass) {
        if (pass == 1) {
          GstSegment segment;
          gst_segment_init(&segment, GST_FORMAT_TIME);
          segment.base = 5 * interval;
          ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_segment(&segment)));
        }
        for (int t = 0; t < 5; ++t) {
          GstBuffer *b = buffer_from(info, scene("GRAY8", 16, 8, pass * 5 + t, 4), t);
          GST_BUFFER_PTS(b) = t * interval;
          GST_BUFFER_DURATION(b) = interval;
          ASSERT_EQ(gst_harness_push(h, b), GST_FLOW_OK);
        }
      }
      ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
      std::vector<GstClockTime> pts, dts;
      while (GstBuffer *b = gst_harness_try_pull(h)) {
        if (!GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_HEADER)) {
          pts.push_back(GST_BUFFER_PTS(b));
          dts.push_back(GST_BUFFER_DTS(b));
        }
        gst_buffer_unref(b);
      }
      std::vector<GstClockTime> want;
      for (int pass = 0; pass < 2; ++pass)
        for (int t = 0; t < 5; ++t) want.push_back(t * interval);
      EXPECT_EQ(pts, want);
      if (!*tail) {
        EXPECT_EQ(dts, want) << "the encoder's DTS";
      }
      gst_harness_teardown(h);
    }
}

// A timed byte stream (srtsrc and udpsrc time each buffer they receive)
// whose buffers each hold several packets: a packet that starts a buffer
// gets its time, the packets after it follow at the sender's pace (they
// used to get the sender's time from 0, so that two timelines mixed and
// the base class bunched frames onto one timestamp). The first buffer
// starts with the stream header, which has no time of its own: the packet
// after it gets the buffer's. Through the parser the same.
TEST(CudaDiff, TimedByteStreamWithSeveralPacketsPerBuffer) {
  Encoded e;
  EncodeOptions o;
  o.frames = 8;
  encode(e, "GRAY8", 16, 8, o);
  ASSERT_NE(stream_header_of(e), nullptr);
  std::vector<Bytes> packets = {bytes_of(stream_header_of(e))};
  for (GstBuffer *p : e.packets) packets.push_back(bytes_of(p));
  ASSERT_EQ(packets.size(), 9u);
  const uint64_t interval = gst_util_uint64_scale(1, GST_SECOND, 30);
  // The header and packets 0-2, packets 3-5, and 6-7 arrive together, 100
  // ms apart.
  const std::vector<GstClockTime> arrival = {5 * GST_SECOND, 5100 * GST_MSECOND,
                                             5200 * GST_MSECOND};
  std::vector<GstClockTime> want;
  for (size_t t = 0; t < 8; ++t) want.push_back(arrival[t / 3] + (t % 3) * interval);
  for (const char *launch : {"cudadiffdec", "cudadiffparse ! cudadiffdec"}) {
    SCOPED_TRACE(launch);
    EXPECT_EQ(output_pts(packets, {4, 3, 2}, arrival, launch), want);
  }
  // A burst: packets 0-5 arrive together, then 6 and 7 alone 10 ms apart,
  // before the time the burst's packets reached at the sender's pace: they
  // go on at that pace (instead of going back to their arrival), and 8,
  // arriving after it, takes its arrival time again.
  const std::vector<GstClockTime> burst = {5 * GST_SECOND, 5010 * GST_MSECOND, 5020 * GST_MSECOND,
                                           6 * GST_SECOND};
  std::vector<GstClockTime> paced;
  for (size_t t = 0; t < 8; ++t)
    paced.push_back(5 * GST_SECOND + gst_util_uint64_scale(t, GST_SECOND, 30));
  paced.push_back(6 * GST_SECOND);
  Encoded more;
  o.frames = 9;
  encode(more, "GRAY8", 16, 8, o);
  std::vector<Bytes> nine = {packets[0]};
  for (GstBuffer *p : more.packets) nine.push_back(bytes_of(p));
  for (const char *launch : {"cudadiffdec", "cudadiffparse ! cudadiffdec"}) {
    SCOPED_TRACE(std::string(launch) + ", a burst");
    EXPECT_EQ(output_pts(nine, {7, 1, 1, 1}, burst, launch), paced);
    // The same segment sent again in the burst is not a new one: the times
    // still do not go back (a new segment may start them again).
    EXPECT_EQ(output_pts(nine, {7, 1, 1, 1}, burst, launch, 1), paced) << "segment again";
  }
}

namespace {

// What cudadiffdec shows for `packets`: its frames, and the size of each
// caps event it sends.
struct ShownWithCaps {
  std::vector<Bytes> frames;
  std::vector<std::string> caps;
};
ShownWithCaps decode_with_caps(const std::vector<GstBuffer *> &packets) {
  ShownWithCaps r;
  GstHarness *dec = gst_harness_new_parse("cudadiffdec");
  gst_harness_set_src_caps_str(dec, "video/x-cudadiff");
  for (GstBuffer *packet : packets) {
    EXPECT_EQ(gst_harness_push(dec, gst_buffer_ref(packet)), GST_FLOW_OK);
    while (GstBuffer *out = gst_harness_try_pull(dec)) {
      GstCaps *caps = gst_pad_get_current_caps(dec->sinkpad);
      r.frames.push_back(canonical_of(out, caps));
      gst_caps_unref(caps);
      gst_buffer_unref(out);
    }
  }
  while (GstEvent *ev = gst_harness_try_pull_event(dec)) {
    if (GST_EVENT_TYPE(ev) == GST_EVENT_CAPS) {
      GstCaps *caps = nullptr;
      gst_event_parse_caps(ev, &caps);
      const GstStructure *st = gst_caps_get_structure(caps, 0);
      int w = 0, h = 0;
      gst_structure_get_int(st, "width", &w);
      gst_structure_get_int(st, "height", &h);
      r.caps.push_back(std::to_string(w) + "x" + std::to_string(h));
    }
    gst_event_unref(ev);
  }
  gst_harness_teardown(dec);
  return r;
}

// What a 64x48 stream of 12 frames (keyframes 0, 4, 8) shows when its
// keyframe 4 is dropped: its frames but 4 to 7, and its caps alone.
void expect_keyframe_dropped(const ShownWithCaps &shown, const Encoded &e) {
  ASSERT_EQ(shown.caps.size(), 1u) << shown.caps.back();
  EXPECT_EQ(shown.caps[0], "64x48");
  const std::vector<size_t> want = {0, 1, 2, 3, 8, 9, 10, 11};
  ASSERT_EQ(shown.frames.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(shown.frames[i], e.pictures[want[i]]) << "frame " << want[i];
}

}  // namespace

// A version 2 keyframe whose body the decoder refuses, under a header of
// another size (checksums right): nothing changes, the output caps
// included (the core gets the body before the decoder is replaced), and
// decoding resumes at the next keyframe.
TEST(CudaDiff, RefusedKeyframeLeavesTheOutputCaps) {
  Encoded e;
  EncodeOptions o;
  o.frames = 12;
  o.version = 2;
  o.props = "keyframe-interval=4";
  encode(e, "I420", 64, 48, o);
  // One tile's body where 640x480 has 16 tiles: refused by the body's reader.
  GstBuffer *bad = announcing(e.packets[4], 640, 480);
  std::vector<GstBuffer *> in(e.packets.begin(), e.packets.end());
  in[4] = bad;
  const ShownWithCaps shown = decode_with_caps(in);
  gst_buffer_unref(bad);
  expect_keyframe_dropped(shown, e);
}

// A keyframe of another size whose body passes the reader's checks but
// has a damaged tile (a changed byte, checksums right): the CUDA backend
// finds that only when it decodes the tile. A keyframe that changes the
// size is decoded before the caps change, so the caps stay (before, they
// changed to the damaged keyframe's size and back at the next keyframe).
// The CPU backend refuses such a body when it is submitted.
TEST(CudaDiff, KeyframeWithADamagedTileLeavesTheOutputCaps) {
  Encoded e, other;
  EncodeOptions o;
  o.frames = 12;
  o.version = 2;
  o.threshold = 0;
  o.props = "keyframe-interval=4 compression=none";
  encode(e, "I420", 64, 48, o);
  o.frames = 1;
  encode(other, "I420", 96, 64, o);
  const Bytes body = payload_of(other.packets[0]);
  const size_t last = body.size() - 1;  // in the last coded tile's rANS bytes
  GstBuffer *bad = damaged(other.packets[0], last, uint8_t(body[last] ^ 0x5a), true);
  std::vector<GstBuffer *> in(e.packets.begin(), e.packets.begin() + 4);
  in.push_back(bad);
  in.insert(in.end(), e.packets.begin() + 8, e.packets.end());
  const ShownWithCaps shown = decode_with_caps(in);
  gst_buffer_unref(bad);
  expect_keyframe_dropped(shown, e);
  // The same keyframe undamaged does change them, and shows.
  std::vector<GstBuffer *> good(e.packets.begin(), e.packets.begin() + 4);
  good.push_back(other.packets[0]);
  const ShownWithCaps changed = decode_with_caps(good);
  EXPECT_EQ(changed.caps, (std::vector<std::string>{"64x48", "96x64"}));
  ASSERT_EQ(changed.frames.size(), 5u);
  EXPECT_EQ(changed.frames[4], other.pictures[0]);
}

// Through the parser (what decodebin and playbin plug), a damaged packet is
// dropped there and the decoder sees the gap in the frame numbers. But a
// damaged keyframe where decoding starts (the first, or the first after a
// seek or a late join) leaves the decoder only deltas, as a late join
// does: the parser reports it (before, nothing did). One warning either way,
// also for several damaged keyframes before one passes (once until a
// keyframe passes: before, each posted one, which crafted packets could
// turn into a flood).
TEST(CudaDiff, ParserReportsADamagedKeyframeWhereDecodingStarts) {
  Encoded e;
  EncodeOptions o;
  o.frames = 12;
  o.props = "keyframe-interval=4";
  encode(e, "BGR", 45, 11, o);
  for (const std::vector<size_t> &keys :
       {std::vector<size_t>{0}, std::vector<size_t>{4}, std::vector<size_t>{0, 4}}) {
    SCOPED_TRACE("keyframe " + std::to_string(keys[0]) + (keys.size() > 1 ? " and 4" : "") +
                 " damaged");
    std::vector<GstBuffer *> in(e.packets.begin(), e.packets.end());
    for (size_t key : keys) in[key] = damaged(e.packets[key], 5, 0xff, false);
    Decoded d;
    decode(d, in, true, "cudadiffparse ! cudadiffdec");
    for (size_t key : keys) gst_buffer_unref(in[key]);
    std::vector<size_t> want;
    for (size_t t = 0; t < 12; ++t)
      if (t < keys[0] || t >= keys.back() + 4) want.push_back(t);
    ASSERT_EQ(d.frames.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(d.frames[i], e.pictures[want[i]]);
    ASSERT_EQ(d.warnings.size(), 1u);
    const bool where_decoding_starts =
        d.warnings[0].find("damaged keyframe where decoding starts") != std::string::npos;
    EXPECT_EQ(where_decoding_starts, keys[0] == 0) << d.warnings[0];
  }
}

// A recording whose first keyframe is damaged, read from a file by the
// decoder alone: the pictures start at the next keyframe at its time in the
// recording, as through the parser (the damaged packet's intact header, and
// the deltas dropped after it, keep their places). Before, the decoder
// started the times at 0 with that keyframe, every frame a keyframe
// interval early.
TEST(CudaDiff, DamagedFirstKeyframeInAFileKeepsTheRecordingsTimes) {
  Encoded e;
  EncodeOptions o;
  o.frames = 12;
  o.props = "keyframe-interval=4";
  encode(e, "BGR", 45, 11, o);
  ASSERT_NE(stream_header_of(e), nullptr);
  ASSERT_EQ(e.packets.size(), 12u);
  Bytes clean = bytes_of(stream_header_of(e)), broken = clean;
  for (size_t t = 0; t < e.packets.size(); ++t) {
    const Bytes b = bytes_of(e.packets[t]);
    clean.insert(clean.end(), b.begin(), b.end());
    GstBuffer *d = t == 0 ? damaged(e.packets[t], 5, 0xff, false) : gst_buffer_ref(e.packets[t]);
    const Bytes db = bytes_of(d);
    gst_buffer_unref(d);
    broken.insert(broken.end(), db.begin(), db.end());
  }
  const std::vector<GstClockTime> all =
      file_pts(clean, "cudadiffdec ! fakesink name=sink", nullptr);
  ASSERT_EQ(all.size(), 12u);
  const std::vector<GstClockTime> want(all.begin() + 4, all.end());
  EXPECT_NE(want[0], 0u);
  for (const char *launch :
       {"cudadiffdec ! fakesink name=sink", "cudadiffparse ! cudadiffdec ! fakesink name=sink"}) {
    SCOPED_TRACE(launch);
    EXPECT_EQ(file_pts(broken, launch, nullptr), want);
  }
}

// A gap in a byte stream (a buffer flagged DISCONT, as srtsrc sends after
// lost packets) cuts the packet on its way: it is dropped and the decoder
// reports the loss, but the parser does not call it a truncated stream
// (it did: GstBaseParse drains at a DISCONT as at the end). A stream whose
// end cuts its last packet is still reported so.
TEST(CudaDiff, ParserGapInAByteStreamIsNotItsEnd) {
  Encoded e;
  EncodeOptions o;
  o.frames = 8;
  o.props = "keyframe-interval=4";
  encode(e, "GRAY8", 64, 48, o);
  Bytes all;
  std::vector<size_t> at;
  for (GstBuffer *p : e.packets) {
    at.push_back(all.size());
    const Bytes b = bytes_of(p);
    all.insert(all.end(), b.begin(), b.end());
  }
  at.push_back(all.size());
  const auto buffer = [&](size_t from, size_t to, bool discont) {
    GstBuffer *b = gst_buffer_new_allocate(nullptr, to - from, nullptr);
    gst_buffer_fill(b, 0, all.data() + from, to - from);
    if (discont) GST_BUFFER_FLAG_SET(b, GST_BUFFER_FLAG_DISCONT);
    return b;
  };
  const auto truncation = [](const Decoded &d) {
    int n = 0;
    for (const std::string &w : d.warnings) n += w.find("truncated stream") != std::string::npos;
    return n;
  };
  {
    // Packets 0-2 and half of 3; the rest of 3 lost; 4-7 after the gap.
    std::vector<GstBuffer *> in = {buffer(0, at[3] + (at[4] - at[3]) / 2, false),
                                   buffer(at[4], at[8], true)};
    Decoded d;
    decode(d, in, true, "cudadiffparse ! cudadiffdec");
    for (GstBuffer *b : in) gst_buffer_unref(b);
    ASSERT_EQ(d.frames.size(), 7u);
    EXPECT_EQ(d.frames[3], e.pictures[4]);
    EXPECT_EQ(truncation(d), 0);
  }
  {
    // Packets 0-6 and half of 7, then the end.
    std::vector<GstBuffer *> in = {buffer(0, at[7] + (at[8] - at[7]) / 2, false)};
    Decoded d;
    decode(d, in, true, "cudadiffparse ! cudadiffdec");
    gst_buffer_unref(in[0]);
    EXPECT_EQ(d.frames.size(), 7u);
    EXPECT_EQ(truncation(d), 1);
  }
}

namespace {
// 16 frames of 45x11 BGR, a keyframe every 4, uncompressed: the stream the
// damage tests break.
void encode_for_damage(Encoded &e, int version) {
  EncodeOptions o;
  o.frames = 16;
  o.version = version;
  o.props = "keyframe-interval=4 compression=none";
  encode(e, "BGR", 45, 11, o);
}
}  // namespace

// A stream whose every frame is dropped ends with GstVideoDecoder's error
// for a stream that decoded nothing (GStreamer 1.22 counts a dropped frame
// as decoded and posts none): deltas only (a sender that stopped before its
// first keyframe), every keyframe damaged. One keyframe that decodes, or
// no packet dropped, ends without it.
TEST(CudaDiff, StreamOfDroppedFramesEndsWithAnError) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    Encoded e;
    encode_for_damage(e, version);  // keyframes 0, 4, 8, 12
    const std::vector<GstBuffer *> all(e.packets.begin(), e.packets.end());
    const std::vector<GstBuffer *> deltas(e.packets.begin() + 1, e.packets.begin() + 4);
    std::vector<GstBuffer *> keys_damaged = all, first_damaged = all;
    for (size_t k = 0; k < all.size(); k += 4)
      keys_damaged[k] = damaged(e.packets[k], 5, 0xff, false);
    first_damaged[0] = keys_damaged[0];
    struct Case {
      const char *what;
      const std::vector<GstBuffer *> &in;
      size_t frames;
      bool error;
    };
    for (const Case &c : {Case{"deltas only", deltas, 0, true},
                          Case{"every keyframe damaged", keys_damaged, 0, true},
                          Case{"the first keyframe damaged", first_damaged, 12, false},
                          Case{"undamaged", all, 16, false}}) {
      for (const char *launch : {"cudadiffdec", "cudadiffparse ! cudadiffdec"}) {
        SCOPED_TRACE(std::string(c.what) + ", " + launch);
        Decoded d;
        decode(d, c.in, true, launch);
        EXPECT_EQ(d.frames.size(), c.frames);
        ASSERT_EQ(d.errors.size(), c.error ? 1u : 0u);
        if (c.error) {
          EXPECT_EQ(d.errors[0].rfind("No valid frames decoded before end of stream", 0), 0u)
              << d.errors[0];
        }
      }
    }
    for (size_t k = 0; k < all.size(); k += 4) gst_buffer_unref(keys_damaged[k]);
  }
}

TEST(CudaDiff, DecoderDropsDamagedPacketsAndRecovers) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    Encoded e;
    encode_for_damage(e, version);
    // qos: the frames dropped by the decoder (packets whose bytes were
    // skipped as damaged never become frames).
    auto check = [&](const std::vector<GstBuffer *> &in, const std::vector<size_t> &want,
                     const char *what, const char *warning, size_t qos) {
      Decoded d;
      decode(d, in);
      ASSERT_EQ(d.frames.size(), want.size()) << what;
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(d.frames[i], e.pictures[want[i]]) << what << ": frame " << want[i];
        EXPECT_EQ(GST_BUFFER_PTS(d.buffers[i]), gst_util_uint64_scale(want[i], GST_SECOND, 30));
        // The first frame, and the first after frames that are missing, are
        // flagged DISCONT; no other.
        const bool gap = i == 0 || want[i] != want[i - 1] + 1;
        EXPECT_EQ(GST_BUFFER_FLAG_IS_SET(d.buffers[i], GST_BUFFER_FLAG_DISCONT), gap)
            << what << ": frame " << want[i];
      }
      // Each frame dropped is counted by a QoS message.
      EXPECT_EQ(d.qos, qos) << what;
      ASSERT_EQ(d.warnings.size(), 1u) << what;
      EXPECT_NE(d.warnings[0].find(warning), std::string::npos) << d.warnings[0];
    };
    std::vector<GstBuffer *> in(e.packets.begin(), e.packets.end());
    // A bit error in delta 2 (checksum): 2, 3 lost, keyframe 4 recovers.
    in[2] = damaged(e.packets[2], 5, 0xff, false);
    check(in, {0, 1, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, "bad checksum", "checksum", 1);
    {
      // The damaged packet counts as dropped, as does delta 3 (its bytes,
      // skipped, are not counted again as a packet).
      Decoded d;
      decode(d, in);
      EXPECT_EQ(d.dropped, 2u);
      EXPECT_EQ(d.packets, 15u);
      EXPECT_EQ(d.losses, 1u);
      EXPECT_EQ(d.skipped, gst_buffer_get_size(e.packets[2]));
    }
    gst_buffer_unref(in[2]);
    {
      // Garbage between packets (in sequence) and a packet whose header is
      // damaged, then the next packet missing: the garbage alone loses
      // nothing and posts no warning; the lost packet is one loss, whose
      // warning names the skipped bytes.
      in.assign(e.packets.begin(), e.packets.end());
      const Bytes junk(300, 0x5a);
      GstBuffer *garbage = gst_buffer_new_allocate(nullptr, junk.size(), nullptr);  // untimed
      gst_buffer_fill(garbage, 0, junk.data(), junk.size());
      in.insert(in.begin() + 6, garbage);
      Decoded d;
      decode(d, in);
      ASSERT_EQ(d.frames.size(), 16u);
      for (size_t i = 0; i < 16; ++i) EXPECT_EQ(d.frames[i], e.pictures[i]) << "frame " << i;
      EXPECT_TRUE(d.warnings.empty()) << d.warnings[0];
      EXPECT_EQ(d.skipped, 300u);
      EXPECT_EQ(d.losses, 0u);
      EXPECT_EQ(d.dropped, 0u);
      Bytes head = bytes_of(e.packets[9]);
      head[20] ^= 0x01;  // the header's checksum no longer matches
      GstBuffer *bad_header = buffer_like(e.packets[9], head);
      in.erase(in.begin() + 10);  // packet 9 (after the garbage)
      in.insert(in.begin() + 10, bad_header);
      check(in, {0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 14, 15}, "damaged header",
            "bytes that were not a packet", 2);
      gst_buffer_unref(bad_header);
      gst_buffer_unref(garbage);
    }
    // A packet lost: 6 missing, 7 is out of sequence.
    in.assign(e.packets.begin(), e.packets.end());
    in.erase(in.begin() + 6);
    check(in, {0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13, 14, 15}, "packet lost", "out of sequence",
          1);
    // The delta just before a keyframe lost: no picture is wrong, but a
    // frame is missing all the same (before, nothing said so).
    in.assign(e.packets.begin(), e.packets.end());
    in.erase(in.begin() + 7);
    check(in, {0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15}, "delta before a keyframe lost",
          "packets missing before a keyframe", 0);
    // Packets reordered: 9 before 10 swapped.
    in.assign(e.packets.begin(), e.packets.end());
    std::swap(in[9], in[10]);
    check(in, {0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 14, 15}, "reordered", "out of sequence", 3);
    const std::vector<size_t> lose_13_to_15 = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    in.assign(e.packets.begin(), e.packets.end());
    if (version == 1) {
      // A delta whose checksum is right but whose masks name bytes past the
      // frame (the superblock bitmap of a 1485-byte frame has 2 valid bits).
      in[13] = damaged(e.packets[13], 0, 0xff, true);
      check(in, lose_13_to_15, "impossible delta", "impossible delta", 3);
      gst_buffer_unref(in[13]);
    } else {
      // Checksums right, the body wrong: its header says keyframe in a delta
      // packet (the reader), its tile table does not add up (the core).
      in[13] = damaged(e.packets[13], 0, 0x01, true);
      check(in, lose_13_to_15, "keyframe body in a delta", "keyframe in a delta packet", 3);
      gst_buffer_unref(in[13]);
      const Bytes body = payload_of(e.packets[13]);
      const size_t last = body.size() - 1;
      in[13] = damaged(e.packets[13], last, uint8_t(body[last] ^ 0x5a), true);
      Decoded d;
      decode(d, in);
      gst_buffer_unref(in[13]);
      // A changed byte of a coded tile is caught by the core (its lanes must
      // end where they began); the picture then stays the last good one.
      ASSERT_EQ(d.frames.size(), lose_13_to_15.size());
      EXPECT_EQ(d.qos, 3u);
      ASSERT_EQ(d.warnings.size(), 1u);
      EXPECT_NE(d.warnings[0].find("impossible delta"), std::string::npos) << d.warnings[0];
      EXPECT_NE(d.warnings[0].find("codec2 body"), std::string::npos) << d.warnings[0];
    }
  }
}

// Another sender's packets spliced in after its stream header (a relay
// that switches to a backup sender whose frame numbers run in step): its
// deltas have no reference here, so they wait for its keyframe. Before,
// version 1 decoded them onto the first sender's picture and showed wrong
// pictures without a warning (version 2 happened to refuse them, its
// tables being the other sender's).
TEST(CudaDiff, DecoderWaitsForAKeyframeAfterAStreamHeader) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    Encoded a, b;
    EncodeOptions o;
    o.frames = 12;
    o.version = version;
    o.props = "keyframe-interval=4 compression=none";
    encode(a, "BGR", 32, 16, o);
    o.seed = 7;  // another scene
    encode(b, "BGR", 32, 16, o);
    ASSERT_NE(stream_header_of(b), nullptr);
    // A's packets 0-5, then B's stream header and B's packets 6-11 (6 and
    // 7 deltas, 8 a keyframe).
    std::vector<GstBuffer *> in(a.packets.begin(), a.packets.begin() + 6);
    in.push_back(stream_header_of(b));
    in.insert(in.end(), b.packets.begin() + 6, b.packets.end());
    Decoded d;
    decode(d, in);
    ASSERT_EQ(d.frames.size(), 10u);
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(d.frames[i], a.pictures[i]) << "A's frame " << i;
    for (size_t i = 6; i < 10; ++i)
      EXPECT_EQ(d.frames[i], b.pictures[i + 2]) << "B's frame " << i + 2;
    EXPECT_TRUE(d.warnings.empty()) << d.warnings[0];
    EXPECT_EQ(d.dropped, 2u);
  }
}

// The packet just decoded, again (a relay that repeats the last packet it
// sent when a viewer reconnects, a duplicating network): dropped as a
// repeat, without a loss or a second picture. Before, a repeated delta
// broke the sequence ("packets missing or out of sequence") and the rest
// of the keyframe interval was lost; a repeated keyframe showed its
// picture twice.
TEST(CudaDiff, DecoderDropsARepeatedPacket) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    Encoded e;
    EncodeOptions o;
    o.frames = 6;
    o.version = version;
    encode(e, "BGR", 32, 16, o);
    const std::vector<GstBuffer *> in = {e.packets[0], e.packets[0], e.packets[1], e.packets[2],
                                         e.packets[3], e.packets[3], e.packets[4], e.packets[5]};
    Decoded d;
    decode(d, in);
    ASSERT_EQ(d.frames.size(), 6u);
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(d.frames[i], e.pictures[i]) << i;
    EXPECT_TRUE(d.warnings.empty()) << d.warnings[0];
    EXPECT_EQ(d.losses, 0u);
    EXPECT_EQ(d.qos, 0u);
    EXPECT_EQ(d.dropped, 2u);
    for (size_t i = 1; i < 6; ++i)
      EXPECT_FALSE(GST_BUFFER_FLAG_IS_SET(d.buffers[i], GST_BUFFER_FLAG_DISCONT)) << i;
    // Not the same packet: another frame's packet with the last one's
    // number (here a later delta renumbered) is still out of sequence.
    Bytes other = bytes_of(e.packets[4]);
    const uint64_t three = 3;
    std::memcpy(other.data() + 8, &three, 8);  // the frame number
    fix_checksums(other);
    GstBuffer *renumbered = buffer_like(e.packets[4], other);
    Decoded d2;
    decode(d2, {e.packets[0], e.packets[1], e.packets[2], e.packets[3], renumbered});
    EXPECT_EQ(d2.frames.size(), 4u);
    EXPECT_EQ(d2.losses, 1u);
    gst_buffer_unref(renumbered);
    // A one-packet clip looped by an application, each pass in a segment
    // of its own (appsrc handle-segment-change=true): shown at every pass.
    GstHarness *h = gst_harness_new_parse("cudadiffdec");
    gst_harness_set_src_caps_str(h, "video/x-cudadiff");
    for (int pass = 0; pass < 3; ++pass) {
      GstSegment segment;
      gst_segment_init(&segment, GST_FORMAT_TIME);
      segment.base = GstClockTime(pass) * GST_SECOND;
      if (pass > 0) {
        ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_segment(&segment)));
      }
      ASSERT_EQ(gst_harness_push(h, gst_buffer_ref(e.packets[0])), GST_FLOW_OK);
    }
    EXPECT_EQ(pull_pictures(h).size(), 3u);
    gst_harness_teardown(h);
  }
}

// A delta decoded a few frames before, delivered again later (a relay or
// network that resends old packets, or duplicates and reorders them):
// dropped as a repeat, without a loss or a picture, and the deltas after
// the last one decoded go on. Before, only the packet just decoded was
// known as a repeat: a late delta was out of sequence and the rest of the
// keyframe interval was lost. A keyframe of an earlier frame is decoded
// (the stream may loop or a sender restart), and a delta more than 16
// frames back is no repeat but out of sequence.
TEST(CudaDiff, DecoderDropsALateRepeat) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    Encoded e;
    EncodeOptions o;
    o.frames = 24;
    o.version = version;
    o.props = "keyframe-interval=4";  // keyframes 0, 4, 8, ..., 20
    encode(e, "BGR", 32, 16, o);
    ASSERT_EQ(e.packets.size(), 24u);
    auto packets = [&](std::initializer_list<int> numbers) {
      std::vector<GstBuffer *> in;
      for (int n : numbers) in.push_back(e.packets[size_t(n)]);
      return in;
    };
    // The frame number of each picture shown (-1: none of the stream's).
    auto shown = [&](const Decoded &d) {
      std::vector<int> numbers;
      for (const Bytes &f : d.frames) {
        const auto it = std::find(e.pictures.begin(), e.pictures.end(), f);
        numbers.push_back(it == e.pictures.end() ? -1 : int(it - e.pictures.begin()));
      }
      return numbers;
    };
    for (const char *launch : {"cudadiffdec", "cudadiffparse ! cudadiffdec"}) {
      // Delta 5 again after 6; 9, 10 and 9 again after 10: each dropped,
      // 7 and 11 follow.
      SCOPED_TRACE(launch);
      Decoded d;
      decode(d, packets({0, 1, 2, 3, 4, 5, 6, 5, 7, 8, 9, 10, 9, 10, 9, 11}), false, launch);
      EXPECT_EQ(shown(d), std::vector<int>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
      EXPECT_TRUE(d.warnings.empty()) << d.warnings[0];
      EXPECT_EQ(d.losses, 0u);
      EXPECT_EQ(d.qos, 0u);
      EXPECT_EQ(d.dropped, 4u);
      for (size_t i = 1; i < d.buffers.size(); ++i) {
        EXPECT_FALSE(GST_BUFFER_FLAG_IS_SET(d.buffers[i], GST_BUFFER_FLAG_DISCONT)) << i;
        EXPECT_GT(GST_BUFFER_PTS(d.buffers[i]), GST_BUFFER_PTS(d.buffers[i - 1])) << i;
      }
    }
    {
      // Delta 5 16 frames back (the most a repeat is): dropped; 17 back
      // (after 22): out of sequence, a loss.
      Decoded d;
      decode(d, packets({0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12,
                         13, 14, 15, 16, 17, 18, 19, 20, 21, 5, 22, 5,  23}));
      EXPECT_EQ(shown(d), std::vector<int>({0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                            12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22}));
      EXPECT_EQ(d.losses, 1u);
      EXPECT_EQ(d.dropped, 3u);
    }
    {
      // A keyframe of an earlier frame is decoded: keyframe 4 again after
      // 6 (the picture goes back; a resent old keyframe cannot be told
      // from a loop before the packets after it), then 7 is out of
      // sequence. After a loss (6 missing) the earlier keyframe resumes
      // decoding (a relay resending the keyframe interval).
      Decoded d;
      decode(d, packets({0, 1, 2, 3, 4, 5, 6, 4, 7}));
      EXPECT_EQ(shown(d), std::vector<int>({0, 1, 2, 3, 4, 5, 6, 4}));
      EXPECT_EQ(d.losses, 1u);
      Decoded d2;
      decode(d2, packets({0, 1, 2, 3, 4, 5, 7, 4, 5, 6, 7, 8}));
      EXPECT_EQ(shown(d2), std::vector<int>({0, 1, 2, 3, 4, 5, 4, 5, 6, 7, 8}));
      EXPECT_EQ(d2.losses, 1u);
      ASSERT_EQ(d2.warnings.size(), 1u);
      EXPECT_NE(d2.warnings[0].find("out of sequence"), std::string::npos) << d2.warnings[0];
      EXPECT_EQ(d2.dropped, 1u);
    }
    {
      // A clip of keyframe 4 to delta 7 (cut from a longer stream) joined
      // to itself three times, without segments: every pass shown; and
      // frame 0 again after 1 to 5, a restarted sender.
      Decoded d;
      decode(d, packets({4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7}));
      EXPECT_EQ(shown(d), std::vector<int>({4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7}));
      EXPECT_TRUE(d.warnings.empty()) << d.warnings[0];
      EXPECT_EQ(d.dropped, 0u);
      Decoded d2;
      decode(d2, packets({0, 1, 2, 3, 4, 5, 0, 1, 2}));
      EXPECT_EQ(shown(d2), std::vector<int>({0, 1, 2, 3, 4, 5, 0, 1, 2}));
      EXPECT_TRUE(d2.warnings.empty()) << d2.warnings[0];
    }
    {
      // A stream header starts a stream: the packets before it are no
      // repeats (a relay that reconnects and sends the header, then its
      // latest keyframe and the deltas after it).
      GstBuffer *header = stream_header_of(e);
      ASSERT_NE(header, nullptr);
      std::vector<GstBuffer *> in = packets({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
      in.push_back(header);
      for (int n : {9, 8, 9, 10, 11}) in.push_back(e.packets[size_t(n)]);
      Decoded d;
      decode(d, in);
      EXPECT_EQ(shown(d), std::vector<int>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 8, 9, 10, 11}));
      EXPECT_TRUE(d.warnings.empty()) << d.warnings[0];
      EXPECT_EQ(d.dropped, 1u);
    }
  }
  {
    // A delta of an earlier frame number that was not decoded (another
    // sender's, spliced in by a relay without its stream header) is no
    // repeat: out of sequence, a loss, decoding resumes at keyframe 8.
    Encoded a, b;
    EncodeOptions o;
    o.frames = 12;
    o.props = "keyframe-interval=4";
    encode(a, "BGR", 32, 16, o);
    o.seed = 7;  // another scene
    encode(b, "BGR", 32, 16, o);
    std::vector<GstBuffer *> in(a.packets.begin(), a.packets.begin() + 7);
    in.push_back(b.packets[5]);
    in.insert(in.end(), a.packets.begin() + 7, a.packets.end());
    Decoded d;
    decode(d, in);
    ASSERT_EQ(d.frames.size(), 11u);
    for (size_t i = 0; i < 7; ++i) EXPECT_EQ(d.frames[i], a.pictures[i]) << i;
    for (size_t i = 7; i < 11; ++i) EXPECT_EQ(d.frames[i], a.pictures[i + 1]) << i;
    EXPECT_EQ(d.losses, 1u);
    ASSERT_EQ(d.warnings.size(), 1u);
    EXPECT_NE(d.warnings[0].find("out of sequence"), std::string::npos) << d.warnings[0];
  }
}

// A copy of a packet's header alone, or of its first part, just before the
// intact packet (a relay that resends a packet it had begun to send, a
// sender restarted mid-packet): the copy's checksum fails, but the intact
// packet of the same frame inside it comes next, so no frame is lost and
// nothing is posted; the copy's bytes are skipped. Before, cudadiffdec
// alone reported the copy as a damaged packet and lost the rest of the
// keyframe interval (cudadiffparse's gap rule already lost nothing). A
// damaged packet that swallows the start of the next frame's packet
// (bytes lost) is still a loss, and a damaged copy of a frame whose intact
// packet does not follow too.
TEST(CudaDiff, DecoderKeepsAFrameWhoseIntactPacketFollowsACopyOfItsStart) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    Encoded e;
    encode_for_damage(e, version);  // keyframes 0, 4, 8, 12
    const Bytes delta = bytes_of(e.packets[5]), key = bytes_of(e.packets[8]);
    struct Case {
      const char *what;
      size_t before;  // the copy goes before this packet
      Bytes copy;
    };
    const std::vector<Case> cases = {
        {"header copy of a delta", 5, Bytes(delta.begin(), delta.begin() + 64)},
        {"first half of a delta", 5, Bytes(delta.begin(), delta.begin() + long(delta.size() / 2))},
        {"delta all but its last byte", 5, Bytes(delta.begin(), delta.end() - 1)},
        {"header copy of a keyframe", 8, Bytes(key.begin(), key.begin() + 64)},
        {"two header copies", 5,
         [&] {
           Bytes two(delta.begin(), delta.begin() + 64);
           two.insert(two.end(), delta.begin(), delta.begin() + 64);
           return two;
         }()},
    };
    for (const Case &c : cases) {
      SCOPED_TRACE(c.what);
      for (bool one_buffer : {false, true}) {
        SCOPED_TRACE(one_buffer ? "copy and packet in one buffer" : "each in its own buffer");
        std::vector<GstBuffer *> in(e.packets.begin(), e.packets.end());
        GstBuffer *copy = nullptr;
        if (one_buffer) {
          Bytes both = c.copy;
          const Bytes intact = bytes_of(e.packets[c.before]);
          both.insert(both.end(), intact.begin(), intact.end());
          copy = buffer_like(e.packets[c.before], both);
          in[c.before] = copy;
        } else {
          copy = buffer_like(e.packets[c.before], c.copy);
          in.insert(in.begin() + long(c.before), copy);
        }
        Decoded d;
        decode(d, in);
        gst_buffer_unref(copy);
        ASSERT_EQ(d.frames.size(), 16u);
        for (size_t i = 0; i < 16; ++i) {
          EXPECT_EQ(d.frames[i], e.pictures[i]) << "frame " << i;
          EXPECT_EQ(GST_BUFFER_FLAG_IS_SET(d.buffers[i], GST_BUFFER_FLAG_DISCONT), i == 0) << i;
        }
        EXPECT_TRUE(d.warnings.empty()) << d.warnings[0];
        EXPECT_EQ(d.losses, 0u);
        EXPECT_EQ(d.dropped, 0u);
        EXPECT_EQ(d.qos, 0u);
        EXPECT_EQ(d.skipped, c.copy.size());
      }
    }
    // The first half of delta 5 before delta 6: frame 5's packet is
    // damaged and nothing of frame 5 follows, so 5 to 7 are lost.
    GstBuffer *half =
        buffer_like(e.packets[5], Bytes(delta.begin(), delta.begin() + long(delta.size() / 2)));
    std::vector<GstBuffer *> in(e.packets.begin(), e.packets.end());
    in[5] = half;
    Decoded d;
    decode(d, in);
    gst_buffer_unref(half);
    EXPECT_EQ(d.frames.size(), 13u);
    EXPECT_EQ(d.losses, 1u);
    ASSERT_EQ(d.warnings.size(), 1u);
    EXPECT_NE(d.warnings[0].find("checksum mismatch in packet 5"), std::string::npos)
        << d.warnings[0];
  }
}

// In key-unit trick mode (a player's fast forward: a seek with
// GST_SEEK_FLAG_TRICKMODE_KEY_UNITS) only keyframes are decoded and shown;
// the deltas are passed over without a loss. Before, every delta was
// decoded and shown, and fast forward saved nothing.
TEST(CudaDiff, DecoderShowsOnlyKeyframesInKeyUnitTrickMode) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    Encoded e;
    encode_for_damage(e, version);  // 16 frames, a keyframe every 4
    GstSegment segment;
    gst_segment_init(&segment, GST_FORMAT_TIME);
    segment.flags =
        GstSegmentFlags(GST_SEGMENT_FLAG_TRICKMODE | GST_SEGMENT_FLAG_TRICKMODE_KEY_UNITS);
    GstHarness *h = gst_harness_new_parse("cudadiffdec");
    gst_harness_set_src_caps_str(h, "video/x-cudadiff");
    ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_segment(&segment)));
    for (GstBuffer *p : e.packets) EXPECT_EQ(gst_harness_push(h, gst_buffer_ref(p)), GST_FLOW_OK);
    gst_harness_push_event(h, gst_event_new_eos());
    const std::vector<Bytes> shown = pull_pictures(h);
    ASSERT_EQ(shown.size(), 4u);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(shown[i], e.pictures[4 * i]) << "keyframe " << 4 * i;
    GstElement *dec = gst_harness_find_element(h, "cudadiffdec");
    GstStructure *stats = nullptr;
    g_object_get(dec, "stats", &stats, nullptr);
    guint64 losses = 1, dropped = 1;
    gst_structure_get_uint64(stats, "losses", &losses);
    gst_structure_get_uint64(stats, "dropped-packets", &dropped);
    EXPECT_EQ(losses, 0u);
    EXPECT_EQ(dropped, 0u);
    gst_structure_free(stats);
    gst_object_unref(dec);
    gst_harness_teardown(h);
  }
}

// Losses are warnings, not decoding errors: with GstVideoDecoder's
// max-errors=0 (the first error fatal) a stream whose every delta is damaged
// plays its keyframes, with one warning per loss and no failed push.
TEST(CudaDiff, LossesAreNotCountedAsDecodingErrors) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    Encoded e;
    encode_for_damage(e, version);
    ASSERT_EQ(e.packets.size(), 16u);
    std::vector<GstBuffer *> in;
    for (size_t i = 0; i < e.packets.size(); ++i) {
      if (i % 4 == 0) {
        in.push_back(gst_buffer_ref(e.packets[i]));
        continue;
      }
      const Bytes body = payload_of(e.packets[i]);
      ASSERT_FALSE(body.empty()) << "delta " << i;
      in.push_back(damaged(e.packets[i], 0, uint8_t(body[0] ^ 0xa5), false));
    }
    Decoded d;
    decode(d, in, true, "cudadiffdec max-errors=0");
    for (GstBuffer *b : in) gst_buffer_unref(b);
    ASSERT_EQ(d.frames.size(), 4u);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(d.frames[i], e.pictures[4 * i]) << "keyframe " << i;
    EXPECT_EQ(d.losses, 4u);
    EXPECT_EQ(d.warnings.size(), 4u);
    EXPECT_EQ(d.dropped, 12u);
  }
}

// frame-overlap=always on the decoder: the same frames, each pushed once the
// next packet has been applied (EOS pushes the last); damaged packets and
// keyframes push the frame in flight first, a flush drops it. Both versions
// (version 2: the core decodes the frame in flight; a damaged tile, which
// the CUDA backend finds only then, drops it and the deltas after it).
// A byte stream without caps, as tcpclientsrc and filesrc send it (a
// stream-start and a segment in bytes; GstBaseSrc sends no caps for ANY):
// frame-overlap is read at its first packet. With `always` each frame
// leaves when the next packet has come, the last at the end; before, it
// was read only at input caps and so never engaged there.
TEST(CudaDiff, DecoderOverlapsFramesOfAByteStreamWithoutCaps) {
  Encoded e;
  EncodeOptions o;
  o.frames = 4;
  encode(e, "GRAY8", 16, 8, o);
  for (const char *overlap : {"never", "always"}) {
    SCOPED_TRACE(overlap);
    GstHarness *h =
        gst_harness_new_parse((std::string("cudadiffdec frame-overlap=") + overlap).c_str());
    ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_stream_start("bytes")));
    GstSegment bytes;
    gst_segment_init(&bytes, GST_FORMAT_BYTES);
    ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_segment(&bytes)));
    std::vector<guint> out;  // frames out after each packet, then after EOS
    for (GstBuffer *p : e.packets) {
      const Bytes b = bytes_of(p);
      GstBuffer *untimed = gst_buffer_new_allocate(nullptr, b.size(), nullptr);
      gst_buffer_fill(untimed, 0, b.data(), b.size());
      ASSERT_EQ(gst_harness_push(h, untimed), GST_FLOW_OK);
      out.push_back(gst_harness_buffers_received(h));
    }
    ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
    out.push_back(gst_harness_buffers_received(h));
    if (std::string(overlap) == "never")
      EXPECT_EQ(out, (std::vector<guint>{1, 2, 3, 4, 4}));
    else
      EXPECT_EQ(out, (std::vector<guint>{0, 1, 2, 3, 4}));
    GstCaps *in_caps = gst_pad_get_current_caps(h->srcpad);
    EXPECT_EQ(in_caps, nullptr) << "the input had caps";
    if (in_caps) gst_caps_unref(in_caps);
    gst_harness_teardown(h);
  }
}

// A drain query pushes the frame that frame-overlap holds (an application
// that pushes one packet and waits for its frame, as the docs advise for
// the filters); before, GstVideoDecoder only passed the query on and the
// frame stayed until the next packet.
TEST(CudaDiff, DecoderDrainQueryPushesTheHeldFrame) {
  Encoded e;
  EncodeOptions o;
  o.frames = 3;
  encode(e, "GRAY8", 16, 8, o);
  GstHarness *h = gst_harness_new_parse("cudadiffdec frame-overlap=always");
  gst_harness_set_src_caps_str(h, "video/x-cudadiff");
  for (size_t i = 0; i < e.packets.size(); ++i) {
    ASSERT_EQ(gst_harness_push(h, gst_buffer_ref(e.packets[i])), GST_FLOW_OK);
    EXPECT_EQ(gst_harness_buffers_received(h), i) << "held, packet " << i;
    GstQuery *drain = gst_query_new_drain();
    EXPECT_TRUE(gst_pad_peer_query(h->srcpad, drain));
    gst_query_unref(drain);
    EXPECT_EQ(gst_harness_buffers_received(h), i + 1) << "drained, packet " << i;
  }
  for (size_t i = 0; i < e.packets.size(); ++i) {
    GstBuffer *out = gst_harness_pull(h);
    GstCaps *caps = gst_pad_get_current_caps(h->sinkpad);
    EXPECT_EQ(canonical_of(out, caps), e.pictures[i]) << i;
    gst_caps_unref(caps);
    gst_buffer_unref(out);
  }
  gst_harness_teardown(h);
}

// A gap event after the frame held by frame-overlap reaches downstream after
// that frame, as it came: GstVideoDecoder sends a gap on at once, which let
// it overtake the held frame (frame 1 at 33 ms arrived after the gap at
// 67 ms, and time went back downstream).
TEST(CudaDiff, DecoderGapEventComesAfterTheHeldFrame) {
  Encoded e;
  EncodeOptions o;
  o.frames = 2;
  encode(e, "GRAY8", 16, 8, o);
  GstPad *src = nullptr;
  GstHarness *h = overlapping_decoder(&src);
  std::vector<std::string> order;  // "buffer PTS" or "gap TS", as they leave the decoder
  gst_pad_add_probe(
      src, GstPadProbeType(GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM),
      [](GstPad *, GstPadProbeInfo *info, gpointer data) {
        auto *seen = static_cast<std::vector<std::string> *>(data);
        if (GST_PAD_PROBE_INFO_TYPE(info) & GST_PAD_PROBE_TYPE_BUFFER) {
          seen->push_back("buffer " +
                          std::to_string(GST_BUFFER_PTS(GST_PAD_PROBE_INFO_BUFFER(info))));
        } else if (GST_EVENT_TYPE(GST_PAD_PROBE_INFO_EVENT(info)) == GST_EVENT_GAP) {
          GstClockTime ts = 0, duration = 0;
          gst_event_parse_gap(GST_PAD_PROBE_INFO_EVENT(info), &ts, &duration);
          seen->push_back("gap " + std::to_string(ts));
        }
        return GST_PAD_PROBE_OK;
      },
      &order, nullptr);
  ASSERT_EQ(gst_harness_push(h, gst_buffer_ref(e.packets[0])), GST_FLOW_OK);
  ASSERT_EQ(gst_harness_push(h, gst_buffer_ref(e.packets[1])), GST_FLOW_OK);  // frame 1 held
  const GstClockTime gap_at = gst_util_uint64_scale(2, GST_SECOND, 30);  // where frame 2 would be
  EXPECT_TRUE(gst_harness_push_event(h, gst_event_new_gap(gap_at, GST_SECOND / 30)));
  gst_harness_push_event(h, gst_event_new_eos());
  const std::vector<std::string> want = {
      "buffer 0", "buffer " + std::to_string(gst_util_uint64_scale(1, GST_SECOND, 30)),
      "gap " + std::to_string(gap_at)};
  EXPECT_EQ(order, want);
  gst_object_unref(src);
  gst_harness_teardown(h);
}

// A flow that pushing the held frame returned during a drain query (here
// downstream answers NOT_LINKED once) is returned for the next packet, which
// is still decoded: the frames after it are the encoder's pictures, none
// lost. Before, that packet was dropped undecoded, and the decoder waited for
// a keyframe (the next delta was out of sequence).
TEST(CudaDiff, DecoderDecodesThePacketThatGetsTheHeldFlow) {
  Encoded e;
  EncodeOptions o;
  o.frames = 5;
  encode(e, "GRAY8", 16, 8, o);
  GstPad *src = nullptr;
  GstHarness *h = overlapping_decoder(&src);
  std::atomic<int> refuse{0};
  refuse_buffers(src, &refuse);
  ASSERT_EQ(gst_harness_push(h, gst_buffer_ref(e.packets[0])), GST_FLOW_OK);
  ASSERT_EQ(gst_harness_push(h, gst_buffer_ref(e.packets[1])), GST_FLOW_OK);  // frame 0 out
  refuse = 1;  // frame 1, pushed by the drain query
  GstQuery *drain = gst_query_new_drain();
  EXPECT_TRUE(gst_pad_peer_query(h->srcpad, drain));
  gst_query_unref(drain);
  EXPECT_EQ(refuse.load(), 0);
  EXPECT_EQ(gst_harness_push(h, gst_buffer_ref(e.packets[2])), GST_FLOW_NOT_LINKED);
  for (size_t i = 3; i < e.packets.size(); ++i)
    EXPECT_EQ(gst_harness_push(h, gst_buffer_ref(e.packets[i])), GST_FLOW_OK) << i;
  gst_harness_push_event(h, gst_event_new_eos());
  const std::vector<Bytes> shown = pull_pictures(h);
  // Frame 1 went to the refusing downstream; 0, 2, 3, 4 arrive.
  ASSERT_EQ(shown.size(), 4u);
  EXPECT_EQ(shown[0], e.pictures[0]);
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(shown[i], e.pictures[i + 1]) << "frame " << i + 1;
  gst_object_unref(src);
  gst_harness_teardown(h);
}

// The same when a keyframe pushes the held frame before it (it may bring
// new caps) and downstream refuses that frame once (NOT_LINKED, as a tee's
// branch relinked at run time answers): the keyframe is still decoded and
// the flow returned for it, so the deltas after it follow. Before, the
// keyframe was dropped undecoded, the next delta was out of sequence (a
// warning of packets missing) and the rest of its group of frames was lost.
TEST(CudaDiff, DecoderDecodesAKeyframeWhoseHeldFrameIsRefused) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    Encoded e;
    EncodeOptions o;
    o.frames = 8;
    o.version = version;
    o.props = "keyframe-interval=4";
    encode(e, "GRAY8", 16, 8, o);
    ASSERT_EQ(e.packets.size(), 8u);
    ASSERT_TRUE(header_of(e.packets[4]).keyframe());
    GstPad *src = nullptr;
    GstHarness *h = overlapping_decoder(&src);
    GstBus *bus = gst_bus_new();
    gst_element_set_bus(h->element, bus);
    std::atomic<int> refuse{0};
    refuse_buffers(src, &refuse);
    for (size_t i = 0; i < e.packets.size(); ++i) {
      refuse = i == 4 ? 1 : 0;  // frame 3, held, goes out when keyframe 4 comes
      EXPECT_EQ(gst_harness_push(h, gst_buffer_ref(e.packets[i])),
                i == 4 ? GST_FLOW_NOT_LINKED : GST_FLOW_OK)
          << "packet " << i;
      EXPECT_EQ(refuse.load(), 0) << "packet " << i;
    }
    gst_harness_push_event(h, gst_event_new_eos());
    const std::vector<Bytes> shown = pull_pictures(h);
    // Frame 3 went to the refusing downstream; every other frame arrives.
    const std::vector<size_t> want = {0, 1, 2, 4, 5, 6, 7};
    ASSERT_EQ(shown.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(shown[i], e.pictures[want[i]]) << "frame " << want[i];
    const std::vector<gst_test::BusText> warnings = gst_test::pop_texts(bus, GST_MESSAGE_WARNING);
    EXPECT_TRUE(warnings.empty()) << warnings[0].message << " " << warnings[0].debug;
    EXPECT_TRUE(gst_test::pop_texts(bus, GST_MESSAGE_ERROR).empty());
    gst_element_set_bus(h->element, nullptr);
    gst_object_unref(bus);
    gst_object_unref(src);
    gst_harness_teardown(h);
  }
}

TEST(CudaDiff, DecoderFrameOverlapGivesTheSameFrames) {
  struct Variant {
    int version;
    const char *compression;
  };
  std::vector<Variant> variants = {{1, "none"}, {2, "none"}};
  if (have_zstd()) variants.push_back({1, "zstd"});  // bodies from the reader's scratch
  for (const Variant &v : variants) {
    SCOPED_TRACE("version " + std::to_string(v.version) + ", " + v.compression);
    Encoded e;
    EncodeOptions o;
    o.frames = 16;
    o.version = v.version;
    o.props = std::string("keyframe-interval=4 compression=") + v.compression;
    encode(e, "BGR", 45, 11, o);
    std::vector<GstBuffer *> in(e.packets.begin(), e.packets.end());
    Decoded plain, overlapped;
    decode(plain, in, true);
    decode(overlapped, in, true, "cudadiffdec frame-overlap=always");
    ASSERT_EQ(plain.frames.size(), 16u);
    ASSERT_EQ(overlapped.frames.size(), 16u);
    for (size_t i = 0; i < 16; ++i) {
      EXPECT_EQ(overlapped.frames[i], e.pictures[i]) << "frame " << i;
      EXPECT_EQ(GST_BUFFER_PTS(overlapped.buffers[i]), GST_BUFFER_PTS(plain.buffers[i]));
    }
    // Damage: delta 2 corrupt (2, 3 lost), packet 6 missing (7 out of
    // sequence); version 2 also a changed byte in a coded tile of delta 13,
    // its checksums right (13 to 15 lost).
    const bool tile = v.version == 2;
    in[2] = damaged(e.packets[2], 5, 0xff, false);
    if (tile) {
      const Bytes body = payload_of(e.packets[13]);
      const size_t last = body.size() - 1;
      in[13] = damaged(e.packets[13], last, uint8_t(body[last] ^ 0x5a), true);
    }
    GstBuffer *bad_13 = in[13];
    in.erase(in.begin() + 6);
    Decoded d;
    decode(d, in, true, "cudadiffdec frame-overlap=always");
    gst_buffer_unref(in[2]);
    if (tile) gst_buffer_unref(bad_13);
    std::vector<size_t> want = {0, 1, 4, 5, 8, 9, 10, 11, 12};
    if (!tile) want.insert(want.end(), {13, 14, 15});
    ASSERT_EQ(d.frames.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(d.frames[i], e.pictures[want[i]]) << "frame " << want[i];
      EXPECT_EQ(GST_BUFFER_PTS(d.buffers[i]), gst_util_uint64_scale(want[i], GST_SECOND, 30));
    }
    ASSERT_EQ(d.warnings.size(), tile ? 3u : 2u);
    if (tile) {
      EXPECT_NE(d.warnings[2].find("impossible delta"), std::string::npos) << d.warnings[2];
      EXPECT_NE(d.warnings[2].find("frame 13"), std::string::npos) << d.warnings[2];
    }

    // One frame of delay, and a flush.
    GstHarness *dec = gst_harness_new_parse("cudadiffdec frame-overlap=always");
    gst_harness_set_src_caps_str(dec, "video/x-cudadiff");
    std::vector<GstBuffer *> out;
    auto pull_all = [&] {
      while (GstBuffer *b = gst_harness_try_pull(dec)) out.push_back(b);
    };
    for (int t = 0; t < 3; ++t) {
      ASSERT_EQ(gst_harness_push(dec, gst_buffer_ref(e.packets[t])), GST_FLOW_OK);
      pull_all();
      EXPECT_EQ(out.size(), size_t(t)) << "after packet " << t;
    }
    flush_and_restart(dec, "video/x-cudadiff");
    for (int t = 4; t < 16; ++t)
      ASSERT_EQ(gst_harness_push(dec, gst_buffer_ref(e.packets[t])), GST_FLOW_OK);
    gst_harness_push_event(dec, gst_event_new_eos());
    pull_all();
    ASSERT_EQ(out.size(), 2u + 12u) << "frame 2 dropped by the flush";
    for (size_t i = 2; i < out.size(); ++i) {
      GstCaps *caps = gst_pad_get_current_caps(dec->sinkpad);
      EXPECT_EQ(canonical_of(out[i], caps), e.pictures[i + 2]) << "frame " << i + 2;
      gst_caps_unref(caps);
    }
    for (GstBuffer *b : out) gst_buffer_unref(b);
    gst_harness_teardown(dec);
  }
}

TEST(CudaDiff, DecoderReadsByteStreamInPieces) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    Encoded e;
    EncodeOptions o;
    o.frames = 9;
    o.version = version;
    o.props = "keyframe-interval=4";
    encode(e, "I420", 35, 13, o);
    Bytes stream;
    for (size_t i = 3; i < e.packets.size(); ++i) {  // starts mid-stream, as a late client
      const Bytes b = bytes_of(e.packets[i]);
      stream.insert(stream.end(), b.begin(), b.end());
    }
    // Untimed pieces of 1..300 bytes, as tcpclientsrc delivers them.
    std::vector<GstBuffer *> pieces;
    std::mt19937 gen(testing_util::test_seed());
    for (size_t at = 0; at < stream.size();) {
      const size_t n = std::min(stream.size() - at, size_t(1 + gen() % 300));
      GstBuffer *b = gst_buffer_new_allocate(nullptr, n, nullptr);
      gst_buffer_fill(b, 0, stream.data() + at, n);
      pieces.push_back(b);
      at += n;
    }
    Decoded d;
    decode(d, pieces);
    EXPECT_TRUE(d.warnings.empty());
    ASSERT_EQ(d.frames.size(), 5u);  // keyframe 4 to 8
    GstCaps *sender = gst_caps_from_string("timestamp/x-cudadiff-sender");
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(d.frames[i], e.pictures[4 + i]) << i;
      // The receiver's line starts at 0; the sender's time comes along.
      EXPECT_EQ(GST_BUFFER_PTS(d.buffers[i]), gst_util_uint64_scale(4 + i, GST_SECOND, 30) -
                                                  gst_util_uint64_scale(4, GST_SECOND, 30));
      GstReferenceTimestampMeta *meta =
          gst_buffer_get_reference_timestamp_meta(d.buffers[i], sender);
      ASSERT_NE(meta, nullptr);
      EXPECT_EQ(meta->timestamp, gst_util_uint64_scale(4 + i, GST_SECOND, 30));
    }
    gst_caps_unref(sender);
    for (GstBuffer *b : pieces) gst_buffer_unref(b);
  }
}

TEST(CudaDiff, DecoderTruncatedAtEos) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    Encoded e;
    EncodeOptions o;
    o.frames = 5;
    o.version = version;
    encode(e, "YUY2", 30, 8, o);
    Bytes stream;
    append_packets(stream, e.packets);
    stream.resize(stream.size() - 10);  // the last packet loses its end
    GstBuffer *all = gst_buffer_new_allocate(nullptr, stream.size(), nullptr);
    gst_buffer_fill(all, 0, stream.data(), stream.size());
    GST_BUFFER_PTS(all) = GST_CLOCK_TIME_NONE;
    Decoded d;
    decode(d, {all}, true);
    ASSERT_EQ(d.frames.size(), 4u);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(d.frames[i], e.pictures[i]);
    ASSERT_EQ(d.warnings.size(), 1u);
    EXPECT_NE(d.warnings[0].find("truncated"), std::string::npos) << d.warnings[0];
    gst_buffer_unref(all);
  }
}

TEST(CudaDiff, DecoderOutputComesFromPinnedPool) {
  Encoded e;
  EncodeOptions o;
  o.frames = 3;
  encode(e, "RGB", 16, 16, o);
  Decoded d;
  decode(d, e.packets);
  ASSERT_EQ(d.buffers.size(), 3u);
  for (GstBuffer *b : d.buffers) {
    GstMemory *mem = gst_buffer_peek_memory(b, 0);
    EXPECT_TRUE(gst_memory_is_type(mem, "CudaDiffPinned") ||
                gst_memory_is_type(mem, "CudaDiffHost"))
        << (mem->allocator ? mem->allocator->mem_type : "(none)");
  }
}

// Whether a packet is a body's own buffer lent by the encoder: its memory
// holds the largest body of the format (docs/stream-format.md: N + 8 B +
// 65536 bytes for N frame bytes), where a copy has the packet's size and at
// most an alignment's padding.
bool lent_packet(GstBuffer *packet) {
  return gst_buffer_n_memory(packet) == 1 &&
         gst_buffer_peek_memory(packet, 0)->maxsize >= gst_buffer_get_size(packet) + (32 << 10);
}

// The address of a packet's bytes.
const void *data_of(GstBuffer *packet) {
  GstMapInfo map;
  if (!gst_buffer_map(packet, &map, GST_MAP_READ)) return nullptr;
  const void *at = map.data;
  gst_buffer_unmap(packet, &map);
  return at;
}

// Large version 2 packets (at least a quarter of the format's largest body)
// leave in the pinned buffer the core wrote the body into (the header
// written in front of it), at most 8 at once; while downstream holds 8, and
// for small packets, they are copied. Either way the same bytes, with right
// checksums; the bodies that come back are lent again; lent buffers stay
// intact while held and outlive the element, freed on another thread.
TEST(CudaDiff, Version2LargePacketsLeaveWithoutACopy) {
  const int w = 256, h = 192, frames = 14, lent_at_most = 8;
  const GstVideoInfo info = video_info("BGR", w, h);
  std::mt19937 gen(5);
  std::vector<Bytes> inputs, sent;
  Models models;
  std::vector<GstBuffer *> packets;
  GstHarness *enc =
      gst_harness_new_parse("cudadiffenc threshold=0 stream-version=2 keyframe-interval=6");
  gst_harness_set_src_caps_str(enc, gst_test::raw_caps("BGR", w, h).c_str());
  // Pushes a frame of random bytes (`repeat`: the one before again, for a
  // delta without a changed block) and checks its packet.
  auto push = [&](int t, bool repeat = false) {
    Bytes in(size_t(w) * h * 3);
    if (repeat)
      in = inputs.back();
    else
      for (uint8_t &b : in) b = uint8_t(gen());
    EXPECT_EQ(gst_harness_push(enc, buffer_from(info, in, t)), GST_FLOW_OK);
    GstBuffer *p = pull_packet(enc);
    EXPECT_NE(p, nullptr);
    if (!p) return p;
    models.apply(2, "BGR", w, h, in, p, 0);  // the payload is the core's body
    inputs.push_back(std::move(in));
    const Bytes b = bytes_of(p);
    const Header hd = header_of(p);
    EXPECT_EQ(b.size() >= (size_t(64) << 10), !repeat) << "random frames make large packets";
    EXPECT_EQ(hd.payload_size + 64u, b.size());
    EXPECT_EQ(le(b.data() + 56, 4), ::crc32(0, b.data() + 64, uInt(b.size() - 64)));
    EXPECT_EQ(le(b.data() + 60, 4), ::crc32(0, b.data(), 60));
    sent.push_back(b);
    packets.push_back(p);
    return p;
  };
  // Every packet held: the first 8 lent, then copies.
  for (int t = 0; t < frames; ++t) {
    GstBuffer *p = push(t);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(lent_packet(p), t < lent_at_most) << "packet " << t;
  }
  // Once some come back, packets are lent again: the body that took the
  // place of the eighth (which packets 8..13 were copied from), then the
  // ones that came back.
  std::vector<const void *> returned;
  for (int t = 0; t < 3; ++t) {
    returned.push_back(data_of(packets[size_t(t)]));
    gst_buffer_unref(packets[size_t(t)]);
    packets[size_t(t)] = nullptr;
  }
  for (int t = frames; t < frames + 3; ++t) {
    GstBuffer *p = push(t);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(lent_packet(p)) << "packet " << t;
    if (t > frames) {
      EXPECT_NE(std::find(returned.begin(), returned.end(), data_of(p)), returned.end())
          << "packet " << t << " reuses a body that came back";
    }
  }
  // A small packet (nothing changed) is copied.
  GstBuffer *small = push(frames + 3, true);
  ASSERT_NE(small, nullptr);
  EXPECT_FALSE(lent_packet(small));
  // The encoder goes away; the packets it lent stay as they were sent.
  gst_harness_teardown(enc);
  for (size_t t = 3; t < packets.size(); ++t)
    EXPECT_EQ(bytes_of(packets[t]), sent[t]) << "packet " << t << " after the encoder's teardown";
  std::vector<GstBuffer *> from_key;  // packets from the last keyframe on (frame 12)
  for (size_t t = 12; t < packets.size(); ++t) from_key.push_back(packets[t]);
  Decoded d;
  decode(d, from_key);
  EXPECT_TRUE(d.warnings.empty()) << d.warnings[0];
  ASSERT_EQ(d.frames.size(), from_key.size());
  for (size_t i = 0; i < d.frames.size(); ++i)
    EXPECT_EQ(d.frames[i], inputs[12 + i]) << "lossless, frame " << 12 + i;
  // Freed on another thread.
  std::thread([&] {
    for (GstBuffer *p : packets)
      if (p) gst_buffer_unref(p);
  }).join();
}

TEST(CudaDiff, TypefinderRecognisesTheStream) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("version " + std::to_string(version));
    Encoded e;
    EncodeOptions o;
    o.frames = 3;
    o.version = version;
    encode(e, "GRAY8", 300, 200, o);
    Bytes stream;
    append_packets(stream, e.packets);
    // The media type and its version field.
    auto typefind = [](const Bytes &data, GstTypeFindProbability *prob) {
      std::string name;
      GstCaps *caps = gst_type_find_helper_for_data(nullptr, data.data(), data.size(), prob);
      if (caps) {
        const GstStructure *st = gst_caps_get_structure(caps, 0);
        gint v = 0;
        gst_structure_get_int(st, "version", &v);
        name = std::string(gst_structure_get_name(st)) + " " + std::to_string(v);
        gst_caps_unref(caps);
      }
      return name;
    };
    const std::string want = "video/x-cudadiff " + std::to_string(version);
    GstTypeFindProbability prob = GST_TYPE_FIND_NONE;
    // A packet at the start (what tcpserversink sends a client first).
    EXPECT_EQ(typefind(stream, &prob), want);
    EXPECT_EQ(prob, GST_TYPE_FIND_MAXIMUM);
    // Picked up in the middle: a packet within the first 64 KiB.
    ASSERT_GT(bytes_of(e.packets[0]).size(), 1000u);
    Bytes mid(stream.begin() + 1000, stream.end());
    EXPECT_EQ(typefind(mid, &prob), want);
    EXPECT_GE(prob, GST_TYPE_FIND_LIKELY);
    // A stream shorter than 64 KiB whose first packet lies beyond its
    // first 32 KiB (a fragment that starts with other bytes).
    Bytes fragment(40000, 0);
    fragment.insert(fragment.end(), stream.begin(),
                    stream.begin() + std::min<size_t>(stream.size(), 20000));
    EXPECT_EQ(typefind(fragment, &prob), want);
    EXPECT_GE(prob, GST_TYPE_FIND_LIKELY);
    // A damaged header is not taken for one.
    Bytes damaged = stream;
    damaged.resize(64);
    damaged[20] ^= 1;
    EXPECT_EQ(typefind(damaged, &prob), "");
  }
}

// A stream of a version this plugin does not read (an intact header:
// magic and checksum right): the typefinder still names the media type
// (without a version), so that the parser is plugged after it and says what
// is wrong, instead of "could not determine the type of the stream".
// (decodebin2 drops an element's error while it still tries that element,
// a race with the parser's first packet; it then reports "all streams
// without buffers". So the typefinder is followed by the parser here.)
TEST(CudaDiff, TypefinderNamesAStreamOfAnotherVersion) {
  Encoded e;
  EncodeOptions o;
  o.frames = 2;
  encode(e, "GRAY8", 64, 48, o);
  Bytes stream;
  for (GstBuffer *p : e.packets) {
    Bytes b = bytes_of(p);
    b[4] = 3;  // version 3
    fix_checksums(b);
    stream.insert(stream.end(), b.begin(), b.end());
  }
  GstTypeFindProbability prob = GST_TYPE_FIND_NONE;
  GstCaps *caps = gst_type_find_helper_for_data(nullptr, stream.data(), stream.size(), &prob);
  ASSERT_NE(caps, nullptr);
  const GstStructure *st = gst_caps_get_structure(caps, 0);
  EXPECT_STREQ(gst_structure_get_name(st), "video/x-cudadiff");
  EXPECT_FALSE(gst_structure_has_field(st, "version"));
  EXPECT_EQ(prob, GST_TYPE_FIND_MAXIMUM);
  gst_caps_unref(caps);
  const TempFile file(stream, "cudadiff-v3-XXXXXX.cdif");
  const char *path = file.path();
  ASSERT_NE(path, nullptr);
  const std::string error = gst_test::run_pipeline(std::string("filesrc location=") + path +
                                                   " ! typefind ! cudadiffparse ! fakesink");
  EXPECT_NE(error.find("of a version this"), std::string::npos) << error;
  // The decoder on the byte stream: the error once, and no warnings (it
  // came twice, the second time from the drain at EOS, and with warnings of
  // missing packets and of a truncated stream).
  GstHarness *dec = gst_harness_new_parse("cudadiffdec");
  GstBus *bus = gst_bus_new();
  gst_element_set_bus(dec->element, bus);
  gst_harness_set_src_caps_str(dec, "video/x-cudadiff");
  GstBuffer *in = gst_buffer_new_allocate(nullptr, stream.size(), nullptr);
  gst_buffer_fill(in, 0, stream.data(), stream.size());
  EXPECT_EQ(gst_harness_push(dec, in), GST_FLOW_ERROR);
  gst_harness_push_event(dec, gst_event_new_eos());
  EXPECT_EQ(gst_harness_try_pull(dec), nullptr);
  const std::vector<gst_test::BusText> errors = gst_test::pop_texts(bus, GST_MESSAGE_ERROR);
  const std::vector<gst_test::BusText> warnings = gst_test::pop_texts(bus, GST_MESSAGE_WARNING);
  // (GstVideoDecoder adds its own "No valid frames decoded before end of
  // stream" at the EOS that follows an error upstream.)
  size_t version_errors = 0;
  for (const gst_test::BusText &e : errors)
    version_errors +=
        e.message.find("of a version this decoder does not read") != std::string::npos;
  EXPECT_EQ(version_errors, 1u) << errors.size() << " errors";
  EXPECT_TRUE(warnings.empty()) << warnings.front().message;
  gst_element_set_bus(dec->element, nullptr);
  gst_object_unref(bus);
  gst_harness_teardown(dec);
}

static void colorimetry_travels(int version) {
  SCOPED_TRACE("version " + std::to_string(version));
  GstHarness *enc =
      gst_harness_new_parse(("cudadiffenc stream-version=" + std::to_string(version)).c_str());
  gst_harness_set_src_caps_str(enc,
                               (gst_test::raw_caps("I420", 64, 48) + ",colorimetry=bt709").c_str());
  const GstVideoInfo info = video_info("I420", 64, 48);
  ASSERT_EQ(gst_harness_push(enc, buffer_from(info, scene("I420", 64, 48, 0, 9), 0)), GST_FLOW_OK);
  std::vector<GstBuffer *> all;
  while (GstBuffer *b = gst_harness_try_pull(enc)) all.push_back(b);
  gst_harness_teardown(enc);
  ASSERT_EQ(all.size(), 2u);  // stream header, keyframe
  // Over a byte stream the decoder learns it from the stream header (the
  // default for I420 at this size would be bt601).
  Bytes stream;
  for (GstBuffer *b : all) {
    const Bytes bytes = bytes_of(b);
    stream.insert(stream.end(), bytes.begin(), bytes.end());
    gst_buffer_unref(b);
  }
  GstBuffer *in = gst_buffer_new_allocate(nullptr, stream.size(), nullptr);
  gst_buffer_fill(in, 0, stream.data(), stream.size());
  Decoded d;
  decode(d, {in});
  gst_buffer_unref(in);
  ASSERT_EQ(d.frames.size(), 1u);
  EXPECT_NE(d.caps[0].find("colorimetry=(string)bt709"), std::string::npos) << d.caps[0];
}

TEST(CudaDiff, ColorimetryTravelsInTheStreamHeader) {
  colorimetry_travels(1);
  colorimetry_travels(2);
}

// The version downstream accepts is checked when caps are set: a receiver
// that reads only version 1 (here a capsfilter) gets a clear error with
// version 2 and works with stream-version=1.
TEST(CudaDiff, CapsNegotiationOfTheVersion) {
  struct Case {
    const char *launch;
    int version;  // 0: refused
  };
  for (const Case c :
       {Case{"cudadiffenc stream-version=2 ! capsfilter caps=video/x-cudadiff,version=(int)1", 0},
        Case{"cudadiffenc stream-version=1 ! capsfilter caps=video/x-cudadiff,version=(int)1", 1},
        Case{"cudadiffenc stream-version=2 ! capsfilter caps=video/x-cudadiff,version=(int)2", 2},
        Case{"cudadiffenc stream-version=2 ! capsfilter caps=video/x-cudadiff", 2},
        Case{"cudadiffenc stream-version=1 ! capsfilter caps=video/x-cudadiff,version=(int)2",
             0}}) {
    SCOPED_TRACE(c.launch);
    GstHarness *enc = gst_harness_new_parse(c.launch);
    GstBus *bus = gst_bus_new();
    gst_element_set_bus(enc->element, bus);
    gst_harness_set_src_caps_str(enc, gst_test::raw_caps("GRAY8", 16, 8).c_str());
    const GstVideoInfo info = video_info("GRAY8", 16, 8);
    const GstFlowReturn ret =
        gst_harness_push(enc, buffer_from(info, scene("GRAY8", 16, 8, 0, 1), 0));
    GstMessage *error = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR);
    if (c.version == 0) {
      EXPECT_NE(ret, GST_FLOW_OK);
      ASSERT_NE(error, nullptr);
      GError *err = nullptr;
      gchar *debug = nullptr;
      gst_message_parse_error(error, &err, &debug);
      EXPECT_TRUE(g_error_matches(err, GST_CORE_ERROR, GST_CORE_ERROR_NEGOTIATION));
      EXPECT_NE(std::string(err->message).find("does not accept version"), std::string::npos)
          << err->message;
      EXPECT_NE(std::string(debug).find("stream-version"), std::string::npos) << debug;
      g_error_free(err);
      g_free(debug);
    } else {
      EXPECT_EQ(ret, GST_FLOW_OK);
      EXPECT_EQ(error, nullptr);
      GstBuffer *p = pull_packet(enc);
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(header_of(p).version, c.version);
      gst_buffer_unref(p);
      GstCaps *caps = gst_pad_get_current_caps(enc->sinkpad);
      gint v = 0;
      EXPECT_TRUE(gst_structure_get_int(gst_caps_get_structure(caps, 0), "version", &v));
      EXPECT_EQ(v, c.version);
      gst_caps_unref(caps);
    }
    if (error) gst_message_unref(error);
    gst_element_set_bus(enc->element, nullptr);
    gst_object_unref(bus);
    gst_harness_teardown(enc);
  }
}

// stream-version set while playing applies from the next caps: the packets
// under the caps of the moment keep their version, the next caps start with
// a keyframe of the new one, and a decoder shows every frame.
TEST(CudaDiff, StreamVersionSetWhilePlayingAppliesFromTheNextCaps) {
  GstHarness *enc = gst_harness_new("cudadiffenc");
  GstElement *el = enc->element;
  g_object_set(el, "frame-overlap", 2 /* never */, "keyframe-interval", 30u, nullptr);
  GParamSpec *spec = g_object_class_find_property(G_OBJECT_GET_CLASS(el), "stream-version");
  ASSERT_NE(spec, nullptr);
  EXPECT_TRUE(spec->flags & GST_PARAM_MUTABLE_PLAYING);
  std::vector<GstBuffer *> packets;
  auto push = [&](int w, int frame) {
    const GstVideoInfo info = video_info("GRAY8", w, 8);
    ASSERT_EQ(gst_harness_push(enc, buffer_from(info, scene("GRAY8", w, 8, frame, 1), frame)),
              GST_FLOW_OK);
    while (GstBuffer *b = gst_harness_try_pull(enc)) packets.push_back(b);
  };
  gst_harness_set_src_caps_str(enc, gst_test::raw_caps("GRAY8", 16, 8).c_str());
  push(16, 0);
  push(16, 1);
  g_object_set(el, "stream-version", 1u, nullptr);
  push(16, 2);
  gst_harness_set_src_caps_str(enc, gst_test::raw_caps("GRAY8", 24, 8).c_str());
  push(24, 3);
  push(24, 4);
  std::vector<GstBuffer *> frames;  // (the stream headers left out)
  for (GstBuffer *b : packets)
    if (!GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_HEADER)) frames.push_back(b);
  ASSERT_EQ(frames.size(), 5u);
  const std::vector<int> versions = {2, 2, 2, 1, 1};
  for (size_t i = 0; i < frames.size(); ++i) {
    const Bytes b = bytes_of(frames[i]);
    ASSERT_GT(b.size(), 4u);
    EXPECT_EQ(b[4], versions[i]) << "packet " << i;
  }
  EXPECT_FALSE(GST_BUFFER_FLAG_IS_SET(frames[3], GST_BUFFER_FLAG_DELTA_UNIT));
  Decoded d;
  decode(d, packets);
  EXPECT_EQ(d.frames.size(), 5u);
  EXPECT_TRUE(d.warnings.empty()) << d.warnings[0];
  for (GstBuffer *b : packets) gst_buffer_unref(b);
  gst_harness_teardown(enc);
}

// A recording made by the version 1 encoder before version 2 existed
// (tests/stream/data) plays through the decoder: every picture is the
// version 1 codec's definition applied to the recorded input.
TEST(CudaDiff, Version1RecordingDecodes) {
  using testing_util::read_file;
  const Bytes stream = read_file(std::string(CUDADIFF_TEST_DATA) + "/v1-i420-32x24-k10-zstd.cdif");
  const Bytes raw = read_file(std::string(CUDADIFF_TEST_DATA) + "/v1-i420-32x24.yuv");
  const size_t n = 32 * 24 * 3 / 2;
  ASSERT_EQ(raw.size(), 6 * n);
  GstBuffer *in = gst_buffer_new_allocate(nullptr, stream.size(), nullptr);
  gst_buffer_fill(in, 0, stream.data(), stream.size());
  Decoded d;
  decode(d, {in}, true);
  gst_buffer_unref(in);
  EXPECT_TRUE(d.warnings.empty()) << d.warnings[0];
  ASSERT_EQ(d.frames.size(), 6u);
  Model model;
  for (size_t f = 0; f < 6; ++f) {
    model.apply(Bytes(raw.begin() + long(f * n), raw.begin() + long((f + 1) * n)), f % 4 == 0, 10);
    EXPECT_EQ(d.frames[f], model.picture) << "frame " << f;
    EXPECT_EQ(GST_BUFFER_PTS(d.buffers[f]), gst_util_uint64_scale(f, GST_SECOND, 30));
  }
  EXPECT_NE(d.caps[0].find("format=(string)I420"), std::string::npos) << d.caps[0];
  EXPECT_NE(d.caps[0].find("width=(int)32"), std::string::npos) << d.caps[0];
}

// A receiver that stays connected while the sender restarts with the other
// version: both are shown, each from its keyframe, and a delta of the other
// version than its keyframe's is a loss.
TEST(CudaDiff, DecoderFollowsTheVersionOfEachKeyframe) {
  Encoded a, b;
  EncodeOptions o;
  o.frames = 4;
  o.threshold = 0;
  o.version = 1;
  encode(a, "NV12", 26, 10, o);
  o.version = 2;
  encode(b, "NV12", 26, 10, o);
  // Frame numbers restart at 0 with the new sender: the keyframe starts over.
  std::vector<GstBuffer *> in(a.packets.begin(), a.packets.end());
  in.insert(in.end(), b.packets.begin(), b.packets.end());
  Decoded d;
  decode(d, in);
  EXPECT_TRUE(d.warnings.empty()) << d.warnings[0];
  ASSERT_EQ(d.frames.size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(d.frames[i], i < 4 ? a.inputs[i] : b.inputs[i - 4]);
  // Version 1 keyframe, then a version 2 delta numbered as its successor.
  Bytes delta = bytes_of(b.packets[1]);
  ASSERT_EQ(header_of(a.packets[0]).frame_number, 0u);
  ASSERT_EQ(header_of(b.packets[1]).frame_number, 1u);
  GstBuffer *mixed = gst_buffer_new_allocate(nullptr, delta.size(), nullptr);
  gst_buffer_fill(mixed, 0, delta.data(), delta.size());
  Decoded m;
  decode(m, {a.packets[0], mixed});
  gst_buffer_unref(mixed);
  ASSERT_EQ(m.frames.size(), 1u);
  ASSERT_EQ(m.warnings.size(), 1u);
  EXPECT_NE(m.warnings[0].find("another stream version"), std::string::npos) << m.warnings[0];
}
