// The one plugin module, libgstcudadiff.so: registers every element.
#include <gst/gst.h>

#include "diff/gstcudadiffdec.h"
#include "diff/gstcudadiffenc.h"
#include "diff/gstcudadiffparse.h"
#include "diff/gstcudadifftypefind.h"
#include "filters/gstcudabinarize.h"
#include "filters/gstcudagauss.h"
#include "filters/gstcudagrayscale.h"
#include "vis/gstcudaheatmap.h"
#include "vis/gstcudanoisevis.h"
#include "gstcudadiffcudamem.h"
#include "gstcudadiffutils.h"
#if CUDADIFF_HAVE_PANGOCAIRO
#include "vis/gstcudatextoverlay.h"
#endif

static gboolean plugin_init(GstPlugin *plugin) {
  gst_cudadiff_common_init();
  gst_cudadiff_cuda_memory_init();
  gboolean ok = FALSE;
  ok |= GST_ELEMENT_REGISTER(cudagrayscale, plugin);
  ok |= GST_ELEMENT_REGISTER(cudagauss, plugin);
  ok |= GST_ELEMENT_REGISTER(cudabinarize, plugin);
#if CUDADIFF_HAVE_PANGOCAIRO  // meson builds cudatextoverlay only with Pango and Cairo
  ok |= GST_ELEMENT_REGISTER(cudatextoverlay, plugin);
#endif
  ok |= GST_ELEMENT_REGISTER(cudaheatmap, plugin);
  ok |= GST_ELEMENT_REGISTER(cudanoisevis, plugin);
  ok |= GST_ELEMENT_REGISTER(cudadiffenc, plugin);
  ok |= GST_ELEMENT_REGISTER(cudadiffdec, plugin);
  ok |= GST_ELEMENT_REGISTER(cudadiffparse, plugin);
  ok |= GST_TYPE_FIND_REGISTER(cudadiff, plugin);
  return ok;
}

GST_PLUGIN_DEFINE(GST_VERSION_MAJOR, GST_VERSION_MINOR, cudadiff,
                  "Frame-difference video streaming and GPU video filters (CUDA, with a CPU "
                  "fallback)",
                  plugin_init, PACKAGE_VERSION, "LGPL", "gst-cudadiff", PACKAGE_ORIGIN)
