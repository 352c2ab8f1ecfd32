// Internal: the hub's operator desk (hub.hpp). It opens the operator endpoint when http.listen is set,
// answers its requests through the routes (operator_routes.hpp) with the hub's documents (JSON:
// operator_documents.hpp, Prometheus: hub_metrics.hpp), and takes the operator's actions: pause, resume
// and finish go to the round driver, a revoked device to the revocation lists.
//
//   operator_desk desk(hub_strand, ctx, rounds, devices, revoked, figures, [&] { close_revoked_sessions(); });
//   TESSERA_TRY(desk.start(agents_server));   // the bound port: desk.port() (0: no endpoint)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/any_io_executor.hpp>

#include "device_registry.hpp"
#include "hub_context.hpp"
#include "hub_figures.hpp"
#include "hub_view.hpp"
#include "operator_routes.hpp"
#include "revocations.hpp"
#include "round_driver.hpp"
#include "tessera/hub/operator_endpoint.hpp"
#include "tessera/net/server.hpp"

namespace tessera::hub {

class operator_desk final : public operator_api {
 public:
  // `close_revoked` closes the open sessions the lists revoke now.
  // The endpoint runs on `hub` (the hub's strand), beside the state it reads.
  operator_desk(boost::asio::any_io_executor hub, const hub_context& ctx, round_driver& rounds, device_registry& devices, revocations& revoked,
                hub_figures& figures, std::function<void()> close_revoked);

  // Opens the endpoint if http.listen is set; `agents` is the agents' listener, whose counts it serves.
  [[nodiscard]] core::result<void> start(std::shared_ptr<const net::server> agents);
  // The endpoint's port (0: none).
  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }
  // Connections accepted from now on use `tls` (the hub's context after its CRL changed).
  void set_tls(const crypto::tls_context& tls);
  void stop();

  // Refuses the device from now on: its session closed at once, its assignment ended, kept in
  // checkpoint_dir across restarts. The certificate serial it last used (empty if it never connected).
  [[nodiscard]] core::result<std::string> revoke_device(const std::string& id, const std::string& by);

  [[nodiscard]] std::string metrics() const override;
  [[nodiscard]] nlohmann::json status(fleet_page page) const override;
  [[nodiscard]] nlohmann::json rounds(std::int64_t since) const override;
  nlohmann::json pause(const std::string& by) override;
  nlohmann::json resume(const std::string& by) override;
  nlohmann::json finish(const std::string& by) override;
  [[nodiscard]] core::result<nlohmann::json> revoke(const std::string& id, const std::string& by) override;

 private:
  [[nodiscard]] hub_view view() const;
  [[nodiscard]] http_response serve(const http_request& r);

  boost::asio::any_io_executor hub_;
  const hub_context& ctx_;
  round_driver& rounds_;
  device_registry& devices_;
  revocations& revoked_;
  hub_figures& figures_;
  std::function<void()> close_revoked_;
  std::shared_ptr<const net::server> agents_;
  std::shared_ptr<operator_endpoint> endpoint_;
  std::uint16_t port_ = 0;
};

}  // namespace tessera::hub
