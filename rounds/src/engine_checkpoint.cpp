// The engine's state in and out of a checkpoint (checkpoint.hpp): save after a closed round, restore
// before the first one. The hub and tessera-sim both resume through restore.
#include "tessera/rounds/checkpoint.hpp"
#include "tessera/rounds/engine.hpp"
#include "tessera/rounds/error.hpp"

namespace tessera::rounds {

checkpoint engine::save(std::span<const device_record> registry) const {
  TESSERA_ASSERT(!in_round_);
  return {.round = completed_,
          .plan_seed = plan_seed_,
          .seed = config_.seed,
          .strategy = std::string(to_string(config_.strategy)),
          .spec = config_.model,
          .params = params_,
          .registry = {registry.begin(), registry.end()},
          .stopping = stopping_,
          .normalization = *normalization_,
          .statistics = statistics_,
          .privacy = private_rounds() ? std::optional<core::rdp_accountant>(privacy()) : std::nullopt,
          .privacy_hub = privacy_against_hub(),
          .dp_clip = private_rounds() && config_.dp.adaptive_clip ? dp_clip() : 0.0,
          .server_optimizer = server_opt_.stateful() ? std::optional<core::server_optimizer_state>(server_opt_.state()) : std::nullopt};
}

core::result<void> engine::restore(checkpoint c) {
  TESSERA_ASSERT(!in_round_ && completed_ == 0);
  if (c.seed != config_.seed || c.strategy != to_string(config_.strategy))
    return make_error(errc::checkpoint_mismatch, "written by a run with seed " + std::to_string(c.seed) + " and strategy " + c.strategy +
                                                     "; the configuration has seed " + std::to_string(config_.seed) + " and strategy " +
                                                     std::string(to_string(config_.strategy)));
  if (c.params.size() != params_.size())
    return make_error(errc::checkpoint_mismatch, "holds " + std::to_string(c.params.size()) + " parameters; the model has " +
                                                     std::to_string(params_.size()));
  if (c.round < 0) return make_error(errc::checkpoint_mismatch, "holds a negative round count");
  if (private_rounds() && c.round > 0 && !c.privacy)
    return make_error(errc::checkpoint_mismatch, "written by a run without differential privacy: its " + std::to_string(c.round) +
                                                     " rounds were not accounted for");
  if (privacy_against_hub() && c.round > 0 && !c.privacy_hub)
    return make_error(errc::checkpoint_mismatch, "holds no accountant against the hub (written by a run without the devices' noise, "
                                                 "or before it was kept): the ε its " + std::to_string(c.round) +
                                                     " rounds spent against the hub is unknown");
  params_ = std::move(c.params);
  completed_ = c.round;
  stopping_ = c.stopping;
  plan_seed_ = c.plan_seed;
  if (c.privacy) restore_privacy(std::move(*c.privacy), c.dp_clip, std::move(c.privacy_hub));
  server_state_pending_ = completed_ > 0 && server_opt_.stateful();
  TESSERA_TRY(restore_server_optimizer(std::move(c.server_optimizer)));
  if (!c.normalization.empty()) TESSERA_TRY(set_normalization(std::move(c.normalization), std::move(c.statistics)));
  return {};
}

}  // namespace tessera::rounds
