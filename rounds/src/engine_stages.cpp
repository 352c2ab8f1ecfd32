// Successive layer training (Pfeiffer, Khalili, Henkel, NeurIPS 2023) in the engine: which stage a
// round is in, what share of the stage's layer a device's budget holds, and the stage's plan. Each
// stage is a hidden layer: the layers below it travel whole and frozen (held for the forward pass
// only: no gradient, no optimizer state, not in the update), the hidden layers above it as a head of
// their first slt.head_fraction units, trained by every device. When the budgets cannot hold the
// stage's layer whole, it is cut into groups as IST cuts a layer.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "tessera/core/base/seeds.hpp"
#include "tessera/core/math/codec.hpp"
#include "tessera/rounds/engine.hpp"
#include "tessera/rounds/error.hpp"

namespace tessera::rounds {
namespace {

std::string fraction_text(double f) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", f);
  return text;
}

}  // namespace

core::stage_shape engine::stage() const noexcept {
  return shape_of(config_.slt_stage(completed_));
}

core::stage_shape engine::shape_of(std::size_t stage) const noexcept {
  return {.stage = stage, .head_fraction = config_.slt.head_fraction, .frozen_codec = config_.slt.frozen_codec};
}

core::result<double> engine::stage_capacity(const device_offer& offer, const core::stage_shape& stage_of) const {
  if (offer.capacity > 0) return std::min(offer.capacity, 1.0);
  core::stage_shape shape = stage_of;
  shape.frozen_codec = frozen_codec_for(offer);
  const bool momentum = config_.momentum != 0.0f;
  const core::codec_kind codec = codec_for(offer);
  const double c = core::capacity_for_stage(full_, shape, config_.memory_rows(), momentum, codec, static_cast<std::size_t>(offer.budget_bytes),
                                            config_.min_width, aggregation_->clips());
  if (c > 0) return c;
  const core::mlp_arch narrow = core::stage_arch(full_, shape, 0.0, config_.min_width);
  std::string parts = shape.stage > 0 ? "the layers below it frozen, " : "";
  parts += "min_width " + std::to_string(config_.min_width) + " of it";
  if (shape.stage + 1 < full_.hidden_layers()) parts += ", the head at " + fraction_text(config_.slt.head_fraction);
  return core::make_error(core::errc::over_budget,
                          "stage " + std::to_string(shape.stage + 1) + " of " + std::to_string(full_.hidden_layers()) +
                              " (successive layer training) needs " +
                              core::mib_text(core::bytes_needed(narrow, config_.memory_rows(), momentum, codec) + beside_arena(narrow)) +
                              " for its narrowest subnet (" + parts + "); the budget is " + core::mib_text(offer.budget_bytes));
}

core::result<double> engine::admissible(const device_offer& offer) const {
  auto now = capacity(offer);
  if (now || config_.strategy != strategy_kind::slt) return now;
  for (std::size_t k = stage().stage + 1; k < full_.hidden_layers(); ++k)
    if (auto later = stage_capacity(offer, shape_of(k))) return later;
  return now;
}

core::result<void> engine::check_stages(std::span<const device_offer> offers) const {
  if (config_.strategy != strategy_kind::slt) return {};
  for (std::size_t k = config_.slt_stage(completed_); k < full_.hidden_layers(); ++k) {
    const core::stage_shape shape = shape_of(k);
    for (const device_offer& o : offers)
      if (auto c = stage_capacity(o, shape); !c) return make_error(errc::no_devices, o.id + " cannot take part in every stage: " + c.error().message);
  }
  return {};
}

core::result<core::round_plan> engine::stage_plan(std::span<const double> capacities, std::size_t group_devices) {
  const core::stage_shape shape = stage();
  if (notes_.stage_said <= shape.stage) {
    notes_.stage_said = shape.stage + 1;
    const std::int64_t n = full_.widths[shape.stage + 1];
    std::string head;
    for (std::size_t h = shape.stage + 1; h < full_.hidden_layers(); ++h)
      head += (head.empty() ? "" : ", ") + std::to_string(core::head_units(full_, h, shape.head_fraction, config_.min_width)) + " of " +
              std::to_string(full_.widths[h + 1]);
    notes_.pending.push_back("round " + std::to_string(completed_ + 1) + " trains stage " + std::to_string(shape.stage + 1) + " of " +
                             std::to_string(full_.hidden_layers()) + ": hidden layer " + std::to_string(shape.stage + 1) + " (" +
                             std::to_string(n) + " units) trains" + (shape.stage > 0 ? ", the layers below it frozen" : "") +
                             (head.empty() ? "" : ", the head above it at " + head + " units"));
  }
  // As the stage begins, the global model's frozen layers become what the devices will hold of them
  // (slt.frozen_codec): what they train on top of is then the model itself. Once per stage, also when
  // the round is planned again; a resumed run rounds the model as checkpointed before the stage, alike.
  core::mlp_arch held = full_;
  held.frozen = static_cast<std::int64_t>(shape.stage);
  held.frozen_codec = shape.frozen_codec;
  if (core::compact_frozen(held) && config_.slt_stage(completed_ - 1) != shape.stage && notes_.rounded_at != completed_) {
    if (auto rounded = core::round_frozen(held, params_); !rounded)
      return make_error(errc::bad_values, "slt.frozen_codec " + std::string(core::to_string(held.frozen_codec)) +
                                                    " cannot hold the frozen layers of stage " + std::to_string(shape.stage + 1) + ": " +
                                                    rounded.error().message);
    notes_.rounded_at = completed_;
  }
  // As few groups as cover the layer: the least capacity's inverse, rounded up (1 where every device holds it).
  const double least = *std::min_element(capacities.begin(), capacities.end());
  const auto cover = static_cast<std::size_t>(std::ceil(1.0 / least - 1e-9));
  // and no more than give each group min_width units (as IST's default count), nor than devices.
  const auto most = static_cast<std::size_t>(std::max<std::int64_t>(1, full_.widths[shape.stage + 1] / std::max<std::int64_t>(1, config_.min_width)));
  const std::size_t groups = std::min(config_.groups > 0 ? config_.groups : std::min(cover, most), group_devices);
  const auto span = static_cast<std::uint64_t>(completed_ / config_.repartition_every);
  return core::make_stage_plan(full_, capacities, groups, shape, {.min_width = config_.min_width, .cut = config_.cut, .roll = span},
                               core::plan_seed(config_.seed, span));
}

}  // namespace tessera::rounds
