// Test helpers: host frames with padded strides, random content with a seed
// that is printed (set CUDADIFF_TEST_SEED to replay), comparisons that name
// the first differing byte, and device round trips for CUDA tests.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cudadiff/frame.h"
#include "cudadiff/runtime.h"

namespace testing_util {

// A frame in host memory. Every row has `pad` extra bytes filled with a guard
// value, so a test can check that nothing writes past a row.
struct HostFrame {
  std::vector<uint8_t> storage;
  cudadiff::FrameView view;
  size_t pad = 0;

  HostFrame() = default;
  HostFrame(cudadiff::VideoFormat format, int width, int height, size_t pad = 0,
            uint8_t fill = 0xCD);
  // Copies own their storage: the view is rebased onto it.
  HostFrame(const HostFrame &other);
  HostFrame &operator=(const HostFrame &other);
  HostFrame(HostFrame &&) = default;
  HostFrame &operator=(HostFrame &&) = default;
  uint8_t &at(int plane, int x_byte, int y) { return view.row(plane, y)[x_byte]; }
  // True when every padding byte still holds `fill`.
  bool padding_intact(uint8_t fill = 0xCD) const;
};

// The seed for this run: CUDADIFF_TEST_SEED if set, else random; printed once.
uint32_t test_seed();
std::mt19937 &rng();

void fill_random(HostFrame &frame);
void fill_random(HostFrame &frame, std::mt19937 &gen);
void fill_value(HostFrame &frame, uint8_t value);
// Noise in `bands` vertical bands of each plane's rows: band b's bytes are
// uniform in 0 .. amplitude[b] - 1 (to place tiles below, near and above the
// size that coding leaves them).
void fill_noise_bands(HostFrame &frame, std::mt19937 &gen, const uint32_t *amplitude, int bands);
// Frame t of a codec test scene: smooth ramps with edges (`pan`: moving by a
// byte per frame), an inverted square moving by 2 bytes and a row per frame,
// and uniform noise of up to `noise` from `gen`: every block mode occurs.
void fill_codec_scene(HostFrame &frame, int t, std::mt19937 &gen, int noise, bool pan = false);

// Compares the visible bytes (not the padding). Returns "" when equal, else a
// description of the first difference. `tolerance` allows |a-b| <= tolerance.
std::string compare_frames(const cudadiff::FrameView &a, const cudadiff::FrameView &b,
                           int tolerance = 0);
// Largest |a-b| over visible bytes.
int max_abs_difference(const cudadiff::FrameView &a, const cudadiff::FrameView &b);

// The formats by family.
std::vector<cudadiff::VideoFormat> packed_rgb_formats();
// Every format of cudadiff/frame.h.
std::vector<cudadiff::VideoFormat> every_format();
// The bytes held by `b`, for comparisons.
std::vector<uint8_t> bytes_of(const cudadiff::HostBytes &b);
// A host frame's bytes in the canonical order (planes one after the other,
// each row its visible bytes).
std::vector<uint8_t> packed_bytes(const cudadiff::FrameView &v);

// Fixed hashes for test scenes and pinned results (no library randomness,
// so the same with every standard library): FNV-1a over bytes from
// kFnvBasis, and a 32-bit integer mix.
constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ull;
uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n);
uint32_t mix32(uint32_t v);
// A whole file's bytes (empty when it cannot be read).
std::vector<uint8_t> read_file(const std::string &path);

// An environment variable set for a scope (the encoders read some when
// made), and put back as it was (set to its old value, or unset) after.
class ScopedEnv {
 public:
  ScopedEnv(const char *name, const char *value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv &) = delete;
  ScopedEnv &operator=(const ScopedEnv &) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

// Round trips for CUDA tests: a device frame holding `host`, and a download.
cudadiff::DeviceFrame upload(const HostFrame &host, const cudadiff::Context &ctx);
HostFrame download(const cudadiff::DeviceFrame &device, const cudadiff::Context &ctx,
                   size_t pad = 0);

}  // namespace testing_util
