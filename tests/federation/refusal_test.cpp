// Bad updates are refused with their reason, and training goes on: three in-process devices that spoil
// their updates on purpose (a NaN, a wrong size, a stale round) take part in every round next to two
// real agents, and a device whose certificate is revoked mid-run cannot get through the handshake.
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "fleet.hpp"
#include "support/scripted_agent.hpp"
#include "support/test_pki.hpp"
#include "tessera/core/math/layers.hpp"
#include "tessera/crypto/tls.hpp"
#include "tessera/net/client.hpp"

namespace tessera::testing {
namespace {

namespace asio = boost::asio;

enum class fault { nan_value, wrong_size, stale_round, huge_values };

crypto::tls_context device_tls(const fleet& f, const std::string& id) {
  auto tls = test_pki::in(f.file("pki")).agent_tls(id);
  REQUIRE_MESSAGE(tls.ok(), (tls ? std::string() : tls.error().message));
  return tls.value();
}

// A device on net::client that follows the protocol (HELLO, ASSIGN, download) and then sends an update
// spoiled in one way:
//   nan_value    the subnet with a NaN in it (right size and digest): refused when decoded
//   wrong_size   four bytes more than the subnet, blob and all: refused from the UPDATE, its chunks dropped
//   stale_round  an UPDATE for the round before the open one: refused; then it sends the subnet back
//                unchanged for the right round, which must be accepted (a refusal does not end the
//                assignment)
//   huge_values  every value 1e30 and the output bias (the last ten) 3e38: finite, the right size and
//                digest, refused by the update bound
// hold_after(r) (scripted_agent's) makes it sit on assignments of later rounds (downloaded, unanswered)
// until the hold is raised, so a test can keep the hub in a round of its choosing. Its handlers run on
// the test thread, inside io.run_for(): no locks.
class crafted_agent : public scripted_agent {
 public:
  crafted_agent(asio::io_context& io, const fleet& f, const std::string& id, fault kind, std::uint16_t port)
      : scripted_agent(io, device_tls(f, id), config(id, port)) {
    hooks().answer = [kind](const assignment& j) { return spoiled(kind, j); };
    hooks().after_result = [kind](const assignment& j, const net::msg::result& r) -> std::optional<reply> {
      if (kind == fault::stale_round && !r.accepted && j.results == 1) return reply::echo(j);  // the open round, unchanged
      return std::nullopt;
    };
  }

 private:
  static scripted_agent_config config(const std::string& id, std::uint16_t port) {
    net::session_config sc;
    sc.heartbeat_interval = 1000ms;
    return {.id = id,
            .client = {.host = "127.0.0.1", .port = port, .backoff_initial = 50ms, .backoff_max = 500ms, .jitter = 0.5, .seed = 1},
            .session = sc,
            .budget_bytes = 64u << 20,
            .examples = 500,
            .codecs = {net::codec::f32}};
  }

  static reply spoiled(fault kind, const assignment& j) {
    std::vector<std::byte> bytes = *j.subnet;
    switch (kind) {
      case fault::nan_value: {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        std::memcpy(bytes.data() + 4 * (bytes.size() / 8), &nan, sizeof nan);  // a weight mid-blob
        return reply::upload(j, std::move(bytes));
      }
      case fault::wrong_size:
        bytes.resize(bytes.size() + 4);
        return reply::upload(j, std::move(bytes));
      case fault::stale_round:
        break;
      case fault::huge_values: {
        const std::size_t n = bytes.size() / sizeof(float);
        for (std::size_t i = 0; i < n; ++i) {
          const float v = i + 10 >= n ? 3e38f : 1e30f;
          std::memcpy(bytes.data() + 4 * i, &v, sizeof v);
        }
        return reply::upload(j, std::move(bytes));
      }
    }
    net::msg::update u = honest_update(j, j.assign.size, j.assign.sha256);
    u.round = j.assign.round - 1;
    return reply::update_only(u);
  }
};

// One connection attempt with a device's certificate: does the hub let it say HELLO?
struct handshake_probe {
  bool ready = false;      // our side of the TLS handshake finished (in TLS 1.3 before the hub's verdict)
  bool welcomed = false;   // the hub answered HELLO
  std::optional<core::error> closed;
};

// `layer_kinds`: what its HELLO says it can run (none: an agent from before convolutional networks).
handshake_probe try_connect(const fleet& f, const std::string& id, std::uint16_t port, const std::vector<std::string>& layer_kinds = {},
                            const std::vector<std::string>& features = {}) {
  asio::io_context io;
  handshake_probe p;
  auto client = net::client::create(io, device_tls(f, id), net::session_config{},
                                    {.host = "127.0.0.1", .port = port, .backoff_initial = 10'000ms, .backoff_max = 10'000ms, .jitter = 0, .seed = 1});
  client->on_session([&p, &client, &id, &layer_kinds, &features](const std::shared_ptr<net::session>& s) {
    std::weak_ptr<net::session> weak = s;
    s->on_ready([&p, &id, &layer_kinds, &features, weak] {
      p.ready = true;
      if (auto self = weak.lock())
        self->send(net::msg::hello{.device_id = id, .version = net::protocol_version, .memory_budget_bytes = 64u << 20,
                                   .examples = 500, .codecs = {net::codec::f32}, .resume = {}, .layer_kinds = layer_kinds,
                                   .features = features});
    });
    s->on_message([&p](const net::message& m) {
      if (std::holds_alternative<net::msg::welcome>(m)) p.welcomed = true;
    });
    s->on_closed([&p, &client](const core::error& e) {
      p.closed = e;
      client->stop();  // one attempt only
    });
  });
  client->start();
  const bool done = eventually([&] { return p.closed.has_value() || p.welcomed; }, 15s, [&] {
    io.restart();
    io.run_for(10ms);
  });
  client->stop();
  io.restart();
  io.run_for(50ms);  // let the stop run before the client goes
  REQUIRE_MESSAGE(done, "the connection with " << id << "'s certificate neither closed nor got a WELCOME within 15 s");
  return p;
}

}  // namespace

TEST_CASE("federation: NaN, wrong-size and stale updates are refused with their reason; a revoked device is turned away") {
  constexpr int rounds = 4;
  constexpr int devices = 5;
  const std::vector<std::string> real{"device-0", "device-1"};
  const std::string revoked = "device-revoked";
  fleet f("fed_refusals");
  INFO(f.diagnostics());
  f.make_pki({real[0], real[1], "crafted-nan", "crafted-size", "crafted-stale", revoked});
  const auto data = f.make_training_shards(3000, 2, 3);
  const nlohmann::json validation = f.write_subset("t10k", 1000);

  hub_handle hub = f.start_hub(
      "hub", {{"model", {{"inputs", 784}, {"hidden", {64, 64}}, {"outputs", 10}}},
              {"strategy", "ist"},
              {"rounds", rounds},
              {"local_steps", 50},
              {"batch", 32},
              {"lr", 0.05},
              {"seed", 3},
              {"min_devices", devices},
              {"max_devices", devices},
              {"device_wait_s", 60},
              {"round_deadline_s", 60},
              {"validation", validation},
              {"metrics", f.file("metrics.jsonl")},
              {"output", f.file("model.safetensors")}});
  std::vector<child_process*> agents;
  for (std::size_t d = 0; d < real.size(); ++d) agents.push_back(&f.start_agent(real[d], data[d], hub.port));

  asio::io_context io;
  crafted_agent nan_agent(io, f, "crafted-nan", fault::nan_value, hub.port);
  crafted_agent size_agent(io, f, "crafted-size", fault::wrong_size, hub.port);
  crafted_agent stale_agent(io, f, "crafted-stale", fault::stale_round, hub.port);
  const std::vector<crafted_agent*> crafted{&nan_agent, &size_agent, &stale_agent};
  for (auto* c : crafted) {
    c->hold_after(1);  // round 2 waits for them: the hub is surely in round 2 when the list changes
    c->start();
  }
  const std::function<void()> pump = [&io] {
    io.restart();
    io.run_for(10ms);
  };

  // Revoked during round 2: the hub sees the list change within a quarter second and uses it for new
  // connections; the crafted devices hold round 3 open meanwhile, so the hub is up for the probe.
  REQUIRE_MESSAGE(eventually([&] { return !read_metrics(f.file("metrics.jsonl")).empty() || !hub.process.running(); }, 60s, pump),
                  "round 1 did not complete within 60 s");
  f.revoke(revoked);
  for (auto* c : crafted) c->hold_after(2);
  REQUIRE_MESSAGE(wait_for_log(hub.process, "revocation list reloaded", 30s, 1, pump), "the hub did not reload the revocation list");
  const handshake_probe probe = try_connect(f, revoked, hub.port);
  CHECK_FALSE(probe.welcomed);
  REQUIRE(probe.closed.has_value());
  REQUIRE_MESSAGE(wait_for_log(hub.process, "connection refused: TLS handshake", 10s), "the hub did not log the refused handshake");
  const auto refused_lines = lines_with(hub.process.err(), "connection refused: TLS handshake");
  REQUIRE(refused_lines.size() == 1);
  CHECK(refused_lines[0].find("revoked") != std::string::npos);
  for (auto* c : crafted) c->hold_after(UINT64_MAX);

  const bool finished = eventually([&] { return !hub.process.running(); }, 120s, pump);
  REQUIRE_MESSAGE(finished, "the hub did not finish within 120 s");
  REQUIRE(hub.process.exit_code() == 0);
  const std::string hub_log = hub.process.err();
  CHECK(count_of(hub_log, "device " + revoked) == 0);  // it never got as far as HELLO

  // Every round went ahead with the whole fleet: two updates rejected, none missing. And the model
  // learnt from the two real agents beside the three spoilers: measured 0.641, 0.325, 0.309, 0.446 (the
  // subnets of the three stay untrained and their logits add to the output, hence the dip); chance on
  // ten classes is 0.1, and a model nobody trains stays there (at lr 0: 0.06 every round).
  double best = 0;
  for (const auto& m : check_every_round(f.file("metrics.jsonl"), rounds, devices, {.stragglers = 0, .refused = 0, .rejected = 2})) {
    CAPTURE(m.dump());
    CHECK(std::isfinite(m.at("train_loss").get<double>()));
    REQUIRE(m.at("test_accuracy").is_number());
    const double accuracy = m.at("test_accuracy").get<double>();
    MESSAGE("round " << m.at("round") << ": test accuracy " << accuracy);
    CHECK(accuracy >= 0.25);
    best = std::max(best, accuracy);
  }
  CHECK(best >= 0.5);
  CHECK(all_finite(load_model_or_fail(f.file("model.safetensors")).params));
  for (child_process* a : agents) {  // the real agents trained every round, undisturbed
    CAPTURE(a->name());
    for (int r = 1; r <= rounds; ++r) CHECK(count_of(a->err(), "round " + std::to_string(r) + ": update accepted") == 1);
    CHECK(count_of(a->err(), "update rejected") == 0);
  }

  for (const auto* c : crafted) {
    CAPTURE(c->id());
    CHECK(c->problems().empty());
    CHECK(c->welcomes() == 1);  // one link for the whole run: no refusal cost it its connection
    CHECK(c->assignments() == rounds);
    // Every refusal reached the device with the reason the hub logged.
    for (const auto& v : c->verdicts()) {
      if (v.accepted) continue;
      CAPTURE(v.reason);
      CHECK(!v.reason.empty());
      CHECK(count_of(hub_log, "update from " + c->id() + " refused: " + v.reason) >= 1);
    }
  }
  auto reasons_of = [](const crafted_agent& c) {
    std::string out;
    for (const auto& v : c.verdicts())
      out += std::string("\n  round ") + std::to_string(v.round) + (v.accepted ? ": accepted" : ": refused: " + v.reason);
    return out;
  };
  INFO("crafted-nan:" << reasons_of(nan_agent));
  INFO("crafted-size:" << reasons_of(size_agent));
  INFO("crafted-stale:" << reasons_of(stale_agent));
  REQUIRE(nan_agent.verdicts().size() == rounds);
  REQUIRE(size_agent.verdicts().size() == rounds);
  REQUIRE(stale_agent.verdicts().size() == 2 * rounds);
  for (std::size_t r = 0; r < rounds; ++r) {
    const auto round = r + 1;
    const auto& nan = nan_agent.verdicts()[r];
    CHECK(nan.round == round);
    CHECK_FALSE(nan.accepted);
    CHECK(nan.reason.find("not a finite value") != std::string::npos);
    CHECK(nan.code == "rounds.bad_values");
    const auto& size = size_agent.verdicts()[r];
    CHECK(size.round == round);
    CHECK_FALSE(size.accepted);
    CHECK(size.reason.find("bytes, the assigned subnet is") != std::string::npos);
    CHECK(size.code == "rounds.size_mismatch");
    const auto& stale = stale_agent.verdicts()[2 * r];
    CHECK(stale.round == round);
    CHECK_FALSE(stale.accepted);
    CHECK(stale.reason.find("update for round " + std::to_string(round - 1)) != std::string::npos);
    CHECK(stale.code == "rounds.wrong_round");
    const auto& retry = stale_agent.verdicts()[2 * r + 1];
    CHECK(retry.round == round);
    CHECK(retry.accepted);
    CHECK(retry.code.empty());
  }
}

}  // namespace tessera::testing

namespace tessera::testing {

TEST_CASE("federation: a rogue device uploading 1e30 and an output bias of 3e38 is rejected; the model is the run's without it") {
  constexpr int rounds = 3;
  const std::vector<std::string> real{"device-0", "device-1"};
  fleet f("fed_rogue");
  INFO(f.diagnostics());
  f.make_pki({real[0], real[1], "rogue"});
  const auto data = f.make_training_shards(3000, 2, 5);
  const nlohmann::json validation = f.write_subset("t10k", 1000);
  const auto hub_config = [&](int devices, const std::string& tag) -> nlohmann::json {
    return {{"model", {{"inputs", 784}, {"hidden", {64}}, {"outputs", 10}}},
            {"strategy", "fedavg"},
            {"rounds", rounds},
            {"local_steps", 50},
            {"batch", 32},
            {"lr", 0.05},
            {"seed", 5},
            {"min_devices", devices},
            {"max_devices", devices},
            {"device_wait_s", 60},
            {"round_deadline_s", 60},
            {"validation", validation},
            {"metrics", f.file(tag + ".jsonl")}};
  };
  const auto run = [&](bool with_rogue) {
    const std::string tag = with_rogue ? "with" : "without";
    hub_handle hub = f.start_hub("hub-" + tag, hub_config(with_rogue ? 3 : 2, tag));
    std::vector<child_process*> agents;
    for (std::size_t d = 0; d < real.size(); ++d) agents.push_back(&f.start_agent(real[d] + "-" + tag, f.agent_config(real[d], data[d], hub.port)));
    asio::io_context io;
    std::optional<crafted_agent> rogue;
    if (with_rogue) {
      rogue.emplace(io, f, "rogue", fault::huge_values, hub.port);
      rogue->start();
    }
    const bool finished = eventually([&] { return !hub.process.running(); }, 120s, [&io] {
      io.restart();
      io.run_for(10ms);
    });
    REQUIRE_MESSAGE(finished, "the hub did not finish within 120 s");
    CHECK(hub.process.exit_code() == 0);
    if (rogue) {
      REQUIRE(rogue->verdicts().size() == rounds);
      for (const auto& v : rogue->verdicts()) {
        CAPTURE(v.reason);
        CHECK_FALSE(v.accepted);
        CHECK(v.code == "rounds.update_out_of_bounds");
        CHECK(v.reason.find("max_update_norm") != std::string::npos);
      }
      for (auto* a : agents) CHECK(count_of(a->err(), "rejected") == 0);
    }
    for (auto* a : agents) a->kill();
    return read_metrics(f.file(tag + ".jsonl"));
  };
  const auto with = run(true);
  const auto without = run(false);
  REQUIRE(with.size() == rounds);
  REQUIRE(without.size() == rounds);
  for (int r = 0; r < rounds; ++r) {
    CAPTURE(r + 1);
    const double a = with[static_cast<std::size_t>(r)].at("test_accuracy").get<double>();
    const double b = without[static_cast<std::size_t>(r)].at("test_accuracy").get<double>();
    MESSAGE("round " << r + 1 << ": accuracy " << 100 * a << "% with the rogue, " << 100 * b << "% without");
    CHECK(std::abs(a - b) <= 0.005);
    CHECK(with[static_cast<std::size_t>(r)].at("rejected") == 1);
  }
}

TEST_CASE("federation: an agent that cannot run the model's layers is turned away at HELLO, naming them; one that can is welcomed") {
  // An agent from before convolutional networks says nothing of layer kinds: offered a CNN, it would
  // have refused the download by its size, round after round. The hub refuses it at the door instead.
  fleet f("fed_layer_kinds");
  INFO(f.diagnostics());
  f.make_pki({"older", "newer"});
  hub_handle hub = f.start_hub("hub", {{"model", nlohmann::json::parse(R"({"input_shape": [1, 28, 28], "outputs": 10, "layers": [
                                           {"conv2d": {"channels": 4, "kernel": 3}}, {"max_pool": 2}, {"flatten": true}, {"dense": 16}]})")},
                                       {"strategy", "ist"}, {"rounds", 1}, {"min_devices", 2}, {"device_wait_s", 60},
                                       {"metrics", f.file("metrics.jsonl")}});
  const handshake_probe older = try_connect(f, "older", hub.port);
  CHECK_FALSE(older.welcomed);
  REQUIRE(older.closed.has_value());
  CAPTURE(older.closed->message);
  CHECK(older.closed->message.find("does not know the layer kinds conv2d, max_pool, flatten (upgrade tessera-edge on it)") != std::string::npos);
  CHECK(wait_for_log(hub.process, "device older (127.0.0.1:", 10s));
  CHECK(count_of(hub.process.err(), "its agent cannot run this model's layers (conv2d, max_pool, flatten): turned away until it is upgraded") == 1);

  const handshake_probe newer = try_connect(f, "newer", hub.port, core::layer_kind_names());
  CHECK(newer.welcomed);
  hub.process.kill();
}

TEST_CASE("federation: under strategy slt an agent that cannot train with frozen layers (or hold them in q8) is turned away at HELLO; one that can is welcomed") {
  // An agent from before successive layer training would ignore ASSIGN's "frozen", train every layer in
  // more memory than planned and send them all back, rejected by size round after round.
  fleet f("fed_frozen_layers");
  INFO(f.diagnostics());
  f.make_pki({"older", "newer"});
  hub_handle hub = f.start_hub("hub", {{"strategy", "slt"}, {"rounds", 2}, {"min_devices", 2}, {"device_wait_s", 60},
                                       {"metrics", f.file("metrics.jsonl")}});
  const handshake_probe older = try_connect(f, "older", hub.port);
  CHECK_FALSE(older.welcomed);
  REQUIRE(older.closed.has_value());
  CAPTURE(older.closed->message);
  CHECK(older.closed->message.find("cannot train with frozen layers, which the hub's strategy slt sends (upgrade tessera-edge on it)") !=
        std::string::npos);
  CHECK(wait_for_log(hub.process, "device older (127.0.0.1:", 10s));
  CHECK(count_of(hub.process.err(), "its agent cannot train with frozen layers (strategy slt): turned away until it is upgraded") == 1);

  const handshake_probe newer = try_connect(f, "newer", hub.port, {}, {net::k_feature_frozen_layers});
  CHECK(newer.welcomed);
  hub.process.kill();

  // With slt.frozen_codec q8 the frozen layers arrive in q8 and stay so: an agent that trains with
  // frozen layers but holds them only in f32 would refuse every such assignment by its size.
  hub_handle compact = f.start_hub("hub-q8", {{"strategy", "slt"}, {"rounds", 2}, {"min_devices", 2}, {"device_wait_s", 60},
                                              {"slt", {{"frozen_codec", "q8"}}}, {"metrics", f.file("metrics-q8.jsonl")}});
  const handshake_probe f32_only = try_connect(f, "older", compact.port, {}, {net::k_feature_frozen_layers});
  CHECK_FALSE(f32_only.welcomed);
  REQUIRE(f32_only.closed.has_value());
  CAPTURE(f32_only.closed->message);
  CHECK(f32_only.closed->message.find("cannot hold frozen layers in q8, which the hub's strategy slt sends") != std::string::npos);
  CHECK(wait_for_log(compact.process, "its agent cannot hold frozen layers in q8 (strategy slt): turned away until it is upgraded", 10s));
  const handshake_probe both = try_connect(f, "newer", compact.port, {}, {net::k_feature_frozen_layers, net::k_feature_compact_frozen});
  CHECK(both.welcomed);
  compact.process.kill();
}

}  // namespace tessera::testing
