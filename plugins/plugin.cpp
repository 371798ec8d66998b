// The one plugin module, libgstcudadiff.so: registers every element.
#include <gst/gst.h>

#include "filters/gstcudagauss.h"
#include "filters/gstcudabinarize.h"
#include "filters/gstcudagrayscale.h"
#include "gstcudadiffutils.h"

static gboolean plugin_init(GstPlugin *plugin) {
  gst_cudadiff_common_init();
  gboolean ok = FALSE;
  ok |= GST_ELEMENT_REGISTER(cudagrayscale, plugin);
  ok |= GST_ELEMENT_REGISTER(cudagauss, plugin);
  ok |= GST_ELEMENT_REGISTER(cudabinarize, plugin);
  return ok;
}

GST_PLUGIN_DEFINE(GST_VERSION_MAJOR, GST_VERSION_MINOR, cudadiff,
                  "Frame-difference video streaming and GPU video filters (CUDA, with a CPU "
                  "fallback)",
                  plugin_init, PACKAGE_VERSION, "LGPL", "gst-cudadiff", PACKAGE_ORIGIN)
