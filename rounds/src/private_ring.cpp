// The ring of a private secure round and the noise multipliers adaptive clipping splits σ into
// (private_aggregation.hpp): fixed by the configuration, the model's size and the population alone, so
// that ε is known before a round.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "private_aggregation.hpp"
#include "tessera/crypto/masking.hpp"
#include "tessera/rounds/error.hpp"

namespace tessera::rounds {

// Adaptive clipping's count noise σ_b: as configured, or the expected contributors / 20 (Andrew et
// al.); 0 without adaptive clipping.
double count_noise_of(const dp_config& d, std::size_t population) noexcept {
  if (!d.adaptive_clip) return 0;
  return d.count_noise > 0 ? d.count_noise : d.sample_rate * static_cast<double>(population) / 20.0;
}

// The changes' noise multiplier: σ, or with adaptive clipping the σ_Δ that spends with the count's
// noise what σ alone would: σ_Δ⁻² + (2 σ_b)⁻² = σ⁻² (Andrew et al. 2021, Theorem 1); +infinity when
// the count would spend it all.
double change_sigma_of(const dp_config& d, std::size_t population) noexcept {
  const double sigma = d.noise_multiplier;
  if (!d.adaptive_clip) return sigma;
  const double b = count_noise_of(d, population);
  const double rest = 1.0 / (sigma * sigma) - 1.0 / (4.0 * b * b);
  return rest > 0 ? 1.0 / std::sqrt(rest) : std::numeric_limits<double>::infinity();
}

// The ring of a private secure round. With C the clip, σ the noise multiplier, t the fewest
// contributors a released sum has (secure_aggregation.threshold), d the model's parameters and N the
// population:
//   scale     S = C / step = min(2^10 √d, 2^24 / σ) steps per clip, unless the ring is too small for
//             it: S·N + 8 σ S √(N / t) (every device sampled, each noise sum within 8 deviations) must
//             stay below 2^(bits−1), the largest sum the ring reads back;
//   share     each device adds Skellam noise of variance (σS)² / n_c to each value, n_c the contributors
//             the round's noise is sized for (at least t, secure_aggregation.cpp): any n_c carry (σS)²,
//             the variance of N(0, (σC)²) in steps, a sum with fewer is not released, and more
//             contributors add only more (the ring is sized for N devices' shares at n_c = t);
//   release   one device moves the sum by its rounded change: L2 at most S + √d (each value's
//             stochastic rounding moves it by less than a step), L1 at most min(√d, L2)·L2.
// The accountant composes the Skellam mechanism of these (core/privacy/rdp.hpp); 2^10 √d keeps the rounding's
// √d within 0.1% of S, and 2^24 / σ keeps a device's Poisson means below 2^47.
core::result<private_ring> make_private_ring(const run_config& c, std::size_t params, std::size_t population) {
  const auto& sa = c.secure_aggregation;
  // Adaptive clipping: the changes' noise is raised to σ_Δ and the count rides in the ring as ±(k/2)·C
  // per device, k = σ_Δ / σ_b, so that one device moves the vector by C·√(1 + k²/4) and the pair costs
  // what σ alone would: σ_Δ⁻²(1 + k²/4) = σ_Δ⁻² + (2σ_b)⁻² = σ⁻² (Andrew et al., Theorem 1).
  const double sigma = change_sigma_of(c.dp, population);
  double half_k = 0;
  if (c.dp.adaptive_clip) {
    const double b = count_noise_of(c.dp, population);
    if (!std::isfinite(sigma)) return make_error(errc::privacy_budget, "dp.adaptive_clip.count_noise must exceed noise_multiplier / 2");
    half_k = sigma / b / 2.0;
    if (half_k > 1.0) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "dp.adaptive_clip.count_noise %.4g: under secure aggregation the count rides in the ring and needs at least σ_Δ / 2 = %.4g",
                    b, sigma / 2.0);
      return make_error(errc::privacy_budget, buf);
    }
  }
  const auto t = static_cast<double>(sa.min_aggregate());
  const auto dims = static_cast<double>(params);
  const auto n = static_cast<double>(std::max<std::size_t>(population, 1));
  const double half = std::ldexp(1.0, sa.bits - 1) - 1.0;
  const double room = std::ceil(n + 8.0 * sigma * std::sqrt(n / t));
  const double target = std::min(1024.0 * std::sqrt(dims), 0x1p24 / sigma);
  const double summands = std::max(room, std::floor(half / target));
  const auto too_small = [&] {
    char buf[240];
    std::snprintf(buf, sizeof buf, "secure_aggregation.bits %d: a ring of 2^%d cannot hold the noised sum of %.0f devices (σ %.4g): raise bits",
                  sa.bits, sa.bits, n, sigma);
    return make_error(errc::privacy_budget, buf);
  };
  if (summands >= half) return too_small();
  auto fp = crypto::fixed_point::create(c.dp.clip, sa.bits, static_cast<std::uint64_t>(summands));
  if (!fp) return too_small();
  private_ring r;
  r.summands = static_cast<std::uint64_t>(summands);
  r.limit = static_cast<double>(fp.value().limit());
  // The count value is one more coordinate for the rounding.
  const double rounded = std::sqrt(dims + (half_k > 0 ? 1.0 : 0.0));
  const double l2 = r.limit * std::sqrt(1.0 + half_k * half_k) + rounded;
  r.mechanism = {.l1 = std::min(rounded, l2) * l2, .l2 = l2, .variance = (sigma * r.limit) * (sigma * r.limit)};
  r.fitted_per_clip = half_k;
  r.change_sigma = sigma;
  return r;
}

}  // namespace tessera::rounds
