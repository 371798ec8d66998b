// Threads for the CPU backend's fast paths (cuda/cpu/fast.h).
#include "fast.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace cudadiff {
namespace fast {

void parallel_jobs(int jobs, int threads, const std::function<void(int job, int thread)> &job) {
  threads = std::max(1, std::min(threads, jobs));
#ifdef _OPENMP
  if (threads > 1) {
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int j = 0; j < jobs; ++j) job(j, omp_get_thread_num());
    return;
  }
#endif
  for (int j = 0; j < jobs; ++j) job(j, 0);
}

}  // namespace fast
}  // namespace cudadiff
