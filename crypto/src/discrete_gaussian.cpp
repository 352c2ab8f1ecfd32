#include "tessera/crypto/discrete_gaussian.hpp"

#include <bit>
#include <cmath>
#include <cstdio>

#include "tessera/core/base/assert.hpp"
#include "tessera/crypto/error.hpp"

namespace tessera::crypto {
namespace {

__extension__ typedef unsigned __int128 u128;  // GCC and Clang on every target we build (x86-64, aarch64)

// A uniform integer in [0, q), q > 0, by rejection: no modulo bias.
u128 uniform_below(keystream& ks, u128 q) {
  // 2^128 mod q: draws below it would make the low residues likelier.
  const u128 reject_below = (u128{0} - q) % q;
  for (;;) {
    const u128 x = (u128{ks.next()} << 64) | ks.next();
    if (x >= reject_below) return x % q;
  }
}

// Bernoulli(p/q), 0 ≤ p ≤ q, q > 0.
bool bernoulli(keystream& ks, u128 p, u128 q) { return uniform_below(ks, q) < p; }

// Bernoulli(exp(−p/q)) for p/q in [0, 1] (Algorithm 1 of Canonne, Kamath, Steinke): K counts the
// successes of Bernoulli(γ/k), k = 1, 2, ...; the chance that K is odd is exp(−γ).
bool bernoulli_exp_fraction(keystream& ks, u128 p, u128 q) {
  std::uint64_t k = 1;
  while (bernoulli(ks, p, q * k)) ++k;  // q·k stays far below 2^128: γ/k < 1/k, k rarely passes 20
  return k % 2 == 1;
}

// Bernoulli(exp(−p/q)) for any p/q ≥ 0: exp(−1) once per whole unit of γ, then the fraction.
bool bernoulli_exp(keystream& ks, u128 p, u128 q) {
  for (u128 whole = p / q; whole > 0; --whole) {
    if (!bernoulli_exp_fraction(ks, 1, 1)) return false;  // each unit passes with e^-1: few turns
  }
  return bernoulli_exp_fraction(ks, p % q, q);
}

std::uint64_t isqrt(std::uint64_t x) {
  auto r = static_cast<std::uint64_t>(std::sqrt(static_cast<double>(x)));
  while (r > 0 && r * r > x) --r;
  while ((r + 1) * (r + 1) <= x) ++r;
  return r;
}

}  // namespace

core::result<variance_fraction> rational_variance(double variance) {
  if (!(variance > 0.0) || !(variance <= k_max_discrete_variance)) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "a discrete Gaussian's variance must be in (0, 2^50]; got %.17g", variance);
    return make_error(errc::invalid_argument, buf);
  }
  // 2^e · variance below 2^40 (e in [0, 40]): 40 significant bits from σ² = 1 up, num below 2^51.
  int e = 40 - std::ilogb(variance) - 1;
  e = e < 0 ? 0 : (e > 40 ? 40 : e);
  const double scaled = std::ldexp(variance, e);  // exact: a power of two
  const auto num = static_cast<std::uint64_t>(std::ceil(scaled));
  return variance_fraction{.num = num, .den = std::uint64_t{1} << e};
}

discrete_gaussian::discrete_gaussian(key256_view key, variance_fraction variance) : ks_(key), v_(variance) {
  TESSERA_ASSERT(v_.num > 0 && v_.den > 0 && v_.den <= (std::uint64_t{1} << 40) && v_.num <= (std::uint64_t{1} << 51));
  t_ = isqrt(v_.num / v_.den) + 1;  // floor(sqrt(n/d)) = floor(sqrt(floor(n/d)))
  // |Y|·d·t below 2^63 keeps (|Y|·d·t − n)² below 2^127 (n < 2^52).
  y_limit_ = (std::uint64_t{1} << 63) / (v_.den * t_);
}

std::int64_t discrete_gaussian::next_laplace(std::uint64_t t) {
  for (;;) {
    const auto u = static_cast<std::uint64_t>(uniform_below(ks_, t));
    if (!bernoulli_exp(ks_, u, t)) continue;
    std::uint64_t v = 0;
    while (bernoulli_exp_fraction(ks_, 1, 1)) ++v;
    const std::uint64_t x = u + t * v;
    const bool negative = (ks_.next() & 1) != 0;
    if (negative && x == 0) continue;  // −0 and +0 are one value: keep its chance that of the others
    return negative ? -static_cast<std::int64_t>(x) : static_cast<std::int64_t>(x);
  }
}

std::int64_t discrete_gaussian::next() {
  const u128 n = v_.num, d = v_.den, t = t_;
  for (;;) {
    const std::int64_t y = next_laplace(t_);
    const std::uint64_t abs_y = y < 0 ? static_cast<std::uint64_t>(-(y + 1)) + 1 : static_cast<std::uint64_t>(y);
    if (abs_y > y_limit_) continue;
    // γ = (|Y| − σ²/t)² / (2σ²) = (|Y|·d·t − n)² / (2·n·d·t²).
    const u128 a = u128{abs_y} * d * t;
    const u128 diff = a > n ? a - n : n - a;
    if (bernoulli_exp(ks_, diff * diff, 2 * n * d * t * t)) return y;
  }
}

}  // namespace tessera::crypto
