#include "tessera/core/math/model_spec.hpp"

#include <algorithm>
#include <cmath>

#include "tessera/core/base/rng.hpp"
#include "tessera/core/config/json_config.hpp"
#include "tessera/core/math/mlp.hpp"

namespace tessera::core {

mlp_arch model_spec::full_arch() const {
  mlp_arch a;
  if (!layers.empty()) {
    // A spec that was read is valid; one built in code and not validated gets an empty input, which validate refuses.
    if (auto in = parse_input_shape(input_shape.empty() ? std::vector<std::int64_t>{inputs} : input_shape, "input_shape"); in) a.input = in.value();
    else a.input = {.height = 1, .width = 1, .channels = 0};
    a.layers = layers;
  }
  a.widths.push_back(layers.empty() ? inputs : a.input.channels);
  a.widths.insert(a.widths.end(), hidden.begin(), hidden.end());
  a.widths.push_back(outputs);
  a.task = task;
  a.layer_norm = compensation == compensation_kind::layer_norm || compensation == compensation_kind::layer_norm_scale;
  a.input_scale.assign(a.widths.size() - 1, 1.0f);
  return a;
}

result<void> validate(const model_spec& spec, std::string_view source) {
  return validate(spec.full_arch(), source);
}

namespace {

// input_shape and layers: a convolutional network instead of the hidden widths.
void read_layers(config_reader& r, const model_spec& defaults, model_spec& spec) {
  spec.input_shape = r.integers("input_shape", defaults.input_shape, 1, k_max_dimension,
                                "an example's shape: [n], [steps, features] (a sequence) or [channels, height, width] (an image); "
                                "its product is inputs (with layers)");
  spec.layers = defaults.layers;
  if (const auto* l = r.value("layers", "list of layers",
                              "the hidden layers one by one, instead of hidden: {\"conv2d\": {\"channels\", \"kernel\", \"stride\", "
                              "\"padding\"}}, {\"conv1d\": {...}}, {\"max_pool\": 2}, {\"global_avg_pool\": true}, "
                              "{\"flatten\": true}, {\"dense\": n}")) {
    auto parsed = parse_layers(*l, r.where("layers"));
    if (!parsed) r.fail(std::move(parsed).error());
    else spec.layers = std::move(parsed).value();
    if (r.has("hidden")) r.fail("hidden", "give either hidden or layers, not both");
  }
  if (spec.layers.empty()) return;
  spec.hidden = hidden_units(spec.layers);
  if (spec.input_shape.empty()) spec.input_shape = {spec.inputs};
  std::int64_t product = 1;
  for (const std::int64_t d : spec.input_shape) product *= std::min<std::int64_t>(d, k_max_width + 1);
  if (r.has("inputs") && product != spec.inputs)
    r.fail("input_shape", "holds " + std::to_string(product) + " values, but inputs is " + std::to_string(spec.inputs));
  else spec.inputs = product;
  if (auto in = parse_input_shape(spec.input_shape, r.where("input_shape")); !in) r.fail(std::move(in).error());
  else if (auto shapes = layer_shapes(in.value(), spec.layers, spec.outputs, r.where("layers")); !shapes) r.fail(std::move(shapes).error());
}

}  // namespace

model_spec read_model_spec(config_reader& r, const model_spec& defaults) {
  model_spec spec;
  spec.inputs = r.integer("inputs", defaults.inputs, 1, k_max_width, "features per example (the input layer's width)");
  spec.hidden = r.integers("hidden", defaults.hidden, 1, k_max_width, "widths of the hidden layers, first to last");
  spec.outputs = r.integer("outputs", defaults.outputs, 1, k_max_width, "classes (classification) or 1 (regression)");
  spec.task = r.choice("task", defaults.task, k_task_names, "the loss: softmax cross-entropy or mean squared error");
  spec.init = r.choice("init", defaults.init, k_init_names, "how the weights start");
  spec.compensation = r.choice("compensation", defaults.compensation, k_compensation_names,
                               "how a narrow subnet matches the full model (layer_norm: normalisation after each hidden layer)");
  spec.input_normalization =
      r.choice("input_normalization", defaults.input_normalization, k_input_normalization_names,
               "standardize: inputs standardized with the fleet's mean and deviation, measured before round 1");
  spec.seed = static_cast<std::uint64_t>(r.integer("seed", static_cast<std::int64_t>(defaults.seed), 0, INT64_MAX,
                                                   "seed of the initial weights"));
  if (spec.hidden.size() > k_max_hidden_layers)
    r.fail("hidden", "more than " + std::to_string(k_max_hidden_layers) + " hidden layers");
  read_layers(r, defaults, spec);
  if (auto v = validate(spec, r.where()); !v) r.fail(std::move(v).error());
  return spec;
}

result<model_spec> parse_model_spec(std::string_view json_text, std::string_view source) {
  TESSERA_ASSIGN_OR_RETURN(const nlohmann::json json, parse_json(json_text, source));
  config_reader r(json, std::string(source));
  if (!r.has("inputs") && !r.has("input_shape")) r.fail("inputs", "required (or input_shape)");
  if (!r.has("outputs")) r.fail("outputs", "required");
  model_spec spec = read_model_spec(r, model_spec{});
  TESSERA_TRY(r.finish());
  return spec;
}

result<model_spec> load_model_spec(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(const nlohmann::json json, load_json_file(path));
  // A hub's or simulator's configuration: its model (a spec has no field of that name).
  if (const auto model = json.find("model"); json.is_object() && model != json.end() && model->is_object())
    return parse_model_spec(model->dump(), path + ": field 'model'");
  return parse_model_spec(json.dump(), path);
}

std::string widths_text(const model_spec& spec) {
  if (!spec.layers.empty()) {
    std::string out = "[";
    for (std::size_t i = 0; i < spec.input_shape.size(); ++i) out += (i > 0 ? "," : "") + std::to_string(spec.input_shape[i]);
    out += "]";
    for (const layer_spec& l : spec.layers) out += " " + layer_text(l) + ",";
    return out + " " + std::to_string(spec.outputs);
  }
  std::string out = std::to_string(spec.inputs);
  for (auto w : spec.hidden) out += "-" + std::to_string(w);
  return out + "-" + std::to_string(spec.outputs);
}

std::string to_json(const model_spec& spec) {
  nlohmann::json j;
  j["inputs"] = spec.inputs;
  if (spec.layers.empty()) {
    j["hidden"] = spec.hidden;
  } else {  // the layers say the hidden widths
    j["input_shape"] = spec.input_shape;
    j["layers"] = layers_json(spec.layers);
  }
  j["outputs"] = spec.outputs;
  j["task"] = to_string(spec.task);
  j["init"] = to_string(spec.init);
  j["compensation"] = to_string(spec.compensation);
  // Written only when set, so the files of models without it stay as they were.
  if (spec.input_normalization != input_normalization_kind::none)
    j["input_normalization"] = k_input_normalization_names.name(spec.input_normalization);
  j["seed"] = spec.seed;
  return j.dump();
}

void initialize(const model_spec& spec, std::span<float> params) {
  const mlp_arch arch = spec.full_arch();
  TESSERA_ASSERT(params.size() == param_count(arch));
  rng r(mix_seed(spec.seed, 0x1417));
  for (const layer_slots& s : param_slots(arch)) {
    const auto fan_in = static_cast<double>(s.cols);
    const auto fan_out = static_cast<double>(s.rows);
    const std::size_t n = static_cast<std::size_t>(s.rows * s.cols);
    float* w = params.data() + s.weight;
    switch (spec.init) {
      case init_kind::he_uniform: {
        const auto bound = static_cast<float>(std::sqrt(6.0 / fan_in));
        for (std::size_t i = 0; i < n; ++i) w[i] = (2.0f * r.uniform() - 1.0f) * bound;
        break;
      }
      case init_kind::xavier_uniform: {
        const auto bound = static_cast<float>(std::sqrt(6.0 / (fan_in + fan_out)));
        for (std::size_t i = 0; i < n; ++i) w[i] = (2.0f * r.uniform() - 1.0f) * bound;
        break;
      }
      case init_kind::he_normal: {
        // Box–Muller on our own generator: the same values on every platform with IEEE doubles.
        const double sd = std::sqrt(2.0 / fan_in);
        for (std::size_t i = 0; i < n; i += 2) {
          const double u1 = 1.0 - r.uniform_double();  // (0, 1]
          const double u2 = r.uniform_double();
          const double rad = std::sqrt(-2.0 * std::log(u1));
          w[i] = static_cast<float>(sd * rad * std::cos(2.0 * 3.141592653589793 * u2));
          if (i + 1 < n) w[i + 1] = static_cast<float>(sd * rad * std::sin(2.0 * 3.141592653589793 * u2));
        }
        break;
      }
    }
    std::fill_n(params.data() + s.bias, s.rows, 0.0f);
    if (s.has_norm) {
      std::fill_n(params.data() + s.gain, s.rows, 1.0f);
      std::fill_n(params.data() + s.shift, s.rows, 0.0f);
    }
  }
}

}  // namespace tessera::core
