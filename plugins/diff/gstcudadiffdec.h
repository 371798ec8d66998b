#pragma once

#include <gst/gst.h>
#include <gst/video/gstvideodecoder.h>
#include <gst/video/video.h>

G_BEGIN_DECLS

#define GST_TYPE_CUDADIFF_DEC (gst_cudadiff_dec_get_type())
G_DECLARE_FINAL_TYPE(GstCudaDiffDec, gst_cudadiff_dec, GST, CUDADIFF_DEC, GstVideoDecoder)

// Caps of the GstReferenceTimestampMeta the decoder adds to every output
// buffer: the sender's timestamp of the frame (the packet's pts).
#define GST_CUDADIFF_SENDER_TIMESTAMP_CAPS "timestamp/x-cudadiff-sender"

GST_ELEMENT_REGISTER_DECLARE(cudadiffdec);

G_END_DECLS
