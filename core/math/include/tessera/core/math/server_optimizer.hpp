// tessera/core/math/server_optimizer.hpp — the hub's step after assembly: FedAvgM, FedAdam, FedYogi.
//
// A round assembles a model from the devices' updates (DESIGN.md §2, step 4). A server optimizer then
// treats Δ = assembled − previous, coordinate by coordinate, as a pseudo-gradient and takes its own step
// from the previous model (Reddi et al., "Adaptive Federated Optimization", ICLR 2021, Algorithm 2;
// Hsu, Qi, Brown 2019 for server momentum). With η the server learning rate:
//
//   none       x ← x_prev + η·Δ                                    (no state)
//   momentum   m ← β1·m + Δ;                   x ← x_prev + η·m     (FedAvgM)
//   adam       m ← β1·m + (1 − β1)·Δ;  v ← β2·v + (1 − β2)·Δ²;                      x ← x_prev + η·m / (√v + τ)
//   yogi       m ← β1·m + (1 − β1)·Δ;  v ← v − (1 − β2)·Δ²·sign(v − Δ²);            x ← x_prev + η·m / (√v + τ)
//
// `none` with η = 1 is the plain assembly, which is what a run without a server optimizer does and the
// default: identity() says so, and the engine then skips the step altogether, so the model is the
// assembled one to the bit. `none` with another η scales the average change (FedAvg with a server
// learning rate).
//
// As in Algorithm 2 there is no bias correction: m starts at 0 and v at τ² (the algorithm's
// v_{−1} ≥ τ², at its bound), and the first steps are not rescaled by 1 / (1 − β^t). Under IST a
// coordinate's moments only move in rounds that train it, so each coordinate has its own count of
// updates; a correction by the run's step count would be wrong for most of them.
//
// Only coordinates some device's update reached this round take a step (`trained` non-zero). The others
// (weights joining two IST groups, blocks of stragglers, segments secure aggregation withheld) keep
// their value, and their moments stand still: no decay, no step from an old momentum.
//
// Arithmetic is in double per coordinate; the model and the moments are stored as float, and a step
// reads the moments as stored, so a state restored from a checkpoint continues to the bit.
//
//   core::server_optimizer opt({.kind = core::server_optimizer_kind::adam, .lr = 0.01}, model.size());
//   const std::vector<float> previous(model.begin(), model.end());
//   ... assemble into `model`; trained[i] = 1 where some update reached coordinate i ...
//   opt.step(previous, model, trained);               // model: previous + η·m / (√v + τ) where trained
//   save(opt.state());                                // moments and steps, for a checkpoint
//   TESSERA_TRY(resumed.restore(std::move(state)));   // checked against the options and the size
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "tessera/core/base/error.hpp"
#include "tessera/core/base/names.hpp"

namespace tessera::core {

enum class server_optimizer_kind { none, momentum, adam, yogi };
inline constexpr auto k_server_optimizer_names = names_in_order<server_optimizer_kind>({"none", "momentum", "adam", "yogi"});
[[nodiscard]] inline std::string_view to_string(server_optimizer_kind k) noexcept { return k_server_optimizer_names.name(k); }

// The moment vectors a kind keeps: none 0, momentum 1 (m), adam and yogi 2 (m, v).
[[nodiscard]] constexpr std::size_t moments_of(server_optimizer_kind k) noexcept {
  return k == server_optimizer_kind::none ? 0 : k == server_optimizer_kind::momentum ? 1 : 2;
}

// Hyperparameters; ranges are the configuration reader's (rounds/run_config.cpp): lr > 0, β in [0, 1),
// epsilon > 0.
struct server_optimizer_options {
  server_optimizer_kind kind = server_optimizer_kind::none;
  double lr = 1.0;        // η, the server learning rate
  double beta1 = 0.9;     // momentum, adam, yogi: the first moment's decay
  double beta2 = 0.99;    // adam, yogi: the second moment's decay
  double epsilon = 1e-3;  // adam, yogi: τ, added to √v; v starts at τ²

  // The plain assembly: no step at all.
  [[nodiscard]] bool identity() const noexcept { return kind == server_optimizer_kind::none && lr == 1.0; }
};

// What the optimizer carries from round to round (a checkpoint stores it): its kind, the rounds it has
// stepped, and its moments, one float per parameter each (m: momentum, adam, yogi; v: adam, yogi).
struct server_optimizer_state {
  server_optimizer_kind kind = server_optimizer_kind::none;
  std::int64_t steps = 0;
  std::vector<float> m;
  std::vector<float> v;

  bool operator==(const server_optimizer_state&) const = default;
};

class server_optimizer {
 public:
  // `params`: the model's parameter count. Moments start at m = 0 and v = τ².
  server_optimizer(server_optimizer_options options, std::size_t params);

  [[nodiscard]] const server_optimizer_options& options() const noexcept { return options_; }
  [[nodiscard]] const server_optimizer_state& state() const noexcept { return state_; }
  [[nodiscard]] bool identity() const noexcept { return options_.identity(); }
  // Whether it keeps moments (momentum, adam, yogi): the state a resumed run needs.
  [[nodiscard]] bool stateful() const noexcept { return moments_of(options_.kind) > 0; }

  // One server step. `previous`: the model the round started from; `model`: the assembled model, moved
  // in place; `trained`: non-zero where some device's update reached the coordinate this round. All
  // three have the parameter count's length. Coordinates not trained keep their value in `model` and
  // their moments. Counts a step; returns how many coordinates moved by it.
  std::size_t step(std::span<const float> previous, std::span<float> model, std::span<const float> trained);

  // Replaces the state with one a checkpoint held. Fails (core::errc::bad_format, naming what) unless it
  // is of the configured kind, its moments have the parameter count's length, every value is finite,
  // every v is at least 0, and steps is not negative; the state is then unchanged.
  [[nodiscard]] result<void> restore(server_optimizer_state s);

 private:
  server_optimizer_options options_;
  std::size_t params_ = 0;
  server_optimizer_state state_;
};

}  // namespace tessera::core
