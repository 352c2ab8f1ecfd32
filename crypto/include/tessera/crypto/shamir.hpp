// tessera/crypto/shamir.hpp — t-of-n secret sharing (Shamir, "How to share a secret", CACM 1979) of
// 32-byte secrets, for secure aggregation's seeds and keys (Bonawitz et al., CCS 2017, §4).
//
// The field is GF(p) with the Mersenne prime p = 2^61 − 1: products fit in 122 bits and reduce with
// shifts and adds, and the arithmetic is small enough to check by hand. A 32-byte secret is five
// field elements of at most 56 bits (7 bytes each, little-endian; the fifth holds the last 4 bytes),
// each shared by its own random polynomial of degree t − 1 whose coefficients come from OpenSSL's
// CSPRNG. A share is the point x (1..n) and the five values f_c(x): any t shares give the secret back
// by Lagrange interpolation at 0; t − 1 or fewer are uniformly distributed whatever the secret.
// Secrets, coefficients and share values are held in crypto::secret (secret.hpp): wiped when they go.
//
//   auto shares = crypto::shamir_split(seed, /*t=*/3, /*n=*/5);          // result<vector<shamir_share>>
//   auto back = crypto::shamir_recover(std::span(shares.value()).first(3), /*t=*/3);
//   // extra shares beyond t are checked against the polynomial: a forged one is refused
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tessera/core/base/error.hpp"
#include "tessera/crypto/secret.hpp"

namespace tessera::crypto {

inline constexpr std::uint64_t gf61_prime = (std::uint64_t{1} << 61) - 1;
inline constexpr std::size_t shamir_chunks = 5;
inline constexpr std::size_t shamir_max_shares = 65535;

using secret32 = secret<std::byte, 32>;                   // the same type as masking.hpp's key256
using shamir_values = secret<std::uint64_t, shamir_chunks>;  // one value per chunk

// Arithmetic in GF(2^61 − 1) on canonical values (< p). Portable 64×64 → 128-bit products (no
// __int128: 32-bit ARM boards have none).
namespace gf61 {
// The canonical value of hi·2^64 + lo, for products of two canonical values (hi < 2^58).
[[nodiscard]] constexpr std::uint64_t reduce(std::uint64_t hi, std::uint64_t lo) noexcept {
  // v = (hi·2^3 + lo / 2^61)·2^61 + lo mod 2^61, and 2^61 ≡ 1.
  std::uint64_t r = (lo & gf61_prime) + ((hi << 3) | (lo >> 61));
  r = (r & gf61_prime) + (r >> 61);
  return r >= gf61_prime ? r - gf61_prime : r;
}
[[nodiscard]] constexpr std::uint64_t add(std::uint64_t a, std::uint64_t b) noexcept {
  const std::uint64_t s = a + b;  // < 2^62: no overflow
  return s >= gf61_prime ? s - gf61_prime : s;
}
[[nodiscard]] constexpr std::uint64_t sub(std::uint64_t a, std::uint64_t b) noexcept {
  return a >= b ? a - b : a + gf61_prime - b;
}
[[nodiscard]] constexpr std::uint64_t mul(std::uint64_t a, std::uint64_t b) noexcept {
  const std::uint64_t a0 = a & 0xffffffffu, a1 = a >> 32, b0 = b & 0xffffffffu, b1 = b >> 32;
  const std::uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
  const std::uint64_t mid = (p00 >> 32) + (p01 & 0xffffffffu) + (p10 & 0xffffffffu);
  return reduce(p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32), (p00 & 0xffffffffu) | (mid << 32));
}
[[nodiscard]] constexpr std::uint64_t pow(std::uint64_t a, std::uint64_t e) noexcept {
  std::uint64_t r = 1;
  for (; e != 0; e >>= 1, a = mul(a, a))
    if (e & 1) r = mul(r, a);
  return r;
}
// a^(p−2) (Fermat); a must not be 0.
[[nodiscard]] constexpr std::uint64_t inv(std::uint64_t a) noexcept { return pow(a, gf61_prime - 2); }
}  // namespace gf61

struct shamir_share {
  std::uint32_t x = 0;   // 1..n, never 0 (f(0) is the secret)
  shamir_values y{};     // f_c(x) for each chunk c, < p

  friend bool operator==(const shamir_share&, const shamir_share&) = default;
};

// A secret as field elements and back (7 bytes per element, little-endian).
[[nodiscard]] shamir_values secret_to_elements(std::span<const std::byte, 32> s) noexcept;
// Refuses elements that do not come from 32 bytes (too large for their chunk).
[[nodiscard]] core::result<secret32> elements_to_secret(std::span<const std::uint64_t, shamir_chunks> e);

// f(x) for the polynomial with coefficients coeffs[0] (the constant) .. coeffs[k] (Horner).
[[nodiscard]] std::uint64_t shamir_eval(std::span<const std::uint64_t> coeffs, std::uint64_t x) noexcept;
// The value at `at` of the polynomial of degree < xs.size() through (xs[i], ys[i]); the xs must be
// distinct and nonzero (checked).
[[nodiscard]] core::result<std::uint64_t> lagrange_at(std::span<const std::uint32_t> xs, std::span<const std::uint64_t> ys,
                                                      std::uint64_t at);

// Shares of `s` at x = 1..n, any t of which recover it (1 <= t <= n <= shamir_max_shares).
[[nodiscard]] core::result<std::vector<shamir_share>> shamir_split(std::span<const std::byte, 32> s, std::size_t t, std::size_t n);
// The same with the polynomials' other coefficients given (coeffs[c] has t − 1 values < p, the
// constant being the secret's chunk c): for tests with hand-computed vectors.
[[nodiscard]] core::result<std::vector<shamir_share>> shamir_split_with(std::span<const std::byte, 32> s, std::size_t t, std::size_t n,
                                                                       const std::array<std::vector<std::uint64_t>, shamir_chunks>& coeffs);
// The secret from at least t shares with distinct, nonzero x: interpolated from the first t, and every
// further share must lie on the same polynomials (errc::invalid_argument names the one that does not).
// Fewer than t shares: errc::invalid_argument, never a guess.
[[nodiscard]] core::result<secret32> shamir_recover(std::span<const shamir_share> shares, std::size_t t);

}  // namespace tessera::crypto
