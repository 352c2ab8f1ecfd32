#include "tessera/rounds/metrics.hpp"

#include <cstdio>

namespace tessera::rounds {

nlohmann::json round_metrics::to_json() const {
  nlohmann::json j;
  j["round"] = round;
  j["strategy"] = strategy;
  j["devices"] = devices;
  j["groups"] = groups;
  j["bytes_down"] = bytes_down;
  j["bytes_up"] = bytes_up;
  j["train_loss"] = train_loss;
  j["test_accuracy"] = test_accuracy ? nlohmann::json(*test_accuracy) : nlohmann::json(nullptr);
  j["test_loss"] = test_loss ? nlohmann::json(*test_loss) : nlohmann::json(nullptr);
  j["examples"] = examples;
  j["lr"] = learning_rate;
  j["seconds"] = seconds;
  j["plan_seed"] = plan_seed;
  if (stragglers) j["stragglers"] = *stragglers;
  if (refused) j["refused"] = *refused;
  if (rejected) j["rejected"] = *rejected;
  if (resent_bytes) j["resent_bytes"] = *resent_bytes;
  return j;
}

std::string round_metrics::to_line() const {
  char buf[256];
  const std::string acc = test_accuracy ? std::to_string(*test_accuracy * 100.0).substr(0, 5) + "%" : "  -  ";
  std::snprintf(buf, sizeof buf, "round %5lld  %-7s devices %3zu  down %9.2f MB  up %9.2f MB  loss %.4f  test %s  lr %.4g  %.2fs",
                static_cast<long long>(round), strategy.c_str(), devices, static_cast<double>(bytes_down) / 1e6,
                static_cast<double>(bytes_up) / 1e6, train_loss, acc.c_str(), learning_rate, seconds);
  std::string line = buf;
  if (stragglers || refused || rejected) {
    std::snprintf(buf, sizeof buf, "  stragglers %zu  refused %zu  rejected %zu", stragglers.value_or(0),
                  refused.value_or(0), rejected.value_or(0));
    line += buf;
  }
  return line;
}

}  // namespace tessera::rounds
