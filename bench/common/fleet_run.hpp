// Shared by the benchmarks: a whole federation in this process — tessera's hub and agents on one
// io_context over mutual TLS on 127.0.0.1, each agent behind its own net::link_emulator when a link
// profile is given — with a throwaway PKI and the simulator's shards.
//
//   auto work = bench::fleet_dir("tessera-bench-x");                    // a fresh temp folder
//   bench::make_pki(work, 8);                                           // CA, hub, dev-0..dev-7
//   auto shards = bench::must(sim::write_shards(sim_cfg, (work / "shards").string()));
//   auto rounds = bench::run_fleet(hub_json, work, shards, {.link = profile});  // each round's metrics
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/must.hpp"
#include "tessera/core/base/error.hpp"
#include "tessera/net/link_emulator.hpp"
#include "tessera/rounds/metrics.hpp"

namespace tessera::bench {

// A new folder under the system's temporary directory, named after `tag` and this process.
[[nodiscard]] std::filesystem::path fleet_dir(const std::string& tag);
// A CA, a hub certificate for 127.0.0.1 and devices dev-0 .. dev-<devices−1>, in work/pki.
void make_pki(const std::filesystem::path& work, std::size_t devices);

struct fleet_options {
  std::optional<net::link_profile> link;       // every agent behind one emulated link of this profile
  nlohmann::json agent_extra = nlohmann::json::object();  // fields added to every agent's configuration
  std::chrono::minutes limit{30};
};

// Runs tessera's hub with `hub_json` (listen, tls, min/max_devices filled in) and one agent per shard
// folder (its data.json), until the hub finishes; returns each round's metrics. Dies if it does not.
[[nodiscard]] std::vector<rounds::round_metrics> run_fleet(nlohmann::json hub_json, const std::filesystem::path& work,
                                                           const std::vector<std::string>& shards, const fleet_options& o);

}  // namespace tessera::bench
