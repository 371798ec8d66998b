#include "gstcudadiffutils.h"

#include <gst/video/gstvideodecoder.h>
#include <gst/video/gstvideoencoder.h>

#include <algorithm>
#include <string>

GST_DEBUG_CATEGORY_STATIC(gst_cudadiff_utils_debug);
#define GST_CAT_DEFAULT gst_cudadiff_utils_debug

void gst_cudadiff_common_init(void) {
  GST_DEBUG_CATEGORY_INIT(gst_cudadiff_utils_debug, "cudadiff", 0, "gst-cudadiff common");
}

GType gst_cudadiff_backend_get_type(void) {
  static GType type = 0;
  static const GEnumValue values[] = {
      {GST_CUDADIFF_BACKEND_AUTO, "CUDA when a usable device exists, else the CPU", "auto"},
      {GST_CUDADIFF_BACKEND_CUDA, "CUDA (fails at start without a usable device)", "cuda"},
      {GST_CUDADIFF_BACKEND_CPU, "CPU reference implementation", "cpu"},
      {0, nullptr, nullptr},
  };
  if (g_once_init_enter(&type)) {
    GType t = g_enum_register_static("GstCudaDiffBackend", values);
    g_once_init_leave(&type, t);
  }
  return type;
}

void gst_cudadiff_install_backend_properties(GObjectClass *klass, guint backend_prop_id,
                                             guint device_id_prop_id,
                                             guint active_backend_prop_id) {
  g_object_class_install_property(
      klass, active_backend_prop_id,
      g_param_spec_enum("active-backend", "Active backend",
                        "The backend the element runs on since it started (READY to PAUSED): "
                        "cuda or cpu, what backend=auto chose; auto before it starts and "
                        "after it stops (read-only). Default: auto",
                        GST_TYPE_CUDADIFF_BACKEND, GST_CUDADIFF_BACKEND_AUTO,
                        static_cast<GParamFlags>(G_PARAM_READABLE | G_PARAM_STATIC_STRINGS)));
  g_object_class_install_property(
      klass, backend_prop_id,
      g_param_spec_enum("backend", "Backend",
                        "Where the work runs: auto (CUDA when a usable device exists, else CPU), "
                        "cuda (error at start without a device) or cpu (the reference). "
                        "Default: auto",
                        GST_TYPE_CUDADIFF_BACKEND, GST_CUDADIFF_DEFAULT_BACKEND,
                        static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
                                                 GST_PARAM_MUTABLE_READY)));
  g_object_class_install_property(
      klass, device_id_prop_id,
      g_param_spec_int("device-id", "Device ID",
                       "Index of the CUDA device to use (as in nvidia-smi with "
                       "CUDA_DEVICE_ORDER=PCI_BUS_ID; see CUDA_VISIBLE_DEVICES). Default: 0",
                       0, G_MAXINT, GST_CUDADIFF_DEFAULT_DEVICE_ID,
                       static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
                                                GST_PARAM_MUTABLE_READY)));
  gst_type_mark_as_plugin_api(GST_TYPE_CUDADIFF_BACKEND, static_cast<GstPluginAPIFlags>(0));
}

static GQuark active_backend_quark() {
  static GQuark q = g_quark_from_static_string("gst-cudadiff-active-backend");
  return q;
}

GstCudaDiffBackend gst_cudadiff_active_backend(GstElement *element) {
  const gint v = GPOINTER_TO_INT(g_object_get_qdata(G_OBJECT(element), active_backend_quark()));
  return v > 0 ? GstCudaDiffBackend(v - 1) : GST_CUDADIFF_BACKEND_AUTO;
}

// (notify::active-backend when it changes)
static void set_active_backend(GstElement *element, gint value) {
  if (GPOINTER_TO_INT(g_object_get_qdata(G_OBJECT(element), active_backend_quark())) == value)
    return;
  g_object_set_qdata(G_OBJECT(element), active_backend_quark(), GINT_TO_POINTER(value));
  g_object_notify(G_OBJECT(element), "active-backend");
}

void gst_cudadiff_forget_backend(GstElement *element) {
  set_active_backend(element, 0);
}

void gst_cudadiff_remember_backend(GstElement *element, const cudadiff::Context *ctx) {
  if (!ctx) return;
  const GstCudaDiffBackend b =
      ctx->is_cuda() ? GST_CUDADIFF_BACKEND_CUDA : GST_CUDADIFF_BACKEND_CPU;
  set_active_backend(element, gint(b) + 1);
}

void gst_cudadiff_post_error_once(GstElement *element, std::string *last, std::string key,
                                  GQuark domain, gint code, const std::string &text,
                                  const std::string &debug, const char *file, const char *function,
                                  int line) {
  if (*last == key) {
    GST_DEBUG_OBJECT(element, "again: %s", text.c_str());
    return;
  }
  *last = std::move(key);
  gst_element_message_full(element, GST_MESSAGE_ERROR, domain, code, g_strdup(text.c_str()),
                           g_strdup(debug.c_str()), file, function, line);
}

void gst_cudadiff_sync_controlled(GstObject *object, const GstSegment *segment, GstClockTime pts) {
  if (segment->format != GST_FORMAT_TIME || !GST_CLOCK_TIME_IS_VALID(pts)) return;
  const GstClockTime stream_time = gst_segment_to_stream_time(segment, GST_FORMAT_TIME, pts);
  if (GST_CLOCK_TIME_IS_VALID(stream_time)) gst_object_sync_values(object, stream_time);
}

std::unique_ptr<cudadiff::Context> gst_cudadiff_open_context(GstElement *element,
                                                             GstCudaDiffBackend backend,
                                                             gint device_id) {
  if (backend == GST_CUDADIFF_BACKEND_CPU) {
    GST_INFO_OBJECT(element, "backend cpu (%d threads)", cudadiff::cpu_threads());
    return cudadiff::Context::cpu();
  }
  std::string why;
  const int count = cudadiff::device_count(&why);
  if (count > device_id) {
    try {
      auto ctx = cudadiff::Context::cuda(device_id);
      const cudadiff::DeviceInfo &dev = ctx->gpu();
      GST_INFO_OBJECT(element, "backend cuda: device %d %s (compute %d.%d%s)", device_id,
                      dev.name.c_str(), dev.cc_major, dev.cc_minor,
                      dev.integrated ? ", integrated" : "");
      return ctx;
    } catch (const cudadiff::Error &e) {
      why = e.what();
    }
  } else if (count > 0) {
    why = "device-id " + std::to_string(device_id) + " is out of range: " + std::to_string(count) +
          " device(s) found";
  }
  if (backend == GST_CUDADIFF_BACKEND_CUDA) {
    GST_ELEMENT_ERROR(element, RESOURCE, NOT_FOUND,
                      ("no CUDA device is usable for backend=cuda (device-id %d)", device_id),
                      ("%s. Use backend=auto or backend=cpu to run on the CPU.", why.c_str()));
    return nullptr;
  }
  GST_INFO_OBJECT(element, "backend auto: no usable CUDA device (%s); using the cpu (%d threads)",
                  why.c_str(), cudadiff::cpu_threads());
  return cudadiff::Context::cpu();
}

namespace {
struct FormatPair {
  GstVideoFormat gst;
  cudadiff::VideoFormat core;
};
const FormatPair kFormatPairs[] = {
    {GST_VIDEO_FORMAT_BGR, cudadiff::VideoFormat::BGR},
    {GST_VIDEO_FORMAT_RGB, cudadiff::VideoFormat::RGB},
    {GST_VIDEO_FORMAT_BGRx, cudadiff::VideoFormat::BGRx},
    {GST_VIDEO_FORMAT_RGBx, cudadiff::VideoFormat::RGBx},
    {GST_VIDEO_FORMAT_xBGR, cudadiff::VideoFormat::xBGR},
    {GST_VIDEO_FORMAT_xRGB, cudadiff::VideoFormat::xRGB},
    {GST_VIDEO_FORMAT_BGRA, cudadiff::VideoFormat::BGRA},
    {GST_VIDEO_FORMAT_RGBA, cudadiff::VideoFormat::RGBA},
    {GST_VIDEO_FORMAT_ABGR, cudadiff::VideoFormat::ABGR},
    {GST_VIDEO_FORMAT_ARGB, cudadiff::VideoFormat::ARGB},
    {GST_VIDEO_FORMAT_GRAY8, cudadiff::VideoFormat::GRAY8},
    {GST_VIDEO_FORMAT_I420, cudadiff::VideoFormat::I420},
    {GST_VIDEO_FORMAT_YV12, cudadiff::VideoFormat::YV12},
    {GST_VIDEO_FORMAT_NV12, cudadiff::VideoFormat::NV12},
    {GST_VIDEO_FORMAT_NV21, cudadiff::VideoFormat::NV21},
    {GST_VIDEO_FORMAT_YUY2, cudadiff::VideoFormat::YUY2},
    {GST_VIDEO_FORMAT_UYVY, cudadiff::VideoFormat::UYVY},
    {GST_VIDEO_FORMAT_Y444, cudadiff::VideoFormat::Y444},
    {GST_VIDEO_FORMAT_Y42B, cudadiff::VideoFormat::Y42B},
};
}  // namespace

cudadiff::VideoFormat gst_cudadiff_format_from_gst(GstVideoFormat format) {
  for (const FormatPair &p : kFormatPairs)
    if (p.gst == format) return p.core;
  return cudadiff::VideoFormat::Unknown;
}

GstVideoFormat gst_cudadiff_format_to_gst(cudadiff::VideoFormat format) {
  for (const FormatPair &p : kFormatPairs)
    if (p.core == format) return p.gst;
  return GST_VIDEO_FORMAT_UNKNOWN;
}

cudadiff::FrameView gst_cudadiff_frame_view(const GstVideoFrame *frame, const GstVideoInfo *info) {
  cudadiff::FrameView view;
  view.format = gst_cudadiff_format_from_gst(GST_VIDEO_FRAME_FORMAT(frame));
  // (gst_video_frame_map() gives the frame a GstVideoMeta's size, which may
  // be larger than the caps')
  view.width = std::min(GST_VIDEO_FRAME_WIDTH(frame), GST_VIDEO_INFO_WIDTH(info));
  view.height = std::min(GST_VIDEO_FRAME_HEIGHT(frame), GST_VIDEO_INFO_HEIGHT(info));
  for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES(frame) && p < cudadiff::kMaxPlanes; ++p) {
    const gint stride = GST_VIDEO_FRAME_PLANE_STRIDE(frame, p);
    if (stride < 0) throw cudadiff::Error("negative strides are not supported");
    view.data[p] = static_cast<uint8_t *>(GST_VIDEO_FRAME_PLANE_DATA(frame, p));
    view.stride[p] = static_cast<size_t>(stride);
    // A GstVideoMeta's plane must lie within the memory mapped for it (the
    // one that holds its first byte, in GStreamer's default mapping of a
    // meta; without a meta the buffer is mapped whole and its size checked
    // against the frame's). A meta whose stride or offset reaches past it,
    // or a plane that runs from one GstMemory into the next, would be read
    // or written past that memory. (A plane pointer outside its mapping,
    // from a meta with a map function of its own, is left as it is.)
    if (!frame->meta || view.format == cudadiff::VideoFormat::Unknown) continue;
    const GstMapInfo &map = frame->map[p];
    const uint8_t *base = map.data;
    if (!base || view.data[p] < base || view.data[p] > base + map.size) continue;
    const int rows = view.plane_height(int(p));
    if (rows <= 0) continue;
    const size_t start = size_t(view.data[p] - base);
    const size_t end = start + view.stride[p] * size_t(rows - 1) + view.row_bytes(int(p));
    if (end > map.size)
      throw cudadiff::Error(
          "plane " + std::to_string(p) + " of the frame (GstVideoMeta: " + std::to_string(rows) +
          " rows of " + std::to_string(view.row_bytes(int(p))) + " bytes, stride " +
          std::to_string(stride) + ") reaches " + std::to_string(end - map.size) +
          " bytes past the end of the memory that holds its first byte: a meta that does not "
          "fit the buffer, or a plane that runs from one GstMemory into the next (give each "
          "plane within one memory, or the buffer without a GstVideoMeta)");
  }
  return view;
}

GstCudaDiffErrorText gst_cudadiff_error_text(const char *doing, const cudadiff::Error &err) {
  if (err.out_of_memory())
    return {
        GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NO_SPACE_LEFT,
        std::string("out of GPU memory while ") + doing,
        std::string(err.what()) + ". Lower the resolution, free GPU memory, or use backend=cpu."};
  return {GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_FAILED, std::string("failed while ") + doing,
          err.what()};
}

void gst_cudadiff_post_error(GstElement *element, const char *doing, const cudadiff::Error &err) {
  const GstCudaDiffErrorText e = gst_cudadiff_error_text(doing, err);
  gst_element_message_full(element, GST_MESSAGE_ERROR, e.domain, e.code, g_strdup(e.text.c_str()),
                           g_strdup(e.debug.c_str()), __FILE__, GST_FUNCTION, __LINE__);
}

GstStateChangeReturn gst_cudadiff_change_state_opening(GstElement *element,
                                                       GstStateChange transition,
                                                       GstElementClass *parent_class,
                                                       bool (*open)(GstElement *),
                                                       void (*close)(GstElement *)) {
  const bool starting = transition == GST_STATE_CHANGE_READY_TO_PAUSED;
  if (starting && !open(element)) {
    close(element);
    return GST_STATE_CHANGE_FAILURE;
  }
  const GstStateChangeReturn ret = parent_class->change_state(element, transition);
  if (starting && ret == GST_STATE_CHANGE_FAILURE) close(element);
  return ret;
}

const std::vector<GstVideoFormat> &gst_cudadiff_packed_rgb_formats(void) {
  static const std::vector<GstVideoFormat> formats = {
      GST_VIDEO_FORMAT_BGR,  GST_VIDEO_FORMAT_RGB,  GST_VIDEO_FORMAT_BGRx, GST_VIDEO_FORMAT_RGBx,
      GST_VIDEO_FORMAT_xBGR, GST_VIDEO_FORMAT_xRGB, GST_VIDEO_FORMAT_BGRA, GST_VIDEO_FORMAT_RGBA,
      GST_VIDEO_FORMAT_ABGR, GST_VIDEO_FORMAT_ARGB,
  };
  return formats;
}

namespace {

void add_format_unique(std::vector<GstVideoFormat> &out, GstVideoFormat f) {
  for (GstVideoFormat have : out)
    if (have == f) return;
  out.push_back(f);
}

void formats_of_value(const GValue *value, std::vector<GstVideoFormat> &out) {
  if (G_VALUE_HOLDS_STRING(value)) {
    const GstVideoFormat f = gst_video_format_from_string(g_value_get_string(value));
    if (f != GST_VIDEO_FORMAT_UNKNOWN) add_format_unique(out, f);
  } else if (GST_VALUE_HOLDS_LIST(value)) {
    for (guint i = 0; i < gst_value_list_get_size(value); ++i)
      formats_of_value(gst_value_list_get_value(value, i), out);
  }
}

// The colour family of a format: RGB, YUV or gray.
guint colour_family(GstVideoFormat f) {
  const GstVideoFormatInfo *info = gst_video_format_get_info(f);
  return info ? info->flags & (GST_VIDEO_FORMAT_FLAG_RGB | GST_VIDEO_FORMAT_FLAG_YUV |
                               GST_VIDEO_FORMAT_FLAG_GRAY)
              : 0u;
}

// A copy of `s` with `formats` as its format field.
GstStructure *with_formats(const GstStructure *s, const std::vector<GstVideoFormat> &formats) {
  GstStructure *copy = gst_structure_copy(s);
  GValue list = G_VALUE_INIT;
  gst_value_list_init(&list, static_cast<guint>(formats.size()));
  for (GstVideoFormat f : formats) {
    GValue v = G_VALUE_INIT;
    g_value_init(&v, G_TYPE_STRING);
    g_value_set_string(&v, gst_video_format_to_string(f));
    gst_value_list_append_and_take_value(&list, &v);
  }
  if (formats.size() == 1)
    gst_structure_set_value(copy, "format", gst_value_list_get_value(&list, 0));
  else
    gst_structure_set_value(copy, "format", &list);
  g_value_unset(&list);
  return copy;
}

}  // namespace

GstCaps *gst_cudadiff_transform_formats(
    GstCaps *caps, const std::vector<GstVideoFormat> &all,
    const std::function<void(GstVideoFormat, std::vector<GstVideoFormat> &)> &map) {
  GstCaps *result = gst_caps_new_empty();
  for (guint i = 0; i < gst_caps_get_size(caps); ++i) {
    const GstStructure *s = gst_caps_get_structure(caps, i);
    std::vector<GstVideoFormat> in_formats;
    const GValue *format = gst_structure_get_value(s, "format");
    if (format)
      formats_of_value(format, in_formats);
    else
      in_formats = all;
    std::vector<GstVideoFormat> out_formats;
    for (GstVideoFormat f : in_formats) {
      std::vector<GstVideoFormat> mapped;
      map(f, mapped);
      for (GstVideoFormat m : mapped) add_format_unique(out_formats, m);
    }
    if (out_formats.empty()) continue;
    GstCapsFeatures *features = gst_caps_get_features(caps, i);
    auto append = [&](GstStructure *st) {
      gst_caps_append_structure_full(result, st,
                                     features ? gst_caps_features_copy(features) : nullptr);
    };
    // The colorimetry and chroma siting describe the input's encoding: they
    // go with outputs of the input's colour family (RGB, YUV or gray) only.
    // GStreamer refuses them on another family's format as invalid.
    if (!gst_structure_has_field(s, "colorimetry") && !gst_structure_has_field(s, "chroma-site")) {
      append(with_formats(s, out_formats));
      continue;
    }
    guint in_families = 0;
    for (GstVideoFormat f : in_formats) in_families |= colour_family(f);
    std::vector<GstVideoFormat> same, other;
    for (GstVideoFormat f : out_formats)
      ((colour_family(f) & in_families) ? same : other).push_back(f);
    GstStructure *same_st = same.empty() ? nullptr : with_formats(s, same);
    GstStructure *other_st = nullptr;
    if (!other.empty()) {
      other_st = with_formats(s, other);
      gst_structure_remove_fields(other_st, "colorimetry", "chroma-site", nullptr);
    }
    // In the order of the formats (the first is preferred).
    const bool other_first = other_st && out_formats[0] == other[0];
    if (other_first) append(other_st);
    if (same_st) append(same_st);
    if (other_st && !other_first) append(other_st);
  }
  return result;
}

GstCaps *gst_cudadiff_transform_caps_gray_or_same(
    GstBaseTransform *trans, GstPadDirection direction, GstCaps *caps, GstCaps *filter,
    const std::vector<GstVideoFormat> &sink_formats,
    const std::function<bool(GstVideoFormat)> &keeps_format) {
  GstCaps *result;
  if (direction == GST_PAD_SINK) {
    result = gst_cudadiff_transform_formats(
        caps, sink_formats, [&](GstVideoFormat f, std::vector<GstVideoFormat> &out) {
          out.push_back(GST_VIDEO_FORMAT_GRAY8);
          if (keeps_format(f)) out.push_back(f);
        });
  } else {
    result = gst_cudadiff_transform_formats(
        caps, sink_formats, [&](GstVideoFormat f, std::vector<GstVideoFormat> &out) {
          if (f == GST_VIDEO_FORMAT_GRAY8)
            out = sink_formats;
          else if (keeps_format(f))
            out.push_back(f);
        });
  }
  if (filter) {
    GstCaps *tmp = gst_caps_intersect_full(filter, result, GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref(result);
    result = tmp;
  }
  GST_DEBUG_OBJECT(trans, "%s caps %" GST_PTR_FORMAT " -> %" GST_PTR_FORMAT,
                   direction == GST_PAD_SINK ? "sink" : "src", caps, result);
  return result;
}

bool gst_cudadiff_upstream_is_live(GstPad *sinkpad) {
  GstQuery *query = gst_query_new_latency();
  gboolean live = TRUE;
  if (gst_pad_peer_query(sinkpad, query)) gst_query_parse_latency(query, &live, nullptr, nullptr);
  gst_query_unref(query);
  return live;
}

bool gst_cudadiff_upstream_is_file(GstPad *sinkpad) {
  GstQuery *q = gst_query_new_seeking(GST_FORMAT_BYTES);
  gboolean seekable = FALSE;
  gint64 start = -1, stop = -1;
  if (gst_pad_peer_query(sinkpad, q)) gst_query_parse_seeking(q, nullptr, &seekable, &start, &stop);
  gst_query_unref(q);
  if (seekable && stop < 0) gst_pad_peer_query_duration(sinkpad, GST_FORMAT_BYTES, &stop);
  return seekable && start == 0 && stop > 0;
}

bool gst_cudadiff_another_stream(std::string *last, GstEvent *event) {
  const gchar *id = nullptr;
  gst_event_parse_stream_start(event, &id);
  std::string now = id ? id : "";
  const bool another = !last->empty() && now != *last;
  *last = std::move(now);
  return another;
}

GstClockTime gst_cudadiff_live_present(GstElement *element, GstPad *sinkpad,
                                       const GstSegment *segment) {
  if (segment->format != GST_FORMAT_TIME || gst_cudadiff_upstream_is_file(sinkpad))
    return GST_CLOCK_TIME_NONE;
  GST_OBJECT_LOCK(element);
  const bool playing = GST_STATE(element) == GST_STATE_PLAYING;
  GST_OBJECT_UNLOCK(element);
  if (!playing) return GST_CLOCK_TIME_NONE;
  const GstClockTime running = gst_element_get_current_running_time(element);
  if (!GST_CLOCK_TIME_IS_VALID(running)) return GST_CLOCK_TIME_NONE;
  return gst_segment_position_from_running_time(segment, GST_FORMAT_TIME, running);
}

GstFlowReturn gst_cudadiff_caps_failed_flow(GstPad *srcpad) {
  return GST_PAD_IS_FLUSHING(srcpad) ? GST_FLOW_FLUSHING : GST_FLOW_NOT_NEGOTIATED;
}

bool gst_cudadiff_framerate_unknown(gint fps_n, gint fps_d) {
  return fps_n <= 0 || fps_d <= 0;
}

GstClockTime gst_cudadiff_overlap_latency(int frames_held, gint fps_n, gint fps_d) {
  if (frames_held <= 0) return 0;
  // An unknown (variable) framerate: 25 frames per second, as GStreamer's
  // own encoders assume (x264enc, msdk): reporting nothing would let a live
  // pipeline's sink drop the frames that are held.
  if (gst_cudadiff_framerate_unknown(fps_n, fps_d)) {
    fps_n = kUnknownFramerateFps;
    fps_d = 1;
  }
  return gst_util_uint64_scale(GST_SECOND, guint64(fps_d) * guint64(frames_held), guint64(fps_n));
}

void gst_cudadiff_set_overlap_latency(GstElement *codec, int frames_held, gint fps_n, gint fps_d) {
  const bool overlap = frames_held > 0;
  const GstClockTime frame = gst_cudadiff_overlap_latency(frames_held, fps_n, fps_d);
  if (overlap && gst_cudadiff_framerate_unknown(fps_n, fps_d))
    GST_INFO_OBJECT(codec,
                    "frame overlap with an unknown framerate: %d frames of latency at %d fps "
                    "reported",
                    frames_held, kUnknownFramerateFps);
  if (GST_IS_VIDEO_ENCODER(codec)) {
    GstClockTime min = 0, max = 0;
    gst_video_encoder_get_latency(GST_VIDEO_ENCODER(codec), &min, &max);
    if (min != frame || max != frame)
      gst_video_encoder_set_latency(GST_VIDEO_ENCODER(codec), frame, frame);
  } else if (GST_IS_VIDEO_DECODER(codec)) {
    GstClockTime min = 0, max = 0;
    gst_video_decoder_get_latency(GST_VIDEO_DECODER(codec), &min, &max);
    if (min != frame || max != frame)
      gst_video_decoder_set_latency(GST_VIDEO_DECODER(codec), frame, frame);
  }
}
