// tessera/edge/device_data.hpp — a device's own examples, streamed from its files in bounded memory.
//
// Formats: IDX (images + labels; plain files are read at random, gzip through a shuffle buffer), NumPy
// .npy pairs (random access), CSV (a stream through a shuffle buffer). A validation split is held out
// and never trained on: the first ⌊validation_fraction · n⌋ examples of a keyed permutation
// (core::held_out_rows, keyed by the batch-order seed, so tessera-sim's device holds out the same), or
// a separate `validation` source. The split is a list of 4 bytes per held-out example, shared by
// views of the files (no copy). Memory is bounded by the reader's fixed buffers and that list
// (`buffer_bytes()`), independent of the file size, and counted against the device's budget together
// with the training arena.
//
//   edge::data_config cfg{.source = {.format = core::data_format::idx, .features = "train-images-idx3-ubyte",
//                                    .labels = "train-labels-idx1-ubyte"},
//                         .validation_fraction = 0.1};
//   auto data = edge::device_data::open(cfg, seed);
//   trainer.run(params, data.value()->train(), options);
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/core/base/error.hpp"
#include "tessera/core/data/data_source.hpp"
#include "tessera/core/data/dataset.hpp"
#include "tessera/core/data/targets.hpp"
#include "tessera/core/train/train.hpp"

namespace tessera::edge {

struct data_config {
  core::data_source source;        // the device's files (core/data/data_source.hpp)
  std::int64_t shuffle_buffer = 1024;  // examples held for shuffling a stream (gzip IDX, CSV)
  double validation_fraction = 0;  // held out for validation, in [0, 0.5] (ignored with `validation`)
  std::optional<core::data_source> validation{};  // a validation set of its own instead
  std::int64_t max_batch = 256;    // largest batch the train source will be asked for
};

class device_data {
 public:
  [[nodiscard]] static core::result<std::unique_ptr<device_data>> open(const data_config& config, std::uint64_t seed);

  [[nodiscard]] core::batch_source& train() noexcept { return *train_; }
  // The training examples in file order, as a stream of their own (the fleet's statistics read them
  // while no training runs): a view of the table, or the files opened again.
  [[nodiscard]] core::result<std::unique_ptr<core::example_stream>> training_examples() const;
  // Training examples (known for tables; for streams counted by one pass at open).
  [[nodiscard]] std::int64_t train_examples() const noexcept { return train_examples_; }
  [[nodiscard]] std::int64_t validation_examples() const noexcept { return validation_examples_; }
  [[nodiscard]] bool has_validation() const noexcept { return validation_examples_ > 0; }
  // Evaluates `net` (the full model or a subnet) on the validation split, `batch` examples at a time in
  // the caller's buffers, with the model's input normalization (may be null). No allocation.
  [[nodiscard]] core::result<core::evaluation> validate(const core::network& net, std::span<const float> params,
                                                        core::training_buffers buffers, std::int64_t batch,
                                                        const core::input_normalization* normalization = nullptr);
  [[nodiscard]] std::size_t buffer_bytes() const noexcept;
  [[nodiscard]] std::int64_t feature_count() const noexcept { return train_->feature_count(); }
  // Whether every example (training and validation) has a target a model of `task` with `outputs`
  // outputs can learn; an error names the file and the row.
  [[nodiscard]] core::result<void> check_targets(core::task_kind task, std::int64_t outputs) const;
  // The data's name for messages.
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  // A short text that changes when the data's shape or targets do (HELLO's data_digest).
  [[nodiscard]] std::string digest() const;

 private:
  device_data() = default;
  std::unique_ptr<core::example_table> table_;            // the whole file, when random access works
  std::unique_ptr<core::example_table> train_table_;      // its training split
  std::unique_ptr<core::example_table> validation_table_;
  std::unique_ptr<core::example_stream> train_stream_;
  std::unique_ptr<core::example_stream> validation_stream_;
  std::unique_ptr<core::batch_source> train_;
  std::shared_ptr<const std::vector<std::uint32_t>> held_out_;  // the validation split's rows (sorted)
  std::int64_t train_examples_ = 0;
  std::int64_t validation_examples_ = 0;
  std::size_t stream_buffers_ = 0;
  core::target_summary targets_, validation_targets_;
  std::string name_;
  core::data_source source_;
  std::optional<core::data_source> validation_source_;
};

}  // namespace tessera::edge
