// tessera/core/data/fed_stats.hpp — the fleet's feature statistics, as sums a hub adds up.
//
// A federation that standardizes its inputs needs each feature's mean and standard deviation over all
// the devices' training examples, which no one holds. Each device measures its own examples and the hub
// adds the devices' figures up, in two passes:
//
//   pass 1 (stats_sums)    examples n_d, Σx per feature, the label histogram (classification) or Σy
//                          (regression), and per-feature min and max
//   hub                    mean = Σ_d Σx / Σ_d n_d            (float64, devices in natural id order)
//   pass 2 (stats_spread)  Σ(x − mean)² per feature about that fleet mean (and Σ(y − ȳ)²)
//   hub                    M2 = Σ_d Σ(x − mean)², variance M2 / n, std = √variance
//
// The fleet's M2 is exactly what Chan, Golub and LeVeque's pairwise update computes from the devices'
// (n, mean, M2): Σ_d [M2_d + n_d (mean_d − mean)²] = Σ_d Σ(x − mean)². Centring every device's sum on
// the fleet mean turns that update into a plain sum, and keeps the cancellation of the naive Σx² − n·mean²
// (features around 1e4 with a spread of 1) out of it. Everything the hub needs is then a count or a sum,
// which secure aggregation can mask and add like an update; only min and max are per-device values (they
// are reported, not used, and are left out where sums are masked). All sums are float64, in example order.
//
// The simulator calls the same functions on its shards in the same order, so its statistics equal a
// real fleet's bit for bit.
//
//   auto s = core::measure_sums(stream, task, outputs);              // device: pass 1
//   core::fleet_stats fleet(features, task, outputs);
//   TESSERA_TRY(fleet.add_sums(s.value(), "device-3"));              // hub, devices in order
//   auto q = core::measure_spread(stream, fleet.mean(), fleet.target_mean());   // device: pass 2
//   TESSERA_TRY(fleet.add_spread(q.value(), "device-3"));
//   TESSERA_ASSIGN_OR_RETURN(core::input_normalization n, fleet.normalization());
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/base/error.hpp"
#include "tessera/core/data/dataset.hpp"
#include "tessera/core/data/input_normalization.hpp"
#include "tessera/core/math/model_spec.hpp"

namespace tessera::core {

// Pass 1 of one device (or, added up, of the fleet).
struct stats_sums {
  std::int64_t examples = 0;
  std::vector<double> sum;                  // Σx per feature
  std::vector<double> min, max;             // per feature (not summable: reported only); empty in a masked sum
  std::vector<std::uint64_t> label_counts;  // classification: examples per class
  double target_sum = 0;                    // regression: Σy
  std::int64_t clipped = 0;                 // measured with bounds: examples with a value clipped to its bound
};

// Pass 2: squared deviations about the fleet's mean.
struct stats_spread {
  std::int64_t examples = 0;
  std::vector<double> sq_dev;  // Σ(x − mean)² per feature
  double target_sq_dev = 0;    // regression: Σ(y − ȳ)²
};

// Pass 1 over every example of `stream` (from its first; rewound after). Classification targets must be
// class indices below `outputs`; any target must be finite (errors name the stream and the example).
// With `bounds` (one per feature, then the target's: stats_vector.hpp) each feature, and a regression
// target, is clipped into [−bound, bound] first, and the examples clipped are counted.
[[nodiscard]] result<stats_sums> measure_sums(example_stream& stream, task_kind task, std::int64_t outputs,
                                              std::span<const double> bounds = {});
// Pass 2 over the same examples, about the fleet's `mean` (one per feature) and `target_mean`, clipped
// as pass 1 was.
[[nodiscard]] result<stats_spread> measure_spread(example_stream& stream, std::span<const double> mean,
                                                  double target_mean, std::span<const double> bounds = {});

// The hub's side: devices' figures added in the order given.
class fleet_stats {
 public:
  fleet_stats(std::int64_t features, task_kind task, std::int64_t outputs);

  // Checks a device's pass 1 (shapes, finite values, a histogram that adds up to its count, min ≤ max)
  // and adds it; `who` names the device in errors.
  [[nodiscard]] result<void> add_sums(const stats_sums& device, const std::string& who);
  [[nodiscard]] const stats_sums& sums() const noexcept { return sums_; }
  [[nodiscard]] std::size_t devices() const noexcept { return devices_; }
  // The fleet's mean of each feature and of the target (after pass 1).
  [[nodiscard]] const std::vector<double>& mean() const noexcept { return mean_; }
  [[nodiscard]] double target_mean() const noexcept { return target_mean_; }

  // Checks and adds a device's pass 2; it must count the examples it counted in pass 1 (`expected`).
  // `floor`: for a masked sum, each feature's error bound (stats_vector.hpp): a feature whose sum of
  // squares lies within it is taken as constant.
  [[nodiscard]] result<void> add_spread(const stats_spread& device, std::int64_t expected, const std::string& who,
                                        std::span<const double> floor = {});
  [[nodiscard]] const stats_spread& spread() const noexcept { return spread_; }

  // Per-feature standard deviation (population: M2 / n), after pass 2.
  [[nodiscard]] std::vector<double> stddev() const;
  // The model's input normalization: mean and std as float32; a feature that does not vary (std 0, or
  // below the rounding of its mean) gets std 1 so that it passes through centred. Fails before both
  // passes are complete, or if pass 2 did not cover pass 1's examples.
  [[nodiscard]] result<input_normalization> normalization() const;

 private:
  std::int64_t features_;
  task_kind task_;
  std::int64_t outputs_;
  std::size_t devices_ = 0;
  stats_sums sums_;
  std::vector<double> mean_;
  double target_mean_ = 0;
  stats_spread spread_;
  std::vector<double> floor_;  // masked sums' error bounds on sq_dev (empty: none)
};

}  // namespace tessera::core
