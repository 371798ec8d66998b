// The runtime of a CPU-only build (-Dcuda=disabled): no device, system memory.
#include <cstdlib>
#include <string>
#include <utility>

#include "cudadiff/runtime.h"

namespace cudadiff {

namespace {
[[noreturn]] void no_cuda() {
  throw Error("this build of gst-cudadiff has no CUDA backend");
}
}  // namespace

bool built_with_cuda() {
  return false;
}
bool Error::out_of_memory() const {
  return false;
}

int device_count(std::string *why) {
  if (why) *why = "built without CUDA (-Dcuda=disabled)";
  return 0;
}

DeviceInfo device_info(int) {
  no_cuda();
}
void set_device(int) {
  no_cuda();
}

void *primary_context(int) {
  no_cuda();
}
void *current_driver_context() {
  return nullptr;
}
bool is_device_memory(const void *) {
  return false;
}

bool is_pinned_host_memory(const void *) {
  return false;
}

Stream::Stream(int device_id, bool, bool) : device_(device_id) {
  no_cuda();
}
std::shared_ptr<Stream> Stream::borrow(int, void *) {
  no_cuda();
}
Stream::~Stream() = default;
void Stream::synchronize() {}

DeviceBuffer::DeviceBuffer(size_t) {
  no_cuda();
}
DeviceBuffer::~DeviceBuffer() = default;
DeviceBuffer::DeviceBuffer(DeviceBuffer &&other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&other) noexcept {
  data_ = std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  return *this;
}

void *host_alloc(size_t bytes, bool *pinned) {
  *pinned = false;
  const size_t align = 64;
  if (bytes == 0) bytes = 1;
  return std::aligned_alloc(align, (bytes + align - 1) / align * align);
}

void host_free(void *ptr, bool) {
  std::free(ptr);
}

std::unique_ptr<Context> Context::cuda(int) {
  no_cuda();
}
std::unique_ptr<Context> Context::cuda_in(int, void *, std::shared_ptr<Stream>) {
  no_cuda();
}
void Context::activate() const {}

ContextScope::ContextScope(const Context *) {}
void ContextScope::push(void *driver_context) {
  if (driver_context) no_cuda();
}
ContextScope::~ContextScope() = default;

StreamEvent::StreamEvent() {
  no_cuda();
}
StreamEvent::~StreamEvent() = default;
void StreamEvent::record(const Context &) {
  no_cuda();
}
void StreamEvent::record(const Stream &) {
  no_cuda();
}
void StreamEvent::make_wait(const Stream &) const {
  no_cuda();
}
bool StreamEvent::done() const {
  return true;
}
void StreamEvent::synchronize() const {}
void Context::synchronize() const {}

DeviceFrame::DeviceFrame(VideoFormat, int, int) {
  no_cuda();
}

void copy_to_device(const FrameView &, const FrameView &, const Context &) {
  no_cuda();
}
void copy_to_host(const FrameView &, const FrameView &, const Context &) {
  no_cuda();
}
void copy_device_to_device(const FrameView &, const FrameView &, const Context &) {
  no_cuda();
}

void copy_frame_async(const FrameView &, const FrameView &, const Stream &) {
  no_cuda();
}

void copy_bytes_async(void *, const void *, size_t, const Context &) {
  no_cuda();
}
void fill_bytes_async(void *, uint8_t, size_t, const Context &) {
  no_cuda();
}

EventTimer::EventTimer(const Context &ctx) : ctx_(ctx) {
  no_cuda();
}
EventTimer::~EventTimer() = default;
void EventTimer::start() {}
void EventTimer::stop() {}
float EventTimer::elapsed_ms() {
  return 0.f;
}

StreamGraph::StreamGraph(const Context &ctx, const std::function<void()> &) : ctx_(ctx) {
  no_cuda();
}
StreamGraph::~StreamGraph() = default;
void StreamGraph::replay() {}

}  // namespace cudadiff
