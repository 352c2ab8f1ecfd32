#include "tessera/core/math/server_optimizer.hpp"

#include <cmath>
#include <string>
#include <utility>

#include "tessera/core/base/assert.hpp"

namespace tessera::core {

server_optimizer::server_optimizer(server_optimizer_options options, std::size_t params) : options_(options), params_(params) {
  TESSERA_ASSERT(options_.lr > 0 && options_.beta1 >= 0 && options_.beta1 < 1 && options_.beta2 >= 0 && options_.beta2 < 1 &&
                 options_.epsilon > 0);
  state_.kind = options_.kind;
  const std::size_t moments = moments_of(options_.kind);
  if (moments >= 1) state_.m.assign(params_, 0.0f);
  if (moments >= 2) state_.v.assign(params_, static_cast<float>(options_.epsilon * options_.epsilon));
}

std::size_t server_optimizer::step(std::span<const float> previous, std::span<float> model, std::span<const float> trained) {
  TESSERA_ASSERT(previous.size() == params_ && model.size() == params_ && trained.size() == params_);
  const double lr = options_.lr, b1 = options_.beta1, b2 = options_.beta2, tau = options_.epsilon;
  const server_optimizer_kind kind = options_.kind;
  std::size_t moved = 0;
  for (std::size_t i = 0; i < params_; ++i) {
    if (trained[i] == 0.0f) continue;  // nobody trained it: its value and its moments stand still
    ++moved;
    const double x = static_cast<double>(previous[i]);
    const double delta = static_cast<double>(model[i]) - x;
    double move_by = 0;
    switch (kind) {
      case server_optimizer_kind::none:
        move_by = delta;
        break;
      case server_optimizer_kind::momentum:
        state_.m[i] = static_cast<float>(b1 * static_cast<double>(state_.m[i]) + delta);
        move_by = static_cast<double>(state_.m[i]);
        break;
      case server_optimizer_kind::adam:
      case server_optimizer_kind::yogi: {
        state_.m[i] = static_cast<float>(b1 * static_cast<double>(state_.m[i]) + (1.0 - b1) * delta);
        const double v = static_cast<double>(state_.v[i]);
        const double sq = delta * delta;
        double v_next = 0;
        if (kind == server_optimizer_kind::adam) {
          v_next = b2 * v + (1.0 - b2) * sq;
        } else {
          // sign(v − Δ²): v moves toward Δ² by (1 − β2)·Δ², additively, and stays where it equals it.
          const double sign = v > sq ? 1.0 : v < sq ? -1.0 : 0.0;
          v_next = v - (1.0 - b2) * sq * sign;
        }
        state_.v[i] = static_cast<float>(v_next);
        move_by = static_cast<double>(state_.m[i]) / (std::sqrt(static_cast<double>(state_.v[i])) + tau);
        break;
      }
    }
    model[i] = static_cast<float>(x + lr * move_by);
  }
  ++state_.steps;
  return moved;
}

result<void> server_optimizer::restore(server_optimizer_state s) {
  const auto refuse = [](const std::string& what) { return make_error(errc::bad_format, "server optimizer state: " + what); };
  if (s.kind != options_.kind)
    return refuse("of kind " + std::string(to_string(s.kind)) + ", the configuration's is " + std::string(to_string(options_.kind)));
  if (s.steps < 0) return refuse("a negative step count");
  const std::size_t moments = moments_of(s.kind);
  const std::size_t want_m = moments >= 1 ? params_ : 0, want_v = moments >= 2 ? params_ : 0;
  if (s.m.size() != want_m || s.v.size() != want_v)
    return refuse(std::to_string(s.m.size()) + " first and " + std::to_string(s.v.size()) + " second moments for " +
                  std::to_string(params_) + " parameters (expected " + std::to_string(want_m) + " and " + std::to_string(want_v) + ")");
  for (std::size_t i = 0; i < s.m.size(); ++i)
    if (!std::isfinite(s.m[i])) return refuse("first moment " + std::to_string(i) + " is not finite");
  for (std::size_t i = 0; i < s.v.size(); ++i)
    if (!std::isfinite(s.v[i]) || s.v[i] < 0.0f) return refuse("second moment " + std::to_string(i) + " is negative or not finite");
  state_ = std::move(s);
  return {};
}

}  // namespace tessera::core
