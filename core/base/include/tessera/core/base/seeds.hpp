// tessera/core/base/seeds.hpp — the seeds of a run's sub-streams, all derived from the run's one seed.
//
// The hub, the simulator and the agents must draw the same plan, the same shards and the same batch
// order from the same run seed, or their runs stop being comparable (tests/federation checks that a
// federation over the network equals the simulator bit for bit). Every derivation lives here, once.
//
//   core::rng plan_rng(core::plan_seed(run_seed, round_index));
//   core::table_batches batches(shard, core::device_order_seed(run_seed, d), batch);
#pragma once

#include <cstdint>
#include <string_view>

#include "tessera/core/base/rng.hpp"

namespace tessera::core {

// Stream tags: ASCII "PLAN", "SHRD", "ORDR"; round and device indices are added to them.
inline constexpr std::uint64_t k_stream_plan = 0x504c414e;
inline constexpr std::uint64_t k_stream_shard = 0x53485244;
inline constexpr std::uint64_t k_stream_order = 0x4f524452;
inline constexpr std::uint64_t k_stream_validation = 0x56414c44;  // "VALD"

// The plan of round `round_index` (0-based: the rounds completed before it).
[[nodiscard]] constexpr std::uint64_t plan_seed(std::uint64_t run_seed, std::uint64_t round_index) noexcept {
  return mix_seed(run_seed, k_stream_plan + round_index);
}
// How the simulator splits the training set into device shards.
[[nodiscard]] constexpr std::uint64_t shard_seed(std::uint64_t run_seed) noexcept {
  return mix_seed(run_seed, k_stream_shard);
}
// The batch order of device `device` (its index in the simulator's fleet; `tessera-sim shards` writes
// it into each device's data settings).
[[nodiscard]] constexpr std::uint64_t device_order_seed(std::uint64_t run_seed, std::uint64_t device) noexcept {
  return mix_seed(run_seed, k_stream_order + device);
}
// Which of a device's examples it holds out for validation, from its batch-order seed (so the simulator's
// device and the agent holding its shard hold out the same ones).
[[nodiscard]] constexpr std::uint64_t validation_seed(std::uint64_t order_seed) noexcept {
  return mix_seed(order_seed, k_stream_validation);
}
// An agent configured without a seed: a stable batch order of its own, from its id (FNV-1a).
[[nodiscard]] constexpr std::uint64_t id_order_seed(std::string_view device_id) noexcept {
  std::uint64_t h = 1469598103934665603ull;
  for (char ch : device_id) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  return mix_seed(h, k_stream_order);
}

}  // namespace tessera::core
