// tessera/core/train.hpp — local training: a deterministic batch order and the step loop.
//
// The same code trains a subnet on a device, a virtual device in the simulator and the reference
// `central` run, so that a federation over the network and the simulator produce the same model.
//
//   core::batch_sampler order(table.size(), core::mix_seed(device_seed, 0));  // persists across rounds
//   core::local_trainer trainer(sub.arch, 32);        // sizes its buffers once
//   auto report = trainer.run(params, table, order, {.steps = 200, .sgd = {.learning_rate = 0.05f}});
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/core/dataset.hpp"
#include "tessera/core/error.hpp"
#include "tessera/core/mlp.hpp"
#include "tessera/core/optimizer.hpp"

namespace tessera::core {

// Mini-batch order over n examples: a fresh seeded permutation each epoch, a cursor that carries over
// from one round to the next. Holds n 32-bit indices.
class batch_sampler {
 public:
  batch_sampler(std::int64_t n, std::uint64_t seed);
  // Fills `out` with the next indices, starting a new epoch (reshuffled) when one runs out.
  void next(std::span<std::uint32_t> out);
  [[nodiscard]] std::int64_t epoch() const noexcept { return epoch_; }
  [[nodiscard]] std::int64_t size() const noexcept { return static_cast<std::int64_t>(order_.size()); }

 private:
  void reshuffle();
  std::vector<std::uint32_t> order_;
  std::size_t pos_ = 0;
  std::int64_t epoch_ = 0;
  std::uint64_t seed_;
};

struct local_training_options {
  std::int64_t steps = 100;
  sgd_options sgd;
};

struct local_training_report {
  std::int64_t examples = 0;
  std::int64_t steps = 0;
  double mean_loss = 0;
  double seconds = 0;
};

// Trains one architecture with a fixed batch size; owns its gradients, velocity, workspace and batch
// buffers, sized at construction, so that run() does not allocate.
class local_trainer {
 public:
  local_trainer(mlp_arch arch, std::int64_t batch);

  [[nodiscard]] const network& net() const noexcept { return net_; }
  [[nodiscard]] std::int64_t batch() const noexcept { return batch_; }

  // Runs options.steps SGD steps on params (velocity restarts at zero). Batches come from `data` in the
  // order of `order` (whose size must equal data.size()).
  [[nodiscard]] result<local_training_report> run(std::span<float> params, example_table& data, batch_sampler& order,
                                                  const local_training_options& options);

 private:
  network net_;
  std::int64_t batch_;
  std::vector<float> grads_, velocity_, workspace_, x_, y_;
  std::vector<std::uint32_t> indices_;
};

}  // namespace tessera::core
