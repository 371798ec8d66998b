#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

// Registers the typefinder of the difference stream (video/x-cudadiff), so
// that decodebin and playbin find cudadiffparse and cudadiffdec for
// tcpclientsrc or filesrc.
GST_TYPE_FIND_REGISTER_DECLARE(cudadiff);

G_END_DECLS
