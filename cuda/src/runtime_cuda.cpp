// The runtime on top of the CUDA runtime API (compiled by the host compiler).
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "check.h"
#include "cudadiff/runtime.h"

namespace cudadiff {

bool built_with_cuda() {
  return true;
}

bool Error::out_of_memory() const {
  return cuda_code_ == cudaErrorMemoryAllocation;
}

int device_count(std::string *why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why) *why = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    cudaGetLastError();  // do not leave the error for the next caller
    return 0;
  }
  if (count == 0 && why) *why = "the CUDA driver reports no device";
  return count;
}

DeviceInfo device_info(int device_id) {
  cudaDeviceProp prop{};
  CUDADIFF_CHECK(cudaGetDeviceProperties(&prop, device_id));
  DeviceInfo info;
  info.id = device_id;
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.integrated = prop.integrated != 0;
  info.total_memory = prop.totalGlobalMem;
  info.multiprocessors = prop.multiProcessorCount;
  return info;
}

void set_device(int device_id) {
  CUDADIFF_CHECK(cudaSetDevice(device_id));
}

Stream::Stream(int device_id) : device_(device_id) {
  set_device(device_id);
  cudaStream_t s = nullptr;
  CUDADIFF_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  handle_ = s;
}

Stream::~Stream() {
  if (handle_) cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
}

void Stream::synchronize() {
  CUDADIFF_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)));
}

DeviceBuffer::DeviceBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  void *p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    detail::throw_cuda_error(err, ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str(),
                             __FILE__, __LINE__);
  }
  data_ = static_cast<uint8_t *>(p);
}

DeviceBuffer::~DeviceBuffer() {
  // Freed during process exit: the runtime may be gone already, which is fine.
  if (data_) cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer &&other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&other) noexcept {
  if (this != &other) {
    if (data_) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void *host_alloc(size_t bytes, bool *pinned) {
  if (bytes == 0) bytes = 1;
  if (device_count() > 0) {
    void *p = nullptr;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped) == cudaSuccess) {
      *pinned = true;
      return p;
    }
    cudaGetLastError();  // out of pinned memory: fall back to pageable memory
  }
  *pinned = false;
  const size_t align = 64;
  return std::aligned_alloc(align, (bytes + align - 1) / align * align);
}

void host_free(void *ptr, bool pinned) {
  if (!ptr) return;
  if (pinned) {
    // cudaErrorCudartUnloading at process exit is not an error: the memory goes with it.
    cudaFreeHost(ptr);
  } else {
    std::free(ptr);
  }
}

std::unique_ptr<Context> Context::cuda(int device_id) {
  std::string why;
  const int count = device_count(&why);
  if (count == 0) throw Error("no CUDA device is usable (" + why + ")");
  if (device_id < 0 || device_id >= count)
    throw Error("CUDA device " + std::to_string(device_id) + " does not exist (" +
                std::to_string(count) + " device(s) found)");
  std::unique_ptr<Context> ctx(new Context());
  ctx->backend_ = Backend::Cuda;
  ctx->device_id_ = device_id;
  ctx->device_info_ = device_info(device_id);
  ctx->stream_ = std::make_unique<Stream>(device_id);
  return ctx;
}

void Context::activate() const {
  if (backend_ == Backend::Cuda) set_device(device_id_);
}

void Context::synchronize() const {
  if (stream_) stream_->synchronize();
}

DeviceFrame::DeviceFrame(VideoFormat format, int width, int height) {
  size_t offsets[kMaxPlanes], strides[kMaxPlanes];
  const size_t total = packed_layout(format, width, height, 256, offsets, strides);
  if (total == 0) throw Error("cannot allocate a device frame of an unknown format or empty size");
  buffer_ = DeviceBuffer(total);
  view_.format = format;
  view_.width = width;
  view_.height = height;
  for (int p = 0; p < format_info(format).n_planes; ++p) {
    view_.data[p] = buffer_.data() + offsets[p];
    view_.stride[p] = strides[p];
  }
}

namespace {

void copy_planes(const FrameView &src, const FrameView &dst, cudaMemcpyKind kind,
                 const Context &ctx) {
  validate(src, "copy source");
  validate(dst, "copy destination");
  if (src.format != dst.format || src.width != dst.width || src.height != dst.height)
    throw Error("copy between frames of different format or size");
  auto stream = static_cast<cudaStream_t>(ctx.stream_handle());
  for (int p = 0; p < src.n_planes(); ++p) {
    const size_t row = src.row_bytes(p);
    const size_t rows = static_cast<size_t>(src.plane_height(p));
    if (src.stride[p] == dst.stride[p]) {
      // Same layout: one linear copy (the padding after the last row is not touched).
      CUDADIFF_CHECK(cudaMemcpyAsync(dst.data[p], src.data[p], (rows - 1) * src.stride[p] + row,
                                     kind, stream));
    } else {
      CUDADIFF_CHECK(cudaMemcpy2DAsync(dst.data[p], dst.stride[p], src.data[p], src.stride[p], row,
                                       rows, kind, stream));
    }
  }
}

}  // namespace

void copy_to_device(const FrameView &host, const FrameView &device, const Context &ctx) {
  copy_planes(host, device, cudaMemcpyHostToDevice, ctx);
}

void copy_to_host(const FrameView &device, const FrameView &host, const Context &ctx) {
  copy_planes(device, host, cudaMemcpyDeviceToHost, ctx);
}

void copy_device_to_device(const FrameView &src, const FrameView &dst, const Context &ctx) {
  copy_planes(src, dst, cudaMemcpyDeviceToDevice, ctx);
}

void copy_bytes_async(void *dst, const void *src, size_t bytes, const Context &ctx) {
  CUDADIFF_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                                 static_cast<cudaStream_t>(ctx.stream_handle())));
}

void fill_bytes_async(void *dst, uint8_t value, size_t bytes, const Context &ctx) {
  CUDADIFF_CHECK(
      cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(ctx.stream_handle())));
}

EventTimer::EventTimer(const Context &ctx) : ctx_(ctx) {
  ctx.activate();
  cudaEvent_t a = nullptr, b = nullptr;
  CUDADIFF_CHECK(cudaEventCreate(&a));
  const cudaError_t err = cudaEventCreate(&b);
  if (err != cudaSuccess) {
    cudaEventDestroy(a);
    CUDADIFF_CHECK(err);
  }
  start_ = a;
  stop_ = b;
}

EventTimer::~EventTimer() {
  cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

void EventTimer::start() {
  CUDADIFF_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(start_),
                                 static_cast<cudaStream_t>(ctx_.stream_handle())));
}

void EventTimer::stop() {
  CUDADIFF_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(stop_),
                                 static_cast<cudaStream_t>(ctx_.stream_handle())));
}

float EventTimer::elapsed_ms() {
  CUDADIFF_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)));
  float ms = 0.f;
  CUDADIFF_CHECK(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)));
  return ms;
}

StreamGraph::StreamGraph(const Context &ctx, const std::function<void()> &record) : ctx_(ctx) {
  ctx.activate();
  auto stream = static_cast<cudaStream_t>(ctx.stream_handle());
  CUDADIFF_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    record();
  } catch (...) {
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(stream, &broken);
    if (broken) cudaGraphDestroy(broken);
    throw;
  }
  cudaGraph_t graph = nullptr;
  CUDADIFF_CHECK(cudaStreamEndCapture(stream, &graph));
  graph_ = graph;
  cudaGraphExec_t exec = nullptr;
  CUDADIFF_CHECK(cudaGraphInstantiateWithFlags(&exec, graph, 0));  // CUDA >= 11.4
  exec_ = exec;
}

StreamGraph::~StreamGraph() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
}

void StreamGraph::replay() {
  CUDADIFF_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_),
                                 static_cast<cudaStream_t>(ctx_.stream_handle())));
}

}  // namespace cudadiff
