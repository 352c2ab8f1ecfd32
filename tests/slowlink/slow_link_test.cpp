// A federation over bad links, in one process: tessera's hub service and two agents, each agent behind
// its own emulated link (net::link_emulator) of 256 kbit/s with 50 ms latency, 2 s stalls every 10 s
// and a cut every 30 s. Rounds must keep completing, and what a cut costs must be bounded by the
// unacknowledged window, not by the blob.
#include <doctest/doctest.h>

#include <thread>

#include <boost/asio/io_context.hpp>

#include "../core/test_files.hpp"
#include "support/test_pki.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/edge/agent.hpp"
#include "tessera/hub/hub.hpp"
#include "tessera/net/link_emulator.hpp"
#include "tessera/rounds/sim/shards.hpp"

using namespace tessera;
using namespace std::chrono_literals;
using tessera::testing::temp_dir;

namespace {

constexpr int k_agents = 2;
constexpr std::uint32_t k_window_kib = 32;

std::string device_id(int d) { return "dev-" + std::to_string(d); }

}  // namespace

TEST_CASE("slow link: at 256 kbit/s with 2 s stalls and a cut every 30 s, rounds keep completing and cuts resend at most a window") {
  temp_dir dir("slowlink");
  auto made = testing::test_pki::create(dir.path() / "pki");
  REQUIRE_MESSAGE(made.ok(), (made.ok() ? "" : made.error().message));
  const testing::test_pki& pki = made.value();
  for (int d = 0; d < k_agents; ++d) REQUIRE(pki.issue_device(device_id(d)).ok());

  // Each agent's shard of Fashion-MNIST, as tessera-sim would give it.
  auto sim = sim::parse_sim_config({{"devices", k_agents}, {"data", {{"examples", 2000}}}}, "test");
  REQUIRE(sim.ok());
  auto folders = sim::write_shards(sim.value(), (dir.path() / "shards").string());
  REQUIRE_MESSAGE(folders.ok(), (folders.ok() ? "" : folders.error().message));

  // The hub: a 784-128-128-10 model, so each agent's subnet is ~220 kB, several seconds each way.
  nlohmann::json hc = {{"listen", "127.0.0.1:0"},
                       {"tls", {{"ca", pki.ca().cert.string()}, {"cert", pki.hub().cert.string()},
                                {"key", pki.hub().key.string()}, {"crl", pki.ca().crl.string()}}},
                       {"model", {{"hidden", {128, 128}}}},
                       {"rounds", 5}, {"eval_every", 5}, {"min_devices", k_agents}, {"max_devices", k_agents}, {"device_wait_s", 60},
                       {"round_deadline_s", 120}, {"local_steps", 10}, {"batch", 16}, {"heartbeat_s", 3},
                       {"idle_timeout_s", 20}, {"chunk_kib", 8}, {"window_kib", k_window_kib},
                       {"checkpoint_dir", (dir.path() / "ckpt").string()}};
  auto cfg = hub::parse_hub_config(hc, "slow-link hub");
  REQUIRE_MESSAGE(cfg.ok(), (cfg.ok() ? "" : cfg.error().message));

  boost::asio::io_context io;
  std::vector<std::string> hub_log;
  auto service = hub::hub_service::create(io, cfg.value(), [&](core::log_level, const std::string& m) { hub_log.push_back(m); });
  REQUIRE(service.ok());
  std::vector<rounds::round_metrics> rounds;
  service.value()->on_round([&](const rounds::round_metrics& m) { rounds.push_back(m); });
  auto port = service.value()->start();
  REQUIRE(port.ok());

  const net::link_profile profile{.rate_bits_per_s = 256'000, .latency = 50ms, .jitter = 10ms, .stall_every = 10s,
                                  .stall_for = 2s, .cut_every = 30s, .cut_after_bytes = 0, .seed = 7};
  std::vector<std::shared_ptr<net::link_emulator>> links;
  std::vector<std::unique_ptr<edge::agent>> agents;
  for (int d = 0; d < k_agents; ++d) {
    auto link = net::link_emulator::create(io, profile, "127.0.0.1", port.value());
    auto lp = link->listen("127.0.0.1", 0);
    REQUIRE(lp.ok());
    links.push_back(link);
    auto data = core::load_json_file(folders.value()[static_cast<std::size_t>(d)] + "/data.json");
    REQUIRE(data.ok());
    nlohmann::json ac = {{"hub", "127.0.0.1:" + std::to_string(lp.value())},
                         {"tls", {{"ca", pki.ca().cert.string()}, {"cert", pki.device(device_id(d)).cert.string()},
                                  {"key", pki.device(device_id(d)).key.string()}}},
                         {"data", data.value()}, {"memory_budget_mib", 16}, {"heartbeat_s", 3}, {"idle_timeout_s", 20},
                         {"chunk_kib", 8}, {"window_kib", k_window_kib},
                         {"reconnect", {{"initial_ms", 100}, {"max_ms", 1000}}}};
    auto acfg = edge::parse_agent_config(ac, "slow-link agent");
    REQUIRE_MESSAGE(acfg.ok(), (acfg.ok() ? "" : acfg.error().message));
    auto a = edge::agent::create(io, acfg.value(), {});
    REQUIRE(a.ok());
    a.value()->start();
    agents.push_back(std::move(a.value()));
  }

  // The hub stops itself after its last round; the agents then keep trying: stop them too.
  const auto deadline = std::chrono::steady_clock::now() + 400s;
  while (!service.value()->finished() && service.value()->failure().empty() && std::chrono::steady_clock::now() < deadline)
    io.run_for(200ms);
  for (auto& a : agents) a->stop();
  for (auto& l : links) l->stop();
  io.run_for(500ms);

  REQUIRE_MESSAGE(service.value()->finished(), "hub: " << service.value()->failure());
  REQUIRE(rounds.size() == 5);
  std::uint64_t cuts = 0, stalls = 0, resent = 0, blob_bytes = 0;
  for (auto& l : links) {
    cuts += l->stats().cuts;
    stalls += l->stats().stalls;
  }
  for (const auto& m : rounds) {
    resent += m.resent_bytes.value_or(0);
    blob_bytes += m.bytes_down + m.bytes_up;
    CHECK(m.stragglers == 0);
    CHECK(m.rejected == 0);
  }
  MESSAGE(rounds.size() << " rounds in " << rounds.back().seconds << " s (last); link cuts " << cuts << ", stall windows "
                        << stalls << "; blob bytes " << blob_bytes << ", resent " << resent);
  CHECK(cuts >= 2);  // the test is about surviving them: there must have been some
  // A cut can void at most one window of unacknowledged bytes per transfer direction and connection.
  CHECK(resent <= cuts * 2 * (std::uint64_t{k_window_kib} << 10));
  for (auto& a : agents) CHECK(a->stats().accepted >= 4);
  // After the last round every agent scored the whole model (~470 kB each over the same links).
  CHECK(rounds.back().fed.devices == std::optional<std::size_t>(k_agents));
  CHECK(rounds.back().fed.bytes_down >= std::optional<std::uint64_t>(k_agents * core::encoded_bytes(cfg.value().model.full_arch(), core::codec_kind::f32)));
  for (std::size_t r = 0; r + 1 < rounds.size(); ++r) CHECK_FALSE(rounds[r].fed.devices.has_value());
}
