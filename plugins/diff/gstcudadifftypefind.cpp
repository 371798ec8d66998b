// The typefinder of the difference stream: a packet header (magic, version
// 1 or 2, checksum, possible sizes; or magic and checksum of another
// version) at the start of the data, as
// tcpserversink sends it (the stream header comes first), or within the
// first 64 KiB for a stream picked up in the middle. The caps it suggests
// carry the version of that packet.
#include "gstcudadifftypefind.h"

#include "cudadiffstream.h"

namespace stream = cudadiff::stream;

namespace {

constexpr size_t kScanBytes = 65536;

// A packet header at `data`: its version, or 0 for an intact header (magic
// and checksum right) of a version this reader does not know, which is
// still the stream: the parser and the decoder then say so ("the stream is
// of a version this ... does not read") instead of a player's "could not
// determine the type".
bool header_at(const guint8 *data, int *version) {
  stream::PacketHeader h;
  const stream::HeaderStatus status = stream::read_header(data, stream::kHeaderSize, &h, nullptr);
  if (status == stream::HeaderStatus::Unsupported) {
    *version = 0;
    return true;
  }
  if (status != stream::HeaderStatus::Ok) return false;
  *version = h.version;
  return true;
}

void suggest(GstTypeFind *tf, guint probability, int version) {
  GstCaps *caps =
      version ? gst_caps_new_simple("video/x-cudadiff", "version", G_TYPE_INT, version, nullptr)
              : gst_caps_new_empty_simple("video/x-cudadiff");
  gst_type_find_suggest(tf, probability, caps);
  gst_caps_unref(caps);
}

void cudadiff_type_find(GstTypeFind *tf, gpointer) {
  const guint8 *data = gst_type_find_peek(tf, 0, stream::kHeaderSize);
  if (!data) return;
  int version = 0;
  if (header_at(data, &version)) {
    suggest(tf, GST_TYPE_FIND_MAXIMUM, version);
    return;
  }
  // The first 64 KiB, or all of a shorter stream whose length is known;
  // else the largest block available (found by bisection).
  size_t len = kScanBytes;
  const guint64 length = gst_type_find_get_length(tf);
  if (length > 0 && length < len) len = size_t(length);
  data = gst_type_find_peek(tf, 0, guint(len));
  if (!data) {
    size_t lo = stream::kHeaderSize, hi = len;  // peek(lo) works, peek(hi) does not
    while (hi - lo > 1) {
      const size_t mid = lo + (hi - lo) / 2;
      (gst_type_find_peek(tf, 0, guint(mid)) ? lo : hi) = mid;
    }
    len = lo;
    data = gst_type_find_peek(tf, 0, guint(len));
  }
  if (!data || len < 2 * stream::kHeaderSize) return;
  // Headers at i >= 1 that end within len.
  for (ptrdiff_t at = stream::find_header_magic(data, len, 1); at >= 0;
       at = stream::find_header_magic(data, len, size_t(at) + 1)) {
    if (header_at(data + at, &version)) {
      suggest(tf, GST_TYPE_FIND_LIKELY, version);
      return;
    }
  }
}

}  // namespace

gboolean gst_type_find_register_cudadiff(GstPlugin *plugin) {
  GstCaps *caps = gst_caps_from_string("video/x-cudadiff");
  const gboolean ok = gst_type_find_register(plugin, "video/x-cudadiff", GST_RANK_PRIMARY,
                                             cudadiff_type_find, "cdif", caps, nullptr, nullptr);
  gst_caps_unref(caps);
  return ok;
}
