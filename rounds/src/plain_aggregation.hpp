// rounds/src/plain_aggregation.hpp — internal: the plain kind of aggregation (aggregation.hpp). Each
// update is decoded and held to the update bounds against what the device was sent (rejected, or
// clipped into them and counted), then combined by the configured aggregate (core::aggregator: the
// mean weighted by examples, the median or the trimmed mean). The private kind wraps it for the same
// checks (receive) and sums the clipped changes itself.
#pragma once

#include "tessera/core/math/ist.hpp"
#include "tessera/rounds/aggregation.hpp"
#include "tessera/rounds/engine.hpp"

namespace tessera::rounds {

class plain_aggregation final : public aggregation {
 public:
  plain_aggregation(const run_config& config, const core::mlp_arch& full);

  [[nodiscard]] core::result<std::size_t> admit(const round_view& v, std::vector<device_offer>& taking,
                                                std::vector<excluded_device>& excluded) const override;
  [[nodiscard]] core::result<void> begin(const round_view& v, const core::round_plan& plan, std::span<assignment> assignments) override;
  [[nodiscard]] std::uint64_t most_clipped(const assignment&) const noexcept override { return 0; }
  [[nodiscard]] core::result<void> receive(const round_view& v, assignment& a, std::span<const std::byte> blob) override;
  void fold(const round_view& v, assignment& a, reached_mask& reached) override;
  [[nodiscard]] core::result<void> finish(const round_view& v, std::span<const assignment> assignments, std::span<float> params,
                                          reached_mask& reached, round_metrics& m) override;

  // The bounds figures of the round (largest accepted change, updates clipped into the bounds), into m.
  void note_bounds(const round_view& v, round_metrics& m) const;

 private:
  [[nodiscard]] core::result<void> bound_update(const round_view& v, assignment& a, std::span<const float> sent);

  core::aggregator aggregator_;
  double update_norm_max_ = 0;       // the largest accepted change's L2 norm this round
  std::size_t updates_bounded_ = 0;  // updates clipped into the bounds this round
};

// The bounds of a change from `sent` (run_config::max_update_norm, max_update_abs, or derived from
// what was sent and the rate it trains at).
[[nodiscard]] update_bounds bounds_for(const run_config& config, std::span<const float> sent, const core::sgd_options& sgd) noexcept;

}  // namespace tessera::rounds
