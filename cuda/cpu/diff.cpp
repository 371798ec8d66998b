// The difference codec, the reference: plain loops over the canonical byte
// order (see cudadiff/diff.h for the body layout).
#include "cudadiff/diff.h"

#include <cstring>
#include <utility>
#include <string>
#include <vector>

namespace cudadiff {
namespace diff {
namespace {

inline uint32_t load_u32le(const uint8_t *p) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#else
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
#endif
}

inline void store_u32le(uint8_t *p, uint32_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
  p[2] = uint8_t(v >> 16);
  p[3] = uint8_t(v >> 24);
}

// Bit count without relying on the POPCNT instruction (not in the x86-64
// baseline Debian builds for, where __builtin_popcount becomes a library call).
inline int popcount32(uint32_t v) {
  v = v - ((v >> 1) & 0x55555555u);
  v = (v & 0x33333333u) + ((v >> 2) & 0x33333333u);
  v = (v + (v >> 4)) & 0x0f0f0f0fu;
  return static_cast<int>((v * 0x01010101u) >> 24);
}

void check_frame(const FrameView &frame, VideoFormat format, int width, int height,
                 const char *what) {
  validate(frame, what);
  if (frame.format != format || frame.width != width || frame.height != height)
    throw Error(std::string(what) + ": frame does not match the codec's format and size");
}

// Canonical order: rows of every plane, no padding. `dst` has N bytes.
void pack(const FrameView &frame, uint8_t *dst) {
  for (int p = 0; p < frame.n_planes(); ++p) {
    const size_t row = frame.row_bytes(p);
    for (int y = 0; y < frame.plane_height(p); ++y) {
      std::memcpy(dst, frame.row(p, y), row);
      dst += row;
    }
  }
}

size_t checked_frame_bytes(VideoFormat format, int width, int height) {
  if (format_info(format).n_planes == 0) throw Error("difference codec: unknown video format");
  if (width <= 0 || height <= 0) throw Error("difference codec: empty frame size");
  return frame_size_packed(format, width, height);
}

class CpuDiffEncoder final : public DiffEncoder {
 public:
  CpuDiffEncoder(VideoFormat format, int width, int height)
      : format_(format), width_(width), height_(height) {
    frame_bytes_ = checked_frame_bytes(format, width, height);
    const size_t padded = superblock_count(frame_bytes_) * kSuperBytes;
    reference_.assign(padded, 0);  // bytes past N stay 0 in both: never "changed"
    current_.assign(padded, 0);
    block_masks_.assign(padded / kBlockBytes, 0);
  }

  void keyframe(const FrameView &frame, HostBytes &body) override {
    check_idle("keyframe");
    check_frame(frame, format_, width_, height_, "encoder input");
    pack(frame, reference_.data());
    body.resize(frame_bytes_);
    std::memcpy(body.data(), reference_.data(), frame_bytes_);
  }

  DeltaSummary delta(const FrameView &frame, int threshold, ValueMode mode,
                     HostBytes &body) override {
    check_idle("delta");
    check_frame(frame, format_, width_, height_, "encoder input");
    if (threshold < 0 || threshold > 255) throw Error("threshold must be within 0..255");
    pack(frame, current_.data());

    // Which bytes changed: one 32-bit mask per 32-byte block.
    const long long n_blocks = static_cast<long long>(block_masks_.size());
    const uint8_t *cur = current_.data();
    const uint8_t *ref = reference_.data();
    auto masks = [&](long long begin, long long end) {
      for (long long k = begin; k < end; ++k) {
        uint32_t mask = 0;
        for (size_t j = 0; j < kBlockBytes; ++j) {
          const size_t i = static_cast<size_t>(k) * kBlockBytes + j;
          const int d = int(cur[i]) - int(ref[i]);
          if (d > threshold || d < -threshold) mask |= 1u << j;
        }
        block_masks_[k] = mask;
      }
    };
    cpu_parallel_ranges(n_blocks, cpu_threads_for(frame_bytes_), masks);

    // Counts, then the four sections in order; the reference follows the
    // changed bytes.
    DeltaSummary s;
    const size_t n_super = superblock_count(frame_bytes_);
    for (size_t sb = 0; sb < n_super; ++sb) {
      bool any = false;
      for (size_t b = 0; b < kBlocksPerSuper; ++b) {
        const uint32_t m = block_masks_[sb * kBlocksPerSuper + b];
        if (m) {
          any = true;
          s.changed_blocks++;
          s.changed_bytes += popcount32(m);
        }
      }
      s.changed_superblocks += any;
    }
    body.resize(delta_body_size(frame_bytes_, s));
    uint8_t *bitmap = body.data();
    std::memset(bitmap, 0, bitmap_bytes(frame_bytes_));
    uint8_t *super_masks = bitmap + bitmap_bytes(frame_bytes_);
    uint8_t *block_masks = super_masks + 4 * s.changed_superblocks;
    uint8_t *values = block_masks + 4 * s.changed_blocks;
    uint8_t *reference = reference_.data();
    for (size_t sb = 0; sb < n_super; ++sb) {
      uint32_t super_mask = 0;
      for (size_t b = 0; b < kBlocksPerSuper; ++b)
        if (block_masks_[sb * kBlocksPerSuper + b]) super_mask |= 1u << b;
      if (!super_mask) continue;
      bitmap[sb / 8] |= uint8_t(1u << (sb % 8));
      store_u32le(super_masks, super_mask);
      super_masks += 4;
      for (size_t b = 0; b < kBlocksPerSuper; ++b) {
        const size_t k = sb * kBlocksPerSuper + b;
        const uint32_t m = block_masks_[k];
        if (!m) continue;
        store_u32le(block_masks, m);
        block_masks += 4;
        for (size_t j = 0; j < kBlockBytes; ++j) {
          if (!(m >> j & 1u)) continue;
          const size_t i = k * kBlockBytes + j;
          *values++ = mode == ValueMode::Values ? cur[i] : uint8_t(cur[i] - reference[i]);
          reference[i] = cur[i];
        }
      }
    }
    return s;
  }

  void queue_delta(const FrameView &frame, int threshold, ValueMode mode) override {
    delta(frame, threshold, mode, scratch_);
  }

  void read_reference(HostBytes &out) override {
    out.resize(frame_bytes_);
    std::memcpy(out.data(), reference_.data(), frame_bytes_);
  }

 private:
  VideoFormat format_;
  int width_, height_;
  HostBytes scratch_;
  std::vector<uint8_t> reference_, current_;
  std::vector<uint32_t> block_masks_;
};

class CpuDiffDecoder final : public DiffDecoder {
 public:
  CpuDiffDecoder(VideoFormat format, int width, int height)
      : format_(format), width_(width), height_(height) {
    frame_bytes_ = checked_frame_bytes(format, width, height);
    reference_.assign(frame_bytes_, 0);
  }

  void keyframe(const uint8_t *body) override {
    std::memcpy(reference_.data(), body, frame_bytes_);
  }

  void delta(const uint8_t *body, const DeltaIndex &index, ValueMode mode) override {
    if (index.frame_bytes != frame_bytes_) throw Error("delta body is for another frame size");
    const uint8_t *bitmap = body;
    const uint8_t *super_masks = body + index.super_masks_offset;
    const uint8_t *block_masks = body + index.block_masks_offset;
    const uint8_t *values = body + index.values_offset;
    uint8_t *reference = reference_.data();
    const size_t n_super = superblock_count(frame_bytes_);
    for (size_t sb = 0; sb < n_super; ++sb) {
      if (!(bitmap[sb / 8] >> (sb % 8) & 1u)) continue;
      const uint32_t super_mask = load_u32le(super_masks);
      super_masks += 4;
      for (size_t b = 0; b < kBlocksPerSuper; ++b) {
        if (!(super_mask >> b & 1u)) continue;
        const uint32_t m = load_u32le(block_masks);
        block_masks += 4;
        const size_t base = (sb * kBlocksPerSuper + b) * kBlockBytes;
        for (size_t j = 0; j < kBlockBytes; ++j) {
          if (!(m >> j & 1u)) continue;
          const uint8_t v = *values++;
          reference[base + j] = mode == ValueMode::Values ? v : uint8_t(reference[base + j] + v);
        }
      }
    }
  }

  void write_frame(const FrameView &out) override {
    check_frame(out, format_, width_, height_, "decoder output");
    copy_frame_host(packed_view(format_, width_, height_, reference_.data()), out);
  }

 private:
  VideoFormat format_;
  int width_, height_;
  std::vector<uint8_t> reference_;
};

}  // namespace

void DiffEncoder::check_idle(const char *what) const {
  if (in_flight_ > 0)
    throw Error(std::string("difference encoder: ") + what + " while " +
                std::to_string(in_flight_) + " frame(s) are in flight (collect them first)");
}

void DiffEncoder::submit_delta_host(const FrameView &frame, int threshold, ValueMode mode) {
  if (in_flight_ >= kMaxInFlight)
    throw Error("difference encoder: more than " + std::to_string(kMaxInFlight) +
                " frames submitted and not collected");
  Done &d = done_[(oldest_ + in_flight_) % kMaxInFlight];
  const int saved = in_flight_;
  in_flight_ = 0;  // delta_host() itself runs with nothing in flight
  try {
    d.summary = delta_host(frame, threshold, mode, d.body);
  } catch (...) {
    in_flight_ = saved;
    throw;
  }
  in_flight_ = saved + 1;
}

DeltaSummary DiffEncoder::collect_delta(HostBytes &body) {
  if (in_flight_ == 0) throw Error("difference encoder: nothing submitted to collect");
  Done &d = done_[oldest_];
  std::swap(body, d.body);
  oldest_ = (oldest_ + 1) % kMaxInFlight;
  in_flight_--;
  return d.summary;
}

void DiffDecoder::submit_write_frame(const FrameView &out) {
  if (frames_in_flight_ >= kMaxInFlight)
    throw Error("difference decoder: more than " + std::to_string(kMaxInFlight) +
                " frames submitted and not waited for");
  write_frame(out);
  frames_in_flight_++;
}

void DiffDecoder::wait_frame() {
  if (frames_in_flight_ == 0) throw Error("difference decoder: no frame submitted to wait for");
  frames_in_flight_--;
}

size_t max_delta_body_size(size_t frame_bytes) {
  DeltaSummary all;
  all.changed_bytes = frame_bytes;
  all.changed_blocks = (frame_bytes + kBlockBytes - 1) / kBlockBytes;
  all.changed_superblocks = superblock_count(frame_bytes);
  return delta_body_size(frame_bytes, all);
}

bool parse_delta(const uint8_t *body, size_t n, size_t frame_bytes, DeltaIndex *index,
                 std::string *error, std::vector<SuperblockEntry> *entries) {
  auto fail = [&](const std::string &why) {
    if (error) *error = why;
    return false;
  };
  if (frame_bytes == 0) return fail("frame size is zero");
  if (frame_bytes > size_t(0xffffffffu)) return fail("frame too large");
  const size_t n_super = superblock_count(frame_bytes);
  const size_t n_blocks = (frame_bytes + kBlockBytes - 1) / kBlockBytes;
  DeltaIndex idx;
  idx.frame_bytes = frame_bytes;
  idx.bitmap_bytes = bitmap_bytes(frame_bytes);
  if (n < idx.bitmap_bytes) return fail("delta body shorter than its superblock bitmap");

  // Section 2 starts after the bitmap, section 3 after one mask per set bit.
  size_t supers = 0;
  for (size_t byte = 0; byte < idx.bitmap_bytes; ++byte) supers += popcount32(body[byte]);
  const uint8_t last_bits = body[idx.bitmap_bytes - 1];
  const size_t valid_in_last = n_super - 8 * (idx.bitmap_bytes - 1);  // 1..8
  if (valid_in_last < 8 && (last_bits >> valid_in_last))
    return fail("superblock bitmap names a block past the frame");
  idx.super_masks_offset = idx.bitmap_bytes;
  idx.block_masks_offset = idx.super_masks_offset + 4 * supers;
  if (n < idx.block_masks_offset) return fail("delta body truncated in its superblock masks");
  idx.summary.changed_superblocks = supers;
  if (entries) {
    entries->clear();
    entries->reserve(supers);
  }

  // One walk over the changed superblocks and their blocks, in order.
  const uint8_t *super_masks = body + idx.super_masks_offset;
  const uint8_t *block_masks = body + idx.block_masks_offset;
  const size_t max_blocks = (n - idx.block_masks_offset) / 4;  // masks that fit in the body
  size_t block = 0, value = 0, listed = 0;
  for (size_t byte = 0; byte < idx.bitmap_bytes; ++byte) {
    for (uint32_t bits = body[byte]; bits; bits &= bits - 1) {
      const size_t sb = byte * 8 + __builtin_ctz(bits);
      const uint32_t super_mask = load_u32le(super_masks + 4 * listed++);
      if (!super_mask) return fail("empty superblock mask");
      const size_t first = sb * kBlocksPerSuper;
      if (first + 32 - __builtin_clz(super_mask) > n_blocks)
        return fail("superblock mask names a block past the frame");
      const int count = popcount32(super_mask);
      if (block + count > max_blocks) return fail("delta body truncated in its block masks");
      if (entries) entries->push_back({uint32_t(sb), super_mask, uint32_t(block), uint32_t(value)});
      const size_t last_block = first + 31 - __builtin_clz(super_mask);
      for (int k = 0; k < count; ++k, ++block) {
        const uint32_t m = load_u32le(block_masks + 4 * block);
        if (!m) return fail("empty block mask");
        value += popcount32(m);
      }
      // Only the frame's last block can hold bytes past its end.
      if (last_block == n_blocks - 1 && frame_bytes % kBlockBytes) {
        const uint32_t m = load_u32le(block_masks + 4 * (block - 1));
        if (m >> (frame_bytes % kBlockBytes)) return fail("block mask names a byte past the frame");
      }
    }
  }
  idx.summary.changed_blocks = block;
  idx.summary.changed_bytes = value;
  idx.values_offset = idx.block_masks_offset + 4 * block;
  if (n != idx.values_offset + value)
    return fail("delta body size " + std::to_string(n) + " does not match its masks (" +
                std::to_string(idx.values_offset + value) + ")");
  if (entries) idx.entries = entries->data();
  *index = idx;
  return true;
}

std::unique_ptr<DiffEncoder> DiffEncoder::create(const Context &ctx, VideoFormat format, int width,
                                                 int height) {
#if CUDADIFF_HAVE_CUDA
  if (ctx.is_cuda()) return detail::make_cuda_encoder(ctx, format, width, height);
#endif
  (void)ctx;
  return std::make_unique<CpuDiffEncoder>(format, width, height);
}

std::unique_ptr<DiffDecoder> DiffDecoder::create(const Context &ctx, VideoFormat format, int width,
                                                 int height) {
#if CUDADIFF_HAVE_CUDA
  if (ctx.is_cuda()) return detail::make_cuda_decoder(ctx, format, width, height);
#endif
  (void)ctx;
  return std::make_unique<CpuDiffDecoder>(format, width, height);
}

}  // namespace diff
}  // namespace cudadiff
