#include "frames.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace testing_util {

using cudadiff::FrameView;
using cudadiff::VideoFormat;

ScopedEnv::ScopedEnv(const char *name, const char *value) : name_(name) {
  if (const char *old = std::getenv(name)) {
    had_ = true;
    old_ = old;
  }
  if (setenv(name, value, 1) != 0) {
    std::fprintf(stderr, "ScopedEnv: setenv(%s) failed\n", name);
    std::abort();
  }
}

uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

uint32_t mix32(uint32_t v) {
  v ^= v >> 16;
  v *= 0x7feb352dU;
  v ^= v >> 15;
  v *= 0x846ca68bU;
  v ^= v >> 16;
  return v;
}

std::vector<uint8_t> read_file(const std::string &path) {
  std::vector<uint8_t> out;
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f) return out;
  uint8_t buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.insert(out.end(), buf, buf + n);
  std::fclose(f);
  return out;
}

ScopedEnv::~ScopedEnv() {
  if (had_)
    setenv(name_.c_str(), old_.c_str(), 1);
  else
    unsetenv(name_.c_str());
}

HostFrame::HostFrame(VideoFormat format, int width, int height, size_t pad_bytes, uint8_t fill)
    : pad(pad_bytes) {
  size_t offsets[cudadiff::kMaxPlanes], strides[cudadiff::kMaxPlanes];
  size_t total = 0;
  const int planes = cudadiff::format_info(format).n_planes;
  for (int p = 0; p < planes; ++p) {
    strides[p] = cudadiff::plane_row_bytes(format, p, width) + pad;
    offsets[p] = total;
    total += strides[p] * static_cast<size_t>(cudadiff::plane_height(format, p, height));
  }
  storage.assign(total + 1, fill);
  view.format = format;
  view.width = width;
  view.height = height;
  for (int p = 0; p < planes; ++p) {
    view.data[p] = storage.data() + offsets[p];
    view.stride[p] = strides[p];
  }
}

HostFrame::HostFrame(const HostFrame &other) {
  *this = other;
}

HostFrame &HostFrame::operator=(const HostFrame &other) {
  if (this == &other) return *this;
  storage = other.storage;
  pad = other.pad;
  view = other.view;
  for (int p = 0; p < cudadiff::kMaxPlanes; ++p)
    if (other.view.data[p])
      view.data[p] = storage.data() + (other.view.data[p] - other.storage.data());
  return *this;
}

bool HostFrame::padding_intact(uint8_t fill) const {
  for (int p = 0; p < view.n_planes(); ++p) {
    const size_t row = view.row_bytes(p);
    for (int y = 0; y < view.plane_height(p); ++y)
      for (size_t x = row; x < view.stride[p]; ++x)
        if (view.row(p, y)[x] != fill) return false;
  }
  return storage.back() == fill;
}

uint32_t test_seed() {
  static const uint32_t seed = [] {
    uint32_t s;
    if (const char *env = std::getenv("CUDADIFF_TEST_SEED")) {
      s = static_cast<uint32_t>(std::strtoul(env, nullptr, 0));
    } else {
      s = std::random_device{}();
    }
    std::printf("random seed: %u (replay with CUDADIFF_TEST_SEED=%u)\n", s, s);
    std::fflush(stdout);
    return s;
  }();
  return seed;
}

std::mt19937 &rng() {
  static std::mt19937 gen(test_seed());
  return gen;
}

void fill_random(HostFrame &frame, std::mt19937 &gen) {
  for (int p = 0; p < frame.view.n_planes(); ++p) {
    const size_t row = frame.view.row_bytes(p);
    for (int y = 0; y < frame.view.plane_height(p); ++y) {
      uint8_t *r = frame.view.row(p, y);
      for (size_t x = 0; x < row; ++x) r[x] = static_cast<uint8_t>(gen() >> 24);
    }
  }
}

void fill_random(HostFrame &frame) {
  fill_random(frame, rng());
}

void fill_noise_bands(HostFrame &frame, std::mt19937 &gen, const uint32_t *amplitude, int bands) {
  for (int p = 0; p < frame.view.n_planes(); ++p) {
    const size_t row = frame.view.row_bytes(p);
    for (int y = 0; y < frame.view.plane_height(p); ++y) {
      uint8_t *r = frame.view.row(p, y);
      for (size_t x = 0; x < row; ++x)
        r[x] = static_cast<uint8_t>(gen() % amplitude[x * size_t(bands) / row]);
    }
  }
}

void fill_codec_scene(HostFrame &f, int t, std::mt19937 &gen, int noise, bool pan) {
  std::uniform_int_distribution<int> n(-noise, noise);
  const size_t shift = pan ? size_t(t) : 0;
  for (int p = 0; p < f.view.n_planes(); ++p) {
    const size_t row = f.view.row_bytes(p);
    const int rows = f.view.plane_height(p);
    for (int y = 0; y < rows; ++y)
      for (size_t x = 0; x < row; ++x) {
        int v = int((x * 3 + size_t(y) * 2 + shift) % 200) + 20;
        if ((x / 7 + size_t(y) / 5) % 3 == 0) v = 240 - v / 2;
        const int sx = (2 * t) % int(std::max<size_t>(row, 1)), sy = t % std::max(rows, 1);
        if (x >= size_t(sx) && x < size_t(sx) + 9 && y >= sy && y < sy + 6) v = 255 - v;
        if (noise) v += n(gen);
        f.view.row(p, y)[x] = uint8_t(std::clamp(v, 0, 255));
      }
  }
}

void fill_value(HostFrame &frame, uint8_t value) {
  for (int p = 0; p < frame.view.n_planes(); ++p)
    for (int y = 0; y < frame.view.plane_height(p); ++y)
      std::memset(frame.view.row(p, y), value, frame.view.row_bytes(p));
}

std::string compare_frames(const FrameView &a, const FrameView &b, int tolerance) {
  if (a.format != b.format || a.width != b.width || a.height != b.height)
    return "frames differ in format or size";
  for (int p = 0; p < a.n_planes(); ++p) {
    const size_t row = a.row_bytes(p);
    for (int y = 0; y < a.plane_height(p); ++y) {
      const uint8_t *ra = a.row(p, y);
      const uint8_t *rb = b.row(p, y);
      for (size_t x = 0; x < row; ++x) {
        if (std::abs(int(ra[x]) - int(rb[x])) > tolerance) {
          char buf[160];
          std::snprintf(buf, sizeof buf, "%s %dx%d: plane %d row %d byte %zu: %d vs %d",
                        cudadiff::format_name(a.format), a.width, a.height, p, y, x, ra[x], rb[x]);
          return buf;
        }
      }
    }
  }
  return "";
}

int max_abs_difference(const FrameView &a, const FrameView &b) {
  int worst = 0;
  for (int p = 0; p < a.n_planes(); ++p) {
    const size_t row = a.row_bytes(p);
    for (int y = 0; y < a.plane_height(p); ++y)
      for (size_t x = 0; x < row; ++x) {
        const int d = std::abs(int(a.row(p, y)[x]) - int(b.row(p, y)[x]));
        if (d > worst) worst = d;
      }
  }
  return worst;
}

std::vector<VideoFormat> packed_rgb_formats() {
  return {VideoFormat::BGR,  VideoFormat::RGB,  VideoFormat::BGRx, VideoFormat::RGBx,
          VideoFormat::xBGR, VideoFormat::xRGB, VideoFormat::BGRA, VideoFormat::RGBA,
          VideoFormat::ABGR, VideoFormat::ARGB};
}

std::vector<VideoFormat> every_format() {
  std::vector<VideoFormat> out;
  for (int i = 1;; ++i) {
    const VideoFormat f = static_cast<VideoFormat>(i);
    if (cudadiff::format_info(f).n_planes == 0) break;
    out.push_back(f);
  }
  return out;
}

std::vector<uint8_t> bytes_of(const cudadiff::HostBytes &b) {
  return {b.data(), b.data() + b.size()};
}

std::vector<uint8_t> packed_bytes(const cudadiff::FrameView &v) {
  std::vector<uint8_t> out(cudadiff::frame_size_packed(v.format, v.width, v.height));
  cudadiff::copy_frame_host(v, cudadiff::packed_view(v.format, v.width, v.height, out.data()));
  return out;
}

cudadiff::DeviceFrame upload(const HostFrame &host, const cudadiff::Context &ctx) {
  ctx.activate();
  cudadiff::DeviceFrame dev(host.view.format, host.view.width, host.view.height);
  cudadiff::copy_to_device(host.view, dev.view(), ctx);
  ctx.synchronize();
  return dev;
}

HostFrame download(const cudadiff::DeviceFrame &device, const cudadiff::Context &ctx, size_t pad) {
  HostFrame host(device.view().format, device.view().width, device.view().height, pad);
  cudadiff::copy_to_host(device.view(), host.view, ctx);
  ctx.synchronize();
  return host;
}

}  // namespace testing_util
