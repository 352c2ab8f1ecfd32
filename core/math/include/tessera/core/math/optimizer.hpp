// tessera/core/math/optimizer.hpp — SGD with momentum and weight decay, and learning-rate schedules.
//
// Semantics match torch.optim.SGD (dampening 0, no Nesterov): g ← g + λ·w;  v ← μ·v + g;  w ← w − η·v.
// Velocity starts at zero each round, since a subnet is new each round. (Nesterov momentum is not
// offered: it needs the gradient apart from the velocity, and a device's arena holds only the velocity,
// into which the backward pass accumulates.)
//
//   core::sgd_options opt{.learning_rate = 0.05f, .momentum = 0.9f, .weight_decay = 1e-4f};
//   core::sgd_step(opt, params, grads, velocity);       // spans of equal length, no allocation
// (network::train_step fuses the update into the backward pass; see sgd_apply_prepared.)
//   float lr = core::learning_rate_at(schedule, round);  // per-round schedule
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "tessera/core/base/error.hpp"
#include "tessera/core/base/names.hpp"

namespace tessera::core {

struct sgd_options {
  float learning_rate = 0.05f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
};

// One in-place update of params and velocity from grads. All spans have the same length, except that
// velocity may be empty when momentum is 0 (plain SGD needs no state).
void sgd_step(const sgd_options& options, std::span<float> params, std::span<const float> grads,
              std::span<float> velocity) noexcept;

// The same update split for accumulating gradients straight into the velocity. A step then is:
// velocity holds μ·v + λ·w ("prepared"); the backward pass adds g to it; sgd_apply_prepared does
// w ← w − η·v and prepares the next step, v ← μ·v + λ·w. Start a run with sgd_prepare_start.
void sgd_apply_prepared(const sgd_options& options, std::span<float> params, std::span<float> velocity) noexcept;
void sgd_prepare_start(const sgd_options& options, std::span<const float> params, std::span<float> velocity) noexcept;

// Per-round learning rate: constant, step decay (× gamma every `step_rounds`), or cosine from `base`
// down to `base·final_fraction` over `total_rounds`, each after `warmup_rounds` of linear warm-up.
enum class schedule_kind { constant, step, cosine };
struct lr_schedule {
  schedule_kind kind = schedule_kind::constant;
  float base = 0.05f;
  std::int64_t warmup_rounds = 0;
  std::int64_t step_rounds = 10;   // step: decay period
  float gamma = 0.5f;              // step: decay factor
  std::int64_t total_rounds = 1;   // cosine: length of the decay
  float final_fraction = 0.0f;     // cosine: where it ends, as a fraction of base
};
[[nodiscard]] float learning_rate_at(const lr_schedule& schedule, std::int64_t round) noexcept;
inline constexpr auto k_schedule_names = names_in_order<schedule_kind>({"constant", "step", "cosine"});
[[nodiscard]] inline std::string_view to_string(schedule_kind k) noexcept { return k_schedule_names.name(k); }

}  // namespace tessera::core
