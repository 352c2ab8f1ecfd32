// tessera/core/math/model_spec.hpp — what network is trained: widths, task, initialisation, compensation.
//
// A model specification is a small JSON object. Every field but the widths has a default:
//
//   { "inputs": 784, "hidden": [512, 512], "outputs": 10,   // or "input_shape" and "layers" (layers.hpp)
//     "task": "classification",            // or "regression" (MSE)
//     "init": "he_uniform",                // or "he_normal", "xavier_uniform"
//     "compensation": "layer_norm",        // how narrow subnets match the full model, see below
//     "input_normalization": "none",       // or "standardize": inputs standardized with the fleet's
//                                          // statistics (core/data/fed_stats.hpp), part of the model
//     "seed": 1 }
//
//   auto spec = core::parse_model_spec(text, "hub.json:model");  // errors name the field and source
//   std::vector<float> params(core::param_count(spec.value().full_arch()));
//   core::initialize(spec.value(), params);
//
// `compensation` (DESIGN.md §2): a subnet holds |G| of a layer's n neurons, so its pre-activations are
// smaller than the full model's. "none" leaves them; "scale" multiplies each layer's input by n/|G| in
// the subnet (inverted dropout, the full model runs unscaled); "layer_norm" adds a LayerNorm after every
// hidden layer whose gain and bias are partitioned with their neurons; "layer_norm_scale" does both.
// bench/ist_quality measured them; the default is the winner recorded there.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/base/error.hpp"
#include "tessera/core/base/names.hpp"
#include "tessera/core/math/layers.hpp"

namespace tessera::core {

enum class task_kind { classification, regression };
enum class init_kind { he_uniform, he_normal, xavier_uniform };
enum class compensation_kind { none, scale, layer_norm, layer_norm_scale };
enum class input_normalization_kind { none, standardize };
// How parameters travel (DESIGN.md §3): fp32, fp16, or int8 with one fp32 scale per row (codec.hpp).
enum class codec_kind { f32, f16, q8 };

inline constexpr auto k_task_names = names_in_order<task_kind>({"classification", "regression"});
inline constexpr auto k_init_names = names_in_order<init_kind>({"he_uniform", "he_normal", "xavier_uniform"});
inline constexpr auto k_compensation_names = names_in_order<compensation_kind>({"none", "scale", "layer_norm", "layer_norm_scale"});
inline constexpr auto k_input_normalization_names = names_in_order<input_normalization_kind>({"none", "standardize"});
[[nodiscard]] inline std::string_view to_string(task_kind v) noexcept { return k_task_names.name(v); }
[[nodiscard]] inline std::string_view to_string(init_kind v) noexcept { return k_init_names.name(v); }
[[nodiscard]] inline std::string_view to_string(compensation_kind v) noexcept { return k_compensation_names.name(v); }
inline constexpr auto k_codec_names = names_in_order<codec_kind>({"f32", "f16", "q8"});
[[nodiscard]] inline std::string_view to_string(codec_kind c) noexcept { return k_codec_names.name(c); }

// The shape of one concrete network: the full model or a subnet cut out of it.
// widths = {n0 (inputs), n1..nL (hidden), nL+1 (outputs)}; input_scale[l-1] multiplies the input of
// layer l (1 for the full model; n/|G| for a scaled subnet).
// A convolutional network (core/math/layers.hpp) lists its hidden layers in `layers` and the shape of
// its input in `input`: widths then holds the units of its parametric layers (a dense layer's neurons,
// a convolution's output channels), n0 being the input's channels, and the layers between them
// (pooling, flatten) come from `layers`. Empty `layers`: the MLP of widths on a flat input.
// `frozen` leading parametric layers are held for the forward pass only (successive layer training):
// no gradient, no optimizer state, and not part of the update a device sends; the output layer is
// always trained (frozen < layer_count()). `frozen_codec` is how the frozen layers travel and are held:
// f32 in the parameters like the others, or f16/q8 encoded (codec.hpp), each layer read a block of
// rows at a time in the forward pass, in a fraction of the memory (compact_frozen; frozen.hpp).
struct mlp_arch {
  std::vector<std::int64_t> widths;
  task_kind task = task_kind::classification;
  bool layer_norm = false;
  std::vector<float> input_scale;
  tensor_shape input{};
  std::vector<layer_spec> layers{};
  std::int64_t frozen = 0;
  codec_kind frozen_codec = codec_kind::f32;

  [[nodiscard]] std::size_t layer_count() const noexcept { return widths.size() - 1; }  // L + 1 parametric layers
  [[nodiscard]] std::size_t hidden_layers() const noexcept { return widths.size() - 2; }
  // Features per example (an image's or a sequence's values, flat).
  [[nodiscard]] std::int64_t inputs() const noexcept { return layers.empty() ? widths.front() : input.size(); }
  [[nodiscard]] std::int64_t outputs() const noexcept { return widths.back(); }
};

// The frozen layers are held encoded: a network's parameter buffer then holds only the trained ones.
[[nodiscard]] inline bool compact_frozen(const mlp_arch& arch) noexcept { return arch.frozen > 0 && arch.frozen_codec != codec_kind::f32; }

struct model_spec {
  std::int64_t inputs = 0;
  std::vector<std::int64_t> hidden;
  std::int64_t outputs = 0;
  task_kind task = task_kind::classification;
  init_kind init = init_kind::he_uniform;
  compensation_kind compensation = compensation_kind::layer_norm;
  // standardize: the model starts with x' = (x − mean) / std per input, mean and std measured over the
  // fleet before round 1 (the values live beside the parameters: core/data/input_normalization.hpp).
  input_normalization_kind input_normalization = input_normalization_kind::none;
  std::uint64_t seed = 1;
  // A convolutional network (layers.hpp): an example's shape as written ([n], [steps, features] or
  // [channels, height, width]; its product is `inputs`) and the hidden layers one by one. `hidden` then
  // holds the units of the parametric ones, what IST partitions. Both empty: the MLP of `hidden`.
  std::vector<std::int64_t> input_shape{};
  std::vector<layer_spec> layers{};

  // The full model's architecture (all input scales 1).
  [[nodiscard]] mlp_arch full_arch() const;
};

// Limits that keep a hostile or mistaken spec from asking for absurd memory.
inline constexpr std::int64_t k_max_width = 1 << 20;
inline constexpr std::size_t k_max_hidden_layers = 64;
inline constexpr std::int64_t k_max_params = std::int64_t{1} << 31;

// Parses and validates a JSON model spec; `source` names where it came from in error messages.
[[nodiscard]] result<model_spec> parse_model_spec(std::string_view json_text, std::string_view source);
// Reads a spec's fields from a configuration object (a command's "model"), each field defaulting to
// `defaults`'; the spec is validated. Errors are kept by the reader; the result is the spec read.
class config_reader;
[[nodiscard]] model_spec read_model_spec(config_reader& r, const model_spec& defaults);
// Reads a JSON file holding a model spec, or a configuration (hub, simulator) whose `model` is one.
[[nodiscard]] result<model_spec> load_model_spec(const std::string& path);
// The widths as people write them: "784-512-512-10".
[[nodiscard]] std::string widths_text(const model_spec& spec);
// The spec as JSON text (round-trips through parse_model_spec).
[[nodiscard]] std::string to_json(const model_spec& spec);
// Checks widths and limits; used by the parser and by anything that builds a spec in code.
[[nodiscard]] result<void> validate(const model_spec& spec, std::string_view source);

// Fills `params` (param_count(spec.full_arch()) floats) deterministically from spec.seed.
void initialize(const model_spec& spec, std::span<float> params);

}  // namespace tessera::core
