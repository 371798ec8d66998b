// Private to the core: turns a failed CUDA runtime call into cudadiff::Error
// with the CUDA error name and string, the call and its place.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "cudadiff/runtime.h"

namespace cudadiff {
namespace detail {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char *call, const char *file,
                                          int line) {
  std::string msg = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err) + " (" +
                    call + " at " + file + ":" + std::to_string(line) + ")";
  throw Error(msg, static_cast<int>(err));
}

inline void check_cuda(cudaError_t err, const char *call, const char *file, int line) {
  if (err != cudaSuccess) throw_cuda_error(err, call, file, line);
}

}  // namespace detail
}  // namespace cudadiff

#define CUDADIFF_CHECK(call) ::cudadiff::detail::check_cuda((call), #call, __FILE__, __LINE__)
// After a kernel launch: launch-configuration errors surface here.
#define CUDADIFF_CHECK_LAUNCH(what) \
  ::cudadiff::detail::check_cuda(cudaGetLastError(), what, __FILE__, __LINE__)
