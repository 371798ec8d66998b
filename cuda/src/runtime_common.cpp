// The parts of the runtime that do not depend on CUDA being built in.
#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "cudadiff/runtime.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace cudadiff {

const char *backend_name(Backend b) {
  return b == Backend::Cuda ? "cuda" : "cpu";
}

std::unique_ptr<Context> Context::cpu() {
  std::unique_ptr<Context> ctx(new Context());
  ctx->backend_ = Backend::Cpu;
  return ctx;
}

Context::~Context() = default;

PinnedBuffer::PinnedBuffer(size_t bytes) : size_(bytes) {
  data_ = static_cast<uint8_t *>(host_alloc(bytes, &pinned_));
  if (!data_) throw Error("out of host memory allocating " + std::to_string(bytes) + " bytes");
}

PinnedBuffer::~PinnedBuffer() {
  host_free(data_, pinned_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer &&other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      pinned_(std::exchange(other.pinned_, false)) {}

PinnedBuffer &PinnedBuffer::operator=(PinnedBuffer &&other) noexcept {
  if (this != &other) {
    host_free(data_, pinned_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    pinned_ = std::exchange(other.pinned_, false);
  }
  return *this;
}

void HostBytes::reserve(size_t capacity) {
  if (capacity <= this->capacity()) return;
  // Grow geometrically so that appending stays cheap.
  size_t grown = this->capacity() + this->capacity() / 2;
  if (grown < capacity) grown = capacity;
  PinnedBuffer bigger(headroom_ + grown);
  if (size_) std::memcpy(bigger.data() + headroom_, data(), size_);
  buffer_ = std::move(bigger);
}

void HostBytes::set_headroom(size_t bytes) {
  if (buffer_.data()) throw Error("HostBytes: headroom set after the allocation");
  headroom_ = bytes;
}

void HostBytes::resize(size_t size) {
  reserve(size);
  size_ = size;
}

FrameView packed_view(VideoFormat format, int width, int height, uint8_t *base) {
  size_t offsets[kMaxPlanes], strides[kMaxPlanes];
  packed_layout(format, width, height, 1, offsets, strides);
  FrameView v;
  v.format = format;
  v.width = width;
  v.height = height;
  for (int p = 0; p < format_info(format).n_planes; ++p) {
    v.data[p] = base + offsets[p];
    v.stride[p] = strides[p];
  }
  return v;
}

size_t frame_size_packed(VideoFormat format, int width, int height) {
  size_t offsets[kMaxPlanes], strides[kMaxPlanes];
  return packed_layout(format, width, height, 1, offsets, strides);
}

bool is_packed(const FrameView &view) {
  const int planes = view.n_planes();
  for (int p = 0; p < planes; ++p) {
    if (view.stride[p] != view.row_bytes(p)) return false;
    if (p > 0 && view.data[p] != view.data[p - 1] + view.stride[p - 1] * view.plane_height(p - 1))
      return false;
  }
  return planes > 0;
}

void copy_frame_host(const FrameView &src, const FrameView &dst) {
  validate(src, "copy source");
  validate(dst, "copy destination");
  if (src.format != dst.format || src.width != dst.width || src.height != dst.height)
    throw Error("copy between frames of different format or size");
  for (int p = 0; p < src.n_planes(); ++p) {
    const size_t row = src.row_bytes(p);
    for (int y = 0; y < src.plane_height(p); ++y) std::memcpy(dst.row(p, y), src.row(p, y), row);
  }
}

namespace {
int g_cpu_threads = 0;
}

void set_cpu_threads(int threads) {
  g_cpu_threads = threads < 0 ? 0 : threads;
}

int cpu_threads() {
  if (g_cpu_threads > 0) return g_cpu_threads;
#ifdef _OPENMP
  return omp_get_max_threads();  // OMP_NUM_THREADS, else the CPUs this process may use
#else
  // The fast paths have threads of their own (cuda/cpu/fast.cpp); the
  // references run on one thread without OpenMP.
  return std::max(1u, std::thread::hardware_concurrency());
#endif
}

int cpu_threads_for(size_t work) {
  return work < (size_t(1) << 18) ? 1 : cpu_threads();
}

}  // namespace cudadiff
