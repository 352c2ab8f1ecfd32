#include "tessera/core/math/optimizer.hpp"

#include <cmath>
#include <numbers>

#include <Eigen/Core>

namespace tessera::core {

void sgd_step(const sgd_options& o, std::span<float> params, std::span<const float> grads,
              std::span<float> velocity) noexcept {
  TESSERA_ASSERT(params.size() == grads.size());
  const auto n = static_cast<Eigen::Index>(params.size());
  Eigen::Map<Eigen::ArrayXf> w(params.data(), n);
  Eigen::Map<const Eigen::ArrayXf> g(grads.data(), n);
  if (velocity.empty()) {
    // Plain SGD keeps no state: a device without momentum saves a parameter-sized buffer.
    TESSERA_ASSERT(o.momentum == 0.0f);
    w -= o.learning_rate * (g + o.weight_decay * w);
    return;
  }
  TESSERA_ASSERT(params.size() == velocity.size());
  Eigen::Map<Eigen::ArrayXf> v(velocity.data(), n);
  // One fused pass over the three arrays: this is memory-bound, so each array is read once.
  v = o.momentum * v + g + o.weight_decay * w;
  w -= o.learning_rate * v;
}

void sgd_apply_prepared(const sgd_options& o, std::span<float> params, std::span<float> velocity) noexcept {
  TESSERA_ASSERT(params.size() == velocity.size());
  const auto n = static_cast<Eigen::Index>(params.size());
  Eigen::Map<Eigen::ArrayXf> w(params.data(), n);
  Eigen::Map<Eigen::ArrayXf> v(velocity.data(), n);
  w -= o.learning_rate * v;
  v = o.momentum * v + o.weight_decay * w;
}

void sgd_prepare_start(const sgd_options& o, std::span<const float> params, std::span<float> velocity) noexcept {
  TESSERA_ASSERT(params.size() == velocity.size());
  const auto n = static_cast<Eigen::Index>(params.size());
  Eigen::Map<Eigen::ArrayXf>(velocity.data(), n) = o.weight_decay * Eigen::Map<const Eigen::ArrayXf>(params.data(), n);
}

float learning_rate_at(const lr_schedule& s, std::int64_t round) noexcept {
  if (round < s.warmup_rounds)
    return s.base * static_cast<float>(round + 1) / static_cast<float>(s.warmup_rounds + 1);
  const std::int64_t r = round - s.warmup_rounds;
  switch (s.kind) {
    case schedule_kind::constant: return s.base;
    case schedule_kind::step:
      return s.base * std::pow(s.gamma, static_cast<float>(r / std::max<std::int64_t>(1, s.step_rounds)));
    case schedule_kind::cosine: {
      const std::int64_t len = std::max<std::int64_t>(1, s.total_rounds - s.warmup_rounds);
      const double t = std::min(1.0, static_cast<double>(r) / static_cast<double>(len));
      const double lo = static_cast<double>(s.base) * static_cast<double>(s.final_fraction);
      return static_cast<float>(lo + (static_cast<double>(s.base) - lo) * 0.5 * (1.0 + std::cos(std::numbers::pi * t)));
    }
  }
  return s.base;
}

}  // namespace tessera::core
