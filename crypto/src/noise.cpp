#include "tessera/crypto/noise.hpp"

#include <cmath>
#include <numbers>

#include "tessera/core/base/assert.hpp"

namespace tessera::crypto {
namespace {

// h(x) = (1 + x) log(1 + x) − x for x > −1, by its series Σ_{j>=2} (−x)^j / (j (j − 1)) near 0, where
// the direct form cancels.
double h(double x) {
  if (std::abs(x) >= 0.1) return (1.0 + x) * std::log1p(x) - x;
  double term = x * x, sum = 0;
  for (int j = 2; j < 40; ++j) {
    const double t = term / (static_cast<double>(j) * static_cast<double>(j - 1));
    sum += (j % 2 == 0) ? t : -t;
    term *= x;
    if (std::abs(t) < 1e-18 * std::abs(sum)) break;
  }
  return sum;
}

// log k! − (k log k − k + log(2πk) / 2): Stirling's error, directly for small k, by its asymptotic
// series (error below 1e-16 from k = 16) beyond.
double stirling_error(double k) {
  if (k < 16.0) return std::lgamma(k + 1.0) - (k * std::log(k) - k + 0.5 * std::log(2.0 * std::numbers::pi * k));
  const double r = 1.0 / k, r2 = r * r;
  return r * (1.0 / 12 - r2 * (1.0 / 360 - r2 * (1.0 / 1260 - r2 / 1680)));
}

// log P(X = k) for X ~ Poisson(mean), k >= 0: −mean + k log(mean) − log k! rewritten as
// −mean·h((k − mean)/mean) − log(2πk)/2 − stirling_error(k), whose terms stay small near the mean.
double log_pmf(double k, double mean) {
  if (k == 0.0) return -mean;
  return -mean * h((k - mean) / mean) - 0.5 * std::log(2.0 * std::numbers::pi * k) - stirling_error(k);
}

}  // namespace

std::int64_t poisson_draw(keystream& ks, double mean) {
  TESSERA_ASSERT(mean >= 0.0 && mean <= 0x1p49);
  if (mean == 0.0) return 0;
  if (mean < 10.0) {  // inversion: walk the distribution function
    const double u = ks.next_unit();
    double p = std::exp(-mean), f = p;
    std::int64_t k = 0;
    while (u >= f && k < 1000) {
      ++k;
      p *= mean / static_cast<double>(k);
      f += p;
    }
    return k;
  }
  const double root = std::sqrt(mean);
  const double b = 0.931 + 2.53 * root;
  const double a = -0.059 + 0.02483 * b;
  const double log_inv_alpha = std::log(1.1239 + 1.1328 / (b - 3.4));
  const double vr = 0.9277 - 3.6224 / (b - 2.0);
  // Beyond 64 deviations the probability is below e^−2000: the test below would reject there anyway.
  const double far = mean + 64.0 * root + 100.0;
  for (;;) {
    const double u = ks.next_unit() - 0.5;
    const double v = ks.next_unit();
    const double us = 0.5 - std::abs(u);
    if (us <= 0.0) continue;
    const double k = std::floor((2.0 * a / us + b) * u + mean + 0.43);
    if (us >= 0.07 && v <= vr) return static_cast<std::int64_t>(k);
    if (k < 0.0 || k > far || (us < 0.013 && v > us)) continue;
    if (std::log(v) + log_inv_alpha - std::log(a / (us * us) + b) <= log_pmf(k, mean)) return static_cast<std::int64_t>(k);
  }
}

skellam_sampler::skellam_sampler(key256_view key, double variance) : ks_(key), half_(variance / 2.0) {
  TESSERA_ASSERT(variance >= 0.0 && variance <= k_max_skellam_variance);
}

}  // namespace tessera::crypto
