// SGD and learning-rate schedules (optimizer.cpp): one update checked by hand for momentum and
// plain SGD with weight decay, the prepared form the fused step uses, and every schedule at points
// worked out by hand.
#include "tessera/core/math/optimizer.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "check_near.hpp"
#include "test_files.hpp"

namespace core = tessera::core;
using namespace tessera::testing;

namespace {

using tessera::testing::check_near;

}  // namespace

TEST_CASE("sgd_step with momentum and weight decay: v = mu*v + g + wd*w, then w -= lr*v") {
  const core::sgd_options o{.learning_rate = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f};
  std::vector<float> w = {1.0f, -2.0f, 0.5f};
  const std::vector<float> g = {0.5f, 0.25f, -1.0f};
  std::vector<float> v = {0.2f, 0.0f, -0.4f};
  core::sgd_step(o, w, g, v);
  // v: 0.9*0.2 + 0.5 + 0.01*1 = 0.69;  0 + 0.25 - 0.02 = 0.23;  -0.36 - 1 + 0.005 = -1.355
  check_near(v, {0.69, 0.23, -1.355});
  check_near(w, {1.0 - 0.069, -2.0 - 0.023, 0.5 + 0.1355});
  core::sgd_step(o, w, g, v);  // a second step carries the velocity over
  check_near(v, {0.9 * 0.69 + 0.5 + 0.01 * 0.931, 0.9 * 0.23 + 0.25 + 0.01 * -2.023, 0.9 * -1.355 - 1.0 + 0.01 * 0.6355});
}

TEST_CASE("sgd_step without momentum keeps no state") {
  const core::sgd_options o{.learning_rate = 0.5f, .momentum = 0.0f, .weight_decay = 0.1f};
  std::vector<float> w = {2.0f, -4.0f};
  core::sgd_step(o, w, std::vector<float>{1.0f, 0.0f}, {});
  check_near(w, {2.0 - 0.5 * (1.0 + 0.2), -4.0 - 0.5 * -0.4});
}

TEST_CASE("the prepared form gives sgd_step's updates: gradients accumulated into the velocity") {
  const core::sgd_options o{.learning_rate = 0.05f, .momentum = 0.9f, .weight_decay = 0.001f};
  std::vector<float> w_ref = {0.3f, -0.7f, 1.1f, 0.0f};
  std::vector<float> v_ref(4, 0.0f);
  std::vector<float> w = w_ref;
  std::vector<float> v(4);
  core::sgd_prepare_start(o, w, v);
  check_near(v, {0.0003, -0.0007, 0.0011, 0.0});  // wd*w: what the first step adds before g
  const std::vector<std::vector<float>> grads = {{0.1f, 0.2f, -0.3f, 0.4f}, {-0.5f, 0.0f, 0.25f, 1.0f},
                                                 {0.05f, -0.05f, 0.0f, -2.0f}};
  for (const auto& g : grads) {
    core::sgd_step(o, w_ref, g, v_ref);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] += g[i];  // what the backward pass does
    core::sgd_apply_prepared(o, w, v);
    std::vector<double> expected(w_ref.begin(), w_ref.end());
    check_near(w, expected);
  }
}

TEST_CASE("learning_rate_at: constant, and a linear warm-up before any schedule") {
  core::lr_schedule s{.kind = core::schedule_kind::constant, .base = 0.1f, .warmup_rounds = 3};
  CHECK(core::learning_rate_at(s, 0) == doctest::Approx(0.1 * 1 / 4));
  CHECK(core::learning_rate_at(s, 1) == doctest::Approx(0.1 * 2 / 4));
  CHECK(core::learning_rate_at(s, 2) == doctest::Approx(0.1 * 3 / 4));
  CHECK(core::learning_rate_at(s, 3) == 0.1f);
  CHECK(core::learning_rate_at(s, 1000) == 0.1f);
  s.warmup_rounds = 0;
  CHECK(core::learning_rate_at(s, 0) == 0.1f);
}

TEST_CASE("learning_rate_at: step decay multiplies by gamma every step_rounds after the warm-up") {
  core::lr_schedule s{.kind = core::schedule_kind::step, .base = 0.2f, .warmup_rounds = 2, .step_rounds = 10,
                      .gamma = 0.5f};
  CHECK(core::learning_rate_at(s, 2) == doctest::Approx(0.2));   // first round after warm-up
  CHECK(core::learning_rate_at(s, 11) == doctest::Approx(0.2));  // 9 rounds in
  CHECK(core::learning_rate_at(s, 12) == doctest::Approx(0.1));
  CHECK(core::learning_rate_at(s, 32) == doctest::Approx(0.025));
  s.step_rounds = 0;  // taken as 1: decay every round
  s.warmup_rounds = 0;
  CHECK(core::learning_rate_at(s, 3) == doctest::Approx(0.2 * 0.125));
}

TEST_CASE("learning_rate_at: cosine from base to base*final_fraction over total_rounds, then flat") {
  core::lr_schedule s{.kind = core::schedule_kind::cosine, .base = 0.1f, .warmup_rounds = 1, .total_rounds = 11,
                      .final_fraction = 0.1f};
  // After the warm-up round, 10 rounds of decay from 0.1 to 0.01: lr = 0.01 + 0.09 * (1 + cos(pi t)) / 2.
  CHECK(core::learning_rate_at(s, 0) == doctest::Approx(0.05));  // warm-up: 0.1 * 1/2
  CHECK(core::learning_rate_at(s, 1) == doctest::Approx(0.1));
  CHECK(core::learning_rate_at(s, 6) == doctest::Approx(0.055));  // t = 1/2
  CHECK(core::learning_rate_at(s, 3) == doctest::Approx(0.01 + 0.09 * (1 + std::cos(0.2 * std::numbers::pi)) / 2));
  CHECK(core::learning_rate_at(s, 11) == doctest::Approx(0.01));
  CHECK(core::learning_rate_at(s, 500) == doctest::Approx(0.01));
}

TEST_CASE("schedule names: one table prints and parses them, and knows no others") {
  for (auto k : {core::schedule_kind::constant, core::schedule_kind::step, core::schedule_kind::cosine})
    CHECK(core::k_schedule_names.find(core::to_string(k)) == k);
  CHECK_FALSE(core::k_schedule_names.find("linear").has_value());
  CHECK(core::k_schedule_names.list() == "constant, step, cosine");
}
