// Tests of tessera/crypto/noise.hpp: Poisson draws fit their distribution (chi-square) from small means
// to 2^46, Skellam draws have the variance asked for, and the same key gives the same noise. And of
// tessera/crypto/discrete_gaussian.hpp: the draws fit N_Z(0, σ²) and the discrete Laplace proposal its
// law (chi-square against the exact probabilities), large σ keep their variance, σ² is never rounded
// down, and one key gives one stream.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "tessera/crypto/discrete_gaussian.hpp"
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

// Pearson's statistic of draws against a symmetric law on the integers given by its unnormalised
// weights w(|x|): bins with at least 20 expected, the two tails pooled.
struct fit {
  double stat = 0, df = 0;
};
fit chi_square(const std::vector<std::int64_t>& draws, const std::function<double(std::int64_t)>& weight) {
  double total = weight(0);
  for (std::int64_t k = 1; weight(k) > 1e-300 * weight(0) && k < 100000; ++k) total += 2 * weight(k);
  const auto n = static_cast<double>(draws.size());
  const auto pmf = [&](std::int64_t k) { return weight(k < 0 ? -k : k) / total; };
  std::int64_t hi = 0;
  while (n * pmf(hi + 1) >= 20) ++hi;
  std::map<std::int64_t, double> seen;
  double tail = 0;
  for (const std::int64_t x : draws) (x < -hi || x > hi ? tail : seen[x]) += 1;
  fit f;
  double within = 0;
  for (std::int64_t k = -hi; k <= hi; ++k) {
    const double expected = n * pmf(k);
    within += pmf(k);
    f.stat += (seen[k] - expected) * (seen[k] - expected) / expected;
  }
  const double tail_expected = n * (1.0 - within);
  if (tail_expected > 0) f.stat += (tail - tail_expected) * (tail - tail_expected) / tail_expected;
  f.df = static_cast<double>(2 * hi + 1);  // 2·hi + 2 bins − 1
  return f;
}

std::vector<std::int64_t> draws_of(double variance, std::uint8_t key, int n) {
  crypto::discrete_gaussian g(key_of(key), crypto::rational_variance(variance).value());
  std::vector<std::int64_t> x(static_cast<std::size_t>(n));
  for (auto& v : x) v = g.next();
  return x;
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

TEST_CASE("discrete gaussian: draws fit N_Z(0, σ²) (chi-square, 2·10^5 draws)") {
  for (const double variance : {0.25, 1.0, 2.0, 7.3, 100.0, 2500.0}) {
    CAPTURE(variance);
    const auto x = draws_of(variance, static_cast<std::uint8_t>(variance), 200000);
    const fit f = chi_square(x, [&](std::int64_t k) { return std::exp(-static_cast<double>(k * k) / (2.0 * variance)); });
    CAPTURE(f.df);
    CHECK(f.df >= 2);
    CHECK(f.stat < chi_square_limit(f.df));
  }
}

TEST_CASE("discrete gaussian: a law with the wrong σ fails the same check") {
  // The check above can fail: draws at σ² = 100 against the law at σ² = 110.
  const auto x = draws_of(100.0, 3, 200000);
  const fit f = chi_square(x, [](std::int64_t k) { return std::exp(-static_cast<double>(k * k) / 220.0); });
  CHECK(f.stat > chi_square_limit(f.df));
}

TEST_CASE("discrete gaussian: the discrete Laplace proposal fits exp(-|x|/t)") {
  for (const std::uint64_t t : {1, 2, 5, 40}) {
    CAPTURE(t);
    crypto::discrete_gaussian g(key_of(11), crypto::rational_variance(1.0).value());
    std::vector<std::int64_t> x(200000);
    for (auto& v : x) v = g.next_laplace(t);
    const fit f = chi_square(x, [&](std::int64_t k) { return std::exp(-static_cast<double>(k) / static_cast<double>(t)); });
    CHECK(f.stat < chi_square_limit(f.df));
  }
}

TEST_CASE("discrete gaussian: large σ keep mean 0 and variance σ², up to σ = 2^25") {
  for (const double variance : {1e6, 0x1p40, 0x1p50}) {
    CAPTURE(variance);
    const auto x = draws_of(variance, 5, 100000);
    double mean = 0, second = 0;
    for (const std::int64_t v : x) mean += static_cast<double>(v);
    mean /= static_cast<double>(x.size());
    for (const std::int64_t v : x) second += (static_cast<double>(v) - mean) * (static_cast<double>(v) - mean);
    second /= static_cast<double>(x.size() - 1);
    CHECK(std::abs(mean) < 5.0 * std::sqrt(variance / static_cast<double>(x.size())));
    CHECK(std::abs(second / variance - 1.0) < 0.02);
  }
}

TEST_CASE("discrete gaussian: σ² becomes a fraction at or above it, and bad variances are refused") {
  for (const double variance : {0.1, 1.0 / 3.0, 2.0, 12345.678, 0x1p39 + 0.5, 0x1p45 + 1.0, 0x1p50}) {
    CAPTURE(variance);
    const crypto::variance_fraction f = crypto::rational_variance(variance).value();
    const double value = static_cast<double>(f.num) / static_cast<double>(f.den);
    CHECK(value >= variance);
    CHECK(value - variance <= 1.0 / static_cast<double>(f.den));
    CHECK(value / variance - 1.0 < 1e-9);
  }
  for (const double bad : {0.0, -1.0, std::nan(""), 0x1p51, HUGE_VAL}) {
    CAPTURE(bad);
    const auto f = crypto::rational_variance(bad);
    REQUIRE_FALSE(f);
    CHECK(f.error().message.find("variance") != std::string::npos);
  }
}

TEST_CASE("discrete gaussian: one key, one stream; another key, another") {
  const auto a = draws_of(1e4, 1, 200), b = draws_of(1e4, 1, 200), c = draws_of(1e4, 2, 200);
  CHECK(a == b);
  int differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) differ += a[i] != c[i];
  CHECK(differ > 190);
}
