#include "tessera/net/task.hpp"

#include <cmath>
#include <optional>

#include <nlohmann/json.hpp>

#include "tessera/core/config/base64.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/net/error.hpp"

namespace tessera::net {
namespace {

using json = nlohmann::json;

core::error bad(const std::string& field, const std::string& what) {
  return make_error(errc::bad_field, "ASSIGN: field '" + field + "': " + what);
}

core::result<std::int64_t> integer(const json& j, const char* key, std::int64_t min, std::int64_t max) {
  auto it = j.find(key);
  if (it == j.end()) return bad(key, "missing");
  if (!it->is_number_integer()) return bad(key, "expected an integer");
  const auto v = it->get<std::int64_t>();
  if (v < min || v > max) return bad(key, std::to_string(v) + " is outside [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  return v;
}

core::result<double> number(const json& j, const char* key, double min, double max) {
  auto it = j.find(key);
  if (it == j.end()) return bad(key, "missing");
  if (!it->is_number()) return bad(key, "expected a number");
  const auto v = it->get<double>();
  if (!std::isfinite(v) || v < min || v > max) return bad(key, "outside [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  return v;
}

// A convolutional network's input_shape and layers, when the task has them: checked against `inputs`
// and the widths, every shape computed before anything is sized by them.
core::result<void> read_layers(const json& j, std::int64_t inputs, core::mlp_arch& arch) {
  const auto layers = j.find("layers");
  const auto shape = j.find("input_shape");
  if (layers == j.end() && shape == j.end()) return {};
  if (layers == j.end() || shape == j.end()) return bad(layers == j.end() ? "layers" : "input_shape", "missing (the two go together)");
  if (!shape->is_array() || shape->size() > 3) return bad("input_shape", "expected one to three integers");
  std::vector<std::int64_t> dims;
  for (const auto& d : *shape) {
    if (!d.is_number_integer()) return bad("input_shape", "expected integers");
    dims.push_back(d.get<std::int64_t>());
  }
  auto in = core::parse_input_shape(dims, "ASSIGN: field 'input_shape'");
  if (!in) return make_error(errc::bad_field, in.error().message);
  if (in.value().size() != inputs) return bad("input_shape", "holds " + std::to_string(in.value().size()) + " values, but inputs is " + std::to_string(inputs));
  auto parsed = core::parse_layers(*layers, "ASSIGN: field 'layers'");
  if (!parsed) return make_error(errc::bad_field, parsed.error().message);
  if (parsed.value().empty()) return bad("layers", "empty (an MLP sends no layers)");
  arch.input = in.value();
  arch.layers = std::move(parsed).value();
  arch.widths.front() = arch.input.channels;
  if (auto ok = core::validate(arch, "ASSIGN: field 'layers'"); !ok) return make_error(errc::bad_field, ok.error().message);
  return {};
}

}  // namespace

std::vector<std::uint32_t> hidden_widths(const core::mlp_arch& arch) {
  std::vector<std::uint32_t> w;
  for (std::size_t l = 1; l + 1 < arch.widths.size(); ++l) w.push_back(static_cast<std::uint32_t>(arch.widths[l]));
  return w;
}

std::string task_to_json(const training_task& t) {
  json j;
  j["inputs"] = t.arch.inputs();
  j["outputs"] = t.arch.outputs();
  j["task"] = std::string(core::to_string(t.arch.task));
  j["layer_norm"] = t.arch.layer_norm;
  j["input_scale"] = t.arch.input_scale;
  if (!t.arch.layers.empty()) {  // a convolutional network: its layers, whose units `widths` gives
    j["input_shape"] = core::input_dims(t.arch.input);
    j["layers"] = core::layers_json(t.arch.layers);
  }
  if (t.arch.frozen > 0) j["frozen"] = t.arch.frozen;  // successive layer training: absent, none
  if (core::compact_frozen(t.arch)) j["frozen_codec"] = std::string(core::to_string(t.arch.frozen_codec));  // absent: f32
  j["steps"] = t.steps;
  j["batch"] = t.batch;
  if (t.micro_batch > 0) j["micro_batch"] = t.micro_batch;  // absent: the whole batch at once
  j["lr"] = t.sgd.learning_rate;
  j["momentum"] = t.sgd.momentum;
  j["weight_decay"] = t.sgd.weight_decay;
  // Agents before Nesterov's removal require the field: written as false for them, read as nothing.
  j["nesterov"] = false;
  if (t.clip_norm > 0) j["clip_norm"] = t.clip_norm;
  if (t.normalization && !t.normalization->empty()) {
    j["input_mean"] = core::encode_floats(t.normalization->mean);
    j["input_std"] = core::encode_floats(t.normalization->std);
  }
  return j.dump();
}

core::result<training_task> task_from_assign(const msg::assign& a) {
  // messages.cpp already checked that hyper_json is one JSON object of bounded depth.
  const json j = json::parse(a.hyper_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad("hyper", "not a JSON object");
  training_task t;
  TESSERA_ASSIGN_OR_RETURN(const auto inputs, integer(j, "inputs", 1, core::k_max_width));
  TESSERA_ASSIGN_OR_RETURN(const auto outputs, integer(j, "outputs", 1, core::k_max_width));
  if (a.widths.empty()) return bad("widths", "a subnet needs at least one hidden layer");
  if (a.widths.size() > core::k_max_hidden_layers) return bad("widths", "more than " + std::to_string(core::k_max_hidden_layers) + " hidden layers");
  t.arch.widths.push_back(inputs);
  for (const auto w : a.widths) {
    if (w < 1 || w > core::k_max_width) return bad("widths", "width " + std::to_string(w) + " is outside [1, " + std::to_string(core::k_max_width) + "]");
    t.arch.widths.push_back(w);
  }
  t.arch.widths.push_back(outputs);
  // Bounded before the count is computed in 64 bits: each layer's product is below 2^40.
  std::int64_t count = 0;
  for (std::size_t l = 1; l < t.arch.widths.size(); ++l) count += (t.arch.widths[l - 1] + 3) * t.arch.widths[l];
  if (count > core::k_max_params) return bad("widths", "the subnet would have more than " + std::to_string(core::k_max_params) + " parameters");

  auto task = j.find("task");
  if (task == j.end() || !task->is_string()) return bad("task", "expected \"classification\" or \"regression\"");
  if (*task == "classification") t.arch.task = core::task_kind::classification;
  else if (*task == "regression") t.arch.task = core::task_kind::regression;
  else return bad("task", "expected \"classification\" or \"regression\"");
  auto ln = j.find("layer_norm");
  if (ln == j.end() || !ln->is_boolean()) return bad("layer_norm", "expected true or false");
  t.arch.layer_norm = ln->get<bool>();
  auto scale = j.find("input_scale");
  if (scale == j.end() || !scale->is_array() || scale->size() != t.arch.layer_count())
    return bad("input_scale", "expected " + std::to_string(t.arch.layer_count()) + " numbers, one per layer");
  for (const auto& s : *scale) {
    if (!s.is_number()) return bad("input_scale", "expected numbers");
    const auto v = s.get<double>();
    if (!std::isfinite(v) || v <= 0 || v > 1e6) return bad("input_scale", "each scale must be finite, positive and at most 1e6");
    t.arch.input_scale.push_back(static_cast<float>(v));
  }
  TESSERA_TRY(read_layers(j, inputs, t.arch));
  if (j.contains("frozen")) {  // leading layers held for the forward pass only, not trained nor sent back
    TESSERA_ASSIGN_OR_RETURN(t.arch.frozen, integer(j, "frozen", 0, static_cast<std::int64_t>(t.arch.layer_count()) - 1));
  }
  if (auto fc = j.find("frozen_codec"); fc != j.end()) {  // the frozen layers arrive, and are held, encoded so
    const auto held = fc->is_string() ? core::k_codec_names.find(fc->get<std::string>()) : std::nullopt;
    if (!held) return bad("frozen_codec", "expected one of " + core::k_codec_names.list());
    if (t.arch.frozen == 0 && *held != core::codec_kind::f32) return bad("frozen_codec", "given, but no layer is frozen");
    t.arch.frozen_codec = *held;
  }
  // Frozen layers are planned for training rounds that upload in the clear (a stage of successive layer
  // training): an evaluation, secure aggregation's masked change or a clipped one has no part for them.
  if (t.arch.frozen > 0 && (a.evaluate || a.secure))
    return bad("frozen", std::string("frozen layers in ") + (a.evaluate ? "an evaluation" : "a round with secure aggregation") +
                             ", which no hub plans: refused");
  TESSERA_ASSIGN_OR_RETURN(t.steps, integer(j, "steps", 1, max_task_steps));
  TESSERA_ASSIGN_OR_RETURN(t.batch, integer(j, "batch", 1, max_task_batch));
  if (j.contains("micro_batch")) {  // the step's batch in parts of this many examples: memory for them only
    TESSERA_ASSIGN_OR_RETURN(t.micro_batch, integer(j, "micro_batch", 1, t.batch));
    if (t.micro_batch == t.batch) t.micro_batch = 0;
  }
  TESSERA_ASSIGN_OR_RETURN(const double lr, number(j, "lr", 0.0, 100.0));
  TESSERA_ASSIGN_OR_RETURN(const double momentum, number(j, "momentum", 0.0, 0.9999));
  TESSERA_ASSIGN_OR_RETURN(const double decay, number(j, "weight_decay", 0.0, 1.0));
  // Earlier hubs sent "nesterov": false with every task (a field no device ever honoured): read as
  // nothing. Anything else asks for what no device trains, and is refused by name.
  if (auto nesterov = j.find("nesterov"); nesterov != j.end() && *nesterov != false)
    return bad("nesterov", "Nesterov momentum is not offered on devices (a device keeps no gradient apart from its velocity)");
  t.sgd = {.learning_rate = static_cast<float>(lr), .momentum = static_cast<float>(momentum), .weight_decay = static_cast<float>(decay)};
  if (j.contains("clip_norm")) {  // differential privacy: the change's L2 norm is clipped to it
    TESSERA_ASSIGN_OR_RETURN(t.clip_norm, number(j, "clip_norm", 1e-9, 1e9));
    if (t.arch.frozen > 0) return bad("clip_norm", "clipping with frozen layers, which no hub plans: refused");
  }
  // The model's input normalization, when it has one: float32 mean and std per input, base64.
  const auto mean = j.find("input_mean");
  const auto std_dev = j.find("input_std");
  if ((mean == j.end()) != (std_dev == j.end())) return bad(mean == j.end() ? "input_mean" : "input_std", "missing (the two go together)");
  if (mean != j.end()) {
    if (!mean->is_string() || !std_dev->is_string()) return bad("input_mean", "expected base64 text");
    const auto n = static_cast<std::size_t>(inputs);
    auto m = core::decode_floats(mean->get<std::string>(), n, "ASSIGN: field 'input_mean'");
    if (!m) return make_error(errc::bad_field, m.error().message);
    auto s = core::decode_floats(std_dev->get<std::string>(), n, "ASSIGN: field 'input_std'");
    if (!s) return make_error(errc::bad_field, s.error().message);
    for (std::size_t i = 0; i < n; ++i) {
      if (!std::isfinite(m.value()[i])) return bad("input_mean", "value " + std::to_string(i) + " is not finite");
      if (!std::isfinite(s.value()[i]) || !(s.value()[i] > 0))
        return bad("input_std", "value " + std::to_string(i) + " is not a finite positive number");
    }
    t.normalization = std::make_shared<const core::input_normalization>(
        core::input_normalization{.mean = std::move(m).value(), .std = std::move(s).value()});
  }
  return t;
}

}  // namespace tessera::net
