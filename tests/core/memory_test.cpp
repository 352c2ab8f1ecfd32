#include <doctest/doctest.h>

#include "tessera/core/math/ist.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/core/math/mlp.hpp"
#include "test_files.hpp"

using namespace tessera::core;
using namespace tessera::testing;

TEST_CASE("memory plan: regions are aligned, disjoint and add up to the total") {
  const auto a = arch_of({784, 64, 64, 10}, true);
  const training_memory m = plan_training_memory(a, 32, true, codec_kind::q8);
  const std::size_t p = param_count(a) * 4;
  CHECK(m.params_bytes == p);
  CHECK(m.grads_bytes == 0);  // with momentum, gradients accumulate into the velocity
  CHECK(m.velocity_bytes == p);
  CHECK(m.workspace_bytes == network(a).workspace_floats(32) * 4);
  CHECK(m.features_bytes == 32 * 784 * 4);
  CHECK(m.targets_bytes == 32 * 4);
  CHECK(m.staging_bytes == encoded_bytes(a, codec_kind::q8));
  const std::size_t offsets[] = {m.params, m.grads, m.velocity, m.workspace, m.features, m.targets, m.staging};
  const std::size_t sizes[] = {m.params_bytes, m.grads_bytes, m.velocity_bytes, m.workspace_bytes,
                               m.features_bytes, m.targets_bytes, m.staging_bytes};
  for (std::size_t i = 0; i < 7; ++i) {
    CHECK(offsets[i] % k_arena_alignment == 0);
    if (i + 1 < 7) CHECK(offsets[i] + sizes[i] <= offsets[i + 1]);
  }
  CHECK(m.total == m.staging + (m.staging_bytes + 63) / 64 * 64);
}

TEST_CASE("memory plan: plain SGD keeps gradients instead of a velocity, f32 no staging") {
  const auto a = arch_of({20, 8, 3}, false);
  const auto with = plan_training_memory(a, 4, true, codec_kind::f32);
  const auto without = plan_training_memory(a, 4, false, codec_kind::f32);
  CHECK(without.velocity_bytes == 0);
  CHECK(without.grads_bytes == param_count(a) * 4);
  CHECK(with.staging_bytes == 0);
  CHECK(with.total == without.total);
  CHECK(encoded_bytes(a, codec_kind::f16) == param_count(a) * 2);
}

TEST_CASE("memory plan: inference keeps the parameters, workspace and batch, without the optimizer's state") {
  const auto arch = arch_of({784, 512, 512, 10}, false);
  for (auto codec : {codec_kind::f32, codec_kind::q8}) {
    const auto train = plan_training_memory(arch, 32, true, codec);
    const auto infer = plan_inference_memory(arch, 32, codec);
    CHECK(infer.grads_bytes == 0);
    CHECK(infer.velocity_bytes == 0);
    CHECK(infer.params_bytes == train.params_bytes);
    CHECK(infer.workspace_bytes == train.workspace_bytes);
    CHECK(infer.features_bytes == train.features_bytes);
    CHECK(infer.staging_bytes == train.staging_bytes);
    // The velocity (one float per parameter) is what inference saves.
    CHECK(train.total - infer.total >= train.velocity_bytes);
    CHECK(inference_bytes(arch, 32, codec) == infer.needed());
    CHECK(infer.stack_bytes == train.stack_bytes);
    CHECK(infer.total < bytes_needed(arch, 32, false, codec));
  }
}

TEST_CASE("capacity for a budget: the largest fraction whose subnet fits") {
  const auto full = arch_of({784, 512, 512, 10}, true);
  for (std::size_t mib : {4, 8, 16}) {
    const std::size_t budget = mib << 20;
    const double f = capacity_for_budget(full, 32, true, codec_kind::f32, budget, 8);
    REQUIRE(f > 0.0);
    REQUIRE(f <= 1.0);
    mlp_arch sub = full;
    for (std::size_t h = 1; h <= 2; ++h) sub.widths[h] = static_cast<std::int64_t>(f * 512);
    CHECK(bytes_needed(sub, 32, true, codec_kind::f32) <= budget);
    if (f < 1.0) {
      // One more neuron per layer would not fit (within the bisection's resolution).
      for (std::size_t h = 1; h <= 2; ++h) sub.widths[h] += 2;
      CHECK(bytes_needed(sub, 32, true, codec_kind::f32) > budget);
    }
  }
  CHECK(capacity_for_budget(full, 32, true, codec_kind::f32, 64 << 10, 8) == 0.0);  // 64 KiB: not even one batch
  CHECK(capacity_for_budget(full, 32, true, codec_kind::f32, std::size_t{1} << 30, 8) == 1.0);
}

TEST_CASE("capacity for budget: the planner gives every device a subnet its budget holds") {
  // The bisection ends a hair below the capacity of one more neuron; a planner that rounded
  // ⌊f·n + ε⌋ where the budget was sized with ⌊f·n⌋ gave such a device one neuron too many, and the
  // agent would refuse every assignment. A fleet of 0.5, 1, 2 and 4 MiB devices on 784-1576-1576-10
  // hit it; many budgets and widths are swept here.
  for (const std::int64_t width : {440, 1576, 2048}) {
    const auto full = arch_of({784, width, width, 10}, true);
    std::vector<std::size_t> budgets;
    for (const std::size_t kib : {512, 512, 1024, 1024, 2048, 2048, 4096, 4096}) budgets.push_back(kib << 10);
    for (std::size_t kib = 300; kib <= 4096; kib += 37) budgets.push_back(kib << 10);
    std::vector<double> caps;
    for (const std::size_t b : budgets) caps.push_back(capacity_for_budget(full, 32, true, codec_kind::f32, b, 8));
    for (std::size_t first = 0; first + 8 <= budgets.size(); first += 8) {
      const std::span<const double> fleet(caps.data() + first, 8);
      const auto plan = make_plan(full, fleet, 8, {.min_width = 8}, 7);
      REQUIRE(plan);
      for (std::size_t d = 0; d < 8; ++d) {
        const subnet sub = make_subnet(full, compensation_kind::layer_norm, plan.value(), plan.value().device_group[d]);
        INFO("width " << width << ", budget " << budgets[first + d] << " B, capacity " << fleet[d]);
        CHECK(bytes_needed(sub.arch, 32, true, codec_kind::f32) <= budgets[first + d]);
      }
    }
  }
  CHECK(neurons_for(0.29, 100) == 29);
  CHECK(neurons_for(0.125, 1576) == 197);
  CHECK(neurons_for(196.999 / 1576.0, 1576) == 196);
}

TEST_CASE("codec names: one table for printing and parsing") {
  CHECK(k_codec_names.find("q8") == codec_kind::q8);
  CHECK_FALSE(k_codec_names.find("f64").has_value());
  for (auto c : {codec_kind::f32, codec_kind::f16, codec_kind::q8}) CHECK(k_codec_names.find(to_string(c)) == c);
  CHECK(k_codec_names.list() == "f32, f16, q8");
}
