// Validation splits without copies: the listed rows of a table or a stream, or all the others.
#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <memory>

#include "tessera/core/data/dataset.hpp"

namespace tessera::core {

namespace {

// Indices mapped per call to the base table's gather(): a stack array, so gather() does not allocate.
constexpr std::size_t k_index_chunk = 256;
// Records the split stream reads from its base per call, and floats of features it buffers at most
// (64 Ki floats, 256 KiB); at least one record whatever the feature count.
constexpr std::size_t k_split_records = 256;
constexpr std::size_t k_split_floats = std::size_t{1} << 16;

// The rows of a base table listed in `rows` (sorted, distinct), or all the others, in the base's order:
// a validation split and its training complement without copying an example. The i-th row of the
// complement is found by binary search in the list (the rows before listed row p that are not listed
// number rows[p] − p), so the view holds nothing but the shared list.
class subset_table final : public example_table {
 public:
  subset_table(example_table& base, std::shared_ptr<const std::vector<std::uint32_t>> rows, bool listed)
      : base_(base), rows_(std::move(rows)), listed_(listed) {}

  std::int64_t feature_count() const noexcept override { return base_.feature_count(); }
  std::int64_t size() const noexcept override {
    const auto n = static_cast<std::int64_t>(rows_->size());
    return listed_ ? n : base_.size() - n;
  }
  std::string describe() const override {
    return base_.describe() + (listed_ ? " (validation split, " : " (training split, ") + std::to_string(size()) + " examples)";
  }

  result<void> gather(std::span<const std::uint32_t> indices, std::span<float> features,
                      std::span<float> targets) override {
    const auto f = static_cast<std::size_t>(base_.feature_count());
    TESSERA_ASSERT(targets.size() >= indices.size());
    TESSERA_ASSERT(features.size() >= indices.size() * f);
    std::array<std::uint32_t, k_index_chunk> mapped{};
    for (std::size_t done = 0; done < indices.size();) {
      const std::size_t k = std::min(k_index_chunk, indices.size() - done);
      for (std::size_t j = 0; j < k; ++j) {
        const std::int64_t i = indices[done + j];
        if (i >= size())
          return make_error(errc::invalid_argument, describe() + ": index " + std::to_string(i) +
                                                        " is out of range (size " + std::to_string(size()) + ")");
        mapped[j] = row_of(static_cast<std::uint32_t>(i));
      }
      TESSERA_TRY(base_.gather(std::span(mapped).first(k), features.subspan(done * f, k * f), targets.subspan(done, k)));
      done += k;
    }
    return {};
  }

 private:
  [[nodiscard]] std::uint32_t row_of(std::uint32_t i) const noexcept {
    const std::vector<std::uint32_t>& r = *rows_;
    if (listed_) return r[i];
    // The number of listed rows p with r[p] − p <= i: each of them lies before the i-th unlisted row.
    std::size_t lo = 0, hi = r.size();
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (r[mid] - mid <= i) lo = mid + 1;
      else hi = mid;
    }
    return i + static_cast<std::uint32_t>(lo);
  }

  example_table& base_;
  std::shared_ptr<const std::vector<std::uint32_t>> rows_;
  bool listed_;
};

// The records of a stream listed in `rows` (sorted, distinct), or all the others: the stream form of
// subset_table. The base is read a bounded chunk at a time into a buffer; records left over from one
// read() serve the next; a cursor walks the list as the records go by.
class split_stream final : public example_stream {
 public:
  split_stream(std::unique_ptr<example_stream> base, std::shared_ptr<const std::vector<std::uint32_t>> rows, bool listed)
      : base_(std::move(base)), rows_(std::move(rows)), listed_(listed) {
    const auto f = static_cast<std::size_t>(base_->feature_count());
    const std::size_t records = std::clamp<std::size_t>(k_split_floats / f, 1, k_split_records);
    features_.resize(records * f);
    targets_.resize(records);
  }

  std::int64_t feature_count() const noexcept override { return base_->feature_count(); }

  std::int64_t size_hint() const noexcept override {
    const std::int64_t n = base_->size_hint();
    if (n < 0) return -1;
    const auto listed = static_cast<std::int64_t>(rows_->size());
    return listed_ ? listed : n - listed;
  }

  std::string describe() const override {
    return base_->describe() + (listed_ ? " (validation split)" : " (training split)");
  }

  result<std::size_t> read(std::span<float> features, std::span<float> targets) override {
    const auto f = static_cast<std::size_t>(base_->feature_count());
    TESSERA_ASSERT(features.size() >= targets.size() * f);
    std::size_t n = 0;
    while (n < targets.size()) {
      if (pos_ == have_) {
        if (base_ended_) break;
        TESSERA_ASSIGN_OR_RETURN(const std::size_t got, base_->read(features_, targets_));
        TESSERA_ASSERT(got <= targets_.size());
        pos_ = 0;
        have_ = got;
        if (have_ == 0) {
          base_ended_ = true;
          break;
        }
      }
      for (; pos_ < have_ && n < targets.size(); ++pos_) {
        const bool is_listed = cursor_ < rows_->size() && (*rows_)[cursor_] == next_index_;
        if (is_listed) ++cursor_;
        ++next_index_;
        if (is_listed != listed_) continue;
        std::memcpy(features.data() + n * f, features_.data() + pos_ * f, f * sizeof(float));
        targets[n++] = targets_[pos_];
      }
    }
    return n;
  }

  std::string last_position() const override { return base_->last_position(); }

  result<void> rewind() override {
    pos_ = 0;
    have_ = 0;
    next_index_ = 0;
    cursor_ = 0;
    base_ended_ = false;
    return base_->rewind();
  }

 private:
  std::unique_ptr<example_stream> base_;
  std::shared_ptr<const std::vector<std::uint32_t>> rows_;
  bool listed_;
  std::vector<float> features_;  // records read from the base, not yet handed out or skipped
  std::vector<float> targets_;
  std::size_t pos_ = 0;          // next buffered record
  std::size_t have_ = 0;         // buffered records
  std::uint64_t next_index_ = 0; // index in the base of the record at pos_
  std::size_t cursor_ = 0;       // the first listed row not yet passed
  bool base_ended_ = false;
};

}  // namespace

std::unique_ptr<example_table> make_subset_table(example_table& base, std::shared_ptr<const std::vector<std::uint32_t>> rows,
                                                 bool listed) {
  TESSERA_ASSERT(rows != nullptr);
  TESSERA_ASSERT(std::is_sorted(rows->begin(), rows->end()) && std::adjacent_find(rows->begin(), rows->end()) == rows->end());
  TESSERA_ASSERT(rows->empty() || static_cast<std::int64_t>(rows->back()) < base.size());
  TESSERA_ASSERT(base.size() <= std::int64_t{std::numeric_limits<std::uint32_t>::max()} + 1);
  return std::make_unique<subset_table>(base, std::move(rows), listed);
}

std::unique_ptr<example_stream> make_split_stream(std::unique_ptr<example_stream> base,
                                                  std::shared_ptr<const std::vector<std::uint32_t>> rows, bool listed) {
  TESSERA_ASSERT(base != nullptr && rows != nullptr);
  TESSERA_ASSERT(std::is_sorted(rows->begin(), rows->end()));
  return std::make_unique<split_stream>(std::move(base), std::move(rows), listed);
}

}  // namespace tessera::core
