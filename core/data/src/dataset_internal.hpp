// Private to the dataset readers: what dataset.cpp and the IDX, CSV and .npy readers share.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/data/dataset.hpp"

namespace tessera::core::detail {

// What `standardize` subtracts from each feature and then multiplies it by, as the readers' inner loops
// use it: the mean and the reciprocal of the standard deviation (1 where the deviation is 0).
struct standardize_params {
  std::vector<float> mean;
  std::vector<float> inv_stddev;
};

// Checks `stats` against `features` and turns it into standardize_params; `what` names the data.
result<standardize_params> prepare_standardize(const input_normalization& stats, std::int64_t features,
                                               const std::string& what);

// True when `norm` is standardize and the caller gave no statistics, so they must be measured.
bool must_measure(normalization norm, const input_normalization& given) noexcept;

// The parameters a reader needs for `norm`: for standardize, those of the caller's statistics or, if
// must_measure, of statistics measured in one pass over `raw`, a stream of the same data that still
// yields unnormalized values (compute_stats rewinds it; it may be null when nothing is measured).
// Empty for the other normalizations.
result<standardize_params> normalization_params(normalization norm, const input_normalization& given,
                                                std::int64_t features, example_stream* raw, const std::string& what);

// Fixed-size records after a header, as an IDX or .npy header declares them.
struct record_layout {
  std::int64_t count = 0;         // records: one per example
  std::int64_t record_bytes = 0;
  std::int64_t data_offset = 0;   // bytes before the first record
};

// "<path>: truncated at record R of N (offset O)", O where record R starts.
std::string truncated_at(const std::string& path, const record_layout& layout, std::int64_t record);
// "<path>: data continues after the N records its header <declared> declares".
std::string data_continues(const std::string& path, const record_layout& layout, const std::string& declared);
// Checks a file's size against its layout: a shorter file is errc::truncated naming the first record it
// cuts, a longer one errc::bad_format (data_continues, and how many bytes more).
result<void> check_file_size(const std::string& path, std::int64_t file_size, const record_layout& layout,
                             const std::string& declared);

// An owned POSIX file descriptor (the random-access readers hold one per file).
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) : fd_(fd) {}
  unique_fd(unique_fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }

  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
};

// Reads until `out` is full or the file ends; returns the bytes read.
result<std::size_t> pread_full(int fd, std::span<std::uint8_t> out, std::int64_t offset, const std::string& path);

// The text of an errno value ("No such file or directory"), for messages.
std::string errno_text(int e);

// Bytes as hex pairs separated by spaces ("00 00 08 03"), for messages about magic numbers.
std::string hex_bytes(std::span<const std::uint8_t> bytes);

// Closes a file being written (fclose flushes stdio's buffer, where a full disk often shows up first)
// and, if this or an earlier write failed (errno in `err`), removes the partial file and says why.
result<void> close_written(std::FILE* f, bool failed, int err, const std::string& path);

}  // namespace tessera::core::detail
