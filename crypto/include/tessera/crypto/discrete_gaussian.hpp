// tessera/crypto/discrete_gaussian.hpp — exact samples of the discrete Gaussian on the integers.
//
// The hub's noise in trusted-hub DP. A Gaussian drawn in floating point (Box–Muller, then rounded to a
// float) leaks through its low bits which values it can take (Mironov, "On significance of the least
// significant bits for differential privacy", CCS 2012). The discrete Gaussian N_Z(0, σ²), P(x) ∝
// exp(−x²/(2σ²)) on the integers, added to an integer sum, has no such bits, and its Rényi DP is that of
// the continuous Gaussian at the same σ and L2 sensitivity (Canonne, Kamath, Steinke, "The Discrete
// Gaussian for Differential Privacy", NeurIPS 2020, Theorem 14 of arXiv:2004.00010). Poisson-sampled,
// the accountant (core/privacy/rdp.hpp) composes it by a general subsampling bound.
//
// The sampler is that paper's Algorithm 3 (a discrete Laplace proposal, accepted with probability
// exp(−(|Y| − σ²/t)²/(2σ²))) over Algorithms 1 and 2, in integer arithmetic on a rational σ² = n/d,
// its coins from a ChaCha20 keystream. The one departure from exactness: a proposal so far out that
// the acceptance test's numerator would not fit in 128 bits (|Y| above 2^13·σ at the largest σ taken,
// far more at smaller ones) is rejected at once; the exact test accepts such a proposal with
// probability about e^(−2^25) (e^(−(2^13 − 1)²/2)), so no sample could tell the difference.
//
//   crypto::discrete_gaussian noise(key, crypto::rational_variance(sigma * sigma).value());
//   for (auto& x : integer_sum) x += noise.next();
#pragma once

#include <cstdint>

#include "tessera/core/base/error.hpp"
#include "tessera/crypto/masking.hpp"

namespace tessera::crypto {

// σ² as the fraction num/den (den a power of two).
struct variance_fraction {
  std::uint64_t num = 0;
  std::uint64_t den = 1;
};

// The largest σ² taken (σ up to 2^25).
inline constexpr double k_max_discrete_variance = 0x1p50;

// The smallest fraction num/2^e at or above `variance` (so the noise is never below what was asked),
// with 40 significant bits from σ² = 1 up (den at most 2^40; whole numbers from 2^40 on). An error names a
// variance that is not a number in (0, k_max_discrete_variance].
[[nodiscard]] core::result<variance_fraction> rational_variance(double variance);

// Draws from N_Z(0, num/den) from the keystream of `key`.
class discrete_gaussian {
 public:
  discrete_gaussian(key256_view key, variance_fraction variance);
  [[nodiscard]] std::int64_t next();
  // The draws of discrete Laplace with scale t (P(x) ∝ exp(−|x|/t)), Algorithm 2 with s = 1; public so
  // that a test can check the proposal's distribution on its own.
  [[nodiscard]] std::int64_t next_laplace(std::uint64_t t);

 private:
  keystream ks_;
  variance_fraction v_;
  std::uint64_t t_;          // floor(σ) + 1
  std::uint64_t y_limit_;    // proposals above it are rejected (see the header comment)
};

}  // namespace tessera::crypto
