// tessera/rounds/error.hpp — the round engine's typed errors.
//
// Why a device was left out of a round, or why its update was not applied, has a code of its own: the
// hub sends it back in RESULT (as core::error_name, e.g. "rounds.size_mismatch") with the line of text,
// and tests tell a stale update from a wrong-sized one without parsing text. A checkpoint whose bytes
// are not the ones written has a code of its own too: loading then falls back to the previous one.
//
//   auto ok = engine.announce(a, claim);
//   if (!ok && ok.error().code == rounds::errc::wrong_round) { ... }
#pragma once

#include <string>
#include <system_error>

#include "tessera/core/base/error.hpp"

namespace tessera::rounds {

enum class errc {
  no_devices = 1,        // nobody can take part in the round
  wrong_round,           // an update for a round that is not the open one
  already_reported,      // the assignment already ended (accepted, refused, rejected)
  codec_mismatch,        // the update is in another codec than the assignment's
  size_mismatch,         // the update's declared size is not the subnet's
  steps_mismatch,        // the update reports other steps than were assigned
  examples_out_of_range, // zero examples, or more than the steps and batch allow
  loss_not_finite,       // the reported training loss is NaN or infinite
  bad_values,            // the blob does not decode, or a value is not finite
  illegal_transition,    // an event that does not fit the assignment's state
  bad_statistics,        // a device's statistics: unasked, repeated, or not fitting the model
  stats_incomplete,      // a device of the statistics' first pass is missing from the second: start again
  fleet_too_small,       // secure aggregation: too few devices to give every group its replication
  secure_step,           // secure aggregation: a protocol message that does not fit the round
  privacy_budget,        // differential privacy: the next round would take ε past dp.target_epsilon
  update_out_of_bounds,  // an update's change passes max_update_norm or max_update_abs
  checkpoint_corrupt,    // a checkpoint cut short, failing its SHA-256, or failing authentication (or the key is wrong)
  server_state,          // a server optimizer's state that does not fit the run: missing on resume, another kind or size
  checkpoint_mismatch,   // a checkpoint of another run: another seed or strategy, or rounds with no privacy accounted
  nobody_trains,         // k_refused_rounds_limit rounds in a row, every device refused or was rejected
};

[[nodiscard]] const std::error_category& category_of(errc) noexcept;  // "tessera.rounds"
using core::make_error, core::make_error_code;

}  // namespace tessera::rounds

template <>
struct std::is_error_code_enum<tessera::rounds::errc> : std::true_type {};
