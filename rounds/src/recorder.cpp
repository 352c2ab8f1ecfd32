#include "tessera/rounds/recorder.hpp"

#include <cerrno>
#include <cstring>
#include <map>
#include <optional>

#include "tessera/core/io/model_io.hpp"
#include "tessera/rounds/privacy_ledger.hpp"

namespace tessera::rounds {

recorder::recorder(const run_config& config, recorder_settings settings, core::log_sink log)
    : metrics_path_(config.metrics_path), output_path_(config.output_path), settings_(std::move(settings)), log_(std::move(log)) {}

core::result<recorder> recorder::open(const run_config& config, recorder_settings settings, core::log_sink log) {
  recorder r(config, std::move(settings), std::move(log));
  if (!r.metrics_path_.empty()) {
    r.metrics_ = std::make_unique<std::ofstream>(r.metrics_path_, std::ios::out | std::ios::app);
    if (!*r.metrics_)
      return core::make_error(core::errc::io, r.metrics_path_ + ": cannot open for writing: " + std::strerror(errno));
  }
  return r;
}

core::result<void> recorder::record(const engine& e, round_metrics& m, clock::time_point round_started,
                                    std::span<const device_record> registry) {
  TESSERA_TRY(save_state(e, registry));
  m.seconds = std::chrono::duration<double>(clock::now() - round_started).count();
  // From here on the figures leave the engine (the metrics file, the progress line, the operator's
  // endpoint): under differential privacy only what is private, unless the operator asked otherwise.
  if (!e.config().dp.publishes_exact()) m.withhold_exact();
  if (metrics_) {
    *metrics_ << m.to_json().dump() << '\n';
    metrics_->flush();
    if (!*metrics_ && log_) log_(core::log_level::error, metrics_path_ + ": cannot append the round's metrics");
  }
  if (on_round_) on_round_(m);
  return {};
}

core::result<void> recorder::save_state(const engine& e, std::span<const device_record> registry) {
  if (!settings_.checkpoint.empty()) {
    const checkpoint c = e.save(registry);
    const crypto::sealing_key* key = settings_.seal_key ? &*settings_.seal_key : nullptr;
    // The ledger first: a crash between the two leaves spending recorded that the checkpoint lacks,
    // never the reverse.
    TESSERA_TRY(record_privacy(e));
    if (auto saved = save_checkpoint(settings_.checkpoint, c, key,
                                     saved_here_ ? current_checkpoint::written_here : current_checkpoint::unchecked);
        !saved)
      return core::make_error(core::errc::io, "checkpoint after round " + std::to_string(c.round) + ": " + saved.error().message);
    saved_here_ = true;
  }
  return {};
}

core::result<void> recorder::record_privacy(const engine& e) {
  if (settings_.checkpoint.empty() || !e.private_rounds() || ledger_after_ == e.completed()) return {};
  const std::filesystem::path file = ledger_path(settings_.checkpoint);
  const crypto::sealing_key* key = settings_.seal_key ? &*settings_.seal_key : nullptr;
  privacy_ledger l{.seed = e.config().seed, .strategy = std::string(to_string(e.config().strategy)), .round = e.completed(),
                   .users = e.privacy(), .hub = e.privacy_against_hub()};
  if (auto kept = save_ledger(file, l, key); !kept)
    return core::make_error(core::errc::io, "privacy ledger after round " + std::to_string(l.round) + ": " + kept.error().message);
  ledger_after_ = e.completed();
  return {};
}

core::result<void> recorder::finish(const engine& e) {
  if (output_path_.empty()) return {};
  std::map<std::string, std::string> metadata{{"tessera.rounds", std::to_string(e.completed())},
                                               {"tessera.strategy", std::string(to_string(e.config().strategy))}};
  if (e.private_rounds()) {  // the guarantee travels with the model
    const dp_config& d = e.config().dp;
    metadata["tessera.dp.epsilon"] = std::to_string(e.epsilon());
    metadata["tessera.dp.delta"] = std::to_string(d.delta);
    nlohmann::json dp{{"epsilon", e.epsilon()}, {"delta", d.delta}, {"sample_rate", d.sample_rate},
                      {"noise_multiplier", d.noise_multiplier}, {"clip", d.clip}, {"rounds", e.completed()}};
    if (const auto against_hub = e.epsilon_hub()) {
      // The devices added the noise: the hub drew the sample, so against it nothing is amplified,
      // unless the devices drew themselves.
      dp["observer"] = d.self_sampling ? "the model's users; epsilon_hub: the hub, which did not know who drew themselves"
                                       : "the model's users; epsilon_hub: the hub, which knew who was sampled";
      dp["epsilon_hub"] = *against_hub;
      dp["noise"] = "devices";
      dp["self_sampling"] = d.self_sampling;
      dp["accountant"] = std::string("RDP of the Skellam mechanism (Agarwal, Kairouz, Liu 2021), Poisson-sampled by Zhu and Wang's bound; ") +
                         (d.self_sampling ? "sampled against the hub too (the devices drew themselves)" : "unsampled against the hub");
    } else {
      dp["observer"] = "the model's users (the hub added the noise and saw the sums without it)";
      dp["noise"] = "hub";
      dp["accountant"] = "RDP of the discrete Gaussian mechanism (Canonne, Kamath, Steinke 2020), Poisson-sampled by Zhu and Wang's bound";
    }
    if (const auto against_hub = e.epsilon_hub()) metadata["tessera.dp.epsilon_hub"] = std::to_string(*against_hub);
    metadata["tessera.dp"] = dp.dump();
  }
  TESSERA_TRY(core::save_model(output_path_, e.config().model, e.params(), metadata, e.normalization()));
  if (log_) log_(core::log_level::info, "model written to " + output_path_);
  return {};
}

}  // namespace tessera::rounds
