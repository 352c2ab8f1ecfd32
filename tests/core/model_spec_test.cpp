#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "tessera/core/math/mlp.hpp"
#include "tessera/core/math/model_spec.hpp"

using namespace tessera::core;

namespace {
std::string error_of(std::string_view json) {
  auto r = parse_model_spec(json, "spec.json");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == make_error_code(errc::invalid_spec));
  return r.error().message;
}
}  // namespace

TEST_CASE("model spec: defaults and round trip") {
  auto r = parse_model_spec(R"({"inputs": 784, "hidden": [512, 256], "outputs": 10})", "spec.json");
  REQUIRE(r.ok());
  const model_spec& s = r.value();
  CHECK(s.inputs == 784);
  CHECK(s.hidden == std::vector<std::int64_t>{512, 256});
  CHECK(s.task == task_kind::classification);
  auto again = parse_model_spec(to_json(s), "again");
  REQUIRE(again.ok());
  CHECK(again.value().hidden == s.hidden);
  CHECK(again.value().compensation == s.compensation);
  CHECK(again.value().seed == s.seed);
  CHECK(param_count(s.full_arch()) == (784 * 512 + 512) + (512 * 256 + 256) + (256 * 10 + 10) +
                                          (s.full_arch().layer_norm ? 2 * (512 + 256) : 0));
}

TEST_CASE("model spec: missing inputs is named") { CHECK(error_of(R"({"outputs": 10})").find("'inputs'") != std::string::npos); }

TEST_CASE("model spec: negative hidden width is named with its index") {
  const auto m = error_of(R"({"inputs": 4, "hidden": [8, -1], "outputs": 2})");
  CHECK(m.find("hidden[1]") != std::string::npos);
  CHECK(m.find("spec.json") != std::string::npos);
}

TEST_CASE("model spec: wrong type is named") {
  CHECK(error_of(R"({"inputs": "784", "outputs": 10})").find("'inputs'") != std::string::npos);
}

TEST_CASE("model spec: unknown task is named") {
  CHECK(error_of(R"({"inputs": 4, "outputs": 2, "task": "ranking"})").find("'task'") != std::string::npos);
}

TEST_CASE("model spec: unknown field (a typo) is refused") {
  CHECK(error_of(R"({"inputs": 4, "outputs": 2, "hiden": [3]})").find("'hiden'") != std::string::npos);
}

TEST_CASE("model spec: absurd width refused before any allocation") {
  CHECK(error_of(R"({"inputs": 4, "hidden": [1000000000], "outputs": 2})").find("hidden[0]") != std::string::npos);
}

TEST_CASE("model spec: classification with one output refused") {
  CHECK(error_of(R"({"inputs": 4, "outputs": 1})").find("at least 2 outputs") != std::string::npos);
}

TEST_CASE("model spec: invalid JSON names the source and offset") {
  auto r = parse_model_spec(R"({"inputs": 4,, })", "spec.json");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == make_error_code(errc::bad_format));
  CHECK(r.error().message.find("spec.json") != std::string::npos);
  CHECK(r.error().message.find("byte") != std::string::npos);
}

TEST_CASE("model spec: initialisation is deterministic and seeded") {
  model_spec s;
  s.inputs = 6;
  s.hidden = {5};
  s.outputs = 3;
  std::vector<float> a(param_count(s.full_arch())), b(a.size()), c(a.size());
  initialize(s, a);
  initialize(s, b);
  s.seed = 2;
  initialize(s, c);
  CHECK(a == b);
  CHECK(a != c);
  // He-uniform bound on the first layer: sqrt(6 / fan_in).
  for (int i = 0; i < 30; ++i) CHECK(std::abs(a[static_cast<std::size_t>(i)]) <= std::sqrt(6.0f / 6.0f));
}

TEST_CASE("model spec: a convolutional network from input_shape and layers, round trip and errors") {
  const char* text = R"({"input_shape": [1, 28, 28], "outputs": 10, "layers": [
      {"conv2d": {"channels": 16, "kernel": 3}}, {"max_pool": 2},
      {"conv2d": {"channels": 32, "kernel": 3, "stride": 2}}, {"global_avg_pool": true}, {"dense": 64}]})";
  auto r = parse_model_spec(text, "spec.json");
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  const model_spec& s = r.value();
  CHECK(s.inputs == 784);
  CHECK(s.hidden == std::vector<std::int64_t>{16, 32, 64});  // what IST partitions
  const mlp_arch a = s.full_arch();
  CHECK(a.widths == std::vector<std::int64_t>{1, 16, 32, 64, 10});
  CHECK(a.input == tensor_shape{28, 28, 1});
  CHECK(a.inputs() == 784);
  REQUIRE(validate(a, "spec").ok());
  CHECK(widths_text(s) == "[1,28,28] conv2d 16 k3, max_pool 2, conv2d 32 k3 s2, global_avg_pool, dense 64, 10");
  auto again = parse_model_spec(to_json(s), "again");
  REQUIRE(again.ok());
  CHECK(again.value().layers == s.layers);
  CHECK(again.value().input_shape == s.input_shape);
  CHECK(param_count(again.value().full_arch()) == param_count(a));
  std::vector<float> params(param_count(a));
  initialize(s, params);  // He's fan-in: a 3×3 kernel over 16 channels is 144
  const auto slots = param_slots(a);
  float most = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(slots[1].rows * slots[1].cols); ++i) most = std::max(most, std::abs(params[slots[1].weight + i]));
  CHECK(most <= std::sqrt(6.0f / 144.0f));
  CHECK(most > 0.9f * std::sqrt(6.0f / 144.0f));

  CHECK(error_of(R"({"input_shape": [784], "outputs": 10, "layers": [{"conv2d": {"channels": 8, "kernel": 3}}]})") ==
        "spec.json: field 'layers': layer 1 (conv2d 8 k3) on 784: needs an image: give input_shape as [channels, height, width]");
  CHECK(error_of(R"({"inputs": 100, "input_shape": [1, 28, 28], "outputs": 10, "layers": [{"flatten": true}]})") ==
        "spec.json: field 'input_shape': holds 784 values, but inputs is 100");
  CHECK(error_of(R"({"inputs": 784, "hidden": [64], "outputs": 10, "layers": [{"dense": 64}]})") ==
        "spec.json: field 'hidden': give either hidden or layers, not both");
  CHECK(error_of(R"({"input_shape": [28, 28], "outputs": 10, "layers": [{"conv1d": {"channels": 8, "kernel": 3}}]})") ==
        "spec.json: field 'layers': the last layer gives 28×8, but the output layer (dense 10) takes a flat input: end the list with "
        "{\"flatten\": true} or {\"global_avg_pool\": true}");
  CHECK(error_of(R"({"input_shape": [1, 28, 28], "outputs": 10, "layers": [{"conv3d": 2}]})") ==
        "spec.json: field 'layers': layer 1 (conv3d): unknown layer 'conv3d' (dense, conv1d, conv2d, max_pool, global_avg_pool, flatten)");
}
