// The hub for its operator (hub.hpp): the endpoint's routes, what /metrics, /api/status and /api/rounds
// say, and the actions an operator certificate may take (pause, resume, finish, revoke a device).
//
//   GET  /                          the status page (one self-contained file; its script reads the API)
//   GET  /metrics                   Prometheus text format 0.0.4
//   GET  /api/status                the run and its fleet
//   GET  /api/rounds[?since=N]      the per-round series (rounds after N)
//   POST /api/pause | /api/resume | /api/finish | /api/devices/<id>/revoke     operator certificate only
#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>

#include <boost/asio/post.hpp>

#include "device_registry.hpp"
#include "hub_context.hpp"
#include "hub_figures.hpp"
#include "process_figures.hpp"
#include "revocations.hpp"
#include "round_driver.hpp"
#include "tessera/core/model_spec.hpp"
#include "tessera/hub/error.hpp"
#include "tessera/hub/hub.hpp"

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif

// hub/src/status_page.html, embedded at build time (cmake/embed_text.cmake).
extern const char k_status_page_html[];
extern const std::size_t k_status_page_html_size;

namespace tessera::hub {
namespace {

using core::log_level;
using clock_type = std::chrono::steady_clock;

http_response json_reply(unsigned status, const nlohmann::json& j) {
  // Text that came from peers is valid UTF-8 once parsed; should anything else slip in, it is replaced
  // (U+FFFD) rather than thrown out of a completion handler.
  return {.status = status,
          .content_type = "application/json",
          .body = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"};
}
http_response error_reply(unsigned status, const std::string& what) { return json_reply(status, {{"error", what}}); }

nlohmann::json optional_number(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// "since=12" from a query string; 0 when absent or not a number.
std::int64_t since_of(const std::string& query) {
  for (std::size_t at = 0; at < query.size();) {
    const auto end = std::min(query.find('&', at), query.size());
    const std::string_view kv(query.data() + at, end - at);
    if (kv.starts_with("since=")) {
      std::int64_t n = 0;
      const auto v = kv.substr(6);
      if (std::from_chars(v.data(), v.data() + v.size(), n).ec == std::errc{}) return std::max<std::int64_t>(n, 0);
    }
    at = end + 1;
  }
  return 0;
}

}  // namespace

core::result<void> hub_service::start_endpoint() {
  if (!ctx_->config.http.listen) return {};
  const core::host_port& at = *ctx_->config.http.listen;
  const bool tls = ctx_->config.http.tls == http_tls_kind::on || !is_loopback_address(at.host);
  endpoint_config ec{.address = at.host,
                     .port = at.port,
                     .tls = tls,
                     .max_connections = ctx_->config.http.max_connections,
                     .timeout = std::chrono::milliseconds(static_cast<std::int64_t>(ctx_->config.http.timeout_s * 1000.0)),
                     .max_body_bytes = 16 * 1024};
  endpoint_ = operator_endpoint::create(io_, ec, tls ? std::optional(revoked_->tls()) : std::nullopt,
                                        [this](const http_request& r) { return handle_http(r); }, ctx_->log);
  TESSERA_ASSIGN_OR_RETURN(http_port_, endpoint_->listen());
  log(log_level::info, std::string("operator endpoint on ") + (tls ? "https://" : "http://") + at.host + ":" +
                           std::to_string(http_port_) + "/ (" +
                           (tls ? "operator certificates only" : "loopback, plain HTTP: read-only; actions need HTTPS") + ")");
  return {};
}

std::string hub_service::state_name() const { return std::string(name_of(rounds_->phase())); }

// ---- what the endpoint serves ---------------------------------------------------------------------

nlohmann::json hub_service::status_json() const {
  const auto now = clock_type::now();
  nlohmann::json run{
      {"strategy", std::string(rounds::to_string(ctx_->config.strategy))},
      {"model", core::widths_text(ctx_->config.model)},
      {"rounds", ctx_->config.rounds},
      {"seed", ctx_->config.seed},
      {"state", state_name()},
      {"round", rounds_->engine().in_round() ? rounds_->engine().current_round() : rounds_->engine().completed()},
      {"completed", rounds_->engine().completed()},
      {"paused", rounds_->holds().pause},
      {"finish_requested", rounds_->holds().finish},
      {"resumed_from", rounds_->resumed_from()},
      {"failure", rounds_->failure()},
      {"min_devices", ctx_->config.min_devices},
      {"max_devices", ctx_->config.max_devices},
      {"round_deadline_s", ctx_->config.round_deadline_s},
      {"aggregate", std::string(core::k_aggregate_names.name(ctx_->config.aggregate))},
      {"secure_aggregation", ctx_->config.secure_aggregation.enabled},
      {"dp", ctx_->config.dp.enabled},
      {"epsilon", optional_number(obs_->epsilon)},
      {"epsilon_hub", optional_number(obs_->epsilon_hub)},
      {"last_test_accuracy", optional_number(obs_->test_accuracy)},
      {"last_fed_accuracy", optional_number(obs_->fed_accuracy)},
      {"last_train_loss", optional_number(obs_->train_loss)},
  };
  nlohmann::json devices = nlohmann::json::array();
  std::size_t connected = 0, training = 0;
  for (const auto& [id, d] : devices_->entries()) {
    std::string state = "idle";
    const rounds::assignment* a = rounds_->engine().in_round() ? rounds_->engine().find(id) : nullptr;
    if (a != nullptr) {
      state = std::string(rounds::to_string(a->state));
      training += rounds::is_open(a->state) ? 1 : 0;
    }
    if (const auto* ep = std::get_if<evaluating_phase>(&rounds_->phase()); ep != nullptr && ep->eval.expects(id)) state = "evaluating";
    if (!d.unfit.empty()) state = "unfit";
    if (!d.session) state = "offline";
    connected += d.session ? 1 : 0;
    if (revoked_->by_operator(id) != nullptr) state = "revoked";
    devices.push_back({
        {"id", id},
        {"connected", d.session != nullptr},
        {"state", state},
        {"budget_bytes", d.record.budget_bytes},
        {"examples", d.record.examples},
        {"validation_examples", d.validation_examples},
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
    });
  }
  return {{"hub",
           {{"version", TESSERA_VERSION},
            {"uptime_s", std::chrono::duration<double>(now - obs_->started).count()},
            {"started_unix", obs_->started_unix},
            {"now_unix", static_cast<std::int64_t>(std::time(nullptr))}}},
          {"run", std::move(run)},
          {"fleet",
           {{"registered", devices_->size()}, {"connected", connected}, {"training", training}, {"devices", std::move(devices)}}}};
}

nlohmann::json hub_service::rounds_json(std::int64_t since) const {
  // The series is in round order (a restarted hub replays its metrics file's rounds first), so the
  // rounds after `since` are its tail: a page polling with since= costs what is new, not the run.
  const auto& rows = obs_->rounds;
  const auto first = std::partition_point(rows.begin(), rows.end(), [&](const nlohmann::json& j) {
    return j.value("round", std::int64_t{0}) <= since;
  });
  nlohmann::json out = nlohmann::json::array();
  for (auto it = first; it != rows.end(); ++it) out.push_back(*it);
  return {{"rounds", std::move(out)}};
}

std::string hub_service::metrics_text() const {
  prom::exposition out;
  const std::string state = state_name();
  out.gauges("tessera_hub_info", "The hub's version and the run's strategy (always 1)",
             {{{{"version", TESSERA_VERSION}, {"strategy", std::string(rounds::to_string(ctx_->config.strategy))}}, 1}});
  std::vector<std::pair<prom::label_set, double>> states;
  for (const std::string_view s : k_phase_names) states.push_back({{{"state", std::string(s)}}, s == state ? 1.0 : 0.0});
  out.gauges("tessera_hub_state", "What the hub is doing: 1 for the current state, 0 for the others", states);
  out.gauge("tessera_hub_paused", "1 while an operator holds new rounds", rounds_->holds().pause ? 1 : 0);
  out.gauge("tessera_hub_round", "The round in progress, or the last completed one",
            static_cast<double>(rounds_->engine().in_round() ? rounds_->engine().current_round() : rounds_->engine().completed()));
  out.gauge("tessera_hub_rounds_completed", "Rounds completed by the run (checkpointed ones included after a restart)",
            static_cast<double>(rounds_->engine().completed()));
  out.gauge("tessera_hub_rounds_planned", "The rounds the run is configured for", static_cast<double>(ctx_->config.rounds));
  std::size_t connected = 0, training = 0;
  for (const auto& [id, d] : devices_->entries()) connected += d.session ? 1 : 0;
  if (rounds_->engine().in_round())
    for (const auto& a : rounds_->engine().assignments()) training += rounds::is_open(a.state) ? 1 : 0;
  out.gauge("tessera_hub_devices_registered", "Devices the run knows", static_cast<double>(devices_->size()));
  out.gauge("tessera_hub_devices_connected", "Devices with an open session after their HELLO", static_cast<double>(connected));
  out.gauge("tessera_hub_devices_training", "Devices the round in progress still waits for", static_cast<double>(training));
  if (server_) {
    out.gauge("tessera_hub_sessions", "Verified TLS sessions", static_cast<double>(server_->authenticated_count()));
    out.gauge("tessera_hub_handshakes_pending", "Connections in their TLS handshake", static_cast<double>(server_->handshake_count()));
    out.counter("tessera_hub_handshakes_evicted_total", "Pending handshakes pushed out to make room for newer ones",
                static_cast<double>(server_->evicted_count()));
  }
  if (obs_->train_loss) out.gauge("tessera_hub_train_loss", "The last round's example-weighted local training loss", *obs_->train_loss);
  if (obs_->test_accuracy)
    out.gauge("tessera_hub_test_accuracy_ratio", "Accuracy on the hub's validation set at the last evaluation (0..1)", *obs_->test_accuracy);
  if (obs_->test_loss) out.gauge("tessera_hub_test_loss", "Loss on the hub's validation set at the last evaluation", *obs_->test_loss);
  if (obs_->fed_accuracy)
    out.gauge("tessera_hub_federated_accuracy_ratio", "Accuracy on the devices' validation splits at the last evaluation (0..1)",
              *obs_->fed_accuracy);
  if (obs_->fed_loss) out.gauge("tessera_hub_federated_loss", "Loss on the devices' validation splits at the last evaluation", *obs_->fed_loss);
  if (obs_->epsilon) out.gauge("tessera_hub_dp_epsilon", "Differential privacy: epsilon spent so far at dp.delta, against the model's users", *obs_->epsilon);
  if (obs_->epsilon_hub)
    out.gauge("tessera_hub_dp_epsilon_hub", "Differential privacy with the devices' noise: epsilon spent so far at dp.delta, against the hub (no amplification by sampling)",
              *obs_->epsilon_hub);
  out.counter("tessera_hub_rounds_recorded_total", "Rounds completed by this hub process", obs_->rounds_recorded);
  out.counter("tessera_hub_updates_accepted_total", "Updates applied", obs_->updates_accepted);
  out.counter("tessera_hub_updates_rejected_total", "Updates rejected, by reason", "reason", obs_->rejections);
  out.counter("tessera_hub_assignments_refused_total", "Assignments the devices refused, by the reason they gave", "reason",
              obs_->refusals);
  out.counter("tessera_hub_stragglers_total", "Assignments whose update did not arrive by the round's deadline", obs_->stragglers);
  out.counter("tessera_hub_connections_refused_total",
              "Connections closed before their HELLO (TLS handshake failures, deadlines, floods), by reason", "reason",
              obs_->connections_refused);
  out.counter("tessera_hub_sent_bytes_total", "Blob bytes sent to devices (subnets, models to evaluate), resent ones included",
              obs_->bytes_sent);
  out.counter("tessera_hub_received_bytes_total", "Blob bytes received from devices (updates)", obs_->bytes_received);
  out.counter("tessera_hub_resent_bytes_total", "Blob bytes sent or received again after broken links", obs_->bytes_resent);
  out.histogram("tessera_hub_round_duration_seconds", "A round from planning to its checkpoint", obs_->round_seconds);
  out.histogram("tessera_hub_download_duration_seconds", "A subnet's download, from its ASSIGN to its last acknowledged byte",
                obs_->download_seconds);
  out.histogram("tessera_hub_upload_duration_seconds", "An update's upload, from its UPDATE to its last byte", obs_->upload_seconds);
  out.counter("tessera_hub_http_requests_total", "Requests to this endpoint, by status code", "code", obs_->http_requests);
  const process_figures p = read_process_figures();
  if (p.cpu_seconds) out.counter("process_cpu_seconds_total", "User and system CPU time of the hub process", *p.cpu_seconds);
  if (p.resident_bytes) out.gauge("process_resident_memory_bytes", "Resident memory of the hub process", *p.resident_bytes);
  if (p.open_fds) out.gauge("process_open_fds", "Open file descriptors of the hub process", *p.open_fds);
  out.gauge("process_start_time_seconds", "When the hub process started, seconds since the Unix epoch",
            static_cast<double>(obs_->started_unix));
  return out.text();
}

// ---- routes ---------------------------------------------------------------------------------------

http_response hub_service::handle_http(const http_request& r) {
  http_response out = [&]() -> http_response {
    const bool get = r.method == "GET" || r.method == "HEAD";
    const bool post = r.method == "POST";
    auto allow = [](const char* methods) {
      http_response x = error_reply(405, std::string("method not allowed (") + methods + ")");
      x.headers.emplace_back("Allow", methods);
      return x;
    };
    if (r.path == "/" || r.path == "/index.html") {
      if (!get) return allow("GET");
      http_response page{.status = 200, .content_type = "text/html; charset=utf-8",
                         .body = std::string(k_status_page_html, k_status_page_html_size)};
      // The page needs nothing from elsewhere, and may not load anything from elsewhere.
      page.headers.emplace_back("Content-Security-Policy",
                                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
                                "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
      return page;
    }
    if (r.path == "/metrics") {
      if (!get) return allow("GET");
      return {.status = 200, .content_type = std::string(prom::content_type), .body = metrics_text()};
    }
    if (r.path == "/api/status") return get ? json_reply(200, status_json()) : allow("GET");
    if (r.path == "/api/rounds") {
      if (!get) return allow("GET");
      return json_reply(200, rounds_json(since_of(r.query)));
    }
    const bool action = r.path == "/api/pause" || r.path == "/api/resume" || r.path == "/api/finish" ||
                        (r.path.starts_with("/api/devices/") && r.path.ends_with("/revoke"));
    if (!action) return error_reply(404, "no such resource: " + r.path);
    if (!post) return allow("POST");
    if (r.operator_name.empty())
      return error_reply(403, "actions need an operator certificate: serve the endpoint over HTTPS (http.tls on, or a "
                              "non-loopback http.listen) and connect with a certificate from tessera-pki issue-operator");
    // A browser cannot send a cross-site JSON POST without asking first (CORS preflight, which this
    // endpoint never grants): requiring the type keeps another page from acting with the operator's
    // certificate.
    if (!r.content_type.starts_with("application/json")) return error_reply(415, "actions take Content-Type: application/json");
    if (r.path == "/api/pause") {
      pause(r.operator_name);
      return json_reply(200, {{"paused", true}, {"state", state_name()}});
    }
    if (r.path == "/api/resume") {
      resume(r.operator_name);
      return json_reply(200, {{"paused", false}, {"state", state_name()}});
    }
    if (r.path == "/api/finish") {
      finish_after_round(r.operator_name);
      return json_reply(200, {{"finish_requested", true},
                              {"after_round", rounds_->engine().in_round() ? rounds_->engine().current_round() : rounds_->engine().completed()},
                              {"output", ctx_->config.output_path}});
    }
    const std::string id = r.path.substr(std::string_view("/api/devices/").size(),
                                         r.path.size() - std::string_view("/api/devices/").size() - std::string_view("/revoke").size());
    auto serial = revoke_device(id, r.operator_name);
    if (!serial) return error_reply(serial.error().code == errc::unknown_device ? 404 : 400, serial.error().message);
    nlohmann::json j{{"revoked", id}, {"serial", serial.value()}};
    if (!serial.value().empty())
      j["ca_crl"] = "to refuse this certificate everywhere the CA is trusted: tessera-pki revoke --serial " + serial.value();
    return json_reply(200, j);
  }();
  obs_->http_requests.add(std::to_string(out.status));
  if (r.method == "HEAD") out.body.clear();
  return out;
}

// ---- actions --------------------------------------------------------------------------------------

void hub_service::pause(const std::string& by) { rounds_->pause(by); }
void hub_service::resume(const std::string& by) { rounds_->resume(by); }
bool hub_service::paused() const noexcept { return rounds_->holds().pause; }
void hub_service::finish_after_round(const std::string& by) { rounds_->finish_after_round(by); }

core::result<std::string> hub_service::revoke_device(const std::string& id, const std::string& by) {
  const device_entry* d = devices_->find(id);
  if (d == nullptr) return make_error(errc::unknown_device, "no device '" + id.substr(0, 80) + "' is known to this run");
  if (const operator_revocation* r = revoked_->by_operator(id)) return r->serial;
  const std::string serial = d->session ? d->session->peer_serial() : d->serial;
  revoked_->add_by_operator(id, {.serial = serial, .by = by, .unix_time = static_cast<std::int64_t>(std::time(nullptr))});
  log(log_level::warning, "operator " + by + " revoked device " + id + (serial.empty() ? "" : " (certificate serial " + serial + ")"));
  close_revoked();
  return serial;
}

}  // namespace tessera::hub
