// Tests of tessera/hub/hub.hpp without processes: the hub service and real agents (edge::agent) in one
// process, on one io_context, over mutual TLS on 127.0.0.1. The service's decisions — when a round
// starts, who is left out and why, what a finished round leaves behind, where a restarted hub resumes —
// are checked here in seconds; tests/federation runs the same programs as separate processes.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "../core/test_files.hpp"
#include "../crypto/test_pki.hpp"
#include "federation_fixture.hpp"
#include "support/scripted_agent.hpp"
#include "tessera/core/base/rng.hpp"
#include "tessera/core/data/dataset.hpp"
#include "tessera/edge/agent.hpp"
#include "tessera/hub/hub.hpp"
#include "tessera/rounds/checkpoint.hpp"

using namespace tessera;
using namespace std::chrono_literals;

namespace {

using hub_testing::device_files;
using hub_testing::federation;
using hub_testing::write_data;

}  // namespace

TEST_CASE("hub service: a round starts when max_devices are ready, runs every agent, and is recorded") {
  testing::temp_dir dir("hub-service");
  federation f(dir);
  f.start_hub(f.hub_config());
  const auto& pki = test::test_pki::get();
  edge::agent& a = f.start_agent(pki.dev_a, f.data_for("dev-a", 400));
  edge::agent& b = f.start_agent(pki.dev_b, f.data_for("dev-b", 300));
  f.run();

  REQUIRE(f.hub().finished());
  CHECK(f.hub().failure().empty());
  REQUIRE(f.recorded().size() == 3);
  for (const auto& m : f.recorded()) {
    CHECK(m.devices == 2);
    CHECK(m.stragglers == 0u);
    CHECK(m.refused == 0u);
    CHECK(m.rejected == 0u);
    CHECK(m.examples == 2 * 10 * 8);
    CHECK(m.bytes_down > 0);
    CHECK(m.bytes_up == m.bytes_down);  // f32 both ways, nothing resent on loopback
    CHECK(m.test_accuracy.has_value());
  }
  CHECK(*f.recorded().back().test_accuracy > 0.6);
  CHECK(a.stats().accepted == 3);
  CHECK(b.stats().accepted == 3);
  // The recorder left the metrics file, the checkpoint (with the registry) and the model.
  auto ck = rounds::load_checkpoint(dir.file("ckpt/hub.ckpt"), f.hub().engine().config().model, nullptr);
  REQUIRE(ck.ok());
  REQUIRE(ck.value().has_value());
  CHECK(ck.value()->round == 3);
  REQUIRE(ck.value()->registry.size() == 2);
  for (const auto& d : ck.value()->registry) CHECK(d.rounds_done == 3);
  CHECK(std::filesystem::exists(dir.file("model.safetensors")));
  CHECK(f.hub_lines_with("device dev-a joined") == 1);
}

TEST_CASE("hub service: a secure round — three agents mask their updates, the hub applies only the sums") {
  // The in-process twin of tests/federation/secure_test, so the hub's and the agents' secure steps
  // also run under the sanitizers.
  testing::temp_dir dir("hub-service-secure");
  federation f(dir);
  f.start_hub(f.hub_config({{"rounds", 2}, {"min_devices", 3}, {"max_devices", 3}, {"secure_aggregation", {{"replication", 3}}},
                            {"audit_uploads", dir.file("audit")}}));
  const auto& pki = test::test_pki::get();
  const crypto::cert_files dev_c{pki.dir / "dev-c.pem", pki.dir / "dev-c.key"};
  if (!std::filesystem::exists(dev_c.cert)) REQUIRE(crypto::issue(pki.ca, {.device_id = "dev-c"}, dev_c, false).ok());
  edge::agent& a = f.start_agent(pki.dev_a, f.data_for("dev-a", 400));
  edge::agent& b = f.start_agent(pki.dev_b, f.data_for("dev-b", 300));
  edge::agent& c = f.start_agent(dev_c, f.data_for("dev-c", 300));
  f.run();
  INFO(f.logs());
  REQUIRE(f.hub().finished());
  REQUIRE(f.recorded().size() == 2);
  for (const auto& m : f.recorded()) {
    CHECK(m.groups == 1);  // three devices, replication 3: one group
    CHECK(m.secagg.dropped == 0u);
    CHECK(m.secagg.withheld == 0u);
    CHECK(m.stragglers == 0u);
  }
  CHECK(*f.recorded().back().test_accuracy > 0.5);
  for (const edge::agent* x : {&a, &b, &c}) CHECK(x->stats().accepted == 2);
  CHECK(f.hub_lines_with("secure aggregation released 2 of 2 sums") == 2);
  // Every upload kept as received (audit_uploads): three devices, two rounds.
  std::size_t uploads = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("audit"))) {
    (void)e;
    ++uploads;
  }
  CHECK(uploads == 6);
}

TEST_CASE("hub service: a hub waiting for min_devices says what it waits for, once until that changes") {
  testing::temp_dir dir("hub-service-waiting");
  federation f(dir);
  f.start_hub(f.hub_config({{"rounds", 2}, {"min_devices", 2}, {"device_wait_s", 0.2}}));
  f.start_agent(test::test_pki::get().dev_a, f.data_for("dev-a", 400));
  boost::asio::steady_timer stop(f.io(), 3s);
  stop.async_wait([&f](const boost::system::error_code&) { f.on_hub([&f] { f.hub().stop(); }); });
  f.run();
  INFO(f.logs());
  CHECK(f.recorded().empty());
  CHECK(f.hub_lines_with("round 1 waits for devices: 1 ready (1 connected), min_devices is 2") == 1);  // it used to say nothing
}

TEST_CASE("hub service: every device refusing its rounds ends the run with the reasons, no model written (every device refusing)") {
  // Devices whose policy asks for the devices' DP noise refuse every round in the clear. The hub used to
  // count each refused round as done and exit 0 with the untrained model.
  testing::temp_dir dir("hub-service-all-refuse");
  federation f(dir);
  f.start_hub(f.hub_config({{"rounds", 10}, {"min_devices", 2}, {"device_wait_s", 0.2}}));
  f.configure_agents([](edge::agent_config& c) { c.privacy.min_noise_multiplier = 1.0; });
  const auto& pki = test::test_pki::get();
  f.start_agent(pki.dev_a, f.data_for("dev-a", 300));
  f.start_agent(pki.dev_b, f.data_for("dev-b", 300));
  f.run();
  INFO(f.logs());
  CHECK_FALSE(f.hub().finished());
  const std::string& failure = f.hub().failure();
  CHECK(failure.find("every device refused round 1 or had its update rejected, 3 rounds in a row (dev-a refused: ") != std::string::npos);
  CHECK(failure.find("no device will train this run as it is set") != std::string::npos);
  CHECK(f.recorded().empty());
  CHECK(f.hub().engine().completed() == 0);
  CHECK(f.hub_lines_with("round 1: no device's update reached the model (dev-a refused: ") == 2);  // the third ends the run
  CHECK(f.hub_lines_with("): it does not count, and round 1 runs again") == 2);
  CHECK_FALSE(std::filesystem::exists(dir.file("model.safetensors")));
}

namespace {

// A hub of `rounds` rounds with 1 s deadlines, and its one device: scripted, holding every round's
// assignment (downloaded, never answered) until the test raises the hold.
testing::scripted_agent& start_with_held_device(federation& f, int rounds) {
  f.start_hub(f.hub_config({{"rounds", rounds}, {"min_devices", 1}, {"max_devices", 1}, {"device_wait_s", 0.2}, {"round_deadline_s", 1}}));
  auto& held = f.start_scripted(test::test_pki::get().dev_a,
                                {.id = "dev-a", .client = {.host = "127.0.0.1", .port = f.port(), .backoff_initial = 20ms,
                                                           .backoff_max = 200ms, .jitter = 0, .seed = 1}});
  held.hold_after(0);
  held.start();
  return held;
}

}  // namespace

TEST_CASE("hub service: a round nobody trained does not count, and runs again (round nobody trained)") {
  // A device that downloads its subnet and sits on it past the deadline: round 1 ends with no update. It
  // used to be recorded as done with loss 0.0000; now round 1 runs again and counts when trained.
  testing::temp_dir dir("hub-service-untrained");
  federation f(dir);
  auto& held = start_with_held_device(f, 2);
  boost::asio::steady_timer poll(f.io());
  std::function<void()> watch = [&] {
    poll.expires_after(50ms);
    poll.async_wait([&](const boost::system::error_code& ec) {
      if (ec) return;
      if (f.hub_lines_with("round 1: no device's update reached the model (dev-a straggler): it does not count, and round 1 runs again") >= 1)
        held.hold_after(UINT64_MAX);  // trains from now on
      else watch();
    });
  };
  watch();
  f.run();
  INFO(f.logs());
  REQUIRE(f.hub().finished());
  REQUIRE(f.recorded().size() == 2);
  CHECK(f.recorded()[0].round == 1);
  CHECK(f.recorded()[0].examples > 0);
  CHECK(f.recorded()[1].round == 2);
  CHECK(f.hub_lines_with("device dev-a missed the deadline of round 1") >= 1);
}

TEST_CASE("hub service: a finish asked during a round nobody trains ends the run after it (round nobody trained)") {
  // The round runs again only when devices are ready; the operator's finish must not wait for that.
  testing::temp_dir dir("hub-service-untrained-finish");
  federation f(dir);
  auto& held = start_with_held_device(f, 5);
  bool asked = false;
  held.hooks().on_assign = [&](const net::msg::assign&) {
    if (asked) return;
    asked = true;
    f.on_hub([&f] { f.hub().finish_after_round("test"); });
  };
  f.run(30s);
  INFO(f.logs());
  CHECK(asked);
  CHECK(f.hub().finished());
  CHECK(f.recorded().empty());
  CHECK(f.hub_lines_with("finishing before round 1 as the operator asked") == 1);
}

TEST_CASE("hub service: at the run's end every agent hears so, and exits or waits as its after_run says (agents after the run)") {
  // They used to dial the stopped hub forever, logging "Connection refused". dev-a exits (the default),
  // dev-b waits for the next run.
  const auto& pki = test::test_pki::get();
  testing::temp_dir dir("hub-service-after-run");
  federation f(dir);
  f.start_hub(f.hub_config({{"rounds", 2}, {"min_devices", 2}, {"device_wait_s", 0.2}}));
  for (const auto* cert : {&pki.dev_a, &pki.dev_b}) {
    if (cert == &pki.dev_b) f.configure_agents([](edge::agent_config& c) { c.after_run = edge::after_run_mode::wait; });
    f.start_agent(*cert, f.data_for(cert == &pki.dev_a ? "dev-a" : "dev-b", 300));
  }
  f.run();
  INFO(f.logs());
  REQUIRE(f.hub().finished());
  CHECK(f.agent_lines_with("the hub says its run is finished, after round 2 of 2: exiting (after_run exit") == 1);
  CHECK(f.agent_lines_with("the hub at 127.0.0.1:") >= 1);
  CHECK(f.agent_lines_with("finished its run: its run is finished, after round 2 of 2; waiting for its next run (after_run wait)") == 1);
  CHECK(f.agent_lines_with("cannot reach the hub") == 0);
}

TEST_CASE("hub service: a device whose budget holds no subnet is turned away with the reason and the fix; the rounds go on") {
  testing::temp_dir dir("hub-service-budget");
  federation f(dir);
  f.start_hub(f.hub_config({{"rounds", 2}, {"min_devices", 1}, {"device_wait_s", 0.2}}));
  const auto& pki = test::test_pki::get();
  f.start_agent(pki.dev_a, f.data_for("dev-a", 400));
  // The data reader's buffers (1 KiB of batch indices) and 76 bytes more: no subnet fits.
  edge::agent& tiny = f.start_agent(pki.dev_b, f.data_for("dev-b", 300), 1100);
  f.run();
  REQUIRE(f.hub().finished());
  REQUIRE(f.recorded().size() == 2);
  for (const auto& m : f.recorded()) CHECK(m.devices == 1);
  INFO(f.logs());
  // Said at its HELLO, not found out at every round (it used to be only "no device can take part").
  CHECK(f.hub_lines_with("device dev-b (127.0.0.1:") >= 1);
  CHECK(f.hub_lines_with("cannot train this model: the narrowest subnet (min_width 4) needs ") >= 1);
  CHECK(f.hub_lines_with("; the budget is 76 bytes: turned away until its budget changes") >= 1);
  CHECK(f.hub_lines_with("device dev-b left out of round") == 0);
  CHECK(f.agent_lines_with("turned this device away: this device cannot train the hub's model: the narrowest subnet") >= 1);
  CHECK(f.agent_lines_with("(raise its memory_budget_mib, or the hub's operator narrows the model or min_width)") >= 1);
  CHECK(tiny.stats().assignments == 0);
}

namespace {

// A whole run of dev-a (400 examples) and dev-b (300) on a hub of `overrides`, its checkpoint in `dir`:
// the model it ends with.
std::vector<float> run_to_the_end(const testing::temp_dir& dir, const nlohmann::json& overrides) {
  const auto& pki = test::test_pki::get();
  federation f(dir);
  f.start_hub(f.hub_config(overrides));
  f.start_agent(pki.dev_a, f.data_for("dev-a", 400));
  f.start_agent(pki.dev_b, f.data_for("dev-b", 300));
  f.run();
  REQUIRE(f.hub().finished());
  return {f.hub().engine().params().begin(), f.hub().engine().params().end()};
}

}  // namespace

TEST_CASE("hub service: a hub restarted on its checkpoint resumes after the last completed round") {
  testing::temp_dir dir("hub-service-resume");
  const auto& pki = test::test_pki::get();
  std::vector<float> after_two;
  after_two = run_to_the_end(dir, {{"rounds", 2}});
  federation f(dir);
  f.start_hub(f.hub_config({{"rounds", 4}}));
  CHECK(f.hub().resumed_from() == 2);
  CHECK(std::equal(after_two.begin(), after_two.end(), f.hub().engine().params().begin()));  // the checkpoint's model
  f.start_agent(pki.dev_a, f.data_for("dev-a", 400));
  f.start_agent(pki.dev_b, f.data_for("dev-b", 300));
  f.run();
  REQUIRE(f.hub().finished());
  REQUIRE(f.recorded().size() == 2);
  CHECK(f.recorded().front().round == 3);
  CHECK(f.recorded().back().round == 4);
  CHECK(f.hub_lines_with("resumed from checkpoint after round 2") == 1);
}

TEST_CASE("hub service: a restarted hub resumes its server optimizer's moments; a checkpoint without them is refused") {
  testing::temp_dir dir("hub-service-resume-adam");
  const auto& pki = test::test_pki::get();
  const nlohmann::json adam = {{"kind", "adam"}, {"lr", 0.01}};
  std::vector<float> after_two;
  {
    federation f(dir);
    f.start_hub(f.hub_config({{"rounds", 2}, {"server_optimizer", adam}}));
    f.start_agent(pki.dev_a, f.data_for("dev-a", 400));
    f.start_agent(pki.dev_b, f.data_for("dev-b", 300));
    f.run();
    REQUIRE(f.hub().finished());
    REQUIRE(f.hub().engine().server_optimizer().state().steps == 2);
  }
  {
    federation f(dir);
    f.start_hub(f.hub_config({{"rounds", 3}, {"server_optimizer", adam}}));
    CHECK(f.hub().resumed_from() == 2);
    CHECK(f.hub().engine().server_optimizer().state().steps == 2);  // the moments came back with the model
    f.start_agent(pki.dev_a, f.data_for("dev-a", 400));
    f.start_agent(pki.dev_b, f.data_for("dev-b", 300));
    f.run();
    REQUIRE(f.hub().finished());
    CHECK(f.hub().engine().server_optimizer().state().steps == 3);
  }
  // A run that kept no moments cannot be continued by one that needs them: refused at start, naming why.
  testing::temp_dir plain_dir("hub-service-resume-plain");
  run_to_the_end(plain_dir, {{"rounds", 1}});
  federation f(plain_dir);
  boost::asio::io_context io;
  auto refused = hub::hub_service::create(io, f.hub_config({{"rounds", 3}, {"server_optimizer", adam}}), {});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("hub.ckpt") != std::string::npos);
  CHECK(refused.error().message.find("no server optimizer state") != std::string::npos);
}

TEST_CASE("hub service: a device whose labels the model cannot learn refuses once; the hub stops assigning to it") {
  testing::temp_dir dir("hub-service-unfit");
  federation f(dir);
  f.start_hub(f.hub_config({{"rounds", 3}, {"min_devices", 1}, {"device_wait_s", 0.5}}));
  const auto& pki = test::test_pki::get();
  edge::agent& good = f.start_agent(pki.dev_a, f.data_for("dev-a", 400));
  edge::agent& unfit = f.start_agent(pki.dev_b, f.data_for("dev-b", 300, /*classes=*/6));  // the model has 4 outputs
  f.run();
  REQUIRE(f.hub().finished());
  REQUIRE(f.recorded().size() == 3);
  CHECK(good.stats().accepted == 3);
  CHECK(unfit.stats().refused == 1);  // once: the hub assigns it nothing more, even after it reconnects
  CHECK(unfit.stats().accepted == 0);
  CHECK(f.hub_lines_with("device dev-b refused its assignment: the assignment of round ") == 1);
  CHECK(f.hub_lines_with("dev-b-labels: row ") >= 1);  // the labels file and the record
  CHECK(f.hub_lines_with(" (counting from 0): label 5, but the model has 4 classes (labels 0 to 3)") >= 1);
  CHECK(f.hub_lines_with("device dev-b gets no assignment until its data changes") == 1);
  CHECK(f.hub_lines_with("device dev-b reconnected") >= 1);  // the refusal closed its link; it came back
  // The agent says it was its own refusal, not an unreachable hub.
  // (It used to read "cannot reach the hub".)
  CHECK(f.agent_lines_with("this device ended its link to the hub at 127.0.0.1:") == 1);
  std::size_t refused = 0;
  for (const auto& m : f.recorded()) refused += *m.refused;
  CHECK(refused == 1);
  CHECK(f.recorded().back().devices == 1);
}

TEST_CASE("hub service: the fleet's statistics come before round 1, without small devices, and are not asked again on resume") {
  testing::temp_dir dir("hub-service-stats");
  const auto& pki = test::test_pki::get();
  const nlohmann::json standardize = {{"inputs", 16}, {"hidden", {32, 32}}, {"outputs", 4}, {"input_normalization", "standardize"}};
  core::input_normalization measured;
  {
    federation f(dir);
    f.start_hub(f.hub_config({{"rounds", 1}, {"model", standardize}}));
    f.start_agent(pki.dev_a, f.data_for("dev-a", 400));
    f.start_agent(pki.dev_b, f.data_for("dev-b", 5));  // fewer than min_stats_examples (10)
    f.run();
    REQUIRE(f.hub().finished());
    CHECK(f.hub_lines_with("device dev-b is not asked for statistics: it holds 5 examples, fewer than min_stats_examples (10)") == 1);
    CHECK(f.hub_lines_with("measuring the fleet's input statistics on 1 device(s)") == 1);
    CHECK(f.hub_lines_with("the fleet's input statistics: {\"devices\":[\"dev-a\"],\"examples\":400") == 1);
    measured = f.hub().engine().normalization();
    REQUIRE(measured.size() == 16);
    // IDX pixels scaled to [0, 1]: every quadrant is bright for a quarter of the examples.
    for (const float m : measured.mean) CHECK((m > 0.1f && m < 0.5f));
    REQUIRE(f.recorded().size() == 1);
    CHECK(f.recorded().front().devices == 2);  // the small device still trains
  }
  federation f(dir);
  f.start_hub(f.hub_config({{"rounds", 2}, {"model", standardize}}));
  CHECK(f.hub().engine().normalization() == measured);  // from the checkpoint
  f.start_agent(pki.dev_a, f.data_for("dev-a", 400));
  f.start_agent(pki.dev_b, f.data_for("dev-b", 5));
  f.run();
  REQUIRE(f.hub().finished());
  CHECK(f.hub_lines_with("measuring the fleet's input statistics") == 0);
  REQUIRE(f.recorded().size() == 1);
  CHECK(f.recorded().front().round == 2);
}

TEST_CASE("hub service: devices score the model after evaluating rounds; an inflated score is left out, a restarted device gets the model again") {
  testing::temp_dir dir("hub-service-eval");
  federation f(dir);
  INFO(f.logs());
  f.start_hub(f.hub_config({{"rounds", 3}, {"eval_every", 1}}));
  const auto& pki = test::test_pki::get();
  edge::agent& real = f.start_agent(pki.dev_a, f.data_for("dev-a", 400), 16u << 20, /*validation_fraction=*/0.2);
  // dev-b holds out 50 examples; after round 1 it claims 500, after round 2 it restarts once before
  // answering, after round 3 it answers honestly.
  testing::scripted_agent_config sc;
  sc.id = "dev-b";
  sc.validation_examples = 50;
  testing::scripted_agent& scripted = f.start_scripted(pki.dev_b, std::move(sc));
  int evaluating = 0;
  bool restarted = false;
  scripted.hooks().evaluate = [&](const testing::assignment& a) -> std::optional<net::msg::evaluation> {
    ++evaluating;
    if (a.assign.round == 2 && !restarted) {
      restarted = true;
      scripted.drop_link(/*forget=*/true);  // as a restarted device: the hub must send the model again
      return std::nullopt;
    }
    const std::uint64_t claimed = a.assign.round == 1 ? 500 : 50;
    return net::msg::evaluation{.round = a.assign.round, .transfer = a.assign.transfer, .examples = claimed, .loss_sum = 10.0, .correct = 40};
  };
  scripted.start();
  f.run();
  REQUIRE(f.hub().finished());
  REQUIRE(f.recorded().size() == 3);
  const auto& r1 = f.recorded()[0];
  REQUIRE(r1.fed.devices.has_value());
  CHECK(*r1.fed.devices == 1);     // dev-a alone: dev-b's 500 are not the 50 it holds out
  CHECK(*r1.fed.examples == 80);   // 20% of dev-a's 400
  CHECK(f.hub_lines_with("device dev-b left out of the evaluation after round 1: it scored 500 examples but holds out 50") == 1);
  for (std::size_t r = 1; r < 3; ++r) {
    CAPTURE(r);
    const auto& m = f.recorded()[r];
    REQUIRE(m.fed.devices.has_value());
    CHECK(*m.fed.devices == 2);
    CHECK(*m.fed.examples == 130);
    CHECK(m.test_accuracy.has_value());  // the hub's own figure beside the devices'
    CHECK(*m.fed.bytes_down >= 2 * core::encoded_bytes(f.hub().engine().full_arch(), core::codec_kind::f32));
  }
  CHECK(restarted);
  CHECK(evaluating == 4);  // rounds 1, 2 (twice: the model came again after the restart), 3
  CHECK(real.stats().evaluations == 3);
  CHECK(scripted.evaluations() == 3);
}

TEST_CASE("hub service: a round's cohort is drawn at random from the ready devices (devices_per_round), not by id") {
  testing::temp_dir dir("hub-service-cohort");
  federation f(dir);
  f.start_hub(f.hub_config({{"rounds", 10}, {"min_devices", 4}, {"max_devices", 4}, {"devices_per_round", 2}, {"eval_every", 10}}));
  const auto& pki = test::test_pki::get();
  std::vector<edge::agent*> agents{&f.start_agent(pki.dev_a, f.data_for("dev-a", 200)), &f.start_agent(pki.dev_b, f.data_for("dev-b", 200))};
  for (const char* id : {"dev-c", "dev-d"}) {
    const crypto::cert_files files{pki.dir / (std::string(id) + ".pem"), pki.dir / (std::string(id) + ".key")};
    if (!std::filesystem::exists(files.cert)) REQUIRE(crypto::issue(pki.ca, {.device_id = id}, files, false).ok());
    agents.push_back(&f.start_agent(files, f.data_for(id, 200)));
  }
  f.run();
  INFO(f.logs());
  REQUIRE(f.hub().finished());
  CHECK(f.hub().failure().empty());
  REQUIRE(f.recorded().size() == 10);
  for (const auto& m : f.recorded()) {
    CHECK(m.devices == 2);
    CHECK(m.ready == 4u);
  }
  // Twenty places over ten rounds; from the CSPRNG, the same two devices every round has odds (1/6)^9.
  std::uint64_t places = 0;
  std::size_t took_part = 0;
  for (const auto* a : agents) {
    places += a->stats().accepted;
    took_part += a->stats().accepted > 0 ? 1 : 0;
  }
  CHECK(places == 20);
  CHECK(took_part >= 3);
}

TEST_CASE("hub service on two threads: a device's link that broke unnoticed is cut when it reconnects; the new session takes over its download") {
  // The first connection freezes mid-round (its io_context stops: no byte read, no PONG, the socket left
  // open), as a link that died without a FIN. The device comes back on a second connection: the hub
  // probes the first, cuts it, and only then moves the round's download over (its transfer was the
  // first session's, on another thread).
  testing::temp_dir dir("hub-service-handover");
  federation f(dir);
  f.start_hub(f.hub_config({{"rounds", 2}, {"min_devices", 1}, {"max_devices", 1}, {"device_wait_s", 0.2}, {"round_deadline_s", 30}}));
  const auto& pki = test::test_pki::get();
  const net::client_config dial{.host = "127.0.0.1", .port = f.port(), .backoff_initial = 20ms, .backoff_max = 200ms, .jitter = 0, .seed = 1};
  boost::asio::io_context frozen_io;
  const crypto::tls_context tls = pki.agent_tls(pki.dev_a, "127.0.0.1");
  testing::scripted_agent first(frozen_io, tls, {.id = "dev-a", .client = dial});
  std::atomic<bool> assigned{false}, frozen{false};
  first.hooks().on_assign = [&](const net::msg::assign&) { assigned = true; };
  first.hold_after(0);  // sits on round 1's subnet
  first.start();
  std::jthread runner([&] {
    while (!assigned) frozen_io.run_for(10ms);
    frozen_io.run_for(50ms);
    frozen = true;  // from now on nothing of `first` runs
  });
  auto& second = f.start_scripted(pki.dev_a, {.id = "dev-a"});
  boost::asio::steady_timer poll(f.io());
  std::function<void()> watch = [&] {
    poll.expires_after(20ms);
    poll.async_wait([&](const boost::system::error_code& ec) {
      if (ec) return;
      if (frozen) second.start();
      else watch();
    });
  };
  watch();
  f.run();
  runner.join();
  INFO(f.logs());
  REQUIRE(f.hub().finished());
  CHECK(f.hub_lines_with("device dev-a: its connection from 127.0.0.1:") == 1);
  CHECK(f.hub_lines_with("did not answer: cut, the one from 127.0.0.1:") == 1);
  REQUIRE(f.recorded().size() == 2);
  for (const auto& m : f.recorded()) {
    CHECK(m.devices == 1);
    CHECK(m.stragglers == 0);
  }
  CHECK(first.welcomes() == 1);
  CHECK(second.welcomes() == 1);
  REQUIRE(second.verdicts().size() == 2);
  for (const auto& v : second.verdicts()) CHECK(v.accepted);
  CHECK(second.problems().empty());
}
