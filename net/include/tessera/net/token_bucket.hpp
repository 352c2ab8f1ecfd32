// tessera/net/token_bucket.hpp — the pacing policy of a rate cap, kept apart from any stream.
//
// A bucket refills continuously at `rate` bytes per second and holds at most a burst of 50 ms of
// traffic (at least 4 KiB), so a cap holds over any window longer than that. A stream asks how much it
// may move now (allow), spends what it moved, and when nothing is allowed waits wait_for(n) before
// asking again. Time points are passed in, never read here: tests/net/token_bucket_test.cpp runs the
// policy on made-up time. A default bucket (rate 0) is unlimited.
//
//   net::token_bucket b(125'000, clock::now());                     // 1 Mbit/s
//   const std::size_t want = std::min(bytes.size(), b.step_bytes());
//   if (std::size_t n = b.allow(want, clock::now()); n > 0) { write(bytes.first(n)); b.spend(n); }
//   else timer.expires_after(b.wait_for(want));
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace tessera::net {

class token_bucket {
 public:
  using clock = std::chrono::steady_clock;

  token_bucket() noexcept = default;
  // Starts full. `rate_bytes_per_s` 0: unlimited.
  token_bucket(std::uint64_t rate_bytes_per_s, clock::time_point now) noexcept;

  [[nodiscard]] bool limited() const noexcept { return rate_ != 0; }
  [[nodiscard]] std::uint64_t rate() const noexcept { return rate_; }
  [[nodiscard]] double burst() const noexcept { return burst_; }
  // Tokens as of the last allow(); negative after spending more than was allowed.
  [[nodiscard]] double tokens() const noexcept { return tokens_; }
  // The most one operation should ask for, so that pauses stay short: the burst, at least 1 byte.
  [[nodiscard]] std::size_t step_bytes() const noexcept;
  // Refills up to `now`, then how many of `want` bytes may move: 0 while under one token.
  [[nodiscard]] std::size_t allow(std::size_t want, clock::time_point now) noexcept;
  void spend(std::size_t n) noexcept;
  // How long until `n` bytes (at least one) are available; 0 when unlimited.
  [[nodiscard]] std::chrono::nanoseconds wait_for(std::size_t n) const noexcept;

 private:
  std::uint64_t rate_ = 0;  // bytes per second; 0: unlimited
  double tokens_ = 0;
  double burst_ = 0;
  clock::time_point refilled_{};
};

}  // namespace tessera::net
