// bench_equal_budget_cell — one run of the equal-memory map (bench/equal_budget/map.py drives it):
// one task, model family, fleet, data split, device budget, method and setting, and seed, through
// tessera-sim's rounds in process. It writes the run's curve as JSON.
//
// The budget. Every device has the arena budget B(W) = core::bytes_needed (batch 32, momentum, f32: the
// formula the hub plans with and the agent enforces) of the family's model at width W:
//   mlp  in-W-W-out, layer norm (the simulator's default model)
//   cnn  conv2d(W, 3×3) max_pool 2, conv2d(2W, 3×3) max_pool 2, dense(4W), out; layer norm
// Methods, each held to B(W) on every device in every round (checked: a subnet over it aborts the run):
//   fedavg   every device trains the whole model of width W: the widest that fits
//   ist      a global model of width G·W for --groups G, the devices dealt into G groups; each device's
//            subnet is sized by core::capacity_for_budget of B(W), as the hub sizes it; --ist adds
//            run-configuration fields (cut, repartition_every, ...). No whole-model rounds: no device
//            could run one.
//   central  the model of width W trained by one device holding every training example, no budget:
//            the capacity reference (is width W capacity-bound on this task?)
//   slt      successive layer training (strategy slt): a global model of width G·W (or --widen F: F·W),
//            every device given
//            the budget B(W) (budgets_mib), within which the engine plans each stage (the layers below
//            frozen, the head at --ist's slt.head_fraction) and cuts the stage's layer into as few groups
//            as cover it. A stage no device can train within B(W): the run is written as infeasible.
// --unconstrained: IST's global model is the model of width W too, every device can hold it
// (capacity 1, the budget B(W)); its subnets are the plan's groups, and --ist may ask for whole-model
// rounds. The comparison where memory does not bind.
// --micro-batch M: each step's 32 examples are taken in parts of M (run_config.micro_batch), so a
// device's memory holds M rows of activations: the width trained is the widest whose model fits B(W)
// at M rows (for IST, subnets of that width in a global model G times as wide). The same steps.
// Data. The task's training set loses a validation split (10%, a fixed draw, the same for every run),
// the rest is dealt to the devices (IID, or Dirichlet label skew: --split dir0.3); every device trains
// on its whole shard. The global model is scored on the validation split (what the map selects
// settings on) and on the test set (what it reports), before round 1, every --eval-every rounds and
// after the last.
// Cost. Bytes moved (down + up, all devices) and modelled time: every device behind its own link of
// --rate-kbit and --latency-ms, a round as long as its slowest device (bench/common/link_time.hpp),
// compute the device's share, by parameters, of the round measured here on one core.
//
//   bench_equal_budget_cell --task fashion|mnist|letter --model mlp|cnn --width W --devices N
//       --split iid|dirX --method fedavg|ist|slt|central [--groups G] --lr LR --steps S --rounds R
//       [--eval-every 10] [--seed 1] [--ist JSON] [--rate-kbit 1000] [--latency-ms 100]
//       [--unconstrained] [--compensation layer_norm] [--micro-batch M] [--widen F] [--datasets DIR] --out FILE.json
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/link_time.hpp"
#include "common/must.hpp"
#include "common/options.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/core/train/train.hpp"
#include "tessera/rounds/sim/shards.hpp"
#include "tessera/rounds/sim/simulation.hpp"

namespace {

using namespace tessera;
using bench::die;
using bench::must;
using clock_type = std::chrono::steady_clock;

constexpr std::int64_t k_batch = 32;
constexpr double k_momentum = 0.9;
constexpr core::codec_kind k_codec = core::codec_kind::f32;
constexpr std::int64_t k_min_width = 1;       // IST: a subnet as narrow as the budget makes it
constexpr double k_validation_fraction = 0.1;
constexpr std::uint64_t k_validation_seed = 7;  // the same validation split for every run of a task

struct options {
  std::string task, model = "mlp", split = "iid", method, ist_text = "{}", datasets = "build/datasets", out;
  std::string compensation = "layer_norm";  // the model's; none, scale, layer_norm or layer_norm_scale
  std::int64_t width = 0, groups = 1, steps = 0, rounds = 0, eval_every = 10;
  std::size_t devices = 0;
  std::int64_t seed = 1;
  double lr = 0, rate_kbit = 1000, latency_ms = 100;
  bool unconstrained = false;
  std::int64_t micro_batch = 0;  // > 0: steps in micro-batches, the model widened to what B(W) holds at these rows
  std::int64_t trained = 0;      // the width trained: W, or with micro-batches the widest that fits B(W)
  double widen = 0;              // slt: the global model's width over the width trained (0: --groups)
  [[nodiscard]] std::int64_t global_width() const noexcept {
    return widen > 0 ? std::max<std::int64_t>(1, std::llround(widen * static_cast<double>(trained))) : groups * trained;
  }
  [[nodiscard]] std::int64_t memory_rows() const noexcept { return micro_batch > 0 ? micro_batch : 32; }
};

struct task {
  nlohmann::json train, test;
  std::vector<std::int64_t> image;  // [channels, height, width]; empty: a vector of features
  std::int64_t inputs = 0, outputs = 0;
};

task task_named(const options& o) {
  const auto idx = [](const std::string& dir, const std::string& part, const char* ext) {
    return nlohmann::json{{"format", "idx"},
                          {"features", dir + "/" + part + "-images-idx3-ubyte" + ext},
                          {"labels", dir + "/" + part + "-labels-idx1-ubyte" + ext}};
  };
  if (o.task == "fashion") {
    const std::string dir = "/usr/share/datasets/fashion-mnist";
    return {idx(dir, "train", ".gz"), idx(dir, "t10k", ".gz"), {1, 28, 28}, 784, 10};
  }
  if (o.task == "mnist") return {idx(o.datasets + "/mnist", "train", ""), idx(o.datasets + "/mnist", "t10k", ""), {1, 28, 28}, 784, 10};
  if (o.task == "letter") {
    const auto csv = [&](const char* f) {
      return nlohmann::json{{"format", "csv"}, {"features", o.datasets + "/letter/" + f}, {"header", true}, {"label_column", 0},
                            {"normalization", "none"}};
    };
    return {csv("train.csv"), csv("test.csv"), {}, 16, 26};
  }
  die("--task: \"" + o.task + "\" is not fashion, mnist or letter");
}

nlohmann::json model_json(const options& o, const task& t, std::int64_t width, const std::string& compensation) {
  if (o.model == "mlp")
    return {{"inputs", t.inputs}, {"hidden", {width, width}}, {"outputs", t.outputs}, {"compensation", compensation}};
  if (o.model != "cnn") die("--model: \"" + o.model + "\" is neither mlp nor cnn");
  if (t.image.empty()) die("--model cnn: task " + o.task + " has no image shape");
  return {{"input_shape", t.image},
          {"outputs", t.outputs},
          {"compensation", compensation},
          {"layers",
           {{{"conv2d", {{"channels", width}, {"kernel", 3}}}}, {{"max_pool", 2}}, {{"conv2d", {{"channels", 2 * width}, {"kernel", 3}}}},
            {{"max_pool", 2}}, {{"flatten", true}}, {{"dense", 4 * width}}}}};
}

sim::sim_config config_for(const options& o, const task& t, const std::vector<double>& capacities, std::size_t budget = 0) {
  const bool ist = o.method == "ist", slt = o.method == "slt";
  nlohmann::json j = {{"model", model_json(o, t, ist && !o.unconstrained ? o.groups * o.trained : slt ? o.global_width() : o.trained, o.compensation)},
                      {"strategy", o.method},
                      {"devices", o.method == "central" ? 1 : o.devices},
                      {"rounds", o.rounds},
                      {"local_steps", o.steps},
                      {"batch", k_batch},
                      {"micro_batch", o.micro_batch},
                      {"lr", o.lr},
                      {"momentum", k_momentum},
                      {"lr_schedule", "cosine"},
                      {"codec", "f32"},
                      {"seed", o.seed},
                      {"eval_every", o.rounds},  // no device validation (fraction 0), no test set: scored here
                      {"data", {{"train", t.train}, {"test", {{"features", ""}}}, {"validation_fraction", 0}}}};
  if (o.split != "iid") {
    if (o.split.rfind("dir", 0) != 0) die("--split: \"" + o.split + "\" is neither iid nor dirALPHA (dir0.3)");
    j["partition"] = "dirichlet";
    j["alpha"] = bench::option::number("--split", o.split.substr(3));
  }
  if (ist) {
    j["groups"] = o.groups;
    j["min_width"] = k_min_width;
    j["whole_model_rounds"] = 0;
    if (!capacities.empty()) j["capacities"] = capacities;
    j.update(bench::json_object_option("--ist", o.ist_text));
  }
  if (slt) {
    j["groups"] = 0;  // as few as cover each stage's layer within the budget
    j["min_width"] = k_min_width;
    if (budget > 0) j["budgets_mib"] = {static_cast<double>(budget) / (1024.0 * 1024.0)};  // exact: a power of two
    j.update(bench::json_object_option("--ist", o.ist_text));
  }
  return must(sim::parse_sim_config(j, "bench_equal_budget_cell"));
}

std::size_t needed(const core::mlp_arch& a, std::int64_t rows = k_batch) { return core::bytes_needed(a, rows, k_momentum != 0, k_codec); }

// The widest width of the family whose model needs at most `budget` with `rows` rows in memory.
std::int64_t widest_within(const options& o, const task& t, std::size_t budget, std::int64_t rows) {
  const auto need = [&](std::int64_t w) {
    return needed(must(sim::parse_sim_config({{"model", model_json(o, t, w, "layer_norm")}}, "width")).model.full_arch(), rows);
  };
  std::int64_t lo = 1, hi = 2;
  while (need(hi) <= budget) lo = hi, hi *= 2;
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    (need(mid) <= budget ? lo : hi) = mid;
  }
  return lo;
}

std::string widths_of(const core::mlp_arch& a) {
  std::string s;
  for (std::size_t i = 0; i < a.widths.size(); ++i) s += (i ? "-" : "") + std::to_string(a.widths[i]);
  return s;
}

// The training set split into what the devices get and a validation split, by a fixed draw.
struct split_tables {
  core::memory_table train, validation;
};
split_tables split_validation(const core::memory_table& all) {
  std::vector<std::uint32_t> order(static_cast<std::size_t>(all.size()));
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::uint32_t>(i);
  std::mt19937_64 rng(k_validation_seed);  // a benchmark's fixed draw, no secret
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
  const auto held = static_cast<std::size_t>(std::llround(k_validation_fraction * static_cast<double>(order.size())));
  std::vector<std::uint32_t> val(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(held));
  std::vector<std::uint32_t> rest(order.begin() + static_cast<std::ptrdiff_t>(held), order.end());
  std::sort(val.begin(), val.end());
  std::sort(rest.begin(), rest.end());
  return {all.subset(rest, all.describe() + " (training part)"), all.subset(val, all.describe() + " (validation part)")};
}

// Letter's features are integer counts 0-15: standardized with the training part's mean and deviation.
core::memory_table standardized(const core::memory_table& t, const std::vector<double>& mean, const std::vector<double>& sd) {
  const auto n = static_cast<std::size_t>(t.feature_count());
  std::vector<float> x(t.features().begin(), t.features().end());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((x[i] - mean[i % n]) / sd[i % n]);
  return core::memory_table(t.feature_count(), std::move(x), std::vector<float>(t.targets().begin(), t.targets().end()), t.describe());
}
void standardize_all(core::memory_table& train, core::memory_table& val, core::memory_table& test) {
  const auto n = static_cast<std::size_t>(train.feature_count());
  std::vector<double> mean(n), sd(n);
  const auto x = train.features();
  const double rows = static_cast<double>(train.size());
  for (std::size_t i = 0; i < x.size(); ++i) mean[i % n] += x[i] / rows;
  for (std::size_t i = 0; i < x.size(); ++i) sd[i % n] += (x[i] - mean[i % n]) * (x[i] - mean[i % n]) / rows;
  for (auto& s : sd) s = std::max(std::sqrt(s), 1e-6);
  train = standardized(train, mean, sd);
  val = standardized(val, mean, sd);
  test = standardized(test, mean, sd);
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  bench::parse_options(argc, argv, "bench/equal_budget/cell.cpp",
                       {{"--task", o.task}, {"--model", o.model}, {"--width", o.width}, {"--devices", o.devices}, {"--split", o.split},
                        {"--method", o.method}, {"--groups", o.groups}, {"--lr", o.lr}, {"--steps", o.steps}, {"--rounds", o.rounds},
                        {"--eval-every", o.eval_every}, {"--seed", o.seed}, {"--ist", o.ist_text}, {"--rate-kbit", o.rate_kbit},
                        {"--latency-ms", o.latency_ms}, {"--datasets", o.datasets}, {"--out", o.out},
                        {"--unconstrained", o.unconstrained, true}, {"--compensation", o.compensation}, {"--micro-batch", o.micro_batch},
                        {"--widen", o.widen}});
  if (o.width < 1 || o.devices < 1 || o.steps < 1 || o.rounds < 1 || o.lr <= 0 || o.groups < 1 || o.eval_every < 1 || o.out.empty())
    die("--width, --devices, --steps, --rounds, --lr and --out are required and positive (see the file's header)");
  if (o.method != "fedavg" && o.method != "ist" && o.method != "slt" && o.method != "central")
    die("--method: \"" + o.method + "\" is not fedavg, ist, slt or central");
  if (o.method == "ist" && static_cast<std::size_t>(o.groups) > o.devices) die("--groups: more groups than devices");
  const task t = task_named(o);

  if (o.micro_batch < 0 || o.micro_batch >= k_batch) die("--micro-batch: a part of the batch of 32, 1 to 31 (0: none)");
  // The budget: what FedAvg's model of width W needs at batch 32 (with its layer norm, whatever
  // --compensation the run's model has); IST's capacities from it, as the hub computes them.
  const std::size_t budget =
      needed(must(sim::parse_sim_config({{"model", model_json(o, t, o.width, "layer_norm")}}, "budget")).model.full_arch());
  o.trained = o.micro_batch > 0 && !o.unconstrained ? widest_within(o, t, budget, o.memory_rows()) : o.width;
  const core::mlp_arch full = config_for(o, t, {}).model.full_arch();
  std::vector<double> capacities;
  if (o.method == "ist") {
    const double c =
        o.unconstrained ? 1.0 : core::capacity_for_budget(full, o.memory_rows(), k_momentum != 0, k_codec, budget, k_min_width);
    if (c <= 0) die("no IST subnet of " + widths_of(full) + " fits the budget of " + std::to_string(budget) + " bytes");
    capacities.assign(o.devices, c);
  }
  const auto cfg = config_for(o, t, capacities, o.method == "slt" ? budget : 0);

  auto data = must(sim::load_sim_data(cfg));
  auto test_cfg = cfg;
  test_cfg.data.train = must(sim::parse_sim_config({{"data", {{"train", t.test}}}}, "test")).data.train;
  auto test = std::move(*must(sim::load_sim_data(test_cfg)).train);
  auto [train, validation] = split_validation(*data.train);
  if (o.task == "letter") standardize_all(train, validation, test);

  const auto started = clock_type::now();
  // What every record of the run says: its settings (the map's keys; widen only where given) and budget.
  nlohmann::json record = {{"task", o.task},       {"model", o.model},         {"width", o.width},
                           {"devices", o.devices}, {"micro_batch", o.micro_batch}, {"trained_width", o.trained},
                           {"split", o.split},     {"method", o.method},       {"groups", o.groups},
                           {"lr", o.lr},           {"unconstrained", o.unconstrained}, {"steps", o.steps},
                           {"rounds", o.rounds},   {"seed", o.seed},           {"ist", bench::json_object_option("--ist", o.ist_text)},
                           {"budget_bytes", budget}, {"global", widths_of(full)}};
  if (o.widen > 0) record["widen"] = o.widen;
  auto created = sim::simulation::create(cfg, train, nullptr);
  // A stage B(W) cannot hold (the simulator's check before round 1): no run, said as such. Any other
  // failure stops the cell.
  if (!created && o.method == "slt" && created.error().message.find("cannot take part in every stage") != std::string::npos) {
    record.update({{"infeasible", created.error().message}, {"wall_s", 0}, {"curve", nlohmann::json::array()}});
    std::ofstream(o.out) << record.dump(1) << '\n';
    return 0;
  }
  auto federation = must(std::move(created));
  const core::network net(cfg.model.full_arch());
  const bench::link_time link{.rate_kbit = o.rate_kbit, .latency_ms = o.latency_ms};
  nlohmann::json curve = nlohmann::json::array();
  std::uint64_t bytes = 0;
  double seconds = 0, scoring = 0;
  std::size_t most = 0, least = SIZE_MAX;
  std::string widest;
  const auto score = [&](std::int64_t round) {
    const auto t0 = clock_type::now();
    const auto v = must(core::evaluate(net, federation->params(), validation));
    const auto e = must(core::evaluate(net, federation->params(), test));
    scoring += std::chrono::duration<double>(clock_type::now() - t0).count();
    curve.push_back({{"round", round}, {"bytes", bytes}, {"seconds", seconds}, {"val", v.accuracy}, {"test", e.accuracy}});
    std::printf("round %4lld  val %6.2f%%  test %6.2f%%  %8.1f MB  %6.1f modelled min\n", static_cast<long long>(round), 100 * v.accuracy,
                100 * e.accuracy, static_cast<double>(bytes) / 1e6, seconds / 60);
    std::fflush(stdout);
  };
  score(0);
  while (!federation->done()) {
    const auto m = must(federation->run_round());
    const auto& assigned = federation->engine().assignments();
    std::size_t params = 0;
    for (const auto& as : assigned) params += core::param_count(as.sub.arch);
    double slowest = 0;
    for (const auto& as : assigned) {
      const std::size_t need = needed(as.sub.arch, o.memory_rows());
      if (o.method != "central" && need > budget)
        die("round " + std::to_string(m.round) + ": " + as.device + "'s " + widths_of(as.sub.arch) + " needs " + std::to_string(need) +
            " bytes, over the budget of " + std::to_string(budget));
      if (need > most) widest = widths_of(as.sub.arch);
      most = std::max(most, need);
      least = std::min(least, need);
      const double share = m.seconds * static_cast<double>(core::param_count(as.sub.arch)) / static_cast<double>(params);
      slowest = std::max(slowest, link.seconds(as.bytes_down, as.bytes_up) + share);
    }
    seconds += slowest;
    bytes += m.bytes_down + m.bytes_up;
    if (m.round % o.eval_every == 0 || federation->done()) score(m.round);
  }
  record.update({{"global_params", core::param_count(full)},
                 {"trained", widest},
                 {"need_max", most},
                 {"need_min", least},
                 {"wall_s", std::chrono::duration<double>(clock_type::now() - started).count()},
                 {"scoring_s", scoring},
                 {"curve", curve}});
  std::ofstream(o.out) << record.dump(1) << '\n';
  return 0;
}
