// tessera/core/math/layers.hpp — a network as a list of layers: the model spec's `input_shape` and
// `layers`, the shape after each layer, and errors that name the layer and both shapes.
//
// In a model spec (core/math/model_spec.hpp) the hidden layers may be listed one by one, the output
// layer still coming from `outputs` (a dense layer, whole):
//
//   "input_shape": [1, 28, 28],          // [n] flat; [steps, features] a sequence; [channels, height, width] an image
//   "layers": [{"conv2d": {"channels": 32, "kernel": 3, "stride": 1, "padding": "same"}},
//              {"max_pool": 2},
//              {"conv2d": {"channels": 64, "kernel": 3}},
//              {"global_avg_pool": true},  // or {"flatten": true}: a dense layer takes a flat input
//              {"dense": 128}]
//
// `hidden: [512, 512]` stays valid as the shorthand of dense layers on a flat input. An example's
// features are in the order input_shape writes (numpy's reshape): an image channel by channel, a
// sequence step by step. The layers run channels-last (core/math/conv.hpp): an image [C, H, W] is held
// as H × W × C (the network moves a many-channel image there first), a sequence [T, F] as 1 × T × F,
// a flat input [n] as 1 × 1 × n. IST partitions the units of every parametric hidden layer:
// a dense layer's neurons, a convolution's output channels (hidden_units).
//
//   auto layers = core::parse_layers(json["layers"], "hub.json: field 'model.layers'");
//   auto shapes = core::layer_shapes(input.value(), layers.value(), 10, "hub.json: field 'model.layers'");
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tessera/core/base/error.hpp"
#include "tessera/core/base/names.hpp"
#include "tessera/core/math/conv.hpp"

namespace tessera::core {

enum class layer_kind { dense, conv1d, conv2d, max_pool, global_avg_pool, flatten };
inline constexpr auto k_layer_names =
    names_in_order<layer_kind>({"dense", "conv1d", "conv2d", "max_pool", "global_avg_pool", "flatten"});

struct layer_spec {
  layer_kind kind = layer_kind::dense;
  std::int64_t units = 0;   // dense: neurons; conv1d, conv2d: output channels
  std::int64_t kernel = 0;  // conv1d, conv2d
  std::int64_t stride = 1;  // conv1d, conv2d: 1 or 2
  padding_kind padding = padding_kind::same;
  std::int64_t pool = 0;  // max_pool: the window (and stride)

  [[nodiscard]] bool parametric() const noexcept { return kind == layer_kind::dense || kind == layer_kind::conv1d || kind == layer_kind::conv2d; }
  [[nodiscard]] bool operator==(const layer_spec&) const = default;
};

// Limits that keep a hostile or mistaken spec from asking for absurd work.
inline constexpr std::size_t k_max_layers = 64;
inline constexpr std::int64_t k_max_kernel = 15;
inline constexpr std::int64_t k_max_dimension = 1 << 16;  // of input_shape's entries

// input_shape as written ([n], [steps, features] or [channels, height, width]) held channels-last;
// `where` names the field in errors.
[[nodiscard]] result<tensor_shape> parse_input_shape(std::span<const std::int64_t> dims, std::string_view where);
// The shape as input_shape writes it: [n], [steps, features] or [channels, height, width].
[[nodiscard]] std::vector<std::int64_t> input_dims(const tensor_shape& shape);
// The layers of a JSON array, each an object with one key: {"dense": 128}, {"conv2d": {"channels": 32,
// "kernel": 3, "stride": 1, "padding": "same"}} (stride 1 and same padding by default), {"max_pool": 2},
// {"global_avg_pool": true}, {"flatten": true}. Errors name the entry ("…: layer 3 (conv2d): …").
[[nodiscard]] result<std::vector<layer_spec>> parse_layers(const nlohmann::json& array, std::string_view where);
// The list as JSON (round-trips through parse_layers).
[[nodiscard]] nlohmann::json layers_json(std::span<const layer_spec> layers);
// "conv2d 32 k3" "max_pool 2" "dense 128": for logs and the status page.
[[nodiscard]] std::string layer_text(const layer_spec& layer);

// The shape after each layer (shapes[i] after layers[i]), then the output layer's [outputs]. A
// convolution on a flat input, a dense layer on a shaped one, a 2-D layer on a sequence (or the
// reverse), a window larger than its input, or a list that does not end flat are refused, naming the
// layer (counted from 1) and both shapes.
[[nodiscard]] result<std::vector<tensor_shape>> layer_shapes(const tensor_shape& input, std::span<const layer_spec> layers,
                                                             std::int64_t outputs, std::string_view where);

// The units IST partitions, per parametric hidden layer in order (dense neurons, output channels).
[[nodiscard]] std::vector<std::int64_t> hidden_units(std::span<const layer_spec> layers);

// The layer kinds this build trains, by name: what an agent announces in HELLO.
[[nodiscard]] std::vector<std::string> layer_kind_names();
// The kinds `layers` uses that `known` does not name, each once, in the list's order ("conv2d,
// max_pool"); empty when `known` names them all. Dense layers need no name: every agent trains them.
[[nodiscard]] std::string missing_layer_kinds(std::span<const layer_spec> layers, std::span<const std::string> known);

}  // namespace tessera::core
