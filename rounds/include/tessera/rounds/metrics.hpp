// tessera/rounds/metrics.hpp — one round's figures, as a progress line and as a JSON line.
//
// The engine fills the figures every driver shares (plan, devices, bytes, loss, evaluation); the hub
// adds what only a real fleet has (stragglers, refusals, rejections, bytes sent again after cuts) and
// the recorder stamps the round's seconds (planning to checkpoint).
//
//   std::puts(m.to_line().c_str());        // round    12  ist     devices   8  down ...  test 86.12% ...
//   metrics_file << m.to_json().dump() << '\n';
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::rounds {

struct round_metrics {
  std::int64_t round = 0;        // 1-based
  std::string strategy;
  std::size_t devices = 0;       // devices assigned this round
  std::optional<std::size_t> ready;  // the ready devices this round's cohort was drawn from (absent: no draw)
  std::size_t groups = 0;
  std::uint64_t bytes_down = 0;  // what the devices received this round, summed
  std::uint64_t bytes_up = 0;    // what they sent
  std::optional<double> train_loss;  // example-weighted mean of the accepted devices' local losses (none: nobody trained)
  std::optional<double> test_accuracy;  // classification, on rounds that evaluate
  std::optional<double> test_loss;
  std::int64_t examples = 0;     // examples processed this round by the accepted devices
  double learning_rate = 0;
  double seconds = 0;
  // A real fleet only (the hub): devices whose update did not arrive by the deadline, devices that
  // refused their assignment, updates rejected, and blob bytes sent again after broken links.
  std::optional<std::size_t> stragglers, refused, rejected;
  std::optional<std::uint64_t> resent_bytes;
  // Plain rounds: the largest L2 norm of an accepted change (trained − sent), and updates clipped into
  // max_update_norm / max_update_abs (update_bound: clip).
  std::optional<double> update_norm_max;
  std::optional<std::size_t> updates_bounded;
  std::uint64_t plan_seed = 0;
  // Secure aggregation (absent without it; secagg_dropped, ... in the metrics): assigned devices whose
  // masked input is not in the sums, and segments (groups, shared parameters) withheld for having too
  // few contributors. The values each device's clip saturated stay in its own log.
  struct secure_figures {
    std::optional<std::size_t> dropped, withheld;
  } secagg;
  // Differential privacy (absent without it; epsilon, epsilon_hub, dp_noise, ... in the metrics): ε spent
  // so far at dp.delta (the accountant, after this round) against the model's users, and with the
  // devices' noise against the hub too (which knows who was sampled: no amplification); where the noise
  // was added ("hub" or "devices"), devices sampled that took part, updates clipped, and the clip this
  // round's changes got (adaptive clipping moves it).
  struct privacy_figures {
    std::optional<double> epsilon, epsilon_hub;
    std::string noise;
    std::optional<std::size_t> sampled, clipped;
    std::optional<double> clip;
  } dp;
  // Evaluation on the devices (federated_scores): the model scored on the devices' validation splits,
  // example-weighted, and the spread of the devices' accuracies. Absent on rounds that do not evaluate.
  // In the metrics line and JSON as fed_accuracy, fed_loss, ...
  struct federated_figures {
    std::optional<double> accuracy, loss;
    std::optional<std::size_t> devices;
    std::optional<std::int64_t> examples;
    std::optional<double> accuracy_min, accuracy_median, accuracy_max;
    std::optional<std::uint64_t> bytes_down;  // the model's bytes sent to the devices for it
  } fed;
  // Under differential privacy, unless dp.publish_exact: the figures above that are exact functions of
  // the devices' data (withheld_figures) are cleared before the round is recorded, and the JSON names
  // them under "withheld". What stays is what the hub knows by running the round (who took part, the
  // bytes, the times), its own test set's scores, and the private releases (ε, the adaptive clip).
  bool exact_withheld = false;
  void withhold_exact();

  [[nodiscard]] nlohmann::json to_json() const;
  [[nodiscard]] std::string to_line() const;
};

// The figures withhold_exact clears, by their names in the JSON.
[[nodiscard]] std::span<const std::string_view> withheld_figures() noexcept;

// One device's score of the model on its validation split (an agent's EVALUATION, a simulated device).
struct device_score {
  std::string id;
  std::int64_t examples = 0;
  double loss_sum = 0;        // Σ over batches of the batch's mean loss × rows
  std::int64_t correct = 0;
};

// The fleet's figures from its devices' scores, added in natural order of the ids whatever order they
// came in: accuracy Σcorrect / Σexamples and loss Σloss_sum / Σexamples, and the minimum, median and
// maximum of the devices' own accuracies. Devices with no examples are left out.
class federated_scores {
 public:
  void add(device_score s);
  // Under secure aggregation: the devices' scores as one released sum over `devices` (no device's own
  // accuracy, so no spread); add() is not used then.
  void add_sum(std::size_t devices, const device_score& total);
  [[nodiscard]] std::size_t devices() const noexcept { return sum_devices_ > 0 ? sum_devices_ : scores_.size(); }
  // Fills m's fed_* fields (nothing when no device scored); `classification` decides the accuracies.
  void fill(round_metrics& m, bool classification) const;

 private:
  std::vector<device_score> scores_;
  std::size_t sum_devices_ = 0;
};

}  // namespace tessera::rounds
