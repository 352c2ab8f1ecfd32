// tessera/rounds/recorder.hpp — where a run's rounds go: checkpoint, metrics line, progress, model file.
//
// Both drivers of the engine (tessera-hub and tessera-sim) hand every closed round to one recorder,
// which, in this order:
//   1. writes the checkpoint, when the run keeps one (a failure here ends the run: a round that cannot
//      be made durable is not reported as done);
//   2. stamps the round's seconds, from the round's start (planning) to here;
//   3. appends the round's JSON line to the metrics file (a failed write is logged, the run goes on);
//   4. calls the progress callback (the command prints the line).
// finish() writes the model as safetensors when the run names an output file.
//
//   TESSERA_ASSIGN_OR_RETURN(auto rec, rounds::recorder::open(config, {.checkpoint = dir / "hub.ckpt"}, log));
//   rec.on_round([](const rounds::round_metrics& m) { std::puts(m.to_line().c_str()); });
//   TESSERA_TRY(rec.record(engine, metrics, round_started, registry));
//   TESSERA_TRY(rec.finish(engine));
#pragma once

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <span>

#include "tessera/core/config/log.hpp"
#include "tessera/crypto/seal.hpp"
#include "tessera/rounds/checkpoint.hpp"
#include "tessera/rounds/engine.hpp"

namespace tessera::rounds {

struct recorder_settings {
  std::filesystem::path checkpoint;               // empty: no checkpoints
  std::optional<crypto::sealing_key> seal_key;    // checkpoints sealed with AES-256-GCM
};

class recorder {
 public:
  using clock = std::chrono::steady_clock;

  // Opens the metrics file (config.metrics_path, appended to) so a path that cannot be written fails
  // before the first round rather than after it.
  [[nodiscard]] static core::result<recorder> open(const run_config& config, recorder_settings settings, core::log_sink log);

  void on_round(std::function<void(const round_metrics&)> f) { on_round_ = std::move(f); }
  [[nodiscard]] const recorder_settings& settings() const noexcept { return settings_; }

  // Records the round the engine just closed (and stamps m.seconds). `registry`: the devices known to
  // the run (checkpointed).
  [[nodiscard]] core::result<void> record(const engine& e, round_metrics& m, clock::time_point round_started,
                                          std::span<const device_record> registry);
  // Only the checkpoint (when the run keeps one): the state before round 1 once the fleet's statistics
  // are in, so a restarted run does not ask for them again.
  [[nodiscard]] core::result<void> save_state(const engine& e, std::span<const device_record> registry);
  // Only the privacy ledger (privacy_ledger.hpp; a private run that keeps a checkpoint): what the round
  // just closed spent, written as soon as its release exists and before anything carries it out (the
  // model to evaluating devices), so that a crash before the checkpoint cannot forget it.
  [[nodiscard]] core::result<void> record_privacy(const engine& e);
  // The run is over: writes the model (config.output_path), if named.
  [[nodiscard]] core::result<void> finish(const engine& e);

 private:
  recorder(const run_config& config, recorder_settings settings, core::log_sink log);

  std::string metrics_path_;
  std::string output_path_;
  recorder_settings settings_;
  bool saved_here_ = false;  // the checkpoint file is one this recorder wrote: no need to read it back
  std::optional<std::int64_t> ledger_after_;  // the round the ledger was last written after (the hub writes it at close)
  core::log_sink log_;
  std::unique_ptr<std::ofstream> metrics_;
  std::function<void(const round_metrics&)> on_round_;
};

}  // namespace tessera::rounds
