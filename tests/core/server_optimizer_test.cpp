// The server optimizers (server_optimizer.cpp) against steps worked out by hand: FedAvgM, FedAdam and
// FedYogi as Reddi et al.'s Algorithm 2 writes them (no bias correction, v from τ²), the plain change
// scaled by lr, coordinates nobody trained left standing with their moments, and a restored state that
// continues to the bit.
#include "tessera/core/math/server_optimizer.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "check_near.hpp"
#include "test_files.hpp"

namespace core = tessera::core;
using tessera::testing::contains;
using tessera::testing::error_of;

namespace {

using kind = core::server_optimizer_kind;

// One step from `previous` to `assembled` with the mask `trained`: the model after it.
std::vector<float> step(core::server_optimizer& opt, const std::vector<float>& previous, const std::vector<float>& assembled,
                        const std::vector<float>& trained) {
  std::vector<float> model = assembled;
  opt.step(previous, model, trained);
  return model;
}

using tessera::testing::check_near;

}  // namespace

TEST_CASE("server optimizer: none with lr 1 is the identity; with another lr it scales the change where trained") {
  CHECK(core::server_optimizer_options{}.identity());
  CHECK_FALSE(core::server_optimizer_options{.kind = kind::none, .lr = 0.5}.identity());
  CHECK_FALSE(core::server_optimizer_options{.kind = kind::momentum, .lr = 1.0}.identity());
  core::server_optimizer opt({.kind = kind::none, .lr = 0.5}, 3);
  CHECK_FALSE(opt.stateful());
  CHECK(opt.state().m.empty());
  CHECK(opt.state().v.empty());
  // x ← x_prev + 0.5·Δ: 1 + 0.5·2 = 2, −1 + 0.5·(−1) = −1.5; the third coordinate is not trained.
  const auto x = step(opt, {1.0f, -1.0f, 4.0f}, {3.0f, -2.0f, 4.0f}, {1.0f, 1.0f, 0.0f});
  CHECK(x == std::vector<float>{2.0f, -1.5f, 4.0f});
  CHECK(opt.state().steps == 1);
}

TEST_CASE("server optimizer: momentum (FedAvgM) m ← β1·m + Δ, x ← x_prev + η·m, by hand over three rounds") {
  core::server_optimizer opt({.kind = kind::momentum, .lr = 0.5, .beta1 = 0.5}, 3);
  CHECK(opt.stateful());
  CHECK(opt.state().m == std::vector<float>{0.0f, 0.0f, 0.0f});
  CHECK(opt.state().v.empty());
  // Round 1, coordinate 2 not trained: Δ = (0.5, −1); m = (0.5, −1, 0); x = (1, 2) + 0.5·m = (1.25, 1.5).
  auto x = step(opt, {1.0f, 2.0f, 3.0f}, {1.5f, 1.0f, 3.0f}, {1.0f, 1.0f, 0.0f});
  CHECK(x == std::vector<float>{1.25f, 1.5f, 3.0f});
  CHECK(opt.state().m == std::vector<float>{0.5f, -1.0f, 0.0f});
  // Round 2, all trained: Δ = (0, 1, 1); m = (0.25 + 0, −0.5 + 1, 0 + 1) = (0.25, 0.5, 1);
  // x = (1.25 + 0.125, 1.5 + 0.25, 3 + 0.5).
  x = step(opt, x, {1.25f, 2.5f, 4.0f}, {1.0f, 1.0f, 1.0f});
  CHECK(x == std::vector<float>{1.375f, 1.75f, 3.5f});
  CHECK(opt.state().m == std::vector<float>{0.25f, 0.5f, 1.0f});
  // Round 3, only coordinate 1 trained, with no change: its momentum still carries it (m = 0.25,
  // x = 1.75 + 0.125); the others neither move nor decay their momentum.
  x = step(opt, x, x, {0.0f, 1.0f, 0.0f});
  CHECK(x == std::vector<float>{1.375f, 1.875f, 3.5f});
  CHECK(opt.state().m == std::vector<float>{0.25f, 0.25f, 1.0f});
  CHECK(opt.state().steps == 3);
}

TEST_CASE("server optimizer: adam (FedAdam) by hand, β1 0.5, β2 0.75, τ 1, η 1; an untrained coordinate keeps m 0 and v τ²") {
  core::server_optimizer opt({.kind = kind::adam, .lr = 1.0, .beta1 = 0.5, .beta2 = 0.75, .epsilon = 1.0}, 3);
  CHECK(opt.state().m == std::vector<float>{0.0f, 0.0f, 0.0f});
  CHECK(opt.state().v == std::vector<float>{1.0f, 1.0f, 1.0f});  // τ²
  // Round 1, Δ = (1, 2), coordinate 2 not trained:
  //   m = 0.5·Δ = (0.5, 1); v = 0.75·1 + 0.25·Δ² = (1, 1.75);
  //   x = 0 + m / (√v + 1) = (0.5 / 2, 1 / (√1.75 + 1)) = (0.25, 0.4305008740).
  // No bias correction: with it the first step would be m/(1 − β1) / (√(v/(1 − β2)) + τ) instead.
  auto x = step(opt, {0.0f, 0.0f, 7.0f}, {1.0f, 2.0f, 7.0f}, {1.0f, 1.0f, 0.0f});
  check_near(x, {0.25, 0.43050087404306037, 7.0});
  CHECK(opt.state().m == std::vector<float>{0.5f, 1.0f, 0.0f});
  CHECK(opt.state().v == std::vector<float>{1.0f, 1.75f, 1.0f});
  // Round 2, Δ = (−1, 0.5):
  //   m = (0.25 − 0.5, 0.5 + 0.25) = (−0.25, 0.75); v = (0.75 + 0.25, 1.3125 + 0.0625) = (1, 1.375);
  //   x = (0.25 − 0.25 / 2, 0.4305008740 + 0.75 / (√1.375 + 1)) = (0.125, 0.7757087449).
  const std::vector<float> previous = x;
  x = step(opt, previous, {previous[0] - 1.0f, previous[1] + 0.5f, 7.0f}, {1.0f, 1.0f, 0.0f});
  check_near(x, {0.125, 0.7757087448943197, 7.0});
  CHECK(opt.state().m == std::vector<float>{-0.25f, 0.75f, 0.0f});
  CHECK(opt.state().v == std::vector<float>{1.0f, 1.375f, 1.0f});
  CHECK(x[2] == 7.0f);
}

TEST_CASE("server optimizer: yogi (FedYogi) by hand: v moves by (1 − β2)·Δ² toward Δ², and stands where it equals it") {
  core::server_optimizer opt({.kind = kind::yogi, .lr = 1.0, .beta1 = 0.5, .beta2 = 0.75, .epsilon = 1.0}, 3);
  // Round 1, Δ = (1, 2), coordinate 2 not trained:
  //   coordinate 0: Δ² = 1 = v, sign 0: v stays 1 (Adam's would too, by decay: 0.75 + 0.25);
  //   coordinate 1: Δ² = 4 > v = 1, sign −1: v = 1 + 0.25·4 = 2 (Adam's: 1.75);
  //   m = (0.5, 1); x = (0.5 / 2, 1 / (√2 + 1)) = (0.25, √2 − 1).
  auto x = step(opt, {0.0f, 0.0f, -3.0f}, {1.0f, 2.0f, -3.0f}, {1.0f, 1.0f, 0.0f});
  check_near(x, {0.25, 0.41421356237309515, -3.0});
  CHECK(opt.state().v == std::vector<float>{1.0f, 2.0f, 1.0f});
  // Round 2, Δ = (−1, 0.5):
  //   coordinate 0: Δ² = 1 = v: v stays 1; m = −0.25; x = 0.25 − 0.125;
  //   coordinate 1: Δ² = 0.25 < v = 2, sign +1: v = 2 − 0.25·0.25 = 1.9375 (Adam would decay it to
  //   1.5625); m = 0.75; x = (√2 − 1) + 0.75 / (√1.9375 + 1) = 0.7277664405.
  const std::vector<float> previous = x;
  x = step(opt, previous, {previous[0] - 1.0f, previous[1] + 0.5f, -3.0f}, {1.0f, 1.0f, 0.0f});
  check_near(x, {0.125, 0.7277664405381876, -3.0});
  CHECK(opt.state().m == std::vector<float>{-0.25f, 0.75f, 0.0f});
  CHECK(opt.state().v == std::vector<float>{1.0f, 1.9375f, 1.0f});
  CHECK(opt.state().steps == 2);
}

TEST_CASE("server optimizer: a restored state continues to the bit; a state that does not fit is refused and changes nothing") {
  const core::server_optimizer_options o{.kind = kind::adam, .lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .epsilon = 1e-3};
  const std::vector<float> mask(5, 1.0f);
  std::vector<float> model{0.1f, -0.2f, 0.3f, 0.0f, 1.0f};
  core::server_optimizer whole(o, 5);
  model = step(whole, model, {0.15f, -0.25f, 0.3f, 0.01f, 0.9f}, mask);
  core::server_optimizer resumed(o, 5);
  REQUIRE(resumed.restore(whole.state()).ok());
  CHECK(resumed.state() == whole.state());
  const std::vector<float> next{0.2f, -0.3f, 0.35f, 0.0f, 0.95f};
  CHECK(step(resumed, model, next, mask) == step(whole, model, next, mask));
  CHECK(resumed.state() == whole.state());

  core::server_optimizer fresh(o, 5);
  const core::server_optimizer_state before = fresh.state();
  core::server_optimizer_state other = whole.state();
  other.kind = kind::yogi;
  CHECK(contains(error_of(fresh.restore(other)).message, "of kind yogi, the configuration's is adam"));
  core::server_optimizer_state short_m = whole.state();
  short_m.m.pop_back();
  CHECK(contains(error_of(fresh.restore(short_m)).message, "4 first and 5 second moments for 5 parameters"));
  core::server_optimizer_state nan_m = whole.state();
  nan_m.m[2] = std::numeric_limits<float>::quiet_NaN();
  CHECK(contains(error_of(fresh.restore(nan_m)).message, "first moment 2 is not finite"));
  core::server_optimizer_state negative_v = whole.state();
  negative_v.v[4] = -1e-9f;
  const core::error e = error_of(fresh.restore(negative_v));
  CHECK(e.code == core::errc::bad_format);
  CHECK(contains(e.message, "second moment 4 is negative or not finite"));
  core::server_optimizer_state negative_steps = whole.state();
  negative_steps.steps = -1;
  CHECK(contains(error_of(fresh.restore(negative_steps)).message, "negative step count"));
  CHECK(fresh.state() == before);

  // Momentum keeps no v: a state with one is another layout.
  core::server_optimizer m({.kind = kind::momentum}, 2);
  CHECK(m.restore({.kind = kind::momentum, .steps = 4, .m = {1.0f, 2.0f}, .v = {}}).ok());
  CHECK_FALSE(m.restore({.kind = kind::momentum, .steps = 4, .m = {1.0f, 2.0f}, .v = {1.0f, 1.0f}}).ok());
  CHECK(m.state().steps == 4);
}

TEST_CASE("server optimizer: the names of the kinds, and how many moment vectors each keeps") {
  CHECK(core::k_server_optimizer_names.list() == "none, momentum, adam, yogi");
  CHECK(core::to_string(kind::yogi) == "yogi");
  CHECK(core::moments_of(kind::none) == 0);
  CHECK(core::moments_of(kind::momentum) == 1);
  CHECK(core::moments_of(kind::adam) == 2);
  CHECK(core::moments_of(kind::yogi) == 2);
}
