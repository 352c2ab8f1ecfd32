#include "hub_figures.hpp"

#include <fstream>
#include <map>

namespace tessera::hub {

void hub_figures::observe_round(const rounds::round_metrics& m) {
  rounds_recorded += 1;
  round_seconds.observe(m.seconds);
  bytes.sent += static_cast<double>(m.bytes_down + m.fed.bytes_down.value_or(0));
  bytes.received += static_cast<double>(m.bytes_up);
  bytes.resent += static_cast<double>(m.resent_bytes.value_or(0));
  train_loss = m.train_loss;
  if (m.test_accuracy) test_accuracy = m.test_accuracy;
  if (m.test_loss) test_loss = m.test_loss;
  if (m.fed.accuracy) fed_accuracy = m.fed.accuracy;
  if (m.fed.loss) fed_loss = m.fed.loss;
  if (m.dp.epsilon) epsilon = m.dp.epsilon;
  if (m.dp.epsilon_hub) epsilon_hub = m.dp.epsilon_hub;
  if (rounds.size() >= k_max_rounds) rounds.erase(rounds.begin());
  rounds.push_back(m.to_json());
}

void hub_figures::load_round_series(const std::string& metrics_path, std::int64_t resumed_from) {
  if (resumed_from <= 0 || metrics_path.empty()) return;
  std::ifstream in(metrics_path);
  std::map<std::int64_t, nlohmann::json> by_round;
  std::string line;
  while (std::getline(in, line) && line.size() < (1 << 20)) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("round") || !j["round"].is_number_integer()) continue;
    const auto round = j["round"].get<std::int64_t>();
    if (round >= 1 && round <= resumed_from) by_round[round] = std::move(j);
  }
  const auto last = [](const nlohmann::json& j, const char* key, std::optional<double>& into) {
    if (j.contains(key) && j[key].is_number()) into = j[key].get<double>();
  };
  for (auto& [round, j] : by_round) {
    if (rounds.size() >= k_max_rounds) rounds.erase(rounds.begin());
    last(j, "test_accuracy", test_accuracy);
    last(j, "test_loss", test_loss);
    last(j, "fed_accuracy", fed_accuracy);
    last(j, "fed_loss", fed_loss);
    last(j, "epsilon", epsilon);
    last(j, "epsilon_hub", epsilon_hub);
    last(j, "train_loss", train_loss);
    rounds.push_back(std::move(j));
  }
}

}  // namespace tessera::hub
