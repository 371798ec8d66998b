#pragma once

#include "gstcudadifffilter.h"

G_BEGIN_DECLS

#define GST_TYPE_CUDADIFF_NOISEVIS (gst_cudadiff_noisevis_get_type())
G_DECLARE_FINAL_TYPE(GstCudaNoiseVis, gst_cudadiff_noisevis, GST, CUDADIFF_NOISEVIS,
                     GstCudaDiffFilter)

#define GST_TYPE_CUDADIFF_NOISEVIS_MODE (gst_cudadiff_noisevis_mode_get_type())
GType gst_cudadiff_noisevis_mode_get_type(void);

GST_ELEMENT_REGISTER_DECLARE(cudanoisevis);

G_END_DECLS
