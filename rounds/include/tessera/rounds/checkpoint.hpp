// tessera/rounds/checkpoint.hpp — a run's state after a completed round, durable across crashes.
//
// File layout (little-endian):
//   offset 0   8 bytes  magic "TSCKPT\x01\0"
//   offset 8   8 bytes  u64 n, length of the JSON header (≤ 16 MiB)
//   offset 16  n bytes  JSON: {"round", "plan_seed", "strategy", "seed", "spec", "param_count",
//                              "params_sha256", "registry": [{"id", "budget_bytes", "examples",
//                              "rounds_done", "rounds_missed", "last_seen"}],
//                              "early_stop": {"have_best", "best_score", "evals_since_best",
//                              "stopped"} (absent in files of older versions: a fresh start),
//                              "normalization": {"mean", "std"} (base64 float32, one per input) and
//                              "statistics" (the fleet's counts) when the model standardizes its inputs,
//                              "privacy": {"orders", "rdp", "steps", "clip"} with differential privacy}
//   then       4·param_count bytes of the full model's parameters (f32)
// The whole file is written to a temporary, fsync'd and renamed (core::write_file_atomic), so a hub
// killed at any instant leaves the previous checkpoint or the new one. With a sealing key the same bytes
// are sealed with AES-256-GCM (crypto/seal.hpp) instead; a wrong key or a changed byte is refused.
// Loading checks the magic, the header, the spec against the hub's configuration (resuming a different
// model is an error naming both), the parameter count and their SHA-256.
//
//   TESSERA_TRY(rounds::save_checkpoint("ckpt/hub.ckpt", state, key));    // key may be null
//   auto st = rounds::load_checkpoint("ckpt/hub.ckpt", config.model, key); // result<optional<checkpoint>>
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/error.hpp"
#include "tessera/core/input_normalization.hpp"
#include "tessera/core/model_spec.hpp"
#include "tessera/crypto/seal.hpp"
#include "tessera/rounds/engine.hpp"

namespace tessera::rounds {

struct device_record {
  std::string id;
  std::uint64_t budget_bytes = 0;
  std::uint64_t examples = 0;
  std::int64_t rounds_done = 0;    // updates accepted
  std::int64_t rounds_missed = 0;  // assignments that ended as stragglers, refusals or rejections
  std::int64_t last_seen = 0;      // unix seconds
};

struct checkpoint {
  std::int64_t round = 0;          // rounds completed
  std::uint64_t plan_seed = 0;     // seed of the last completed round's plan
  std::uint64_t seed = 0;          // the run's seed
  std::string strategy;
  core::model_spec spec;
  std::vector<float> params;
  std::vector<device_record> registry;
  early_stop stopping;
  core::input_normalization normalization;  // empty unless the model standardizes its inputs
  nlohmann::json statistics;                // the fleet's statistics' summary (stats_gathering::summary)
  std::optional<core::rdp_accountant> privacy;  // differential privacy: the accountant's state
  double dp_clip = 0;                           // and the clip adaptive clipping reached (0: none)
};

[[nodiscard]] core::result<void> save_checkpoint(const std::filesystem::path& path, const checkpoint& c,
                                                 const crypto::sealing_key* key);
// std::nullopt when there is no checkpoint file yet.
[[nodiscard]] core::result<std::optional<checkpoint>> load_checkpoint(const std::filesystem::path& path,
                                                                      const core::model_spec& expected,
                                                                      const crypto::sealing_key* key);

}  // namespace tessera::rounds
