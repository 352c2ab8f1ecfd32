// tessera/rounds/statistics.hpp — the fleet's feature statistics, gathered before round 1.
//
// A model with `input_normalization: standardize` needs each input's mean and deviation over all the
// devices' training examples before it can be trained (core/data/fed_stats.hpp has the arithmetic). This is
// the gathering's state, apart from any socket: the hub drives it with STATS messages, tessera-sim with
// its shards, so both ask the same devices, add their figures in the same order and get the same bits.
//
//   begin(offers)        devices with at least min_examples examples, in natural order of their ids
//                        (a device with fewer is left out, with its reason: a handful of examples would
//                        tell the hub about individual records, and adds little)
//   pass 1               every asked device reports counts and sums (add_sums) or is dropped (drop);
//                        finish_pass() adds them in device order and computes the fleet's mean
//   pass 2               the devices that reported pass 1 report squared deviations about that mean;
//                        finish_pass() adds them. If one of them is dropped meanwhile, pass 1's sums
//                        include examples pass 2 cannot cover: the gathering starts again (restart()).
//   normalization()      the model's input normalization (float32 mean and std per input)
//
//   rounds::stats_gathering g(spec, /*min_examples=*/10);
//   auto skipped = g.begin(offers);
//   for (auto& id : g.asked()) TESSERA_TRY(g.add_sums(id, sums_of(id)));
//   TESSERA_TRY(g.finish_pass());                                    // → pass 2
//   for (auto& id : g.asked()) TESSERA_TRY(g.add_spread(id, spread_of(id, g.mean(), g.target_mean())));
//   TESSERA_TRY(g.finish_pass());                                    // → done
//   core::input_normalization n = g.normalization().value();
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/data/fed_stats.hpp"
#include "tessera/core/data/stats_vector.hpp"
#include "tessera/core/math/model_spec.hpp"
#include "tessera/rounds/engine.hpp"
#include "tessera/rounds/secure_sum.hpp"

namespace tessera::rounds {

class stats_gathering {
 public:
  enum class phase { idle, sums, spread, done };

  stats_gathering(const core::model_spec& spec, std::int64_t min_examples);

  // Starts (again) with `offers`: pass 1 asks every device with enough examples. Returns the devices
  // left out with the reason; fails (errc::no_devices) when none is left.
  [[nodiscard]] core::result<std::vector<excluded_device>> begin(std::vector<device_offer> offers);
  [[nodiscard]] phase at() const noexcept { return phase_; }
  [[nodiscard]] int pass() const noexcept { return phase_ == phase::sums ? 1 : phase_ == phase::spread ? 2 : 0; }
  // The devices the current pass asks, in natural order.
  [[nodiscard]] const std::vector<std::string>& asked() const noexcept { return asked_; }
  [[nodiscard]] bool is_asked(const std::string& id) const;
  // Devices that have not answered the current pass yet.
  [[nodiscard]] std::vector<std::string> waiting() const;
  [[nodiscard]] bool pass_complete() const noexcept;

  // A device's answer. Errors (errc::bad_update) name the device: an answer it was not asked for, a
  // second answer, or figures that do not fit the model (core::fleet_stats checks them); the caller
  // drops such a device.
  [[nodiscard]] core::result<void> add_sums(const std::string& id, const core::stats_sums& sums);
  [[nodiscard]] core::result<void> add_spread(const std::string& id, const core::stats_spread& spread);
  // The device will not answer (it refused, left, or answered with nonsense).
  void drop(const std::string& id, const std::string& why);

  // Under secure aggregation (mask_with) a pass is one masked sum (rounds/secure_sum.hpp) of the asked
  // devices' vectors (core/data/stats_vector.hpp), scaled by the most examples an asked device holds
  // and by secure_aggregation.statistics_bounds: begin_masked_pass() makes it, add_released() ends the
  // pass with its sum as finish_pass() would. Pass 2 must cover pass 1's survivors, else
  // errc::stats_incomplete: begin() again. The per-device calls above are not used then.
  void mask_with(const secure_aggregation_config& sa) { masked_ = sa; }
  [[nodiscard]] bool masked() const noexcept { return masked_.has_value(); }
  [[nodiscard]] core::stats_scale scale() const;
  [[nodiscard]] core::result<secure_sum> begin_masked_pass() const;
  [[nodiscard]] core::result<void> add_released(const secure_sum::released& r);

  // Ends the pass once every asked device answered or was dropped. Pass 1 → pass 2 (fails with
  // errc::no_devices if nobody answered); pass 2 → done, or errc::stats_incomplete when a device of pass
  // 1 is missing from pass 2: begin() again.
  [[nodiscard]] core::result<void> finish_pass();

  // Pass 2's question.
  [[nodiscard]] const std::vector<double>& mean() const noexcept { return fleet_->mean(); }
  [[nodiscard]] double target_mean() const noexcept { return fleet_->target_mean(); }
  // After done: the model's input normalization, and a summary for logs and checkpoints.
  [[nodiscard]] core::result<core::input_normalization> normalization() const;
  [[nodiscard]] nlohmann::json summary() const;
  [[nodiscard]] const core::fleet_stats& fleet() const noexcept { return *fleet_; }
  // Why devices were dropped in the last attempt, in order.
  [[nodiscard]] const std::vector<excluded_device>& dropped() const noexcept { return dropped_; }

 private:
  core::model_spec spec_;
  std::int64_t min_examples_;
  std::int64_t max_examples_ = 0;
  std::int64_t clipped_ = 0;  // masked: examples the devices clipped into the bounds
  std::optional<secure_aggregation_config> masked_;
  phase phase_ = phase::idle;
  std::vector<std::string> asked_;
  std::map<std::string, core::stats_sums> sums_;
  std::map<std::string, core::stats_spread> spreads_;
  std::map<std::string, std::int64_t> counted_;  // pass 1's example count of each device in the mean
  std::vector<excluded_device> dropped_;
  std::optional<core::fleet_stats> fleet_;
};

}  // namespace tessera::rounds
