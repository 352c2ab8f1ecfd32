// bench_secagg — what secure aggregation costs, on Fashion-MNIST 784-512-512-10 with 12 devices and
// replication 3 (four IST groups of three devices):
//   1. accuracy: tessera-sim with and without it, on the same plan (4 groups), --rounds rounds of 100
//      local steps (cosine learning rate from 0.05, as bench/ist_quality);
//   2. CPU time per device of each protocol step, with real certificates, for the subnets the engine
//      plans: keys (two X25519 pairs and a P-256 signature), shares (11 certificates and signatures
//      checked, 11 key agreements, Shamir shares, AES-256-GCM boxes), masking (fixed-point encoding,
//      ChaCha20 mask expansion: its self mask and one pairwise mask per device sharing a segment),
//      unmasking; and the hub's unmasking of the sums;
//   3. bytes per device per round: the subnet both ways and every protocol message (encoded frames);
//   4. real rounds (hub and 12 agents in this process, mutual TLS on 127.0.0.1) on loopback and behind
//      emulated links of --rate-kbit / --latency-ms, with and without; and the time model's figure:
//        plain:  2·latency + (down + up)·8/rate + compute
//        secure: plain + the unmasking's round trip (2·latency + its bytes) + the masking's CPU; the
//                keys and shares steps overlap the download (they add only what exceeds it)
//   bench_secagg [--rounds 200] [--real-rounds 3] [--rate-kbit 1000] [--latency-ms 100] [--skip-accuracy] [--skip-real]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/cpu_time.hpp"
#include "common/fleet_run.hpp"
#include "common/options.hpp"
#include "tessera/core/base/rng.hpp"
#include "tessera/core/io/file_io.hpp"
#include "tessera/crypto/pki.hpp"
#include "tessera/net/messages.hpp"
#include "tessera/rounds/engine.hpp"
#include "tessera/rounds/sim/shards.hpp"
#include "tessera/rounds/sim/simulation.hpp"

namespace {

using namespace tessera;
using bench::add_cpu_time;
using bench::die;
using bench::must;

constexpr std::size_t k_devices = 12;

struct options {
  std::int64_t rounds = 200;
  std::int64_t real_rounds = 3;
  double rate_kbit = 1000;
  double latency_ms = 100;
  bool accuracy = true, real = true;
};

// The run's fields, shared by the simulator and the hub.
nlohmann::json run_fields(bool secure, std::int64_t rounds) {
  nlohmann::json j = {{"model", {{"inputs", 784}, {"hidden", {512, 512}}, {"outputs", 10}}},
                      {"strategy", "ist"}, {"rounds", rounds}, {"local_steps", 100}, {"batch", 32}, {"lr", 0.05},
                      {"lr_schedule", "cosine"}, {"momentum", 0.9}, {"seed", 1}};
  if (secure) j["secure_aggregation"] = {{"replication", 3}};
  else j["groups"] = 4;
  return j;
}

// ---- 1. accuracy ----

struct accuracy_result {
  double final_accuracy = 0, best_accuracy = 0, seconds_per_round = 0;
  std::uint64_t clipped = 0;
};

accuracy_result accuracy(const options& o, bool secure, const core::memory_table& train, core::memory_table& test) {
  nlohmann::json j = run_fields(secure, o.rounds);
  j.update({{"devices", k_devices}, {"eval_every", std::max<std::int64_t>(1, o.rounds / 10)}, {"data", {{"validation_fraction", 0}}}});
  auto cfg = must(sim::parse_sim_config(j, "bench_secagg"));
  auto s = must(sim::simulation::create(cfg, train, &test));
  accuracy_result r;
  double seconds = 0;
  while (!s->done()) {
    const auto m = must(s->run_round());
    seconds += m.seconds;
    r.clipped += s->engine().last_secure().clipped;  // the simulator's own devices: the hub never learns it
    if (m.test_accuracy) {
      r.final_accuracy = *m.test_accuracy;
      r.best_accuracy = std::max(r.best_accuracy, *m.test_accuracy);
    }
  }
  r.seconds_per_round = seconds / static_cast<double>(o.rounds);
  std::printf("  %-6s final %.2f%%, best %.2f%%, %llu values clipped in all, %.2f s/round simulated\n", secure ? "secure" : "plain",
              100 * r.final_accuracy, 100 * r.best_accuracy, static_cast<unsigned long long>(r.clipped), r.seconds_per_round);
  std::fflush(stdout);
  return r;
}

// ---- 2 and 3. the protocol's CPU and bytes ----

struct protocol_costs {
  double keys = 0, shares = 0, mask = 0, unmask = 0, hub_finish = 0;  // seconds: per device (mean), the hub's once
  double keys_bytes = 0, roster_bytes = 0, shares_bytes = 0, inbox_bytes = 0, unmask_bytes = 0, reply_bytes = 0;  // per device
  double subnet_bytes = 0, masked_bytes = 0;  // per device: the f32 subnet, the masked upload
};

std::string text_of(const std::filesystem::path& p) {
  const auto b = must(core::read_file_bounded(p, 1u << 16));
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

protocol_costs protocol(const std::filesystem::path& work) {
  // The engine's plan for 12 devices: the segments and each device's part.
  const nlohmann::json fields = run_fields(true, 1);  // the reader keeps a reference
  core::config_reader reader(fields, "bench");
  rounds::run_config rc;
  must(rounds::read_run_fields(reader, rc, false));
  must(reader.finish());
  std::vector<float> params(core::param_count(rc.model.full_arch()));
  core::initialize(rc.model, params);
  rounds::engine e(rc, params, 0);
  std::vector<rounds::device_offer> offers;
  for (std::size_t d = 0; d < k_devices; ++d)
    offers.push_back({.id = "dev-" + std::to_string(d), .budget_bytes = 256u << 20, .examples = 5000, .codecs = {core::codec_kind::f32},
                      .capacity = 0, .validation_examples = 0});
  (void)must(e.begin_round(offers));
  const crypto::secagg_params p = e.secagg_params();
  const auto as = e.assignments();
  const std::string ca = text_of(work / "pki" / "ca.pem");

  protocol_costs c;
  const auto per_device = [](double total) { return total / static_cast<double>(k_devices); };
  const auto frame_bytes = [](const net::message& m) { return static_cast<double>(net::encode_message(m).size()); };
  crypto::secagg_server server(p);
  std::vector<crypto::secagg_client> clients;
  std::vector<crypto::signing_key> keys;
  for (const auto& a : as) {
    const auto pki = work / "pki";
    const auto& key = keys.emplace_back(must(crypto::signing_key::load(pki / (a.device + ".key"))));
    const std::string cert = text_of(pki / (a.device + ".pem"));
    clients.push_back(must(add_cpu_time(c.keys, [&] { return crypto::secagg_client::create(a.device, cert, key, ca, p, {.segments = a.segments, .model = {}}); })));
    c.keys_bytes += frame_bytes(net::msg::secagg_keys{.round = 1, .keys = clients.back().keys()});
    must(server.add_keys(clients.back().keys(), a.segments));
  }
  const auto roster = must(server.roster());
  c.roster_bytes = frame_bytes(net::msg::secagg_roster{.round = 1, .roster = roster});
  for (std::size_t d = 0; d < k_devices; ++d) {
    auto boxes = must(add_cpu_time(c.shares, [&] { return clients[d].share_keys(roster); }));
    c.shares_bytes += frame_bytes(net::msg::secagg_shares{.round = 1, .boxes = boxes});
    must(server.add_boxes(as[d].device, std::move(boxes)));
  }
  core::rng r(3);
  for (std::size_t d = 0; d < k_devices; ++d) {
    const auto& a = as[d];
    std::vector<float> received(core::param_count(a.sub.arch)), trained(received.size());
    core::gather(e.full(), a.sub, params, received);
    for (std::size_t i = 0; i < trained.size(); ++i) trained[i] = received[i] + 0.01f * static_cast<float>(r.uniform_double() - 0.5);
    const auto input = must(crypto::secagg_weighted_input(received, trained, 1.0, p, a.segments));
    const auto inbox = server.inbox(a.device);
    c.inbox_bytes += frame_bytes(net::msg::secagg_inbox{.round = 1, .boxes = inbox});
    auto masked = must(add_cpu_time(c.mask, [&] { return clients[d].mask(inbox, input, a.rounding_key); }));
    c.masked_bytes += static_cast<double>(a.upload_bytes);
    c.subnet_bytes += static_cast<double>(a.blob_bytes);
    auto pledge = must(add_cpu_time(c.mask, [&] { return clients[d].masked_with(keys[d]); }));
    c.reply_bytes += frame_bytes(net::msg::secagg_masked_with{.round = 1, .pledge = pledge});  // counted with the replies
    must(server.add_masked_with(std::move(pledge)));
    must(server.add_masked(std::move(masked)));
  }
  // The consistency check: each device signs the survivor set (its CPU counts as unmasking's).
  (void)server.check_request();
  c.unmask_bytes = 0;
  for (std::size_t d = 0; d < k_devices; ++d) {
    const auto asked = server.check_request_for(as[d].device);
    c.unmask_bytes += frame_bytes(net::msg::secagg_check{.round = 1, .request = asked}) / static_cast<double>(k_devices);
    auto sig = must(add_cpu_time(c.unmask, [&] { return clients[d].check(asked, keys[d]); }));
    c.reply_bytes += frame_bytes(net::msg::secagg_check_reply{.round = 1, .signature = sig});
    must(server.add_signature(std::move(sig)));
  }
  const auto request = server.unmask_request();
  c.unmask_bytes += frame_bytes(net::msg::secagg_unmask{.round = 1, .request = request});
  for (std::size_t d = 0; d < k_devices; ++d) {
    auto reply = must(add_cpu_time(c.unmask, [&] { return clients[d].unmask(request); }));
    c.reply_bytes += frame_bytes(net::msg::secagg_unmask_reply{.round = 1, .reply = reply});
    must(server.add_reply(std::move(reply)));
  }
  const auto sums = must(add_cpu_time(c.hub_finish, [&] { return server.finish(); }));
  for (const auto& s : sums)
    if (!s.released) die("a segment was not released");
  c.keys = per_device(c.keys);
  c.shares = per_device(c.shares);
  c.mask = per_device(c.mask);
  c.unmask = per_device(c.unmask);
  c.keys_bytes = per_device(c.keys_bytes);
  c.shares_bytes = per_device(c.shares_bytes);
  c.inbox_bytes = per_device(c.inbox_bytes);
  c.reply_bytes = per_device(c.reply_bytes);
  c.masked_bytes = per_device(c.masked_bytes);
  c.subnet_bytes = per_device(c.subnet_bytes);
  return c;
}

// ---- 4. real rounds ----

struct real_result {
  double seconds = 0;  // mean per round
  double down = 0, up = 0;  // blob bytes per device per round
};

real_result real_rounds(const options& o, bool secure, bool emulated, const std::filesystem::path& work, const std::vector<std::string>& shards) {
  nlohmann::json hub = run_fields(secure, o.real_rounds);
  hub.update({{"device_wait_s", 120}, {"round_deadline_s", 3600}, {"secure_step_s", 600}, {"heartbeat_s", 10}, {"idle_timeout_s", 120},
              {"chunk_kib", 64}, {"window_kib", 512}, {"eval_every", 1000000}});
  bench::fleet_options fo{.link = std::nullopt, .agent_extra = {{"memory_budget_mib", 256}, {"heartbeat_s", 10}, {"idle_timeout_s", 120},
                                                                 {"chunk_kib", 64}, {"window_kib", 512}},
                          .limit = std::chrono::minutes(30)};
  if (emulated)
    fo.link = net::link_profile{.rate_bits_per_s = static_cast<std::uint64_t>(o.rate_kbit * 1000.0),
                                .latency = std::chrono::milliseconds(static_cast<std::int64_t>(o.latency_ms))};
  const auto rounds = bench::run_fleet(hub, work, shards, fo);
  real_result r;
  for (const auto& m : rounds) {
    r.seconds += m.seconds;
    r.down += static_cast<double>(m.bytes_down) / static_cast<double>(m.devices);
    r.up += static_cast<double>(m.bytes_up) / static_cast<double>(m.devices);
  }
  const auto n = static_cast<double>(std::max<std::size_t>(1, rounds.size()));
  r.seconds /= n;
  r.down /= n;
  r.up /= n;
  std::printf("  %-6s %-9s %.2f s/round (mean of %zu), blobs %.1f kB down, %.1f kB up per device\n", secure ? "secure" : "plain",
              emulated ? "emulated" : "loopback", r.seconds, rounds.size(), r.down / 1e3, r.up / 1e3);
  std::fflush(stdout);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  bench::parse_options(argc, argv, "bench/secagg/secagg.cpp",
                       {{"--rounds", o.rounds}, {"--real-rounds", o.real_rounds}, {"--rate-kbit", o.rate_kbit},
                        {"--latency-ms", o.latency_ms}, {"--skip-accuracy", o.accuracy, false}, {"--skip-real", o.real, false}});
  std::printf("bench_secagg: Fashion-MNIST 784-512-512-10, %zu devices, IST, replication 3 (4 groups)\n", k_devices);
  const auto work = bench::fleet_dir("tessera-bench-secagg");
  bench::make_pki(work, k_devices);

  double compute_s = 0;
  if (o.accuracy) {
    std::printf("\n1. accuracy after %lld rounds of 100 local steps (tessera-sim, the same plan)\n", static_cast<long long>(o.rounds));
    auto loaded = must(sim::load_sim_data(must(sim::parse_sim_config(nlohmann::json::object(), "defaults"))));
    const auto plain = accuracy(o, false, *loaded.train, *loaded.test);
    const auto secure = accuracy(o, true, *loaded.train, *loaded.test);
    std::printf("  difference (secure - plain): final %+.2f points, best %+.2f points\n", 100 * (secure.final_accuracy - plain.final_accuracy),
                100 * (secure.best_accuracy - plain.best_accuracy));
    compute_s = plain.seconds_per_round / static_cast<double>(k_devices);
  }

  const auto c = protocol(work);
  std::printf("\n2. CPU per device and round (this machine, one thread)\n");
  std::printf("  keys %.2f ms, shares %.2f ms, masking %.2f ms, unmasking %.2f ms; the hub's unmasking of all sums %.2f ms\n",
              1e3 * c.keys, 1e3 * c.shares, 1e3 * c.mask, 1e3 * c.unmask, 1e3 * c.hub_finish);
  const double control = c.keys_bytes + c.roster_bytes + c.shares_bytes + c.inbox_bytes + c.unmask_bytes + c.reply_bytes;
  std::printf("\n3. bytes per device and round\n");
  std::printf("  subnet down %.1f kB; upload: f32 %.1f kB, masked %.1f kB\n", c.subnet_bytes / 1e3, c.subnet_bytes / 1e3, c.masked_bytes / 1e3);
  std::printf("  protocol frames: keys %.0f B, roster %.0f B, shares %.0f B, inbox %.0f B, unmask %.0f B, reply %.0f B: %.1f kB in all (%.1f%% of the round's blobs)\n",
              c.keys_bytes, c.roster_bytes, c.shares_bytes, c.inbox_bytes, c.unmask_bytes, c.reply_bytes, control / 1e3,
              100.0 * control / (c.subnet_bytes + c.masked_bytes));

  const double rate = o.rate_kbit * 1000.0, latency = o.latency_ms / 1000.0;
  const double plain_model = 2 * latency + (2 * c.subnet_bytes) * 8 / rate + compute_s;
  const double download = latency + c.subnet_bytes * 8 / rate;
  const double before = 4 * latency + (c.keys_bytes + c.roster_bytes + c.shares_bytes + c.inbox_bytes) * 8 / rate;
  const double secure_model = 2 * latency + (c.subnet_bytes + c.masked_bytes) * 8 / rate + compute_s + c.mask +
                              std::max(0.0, before - download) + 2 * latency + (c.unmask_bytes + c.reply_bytes) * 8 / rate;
  std::printf("\n4. a round at %.0f kbit/s, %.0f ms one way: modelled %.2f s plain, %.2f s secure (+%.1f%%)%s\n", o.rate_kbit, o.latency_ms,
              plain_model, secure_model, 100 * (secure_model / plain_model - 1), o.accuracy ? "" : " (compute not measured: --skip-accuracy)");
  if (o.real) {
    sim::sim_config shard_cfg = must(sim::parse_sim_config(
        nlohmann::json{{"devices", k_devices}, {"seed", 1}, {"data", {{"validation_fraction", 0}}}}, "bench_secagg shards"));
    // No validation split on the devices: the last round would add the evaluation on the devices (the
    // whole model down to each) to the round's time.
    const auto shards = must(sim::write_shards(shard_cfg, (work / "shards").string()));
    std::printf("  real rounds, hub and %zu agents in this process (2 cores shared by all of them):\n", k_devices);
    for (const bool emulated : {false, true}) {
      const auto p = real_rounds(o, false, emulated, work, shards);
      const auto s = real_rounds(o, true, emulated, work, shards);
      std::printf("  %s: secure/plain %.2fx\n", emulated ? "emulated links" : "loopback", s.seconds / p.seconds);
    }
  }
  std::filesystem::remove_all(work);
  return 0;
}
