#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "tessera/core/math/mlp.hpp"
#include "tessera/net/task.hpp"

using namespace tessera;

namespace {

net::training_task sample() {
  net::training_task t;
  t.arch.widths = {784, 128, 96, 10};
  t.arch.layer_norm = true;
  t.arch.input_scale = {1.0f, 4.0f, 5.0f};
  t.steps = 100;
  t.batch = 32;
  t.sgd = {.learning_rate = 0.05f, .momentum = 0.9f, .weight_decay = 1e-4f};
  return t;
}

net::msg::assign assign_of(const net::training_task& t) {
  return {.round = 3, .widths = net::hidden_widths(t.arch), .hyper_json = net::task_to_json(t), .transfer = 9, .size = 0,
          .blob_codec = net::codec::f32, .sha256 = {}};
}

// The ASSIGN of `task` with one field of hyper_json replaced (or removed, with a null value).
std::string error_with(const std::string& key, const nlohmann::json& value, const net::training_task& task = sample()) {
  auto a = assign_of(task);
  auto j = nlohmann::json::parse(a.hyper_json);
  if (value.is_null()) j.erase(key);
  else j[key] = value;
  a.hyper_json = j.dump();
  auto t = net::task_from_assign(a);
  REQUIRE_FALSE(t.ok());
  return t.error().message;
}

}  // namespace

TEST_CASE("task: what the hub sends is what the agent rebuilds") {
  const auto t = sample();
  auto back = net::task_from_assign(assign_of(t));
  REQUIRE_MESSAGE(back.ok(), (back.ok() ? "" : back.error().message));
  CHECK(back.value().arch.widths == t.arch.widths);
  CHECK(back.value().arch.layer_norm);
  CHECK(back.value().arch.input_scale == t.arch.input_scale);
  CHECK(back.value().steps == 100);
  CHECK(back.value().batch == 32);
  CHECK(back.value().sgd.learning_rate == doctest::Approx(0.05));
  CHECK(back.value().sgd.momentum == doctest::Approx(0.9));
  CHECK(back.value().clip_norm == 0);  // absent: no clipping
  auto clipped = t;
  clipped.clip_norm = 0.75;
  CHECK(net::task_from_assign(assign_of(clipped)).value().clip_norm == 0.75);
  CHECK(error_with("clip_norm", -1).find("'clip_norm'") != std::string::npos);
  CHECK(net::upload_transfer_id(9) != 9);
  CHECK((net::upload_transfer_id(9) & ~net::upload_bit) == 9);
}

TEST_CASE("task: a micro-batch travels when set, and is at most the batch") {
  auto t = sample();
  CHECK_FALSE(nlohmann::json::parse(net::task_to_json(t)).contains("micro_batch"));  // the whole batch: not sent
  CHECK(net::task_from_assign(assign_of(t)).value().micro_batch == 0);
  t.micro_batch = 4;
  auto back = net::task_from_assign(assign_of(t));
  REQUIRE(back.ok());
  CHECK(back.value().micro_batch == 4);
  CHECK(back.value().batch == 32);
  CHECK(error_with("micro_batch", 33).find("'micro_batch'") != std::string::npos);
  CHECK(error_with("micro_batch", 0).find("'micro_batch'") != std::string::npos);
}

TEST_CASE("task: frozen layers travel when there are some, and leave the output layer to train") {
  auto t = sample();
  CHECK_FALSE(nlohmann::json::parse(net::task_to_json(t)).contains("frozen"));  // none: not sent
  CHECK(net::task_from_assign(assign_of(t)).value().arch.frozen == 0);
  t.arch.frozen = 2;
  auto back = net::task_from_assign(assign_of(t));
  REQUIRE(back.ok());
  CHECK(back.value().arch.frozen == 2);
  CHECK(error_with("frozen", 3).find("'frozen'") != std::string::npos);  // the output layer always trains
  CHECK(error_with("frozen", -1).find("'frozen'") != std::string::npos);
  CHECK(error_with("frozen", "all").find("'frozen'") != std::string::npos);
}

TEST_CASE("task: frozen layers held in q8 say so; frozen layers where no hub plans them are refused by name") {
  auto t = sample();
  t.arch.frozen = 1;
  CHECK_FALSE(nlohmann::json::parse(net::task_to_json(t)).contains("frozen_codec"));  // f32: not sent
  t.arch.frozen_codec = core::codec_kind::q8;
  CHECK(nlohmann::json::parse(net::task_to_json(t)).at("frozen_codec") == "q8");
  auto back = net::task_from_assign(assign_of(t));
  REQUIRE(back.ok());
  CHECK(back.value().arch.frozen_codec == core::codec_kind::q8);
  CHECK(error_with("frozen_codec", "q4", t).find("'frozen_codec'") != std::string::npos);
  CHECK(error_with("frozen_codec", 8, t).find("expected one of f32, f16, q8") != std::string::npos);
  CHECK(error_with("frozen", nullptr, t).find("given, but no layer is frozen") != std::string::npos);
  // A hostile hub asking for frozen layers with an evaluation, secure aggregation or clipping, whose
  // buffers are planned for every parameter held in f32.
  auto evaluation = assign_of(t);
  evaluation.evaluate = true;
  CHECK(net::task_from_assign(evaluation).error().message.find("frozen layers in an evaluation, which no hub plans: refused") != std::string::npos);
  auto clipped = t;
  clipped.clip_norm = 1.0;
  CHECK(net::task_from_assign(assign_of(clipped)).error().message.find("clipping with frozen layers, which no hub plans") != std::string::npos);
}

TEST_CASE("task: \"nesterov\": false is still sent for earlier agents, and a task without the field reads too") {
  auto a = assign_of(sample());
  auto j = nlohmann::json::parse(a.hyper_json);
  CHECK(j.at("nesterov") == false);  // agents before its removal require it
  j.erase("nesterov");
  a.hyper_json = j.dump();
  auto old = net::task_from_assign(a);
  REQUIRE_MESSAGE(old.ok(), (old.ok() ? "" : old.error().message));
  CHECK(old.value().sgd.momentum == doctest::Approx(0.9));
  CHECK(old.value().sgd.weight_decay == doctest::Approx(1e-4));
  CHECK(net::task_from_assign(assign_of(sample())).ok());
}

TEST_CASE("task: every field is bounded before anything is sized from it, and the error names it") {
  CHECK(error_with("inputs", nullptr).find("'inputs': missing") != std::string::npos);
  CHECK(error_with("inputs", 0).find("'inputs'") != std::string::npos);
  CHECK(error_with("outputs", "ten").find("'outputs'") != std::string::npos);
  CHECK(error_with("batch", 1 << 20).find("'batch'") != std::string::npos);
  CHECK(error_with("steps", -1).find("'steps'") != std::string::npos);
  CHECK(error_with("lr", "fast").find("'lr'") != std::string::npos);
  CHECK(error_with("momentum", 1.5).find("'momentum'") != std::string::npos);
  CHECK(error_with("input_scale", nlohmann::json::array({1, 2})).find("'input_scale'") != std::string::npos);
  CHECK(error_with("input_scale", nlohmann::json::array({1, -2, 1})).find("'input_scale'") != std::string::npos);
  CHECK(error_with("task", "poetry").find("'task'") != std::string::npos);
  CHECK(error_with("nesterov", true).find("'nesterov'") != std::string::npos);
  CHECK(error_with("nesterov", "yes").find("'nesterov'") != std::string::npos);

  auto a = assign_of(sample());
  a.widths = {};
  CHECK(net::task_from_assign(a).error().message.find("'widths'") != std::string::npos);
  a.widths = {0};
  CHECK(net::task_from_assign(a).error().message.find("'widths'") != std::string::npos);
  // Each width is allowed, but together they would need terabytes: refused before anything is sized.
  a.widths = {1u << 20, 1u << 20, 1u << 20};
  CHECK(net::task_from_assign(a).error().message.find("parameters") != std::string::npos);
  a = assign_of(sample());
  a.hyper_json = "[1, 2]";
  CHECK_FALSE(net::task_from_assign(a).ok());
}

TEST_CASE("task: the model's input normalization travels with the task, exactly, and is checked") {
  auto t = sample();
  core::input_normalization n;
  for (int i = 0; i < 784; ++i) {
    n.mean.push_back(0.1f * static_cast<float>(i));
    n.std.push_back(1.0f + static_cast<float>(i % 7));
  }
  t.normalization = std::make_shared<const core::input_normalization>(n);
  auto back = net::task_from_assign(assign_of(t));
  REQUIRE_MESSAGE(back.ok(), (back.ok() ? "" : back.error().message));
  REQUIRE(back.value().normalization);
  CHECK(*back.value().normalization == n);
  CHECK_FALSE(net::task_from_assign(assign_of(sample())).value().normalization);  // none: none

  auto a = assign_of(t);
  auto j = nlohmann::json::parse(a.hyper_json);
  j.erase("input_std");
  a.hyper_json = j.dump();
  CHECK(net::task_from_assign(a).error().message == "ASSIGN: field 'input_std': missing (the two go together)");
  n.std[5] = 0.0f;  // a hostile hub: dividing by zero would poison every batch
  t.normalization = std::make_shared<const core::input_normalization>(n);
  CHECK(net::task_from_assign(assign_of(t)).error().message == "ASSIGN: field 'input_std': value 5 is not a finite positive number");
  n.std.pop_back();
  n.mean.pop_back();  // 783 values for 784 inputs
  t.normalization = std::make_shared<const core::input_normalization>(n);
  CHECK(net::task_from_assign(assign_of(t)).error().message.find("ASSIGN: field 'input_mean': ") == 0);
}

TEST_CASE("task: a convolutional subnet's layers travel with it and are checked on arrival") {
  net::training_task t = sample();
  t.arch.widths = {1, 8, 12, 10};  // a subnet: 8 of 16 and 12 of 32 channels
  t.arch.input = {.height = 28, .width = 28, .channels = 1};
  t.arch.layers = {{.kind = core::layer_kind::conv2d, .units = 16, .kernel = 3},
                   {.kind = core::layer_kind::max_pool, .pool = 2},
                   {.kind = core::layer_kind::conv2d, .units = 32, .kernel = 3, .stride = 2},
                   {.kind = core::layer_kind::global_avg_pool}};
  REQUIRE(core::validate(t.arch, "subnet").ok());
  auto back = net::task_from_assign(assign_of(t));
  REQUIRE_MESSAGE(back.ok(), (back.ok() ? "" : back.error().message));
  CHECK(back.value().arch.widths == t.arch.widths);
  CHECK(back.value().arch.input == t.arch.input);
  CHECK(back.value().arch.layers == t.arch.layers);
  CHECK(core::param_count(back.value().arch) == core::param_count(t.arch));

  // A hub's ASSIGN that does not add up is refused by name before anything is sized by it.
  const auto refused = [&](const std::string& key, const nlohmann::json& value) { return error_with(key, value, t); };
  CHECK(refused("layers", nullptr) == "ASSIGN: field 'layers': missing (the two go together)");
  CHECK(refused("layers", nlohmann::json::array()) == "ASSIGN: field 'layers': empty (an MLP sends no layers)");
  CHECK(refused("input_shape", nlohmann::json::array({1, 20, 20})) == "ASSIGN: field 'input_shape': holds 400 values, but inputs is 784");
  CHECK(refused("layers", nlohmann::json::parse(R"([{"conv2d": {"channels": 16, "kernel": 3}}, {"global_avg_pool": true}])")) ==
        "ASSIGN: field 'layers': 2 hidden widths for 1 dense and convolutional layers");
  CHECK(refused("layers", nlohmann::json::parse(R"([{"conv2d": {"channels": 16, "kernel": 99}}])")).starts_with(
      "ASSIGN: field 'layers': layer 1 (conv2d): kernel is 99, must be in [1, 15]"));
}
