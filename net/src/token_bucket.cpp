#include "tessera/net/token_bucket.hpp"

#include <algorithm>
#include <limits>

namespace tessera::net {

token_bucket::token_bucket(std::uint64_t rate_bytes_per_s, clock::time_point now) noexcept
    : rate_(rate_bytes_per_s),
      tokens_(std::max(4096.0, static_cast<double>(rate_bytes_per_s) * 0.05)),
      burst_(tokens_),
      refilled_(now) {}

std::size_t token_bucket::step_bytes() const noexcept {
  if (!limited()) return std::numeric_limits<std::size_t>::max();
  return std::max<std::size_t>(1, static_cast<std::size_t>(burst_));
}

std::size_t token_bucket::allow(std::size_t want, clock::time_point now) noexcept {
  if (!limited()) return want;
  tokens_ = std::min(burst_, tokens_ + std::chrono::duration<double>(now - refilled_).count() * static_cast<double>(rate_));
  refilled_ = now;
  if (tokens_ < 1.0) return 0;
  return std::min(want, static_cast<std::size_t>(tokens_));
}

void token_bucket::spend(std::size_t n) noexcept {
  if (limited()) tokens_ -= static_cast<double>(n);
}

std::chrono::nanoseconds token_bucket::wait_for(std::size_t n) const noexcept {
  if (!limited()) return std::chrono::nanoseconds(0);
  const double missing = std::max(1.0, static_cast<double>(n) - tokens_);
  return std::chrono::nanoseconds(static_cast<std::int64_t>(missing / static_cast<double>(rate_) * 1e9) + 1);
}

}  // namespace tessera::net
