// tessera/rounds/privacy_ledger.hpp — what a run has spent of its privacy, where a rollback of the
// checkpoint does not reach.
//
// A checkpoint carries the accountant, so loading an older one (a backup put back, or "<file>.prev"
// after a crash) would bring back the ε of its round and let the run spend again what the rounds after
// it spent: their noised releases were out. The ledger is a small file beside the checkpoint
// ("<checkpoint>.ledger"), written after every private round before the checkpoint, that only grows.
// load_latest_checkpoint merges it into what it loads — each order's RDP the larger of the two, the
// larger step count — so ε never goes back, and says when it did so. Sealed like the checkpoint when
// there is a key. It guards against a checkpoint restored on its own; a rollback of the whole folder,
// ledger included, cannot be seen from the hub's disk (the devices' own limits are the answer there).
//
//   TESSERA_TRY(rounds::save_ledger(rounds::ledger_path(ckpt), {.seed = .., .users = a, ...}, key));
//   auto ledger = rounds::load_ledger(rounds::ledger_path(ckpt), key);   // std::nullopt: none yet
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "tessera/core/base/error.hpp"
#include "tessera/core/privacy/rdp.hpp"
#include "tessera/crypto/seal.hpp"

namespace tessera::rounds {

struct checkpoint;

struct privacy_ledger {
  std::uint64_t seed = 0;                     // the run's, as its checkpoints carry them
  std::string strategy;
  std::int64_t round = 0;                     // the last private round it records
  core::rdp_accountant users;                 // against the model's users
  std::optional<core::rdp_accountant> hub;    // with the devices' noise: against the hub
};

// "<checkpoint>.ledger".
[[nodiscard]] std::filesystem::path ledger_path(const std::filesystem::path& checkpoint_file);

// Writes the ledger (crash-safe; sealed when `key` is not null).
[[nodiscard]] core::result<void> save_ledger(const std::filesystem::path& path, const privacy_ledger& l, const crypto::sealing_key* key);
// The ledger at `path`; std::nullopt when there is none. A file that is not a ledger, or cannot be
// opened with `key`, is an error that names it.
[[nodiscard]] core::result<std::optional<privacy_ledger>> load_ledger(const std::filesystem::path& path, const crypto::sealing_key* key);

// Raises `c`'s accounting to the ledger's where the ledger holds more. Returns whether it did; an error
// when the ledger is another run's (seed or strategy) or the checkpoint carries no accountant although
// the ledger does.
[[nodiscard]] core::result<bool> apply_ledger(checkpoint& c, const privacy_ledger& l, const std::string& where);

}  // namespace tessera::rounds
