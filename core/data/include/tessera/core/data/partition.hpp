// tessera/core/data/partition.hpp — splitting a dataset among devices: IID or Dirichlet label skew.
//
// Used by the simulator and by the demo that writes each agent's own shard. Both are deterministic
// in the seed. Dirichlet(α) label skew (Hsu et al. 2019): for every class, proportions over devices
// are drawn from Dir(α) and the class's examples are dealt out accordingly; small α, strong skew.
//
//   auto shards = core::shard_dirichlet(labels, 10, 8, 0.5, seed);   // shards[d] = example indices
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/core/base/error.hpp"

namespace tessera::core {

using shard_list = std::vector<std::vector<std::uint32_t>>;

// n examples dealt at random into `devices` shards whose sizes differ by at most one.
[[nodiscard]] shard_list shard_iid(std::int64_t n, std::size_t devices, std::uint64_t seed);
// Label skew: labels[i] is example i's class in [0, classes). No shard is left with fewer than
// `min_examples` (proportions are redrawn, up to a bound, then an error says so).
[[nodiscard]] result<shard_list> shard_dirichlet(std::span<const float> labels, std::int64_t classes, std::size_t devices,
                                                 double alpha, std::uint64_t seed, std::size_t min_examples = 32);

}  // namespace tessera::core
