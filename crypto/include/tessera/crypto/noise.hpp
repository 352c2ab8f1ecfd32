// tessera/crypto/noise.hpp — discrete noise for differential privacy under secure aggregation.
//
// Each device adds its share of the noise to its integer input before masking (Agarwal, Kairouz, Liu,
// "The Skellam Mechanism for Differentially Private Federated Learning", NeurIPS 2021): symmetric
// Skellam noise, the difference of two independent Poisson variables of mean v/2 (variance v). A sum
// of independent Skellam variables is Skellam again, with the variances added: t devices adding
// variance v/t each release a sum carrying variance v, and more devices only more. The draws come from
// a ChaCha20 keystream of a 256-bit key the device takes from the CSPRNG and never sends.
//
//   crypto::skellam_sampler noise(crypto::random_key().value(), /*variance=*/share);
//   for (auto& y : ring_values) y = (y + static_cast<std::uint64_t>(noise.next())) & mask;
//
// The Poisson draws are exact but for double rounding: inversion below a mean of 10, Hörmann's
// transformed rejection (PTRS, "The transformed rejection method for generating Poisson random
// variables", 1993) above, its acceptance test on a log-probability written to keep its precision for
// means up to 2^50 (a plain k·log(mean) − lgamma(k + 1) loses all of it there).
#pragma once

#include <cstdint>

#include "tessera/crypto/masking.hpp"

namespace tessera::crypto {

// The largest variance a sampler takes (Poisson means up to 2^49: every draw an exact double).
inline constexpr double k_max_skellam_variance = 0x1p50;

// One Poisson draw of mean `mean` in [0, 2^49] from `ks`.
[[nodiscard]] std::int64_t poisson_draw(keystream& ks, double mean);

// Symmetric Skellam draws of variance `variance` in [0, k_max_skellam_variance] (0: always 0).
class skellam_sampler {
 public:
  skellam_sampler(key256_view key, double variance);
  [[nodiscard]] std::int64_t next() { return poisson_draw(ks_, half_) - poisson_draw(ks_, half_); }

 private:
  keystream ks_;
  double half_;
};

}  // namespace tessera::crypto
