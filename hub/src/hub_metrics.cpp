#include "hub_metrics.hpp"

#include <utility>
#include <vector>

#include "process_figures.hpp"
#include "tessera/hub/prometheus.hpp"

namespace tessera::hub {
namespace {

void run_families(prom::exposition& out, const hub_view& v) {
  const rounds::engine& engine = v.rounds.engine();
  out.gauges("tessera_hub_info", "The hub's version and the run's strategy (always 1)",
             {{{{"version", std::string(k_hub_version)}, {"strategy", std::string(rounds::to_string(v.config.strategy))}}, 1}});
  const std::string_view state = name_of(v.rounds.phase());
  std::vector<std::pair<prom::label_set, double>> states;
  for (const std::string_view s : k_phase_names) states.push_back({{{"state", std::string(s)}}, s == state ? 1.0 : 0.0});
  out.gauges("tessera_hub_state", "What the hub is doing: 1 for the current state, 0 for the others", states);
  out.gauge("tessera_hub_paused", "1 while an operator holds new rounds", v.rounds.holds().pause ? 1 : 0);
  out.gauge("tessera_hub_round", "The round in progress, or the last completed one",
            static_cast<double>(engine.in_round() ? engine.current_round() : engine.completed()));
  out.gauge("tessera_hub_rounds_completed", "Rounds completed by the run (checkpointed ones included after a restart)",
            static_cast<double>(engine.completed()));
  out.gauge("tessera_hub_rounds_planned", "The rounds the run is configured for", static_cast<double>(v.config.rounds));
}

void fleet_families(prom::exposition& out, const hub_view& v) {
  const rounds::engine& engine = v.rounds.engine();
  std::size_t training = 0;
  if (engine.in_round())
    for (const auto& a : engine.assignments()) training += rounds::is_open(a.state) ? 1 : 0;
  out.gauge("tessera_hub_devices_registered", "Devices the run knows", static_cast<double>(v.devices.size()));
  out.gauge("tessera_hub_devices_connected", "Devices with an open session after their HELLO", static_cast<double>(v.devices.connected_count()));
  out.gauge("tessera_hub_devices_training", "Devices the round in progress still waits for", static_cast<double>(training));
  if (v.agents != nullptr) {
    out.gauge("tessera_hub_sessions", "Verified TLS sessions", static_cast<double>(v.agents->authenticated_count()));
    out.gauge("tessera_hub_handshakes_pending", "Connections in their TLS handshake", static_cast<double>(v.agents->handshake_count()));
    out.gauge("tessera_hub_connections_silent", "Connections that have sent nothing yet (no TLS state until they do)",
              static_cast<double>(v.agents->silent_count()));
    out.counter("tessera_hub_handshakes_evicted_total", "Silent connections and pending handshakes pushed out to make room for newer ones",
                static_cast<double>(v.agents->evicted_count()));
    out.counter("tessera_hub_connections_silent_expired_total", "Silent connections closed at handshake_timeout_s",
                static_cast<double>(v.agents->silent_expired_count()));
  }
}

// The last figures, each once it exists.
void last_figure_families(prom::exposition& out, const hub_figures& f) {
  const auto gauge = [&](std::string_view name, std::string_view help, const std::optional<double>& value) {
    if (value) out.gauge(name, help, *value);
  };
  gauge("tessera_hub_train_loss", "The last round's example-weighted local training loss", f.train_loss);
  gauge("tessera_hub_test_accuracy_ratio", "Accuracy on the hub's validation set at the last evaluation (0..1)", f.test_accuracy);
  gauge("tessera_hub_test_loss", "Loss on the hub's validation set at the last evaluation", f.test_loss);
  gauge("tessera_hub_federated_accuracy_ratio", "Accuracy on the devices' validation splits at the last evaluation (0..1)", f.fed_accuracy);
  gauge("tessera_hub_federated_loss", "Loss on the devices' validation splits at the last evaluation", f.fed_loss);
  gauge("tessera_hub_dp_epsilon", "Differential privacy: epsilon spent so far at dp.delta, against the model's users", f.epsilon);
  gauge("tessera_hub_dp_epsilon_hub",
        "Differential privacy with the devices' noise: epsilon spent so far at dp.delta, against the hub (amplified by sampling only "
        "when the devices sample themselves)",
        f.epsilon_hub);
}

void counter_families(prom::exposition& out, const hub_figures& f) {
  out.counter("tessera_hub_rounds_recorded_total", "Rounds completed by this hub process", f.rounds_recorded);
  out.counter("tessera_hub_rounds_untrained_total", "Rounds no device's update reached: they did not count, and ran again",
              f.rounds_untrained);
  out.counter("tessera_hub_updates_accepted_total", "Updates applied", f.updates_accepted);
  out.counter("tessera_hub_updates_rejected_total", "Updates rejected, by reason", "reason", f.rejections);
  out.counter("tessera_hub_assignments_refused_total", "Assignments the devices refused, by the reason they gave", "reason", f.refusals);
  out.counter("tessera_hub_stragglers_total", "Assignments whose update did not arrive by the round's deadline", f.stragglers);
  out.counter("tessera_hub_connections_refused_total",
              "Connections refused: before their HELLO (TLS handshake failures, deadlines, floods), or devices turned away at or after "
              "it (revoked, duplicate, over budget), by reason",
              "reason", f.connections_refused);
  out.counter("tessera_hub_sent_bytes_total", "Blob bytes sent to devices (subnets, models to evaluate), resent ones included", f.bytes.sent);
  out.counter("tessera_hub_received_bytes_total", "Blob bytes received from devices (updates)", f.bytes.received);
  out.counter("tessera_hub_resent_bytes_total", "Blob bytes sent or received again after broken links", f.bytes.resent);
  out.histogram("tessera_hub_round_duration_seconds", "A round from planning to its checkpoint", f.round_seconds);
  out.histogram("tessera_hub_download_duration_seconds", "A subnet's download, from its ASSIGN to its last acknowledged byte",
                f.download_seconds);
  out.histogram("tessera_hub_upload_duration_seconds", "An update's upload, from its UPDATE to its last byte", f.upload_seconds);
  out.counter("tessera_hub_http_requests_total", "Requests to this endpoint, by status code", "code", f.http_requests);
}

void process_families(prom::exposition& out, const hub_figures& f) {
  const process_figures p = read_process_figures();
  if (p.cpu_seconds) out.counter("process_cpu_seconds_total", "User and system CPU time of the hub process", *p.cpu_seconds);
  if (p.resident_bytes) out.gauge("process_resident_memory_bytes", "Resident memory of the hub process", *p.resident_bytes);
  if (p.open_fds) out.gauge("process_open_fds", "Open file descriptors of the hub process", *p.open_fds);
  out.gauge("process_start_time_seconds", "When the hub process started, seconds since the Unix epoch", static_cast<double>(f.started_unix));
}

}  // namespace

std::string metrics_document(const hub_view& v) {
  prom::exposition out;
  run_families(out, v);
  fleet_families(out, v);
  last_figure_families(out, v.figures);
  counter_families(out, v.figures);
  process_families(out, v.figures);
  return out.text();
}

}  // namespace tessera::hub
