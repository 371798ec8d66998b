// What cudaheatmap and cudanoisevis share: their formats and caps mapping.
// Packed RGB input keeps its format; GRAY8 input gives any packed RGB format
// (colour views of a gray source, preferred) or GRAY8.
#pragma once

#include <gst/base/gstbasetransform.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#define GST_CUDADIFF_VIS_SINK_FORMATS \
  "{ BGR, RGB, BGRx, RGBx, xBGR, xRGB, BGRA, RGBA, ABGR, ARGB, GRAY8 }"
#define GST_CUDADIFF_VIS_SRC_FORMATS GST_CUDADIFF_VIS_SINK_FORMATS

// GstBaseTransform::transform_caps for both elements.
GstCaps *gst_cudadiff_vis_transform_caps(GstBaseTransform *trans, GstPadDirection direction,
                                         GstCaps *caps, GstCaps *filter);
