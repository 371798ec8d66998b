// The runtime on top of the CUDA runtime API (compiled by the host compiler).
// The few driver API calls it needs (the context stack, for contexts shared
// with GStreamer) are reached through the runtime (cudaGetDriverEntryPoint),
// so nothing links libcuda: a machine without a driver still loads the code.
#include <cuda.h>  // types of the driver entry points only
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <set>
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
    if (why) {
      *why = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
      // (what the runtime says when libcuda is missing altogether, too)
      if (err == cudaErrorInsufficientDriver)
        *why += " (no NVIDIA driver is loaded, or it is older than this build's CUDA " +
                std::to_string(CUDART_VERSION / 1000) + "." +
                std::to_string(CUDART_VERSION % 1000 / 10) + " needs)";
    }
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

namespace {

// Driver entry points, looked up once through the runtime.
struct DriverApi {
  CUresult(CUDAAPI *ctx_get_current)(CUcontext *) = nullptr;
  CUresult(CUDAAPI *ctx_set_current)(CUcontext) = nullptr;
  CUresult(CUDAAPI *ctx_push_current)(CUcontext) = nullptr;
  CUresult(CUDAAPI *ctx_pop_current)(CUcontext *) = nullptr;
  CUresult(CUDAAPI *get_device)(CUdevice *, int) = nullptr;
  CUresult(CUDAAPI *primary_retain)(CUcontext *, CUdevice) = nullptr;
  CUresult(CUDAAPI *primary_release)(CUdevice) = nullptr;
  CUresult(CUDAAPI *primary_get_state)(CUdevice, unsigned int *, int *) = nullptr;
  std::string missing;  // why the lookup failed ("" when it did not)
};

template <typename Fn>
void look_up(const char *name, Fn *fn, std::string *missing) {
  void *p = nullptr;
  cudaError_t err;
#if CUDART_VERSION >= 12050
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSuccess;
  // The ABI of CUDA 11.8, the oldest toolkit the project builds with.
  err = cudaGetDriverEntryPointByVersion(name, &p, 11080, cudaEnableDefault, &status);
#elif CUDART_VERSION >= 12000
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSuccess;
  err = cudaGetDriverEntryPoint(name, &p, cudaEnableDefault, &status);
#else
  err = cudaGetDriverEntryPoint(name, &p, cudaEnableDefault);
#endif
  if (err != cudaSuccess || !p) {
    cudaGetLastError();
    if (missing->empty())
      *missing =
          std::string("driver entry point ") + name + " not found (" + cudaGetErrorName(err) + ")";
    return;
  }
  *fn = reinterpret_cast<Fn>(p);
}

const DriverApi &driver_api() {
  static const DriverApi api = [] {
    DriverApi a;
    look_up("cuCtxGetCurrent", &a.ctx_get_current, &a.missing);
    look_up("cuCtxSetCurrent", &a.ctx_set_current, &a.missing);
    look_up("cuCtxPushCurrent", &a.ctx_push_current, &a.missing);
    look_up("cuCtxPopCurrent", &a.ctx_pop_current, &a.missing);
    look_up("cuDeviceGet", &a.get_device, &a.missing);
    look_up("cuDevicePrimaryCtxRetain", &a.primary_retain, &a.missing);
    look_up("cuDevicePrimaryCtxRelease", &a.primary_release, &a.missing);
    look_up("cuDevicePrimaryCtxGetState", &a.primary_get_state, &a.missing);
    return a;
  }();
  return api;
}

const DriverApi &checked_driver_api() {
  const DriverApi &api = driver_api();
  if (!api.missing.empty()) throw Error("CUDA driver: " + api.missing);
  return api;
}

void check_driver(CUresult res, const char *call) {
  if (res != CUDA_SUCCESS)
    throw Error(std::string("CUDA driver error ") + std::to_string(int(res)) + " (" + call + ")",
                int(res));
}

// Binds the device unless the thread already runs in a context on it (a
// shared driver context made current by the caller stays current).
void bind_device_keep_context(int device_id) {
  if (current_driver_context()) {
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess && current == device_id) return;
    cudaGetLastError();
  }
  set_device(device_id);
}

}  // namespace

void *current_driver_context() {
  const DriverApi &api = driver_api();
  if (!api.ctx_get_current) return nullptr;
  CUcontext ctx = nullptr;
  if (api.ctx_get_current(&ctx) != CUDA_SUCCESS) return nullptr;
  return ctx;
}

void *primary_context(int device_id) {
  const DriverApi &api = checked_driver_api();
  std::string why;
  const int count = device_count(&why);
  if (device_id < 0 || device_id >= count)
    throw Error("CUDA device " + std::to_string(device_id) + " is not usable (" +
                (count == 0 ? why : std::to_string(count) + " device(s) found") + ")");
  CUdevice device = 0;
  check_driver(api.get_device(&device, device_id), "cuDeviceGet");
  // Our reference keeps the context alive while the runtime starts on it;
  // the runtime takes its own (cudaSetDevice initialises its state on the
  // primary context), which lasts until the process ends. The context is
  // pushed for that and popped after, so the thread's context stack is left
  // exactly as it was (nothing made current behind the caller's back).
  CUcontext primary = nullptr;
  check_driver(api.primary_retain(&primary, device), "cuDevicePrimaryCtxRetain");
  try {
    ContextScope scope(static_cast<void *>(primary));
    set_device(device_id);  // replaces the top of the stack with `primary` itself
    CUDADIFF_CHECK(cudaFree(nullptr));
  } catch (...) {
    api.primary_release(device);
    throw;
  }
  check_driver(api.primary_release(device), "cuDevicePrimaryCtxRelease");
  unsigned int flags = 0;
  int active = 0;
  check_driver(api.primary_get_state(device, &flags, &active), "cuDevicePrimaryCtxGetState");
  if (!active) {
    // A runtime that took no reference: keep one for the process, once per
    // device, so that the context outlives every user of the handle.
    static std::mutex lock;
    static std::set<int> kept;
    std::lock_guard<std::mutex> guard(lock);
    if (kept.insert(device_id).second) {
      check_driver(api.primary_retain(&primary, device), "cuDevicePrimaryCtxRetain");
    } else {
      throw Error("CUDA device " + std::to_string(device_id) + ": primary context inactive");
    }
  }
  if (!primary) throw Error("CUDA device " + std::to_string(device_id) + ": no primary context");
  return primary;
}

namespace {

// What the driver says `ptr` points into; unregistered memory where it
// cannot say (ordinary host memory, a null pointer).
cudaMemoryType memory_type(const void *ptr) {
  if (!ptr) return cudaMemoryTypeUnregistered;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();
    return cudaMemoryTypeUnregistered;
  }
  return attr.type;
}

}  // namespace

bool is_device_memory(const void *ptr) {
  const cudaMemoryType type = memory_type(ptr);
  return type == cudaMemoryTypeDevice || type == cudaMemoryTypeManaged;
}

bool is_pinned_host_memory(const void *ptr) {
  return memory_type(ptr) == cudaMemoryTypeHost;
}

Stream::Stream(int device_id, bool blocking, bool high_priority) : device_(device_id) {
  bind_device_keep_context(device_id);
  cudaStream_t s = nullptr;
  const unsigned flags = blocking ? cudaStreamDefault : cudaStreamNonBlocking;
  int least = 0, greatest = 0;
  if (high_priority) CUDADIFF_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CUDADIFF_CHECK(cudaStreamCreateWithPriority(&s, flags, greatest));
  handle_ = s;
}

std::shared_ptr<Stream> Stream::borrow(int device_id, void *handle) {
  if (!handle) throw Error("no stream to borrow");
  std::shared_ptr<Stream> s(new Stream());
  s->handle_ = handle;
  s->device_ = device_id;
  s->owned_ = false;
  return s;
}

Stream::~Stream() {
  if (handle_ && owned_) detail::ignore_cuda(cudaStreamDestroy(static_cast<cudaStream_t>(handle_)));
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
  if (data_) detail::ignore_cuda(cudaFree(data_));
}

DeviceBuffer::DeviceBuffer(DeviceBuffer &&other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&other) noexcept {
  if (this != &other) {
    if (data_) detail::ignore_cuda(cudaFree(data_));
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

namespace {

// Pinned host memory belongs to the context it is allocated in and goes
// with it when that context is destroyed; but its buffers outlive elements
// and pipelines (lent downstream, held by an application), and the
// pipeline's context may be one that a GStreamer element made and destroys.
// So it is allocated and freed in a primary context, which the core keeps
// for the process, whatever context is current (the memory is portable:
// every context, on every device, sees it pinned and mapped). Pushed for
// the call; the thread is left as it was (a runtime call on a thread with
// no current context would make one current there for good, and
// allocators run on any thread, such as an upstream element's pool's).
//
// Which device's: the first one the process opened a core context on
// (note_device_in_use()), so that a process working on device 1 alone
// makes no context on device 0, which would take that GPU's memory and
// show the process on it; before any, the device of the calling thread's
// current context. Chosen once, so that every free finds the context its
// allocation was made in. With neither (the process uses no GPU, such as
// a pipeline of CPU backends on a machine with one) the memory is not
// pinned: that only speeds up copies to and from a GPU, and would cost a
// context on it.
std::atomic<int> g_host_memory_device{-1};

void note_device_in_use(int device_id) {
  int none = -1;
  g_host_memory_device.compare_exchange_strong(none, device_id);
}

// The device for pinned memory, or -1 (none: ordinary memory).
int host_memory_device() {
  const int known = g_host_memory_device.load();
  if (known >= 0 || !current_driver_context()) return known;
  int current = -1;
  const cudaError_t err = cudaGetDevice(&current);
  if (err != cudaSuccess) {
    detail::ignore_cuda(err);
    return -1;
  }
  note_device_in_use(current);
  return g_host_memory_device.load();
}

class HostMemoryContext {
 public:
  explicit HostMemoryContext(int device) {
    try {
      scope_.emplace(primary_context(device));
    } catch (const Error &) {
      // No usable device (or the runtime is unloading): nothing to push.
    }
  }
  bool pushed() const { return scope_.has_value(); }

 private:
  std::optional<ContextScope> scope_;
};

}  // namespace

void *host_alloc(size_t bytes, bool *pinned) {
  if (bytes == 0) bytes = 1;
  const int device = device_count() > 0 ? host_memory_device() : -1;
  if (device >= 0) {
    HostMemoryContext host_context(device);
    void *p = nullptr;
    // (without the context pushed, the runtime would make device 0's on this thread)
    if (host_context.pushed() &&
        cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped) == cudaSuccess) {
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
    // (a pinned allocation fixed the device)
    HostMemoryContext host_context(g_host_memory_device.load());
    // cudaErrorCudartUnloading at process exit is not an error: the memory goes with it.
    detail::ignore_cuda(cudaFreeHost(ptr));
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
  set_device(device_id);
  ctx->stream_ = std::make_shared<Stream>(device_id);
  note_device_in_use(device_id);  // (once the device works)
  return ctx;
}

std::unique_ptr<Context> Context::cuda_in(int device_id, void *driver_context,
                                          std::shared_ptr<Stream> stream) {
  if (!driver_context) throw Error("no driver context given");
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
  ctx->driver_context_ = driver_context;
  ContextScope scope(driver_context);
  int current = -1;
  CUDADIFF_CHECK(cudaGetDevice(&current));
  if (current != device_id)
    throw Error("the driver context is on CUDA device " + std::to_string(current) + ", not " +
                std::to_string(device_id));
  if (stream && stream->device() != device_id)
    throw Error("the shared stream is on another device");
  ctx->stream_ = stream ? std::move(stream) : std::make_shared<Stream>(device_id);
  note_device_in_use(device_id);  // (once the device works)
  return ctx;
}

void Context::activate() const {
  if (backend_ != Backend::Cuda) return;
  if (!driver_context_) {
    set_device(device_id_);
    return;
  }
  if (current_driver_context() == driver_context_) return;
  check_driver(checked_driver_api().ctx_set_current(static_cast<CUcontext>(driver_context_)),
               "cuCtxSetCurrent");
}

ContextScope::ContextScope(const Context *ctx) {
  if (!ctx || !ctx->is_cuda()) return;
  if (ctx->driver_context())
    push(ctx->driver_context());
  else
    ctx->activate();
}

void ContextScope::push(void *driver_context) {
  if (!driver_context) return;
  check_driver(checked_driver_api().ctx_push_current(static_cast<CUcontext>(driver_context)),
               "cuCtxPushCurrent");
  pushed_ = true;
}

ContextScope::~ContextScope() {
  if (!pushed_) return;
  CUcontext popped = nullptr;
  driver_api().ctx_pop_current(&popped);
}

StreamEvent::StreamEvent() {
  cudaEvent_t e = nullptr;
  CUDADIFF_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  event_ = e;
}

StreamEvent::~StreamEvent() {
  if (event_) detail::ignore_cuda(cudaEventDestroy(static_cast<cudaEvent_t>(event_)));
}

void StreamEvent::record(const Context &ctx) {
  CUDADIFF_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_),
                                 static_cast<cudaStream_t>(ctx.stream_handle())));
}

void StreamEvent::record(const Stream &stream) {
  CUDADIFF_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_),
                                 static_cast<cudaStream_t>(stream.handle())));
}

void StreamEvent::make_wait(const Stream &stream) const {
  CUDADIFF_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.handle()),
                                     static_cast<cudaEvent_t>(event_), 0));
}

bool StreamEvent::done() const {
  const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event_));
  if (err == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: do not leave it for the next caller
    return false;
  }
  CUDADIFF_CHECK(err);
  return true;
}

void StreamEvent::synchronize() const {
  CUDADIFF_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
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

// The direction comes from the pointers (cudaMemcpyDefault): either side may
// be host or device memory.
void copy_planes(const FrameView &src, const FrameView &dst, void *stream_handle) {
  const cudaMemcpyKind kind = cudaMemcpyDefault;
  validate(src, "copy source");
  validate(dst, "copy destination");
  if (src.format != dst.format || src.width != dst.width || src.height != dst.height)
    throw Error("copy between frames of different format or size");
  auto stream = static_cast<cudaStream_t>(stream_handle);
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
  copy_planes(host, device, ctx.stream_handle());
}

void copy_to_host(const FrameView &device, const FrameView &host, const Context &ctx) {
  copy_planes(device, host, ctx.stream_handle());
}

void copy_device_to_device(const FrameView &src, const FrameView &dst, const Context &ctx) {
  copy_planes(src, dst, ctx.stream_handle());
}

void copy_frame_async(const FrameView &src, const FrameView &dst, const Stream &stream) {
  copy_planes(src, dst, stream.handle());
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
    detail::ignore_cuda(cudaEventDestroy(a));
    CUDADIFF_CHECK(err);
  }
  start_ = a;
  stop_ = b;
}

EventTimer::~EventTimer() {
  detail::ignore_cuda(cudaEventDestroy(static_cast<cudaEvent_t>(start_)));
  detail::ignore_cuda(cudaEventDestroy(static_cast<cudaEvent_t>(stop_)));
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
    detail::ignore_cuda(cudaStreamEndCapture(stream, &broken));
    if (broken) detail::ignore_cuda(cudaGraphDestroy(broken));
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
  if (exec_) detail::ignore_cuda(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_)));
  if (graph_) detail::ignore_cuda(cudaGraphDestroy(static_cast<cudaGraph_t>(graph_)));
}

void StreamGraph::replay() {
  CUDADIFF_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_),
                                 static_cast<cudaStream_t>(ctx_.stream_handle())));
}

}  // namespace cudadiff
