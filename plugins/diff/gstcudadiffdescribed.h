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

struct GstCudaDiffDescribed {
  // Each as the text says it ("" when not said).
  std::string colorimetry, pixel_aspect_ratio, interlace_mode, field_order, chroma_site;

  // From a stream header's payload (`n` bytes).
  static GstCudaDiffDescribed read(const uint8_t *payload, size_t n);

  bool operator==(const GstCudaDiffDescribed &o) const {
    return colorimetry == o.colorimetry && pixel_aspect_ratio == o.pixel_aspect_ratio &&
           interlace_mode == o.interlace_mode && field_order == o.field_order &&
           chroma_site == o.chroma_site;
  }
  bool operator!=(const GstCudaDiffDescribed &o) const { return !(*this == o); }

  // Sets on `info` (the defaults of its format and size) what the text says:
  // colorimetry, pixel aspect ratio, interleaved fields and their order,
  // chroma siting. Values that do not parse are left at the defaults.
  void apply(GstVideoInfo *info) const;
};
