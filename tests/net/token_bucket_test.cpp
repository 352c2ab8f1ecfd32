// The rate caps' pacing policy on made-up time: no socket, no sleeping.
#include <doctest/doctest.h>

#include <chrono>

#include "fixed_clock.hpp"
#include "tessera/net/token_bucket.hpp"

namespace net = tessera::net;
using namespace std::chrono_literals;
using tessera::test::t0;

TEST_CASE("token_bucket: a default or zero-rate bucket is unlimited") {
  for (const auto& b0 : {net::token_bucket(), net::token_bucket(0, t0)}) {
    auto b = b0;
    CHECK(!b.limited());
    CHECK(b.allow(1u << 30, t0) == (1u << 30));
    b.spend(1u << 30);
    CHECK(b.allow(7, t0) == 7);
    CHECK(b.wait_for(1u << 20) == 0ns);
  }
}

TEST_CASE("token_bucket: the burst is 50 ms of traffic, at least 4 KiB, and a new bucket starts full") {
  net::token_bucket slow(1000, t0);  // 50 ms would be 50 bytes: the 4 KiB floor applies
  CHECK(slow.limited());
  CHECK(slow.burst() == 4096.0);
  CHECK(slow.allow(1u << 20, t0) == 4096);
  CHECK(slow.step_bytes() == 4096);
  net::token_bucket fast(10'000'000, t0);  // 50 ms = 500 000 bytes
  CHECK(fast.burst() == doctest::Approx(500'000.0));
  CHECK(fast.allow(1u << 20, t0) == 500'000);
  CHECK(fast.allow(1000, t0) == 1000);  // never more than asked
}

TEST_CASE("token_bucket: spending empties it, time refills it at the rate, never past the burst") {
  net::token_bucket b(100'000, t0);  // burst 5000
  b.spend(b.allow(1u << 20, t0));
  CHECK(b.allow(1, t0) == 0);
  CHECK(b.allow(1u << 20, t0 + 10ms) == 1000);  // 10 ms at 100 kB/s
  b.spend(1000);
  CHECK(b.allow(1u << 20, t0 + 30ms) == 2000);
  b.spend(2000);
  CHECK(b.allow(1u << 20, t0 + 10s) == 5000);  // capped at the burst however long it sat
  // Overspending (a read that returned more than was allowed) is paid back before anything moves.
  b.spend(5000 + 3000);
  CHECK(b.tokens() == doctest::Approx(-3000.0));
  CHECK(b.allow(1u << 20, t0 + 10s + 20ms) == 0);  // 2000 of the 3000 repaid
  CHECK(b.allow(1u << 20, t0 + 10s + 40ms) == 1000);
}

TEST_CASE("token_bucket: wait_for says how long until n bytes are there, and then they are") {
  net::token_bucket b(1'000'000, t0);  // burst 50 000
  b.spend(b.allow(1u << 20, t0));
  const auto w = b.wait_for(10'000);  // 10 ms at 1 MB/s
  CHECK(w >= 10ms);
  CHECK(w < 10ms + 1us);
  CHECK(b.allow(10'000, t0 + w) == 10'000);
  b.spend(10'000);
  // Under one token: at least one byte's worth of waiting, never zero.
  CHECK(b.wait_for(0) >= 1us);
  CHECK(b.allow(1, t0 + w + b.wait_for(1)) >= 1);
}

TEST_CASE("token_bucket: pacing a long transfer holds the rate over any window past the burst") {
  net::token_bucket b(200'000, t0);
  auto now = t0;
  std::size_t moved = 0;
  const std::size_t want = 1u << 30;
  while (now < t0 + 2s) {
    const std::size_t step = std::min(want, b.step_bytes());
    const std::size_t n = b.allow(step, now);
    if (n == 0) {
      now += b.wait_for(step);
      continue;
    }
    b.spend(n);
    moved += n;
  }
  // Two seconds at 200 kB/s, plus the initial burst of 10 000.
  CHECK(moved <= 400'000 + 10'000 + 1);
  CHECK(moved >= 390'000);
}
