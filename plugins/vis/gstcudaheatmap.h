#pragma once

#include "gstcudadifffilter.h"

G_BEGIN_DECLS

#define GST_TYPE_CUDADIFF_HEATMAP (gst_cudadiff_heatmap_get_type())
G_DECLARE_FINAL_TYPE(GstCudaHeatmap, gst_cudadiff_heatmap, GST, CUDADIFF_HEATMAP, GstCudaDiffFilter)

#define GST_TYPE_CUDADIFF_HEATMAP_COLORMAP (gst_cudadiff_heatmap_colormap_get_type())
GType gst_cudadiff_heatmap_colormap_get_type(void);

GST_ELEMENT_REGISTER_DECLARE(cudaheatmap);

G_END_DECLS
