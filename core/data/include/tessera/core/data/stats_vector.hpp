// tessera/core/data/stats_vector.hpp — a device's feature statistics as one vector of values in
// [−1, 1], the form secure aggregation masks and adds (DESIGN §6).
//
// Under secure aggregation the hub learns only the fleet's sums, never one device's (fed_stats.hpp has
// the passes). Each figure of a pass is divided by a public scale that bounds it for any device the hub
// asked, so that the vector fits the ring's fixed-point encoding; the hub multiplies the released sum
// back. The scales come from two numbers the request carries:
//
//   max_examples   the most examples any asked device holds (the hub knows each from its HELLO); the
//                  counts' scale is the power of two at or above it, so that a count (below 2^24) is
//                  exact in float32 and in the ring: counts come back exact
//   bounds         the largest magnitude of each input feature and of a regression target (one
//                  for all, or one per feature then the target's: secure_aggregation.statistics_bounds):
//                  a device measures with every value clipped into its bound (core::measure_sums with
//                  bounds) and counts the examples it clipped, a count that is summed like the rest. It
//                  never refuses over a value, nor names one: a refusal would tell the hub, which chose
//                  the bounds, where a device's data lies. A 64-bit ring holds about 15 digits over a
//                  bound (after the counts), so features whose ranges differ by orders of magnitude want
//                  bounds of their own: a squared deviation far below its bound² is lost in the step.
//
//   pass 1   [n, Σx_0 … Σx_f−1, classification: count_0 … count_c−1 | regression: Σy, clipped]
//            scales  C, C·bound_j (sums), C (counts)           C = 2^⌈log2 max_examples⌉
//   pass 2   [n, Σ(x_j − mean_j)² …, regression: Σ(y − ȳ)²]
//            scales  C, C·(bound_j + |mean_j|)²
//
// min and max are per-example values, not sums: they never leave a device under secure aggregation.
// Decoding rounds the counts to integers and refuses a sum that no examples could give (a count off an
// integer by more than the rounding, a negative square). The counts are exact while the ring's step is
// 2^−52 of a value (a sum of at most 2048 devices in a 64-bit ring); beyond, each count carries about
// devices²·C / 2^63 of rounding, under a quarter up to some 2·10^5 devices at C = 2^24.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/core/base/error.hpp"
#include "tessera/core/data/fed_stats.hpp"
#include "tessera/core/math/model_spec.hpp"

namespace tessera::core {

struct stats_scale {
  std::int64_t max_examples = 0;
  std::vector<double> bounds;  // one for every feature and the target, or one per feature and then the target's

  [[nodiscard]] double feature_bound(std::size_t j) const noexcept { return bounds.size() == 1 ? bounds[0] : bounds[j]; }
  [[nodiscard]] double target_bound() const noexcept { return bounds.back(); }
};

// The length of a pass's vector.
[[nodiscard]] std::size_t sums_vector_length(std::int64_t features, task_kind task, std::int64_t outputs) noexcept;
[[nodiscard]] std::size_t spread_vector_length(std::int64_t features, task_kind task) noexcept;

// Each value's scale, in the layout above. `scale`'s bounds must be positive and finite, one or
// features + 1 of them (invalid_argument).
[[nodiscard]] result<std::vector<double>> sums_scales(std::int64_t features, task_kind task, std::int64_t outputs, const stats_scale& scale);
[[nodiscard]] result<std::vector<double>> spread_scales(std::span<const double> mean, double target_mean, task_kind task,
                                                        const stats_scale& scale);

// A device's pass, measured with the bounds, as the vector it masks: each figure over its scale. Refuses
// (invalid_argument) a device with more examples than max_examples (the hub knows its count) and figures
// that were not measured within the bounds.
[[nodiscard]] result<std::vector<float>> sums_vector(const stats_sums& s, task_kind task, const stats_scale& scale);
[[nodiscard]] result<std::vector<float>> spread_vector(const stats_spread& s, std::span<const double> mean, double target_mean,
                                                       task_kind task, const stats_scale& scale);

// The fleet's figures from a released sum of such vectors: each value times its scale, counts rounded
// to integers (exact: see the counts' scale), sums within float32's rounding of each device's own (2^−24
// of it). A count further than a quarter from an integer, or a histogram that does not add up to the
// count, is an error (bad_format): no honest vectors sum to it. min and max are left empty.
[[nodiscard]] result<stats_sums> sums_from_vector(std::span<const double> v, std::int64_t features, task_kind task, std::int64_t outputs,
                                                  const stats_scale& scale);
// `resolution` is the largest error the ring leaves in one value before scaling (the devices' count
// times its step): a square below −resolution is an error, one that rounding pushed below zero comes
// back as zero, and `floor` (if given) gets each feature's bound after scaling — a sum of squares within
// it of zero cannot be told from a constant feature's.
[[nodiscard]] result<stats_spread> spread_from_vector(std::span<const double> v, std::span<const double> mean, double target_mean,
                                                      task_kind task, const stats_scale& scale, double resolution,
                                                      std::vector<double>* floor = nullptr);

// A device's score of a model on its validation split (an evaluation) as a vector: [n, Σloss, correct]
// over the scales [C, C·loss_bound, C], C the counts' scale for the most validation examples an asked
// device holds. A mean loss per example past loss_bound is clipped to it (`clipped` says so, for the
// device's own log: a refusal would tell the hub).
inline constexpr std::size_t k_score_vector_length = 3;
struct score_sum {
  std::int64_t examples = 0;
  double loss_sum = 0;  // Σ over batches of the batch's mean loss × rows
  std::int64_t correct = 0;
};
[[nodiscard]] result<std::vector<float>> score_vector(const score_sum& s, std::int64_t max_examples, double loss_bound,
                                                     bool* clipped = nullptr);
// The fleet's score from a released sum of such vectors (counts exact; bad_format as sums_from_vector).
[[nodiscard]] result<score_sum> score_from_vector(std::span<const double> v, std::int64_t max_examples, double loss_bound);

}  // namespace tessera::core
