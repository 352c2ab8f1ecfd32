#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "tessera/core/base/rng.hpp"
#include "tessera/core/data/dataset.hpp"
#include "tessera/core/math/ist.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/core/math/model_spec.hpp"
#include "tessera/core/train/train.hpp"
#include "tessera/core/train/training_block.hpp"

using namespace tessera::core;

namespace {

// Two Gaussian blobs per class in 4 dimensions: easy, so training must reach high accuracy.
memory_table blobs(std::int64_t n, std::uint64_t seed) {
  rng r(seed);
  std::vector<float> x, y;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto cls = static_cast<int>(r.below(3));
    for (int f = 0; f < 4; ++f) x.push_back((f == cls ? 2.0f : 0.0f) + (r.uniform() - 0.5f));
    y.push_back(static_cast<float>(cls));
  }
  return memory_table(4, std::move(x), std::move(y), "blobs");
}

model_spec small_spec() {
  model_spec s;
  s.inputs = 4;
  s.hidden = {16, 16};
  s.outputs = 3;
  s.compensation = compensation_kind::none;
  return s;
}

}  // namespace

TEST_CASE("batch sampler: a permutation of every size, without storing it") {
  for (std::int64_t n : {1, 2, 3, 5, 16, 17, 1000, 65537}) {
    batch_sampler s(n, 11);
    std::vector<char> seen(static_cast<std::size_t>(n), 0);
    for (std::int64_t i = 0; i < n; ++i) {
      const auto v = s.at(static_cast<std::uint64_t>(i));
      REQUIRE(v < n);
      CHECK(seen[v] == 0);
      seen[v] = 1;
    }
  }
  // Shuffled: few examples stay in place.
  batch_sampler s(1000, 3);
  int fixed = 0;
  for (std::uint32_t i = 0; i < 1000; ++i) fixed += s.at(i) == i;
  CHECK(fixed < 20);
}

TEST_CASE("batch sampler: each epoch visits every example once, order is seeded") {
  batch_sampler a(10, 3), b(10, 3), c(10, 4);
  std::vector<std::uint32_t> ea(10), eb(10), ec(10);
  a.next(ea);
  b.next(eb);
  c.next(ec);
  CHECK(ea == eb);
  CHECK(ea != ec);
  auto sorted = ea;
  std::sort(sorted.begin(), sorted.end());
  for (std::uint32_t i = 0; i < 10; ++i) CHECK(sorted[i] == i);
  std::vector<std::uint32_t> next(10);
  a.next(next);
  CHECK(a.epoch() == 1);
  CHECK(next != ea);  // a new epoch is reshuffled
}

TEST_CASE("batch sampler: skip continues the order where next() would, across epochs, and counts") {
  // 37 examples; batches of 5 straddle epoch ends. Skipping any count lands where drawing it would.
  for (const std::uint64_t count : {0ull, 1ull, 5ull, 36ull, 37ull, 38ull, 200ull, 371ull}) {
    INFO(count);
    batch_sampler drawn(37, 9), skipped(37, 9);
    std::vector<std::uint32_t> one(1);
    for (std::uint64_t i = 0; i < count; ++i) drawn.next(one);
    skipped.skip(count);
    CHECK(skipped.drawn() == count);
    CHECK(skipped.epoch() == drawn.epoch());
    std::vector<std::uint32_t> a(5), b(5);
    for (int batch = 0; batch < 20; ++batch) {
      drawn.next(a);
      skipped.next(b);
      REQUIRE(a == b);
    }
    CHECK(skipped.drawn() == count + 100);
  }
}

TEST_CASE("local training learns an easy problem") {
  auto data = blobs(600, 1);
  const model_spec spec = small_spec();
  std::vector<float> params(param_count(spec.full_arch()));
  initialize(spec, params);
  local_trainer trainer(spec.full_arch(), 16);
  table_batches order(data, 5, 16);
  auto before = evaluate(trainer.net(), params, data);
  auto report = trainer.run(params, order, {.steps = 300, .sgd = {.learning_rate = 0.05f, .momentum = 0.9f}});
  REQUIRE(report.ok());
  CHECK(report.value().examples == 300 * 16);
  auto after = evaluate(trainer.net(), params, data);
  REQUIRE((before.ok() && after.ok()));
  CHECK(after.value().loss < before.value().loss);
  CHECK(after.value().accuracy > 0.95);
}

TEST_CASE("FedAvg with one device equals local training") {
  auto data = blobs(200, 2);
  const model_spec spec = small_spec();
  const mlp_arch full = spec.full_arch();
  // Both runs train in training blocks, as the simulator and the agent do: Eigen's kernels sum in an
  // order that depends on the buffers' alignment, so only equally aligned memory gives equal floats.
  const training_memory layout = plan_training_memory(full, 8, true, codec_kind::f32);
  auto direct_block = training_block::allocate(layout);
  REQUIRE(direct_block.ok());
  const std::span<float> direct = direct_block.value().params();
  initialize(spec, direct);
  std::vector<float> federated(direct.begin(), direct.end());
  const local_training_options opt{.steps = 40, .sgd = {.learning_rate = 0.1f, .momentum = 0.9f, .weight_decay = 1e-3f}};

  local_trainer t1(full, 8, direct_block.value().buffers());
  table_batches o1(data, 7, 8);
  table_batches o2(data, 7, 8);
  for (int round = 0; round < 3; ++round) {
    REQUIRE(t1.run(direct, o1, opt).ok());

    const round_plan plan = make_full_plan(full, 1);
    const subnet sub = make_subnet(full, spec.compensation, plan, 0);
    auto block = training_block::allocate(plan_training_memory(sub.arch, 8, true, codec_kind::f32));
    REQUIRE(block.ok());
    const std::span<float> local = block.value().params();
    gather(full, sub, federated, local);
    local_trainer t2(sub.arch, 8, block.value().buffers());
    auto rep = t2.run(local, o2, opt);
    REQUIRE(rep.ok());
    aggregator agg(full);
    agg.add(sub, local, static_cast<double>(rep.value().examples));
    agg.finish(federated);
  }
  CHECK(federated == std::vector<float>(direct.begin(), direct.end()));
}

TEST_CASE("trainer refuses data whose width does not match the model, naming the data") {
  auto data = blobs(10, 3);
  model_spec spec = small_spec();
  spec.inputs = 5;
  std::vector<float> params(param_count(spec.full_arch()));
  local_trainer t(spec.full_arch(), 4);
  table_batches order(data, 1, 4);
  auto r = t.run(params, order, {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("blobs") != std::string::npos);
}

TEST_CASE("a run split in pieces with keep_velocity equals one run; without it the momentum restarts") {
  auto data = blobs(300, 4);
  const model_spec spec = small_spec();
  std::vector<float> start(param_count(spec.full_arch()));
  initialize(spec, start);
  const sgd_options sgd{.learning_rate = 0.05f, .momentum = 0.9f, .weight_decay = 0.001f};
  const mlp_arch arch = spec.full_arch();
  // Each run trains in its own training block, aligned as on a device: Eigen's sums follow the buffers'
  // alignment, so only equally aligned runs can be compared bit for bit.
  auto train = [&](const std::vector<std::int64_t>& pieces, bool keep) {
    auto block = training_block::allocate(plan_training_memory(arch, 16, true, codec_kind::f32));
    REQUIRE(block.ok());
    const std::span<float> p = block.value().params();
    std::copy(start.begin(), start.end(), p.begin());
    local_trainer trainer(arch, 16, block.value().buffers());
    table_batches order(data, 9, 16);
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const local_training_options o{.steps = pieces[i], .sgd = sgd, .cancel = nullptr, .keep_velocity = keep && i > 0};
      REQUIRE(trainer.run(p, order, o).ok());
    }
    return std::vector<float>(p.begin(), p.end());
  };
  const std::vector<float> whole = train({20}, false);
  CHECK(train({10, 10}, true) == whole);
  CHECK(train({10, 10}, false) != whole);
}

TEST_CASE("a cancelled run stops before its next step") {
  auto data = blobs(100, 5);
  const model_spec spec = small_spec();
  std::vector<float> params(param_count(spec.full_arch()));
  initialize(spec, params);
  const std::vector<float> before = params;
  local_trainer trainer(spec.full_arch(), 16);
  table_batches order(data, 1, 16);
  std::atomic<bool> cancel{true};
  auto r = trainer.run(params, order, {.steps = 50, .sgd = {.learning_rate = 0.1f}, .cancel = &cancel});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == errc::cancelled);
  CHECK(params == before);
}

TEST_CASE("micro-batches make the step the whole batch makes, in a micro-batch's memory") {
  auto data = blobs(400, 6);
  model_spec spec = small_spec();
  spec.compensation = compensation_kind::layer_norm;  // per example: nothing couples a batch's rows
  const mlp_arch arch = spec.full_arch();
  std::vector<float> start(param_count(arch));
  initialize(spec, start);
  for (const float momentum : {0.9f, 0.0f}) {
    const local_training_options opt{.steps = 25, .sgd = {.learning_rate = 0.05f, .momentum = momentum, .weight_decay = 1e-3f}, .batch = 32};
    auto train = [&](std::int64_t rows, std::vector<float>& params) {
      auto block = training_block::allocate(plan_training_memory(arch, rows, momentum != 0.0f, codec_kind::f32));
      REQUIRE(block.ok());
      const std::span<float> p = block.value().params();
      std::copy(start.begin(), start.end(), p.begin());
      local_trainer trainer(arch, rows, block.value().buffers());
      table_batches order(data, 3, rows);
      auto report = trainer.run(p, order, opt);
      REQUIRE(report.ok());
      CHECK(report.value().examples == 25 * 32);  // whole batches, whatever the parts
      params.assign(p.begin(), p.end());
      return report.value().mean_loss;
    };
    std::vector<float> whole, parts, uneven;
    const double loss_whole = train(32, whole);
    const double loss_parts = train(4, parts);
    const double loss_uneven = train(5, uneven);  // 6 parts of 5 and one of 2
    CHECK(loss_parts == doctest::Approx(loss_whole).epsilon(1e-5));
    CHECK(loss_uneven == doctest::Approx(loss_whole).epsilon(1e-5));
    float worst = 0;
    for (std::size_t i = 0; i < whole.size(); ++i)
      worst = std::max({worst, std::abs(parts[i] - whole[i]), std::abs(uneven[i] - whole[i])});
    CHECK(worst < 1e-5f);  // the same step up to the order of the sums
    CHECK(whole != start);
  }
  // The memory is the micro-batch's: activations and inputs for its rows only.
  CHECK(bytes_needed(arch, 4, true, codec_kind::f32) < bytes_needed(arch, 32, true, codec_kind::f32));
}

TEST_CASE("a trainer keeps frozen layers as they came, in an arena without their optimizer state") {
  auto data = blobs(400, 6);
  model_spec spec = small_spec();
  spec.compensation = compensation_kind::layer_norm;
  mlp_arch arch = spec.full_arch();
  arch.frozen = 1;
  std::vector<float> start(param_count(arch));
  initialize(spec, start);
  const std::size_t off = param_slots(arch)[1].weight;
  for (const float momentum : {0.9f, 0.0f}) {
    CAPTURE(momentum);
    const training_memory m = plan_training_memory(arch, 16, momentum != 0.0f, codec_kind::f32);
    CHECK(m.velocity_bytes + m.grads_bytes == (start.size() - off) * sizeof(float));
    auto block = training_block::allocate(m);
    REQUIRE(block.ok());
    const std::span<float> p = block.value().params();
    std::copy(start.begin(), start.end(), p.begin());
    local_trainer trainer(arch, 16, block.value().buffers());
    table_batches order(data, 3, 16);
    auto report = trainer.run(p, order, {.steps = 20, .sgd = {.learning_rate = 0.05f, .momentum = momentum, .weight_decay = 1e-3f}});
    REQUIRE(report.ok());
    CHECK(std::equal(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(off), start.begin()));
    CHECK_FALSE(std::equal(p.begin() + static_cast<std::ptrdiff_t>(off), p.end(), start.begin() + static_cast<std::ptrdiff_t>(off)));
  }
}
