// Text overlay at 1920x1080 (default): the cost per frame of composing a
// one-line text, in BGRx, I420 and NV12.
//
//   core op (the text rendered once by Pango, then blended every frame):
//     cpu 1 thread, cpu all threads (in place on a host frame),
//     cuda device-resident (frame already on the GPU),
//     cuda from pinned / pageable host frames (what the element does: the
//     text's rectangle up, blend, rectangle down, synchronise),
//     plus the H2D/D2H copy of that rectangle alone, measured in the same run;
//   through GStreamer (videotestsrc ! ELEMENT ! fakesink, time from the
//   element's sink pad to its src pad per buffer, median):
//     cudatextoverlay backend=cpu / backend=cuda, and gst-plugins-base's
//     textoverlay (CPU) with the same text, font and place, outline and
//     shadow off (same work) and with its defaults.
//
// Usage: bench_textoverlay [--runs N] [--size WxH] [--no-cpu] [--no-cuda] [TEXT]
// Without a CUDA device the CPU figures are printed and the exit status is 77.
#include <gst/gst.h>
#include <pango/pangocairo.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "cudadiff/overlay.h"
#include "frames.h"

using cudadiff::VideoFormat;

namespace {

const char *kDefaultText = "gst-cudadiff  1920x1080  59.94 fps  1234.5 MB/s";
const char *kFont = "Sans 24";

// The text rendered the way cudatextoverlay renders it (PangoCairo, 96 dpi,
// gray antialiasing, one font map kept), as straight ARGB.
class TextRenderer {
 public:
  TextRenderer() {
    font_map_ = pango_cairo_font_map_new();
    context_ = pango_font_map_create_context(font_map_);
    pango_cairo_context_set_resolution(context_, 96);
    cairo_font_options_t *options = cairo_font_options_create();
    cairo_font_options_set_antialias(options, CAIRO_ANTIALIAS_GRAY);
    pango_cairo_context_set_font_options(context_, options);
    cairo_font_options_destroy(options);
    layout_ = pango_layout_new(context_);
    PangoFontDescription *desc = pango_font_description_from_string(kFont);
    pango_layout_set_font_description(layout_, desc);
    pango_font_description_free(desc);
  }
  ~TextRenderer() {
    g_object_unref(layout_);
    g_object_unref(context_);
    g_object_unref(font_map_);
  }

  std::vector<uint8_t> render(const std::string &text, int *width, int *height) {
    pango_layout_set_text(layout_, text.c_str(), -1);
    PangoRectangle ink, logical;
    pango_layout_get_pixel_extents(layout_, &ink, &logical);
    *width = std::max(1, logical.width);
    *height = std::max(1, logical.height);
    cairo_surface_t *surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, *width, *height);
    cairo_t *cr = cairo_create(surface);
    cairo_translate(cr, -logical.x, -logical.y);
    cairo_set_source_rgba(cr, 1, 1, 1, 1);
    pango_cairo_show_layout(cr, layout_);
    cairo_destroy(cr);
    cairo_surface_flush(surface);
    const uint8_t *data = cairo_image_surface_get_data(surface);
    const int stride = cairo_image_surface_get_stride(surface);
    std::vector<uint8_t> argb(static_cast<size_t>(*width) * *height * 4);
    for (int y = 0; y < *height; ++y)
      for (int x = 0; x < *width; ++x) {
        const uint32_t w = reinterpret_cast<const uint32_t *>(data + y * stride)[x];
        const uint32_t a = w >> 24;
        uint8_t *o = &argb[(static_cast<size_t>(y) * *width + x) * 4];
        o[0] = static_cast<uint8_t>(a);
        for (int c = 0; c < 3; ++c) {
          const uint32_t p = (w >> (16 - 8 * c)) & 0xff;
          o[1 + c] = a ? static_cast<uint8_t>(std::min(255u, (p * 255 + a / 2) / a)) : 0;
        }
      }
    cairo_surface_destroy(surface);
    return argb;
  }

 private:
  PangoFontMap *font_map_;
  PangoContext *context_;
  PangoLayout *layout_;
};

// Per-buffer time inside one element of a running pipeline: sink pad probe
// to src pad probe (same streaming thread).
struct ElementTimer {
  std::chrono::steady_clock::time_point entered;
  std::vector<double> ms;
};

GstPadProbeReturn on_enter(GstPad *, GstPadProbeInfo *, gpointer data) {
  static_cast<ElementTimer *>(data)->entered = std::chrono::steady_clock::now();
  return GST_PAD_PROBE_OK;
}

GstPadProbeReturn on_leave(GstPad *, GstPadProbeInfo *, gpointer data) {
  auto *t = static_cast<ElementTimer *>(data);
  t->ms.push_back(
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t->entered)
          .count());
  return GST_PAD_PROBE_OK;
}

// Runs videotestsrc ! caps ! `element` ! fakesink and returns the element's
// per-buffer time (warm-up buffers dropped). Empty stats on failure.
bench::Stats time_element(const bench::Options &opt, const std::string &format,
                          const std::string &element, std::string *error, std::string *box) {
  const int buffers = opt.warmup + opt.runs;
  const std::string desc = "videotestsrc num-buffers=" + std::to_string(buffers) +
                           " pattern=smpte ! video/x-raw,format=" + format +
                           ",width=" + std::to_string(opt.width) +
                           ",height=" + std::to_string(opt.height) + " ! " + element +
                           " name=under_test ! fakesink sync=false";
  GError *err = nullptr;
  // (an element that is not installed gives a pipeline and an error)
  GstElement *pipeline = gst_parse_launch(desc.c_str(), &err);
  if (!pipeline || err) {
    *error = err ? err->message : "cannot build the pipeline";
    g_clear_error(&err);
    if (pipeline) gst_object_unref(pipeline);
    return bench::Stats();
  }
  GstElement *el = gst_bin_get_by_name(GST_BIN(pipeline), "under_test");
  GstPad *sink = gst_element_get_static_pad(el, "sink");
  if (!sink) sink = gst_element_get_static_pad(el, "video_sink");  // textoverlay
  GstPad *src = gst_element_get_static_pad(el, "src");
  if (!sink || !src) {
    *error = "the element has no sink or src pad";
    if (sink) gst_object_unref(sink);
    if (src) gst_object_unref(src);
    gst_object_unref(el);
    gst_object_unref(pipeline);
    return bench::Stats();
  }
  ElementTimer timer;
  gst_pad_add_probe(sink, GST_PAD_PROBE_TYPE_BUFFER, on_enter, &timer, nullptr);
  gst_pad_add_probe(src, GST_PAD_PROBE_TYPE_BUFFER, on_leave, &timer, nullptr);
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  GstBus *bus = gst_element_get_bus(pipeline);
  GstMessage *msg = gst_bus_timed_pop_filtered(
      bus, 300 * GST_SECOND, static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
  if (!msg) {
    *error = "timeout";
  } else if (GST_MESSAGE_TYPE(msg) == GST_MESSAGE_ERROR) {
    GError *gerr = nullptr;
    gst_message_parse_error(msg, &gerr, nullptr);
    *error = gerr->message;
    g_error_free(gerr);
  }
  if (msg) gst_message_unref(msg);
  // Both elements report the size of the text they rendered: the same work?
  guint text_width = 0, text_height = 0;
  g_object_get(el, "text-width", &text_width, "text-height", &text_height, nullptr);
  *box = std::to_string(text_width) + "x" + std::to_string(text_height);
  gst_element_set_state(pipeline, GST_STATE_NULL);
  gst_object_unref(bus);
  gst_object_unref(sink);
  gst_object_unref(src);
  gst_object_unref(el);
  gst_object_unref(pipeline);
  if (!error->empty() || timer.ms.size() <= static_cast<size_t>(opt.warmup)) return bench::Stats();
  std::vector<double> ms(timer.ms.begin() + opt.warmup, timer.ms.end());
  std::sort(ms.begin(), ms.end());
  bench::Stats s;
  s.runs = static_cast<int>(ms.size());
  s.min_ms = ms.front();
  s.max_ms = ms.back();
  s.median_ms =
      ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
  return s;
}

std::string gst_quote(const std::string &s) {
  return "\"" + s + "\"";
}

}  // namespace

int main(int argc, char **argv) {
  // The build tree's plugin unless the caller points elsewhere.
  g_setenv("GST_PLUGIN_PATH_1_0", CUDADIFF_BUILD_PLUGIN_DIR, FALSE);
  gst_init(&argc, &argv);
  bench::Options opt = bench::parse_options(argc, argv, "[TEXT]");
  const std::string text = opt.positional.empty() ? kDefaultText : opt.positional[0];
  bench::Report report;
  const int w = opt.width, h = opt.height;
  const std::string size = std::to_string(w) + "x" + std::to_string(h);

  TextRenderer renderer;
  int tw = 0, th = 0;
  const std::vector<uint8_t> argb = renderer.render(text, &tw, &th);
  cudadiff::ArgbImage image;
  image.data = argb.data();
  image.stride = static_cast<size_t>(tw) * 4;
  image.width = tw;
  image.height = th;
  const int x = 25, y = 25;  // cudatextoverlay's default place (left, top, pad 25)

  std::unique_ptr<cudadiff::Context> gpu;
  std::string why;
  if (opt.cuda && cudadiff::device_count(&why) > 0) gpu = cudadiff::Context::cuda(0);
  bench::describe_machine(report, gpu.get());
  report.note("text \"" + text + "\", font \"" + kFont + "\" (96 dpi): " + std::to_string(tw) +
              "x" + std::to_string(th) + " pixels at " + std::to_string(x) + "," +
              std::to_string(y));

  const VideoFormat formats[] = {VideoFormat::BGRx, VideoFormat::I420, VideoFormat::NV12};
  std::vector<testing_util::HostFrame> frames[3];
  for (int f = 0; f < 3; ++f)
    for (int i = 0; i < opt.frames; ++i) {
      frames[f].emplace_back(formats[f], w, h);
      testing_util::fill_random(frames[f].back());
    }

  const auto op_name = [&](VideoFormat f) {
    return std::string("textoverlay ") + cudadiff::format_name(f) + " " + size;
  };

  if (opt.cpu) {
    auto cpu = cudadiff::Context::cpu();
    bench::Options cpu_opt = opt;
    for (int f = 0; f < 3; ++f) {
      auto op = cudadiff::Overlay::create(*cpu, formats[f], w, h);
      op->set_image(image, x, y);
      for (int threads : {1, 0}) {
        cudadiff::set_cpu_threads(threads);
        bench::Row r;
        r.operation = op_name(formats[f]);
        r.implementation = threads == 1
                               ? "cpu 1 thread"
                               : "cpu " + std::to_string(cudadiff::cpu_threads()) + " threads";
        r.stats =
            bench::time_host(cpu_opt, [&](int i) { op->blend(frames[f][i % opt.frames].view); });
        report.add(r);
      }
      cudadiff::set_cpu_threads(0);
    }
    // A text change: Pango layout and rendering, then the plan (conversion,
    // chroma sums) of the op: once per change, never per frame.
    bench::Options change_opt = opt;
    change_opt.runs = std::min(opt.runs, 50);
    change_opt.warmup = 2;
    auto op = cudadiff::Overlay::create(*cpu, VideoFormat::NV12, w, h);
    bench::Row r;
    r.operation = "text change (render + set_image)";
    r.implementation = "cpu, NV12";
    r.stats = bench::time_host(change_opt, [&](int i) {
      int cw, ch;
      const std::vector<uint8_t> img = renderer.render(text + std::to_string(i), &cw, &ch);
      cudadiff::ArgbImage v{img.data(), static_cast<size_t>(cw) * 4, cw, ch};
      op->set_image(v, x, y);
    });
    report.add(r);
  }

  // Through GStreamer on the CPU: ours and gst-plugins-base's textoverlay.
  const std::string q_text = gst_quote(text), q_font = gst_quote(kFont);
  const std::string ours = "cudatextoverlay text=" + q_text + " font-desc=" + q_font;
  const std::string base = "textoverlay text=" + q_text + " font-desc=" + q_font +
                           " halignment=left valignment=top xpad=25 ypad=25 auto-resize=false";
  struct GstCase {
    std::string element, label;
    bool needs_cuda;
  };
  const GstCase gst_cases[] = {
      {ours + " backend=cpu", "gst cudatextoverlay cpu", false},
      {base + " draw-outline=false draw-shadow=false", "gst textoverlay (base)", false},
      {base, "gst textoverlay defaults", false},
      {ours + " backend=cuda", "gst cudatextoverlay cuda", true},
  };
  bench::Options gst_opt = opt;
  gst_opt.warmup = std::max(opt.warmup, 10);
  const auto run_gst = [&](bool cuda_cases) {
    for (const GstCase &c : gst_cases) {
      if (c.needs_cuda != cuda_cases) continue;
      for (VideoFormat f : formats) {
        std::string error, box;
        bench::Row r;
        r.operation = op_name(f);
        r.implementation = c.label;
        r.stats = time_element(gst_opt, cudadiff::format_name(f), c.element, &error, &box);
        if (!error.empty() || r.stats.runs == 0) {
          report.note(c.label + " " + cudadiff::format_name(f) + ": " +
                      (error.empty() ? "no buffers" : error));
          continue;
        }
        r.note = "text box " + box;
        if (c.label == "gst textoverlay defaults") r.note += ", outline and shadow on";
        report.add(r);
      }
    }
  };
  if (opt.cpu) run_gst(false);

  if (!gpu) {
    report.note(opt.cuda ? "no CUDA device (" + why + "): CUDA measurements skipped"
                         : std::string("--no-cuda: CUDA measurements skipped"));
    report.print_table();
    return 77;
  }

  // The rectangle that crosses the bus per frame (luma / packed plane).
  auto probe = cudadiff::Overlay::create(*gpu, VideoFormat::BGRx, w, h);
  probe->set_image(image, x, y);
  const cudadiff::Rect rect = probe->covered();
  report.note("covered rectangle " + std::to_string(rect.width()) + "x" +
              std::to_string(rect.height()) + " at " + std::to_string(rect.x0) + "," +
              std::to_string(rect.y0));
  const size_t rect_bytes_bgrx = static_cast<size_t>(rect.width()) * rect.height() * 4;
  // Contiguous copies of as many bytes as that rectangle holds in BGRx.
  bench::Row up = bench::measure_h2d_copy(opt, *gpu, rect_bytes_bgrx);
  up.operation = "H2D copy, BGRx rectangle bytes";
  report.add(up);
  bench::Row down = bench::measure_d2h_copy(opt, *gpu, rect_bytes_bgrx);
  down.operation = "D2H copy, BGRx rectangle bytes";
  report.add(down);

  for (int f = 0; f < 3; ++f) {
    auto op = cudadiff::Overlay::create(*gpu, formats[f], w, h);
    op->set_image(image, x, y);
    std::vector<cudadiff::DeviceFrame> dev;
    for (auto &frame : frames[f]) dev.push_back(testing_util::upload(frame, *gpu));

    bench::Row r;
    r.operation = op_name(formats[f]);
    r.implementation = "cuda device-resident";
    r.stats = bench::time_device(opt, *gpu, [&](int i) { op->blend(dev[i % opt.frames].view()); });
    report.add(r);

    // Pinned host frames, as the element gets them from its pool.
    size_t offsets[cudadiff::kMaxPlanes], strides[cudadiff::kMaxPlanes];
    const size_t total = cudadiff::packed_layout(formats[f], w, h, 64, offsets, strides);
    std::vector<cudadiff::PinnedBuffer> pinned;
    std::vector<cudadiff::FrameView> pinned_views;
    for (int i = 0; i < opt.frames; ++i) {
      pinned.emplace_back(total);
      cudadiff::FrameView v;
      v.format = formats[f];
      v.width = w;
      v.height = h;
      for (int p = 0; p < cudadiff::format_info(formats[f]).n_planes; ++p) {
        v.data[p] = pinned.back().data() + offsets[p];
        v.stride[p] = strides[p];
      }
      cudadiff::copy_frame_host(frames[f][i].view, v);
      pinned_views.push_back(v);
    }
    r.implementation = "cuda from pinned host";
    r.note = "rectangle H2D, blend, D2H, synchronize";
    r.stats = bench::time_host(opt, [&](int i) {
      op->blend_host(pinned_views[i % opt.frames]);
      gpu->synchronize();
    });
    report.add(r);

    r.implementation = "cuda from pageable host";
    r.note = "same from malloc'd memory";
    r.stats = bench::time_host(opt, [&](int i) {
      op->blend_host(frames[f][i % opt.frames].view);
      gpu->synchronize();
    });
    report.add(r);
  }

  run_gst(true);
  report.print_table();
  return 0;
}
