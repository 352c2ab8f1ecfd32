#include "tessera/edge/error.hpp"

namespace tessera::edge {

const std::error_category& category_of(errc) noexcept {
  static constexpr std::string_view names[] = {
      "bad_task", "inputs_mismatch", "batch_too_large", "codec_disabled", "size_mismatch",
      "bad_download", "training_failed", "data_over_budget", "labels_mismatch", "secure_refused", "secure_step", "privacy_policy"};
  static const core::table_category category("tessera.edge", names);
  return category;
}

}  // namespace tessera::edge
