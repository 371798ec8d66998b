// The difference codec on the GPU. Same bodies as cuda/cpu/diff.cpp, byte for
// byte.
//
// Encoder, per frame (the reference stays on the device):
//   1. masks: one thread per 32-byte block, one warp per 1024-byte superblock;
//      per-byte |cur - ref| > threshold with SIMD byte intrinsics; writes the
//      block's 32-bit mask and, per warp, the superblock's counts.
//      Thread blocks are tiles of 32 superblocks; each also scans its tile.
//   2. compact: each tile adds up the totals of the tiles before it, so
//      every section offset is known and the order is the CPU's; every warp
//      writes its superblock's bitmap bit (one byte per 8 superblocks); warps
//      of changed superblocks write their masks and values and update the
//      reference;
//   3. the totals (12 bytes) come back, then exactly the body's bytes.
// From host memory (delta_host, submit_delta_host), the frame is uploaded in
// slices on a second stream and step 1 runs on each slice as soon as it has
// arrived; with two frames in flight, each in its own slot (frame copy,
// body, totals), the next frame's upload overlaps this one's compaction and
// its body's way back (on a third stream).
// Decoder: the host has checked the body (parse_delta) and lists, per changed
// superblock, where its masks and values start; one warp per changed
// superblock applies them to the reference.
#include <cuda_runtime.h>

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "../src/check.h"
#include "cudadiff/diff.h"

namespace cudadiff {
namespace diff {
namespace {

constexpr int kThreads = 256;       // decoder: 8 superblocks per thread block
constexpr int kTileThreads = 1024;  // encoder: one tile of 32 superblocks (32 KiB) per block
constexpr size_t kSupersPerTile = kTileThreads / 32;
constexpr unsigned kFullWarp = 0xffffffffu;

struct Counts {
  uint32_t supers, blocks, bytes;
};

// Bit j set for every byte j of `word` that is 0xff (the result of __vcmpgtu4).
__device__ __forceinline__ uint32_t byte_bits(uint32_t word) {
  return ((word >> 7) & 1u) | ((word >> 14) & 2u) | ((word >> 21) & 4u) | ((word >> 28) & 8u);
}

__device__ __forceinline__ uint32_t changed_bits(uint32_t cur, uint32_t ref, uint32_t thr4) {
  return byte_bits(__vcmpgtu4(__vabsdiffu4(cur, ref), thr4));
}

__device__ __forceinline__ Counts warp_inclusive_scan(Counts c, int lane) {
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const uint32_t s = __shfl_up_sync(kFullWarp, c.supers, offset);
    const uint32_t b = __shfl_up_sync(kFullWarp, c.blocks, offset);
    const uint32_t y = __shfl_up_sync(kFullWarp, c.bytes, offset);
    if (lane >= offset) c = {c.supers + s, c.blocks + b, c.bytes + y};
  }
  return c;
}

__device__ __forceinline__ Counts warp_sum(Counts c) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    c.supers += __shfl_down_sync(kFullWarp, c.supers, offset);
    c.blocks += __shfl_down_sync(kFullWarp, c.blocks, offset);
    c.bytes += __shfl_down_sync(kFullWarp, c.bytes, offset);
  }
  return c;
}

// 1. One thread per block of 32 bytes, one warp per superblock, one thread
// block per tile of 32 superblocks. Writes each block's mask, each
// superblock's counts and its offset within the tile (exclusive scan of the
// tile's 32 superblocks), and the tile's totals.
__global__ void __launch_bounds__(kTileThreads)
    masks_kernel(const uint8_t *__restrict__ cur, const uint8_t *__restrict__ ref, size_t n,
                 size_t first_tile, size_t n_super, uint32_t threshold, bool vector_ok,
                 uint32_t *__restrict__ block_masks, Counts *__restrict__ counts,
                 Counts *__restrict__ local_offsets, Counts *__restrict__ tile_totals) {
  __shared__ Counts warp_counts[kSupersPerTile];
  const size_t tile = first_tile + blockIdx.x;
  const size_t block = tile * kTileThreads + threadIdx.x;
  const size_t super = block / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const size_t begin = block * kBlockBytes;
  uint32_t mask = 0;
  if (begin < n) {
    if (vector_ok && begin + kBlockBytes <= n) {
      const uint32_t thr4 = threshold * 0x01010101u;
      const uint4 *c = reinterpret_cast<const uint4 *>(cur + begin);
      const uint4 *r = reinterpret_cast<const uint4 *>(ref + begin);
      const uint4 c0 = c[0], c1 = c[1], r0 = r[0], r1 = r[1];
      mask = changed_bits(c0.x, r0.x, thr4) | changed_bits(c0.y, r0.y, thr4) << 4 |
             changed_bits(c0.z, r0.z, thr4) << 8 | changed_bits(c0.w, r0.w, thr4) << 12 |
             changed_bits(c1.x, r1.x, thr4) << 16 | changed_bits(c1.y, r1.y, thr4) << 20 |
             changed_bits(c1.z, r1.z, thr4) << 24 | changed_bits(c1.w, r1.w, thr4) << 28;
    } else {
      const size_t end = begin + kBlockBytes < n ? begin + kBlockBytes : n;
      for (size_t i = begin; i < end; ++i) {
        const int d = int(cur[i]) - int(ref[i]);
        if (d > int(threshold) || d < -int(threshold)) mask |= 1u << (i - begin);
      }
    }
  }
  const uint32_t super_mask = __ballot_sync(kFullWarp, mask != 0);
  uint32_t bytes = __popc(mask);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    bytes += __shfl_down_sync(kFullWarp, bytes, offset);
  const Counts mine{super_mask ? 1u : 0u, uint32_t(__popc(super_mask)), bytes};
  if (super < n_super) {
    block_masks[block] = mask;
    if (lane == 0) counts[super] = mine;
  }
  if (lane == 0) warp_counts[warp] = mine;  // zero for superblocks past the frame
  __syncthreads();
  if (warp == 0) {
    const Counts c = warp_counts[lane];
    const Counts inclusive = warp_inclusive_scan(c, lane);
    const size_t s = tile * kSupersPerTile + lane;
    if (s < n_super)
      local_offsets[s] = {inclusive.supers - c.supers, inclusive.blocks - c.blocks,
                          inclusive.bytes - c.bytes};
    if (lane == 31) tile_totals[tile] = inclusive;
  }
}

__device__ __forceinline__ void store_u32le(uint8_t *p, uint32_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
  p[2] = uint8_t(v >> 16);
  p[3] = uint8_t(v >> 24);
}

// 2. Same geometry as the masks. Each thread block first adds up the totals
// of the tiles before it (its offset) and of all tiles (the section sizes);
// then every warp writes its superblock's bitmap bit (one byte per 8
// superblocks) and, if it changed, its masks and values, updating the
// reference.
__global__ void __launch_bounds__(kTileThreads)
    compact_kernel(const uint8_t *__restrict__ cur, uint8_t *__restrict__ ref, size_t n,
                   bool vector_ok, size_t n_super, size_t n_tiles,
                   const uint32_t *__restrict__ block_masks, const Counts *__restrict__ counts,
                   const Counts *__restrict__ local_offsets, const Counts *__restrict__ tile_totals,
                   Counts *__restrict__ totals_out, size_t bitmap_bytes, bool deltas,
                   uint8_t *__restrict__ body) {
  __shared__ Counts partial[2][kSupersPerTile];
  __shared__ Counts tile_base, total;
  __shared__ uint8_t values_stage[kSupersPerTile][kSuperBytes];
  const size_t tile = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  Counts before{0, 0, 0}, all{0, 0, 0};
  for (size_t t = threadIdx.x; t < n_tiles; t += kTileThreads) {
    const Counts c = tile_totals[t];
    all = {all.supers + c.supers, all.blocks + c.blocks, all.bytes + c.bytes};
    if (t < tile)
      before = {before.supers + c.supers, before.blocks + c.blocks, before.bytes + c.bytes};
  }
  before = warp_sum(before);
  all = warp_sum(all);
  if (lane == 0) {
    partial[0][warp] = before;
    partial[1][warp] = all;
  }
  __syncthreads();
  if (warp == 0) {
    const Counts b = warp_sum(partial[0][lane]);
    const Counts a = warp_sum(partial[1][lane]);
    if (lane == 0) {
      tile_base = b;
      total = a;
      if (tile == 0) *totals_out = a;
    }
  }
  __syncthreads();

  const size_t block = tile * kTileThreads + threadIdx.x;
  const size_t super = block / 32;
  if (super >= n_super) return;
  if (super % 8 == 0 && lane < 8) {
    const bool changed = super + lane < n_super && counts[super + lane].supers != 0;
    const uint32_t bits = __ballot_sync(0xffu, changed);
    if (lane == 0) body[super / 8] = uint8_t(bits);
  }
  if (counts[super].supers == 0) return;  // the whole warp leaves together
  const Counts local = local_offsets[super];
  const Counts at{tile_base.supers + local.supers, tile_base.blocks + local.blocks,
                  tile_base.bytes + local.bytes};
  uint8_t *super_masks = body + bitmap_bytes;
  uint8_t *masks_out = super_masks + 4 * size_t(total.supers);
  uint8_t *values = masks_out + 4 * size_t(total.blocks);

  const uint32_t mask = block_masks[block];
  const uint32_t super_mask = __ballot_sync(kFullWarp, mask != 0);
  if (lane == 0) store_u32le(super_masks + 4 * size_t(at.supers), super_mask);

  // Position of this lane's values: exclusive sum of the popcounts before it.
  const uint32_t count = __popc(mask);
  uint32_t inclusive = count;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const uint32_t v = __shfl_up_sync(kFullWarp, inclusive, offset);
    if (lane >= offset) inclusive += v;
  }
  // The superblock's values go to shared memory first, then out in one
  // coalesced run (lanes' own runs would scatter byte stores over the warp).
  uint8_t *staged = values_stage[warp];
  const uint32_t warp_bytes = __shfl_sync(kFullWarp, inclusive, 31);
  if (mask) {
    const uint32_t lanes_before = super_mask & ((1u << lane) - 1u);
    store_u32le(masks_out + 4 * (size_t(at.blocks) + __popc(lanes_before)), mask);
    uint8_t *v = staged + (inclusive - count);
    const size_t begin = block * kBlockBytes;
    if (vector_ok && begin + kBlockBytes <= n) {
      // The block's 32 bytes in registers, the reference merged and stored whole.
      const uint4 c0 = reinterpret_cast<const uint4 *>(cur + begin)[0];
      const uint4 c1 = reinterpret_cast<const uint4 *>(cur + begin)[1];
      const uint4 r0 = reinterpret_cast<const uint4 *>(ref + begin)[0];
      const uint4 r1 = reinterpret_cast<const uint4 *>(ref + begin)[1];
      const uint32_t cw[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
      uint32_t rw[8] = {r0.x, r0.y, r0.z, r0.w, r1.x, r1.y, r1.z, r1.w};
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        if (mask >> j & 1u) {
          const uint32_t c = (cw[j / 4] >> (8 * (j % 4))) & 0xffu;
          const uint32_t r = (rw[j / 4] >> (8 * (j % 4))) & 0xffu;
          *v++ = deltas ? uint8_t(c - r) : uint8_t(c);
        }
      }
#pragma unroll
      for (int w = 0; w < 8; ++w) {
        const uint32_t bits = (mask >> (4 * w)) & 0xfu;
        const uint32_t select = (bits & 1u ? 0xffu : 0u) | (bits & 2u ? 0xff00u : 0u) |
                                (bits & 4u ? 0xff0000u : 0u) | (bits & 8u ? 0xff000000u : 0u);
        rw[w] = (cw[w] & select) | (rw[w] & ~select);
      }
      reinterpret_cast<uint4 *>(ref + begin)[0] = make_uint4(rw[0], rw[1], rw[2], rw[3]);
      reinterpret_cast<uint4 *>(ref + begin)[1] = make_uint4(rw[4], rw[5], rw[6], rw[7]);
    } else {
      for (uint32_t m = mask; m; m &= m - 1) {
        const size_t i = begin + __ffs(m) - 1;
        const uint8_t c = cur[i];
        *v++ = deltas ? uint8_t(c - ref[i]) : c;
        ref[i] = c;
      }
    }
  }
  __syncwarp();
  uint8_t *out = values + size_t(at.bytes);
  for (uint32_t k = lane; k < warp_bytes; k += 32) out[k] = staged[k];
}

// Decoder: one warp per changed superblock.

__global__ void apply_kernel(uint8_t *__restrict__ ref, size_t n,
                             const SuperblockEntry *__restrict__ entries, size_t n_entries,
                             const uint8_t *__restrict__ block_masks,
                             const uint8_t *__restrict__ values, bool deltas) {
  __shared__ uint8_t values_stage[kThreads / 32][kSuperBytes];
  const size_t warp = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (warp >= n_entries) return;
  const int lane = threadIdx.x & 31;
  const SuperblockEntry e = entries[warp];
  uint32_t mask = 0;
  const uint32_t lanes_before = e.super_mask & ((1u << lane) - 1u);
  if (e.super_mask >> lane & 1u) {
    const uint8_t *p = block_masks + 4 * (size_t(e.first_block) + __popc(lanes_before));
    mask = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  }
  const uint32_t count = __popc(mask);
  uint32_t inclusive = count;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const uint32_t v = __shfl_up_sync(kFullWarp, inclusive, offset);
    if (lane >= offset) inclusive += v;
  }
  // The superblock's values come in with one coalesced read into shared
  // memory; each lane then takes its own run from there.
  const uint32_t warp_bytes = __shfl_sync(kFullWarp, inclusive, 31);
  uint8_t *staged = values_stage[threadIdx.x / 32];
  const uint8_t *in = values + size_t(e.first_value);
  for (uint32_t k = lane; k < warp_bytes; k += 32) staged[k] = in[k];
  __syncwarp();
  if (!mask) return;
  const uint8_t *v = staged + (inclusive - count);
  const size_t begin = (size_t(e.super) * kBlocksPerSuper + lane) * kBlockBytes;
  if (begin + kBlockBytes <= n) {
    // The reference block in registers, merged with the values, stored whole
    // (the reference is 256-byte aligned, blocks are 32 bytes).
    uint4 *r4 = reinterpret_cast<uint4 *>(ref + begin);
    const uint4 a = r4[0], b = r4[1];
    uint32_t rw[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      if (mask >> j & 1u) {
        const uint32_t shift = 8 * (j % 4);
        const uint32_t old = (rw[j / 4] >> shift) & 0xffu;
        const uint32_t nv = deltas ? ((old + *v) & 0xffu) : *v;
        ++v;
        rw[j / 4] = (rw[j / 4] & ~(0xffu << shift)) | (nv << shift);
      }
    }
    r4[0] = make_uint4(rw[0], rw[1], rw[2], rw[3]);
    r4[1] = make_uint4(rw[4], rw[5], rw[6], rw[7]);
    return;
  }
  for (uint32_t m = mask; m; m &= m - 1) {
    const size_t i = begin + __ffs(m) - 1;
    if (i < n) ref[i] = deltas ? uint8_t(ref[i] + *v) : *v;  // parse_delta excluded i >= n
    ++v;
  }
}

bool is_pinned(const void *p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
}

unsigned grid_for(size_t threads) {
  return static_cast<unsigned>((threads + kThreads - 1) / kThreads);
}

void check_frame(const FrameView &frame, VideoFormat format, int width, int height,
                 const char *what) {
  validate(frame, what);
  if (frame.format != format || frame.width != width || frame.height != height)
    throw Error(std::string(what) + ": frame does not match the codec's format and size");
}

size_t checked_frame_bytes(VideoFormat format, int width, int height) {
  if (format_info(format).n_planes == 0) throw Error("difference codec: unknown video format");
  if (width <= 0 || height <= 0) throw Error("difference codec: empty frame size");
  return frame_size_packed(format, width, height);
}

// An event that records where a stream is, so another can wait for it.
class Event {
 public:
  Event() { CUDADIFF_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event &) = delete;
  Event &operator=(const Event &) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

class CudaDiffEncoder final : public DiffEncoder {
 public:
  CudaDiffEncoder(const Context &ctx, VideoFormat format, int width, int height)
      : ctx_(ctx), format_(format), width_(width), height_(height) {
    frame_bytes_ = checked_frame_bytes(format, width, height);
    n_super_ = superblock_count(frame_bytes_);
    if (n_super_ * kBlocksPerSuper > 0x7fffffffu / 2)
      throw Error("difference codec: frame too large");
    ctx.activate();
    stream_ = static_cast<cudaStream_t>(ctx.stream_handle());
    upload_stream_ = std::make_unique<Stream>(ctx.gpu_id());
    for (auto &e : slice_done_) e = std::make_unique<Event>();
    reference_ = DeviceBuffer(frame_bytes_);
    block_masks_ = DeviceBuffer(n_super_ * kBlocksPerSuper * sizeof(uint32_t));
    n_tiles_ = (n_super_ + kSupersPerTile - 1) / kSupersPerTile;
    counts_ = DeviceBuffer(n_super_ * sizeof(Counts));
    local_offsets_ = DeviceBuffer(n_super_ * sizeof(Counts));
    tile_totals_ = DeviceBuffer(n_tiles_ * sizeof(Counts));
    // One body, its totals and their copy on the host per frame in flight
    // (slot 0 serves the calls that wait).
    for (Slot &slot : slots_) {
      slot.totals = DeviceBuffer(sizeof(Counts));
      slot.host_totals = HostBytes(sizeof(Counts));
      slot.done = std::make_unique<Event>();
    }
    slots_[0].body = DeviceBuffer(max_delta_body_size(frame_bytes_));
    download_stream_ = std::make_unique<Stream>(ctx.gpu_id());
  }

  void keyframe(const FrameView &frame, HostBytes &body) override {
    check_idle("keyframe");
    check_frame(frame, format_, width_, height_, "encoder input");
    ctx_.activate();
    copy_device_to_device(frame, reference_view(), ctx_);
    download_reference(body);
  }

  void keyframe_host(const FrameView &frame, HostBytes &body) override {
    check_idle("keyframe_host");
    check_frame(frame, format_, width_, height_, "encoder input");
    ctx_.activate();
    copy_to_device(frame, reference_view(), ctx_);
    download_reference(body);
  }

  void queue_delta(const FrameView &frame, int threshold, ValueMode mode) override {
    check_idle("queue_delta");
    check_frame(frame, format_, width_, height_, "encoder input");
    check_threshold(threshold);
    ctx_.activate();
    const uint8_t *cur = frame.data[0];
    if (!is_packed(frame)) {
      // A strided device frame: packed into current_, on the main stream only.
      if (current_.size() == 0) current_ = DeviceBuffer(frame_bytes_);
      copy_device_to_device(frame, packed_view(format_, width_, height_, current_.data()), ctx_);
      cur = current_.data();
    }
    launch_masks(cur, 0, n_tiles_, threshold);
    launch_compaction(cur, mode, slots_[0]);
  }

  DeltaSummary delta(const FrameView &frame, int threshold, ValueMode mode,
                     HostBytes &body) override {
    queue_delta(frame, threshold, mode);
    return download_body(slots_[0], body);
  }

  DeltaSummary delta_host(const FrameView &frame, int threshold, ValueMode mode,
                          HostBytes &body) override {
    check_idle("delta_host");
    submit_delta_host(frame, threshold, mode);
    return collect_delta(body);
  }

  // Nothing waits on the host. Each slot has its own copy of the frame and
  // its own body, so frame N+1 crosses the bus while frame N is compared
  // and compacted; the upload into a slot waits (on the GPU) for the last
  // frame that used the slot, the comparison for the previous frame's
  // compaction (main stream order: the reference it updates), and the
  // slot's event marks its totals on the host.
  void submit_delta_host(const FrameView &frame, int threshold, ValueMode mode) override {
    if (in_flight_ >= kMaxInFlight)
      throw Error("difference encoder: more than " + std::to_string(kMaxInFlight) +
                  " frames submitted and not collected");
    check_frame(frame, format_, width_, height_, "encoder input");
    check_threshold(threshold);
    ctx_.activate();
    Slot &slot = slots_[(oldest_ + in_flight_) % kMaxInFlight];
    if (slot.body.size() == 0) slot.body = DeviceBuffer(max_delta_body_size(frame_bytes_));
    if (slot.current.size() == 0) slot.current = DeviceBuffer(frame_bytes_);
    upload_and_compare(frame, threshold, slot);
    launch_compaction(slot.current.data(), mode, slot);
    CUDADIFF_CHECK(cudaMemcpyAsync(slot.host_totals.data(), slot.totals.data(), sizeof(Counts),
                                   cudaMemcpyDeviceToHost, stream_));
    CUDADIFF_CHECK(cudaEventRecord(slot.done->get(), stream_));
    in_flight_++;
  }

  // Waits for the oldest frame's totals, then brings exactly its body back
  // on a stream of its own (the main stream may hold the next frame's work).
  DeltaSummary collect_delta(HostBytes &body) override {
    if (in_flight_ == 0) throw Error("difference encoder: nothing submitted to collect");
    ctx_.activate();
    Slot &slot = slots_[oldest_];
    // Whatever happens below, the slot is no longer in flight.
    oldest_ = (oldest_ + 1) % kMaxInFlight;
    in_flight_--;
    CUDADIFF_CHECK(cudaEventSynchronize(slot.done->get()));
    const DeltaSummary s = summary_of(slot);
    const size_t size = delta_body_size(frame_bytes_, s);
    body.resize(size);
    cudaStream_t download = static_cast<cudaStream_t>(download_stream_->handle());
    CUDADIFF_CHECK(cudaStreamWaitEvent(download, slot.done->get(), 0));
    CUDADIFF_CHECK(
        cudaMemcpyAsync(body.data(), slot.body.data(), size, cudaMemcpyDeviceToHost, download));
    download_stream_->synchronize();
    return s;
  }

  void read_reference(HostBytes &out) override {
    ctx_.activate();
    download_reference(out);
  }

 private:
  FrameView reference_view() const {
    return packed_view(format_, width_, height_, reference_.data());
  }

  static void check_threshold(int threshold) {
    if (threshold < 0 || threshold > 255) throw Error("threshold must be within 0..255");
  }

  void launch_masks(const uint8_t *cur, size_t first_tile, size_t end_tile, int threshold) {
    if (end_tile <= first_tile) return;
    const bool vector_ok = (reinterpret_cast<uintptr_t>(cur) & 15u) == 0;
    masks_kernel<<<static_cast<unsigned>(end_tile - first_tile), kTileThreads, 0, stream_>>>(
        cur, reference_.data(), frame_bytes_, first_tile, n_super_, uint32_t(threshold), vector_ok,
        block_masks_.as<uint32_t>(), counts_.as<Counts>(), local_offsets_.as<Counts>(),
        tile_totals_.as<Counts>());
    CUDADIFF_CHECK_LAUNCH("difference masks kernel");
  }

  struct Slot {
    DeviceBuffer current, body, totals;  // the frame (delta_host), its body, its counts
    HostBytes host_totals;
    std::unique_ptr<Event> done;
  };

  static DeltaSummary summary_of(const Slot &slot) {
    Counts totals;
    std::memcpy(&totals, slot.host_totals.data(), sizeof totals);
    DeltaSummary s;
    s.changed_superblocks = totals.supers;
    s.changed_blocks = totals.blocks;
    s.changed_bytes = totals.bytes;
    return s;
  }

  void launch_compaction(const uint8_t *cur, ValueMode mode, Slot &slot) {
    const bool vector_ok = (reinterpret_cast<uintptr_t>(cur) & 15u) == 0;
    compact_kernel<<<static_cast<unsigned>(n_tiles_), kTileThreads, 0, stream_>>>(
        cur, reference_.data(), frame_bytes_, vector_ok, n_super_, n_tiles_,
        block_masks_.as<uint32_t>(), counts_.as<Counts>(), local_offsets_.as<Counts>(),
        tile_totals_.as<Counts>(), slot.totals.as<Counts>(), bitmap_bytes(frame_bytes_),
        mode == ValueMode::Deltas, slot.body.data());
    CUDADIFF_CHECK_LAUNCH("difference compact kernel");
  }

  // Copies the host frame into the slot's frame slice by slice on the upload
  // stream; the main stream compares every slice once it is there.
  void upload_and_compare(const FrameView &host, int threshold, Slot &slot) {
    if (is_device_memory(host.data[0])) {
      // Already on the GPU (a device-resident pipeline): one copy on the main
      // stream, after the work that wrote the frame there and after the last
      // compaction that read the slot.
      copy_device_to_device(host, packed_view(format_, width_, height_, slot.current.data()), ctx_);
      launch_masks(slot.current.data(), 0, n_tiles_, threshold);
      return;
    }
    cudaStream_t upload = static_cast<cudaStream_t>(upload_stream_->handle());
    // The slot's frame may still be read by the compaction of the last frame
    // that used the slot (its event follows that compaction; an event never
    // recorded makes this a no-op).
    CUDADIFF_CHECK(cudaStreamWaitEvent(upload, slot.done->get(), 0));
    const size_t slice_target = std::max<size_t>(frame_bytes_ / kSlices, 256 * 1024);
    const FrameView dst = packed_view(format_, width_, height_, slot.current.data());
    size_t uploaded = 0, compared_tiles = 0;
    int slice = 0;
    const int planes = host.n_planes();
    for (int p = 0; p < planes; ++p) {
      const size_t row = host.row_bytes(p);
      const int rows = host.plane_height(p);
      const int rows_per_slice = static_cast<int>(std::max<size_t>(1, slice_target / row));
      for (int y = 0; y < rows; y += rows_per_slice) {
        const int n = std::min(rows_per_slice, rows - y);
        if (host.stride[p] == row)  // contiguous rows: one linear copy
          CUDADIFF_CHECK(cudaMemcpyAsync(dst.row(p, y), host.row(p, y), row * n,
                                         cudaMemcpyHostToDevice, upload));
        else
          CUDADIFF_CHECK(cudaMemcpy2DAsync(dst.row(p, y), dst.stride[p], host.row(p, y),
                                           host.stride[p], row, n, cudaMemcpyHostToDevice, upload));
        uploaded += row * n;
        const bool last = p == planes - 1 && y + n >= rows;
        // Compare what has arrived, in whole tiles (all of it at the end), in at
        // most kSlices launches.
        const size_t ready_tiles = last ? n_tiles_ : uploaded / (kSuperBytes * kSupersPerTile);
        if (ready_tiles > compared_tiles && (last || slice < kSlices - 1)) {
          const Event &ev = *slice_done_[slice++];
          CUDADIFF_CHECK(cudaEventRecord(ev.get(), upload));
          CUDADIFF_CHECK(cudaStreamWaitEvent(stream_, ev.get(), 0));
          launch_masks(slot.current.data(), compared_tiles, ready_tiles, threshold);
          compared_tiles = ready_tiles;
        }
      }
    }
  }

  DeltaSummary download_body(Slot &slot, HostBytes &body) {
    CUDADIFF_CHECK(cudaMemcpyAsync(slot.host_totals.data(), slot.totals.data(), sizeof(Counts),
                                   cudaMemcpyDeviceToHost, stream_));
    ctx_.synchronize();
    const DeltaSummary s = summary_of(slot);
    const size_t size = delta_body_size(frame_bytes_, s);
    body.resize(size);
    CUDADIFF_CHECK(
        cudaMemcpyAsync(body.data(), slot.body.data(), size, cudaMemcpyDeviceToHost, stream_));
    ctx_.synchronize();
    return s;
  }

  void download_reference(HostBytes &body) {
    body.resize(frame_bytes_);
    CUDADIFF_CHECK(cudaMemcpyAsync(body.data(), reference_.data(), frame_bytes_,
                                   cudaMemcpyDeviceToHost, stream_));
    ctx_.synchronize();
  }

  static constexpr int kSlices = 4;
  const Context &ctx_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Stream> upload_stream_;
  std::unique_ptr<Event> slice_done_[kSlices];
  VideoFormat format_;
  int width_, height_;
  size_t n_super_ = 0, n_tiles_ = 0;
  // current_: a strided device frame packed for queue_delta() (main stream only).
  DeviceBuffer reference_, current_, block_masks_, counts_, local_offsets_, tile_totals_;
  Slot slots_[kMaxInFlight];
  std::unique_ptr<Stream> download_stream_;
};

class CudaDiffDecoder final : public DiffDecoder {
 public:
  CudaDiffDecoder(const Context &ctx, VideoFormat format, int width, int height)
      : ctx_(ctx), format_(format), width_(width), height_(height) {
    frame_bytes_ = checked_frame_bytes(format, width, height);
    const size_t n_super = superblock_count(frame_bytes_);
    ctx.activate();
    stream_ = static_cast<cudaStream_t>(ctx.stream_handle());
    reference_ = DeviceBuffer(frame_bytes_);
    CUDADIFF_CHECK(cudaMemsetAsync(reference_.data(), 0, frame_bytes_, stream_));
    body_ = DeviceBuffer(max_delta_body_size(frame_bytes_));
    entries_ = DeviceBuffer(n_super * sizeof(SuperblockEntry));
    host_entries_ = HostBytes(n_super * sizeof(SuperblockEntry));
    uploads_done_ = std::make_unique<Event>();
  }

  void keyframe(const uint8_t *body) override {
    ctx_.activate();
    wait_for_uploads();
    CUDADIFF_CHECK(
        cudaMemcpyAsync(reference_.data(), body, frame_bytes_, cudaMemcpyHostToDevice, stream_));
    ctx_.synchronize();  // `body` is the caller's: done with it on return (keyframes are rare)
  }

  void delta(const uint8_t *body, const DeltaIndex &index, ValueMode mode) override {
    if (index.frame_bytes != frame_bytes_) throw Error("delta body is for another frame size");
    ctx_.activate();
    wait_for_uploads();  // the staging buffers may still be in use by the last copy
    // Where each changed superblock's masks and values start: from the
    // reader's parse_delta() when it listed them, else listed here.
    const SuperblockEntry *list = index.entries;
    if (!list) {
      DeltaIndex again;
      std::string err;
      if (!parse_delta(body, index.values_offset + index.summary.changed_bytes, frame_bytes_,
                       &again, &err, &own_entries_))
        throw Error("delta body: " + err);
      list = own_entries_.data();
    }
    const size_t n_entries = index.summary.changed_superblocks;
    std::memcpy(host_entries_.data(), list, n_entries * sizeof(SuperblockEntry));
    const uint8_t *block_masks = body + index.block_masks_offset;
    if (n_entries == 0) return;
    // Masks and values: straight from pinned memory (the caller keeps it
    // until write_frame), else through our pinned staging so that the copy is
    // a real asynchronous DMA and the caller may reuse its memory at once.
    const size_t tail =
        index.values_offset + index.summary.changed_bytes - index.block_masks_offset;
    const uint8_t *source = block_masks;
    if (!is_pinned(block_masks)) {
      staging_.resize(tail);
      std::memcpy(staging_.data(), block_masks, tail);
      source = staging_.data();
    }
    CUDADIFF_CHECK(cudaMemcpyAsync(body_.data(), source, tail, cudaMemcpyHostToDevice, stream_));
    CUDADIFF_CHECK(cudaMemcpyAsync(entries_.data(), host_entries_.data(),
                                   n_entries * sizeof(SuperblockEntry), cudaMemcpyHostToDevice,
                                   stream_));
    CUDADIFF_CHECK(cudaEventRecord(uploads_done_->get(), stream_));
    uploads_pending_ = true;
    const size_t values_at = index.values_offset - index.block_masks_offset;
    apply_kernel<<<grid_for(n_entries * 32), kThreads, 0, stream_>>>(
        reference_.data(), frame_bytes_, entries_.as<SuperblockEntry>(), n_entries, body_.data(),
        body_.data() + values_at, mode == ValueMode::Deltas);
    CUDADIFF_CHECK_LAUNCH("difference apply kernel");
  }

  void write_frame(const FrameView &out) override {
    check_frame(out, format_, width_, height_, "decoder output");
    ctx_.activate();
    copy_to_host(packed_view(format_, width_, height_, reference_.data()), out, ctx_);
    ctx_.synchronize();
    uploads_pending_ = false;
  }

  void finish_uploads() override {
    ctx_.activate();
    wait_for_uploads();
  }

  void submit_write_frame(const FrameView &out) override {
    if (frames_in_flight_ >= kMaxInFlight)
      throw Error("difference decoder: more than " + std::to_string(kMaxInFlight) +
                  " frames submitted and not waited for");
    check_frame(out, format_, width_, height_, "decoder output");
    ctx_.activate();
    copy_to_host(packed_view(format_, width_, height_, reference_.data()), out, ctx_);
    const int slot = (oldest_frame_ + frames_in_flight_) % kMaxInFlight;
    if (!frame_done_[slot]) frame_done_[slot] = std::make_unique<Event>();
    CUDADIFF_CHECK(cudaEventRecord(frame_done_[slot]->get(), stream_));
    frames_in_flight_++;
  }

  void wait_frame() override {
    if (frames_in_flight_ == 0) throw Error("difference decoder: no frame submitted to wait for");
    ctx_.activate();
    const int slot = oldest_frame_;
    oldest_frame_ = (oldest_frame_ + 1) % kMaxInFlight;
    frames_in_flight_--;
    CUDADIFF_CHECK(cudaEventSynchronize(frame_done_[slot]->get()));
  }

 private:
  // The staging buffers may still be read by the last delta's copies: wait
  // for those copies only (an event after them), not for the stream, which
  // may hold a frame on its way down.
  void wait_for_uploads() {
    if (uploads_pending_) {
      CUDADIFF_CHECK(cudaEventSynchronize(uploads_done_->get()));
      uploads_pending_ = false;
    }
  }

  const Context &ctx_;
  cudaStream_t stream_ = nullptr;
  VideoFormat format_;
  int width_, height_;
  DeviceBuffer reference_, body_, entries_;
  HostBytes host_entries_, staging_;
  std::vector<SuperblockEntry> own_entries_;
  bool uploads_pending_ = false;
  std::unique_ptr<Event> uploads_done_;              // made once the device is current
  std::unique_ptr<Event> frame_done_[kMaxInFlight];  // per frame in flight, made on first use
  int oldest_frame_ = 0;
};

}  // namespace
}  // namespace diff

namespace diff {
namespace detail {
std::unique_ptr<DiffEncoder> make_cuda_encoder(const Context &ctx, VideoFormat format, int width,
                                               int height) {
  return std::make_unique<CudaDiffEncoder>(ctx, format, width, height);
}
std::unique_ptr<DiffDecoder> make_cuda_decoder(const Context &ctx, VideoFormat format, int width,
                                               int height) {
  return std::make_unique<CudaDiffDecoder>(ctx, format, width, height);
}
}  // namespace detail
}  // namespace diff
}  // namespace cudadiff
