// bench_slow_link — IST against FedAvg when every device sits behind a slow link: time and bytes to a
// target test accuracy on Fashion-MNIST, and the accuracy each reaches in a fixed time budget.
//
// Two parts.
//  1. Curves. For every method (ist, fedavg), codec (f32, q8) and local-steps setting of the grid,
//     tessera-sim's round logic (sim::simulation, the very computation of a real fleet: see the
//     equivalence tests) runs 8 devices round after round; after each round the full model is
//     evaluated on the 10,000 test images. Each round's wall time on the fleet is modelled as
//       latency + bytes_down·8/rate + compute + bytes_up·8/rate + latency
//     with the link's rate and one-way latency, the blob sizes of that round, and `compute` the
//     measured training time of one device's subnet on this machine (one core per device). The
//     method's best local-steps setting (least time to target; if none reaches it, the highest
//     accuracy in the budget) is reported, so neither method is a strawman.
//  2. Validation. The real thing for a few rounds of every (method, codec) of the grid's first
//     setting: tessera-hub's service and 8 tessera-edge agents in this process, each agent behind its
//     own net::link_emulator of that rate and latency, over mutual TLS; the measured seconds per round
//     against the model's. (8 agents share this machine's cores here, so their compute is slower than
//     on a fleet; the comparison prints both.)
//
//   bench_slow_link [--model small|wide] [--rate-kbit 1000] [--latency-ms 100] [--budget-min M]
//                   [--target 0.84] [--steps 50,200] [--max-rounds N] [--validate-rounds K] [--csv FILE]
//                   [--methods ist,fedavg] [--codecs f32,q8] [--horizon 3] [--ist JSON]
//   --ist '{"repartition_every": 20}': run-configuration fields merged into the IST runs' (the curves;
//   the validation's real rounds keep the defaults, whose round time these fields do not change).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include <boost/asio/io_context.hpp>

#include "common/fleet_run.hpp"
#include "common/link_time.hpp"
#include "common/options.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/crypto/pki.hpp"
#include "tessera/edge/agent.hpp"
#include "tessera/hub/hub.hpp"
#include "tessera/net/link_emulator.hpp"
#include "tessera/rounds/sim/shards.hpp"
#include "tessera/rounds/sim/simulation.hpp"

namespace {

using namespace tessera;
using clock_type = std::chrono::steady_clock;

struct options {
  std::string model = "small";
  double rate_kbit = 1000;
  double latency_ms = 100;
  double budget_min = 0;  // 0: per model default
  double target = 0;      // 0: per model default
  std::vector<std::int64_t> steps{50, 200};
  std::int64_t max_rounds = 2000;
  std::int64_t validate_rounds = 2;
  double horizon = 3;  // a run that has not reached the target stops at horizon × budget
  std::vector<std::string> methods{"ist", "fedavg"};
  std::vector<std::string> codecs{"f32", "q8"};
  std::string csv;
  nlohmann::json ist = nlohmann::json::object();  // merged into the IST runs' configuration
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t p = 0; p <= s.size();) {
    const auto q = std::min(s.find(',', p), s.size());
    out.push_back(s.substr(p, q - p));
    p = q + 1;
  }
  return out;
}

using bench::die;
using bench::must;

struct point {
  std::int64_t round;
  double seconds;        // modelled fleet wall time so far
  std::uint64_t bytes;   // all devices, both ways, so far
  double accuracy;
};

struct run_result {
  std::string method, codec;
  std::int64_t steps = 0;
  double compute_s = 0;             // one device's training per round
  std::uint64_t device_bytes = 0;   // one device, one way, one round
  std::vector<point> curve;
  std::optional<point> at_target;   // first point at or above the target
  double accuracy_at_budget = 0;
};

sim::sim_config sim_config_for(const options& o, const std::string& method, const std::string& codec, std::int64_t steps) {
  nlohmann::json j = {{"model", {{"inputs", 784}, {"hidden", o.model == "wide" ? nlohmann::json{2048, 2048} : nlohmann::json{512, 512}},
                                 {"outputs", 10}}},
                      {"strategy", method}, {"devices", 8}, {"rounds", o.max_rounds}, {"local_steps", steps},
                      {"batch", 32}, {"lr", 0.05}, {"momentum", 0.9}, {"codec", codec}, {"seed", 1},
                      // Every device trains on its whole shard (its agents too: the shards say so), as
                      // when the recorded figures were measured.
                      {"data", {{"validation_fraction", 0}}}};
  if (method == "ist") j.update(o.ist);
  return must(sim::parse_sim_config(j, "bench_slow_link"));
}

run_result curve(const options& o, const std::string& method, const std::string& codec, std::int64_t steps,
                 const core::memory_table& train, core::memory_table& test, double budget_s) {
  run_result r;
  r.method = method;
  r.codec = codec;
  r.steps = steps;
  const auto cfg = sim_config_for(o, method, codec, steps);
  auto sim = must(sim::simulation::create(cfg, train, nullptr));
  const core::mlp_arch full = cfg.model.full_arch();
  const bench::link_time link{.rate_kbit = o.rate_kbit, .latency_ms = o.latency_ms};
  double t = 0;
  std::uint64_t bytes = 0;
  std::vector<double> computes;
  while (!sim->done()) {
    auto m = must(sim->run_round());
    const double compute = m.seconds / static_cast<double>(m.devices);  // devices train in turn here
    computes.push_back(compute);
    const auto per_device = m.bytes_down / m.devices;
    r.device_bytes = per_device;
    t += link.seconds(per_device, per_device) + compute;
    bytes += m.bytes_down + m.bytes_up;
    if (t > budget_s && r.at_target) break;
    if (t > budget_s * o.horizon) break;  // far past the budget without reaching the target
    // Every round until the target is reached (its time is the figure); after that every 10th round
    // and the last one within the budget, since evaluating the wide model costs more than its IST round.
    const bool last_in_budget = t <= budget_s && t + (t / static_cast<double>(m.round)) > budget_s;
    if (r.at_target && m.round % 10 != 0 && !last_in_budget) continue;
    core::network net(full);
    const auto ev = must(core::evaluate(net, sim->params(), test));
    const point p{m.round, t, bytes, ev.accuracy};
    r.curve.push_back(p);
    if (t <= budget_s) r.accuracy_at_budget = std::max(r.accuracy_at_budget, ev.accuracy);
    if (!r.at_target && ev.accuracy >= o.target) r.at_target = p;
  }
  std::sort(computes.begin(), computes.end());
  r.compute_s = computes[computes.size() / 2];
  std::printf("  %-6s %-3s steps %4lld: %4zu rounds simulated, %7.1f kB/device/way/round, compute %.3f s/round; "
              "target %s; best in budget %.2f%%\n",
              method.c_str(), codec.c_str(), static_cast<long long>(steps), computes.size(),
              static_cast<double>(r.device_bytes) / 1e3, r.compute_s,
              r.at_target ? (std::to_string(static_cast<int>(r.at_target->seconds)) + " s, round " + std::to_string(r.at_target->round)).c_str()
                          : "not reached",
              100.0 * r.accuracy_at_budget);
  std::fflush(stdout);
  return r;
}

// Part 2: real rounds over emulated links. Returns the measured seconds per round (hub's figure).
std::vector<double> validate(const options& o, const std::string& method, const std::string& codec, std::int64_t steps,
                             const std::filesystem::path& work, const std::vector<std::string>& shards) {
  const nlohmann::json hc = {{"model", {{"hidden", o.model == "wide" ? nlohmann::json{2048, 2048} : nlohmann::json{512, 512}}}},
                             {"strategy", method}, {"codec", codec}, {"rounds", o.validate_rounds}, {"device_wait_s", 120},
                             {"round_deadline_s", 3600}, {"local_steps", steps}, {"batch", 32}, {"lr", 0.05}, {"heartbeat_s", 10},
                             {"idle_timeout_s", 120}, {"chunk_kib", 64}, {"window_kib", 512}};
  const net::link_profile profile{.rate_bits_per_s = static_cast<std::uint64_t>(o.rate_kbit * 1000.0),
                                  .latency = std::chrono::milliseconds(static_cast<std::int64_t>(o.latency_ms))};
  const nlohmann::json agent_extra = {{"memory_budget_mib", 256}, {"heartbeat_s", 10}, {"idle_timeout_s", 120},
                                      {"chunk_kib", 64}, {"window_kib", 512}, {"codecs", {"f32", "q8"}}};
  std::vector<double> seconds;
  for (const auto& m : bench::run_fleet(hc, work, shards, {.link = profile, .agent_extra = agent_extra, .limit = std::chrono::minutes(30)}))
    seconds.push_back(m.seconds);
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  bench::parse_options(argc, argv, "bench/slow_link/slow_link.cpp",
                       {{"--model", o.model}, {"--rate-kbit", o.rate_kbit}, {"--latency-ms", o.latency_ms}, {"--budget-min", o.budget_min},
                        {"--target", o.target}, {"--max-rounds", o.max_rounds}, {"--validate-rounds", o.validate_rounds},
                        {"--csv", o.csv}, {"--horizon", o.horizon},
                        {"--methods", [&](const std::string& v) { o.methods = split(v); }},
                        {"--codecs", [&](const std::string& v) { o.codecs = split(v); }},
                        {"--ist", [&](const std::string& v) { o.ist = bench::json_object_option("--ist", v); }},
                        {"--steps", [&](const std::string& v) {
                           o.steps.clear();
                           for (const auto& s : split(v)) o.steps.push_back(bench::option::whole_number("--steps", s));
                         }}});
  if (o.model != "small" && o.model != "wide") die("--model small|wide");
  if (o.target == 0) o.target = o.model == "wide" ? 0.86 : 0.84;
  if (o.budget_min == 0) o.budget_min = o.model == "wide" ? 60 : 20;
  const double budget_s = o.budget_min * 60.0;

  std::printf("bench_slow_link: model 784-%s-10, 8 devices, each behind %.0f kbit/s and %.0f ms; target %.0f%%, budget %.0f min; "
              "local steps {",
              o.model == "wide" ? "2048-2048" : "512-512", o.rate_kbit, o.latency_ms, 100 * o.target, o.budget_min);
  for (std::size_t i = 0; i < o.steps.size(); ++i) std::printf("%s%lld", i ? "," : "", static_cast<long long>(o.steps[i]));
  std::printf("}%s%s\n", o.ist.empty() ? "" : "; IST with ", o.ist.empty() ? "" : o.ist.dump().c_str());
  std::fflush(stdout);

  auto loaded = must(sim::load_sim_data(must(sim::parse_sim_config(nlohmann::json::object(), "defaults"))));
  std::vector<run_result> runs;
  for (const auto& method : o.methods)
    for (const auto& codec : o.codecs)
      for (auto s : o.steps) runs.push_back(curve(o, method, codec, s, *loaded.train, *loaded.test, budget_s));

  if (!o.csv.empty()) {
    std::ofstream csv(o.csv);
    csv << "model,method,codec,local_steps,round,seconds,bytes,accuracy\n";
    for (const auto& r : runs)
      for (const auto& p : r.curve)
        csv << o.model << ',' << r.method << ',' << r.codec << ',' << r.steps << ',' << p.round << ',' << p.seconds << ','
            << p.bytes << ',' << p.accuracy << '\n';
  }

  // The best setting per (method, codec): least time to target, else the best accuracy in the budget.
  std::map<std::string, const run_result*> best;
  for (const auto& r : runs) {
    const std::string key = r.method + " " + r.codec;
    const run_result*& b = best[key];
    auto better = [&](const run_result& x, const run_result& y) {
      if (x.at_target && y.at_target) return x.at_target->seconds < y.at_target->seconds;
      if (x.at_target.has_value() != y.at_target.has_value()) return x.at_target.has_value();
      return x.accuracy_at_budget > y.accuracy_at_budget;
    };
    if (b == nullptr || better(r, *b)) b = &r;
  }
  std::printf("\n| method | codec | best local steps | time to %.0f%% | bytes to %.0f%% (all devices) | accuracy in %.0f min |\n"
              "|---|---|---|---|---|---|\n",
              100 * o.target, 100 * o.target, o.budget_min);
  for (const auto& [key, r] : best) {
    char time[32] = "not reached", bytes[32] = "-";
    if (r->at_target) {
      std::snprintf(time, sizeof time, "%.1f min", r->at_target->seconds / 60.0);
      std::snprintf(bytes, sizeof bytes, "%.1f MB", static_cast<double>(r->at_target->bytes) / 1e6);
    }
    std::printf("| %s | %s | %lld | %s | %s | %.2f%% |\n", r->method.c_str(), r->codec.c_str(), static_cast<long long>(r->steps), time,
                bytes, 100.0 * r->accuracy_at_budget);
  }
  for (const std::string codec : {"f32", "q8"}) {
    const auto* i = best["ist " + codec];
    const auto* f = best["fedavg " + codec];
    if (i && f && i->at_target && f->at_target)
      std::printf("%s: IST reaches %.0f%% %.2fx sooner than FedAvg, with %.2fx fewer bytes\n", codec.c_str(), 100 * o.target,
                  f->at_target->seconds / i->at_target->seconds,
                  static_cast<double>(f->at_target->bytes) / static_cast<double>(i->at_target->bytes));
  }
  std::fflush(stdout);

  if (o.validate_rounds > 0) {
    std::printf("\nvalidation: %lld real rounds over emulated links (hub + 8 agents in this process, mutual TLS)\n",
                static_cast<long long>(o.validate_rounds));
    const auto work = bench::fleet_dir("tessera-slow-link");
    bench::make_pki(work, 8);
    auto shard_cfg = sim_config_for(o, "ist", "f32", o.steps.front());
    const auto shards = must(sim::write_shards(shard_cfg, (work / "shards").string()));
    for (const std::string method : {"ist", "fedavg"})
      for (const std::string codec : {"f32", "q8"}) {
        const run_result* model = nullptr;
        for (const auto& r : runs)
          if (r.method == method && r.codec == codec && r.steps == o.steps.front()) model = &r;
        if (model == nullptr) continue;  // not among this run's --methods/--codecs
        const auto measured = validate(o, method, codec, o.steps.front(), work, shards);
        const double predicted =
            bench::link_time{.rate_kbit = o.rate_kbit, .latency_ms = o.latency_ms}.seconds(model->device_bytes, model->device_bytes);
        double mean = 0;
        for (double s : measured) mean += s;
        mean /= static_cast<double>(std::max<std::size_t>(1, measured.size()));
        std::printf("  %-6s %-3s steps %lld: measured %.1f s/round over the emulated links; model: %.1f s of link + %.2f s of "
                    "one device's compute = %.1f s\n",
                    method.c_str(), codec.c_str(), static_cast<long long>(o.steps.front()), mean, predicted, model->compute_s,
                    predicted + model->compute_s);
        std::fflush(stdout);
      }
    std::filesystem::remove_all(work);
  }
  return 0;
}
