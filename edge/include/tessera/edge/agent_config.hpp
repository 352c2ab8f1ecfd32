// tessera/edge/agent_config.hpp — tessera-edge run's configuration: the hub, the files, the data, the budget.
//
// A JSON file (every field has a default except the data; an error names the file and the field) and
// KEY=VALUE overrides from the command line ("hub=10.0.0.5:7443", "memory_budget_mib=64").
//
//   TESSERA_ASSIGN_OR_RETURN(auto cfg, core::load_config("/etc/tessera/agent.json", overrides, edge::read_agent_config));
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/base/error.hpp"
#include "tessera/core/config/json_config.hpp"
#include "tessera/core/config/log.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/crypto/tls.hpp"
#include "tessera/edge/device_data.hpp"
#include "tessera/edge/privacy_policy.hpp"
#include "tessera/net/link_config.hpp"

namespace tessera::edge {

// What the agent does when the hub says its run is finished: exit (status 0), or stay and ask at its
// longest backoff until the hub starts another run.
enum class after_run_mode { exit, wait };
inline constexpr auto k_after_run_names = core::names_in_order<after_run_mode>({"exit", "wait"});

struct agent_config {
  core::host_port hub{"127.0.0.1", 7443};
  crypto::agent_tls_files tls{.ca_cert = "pki/ca.pem", .cert = "pki/device.pem", .key = "pki/device.key", .hub_name = ""};
  data_config data;
  bool requires_normalization = false;       // data.normalization standardize: refuse models without statistics
  std::uint64_t data_seed = 0;               // batch order; 0: derived from the device id
  std::size_t budget_bytes = 16u << 20;      // training arena + data reader buffers
  std::vector<core::codec_kind> codecs{core::codec_kind::f32, core::codec_kind::f16, core::codec_kind::q8};
  std::chrono::milliseconds backoff_initial{250};
  std::chrono::milliseconds backoff_max{30'000};
  double jitter = 0.5;
  net::link_settings link;                   // heartbeats, deadlines, chunking, rate caps
  std::int64_t exit_after_rounds = 0;        // 0: serve forever; N: exit after N accepted updates
  after_run_mode after_run = after_run_mode::exit;  // when the hub says its run is finished
  core::log_format log_format = core::log_format::text;  // events on standard error: for people, or JSON lines
  secure_mode secure_aggregation = secure_mode::allow;
  privacy_policy privacy;                    // what this device lets a hub do (privacy_policy.hpp)
};

// Reads the fields from `r` (a describing reader lists them; see core/config/json_config.hpp).
[[nodiscard]] core::result<agent_config> read_agent_config(core::config_reader& r);
[[nodiscard]] core::result<agent_config> parse_agent_config(const nlohmann::json& json, const std::string& source);

}  // namespace tessera::edge
