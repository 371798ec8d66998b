#pragma once

#include "gstcudadifffilter.h"

G_BEGIN_DECLS

#define GST_TYPE_CUDADIFF_GRAYSCALE (gst_cudadiff_grayscale_get_type())
G_DECLARE_FINAL_TYPE(GstCudaGrayscale, gst_cudadiff_grayscale, GST, CUDADIFF_GRAYSCALE,
                     GstCudaDiffFilter)

#define GST_TYPE_CUDADIFF_GRAY_METHOD (gst_cudadiff_gray_method_get_type())
GType gst_cudadiff_gray_method_get_type(void);

GST_ELEMENT_REGISTER_DECLARE(cudagrayscale);

G_END_DECLS
