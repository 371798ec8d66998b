// Private to the core: turns a failed CUDA runtime call into cudadiff::Error
// with the CUDA error name and string, the call and its place.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "cudadiff/runtime.h"

namespace cudadiff {
namespace detail {

// The runtime keeps the last error of each thread until cudaGetLastError()
// reads it, and a later launch check (CUDADIFF_CHECK_LAUNCH) would report it
// as its own: a failure thrown here, or one deliberately ignored
// (ignore_cuda), is read off first. (A sticky error, of a broken context,
// comes back from the next call anyway.)
[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char *call, const char *file,
                                          int line) {
  (void)cudaGetLastError();
  std::string msg = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err) + " (" +
                    call + " at " + file + ":" + std::to_string(line) + ")";
  throw Error(msg, static_cast<int>(err));
}

inline void check_cuda(cudaError_t err, const char *call, const char *file, int line) {
  if (err != cudaSuccess) throw_cuda_error(err, call, file, line);
}

// A call whose failure changes nothing (a release, a wait in a cleanup
// path): its error, if any, is not left for the next launch check.
inline void ignore_cuda(cudaError_t err) {
  if (err != cudaSuccess) (void)cudaGetLastError();
}

}  // namespace detail
}  // namespace cudadiff

#define CUDADIFF_CHECK(call) ::cudadiff::detail::check_cuda((call), #call, __FILE__, __LINE__)
// After a kernel launch: launch-configuration errors surface here.
#define CUDADIFF_CHECK_LAUNCH(what) \
  ::cudadiff::detail::check_cuda(cudaGetLastError(), what, __FILE__, __LINE__)
