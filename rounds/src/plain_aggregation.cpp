// The plain kind of aggregation: updates checked one by one against what was sent, then combined.
#include "plain_aggregation.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tessera/core/math/codec.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/rounds/error.hpp"

namespace tessera::rounds {

plain_aggregation::plain_aggregation(const run_config& config, const core::mlp_arch& full)
    : aggregator_(full, config.aggregate.kind, config.aggregate.trim_fraction) {}

core::result<std::size_t> plain_aggregation::admit(const round_view&, std::vector<device_offer>& taking,
                                                   std::vector<excluded_device>&) const {
  if (taking.empty()) return make_error(errc::no_devices, "no device can take part in this round");
  return taking.size();
}

core::result<void> plain_aggregation::begin(const round_view&, const core::round_plan&, std::span<assignment>) {
  aggregator_.reset();
  update_norm_max_ = 0;
  updates_bounded_ = 0;
  return {};
}

core::result<void> plain_aggregation::receive(const round_view& v, assignment& a, std::span<const std::byte> blob) {
  std::vector<float> sent(core::param_count(a.sub.arch));
  core::gather(v.full, a.sub, v.params, sent);
  a.trained = sent;  // frozen layers (successive layer training) stay as sent: the update holds the others
  if (auto d = core::decode_update(a.sub.arch, a.codec, blob, a.trained); !d) return make_error(errc::bad_values, d.error().message);
  return bound_update(v, a, sent);
}

void plain_aggregation::fold(const round_view&, assignment& a, reached_mask& reached) {
  aggregator_.add(a.sub, a.trained, static_cast<double>(a.examples));
  reached.mark(a.sub);
}

core::result<void> plain_aggregation::finish(const round_view& v, std::span<const assignment>, std::span<float> params,
                                             reached_mask&, round_metrics& m) {
  aggregator_.finish(params);
  note_bounds(v, m);
  return {};
}

void plain_aggregation::note_bounds(const round_view& v, round_metrics& m) const {
  if (v.config.strategy == strategy_kind::central) return;
  m.update_norm_max = update_norm_max_;
  m.updates_bounded = updates_bounded_;
}

// With the shipped settings (lr 0.05, momentum 0.9) an honest device's change in a round is at most
// about half its subnet's norm and its largest value (measured over the Fashion-MNIST runs of
// examples/, FedAvg and IST; a run at four times the rate reached 6× the norm and 87× the largest value
// while diverging). The default is k·max(4, ‖sent‖) and k·max(1, max |sent|), k = 4 at an effective rate
// lr/(1 − momentum) of 0.5 and growing with it: room for honest devices, none for 1e30.
update_bounds bounds_for(const run_config& config, std::span<const float> sent, const core::sgd_options& sgd) noexcept {
  double sq = 0, largest = 0;
  for (const float x : sent) {
    sq += static_cast<double>(x) * static_cast<double>(x);
    largest = std::max(largest, static_cast<double>(std::abs(x)));
  }
  const double effective = static_cast<double>(sgd.learning_rate) / (1.0 - static_cast<double>(sgd.momentum));
  const double k = 4.0 * std::max(1.0, effective / 0.5);
  return {.norm = config.update_bounds.max_norm > 0 ? config.update_bounds.max_norm : k * std::max(4.0, std::sqrt(sq)),
          .abs = config.update_bounds.max_abs > 0 ? config.update_bounds.max_abs : k * std::max(1.0, largest)};
}

// A decoded update against what the device was sent: within the bounds, or rejected with the figures,
// or (update_bound: clip) scaled to the norm and clamped to the largest value, and counted.
core::result<void> plain_aggregation::bound_update(const round_view& v, assignment& a, std::span<const float> sent) {
  double sq = 0, largest = 0;
  for (std::size_t i = 0; i < sent.size(); ++i) {
    const double d = static_cast<double>(a.trained[i]) - static_cast<double>(sent[i]);
    sq += d * d;
    largest = std::max(largest, std::abs(d));
  }
  const double norm = std::sqrt(sq);
  // Sized by what was sent to train: frozen layers (successive layer training) neither move nor count.
  const update_bounds b = bounds_for(v.config, sent.subspan(core::trained_offset(a.sub.arch)), a.task.sgd);
  if (v.config.update_bounds.action == update_bound_kind::off || (norm <= b.norm && largest <= b.abs)) {
    update_norm_max_ = std::max(update_norm_max_, norm);
    return {};
  }
  if (v.config.update_bounds.action == update_bound_kind::reject) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "its change exceeds the bounds: L2 norm %.4g (max_update_norm %.4g), largest value %.4g (max_update_abs %.4g)",
                  norm, b.norm, largest, b.abs);
    return make_error(errc::update_out_of_bounds, buf);
  }
  const double scale = norm > b.norm ? b.norm / norm : 1.0;
  for (std::size_t i = 0; i < sent.size(); ++i) {
    const double d = std::clamp((static_cast<double>(a.trained[i]) - static_cast<double>(sent[i])) * scale, -b.abs, b.abs);
    a.trained[i] = static_cast<float>(static_cast<double>(sent[i]) + d);
  }
  ++updates_bounded_;
  update_norm_max_ = std::max(update_norm_max_, std::min(norm, b.norm));
  return {};
}

}  // namespace tessera::rounds
