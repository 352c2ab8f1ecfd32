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
