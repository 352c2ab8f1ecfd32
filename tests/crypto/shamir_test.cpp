// Tests of tessera/crypto/shamir.hpp: the field, hand-computed sharing vectors, t-of-n recovery, and
// refusals (below the threshold, a forged share, repeated points).
#include <doctest/doctest.h>

#include <algorithm>

#include <openssl/rand.h>

#include "tessera/crypto/shamir.hpp"

using namespace tessera;
using crypto::gf61_prime;
namespace gf61 = crypto::gf61;

namespace {

crypto::secret32 secret_with_chunks(std::uint64_t c0, std::uint64_t c4 = 0) {
  std::array<std::uint64_t, crypto::shamir_chunks> e{c0, 0, 0, 0, c4};
  return crypto::elements_to_secret(e).value();
}

crypto::secret32 random_secret() {
  crypto::secret32 s;
  REQUIRE(RAND_bytes(reinterpret_cast<unsigned char*>(s.data()), static_cast<int>(s.size())) == 1);
  return s;
}

// Coefficients `first` for chunk 0 and zeros for the others.
std::array<std::vector<std::uint64_t>, crypto::shamir_chunks> coefficients(std::vector<std::uint64_t> first) {
  std::array<std::vector<std::uint64_t>, crypto::shamir_chunks> c;
  for (auto& v : c) v.assign(first.size(), 0);
  c[0] = std::move(first);
  return c;
}

}  // namespace

TEST_CASE("GF(2^61-1): reduction, inverse and Fermat by hand") {
  CHECK(gf61::mul(std::uint64_t{1} << 60, 2) == 1);          // 2^61 ≡ 1
  CHECK(gf61::inv(2) == std::uint64_t{1} << 60);            // so 2^60 is 1/2
  CHECK(gf61::add(gf61_prime - 1, 5) == 4);
  CHECK(gf61::sub(3, 5) == gf61_prime - 2);
  CHECK(gf61::mul(gf61_prime - 1, gf61_prime - 1) == 1);    // (−1)² = 1
  CHECK(gf61::pow(3, gf61_prime - 1) == 1);                 // Fermat
  for (std::uint64_t a : {std::uint64_t{2}, std::uint64_t{12345678901234567}, gf61_prime - 2})
    CHECK(gf61::mul(a, gf61::inv(a)) == 1);
  CHECK(gf61::reduce(0, gf61_prime * 3 + 5) == 5);                // 3p + 5 (below 2^64)
  CHECK(gf61::reduce(1, 0) == 8);                                 // 2^64 = 2^3 · 2^61 ≡ 8
  // (2^60 + 3)(2^60 + 5) = 2^120 + 8·2^60 + 15, with 2^120 = 2^61·2^59 ≡ 2^59 and 8·2^60 = 2^63 ≡ 4.
  CHECK(gf61::mul((std::uint64_t{1} << 60) + 3, (std::uint64_t{1} << 60) + 5) == (std::uint64_t{1} << 59) + 19);
}

TEST_CASE("shamir: hand-computed vectors at threshold 2 and 3") {
  // f(x) = 42 + 5x: shares 47, 52, 57; the other chunks are 0 + 0·x.
  auto s = crypto::shamir_split_with(secret_with_chunks(42), 2, 3, coefficients({5})).value();
  REQUIRE(s.size() == 3);
  CHECK(s[0].x == 1);
  CHECK(s[0].y[0] == 47);
  CHECK(s[1].y[0] == 52);
  CHECK(s[2].y[0] == 57);
  CHECK(s[2].y[1] == 0);
  // f(x) = 42 − x (the coefficient p − 1): f(50) = −8 ≡ p − 8.
  auto w = crypto::shamir_split_with(secret_with_chunks(42), 2, 50, coefficients({gf61_prime - 1})).value();
  CHECK(w[0].y[0] == 41);
  CHECK(w[49].y[0] == gf61_prime - 8);
  const std::array<crypto::shamir_share, 2> far{w[49], w[10]};
  CHECK(crypto::shamir_recover(far, 2).value() == secret_with_chunks(42));
  // f(x) = 7 + 3x + 2x²: 12, 21, 34, 51; any three give 7.
  auto q = crypto::shamir_split_with(secret_with_chunks(7, 9), 3, 4, coefficients({3, 2})).value();
  CHECK(q[0].y[0] == 12);
  CHECK(q[1].y[0] == 21);
  CHECK(q[2].y[0] == 34);
  CHECK(q[3].y[0] == 51);
  CHECK(q[3].y[4] == 9);  // chunk 4: the constant 9 with zero coefficients
  const std::array<crypto::shamir_share, 3> last{q[1], q[2], q[3]};
  CHECK(crypto::shamir_recover(last, 3).value() == secret_with_chunks(7, 9));
  const std::array<std::uint32_t, 3> xs{2, 3, 4};
  const std::array<std::uint64_t, 3> ys{21, 34, 51};
  CHECK(crypto::lagrange_at(xs, ys, 0).value() == 7);
  CHECK(crypto::lagrange_at(xs, ys, 1).value() == 12);
  CHECK(crypto::lagrange_at(xs, ys, 10).value() == 7 + 30 + 200);
}

TEST_CASE("shamir: any t of n shares recover a random secret; t − 1 do not") {
  for (const auto& [t, n] : {std::pair<std::size_t, std::size_t>{1, 1}, {2, 3}, {3, 5}, {4, 7}}) {
    CAPTURE(t);
    CAPTURE(n);
    const crypto::secret32 secret = random_secret();
    auto shares = crypto::shamir_split(secret, t, n);
    REQUIRE(shares.ok());
    REQUIRE(shares.value().size() == n);
    // Every subset of size t, in every order of its members' x: take t from a rotated list.
    for (std::size_t start = 0; start < n; ++start) {
      std::vector<crypto::shamir_share> pick;
      for (std::size_t i = 0; i < t; ++i) pick.push_back(shares.value()[(start + 2 * i) % n]);
      std::sort(pick.begin(), pick.end(), [](const auto& a, const auto& b) { return a.x < b.x; });
      pick.erase(std::unique(pick.begin(), pick.end(), [](const auto& a, const auto& b) { return a.x == b.x; }), pick.end());
      if (pick.size() < t) continue;
      CHECK(crypto::shamir_recover(pick, t).value() == secret);
    }
    CHECK(crypto::shamir_recover(shares.value(), t).value() == secret);  // all n: the extras agree
    if (t > 1) {
      const auto below = crypto::shamir_recover(std::span(shares.value()).first(t - 1), t);
      REQUIRE_FALSE(below.ok());
      CHECK(below.error().message.find("fewer than the threshold") != std::string::npos);
    }
  }
  // Two splits of one secret differ (fresh coefficients from the CSPRNG).
  const crypto::secret32 secret = random_secret();
  CHECK(crypto::shamir_split(secret, 3, 5).value()[0].y != crypto::shamir_split(secret, 3, 5).value()[0].y);
}

TEST_CASE("shamir: a forged or repeated share, bad counts and values outside the field are refused") {
  const crypto::secret32 secret = random_secret();
  auto shares = crypto::shamir_split(secret, 3, 5).value();
  auto forged = shares;
  forged[4].y[2] = gf61::add(forged[4].y[2], 1);
  const auto f = crypto::shamir_recover(forged, 3);
  REQUIRE_FALSE(f.ok());
  CHECK(f.error().message == "the share at x = 5 does not lie on the others' polynomial");
  std::vector<crypto::shamir_share> twice{shares[0], shares[0], shares[1]};
  CHECK(crypto::shamir_recover(twice, 3).error().message == "two shares at x = 1");
  auto zero = shares;
  zero[0].x = 0;
  CHECK(crypto::shamir_recover(zero, 3).error().message == "a share at x = 0");
  auto outside = shares;
  outside[1].y[0] = gf61_prime;
  CHECK_FALSE(crypto::shamir_recover(outside, 3).ok());
  CHECK_FALSE(crypto::shamir_split(secret, 0, 5).ok());
  CHECK_FALSE(crypto::shamir_split(secret, 6, 5).ok());
  CHECK_FALSE(crypto::shamir_split(secret, 2, crypto::shamir_max_shares + 1).ok());
  // A recovered value too large for its bytes: shares of something that was never a 32-byte secret.
  std::array<std::uint64_t, crypto::shamir_chunks> big{std::uint64_t{1} << 56, 0, 0, 0, 0};
  CHECK_FALSE(crypto::elements_to_secret(big).ok());
  std::array<std::uint64_t, crypto::shamir_chunks> last{0, 0, 0, 0, std::uint64_t{1} << 32};
  CHECK_FALSE(crypto::elements_to_secret(last).ok());
}
