// tessera/core/base/rng.hpp — a small deterministic random number generator.
//
// The standard library's distributions differ between implementations, and Tessera needs the same
// plan, the same initialisation and the same batch order on every platform (the hub, the simulator
// and the agents must agree bit for bit). So the generator (xoshiro256**, seeded through splitmix64)
// and the integer draws are ours and fully specified.
//
//   core::rng r(core::mix_seed(spec.seed, round));
//   std::uint64_t k = r.below(n);     // uniform in [0, n)
//   float u = r.uniform();            // uniform in [0, 1)
#pragma once

#include <cstdint>
#include <utility>

namespace tessera::core {

// splitmix64 step: a bijective mixer used to derive seeds.
[[nodiscard]] constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Derives an independent seed for a sub-stream (a round, a device, an epoch) from a base seed.
[[nodiscard]] constexpr std::uint64_t mix_seed(std::uint64_t base, std::uint64_t stream) noexcept {
  return splitmix64(splitmix64(base) ^ (stream * 0xd1342543de82ef95ULL + 1));
}

// The full 128-bit product a * b as its high and low 64-bit words, for Lemire's bounded draw. GCC and
// Clang have __int128 on 64-bit targets; 32-bit ones (armhf) assemble it from 32-bit halves: same bits.
struct product128 {
  std::uint64_t high;
  std::uint64_t low;
};
[[nodiscard]] constexpr product128 multiply_wide(std::uint64_t a, std::uint64_t b) noexcept {
#ifdef __SIZEOF_INT128__
  __extension__ using uint128 = unsigned __int128;
  const uint128 m = static_cast<uint128>(a) * b;
  return {static_cast<std::uint64_t>(m >> 64), static_cast<std::uint64_t>(m)};
#else
  const std::uint64_t a_lo = a & 0xffffffffU, a_hi = a >> 32, b_lo = b & 0xffffffffU, b_hi = b >> 32;
  const std::uint64_t ll = a_lo * b_lo, lh = a_lo * b_hi, hl = a_hi * b_lo, hh = a_hi * b_hi;
  const std::uint64_t mid = (ll >> 32) + (lh & 0xffffffffU) + (hl & 0xffffffffU);  // < 3 * 2^32
  return {hh + (lh >> 32) + (hl >> 32) + (mid >> 32), (mid << 32) | (ll & 0xffffffffU)};
#endif
}

class rng {
 public:
  explicit constexpr rng(std::uint64_t seed) noexcept {
    std::uint64_t x = seed;
    for (auto& s : s_) {
      x = splitmix64(x);
      s = x;
    }
  }

  // 64 uniform bits.
  constexpr std::uint64_t next() noexcept {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform integer in [0, n), n > 0, without modulo bias (Lemire's multiply-and-reject).
  constexpr std::uint64_t below(std::uint64_t n) noexcept {
    for (;;) {
      const product128 m = multiply_wide(next(), n);
      if (m.low >= n || m.low >= (0 - n) % n) return m.high;
    }
  }

  // Uniform float in [0, 1) with 24 random bits.
  constexpr float uniform() noexcept { return static_cast<float>(next() >> 40) * 0x1.0p-24f; }
  // Uniform double in [0, 1) with 53 random bits.
  constexpr double uniform_double() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4]{};
};

// Fisher–Yates shuffle of [first, last) with our generator (std::shuffle's order is unspecified).
template <class It>
void shuffle(It first, It last, rng& r) {
  const auto n = static_cast<std::uint64_t>(last - first);
  for (std::uint64_t i = n; i > 1; --i) {
    const std::uint64_t j = r.below(i);
    using diff = decltype(last - first);
    std::swap(first[static_cast<diff>(i - 1)], first[static_cast<diff>(j)]);
  }
}

}  // namespace tessera::core
