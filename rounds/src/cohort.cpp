#include "cohort.hpp"

#include <numeric>

#include "tessera/core/base/endian.hpp"

namespace tessera::rounds {
namespace {

// Uniform in [0, bound): 64-bit draws below the largest multiple of `bound` are kept (Lemire's
// threshold); the rest, with probability below bound / 2^64, are drawn again.
std::uint64_t uniform_below(crypto::keystream& ks, std::uint64_t bound) {
  const std::uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
  for (;;) {
    const std::uint64_t x = ks.next();
    if (x >= threshold) return x % bound;
  }
}

}  // namespace

std::vector<bool> random_subset(crypto::key256_view key, std::size_t n, std::size_t k) {
  std::vector<bool> kept(n, k >= n);
  if (k >= n) return kept;
  crypto::keystream ks(key);
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  for (std::size_t i = 0; i < k; ++i) std::swap(order[i], order[i + static_cast<std::size_t>(uniform_below(ks, n - i))]);
  for (std::size_t i = 0; i < k; ++i) kept[order[i]] = true;
  return kept;
}

core::result<crypto::key256> draw_key(bool seeded, std::uint64_t seed, std::int64_t round, std::string_view purpose) {
  if (!seeded) return crypto::random_key();
  std::vector<std::byte> ikm;
  core::le_writer(ikm).u64(seed).u64(static_cast<std::uint64_t>(round));
  return crypto::derive_key(ikm, purpose);
}

}  // namespace tessera::rounds
