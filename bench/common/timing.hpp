// Shared by the benchmarks: timing and the single-thread matrix-multiply reference rate.
#pragma once

#include <algorithm>
#include <chrono>

#include <Eigen/Core>

namespace tessera::bench {

// Best of `repeats` timings of `reps` calls, in seconds per call: the least disturbed estimate.
template <class F>
double best_seconds(F&& f, int reps, int repeats) {
  f();  // warm caches and page in buffers
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps);
  }
  return best;
}

// Single-thread fp32 GEMM rate of this machine with this build's flags (Eigen, square n×n), GFLOP/s.
inline double gemm_gflops(int n) {
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(n, n), b = Eigen::MatrixXf::Random(n, n), c(n, n);
  const double s = best_seconds([&] { c.noalias() = a * b; }, 3, 5);
  return 2.0 * n * n * static_cast<double>(n) / s / 1e9;
}

}  // namespace tessera::bench
