// The deterministic generator (rng.hpp): the published splitmix64 and xoshiro256** sequences, seeding as
// rng.hpp specifies it, unbiased bounded draws, and a shuffle that is a permutation fixed by the seed.
// Expected values come from an independent model of those algorithms, not from this implementation:
// the hub, the simulator and every agent must draw the same numbers on every platform.
#include "tessera/core/base/rng.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace core = tessera::core;

TEST_CASE("splitmix64: the first outputs of SplitMix64 seeded with 0") {
  CHECK(core::splitmix64(0) == 0xe220a8397b1dcdafULL);
  CHECK(core::splitmix64(0x9e3779b97f4a7c15ULL) == 0x6e789e6aa1b965f4ULL);  // state after one step
  static_assert(core::splitmix64(0) == 0xe220a8397b1dcdafULL, "usable at compile time");
}

TEST_CASE("mix_seed: fixed values, and different streams of one base differ") {
  CHECK(core::mix_seed(1, 0) == 0xe9fd6049d65af21eULL);
  CHECK(core::mix_seed(1, 1) == 0x7b1775cf27896330ULL);
  std::vector<std::uint64_t> seeds;
  for (std::uint64_t stream = 0; stream < 1000; ++stream) seeds.push_back(core::mix_seed(42, stream));
  std::sort(seeds.begin(), seeds.end());
  CHECK(std::adjacent_find(seeds.begin(), seeds.end()) == seeds.end());
}

TEST_CASE("rng: xoshiro256** seeded through splitmix64 gives the specified sequence") {
  core::rng r(1);
  CHECK(r.next() == 0xc5883e370b0926c3ULL);
  CHECK(r.next() == 0x021b74b80f71f81cULL);
  CHECK(r.next() == 0x268df06749e5c8ceULL);
  CHECK(r.next() == 0xe052757d667afef2ULL);
  // uniform() is the top 24 bits scaled to [0, 1): exactly representable, so compared exactly.
  core::rng u(1);
  CHECK(u.uniform() == static_cast<float>(0xc5883e370b0926c3ULL >> 40) * 0x1.0p-24f);
  CHECK(u.uniform_double() == static_cast<double>(0x021b74b80f71f81cULL >> 11) * 0x1.0p-53);
}

TEST_CASE("rng: below(n) gives the specified draws, stays below n, and is not biased") {
  core::rng r(42);
  std::vector<std::uint64_t> draws;
  for (int i = 0; i < 12; ++i) draws.push_back(r.below(10));
  CHECK(draws == std::vector<std::uint64_t>{3, 8, 6, 9, 1, 5, 3, 2, 1, 9, 5, 3});

  core::rng s(7);
  for (const std::uint64_t n : {std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{3}, std::uint64_t{1} << 40,
                                ~std::uint64_t{0}}) {
    for (int i = 0; i < 1000; ++i) REQUIRE(s.below(n) < n);
  }
  // n = 3 does not divide 2^64: a modulo would favour 0. 300 000 draws, each count within 5 standard
  // deviations (sqrt(300000 * 1/3 * 2/3) = 258) of 100 000.
  std::uint64_t count[3] = {};
  for (int i = 0; i < 300000; ++i) ++count[s.below(3)];
  for (const std::uint64_t c : count) CHECK((c > 100000 - 5 * 258 && c < 100000 + 5 * 258));
}

TEST_CASE("rng: uniform draws lie in [0, 1)") {
  core::rng r(3);
  for (int i = 0; i < 100000; ++i) {
    const float f = r.uniform();
    const double d = r.uniform_double();
    REQUIRE((f >= 0.0f && f < 1.0f));
    REQUIRE((d >= 0.0 && d < 1.0));
  }
}

TEST_CASE("multiply_wide: the full 128-bit product") {
  CHECK(core::multiply_wide(0, ~std::uint64_t{0}).high == 0);
  const auto max = core::multiply_wide(~std::uint64_t{0}, ~std::uint64_t{0});  // (2^64 - 1)^2
  CHECK(max.high == 0xfffffffffffffffeULL);
  CHECK(max.low == 1);
  const auto m = core::multiply_wide(0x123456789abcdef0ULL, 0x0fedcba987654321ULL);
  CHECK(m.high == 0x0121fa00ad77d742ULL);
  CHECK(m.low == 0x2236d88fe5618cf0ULL);
}

TEST_CASE("shuffle: Fisher-Yates with below(), a permutation fixed by the seed") {
  std::vector<int> ten = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  core::rng r(11);
  core::shuffle(ten.begin(), ten.end(), r);
  CHECK(ten == std::vector<int>{8, 5, 1, 7, 4, 2, 0, 3, 6, 9});

  std::vector<int> a(100);
  std::iota(a.begin(), a.end(), 0);
  std::vector<int> b = a;
  core::rng r1(11);
  core::rng r2(11);
  core::shuffle(a.begin(), a.end(), r1);
  core::shuffle(b.begin(), b.end(), r2);
  CHECK(a == b);
  std::vector<int> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> identity(100);
  std::iota(identity.begin(), identity.end(), 0);
  CHECK(sorted == identity);
  CHECK(a != identity);
  std::vector<int> one = {5};
  core::shuffle(one.begin(), one.end(), r1);
  CHECK(one == std::vector<int>{5});
}
