#pragma once

#include "gstcudadifffilter.h"

G_BEGIN_DECLS

#define GST_TYPE_CUDADIFF_TEXT_OVERLAY (gst_cudadiff_text_overlay_get_type())
G_DECLARE_FINAL_TYPE(GstCudaTextOverlay, gst_cudadiff_text_overlay, GST, CUDADIFF_TEXT_OVERLAY,
                     GstCudaDiffFilter)

typedef enum {
  GST_CUDADIFF_TEXT_HALIGN_LEFT = 0,
  GST_CUDADIFF_TEXT_HALIGN_CENTER = 1,
  GST_CUDADIFF_TEXT_HALIGN_RIGHT = 2,
} GstCudaDiffTextHAlign;

typedef enum {
  GST_CUDADIFF_TEXT_VALIGN_TOP = 0,
  GST_CUDADIFF_TEXT_VALIGN_CENTER = 1,
  GST_CUDADIFF_TEXT_VALIGN_BOTTOM = 2,
} GstCudaDiffTextVAlign;

#define GST_TYPE_CUDADIFF_TEXT_HALIGN (gst_cudadiff_text_halign_get_type())
GType gst_cudadiff_text_halign_get_type(void);
#define GST_TYPE_CUDADIFF_TEXT_VALIGN (gst_cudadiff_text_valign_get_type())
GType gst_cudadiff_text_valign_get_type(void);

GST_ELEMENT_REGISTER_DECLARE(cudatextoverlay);

G_END_DECLS
