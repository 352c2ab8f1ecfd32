// tessera/rounds/checkpoint.hpp — a run's state after a completed round, durable across crashes.
//
// File layout, version 2 or 3 (little-endian):
//   offset 0      8 bytes  magic "TSCKPT\x02\0" or "TSCKPT\x03\0"
//   offset 8      8 bytes  u64 n, length of the JSON header (≤ 16 MiB)
//   offset 16     n bytes  JSON: {"round", "plan_seed", "strategy", "seed", "spec", "param_count",
//                                 "registry": [{"id", "budget_bytes", "examples",
//                                 "rounds_done", "rounds_missed", "last_seen", and from tessera-sim
//                                 "examples_drawn" (absent: 0)}],
//                                 "early_stop": {"have_best", "best_score", "evals_since_best",
//                                 "stopped"} (absent in files of older versions: a fresh start),
//                                 "normalization": {"mean", "std"} (base64 float32, one per input) and
//                                 "statistics" (the fleet's counts) when the model standardizes its inputs,
//                                 "privacy": {"orders", "rdp", "steps", "clip", and with the devices' noise
//                                 "rdp_hub", "steps_hub": the accountant against the hub} with differential privacy,
//                                 version 3: "server_optimizer": {"kind", "steps", "moments"}}
//   offset 16+n   4·param_count bytes of the full model's parameters (f32)
//   version 3     moments × 4·param_count bytes: the server optimizer's first moment m, then (adam,
//                 yogi) its second moment v (f32); "moments" is 1 for kind momentum, 2 for adam and yogi
//   then          32 bytes: SHA-256 of every byte before them (magic, n, header, parameters, moments)
// Version 3 is written only for a run whose server optimizer keeps moments; every other run writes
// version 2, byte for byte what it wrote before version 3 existed (and builds of then still read it).
// Version 1 (magic "TSCKPT\x01\0", still read) is the same without the trailing digest; its header
// holds "params_sha256" instead (hex), which covers the parameters only.
// With a sealing key the same bytes are sealed with AES-256-GCM (crypto/seal.hpp), which authenticates
// them as a whole.
//
// Saving keeps the previous checkpoint: the new file is written to a temporary and fsync'd, the current
// one renamed to "<path>.prev", the temporary to <path>, and the folder fsync'd
// (core::write_file_keeping_previous), so a hub killed at any instant leaves a whole checkpoint under one
// of the two names. Only a current file that passes its checks becomes the previous one.
// Loading checks the bytes before it reads anything from them: the magic, then the trailing digest, the
// GCM tag or (version 1) the header's length and the parameters' SHA-256. A file cut short or failing
// them is corrupt (rounds::errc::checkpoint_corrupt); load_latest_checkpoint then loads "<path>.prev",
// if that one is good, and says why. Then the header, the spec against the hub's configuration
// (resuming a different model is an error naming both, never a fallback) and the parameter count.
//
//   TESSERA_TRY(rounds::save_checkpoint("ckpt/hub.ckpt", state, key));          // key may be null
//   auto st = rounds::load_latest_checkpoint("ckpt/hub.ckpt", config.model, key);
//   if (st && *st && st.value()->fell_back_from)                                 // hub.ckpt.prev was loaded
//     log(warning, st.value()->fell_back_from->reason.message);                  // "ckpt/hub.ckpt is truncated (...)"
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/base/error.hpp"
#include "tessera/core/data/input_normalization.hpp"
#include "tessera/core/math/model_spec.hpp"
#include "tessera/core/math/server_optimizer.hpp"
#include "tessera/crypto/seal.hpp"
#include "tessera/rounds/engine.hpp"
#include "tessera/rounds/error.hpp"

namespace tessera::rounds {

struct device_record {
  std::string id;
  std::uint64_t budget_bytes = 0;
  std::uint64_t examples = 0;
  std::int64_t rounds_done = 0;    // updates accepted
  std::int64_t rounds_missed = 0;  // assignments that ended as stragglers, refusals or rejections
  std::int64_t last_seen = 0;      // unix seconds
  // tessera-sim: the examples the device's batch order has handed out, so a resumed run continues it
  // (0 on the hub, whose devices keep their own order).
  std::uint64_t examples_drawn = 0;
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
  std::optional<core::rdp_accountant> privacy;  // differential privacy: the accountant's state (the model's users)
  std::optional<core::rdp_accountant> privacy_hub;  // with the devices' noise: the accountant against the hub
  double dp_clip = 0;                           // and the clip adaptive clipping reached (0: none)
  // The server optimizer's moments and steps (core/math/server_optimizer.hpp), for a kind that keeps moments.
  std::optional<core::server_optimizer_state> server_optimizer;
};

// Why load_latest_checkpoint passed over the newest checkpoint.
struct checkpoint_fallback {
  std::filesystem::path file;  // the newest checkpoint, not loaded
  core::error reason;          // "<file> is truncated (...)": rounds::errc::checkpoint_corrupt, or core::errc::io if missing
};

struct loaded_checkpoint {
  checkpoint state;
  std::filesystem::path file;                         // the file it came from: the path asked for, or its ".prev"
  std::optional<checkpoint_fallback> fell_back_from;  // set when it came from ".prev"
  // Set when the privacy ledger (privacy_ledger.hpp) held more spending than the file: the last private
  // round it records. The state then carries the ledger's accounting.
  std::optional<std::int64_t> ledger_round;
};

// "<path>.prev": where save_checkpoint keeps the checkpoint it replaces.
[[nodiscard]] std::filesystem::path previous_checkpoint(const std::filesystem::path& path);

// What the writer knows of the file at `path`: nothing (it is read and checked before it may become the
// previous one), or that this process wrote it itself with save_checkpoint.
enum class current_checkpoint { unchecked, written_here };

// Writes version 3 when `c` holds a server optimizer's moments, version 2 otherwise (sealed when `key` is
// not null), and keeps the current file as previous_checkpoint(path).
[[nodiscard]] core::result<void> save_checkpoint(const std::filesystem::path& path, const checkpoint& c,
                                                 const crypto::sealing_key* key,
                                                 current_checkpoint current = current_checkpoint::unchecked);
// The checkpoint at `path`, or previous_checkpoint(path) when `path` is missing or corrupt and the
// previous one loads, its privacy accounting raised to the ledger's (ledger_path(path)) where that holds
// more; std::nullopt when neither file exists (an error if a ledger does: its run's spending would be
// forgotten). Other failures (another model, a file that
// cannot be read, one of an unknown version) are errors with no fallback; so is a bad previous one, and
// the error then names both files.
[[nodiscard]] core::result<std::optional<loaded_checkpoint>> load_latest_checkpoint(const std::filesystem::path& path,
                                                                                    const core::model_spec& expected,
                                                                                    const crypto::sealing_key* key);
// The one file at `path`, version 1, 2 or 3, with no fallback; std::nullopt when it does not exist.
[[nodiscard]] core::result<std::optional<checkpoint>> load_checkpoint(const std::filesystem::path& path,
                                                                      const core::model_spec& expected,
                                                                      const crypto::sealing_key* key);

}  // namespace tessera::rounds
