#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/privacy/rdp.hpp"
#include "test_files.hpp"

using namespace tessera::core;
using namespace tessera::testing;
using json = nlohmann::json;

namespace {

constexpr double k_inf = std::numeric_limits<double>::infinity();

// |a - b| within `relative` of the larger magnitude (equal infinities agree).
bool close(double a, double b, double relative) {
  if (a == b) return true;
  return std::abs(a - b) <= relative * std::max(std::abs(a), std::abs(b));
}

// tests/core/rdp_reference.json, written by rdp_reference.py (mpmath, 50 digits).
json reference_table() {
  const std::string text = read_bytes(TESSERA_RDP_REFERENCE);
  REQUIRE_MESSAGE(!text.empty(), "cannot read " TESSERA_RDP_REFERENCE);
  return json::parse(text);
}

bool is_default(const std::vector<double>& orders) {
  const std::span<const double> d = default_rdp_orders();
  return std::equal(orders.begin(), orders.end(), d.begin(), d.end());
}

// The composed RDP of a table case's mechanisms at its orders.
std::vector<double> composed_rdp(const json& c, const std::vector<double>& orders) {
  std::vector<double> total(orders.size(), 0.0);
  for (const json& m : c.at("mechanisms")) {
    const auto steps = m.at("steps").get<std::int64_t>();
    for (std::size_t i = 0; i < orders.size(); ++i)
      total[i] += static_cast<double>(steps) *
                  sampled_gaussian_rdp(m.at("q").get<double>(), m.at("sigma").get<double>(), orders[i]);
  }
  return total;
}

// An accountant with some history, for the state tests.
rdp_accountant some_accountant() {
  rdp_accountant a;
  a.compose(0.05, 1.1, 120);
  a.compose(0.02, 0.9, 30);
  return a;
}

// The reference table's cases of one mechanism (`key`, at least `least` of them): each case's
// mechanisms composed, sampled at their q, against the 50-digit RDP at every default order and the ε,
// and the accountant composing the same to the last bits.
template <class Read, class Rdp>
void check_sampled_cases(const char* key, std::size_t least, Read read, Rdp rdp) {
  const json table = reference_table();
  REQUIRE(table.at(key).size() >= least);
  const std::span<const double> orders = default_rdp_orders();
  for (const json& c : table.at(key)) {
    CAPTURE(c.at("name").get<std::string>());
    const auto expected = c.at("rdp").get<std::vector<double>>();
    const auto delta = c.at("delta").get<double>();
    REQUIRE(expected.size() == orders.size());
    rdp_accountant a;
    std::vector<double> got(orders.size(), 0.0);
    for (const json& m : c.at("mechanisms")) {
      const auto mech = read(m);
      const double q = m.at("q").get<double>();
      const auto steps = m.at("steps").get<std::int64_t>();
      for (std::size_t i = 0; i < orders.size(); ++i) got[i] += static_cast<double>(steps) * rdp(q, mech, orders[i]);
      a.compose(q, mech, steps);
    }
    for (std::size_t i = 0; i < orders.size(); ++i) {
      CAPTURE(orders[i]);
      CHECK(close(got[i], expected[i], 1e-6));
      CHECK(close(a.rdp()[i], got[i], 1e-15));
    }
    CHECK(close(a.epsilon(delta).epsilon, c.at("epsilon").get<double>(), 1e-6));
    CHECK(a.epsilon(delta).order == c.at("order").get<double>());
  }
}

}  // namespace

TEST_CASE("rdp: the default orders are the reference script's, ascending and above 1") {
  const json table = reference_table();
  const auto orders = table.at("orders").get<std::vector<double>>();
  CHECK(is_default(orders));
  const std::span<const double> d = default_rdp_orders();
  CHECK(d.size() == 74);
  CHECK(d.front() > 1.0);
  CHECK(std::is_sorted(d.begin(), d.end()));
  CHECK(std::adjacent_find(d.begin(), d.end()) == d.end());
  CHECK(rdp_accountant().orders().data() == d.data());
}

TEST_CASE("rdp: every RDP value and epsilon of the reference table agrees to 1e-6") {
  const json table = reference_table();
  REQUIRE(table.at("cases").size() >= 8);
  for (const json& c : table.at("cases")) {
    CAPTURE(c.at("name").get<std::string>());
    const auto orders = c.at("orders").get<std::vector<double>>();
    const auto expected = c.at("rdp").get<std::vector<double>>();
    const auto delta = c.at("delta").get<double>();
    REQUIRE(expected.size() == orders.size());
    const std::vector<double> got = composed_rdp(c, orders);
    for (std::size_t i = 0; i < orders.size(); ++i) {
      CAPTURE(orders[i]);
      CAPTURE(got[i]);
      CAPTURE(expected[i]);
      CHECK(close(got[i], expected[i], 1e-6));
    }
    const dp_epsilon e = rdp_to_epsilon(orders, got, delta);
    CHECK(close(e.epsilon, c.at("epsilon").get<double>(), 1e-6));
    CHECK(e.order == c.at("order").get<double>());
    if (!is_default(orders)) continue;
    // The accountant composes the same values, mechanism after mechanism.
    rdp_accountant a;
    std::int64_t steps = 0;
    for (const json& m : c.at("mechanisms")) {
      a.compose(m.at("q").get<double>(), m.at("sigma").get<double>(), m.at("steps").get<std::int64_t>());
      steps += m.at("steps").get<std::int64_t>();
    }
    CHECK(a.steps() == steps);
    for (std::size_t i = 0; i < orders.size(); ++i) CHECK(close(a.rdp()[i], got[i], 1e-15));
    CHECK(close(a.epsilon(delta).epsilon, e.epsilon, 1e-15));
  }
}

TEST_CASE("rdp: the Skellam cases of the reference table agree to 1e-6, through the accountant too") {
  check_sampled_cases("skellam_cases", 6, [](const json& m) {
    return skellam_mechanism{.l1 = m.at("l1").get<double>(), .l2 = m.at("l2").get<double>(), .variance = m.at("variance").get<double>()};
  }, [](double q, const skellam_mechanism& m, double order) { return sampled_skellam_rdp(q, m, order); });
}

TEST_CASE("rdp: the Skellam bound tends to the Gaussian's and never grows with more noise") {
  // Variance v for sensitivity l2 is the Gaussian mechanism of sigma = sqrt(v) / l2, plus terms in 1/v^2.
  const double l2 = 1e6, sigma = 1.1;
  const skellam_mechanism fine{.l1 = l2 * 1000, .l2 = l2, .variance = sigma * sigma * l2 * l2};
  for (double alpha : {2.0, 7.0, 64.0}) CHECK(close(skellam_rdp(fine, alpha), sampled_gaussian_rdp(1.0, sigma, alpha), 1e-9));
  // The generic subsampling bound is looser than the sampled Gaussian's exact one, never tighter.
  for (double alpha : {2.0, 3.0, 10.0, 32.0}) CHECK(sampled_skellam_rdp(0.05, fine, alpha) >= sampled_gaussian_rdp(0.05, sigma, alpha) * (1 - 1e-9));
  // A fractional order takes its next integer's value.
  CHECK(skellam_rdp(fine, 2.25) == skellam_rdp(fine, 3.0));
  double previous = k_inf;
  for (double v : {1e2, 1e3, 1e4, 1e6}) {
    const skellam_mechanism m{.l1 = 400, .l2 = 20, .variance = v};
    const double e = rdp_accountant().epsilon_after(0.1, m, 100, 1e-5).epsilon;
    CHECK(e < previous);
    previous = e;
  }
  rdp_accountant a;
  const skellam_mechanism m{.l1 = 400, .l2 = 20, .variance = 800};
  a.compose(0.0, m, 10);
  CHECK(a.epsilon(1e-5).epsilon == 0.0);
  double last = 0;
  for (double q : {0.01, 0.1, 0.5, 1.0}) {
    const double e = a.epsilon_after(q, m, 10, 1e-5).epsilon;
    CHECK(e > last);
    last = e;
  }
}

TEST_CASE("rdp: the discrete Gaussian cases of the reference table agree to 1e-6, through the accountant too") {
  check_sampled_cases("discrete_gaussian_cases", 8, [](const json& m) { return discrete_gaussian_mechanism{.sigma = m.at("sigma").get<double>()}; },
                      [](double q, const discrete_gaussian_mechanism& m, double order) { return sampled_discrete_gaussian_rdp(q, m, order); });
}

TEST_CASE("rdp: the sampled discrete Gaussian's bound is never below the sampled continuous Gaussian's") {
  // Zhu and Wang's bound holds for any mechanism with the discrete Gaussian's unsampled RDP, the
  // continuous Gaussian among them: below the latter's exact figure it would be wrong.
  const double orders[] = {1.25, 1.5, 2.0, 2.5, 3.0, 4.5, 5.0, 8.0, 16.0, 32.0, 64.0, 256.0};
  for (double q : {1e-6, 1e-3, 0.01, 0.05, 0.2, 0.5, 0.9})
    for (double sigma : {0.3, 0.7, 1.0, 1.5, 3.0, 10.0})
      for (double alpha : orders) {
        CAPTURE(q);
        CAPTURE(sigma);
        CAPTURE(alpha);
        const double discrete = sampled_discrete_gaussian_rdp(q, {.sigma = sigma}, alpha);
        const double continuous = sampled_gaussian_rdp(q, sigma, alpha);
        CHECK(discrete >= continuous * (1 - 1e-12));
        CHECK(discrete <= alpha / (2 * sigma * sigma));  // never more than unsampled
      }
  // Unsampled the two are the same; sampled, at the usual q and sigma the general bound costs more.
  for (double sigma : {0.5, 1.0, 2.5})
    for (double alpha : {1.25, 2.0, 17.0, 256.0}) CHECK(discrete_gaussian_rdp({.sigma = sigma}, alpha) == sampled_gaussian_rdp(1.0, sigma, alpha));
  const discrete_gaussian_mechanism noise{.sigma = 1.0};
  CHECK(rdp_accountant().epsilon_after(0.05, noise, 200, 1e-5).epsilon > rdp_accountant().epsilon_after(0.05, 1.0, 200, 1e-5).epsilon * 1.05);
  // q = 0 is no release, sigma = 0 no privacy.
  for (double alpha : {1.25, 2.0, 64.0}) {
    CHECK(sampled_discrete_gaussian_rdp(0.0, noise, alpha) == 0.0);
    CHECK(sampled_discrete_gaussian_rdp(0.1, {.sigma = 0.0}, alpha) == k_inf);
  }
}

TEST_CASE("rdp: Opacus's worked example, epsilon 0.336 at order 23") {
  // opacus/accountants/analysis/rdp.py: [(1e-5, 1.0, 10), (1e-4, 3.0, 4)], orders 2..32, delta 1e-5.
  std::vector<double> orders;
  for (int a = 2; a <= 32; ++a) orders.push_back(a);
  std::vector<double> rdp(orders.size());
  for (std::size_t i = 0; i < orders.size(); ++i)
    rdp[i] = 10 * sampled_gaussian_rdp(1e-5, 1.0, orders[i]) + 4 * sampled_gaussian_rdp(1e-4, 3.0, orders[i]);
  const dp_epsilon e = rdp_to_epsilon(orders, rdp, 1e-5);
  CHECK(e.epsilon == doctest::Approx(0.336).epsilon(1e-3));
  CHECK(e.order == 23.0);
}

TEST_CASE("rdp: hand-checkable values") {
  SUBCASE("q = 1 is the Gaussian mechanism: alpha / (2 sigma^2)") {
    for (double sigma : {0.3, 1.0, 2.5})
      for (double alpha : {1.25, 2.0, 4.5, 17.0, 256.0}) CHECK(sampled_gaussian_rdp(1.0, sigma, alpha) == alpha / (2 * sigma * sigma));
  }
  SUBCASE("q = 0 is no mechanism at all, sigma = 0 no privacy") {
    for (double alpha : {1.25, 2.0, 64.0}) {
      CHECK(sampled_gaussian_rdp(0.0, 1.0, alpha) == 0.0);
      CHECK(sampled_gaussian_rdp(0.0, 0.0, alpha) == 0.0);
      CHECK(sampled_gaussian_rdp(0.1, 0.0, alpha) == k_inf);
    }
    // RDP 0: equal output distributions, epsilon 0 (not the bound's 0.019 at order 256).
    rdp_accountant a;
    CHECK(a.epsilon(1e-5).epsilon == 0.0);
    a.compose(0.0, 1.0, 1000);
    CHECK(a.epsilon(1e-5).epsilon == 0.0);
    CHECK(a.steps() == 1000);
    a.compose(0.1, 0.0, 1);
    CHECK(a.epsilon(1e-5).epsilon == k_inf);
    CHECK(a.epsilon(1e-5).order == default_rdp_orders().front());
  }
  SUBCASE("orders 2 and 3 in closed form") {
    // A_2 = 1 + q^2 (e^(1/s^2) - 1);  A_3 = 1 + 3 q^2 (1-q) (e^(1/s^2) - 1) + q^3 (e^(3/s^2) - 1).
    for (double q : {1e-9, 1e-3, 0.1, 0.7})
      for (double sigma : {0.5, 1.0, 4.0}) {
        CAPTURE(q);
        CAPTURE(sigma);
        const double e1 = std::expm1(1 / (sigma * sigma)), e3 = std::expm1(3 / (sigma * sigma));
        CHECK(close(sampled_gaussian_rdp(q, sigma, 2.0), std::log1p(q * q * e1), 1e-13));
        CHECK(close(sampled_gaussian_rdp(q, sigma, 3.0), std::log1p(3 * q * q * (1 - q) * e1 + q * q * q * e3) / 2, 1e-13));
      }
  }
  SUBCASE("tiny q at fractional orders: alpha q^2 (e^(1/s^2) - 1) / 2, below double's resolution of A") {
    // A - 1 = C(alpha,2) q^2 (e^(1/s^2) - 1) (1 + O(q)), here about 1e-16: A itself rounds to 1.
    for (double alpha : {1.25, 1.5, 2.5, 4.5}) {
      CAPTURE(alpha);
      const double q = 1e-8, sigma = 1.0;
      CHECK(close(sampled_gaussian_rdp(q, sigma, alpha), alpha * q * q * std::expm1(1.0) / 2, 1e-6));
    }
  }
  SUBCASE("the conversion at one order") {
    const double alpha = 8.0, rdp = 10 * 8.0 / 2;  // 10 Gaussian steps, sigma 1
    const double orders[] = {alpha}, values[] = {rdp};
    const dp_epsilon e = rdp_to_epsilon(orders, values, 1e-5);
    CHECK(e.epsilon == doctest::Approx(rdp + std::log(7.0 / 8.0) - (std::log(1e-5) + std::log(8.0)) / 7).epsilon(1e-14));
    CHECK(e.order == alpha);
    // A tiny RDP with a large delta: the bound is negative, epsilon 0.
    const double tiny[] = {1e-9};
    CHECK(rdp_to_epsilon(orders, tiny, 0.5).epsilon == 0.0);
  }
}

TEST_CASE("rdp: small sigma and large orders stay finite") {
  for (double alpha : {1.25, 4.5, 64.0, 256.0}) {
    CAPTURE(alpha);
    const double r = sampled_gaussian_rdp(0.01, 0.1, alpha);
    CHECK(std::isfinite(r));
    CHECK(r > 0.0);
    CHECK(r <= alpha / (2 * 0.01) * (1 + 1e-12));  // never more than without sampling
  }
}

TEST_CASE("rdp: epsilon never decreases as q or steps grow, or as sigma or delta shrink") {
  const double qs[] = {1e-4, 0.001, 0.01, 0.05, 0.2, 0.5, 0.9, 1.0};
  const double sigmas[] = {10.0, 3.0, 1.5, 1.0, 0.8, 0.5, 0.3};  // shrinking
  const std::int64_t steps[] = {1, 10, 100, 1000};
  const double deltas[] = {1e-3, 1e-5, 1e-8};  // shrinking
  const std::span<const double> orders = default_rdp_orders();
  // One step's RDP at every order, per (q, sigma).
  std::vector<std::vector<std::vector<double>>> one(std::size(qs), std::vector<std::vector<double>>(std::size(sigmas)));
  for (std::size_t i = 0; i < std::size(qs); ++i)
    for (std::size_t j = 0; j < std::size(sigmas); ++j)
      for (double alpha : orders) one[i][j].push_back(sampled_gaussian_rdp(qs[i], sigmas[j], alpha));
  auto eps = [&](std::size_t i, std::size_t j, std::size_t t, std::size_t d) {
    std::vector<double> r = one[i][j];
    for (double& v : r) v *= static_cast<double>(steps[t]);
    return rdp_to_epsilon(orders, r, deltas[d]).epsilon;
  };
  auto not_below = [](double later, double earlier) { return later >= earlier * (1 - 1e-12); };
  for (std::size_t i = 0; i < std::size(qs); ++i)
    for (std::size_t j = 0; j < std::size(sigmas); ++j) {
      CAPTURE(qs[i]);
      CAPTURE(sigmas[j]);
      // Per order too: the RDP itself grows with q and as sigma shrinks.
      for (std::size_t k = 0; k < orders.size(); ++k) {
        CAPTURE(orders[k]);
        if (i > 0) CHECK(not_below(one[i][j][k], one[i - 1][j][k]));
        if (j > 0) CHECK(not_below(one[i][j][k], one[i][j - 1][k]));
      }
      for (std::size_t t = 0; t < std::size(steps); ++t)
        for (std::size_t d = 0; d < std::size(deltas); ++d) {
          CAPTURE(steps[t]);
          CAPTURE(deltas[d]);
          const double e = eps(i, j, t, d);
          if (i > 0) CHECK(not_below(e, eps(i - 1, j, t, d)));
          if (j > 0) CHECK(not_below(e, eps(i, j - 1, t, d)));
          if (t > 0) CHECK(not_below(e, eps(i, j, t - 1, d)));
          if (d > 0) CHECK(not_below(e, eps(i, j, t, d - 1)));
        }
    }
}

TEST_CASE("rdp accountant: restore round-trips the state") {
  const rdp_accountant a = some_accountant();
  auto r = rdp_accountant::restore(a.orders(), a.rdp(), a.steps());
  REQUIRE(r.ok());
  const rdp_accountant& b = r.value();
  CHECK(std::equal(a.rdp().begin(), a.rdp().end(), b.rdp().begin(), b.rdp().end()));
  CHECK(b.steps() == 150);
  CHECK(b.epsilon(1e-5).epsilon == a.epsilon(1e-5).epsilon);
  CHECK(b.epsilon(1e-5).order == a.epsilon(1e-5).order);
}

TEST_CASE("rdp accountant: restore refuses wrong orders, values and counts, naming them") {
  const rdp_accountant a = some_accountant();
  const std::vector<double> orders(a.orders().begin(), a.orders().end());
  const std::vector<double> rdp(a.rdp().begin(), a.rdp().end());
  struct row {
    const char* what;
    std::vector<double> orders, rdp;
    std::int64_t steps;
    errc code;
    std::vector<std::string> says;
  };
  auto with = [](std::vector<double> v, std::size_t i, double x) {
    v[i] = x;
    return v;
  };
  const std::vector<double> fewer(orders.begin(), orders.end() - 1);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<row> rows = {
      {"an order left out", fewer, std::vector<double>(rdp.begin(), rdp.end() - 1), 150, errc::invalid_argument,
       {"73 orders", "74 default orders"}},
      {"a different order", with(orders, 3, 2.125), rdp, 150, errc::invalid_argument, {"order 3 is 2.125", "expected 2"}},
      {"a NaN order", with(orders, 0, nan), rdp, 150, errc::invalid_argument, {"order 0 is nan", "expected 1.25"}},
      {"a value left out", orders, std::vector<double>(rdp.begin(), rdp.end() - 1), 150, errc::invalid_argument,
       {"73 RDP values for 74 orders"}},
      {"a negative value", orders, with(rdp, 6, -0.5), 150, errc::invalid_argument, {"order 3 is negative (-0.5)"}},
      {"a NaN value", orders, with(rdp, 1, nan), 150, errc::not_finite, {"order 1.5 is nan", "not a finite number"}},
      {"an infinite value", orders, with(rdp, 73, k_inf), 150, errc::not_finite, {"order 256 is inf"}},
      {"a negative step count", orders, rdp, -1, errc::invalid_argument, {"negative step count (-1)"}},
  };
  for (const row& r : rows) {
    CAPTURE(r.what);
    const error e = error_of(rdp_accountant::restore(r.orders, r.rdp, r.steps));
    CAPTURE(e.message);
    CHECK(e.code == r.code);
    CHECK(contains(e.message, "RDP accountant: "));
    for (const std::string& part : r.says) CHECK(contains(e.message, part));
  }
}

TEST_CASE("rdp accountant: epsilon_after leaves the state alone and equals composing, then asking") {
  rdp_accountant a = some_accountant();
  const std::vector<double> before(a.rdp().begin(), a.rdp().end());
  const dp_epsilon ahead = a.epsilon_after(0.05, 1.1, 25, 1e-5);
  CHECK(std::equal(before.begin(), before.end(), a.rdp().begin(), a.rdp().end()));
  CHECK(a.steps() == 150);
  CHECK(a.epsilon_after(0.3, 2.0, 0, 1e-5).epsilon == a.epsilon(1e-5).epsilon);
  CHECK(ahead.epsilon > a.epsilon(1e-5).epsilon);
  a.compose(0.05, 1.1, 25);
  CHECK(a.steps() == 175);
  CHECK(a.epsilon(1e-5).epsilon == ahead.epsilon);
  CHECK(a.epsilon(1e-5).order == ahead.order);
  // Steps one at a time add up to the same as all at once (to rounding).
  rdp_accountant b = some_accountant();
  for (int i = 0; i < 25; ++i) b.compose(0.05, 1.1);
  CHECK(b.steps() == 175);
  CHECK(close(b.epsilon(1e-5).epsilon, ahead.epsilon, 1e-12));
}
