// tessera/hub/hub_config.hpp — tessera-hub's configuration: the shared run fields plus the server's.
//
// A JSON file (every field has a default; an error names the file and the field) and KEY=VALUE
// overrides from the command line ("rounds=100", "listen=0.0.0.0:7443", "tls.crl=pki/ca.crl"). Paths
// are taken as given (relative ones from the working directory). `tessera-hub --help` lists every
// field, from the parser itself (core::describe_config).
//
//   TESSERA_ASSIGN_OR_RETURN(auto cfg, core::load_config("examples/hub.json", {"rounds=10"}, hub::read_hub_config));
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/config/json_config.hpp"
#include "tessera/core/config/log.hpp"
#include "tessera/core/data/data_source.hpp"
#include "tessera/crypto/tls.hpp"
#include "tessera/net/link_config.hpp"
#include "tessera/rounds/run_config.hpp"

namespace tessera::hub {

// The operator endpoint (operator_endpoint.hpp): off unless `listen` is set.
enum class http_tls_kind { automatic, on };
inline constexpr auto k_http_tls_names = core::names_in_order<http_tls_kind>({"auto", "on"});
struct http_config {
  std::optional<core::host_port> listen;  // HOST:PORT; empty: no endpoint
  http_tls_kind tls = http_tls_kind::automatic;  // auto: plain HTTP on a loopback address, HTTPS elsewhere
  std::size_t max_connections = 64;
  double timeout_s = 10;                  // TLS handshake, each request, each response
};

struct hub_config : rounds::run_config {
  core::host_port listen{"127.0.0.1", 7443};  // port 0 picks a free one
  crypto::hub_tls_files tls{.ca_cert = "pki/ca.pem", .cert = "pki/hub.pem", .key = "pki/hub.key", .crl = "pki/ca.crl"};
  std::size_t min_devices = 1;         // a round starts with at least this many devices...
  std::size_t max_devices = 1000;      // ...and at most this many; at once when this many are ready
  double device_wait_s = 30;           // how long to wait for max_devices before starting with fewer
  double round_deadline_s = 300;       // from dispatch; stragglers' blocks then keep their old values
  double secure_step_s = 60;           // secure aggregation: each of its steps (keys, shares, unmasking)
  net::link_settings link;             // heartbeats, deadlines, chunking (no rate caps on the hub)
  std::size_t max_sessions = 4096;     // verified sessions
  std::size_t max_handshakes = 256;    // connections not verified yet, the oldest pushed out by newer ones
  std::size_t max_handshakes_per_source = 16;
  double handshake_timeout_s = 10;     // TLS handshake and HELLO
  std::size_t io_threads = 0;          // threads for the connections (TLS, frames, transfers); 0: one per core
  std::optional<core::data_source> validation;  // the hub's own test set, if it holds one
  std::string checkpoint_dir;          // empty: no checkpoints (and no resume)
  std::string seal_key;                // key file: checkpoints sealed with AES-256-GCM
  std::string audit_uploads;           // folder: every upload kept as received (empty: none)
  http_config http;                    // the operator endpoint: /metrics, /api/*, the status page, actions
  core::log_format log_format = core::log_format::text;  // events on standard error; json: the round lines on stdout too
};

// Reads the fields from `r` (a describing reader lists them; see core/config/json_config.hpp).
[[nodiscard]] core::result<hub_config> read_hub_config(core::config_reader& r);
[[nodiscard]] core::result<hub_config> parse_hub_config(const nlohmann::json& json, const std::string& source);

}  // namespace tessera::hub
