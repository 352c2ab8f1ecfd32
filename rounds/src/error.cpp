#include "tessera/rounds/error.hpp"

namespace tessera::rounds {
namespace {

constexpr int code(errc e) noexcept { return static_cast<int>(e); }

constexpr core::error_text k_texts[] = {
    {code(errc::no_devices), "no_devices", "no device can take part"},
    {code(errc::wrong_round), "wrong_round", "update for a round that is not open"},
    {code(errc::already_reported), "already_reported", "the assignment already ended"},
    {code(errc::codec_mismatch), "codec_mismatch", "update in another codec"},
    {code(errc::size_mismatch), "size_mismatch", "update of the wrong size"},
    {code(errc::steps_mismatch), "steps_mismatch", "update after other steps than assigned"},
    {code(errc::examples_out_of_range), "examples_out_of_range", "example count out of range"},
    {code(errc::loss_not_finite), "loss_not_finite", "training loss not finite"},
    {code(errc::bad_values), "bad_values", "parameters do not decode or are not finite"},
    {code(errc::illegal_transition), "illegal_transition", "event does not fit the assignment's state"},
};

}  // namespace

const std::error_category& rounds_category() noexcept {
  static const core::table_category category("tessera.rounds", k_texts);
  return category;
}

}  // namespace tessera::rounds
