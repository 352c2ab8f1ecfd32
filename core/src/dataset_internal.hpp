// Private to the dataset readers: what dataset.cpp, dataset_idx.cpp and dataset_csv.cpp share.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/dataset.hpp"

namespace tessera::core::detail {

// Checks `stats` against `features` and turns it into what the readers' inner loops use: the mean and
// the reciprocal of the standard deviation per feature, with a deviation of 0 treated as 1.
result<void> prepare_standardize(const feature_stats& stats, std::int64_t features, const std::string& what,
                                 std::vector<float>& mean, std::vector<float>& inv_stddev);

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

// Bytes as hex pairs separated by spaces ("00 00 08 03"), for messages about magic numbers.
std::string hex_bytes(std::span<const std::uint8_t> bytes);

// Closes a file being written (fclose flushes stdio's buffer, where a full disk often shows up first)
// and, if this or an earlier write failed (errno in `err`), removes the partial file and says why.
result<void> close_written(std::FILE* f, bool failed, int err, const std::string& path);

}  // namespace tessera::core::detail
