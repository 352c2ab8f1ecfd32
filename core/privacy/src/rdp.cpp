#include "tessera/core/privacy/rdp.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numbers>
#include <string>
#include <utility>

// Everything below is computed in log space: for small sigma or large orders the terms of A_alpha
// overflow a double long before the RDP itself (alpha / (2 sigma^2) at most) does.
namespace tessera::core {
namespace {

constexpr double k_inf = std::numeric_limits<double>::infinity();

// The default orders (rdp.hpp): 10 small ones, the integers 5..64, 4 large ones.
constexpr std::array<double, 74> k_orders = [] {
  std::array<double, 74> orders{1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 3.0, 3.5, 4.0, 4.5};
  for (std::size_t i = 0; i < 60; ++i) orders[10 + i] = static_cast<double>(5 + i);
  orders[70] = 80.0;
  orders[71] = 96.0;
  orders[72] = 128.0;
  orders[73] = 256.0;
  return orders;
}();
static_assert(k_orders[69] == 64.0 && std::is_sorted(k_orders.begin(), k_orders.end()));

// The fractional-order series stop once a term is below e^-36 (about 2e-16) of the sum's positive
// part: past that point they alternate in sign, so the rest is smaller than the first term left out.
constexpr double k_series_cutoff = 36.0;
// A bound on their length, which decays only polynomially: order 1.25 (the slowest) takes up to about
// 40 000 terms for sigma <= 3, and 500 000 at q = 1/2 with sigma = 10^4; the bound is 30 times that.
constexpr std::int64_t k_max_series_terms = std::int64_t{1} << 24;

// log(e^a + e^b); -inf stands for log 0.
double log_add(double a, double b) noexcept {
  if (a < b) std::swap(a, b);
  if (b == -k_inf) return a;
  return a + std::log1p(std::exp(b - a));
}

// log(e^x - 1) for x > 0: log(expm1(x)) keeps small x exact, x + log(1 - e^-x) keeps large x finite.
double log_expm1(double x) noexcept { return x < 1.0 ? std::log(std::expm1(x)) : x + std::log1p(-std::exp(-x)); }

// log(1 + e^x) for any x, without overflow.
double log1p_exp(double x) noexcept { return x > 0.0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

// log(erfc(x) / 2), i.e. the log of the standard normal tail above x * sqrt(2). std::erfc is exact to
// a few ulps and stays a normal double up to x = 25 (erfc(25) ~ 1e-273); above that the continued
// fraction erfc(x) = exp(-x^2) / sqrt(pi) / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...)))), whose 20
// levels are exact to double precision there.
double log_half_erfc(double x) noexcept {
  if (x < 25.0) return std::log(0.5 * std::erfc(x));
  double t = x;
  for (int n = 20; n >= 1; --n) t = x + 0.5 * n / t;
  return -x * x - std::log(2.0 * std::sqrt(std::numbers::pi) * t);
}

// A sum of signed terms given as logs of their magnitudes, kept as the logs of its positive and its
// negative part so that neither overflows.
class log_space_sum {
 public:
  void add(double log_magnitude, bool negative) noexcept {
    double& part = negative ? negative_ : positive_;
    part = log_add(part, log_magnitude);
  }
  [[nodiscard]] double log_positive() const noexcept { return positive_; }
  // log(positive - negative); -inf when that is not positive (a sum that rounds to 0).
  [[nodiscard]] double log_total() const noexcept {
    if (negative_ >= positive_) return -k_inf;
    return positive_ + std::log(-std::expm1(negative_ - positive_));
  }

 private:
  double positive_ = -k_inf;
  double negative_ = -k_inf;
};

// log(A - 1) for an integer order alpha >= 2 (Mironov, Talwar, Zhang 2019, Section 3.3):
//   A = sum_{k=0..alpha} C(alpha,k) (1-q)^(alpha-k) q^k exp((k^2-k) / (2 sigma^2)).
// The binomial theorem gives 1 = sum_k C(alpha,k) (1-q)^(alpha-k) q^k, and the terms k = 0, 1 have
// exp(0) = 1, so
//   A - 1 = sum_{k=2..alpha} C(alpha,k) (1-q)^(alpha-k) q^k expm1((k^2-k) / (2 sigma^2)):
// positive terms only, exact however far below double's resolution of 1 the sliver A - 1 is (tiny q).
double log_a_minus_1_integer(double q, double sigma, double alpha) noexcept {
  const double log_q = std::log(q);
  const double log_1mq = std::log1p(-q);
  const double two_variance = 2.0 * sigma * sigma;
  log_space_sum sum;
  double log_binomial = std::log(alpha);  // log C(alpha, 1)
  for (double k = 2.0; k <= alpha; k += 1.0) {
    log_binomial += std::log((alpha - k + 1.0) / k);  // C(alpha,k) = C(alpha,k-1) (alpha-k+1) / k
    sum.add(log_binomial + (alpha - k) * log_1mq + k * log_q + log_expm1((k * k - k) / two_variance), false);
  }
  return sum.log_total();
}

// log(1 - (1-q)^(alpha-1) (1 + (alpha-1) q)), the part of 1 that the terms k = 0, 1 of A0 (below)
// leave out. With b = alpha - 1 the exponent u = b log(1-q) + log(1 + b q) < 0 loses its first-order
// terms to cancellation, so for small b q it is summed as the series
//   u = sum_{n>=2} q^n / n ((-1)^(n+1) b^n - b),
// whose first term is -alpha (alpha-1) q^2 / 2.
double log_binomial_head_deficit(double q, double alpha) noexcept {
  const double b = alpha - 1.0;
  double u = 0.0;
  if (std::max(b, 1.0) * q < 1e-2) {
    double q_n = q, b_n = b;  // q^n and (-1)^(n+1) b^n, from n = 1
    for (int n = 2; n < 40; ++n) {
      q_n *= q;
      b_n *= -b;
      const double term = q_n / n * (b_n - b);
      u += term;
      if (std::abs(term) < 1e-18 * std::abs(u)) break;
    }
  } else {
    u = b * std::log1p(-q) + std::log1p(b * q);
  }
  return std::log(-std::expm1(u));
}

// log(A - 1) for a fractional order alpha > 1: A = A0 + A1 (Mironov, Talwar, Zhang 2019, Section 3.3),
// where z0 = sigma^2 log(1/q - 1) + 1/2 is where the two Gaussians' weights cross and, for k = 0, 1, ...,
//   A0 = sum_k C(alpha,k) (1-q)^(alpha-k) q^k exp((k^2-k) / (2 sigma^2)) erfc((k - z0) / (sqrt(2) sigma)) / 2
//   A1 = sum_k C(alpha,k) (1-q)^k q^(alpha-k) exp((j^2-j) / (2 sigma^2)) erfc((z0 - j) / (sqrt(2) sigma)) / 2
// with j = alpha - k (generalised binomial coefficients: their signs alternate once k > alpha).
// For small q, A is 1 plus a sliver that the terms k = 0, 1 of A0 would drown in rounding. With
// c0 = (1-q)^alpha, c1 = alpha q (1-q)^(alpha-1) and the normal tails above z0 of N(0, sigma^2) and
// N(1, sigma^2), T0 = erfc(z0 / (sqrt(2) sigma)) / 2 and T1 = erfc((z0 - 1) / (sqrt(2) sigma)) / 2,
// those two terms are c0 (1 - T0) + c1 (1 - T1), and exactly
//   A - 1 = -(1 - c0 - c1) - c0 T0 - c1 T1 + (A0's terms k >= 2) + A1,
// where 1 - c0 - c1 = 1 - (1-q)^(alpha-1) (1 + (alpha-1) q) comes from log_binomial_head_deficit.
// Against the 50-digit reference this is within 3e-11 relative for q in [1e-8, 0.999] and sigma in
// [0.1, 20]. What remains is the split at z0: for q near 1/2 both parts are of order 1 and cancel to
// about q^2 / sigma^2, which costs digits only at absurd noise (1e-5 relative at sigma = 10^4).
double log_a_minus_1_fractional(double q, double sigma, double alpha) noexcept {
  const double log_q = std::log(q);
  const double log_1mq = std::log1p(-q);
  const double two_variance = 2.0 * sigma * sigma;
  const double root2_sigma = std::sqrt(2.0) * sigma;
  const double z0 = sigma * sigma * (log_1mq - log_q) + 0.5;
  log_space_sum sum;
  sum.add(log_binomial_head_deficit(q, alpha), true);
  sum.add(alpha * log_1mq + log_half_erfc(z0 / root2_sigma), true);                                        // c0 T0
  sum.add(std::log(alpha) + log_q + (alpha - 1.0) * log_1mq + log_half_erfc((z0 - 1.0) / root2_sigma), true);  // c1 T1
  double log_binomial = 0.0;  // log |C(alpha, k)|, from C(alpha, 0) = 1
  bool negative = false;      // the sign of C(alpha, k)
  for (std::int64_t i = 0; i < k_max_series_terms; ++i) {
    const auto k = static_cast<double>(i);
    if (i > 0) {
      const double ratio = (alpha - k + 1.0) / k;  // C(alpha,k) / C(alpha,k-1); never 0 for fractional alpha
      log_binomial += std::log(std::abs(ratio));
      negative = negative != (ratio < 0.0);
    }
    const double j = alpha - k;
    const double log_a1_term = log_binomial + k * log_1mq + j * log_q + (j * j - j) / two_variance +
                               log_half_erfc((z0 - j) / root2_sigma);
    sum.add(log_a1_term, negative);
    double log_a0_term = -k_inf;
    if (i >= 2) {
      log_a0_term = log_binomial + j * log_1mq + k * log_q + (k * k - k) / two_variance +
                    log_half_erfc((k - z0) / root2_sigma);
      sum.add(log_a0_term, negative);
    }
    // Past k > alpha the terms alternate and never grow again: stop when both are negligible.
    if (k > alpha && std::max(log_a0_term, log_a1_term) < sum.log_positive() - k_series_cutoff) break;
  }
  return sum.log_total();
}

// Zhu and Wang's general bound (rdp.hpp) for a Poisson-sampled release at order alpha, from the
// unsampled mechanism's RDP `plain(l)` at the integer orders l = 2..ceil(alpha) and its RDP
// `plain_at_alpha` at alpha itself, which the sampled release never exceeds (each of its outputs is
// a mixture of the unsampled mechanism's on neighbouring inputs). The bound's sum A has, by the
// binomial theorem, 1 = (1−q)^(α−1)(αq − q + 1) + Σ_{l>=2} C(α,l)(1−q)^(α−l) q^l, so
//   A − 1 = C(α,2) q²(1−q)^(α−2) (e^ε(2) − 1) + Σ_{l>=3} C(α,l)(1−q)^(α−l) q^l (3 e^((l−1)ε(l)) − 1):
// positive terms only, summed in log space as the Gaussian's (exact for tiny q).
template <class unsampled_rdp>
double zhu_wang_rdp(double q, double alpha, double plain_at_alpha, const unsampled_rdp& plain) {
  TESSERA_ASSERT(q >= 0.0 && q <= 1.0);
  if (q == 0.0) return 0.0;
  // Infinite RDP at alpha is infinite at ceil(alpha) too, and so is the bound's last term.
  if (q == 1.0 || plain_at_alpha == k_inf) return plain_at_alpha;
  const double a = std::ceil(alpha);
  const double log_q = std::log(q);
  const double log_1mq = std::log1p(-q);
  log_space_sum sum;
  double log_binomial = std::log(a);  // log C(a, 1)
  for (double l = 2.0; l <= a; l += 1.0) {
    log_binomial += std::log((a - l + 1.0) / l);
    const double eps = plain(l);
    // log(e^x − 1) at l = 2; log(3 e^x − 1) = x + log(3 − e^−x) beyond.
    const double log_factor = l == 2.0 ? log_expm1(eps) : (l - 1.0) * eps + std::log(3.0 - std::exp(-(l - 1.0) * eps));
    sum.add(log_binomial + (a - l) * log_1mq + l * log_q + log_factor, false);
  }
  return std::min(plain_at_alpha, log1p_exp(sum.log_total()) / (a - 1.0));
}

// "%.17g": every double as it reads back.
std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// rdp[i] += steps * one_step(orders[i]), one_step giving a mechanism's RDP per step. Zero steps add
// nothing (not even the NaN of 0 times an infinite RDP).
template <class rdp_of_order>
void add_steps(std::span<double> rdp, std::int64_t steps, const rdp_of_order& one_step) {
  TESSERA_ASSERT(steps >= 0);
  if (steps == 0) return;
  const std::span<const double> orders = default_rdp_orders();
  TESSERA_ASSERT(rdp.size() == orders.size());
  for (std::size_t i = 0; i < orders.size(); ++i) rdp[i] += static_cast<double>(steps) * one_step(orders[i]);
}

// The per-step RDP of each mechanism, as add_steps takes it.
auto gaussian_steps(double q, double sigma) {
  return [q, sigma](double alpha) { return sampled_gaussian_rdp(q, sigma, alpha); };
}
auto skellam_steps(double q, const skellam_mechanism& m) {
  return [q, m](double alpha) { return sampled_skellam_rdp(q, m, alpha); };
}
auto discrete_gaussian_steps(double q, const discrete_gaussian_mechanism& m) {
  return [q, m](double alpha) { return sampled_discrete_gaussian_rdp(q, m, alpha); };
}

}  // namespace

std::span<const double> default_rdp_orders() noexcept { return k_orders; }

// rdp = log(A) / (alpha - 1), with log A = log(1 + (A - 1)) from the sliver A - 1 the two helpers
// compute without cancellation.
double sampled_gaussian_rdp(double q, double sigma, double alpha) {
  TESSERA_ASSERT(q >= 0.0 && q <= 1.0);
  TESSERA_ASSERT(sigma >= 0.0);
  TESSERA_ASSERT(alpha > 1.0 && std::isfinite(alpha));
  if (q == 0.0) return 0.0;
  if (sigma == 0.0) return k_inf;  // no noise: no privacy
  if (q == 1.0) return alpha / (2.0 * sigma * sigma);
  const double log_a_minus_1 = alpha == std::floor(alpha) ? log_a_minus_1_integer(q, sigma, alpha)
                                                          : log_a_minus_1_fractional(q, sigma, alpha);
  return log1p_exp(log_a_minus_1) / (alpha - 1.0);
}

double skellam_rdp(const skellam_mechanism& m, double alpha) {
  TESSERA_ASSERT(m.l1 > 0.0 && m.l2 > 0.0 && m.variance > 0.0);
  TESSERA_ASSERT(alpha > 1.0 && std::isfinite(alpha));
  const double a = std::ceil(alpha);
  const double l2sq = m.l2 * m.l2;
  const double v = m.variance;
  return a * l2sq / (2.0 * v) + std::min(((2.0 * a - 1.0) * l2sq + 6.0 * m.l1) / (4.0 * v * v), 3.0 * m.l1 / (2.0 * v));
}

double sampled_skellam_rdp(double q, const skellam_mechanism& m, double alpha) {
  return zhu_wang_rdp(q, alpha, skellam_rdp(m, alpha), [&m](double l) { return skellam_rdp(m, l); });
}

double discrete_gaussian_rdp(const discrete_gaussian_mechanism& m, double alpha) {
  TESSERA_ASSERT(m.sigma >= 0.0);
  TESSERA_ASSERT(alpha > 1.0 && std::isfinite(alpha));
  if (m.sigma == 0.0) return k_inf;  // no noise: no privacy
  return alpha / (2.0 * m.sigma * m.sigma);
}

double sampled_discrete_gaussian_rdp(double q, const discrete_gaussian_mechanism& m, double alpha) {
  return zhu_wang_rdp(q, alpha, discrete_gaussian_rdp(m, alpha), [&m](double l) { return discrete_gaussian_rdp(m, l); });
}

// epsilon(alpha) = rdp(alpha) + log((alpha-1)/alpha) - (log(delta) + log(alpha)) / (alpha-1)
// (Balle et al. 2020, Theorem 21; Canonne, Kamath, Steinke 2020), minimised over the orders; a
// negative minimum (possible for tiny RDP and large delta) means epsilon 0. An RDP of exactly 0 at any
// order means the two output distributions are equal (a Rényi divergence of order > 1 vanishes only
// then): epsilon 0 there, not the bound's positive value (0.019 at order 256 for delta 1e-5).
dp_epsilon rdp_to_epsilon(std::span<const double> orders, std::span<const double> rdp, double delta) {
  TESSERA_ASSERT(!orders.empty() && orders.size() == rdp.size());
  TESSERA_ASSERT(delta > 0.0 && delta < 1.0);
  const double log_delta = std::log(delta);
  dp_epsilon best{k_inf, orders.front()};
  for (std::size_t i = 0; i < orders.size(); ++i) {
    const double alpha = orders[i];
    TESSERA_ASSERT(alpha > 1.0);
    const double bound =
        rdp[i] == 0.0 ? 0.0 : rdp[i] + std::log1p(-1.0 / alpha) - (log_delta + std::log(alpha)) / (alpha - 1.0);
    if (bound < best.epsilon) {
      best.epsilon = bound;
      best.order = alpha;
    }
  }
  best.epsilon = std::max(best.epsilon, 0.0);
  return best;
}

rdp_accountant::rdp_accountant() : rdp_(default_rdp_orders().size(), 0.0) {}

void rdp_accountant::compose(double q, double sigma, std::int64_t steps) {
  add_steps(rdp_, steps, gaussian_steps(q, sigma));
  steps_ += steps;
}

void rdp_accountant::compose(double q, const skellam_mechanism& m, std::int64_t steps) {
  add_steps(rdp_, steps, skellam_steps(q, m));
  steps_ += steps;
}

void rdp_accountant::compose(double q, const discrete_gaussian_mechanism& m, std::int64_t steps) {
  add_steps(rdp_, steps, discrete_gaussian_steps(q, m));
  steps_ += steps;
}

dp_epsilon rdp_accountant::epsilon(double delta) const { return rdp_to_epsilon(orders(), rdp_, delta); }

dp_epsilon rdp_accountant::epsilon_after(double q, double sigma, std::int64_t more, double delta) const {
  std::vector<double> after = rdp_;
  add_steps(after, more, gaussian_steps(q, sigma));
  return rdp_to_epsilon(orders(), after, delta);
}

dp_epsilon rdp_accountant::epsilon_after(double q, const skellam_mechanism& m, std::int64_t more, double delta) const {
  std::vector<double> after = rdp_;
  add_steps(after, more, skellam_steps(q, m));
  return rdp_to_epsilon(orders(), after, delta);
}

dp_epsilon rdp_accountant::epsilon_after(double q, const discrete_gaussian_mechanism& m, std::int64_t more, double delta) const {
  std::vector<double> after = rdp_;
  add_steps(after, more, discrete_gaussian_steps(q, m));
  return rdp_to_epsilon(orders(), after, delta);
}

result<rdp_accountant> rdp_accountant::restore(std::span<const double> orders, std::span<const double> rdp,
                                               std::int64_t steps) {
  const std::span<const double> expected = default_rdp_orders();
  const std::string what = "RDP accountant: ";
  if (orders.size() != expected.size())
    return make_error(errc::invalid_argument, what + std::to_string(orders.size()) + " orders, expected the " +
                                                  std::to_string(expected.size()) + " default orders");
  for (std::size_t i = 0; i < orders.size(); ++i) {
    if (orders[i] != expected[i])
      return make_error(errc::invalid_argument, what + "order " + std::to_string(i) + " is " + number_text(orders[i]) +
                                                    ", expected " + number_text(expected[i]));
  }
  if (rdp.size() != orders.size())
    return make_error(errc::invalid_argument, what + std::to_string(rdp.size()) + " RDP values for " +
                                                  std::to_string(orders.size()) + " orders");
  for (std::size_t i = 0; i < rdp.size(); ++i) {
    if (!std::isfinite(rdp[i]))
      return make_error(errc::not_finite, what + "the RDP at order " + number_text(orders[i]) + " is " +
                                              number_text(rdp[i]) + ", not a finite number");
    if (rdp[i] < 0.0)
      return make_error(errc::invalid_argument,
                        what + "the RDP at order " + number_text(orders[i]) + " is negative (" + number_text(rdp[i]) + ")");
  }
  if (steps < 0) return make_error(errc::invalid_argument, what + "negative step count (" + std::to_string(steps) + ")");
  rdp_accountant restored;
  restored.rdp_.assign(rdp.begin(), rdp.end());
  restored.steps_ = steps;
  return restored;
}

}  // namespace tessera::core
