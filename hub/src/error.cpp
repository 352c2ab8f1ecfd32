#include "tessera/hub/error.hpp"

namespace tessera::hub {
namespace {

constexpr int code(errc e) noexcept { return static_cast<int>(e); }

constexpr core::error_text k_texts[] = {
    {code(errc::round_closed), "round_closed", "update for a closed round"},
    {code(errc::round_not_open), "round_not_open", "update for a round that is not open"},
    {code(errc::not_assigned), "not_assigned", "no assignment for this device"},
    {code(errc::wrong_transfer), "wrong_transfer", "update answers another assignment"},
    {code(errc::checkpoint_mismatch), "checkpoint_mismatch", "checkpoint of another run"},
};

}  // namespace

const std::error_category& hub_category() noexcept {
  static const core::table_category category("tessera.hub", k_texts);
  return category;
}

}  // namespace tessera::hub
