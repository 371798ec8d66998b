#include "gstcudadiffvis.h"

#include <vector>

#include "gstcudadiffutils.h"

static const std::vector<GstVideoFormat> &vis_formats() {
  static const std::vector<GstVideoFormat> formats = [] {
    std::vector<GstVideoFormat> f = gst_cudadiff_packed_rgb_formats();
    f.push_back(GST_VIDEO_FORMAT_GRAY8);
    return f;
  }();
  return formats;
}

static bool is_rgb(GstVideoFormat f) {
  return cudadiff::is_packed_rgb(gst_cudadiff_format_from_gst(f));
}

GstCaps *gst_cudadiff_vis_transform_caps(GstBaseTransform *, GstPadDirection direction,
                                         GstCaps *caps, GstCaps *filter) {
  GstCaps *result;
  if (direction == GST_PAD_SINK) {
    // RGB in: the same out. GRAY8 in: colour out first, GRAY8 last.
    result = gst_cudadiff_transform_formats(caps, vis_formats(),
                                            [](GstVideoFormat f, std::vector<GstVideoFormat> &out) {
                                              if (f == GST_VIDEO_FORMAT_GRAY8)
                                                out = vis_formats();
                                              else if (is_rgb(f))
                                                out.push_back(f);
                                            });
  } else {
    // RGB out: from the same format or from GRAY8. GRAY8 out: from GRAY8.
    result = gst_cudadiff_transform_formats(caps, vis_formats(),
                                            [](GstVideoFormat f, std::vector<GstVideoFormat> &out) {
                                              if (is_rgb(f)) out.push_back(f);
                                              if (is_rgb(f) || f == GST_VIDEO_FORMAT_GRAY8)
                                                out.push_back(GST_VIDEO_FORMAT_GRAY8);
                                            });
  }
  if (filter) {
    GstCaps *tmp = gst_caps_intersect_full(filter, result, GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref(result);
    result = tmp;
  }
  return result;
}
