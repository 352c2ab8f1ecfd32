#include "tessera/hub/error.hpp"

namespace tessera::hub {

const std::error_category& category_of(errc) noexcept {
  static constexpr std::string_view names[] = {
      "round_closed", "round_not_open", "not_assigned", "wrong_transfer", "checkpoint_mismatch", "unknown_device"};
  static const core::table_category category("tessera.hub", names);
  return category;
}

}  // namespace tessera::hub
