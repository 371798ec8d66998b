// The difference codec, version 2: the decoder on the GPU. The same pictures
// as the CPU reference (cuda/cpu/codec2.cpp), byte for byte, and the same
// bodies refused (docs/stream-format.md, "Version 2: the body").
//
// Per body:
//   1. the host reads the header, the tables and the tile table with the
//      reference's own code (codec2_body.h), so both backends refuse the same
//      bodies there; the tile list, each table's cumulative frequencies and
//      the payloads go to the device in one copy;
//   2. slot_tables_kernel: per used table, the token of each of its 4096 slots;
//   3. decode_tiles_kernel: one warp per tile, one thread per rANS lane.
//      Block modes in rounds of `lanes` blocks, then each layer in the
//      wavefront order of the spec: per step and component every lane
//      decodes its token by slot lookup, the lanes' renormalisation bytes
//      are handed out in lane order by a prefix sum over the warp (two
//      ballots: who needs one byte, who needs two), then the raw bits
//      likewise. Skipped and raw tiles are copies.
//   4. one flag comes back: the picture (two device buffers in the
//      canonical byte order) is swapped only when every tile decoded.
// A tile that fails stops at once (the CPU decoder goes on to its end but
// refuses the body all the same).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../src/check.h"
#include "cudadiff/codec2.h"
#include "cudadiff/codec2_body.h"
#include "cudadiff/codec2_rules.h"

namespace cudadiff {
namespace codec2 {
namespace {

constexpr unsigned kFullWarp = 0xffffffffu;

// A layer as the kernel addresses it: channel c of sample (x, y) is byte
// chan_at[c] + y * chan_stride[c] + x * chan_step[c] of a picture.
struct LayerDev {
  int width, height, channels, ycocg, sx, sy;
  uint32_t chan_at[kMaxComps];
  uint32_t chan_stride[kMaxComps];
  int chan_step[kMaxComps];
  int base[kClasses][kMaxComps];  // first distribution of each class and component
};

struct TileDev {
  int type, lanes;
  uint32_t offset, size;  // payload, from the first tile's
  int bx0, by0, bx1, by1;
  int x0[kMaxLayers], y0[kMaxLayers], w[kMaxLayers], h[kMaxLayers];
};

struct Params {
  const uint8_t *ref;
  uint8_t *rec;
  int16_t *work[kMaxLayers];  // per sample: S-domain components, then T-domain ones
  uint8_t *modes;             // per block of the frame
  const uint8_t *payload;
  const TileDev *tiles;
  const uint32_t *sym;        // per distribution and token: cum | freq << 16
  const uint8_t *slot_token;  // per distribution and slot: the token
  const uint8_t *used;        // per distribution
  uint32_t *failed;           // tiles that failed
  int k, keyframe, blocks_x, mode_dist, n_layers;
  LayerDev layer[kMaxLayers];
};

__device__ __forceinline__ uint8_t *chan_ptr(uint8_t *pic, const LayerDev &L, int c, int x, int y) {
  return pic + L.chan_at[c] + size_t(y) * L.chan_stride[c] + size_t(x) * L.chan_step[c];
}
__device__ __forceinline__ const uint8_t *chan_ptr(const uint8_t *pic, const LayerDev &L, int c,
                                                   int x, int y) {
  return pic + L.chan_at[c] + size_t(y) * L.chan_stride[c] + size_t(x) * L.chan_step[c];
}

// Per used distribution (one thread block each), the token of every slot.
__global__ void slot_tables_kernel(const uint32_t *__restrict__ sym,
                                   const uint8_t *__restrict__ used,
                                   uint8_t *__restrict__ slot_token) {
  const int d = blockIdx.x;
  if (!used[d]) return;
  __shared__ uint32_t s[kTokens];
  if (threadIdx.x < kTokens) s[threadIdx.x] = sym[d * kTokens + threadIdx.x];
  __syncthreads();
  for (int slot = threadIdx.x; slot < int(kProbScale); slot += blockDim.x) {
    int token = 0;
    for (int t = 0; t < kTokens; ++t)
      if ((s[t] >> 16) != 0 && int(s[t] & 0xffff) <= slot) token = t;
    slot_token[size_t(d) * kProbScale + slot] = uint8_t(token);
  }
}

// Renormalises the lanes that are `active` (every thread of the warp calls
// it): each lane needs 0, 1 or 2 bytes (its state is at least 2^11 after a
// step), handed out in lane order from `pos`. False (the same in every
// lane) when the payload has too few.
__device__ __forceinline__ bool renorm(uint32_t &x, bool active, const uint8_t *__restrict__ p,
                                       uint32_t &pos, uint32_t end, unsigned lane_mask_lt) {
  const uint32_t n = !active ? 0u : x < (1u << 15) ? 2u : x < kRansLow ? 1u : 0u;
  const uint32_t one = __ballot_sync(kFullWarp, n & 1u), two = __ballot_sync(kFullWarp, n & 2u);
  if ((one | two) == 0) return true;
  const uint32_t total = __popc(one) + 2u * __popc(two);
  if (end - pos < total) return false;
  if (n) {
    const uint32_t at = pos + __popc(one & lane_mask_lt) + 2u * __popc(two & lane_mask_lt);
    x = n == 1 ? (x << 8) | p[at] : (x << 16) | uint32_t(p[at]) << 8 | p[at + 1];
  }
  pos += total;
  return true;
}

// The token of a table symbol from lane state x (the step without renormalisation).
__device__ __forceinline__ int decode_symbol(uint32_t &x, const Params &P, int d) {
  const uint32_t slot = x & (kProbScale - 1);
  const int token = P.slot_token[size_t(d) * kProbScale + slot];
  const uint32_t e = P.sym[d * kTokens + token];
  x = (e >> 16) * (x >> kProbBits) + slot - (e & 0xffff);
  return token;
}

template <int NC, bool YCOCG>
__device__ __forceinline__ void to_components_dev(const int *ch, int *comp) {
  if (YCOCG) {
    ycocg_forward(ch[0], ch[1], ch[2], &comp[0], &comp[1], &comp[2]);
    if (NC == 4) comp[3] = ch[3];
  } else {
    for (int c = 0; c < NC; ++c) comp[c] = ch[c];
  }
}
template <int NC, bool YCOCG>
__device__ __forceinline__ void to_channels_dev(const int *comp, int *ch) {
  if (YCOCG) {
    ycocg_inverse(comp[0], comp[1], comp[2], &ch[0], &ch[1], &ch[2]);
    if (NC == 4) ch[3] = comp[3];
  } else {
    for (int c = 0; c < NC; ++c) ch[c] = comp[c];
  }
}

// Working values of sample (x, y) from its reconstruction (and the
// reference for the T-domain), at wp.
template <int NC, bool YCOCG, bool KEY>
__device__ __forceinline__ void store_working(const Params &P, const LayerDev &L, int x, int y,
                                              int16_t *wp) {
  int ch[NC], comp[NC], rv[NC];
  for (int c = 0; c < NC; ++c) {
    rv[c] = *chan_ptr(P.rec, L, c, x, y);
    ch[c] = quant_index(rv[c], P.k);
  }
  to_components_dev<NC, YCOCG>(ch, comp);
  for (int c = 0; c < NC; ++c) wp[c] = int16_t(comp[c]);
  if constexpr (!KEY) {
    for (int c = 0; c < NC; ++c) ch[c] = quant_diff(rv[c] - int(*chan_ptr(P.ref, L, c, x, y)), P.k);
    to_components_dev<NC, YCOCG>(ch, comp);
    for (int c = 0; c < NC; ++c) wp[NC + c] = int16_t(comp[c]);
  }
}

// One layer of a coded tile (the warp together; `lane` < `lanes` are the
// tile's rANS lanes). False when the tile is damaged.
template <int NC, bool YCOCG, bool KEY>
__device__ bool decode_layer(const Params &P, const TileDev &t, int l, int lanes, int lane,
                             unsigned lt, uint32_t &x, uint32_t &h, const uint8_t *p, uint32_t &pos,
                             bool has_skipped) {
  constexpr int W2 = 2 * NC;
  const LayerDev &L = P.layer[l];
  const int w = t.w[l], hh = t.h[l], x0 = t.x0[l], y0 = t.y0[l];
  const size_t wstride = size_t(L.width) * W2;
  int16_t *work = P.work[l];
  const int step = 2 * P.k + 1;
  const int max_idx = max_index(P.k);

  // Skipped samples: the reference's bytes and their working values.
  if (!KEY && has_skipped) {
    for (int idx = lane; idx < w * hh; idx += 32) {
      const int i = idx % w, j = idx / w, sxp = x0 + i, syp = y0 + j;
      const int mode = P.modes[((syp << L.sy) / kBlock) * P.blocks_x + ((sxp << L.sx) / kBlock)];
      if (mode != kSkip) continue;
      for (int c = 0; c < NC; ++c)
        *chan_ptr(P.rec, L, c, sxp, syp) = *chan_ptr(P.ref, L, c, sxp, syp);
      int16_t *wp = work + (size_t(syp) * L.width + sxp) * W2;
      int ch[NC], comp[NC];
      for (int c = 0; c < NC; ++c) ch[c] = quant_index(*chan_ptr(P.ref, L, c, sxp, syp), P.k);
      to_components_dev<NC, YCOCG>(ch, comp);
      for (int c = 0; c < NC; ++c) {
        wp[c] = int16_t(comp[c]);
        wp[NC + c] = 0;
      }
    }
    __syncwarp();
  }

  const int period = schedule_period(w, lanes);
  const int steps = schedule_steps(w, hh, lanes);
  const bool is_lane = lane < lanes;
  int ci = -kStagger * lane, cj = lane;
  const uint32_t end = t.size;
  const int tex = YCOCG ? 1 : 0;  // the texture channel: G, else the first
  for (int st = 0; st < steps; ++st) {
    const int i = ci, j = cj;
    if (++ci == period) {
      ci = 0;
      cj += lanes;
    }
    bool active = is_lane && i >= 0 && i < w && j < hh;
    const int sxp = x0 + i, syp = y0 + j;
    int cls = kClassSpatial, rclass = 0;
    if (active && !KEY) {
      const int mode = P.modes[((syp << L.sy) / kBlock) * P.blocks_x + ((sxp << L.sx) / kBlock)];
      if (mode == kSkip) {
        active = false;
      } else {
        cls = mode_class(mode);
        if (mode == kTemporal) {
          const int v = *chan_ptr(P.ref, L, tex, sxp, syp);
          const int xl = sxp > 0 ? sxp - 1 : sxp, xr = sxp + 1 < L.width ? sxp + 1 : sxp;
          const int yu = syp > 0 ? syp - 1 : syp, yd = syp + 1 < L.height ? syp + 1 : syp;
          const int g = iabs(int(*chan_ptr(P.ref, L, tex, xl, syp)) - v) +
                        iabs(int(*chan_ptr(P.ref, L, tex, xr, syp)) - v) +
                        iabs(int(*chan_ptr(P.ref, L, tex, sxp, yu)) - v) +
                        iabs(int(*chan_ptr(P.ref, L, tex, sxp, yd)) - v);
          rclass = ref_class(g, P.k);
        }
      }
    }
    if (__ballot_sync(kFullWarp, active) == 0) continue;
    int16_t *wp = work + (size_t(syp) * L.width + sxp) * W2;
    int value[NC];
    int cross = 0;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      int pred = 0, token = 0;
      bool flip = false, bad = false;
      if (active) {
        // Neighbours in the class's domain, with the tile's edge rules.
        const int16_t *q = wp + (cls == kClassSpatial ? 0 : NC) + c;
        int a, b, cc, d;
        if (j == 0) {
          a = i > 0 ? q[-W2] : 0;
          b = cc = d = a;
        } else {
          b = q[-wstride];
          if (i > 0) {
            a = q[-W2];
            cc = q[-wstride - W2];
          } else {
            a = cc = b;
          }
          d = i + 1 < w ? q[-wstride + W2] : b;
        }
        int ctx;
        if (cls == kClassTemporal) {
          ctx = activity_bucket(temporal_activity(a, b, cc, d));
        } else {
          pred = med(a, b, cc);
          ctx = activity_bucket(spatial_activity(a, b, cc, d));
        }
        if (c > 0) ctx += cross;
        if (cls == kClassTemporal && c == 0) ctx = ctx * kRefClasses + rclass;
        flip = flip_sign(cls, a, b, cc, d);
        const int dist = L.base[cls][c] + ctx;
        if (!P.used[dist]) {
          bad = true;
        } else {
          token = decode_symbol(x, P, dist);
          h = lane_checksum(h, uint32_t(token));
        }
      }
      if (__any_sync(kFullWarp, bad)) return false;
      if (!renorm(x, active, p, pos, end, lt)) return false;
      const bool extra = active && token >= kDirectTokens;
      uint32_t v = uint32_t(token);
      if (__any_sync(kFullWarp, extra)) {
        const int nbits = extra ? token_extra_bits(token) : 0;
        const uint32_t bits = x & ((1u << nbits) - 1);
        x >>= nbits;
        if (!renorm(x, extra, p, pos, end, lt)) return false;
        if (extra) {
          h = lane_checksum(h, bits);
          v = token_value(token, bits);
        }
      }
      int r = unzigzag(v);
      if (flip) r = -r;
      if (c == 0) {
        const int m = iabs(r);
        cross = kActivityBuckets * (m >= kCrossLevels ? kCrossLevels - 1 : m);
      }
      value[c] = pred + r;
    }
    // Reconstruction and the sample's working values.
    bool bad = false;
    if (active) {
      int ch[NC];
      to_channels_dev<NC, YCOCG>(value, ch);
      if (cls == kClassSpatial) {
        for (int c = 0; c < NC; ++c) {
          if (ch[c] < 0 || ch[c] > max_idx) bad = true;
          *chan_ptr(P.rec, L, c, sxp, syp) = uint8_t(dequant_index(ch[c], P.k));
        }
      } else {
        for (int c = 0; c < NC; ++c) {
          if (ch[c] < -255 || ch[c] > 255) bad = true;
          const int r = *chan_ptr(P.ref, L, c, sxp, syp);
          const int vv = r + ch[c] * step;
          *chan_ptr(P.rec, L, c, sxp, syp) = uint8_t(vv < 0 ? 0 : vv > 255 ? 255 : vv);
        }
      }
      if (!bad) store_working<NC, YCOCG, KEY>(P, L, sxp, syp, wp);
    }
    if (__any_sync(kFullWarp, bad)) return false;
    __syncwarp();
  }
  return true;
}

__global__ void __launch_bounds__(32) decode_tiles_kernel(const Params P) {
  const TileDev t = P.tiles[blockIdx.x];
  const int lane = threadIdx.x;
  const uint8_t *p = P.payload + t.offset;
  if (t.type == 0 || t.type == 2) {
    // Skipped: the reference's samples; raw: the payload's, layer by layer,
    // row by row, sample by sample, channel by channel.
    size_t at = 0;
    for (int l = 0; l < P.n_layers; ++l) {
      const LayerDev &L = P.layer[l];
      const int nc = L.channels, row = t.w[l] * nc;
      const int n = row * t.h[l];
      for (int idx = lane; idx < n; idx += 32) {
        const int j = idx / row, rem = idx - j * row, i = rem / nc, c = rem - i * nc;
        const int x = t.x0[l] + i, y = t.y0[l] + j;
        *chan_ptr(P.rec, L, c, x, y) = t.type == 0 ? *chan_ptr(P.ref, L, c, x, y) : p[at + idx];
      }
      at += size_t(n);
    }
    return;
  }
  const int lanes = t.lanes;
  const unsigned lt = (1u << lane) - 1u;
  const bool is_lane = lane < lanes;
  uint32_t x = 0, h = 0;
  bool bad = false;
  if (is_lane) {
    x = uint32_t(p[4 * lane]) | uint32_t(p[4 * lane + 1]) << 8 | uint32_t(p[4 * lane + 2]) << 16 |
        uint32_t(p[4 * lane + 3]) << 24;
    bad = x < kRansLow || x >= (kRansLow << 8);
  }
  bool ok = !__any_sync(kFullWarp, bad);
  uint32_t pos = 4u * lanes;
  const bool key = P.keyframe != 0;
  bool has_skipped = false;
  // Block modes: block b by lane b % lanes, in rounds of `lanes` blocks.
  if (ok && !key) {
    if (!P.used[P.mode_dist]) ok = false;
    const int tbw = t.bx1 - t.bx0, n_blocks = tbw * (t.by1 - t.by0);
    for (int b0 = 0; ok && b0 < n_blocks; b0 += lanes) {
      const int b = b0 + lane;
      const bool act = is_lane && b < n_blocks;
      int mode = kSpatial;
      if (act) {
        mode = decode_symbol(x, P, P.mode_dist);
        h = lane_checksum(h, uint32_t(mode));
        P.modes[size_t(t.by0 + b / tbw) * P.blocks_x + t.bx0 + b % tbw] = uint8_t(mode);
      }
      has_skipped |= __any_sync(kFullWarp, act && mode == kSkip);
      if (!renorm(x, act, p, pos, t.size, lt)) ok = false;
    }
    __syncwarp();
  }
  for (int l = 0; ok && l < P.n_layers; ++l) {
    const LayerDev &L = P.layer[l];
    if (t.w[l] == 0 || t.h[l] == 0) continue;
    const int variant = L.channels * 4 + L.ycocg * 2 + (key ? 1 : 0);
    switch (variant) {
#define CODEC2_LAYER(NC, YC)                                                               \
  case NC * 4 + YC * 2 + 0:                                                                \
    ok = decode_layer<NC, YC, false>(P, t, l, lanes, lane, lt, x, h, p, pos, has_skipped); \
    break;                                                                                 \
  case NC * 4 + YC * 2 + 1:                                                                \
    ok = decode_layer<NC, YC, true>(P, t, l, lanes, lane, lt, x, h, p, pos, has_skipped);  \
    break;
      CODEC2_LAYER(1, 0)
      CODEC2_LAYER(2, 0)
      CODEC2_LAYER(3, 1)
      CODEC2_LAYER(4, 1)
#undef CODEC2_LAYER
      default:
        ok = false;
    }
  }
  // Every lane ends where its encoder began, with every byte read.
  if (ok) {
    const bool wrong = is_lane && x != lane_final_state(P.k, lane, h);
    if (__any_sync(kFullWarp, wrong) || pos != t.size) ok = false;
  }
  if (!ok && lane == 0) atomicAdd(P.failed, 1u);
}

size_t align_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}

class CudaDecoder final : public Decoder {
 public:
  CudaDecoder(const Context &ctx, VideoFormat format, int width, int height)
      : ctx_(ctx), reader_(format, width, height) {
    format_ = format;
    width_ = width;
    height_ = height;
    const LayerSet &ls = reader_.layers();
    frame_bytes_ = frame_size_packed(format, width, height);
    size_t offsets[kMaxPlanes], strides[kMaxPlanes];
    packed_layout(format, width, height, 1, offsets, strides);
    n_layers_ = ls.count;
    for (int l = 0; l < ls.count; ++l) {
      const Layer &ly = ls.layer[l];
      LayerDev &d = layer_[l];
      d = LayerDev{};
      d.width = ly.width;
      d.height = ly.height;
      d.channels = ly.channels;
      d.ycocg = ly.ycocg;
      d.sx = ly.sx;
      d.sy = ly.sy;
      for (int c = 0; c < ly.channels; ++c) {
        d.chan_at[c] = uint32_t(offsets[ly.plane[c]] + ly.offset[c]);
        d.chan_stride[c] = uint32_t(strides[ly.plane[c]]);
        d.chan_step[c] = ly.step[c];
        for (int cls = 0; cls < kClasses; ++cls) d.base[cls][c] = reader_.base(l, cls, c);
      }
    }
    blocks_x_ = ls.blocks_x;
    n_dist_ = reader_.distributions();
    ctx.activate();
    stream_ = static_cast<cudaStream_t>(ctx.stream_handle());
    picture_[0] = DeviceBuffer(frame_bytes_);
    picture_[1] = DeviceBuffer(frame_bytes_);
    CUDADIFF_CHECK(cudaMemsetAsync(picture_[0].data(), 0, frame_bytes_, stream_));
    CUDADIFF_CHECK(cudaMemsetAsync(picture_[1].data(), 0, frame_bytes_, stream_));
    for (int l = 0; l < ls.count; ++l)
      work_[l] = DeviceBuffer(std::max<size_t>(1, size_t(ls.layer[l].width) * ls.layer[l].height *
                                                      2 * ls.layer[l].channels * sizeof(int16_t)));
    modes_ = DeviceBuffer(size_t(ls.blocks_x) * ls.blocks_y);
    slot_token_ = DeviceBuffer(size_t(n_dist_) * kProbScale);
    CUDADIFF_CHECK(cudaMemsetAsync(slot_token_.data(), 0, slot_token_.size(), stream_));
    failed_ = DeviceBuffer(sizeof(uint32_t));
    failed_host_ = HostBytes(sizeof(uint32_t));
    ctx.synchronize();
  }

  bool decode(const uint8_t *body, size_t n, std::string *error) override {
    auto fail = [&](const std::string &why) {
      if (error) *error = "codec2 body: " + why;
      has_reference_ = false;
      return false;
    };
    std::string why;
    if (!reader_.read(body, n, has_reference_, &why)) return fail(why);
    const BodyHeader &h = reader_.header();
    const std::vector<detail::Tile> &tiles = reader_.tiles();
    const std::vector<detail::TileEntry> &entries = reader_.entries();
    const size_t n_tiles = tiles.size();
    const size_t payload = n - reader_.payload_offset();
    if (payload > UINT32_MAX) return fail("body too large");

    // Staging: tiles, symbols, used flags, payloads; one copy.
    const size_t tiles_at = 0;
    const size_t sym_at = align_up(tiles_at + n_tiles * sizeof(TileDev), 16);
    const size_t used_at = align_up(sym_at + size_t(n_dist_) * kTokens * sizeof(uint32_t), 16);
    const size_t payload_at = align_up(used_at + size_t(n_dist_), 16);
    const size_t total = payload_at + payload + 16;
    ctx_.activate();
    if (staging_.capacity() < total) {
      staging_.reserve(total + total / 4);
      upload_ = DeviceBuffer(staging_.capacity());
    }
    staging_.resize(total);
    uint8_t *s = staging_.data();
    TileDev *td = reinterpret_cast<TileDev *>(s + tiles_at);
    for (size_t ti = 0; ti < n_tiles; ++ti) {
      const detail::Tile &t = tiles[ti];
      TileDev &d = td[ti];
      d.type = entries[ti].type;
      d.lanes = entries[ti].lanes;
      d.offset = uint32_t(entries[ti].offset);
      d.size = uint32_t(entries[ti].size);
      d.bx0 = t.bx0;
      d.by0 = t.by0;
      d.bx1 = t.bx1;
      d.by1 = t.by1;
      for (int l = 0; l < kMaxLayers; ++l) {
        d.x0[l] = t.x0[l];
        d.y0[l] = t.y0[l];
        d.w[l] = l < n_layers_ ? t.w[l] : 0;
        d.h[l] = l < n_layers_ ? t.h[l] : 0;
      }
    }
    uint32_t *sym = reinterpret_cast<uint32_t *>(s + sym_at);
    uint8_t *used = s + used_at;
    for (int d = 0; d < n_dist_; ++d) {
      used[d] = reader_.used(d) ? 1 : 0;
      reader_.symbols(d, sym + size_t(d) * kTokens);
    }
    std::memcpy(s + payload_at, body + reader_.payload_offset(), payload);
    CUDADIFF_CHECK(cudaMemcpyAsync(upload_.data(), s, total, cudaMemcpyHostToDevice, stream_));

    slot_tables_kernel<<<n_dist_, 256, 0, stream_>>>(
        reinterpret_cast<const uint32_t *>(upload_.data() + sym_at), upload_.data() + used_at,
        slot_token_.data());
    CUDADIFF_CHECK_LAUNCH("codec2 slot_tables_kernel");

    Params P{};
    P.ref = picture_[current_].data();
    P.rec = picture_[1 - current_].data();
    for (int l = 0; l < kMaxLayers; ++l) P.work[l] = work_[l].as<int16_t>();
    P.modes = modes_.data();
    P.payload = upload_.data() + payload_at;
    P.tiles = reinterpret_cast<const TileDev *>(upload_.data() + tiles_at);
    P.sym = reinterpret_cast<const uint32_t *>(upload_.data() + sym_at);
    P.slot_token = slot_token_.data();
    P.used = upload_.data() + used_at;
    P.failed = failed_.as<uint32_t>();
    P.k = h.threshold;
    P.keyframe = h.keyframe ? 1 : 0;
    P.blocks_x = blocks_x_;
    P.mode_dist = reader_.mode_distribution();
    P.n_layers = n_layers_;
    for (int l = 0; l < kMaxLayers; ++l) P.layer[l] = layer_[l];
    CUDADIFF_CHECK(cudaMemsetAsync(failed_.data(), 0, sizeof(uint32_t), stream_));
    if (n_tiles > 0) {
      decode_tiles_kernel<<<unsigned(n_tiles), 32, 0, stream_>>>(P);
      CUDADIFF_CHECK_LAUNCH("codec2 decode_tiles_kernel");
    }
    CUDADIFF_CHECK(cudaMemcpyAsync(failed_host_.data(), failed_.data(), sizeof(uint32_t),
                                   cudaMemcpyDeviceToHost, stream_));
    CUDADIFF_CHECK(cudaStreamSynchronize(stream_));
    uint32_t failed;
    std::memcpy(&failed, failed_host_.data(), sizeof failed);
    if (failed) return fail("a tile failed to decode (damaged data)");
    current_ = 1 - current_;
    reader_.commit();
    has_reference_ = true;
    return true;
  }

  void write_frame(const FrameView &out) override {
    validate(out, "codec2 decoder output");
    if (out.format != format_ || out.width != width_ || out.height != height_)
      throw Error("codec2 decoder: output frame does not match the stream's format and size");
    ctx_.activate();
    copy_to_host(packed_view(format_, width_, height_, picture_[current_].data()), out, ctx_);
    ctx_.synchronize();
  }

  void read_reference(HostBytes &out) override {
    ctx_.activate();
    out.resize(frame_bytes_);
    CUDADIFF_CHECK(cudaMemcpyAsync(out.data(), picture_[current_].data(), frame_bytes_,
                                   cudaMemcpyDeviceToHost, stream_));
    ctx_.synchronize();
  }

 private:
  const Context &ctx_;
  detail::BodyReader reader_;
  cudaStream_t stream_ = nullptr;
  size_t frame_bytes_ = 0;
  int n_layers_ = 0, blocks_x_ = 0, n_dist_ = 0;
  LayerDev layer_[kMaxLayers] = {};
  DeviceBuffer picture_[2];  // the picture shown and the one being decoded
  int current_ = 0;
  DeviceBuffer work_[kMaxLayers], modes_, slot_token_, failed_, upload_;
  HostBytes staging_, failed_host_;
};

}  // namespace

namespace detail {
std::unique_ptr<Decoder> make_cuda_decoder(const Context &ctx, VideoFormat format, int width,
                                           int height) {
  return std::make_unique<CudaDecoder>(ctx, format, width, height);
}
}  // namespace detail

}  // namespace codec2
}  // namespace cudadiff
