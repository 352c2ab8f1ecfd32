#include "fleet_run.hpp"

#include <unistd.h>

#include <boost/asio/io_context.hpp>

#include "tessera/core/config/json_config.hpp"
#include "tessera/crypto/pki.hpp"
#include "tessera/edge/agent.hpp"
#include "tessera/hub/hub.hpp"

namespace tessera::bench {

std::filesystem::path fleet_dir(const std::string& tag) {
  const auto work = std::filesystem::temp_directory_path() / (tag + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(work);
  std::filesystem::create_directories(work / "pki");
  return work;
}

void make_pki(const std::filesystem::path& work, std::size_t devices) {
  const crypto::ca_files ca = crypto::ca_files::in(work / "pki");
  must(crypto::init_ca(ca, {}, true));
  must(crypto::issue(ca, {.ip_addresses = {"127.0.0.1"}}, {work / "pki" / "hub.pem", work / "pki" / "hub.key"}, true));
  for (std::size_t d = 0; d < devices; ++d) {
    const std::string id = "dev-" + std::to_string(d);
    must(crypto::issue(ca, {.device_id = id}, {work / "pki" / (id + ".pem"), work / "pki" / (id + ".key")}, true));
  }
}

std::vector<rounds::round_metrics> run_fleet(nlohmann::json hub_json, const std::filesystem::path& work,
                                             const std::vector<std::string>& shards, const fleet_options& o) {
  using clock_type = std::chrono::steady_clock;
  const auto pki = work / "pki";
  const crypto::ca_files ca = crypto::ca_files::in(pki);
  hub_json.update({{"listen", "127.0.0.1:0"},
                   {"tls", {{"ca", ca.cert.string()}, {"cert", (pki / "hub.pem").string()}, {"key", (pki / "hub.key").string()},
                            {"crl", ca.crl.string()}}},
                   {"min_devices", shards.size()},
                   {"max_devices", shards.size()}});
  const auto cfg = must(hub::parse_hub_config(hub_json, "bench hub"));
  boost::asio::io_context io;
  auto service = must(hub::hub_service::create(io, cfg, {}));
  std::vector<rounds::round_metrics> rounds;
  service->on_round([&](const rounds::round_metrics& m) { rounds.push_back(m); });
  const auto port = must(service->start());
  std::vector<std::shared_ptr<net::link_emulator>> links;
  std::vector<std::unique_ptr<edge::agent>> agents;
  for (std::size_t d = 0; d < shards.size(); ++d) {
    std::uint16_t agent_port = port;
    if (o.link) {
      auto link = net::link_emulator::create(io, *o.link, "127.0.0.1", port);
      agent_port = must(link->listen("127.0.0.1", 0));
      links.push_back(link);
    }
    const std::string id = "dev-" + std::to_string(d);
    nlohmann::json ac = {{"hub", "127.0.0.1:" + std::to_string(agent_port)},
                         {"tls", {{"ca", ca.cert.string()}, {"cert", (pki / (id + ".pem")).string()}, {"key", (pki / (id + ".key")).string()}}},
                         {"data", must(core::load_json_file(shards[d] + "/data.json"))}};
    ac.update(o.agent_extra);
    auto a = must(edge::agent::create(io, must(edge::parse_agent_config(ac, "bench agent")), {}));
    a->start();
    agents.push_back(std::move(a));
  }
  const auto deadline = clock_type::now() + o.limit;
  while (!service->finished() && service->failure().empty() && clock_type::now() < deadline) io.run_for(std::chrono::milliseconds(200));
  for (auto& a : agents) a->stop();
  for (auto& l : links) l->stop();
  io.run_for(std::chrono::milliseconds(300));
  if (!service->finished()) die("the federation did not finish: " + service->failure());
  return rounds;
}

}  // namespace tessera::bench
