// tessera/core/train/train.hpp — where the model meets the data: batch order, the step loop, evaluation.
//
// The same code trains a subnet on a device, a virtual device in the simulator and the reference
// `central` run, so that a federation over the network and the simulator produce the same model.
// Batches come from a batch_source: a table read in a computed shuffled order, or a stream through a
// bounded shuffle buffer.
//
//   core::table_batches batches(table, core::mix_seed(device_seed, 0), 32);  // persists across rounds
//   core::local_trainer trainer(sub.arch, 32);        // sizes its buffers once
//   auto report = trainer.run(params, batches, {.steps = 200, .sgd = {.learning_rate = 0.05f}});
//   auto ev = core::evaluate(trainer.net(), params, test_table);   // accuracy and mean loss
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "tessera/core/base/error.hpp"
#include "tessera/core/data/dataset.hpp"
#include "tessera/core/data/input_normalization.hpp"
#include "tessera/core/math/mlp.hpp"
#include "tessera/core/math/optimizer.hpp"

namespace tessera::core {

// Mini-batch order over n examples: a fresh seeded permutation each epoch, a cursor that carries over
// from one round to the next. The permutation is computed, not stored (a keyed Feistel network over the
// index bits with cycle-walking), so the sampler takes O(1) memory whatever n is.
class batch_sampler {
 public:
  batch_sampler(std::int64_t n, std::uint64_t seed);
  // Fills `out` with the next indices, starting a new epoch (a new permutation) when one runs out.
  void next(std::span<std::uint32_t> out) noexcept;
  // Passes over `count` indices as next() would hand them out, in O(epochs crossed): a resumed run
  // continues its order where it stopped.
  void skip(std::uint64_t count) noexcept;
  // Indices handed out or passed over since construction.
  [[nodiscard]] std::uint64_t drawn() const noexcept { return drawn_; }
  // The example at position i of the current epoch's order (i < size()).
  [[nodiscard]] std::uint32_t at(std::uint64_t i) const noexcept;
  [[nodiscard]] std::int64_t epoch() const noexcept { return epoch_; }
  [[nodiscard]] std::int64_t size() const noexcept { return static_cast<std::int64_t>(n_); }

 private:
  void start_epoch() noexcept;
  std::uint64_t n_;
  std::uint64_t seed_;
  std::uint64_t pos_ = 0;
  std::uint64_t drawn_ = 0;
  std::int64_t epoch_ = 0;
  unsigned half_bits_ = 1;          // the permuted domain is 2^(2·half_bits) >= n
  std::uint64_t round_keys_[4]{};   // this epoch's keys
};

// The examples a device holds out for validation: the first ⌊fraction·n⌋ positions of a keyed permutation
// of its n examples (batch_sampler's, keyed by `seed`, core::validation_seed), sorted. Never trained on.
[[nodiscard]] std::vector<std::uint32_t> held_out_rows(std::int64_t n, double fraction, std::uint64_t seed);

// Where mini-batches come from: next() fills exactly targets.size() examples, starting a new epoch
// (reshuffled) whenever the data runs out. No allocation after construction.
class batch_source {
 public:
  virtual ~batch_source() = default;
  [[nodiscard]] virtual std::int64_t feature_count() const noexcept = 0;
  [[nodiscard]] virtual result<void> next(std::span<float> features, std::span<float> targets) = 0;
  [[nodiscard]] virtual std::string describe() const = 0;
  // Bytes the source holds in its own buffers, fixed at construction (counted against a device's budget).
  [[nodiscard]] virtual std::size_t buffer_bytes() const noexcept = 0;
};

// Batches read from a table in the order of a batch_sampler (exact shuffling, O(1) memory).
class table_batches final : public batch_source {
 public:
  table_batches(example_table& table, std::uint64_t seed, std::int64_t max_batch);
  [[nodiscard]] std::int64_t feature_count() const noexcept override { return table_.feature_count(); }
  [[nodiscard]] result<void> next(std::span<float> features, std::span<float> targets) override;
  [[nodiscard]] std::string describe() const override { return table_.describe(); }
  [[nodiscard]] std::size_t buffer_bytes() const noexcept override { return indices_.size() * sizeof(std::uint32_t); }
  [[nodiscard]] const batch_sampler& order() const noexcept { return order_; }
  // The order's place (batch_sampler::skip, drawn): examples handed out so far, and passing over some.
  [[nodiscard]] std::uint64_t drawn() const noexcept { return order_.drawn(); }
  void skip(std::uint64_t examples) noexcept { order_.skip(examples); }

 private:
  example_table& table_;
  batch_sampler order_;
  std::vector<std::uint32_t> indices_;
};

// Batches read from a stream (CSV, gzip) through a bounded shuffle buffer of `capacity` examples: each
// example handed out is drawn at random from the buffer and its slot refilled with the next one read; at
// the end of the stream the stream is rewound (a new epoch). Memory: capacity × (features + 1) floats.
class shuffled_stream_batches final : public batch_source {
 public:
  shuffled_stream_batches(example_stream& stream, std::size_t capacity, std::uint64_t seed);
  [[nodiscard]] std::int64_t feature_count() const noexcept override { return stream_.feature_count(); }
  [[nodiscard]] result<void> next(std::span<float> features, std::span<float> targets) override;
  [[nodiscard]] std::string describe() const override { return stream_.describe(); }
  [[nodiscard]] std::size_t buffer_bytes() const noexcept override;

 private:
  example_stream& stream_;
  std::size_t capacity_;
  std::uint64_t seed_;
  std::uint64_t draws_ = 0;
  std::vector<float> features_;  // capacity × feature_count
  std::vector<float> targets_;   // capacity
  std::size_t filled_ = 0;       // slots holding an example
  bool stream_ended_ = false;
};

// Another source's batches with the model's input normalization applied (core/data/input_normalization.hpp):
// the one place training data meets it, on a device and in the simulator alike. `base` and `n` must
// outlive it; it holds no buffer of its own.
class normalized_batches final : public batch_source {
 public:
  normalized_batches(batch_source& base, const input_normalization& n) noexcept : base_(base), n_(n) {}
  [[nodiscard]] std::int64_t feature_count() const noexcept override { return base_.feature_count(); }
  [[nodiscard]] result<void> next(std::span<float> features, std::span<float> targets) override;
  [[nodiscard]] std::string describe() const override { return base_.describe(); }
  [[nodiscard]] std::size_t buffer_bytes() const noexcept override { return base_.buffer_bytes(); }

 private:
  batch_source& base_;
  const input_normalization& n_;
};

struct local_training_options {
  std::int64_t steps = 100;
  sgd_options sgd;
  // Examples per step (0: the rows the trainer holds). More than it holds: each step is taken in
  // micro-batches of those rows (network::batch_part), the same step in less memory.
  std::int64_t batch = 0;
  // Checked before every step: when it turns true, run() stops with errc::cancelled (the agent uses it
  // when a newer assignment supersedes the one in training).
  const std::atomic<bool>* cancel = nullptr;
  // Continue the momentum of the previous run() on the same parameters instead of starting afresh
  // (a long run split into pieces, as train-local does for its progress lines).
  bool keep_velocity = false;
};

struct local_training_report {
  std::int64_t examples = 0;
  std::int64_t steps = 0;
  double mean_loss = 0;
  double seconds = 0;
  bool clipped = false;  // the change was scaled down to the task's clip_norm
};

// The memory a trainer works in, all of it provided by the caller (on a device: views into its arena).
// Sizes: with momentum, velocity network::trained_count floats (every parameter but the frozen layers')
// and grads empty (gradients are accumulated into the velocity); plain SGD, grads trained_count and
// velocity empty; workspace
// network::workspace_floats(batch), features batch × inputs, targets batch × target width; with the
// frozen layers held encoded (compact_frozen), their blob and the scratch it is decoded into
// (frozen_layers), and the parameters are then the trained ones only (network::held_count).
struct training_buffers {
  std::span<float> grads;
  std::span<float> velocity;
  std::span<float> workspace;
  std::span<float> features;
  std::span<float> targets;
  std::span<const std::byte> frozen{};
  std::span<float> frozen_scratch{};
};

// Trains one architecture, holding `batch` rows at a time (a step's batch, or its micro-batch:
// local_training_options::batch). run() does not allocate.
class local_trainer {
 public:
  // Owns its buffers (the simulator, tests); not for compact frozen layers (they live in a training_block).
  local_trainer(mlp_arch arch, std::int64_t batch);
  // Works in caller-provided memory (the device's arena); asserts the sizes.
  local_trainer(mlp_arch arch, std::int64_t batch, training_buffers buffers);

  [[nodiscard]] const network& net() const noexcept { return net_; }
  [[nodiscard]] std::int64_t batch() const noexcept { return batch_; }

  // Runs options.steps SGD steps on params (the velocity restarts each run) on batches from `source`.
  [[nodiscard]] result<local_training_report> run(std::span<float> params, batch_source& source,
                                                  const local_training_options& options);

 private:
  network net_;
  std::int64_t batch_;
  std::vector<float> owned_;
  training_buffers buf_;
};

// Floats per example of the targets a model trains on: 1 (class index) or the output width.
[[nodiscard]] std::int64_t target_width(const mlp_arch& arch) noexcept;

// Accuracy (classification) or mean squared error (regression) over a table, with the mean loss.
struct evaluation {
  double loss = 0;
  double accuracy = 0;  // fraction correct; 0 for regression
  std::int64_t examples = 0;
  double loss_sum = 0;        // Σ over batches of the batch's mean loss × its rows (what devices report)
  std::int64_t correct = 0;   // classification
};
// Scores `rows` examples whose features (normalized as the model wants) and targets are in x and y:
// adds to ev's sums. finish() turns the sums into loss and accuracy. The one scoring step of the hub's,
// the simulator's and the devices' evaluations.
[[nodiscard]] result<void> score_batch(const network& net, std::span<const float> params, const float* x, const float* y,
                                       std::int64_t rows, std::span<float> workspace, evaluation& ev);
void finish(evaluation& ev) noexcept;
// Evaluates a table in the caller's buffers (an agent's arena, the simulator's training_block: their
// alignment decides Eigen's summation order, so both must use this to agree to the bit), at most
// min(batch, 256) rows at a time, with the model's input normalization (may be null). No allocation.
[[nodiscard]] result<evaluation> evaluate_in(const network& net, std::span<const float> params, example_table& data,
                                             const training_buffers& buffers, std::int64_t batch,
                                             const input_normalization* normalization);
// `normalization` (may be null or empty) is applied to every batch, as in training.
[[nodiscard]] result<evaluation> evaluate(const network& net, std::span<const float> params, example_table& data,
                                          std::int64_t batch = 256, const input_normalization* normalization = nullptr);

}  // namespace tessera::core
