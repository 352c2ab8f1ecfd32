// bench_dp — what client-level differential privacy costs in accuracy (tessera-sim): Fashion-MNIST
// 784-64-10, --devices devices holding 60 training examples each, each round sampling every device with
// probability --q, changes clipped to --clip, --rounds rounds. For each target ε ∈ {≈∞, 8, 4, 2}
// (δ 1e-5) the noise multiplier σ is the smallest that keeps the --rounds rounds within it (≈∞:
// σ = 0.001, sampling and clipping without meaningful noise), for FedAvg and IST (--ist-groups
// groups), with the noise added by the hub and — with secure aggregation — by the devices (Skellam
// shares, each sum's threshold t = 70% of its expected contributors, the shares sized for 70% of the
// devices assigned to it (dp.expected_dropout 0.3) and never for fewer than t, so a sum carries about
// 1/0.7 of the variance). Prints the ε spent, the test accuracy at the end and the best seen, and the
// simulator's peak memory.
// With --noise self the devices add the noise and sample themselves (dp.self_sampling): every device
// takes part in every round, one not drawn with its noise alone, so ε against the hub is the amplified
// one too; the cost is every device's traffic and work each round, and the noise of all of them.
// --observer hub sizes σ for ε against the hub instead of the model's users (the devices' noise: the
// hub knows who it sampled, so only self-sampling amplifies against it).
//   bench_dp [--devices 1000] [--q 0.05] [--clip 1.0] [--rounds 400] [--ist-groups 2] [--noise hub|devices|self|both]
//            [--observer users|hub]
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/fleet_run.hpp"
#include "common/options.hpp"
#include "tessera/core/privacy/rdp.hpp"
#include "tessera/rounds/sim/shards.hpp"
#include "tessera/rounds/sim/simulation.hpp"

namespace {

using namespace tessera;
using bench::die;
using bench::must;

struct options {
  std::size_t devices = 1000;
  double q = 0.05, clip = 1.0;
  std::int64_t rounds = 400;
  std::size_t ist_groups = 2;
  std::string noise = "both";
  std::string observer = "users";
};

// The run's configuration, σ left at 1.
enum class noise_mode { hub, devices, self };

nlohmann::json config_of(const options& o, const std::string& strategy, noise_mode mode) {
  const bool devices_noise = mode != noise_mode::hub;
  nlohmann::json j = {{"model", {{"inputs", 784}, {"hidden", {64}}, {"outputs", 10}}},
                      {"strategy", strategy},
                      {"devices", o.devices},
                      {"rounds", o.rounds},
                      {"local_steps", 10},
                      {"batch", 16},
                      {"lr", 0.1},
                      {"momentum", 0.0},
                      {"seed", 3},
                      {"eval_every", 20},
                      {"data", {{"validation_fraction", 0}}},
                      {"dp", {{"sample_rate", o.q}, {"noise_multiplier", 1.0}, {"clip", o.clip}, {"delta", 1e-5}, {"publish_exact", true}}}};
  const std::size_t groups = strategy == "ist" ? o.ist_groups : 1;
  if (strategy == "ist") j["groups"] = groups;
  if (devices_noise) {
    const double expected = o.q * static_cast<double>(o.devices) / static_cast<double>(groups);
    const auto t = std::clamp<std::int64_t>(static_cast<std::int64_t>(0.7 * expected), 2, 64);
    j["secure_aggregation"] = {{"replication", t}, {"threshold", t}};
    if (mode == noise_mode::self) j["dp"]["self_sampling"] = true;
  }
  return j;
}

// The smallest σ (to 0.1%) whose --rounds rounds stay within ε = target at δ 1e-5: the sampled
// discrete Gaussian's for the hub's noise, the sampled Skellam's (its ring from the same
// configuration) for the devices'.
double sigma_for(const options& o, const std::string& strategy, noise_mode mode, double target) {
  const bool devices_noise = mode != noise_mode::hub;
  nlohmann::json j = config_of(o, strategy, mode);
  const auto spent = [&](double sigma) {
    if (!devices_noise) return core::rdp_accountant().epsilon_after(o.q, core::discrete_gaussian_mechanism{.sigma = sigma}, o.rounds, 1e-5).epsilon;
    j["dp"]["noise_multiplier"] = sigma;
    const auto cfg = must(sim::parse_sim_config(j, "bench_dp"));
    const auto ring = must(rounds::make_private_ring(cfg, core::param_count(cfg.model.full_arch()), o.devices));
    const bool amplified = o.observer == "users" || mode == noise_mode::self;
    return core::rdp_accountant().epsilon_after(amplified ? o.q : 1.0, ring.mechanism, o.rounds, 1e-5).epsilon;
  };
  double lo = 0.05, hi = 50.0;
  while (hi / lo > 1.001) {
    const double mid = std::sqrt(lo * hi);
    if (spent(mid) <= target) hi = mid;
    else lo = mid;
  }
  return hi;
}

struct result {
  std::int64_t rounds = 0;
  double epsilon = 0, epsilon_hub = 0, final_accuracy = 0, best_accuracy = 0, seconds = 0;
  std::size_t clipped = 0, sampled = 0;
};

result run(const options& o, const std::string& strategy, noise_mode mode, double sigma, const core::memory_table& train,
           core::memory_table& test) {
  nlohmann::json j = config_of(o, strategy, mode);
  j["dp"]["noise_multiplier"] = sigma;
  auto cfg = must(sim::parse_sim_config(j, "bench_dp"));
  auto s = must(sim::simulation::create(cfg, train, &test));
  result r;
  while (!s->done()) {
    const auto m = must(s->run_round());
    r.rounds = m.round;
    r.seconds += m.seconds;
    r.epsilon = m.dp.epsilon.value_or(0);
    r.epsilon_hub = m.dp.epsilon_hub.value_or(r.epsilon);
    r.clipped += m.dp.clipped.value_or(0);
    r.sampled += m.dp.sampled.value_or(0);
    if (m.test_accuracy) {
      r.final_accuracy = *m.test_accuracy;
      r.best_accuracy = std::max(r.best_accuracy, *m.test_accuracy);
    }
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  bench::parse_options(argc, argv, "bench/dp/dp.cpp",
                       {{"--devices", o.devices}, {"--q", o.q}, {"--noise", o.noise}, {"--clip", o.clip}, {"--rounds", o.rounds},
                        {"--ist-groups", o.ist_groups}, {"--observer", o.observer}});
  if (o.observer != "users" && o.observer != "hub") die("--observer: users or hub");
  if (o.observer == "hub" && (o.noise == "hub" || o.noise == "both"))
    die("--observer hub: with the hub's noise the hub holds the clear sums; use --noise devices or self");
  std::printf("bench_dp: Fashion-MNIST 784-64-10, %zu devices, q %.3g (about %.0f per round), clip %.3g, δ 1e-5, %lld rounds of "
              "10 local steps, σ per target ε against the %s\n\n",
              o.devices, o.q, o.q * static_cast<double>(o.devices), o.clip, static_cast<long long>(o.rounds),
              o.observer == "hub" ? "hub" : "model's users");
  auto loaded = must(sim::load_sim_data(must(sim::parse_sim_config(nlohmann::json::object(), "defaults"))));
  std::printf("| strategy | noise | target ε | σ | rounds | ε spent (users / hub) | final accuracy | best accuracy | sampled per round | clipped | s/round |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<noise_mode> modes;
  if (o.noise == "hub" || o.noise == "both") modes.push_back(noise_mode::hub);
  if (o.noise == "devices" || o.noise == "both") modes.push_back(noise_mode::devices);
  if (o.noise == "self") modes.push_back(noise_mode::self);
  if (modes.empty()) die("--noise: hub, devices, self or both");
  for (const std::string strategy : {"fedavg", "ist"})
    for (const noise_mode mode : modes)
    for (const double target : {0.0, 8.0, 4.0, 2.0}) {
      const bool devices_noise = mode != noise_mode::hub;
      const double sigma = target == 0 ? 0.001 : sigma_for(o, strategy, mode, target);
      const result r = run(o, strategy, mode, sigma, *loaded.train, *loaded.test);
      const auto figure = [](double e) {
        char buf[32];
        std::snprintf(buf, sizeof buf, e > 1e3 ? "%.1e" : "%.2f", e);
        return std::string(buf);
      };
      const std::string spent = devices_noise ? figure(r.epsilon) + " / " + figure(r.epsilon_hub) : figure(r.epsilon);
      char per_round[32] = "unknown";  // self-sampled: nobody knows who drew
      if (mode != noise_mode::self)
        std::snprintf(per_round, sizeof per_round, "%.1f", static_cast<double>(r.sampled) / static_cast<double>(std::max<std::int64_t>(1, r.rounds)));
      std::printf("| %s%s | %s | %s | %.3g | %lld | %s | %.2f%% | %.2f%% | %s | %s | %.3f |\n", strategy.c_str(),
                  strategy == "ist" ? (" (" + std::to_string(o.ist_groups) + " groups)").c_str() : "",
                  mode == noise_mode::hub ? "hub" : mode == noise_mode::devices ? "devices" : "devices, self-sampled",
                  target == 0 ? "≈∞" : std::to_string(static_cast<int>(target)).c_str(), sigma, static_cast<long long>(r.rounds), spent.c_str(),
                  100 * r.final_accuracy, 100 * r.best_accuracy, per_round,
                  devices_noise ? "unseen" : (std::to_string(static_cast<int>(std::lround(100.0 * static_cast<double>(r.clipped) /
                                                                                   static_cast<double>(std::max<std::size_t>(1, r.sampled))))) + "%").c_str(),
                  r.seconds / static_cast<double>(std::max<std::int64_t>(1, r.rounds)));
      std::fflush(stdout);
    }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("\npeak memory of the simulator (all runs, %zu devices each): %.0f MiB\n", o.devices, static_cast<double>(ru.ru_maxrss) / 1024.0);
  return 0;
}
