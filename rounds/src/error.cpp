#include "tessera/rounds/error.hpp"

namespace tessera::rounds {

const std::error_category& category_of(errc) noexcept {
  static constexpr std::string_view names[] = {
      "no_devices", "wrong_round", "already_reported", "codec_mismatch", "size_mismatch",
      "steps_mismatch", "examples_out_of_range", "loss_not_finite", "bad_values", "illegal_transition",
      "bad_statistics", "stats_incomplete", "fleet_too_small", "secure_step", "privacy_budget", "update_out_of_bounds",
      "checkpoint_corrupt", "server_state", "checkpoint_mismatch", "nobody_trains"};
  static const core::table_category category("tessera.rounds", names);
  return category;
}

}  // namespace tessera::rounds
