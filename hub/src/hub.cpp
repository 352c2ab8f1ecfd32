// The hub as its parts (hub.hpp): the registry, the revocation lists, the operator's figures and the
// round driver, put together; the listener for agents, and the service's start and stop.
#include "tessera/hub/hub.hpp"

#include <random>

#include <boost/asio/strand.hpp>

#include "device_registry.hpp"
#include "hub_context.hpp"
#include "hub_figures.hpp"
#include "operator_desk.hpp"
#include "refusal_log.hpp"
#include "revocations.hpp"
#include "round_driver.hpp"
#include "tessera/net/task.hpp"

namespace tessera::hub {
namespace {

// Transfer ids start at random: a restarted hub never offers bytes of another run's download under an
// id an agent still holds.
std::uint64_t first_transfer_id() {
  std::random_device rd;
  return ((static_cast<std::uint64_t>(rd()) << 32) ^ rd()) & ~net::upload_bit & ~std::uint64_t{0xffff};
}

}  // namespace

hub_service::hub_service(boost::asio::io_context& io, const hub_config& config, core::log_sink log)
    : io_(io),
      strand_(boost::asio::make_strand(io)),
      ctx_(std::make_unique<hub_context>(hub_context{.config = config, .log = std::move(log)})),
      devices_(std::make_unique<device_registry>(first_transfer_id())),
      refused_(std::make_unique<refusal_log>()),
      figures_(std::make_unique<hub_figures>()),
      crl_timer_(strand_) {}

hub_service::~hub_service() = default;

core::result<std::unique_ptr<hub_service>> hub_service::create(boost::asio::io_context& io, const hub_config& config,
                                                               core::log_sink log) {
  std::unique_ptr<hub_service> h(new hub_service(io, config, std::move(log)));
  TESSERA_ASSIGN_OR_RETURN(revocations revoked, revocations::load(*h->ctx_));
  h->revoked_ = std::make_unique<revocations>(std::move(revoked));
  TESSERA_ASSIGN_OR_RETURN(h->rounds_, round_driver::create(h->strand_, *h->ctx_, *h->devices_, *h->figures_));
  TESSERA_TRY(h->revoked_->load_operator_list());
  h->figures_->load_round_series(config.metrics_path, h->rounds_->resumed_from());
  h->rounds_->before_round([hub = h.get()] { hub->reload_revocations(); });
  h->rounds_->on_stopped([hub = h.get()] { hub->shut_down(); });
  h->desk_ = std::make_unique<operator_desk>(h->strand_, *h->ctx_, *h->rounds_, *h->devices_, *h->revoked_, *h->figures_,
                                             [hub = h.get()] { hub->close_revoked(); });
  return h;
}

void hub_service::log(core::log_level level, const std::string& text) const { ctx_->say(level, text); }

void hub_service::on_round(std::function<void(const rounds::round_metrics&)> f) { rounds_->on_round(std::move(f)); }
bool hub_service::finished() const noexcept { return rounds_->finished(); }
const std::string& hub_service::failure() const noexcept { return rounds_->failure(); }
const rounds::engine& hub_service::engine() const noexcept { return rounds_->engine(); }
std::int64_t hub_service::resumed_from() const noexcept { return rounds_->resumed_from(); }
std::uint16_t hub_service::http_port() const noexcept { return desk_->port(); }

void hub_service::pause(const std::string& by) { rounds_->pause(by); }
void hub_service::resume(const std::string& by) { rounds_->resume(by); }
bool hub_service::paused() const noexcept { return rounds_->holds().pause; }
void hub_service::finish_after_round(const std::string& by) { rounds_->finish_after_round(by); }
core::result<std::string> hub_service::revoke_device(const std::string& id, const std::string& by) { return desk_->revoke_device(id, by); }

core::result<std::uint16_t> hub_service::start() {
  const hub_config& config = ctx_->config;
  net::session_config sc = net::to_session_config(config.link);
  sc.handshake_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(config.handshake_timeout_s * 1000.0));
  server_ = net::server::create(io_, revoked_->tls(), sc,
                                {.max_sessions = config.max_sessions,
                                 .max_handshakes = config.max_handshakes,
                                 .max_handshakes_per_source = config.max_handshakes_per_source});
  server_->on_session([this](const std::shared_ptr<net::session>& s) { attach(s); });
  TESSERA_ASSIGN_OR_RETURN(const std::uint16_t port, server_->listen(config.listen.host, config.listen.port));
  TESSERA_TRY(desk_->start(server_));
  if (rounds_->start()) watch_revocations();
  return port;
}

void hub_service::stop() {
  if (rounds_->stop()) shut_down();
}

void hub_service::shut_down() {
  crl_timer_.cancel();
  if (rounds_->finished()) tell_run_finished();
  devices_->release_sessions();
  if (server_) server_->stop();
  desk_->stop();
  if (on_stopped_) on_stopped_();
}

// A finished run tells each connected agent so, and it exits or waits for the next run (its after_run)
// rather than dialling a closed port.
void hub_service::tell_run_finished() {
  const std::string why = "its run is finished, after round " + std::to_string(rounds_->engine().completed()) + " of " +
                          std::to_string(ctx_->config.rounds);
  for (auto& [id, d] : devices_->entries())
    for (const auto& s : {d.session, d.handover.session})
      if (s) s->refuse(net::errc::refused, why, std::string(net::msg::k_run_finished), /*lasting=*/true);
}

}  // namespace tessera::hub
