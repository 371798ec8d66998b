// The parts of the runtime that do not depend on CUDA being built in.
#include <cstring>
#include <string>
#include <utility>

#include "cudadiff/runtime.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace cudadiff {

const char *backend_name(Backend b) { return b == Backend::Cuda ? "cuda" : "cpu"; }

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

PinnedBuffer::~PinnedBuffer() { host_free(data_, pinned_); }

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

void set_cpu_threads(int threads) { g_cpu_threads = threads < 0 ? 0 : threads; }

int cpu_threads() {
#ifdef _OPENMP
  return g_cpu_threads > 0 ? g_cpu_threads : omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace cudadiff
