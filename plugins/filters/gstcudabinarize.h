#pragma once

#include "gstcudadifffilter.h"

G_BEGIN_DECLS

#define GST_TYPE_CUDADIFF_BINARIZE (gst_cudadiff_binarize_get_type())
G_DECLARE_FINAL_TYPE(GstCudaBinarize, gst_cudadiff_binarize, GST, CUDADIFF_BINARIZE,
                     GstCudaDiffFilter)

#define GST_TYPE_CUDADIFF_BINARIZE_METHOD (gst_cudadiff_binarize_method_get_type())
GType gst_cudadiff_binarize_method_get_type(void);

GST_ELEMENT_REGISTER_DECLARE(cudabinarize);

G_END_DECLS
