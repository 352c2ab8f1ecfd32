#include "tessera/core/math/ist.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "tessera/core/base/rng.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/core/math/mlp.hpp"

namespace tessera::core {
namespace {

std::size_t sz(std::int64_t v) noexcept { return static_cast<std::size_t>(v); }

// What the units of parametric hidden layer h are: a convolution's channels, a dense layer's neurons.
std::string unit_word(const mlp_arch& arch, std::size_t h) {
  std::size_t seen = 0;
  for (const layer_spec& l : arch.layers)
    if (l.parametric() && seen++ == h) return l.kind == layer_kind::dense ? "neurons" : "channels";
  return "neurons";
}

// Group sizes for one layer of n neurons given group capacities (fractions of the layer).
std::vector<std::int64_t> group_sizes(std::int64_t n, std::span<const double> caps) {
  const double total = std::accumulate(caps.begin(), caps.end(), 0.0);
  std::vector<std::int64_t> size(caps.size());
  if (total <= 1.0) {
    // The fleet cannot hold the whole layer: each group takes what it can, the rest sit out this round.
    for (std::size_t s = 0; s < caps.size(); ++s) size[s] = neurons_for(caps[s], n);
    return size;
  }
  // Proportional shares of all n neurons, rounded by largest remainder so that they add up to n.
  std::vector<double> rest(caps.size());
  std::int64_t used = 0;
  for (std::size_t s = 0; s < caps.size(); ++s) {
    const double quota = static_cast<double>(n) * caps[s] / total;
    size[s] = static_cast<std::int64_t>(std::floor(quota));
    rest[s] = quota - static_cast<double>(size[s]);
    used += size[s];
  }
  std::vector<std::size_t> order(caps.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return rest[a] > rest[b]; });
  for (std::size_t i = 0; used < n && i < order.size(); ++i, ++used) ++size[order[i]];
  // A share never exceeds what the group can hold.
  for (std::size_t s = 0; s < caps.size(); ++s)
    size[s] = std::min(size[s], neurons_for(caps[s], n));
  return size;
}

// Calls f(sub_index, full_index) for every parameter the subnet holds in layers `from` and after
// (0: all of them; sub.arch.frozen: the trained ones).
template <class F>
void for_each_param(const mlp_arch& full, const subnet& sub, F&& f, std::size_t from = 0) {
  const auto full_slots = param_slots(full);
  const auto sub_slots = param_slots(sub.arch);
  const std::size_t layers = full_slots.size();
  const std::size_t hidden = layers - 1;
  for (std::size_t i = from; i < layers; ++i) {
    const layer_slots& fs = full_slots[i];
    const layer_slots& ss = sub_slots[i];
    const std::vector<std::int32_t>* rows = i < hidden ? &sub.neurons[i] : nullptr;  // null: every row
    const std::vector<std::int32_t>* cols = i > 0 ? &sub.neurons[i - 1] : nullptr;   // null: every column
    // A column is tap × units + unit (mlp.hpp): the subnet keeps every tap of the units it keeps.
    const std::size_t sub_units = sz(ss.cols / ss.taps), full_units = sz(fs.cols / fs.taps);
    for (std::int64_t r = 0; r < ss.rows; ++r) {
      const std::size_t fr = rows ? sz((*rows)[sz(r)]) : sz(r);
      const std::size_t sub_row = ss.weight + sz(r) * sz(ss.cols);
      const std::size_t full_row = fs.weight + fr * sz(fs.cols);
      if (cols == nullptr) {
        for (std::int64_t c = 0; c < ss.cols; ++c) f(sub_row + sz(c), full_row + sz(c));
      } else {
        for (std::size_t t = 0; t < sz(ss.taps); ++t)
          for (std::size_t j = 0; j < sub_units; ++j) f(sub_row + t * sub_units + j, full_row + t * full_units + sz((*cols)[j]));
      }
      f(ss.bias + sz(r), fs.bias + fr);
      if (ss.has_norm) {
        f(ss.gain + sz(r), fs.gain + fr);
        f(ss.shift + sz(r), fs.shift + fr);
      }
    }
  }
}

std::size_t trained_from(const subnet& sub) noexcept { return static_cast<std::size_t>(sub.arch.frozen); }

// Device d joins group d mod S; a group's capacity is the smallest of its devices'. Errors name the
// capacity or the group count that cannot be planned.
result<std::vector<double>> group_capacities(std::span<const double> capacities, std::size_t groups, round_plan& plan) {
  const std::size_t devices = capacities.size();
  if (devices == 0) return make_error(errc::invalid_argument, "plan: no devices");
  if (groups < 1 || groups > devices)
    return make_error(errc::invalid_argument, "plan: " + std::to_string(groups) + " groups for " +
                                                  std::to_string(devices) + " devices (need 1..devices)");
  for (std::size_t d = 0; d < devices; ++d) {
    if (!(capacities[d] > 0.0 && capacities[d] <= 1.0))
      return make_error(errc::invalid_argument, "plan: capacity of device " + std::to_string(d) + " is " +
                                                    std::to_string(capacities[d]) + ", must be in (0, 1]");
  }
  plan.groups = groups;
  plan.device_group.resize(devices);
  std::vector<double> group_cap(groups, 1.0);
  for (std::size_t d = 0; d < devices; ++d) {
    plan.device_group[d] = d % groups;
    group_cap[d % groups] = std::min(group_cap[d % groups], capacities[d]);
  }
  return group_cap;
}

// Cuts hidden layer h into the plan's groups, sized by their capacities (group_sizes).
result<void> cut_layer(const mlp_arch& full, std::size_t h, std::span<const double> group_cap, const plan_options& options,
                       std::uint64_t seed, round_plan& plan) {
  const std::size_t groups = group_cap.size();
  const std::int64_t n = full.widths[h + 1];
  const std::int64_t min_width = std::clamp<std::int64_t>(options.min_width, 1, n);
  const auto sizes = group_sizes(n, group_cap);
  for (std::size_t s = 0; s < groups; ++s) {
    if (sizes[s] < min_width)
      return make_error(errc::invalid_argument,
                        "plan: hidden layer " + std::to_string(h + 1) + " (" + std::to_string(n) + " " + unit_word(full, h) +
                            ") would give group " + std::to_string(s) + " only " + std::to_string(sizes[s]) + " " + unit_word(full, h) +
                            ", fewer than min_width " + std::to_string(min_width) + "; use fewer groups or devices with more memory");
  }
  std::vector<std::int32_t> perm(sz(n));
  std::iota(perm.begin(), perm.end(), 0);
  if (options.cut == cut_kind::rolling) {
    std::rotate(perm.begin(), perm.begin() + static_cast<std::ptrdiff_t>(options.roll % static_cast<std::uint64_t>(n)), perm.end());
  } else {
    rng r(mix_seed(seed, h));
    shuffle(perm.begin(), perm.end(), r);
  }
  plan.members[h].resize(groups);
  std::size_t at = 0;
  for (std::size_t s = 0; s < groups; ++s) {
    auto& g = plan.members[h][s];
    g.assign(perm.begin() + static_cast<std::ptrdiff_t>(at), perm.begin() + static_cast<std::ptrdiff_t>(at + sz(sizes[s])));
    std::sort(g.begin(), g.end());
    at += sz(sizes[s]);
  }
  return {};
}

}  // namespace

result<round_plan> make_plan(const mlp_arch& full, std::span<const double> capacities, std::size_t groups,
                             const plan_options& options, std::uint64_t seed) {
  round_plan plan;
  plan.seed = seed;
  TESSERA_ASSIGN_OR_RETURN(const std::vector<double> group_cap, group_capacities(capacities, groups, plan));
  plan.members.resize(full.hidden_layers());
  for (std::size_t h = 0; h < full.hidden_layers(); ++h) TESSERA_TRY(cut_layer(full, h, group_cap, options, seed, plan));
  return plan;
}

std::int64_t head_units(const mlp_arch& full, std::size_t h, double head_fraction, std::int64_t min_width) noexcept {
  const std::int64_t n = full.widths[h + 1];
  return std::clamp(neurons_for(head_fraction, n), std::min(std::max<std::int64_t>(min_width, 1), n), n);
}

result<round_plan> make_stage_plan(const mlp_arch& full, std::span<const double> capacities, std::size_t groups,
                                   const stage_shape& shape, const plan_options& options, std::uint64_t seed) {
  const std::size_t hidden = full.hidden_layers();
  if (shape.stage >= hidden)
    return make_error(errc::invalid_argument, "plan: stage " + std::to_string(shape.stage + 1) + " of a model with " +
                                                  std::to_string(hidden) + " hidden layers");
  if (!(shape.head_fraction > 0.0 && shape.head_fraction <= 1.0))
    return make_error(errc::invalid_argument, "plan: head_fraction " + std::to_string(shape.head_fraction) + ", must be in (0, 1]");
  round_plan plan;
  plan.seed = seed;
  plan.frozen = shape.stage;
  plan.frozen_codec = shape.frozen_codec;
  TESSERA_ASSIGN_OR_RETURN(const std::vector<double> group_cap, group_capacities(capacities, groups, plan));
  plan.members.resize(hidden);
  for (std::size_t h = 0; h < hidden; ++h) {
    if (h == shape.stage) {
      TESSERA_TRY(cut_layer(full, h, group_cap, options, seed, plan));
      continue;
    }
    std::vector<std::int32_t> units(sz(h < shape.stage ? full.widths[h + 1] : head_units(full, h, shape.head_fraction, options.min_width)));
    std::iota(units.begin(), units.end(), 0);
    plan.members[h].assign(groups, units);
  }
  return plan;
}

mlp_arch stage_arch(const mlp_arch& full, const stage_shape& shape, double share, std::int64_t min_width) {
  mlp_arch a = full;
  for (std::size_t h = shape.stage; h < full.hidden_layers(); ++h) {
    const std::int64_t n = full.widths[h + 1];
    a.widths[h + 1] = h == shape.stage ? std::max<std::int64_t>(std::min(min_width, n), neurons_for(share, n))
                                       : head_units(full, h, shape.head_fraction, min_width);
  }
  a.frozen = static_cast<std::int64_t>(shape.stage);
  a.frozen_codec = shape.frozen_codec;
  return a;
}

double capacity_for_stage(const mlp_arch& full, const stage_shape& shape, std::int64_t batch, bool momentum, codec_kind codec,
                          std::size_t budget_bytes, std::int64_t min_width, bool clip) {
  return largest_fitting(
      [&](double f) {
        const mlp_arch a = stage_arch(full, shape, f, min_width);
        return bytes_needed(a, batch, momentum, codec) + beside_arena(a, 0, clip);
      },
      budget_bytes);
}

round_plan make_full_plan(const mlp_arch& full, std::size_t devices) {
  round_plan plan;
  plan.groups = 1;
  plan.device_group.assign(devices, 0);
  plan.members.resize(full.hidden_layers());
  for (std::size_t h = 0; h < full.hidden_layers(); ++h) {
    plan.members[h].resize(1);
    plan.members[h][0].resize(sz(full.widths[h + 1]));
    std::iota(plan.members[h][0].begin(), plan.members[h][0].end(), 0);
  }
  return plan;
}

std::size_t default_group_count(const mlp_arch& full, std::size_t devices, std::int64_t min_width) noexcept {
  std::size_t s = std::max<std::size_t>(devices, 1);
  const std::int64_t mw = std::max<std::int64_t>(min_width, 1);
  for (std::size_t h = 0; h < full.hidden_layers(); ++h)
    s = std::min(s, std::max<std::size_t>(1, sz(full.widths[h + 1] / mw)));
  return s;
}

subnet make_subnet(const mlp_arch& full, compensation_kind compensation, const round_plan& plan, std::size_t group) {
  TESSERA_ASSERT(group < plan.groups);
  TESSERA_ASSERT(plan.members.size() == full.hidden_layers());
  subnet sub;
  sub.arch.task = full.task;
  sub.arch.layer_norm = full.layer_norm;
  sub.arch.input = full.input;
  sub.arch.layers = full.layers;  // the same layers, narrower (widths)
  sub.arch.widths.push_back(full.widths.front());
  for (std::size_t h = 0; h < full.hidden_layers(); ++h) {
    sub.neurons.push_back(plan.members[h][group]);
    sub.arch.widths.push_back(static_cast<std::int64_t>(sub.neurons.back().size()));
  }
  sub.arch.widths.push_back(full.outputs());
  sub.arch.frozen = static_cast<std::int64_t>(plan.frozen);
  sub.arch.frozen_codec = plan.frozen_codec;
  const bool scaled = compensation == compensation_kind::scale || compensation == compensation_kind::layer_norm_scale;
  sub.arch.input_scale.resize(full.layer_count());
  for (std::size_t i = 0; i < full.layer_count(); ++i) {
    // Layer i+1 reads hidden layer i; the subnet sees |G_i| of its n_i neurons (inverted dropout).
    const float ratio = i == 0 ? 1.0f : static_cast<float>(full.widths[i]) / static_cast<float>(sub.arch.widths[i]);
    sub.arch.input_scale[i] = full.input_scale[i] * (scaled ? ratio : 1.0f);
  }
  return sub;
}

void gather(const mlp_arch& full, const subnet& sub, std::span<const float> full_params, std::span<float> sub_params) {
  TESSERA_ASSERT(full_params.size() == param_count(full));
  TESSERA_ASSERT(sub_params.size() == param_count(sub.arch));
  for_each_param(full, sub, [&](std::size_t s, std::size_t f) { sub_params[s] = full_params[f]; });
}

void scatter(const mlp_arch& full, const subnet& sub, std::span<const float> sub_params, std::span<float> full_params) {
  TESSERA_ASSERT(full_params.size() == param_count(full));
  TESSERA_ASSERT(sub_params.size() == param_count(sub.arch));
  for_each_param(full, sub, [&](std::size_t s, std::size_t f) { full_params[f] = sub_params[s]; }, trained_from(sub));
}

void scatter_add(const mlp_arch& full, const subnet& sub, std::span<const std::int64_t> sub_values, std::span<std::int64_t> full_values) {
  TESSERA_ASSERT(full_values.size() == param_count(full));
  TESSERA_ASSERT(sub_values.size() == param_count(sub.arch));
  for_each_param(full, sub, [&](std::size_t s, std::size_t f) { full_values[f] += sub_values[s]; }, trained_from(sub));
}

aggregator::aggregator(const mlp_arch& full, aggregate_kind kind, double trim)
    : full_(full), kind_(kind), trim_(trim), sum_(param_count(full), 0.0), weight_(param_count(full), 0.0) {
  TESSERA_ASSERT(trim >= 0 && trim < 0.5);
}

void aggregator::reset() {
  std::fill(sum_.begin(), sum_.end(), 0.0);
  std::fill(weight_.begin(), weight_.end(), 0.0);
  reports_.clear();
}

void aggregator::add(const subnet& sub, std::span<const float> sub_params, double examples) {
  TESSERA_ASSERT(examples > 0);
  TESSERA_ASSERT(sub_params.size() == param_count(sub.arch));
  for_each_param(
      full_, sub,
      [&](std::size_t s, std::size_t f) {
        sum_[f] += examples * static_cast<double>(sub_params[s]);
        weight_[f] += examples;
      },
      trained_from(sub));
  if (kind_ != aggregate_kind::mean) reports_.push_back({sub, std::vector<float>(sub_params.begin(), sub_params.end())});
}

std::size_t aggregator::finish(std::span<float> full_params) const {
  TESSERA_ASSERT(full_params.size() == sum_.size());
  std::size_t touched = 0;
  for (std::size_t i = 0; i < sum_.size(); ++i) {
    if (weight_[i] > 0) {
      full_params[i] = static_cast<float>(sum_[i] / weight_[i]);
      ++touched;
    }
  }
  if (kind_ != aggregate_kind::mean) finish_robust(full_params);
  return touched;
}

void aggregator::finish_robust(std::span<float> full_params) const {
  if (reports_.size() < k_robust_min_reports) return;  // no parameter has enough reports
  // Each parameter's reports side by side (counts, then offsets, then the values), in report order.
  const std::size_t n = sum_.size();
  std::vector<std::uint32_t> count(n, 0);
  for (const auto& r : reports_) for_each_param(full_, r.sub, [&](std::size_t, std::size_t f) { ++count[f]; }, trained_from(r.sub));
  std::vector<std::uint64_t> start(n + 1, 0);
  for (std::size_t i = 0; i < n; ++i) start[i + 1] = start[i] + count[i];
  std::vector<float> values(static_cast<std::size_t>(start[n]));
  std::vector<std::uint64_t> next(start.begin(), start.end() - 1);
  for (const auto& r : reports_)
    for_each_param(full_, r.sub, [&](std::size_t s, std::size_t f) { values[static_cast<std::size_t>(next[f]++)] = r.params[s]; },
                   trained_from(r.sub));
  for (std::size_t i = 0; i < n; ++i) {
    if (count[i] < k_robust_min_reports) continue;  // the weighted mean finish() wrote stands
    const std::span<float> mine(values.data() + start[i], count[i]);
    full_params[i] = static_cast<float>(robust_value(mine, kind_, trim_));
  }
}

double robust_value(std::span<float> values, aggregate_kind kind, double trim) noexcept {
  TESSERA_ASSERT(!values.empty());
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  if (kind == aggregate_kind::median)
    return n % 2 == 1 ? static_cast<double>(values[n / 2])
                      : 0.5 * (static_cast<double>(values[n / 2 - 1]) + static_cast<double>(values[n / 2]));
  const auto drop = static_cast<std::size_t>(std::floor(trim * static_cast<double>(n)));
  double sum = 0;
  for (std::size_t i = drop; i < n - drop; ++i) sum += static_cast<double>(values[i]);
  return sum / static_cast<double>(n - 2 * drop);
}

}  // namespace tessera::core
