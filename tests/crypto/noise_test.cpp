// Tests of tessera/crypto/noise.hpp: Poisson draws fit their distribution (chi-square) from small means
// to 2^46, Skellam draws have the variance asked for, and the same key gives the same noise.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

#include "tessera/crypto/noise.hpp"

using namespace tessera;

namespace {

crypto::key256 key_of(std::uint8_t fill) {
  crypto::key256 k;
  k.fill(static_cast<std::byte>(fill));
  return k;
}

struct moments {
  double mean = 0, variance = 0;
};
moments moments_of(const std::vector<double>& x) {
  moments m;
  for (double v : x) m.mean += v;
  m.mean /= static_cast<double>(x.size());
  for (double v : x) m.variance += (v - m.mean) * (v - m.mean);
  m.variance /= static_cast<double>(x.size() - 1);
  return m;
}

// The 1 − 1e-6 quantile of chi-square with `df` degrees of freedom (Wilson–Hilferty).
double chi_square_limit(double df) {
  const double z = 4.753, c = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - c + z * std::sqrt(c), 3.0);
}

// Pearson's statistic of `n` Poisson(mean) draws against the exact probabilities, bins with fewer than
// 20 expected pooled into the tails.
double poisson_chi_square(double mean, int n, std::uint8_t key, double& df) {
  crypto::keystream ks(key_of(key));
  std::map<std::int64_t, int> seen;
  for (int i = 0; i < n; ++i) ++seen[crypto::poisson_draw(ks, mean)];
  const auto pmf = [&](std::int64_t k) { return std::exp(-mean + static_cast<double>(k) * std::log(mean) - std::lgamma(static_cast<double>(k) + 1.0)); };
  std::int64_t lo = static_cast<std::int64_t>(mean), hi = lo;
  while (lo > 0 && n * pmf(lo - 1) >= 20) --lo;
  while (n * pmf(hi + 1) >= 20) ++hi;
  double below = 0, within = 0, stat = 0;
  int count_below = 0, count_above = 0;
  for (std::int64_t k = 0; k < lo; ++k) below += pmf(k);
  for (std::int64_t k = lo; k <= hi; ++k) {
    const double expected = n * pmf(k);
    within += pmf(k);
    const double o = seen.contains(k) ? seen[k] : 0;
    stat += (o - expected) * (o - expected) / expected;
  }
  for (const auto& [k, c] : seen) (k < lo ? count_below : k > hi ? count_above : count_below) += (k < lo || k > hi) ? c : 0;
  const double above = 1.0 - below - within;
  if (below > 0) stat += (count_below - n * below) * (count_below - n * below) / (n * below);
  stat += (count_above - n * above) * (count_above - n * above) / (n * above);
  df = static_cast<double>(hi - lo + 1) + (below > 0 ? 1 : 0);  // bins − 1
  return stat;
}

}  // namespace

TEST_CASE("noise: Poisson draws fit the distribution (chi-square, 10^5 draws)") {
  for (const double mean : {0.7, 3.0, 9.5, 10.0, 25.0, 400.0}) {
    CAPTURE(mean);
    double df = 0;
    const double stat = poisson_chi_square(mean, 100000, static_cast<std::uint8_t>(mean), df);
    CAPTURE(df);
    CHECK(df >= 2);
    CHECK(stat < chi_square_limit(df));
  }
}

TEST_CASE("noise: Poisson means up to 2^46 keep their mean and variance") {
  for (const double mean : {1e6, 1e10, 0x1p46}) {
    CAPTURE(mean);
    crypto::keystream ks(key_of(7));
    std::vector<double> x(100000);
    for (auto& v : x) v = static_cast<double>(crypto::poisson_draw(ks, mean)) - mean;
    const moments m = moments_of(x);
    CHECK(std::abs(m.mean) < 5.0 * std::sqrt(mean / static_cast<double>(x.size())));
    CHECK(std::abs(m.variance / mean - 1.0) < 0.02);
  }
}

TEST_CASE("noise: Skellam draws have the variance asked for, centred, from one key the same") {
  for (const double variance : {1.0, 50.0, 1e6, 1e13}) {
    CAPTURE(variance);
    crypto::skellam_sampler noise(key_of(9), variance);
    std::vector<double> x(100000);
    for (auto& v : x) v = static_cast<double>(noise.next());
    const moments m = moments_of(x);
    CHECK(std::abs(m.mean) < 5.0 * std::sqrt(variance / static_cast<double>(x.size())));
    CHECK(std::abs(m.variance / variance - 1.0) < 0.02);
  }
  crypto::skellam_sampler a(key_of(1), 1e8), b(key_of(1), 1e8), c(key_of(2), 1e8);
  int same = 0, differ = 0;
  for (int i = 0; i < 100; ++i) {
    const std::int64_t x = a.next();
    same += x == b.next();
    differ += x != c.next();
  }
  CHECK(same == 100);
  CHECK(differ > 95);
  crypto::skellam_sampler none(key_of(3), 0.0);
  for (int i = 0; i < 10; ++i) CHECK(none.next() == 0);
}
