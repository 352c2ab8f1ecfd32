// tessera-edge: the device agent. `run` serves a hub over mutual TLS (the agent's normal life);
// `train-local` trains a subnet on a local data file inside a memory budget, with no network, so the
// runtime can be tried on a board alone.
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "tessera/core/memory.hpp"
#include "tessera/core/mlp.hpp"
#include "tessera/core/model_spec.hpp"
#include "tessera/edge/agent.hpp"
#include "tessera/edge/arena.hpp"
#include "tessera/edge/device_data.hpp"
#include "tessera/edge/process.hpp"

namespace {

using namespace tessera;

constexpr const char* k_usage = R"(usage: tessera-edge run --config FILE [KEY=VALUE ...]
       tessera-edge train-local [options]
       tessera-edge baseline

run: serves a hub. Connects over mutual TLS, trains each assigned subnet on this device's data inside
the memory budget, uploads it, and reconnects on its own (backoff with jitter) whenever the link drops.
Stop it with SIGTERM or SIGINT. Events go to standard error.
  --config FILE          JSON configuration (see examples/agent.json); KEY=VALUE overrides a field
Fields: hub (HOST:PORT), hub_name (the name the hub's certificate carries; default: the host),
tls{ca, cert, key}, data{format (idx|npy|csv), features, labels, normalization (none|scale_unit),
label_column, header, shuffle_buffer, max_batch, seed}, memory_budget_mib, codecs (["f32","f16","q8"]),
reconnect{initial_ms, max_ms, jitter}, rate_limit{upload_bytes_per_s, download_bytes_per_s} (caps for
metered links; 0: none), chunk_kib, window_kib (small on slow links: a cut resends at most a window),
heartbeat_s, idle_timeout_s, exit_after_rounds (0: forever).

train-local:

Trains a subnet of a model on a local data file inside a fixed memory budget (no network) and prints
progress. The subnet holds --fraction of every hidden layer of the model, as an IST round would give it.

model
  --model FILE           model spec (JSON); or --widths 784,512,512,10 (classification, layer_norm)
  --fraction F           share of every hidden layer the subnet holds, in (0, 1] (default 1: the whole model)
data
  --format idx|npy|csv   default idx
  --features PATH        IDX images, .npy features or the CSV file
  --labels PATH          IDX labels or .npy labels
  --normalization none|scale_unit|standardize   default scale_unit for idx/npy, none for csv
  --label-column N --header                      CSV layout
  --shuffle-buffer N     examples held to shuffle a stream (gzip IDX, CSV); default 1024
  --validation F         hold out a fraction for local validation, in [0, 0.5]
training
  --budget-mib M         memory budget for training state and data buffers (default 16)
  --steps N | --epochs E  default 1 epoch
  --batch B --lr X --momentum X --weight-decay X --seed N
  --progress-every N     steps between progress lines (default 100)
)";

struct options {
  std::string model_path;
  std::vector<std::int64_t> widths;
  double fraction = 1.0;
  edge::data_config data;
  bool norm_given = false;
  double budget_mib = 16;
  std::int64_t steps = 0;
  double epochs = 1;
  std::int64_t batch = 32;
  core::sgd_options sgd{.learning_rate = 0.05f, .momentum = 0.9f, .weight_decay = 0.0f, .nesterov = false};
  std::uint64_t seed = 1;
  std::int64_t progress_every = 100;
};

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "tessera-edge: %s\n", message.c_str());
  std::exit(1);
}

double number_arg(const std::string& flag, const char* text) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(v)) die(flag + ": '" + text + "' is not a number");
  return v;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(k_usage, stdout);
      std::exit(0);
    } else if (a == "--model") o.model_path = value();
    else if (a == "--widths") {
      std::string s = value();
      for (std::size_t p = 0; p <= s.size();) {
        const auto q = std::min(s.find(',', p), s.size());
        o.widths.push_back(static_cast<std::int64_t>(number_arg(a, s.substr(p, q - p).c_str())));
        p = q + 1;
      }
    } else if (a == "--fraction") o.fraction = number_arg(a, value());
    else if (a == "--format") o.data.format = value();
    else if (a == "--features") o.data.features = value();
    else if (a == "--labels") o.data.labels = value();
    else if (a == "--normalization") {
      const std::string n = value();
      o.norm_given = true;
      if (n == "none") o.data.norm = core::normalization::none;
      else if (n == "scale_unit") o.data.norm = core::normalization::scale_unit;
      else if (n == "standardize") o.data.norm = core::normalization::standardize;
      else die("--normalization: '" + n + "' is not one of none, scale_unit, standardize");
    } else if (a == "--label-column") o.data.label_column = static_cast<std::size_t>(number_arg(a, value()));
    else if (a == "--header") o.data.header = true;
    else if (a == "--shuffle-buffer") o.data.shuffle_buffer = static_cast<std::int64_t>(number_arg(a, value()));
    else if (a == "--validation") o.data.validation_fraction = number_arg(a, value());
    else if (a == "--budget-mib") o.budget_mib = number_arg(a, value());
    else if (a == "--steps") o.steps = static_cast<std::int64_t>(number_arg(a, value()));
    else if (a == "--epochs") o.epochs = number_arg(a, value());
    else if (a == "--batch") o.batch = static_cast<std::int64_t>(number_arg(a, value()));
    else if (a == "--lr") o.sgd.learning_rate = static_cast<float>(number_arg(a, value()));
    else if (a == "--momentum") o.sgd.momentum = static_cast<float>(number_arg(a, value()));
    else if (a == "--weight-decay") o.sgd.weight_decay = static_cast<float>(number_arg(a, value()));
    else if (a == "--seed") o.seed = static_cast<std::uint64_t>(number_arg(a, value()));
    else if (a == "--progress-every") o.progress_every = static_cast<std::int64_t>(number_arg(a, value()));
    else die("unknown option '" + a + "' (see tessera-edge train-local --help)");
  }
  if (o.data.features.empty()) die("--features is required");
  if (o.data.format != "csv" && o.data.labels.empty()) die("--labels is required for " + o.data.format);
  if (!o.norm_given && o.data.format == "csv") o.data.norm = core::normalization::none;
  if (!(o.fraction > 0 && o.fraction <= 1)) die("--fraction must be in (0, 1]");
  if (o.batch < 1 || o.batch > 256) die("--batch must be in [1, 256]");
  if (!(o.budget_mib > 0)) die("--budget-mib must be positive");
  if (o.progress_every < 1) o.progress_every = 1;
  o.data.max_batch = o.batch;
  return o;
}

int train_local(const options& o) {
  core::model_spec spec;
  if (!o.model_path.empty()) {
    auto s = core::load_model_spec(o.model_path);
    if (!s) die(s.error().message);
    spec = s.value();
  } else {
    if (o.widths.size() < 2) die("give --model FILE or --widths N0,N1,...,NOUT");
    spec.inputs = o.widths.front();
    spec.outputs = o.widths.back();
    spec.hidden.assign(o.widths.begin() + 1, o.widths.end() - 1);
    if (auto v = core::validate(spec, "--widths"); !v) die(v.error().message);
  }
  // The subnet: --fraction of every hidden layer, initialised as a model of its own (the full model is
  // never materialised on the device), with the input scales the compensation asks for.
  core::model_spec sub_spec = spec;
  for (auto& h : sub_spec.hidden) h = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::floor(o.fraction * static_cast<double>(h))));
  core::mlp_arch arch = sub_spec.full_arch();
  const bool scaled = spec.compensation == core::compensation_kind::scale || spec.compensation == core::compensation_kind::layer_norm_scale;
  for (std::size_t l = 1; scaled && l < arch.layers(); ++l)
    arch.input_scale[l] = static_cast<float>(spec.hidden[l - 1]) / static_cast<float>(sub_spec.hidden[l - 1]);

  const auto budget = static_cast<std::size_t>(o.budget_mib * 1024 * 1024);
  auto data = edge::device_data::open(o.data, o.seed);
  if (!data) die(data.error().message);
  const std::size_t data_bytes = data.value()->buffer_bytes();
  if (data_bytes >= budget)
    die("the data reader's buffers need " + std::to_string(data_bytes) + " bytes, the memory budget is " +
        std::to_string(budget) + " bytes (lower --shuffle-buffer)");
  auto arena = edge::training_arena::reserve(arch, o.batch, o.sgd.momentum != 0.0f, core::codec_kind::f32, budget - data_bytes);
  if (!arena) die(arena.error().message + " (after " + std::to_string(data_bytes) + " bytes of data buffers)");
  core::initialize(sub_spec, arena.value()->params());

  std::string widths;
  for (auto w : arch.widths) widths += (widths.empty() ? "" : "-") + std::to_string(w);
  std::printf("subnet %s (%zu parameters), batch %lld, compensation %s\n", widths.c_str(), core::param_count(arch),
              static_cast<long long>(o.batch), std::string(core::to_string(spec.compensation)).c_str());
  std::printf("memory: arena %zu bytes + data buffers %zu bytes = %zu of %zu budget; %lld training examples\n",
              arena.value()->size_bytes(), data_bytes, arena.value()->size_bytes() + data_bytes, budget,
              static_cast<long long>(data.value()->train_examples()));
  std::fflush(stdout);

  const std::int64_t steps = o.steps > 0 ? o.steps
                                         : std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(
                                               o.epochs * static_cast<double>(data.value()->train_examples()) / static_cast<double>(o.batch))));
  core::local_trainer trainer(arch, o.batch, arena.value()->buffers());
  const auto start = std::chrono::steady_clock::now();
  std::int64_t done = 0;
  double loss_sum = 0;
  while (done < steps) {
    const std::int64_t chunk = std::min(o.progress_every, steps - done);
    // One run in pieces: the momentum carries over from piece to piece.
    auto r = trainer.run(arena.value()->params(), data.value()->train(),
                         {.steps = chunk, .sgd = o.sgd, .cancel = nullptr, .keep_velocity = done > 0});
    if (!r) die(r.error().message);
    done += chunk;
    loss_sum += r.value().mean_loss * static_cast<double>(chunk);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("step %7lld/%lld  examples %9lld  loss %.4f  %.0f examples/s\n", static_cast<long long>(done),
                static_cast<long long>(steps), static_cast<long long>(done * o.batch), r.value().mean_loss,
                static_cast<double>(done * o.batch) / seconds);
    std::fflush(stdout);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("trained %lld steps, %lld examples in %.2f s (%.0f examples/s), mean loss %.4f\n", static_cast<long long>(steps),
              static_cast<long long>(steps * o.batch), seconds, static_cast<double>(steps * o.batch) / seconds,
              loss_sum / static_cast<double>(steps));
  if (data.value()->has_validation()) {
    auto ev = data.value()->validate(trainer.net(), arena.value()->params(), arena.value()->buffers(), o.batch);
    if (!ev) die(ev.error().message);
    std::printf("validation: %lld examples, loss %.4f, accuracy %.2f%%\n", static_cast<long long>(ev.value().examples),
                ev.value().loss, 100.0 * ev.value().accuracy);
  }
  std::printf("peak resident memory %.2f MiB\n", static_cast<double>(edge::peak_rss_bytes()) / (1024.0 * 1024.0));
  return 0;
}

int run(int argc, char** argv) {
  std::string config_path;
  std::vector<std::string> overrides;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(k_usage, stdout);
      return 0;
    }
    if (a == "--config") {
      if (i + 1 >= argc) die("--config needs a file");
      config_path = argv[++i];
    } else if (a.find('=') != std::string::npos && a.rfind("--", 0) != 0) {
      overrides.push_back(a);
    } else {
      die("unknown argument '" + a + "' (see tessera-edge --help)");
    }
  }
  if (config_path.empty() && overrides.empty()) die("run needs --config FILE (see tessera-edge --help)");
  auto config = edge::load_agent_config(config_path, overrides);
  if (!config) die(config.error().message);
  boost::asio::io_context io;
  const core::log_sink log = core::stderr_log("edge");
  auto agent = edge::agent::create(io, config.value(), log);
  if (!agent) die(agent.error().message);
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (!ec) agent.value()->stop();
  });
  agent.value()->start();
  // The agent posts stop() itself when exit_after_rounds is reached; then only the signal wait is left.
  while (!io.stopped()) {
    io.run_one();
    if (agent.value()->stopped()) signals.cancel();
  }
  const auto& s = agent.value()->stats();
  log(core::log_level::info, "stopped: " + std::to_string(s.accepted) + " updates accepted, " + std::to_string(s.rejected) +
                                       " rejected, " + std::to_string(s.refused) + " assignments refused; peak memory " +
                                       std::to_string(edge::peak_rss_bytes() >> 10) + " KiB");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(k_usage, stdout);
    return argc < 2 ? 1 : 0;
  }
  if (std::strcmp(argv[1], "run") == 0) return run(argc, argv);
  if (std::strcmp(argv[1], "train-local") == 0) return train_local(parse(argc, argv));
  if (std::strcmp(argv[1], "baseline") == 0) {
    // The process with no model at all: the memory benchmark's baseline.
    std::printf("peak resident memory %.2f MiB\n", static_cast<double>(edge::peak_rss_bytes()) / (1024.0 * 1024.0));
    return 0;
  }
  die(std::string("unknown command '") + argv[1] + "' (run, train-local, baseline; see --help)");
}
