// Threads for the CPU backend's fast paths (cuda/cpu/fast.h).
//
// A small pool of its own rather than an OpenMP team: an OpenMP parallel
// loop ends with a barrier that waits until every thread of the team has
// woken up and arrived, so one thread that the scheduler wakes late (an idle
// many-core machine in deep sleep states, a busy one giving the core to
// something else) holds the whole frame up. Here the caller starts on the
// jobs at once, pool threads join while jobs are left, and the caller waits
// only for the jobs that were taken, never for a thread that has not started.
// A pool thread that has just finished watches for new work for a short while
// before it sleeps, so back-to-back frames (or the passes of one operation)
// do not pay a wake-up each.
#include "fast.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <list>
#include <mutex>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace cudadiff {
namespace fast {
namespace {

// How long an idle pool thread watches for work before it sleeps.
constexpr auto kSpin = std::chrono::microseconds(100);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

struct Task {
  const std::function<void(int, int)> *job = nullptr;
  int jobs = 0;
  int max_joined = 0;          // pool threads that may join (threads - 1)
  int joined = 0;              // joined so far (guarded by the pool's mutex)
  std::atomic<int> next{0};    // the next job to take
  std::atomic<int> active{0};  // joined pool threads that have not left yet
  std::exception_ptr error;    // the first exception a pool thread's job threw (guarded)
};

class Pool {
 public:
  // Runs the task's jobs on the calling thread and on up to max_joined pool
  // threads; returns when every job has run (rethrows a job's exception).
  void run(Task &task) {
    int wake = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (; threads_ < task.max_joined; ++threads_)
        std::thread([this] { work(); }).detach();  // runs as long as the process
      tasks_.push_back(&task);
      generation_.fetch_add(1, std::memory_order_release);
      wake = std::min(sleepers_, task.max_joined);
    }
    for (int i = 0; i < wake; ++i) wake_.notify_one();

    std::exception_ptr error;
    try {
      take_jobs(task, 0);
    } catch (...) {
      error = std::current_exception();
      task.next = task.jobs;  // hand out no more jobs
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      tasks_.remove(&task);  // no pool thread joins from here on
    }
    // The jobs still running are the last ones the pool threads took: wait
    // for them without sleeping (a sleep would cost a wake-up).
    const auto start = std::chrono::steady_clock::now();
    while (task.active.load(std::memory_order_acquire) != 0) {
      if (std::chrono::steady_clock::now() - start < kSpin)
        cpu_relax();
      else
        std::this_thread::yield();
    }
    if (!error) error = task.error;
    if (error) std::rethrow_exception(error);
  }

 private:
  static void take_jobs(Task &task, int thread) {
    for (int j = task.next++; j < task.jobs; j = task.next++) (*task.job)(j, thread);
  }

  // Joins a task that has room for one more pool thread and jobs left (under the
  // mutex); returns it with the pool thread's index, or null.
  Task *join(int *thread) {
    for (Task *t : tasks_)
      if (t->joined < t->max_joined && t->next.load() < t->jobs) {
        *thread = ++t->joined;  // the caller is thread 0
        t->active.fetch_add(1, std::memory_order_relaxed);
        return t;
      }
    return nullptr;
  }

  void help(Task &task, int thread) {
    try {
      take_jobs(task, thread);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!task.error) task.error = std::current_exception();
      task.next = task.jobs;
    }
    task.active.fetch_sub(1, std::memory_order_release);  // the last access to the task
  }

  void work() {
    unsigned seen = generation_.load(std::memory_order_acquire);
    for (;;) {
      // Watch for a new task for a while.
      const auto start = std::chrono::steady_clock::now();
      while (generation_.load(std::memory_order_acquire) == seen &&
             std::chrono::steady_clock::now() - start < kSpin)
        for (int i = 0; i < 64; ++i) cpu_relax();
      std::unique_lock<std::mutex> lock(mutex_);
      int thread = 0;
      Task *task = join(&thread);
      if (!task && generation_.load(std::memory_order_relaxed) == seen) {
        ++sleepers_;
        wake_.wait(lock, [&] { return (task = join(&thread)) != nullptr; });
        --sleepers_;
      }
      seen = generation_.load(std::memory_order_relaxed);
      lock.unlock();
      if (task) help(*task, thread);
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;         // sleeping pool threads wait here for a task
  std::list<Task *> tasks_;              // tasks that pool threads may still join
  std::atomic<unsigned> generation_{0};  // counts the tasks published
  int sleepers_ = 0;                     // pool threads waiting on wake_
  int threads_ = 0;                      // pool threads started
};

Pool &pool() {
  static Pool *p = new Pool();  // never destroyed: its threads run until the process exits
  return *p;
}

}  // namespace

void parallel_jobs(int jobs, int threads, const std::function<void(int job, int thread)> &job) {
  threads = std::max(1, std::min(threads, jobs));
  if (threads == 1) {
    for (int j = 0; j < jobs; ++j) job(j, 0);
    return;
  }
  Task task;
  task.job = &job;
  task.jobs = jobs;
  task.max_joined = threads - 1;
  pool().run(task);
}

}  // namespace fast

// (cudadiff/runtime.h)
void cpu_parallel_jobs(int jobs, int threads, const std::function<void(int, int)> &job) {
  fast::parallel_jobs(jobs, threads, job);
}

void cpu_parallel_ranges(long long n, int threads,
                         const std::function<void(long long, long long)> &f) {
  if (n <= 0) return;
  threads = static_cast<int>(std::max<long long>(1, std::min<long long>(threads, n)));
  const int jobs = threads == 1 ? 1 : static_cast<int>(std::min<long long>(n, 8LL * threads));
  fast::parallel_jobs(jobs, threads, [&](int j, int) { f(n * j / jobs, n * (j + 1) / jobs); });
}

}  // namespace cudadiff
