#pragma once

#include <gst/gst.h>
#include <gst/video/gstvideoencoder.h>
#include <gst/video/video.h>

G_BEGIN_DECLS

#define GST_TYPE_CUDADIFF_ENC (gst_cudadiff_enc_get_type())
G_DECLARE_FINAL_TYPE(GstCudaDiffEnc, gst_cudadiff_enc, GST, CUDADIFF_ENC, GstVideoEncoder)

typedef enum {
  GST_CUDADIFF_COMPRESSION_NONE = 0,
  GST_CUDADIFF_COMPRESSION_ZSTD = 1,
} GstCudaDiffCompression;

#define GST_TYPE_CUDADIFF_COMPRESSION (gst_cudadiff_compression_get_type())
GType gst_cudadiff_compression_get_type(void);

typedef enum {
  GST_CUDADIFF_FRAME_OVERLAP_AUTO = 0,
  GST_CUDADIFF_FRAME_OVERLAP_ALWAYS = 1,
  GST_CUDADIFF_FRAME_OVERLAP_NEVER = 2,
} GstCudaDiffFrameOverlap;

#define GST_TYPE_CUDADIFF_FRAME_OVERLAP (gst_cudadiff_frame_overlap_get_type())
GType gst_cudadiff_frame_overlap_get_type(void);

GST_ELEMENT_REGISTER_DECLARE(cudadiffenc);

G_END_DECLS
