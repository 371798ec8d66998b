// A check the command-line tools share, before they build their pipelines.
#pragma once

#include <gst/gst.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

// tools/meson.build defines these: the plugin's directory in the build tree,
// this directory in the build tree, and the plugin's installed directory.
#ifndef CUDADIFF_BUILD_PLUGIN_DIR
#define CUDADIFF_BUILD_PLUGIN_DIR ""
#endif
#ifndef CUDADIFF_BUILD_TOOLS_DIR
#define CUDADIFF_BUILD_TOOLS_DIR ""
#endif
#ifndef CUDADIFF_INSTALL_PLUGIN_DIR
#define CUDADIFF_INSTALL_PLUGIN_DIR ""
#endif

namespace cudadiff_tools {

// Where GStreamer's own paths (GST_PLUGIN_PATH, the system directory) lack
// the plugin: an executable run from the build tree scans the build tree's
// plugin directory, an installed one the installed plugin directory, so that
// an installed tool never loads a build tree's plugin (or needs the build
// tree to exist).
inline void find_own_plugin() {
  GstRegistry *registry = gst_registry_get();
  GstPluginFeature *feature =
      gst_registry_find_feature(registry, "cudadiffenc", GST_TYPE_ELEMENT_FACTORY);
  if (feature) {
    gst_object_unref(feature);
    return;
  }
  char *exe = realpath("/proc/self/exe", nullptr);
  char *tools = CUDADIFF_BUILD_TOOLS_DIR[0] ? realpath(CUDADIFF_BUILD_TOOLS_DIR, nullptr) : nullptr;
  gchar *exe_dir = exe ? g_path_get_dirname(exe) : nullptr;
  const bool in_build_tree = exe_dir && tools && std::strcmp(exe_dir, tools) == 0;
  const char *dir = in_build_tree ? CUDADIFF_BUILD_PLUGIN_DIR : CUDADIFF_INSTALL_PLUGIN_DIR;
  if (dir[0]) gst_registry_scan_path(registry, dir);
  g_free(exe_dir);
  std::free(tools);
  std::free(exe);
}

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

// Whether `value` is one of the values of the enum property `property` of
// `factory`'s elements (by nick or name, as gst-launch-1.0 takes them): a
// value is put into a pipeline description as it is, so anything else (a
// second word, "none ! fakesink") is refused, with a message on stderr that
// names `option` and lists the values.
inline bool enum_value_is_valid(const char *option, const char *factory, const char *property,
                                const char *value) {
  GstElement *element = gst_element_factory_make(factory, nullptr);
  if (!element) {
    std::fprintf(stderr, "%s: element %s not found\n", option, factory);
    return false;
  }
  GParamSpec *spec = g_object_class_find_property(G_OBJECT_GET_CLASS(element), property);
  bool ok = false;
  std::string values;
  if (spec && G_IS_PARAM_SPEC_ENUM(spec)) {
    GEnumClass *klass = G_PARAM_SPEC_ENUM(spec)->enum_class;
    ok = g_enum_get_value_by_nick(klass, value) || g_enum_get_value_by_name(klass, value);
    for (guint i = 0; i < klass->n_values; ++i)
      values += std::string(i ? ", " : "") + klass->values[i].value_nick;
  }
  gst_object_unref(gst_object_ref_sink(element));
  if (!ok) std::fprintf(stderr, "%s %s: not one of %s\n", option, value, values.c_str());
  return ok;
}

// The tools' --compression and --backend (null: not given), each one of
// cudadiffenc's values (enum_value_is_valid()).
inline bool encoder_choices_are_valid(const char *compression, const char *backend) {
  return (!compression ||
          enum_value_is_valid("--compression", "cudadiffenc", "compression", compression)) &&
         (!backend || enum_value_is_valid("--backend", "cudadiffenc", "backend", backend));
}

}  // namespace cudadiff_tools
