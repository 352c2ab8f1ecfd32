#include "tessera/core/train.hpp"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "tessera/core/rng.hpp"

namespace tessera::core {

batch_sampler::batch_sampler(std::int64_t n, std::uint64_t seed) : order_(static_cast<std::size_t>(n)), seed_(seed) {
  TESSERA_ASSERT(n > 0 && n <= std::int64_t{UINT32_MAX});
  reshuffle();
}

void batch_sampler::reshuffle() {
  std::iota(order_.begin(), order_.end(), 0u);
  rng r(mix_seed(seed_, static_cast<std::uint64_t>(epoch_)));
  shuffle(order_.begin(), order_.end(), r);
  pos_ = 0;
}

void batch_sampler::next(std::span<std::uint32_t> out) {
  for (auto& v : out) {
    if (pos_ == order_.size()) {
      ++epoch_;
      reshuffle();
    }
    v = order_[pos_++];
  }
}

local_trainer::local_trainer(mlp_arch arch, std::int64_t batch) : net_(std::move(arch)), batch_(batch) {
  TESSERA_ASSERT(batch > 0);
  const auto b = static_cast<std::size_t>(batch);
  const std::int64_t target_width = net_.arch().task == task_kind::classification ? 1 : net_.arch().outputs();
  grads_.resize(net_.param_count());
  velocity_.resize(net_.param_count());
  workspace_.resize(net_.workspace_floats(batch));
  x_.resize(b * static_cast<std::size_t>(net_.arch().inputs()));
  y_.resize(b * static_cast<std::size_t>(target_width));
  indices_.resize(b);
}

result<local_training_report> local_trainer::run(std::span<float> params, example_table& data, batch_sampler& order,
                                                 const local_training_options& options) {
  TESSERA_ASSERT(params.size() == net_.param_count());
  if (data.feature_count() != net_.arch().inputs())
    return make_error(errc::invalid_argument, data.describe() + ": " + std::to_string(data.feature_count()) +
                                                  " features per example, the model takes " +
                                                  std::to_string(net_.arch().inputs()));
  if (net_.arch().task == task_kind::regression && net_.arch().outputs() != 1)
    return make_error(errc::unsupported, data.describe() + ": the data readers give one target per example; a "
                                                           "regression model must have 1 output, this one has " +
                                                           std::to_string(net_.arch().outputs()));
  if (order.size() != data.size())
    return make_error(errc::invalid_argument, data.describe() + ": sampler covers " + std::to_string(order.size()) +
                                                  " examples, the data has " + std::to_string(data.size()));
  const auto start = std::chrono::steady_clock::now();
  std::fill(velocity_.begin(), velocity_.end(), 0.0f);
  local_training_report report;
  double loss_sum = 0;
  for (std::int64_t step = 0; step < options.steps; ++step) {
    order.next(indices_);
    TESSERA_TRY(data.gather(indices_, x_, y_));
    auto loss = net_.forward_backward(params, grads_, x_.data(), y_.data(), batch_, workspace_);
    if (!loss) return make_error(errc::bad_format, data.describe() + ": " + loss.error().message);
    loss_sum += loss.value();
    sgd_step(options.sgd, params, grads_, velocity_);
    report.examples += batch_;
    ++report.steps;
  }
  report.mean_loss = report.steps > 0 ? loss_sum / static_cast<double>(report.steps) : 0.0;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace tessera::core
