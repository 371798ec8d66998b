// A check the command-line tools share, before they build their pipelines.
#pragma once

#include <gst/gst.h>

#include <cstdio>
#include <string>

namespace cudadiff_tools {

// Whether gst_parse_launch() takes `description` (an element and its
// properties, e.g. "cudadiffenc backend=gpu"): a bad option value is refused
// with a message on stderr before anything runs, rather than when a pipeline
// is built from it later.
inline bool description_is_valid(const std::string &description) {
  GError *error = nullptr;
  GstElement *element = gst_parse_launch(description.c_str(), &error);
  if (element) gst_object_unref(element);
  if (!error) return true;
  std::fprintf(stderr, "%s: %s\n", description.c_str(), error->message);
  g_clear_error(&error);
  return false;
}

}  // namespace cudadiff_tools
