// The CUDA runtime as the rest of the project sees it: device discovery, an
// error type, RAII owners for streams, device memory and pinned host memory,
// and the per-element Context that operations run in. This header has no CUDA
// includes, so GStreamer code and a CPU-only build use it unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "cudadiff/frame.h"

namespace cudadiff {

// Every failure of the core: a CUDA call that failed (code != 0, message holds
// the CUDA error string and the call) or invalid input (code 0).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string &message, int cuda_code = 0)
      : std::runtime_error(message), cuda_code_(cuda_code) {}
  int cuda_code() const { return cuda_code_; }
  // True for cudaErrorMemoryAllocation: callers may say "out of memory".
  bool out_of_memory() const;

 private:
  int cuda_code_;
};

// True when this build contains the CUDA backend.
bool built_with_cuda();

struct DeviceInfo {
  int id = -1;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  bool integrated = false;  // shares memory with the host (Jetson)
  size_t total_memory = 0;
  int multiprocessors = 0;
};

// Number of usable CUDA devices; 0 when there is no driver, no device, or the
// build has no CUDA. Never throws. `why` (optional) receives the reason for 0.
int device_count(std::string *why = nullptr);
// Throws Error for an invalid id.
DeviceInfo device_info(int device_id);
// Binds `device_id` to the calling thread (cudaSetDevice: the device's
// primary context becomes current). Throws on failure.
void set_device(int device_id);

// The primary context of `device_id` (the CUDA runtime's own, which
// set_device() binds), as a raw CUcontext, initialised if needed; the
// runtime's reference keeps it alive until the process ends (the one taken
// here is released). The calling thread's current context is left as it was.
// Throws Error.
void *primary_context(int device_id);
// The driver context current on the calling thread (a CUcontext), or
// nullptr. Never throws.
void *current_driver_context();
// True when `ptr` points into device memory (cudaMalloc, cuMemAlloc: a
// GStreamer CUDA buffer), false for host memory of any kind. Never throws.
bool is_device_memory(const void *ptr);
// True when `ptr` points into page-locked host memory the driver knows
// (cudaHostAlloc: what host_alloc() returns with *pinned set), false for
// ordinary memory, device memory or without CUDA. Asks the CUDA runtime,
// which makes the current device's primary context where the calling thread
// has none current: for tests and benchmarks, not for code paths of a
// process that may use no GPU. Never throws.
bool is_pinned_host_memory(const void *ptr);

enum class Backend { Cpu, Cuda };
const char *backend_name(Backend b);

class Stream {
 public:
  // Creates a stream on the device: in the driver context current on the
  // calling thread when that context is on `device_id` (a shared context the
  // caller made current, see ContextScope), else in the device's primary
  // context (set_device). Non-blocking unless `blocking`: a blocking stream
  // is ordered with the legacy default stream, where other libraries queue
  // their synchronous copies (GStreamer's CUDA memory does). `high_priority`:
  // the device's highest stream priority, whose pending thread blocks the
  // device starts before those of other streams (blocks already running
  // are not interrupted); else the default priority, which is the lowest.
  explicit Stream(int device_id, bool blocking = false, bool high_priority = false);
  // A stream that someone else made and destroys (a raw cudaStream_t /
  // CUstream on `device_id`, e.g. GStreamer's GstCudaStream): not destroyed
  // here.
  static std::shared_ptr<Stream> borrow(int device_id, void *handle);
  ~Stream();
  Stream(const Stream &) = delete;
  Stream &operator=(const Stream &) = delete;
  void synchronize();
  void *handle() const { return handle_; }  // a cudaStream_t
  int device() const { return device_; }

 private:
  Stream() = default;
  void *handle_ = nullptr;
  int device_ = -1;
  [[maybe_unused]] bool owned_ = true;
};

// Device memory (cudaMalloc). Empty when default-constructed.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer &&other) noexcept;
  DeviceBuffer &operator=(DeviceBuffer &&other) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  uint8_t *data() const { return data_; }
  size_t size() const { return size_; }
  template <typename T>
  T *as() const {
    return reinterpret_cast<T *>(data_);
  }

 private:
  uint8_t *data_ = nullptr;
  size_t size_ = 0;
};

// Host memory for fast, asynchronous copies: page-locked, portable (usable
// from every device) and mapped (kernels on integrated GPUs read it in place),
// from cudaHostAlloc, in the primary context of the first device the process
// opened a CUDA Context on (or, before any, that of the calling thread's
// current driver context). Without either, or without a usable device, it
// is aligned system memory (a process that uses no GPU makes no context on
// one for its buffers); pinned() says which.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer &&other) noexcept;
  PinnedBuffer &operator=(PinnedBuffer &&other) noexcept;
  PinnedBuffer(const PinnedBuffer &) = delete;
  PinnedBuffer &operator=(const PinnedBuffer &) = delete;
  uint8_t *data() const { return data_; }
  size_t size() const { return size_; }
  bool pinned() const { return pinned_; }

 private:
  uint8_t *data_ = nullptr;
  size_t size_ = 0;
  bool pinned_ = false;
};

// A growable byte array in pinned host memory (payloads copied to and from
// the device). resize() and reserve() within capacity() move nothing (every
// byte up to capacity() stays where it is); growing keeps the first
// min(old, new) bytes (not the headroom's). A headroom (set while nothing
// is allocated) keeps that many bytes before data(), in the same
// allocation: room for a header written in front of the contents, so that
// both leave as one block.
class HostBytes {
 public:
  HostBytes() = default;
  explicit HostBytes(size_t size) { resize(size); }
  uint8_t *data() { return buffer_.data() ? buffer_.data() + headroom_ : nullptr; }
  const uint8_t *data() const { return buffer_.data() ? buffer_.data() + headroom_ : nullptr; }
  size_t size() const { return size_; }
  size_t capacity() const { return buffer_.size() ? buffer_.size() - headroom_ : 0; }
  // Page-locked (and mapped for the devices): false where pinning failed
  // or before the first allocation.
  bool pinned() const { return buffer_.pinned(); }
  bool empty() const { return size_ == 0; }
  void resize(size_t size);
  void reserve(size_t capacity);
  void clear() { size_ = 0; }
  // The headroom: only before the first allocation (else throws Error).
  void set_headroom(size_t bytes);
  size_t headroom() const { return headroom_; }
  // The allocation's start: headroom() bytes before data() (null before
  // the first allocation).
  uint8_t *base() { return buffer_.data(); }
  size_t allocated() const { return buffer_.size(); }

 private:
  PinnedBuffer buffer_;
  size_t size_ = 0;
  size_t headroom_ = 0;
};

// The raw form, for allocators that manage their own bookkeeping (the
// GstAllocator). host_free must get the `pinned` value host_alloc returned.
// A free while the process exits (the CUDA runtime already unloaded) is fine.
void *host_alloc(size_t bytes, bool *pinned);
void host_free(void *ptr, bool pinned);

// Where an operation runs: the backend, and for CUDA the device, the driver
// context and the stream. One per element instance; operations keep a
// reference.
class Context {
 public:
  static std::unique_ptr<Context> cpu();
  // The device's primary context (the CUDA runtime's), on a stream of its
  // own. Throws Error when the device is unusable.
  static std::unique_ptr<Context> cuda(int device_id);
  // A driver context made and kept alive by someone else (a raw CUcontext:
  // the one a GStreamer pipeline shares, or a device's primary context); it
  // must outlive this Context and everything made with it. On `stream` when
  // given (made in that driver context and shared by several Contexts, whose
  // work is then ordered among them), else on a stream of its own. Throws
  // Error.
  static std::unique_ptr<Context> cuda_in(int device_id, void *driver_context,
                                          std::shared_ptr<Stream> stream = nullptr);
  ~Context();

  Backend backend() const { return backend_; }
  bool is_cuda() const { return backend_ == Backend::Cuda; }
  int gpu_id() const { return device_id_; }
  const DeviceInfo &gpu() const { return device_info_; }
  // The driver context of cuda_in(), nullptr for cuda() and cpu().
  void *driver_context() const { return driver_context_; }
  // Makes the context current on the calling thread; call at the top of
  // every entry point that may run on a new thread (GStreamer calls from
  // several). cuda(): binds the device (set_device). cuda_in(): makes its
  // driver context current unless it is already, replacing the thread's
  // current one (as set_device does); ContextScope restores it afterwards.
  void activate() const;
  Stream &stream() const { return *stream_; }
  const std::shared_ptr<Stream> &shared_stream() const { return stream_; }
  void *stream_handle() const { return stream_ ? stream_->handle() : nullptr; }
  void synchronize() const;

 private:
  Context() = default;
  Backend backend_ = Backend::Cpu;
  int device_id_ = -1;
  DeviceInfo device_info_;
  void *driver_context_ = nullptr;
  std::shared_ptr<Stream> stream_;
};

// Makes a context current for a scope and leaves the thread as it was after:
// a driver context (cuda_in(), or a raw CUcontext) is pushed onto the
// thread's context stack and popped at the end; cuda() binds the device as
// activate() does (nothing to undo); the CPU and nullptr do nothing. Throws
// Error when the push fails.
class ContextScope {
 public:
  explicit ContextScope(const Context *ctx);
  explicit ContextScope(void *driver_context) { push(driver_context); }
  ~ContextScope();
  ContextScope(const ContextScope &) = delete;
  ContextScope &operator=(const ContextScope &) = delete;

 private:
  void push(void *driver_context);
  [[maybe_unused]] bool pushed_ = false;
};

// A CUDA event (no timing) made in the context current on the thread: marks
// a point of a stream that the host or another stream can wait for.
class StreamEvent {
 public:
  StreamEvent();
  ~StreamEvent();
  StreamEvent(const StreamEvent &) = delete;
  StreamEvent &operator=(const StreamEvent &) = delete;
  void record(const Context &ctx);    // at the current end of ctx's stream
  void record(const Stream &stream);  // at the current end of `stream`
  // Work queued on `stream` from now on waits for the marked work (nothing
  // to wait for when never recorded).
  void make_wait(const Stream &stream) const;
  bool done() const;         // without waiting: the marked work has finished
  void synchronize() const;  // waits on the host
  void *handle() const { return event_; }

 private:
  void *event_ = nullptr;
};

// A view of a frame stored with no padding at `base`: planes one after the
// other, each row exactly its visible bytes (the canonical byte order of the
// difference codec). Size: frame_size_packed().
FrameView packed_view(VideoFormat format, int width, int height, uint8_t *base);
size_t frame_size_packed(VideoFormat format, int width, int height);
bool is_packed(const FrameView &view);

// A frame in device memory with rows padded to 256 bytes (16-byte wide loads
// start aligned on every row). Allocated once per negotiated format and size.
class DeviceFrame {
 public:
  DeviceFrame() = default;
  DeviceFrame(VideoFormat format, int width, int height);
  const FrameView &view() const { return view_; }
  size_t size() const { return buffer_.size(); }
  bool empty() const { return buffer_.size() == 0; }

 private:
  DeviceBuffer buffer_;
  FrameView view_;
};

// Asynchronous copies between views of the same format and size, plane by
// plane (cudaMemcpy2DAsync honours both sides' strides), on the context's
// stream. The direction follows from the pointers (unified addressing), so
// a "host" side may also be device memory (a frame that is already on the
// GPU): the names say what the callers usually pass.
void copy_to_device(const FrameView &host, const FrameView &device, const Context &ctx);
void copy_to_host(const FrameView &device, const FrameView &host, const Context &ctx);
void copy_device_to_device(const FrameView &src, const FrameView &dst, const Context &ctx);
// The same on another stream of the context (an upload or download stream
// beside the context's own).
void copy_frame_async(const FrameView &src, const FrameView &dst, const Stream &stream);
// Raw asynchronous copy on the context's stream; the direction follows from
// the pointers (unified addressing).
void copy_bytes_async(void *dst, const void *src, size_t bytes, const Context &ctx);
// Fills device memory with a byte value, asynchronously.
void fill_bytes_async(void *dst, uint8_t value, size_t bytes, const Context &ctx);

// Times work queued on a context's stream with a pair of CUDA events.
class EventTimer {
 public:
  explicit EventTimer(const Context &ctx);
  ~EventTimer();
  EventTimer(const EventTimer &) = delete;
  EventTimer &operator=(const EventTimer &) = delete;
  void start();
  void stop();
  float elapsed_ms();  // waits for the stop event

 private:
  [[maybe_unused]] const Context &ctx_;
  [[maybe_unused]] void *start_ = nullptr;
  [[maybe_unused]] void *stop_ = nullptr;
};

// The work `record` queues on the context's stream, captured once as a CUDA
// graph and replayed with one launch (benchmarks: frames back to back
// without per-kernel launch gaps). `record` must not synchronise.
class StreamGraph {
 public:
  StreamGraph(const Context &ctx, const std::function<void()> &record);
  ~StreamGraph();
  StreamGraph(const StreamGraph &) = delete;
  StreamGraph &operator=(const StreamGraph &) = delete;
  void replay();

 private:
  [[maybe_unused]] const Context &ctx_;
  [[maybe_unused]] void *graph_ = nullptr;
  [[maybe_unused]] void *exec_ = nullptr;
};

// Host-side copy of a whole frame, plane by plane (honours strides).
void copy_frame_host(const FrameView &src, const FrameView &dst);

// Number of CPU threads the CPU backend uses (its fast paths' thread pool,
// and OpenMP in the reference implementations); 0 = all (OMP_NUM_THREADS
// when set).
void set_cpu_threads(int threads);
int cpu_threads();
// Threads for a loop over `work` items (bytes, pixels): one below about a
// quarter million, where starting a team costs more than it saves (and a
// busy machine makes it cost much more).
int cpu_threads_for(size_t work);
// Runs job(j, thread) for j in [0, jobs) on up to `threads` threads of the
// CPU backend's pool (thread < threads; the calling thread is 0), jobs taken
// in order as threads become free; rethrows a job's exception. Its idle
// threads sleep after 100 us, where OpenMP's spin for milliseconds after
// every loop.
void cpu_parallel_jobs(int jobs, int threads, const std::function<void(int job, int thread)> &job);
// [0, n) cut into contiguous ranges, up to 8 per thread (one on one thread),
// run by cpu_parallel_jobs(): f(begin, end).
void cpu_parallel_ranges(long long n, int threads,
                         const std::function<void(long long begin, long long end)> &f);

}  // namespace cudadiff
