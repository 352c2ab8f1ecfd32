#include "train_local.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "tessera/core/math/memory.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/core/math/model_spec.hpp"
#include "tessera/edge/arena.hpp"
#include "tessera/edge/device_data.hpp"
#include "tessera/edge/process.hpp"

namespace tessera::edge {
namespace {

using core::errc;
using core::make_error;

struct options {
  core::model_spec spec;
  double fraction = 1.0;
  data_config data;
  double budget_mib = 16;
  std::int64_t steps = 0;
  double epochs = 1;
  std::int64_t batch = 32;
  std::int64_t micro_batch = 0;  // > 0: each step in parts of this many examples (memory for them only)
  [[nodiscard]] std::int64_t memory_rows() const noexcept { return core::memory_rows(batch, micro_batch); }
  core::sgd_options sgd{.learning_rate = 0.05f, .momentum = 0.9f, .weight_decay = 0.0f};
  std::uint64_t seed = 1;
  std::int64_t progress_every = 100;
};

// The value of `flag` as a number within [min, max], or `fallback` when the flag is absent.
core::result<double> number(const core::command_line& line, std::string_view flag, double fallback, double min, double max) {
  if (!line.has(flag)) return fallback;
  const std::string text = line.value(flag);
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(v))
    return make_error(errc::invalid_argument, std::string(flag) + ": '" + text + "' is not a number");
  if (v < min || v > max)
    return make_error(errc::invalid_argument, std::string(flag) + ": " + text + " is outside [" + std::to_string(min) + ", " +
                                                  std::to_string(max) + "]");
  return v;
}

core::result<std::int64_t> integer(const core::command_line& line, std::string_view flag, std::int64_t fallback, std::int64_t min,
                                   std::int64_t max) {
  TESSERA_ASSIGN_OR_RETURN(const double v, number(line, flag, static_cast<double>(fallback), static_cast<double>(min),
                                                  static_cast<double>(max)));
  if (v != std::floor(v)) return make_error(errc::invalid_argument, std::string(flag) + ": expected a whole number");
  return static_cast<std::int64_t>(v);
}

template <class E, std::size_t N>
core::result<E> named(const core::command_line& line, std::string_view flag, E fallback, const core::name_table<E, N>& names) {
  if (!line.has(flag)) return fallback;
  const auto v = names.find(line.value(flag));
  if (!v) return make_error(errc::invalid_argument, std::string(flag) + ": '" + line.value(flag) + "' is not one of " + names.list());
  return *v;
}

core::result<core::model_spec> model_of(const core::command_line& line) {
  if (line.has("--model")) return core::load_model_spec(line.value("--model"));
  const std::string text = line.value("--widths");
  std::vector<std::int64_t> widths;
  for (std::size_t p = 0; p <= text.size() && !text.empty();) {
    const auto q = std::min(text.find(',', p), text.size());
    std::int64_t w = 0;
    const auto [end, ec] = std::from_chars(text.data() + p, text.data() + q, w);
    if (ec != std::errc{} || end != text.data() + q) return make_error(errc::invalid_argument, "--widths: '" + text + "' is not N0,N1,...");
    widths.push_back(w);
    p = q + 1;
  }
  if (widths.size() < 2) return make_error(errc::invalid_argument, "give --model FILE or --widths N0,N1,...,NOUT");
  core::model_spec spec;
  spec.inputs = widths.front();
  spec.outputs = widths.back();
  spec.hidden.assign(widths.begin() + 1, widths.end() - 1);
  TESSERA_TRY(core::validate(spec, "--widths"));
  return spec;
}

core::result<options> options_of(const core::command_line& line) {
  options o;
  TESSERA_ASSIGN_OR_RETURN(o.spec, model_of(line));
  TESSERA_ASSIGN_OR_RETURN(o.fraction, number(line, "--fraction", 1.0, 1e-9, 1.0));
  core::data_source& s = o.data.source;
  TESSERA_ASSIGN_OR_RETURN(s.format, named(line, "--format", core::data_format::idx, core::k_data_format_names));
  s.features = line.value("--features");
  s.labels = line.value("--labels");
  if (s.features.empty()) return make_error(errc::invalid_argument, "--features is required");
  if (s.format != core::data_format::csv && s.labels.empty())
    return make_error(errc::invalid_argument, "--labels is required for " + std::string(core::k_data_format_names.name(s.format)));
  const auto default_norm = s.format == core::data_format::csv ? core::normalization::none : core::normalization::scale_unit;
  TESSERA_ASSIGN_OR_RETURN(s.norm, named(line, "--normalization", default_norm, core::k_normalization_names));
  TESSERA_ASSIGN_OR_RETURN(const auto column, integer(line, "--label-column", 0, 0, 1 << 20));
  s.label_column = static_cast<std::size_t>(column);
  s.header = line.has("--header");
  TESSERA_ASSIGN_OR_RETURN(o.data.shuffle_buffer, integer(line, "--shuffle-buffer", 1024, 1, 1 << 24));
  TESSERA_ASSIGN_OR_RETURN(o.data.validation_fraction, number(line, "--validation", 0, 0, 0.5));
  TESSERA_ASSIGN_OR_RETURN(o.budget_mib, number(line, "--budget-mib", 16, 0.01, 1 << 20));
  TESSERA_ASSIGN_OR_RETURN(o.steps, integer(line, "--steps", 0, 0, std::int64_t{1} << 40));
  TESSERA_ASSIGN_OR_RETURN(o.epochs, number(line, "--epochs", 1, 1e-6, 1e6));
  TESSERA_ASSIGN_OR_RETURN(o.batch, integer(line, "--batch", 32, 1, 256));
  TESSERA_ASSIGN_OR_RETURN(o.micro_batch, integer(line, "--micro-batch", 0, 0, o.batch));
  if (o.micro_batch == o.batch) o.micro_batch = 0;
  TESSERA_ASSIGN_OR_RETURN(const double lr, number(line, "--lr", 0.05, 0, 100));
  TESSERA_ASSIGN_OR_RETURN(const double momentum, number(line, "--momentum", 0.9, 0, 0.9999));
  TESSERA_ASSIGN_OR_RETURN(const double decay, number(line, "--weight-decay", 0, 0, 1));
  o.sgd = {.learning_rate = static_cast<float>(lr), .momentum = static_cast<float>(momentum),
           .weight_decay = static_cast<float>(decay)};
  TESSERA_ASSIGN_OR_RETURN(const auto seed, integer(line, "--seed", 1, 0, std::int64_t{1} << 53));
  o.seed = static_cast<std::uint64_t>(seed);
  TESSERA_ASSIGN_OR_RETURN(o.progress_every, integer(line, "--progress-every", 100, 1, std::int64_t{1} << 40));
  o.data.max_batch = o.memory_rows();
  return o;
}

}  // namespace

const core::command k_train_local_command{
    .name = "tessera-edge train-local",
    .usage = "tessera-edge train-local (--model FILE | --widths N0,...,NOUT) --features PATH [--labels PATH] [options]",
    .about = "Trains a subnet of a model on a local data file inside a fixed memory budget (no network) and prints\n"
             "progress. The subnet holds --fraction of every hidden layer of the model, as an IST round would give it.",
    .options = {{.flag = "--model", .value = "FILE", .doc = "model spec (JSON)"},
                {.flag = "--widths", .value = "N0,...", .doc = "or the widths (classification, layer_norm): 784,512,512,10"},
                {.flag = "--fraction", .value = "F", .doc = "share of every hidden layer the subnet holds, in (0, 1] (default 1)"},
                {.flag = "--format", .value = "idx|npy|csv", .doc = "default idx"},
                {.flag = "--features", .value = "PATH", .doc = "IDX images, .npy features or the CSV file"},
                {.flag = "--labels", .value = "PATH", .doc = "IDX labels or .npy labels"},
                {.flag = "--normalization", .value = "KIND", .doc = "none|scale_unit|standardize; default scale_unit, none for csv"},
                {.flag = "--label-column", .value = "N", .doc = "CSV: the label's column"},
                {.flag = "--header", .value = "", .doc = "CSV: the first line names the columns"},
                {.flag = "--shuffle-buffer", .value = "N", .doc = "examples held to shuffle a stream (gzip IDX, CSV); default 1024"},
                {.flag = "--validation", .value = "F", .doc = "hold out a fraction for local validation, in [0, 0.5]"},
                {.flag = "--budget-mib", .value = "M", .doc = "memory budget for training state and data buffers (default 16)"},
                {.flag = "--steps", .value = "N", .doc = "steps to train (default: --epochs)"},
                {.flag = "--epochs", .value = "E", .doc = "passes over the data (default 1)"},
                {.flag = "--batch", .value = "B", .doc = "examples per step, at most 256 (default 32)"},
                {.flag = "--micro-batch", .value = "M", .doc = "take each step in parts of M examples: the same step in their memory"},
                {.flag = "--lr", .value = "X", .doc = "learning rate (default 0.05)"},
                {.flag = "--momentum", .value = "X", .doc = "default 0.9"},
                {.flag = "--weight-decay", .value = "X", .doc = "default 0"},
                {.flag = "--seed", .value = "N", .doc = "batch order and initial weights (default 1)"},
                {.flag = "--progress-every", .value = "N", .doc = "steps between progress lines (default 100)"}},
    .configured = false};

core::result<int> train_local(const core::command_line& line) {
  TESSERA_ASSIGN_OR_RETURN(const options o, options_of(line));
  const core::model_spec& spec = o.spec;
  // The subnet: --fraction of every hidden layer, initialised as a model of its own (the full model is
  // never materialised on the device), with the input scales the compensation asks for.
  core::model_spec sub_spec = spec;
  for (auto& h : sub_spec.hidden) h = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::floor(o.fraction * static_cast<double>(h))));
  std::size_t narrowed = 0;  // a convolutional network's layers hold their units too: its channels, its neurons
  for (auto& l : sub_spec.layers)
    if (l.parametric()) l.units = sub_spec.hidden[narrowed++];
  core::mlp_arch arch = sub_spec.full_arch();
  const bool scaled = spec.compensation == core::compensation_kind::scale || spec.compensation == core::compensation_kind::layer_norm_scale;
  for (std::size_t l = 1; scaled && l < arch.layer_count(); ++l)
    arch.input_scale[l] = static_cast<float>(spec.hidden[l - 1]) / static_cast<float>(sub_spec.hidden[l - 1]);

  const auto budget = static_cast<std::size_t>(o.budget_mib * 1024 * 1024);
  TESSERA_ASSIGN_OR_RETURN(auto data, device_data::open(o.data, o.seed));
  const std::size_t data_bytes = data->buffer_bytes();
  if (data_bytes >= budget)
    return make_error(errc::over_budget, "the data reader's buffers need " + std::to_string(data_bytes) + " bytes, the memory budget is " +
                                             std::to_string(budget) + " bytes (lower --shuffle-buffer)");
  auto reserved = training_arena::reserve(arch, o.memory_rows(), o.sgd.momentum != 0.0f, core::codec_kind::f32, budget - data_bytes);
  if (!reserved)
    return make_error(errc::over_budget, reserved.error().message + " (after " + std::to_string(data_bytes) + " bytes of data buffers)");
  training_arena& arena = *reserved.value();
  core::initialize(sub_spec, arena.params());

  std::printf("subnet %s (%zu parameters), batch %lld%s, compensation %s\n", core::widths_text(sub_spec).c_str(), core::param_count(arch),
              static_cast<long long>(o.batch), o.micro_batch > 0 ? (" in parts of " + std::to_string(o.micro_batch)).c_str() : "",
              std::string(core::to_string(spec.compensation)).c_str());
  std::printf("memory: arena %zu bytes + stack %zu bytes + data buffers %zu bytes = %zu of %zu budget; %lld training examples\n",
              arena.size_bytes(), arena.layout().stack_bytes, data_bytes, arena.layout().needed() + data_bytes, budget,
              static_cast<long long>(data->train_examples()));
  std::fflush(stdout);

  const std::int64_t steps = o.steps > 0 ? o.steps
                                         : std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(
                                               o.epochs * static_cast<double>(data->train_examples()) / static_cast<double>(o.batch))));
  core::local_trainer trainer(arch, o.memory_rows(), arena.buffers());
  const auto start = std::chrono::steady_clock::now();
  std::int64_t done = 0;
  double loss_sum = 0;
  while (done < steps) {
    const std::int64_t chunk = std::min(o.progress_every, steps - done);
    // One run in pieces: the momentum carries over from piece to piece.
    auto r = trainer.run(arena.params(), data->train(),
                         {.steps = chunk, .sgd = o.sgd, .batch = o.batch, .cancel = nullptr, .keep_velocity = done > 0});
    if (!r) return std::move(r).error();
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
  if (data->has_validation()) {
    auto ev = data->validate(trainer.net(), arena.params(), arena.buffers(), o.memory_rows());
    if (!ev) return std::move(ev).error();
    std::printf("validation: %lld examples, loss %.4f, accuracy %.2f%%\n", static_cast<long long>(ev.value().examples),
                ev.value().loss, 100.0 * ev.value().accuracy);
  }
  // The arena is still held: anonymous memory now is the run's largest (no step allocates).
  std::printf("peak resident memory %.2f MiB; anonymous now %zu KiB\n", static_cast<double>(peak_rss_bytes()) / (1024.0 * 1024.0),
              anonymous_rss_bytes() >> 10);
  return 0;
}

}  // namespace tessera::edge
