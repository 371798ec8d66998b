/* What a stream header says of the picture beyond the packet headers: the
 * `key=value` text of its payload (cudadiffstream.h,
 * stream_header_value()), which cudadiffenc writes from its input caps.
 * cudadiffdec puts it into its output caps, cudadiffparse into its source
 * caps, both through apply().
 */
#pragma once

#include <gst/video/video.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cudadiffstream.h"

struct GstCudaDiffDescribed {
  // Each as the text says it ("" when not said).
  std::string colorimetry, pixel_aspect_ratio, interlace_mode, field_order, chroma_site,
      multiview_mode, multiview_flags;

  // From a stream header's payload (`n` bytes).
  static GstCudaDiffDescribed read(const uint8_t *payload, size_t n);

  bool operator==(const GstCudaDiffDescribed &o) const {
    return colorimetry == o.colorimetry && pixel_aspect_ratio == o.pixel_aspect_ratio &&
           interlace_mode == o.interlace_mode && field_order == o.field_order &&
           chroma_site == o.chroma_site && multiview_mode == o.multiview_mode &&
           multiview_flags == o.multiview_flags;
  }
  bool operator!=(const GstCudaDiffDescribed &o) const { return !(*this == o); }

  // Sets on `info` (the defaults of its format and size) what the text says:
  // colorimetry, pixel aspect ratio, interleaved fields and their order,
  // chroma siting, the packing of stereoscopic views. Values that do not
  // parse are left at the defaults.
  void apply(GstVideoInfo *info) const;
};

// The descriptions of the stream headers seen, each under the format, size
// and framerate its packet header names (the newest of each; at most
// kMax): a frame is described by the stream header of its own format, size
// and framerate. After a seek in a recording whose caps change (or in
// recordings joined end to end) the last stream header seen can be another
// part's; a frame of no stream header seen gets the defaults of its format
// and size, as a stream joined without its stream header does.
class GstCudaDiffDescriptions {
 public:
  static constexpr size_t kMax = 8;
  // A stream header (`h`) and what its payload says.
  void add(const cudadiff::stream::PacketHeader &h, GstCudaDiffDescribed described);
  // The description of frames like `h` (null: no stream header of theirs).
  const GstCudaDiffDescribed *find(const cudadiff::stream::PacketHeader &h) const;

 private:
  struct Entry {
    cudadiff::VideoFormat format;
    uint32_t width, height, fps_n, fps_d;
    GstCudaDiffDescribed described;
    bool describes(const cudadiff::stream::PacketHeader &h) const {
      return format == h.format && width == h.width && height == h.height && fps_n == h.fps_n &&
             fps_d == h.fps_d;
    }
  };
  std::vector<Entry> entries_;  // newest first
};
