// Validation splits without copies: a row range of a table, and every n-th record of a stream.
#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

#include "tessera/core/dataset.hpp"

namespace tessera::core {

namespace {

// Indices mapped per call to the base table's gather(): a stack array, so gather() does not allocate.
constexpr std::size_t k_index_chunk = 256;
// Records the split stream reads from its base per call, and floats of features it buffers at most
// (64 Ki floats, 256 KiB); at least one record whatever the feature count.
constexpr std::size_t k_split_records = 256;
constexpr std::size_t k_split_floats = std::size_t{1} << 16;

class range_table final : public example_table {
 public:
  range_table(example_table& base, std::int64_t begin, std::int64_t end) : base_(base), begin_(begin), end_(end) {}

  std::int64_t feature_count() const noexcept override { return base_.feature_count(); }
  std::int64_t size() const noexcept override { return end_ - begin_; }
  std::string describe() const override {
    return base_.describe() + " rows [" + std::to_string(begin_) + ", " + std::to_string(end_) + ")";
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
        // end_ <= 2^32 (checked at construction), so a row of the range fits 32 bits.
        mapped[j] = static_cast<std::uint32_t>(i + begin_);
      }
      TESSERA_TRY(base_.gather(std::span(mapped).first(k), features.subspan(done * f, k * f), targets.subspan(done, k)));
      done += k;
    }
    return {};
  }

 private:
  example_table& base_;
  std::int64_t begin_;
  std::int64_t end_;
};

// Keeps the records whose index is (validation) or is not (training) a multiple of `every`. The base is
// read a bounded chunk at a time into a buffer; records left over from one read() serve the next.
class split_stream final : public example_stream {
 public:
  split_stream(std::unique_ptr<example_stream> base, std::int64_t every, bool validation)
      : base_(std::move(base)), every_(every), validation_(validation) {
    const auto f = static_cast<std::size_t>(base_->feature_count());
    const std::size_t records = std::clamp<std::size_t>(k_split_floats / f, 1, k_split_records);
    features_.resize(records * f);
    targets_.resize(records);
  }

  std::int64_t feature_count() const noexcept override { return base_->feature_count(); }

  std::int64_t size_hint() const noexcept override {
    const std::int64_t n = base_->size_hint();
    if (n < 0) return -1;
    const std::int64_t kept = (n + every_ - 1) / every_;  // indices 0, every, 2·every, ... below n
    return validation_ ? kept : n - kept;
  }

  std::string describe() const override {
    return base_->describe() + (validation_ ? " (validation split: the records whose index is a multiple of "
                                            : " (training split: all but the records whose index is a multiple of ") +
           std::to_string(every_) + ")";
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
        const bool is_validation = next_index_++ % every_ == 0;
        if (is_validation != validation_) continue;
        std::memcpy(features.data() + n * f, features_.data() + pos_ * f, f * sizeof(float));
        targets[n++] = targets_[pos_];
      }
    }
    return n;
  }

  result<void> rewind() override {
    pos_ = 0;
    have_ = 0;
    next_index_ = 0;
    base_ended_ = false;
    return base_->rewind();
  }

 private:
  std::unique_ptr<example_stream> base_;
  std::int64_t every_;
  bool validation_;
  std::vector<float> features_;  // records read from the base, not yet handed out or skipped
  std::vector<float> targets_;
  std::size_t pos_ = 0;          // next buffered record
  std::size_t have_ = 0;         // buffered records
  std::int64_t next_index_ = 0;  // index in the base of the record at pos_
  bool base_ended_ = false;
};

}  // namespace

std::unique_ptr<example_table> make_range_table(example_table& base, std::int64_t begin, std::int64_t end) {
  TESSERA_ASSERT(0 <= begin && begin <= end && end <= base.size());
  // gather() addresses rows of the base with 32-bit indices.
  TESSERA_ASSERT(end <= std::int64_t{std::numeric_limits<std::uint32_t>::max()} + 1);
  return std::make_unique<range_table>(base, begin, end);
}

std::unique_ptr<example_stream> make_split_stream(std::unique_ptr<example_stream> base, std::int64_t every,
                                                  bool validation) {
  TESSERA_ASSERT(base != nullptr);
  TESSERA_ASSERT(every >= 2);
  TESSERA_ASSERT(base->feature_count() > 0);
  return std::make_unique<split_stream>(std::move(base), every, validation);
}

}  // namespace tessera::core
