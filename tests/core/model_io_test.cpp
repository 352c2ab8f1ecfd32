#include <doctest/doctest.h>

#include "tessera/core/io/model_io.hpp"
#include "tessera/core/io/safetensors.hpp"
#include "tessera/core/math/mlp.hpp"
#include "test_files.hpp"

using namespace tessera::core;
using namespace tessera::testing;

namespace {

model_spec spec_with(compensation_kind c) {
  model_spec s;
  s.inputs = 5;
  s.hidden = {4, 3};
  s.outputs = 2;
  s.compensation = c;
  s.seed = 42;
  return s;
}
}  // namespace

TEST_CASE("model file: save then load gives the same spec and parameters, with PyTorch-style names") {
  temp_dir dir;
  for (auto c : {compensation_kind::none, compensation_kind::layer_norm}) {
    const model_spec spec = spec_with(c);
    std::vector<float> params(param_count(spec.full_arch()));
    initialize(spec, params);
    const std::string path = dir.file("m.safetensors");
    REQUIRE(save_model(path, spec, params, {{"tessera.round", "7"}}).ok());
    auto loaded = load_model(path);
    REQUIRE(loaded.ok());
    CHECK(loaded.value().params == params);
    CHECK(loaded.value().spec.hidden == spec.hidden);
    CHECK(loaded.value().spec.compensation == c);
    CHECK(loaded.value().metadata.at("tessera.round") == "7");
    auto raw = read_safetensors(path);
    REQUIRE(raw.ok());
    const tensor_f32* w0 = raw.value().find("layers.0.weight");
    REQUIRE(w0 != nullptr);
    CHECK(w0->shape == std::vector<std::int64_t>{4, 5});  // [out, in] as nn.Linear.weight
    CHECK(raw.value().find("layers.2.bias")->shape == std::vector<std::int64_t>{2});
    CHECK((raw.value().find("layers.1.norm.weight") != nullptr) == (c == compensation_kind::layer_norm));
  }
}

TEST_CASE("model file: a tensor with the wrong shape is refused, naming it and both shapes") {
  temp_dir dir;
  const model_spec spec = spec_with(compensation_kind::none);
  std::vector<float> params(param_count(spec.full_arch()));
  const std::string path = dir.file("m.safetensors");
  REQUIRE(save_model(path, spec, params).ok());
  auto raw = read_safetensors(path);
  REQUIRE(raw.ok());
  auto tensors = raw.value().tensors;
  for (auto& t : tensors)
    if (t.name == "layers.1.weight") t.shape = {12, 1};
  REQUIRE(write_safetensors(path, tensors, raw.value().metadata).ok());
  auto loaded = load_model(path);
  REQUIRE_FALSE(loaded.ok());
  CHECK(loaded.error().message.find("layers.1.weight") != std::string::npos);
  CHECK(loaded.error().message.find("[12, 1]") != std::string::npos);
  CHECK(loaded.error().message.find("[3, 4]") != std::string::npos);
}

TEST_CASE("model file: a safetensors file without a Tessera spec is refused") {
  temp_dir dir;
  const std::string path = dir.file("other.safetensors");
  const std::vector<tensor_f32> t = {{"w", {2}, {1.0f, 2.0f}}};
  REQUIRE(write_safetensors(path, t, {}).ok());
  auto loaded = load_model(path);
  REQUIRE_FALSE(loaded.ok());
  CHECK(loaded.error().message.find("tessera.spec") != std::string::npos);
}

TEST_CASE("model file: a model that standardizes its inputs stores input.mean and input.std, and needs them") {
  temp_dir dir;
  model_spec spec = spec_with(compensation_kind::layer_norm);
  spec.input_normalization = input_normalization_kind::standardize;
  std::vector<float> params(param_count(spec.full_arch()));
  initialize(spec, params);
  const input_normalization n{.mean = {1, 2, 3, 4, 5}, .std = {0.5f, 1, 2, 1e3f, 1}};
  const std::string path = dir.file("std.safetensors");
  REQUIRE(save_model(path, spec, params, {}, n).ok());
  auto loaded = load_model(path);
  REQUIRE_MESSAGE(loaded.ok(), (loaded.ok() ? "" : loaded.error().message));
  CHECK(loaded.value().normalization == n);
  CHECK(loaded.value().spec.input_normalization == input_normalization_kind::standardize);
  auto raw = read_safetensors(path);
  REQUIRE(raw.ok());
  REQUIRE(raw.value().find("input.std") != nullptr);
  CHECK(raw.value().find("input.std")->shape == std::vector<std::int64_t>{5});

  // Without its statistics the spec cannot be saved, and a file that lost them is refused.
  CHECK(error_of(save_model(path, spec, params)).message.find("input_normalization is standardize, but 0 input means") !=
        std::string::npos);
  std::vector<tensor_f32> tensors = raw.value().tensors;
  std::erase_if(tensors, [](const tensor_f32& t) { return t.name == "input.mean"; });
  REQUIRE(write_safetensors(dir.file("lost.safetensors"), tensors, raw.value().metadata).ok());
  CHECK(error_of(load_model(dir.file("lost.safetensors"))).message ==
        dir.file("lost.safetensors") + ": tensor 'input.mean' is missing (the spec standardizes its inputs)");
  // A model without standardization writes no such tensors (its files stay as they were).
  const model_spec plain = spec_with(compensation_kind::layer_norm);
  REQUIRE(save_model(dir.file("plain.safetensors"), plain, params).ok());
  CHECK(read_safetensors(dir.file("plain.safetensors")).value().find("input.mean") == nullptr);
}

TEST_CASE("model file: a convolutional model is written in PyTorch's layouts and read back exactly") {
  temp_dir dir;
  auto spec = parse_model_spec(R"({"input_shape": [2, 6, 6], "outputs": 3, "layers": [
      {"conv2d": {"channels": 4, "kernel": 3}}, {"max_pool": 2}, {"flatten": true}, {"dense": 5}]})", "spec");
  REQUIRE(spec.ok());
  const mlp_arch arch = spec.value().full_arch();
  std::vector<float> params(param_count(arch));
  for (std::size_t i = 0; i < params.size(); ++i) params[i] = static_cast<float>(i);  // each value says where it was
  const std::string path = dir.file("cnn.safetensors");
  REQUIRE(save_model(path, spec.value(), params, {}).ok());
  auto raw = read_safetensors(path);
  REQUIRE(raw.ok());
  const auto slots = param_slots(arch);
  // The convolution: memory [o][kh][kw][i] (OHWI), file [o][i][kh][kw] (OIHW).
  const tensor_f32* conv = raw.value().find("layers.0.weight");
  REQUIRE(conv != nullptr);
  CHECK(conv->shape == std::vector<std::int64_t>{4, 2, 3, 3});
  const auto at_oihw = [&](std::size_t o, std::size_t i, std::size_t kh, std::size_t kw) { return conv->data[((o * 2 + i) * 3 + kh) * 3 + kw]; };
  CHECK(at_oihw(1, 1, 2, 0) == params[slots[0].weight + ((1 * 3 + 2) * 3 + 0) * 2 + 1]);
  CHECK(at_oihw(3, 0, 0, 2) == params[slots[0].weight + ((3 * 3 + 0) * 3 + 2) * 2 + 0]);
  // The dense layer after the flatten of 3×3×4: memory column p·4 + c, file column c·9 + p.
  const tensor_f32* dense = raw.value().find("layers.1.weight");
  REQUIRE(dense != nullptr);
  CHECK(dense->shape == std::vector<std::int64_t>{5, 36});
  CHECK(dense->data[2 * 36 + 3 * 9 + 7] == params[slots[1].weight + 2 * 36 + 7 * 4 + 3]);
  CHECK(raw.value().find("layers.0.norm.weight")->shape == std::vector<std::int64_t>{4});
  auto loaded = load_model(path);
  REQUIRE(loaded.ok());
  CHECK(loaded.value().params == params);
  CHECK(loaded.value().spec.layers == spec.value().layers);
}
