// Revocation that bites: a device revoked while connected loses its session within a second of the
// CRL's change and is offered no further round; an agent given the CA's revocation list refuses a
// revoked hub certificate.
#include <chrono>
#include <string>
#include <vector>

#include "fleet.hpp"

namespace tessera::testing {

TEST_CASE("federation: revoking a connected device closes its session within 1 s; it is offered no round after") {
  constexpr int rounds = 4;
  fleet f("fed_revocation");
  INFO(f.diagnostics());
  const auto ids = f.make_device_pki(3);
  const auto data = f.make_training_shards(3000, 3, 4);
  hub_handle hub = f.start_hub("hub", {{"model", {{"inputs", 784}, {"hidden", {32}}, {"outputs", 10}}},
                                       {"strategy", "ist"},
                                       {"rounds", rounds},
                                       {"local_steps", 200},
                                       {"batch", 16},
                                       {"lr", 0.05},
                                       {"seed", 4},
                                       {"min_devices", 2},
                                       {"max_devices", 3},
                                       {"device_wait_s", 3},  // a round after the revocation waits this long for a third device
                                       {"round_deadline_s", 60},
                                       {"metrics", f.file("metrics.jsonl")}});
  const auto agents = f.start_agents(ids, data, hub.port);
  REQUIRE_MESSAGE(wait_for_log(hub.process, "device device-2 joined", 30s), "device-2 did not join");

  // Revoked while connected. Timed from before tessera-pki starts (its own run included): an upper
  // bound on the time from the CRL's change to the session's close.
  const auto revoked_at = std::chrono::steady_clock::now();
  f.revoke("device-2");
  REQUIRE_MESSAGE(wait_for_log(hub.process, "): its certificate is revoked: session closed", 10s), "the hub did not close the revoked session");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - revoked_at).count();
  MESSAGE("session of the revoked device closed " << seconds << " s after tessera-pki revoke started");
  CHECK(seconds < 1.0);
  // Revoked again (a script going through a list): said, and not an error (it used to fail).
  CHECK(count_of(f.revoke("device-2", "-again"), "is already revoked in " + f.pki_file("ca.crl") + ": nothing to do") == 1);
  CHECK(wait_for_log(*agents[2], "revoked", 10s));

  const auto code = hub.process.wait_exit(120s);
  REQUIRE_MESSAGE(code.has_value(), "the hub did not finish within 120 s");
  CHECK(*code == 0);
  const double after = std::chrono::duration<double>(std::chrono::steady_clock::now() - revoked_at).count();
  const std::string log = hub.process.err();
  CHECK(count_of(log, "device device-2 reconnected") == 0);
  // Its handshakes after that are refused by the TLS layer, naming the revocation; the agent backs off
  // (to its max_ms of 500 ms) instead of starting over after each handshake the hub then refuses.
  const std::size_t refused = count_of(log, "certificate revoked");
  MESSAGE(refused << " refused handshakes in the " << after << " s after the revocation");
  CHECK(refused >= 1);
  CHECK(static_cast<double>(refused) <= after / 0.5 + 8);
  // The rounds after the revocation have the two others only.
  const auto metrics = read_metrics(f.file("metrics.jsonl"));
  REQUIRE(metrics.size() == static_cast<std::size_t>(rounds));
  CHECK(metrics.back().at("devices") == 2);
  CHECK(metrics.back().at("stragglers") == 0);
}

TEST_CASE("federation: an agent with the CA's revocation list refuses a revoked hub certificate") {
  fleet f("fed_revoked_hub");
  INFO(f.diagnostics());
  f.make_pki({"device-0"});
  const auto data = f.make_training_shards(500, 1, 4);
  hub_handle hub = f.start_hub("hub", {{"model", {{"inputs", 784}, {"hidden", {16}}, {"outputs", 10}}},
                                       {"rounds", 1},
                                       {"min_devices", 1},
                                       {"device_wait_s", 60}});
  f.revoke("hub");
  nlohmann::json with_crl = f.agent_config("device-0", data[0], hub.port);
  with_crl["tls"]["crl"] = f.pki_file("ca.crl");
  child_process& checking = f.start_agent("checking", with_crl);
  CHECK(wait_for_log(checking, "certificate revoked", 15s));
  CHECK(count_of(hub.process.err(), "device device-0 joined") == 0);
  checking.kill();
  // The same agent without the list connects (the list is what refuses).
  child_process& trusting = f.start_agent("device-0", data[0], hub.port);
  CHECK(wait_for_log(hub.process, "device device-0 joined", 15s));
  trusting.kill();
}

}  // namespace tessera::testing
