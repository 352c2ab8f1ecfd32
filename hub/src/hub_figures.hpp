// Internal: what the hub counts for its operator: counters since this process started, duration
// histograms, the last figures, and the per-round series /api/rounds serves. The sessions and the
// round driver add to it; the operator's documents (operator_documents.hpp, hub_metrics.hpp) read it.
#pragma once

#include <chrono>
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/hub/prometheus.hpp"
#include "tessera/rounds/metrics.hpp"
#include "turned_away.hpp"

namespace tessera::hub {

struct hub_figures {
  // The series kept for /api/rounds: one entry per round, at most this many (the oldest go first).
  static constexpr std::size_t k_max_rounds = 100'000;

  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::int64_t started_unix = static_cast<std::int64_t>(std::time(nullptr));
  // Seconds: a round from planning to checkpoint; a subnet's download from ASSIGN to its last ACK; an
  // upload from its UPDATE to its last byte.
  prom::histogram round_seconds{{0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}};
  prom::histogram download_seconds{{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}};
  prom::histogram upload_seconds{{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}};
  prom::labelled_counter rejections;           // updates, by the hub's error code
  prom::labelled_counter refusals;             // assignments devices refused, by their code (peer text: capped)
  prom::labelled_counter connections_refused;  // before a HELLO: TLS failures, timeouts, floods, by error code
  prom::labelled_counter http_requests;        // by status code
  double updates_accepted = 0, stragglers = 0;
  struct {
    double sent = 0, received = 0, resent = 0;
  } bytes;  // blobs: subnets, uploads, models to evaluate
  double rounds_recorded = 0, rounds_untrained = 0;
  std::optional<double> train_loss, test_accuracy, test_loss, fed_accuracy, fed_loss, epsilon;
  std::optional<double> epsilon_hub;  // with the devices' noise: ε against the hub
  std::vector<nlohmann::json> rounds;  // round_metrics::to_json(), in round order
  turned_away_list turned_away;        // the devices and certificates refused lately, and why

  // A recorded round: its figures join the counters and the series.
  void observe_round(const rounds::round_metrics& m);
  // A resumed run shows its earlier rounds too: rounds 1..resumed_from from the metrics file (rounds
  // after the checkpoint, written by a run that crashed before checkpointing them, are left out).
  void load_round_series(const std::string& metrics_path, std::int64_t resumed_from);
};

}  // namespace tessera::hub
