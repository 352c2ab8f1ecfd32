// Internal: the hub's parts as the operator's documents read them (operator_documents.hpp for the JSON
// API, hub_metrics.hpp for Prometheus): read only, gathered by the desk for each request.
#pragma once

#include <string_view>

#include "device_registry.hpp"
#include "hub_figures.hpp"
#include "revocations.hpp"
#include "round_driver.hpp"
#include "tessera/hub/hub_config.hpp"
#include "tessera/net/server.hpp"

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif

namespace tessera::hub {

inline constexpr std::string_view k_hub_version = TESSERA_VERSION;

struct hub_view {
  const hub_config& config;
  const round_driver& rounds;
  const device_registry& devices;
  const revocations& revoked;
  const hub_figures& figures;
  const net::server* agents;  // the agents' listener; null before start()
};

}  // namespace tessera::hub
