// The one place that decides which aggregations exist, and what every kind shares.
#include "tessera/rounds/aggregation.hpp"

#include <algorithm>

#include "tessera/core/math/mlp.hpp"
#include "plain_aggregation.hpp"
#include "private_aggregation.hpp"
#include "secure_aggregation.hpp"

namespace tessera::rounds {

reached_mask::reached_mask(const core::mlp_arch& full, bool tracked) : full_(full) {
  if (tracked) flags_.assign(core::param_count(full), 0.0f);
}

void reached_mask::mark(const core::subnet& sub, std::size_t leading) {
  if (!tracked()) return;
  std::vector<float> local(core::param_count(sub.arch));
  core::gather(full_, sub, flags_, local);
  std::fill_n(local.begin(), std::min(leading, local.size()), 1.0f);
  core::scatter(full_, sub, local, flags_);
}

void reached_mask::mark_range(std::size_t offset, std::size_t count) {
  if (!tracked()) return;
  std::fill_n(flags_.begin() + static_cast<std::ptrdiff_t>(offset), count, 1.0f);
}

core::result<std::vector<device_offer>> aggregation::sample(const round_view&, std::vector<device_offer> offers) { return offers; }

core::result<std::optional<core::round_plan>> aggregation::own_plan(const round_view&, std::span<const device_offer>) {
  return std::optional<core::round_plan>();
}

// Plain or secure, and private around either. The configuration's reader (run_config.cpp) has already
// refused what none of them can do: a robust aggregate under secure aggregation or differential
// privacy (each needs every device's update), a kept cut or whole-model rounds in a private round.
std::unique_ptr<aggregation> make_aggregation(const run_config& config, std::size_t params) {
  std::unique_ptr<aggregation> inner;
  if (config.secure_aggregation.enabled) inner = std::make_unique<secure_aggregation>(config);
  else inner = std::make_unique<plain_aggregation>(config, config.model.full_arch());
  if (!config.dp.enabled) return inner;
  return std::make_unique<private_aggregation>(config, params, std::move(inner));
}

}  // namespace tessera::rounds
