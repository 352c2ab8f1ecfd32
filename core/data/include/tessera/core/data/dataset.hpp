// tessera/core/data/dataset.hpp — examples read from files as streams with bounded memory.
//
// Every reader yields examples as fp32 features (row-major, `feature_count()` per example) and one fp32
// target per example (the class index for classification, the value for regression). A reader holds at
// most a fixed buffer whatever the file size; formats with fixed-size records and no compression also
// offer random access (`example_table`), which the trainer's shuffled sampler uses.
//
//   core::idx_options opt;                              // normalization defaults to scale_unit for IDX
//   auto src = core::open_idx("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", opt);
//   if (!src) return fail(src.error());
//   std::vector<float> x(64 * src.value()->feature_count()), y(64);
//   while (true) {
//     auto n = src.value()->read(x, y);                 // up to 64 examples
//     if (!n) return fail(n.error());                   // names file, record and field
//     if (n.value() == 0) break;                        // end of data
//     ...
//   }
//
// Formats: IDX (the MNIST format: big-endian magic 0x0000 08 NN, dims as u32; images u8 of rank >= 2,
// labels u8 of rank 1; plain or gzip, detected by content), CSV (one label column and numeric features,
// optional header line). Normalization: `none`, `scale_unit` (divide by 255: images to [0,1]) or
// `standardize` ((x - mean) / std per feature, with statistics given or measured in a first pass).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/base/error.hpp"
#include "tessera/core/base/names.hpp"
#include "tessera/core/data/input_normalization.hpp"

namespace tessera::core {

enum class normalization { none, scale_unit, standardize };
inline constexpr auto k_normalization_names = names_in_order<normalization>({"none", "scale_unit", "standardize"});

// `standardize` uses per-feature statistics: core::input_normalization (the model's own kind,
// input_normalization.hpp), here measured on one data set; a deviation of 0 is treated as 1.

// A dataset read in order.
class example_stream {
 public:
  virtual ~example_stream() = default;
  [[nodiscard]] virtual std::int64_t feature_count() const noexcept = 0;
  // Number of examples if the header says so, -1 if it is only known at the end (CSV).
  [[nodiscard]] virtual std::int64_t size_hint() const noexcept = 0;
  // Reads up to targets.size() examples (features.size() must be >= that times feature_count()).
  // Returns how many were read; 0 means the end. An error names the file, record and field.
  [[nodiscard]] virtual result<std::size_t> read(std::span<float> features, std::span<float> targets) = 0;
  // Starts again from the first example.
  [[nodiscard]] virtual result<void> rewind() = 0;
  // The file(s) behind the stream, for messages.
  [[nodiscard]] virtual std::string describe() const = 0;
  // Where the last example read is in the file, when the format says more than its index: a CSV reader
  // gives "line 13" (header and blank lines counted). Empty otherwise.
  [[nodiscard]] virtual std::string last_position() const { return {}; }
};

// A dataset of fixed-size records that can be read at any index.
class example_table {
 public:
  virtual ~example_table() = default;
  [[nodiscard]] virtual std::int64_t feature_count() const noexcept = 0;
  [[nodiscard]] virtual std::int64_t size() const noexcept = 0;
  // Copies the examples at `indices` (each < size()) into consecutive rows of features/targets.
  [[nodiscard]] virtual result<void> gather(std::span<const std::uint32_t> indices, std::span<float> features,
                                            std::span<float> targets) = 0;
  [[nodiscard]] virtual std::string describe() const = 0;
};

struct idx_options {
  normalization norm = normalization::scale_unit;
  input_normalization stats;  // for standardize; measured with compute_stats when empty
};

struct csv_options {
  normalization norm = normalization::none;
  input_normalization stats;       // for standardize; measured with compute_stats when empty
  std::size_t label_column = 0;
  bool header = false;       // skip the first line
  char delimiter = ',';
  std::size_t max_line_bytes = 1 << 20;  // a longer line is an error, not an allocation
};

// IDX images + labels; gzip or plain, detected from the first bytes. The two files must agree on the
// number of examples. The result is also an example_table when both files are uncompressed.
[[nodiscard]] result<std::unique_ptr<example_stream>> open_idx(const std::string& images_path,
                                                               const std::string& labels_path,
                                                               const idx_options& options);
// Random access to uncompressed IDX files (pread per record); an error if either is compressed.
[[nodiscard]] result<std::unique_ptr<example_table>> open_idx_table(const std::string& images_path,
                                                                    const std::string& labels_path,
                                                                    const idx_options& options);
// CSV with one label column; the feature count is the column count of the first data line minus one.
[[nodiscard]] result<std::unique_ptr<example_stream>> open_csv(const std::string& path, const csv_options& options);

// One pass over `stream` (then rewound) measuring per-feature mean and standard deviation.
[[nodiscard]] result<input_normalization> compute_stats(example_stream& stream);

// All examples of a stream held in memory: for the simulator and for validation sets that fit.
class memory_table final : public example_table {
 public:
  memory_table(std::int64_t feature_count, std::vector<float> features, std::vector<float> targets,
               std::string description);
  [[nodiscard]] std::int64_t feature_count() const noexcept override { return features_per_example_; }
  [[nodiscard]] std::int64_t size() const noexcept override {
    return static_cast<std::int64_t>(targets_.size());
  }
  [[nodiscard]] result<void> gather(std::span<const std::uint32_t> indices, std::span<float> features,
                                    std::span<float> targets) override;
  [[nodiscard]] std::string describe() const override { return description_; }

  [[nodiscard]] std::span<const float> features() const noexcept { return features_; }
  [[nodiscard]] std::span<const float> targets() const noexcept { return targets_; }
  // A new table holding the examples at `indices`, in that order.
  [[nodiscard]] memory_table subset(std::span<const std::uint32_t> indices, std::string description) const;

 private:
  std::int64_t features_per_example_;
  std::vector<float> features_;
  std::vector<float> targets_;
  std::string description_;
};

// NumPy .npy files: features of shape (N, ...) as float32 ('<f4') or uint8 ('|u1'), C order; labels of
// shape (N,) as any integer dtype (class indices) or float32/float64 (regression targets). Read with
// pread per record (random access, memory independent of file size). The header is bounded
// (k_npy_max_header bytes) and checked against the file size before any record is read.
struct npy_options {
  normalization norm = normalization::none;  // uint8 features usually want scale_unit
  input_normalization stats;                       // for standardize; measured with compute_stats when empty
};
inline constexpr std::size_t k_npy_max_header = 1 << 16;
[[nodiscard]] result<std::unique_ptr<example_table>> open_npy(const std::string& features_path,
                                                              const std::string& labels_path, const npy_options& options);
// Writers for tests and exports: float32 features (N × features) and int32 labels.
[[nodiscard]] result<void> write_npy_features(const std::string& path, std::int64_t features, std::span<const float> values);
[[nodiscard]] result<void> write_npy_labels(const std::string& path, std::span<const std::int32_t> labels);
// float32 targets (regression), shape (N,).
[[nodiscard]] result<void> write_npy_targets(const std::string& path, std::span<const float> targets);

// A validation split and its training complement, without copies: the rows of `base` listed in `rows`
// (sorted, distinct; listed = true) or all the other rows (listed = false), in the base's order. The
// view shares the list (4 bytes per listed row) and holds nothing else. `base` must outlive it.
[[nodiscard]] std::unique_ptr<example_table> make_subset_table(example_table& base,
                                                               std::shared_ptr<const std::vector<std::uint32_t>> rows, bool listed);

// A table read in order, from its first example to its last, as a stream (for compute_stats, load_all
// and the consumers that only read in order). read() gathers a fixed chunk of indices at a time and does
// not allocate. This form borrows `table`, which must outlive the stream.
[[nodiscard]] std::unique_ptr<example_stream> make_table_stream(example_table& table);
// The same, owning `table` (not null).
[[nodiscard]] std::unique_ptr<example_stream> make_table_stream(std::unique_ptr<example_table> table);

// The same split of a stream (records counted from 0 in the stream's order). Owns `base`; memory O(1)
// besides the shared list.
[[nodiscard]] std::unique_ptr<example_stream> make_split_stream(std::unique_ptr<example_stream> base,
                                                                std::shared_ptr<const std::vector<std::uint32_t>> rows, bool listed);

// Reads a whole stream into memory; refuses more than `max_examples` (a bound, not a guess).
[[nodiscard]] result<memory_table> load_all(example_stream& stream, std::int64_t max_examples);
// The first `count` examples of a stream (all of them if it holds fewer).
[[nodiscard]] result<memory_table> load_first(example_stream& stream, std::int64_t count);
// Either of the above: refuse_more chooses between refusing a longer stream and cutting it.
[[nodiscard]] result<memory_table> load_examples(example_stream& stream, std::int64_t max_examples, bool refuse_more);

// Writers, for tests, for sharding a dataset into per-device folders and for exports.
// IDX: images as u8 rank-3 (count, rows, cols), labels as u8 rank-1; uncompressed.
[[nodiscard]] result<void> write_idx_images(const std::string& path, std::int64_t rows, std::int64_t cols,
                                            std::span<const std::uint8_t> pixels);
[[nodiscard]] result<void> write_idx_labels(const std::string& path, std::span<const std::uint8_t> labels);

}  // namespace tessera::core
