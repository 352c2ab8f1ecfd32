// Tests of tessera/core/math/layers.hpp: input shapes, the layer list as JSON, the shapes through a
// network, and the errors naming the layer and both shapes.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/math/layers.hpp"

using namespace tessera;

namespace {

std::vector<core::layer_spec> layers_of(const nlohmann::json& j) {
  auto l = core::parse_layers(j, "m.json: field 'model.layers'");
  REQUIRE_MESSAGE(l.ok(), (l.ok() ? "" : l.error().message));
  return l.value();
}

std::string layers_error(const nlohmann::json& j) {
  auto l = core::parse_layers(j, "m.json: field 'model.layers'");
  REQUIRE_FALSE(l.ok());
  return l.error().message;
}

core::tensor_shape input(std::vector<std::int64_t> dims) {
  auto s = core::parse_input_shape(dims, "m.json: field 'model.input_shape'");
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message));
  return s.value();
}

std::string shapes_error(const core::tensor_shape& in, const nlohmann::json& layers) {
  auto s = core::layer_shapes(in, layers_of(layers), 10, "m.json: field 'model.layers'");
  REQUIRE_FALSE(s.ok());
  return s.error().message;
}

}  // namespace

TEST_CASE("layers: input_shape is held channels-last: [n] flat, [steps, features] a sequence, [channels, height, width] an image") {
  CHECK(input({784}) == core::tensor_shape{1, 1, 784});
  CHECK(input({28, 28}) == core::tensor_shape{1, 28, 28});  // 28 steps of 28 features
  CHECK(input({3, 32, 24}) == core::tensor_shape{32, 24, 3});
  CHECK(core::shape_text(input({3, 32, 24})) == "32×24×3");
  CHECK(core::shape_text(input({28, 28})) == "28×28");
  CHECK(core::shape_text(input({784})) == "784");
  const auto refused = [](std::vector<std::int64_t> dims) {
    auto s = core::parse_input_shape(dims, "m.json: field 'model.input_shape'");
    REQUIRE_FALSE(s.ok());
    return s.error().message;
  };
  CHECK(refused({}) == "m.json: field 'model.input_shape': expects [n], [steps, features] or [channels, height, width], not 0 numbers");
  CHECK(refused({1, 2, 3, 4}).ends_with("not 4 numbers"));
  CHECK(refused({0, 28}) == "m.json: field 'model.input_shape': 0 is not in [1, 65536]");
  CHECK(refused({3, 2048, 2048}) == "m.json: field 'model.input_shape': 12582912 inputs per example, more than 1048576");
  CHECK(refused({3, 1, 28}) == "m.json: field 'model.input_shape': an image of height 1: write it as a sequence, [width, channels], "
                               "its features position by position");
}

TEST_CASE("layers: the JSON list parses with its defaults, round-trips, and names a bad entry") {
  const nlohmann::json j = nlohmann::json::parse(R"([
    {"conv2d": {"channels": 32, "kernel": 3}},
    {"max_pool": 2},
    {"conv2d": {"channels": 64, "kernel": 5, "stride": 2, "padding": "valid"}},
    {"global_avg_pool": true},
    {"dense": 128}])");
  const auto l = layers_of(j);
  REQUIRE(l.size() == 5);
  CHECK(l[0] == core::layer_spec{.kind = core::layer_kind::conv2d, .units = 32, .kernel = 3, .stride = 1,
                                 .padding = core::padding_kind::same, .pool = 0});
  CHECK(l[1].pool == 2);
  CHECK(core::layer_text(l[2]) == "conv2d 64 k5 s2 valid");
  CHECK(core::layer_text(l[4]) == "dense 128");
  CHECK(layers_of(core::layers_json(l)) == l);
  CHECK(core::hidden_units(l) == std::vector<std::int64_t>{32, 64, 128});

  CHECK(layers_error(nlohmann::json::object()) == "m.json: field 'model.layers': expects a list of layers");
  CHECK(layers_error(R"([{"dense": 64}, {"conv2d": {"channels": 8}}])"_json) ==
        "m.json: field 'model.layers': layer 2 (conv2d): kernel is required");
  CHECK(layers_error(R"([{"conv1d": {"channels": 8, "kernel": 3, "stride": 3}}])"_json) ==
        "m.json: field 'model.layers': layer 1 (conv1d): stride is 3, must be in [1, 2]");
  CHECK(layers_error(R"([{"conv2d": {"channels": 8, "kernel": 3, "dilation": 2}}])"_json) ==
        "m.json: field 'model.layers': layer 1 (conv2d): unknown field 'dilation' (channels, kernel, stride, padding)");
  CHECK(layers_error(R"([{"lstm": 8}])"_json) ==
        "m.json: field 'model.layers': layer 1 (lstm): unknown layer 'lstm' (dense, conv1d, conv2d, max_pool, global_avg_pool, flatten)");
  CHECK(layers_error(R"([{"dense": 8, "max_pool": 2}])"_json).ends_with("layer 1: must be an object with one key: dense, conv1d, conv2d, "
                                                                        "max_pool, global_avg_pool or flatten"));
  CHECK(layers_error(R"([{"flatten": false}])"_json) == "m.json: field 'model.layers': layer 1 (flatten): takes true (it has no settings)");
  CHECK(layers_error(R"([{"max_pool": 1}])"_json).ends_with("layer 1 (max_pool): its window is 1, must be in [2, 8]"));
  nlohmann::json many = nlohmann::json::array();
  for (int i = 0; i < 65; ++i) many.push_back({{"dense", 8}});
  CHECK(layers_error(many) == "m.json: field 'model.layers': 65 layers, more than 64");
}

TEST_CASE("layers: shapes through an image network and a sequence network") {
  const auto image = core::layer_shapes(input({1, 28, 28}), layers_of(R"([
      {"conv2d": {"channels": 16, "kernel": 3}}, {"max_pool": 2},
      {"conv2d": {"channels": 32, "kernel": 3, "stride": 2}}, {"flatten": true}, {"dense": 64}])"_json),
                                        10, "m");
  REQUIRE(image.ok());
  CHECK(image.value() == std::vector<core::tensor_shape>{{28, 28, 16}, {14, 14, 16}, {7, 7, 32}, {1, 1, 1568}, {1, 1, 64}, {1, 1, 10}});
  const auto sequence = core::layer_shapes(input({28, 28}), layers_of(R"([
      {"conv1d": {"channels": 32, "kernel": 5, "padding": "valid"}}, {"max_pool": 2}, {"global_avg_pool": true}])"_json),
                                           10, "m");
  REQUIRE(sequence.ok());
  CHECK(sequence.value() == std::vector<core::tensor_shape>{{1, 24, 32}, {1, 12, 32}, {1, 1, 32}, {1, 1, 10}});
  // The MLP shorthand: dense layers on a flat input.
  const auto mlp = core::layer_shapes(input({784}), layers_of(R"([{"dense": 512}, {"dense": 512}])"_json), 10, "m");
  REQUIRE(mlp.ok());
  CHECK(mlp.value().back() == core::tensor_shape{1, 1, 10});
}

TEST_CASE("layers: shapes that do not fit are refused, naming the layer and both shapes") {
  const std::string where = "m.json: field 'model.layers': ";
  CHECK(shapes_error(input({784}), R"([{"conv2d": {"channels": 8, "kernel": 3}}])"_json) ==
        where + "layer 1 (conv2d 8 k3) on 784: needs an image: give input_shape as [channels, height, width]");
  CHECK(shapes_error(input({28, 28}), R"([{"conv2d": {"channels": 8, "kernel": 3}}])"_json) ==
        where + "layer 1 (conv2d 8 k3) on 28×28: needs an image: use conv1d on a sequence");
  CHECK(shapes_error(input({1, 28, 28}), R"([{"conv1d": {"channels": 8, "kernel": 3}}])"_json) ==
        where + "layer 1 (conv1d 8 k3) on 28×28×1: needs a sequence: use conv2d on an image");
  CHECK(shapes_error(input({1, 28, 28}), R"([{"conv2d": {"channels": 8, "kernel": 3}}, {"dense": 64}])"_json) ==
        where + "layer 2 (dense 64) on 28×28×8: takes a flat input: put {\"flatten\": true} or {\"global_avg_pool\": true} before it");
  CHECK(shapes_error(input({1, 4, 4}), R"([{"conv2d": {"channels": 8, "kernel": 7, "padding": "valid"}}])"_json) ==
        where + "layer 1 (conv2d 8 k7 valid) on 4×4×1: a convolution of 7×7 kernels, stride 1, on 4×4×1: the kernel is larger than the "
                "valid-padded input");
  CHECK(shapes_error(input({1, 4, 4}), R"([{"max_pool": 2}, {"max_pool": 4}])"_json).starts_with(where + "layer 2 (max_pool 4) on 2×2×1: "));
  CHECK(shapes_error(input({1, 28, 28}), R"([{"conv2d": {"channels": 8, "kernel": 3}}])"_json) ==
        "m.json: field 'model.layers': the last layer gives 28×28×8, but the output layer (dense 10) takes a flat input: end the list with "
        "{\"flatten\": true} or {\"global_avg_pool\": true}");
  // An image pooled down to one row would switch to a sequence's rules (and PyTorch's layers refuse it).
  CHECK(shapes_error(input({1, 4, 16}), R"([{"conv2d": {"channels": 4, "kernel": 3, "padding": "valid"}}, {"max_pool": 2}, {"flatten": true}])"_json) ==
        where + "layer 2 (max_pool 2) on 2×14×4 gives 7×4: an image may not shrink to one row (pool or convolve it to a single position, "
                "or keep more rows)");
  CHECK(shapes_error(input({1, 1024, 1024}), R"([{"conv2d": {"channels": 64, "kernel": 3}}, {"flatten": true}])"_json) ==
        where + "layer 1 (conv2d 64 k3) on 1024×1024×1 gives 1024×1024×64, more than 16777216 values per example");
}

TEST_CASE("layers: the kinds an agent announces, and those a model uses that an agent does not know") {
  const std::vector<std::string> all = core::layer_kind_names();
  CHECK(all == std::vector<std::string>{"dense", "conv1d", "conv2d", "max_pool", "global_avg_pool", "flatten"});
  const auto cnn = layers_of(R"([{"conv2d": {"channels": 8, "kernel": 3}}, {"max_pool": 2}, {"conv2d": {"channels": 8, "kernel": 3}},
                                 {"max_pool": 2}, {"flatten": true}, {"dense": 32}])"_json);
  CHECK(core::missing_layer_kinds(cnn, all).empty());
  CHECK(core::missing_layer_kinds(cnn, {}) == "conv2d, max_pool, flatten");  // each once, dense never
  const std::vector<std::string> some{"conv2d", "flatten", "a-later-kind"};
  CHECK(core::missing_layer_kinds(cnn, some) == "max_pool");
  CHECK(core::missing_layer_kinds(layers_of(R"([{"dense": 64}, {"dense": 32}])"_json), {}).empty());  // the hidden shorthand's
}
