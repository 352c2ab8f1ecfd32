// tessera/hub/error.hpp — the hub service's typed errors.
//
// The round engine judges an update's content (rounds/error.hpp); the hub judges whether a message
// belongs to the round at all. Either code travels back to the agent in RESULT (core::error_name:
// "hub.round_closed", "rounds.size_mismatch") with its line of text.
//
//   if (why.code == hub::errc::round_closed) ...
#pragma once

#include <string>
#include <system_error>

#include "tessera/core/base/error.hpp"

namespace tessera::hub {

enum class errc {
  round_closed = 1,     // an update for a round that has ended, or that arrived after its round closed
  round_not_open,       // an update for a round that has not begun
  not_assigned,         // no assignment for this device in the open round
  wrong_transfer,       // the update answers another assignment (a stale transfer id)
  checkpoint_mismatch,  // the checkpoint was written by a run with another seed or strategy
  unknown_device,       // an operator named a device the run does not know
};

[[nodiscard]] const std::error_category& category_of(errc) noexcept;  // "tessera.hub"
using core::make_error, core::make_error_code;

}  // namespace tessera::hub

template <>
struct std::is_error_code_enum<tessera::hub::errc> : std::true_type {};
