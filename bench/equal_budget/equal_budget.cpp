// bench_equal_budget — IST against FedAvg when both must fit the same device memory: every device trains
// inside its arena budget (core::bytes_needed, the formula the hub plans with and the agent enforces),
// and each method is tuned on one shared grid.
//
// Fleets of 8 devices with IID shards of Fashion-MNIST's 60,000 training images:
//   0.5, 1, 2   every device has an arena budget of B = 0.5, 1 or 2 MiB (any B in MiB is accepted)
//   mixed       two devices each with 0.5, 1, 2 and 4 MiB
// FedAvg trains the widest 784-h-h-10 whose bytes_needed (batch 32, momentum, f32) fits the fleet's
// smallest budget: every device trains the whole model. IST trains a global 784-H-H-10 whose subnets
// fit: each device's capacity is core::capacity_for_budget of its own budget, as the hub computes it.
// With equal budgets H = 8·w with 8 groups (the subnets cover each hidden layer once), H = 4·w with
// 4 groups of two devices (twice) or, on request, H = 2·w with 2 groups of four devices (--covers 4),
// w the widest width that fits B; the mixed fleet's H is the sum of
// its devices' widths, 8 groups, so that the subnets, each sized to its device, cover the layer once.
// Every subnet of every round is checked against its device's budget.
//
// Grid, the same for both methods (and for IST both values of H): lr {0.02, 0.05, 0.1} × local steps
// {50, 100}; batch 32, momentum 0.9, cosine learning rate over R = 100 rounds, the same R for both,
// seed 1 (the same shards and batch orders for every run). The full model is scored on the 10,000 test
// images before round 1, every 10 rounds and after the last. The winner per (fleet, method) is the best
// accuracy after the R rounds; then both winners are compared after equal rounds, at equal bytes
// (both ways, all devices: at the smaller of the two winners' totals, each at its last evaluation
// within it) and at equal modelled time (likewise).
//
// Modelled time is bench/slow_link's model, checked there against real rounds over emulated links.
// Every device sits behind its own link of `rate` and one-way `latency`; a round lasts as long as its
// slowest device:
//   max over devices of  latency + bytes_down·8/rate + compute + bytes_up·8/rate + latency
// where `compute` is the device's share of the round's measured time on this core (the devices train in
// turn here), in proportion to its subnet's parameters: every device as fast as this machine's one core.
//
//   bench_equal_budget [--fleets 0.5,1,2,mixed] [--lrs 0.02,0.05,0.1] [--steps 50,100] [--rounds 100]
//                      [--eval-every 10] [--covers 1,2] [--methods fedavg,ist] [--rate-kbit 1000]
//                      [--latency-ms 100] [--out DIR]
// --out writes DIR/table.md, DIR/curves.csv and one DIR/curves-<fleet>.svg per fleet. The defaults (the
// whole bench, 66 runs) take about 26 minutes on one core.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/link_time.hpp"
#include "common/must.hpp"
#include "tessera/core/base/assert.hpp"
#include "tessera/core/math/ist.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/core/train/train.hpp"
#include "tessera/rounds/sim/shards.hpp"
#include "tessera/rounds/sim/simulation.hpp"

namespace {

using namespace tessera;
using clock_type = std::chrono::steady_clock;

constexpr std::size_t k_devices = 8;
constexpr std::int64_t k_batch = 32;
constexpr double k_momentum = 0.9;  // with momentum the arena holds a velocity (core/math/memory.hpp)
constexpr core::codec_kind k_codec = core::codec_kind::f32;
constexpr std::int64_t k_min_width = 8;  // the run configuration's default min_width
constexpr std::uint64_t k_seed = 1;
constexpr double k_mib = 1024.0 * 1024.0;

using bench::die;
using bench::must;

[[gnu::format(printf, 1, 2)]] std::string strf(const char* f, ...) {
  std::va_list a;
  va_start(a, f);
  char small[256];
  const int n = std::vsnprintf(small, sizeof small, f, a);
  va_end(a);
  if (n < 0) return {};
  const auto size = static_cast<std::size_t>(n);
  if (size < sizeof small) return std::string(small, size);
  std::string out(size + 1, '\0');
  va_start(a, f);
  std::vsnprintf(out.data(), out.size(), f, a);
  va_end(a);
  out.resize(size);
  return out;
}

// ---- options

struct options {
  std::vector<std::string> fleets{"0.5", "1", "2", "mixed"};
  std::vector<double> lrs{0.02, 0.05, 0.1};
  std::vector<std::int64_t> steps{50, 100};
  std::int64_t rounds = 100;
  std::int64_t eval_every = 10;
  std::vector<std::int64_t> covers{1, 2};  // IST with equal budgets: how often the subnets cover a layer
  std::vector<std::string> methods{"fedavg", "ist"};
  double rate_kbit = 1000;
  double latency_ms = 100;
  std::string out;
  nlohmann::json ist = nlohmann::json::object();  // run-configuration fields merged into every IST run's
};

constexpr const char* k_usage =
    "usage: bench_equal_budget [--fleets 0.5,1,2,mixed] [--lrs 0.02,0.05,0.1] [--steps 50,100] [--rounds 100]\n"
    "                          [--eval-every 10] [--covers 1,2] [--methods fedavg,ist] [--rate-kbit 1000]\n"
    "                          [--latency-ms 100] [--ist JSON] [--out DIR]\n"
    "  --fleets      fleets of 8 devices: a budget in MiB every device has (0.5, 1, 2, ...), or mixed\n"
    "                (two devices each with 0.5, 1, 2 and 4 MiB)\n"
    "  --lrs         learning rates of the grid (both methods)\n"
    "  --steps       local steps per round of the grid (both methods)\n"
    "  --rounds      rounds of every run (the cosine schedule spans them)\n"
    "  --eval-every  rounds between evaluations on the test set (and the last round)\n"
    "  --covers      IST with equal budgets: 1 (8 groups), 2 (4 groups of two devices), 4 (2 groups of four)\n"
    "  --methods     fedavg and/or ist\n"
    "  --rate-kbit, --latency-ms   each device's link in the time model\n"
    "  --ist         run-configuration fields merged into every IST run's, e.g. '{\"repartition_every\": 20}'\n"
    "  --out         folder for table.md, curves.csv and curves-<fleet>.svg\n";

std::vector<std::string> split(const std::string& flag, const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t p = 0; p <= s.size();) {
    const auto q = std::min(s.find(',', p), s.size());
    if (q == p) die(flag + ": an empty item in \"" + s + "\"");
    out.push_back(s.substr(p, q - p));
    p = q + 1;
  }
  return out;
}

double parse_number(const std::string& flag, const std::string& s, double lo, double hi) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) die(flag + ": \"" + s + "\" is not a number");
  if (v < lo || v > hi) die(flag + ": " + s + " is outside [" + strf("%g", lo) + ", " + strf("%g", hi) + "]");
  return v;
}

std::int64_t parse_integer(const std::string& flag, const std::string& s, std::int64_t lo, std::int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || end != s.c_str() + s.size() || errno != 0) die(flag + ": \"" + s + "\" is not an integer");
  if (v < lo || v > hi) die(flag + ": " + s + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return static_cast<std::int64_t>(v);
}

options parse_options(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(k_usage, stdout);
      std::exit(0);
    }
    static const char* const known[] = {"--fleets", "--lrs",     "--steps",      "--rounds",     "--eval-every",
                                        "--covers", "--methods", "--rate-kbit", "--latency-ms", "--ist", "--out"};
    if (std::find(std::begin(known), std::end(known), a) == std::end(known)) die("unknown option \"" + a + "\" (see --help)");
    if (i + 1 >= argc) die(a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--fleets") {
      o.fleets = split(a, v);
    } else if (a == "--lrs") {
      o.lrs.clear();
      for (const auto& s : split(a, v)) o.lrs.push_back(parse_number(a, s, 1e-6, 10));
    } else if (a == "--steps") {
      o.steps.clear();
      for (const auto& s : split(a, v)) o.steps.push_back(parse_integer(a, s, 1, 100'000));
    } else if (a == "--rounds") {
      o.rounds = parse_integer(a, v, 1, 1'000'000);
    } else if (a == "--eval-every") {
      o.eval_every = parse_integer(a, v, 1, 1'000'000);
    } else if (a == "--covers") {
      o.covers.clear();
      for (const auto& s : split(a, v)) {
        o.covers.push_back(parse_integer(a, s, 1, 4));
        if (o.covers.back() == 3) die("--covers: 3 does not divide the 8 devices into equal groups (1, 2 or 4)");
      }
    } else if (a == "--methods") {
      o.methods = split(a, v);
      for (const auto& m : o.methods)
        if (m != "fedavg" && m != "ist") die("--methods: \"" + m + "\" is neither fedavg nor ist");
    } else if (a == "--rate-kbit") {
      o.rate_kbit = parse_number(a, v, 1, 1e9);
    } else if (a == "--latency-ms") {
      o.latency_ms = parse_number(a, v, 0, 1e6);
    } else if (a == "--ist") {
      o.ist = bench::json_object_option(a, v);
      if (o.ist.contains("groups") || o.ist.contains("capacities")) die("--ist: groups and capacities come from the fleet (--covers)");
    } else {
      o.out = v;
    }
  }
  return o;
}

// ---- fleets and what fits them

struct fleet {
  std::string name;                 // "0.5" (MiB, every device) or "mixed"
  std::vector<double> budgets_mib;  // per device

  [[nodiscard]] bool mixed() const noexcept { return name == "mixed"; }
  [[nodiscard]] std::size_t budget_bytes(std::size_t d) const noexcept {
    return static_cast<std::size_t>(std::floor(budgets_mib[d] * k_mib));
  }
  [[nodiscard]] std::size_t smallest_bytes() const noexcept {
    std::size_t b = budget_bytes(0);
    for (std::size_t d = 1; d < budgets_mib.size(); ++d) b = std::min(b, budget_bytes(d));
    return b;
  }
  [[nodiscard]] std::string label() const {
    return mixed() ? "mixed (2 × 0.5, 1, 2, 4 MiB)" : "8 × " + strf("%g", budgets_mib[0]) + " MiB";
  }
};

fleet fleet_named(const std::string& name) {
  if (name == "mixed") return {name, {0.5, 0.5, 1, 1, 2, 2, 4, 4}};
  char* end = nullptr;
  std::strtod(name.c_str(), &end);
  if (end != name.c_str() + name.size()) die("--fleets: \"" + name + "\" is neither a budget in MiB (0.5, 1, 2, ...) nor mixed");
  const double b = parse_number("--fleets", name, 0.01, 4096);
  return {strf("%g", b), std::vector<double>(k_devices, b)};
}

std::string mib(std::size_t bytes) { return strf("%.3f MiB", static_cast<double>(bytes) / k_mib); }

// The model of every run: the simulator's defaults (layer norm, he_uniform, ...) with this hidden width.
core::mlp_arch arch_with(const core::model_spec& base, std::int64_t hidden) {
  core::model_spec s = base;
  s.hidden = {hidden, hidden};
  return s.full_arch();
}

std::string widths_of(const core::mlp_arch& a) {
  std::string s;
  for (std::size_t i = 0; i < a.widths.size(); ++i) s += (i ? "-" : "") + std::to_string(a.widths[i]);
  return s;
}

std::size_t needed(const core::mlp_arch& a) { return core::bytes_needed(a, k_batch, k_momentum != 0, k_codec); }

// The widest 784-h-h-10 whose training memory fits `budget` (0: not even one neuron).
std::int64_t widest_fitting(const core::model_spec& base, std::size_t budget) {
  if (needed(arch_with(base, 1)) > budget) return 0;
  std::int64_t lo = 1, hi = 2;  // fits at lo; find an hi that does not, then bisect
  while (hi < core::k_max_width && needed(arch_with(base, hi)) <= budget) {
    lo = hi;
    hi *= 2;
  }
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    (needed(arch_with(base, mid)) <= budget ? lo : hi) = mid;
  }
  return lo;
}

// One architecture a method trains on a fleet.
struct arm {
  std::string method;                // "fedavg" or "ist"
  std::int64_t hidden = 0;           // the global model's width, both hidden layers
  std::size_t groups = 1;
  std::int64_t cover = 1;            // IST: how many devices train each neuron
  std::vector<double> capacities;    // IST: per device
  std::vector<std::int64_t> widths;  // per device, the hidden width it trains
  std::vector<std::size_t> needs;    // per device, bytes_needed of what it trains
  std::size_t params = 0;            // the global model's

  [[nodiscard]] std::string name() const {
    return method == "fedavg" ? "FedAvg" : (cover == 1 ? "IST" : "IST ×" + std::to_string(cover));
  }
  [[nodiscard]] std::string model() const { return "784-" + std::to_string(hidden) + "-" + std::to_string(hidden) + "-10"; }
  // What each device trains: one width, or the distinct widths in device order.
  [[nodiscard]] std::string trained() const {
    std::vector<std::int64_t> distinct;
    for (auto w : widths)
      if (std::find(distinct.begin(), distinct.end(), w) == distinct.end()) distinct.push_back(w);
    if (method == "fedavg") return "the whole model";
    if (distinct.size() == 1) return "784-" + std::to_string(distinct[0]) + "-" + std::to_string(distinct[0]) + "-10";
    std::string s = "784-w-w-10, w = ";
    for (std::size_t i = 0; i < distinct.size(); ++i) s += (i ? "/" : "") + std::to_string(distinct[i]);
    return s + " by budget";
  }
};

arm fedavg_arm(const core::model_spec& base, const fleet& f) {
  arm a;
  a.method = "fedavg";
  a.hidden = widest_fitting(base, f.smallest_bytes());
  if (a.hidden == 0) die("fleet " + f.label() + ": no FedAvg model fits " + mib(f.smallest_bytes()));
  a.widths.assign(k_devices, a.hidden);
  a.needs.assign(k_devices, needed(arch_with(base, a.hidden)));
  TESSERA_ASSERT(a.needs[0] <= f.smallest_bytes());
  a.params = core::param_count(arch_with(base, a.hidden));
  return a;
}

// IST on a global width `hidden` with `groups` groups; capacities as the hub computes them, and the
// subnets of a plan (their sizes are the same every round: only the permutation changes) checked.
arm ist_arm(const core::model_spec& base, const fleet& f, std::int64_t hidden, std::size_t groups) {
  arm a;
  a.method = "ist";
  a.hidden = hidden;
  a.groups = groups;
  a.cover = static_cast<std::int64_t>(k_devices / groups);
  const core::mlp_arch full = arch_with(base, hidden);
  for (std::size_t d = 0; d < k_devices; ++d) {
    // The planner rounds a capacity to neurons as capacity_for_budget does (core::neurons_for), so the
    // subnet below has exactly the width the budget was sized for; checked below all the same.
    const double c = core::capacity_for_budget(full, k_batch, k_momentum != 0, k_codec, f.budget_bytes(d), k_min_width);
    if (c <= 0) die("fleet " + f.label() + ": device " + std::to_string(d) + " cannot hold an IST subnet of " + std::to_string(k_min_width) +
                    " neurons per layer in " + mib(f.budget_bytes(d)));
    a.capacities.push_back(c);
  }
  const auto plan = core::make_plan(full, a.capacities, groups, {.min_width = k_min_width}, k_seed);
  if (!plan) die("fleet " + f.label() + ", IST " + a.model() + ": " + plan.error().message);
  for (std::size_t d = 0; d < k_devices; ++d) {
    const core::subnet sub = core::make_subnet(full, base.compensation, plan.value(), plan.value().device_group[d]);
    a.widths.push_back(sub.arch.widths[1]);
    a.needs.push_back(needed(sub.arch));
    TESSERA_ASSERT(a.needs.back() <= f.budget_bytes(d));
  }
  a.params = core::param_count(full);
  return a;
}

std::vector<arm> arms_for(const options& o, const core::model_spec& base, const fleet& f) {
  std::vector<arm> arms;
  const bool fedavg = std::find(o.methods.begin(), o.methods.end(), "fedavg") != o.methods.end();
  const bool ist = std::find(o.methods.begin(), o.methods.end(), "ist") != o.methods.end();
  if (fedavg) arms.push_back(fedavg_arm(base, f));
  if (!ist) return arms;
  if (f.mixed()) {
    std::int64_t sum = 0;
    for (std::size_t d = 0; d < k_devices; ++d) sum += widest_fitting(base, f.budget_bytes(d));
    arms.push_back(ist_arm(base, f, sum, k_devices));
    return arms;
  }
  const std::int64_t w = widest_fitting(base, f.budget_bytes(0));
  if (w == 0) die("fleet " + f.label() + ": no subnet fits " + mib(f.budget_bytes(0)));
  for (auto cover : o.covers) {
    const std::size_t groups = k_devices / static_cast<std::size_t>(cover);
    arms.push_back(ist_arm(base, f, w * static_cast<std::int64_t>(groups), groups));
  }
  return arms;
}

// ---- runs

struct point {
  std::int64_t round = 0;
  std::uint64_t bytes = 0;  // all devices, both ways, so far
  double seconds = 0;       // modelled fleet time so far
  double accuracy = 0;
};

struct run {
  std::size_t arm_index = 0;  // into its fleet's arms
  double lr = 0;
  std::int64_t steps = 0;
  std::vector<point> curve;  // round 0 first, the last round last
  std::uint64_t rejected = 0;
  double wall_s = 0;
  double scoring_s = 0;  // of wall_s, evaluating on the test set

  [[nodiscard]] const point& last() const { return curve.back(); }
  [[nodiscard]] double best() const {
    double b = 0;
    for (const auto& p : curve) b = std::max(b, p.accuracy);
    return b;
  }
};

sim::sim_config config_for(const options& o, const arm& a, double lr, std::int64_t steps) {
  nlohmann::json j = {{"model", {{"inputs", 784}, {"hidden", nlohmann::json::array({a.hidden, a.hidden})}, {"outputs", 10}}},
                      {"strategy", a.method}, {"devices", k_devices}, {"rounds", o.rounds}, {"local_steps", steps},
                      {"batch", k_batch}, {"lr", lr}, {"momentum", k_momentum}, {"lr_schedule", "cosine"},
                      {"codec", "f32"}, {"seed", k_seed}, {"min_width", k_min_width},
                      // Every device trains on its whole shard; the model is scored on the test set here.
                      {"data", {{"validation_fraction", 0}}}};
  if (a.method == "ist") {
    j["groups"] = a.groups;
    j["capacities"] = a.capacities;  // the simulator takes them as given: the budgets were turned into them above
    j.update(o.ist);
  }
  return must(sim::parse_sim_config(j, "bench_equal_budget"));
}

run run_one(const options& o, const fleet& f, const std::vector<arm>& arms, std::size_t arm_index, double lr, std::int64_t steps,
            const core::memory_table& train, core::memory_table& test) {
  const arm& a = arms[arm_index];
  run r;
  r.arm_index = arm_index;
  r.lr = lr;
  r.steps = steps;
  const auto started = clock_type::now();
  const auto cfg = config_for(o, a, lr, steps);
  auto federation = must(sim::simulation::create(cfg, train, nullptr));
  const core::network net(cfg.model.full_arch());
  std::map<std::string, std::size_t, std::less<>> device_of;
  for (std::size_t d = 0; d < k_devices; ++d) device_of.emplace(sim::device_id(d), d);
  const bench::link_time link_of{.rate_kbit = o.rate_kbit, .latency_ms = o.latency_ms};
  std::uint64_t bytes = 0;
  double seconds = 0;
  const auto score = [&](std::int64_t after_round) {
    const auto t0 = clock_type::now();
    const auto ev = must(core::evaluate(net, federation->params(), test));
    r.scoring_s += std::chrono::duration<double>(clock_type::now() - t0).count();
    r.curve.push_back({.round = after_round, .bytes = bytes, .seconds = seconds, .accuracy = ev.accuracy});
  };
  score(0);
  while (!federation->done()) {
    const auto m = must(federation->run_round());
    const auto assigned = federation->engine().assignments();
    std::size_t params = 0;
    for (const auto& as : assigned) params += core::param_count(as.sub.arch);
    double slowest = 0;
    for (const auto& as : assigned) {
      const auto it = device_of.find(as.device);
      TESSERA_ASSERT(it != device_of.end());
      const std::size_t need = needed(as.sub.arch);
      if (need > f.budget_bytes(it->second))  // the arms were checked: this would be a bug here or in the planner
        die("round " + std::to_string(m.round) + ": " + as.device + "'s subnet " + widths_of(as.sub.arch) + " needs " + mib(need) +
            ", over its budget of " + mib(f.budget_bytes(it->second)));
      const double compute = m.seconds * static_cast<double>(core::param_count(as.sub.arch)) / static_cast<double>(params);
      const double link = link_of.seconds(as.bytes_down, as.bytes_up);
      slowest = std::max(slowest, link + compute);
    }
    seconds += slowest;
    bytes += m.bytes_down + m.bytes_up;
    r.rejected += m.rejected.value_or(0);
    if (m.round % o.eval_every == 0 || federation->done()) score(m.round);
  }
  r.wall_s = std::chrono::duration<double>(clock_type::now() - started).count();
  std::printf("  %-7s %-16s lr %-5g steps %4lld: after %lld rounds %6.2f%% (best %6.2f%%), %8.1f MB, %6.1f modelled min, "
              "%6.1f s here (%.1f scoring)%s\n",
              a.name().c_str(), a.model().c_str(), lr, static_cast<long long>(steps), static_cast<long long>(r.last().round),
              100 * r.last().accuracy, 100 * r.best(), static_cast<double>(r.last().bytes) / 1e6, r.last().seconds / 60, r.wall_s, r.scoring_s,
              r.rejected ? strf(", %llu updates rejected", static_cast<unsigned long long>(r.rejected)).c_str() : "");
  std::fflush(stdout);
  return r;
}

// The accuracy at the run's last evaluation within `limit` of `key` (the curve starts at 0).
template <class Key>
double accuracy_within(const run& r, Key key, double limit) {
  double acc = r.curve.front().accuracy;
  for (const auto& p : r.curve)
    if (key(p) <= limit * (1 + 1e-12)) acc = p.accuracy;
  return acc;
}

// ---- the fleet's results

struct fleet_result {
  fleet f;
  std::vector<arm> arms;
  std::vector<run> runs;
  std::map<std::string, std::size_t> winner;  // method → index into runs
  // Equal bytes and equal time: the limits and each method's accuracy there (both methods present).
  double equal_bytes = 0, equal_seconds = 0;
  std::map<std::string, double> at_bytes, at_seconds;
};

void compare(fleet_result& fr) {
  for (std::size_t i = 0; i < fr.runs.size(); ++i) {
    const std::string& method = fr.arms[fr.runs[i].arm_index].method;
    const auto it = fr.winner.find(method);
    if (it == fr.winner.end() || fr.runs[i].last().accuracy > fr.runs[it->second].last().accuracy) fr.winner[method] = i;
  }
  if (fr.winner.size() < 2) return;
  const run& fa = fr.runs[fr.winner.at("fedavg")];
  const run& is = fr.runs[fr.winner.at("ist")];
  fr.equal_bytes = static_cast<double>(std::min(fa.last().bytes, is.last().bytes));
  fr.equal_seconds = std::min(fa.last().seconds, is.last().seconds);
  for (const auto& [method, i] : fr.winner) {
    fr.at_bytes[method] = accuracy_within(fr.runs[i], [](const point& p) { return static_cast<double>(p.bytes); }, fr.equal_bytes);
    fr.at_seconds[method] = accuracy_within(fr.runs[i], [](const point& p) { return p.seconds; }, fr.equal_seconds);
  }
}

std::string percent(double v) { return strf("%.2f%%", 100 * v); }
std::string params_text(std::size_t n) {
  return n >= 1'000'000 ? strf("%.2f M", static_cast<double>(n) / 1e6) : strf("%.0f k", static_cast<double>(n) / 1e3);
}

std::string winners_table(const options& o, const std::vector<fleet_result>& results) {
  std::string s = "| fleet | method | model (parameters) | each device trains | best lr, local steps | after " + std::to_string(o.rounds) +
                  " rounds | at equal bytes | at equal modelled time |\n|---|---|---|---|---|---|---|---|\n";
  for (const auto& fr : results) {
    bool first = true;
    for (const std::string method : {"fedavg", "ist"}) {
      const auto it = fr.winner.find(method);
      if (it == fr.winner.end()) continue;
      const run& r = fr.runs[it->second];
      const arm& a = fr.arms[r.arm_index];
      std::string eb = "-", et = "-";
      if (fr.winner.size() == 2) {
        eb = percent(fr.at_bytes.at(method)) + strf(" (%.0f MB)", fr.equal_bytes / 1e6);
        et = percent(fr.at_seconds.at(method)) + strf(" (%.1f min)", fr.equal_seconds / 60);
      }
      s += "| " + (first ? fr.f.label() : std::string()) + " | " + a.name() + " | " + a.model() + " (" + params_text(a.params) + ") | " +
           a.trained() + " | " + strf("%g, %lld", r.lr, static_cast<long long>(r.steps)) + " | " + percent(r.last().accuracy) +
           " | " + eb + " | " + et + " |\n";
      first = false;
    }
  }
  s += "\n";
  for (const auto& fr : results) {
    if (fr.winner.size() < 2) continue;
    const run& fa = fr.runs[fr.winner.at("fedavg")];
    const run& is = fr.runs[fr.winner.at("ist")];
    const auto verdict = [](double ist, double fedavg) {
      if (ist == fedavg) return std::string("a tie");
      return strf("%s by %.2f points", ist > fedavg ? "IST" : "FedAvg", 100 * std::fabs(ist - fedavg));
    };
    s += "- " + fr.f.label() + ": after equal rounds " + verdict(is.last().accuracy, fa.last().accuracy) + "; at equal bytes " +
         verdict(fr.at_bytes.at("ist"), fr.at_bytes.at("fedavg")) + "; at equal modelled time " +
         verdict(fr.at_seconds.at("ist"), fr.at_seconds.at("fedavg")) + ".\n";
  }
  return s;
}

std::string models_table(const std::vector<fleet_result>& results) {
  std::string s = "| fleet | method | global model | groups | per device: hidden width, bytes_needed / budget |\n|---|---|---|---|---|\n";
  for (const auto& fr : results)
    for (const auto& a : fr.arms) {
      bool same = true;
      for (std::size_t d = 1; d < k_devices; ++d) same = same && a.needs[d] == a.needs[0] && fr.f.budget_bytes(d) == fr.f.budget_bytes(0);
      std::string per = same ? "all " : "";
      for (std::size_t d = 0; d < (same ? 1 : k_devices); ++d)
        per += std::string(d ? "; " : "") + std::to_string(a.widths[d]) + ", " +
               strf("%.3f / %g MiB", static_cast<double>(a.needs[d]) / k_mib, fr.f.budgets_mib[d]);
      s += "| " + fr.f.label() + " | " + a.name() + " | " + a.model() + " (" + params_text(a.params) + ") | " + std::to_string(a.groups) +
           " | " + per + " |\n";
    }
  return s;
}

// One row per (fleet, model), one column per point of the grid: the accuracy after the rounds.
std::string grid_matrix(const options& o, const std::vector<fleet_result>& results) {
  std::string s = "| fleet | method | model |";
  std::string rule = "|---|---|---|";
  for (auto lr : o.lrs)
    for (auto steps : o.steps) {
      s += strf(" lr %g, %lld steps |", lr, static_cast<long long>(steps));
      rule += "---|";
    }
  s += "\n" + rule + "\n";
  for (const auto& fr : results)
    for (std::size_t ai = 0; ai < fr.arms.size(); ++ai) {
      const arm& a = fr.arms[ai];
      s += "| " + fr.f.label() + " | " + a.name() + " | " + a.model() + " |";
      for (std::size_t i = 0; i < fr.runs.size(); ++i) {
        if (fr.runs[i].arm_index != ai) continue;
        const std::string acc = percent(fr.runs[i].last().accuracy);
        s += " " + (fr.winner.at(a.method) == i ? "**" + acc + "**" : acc) + " |";
      }
      s += "\n";
    }
  return s;
}

std::string grid_table(const options& o, const std::vector<fleet_result>& results) {
  std::string s = "| fleet | method | model | lr | local steps | after " + std::to_string(o.rounds) +
                  " rounds | best | MB moved | modelled min | updates rejected |\n|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& fr : results)
    for (std::size_t i = 0; i < fr.runs.size(); ++i) {
      const run& r = fr.runs[i];
      const arm& a = fr.arms[r.arm_index];
      const bool won = fr.winner.at(a.method) == i;
      const std::string acc = won ? "**" + percent(r.last().accuracy) + "**" : percent(r.last().accuracy);
      s += "| " + fr.f.label() + " | " + a.name() + " | " + a.model() + " | " + strf("%g", r.lr) + " | " + std::to_string(r.steps) + " | " +
           acc + " | " + percent(r.best()) + " | " + strf("%.1f", static_cast<double>(r.last().bytes) / 1e6) + " | " +
           strf("%.1f", r.last().seconds / 60) + " | " + std::to_string(r.rejected) + " |\n";
    }
  return s;
}

// ---- curves

struct series {
  std::string name, color;
  bool dashed = false;
  std::vector<std::pair<double, double>> xy;  // x, accuracy
};
struct panel {
  std::string xlabel;
  std::vector<series> lines;
  double mark = -1;  // a vertical line at this x (the equal budget); < 0: none
};

// Panels side by side sharing the accuracy axis, the legend under the title; plain SVG, no external
// resources.
void write_svg(const std::filesystem::path& path, const std::string& title, const std::vector<panel>& panels) {
  const std::size_t legend = panels.empty() ? 0 : panels[0].lines.size();
  const double pw = 400, ml = 62, mr = 28, mt = 40 + 16 * static_cast<double>(legend), mb = 46, ph = mt + 300 + mb;
  double acc_lo = 1, acc_hi = 0;
  for (const auto& p : panels)
    for (const auto& s : p.lines)
      for (const auto& [x, y] : s.xy) {
        acc_lo = std::min(acc_lo, y);
        acc_hi = std::max(acc_hi, y);
      }
  acc_lo = std::max(0.5, std::floor((acc_lo - 0.01) * 50) / 50);
  acc_hi = std::min(1.0, std::ceil((acc_hi + 0.005) * 50) / 50);
  if (acc_hi <= acc_lo) acc_hi = acc_lo + 0.02;
  std::string svg = strf("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
                         "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                         pw * static_cast<double>(panels.size()), ph);
  svg += strf("<text x=\"%.0f\" y=\"18\" font-size=\"14\">", ml) + title + "</text>\n";
  for (std::size_t k = 0; k < legend; ++k) {
    const series& s = panels[0].lines[k];
    const double y = 36 + 16 * static_cast<double>(k);
    svg += strf("<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" stroke-width=\"2\"%s/>", ml, y, ml + 24, y, s.color.c_str(),
                s.dashed ? " stroke-dasharray=\"5,3\"" : "") +
           strf("<text x=\"%.0f\" y=\"%.0f\">", ml + 30, y + 4) + s.name + "</text>\n";
  }
  for (std::size_t i = 0; i < panels.size(); ++i) {
    const panel& p = panels[i];
    const double left = pw * static_cast<double>(i) + ml, right = pw * static_cast<double>(i + 1) - mr, top = mt, bottom = ph - mb;
    double x1 = 0;
    for (const auto& s : p.lines)
      for (const auto& [x, y] : s.xy) x1 = std::max(x1, x);
    if (x1 <= 0) x1 = 1;
    const auto sx = [&](double v) { return left + v / x1 * (right - left); };
    const auto sy = [&](double v) { return bottom - (std::clamp(v, acc_lo, acc_hi) - acc_lo) / (acc_hi - acc_lo) * (bottom - top); };
    for (int t = 0; t <= 5; ++t) {
      const double ty = acc_lo + (acc_hi - acc_lo) * t / 5, tx = x1 * t / 5;
      svg += strf("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>", left, sy(ty), right, sy(ty)) +
             strf("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.1f%%</text>", left - 5, sy(ty) + 4, 100 * ty) +
             strf("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.3g</text>\n", sx(tx), bottom + 16, tx);
    }
    svg += strf("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>", left, bottom, right, bottom) +
           strf("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", left, top, left, bottom) +
           strf("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", (left + right) / 2, ph - 12) + p.xlabel + "</text>\n";
    if (p.mark >= 0)
      svg += strf("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\" stroke-dasharray=\"2,3\"/>\n", sx(p.mark), top,
                  sx(p.mark), bottom);
    for (const auto& s : p.lines) {
      std::string pts;
      for (const auto& [x, y] : s.xy) pts += strf("%.1f,%.1f ", sx(x), sy(y));
      svg += "<polyline fill=\"none\" stroke=\"" + s.color + "\" stroke-width=\"1.8\"" + (s.dashed ? " stroke-dasharray=\"5,3\"" : "") +
             " points=\"" + pts + "\"/>\n";
    }
  }
  svg += "</svg>\n";
  std::ofstream(path) << svg;
}

// Accuracy against rounds, MB moved and modelled minutes: the fleet's two winners (solid) and, for IST,
// the best run of every other global width (dashed), each from the first evaluation after round 0 on
// (the initial model's 10% would flatten the axis). Dotted: the equal bytes and equal time.
void write_curves(const std::filesystem::path& dir, const fleet_result& fr) {
  std::vector<std::size_t> shown;
  for (const std::string method : {"fedavg", "ist"})
    if (const auto it = fr.winner.find(method); it != fr.winner.end()) shown.push_back(it->second);
  for (std::size_t ai = 0; ai < fr.arms.size(); ++ai) {
    if (fr.arms[ai].method != "ist" || (fr.winner.count("ist") && fr.runs[fr.winner.at("ist")].arm_index == ai)) continue;
    std::size_t best = fr.runs.size();
    for (std::size_t i = 0; i < fr.runs.size(); ++i)
      if (fr.runs[i].arm_index == ai && (best == fr.runs.size() || fr.runs[i].last().accuracy > fr.runs[best].last().accuracy)) best = i;
    if (best < fr.runs.size()) shown.push_back(best);
  }
  std::vector<panel> panels(3);
  panels[0].xlabel = "rounds";
  panels[1].xlabel = "MB moved (down + up, all devices)";
  panels[2].xlabel = "modelled minutes (each device on its own link)";
  if (fr.winner.size() == 2) {
    panels[1].mark = fr.equal_bytes / 1e6;
    panels[2].mark = fr.equal_seconds / 60;
  }
  for (const auto i : shown) {
    const run& r = fr.runs[i];
    const arm& a = fr.arms[r.arm_index];
    for (std::size_t k = 0; k < 3; ++k) {
      series s;
      s.name = a.name() + " " + a.model() + ", each device " + a.trained() + strf(", lr %g, %lld steps", r.lr, static_cast<long long>(r.steps));
      s.color = a.method == "fedavg" ? "#1f77b4" : "#d62728";
      s.dashed = fr.winner.at(a.method) != i;
      for (const auto& p : r.curve) {
        if (p.round == 0) continue;
        const double x = k == 0 ? static_cast<double>(p.round) : k == 1 ? static_cast<double>(p.bytes) / 1e6 : p.seconds / 60;
        s.xy.emplace_back(x, p.accuracy);
      }
      panels[k].lines.push_back(std::move(s));
    }
  }
  write_svg(dir / ("curves-" + fr.f.name + ".svg"), "Fashion-MNIST test accuracy, fleet " + fr.f.label() + " (arena budget per device)", panels);
}

std::string report(const options& o, const std::string& setup, const std::vector<fleet_result>& results, clock_type::time_point started) {
  const double wall_min = std::chrono::duration<double>(clock_type::now() - started).count() / 60;
  return "Setup: " + setup + ".\n\n### Winners (best accuracy after equal rounds), and both at equal bytes and equal modelled time\n\n" +
         winners_table(o, results) + "\n### Models (the arena budget check: core::bytes_needed, batch 32, momentum, f32)\n\n" +
         models_table(results) + "\n### Accuracy after " + std::to_string(o.rounds) + " rounds over the grid (bold: the winner of its fleet and method)\n\n" +
         grid_matrix(o, results) + "\n### Every run\n\n" + grid_table(o, results) +
         strf("\nWall time so far: %.1f min, one simulation at a time on one core.\n", wall_min);
}

void write_outputs(const options& o, const std::string& setup, const std::vector<fleet_result>& results, clock_type::time_point started) {
  const std::filesystem::path dir = o.out;
  std::ofstream(dir / "table.md") << report(o, setup, results, started);
  std::ofstream csv(dir / "curves.csv");
  csv << "fleet,method,hidden,groups,lr,local_steps,round,bytes,modelled_seconds,accuracy\n";
  for (const auto& fr : results)
    for (const auto& r : fr.runs) {
      const arm& a = fr.arms[r.arm_index];
      for (const auto& p : r.curve)
        csv << fr.f.name << ',' << a.method << ',' << a.hidden << ',' << a.groups << ',' << r.lr << ',' << r.steps << ',' << p.round << ','
            << p.bytes << ',' << strf("%.2f", p.seconds) << ',' << strf("%.4f", p.accuracy) << '\n';
    }
  for (const auto& fr : results) write_curves(dir, fr);
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse_options(argc, argv);
  std::vector<fleet> fleets;
  for (const auto& n : o.fleets) {
    fleets.push_back(fleet_named(n));
    for (std::size_t i = 0; i + 1 < fleets.size(); ++i)
      if (fleets[i].name == fleets.back().name) die("--fleets: " + n + " is listed twice");
  }
  if (!o.out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.out, ec);
    if (ec) die("--out " + o.out + ": " + ec.message());
  }
  const auto started = clock_type::now();
  const auto defaults = must(sim::parse_sim_config(nlohmann::json::object(), "defaults"));
  const core::model_spec base = defaults.model;

  std::string grid = "lr {";
  for (std::size_t i = 0; i < o.lrs.size(); ++i) grid += strf("%s%g", i ? ", " : "", o.lrs[i]);
  grid += "} × local steps {";
  for (std::size_t i = 0; i < o.steps.size(); ++i) grid += strf("%s%lld", i ? ", " : "", static_cast<long long>(o.steps[i]));
  grid += "}";
  const std::string setup = strf("%lld rounds for every run; ", static_cast<long long>(o.rounds)) + grid +
                            "; batch 32, momentum 0.9, cosine learning rate, f32, seed 1; 8 devices, IID shards; test accuracy on "
                            "10,000 images every " + std::to_string(o.eval_every) + " rounds and after the last; links " +
                            strf("%g kbit/s, %g ms", o.rate_kbit, o.latency_ms) +
                            (o.ist.empty() ? std::string() : "; IST with " + o.ist.dump());
  std::printf("bench_equal_budget: %s\n", setup.c_str());
  std::fflush(stdout);

  auto loaded = must(sim::load_sim_data(defaults));
  if (!loaded.train || !loaded.test) die("the simulator's default data (Fashion-MNIST, train and test) did not load");
  std::vector<fleet_result> results;
  for (const auto& f : fleets) {
    fleet_result fr;
    fr.f = f;
    fr.arms = arms_for(o, base, f);
    std::printf("\n== fleet %s\n", f.label().c_str());
    for (const auto& a : fr.arms) {
      std::printf("  %-7s %s, %s parameters, %zu group%s; per device (hidden width, bytes_needed / budget):", a.name().c_str(),
                  a.model().c_str(), params_text(a.params).c_str(), a.groups, a.groups == 1 ? "" : "s");
      for (std::size_t d = 0; d < k_devices; ++d)
        std::printf(" %lld %.3f/%g", static_cast<long long>(a.widths[d]), static_cast<double>(a.needs[d]) / k_mib,
                    f.budgets_mib[d]);
      std::printf("\n");
      if (a.method == "fedavg") {
        const std::size_t wider = needed(arch_with(base, a.hidden + 1));
        std::printf("          FedAvg's width fits the smallest budget, %s; %lld would need %s\n", mib(f.smallest_bytes()).c_str(),
                    static_cast<long long>(a.hidden + 1), mib(wider).c_str());
      } else {
        std::printf("          capacities:");
        for (auto c : a.capacities) std::printf(" %.4f", c);
        std::printf("\n");
      }
    }
    std::fflush(stdout);
    for (std::size_t ai = 0; ai < fr.arms.size(); ++ai)
      for (auto lr : o.lrs)
        for (auto s : o.steps) fr.runs.push_back(run_one(o, f, fr.arms, ai, lr, s, *loaded.train, *loaded.test));
    compare(fr);
    results.push_back(std::move(fr));
    if (!o.out.empty()) write_outputs(o, setup, results, started);  // after every fleet: a cut-short run keeps what it measured
  }

  std::printf("\n%s", report(o, setup, results, started).c_str());
  if (!o.out.empty()) std::printf("\nwritten: %s/table.md, %s/curves.csv, %s/curves-<fleet>.svg\n", o.out.c_str(), o.out.c_str(), o.out.c_str());
  return 0;
}
