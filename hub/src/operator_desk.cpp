#include "operator_desk.hpp"

#include <ctime>

#include "hub_metrics.hpp"
#include "operator_documents.hpp"
#include "tessera/hub/error.hpp"

namespace tessera::hub {

using core::log_level;

operator_desk::operator_desk(boost::asio::any_io_executor hub, const hub_context& ctx, round_driver& rounds, device_registry& devices,
                             revocations& revoked, hub_figures& figures, std::function<void()> close_revoked)
    : hub_(std::move(hub)),
      ctx_(ctx),
      rounds_(rounds),
      devices_(devices),
      revoked_(revoked),
      figures_(figures),
      close_revoked_(std::move(close_revoked)) {}

core::result<void> operator_desk::start(std::shared_ptr<const net::server> agents) {
  agents_ = std::move(agents);
  const http_config& http = ctx_.config.http;
  if (!http.listen) return {};
  const core::host_port& at = *http.listen;
  const bool tls = http.tls == http_tls_kind::on || !is_loopback_address(at.host);
  endpoint_config ec{.address = at.host,
                     .port = at.port,
                     .tls = tls,
                     .max_connections = http.max_connections,
                     .timeout = std::chrono::milliseconds(static_cast<std::int64_t>(http.timeout_s * 1000.0)),
                     .max_body_bytes = 16 * 1024};
  endpoint_ = operator_endpoint::create(hub_, ec, tls ? std::optional(revoked_.tls()) : std::nullopt,
                                        [this](const http_request& r) { return serve(r); }, ctx_.log);
  TESSERA_ASSIGN_OR_RETURN(port_, endpoint_->listen());
  ctx_.say(log_level::info, std::string("operator endpoint on ") + (tls ? "https://" : "http://") + at.host + ":" + std::to_string(port_) +
                                "/ (" + (tls ? "operator certificates only" : "loopback, plain HTTP: read-only; actions need HTTPS") + ")");
  return {};
}

void operator_desk::set_tls(const crypto::tls_context& tls) {
  if (endpoint_) endpoint_->set_tls(tls);
}

void operator_desk::stop() {
  if (endpoint_) endpoint_->stop();
}

http_response operator_desk::serve(const http_request& r) {
  http_response out = route(r, *this);
  figures_.http_requests.add(std::to_string(out.status));
  return out;
}

hub_view operator_desk::view() const {
  return {.config = ctx_.config, .rounds = rounds_, .devices = devices_, .revoked = revoked_, .figures = figures_, .agents = agents_.get()};
}

std::string operator_desk::metrics() const { return metrics_document(view()); }
nlohmann::json operator_desk::status(fleet_page page) const { return status_document(view(), page); }
nlohmann::json operator_desk::rounds(std::int64_t since) const { return rounds_document(figures_, since); }

nlohmann::json operator_desk::pause(const std::string& by) {
  rounds_.pause(by);
  return hold_document(true, name_of(rounds_.phase()));
}

nlohmann::json operator_desk::resume(const std::string& by) {
  rounds_.resume(by);
  return hold_document(false, name_of(rounds_.phase()));
}

nlohmann::json operator_desk::finish(const std::string& by) {
  rounds_.finish_after_round(by);
  return finish_document(view());
}

core::result<nlohmann::json> operator_desk::revoke(const std::string& id, const std::string& by) {
  TESSERA_ASSIGN_OR_RETURN(const std::string serial, revoke_device(id, by));
  return revoke_document(id, serial);
}

core::result<std::string> operator_desk::revoke_device(const std::string& id, const std::string& by) {
  const device_entry* d = devices_.find(id);
  if (d == nullptr) return make_error(errc::unknown_device, "no device '" + id.substr(0, 80) + "' is known to this run");
  if (const operator_revocation* r = revoked_.by_operator(id)) return r->serial;
  const std::string serial = d->session ? d->session->peer_serial() : d->serial;
  revoked_.add_by_operator(id, {.serial = serial, .by = by, .unix_time = static_cast<std::int64_t>(std::time(nullptr))});
  ctx_.say(log_level::warning, "operator " + by + " revoked device " + id + (serial.empty() ? "" : " (certificate serial " + serial + ")"));
  close_revoked_();
  return serial;
}

}  // namespace tessera::hub
