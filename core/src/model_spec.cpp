#include "tessera/core/model_spec.hpp"

#include <cmath>

#include "tessera/core/json_config.hpp"
#include "tessera/core/mlp.hpp"
#include "tessera/core/rng.hpp"

namespace tessera::core {

std::string_view to_string(task_kind v) noexcept { return v == task_kind::classification ? "classification" : "regression"; }

std::string_view to_string(init_kind v) noexcept {
  switch (v) {
    case init_kind::he_uniform: return "he_uniform";
    case init_kind::he_normal: return "he_normal";
    case init_kind::xavier_uniform: return "xavier_uniform";
  }
  return "?";
}

std::string_view to_string(compensation_kind v) noexcept {
  switch (v) {
    case compensation_kind::none: return "none";
    case compensation_kind::scale: return "scale";
    case compensation_kind::layer_norm: return "layer_norm";
    case compensation_kind::layer_norm_scale: return "layer_norm_scale";
  }
  return "?";
}

result<compensation_kind> parse_compensation(std::string_view s) {
  for (auto k : {compensation_kind::none, compensation_kind::scale, compensation_kind::layer_norm,
                 compensation_kind::layer_norm_scale})
    if (s == to_string(k)) return k;
  return make_error(errc::invalid_spec,
                    "unknown compensation '" + std::string(s) + "' (none, scale, layer_norm, layer_norm_scale)");
}

mlp_arch model_spec::full_arch() const {
  mlp_arch a;
  a.widths.push_back(inputs);
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

result<model_spec> parse_model_spec(std::string_view json_text, std::string_view source) {
  TESSERA_ASSIGN_OR_RETURN(const nlohmann::json json, parse_json(json_text, source));
  config_reader r(json, std::string(source));
  model_spec spec;
  if (!r.has("inputs")) r.fail("inputs", "required");
  if (!r.has("outputs")) r.fail("outputs", "required");
  spec.inputs = r.integer("inputs", 1, 1, k_max_width);
  spec.hidden = r.integers("hidden", {}, 1, k_max_width);
  spec.outputs = r.integer("outputs", 1, 1, k_max_width);
  spec.task = r.choice("task", "classification", {"classification", "regression"}) == "regression"
                  ? task_kind::regression
                  : task_kind::classification;
  const std::string init = r.choice("init", "he_uniform", {"he_uniform", "he_normal", "xavier_uniform"});
  spec.init = init == "he_normal" ? init_kind::he_normal
              : init == "xavier_uniform" ? init_kind::xavier_uniform
                                          : init_kind::he_uniform;
  const std::string comp = r.choice("compensation", std::string(to_string(model_spec{}.compensation)),
                                    {"none", "scale", "layer_norm", "layer_norm_scale"});
  spec.compensation = parse_compensation(comp).ok() ? parse_compensation(comp).value() : model_spec{}.compensation;
  spec.seed = static_cast<std::uint64_t>(r.integer("seed", 1, 0, INT64_MAX));
  if (spec.hidden.size() > k_max_hidden_layers)
    r.fail("hidden", "more than " + std::to_string(k_max_hidden_layers) + " hidden layers");
  TESSERA_TRY(r.finish());
  TESSERA_TRY(validate(spec, source));
  return spec;
}

result<model_spec> load_model_spec(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(const nlohmann::json json, load_json_file(path));
  return parse_model_spec(json.dump(), path);
}

std::string to_json(const model_spec& spec) {
  nlohmann::json j;
  j["inputs"] = spec.inputs;
  j["hidden"] = spec.hidden;
  j["outputs"] = spec.outputs;
  j["task"] = to_string(spec.task);
  j["init"] = to_string(spec.init);
  j["compensation"] = to_string(spec.compensation);
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
