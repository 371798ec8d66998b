#include "gstcudadiffdescribed.h"

#include <cstdlib>
#include <utility>

#include "cudadiffstream.h"

namespace stream = cudadiff::stream;

namespace {

// A positive int written in plain decimal digits (no sign, no spaces), or 0:
// the header's text comes from the wire, and sscanf's %d makes a value out of
// range wrap (undefined behaviour).
int positive_int(const std::string &text) {
  if (text.empty() || text.size() > 10 || text.find_first_not_of("0123456789") != std::string::npos)
    return 0;
  const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
  return v <= unsigned(G_MAXINT) ? int(v) : 0;
}

// The multiview mode that GStreamer's caps call `text`, or NONE: asked mode
// by mode, since gst_video_multiview_mode_from_caps_string() prints a GLib
// warning for a name it does not know (fatal where warnings are).
GstVideoMultiviewMode multiview_mode_named(const std::string &text) {
  for (int m = 0; m < 64; ++m) {
    const gchar *name = gst_video_multiview_mode_to_caps_string(GstVideoMultiviewMode(m));
    if (name && text == name) return GstVideoMultiviewMode(m);
  }
  return GST_VIDEO_MULTIVIEW_MODE_NONE;
}

}  // namespace

GstCudaDiffDescribed GstCudaDiffDescribed::read(const uint8_t *payload, size_t n) {
  GstCudaDiffDescribed d;
  d.colorimetry = stream::stream_header_value(payload, n, "colorimetry");
  d.pixel_aspect_ratio = stream::stream_header_value(payload, n, "pixel-aspect-ratio");
  d.interlace_mode = stream::stream_header_value(payload, n, "interlace-mode");
  d.field_order = stream::stream_header_value(payload, n, "field-order");
  d.chroma_site = stream::stream_header_value(payload, n, "chroma-site");
  d.multiview_mode = stream::stream_header_value(payload, n, "multiview-mode");
  d.multiview_flags = stream::stream_header_value(payload, n, "multiview-flags");
  return d;
}

void GstCudaDiffDescribed::apply(GstVideoInfo *info) const {
  GstVideoColorimetry c;
  if (!colorimetry.empty() && gst_video_colorimetry_from_string(&c, colorimetry.c_str()))
    info->colorimetry = c;
  const size_t slash = pixel_aspect_ratio.find('/');
  if (slash != std::string::npos) {
    const int par_n = positive_int(pixel_aspect_ratio.substr(0, slash));
    const int par_d = positive_int(pixel_aspect_ratio.substr(slash + 1));
    if (par_n > 0 && par_d > 0) {
      GST_VIDEO_INFO_PAR_N(info) = par_n;
      GST_VIDEO_INFO_PAR_D(info) = par_d;
    }
  }
  if (interlace_mode == "interleaved") {
    GST_VIDEO_INFO_INTERLACE_MODE(info) = GST_VIDEO_INTERLACE_MODE_INTERLEAVED;
    if (!field_order.empty())
      GST_VIDEO_INFO_FIELD_ORDER(info) = gst_video_field_order_from_string(field_order.c_str());
  }
  if (!chroma_site.empty()) {
    const GstVideoChromaSite site = gst_video_chroma_site_from_string(chroma_site.c_str());
    if (site != GST_VIDEO_CHROMA_SITE_UNKNOWN) info->chroma_site = site;
  }
  if (!multiview_mode.empty()) {
    const GstVideoMultiviewMode mode = multiview_mode_named(multiview_mode);
    // The flags GStreamer defines (right view first, the four flips and
    // flops, half aspect, mixed mono); a value with others, or not plain
    // decimal digits (sscanf's %u takes a minus sign: all bits), is not
    // used.
    constexpr unsigned long long kKnownFlags =
        0x1f | GST_VIDEO_MULTIVIEW_FLAGS_HALF_ASPECT | GST_VIDEO_MULTIVIEW_FLAGS_MIXED_MONO;
    unsigned long long flags = 0;  // (none said: none)
    if (!multiview_flags.empty()) {
      const bool digits = multiview_flags.size() <= 10 &&
                          multiview_flags.find_first_not_of("0123456789") == std::string::npos;
      flags = digits ? std::strtoull(multiview_flags.c_str(), nullptr, 10) : ~0ull;
    }
    if (mode != GST_VIDEO_MULTIVIEW_MODE_NONE && (flags & ~kKnownFlags) == 0) {
      GST_VIDEO_INFO_MULTIVIEW_MODE(info) = mode;
      GST_VIDEO_INFO_MULTIVIEW_FLAGS(info) = GstVideoMultiviewFlags(unsigned(flags));
    }
  }
}

void GstCudaDiffDescriptions::add(const stream::PacketHeader &h, GstCudaDiffDescribed described) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->describes(h)) {
      entries_.erase(it);
      break;
    }
  if (entries_.size() == kMax) entries_.pop_back();
  entries_.insert(entries_.begin(),
                  Entry{h.format, h.width, h.height, h.fps_n, h.fps_d, std::move(described)});
}

const GstCudaDiffDescribed *GstCudaDiffDescriptions::find(const stream::PacketHeader &h) const {
  for (const Entry &e : entries_)
    if (e.describes(h)) return &e.described;
  return nullptr;
}
