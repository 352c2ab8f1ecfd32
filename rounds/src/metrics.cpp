#include "tessera/rounds/metrics.hpp"

#include <cmath>

#include <algorithm>
#include <cstdio>

#include "tessera/rounds/natural_order.hpp"

namespace tessera::rounds {
namespace {

constexpr std::string_view k_withheld[] = {"train_loss", "examples", "update_norm_max", "updates_bounded",
                                           "dp_sampled", "dp_clipped", "fed_examples", "fed_loss", "fed_accuracy",
                                           "fed_accuracy_min", "fed_accuracy_median", "fed_accuracy_max"};

nlohmann::json or_null(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

}  // namespace

std::span<const std::string_view> withheld_figures() noexcept { return k_withheld; }

// The devices' losses, example counts, change norms, clipped counts and scores: each is an exact
// function of a few devices' data, which no accountant counts. The count of sampled devices goes too:
// under Poisson sampling it moves by one with a device's presence.
void round_metrics::withhold_exact() {
  exact_withheld = true;
  train_loss.reset();
  examples = 0;
  update_norm_max.reset();
  updates_bounded.reset();
  dp.sampled.reset();
  dp.clipped.reset();
  const auto devices_scored = fed.devices;
  const auto bytes = fed.bytes_down;
  fed = {};
  fed.devices = devices_scored;
  fed.bytes_down = bytes;
}

nlohmann::json round_metrics::to_json() const {
  nlohmann::json j;
  j["round"] = round;
  j["strategy"] = strategy;
  j["devices"] = devices;
  if (ready) j["ready"] = *ready;
  j["groups"] = groups;
  j["bytes_down"] = bytes_down;
  j["bytes_up"] = bytes_up;
  if (!exact_withheld) {
    j["train_loss"] = or_null(train_loss);
    j["examples"] = examples;
  }
  j["test_accuracy"] = or_null(test_accuracy);
  j["test_loss"] = or_null(test_loss);
  j["lr"] = learning_rate;
  j["seconds"] = seconds;
  j["plan_seed"] = plan_seed;
  if (stragglers) j["stragglers"] = *stragglers;
  if (refused) j["refused"] = *refused;
  if (rejected) j["rejected"] = *rejected;
  if (resent_bytes) j["resent_bytes"] = *resent_bytes;
  if (update_norm_max) j["update_norm_max"] = *update_norm_max;
  if (updates_bounded) j["updates_bounded"] = *updates_bounded;
  j["secure_aggregation"] = secagg.dropped.has_value();
  if (secagg.dropped) {
    j["secagg_dropped"] = *secagg.dropped;
    j["secagg_withheld"] = secagg.withheld.value_or(0);
  }
  if (dp.epsilon) {
    j["epsilon"] = std::isfinite(*dp.epsilon) ? nlohmann::json(*dp.epsilon) : nlohmann::json(nullptr);
    if (dp.epsilon_hub) j["epsilon_hub"] = std::isfinite(*dp.epsilon_hub) ? nlohmann::json(*dp.epsilon_hub) : nlohmann::json(nullptr);
    j["dp_noise"] = dp.noise;
    if (dp.sampled) j["dp_sampled"] = *dp.sampled;
    if (dp.clipped) j["dp_clipped"] = *dp.clipped;
    j["dp_clip"] = dp.clip.value_or(0);
  }
  if (fed.devices) {
    j["fed_devices"] = *fed.devices;
    if (!exact_withheld) {
      j["fed_examples"] = fed.examples.value_or(0);
      j["fed_loss"] = or_null(fed.loss);
      j["fed_accuracy"] = or_null(fed.accuracy);
      j["fed_accuracy_min"] = or_null(fed.accuracy_min);
      j["fed_accuracy_median"] = or_null(fed.accuracy_median);
      j["fed_accuracy_max"] = or_null(fed.accuracy_max);
    }
    j["fed_bytes_down"] = fed.bytes_down.value_or(0);
  }
  if (exact_withheld) {
    nlohmann::json names = nlohmann::json::array();
    for (const std::string_view n : k_withheld) names.push_back(n);
    j["withheld"] = std::move(names);
  }
  return j;
}

std::string round_metrics::to_line() const {
  char buf[256];
  const std::string acc = test_accuracy ? std::to_string(*test_accuracy * 100.0).substr(0, 5) + "%" : "  -  ";
  char loss[32] = "   -  ";
  if (train_loss) std::snprintf(loss, sizeof loss, "%.4f", *train_loss);
  std::snprintf(buf, sizeof buf, "round %5lld  %-7s devices %3zu  down %9.2f MB  up %9.2f MB  loss %s  test %s  lr %.4g  %.2fs",
                static_cast<long long>(round), strategy.c_str(), devices, static_cast<double>(bytes_down) / 1e6,
                static_cast<double>(bytes_up) / 1e6, loss, acc.c_str(), learning_rate, seconds);
  std::string line = buf;
  if (ready) {
    std::snprintf(buf, sizeof buf, "  drawn from %zu ready", *ready);
    line += buf;
  }
  if (fed.devices && exact_withheld) {
    std::snprintf(buf, sizeof buf, "  fed scored on %zu device%s (withheld)", *fed.devices, *fed.devices == 1 ? "" : "s");
    line += buf;
  } else if (fed.devices && fed.accuracy && fed.accuracy_min) {
    std::snprintf(buf, sizeof buf, "  fed %.2f%% on %zu device%s (%.1f-%.1f%%)", *fed.accuracy * 100.0, *fed.devices,
                  *fed.devices == 1 ? "" : "s", *fed.accuracy_min * 100.0, fed.accuracy_max.value_or(0) * 100.0);
    line += buf;
  } else if (fed.devices && fed.accuracy) {  // a masked sum: no device's own accuracy
    std::snprintf(buf, sizeof buf, "  fed %.2f%% on %zu device%s (masked sum)", *fed.accuracy * 100.0, *fed.devices, *fed.devices == 1 ? "" : "s");
    line += buf;
  } else if (fed.devices && fed.loss) {
    std::snprintf(buf, sizeof buf, "  fed loss %.4f on %zu device%s", *fed.loss, *fed.devices, *fed.devices == 1 ? "" : "s");
    line += buf;
  }
  if (secagg.dropped && (*secagg.dropped > 0 || secagg.withheld.value_or(0) > 0)) {
    std::snprintf(buf, sizeof buf, "  secagg dropped %zu withheld %zu", *secagg.dropped, secagg.withheld.value_or(0));
    line += buf;
  }
  if (dp.epsilon) {
    if (dp.epsilon_hub) std::snprintf(buf, sizeof buf, "  ε %.3f (hub %.3f)", *dp.epsilon, *dp.epsilon_hub);
    else std::snprintf(buf, sizeof buf, "  ε %.3f", *dp.epsilon);
    line += buf;
    if (dp.sampled) {
      std::snprintf(buf, sizeof buf, "  sampled %zu clipped %zu", *dp.sampled, dp.clipped.value_or(0));
      line += buf;
    }
  }
  if (stragglers || refused || rejected) {
    std::snprintf(buf, sizeof buf, "  stragglers %zu  refused %zu  rejected %zu", stragglers.value_or(0),
                  refused.value_or(0), rejected.value_or(0));
    line += buf;
  }
  return line;
}

void federated_scores::add(device_score s) {
  if (s.examples <= 0) return;
  scores_.push_back(std::move(s));
}

void federated_scores::add_sum(std::size_t devices, const device_score& total) {
  if (devices == 0 || total.examples <= 0) return;
  scores_ = {total};
  sum_devices_ = devices;
}

void federated_scores::fill(round_metrics& m, bool classification) const {
  if (scores_.empty()) return;
  if (sum_devices_ > 0) {  // one released sum: the fleet's figures, no device's own
    const device_score& s = scores_.front();
    m.fed.devices = sum_devices_;
    m.fed.examples = s.examples;
    m.fed.loss = s.loss_sum / static_cast<double>(s.examples);
    if (classification) m.fed.accuracy = static_cast<double>(s.correct) / static_cast<double>(s.examples);
    return;
  }
  std::vector<const device_score*> order;
  for (const auto& s : scores_) order.push_back(&s);
  std::sort(order.begin(), order.end(), [](const device_score* a, const device_score* b) { return natural_less(a->id, b->id); });
  std::int64_t examples = 0, correct = 0;
  double loss = 0;
  std::vector<double> accuracies;
  for (const device_score* s : order) {
    examples += s->examples;
    correct += s->correct;
    loss += s->loss_sum;
    accuracies.push_back(static_cast<double>(s->correct) / static_cast<double>(s->examples));
  }
  m.fed.devices = order.size();
  m.fed.examples = examples;
  m.fed.loss = loss / static_cast<double>(examples);
  if (!classification) return;
  m.fed.accuracy = static_cast<double>(correct) / static_cast<double>(examples);
  std::sort(accuracies.begin(), accuracies.end());
  const std::size_t n = accuracies.size();
  m.fed.accuracy_min = accuracies.front();
  m.fed.accuracy_max = accuracies.back();
  m.fed.accuracy_median = n % 2 == 1 ? accuracies[n / 2] : 0.5 * (accuracies[n / 2 - 1] + accuracies[n / 2]);
}

}  // namespace tessera::rounds
