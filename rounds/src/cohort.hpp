// rounds/src/cohort.hpp — a uniformly random subset, for a round's cohort and the cap of a private
// round's sample: who takes part never depends on a device's id or the order devices arrived in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tessera/core/base/error.hpp"
#include "tessera/crypto/masking.hpp"

namespace tessera::rounds {

// `k` of `n` positions, each subset equally likely: a partial Fisher–Yates shuffle whose draws come from
// ChaCha20 under `key`, each uniform below its bound by rejection (no modulo bias). kept[i]: position i
// is in. k ≥ n keeps every position.
[[nodiscard]] std::vector<bool> random_subset(crypto::key256_view key, std::size_t n, std::size_t k);

// The key of a round's draw: derived from the run's seed and the round (the simulator, and a hub told
// to, so that runs repeat), or fresh from the CSPRNG (a hub: nobody, devices included, can predict the
// cohort). `purpose` keeps draws of different kinds apart.
[[nodiscard]] core::result<crypto::key256> draw_key(bool seeded, std::uint64_t seed, std::int64_t round, std::string_view purpose);

// `k` of `items` (all of them when k is 0 or not fewer), drawn with random_subset under draw_key's key,
// kept in their order.
template <class T>
[[nodiscard]] core::result<std::vector<T>> draw_from(std::vector<T> items, std::size_t k, bool seeded, std::uint64_t seed, std::int64_t round,
                                                     std::string_view purpose) {
  if (k == 0 || items.size() <= k) return items;
  TESSERA_ASSIGN_OR_RETURN(const crypto::key256 key, draw_key(seeded, seed, round, purpose));
  const std::vector<bool> kept = random_subset(key, items.size(), k);
  std::vector<T> drawn;
  drawn.reserve(k);
  for (std::size_t i = 0; i < items.size(); ++i)
    if (kept[i]) drawn.push_back(std::move(items[i]));
  return drawn;
}

}  // namespace tessera::rounds
