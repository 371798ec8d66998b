#pragma once

#include <gst/base/gstbaseparse.h>
#include <gst/gst.h>

G_BEGIN_DECLS

// cudadiffparse: splits a byte stream of the difference stream (a recording,
// tcpclientsrc) into its packets, timestamped from their headers, keyframes
// marked, so that GstBaseParse can give players a duration and seek in time
// (decodebin and playbin plug it before cudadiffdec).
#define GST_TYPE_CUDADIFF_PARSE (gst_cudadiff_parse_get_type())
G_DECLARE_FINAL_TYPE(GstCudaDiffParse, gst_cudadiff_parse, GST, CUDADIFF_PARSE, GstBaseParse)

GST_ELEMENT_REGISTER_DECLARE(cudadiffparse);

G_END_DECLS
