// tessera/core/math/ist.hpp — Independent Subnet Training: plans, subnets, gather, scatter, aggregation.
//
// Each round (DESIGN.md §2) a plan cuts every hidden layer's neurons, in a fresh seeded random order
// (or in rolling windows: cut_kind), into S disjoint groups sized by the capacities of the devices
// that train them. Subnet s holds the
// rows of W_1/b_1 for G_1,s (all inputs), the blocks W_l[G_l,s, G_{l-1},s] and b_l[G_l,s], the columns
// G_L,s of W_{L+1}, and the shared output bias b_{L+1}; LayerNorm gain and shift go with their neurons.
// The gathered subnet is itself a valid smaller MLP (its own flat layout, see mlp.hpp). In a
// convolutional network a convolution's output channels are its neurons: a subnet holds the kernel
// blocks W_l[G_l,s, every tap, G_{l-1},s], and a dense layer after a flatten every position of the
// channels it keeps.
// FedAvg is the plan with one group holding every neuron, replicated to every device.
//
//   auto plan = core::make_plan(spec.full_arch(), capacities, groups, {.min_width = 8}, seed);
//   core::subnet sub = core::make_subnet(spec, plan.value(), plan.value().device_group[d]);
//   std::vector<float> local(core::param_count(sub.arch));
//   core::gather(full_arch, sub, global, local);        // ... train local ...
//   core::aggregator agg(full_arch);
//   agg.add(sub, local, examples_d);                    // for every device that reported
//   agg.finish(global);                                 // weighted means; untouched parameters kept
//   core::aggregator robust(full_arch, core::aggregate_kind::median);  // per value, from 3 reports up
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/core/base/error.hpp"
#include "tessera/core/base/names.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/core/math/model_spec.hpp"

namespace tessera::core {

// How a plan orders each hidden layer's neurons before cutting them into groups: a fresh random order
// from the plan's seed, or rolling windows after FedRolex (Alam et al., NeurIPS 2022): the neurons in
// their own order, started `roll` places on (mod the layer's width), so that group s holds a contiguous
// window that moves by one neuron from one cut to the next. FedRolex's windows all start at the same
// neuron and overlap; these are disjoint, one per group. As in FedRolex, neurons that no group holds
// (capacities summing below 1) form one block that also moves by one neuron per cut: every neuron is
// trained equally often only over as many cuts as the layer is wide.
enum class cut_kind { random, rolling };
inline constexpr auto k_cut_names = names_in_order<cut_kind>({"random", "rolling"});

struct plan_options {
  std::int64_t min_width = 8;  // no group of a layer is narrower than this
  cut_kind cut = cut_kind::random;
  std::uint64_t roll = 0;      // rolling: the cut's index (the engine's span of kept rounds)
};

// The partition of one round. members[h][s] lists, sorted, the neurons of hidden layer h (0-based)
// that group s holds; device d trains group device_group[d].
// `frozen` leading layers are sent whole and trained by nobody (successive layer training: every
// subnet's mlp_arch::frozen, held in frozen_codec); scatter and the aggregator leave them as they are.
struct round_plan {
  std::uint64_t seed = 0;
  std::size_t groups = 0;
  std::vector<std::vector<std::vector<std::int32_t>>> members;
  std::vector<std::size_t> device_group;
  std::size_t frozen = 0;
  codec_kind frozen_codec = codec_kind::f32;
};

// Plans a round. capacities[d] in (0, 1] is the largest fraction of every hidden layer that device d
// can train (from its memory budget); its length is the device count D. `groups` (1..D) is S: device d
// joins group d mod S, and a group's capacity is the smallest of its devices'. Group sizes follow the
// capacities: a fleet whose capacities sum below 1 leaves neurons out. Errors name the layer and group
// that cannot meet min_width.
[[nodiscard]] result<round_plan> make_plan(const mlp_arch& full, std::span<const double> capacities,
                                           std::size_t groups, const plan_options& options, std::uint64_t seed);
// The FedAvg plan: one group with every neuron, replicated to `devices` devices.
[[nodiscard]] round_plan make_full_plan(const mlp_arch& full, std::size_t devices);
// The largest S ≤ devices such that every hidden layer can give each group min_width neurons.
[[nodiscard]] std::size_t default_group_count(const mlp_arch& full, std::size_t devices, std::int64_t min_width) noexcept;

// Successive layer training (Pfeiffer, Khalili, Henkel, NeurIPS 2023), one stage: hidden layer
// `stage` (0-based) is cut into groups as make_plan cuts every layer (capacities are shares of it);
// the layers before it go whole to every group and are frozen (plan.frozen = stage); every later hidden
// layer goes to every group as its first head_fraction of units (at least min_width), the scaled-down
// head of the paper, trained by all and averaged. Errors as make_plan's, naming the stage's layer.
struct stage_shape {
  std::size_t stage = 0;
  double head_fraction = 1.0;
  codec_kind frozen_codec = codec_kind::f32;  // how the frozen layers travel and are held (mlp_arch::frozen_codec)
};
[[nodiscard]] result<round_plan> make_stage_plan(const mlp_arch& full, std::span<const double> capacities, std::size_t groups,
                                                 const stage_shape& shape, const plan_options& options, std::uint64_t seed);
// The units of hidden layer h (0-based) a stage's head keeps: its first ⌊head_fraction·n⌋, at least
// min_width (and at most n).
[[nodiscard]] std::int64_t head_units(const mlp_arch& full, std::size_t h, double head_fraction, std::int64_t min_width) noexcept;

// A stage's subnet with `share` of the stage's layer (at least min_width units): the layers before it
// whole and frozen, the later hidden layers at head_units. What capacity_for_stage sizes.
[[nodiscard]] mlp_arch stage_arch(const mlp_arch& full, const stage_shape& shape, double share, std::int64_t min_width);
// The largest share in (0, 1] of the stage's layer whose stage_arch fits budget_bytes (with the
// clipping buffers of clip_bytes when `clip`); 0 if not even min_width units fit.
[[nodiscard]] double capacity_for_stage(const mlp_arch& full, const stage_shape& shape, std::int64_t batch, bool momentum,
                                        codec_kind codec, std::size_t budget_bytes, std::int64_t min_width, bool clip = false);

// One group's subnet: its architecture and the full-model neurons of each hidden layer it holds.
struct subnet {
  mlp_arch arch;
  std::vector<std::vector<std::int32_t>> neurons;  // per hidden layer, sorted
};

// Builds the subnet of group `group`; with scale compensation, input_scale[l] = n_{l-1} / |G_{l-1}|.
[[nodiscard]] subnet make_subnet(const mlp_arch& full, compensation_kind compensation, const round_plan& plan,
                                 std::size_t group);

// Copies the subnet's parameters out of the full model (sub_params: param_count(sub.arch) floats).
void gather(const mlp_arch& full, const subnet& sub, std::span<const float> full_params, std::span<float> sub_params);
// Writes the subnet's trained parameters (every layer after sub.arch.frozen) back to where they came from.
void scatter(const mlp_arch& full, const subnet& sub, std::span<const float> sub_params, std::span<float> full_params);
// Adds integer values of the subnet's trained parameters to where they came from (exact sums of quantized
// changes: the hub's DP release).
void scatter_add(const mlp_arch& full, const subnet& sub, std::span<const std::int64_t> sub_values,
                 std::span<std::int64_t> full_values);

// How reports of one parameter combine. mean: weighted by examples. median and trimmed_mean are robust
// aggregates for replicated groups (Yin, Chen, Ramchandran, Bartlett, ICML 2018: coordinate-wise median
// and trimmed mean): unweighted, per parameter over the devices that reported it, applied from
// k_robust_min_reports reports up (fewer are their weighted mean: a median of two is no defence). With n
// reports a trimmed mean drops the floor(trim·n) largest and smallest values and averages the rest.
enum class aggregate_kind { mean, median, trimmed_mean };
inline constexpr auto k_aggregate_names = names_in_order<aggregate_kind>({"mean", "median", "trimmed_mean"});
inline constexpr std::size_t k_robust_min_reports = 3;

// Combines what devices send back. Each parameter becomes the aggregate of the values that reported it
// (the example-weighted mean by default); a parameter nobody reported keeps its value. A robust
// aggregate keeps each report until finish() (the reported subnets' size in floats).
class aggregator {
 public:
  explicit aggregator(const mlp_arch& full, aggregate_kind kind = aggregate_kind::mean, double trim = 0.2);
  void reset();
  // Adds one device's trained subnet with weight `examples` (> 0); its frozen layers are not a report.
  void add(const subnet& sub, std::span<const float> sub_params, double examples);
  // Writes the means into full_params; returns how many parameters received at least one value.
  std::size_t finish(std::span<float> full_params) const;

 private:
  struct report {
    subnet sub;
    std::vector<float> params;
  };
  // The robust aggregate over each parameter's reports, where there are enough of them.
  void finish_robust(std::span<float> full_params) const;

  mlp_arch full_;
  aggregate_kind kind_;
  double trim_;
  std::vector<double> sum_;
  std::vector<double> weight_;
  std::vector<report> reports_;  // robust aggregates only
};

// The robust aggregate of `values` (reordered in place): their median, or their mean without the
// floor(trim·n) smallest and largest.
[[nodiscard]] double robust_value(std::span<float> values, aggregate_kind kind, double trim) noexcept;

}  // namespace tessera::core
