#include "operator_documents.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <optional>
#include <utility>
#include <vector>

#include "tessera/core/math/model_spec.hpp"
#include "tessera/rounds/natural_order.hpp"

namespace tessera::hub {
namespace {

nlohmann::json optional_number(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// The round in progress, or the last completed one.
std::int64_t current_round(const rounds::engine& e) { return e.in_round() ? e.current_round() : e.completed(); }

nlohmann::json run_document(const hub_view& v) {
  const hub_config& c = v.config;
  const hub_figures& f = v.figures;
  return {
      {"strategy", std::string(rounds::to_string(c.strategy))},
      {"model", core::widths_text(c.model)},
      {"rounds", c.rounds},
      {"seed", c.seed},
      {"state", std::string(name_of(v.rounds.phase()))},
      {"round", current_round(v.rounds.engine())},
      {"completed", v.rounds.engine().completed()},
      {"paused", v.rounds.holds().pause},
      {"finish_requested", v.rounds.holds().finish},
      {"resumed_from", v.rounds.resumed_from()},
      {"failure", v.rounds.failure()},
      {"waiting_for", v.rounds.waiting_for().empty() ? nlohmann::json(nullptr) : nlohmann::json(v.rounds.waiting_for())},
      {"min_devices", c.min_devices},
      {"max_devices", c.max_devices},
      {"round_deadline_s", c.round_deadline_s},
      {"aggregate", std::string(core::k_aggregate_names.name(c.aggregate.kind))},
      {"secure_aggregation", c.secure_aggregation.enabled},
      {"dp", c.dp.enabled},
      {"epsilon", optional_number(f.epsilon)},
      {"epsilon_hub", optional_number(f.epsilon_hub)},
      {"last_test_accuracy", optional_number(f.test_accuracy)},
      {"last_fed_accuracy", optional_number(f.fed_accuracy)},
      {"last_train_loss", optional_number(f.train_loss)},
  };
}

// What a device is doing, the strongest fact first: revoked, offline, unfit, evaluating, its
// assignment's state, idle.
std::string device_state(const hub_view& v, const std::string& id, const device_entry& d, const rounds::assignment* a) {
  if (v.revoked.by_operator(id) != nullptr) return "revoked";
  if (!d.session) return "offline";
  if (!d.unfit.empty()) return "unfit";
  if (const auto* ep = std::get_if<evaluating_phase>(&v.rounds.phase()); ep != nullptr && ep->eval.expects(id)) return "evaluating";
  if (a != nullptr) return std::string(rounds::to_string(a->state));
  return "idle";
}

// `exact`: the device's example counts may be shown (not under DP, unless dp.publish_exact): they are
// its data's size, and their sum over the evaluators is the withheld fed_examples.
nlohmann::json device_document(const std::string& id, const device_entry& d, std::string state, bool exact) {
  nlohmann::json doc = {
      {"id", id},
      {"connected", d.session != nullptr},
      {"state", std::move(state)},
      {"budget_bytes", d.record.budget_bytes},
      {"subnet_params", d.subnet_params > 0 ? nlohmann::json(d.subnet_params) : nlohmann::json(nullptr)},
      {"codec", d.codec ? nlohmann::json(std::string(core::to_string(*d.codec))) : nlohmann::json(nullptr)},
      {"last_seen_unix", d.record.last_seen},
      {"rounds_done", d.record.rounds_done},
      {"rounds_missed", d.record.rounds_missed},
      {"bytes_down", d.bytes_down},
      {"bytes_up", d.bytes_up},
      {"down_bytes_per_s", optional_number(d.down_rate)},
      {"up_bytes_per_s", optional_number(d.up_rate)},
      {"unfit", d.unfit},
  };
  if (exact) {
    doc["examples"] = d.record.examples;
    doc["validation_examples"] = d.validation_examples;
  }
  return doc;
}

nlohmann::json fleet_document(const hub_view& v, fleet_page page) {
  const rounds::engine& engine = v.rounds.engine();
  std::size_t connected = 0, training = 0;
  std::vector<const std::pair<const std::string, device_entry>*> order;
  order.reserve(v.devices.size());
  for (const auto& e : v.devices.entries()) {
    const rounds::assignment* a = engine.in_round() ? engine.find(e.first) : nullptr;
    training += a != nullptr && rounds::is_open(a->state) ? 1 : 0;
    connected += e.second.session ? 1 : 0;
    order.push_back(&e);
  }
  // Only the page is sorted into place and documented.
  const std::size_t from = std::min(page.from, order.size()), to = std::min(order.size(), from + std::min(page.limit, order.size() - from));
  const auto natural = [](const auto* a, const auto* b) { return rounds::natural_less(a->first, b->first); };
  std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(from), order.end(), natural);
  std::partial_sort(order.begin() + static_cast<std::ptrdiff_t>(from), order.begin() + static_cast<std::ptrdiff_t>(to), order.end(), natural);
  nlohmann::json devices = nlohmann::json::array();
  for (std::size_t i = from; i < to; ++i) {
    const auto& [id, d] = *order[i];
    devices.push_back(device_document(id, d, device_state(v, id, d, engine.in_round() ? engine.find(id) : nullptr), v.config.dp.publishes_exact()));
  }
  return {{"registered", v.devices.size()}, {"connected", connected}, {"training", training}, {"devices_from", from},
          {"devices", std::move(devices)},   {"turned_away", v.figures.turned_away.to_json()}};
}

}  // namespace

nlohmann::json status_document(const hub_view& v, fleet_page page) {
  const auto now = std::chrono::steady_clock::now();
  return {{"hub",
           {{"version", std::string(k_hub_version)},
            {"uptime_s", std::chrono::duration<double>(now - v.figures.started).count()},
            {"started_unix", v.figures.started_unix},
            {"now_unix", static_cast<std::int64_t>(std::time(nullptr))}}},
          {"run", run_document(v)},
          {"fleet", fleet_document(v, page)}};
}

nlohmann::json rounds_document(const hub_figures& figures, std::int64_t since) {
  // A restarted hub replays its metrics file's rounds first: a page polling with since= costs what is
  // new, not the run.
  const auto& rows = figures.rounds;
  const auto first = std::partition_point(rows.begin(), rows.end(), [&](const nlohmann::json& j) {
    return j.value("round", std::int64_t{0}) <= since;
  });
  nlohmann::json out = nlohmann::json::array();
  for (auto it = first; it != rows.end(); ++it) out.push_back(*it);
  return {{"rounds", std::move(out)}};
}

nlohmann::json hold_document(bool paused, std::string_view state) { return {{"paused", paused}, {"state", std::string(state)}}; }

nlohmann::json finish_document(const hub_view& v) {
  return {{"finish_requested", true}, {"after_round", current_round(v.rounds.engine())}, {"output", v.config.output_path}};
}

nlohmann::json revoke_document(const std::string& id, const std::string& serial) {
  nlohmann::json j{{"revoked", id}, {"serial", serial}};
  if (!serial.empty()) j["ca_crl"] = "to refuse this certificate everywhere the CA is trusted: tessera-pki revoke --serial " + serial;
  return j;
}

}  // namespace tessera::hub
