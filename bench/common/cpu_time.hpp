// Shared by the benchmarks: the CPU time of the calling thread, and a call charged with it. Thread CPU
// time, not wall time: one side's cost while other threads or processes share the cores.
//
//   double hub = 0;
//   const auto roster = must(bench::add_cpu_time(hub, [&] { return server.roster_for(id); }));
#pragma once

#include <time.h>

#include <utility>

namespace tessera::bench {

// CPU seconds this thread has used so far.
inline double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Calls f() and adds the CPU seconds it took on this thread to `total`; returns what f() returned.
template <class F>
auto add_cpu_time(double& total, F&& f) {
  const double start = thread_cpu_seconds();
  auto out = std::forward<F>(f)();
  total += thread_cpu_seconds() - start;
  return out;
}

}  // namespace tessera::bench
