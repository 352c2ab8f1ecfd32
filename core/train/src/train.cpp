#include "tessera/core/train/train.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "tessera/core/base/rng.hpp"

namespace tessera::core {

// ---- batch_sampler: a keyed Feistel permutation of [0, 2^(2h)) restricted to [0, n) by cycle-walking.
// Four rounds of a balanced Feistel network with a strong round function are a pseudo-random permutation
// (Luby–Rackoff); walking the cycle from i until it lands below n keeps it a bijection on [0, n). The
// domain is less than 4n, so a walk takes fewer than 4 steps on average.

batch_sampler::batch_sampler(std::int64_t n, std::uint64_t seed) : n_(static_cast<std::uint64_t>(n)), seed_(seed) {
  TESSERA_ASSERT(n > 0 && n <= std::int64_t{UINT32_MAX});
  const unsigned bits = std::max(2u, static_cast<unsigned>(std::bit_width(n_ - 1)));
  half_bits_ = (bits + 1) / 2;
  start_epoch();
}

void batch_sampler::start_epoch() noexcept {
  rng r(mix_seed(seed_, static_cast<std::uint64_t>(epoch_)));
  for (auto& k : round_keys_) k = r.next();
  pos_ = 0;
}

std::uint32_t batch_sampler::at(std::uint64_t i) const noexcept {
  const std::uint64_t mask = (std::uint64_t{1} << half_bits_) - 1;
  std::uint64_t x = i;
  do {
    std::uint64_t left = x >> half_bits_;
    std::uint64_t right = x & mask;
    for (const std::uint64_t key : round_keys_) {
      const std::uint64_t f = splitmix64(right ^ key) & mask;
      const std::uint64_t next_right = left ^ f;
      left = right;
      right = next_right;
    }
    x = (left << half_bits_) | right;
  } while (x >= n_);
  return static_cast<std::uint32_t>(x);
}

std::vector<std::uint32_t> held_out_rows(std::int64_t n, double fraction, std::uint64_t seed) {
  TESSERA_ASSERT(n >= 0 && fraction >= 0 && fraction <= 1);
  const auto count = static_cast<std::uint64_t>(std::floor(fraction * static_cast<double>(n)));
  std::vector<std::uint32_t> rows;
  if (count == 0) return rows;
  rows.reserve(count);
  const batch_sampler order(n, seed);
  for (std::uint64_t i = 0; i < count; ++i) rows.push_back(order.at(i));
  std::sort(rows.begin(), rows.end());
  return rows;
}

void batch_sampler::next(std::span<std::uint32_t> out) noexcept {
  for (auto& v : out) {
    if (pos_ == n_) {
      ++epoch_;
      start_epoch();
    }
    v = at(pos_++);
  }
  drawn_ += out.size();
}

void batch_sampler::skip(std::uint64_t count) noexcept {
  drawn_ += count;
  while (count > 0) {
    if (pos_ == n_) {
      ++epoch_;
      start_epoch();
    }
    const std::uint64_t step = std::min(count, n_ - pos_);
    pos_ += step;
    count -= step;
  }
}

// ---- table_batches

table_batches::table_batches(example_table& table, std::uint64_t seed, std::int64_t max_batch)
    : table_(table), order_(table.size(), seed), indices_(static_cast<std::size_t>(max_batch)) {
  TESSERA_ASSERT(max_batch > 0);
}

result<void> table_batches::next(std::span<float> features, std::span<float> targets) {
  TESSERA_ASSERT(targets.size() <= indices_.size());
  const auto idx = std::span(indices_).first(targets.size());
  order_.next(idx);
  return table_.gather(idx, features, targets);
}

// ---- local_trainer

namespace {

// Data with another feature count than the model's inputs is refused, naming the data (`what`).
result<void> check_feature_count(const mlp_arch& arch, std::int64_t features, const std::string& what) {
  if (features != arch.inputs())
    return make_error(errc::invalid_argument, what + ": " + std::to_string(features) +
                                                  " features per example, the model takes " +
                                                  std::to_string(arch.inputs()));
  return {};
}

}  // namespace

std::int64_t target_width(const mlp_arch& arch) noexcept {
  return arch.task == task_kind::classification ? 1 : arch.outputs();
}

local_trainer::local_trainer(mlp_arch arch, std::int64_t batch) : net_(std::move(arch)), batch_(batch) {
  TESSERA_ASSERT(batch > 0 && !compact_frozen(net_.arch()));
  const auto b = static_cast<std::size_t>(batch);
  const std::size_t p = net_.trained_count();
  const std::size_t ws = net_.workspace_floats(batch);
  const std::size_t x = b * static_cast<std::size_t>(net_.arch().inputs());
  const std::size_t y = b * static_cast<std::size_t>(target_width(net_.arch()));
  // Gradients and velocity both, so that every optimizer setting works with an owned trainer.
  owned_.resize(2 * p + ws + x + y);
  std::span<float> all(owned_);
  buf_ = {all.subspan(0, p), all.subspan(p, p), all.subspan(2 * p, ws), all.subspan(2 * p + ws, x),
          all.subspan(2 * p + ws + x, y)};
}

local_trainer::local_trainer(mlp_arch arch, std::int64_t batch, training_buffers buffers)
    : net_(std::move(arch), {.blob = buffers.frozen, .scratch = buffers.frozen_scratch}), batch_(batch), buf_(buffers) {
  TESSERA_ASSERT(batch > 0);
  const auto b = static_cast<std::size_t>(batch);
  TESSERA_ASSERT(buf_.grads.empty() || buf_.grads.size() == net_.trained_count());
  TESSERA_ASSERT(buf_.velocity.empty() || buf_.velocity.size() == net_.trained_count());
  TESSERA_ASSERT(!buf_.grads.empty() || !buf_.velocity.empty());
  TESSERA_ASSERT(buf_.workspace.size() >= net_.workspace_floats(batch));
  TESSERA_ASSERT(buf_.features.size() == b * static_cast<std::size_t>(net_.arch().inputs()));
  TESSERA_ASSERT(buf_.targets.size() == b * static_cast<std::size_t>(target_width(net_.arch())));
}

result<local_training_report> local_trainer::run(std::span<float> params, batch_source& source,
                                                 const local_training_options& options) {
  TESSERA_ASSERT(params.size() == net_.held_count());
  TESSERA_TRY(check_feature_count(net_.arch(), source.feature_count(), source.describe()));
  if (net_.arch().task == task_kind::regression && net_.arch().outputs() != 1)
    return make_error(errc::unsupported, source.describe() + ": the data readers give one target per example; a "
                                                             "regression model must have 1 output, this one has " +
                                                             std::to_string(net_.arch().outputs()));
  const bool momentum = options.sgd.momentum != 0.0f;
  if (momentum && buf_.velocity.empty())
    return make_error(errc::invalid_argument, "momentum " + std::to_string(options.sgd.momentum) +
                                                  " needs a velocity buffer, and this trainer was sized without one");
  if (!momentum && buf_.grads.empty())
    return make_error(errc::invalid_argument, "plain SGD needs a gradient buffer, and this trainer was sized without one");
  const auto start = std::chrono::steady_clock::now();
  // A fresh velocity each round (the subnet is new), in the prepared form train_step accumulates into.
  if (!options.keep_velocity) {
    if (momentum) sgd_prepare_start(options.sgd, params.last(net_.trained_count()), buf_.velocity);
    else std::fill(buf_.velocity.begin(), buf_.velocity.end(), 0.0f);
  }
  const std::int64_t batch = options.batch > 0 ? options.batch : batch_;
  const auto inputs = static_cast<std::size_t>(net_.arch().inputs());
  const auto width = static_cast<std::size_t>(target_width(net_.arch()));
  local_training_report report;
  double loss_sum = 0;
  for (std::int64_t step = 0; step < options.steps; ++step) {
    if (options.cancel != nullptr && options.cancel->load(std::memory_order_relaxed))
      return make_error(errc::cancelled, "training stopped after " + std::to_string(step) + " of " +
                                             std::to_string(options.steps) + " steps");
    double step_loss = 0;  // summed over the batch's rows
    for (std::int64_t done = 0; done < batch;) {
      const std::int64_t rows = std::min(batch_, batch - done);
      const auto r = static_cast<std::size_t>(rows);
      TESSERA_TRY(source.next(buf_.features.first(r * inputs), buf_.targets.first(r * width)));
      auto loss = net_.train_step(params, buf_.grads, momentum ? buf_.velocity : std::span<float>{}, options.sgd, buf_.features.data(),
                                  buf_.targets.data(), rows, buf_.workspace,
                                  {.batch_rows = batch, .first = done == 0, .last = done + rows == batch});
      if (!loss) return make_error(errc::bad_format, source.describe() + ": " + loss.error().message);
      step_loss += loss.value() * static_cast<double>(rows);
      done += rows;
    }
    loss_sum += step_loss / static_cast<double>(batch);
    report.examples += batch;
    ++report.steps;
  }
  report.mean_loss = report.steps > 0 ? loss_sum / static_cast<double>(report.steps) : 0.0;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

// ---- evaluate

result<void> normalized_batches::next(std::span<float> features, std::span<float> targets) {
  TESSERA_TRY(base_.next(features, targets));
  normalize_rows(features.first(targets.size() * static_cast<std::size_t>(feature_count())), n_);
  return {};
}

result<void> score_batch(const network& net, std::span<const float> params, const float* x, const float* y,
                         std::int64_t rows, std::span<float> workspace, evaluation& ev) {
  net.forward(params, x, rows, workspace);
  TESSERA_ASSIGN_OR_RETURN(const double loss, net.loss(workspace, y, rows));
  ev.loss_sum += loss * static_cast<double>(rows);
  ev.examples += rows;
  if (net.arch().task == task_kind::classification) {
    const std::int64_t k = net.arch().outputs();
    const auto out = net.outputs(workspace, rows);
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* o = out.data() + r * k;
      const auto best = std::max_element(o, o + k) - o;
      if (static_cast<float>(best) == y[r]) ++ev.correct;
    }
  }
  return {};
}

void finish(evaluation& ev) noexcept {
  if (ev.examples <= 0) return;
  ev.loss = ev.loss_sum / static_cast<double>(ev.examples);
  ev.accuracy = static_cast<double>(ev.correct) / static_cast<double>(ev.examples);
}

result<evaluation> evaluate_in(const network& net, std::span<const float> params, example_table& data,
                               const training_buffers& buf, std::int64_t batch, const input_normalization* normalization) {
  const auto inputs = static_cast<std::size_t>(net.arch().inputs());
  const auto width = static_cast<std::size_t>(target_width(net.arch()));
  std::uint32_t idx[256];  // on the stack: evaluation on a device must not allocate
  const std::int64_t step = std::min<std::int64_t>(batch, 256);
  evaluation ev;
  for (std::int64_t start = 0; start < data.size(); start += step) {
    const std::int64_t rows = std::min(step, data.size() - start);
    const auto n = static_cast<std::size_t>(rows);
    for (std::size_t i = 0; i < n; ++i) idx[i] = static_cast<std::uint32_t>(start + static_cast<std::int64_t>(i));
    TESSERA_TRY(data.gather(std::span(idx, n), buf.features.first(n * inputs), buf.targets.first(n * width)));
    if (normalization != nullptr) normalize_rows(buf.features.first(n * inputs), *normalization);
    TESSERA_TRY(score_batch(net, params, buf.features.data(), buf.targets.data(), rows, buf.workspace, ev));
  }
  finish(ev);
  return ev;
}

result<evaluation> evaluate(const network& net, std::span<const float> params, example_table& data, std::int64_t batch,
                            const input_normalization* normalization) {
  TESSERA_ASSERT(batch > 0);
  const mlp_arch& arch = net.arch();
  TESSERA_TRY(check_feature_count(arch, data.feature_count(), data.describe()));
  if (arch.task == task_kind::regression && arch.outputs() != 1)
    return make_error(errc::unsupported, data.describe() + ": the data readers give one target per example; a "
                                                           "regression model must have 1 output");
  const auto inputs = static_cast<std::size_t>(arch.inputs());
  const auto width = static_cast<std::size_t>(target_width(arch));
  const auto b = static_cast<std::size_t>(batch);
  // Aligned as the training arena is: a vectorized sum peels its first elements by the address, so the
  // loss of the same model would otherwise depend on where the allocator put the buffers (it does under
  // Open MPI's allocator hooks, say).
  using aligned_floats = std::vector<float, Eigen::aligned_allocator<float>>;
  aligned_floats ws(net.workspace_floats(batch));
  aligned_floats x(b * inputs);
  aligned_floats y(b * width);
  std::vector<std::uint32_t> idx(b);
  evaluation ev;
  for (std::int64_t start = 0; start < data.size(); start += batch) {
    const std::int64_t rows = std::min(batch, data.size() - start);
    const auto n = static_cast<std::size_t>(rows);
    for (std::size_t i = 0; i < n; ++i) idx[i] = static_cast<std::uint32_t>(start + static_cast<std::int64_t>(i));
    TESSERA_TRY(data.gather(std::span(idx).first(n), std::span(x).first(n * inputs), std::span(y).first(n * width)));
    if (normalization != nullptr) normalize_rows(std::span(x).first(n * inputs), *normalization);
    TESSERA_TRY(score_batch(net, params, x.data(), y.data(), rows, ws, ev));
  }
  finish(ev);
  return ev;
}

}  // namespace tessera::core
