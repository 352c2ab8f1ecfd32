// rounds/src/engine_secure.hpp — internal: the engine's state for one secure aggregation round,
// shared by engine.cpp (uploads) and engine_secure.cpp (plan, sums).
#pragma once

#include <optional>
#include <vector>

#include "tessera/core/ist.hpp"
#include "tessera/crypto/secagg.hpp"
#include "tessera/rounds/engine.hpp"

namespace tessera::rounds {

// Secure aggregation's state for one round: the protocol's parameters, its server (the hub's devices
// go through it) or the plain sum (the simulator's), and each group's subnet.
struct engine::secure_round {
  explicit secure_round(crypto::secagg_params p) : params(p), server(std::move(p)) {}
  crypto::secagg_params params;
  crypto::secagg_server server;
  std::optional<crypto::secagg_plain_sum> plain;
  std::vector<core::subnet> group_subnets;
  bool shared_segment = false;  // IST: the last segment is the output bias every device trains
};

}  // namespace tessera::rounds
