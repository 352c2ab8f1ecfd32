// tessera/hub/hub_config.hpp — tessera-hub's configuration: the shared run fields plus the server's.
//
// A JSON file (every field has a default; an error names the file and the field) and KEY=VALUE
// overrides from the command line ("rounds=100", "listen=0.0.0.0:7443", "tls.crl=pki/ca.crl").
// Paths are taken as given (relative ones from the working directory).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessera/core/dataset.hpp"
#include "tessera/crypto/tls.hpp"
#include "tessera/rounds/run_config.hpp"

namespace tessera::hub {

struct validation_config {
  std::string format = "idx";          // "idx" or "csv"
  std::string images, labels;          // idx
  std::string csv;                     // csv
  std::size_t label_column = 0;
  bool header = false;
  core::normalization norm = core::normalization::scale_unit;  // none or scale_unit
  std::int64_t max_examples = 10'000'000;
};

struct hub_config : rounds::run_config {
  std::string listen_host = "127.0.0.1";
  std::uint16_t listen_port = 7443;
  crypto::hub_tls_files tls{.ca_cert = "pki/ca.pem", .cert = "pki/hub.pem", .key = "pki/hub.key", .crl = "pki/ca.crl"};
  std::size_t min_devices = 1;         // a round starts with at least this many devices...
  std::size_t max_devices = 1000;      // ...and at most this many; at once when this many are ready
  double device_wait_s = 30;           // how long to wait for max_devices before starting with fewer
  double round_deadline_s = 300;       // from dispatch; stragglers' blocks then keep their old values
  double heartbeat_s = 10;
  double idle_timeout_s = 60;
  std::uint32_t chunk_kib = 256;       // bytes per CHUNK sent, and the unacknowledged bytes in flight per
  std::uint32_t window_kib = 2048;     // blob: on a slow link, small values limit what a cut resends
  std::size_t max_sessions = 4096;
  std::optional<validation_config> validation;
  std::string checkpoint_dir;          // empty: no checkpoints (and no resume)
  std::string seal_key;                // key file: checkpoints sealed with AES-256-GCM
};

[[nodiscard]] core::result<hub_config> parse_hub_config(const nlohmann::json& json, const std::string& source);
// Reads a config file (empty path: all defaults) and applies KEY=VALUE overrides.
[[nodiscard]] core::result<hub_config> load_hub_config(const std::string& path, const std::vector<std::string>& overrides);

// Loads the validation table a config names.
[[nodiscard]] core::result<std::unique_ptr<core::memory_table>> load_validation(const validation_config& v);

}  // namespace tessera::hub
