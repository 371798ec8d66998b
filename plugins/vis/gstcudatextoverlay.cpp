/**
 * SECTION:element-cudatextoverlay
 * @title: cudatextoverlay
 *
 * Writes a text onto every frame, on the GPU when one is usable. The text is
 * laid out and rendered by Pango and Cairo (any font, any script, Pango
 * markup) into an ARGB image only when it changes, uploaded once, and
 * alpha-blended onto each frame in place: per frame only the text's rectangle
 * crosses the bus. Text that does not fit is clipped at the frame's edges.
 * With an empty text the element is a pass-through.
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 videotestsrc ! cudatextoverlay text="camera 1" font-desc="Sans Bold 32" \
 *     halignment=right valignment=bottom ! videoconvert ! autovideosink
 * ]|
 */
#include "gstcudatextoverlay.h"

#include <pango/pangocairo.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "cudadiff/overlay.h"
#include "gstcudadiffcudamem.h"

GST_DEBUG_CATEGORY_STATIC(gst_cudadiff_text_overlay_debug);
#define GST_CAT_DEFAULT gst_cudadiff_text_overlay_debug

#define DEFAULT_TEXT ""
#define DEFAULT_FONT_DESC "Sans 24"
#define DEFAULT_COLOR 0xffffffffu
#define DEFAULT_HALIGN GST_CUDADIFF_TEXT_HALIGN_LEFT
#define DEFAULT_VALIGN GST_CUDADIFF_TEXT_VALIGN_TOP
#define DEFAULT_XPAD 25
#define DEFAULT_YPAD 25
#define DEFAULT_SHADED FALSE
#define DEFAULT_SHADING_VALUE 80
// Pango sizes are points; at 96 dpi 24 pt = 32 pixels (as textoverlay with
// auto-resize=false).
#define TEXT_DPI 96.0
// The shaded box reaches this many pixels past the text on every side.
#define SHADING_MARGIN 4

enum {
  PROP_0,
  PROP_TEXT,
  PROP_FONT_DESC,
  PROP_COLOR,
  PROP_HALIGNMENT,
  PROP_VALIGNMENT,
  PROP_XPAD,
  PROP_YPAD,
  PROP_SHADED_BACKGROUND,
  PROP_SHADING_VALUE,
  PROP_TEXT_X,
  PROP_TEXT_Y,
  PROP_TEXT_WIDTH,
  PROP_TEXT_HEIGHT,
  PROP_RENDER_COUNT,
};

#define FORMATS \
  "{ BGR, RGB, BGRx, RGBx, xBGR, xRGB, BGRA, RGBA, ABGR, ARGB, GRAY8, I420, YV12, NV12, NV21 }"

namespace {

// What the streaming thread needs to render, copied under the object lock.
struct Settings {
  std::string text;
  std::string font_desc;
  guint32 color = DEFAULT_COLOR;
  GstCudaDiffTextHAlign halign = DEFAULT_HALIGN;
  GstCudaDiffTextVAlign valign = DEFAULT_VALIGN;
  gint xpad = DEFAULT_XPAD, ypad = DEFAULT_YPAD;
  bool shaded = DEFAULT_SHADED;
  guint shading_value = DEFAULT_SHADING_VALUE;
};

// Pango state and the rendered image; used by the streaming thread only.
struct TextRenderer {
  PangoFontMap *font_map = nullptr;
  PangoContext *context = nullptr;
  PangoLayout *layout = nullptr;
  std::vector<uint8_t> image;  // straight ARGB, the visible part of the text box

  ~TextRenderer() {
    g_clear_object(&layout);
    g_clear_object(&context);
    g_clear_object(&font_map);
  }
};

// Where the text box lands in the frame.
struct Placement {
  gint64 x = 0, y = 0;  // the box's top-left corner (may be outside the frame)
  gint width = 0, height = 0;
  cudadiff::Rect visible;  // the part inside the frame
};

}  // namespace

struct _GstCudaTextOverlay {
  GstCudaDiffFilter parent;

  // Properties and render state, guarded by the object lock.
  Settings *settings;
  gboolean layout_dirty;  // text, font or alignment changed: lay out again
  gboolean render_dirty;  // the image or its place changed: render again
  gint text_x, text_y;
  guint text_width, text_height;
  guint64 render_count;

  // Streaming thread only (setup, process, teardown).
  TextRenderer *renderer;
  cudadiff::Overlay *op;
  gint frame_width, frame_height;
};

G_DEFINE_TYPE(GstCudaTextOverlay, gst_cudadiff_text_overlay, GST_TYPE_CUDADIFF_FILTER)
GST_ELEMENT_REGISTER_DEFINE(cudatextoverlay, "cudatextoverlay", GST_RANK_NONE,
                            GST_TYPE_CUDADIFF_TEXT_OVERLAY)

GType gst_cudadiff_text_halign_get_type(void) {
  static GType type = 0;
  static const GEnumValue values[] = {
      {GST_CUDADIFF_TEXT_HALIGN_LEFT, "Left edge, xpad pixels in", "left"},
      {GST_CUDADIFF_TEXT_HALIGN_CENTER, "Centred", "center"},
      {GST_CUDADIFF_TEXT_HALIGN_RIGHT, "Right edge, xpad pixels in", "right"},
      {0, nullptr, nullptr},
  };
  if (g_once_init_enter(&type)) {
    GType t = g_enum_register_static("GstCudaDiffTextHAlign", values);
    g_once_init_leave(&type, t);
  }
  return type;
}

GType gst_cudadiff_text_valign_get_type(void) {
  static GType type = 0;
  static const GEnumValue values[] = {
      {GST_CUDADIFF_TEXT_VALIGN_TOP, "Top edge, ypad pixels in", "top"},
      {GST_CUDADIFF_TEXT_VALIGN_CENTER, "Centred", "center"},
      {GST_CUDADIFF_TEXT_VALIGN_BOTTOM, "Bottom edge, ypad pixels in", "bottom"},
      {0, nullptr, nullptr},
  };
  if (g_once_init_enter(&type)) {
    GType t = g_enum_register_static("GstCudaDiffTextVAlign", values);
    g_once_init_leave(&type, t);
  }
  return type;
}

// floor(a / 2) for negative a too.
static gint64 half_floor(gint64 a) {
  return a >= 0 ? a / 2 : -((-a + 1) / 2);
}

static Placement place_box(const Settings &s, gint width, gint height, gint frame_width,
                           gint frame_height) {
  Placement p;
  p.width = width;
  p.height = height;
  switch (s.halign) {
    case GST_CUDADIFF_TEXT_HALIGN_LEFT:
      p.x = s.xpad;
      break;
    case GST_CUDADIFF_TEXT_HALIGN_CENTER:
      p.x = half_floor(gint64(frame_width) - width);
      break;
    case GST_CUDADIFF_TEXT_HALIGN_RIGHT:
      p.x = gint64(frame_width) - width - s.xpad;
      break;
  }
  switch (s.valign) {
    case GST_CUDADIFF_TEXT_VALIGN_TOP:
      p.y = s.ypad;
      break;
    case GST_CUDADIFF_TEXT_VALIGN_CENTER:
      p.y = half_floor(gint64(frame_height) - height);
      break;
    case GST_CUDADIFF_TEXT_VALIGN_BOTTOM:
      p.y = gint64(frame_height) - height - s.ypad;
      break;
  }
  p.visible.x0 = static_cast<int>(CLAMP(p.x, 0, frame_width));
  p.visible.y0 = static_cast<int>(CLAMP(p.y, 0, frame_height));
  p.visible.x1 = static_cast<int>(CLAMP(p.x + width, 0, frame_width));
  p.visible.y1 = static_cast<int>(CLAMP(p.y + height, 0, frame_height));
  return p;
}

// Text (Pango markup when it parses as such, else plain text), font and line
// alignment into the layout: shaping happens here, once per change.
static void lay_out(TextRenderer *r, const Settings &s) {
  if (!r->font_map) {
    r->font_map = pango_cairo_font_map_new();
    r->context = pango_font_map_create_context(r->font_map);
    pango_cairo_context_set_resolution(r->context, TEXT_DPI);
    // Gray antialiasing: subpixel (coloured) fringes would not survive the
    // blend into YUV or gray frames.
    cairo_font_options_t *options = cairo_font_options_create();
    cairo_font_options_set_antialias(options, CAIRO_ANTIALIAS_GRAY);
    pango_cairo_context_set_font_options(r->context, options);
    cairo_font_options_destroy(options);
    r->layout = pango_layout_new(r->context);
  }
  PangoFontDescription *desc = pango_font_description_from_string(s.font_desc.c_str());
  pango_layout_set_font_description(r->layout, desc);
  pango_font_description_free(desc);

  gchar *valid = g_utf8_make_valid(s.text.c_str(), -1);
  PangoAttrList *attrs = nullptr;
  gchar *plain = nullptr;
  if (pango_parse_markup(valid, -1, 0, &attrs, &plain, nullptr, nullptr)) {
    pango_layout_set_text(r->layout, plain, -1);
    pango_layout_set_attributes(r->layout, attrs);
    pango_attr_list_unref(attrs);
    g_free(plain);
  } else {
    pango_layout_set_attributes(r->layout, nullptr);
    pango_layout_set_text(r->layout, valid, -1);
  }
  g_free(valid);
  pango_layout_set_alignment(r->layout,
                             s.halign == GST_CUDADIFF_TEXT_HALIGN_CENTER  ? PANGO_ALIGN_CENTER
                             : s.halign == GST_CUDADIFF_TEXT_HALIGN_RIGHT ? PANGO_ALIGN_RIGHT
                                                                          : PANGO_ALIGN_LEFT);
}

// Renders the part of the text box that lies inside the frame into
// r->image (straight ARGB) and returns where the box is. Cairo draws
// premultiplied ARGB32 words; each becomes bytes A, R, G, B with
// c = (c' * 255 + a / 2) / a (at most 255).
static Placement render_text(GstCudaTextOverlay *self, TextRenderer *r, const Settings &s) {
  PangoRectangle ink, logical;
  pango_layout_get_pixel_extents(r->layout, &ink, &logical);
  // The box holds the logical extents (stable while a counter changes) and
  // the ink (glyphs that reach past them, e.g. italics).
  PangoRectangle box = logical;
  if (ink.width > 0 && ink.height > 0) {
    const int x1 = MAX(ink.x + ink.width, logical.x + logical.width);
    const int y1 = MAX(ink.y + ink.height, logical.y + logical.height);
    box.x = MIN(ink.x, logical.x);
    box.y = MIN(ink.y, logical.y);
    box.width = x1 - box.x;
    box.height = y1 - box.y;
  }
  if (s.shaded) {
    box.x -= SHADING_MARGIN;
    box.y -= SHADING_MARGIN;
    box.width += 2 * SHADING_MARGIN;
    box.height += 2 * SHADING_MARGIN;
  }
  const Placement p = place_box(s, box.width, box.height, self->frame_width, self->frame_height);
  r->image.clear();
  if (p.visible.empty()) return p;

  const int w = p.visible.width(), h = p.visible.height();
  cairo_surface_t *surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, w, h);
  if (cairo_surface_status(surface) != CAIRO_STATUS_SUCCESS) {
    GST_WARNING_OBJECT(self, "cannot make a %dx%d cairo surface: %s", w, h,
                       cairo_status_to_string(cairo_surface_status(surface)));
    cairo_surface_destroy(surface);
    return Placement();
  }
  cairo_t *cr = cairo_create(surface);
  // Layout coordinates -> surface: the box's corner (box.x, box.y) lands at
  // (p.x, p.y) of the frame, and the surface starts at the visible corner.
  cairo_translate(cr, double(p.x - box.x - p.visible.x0), double(p.y - box.y - p.visible.y0));
  if (s.shaded) {
    cairo_rectangle(cr, box.x, box.y, box.width, box.height);
    cairo_set_source_rgba(cr, 0, 0, 0, s.shading_value / 255.0);
    cairo_fill(cr);
  }
  cairo_set_source_rgba(cr, ((s.color >> 16) & 0xff) / 255.0, ((s.color >> 8) & 0xff) / 255.0,
                        (s.color & 0xff) / 255.0, (s.color >> 24) / 255.0);
  cairo_move_to(cr, 0, 0);
  pango_cairo_show_layout(cr, r->layout);
  cairo_destroy(cr);
  cairo_surface_flush(surface);

  const uint8_t *data = cairo_image_surface_get_data(surface);
  const int stride = cairo_image_surface_get_stride(surface);
  r->image.resize(static_cast<size_t>(w) * h * 4);
  uint8_t *out = r->image.data();
  for (int y = 0; y < h; ++y) {
    const auto *row = reinterpret_cast<const guint32 *>(data + static_cast<size_t>(y) * stride);
    for (int x = 0; x < w; ++x, out += 4) {
      const guint32 word = row[x];
      const guint32 a = word >> 24;
      out[0] = static_cast<uint8_t>(a);
      for (int c = 0; c < 3; ++c) {
        const guint32 premultiplied = (word >> (16 - 8 * c)) & 0xff;
        out[1 + c] =
            a == 0 ? 0 : static_cast<uint8_t>(MIN(255u, (premultiplied * 255 + a / 2) / a));
      }
    }
  }
  cairo_surface_destroy(surface);
  return p;
}

static void apply_passthrough(GstCudaTextOverlay *self, bool ask_upstream);

static void gst_cudadiff_text_overlay_setup(GstCudaDiffFilter *filter, const GstVideoInfo *in_info,
                                            const GstVideoInfo *, const cudadiff::Context &ctx) {
  auto *self = GST_CUDADIFF_TEXT_OVERLAY(filter);
  self->frame_width = GST_VIDEO_INFO_WIDTH(in_info);
  self->frame_height = GST_VIDEO_INFO_HEIGHT(in_info);
  auto op =
      cudadiff::Overlay::create(ctx, gst_cudadiff_format_from_gst(GST_VIDEO_INFO_FORMAT(in_info)),
                                self->frame_width, self->frame_height);
  self->op = op.release();
  GST_OBJECT_LOCK(self);
  self->render_dirty = TRUE;  // a new frame size moves and clips the text
  GST_OBJECT_UNLOCK(self);
  apply_passthrough(self, false);  // before the allocations for these caps are decided
}

static void gst_cudadiff_text_overlay_teardown(GstCudaDiffFilter *filter) {
  auto *self = GST_CUDADIFF_TEXT_OVERLAY(filter);
  delete self->op;
  self->op = nullptr;
}

static void gst_cudadiff_text_overlay_process_ip(GstCudaDiffFilter *filter,
                                                 const cudadiff::FrameView &frame,
                                                 gboolean on_device) {
  auto *self = GST_CUDADIFF_TEXT_OVERLAY(filter);
  GST_OBJECT_LOCK(self);
  const Settings s = *self->settings;
  const bool relayout = self->layout_dirty;
  const bool rerender = self->render_dirty || relayout;
  self->layout_dirty = self->render_dirty = FALSE;
  GST_OBJECT_UNLOCK(self);
  if (s.text.empty()) return;  // became empty after this buffer left passthrough

  if (rerender) {
    if (relayout || !self->renderer->layout) lay_out(self->renderer, s);
    const Placement p = render_text(self, self->renderer, s);
    cudadiff::ArgbImage image;
    image.data = self->renderer->image.data();
    image.width = self->renderer->image.empty() ? 0 : p.visible.width();
    image.height = self->renderer->image.empty() ? 0 : p.visible.height();
    image.stride = static_cast<size_t>(image.width) * 4;
    self->op->set_image(image, p.visible.x0, p.visible.y0);
    GST_OBJECT_LOCK(self);
    self->text_x = static_cast<gint>(CLAMP(p.x, G_MININT, G_MAXINT));
    self->text_y = static_cast<gint>(CLAMP(p.y, G_MININT, G_MAXINT));
    self->text_width = static_cast<guint>(p.width);
    self->text_height = static_cast<guint>(p.height);
    self->render_count++;
    GST_OBJECT_UNLOCK(self);
    GST_DEBUG_OBJECT(self,
                     "rendered a %dx%d text box at %" G_GINT64_FORMAT ",%" G_GINT64_FORMAT
                     " (%dx%d visible)",
                     p.width, p.height, p.x, p.y, p.visible.width(), p.visible.height());
  }
  if (on_device)
    self->op->blend(frame);  // CUDA memory: in place on the GPU
  else
    self->op->blend_host(frame);
}

// Empty text: pass-through (no mapping, no copy). Upstream is asked to
// renegotiate its allocation on each switch: in CUDA memory it writes into
// our pool while we blend (which says that we order our work after its
// marked frames) and into downstream's while we pass through; on system
// memory downstream answers either way.
// Switched only in the sink pad's streaming thread, from the text of the
// moment: when caps are set, when upstream asks for its allocation and
// before each buffer (GstBaseTransform reads the flag twice per buffer, so
// a switch from the application's thread in between handed an in-place
// transform a buffer it had not made writable, and two setters could leave
// it switched the wrong way). `ask_upstream`: upstream is told to ask for
// its allocation again (not while it is asking).
static void apply_passthrough(GstCudaTextOverlay *self, bool ask_upstream) {
  GstBaseTransform *trans = GST_BASE_TRANSFORM(self);
  GST_OBJECT_LOCK(self);
  const gboolean empty = self->settings->text.empty();
  GST_OBJECT_UNLOCK(self);
  if (gst_base_transform_is_passthrough(trans) == empty) return;
  gst_base_transform_set_passthrough(trans, empty);
  gst_cudadiff_filter_passthrough_changed(GST_CUDADIFF_FILTER(self));
  if (ask_upstream) gst_base_transform_reconfigure_sink(trans);
  GST_DEBUG_OBJECT(self, "passthrough %s", empty ? "on (empty text)" : "off");
}

// A frame passed through that upstream marked as still being written on
// the GPU (upstream learnt while we blended that we order our work after
// such frames; it learns downstream's answer only when it asks for its
// allocation again): finished first unless downstream honours the mark.
static void gst_cudadiff_text_overlay_before_transform(GstBaseTransform *trans, GstBuffer *buffer) {
  apply_passthrough(GST_CUDADIFF_TEXT_OVERLAY(trans), true);
  if (gst_base_transform_is_passthrough(trans))
    gst_cudadiff_filter_pass_through(GST_CUDADIFF_FILTER(trans), buffer);
}

static gboolean gst_cudadiff_text_overlay_propose_allocation(GstBaseTransform *trans,
                                                             GstQuery *decide_query,
                                                             GstQuery *query) {
  apply_passthrough(GST_CUDADIFF_TEXT_OVERLAY(trans), false);
  return GST_BASE_TRANSFORM_CLASS(gst_cudadiff_text_overlay_parent_class)
      ->propose_allocation(trans, decide_query, query);
}

// Stores a property value; a change that alters the text's shape (layout) or
// its image or place (render) marks it for the streaming thread. Setting a
// value it already has changes nothing, so nothing is rendered again.
template <typename T>
static void update(T &field, const T &value, gboolean *dirty) {
  if (field == value) return;
  field = value;
  *dirty = TRUE;
}

static void gst_cudadiff_text_overlay_set_property(GObject *object, guint prop_id,
                                                   const GValue *value, GParamSpec *pspec) {
  auto *self = GST_CUDADIFF_TEXT_OVERLAY(object);
  GST_OBJECT_LOCK(self);
  Settings &s = *self->settings;
  gboolean *layout = &self->layout_dirty, *render = &self->render_dirty;
  switch (prop_id) {
    case PROP_TEXT: {
      const gchar *text = g_value_get_string(value);
      // (pass-through follows in the streaming thread: apply_passthrough())
      update(s.text, std::string(text ? text : ""), layout);
      break;
    }
    case PROP_FONT_DESC: {
      const gchar *font = g_value_get_string(value);
      update(s.font_desc, std::string(font ? font : DEFAULT_FONT_DESC), layout);
      break;
    }
    case PROP_COLOR:
      update(s.color, static_cast<guint32>(g_value_get_uint(value)), render);
      break;
    case PROP_HALIGNMENT:  // also how lines align with each other: a layout change
      update(s.halign, static_cast<GstCudaDiffTextHAlign>(g_value_get_enum(value)), layout);
      break;
    case PROP_VALIGNMENT:
      update(s.valign, static_cast<GstCudaDiffTextVAlign>(g_value_get_enum(value)), render);
      break;
    case PROP_XPAD:
      update(s.xpad, g_value_get_int(value), render);
      break;
    case PROP_YPAD:
      update(s.ypad, g_value_get_int(value), render);
      break;
    case PROP_SHADED_BACKGROUND:
      update(s.shaded, static_cast<bool>(g_value_get_boolean(value)), render);
      break;
    case PROP_SHADING_VALUE:
      update(s.shading_value, g_value_get_uint(value), render);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK(self);
}

static void gst_cudadiff_text_overlay_get_property(GObject *object, guint prop_id, GValue *value,
                                                   GParamSpec *pspec) {
  auto *self = GST_CUDADIFF_TEXT_OVERLAY(object);
  GST_OBJECT_LOCK(self);
  const Settings &s = *self->settings;
  switch (prop_id) {
    case PROP_TEXT:
      g_value_set_string(value, s.text.c_str());
      break;
    case PROP_FONT_DESC:
      g_value_set_string(value, s.font_desc.c_str());
      break;
    case PROP_COLOR:
      g_value_set_uint(value, s.color);
      break;
    case PROP_HALIGNMENT:
      g_value_set_enum(value, s.halign);
      break;
    case PROP_VALIGNMENT:
      g_value_set_enum(value, s.valign);
      break;
    case PROP_XPAD:
      g_value_set_int(value, s.xpad);
      break;
    case PROP_YPAD:
      g_value_set_int(value, s.ypad);
      break;
    case PROP_SHADED_BACKGROUND:
      g_value_set_boolean(value, s.shaded);
      break;
    case PROP_SHADING_VALUE:
      g_value_set_uint(value, s.shading_value);
      break;
    case PROP_TEXT_X:
      g_value_set_int(value, self->text_x);
      break;
    case PROP_TEXT_Y:
      g_value_set_int(value, self->text_y);
      break;
    case PROP_TEXT_WIDTH:
      g_value_set_uint(value, self->text_width);
      break;
    case PROP_TEXT_HEIGHT:
      g_value_set_uint(value, self->text_height);
      break;
    case PROP_RENDER_COUNT:
      g_value_set_uint64(value, self->render_count);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK(self);
}

static void gst_cudadiff_text_overlay_finalize(GObject *object) {
  auto *self = GST_CUDADIFF_TEXT_OVERLAY(object);
  delete self->op;
  delete self->renderer;
  delete self->settings;
  G_OBJECT_CLASS(gst_cudadiff_text_overlay_parent_class)->finalize(object);
}

static void gst_cudadiff_text_overlay_class_init(GstCudaTextOverlayClass *klass) {
  GObjectClass *gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  GstCudaDiffFilterClass *filter_class = GST_CUDADIFF_FILTER_CLASS(klass);

  GST_DEBUG_CATEGORY_INIT(gst_cudadiff_text_overlay_debug, "cudatextoverlay", 0,
                          "gst-cudadiff text overlay");

  gobject_class->set_property = gst_cudadiff_text_overlay_set_property;
  gobject_class->get_property = gst_cudadiff_text_overlay_get_property;
  gobject_class->finalize = gst_cudadiff_text_overlay_finalize;

  const auto rw_playing = static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
                                                   GST_PARAM_MUTABLE_PLAYING);
  // (numbers a GstController may drive: gst_cudadiff_sync_controlled())
  const auto controllable = static_cast<GParamFlags>(rw_playing | GST_PARAM_CONTROLLABLE);
  const auto read_only = static_cast<GParamFlags>(G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  g_object_class_install_property(
      gobject_class, PROP_TEXT,
      g_param_spec_string("text", "Text",
                          "Text to write on every frame: Pango markup (<b>, <span "
                          "foreground=\"red\">, ...) when it parses as such, else plain text; "
                          "\\n starts a new line. Rendered once per change. Empty: the element "
                          "passes buffers through untouched. Changeable while playing. "
                          "Default: \"\"",
                          DEFAULT_TEXT, rw_playing));
  g_object_class_install_property(
      gobject_class, PROP_FONT_DESC,
      g_param_spec_string("font-desc", "Font description",
                          "Pango font description, e.g. \"Sans Bold 32\" or \"DejaVu Sans Mono "
                          "18\" (family, style, size in points at 96 dpi: 24 pt = 32 pixels). "
                          "Changeable while playing. Default: \"" DEFAULT_FONT_DESC "\"",
                          DEFAULT_FONT_DESC, rw_playing));
  g_object_class_install_property(
      gobject_class, PROP_COLOR,
      g_param_spec_uint(
          "color", "Color",
          "Text colour as 0xAARRGGBB (alpha, red, green, blue, as textoverlay); "
          "alpha 0xff is opaque. Changeable while playing. Default: 0xffffffff (opaque white)",
          0, G_MAXUINT32, DEFAULT_COLOR, controllable));
  g_object_class_install_property(
      gobject_class, PROP_HALIGNMENT,
      g_param_spec_enum(
          "halignment", "Horizontal alignment",
          "Where the text goes across the frame (and how its lines align): left "
          "and right keep xpad pixels from the edge. Changeable while playing. Default: left",
          GST_TYPE_CUDADIFF_TEXT_HALIGN, DEFAULT_HALIGN, rw_playing));
  g_object_class_install_property(
      gobject_class, PROP_VALIGNMENT,
      g_param_spec_enum("valignment", "Vertical alignment",
                        "Where the text goes down the frame: top and bottom keep ypad pixels "
                        "from the edge. Changeable while playing. Default: top",
                        GST_TYPE_CUDADIFF_TEXT_VALIGN, DEFAULT_VALIGN, rw_playing));
  g_object_class_install_property(
      gobject_class, PROP_XPAD,
      g_param_spec_int("xpad", "Horizontal padding",
                       "Pixels between the text and the left or right edge (left/right "
                       "alignment). Changeable while playing. Default: 25",
                       0, G_MAXINT, DEFAULT_XPAD, controllable));
  g_object_class_install_property(
      gobject_class, PROP_YPAD,
      g_param_spec_int("ypad", "Vertical padding",
                       "Pixels between the text and the top or bottom edge (top/bottom "
                       "alignment). Changeable while playing. Default: 25",
                       0, G_MAXINT, DEFAULT_YPAD, controllable));
  g_object_class_install_property(
      gobject_class, PROP_SHADED_BACKGROUND,
      g_param_spec_boolean("shaded-background", "Shaded background",
                           "Darken a box behind the text (the text's extents plus 4 pixels) "
                           "with black of opacity shading-value, for legibility on bright "
                           "video. Changeable while playing. Default: false",
                           DEFAULT_SHADED, rw_playing));
  g_object_class_install_property(
      gobject_class, PROP_SHADING_VALUE,
      g_param_spec_uint("shading-value", "Shading value",
                        "Opacity of the shaded box, 1 (faint) to 255 (black), when "
                        "shaded-background is true. Changeable while playing. Default: 80",
                        1, 255, DEFAULT_SHADING_VALUE, controllable));
  g_object_class_install_property(
      gobject_class, PROP_TEXT_X,
      g_param_spec_int("text-x", "Text x",
                       "Left edge of the last rendered text box in the frame, in pixels "
                       "(negative or past the frame when clipped). Read-only. Default: 0",
                       G_MININT, G_MAXINT, 0, read_only));
  g_object_class_install_property(
      gobject_class, PROP_TEXT_Y,
      g_param_spec_int("text-y", "Text y",
                       "Top edge of the last rendered text box in the frame, in pixels. "
                       "Read-only. Default: 0",
                       G_MININT, G_MAXINT, 0, read_only));
  g_object_class_install_property(
      gobject_class, PROP_TEXT_WIDTH,
      g_param_spec_uint("text-width", "Text width",
                        "Width of the last rendered text box in pixels, before clipping. "
                        "Read-only. Default: 0",
                        0, G_MAXUINT, 0, read_only));
  g_object_class_install_property(
      gobject_class, PROP_TEXT_HEIGHT,
      g_param_spec_uint("text-height", "Text height",
                        "Height of the last rendered text box in pixels, before clipping. "
                        "Read-only. Default: 0",
                        0, G_MAXUINT, 0, read_only));
  g_object_class_install_property(
      gobject_class, PROP_RENDER_COUNT,
      g_param_spec_uint64("render-count", "Render count",
                          "How many times the text has been rendered by Pango and uploaded "
                          "since the element was made: once per change of the text, its look "
                          "or its place, never per frame. Read-only. Default: 0",
                          0, G_MAXUINT64, 0, read_only));

  GstCaps *caps = gst_cudadiff_make_template_caps(FORMATS);
  gst_element_class_add_pad_template(
      element_class, gst_pad_template_new("sink", GST_PAD_SINK, GST_PAD_ALWAYS, caps));
  gst_element_class_add_pad_template(
      element_class, gst_pad_template_new("src", GST_PAD_SRC, GST_PAD_ALWAYS, caps));
  gst_caps_unref(caps);
  gst_element_class_set_static_metadata(
      element_class, "CUDA text overlay", "Filter/Editor/Video",
      "Writes a text (Pango: any font and script, markup) onto video: rendered once per change, "
      "alpha-blended in place on the GPU, or on the CPU without one",
      "gst-cudadiff developers");

  filter_class->setup = gst_cudadiff_text_overlay_setup;
  filter_class->teardown = gst_cudadiff_text_overlay_teardown;
  filter_class->process_ip = gst_cudadiff_text_overlay_process_ip;
  GST_BASE_TRANSFORM_CLASS(klass)->before_transform = gst_cudadiff_text_overlay_before_transform;
  GST_BASE_TRANSFORM_CLASS(klass)->propose_allocation =
      gst_cudadiff_text_overlay_propose_allocation;

  gst_type_mark_as_plugin_api(GST_TYPE_CUDADIFF_TEXT_HALIGN, static_cast<GstPluginAPIFlags>(0));
  gst_type_mark_as_plugin_api(GST_TYPE_CUDADIFF_TEXT_VALIGN, static_cast<GstPluginAPIFlags>(0));
}

static void gst_cudadiff_text_overlay_init(GstCudaTextOverlay *self) {
  self->settings = new Settings();
  self->settings->text = DEFAULT_TEXT;
  self->settings->font_desc = DEFAULT_FONT_DESC;
  self->layout_dirty = TRUE;
  self->render_dirty = TRUE;
  self->text_x = self->text_y = 0;
  self->text_width = self->text_height = 0;
  self->render_count = 0;
  self->renderer = new TextRenderer();
  self->op = nullptr;
  self->frame_width = self->frame_height = 0;
  GstBaseTransform *trans = GST_BASE_TRANSFORM(self);
  gst_base_transform_set_in_place(trans, TRUE);
  gst_base_transform_set_passthrough(trans, TRUE);  // the text starts empty
}
