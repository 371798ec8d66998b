#pragma once

#include "gstcudadifffilter.h"

G_BEGIN_DECLS

#define GST_TYPE_CUDADIFF_GAUSS (gst_cudadiff_gauss_get_type())
G_DECLARE_FINAL_TYPE(GstCudaGauss, gst_cudadiff_gauss, GST, CUDADIFF_GAUSS, GstCudaDiffFilter)

#define GST_TYPE_CUDADIFF_GAUSS_METHOD (gst_cudadiff_gauss_method_get_type())
GType gst_cudadiff_gauss_method_get_type(void);

GST_ELEMENT_REGISTER_DECLARE(cudagauss);

G_END_DECLS
