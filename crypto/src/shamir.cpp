#include "tessera/crypto/shamir.hpp"

#include <algorithm>
#include <string>

#include <openssl/rand.h>

#include "ossl.hpp"
#include "tessera/core/base/endian.hpp"

namespace tessera::crypto {
namespace {

constexpr std::size_t k_chunk_bytes = 7;
// Bytes of the secret in chunk c: 7, and the last 4.
constexpr std::size_t chunk_bytes(std::size_t c) noexcept { return c + 1 < shamir_chunks ? k_chunk_bytes : 32 - c * k_chunk_bytes; }
static_assert(k_chunk_bytes * (shamir_chunks - 1) + chunk_bytes(shamir_chunks - 1) == secret32::size());

// A uniform element of GF(p) from the CSPRNG: 61 random bits, rejected when >= p (probability 2^-61).
core::result<std::uint64_t> random_element() {
  for (;;) {
    std::uint64_t v = 0;
    if (RAND_bytes(reinterpret_cast<unsigned char*>(&v), sizeof v) != 1) return detail::openssl_error("RAND_bytes");
    v &= gf61_prime;
    if (v < gf61_prime) return v;
  }
}

core::result<void> check_counts(std::size_t t, std::size_t n) {
  if (t < 1 || t > n || n > shamir_max_shares)
    return make_error(errc::invalid_argument, "secret sharing needs 1 <= threshold <= shares <= " + std::to_string(shamir_max_shares) +
                                                  " (threshold " + std::to_string(t) + ", shares " + std::to_string(n) + ")");
  return {};
}

}  // namespace

shamir_values secret_to_elements(std::span<const std::byte, 32> s) noexcept {
  shamir_values e;
  core::le_reader r(s);
  for (std::size_t c = 0; c < shamir_chunks; ++c) {
    const bool read = r.uint(e[c], chunk_bytes(c));
    TESSERA_ASSERT(read);  // the chunks cover the 32 bytes exactly
  }
  return e;
}

core::result<secret32> elements_to_secret(std::span<const std::uint64_t, shamir_chunks> e) {
  secret32 s;
  core::le_writer w{std::span<std::byte>(s.data(), s.size())};
  for (std::size_t c = 0; c < shamir_chunks; ++c) {
    const std::size_t bytes = chunk_bytes(c);
    if (e[c] >> (8 * bytes) != 0)
      return make_error(errc::invalid_argument, "recovered value " + std::to_string(c) + " does not fit its " + std::to_string(bytes) +
                                                    " bytes: the shares are not of one secret");
    w.uint(e[c], bytes);
  }
  return s;
}

std::uint64_t shamir_eval(std::span<const std::uint64_t> coeffs, std::uint64_t x) noexcept {
  std::uint64_t r = 0;
  for (std::size_t k = coeffs.size(); k-- > 0;) r = gf61::add(gf61::mul(r, x), coeffs[k]);
  return r;
}

core::result<std::uint64_t> lagrange_at(std::span<const std::uint32_t> xs, std::span<const std::uint64_t> ys, std::uint64_t at) {
  if (xs.size() != ys.size() || xs.empty()) return make_error(errc::invalid_argument, "interpolation needs as many values as points");
  for (std::size_t i = 0; i < xs.size(); ++i) {
    if (xs[i] == 0) return make_error(errc::invalid_argument, "a share at x = 0");
    if (ys[i] >= gf61_prime) return make_error(errc::invalid_argument, "a share value outside the field");
    for (std::size_t j = 0; j < i; ++j)
      if (xs[i] == xs[j]) return make_error(errc::invalid_argument, "two shares at x = " + std::to_string(xs[i]));
  }
  std::uint64_t sum = 0;
  for (std::size_t j = 0; j < xs.size(); ++j) {
    std::uint64_t num = 1, den = 1;
    for (std::size_t m = 0; m < xs.size(); ++m) {
      if (m == j) continue;
      num = gf61::mul(num, gf61::sub(at % gf61_prime, xs[m]));
      den = gf61::mul(den, gf61::sub(xs[j], xs[m]));
    }
    sum = gf61::add(sum, gf61::mul(ys[j], gf61::mul(num, gf61::inv(den))));
  }
  return sum;
}

namespace {

// Shares of `s` whose polynomial for chunk c has the chunk as its constant and coeffs[c] (t − 1 values
// < p) after it. `Coefficients` is an array of vectors (given by a test) or of secrets (drawn).
template <class Coefficients>
core::result<std::vector<shamir_share>> split(std::span<const std::byte, 32> s, std::size_t t, std::size_t n, const Coefficients& coeffs) {
  TESSERA_TRY(check_counts(t, n));
  const shamir_values constants = secret_to_elements(s);
  std::vector<shamir_share> shares(n);
  secret<std::uint64_t> poly(t);
  for (std::size_t c = 0; c < shamir_chunks; ++c) {
    if (coeffs[c].size() != t - 1)
      return make_error(errc::invalid_argument, "chunk " + std::to_string(c) + ": " + std::to_string(coeffs[c].size()) +
                                                    " coefficients for threshold " + std::to_string(t));
    poly[0] = constants[c];
    for (std::size_t k = 1; k < t; ++k) {
      if (coeffs[c][k - 1] >= gf61_prime) return make_error(errc::invalid_argument, "a coefficient outside the field");
      poly[k] = coeffs[c][k - 1];
    }
    for (std::size_t i = 0; i < n; ++i) {
      shares[i].x = static_cast<std::uint32_t>(i + 1);
      shares[i].y[c] = shamir_eval(poly, i + 1);
    }
  }
  return shares;
}

}  // namespace

core::result<std::vector<shamir_share>> shamir_split_with(std::span<const std::byte, 32> s, std::size_t t, std::size_t n,
                                                         const std::array<std::vector<std::uint64_t>, shamir_chunks>& coeffs) {
  return split(s, t, n, coeffs);
}

core::result<std::vector<shamir_share>> shamir_split(std::span<const std::byte, 32> s, std::size_t t, std::size_t n) {
  TESSERA_TRY(check_counts(t, n));
  std::array<secret<std::uint64_t>, shamir_chunks> coeffs;
  for (auto& c : coeffs) {
    c = secret<std::uint64_t>(t - 1);
    for (auto& v : c) {
      TESSERA_ASSIGN_OR_RETURN(v, random_element());
    }
  }
  return split(s, t, n, coeffs);
}

namespace {

// The Lagrange basis of the points xs at `at`, L_i(at) = w_i · Π_{j≠i} (at − x_j), from the barycentric
// weights w_i = 1 / Π_{j≠i} (x_i − x_j): O(t) per point once the weights are known.
void basis_at(std::span<const std::uint32_t> xs, std::span<const std::uint64_t> weights, std::uint64_t at, std::span<std::uint64_t> out) {
  const std::size_t t = xs.size();
  std::uint64_t prefix = 1;
  for (std::size_t i = 0; i < t; ++i) {  // out[i] = w_i · Π_{j<i} (at − x_j)
    out[i] = gf61::mul(weights[i], prefix);
    prefix = gf61::mul(prefix, gf61::sub(at % gf61_prime, xs[i]));
  }
  std::uint64_t suffix = 1;
  for (std::size_t i = t; i-- > 0;) {  // times Π_{j>i} (at − x_j)
    out[i] = gf61::mul(out[i], suffix);
    suffix = gf61::mul(suffix, gf61::sub(at % gf61_prime, xs[i]));
  }
}

}  // namespace

// The first t shares define the polynomial; every further share must lie on it (a share altered in
// transit or by its holder is caught, not silently outvoted).
core::result<secret32> shamir_recover(std::span<const shamir_share> shares, std::size_t t) {
  if (t < 1) return make_error(errc::invalid_argument, "threshold 0");
  if (shares.size() < t)
    return make_error(errc::invalid_argument, std::to_string(shares.size()) + " shares, fewer than the threshold " + std::to_string(t) +
                                                  ": the secret cannot be recovered");
  std::vector<std::uint32_t> sorted;
  sorted.reserve(shares.size());
  for (const auto& s : shares) {
    if (s.x == 0) return make_error(errc::invalid_argument, "a share at x = 0");
    for (auto y : s.y)
      if (y >= gf61_prime) return make_error(errc::invalid_argument, "a share value outside the field");
    sorted.push_back(s.x);
  }
  std::sort(sorted.begin(), sorted.end());
  if (auto twice = std::adjacent_find(sorted.begin(), sorted.end()); twice != sorted.end())
    return make_error(errc::invalid_argument, "two shares at x = " + std::to_string(*twice));

  std::vector<std::uint32_t> xs(t);
  for (std::size_t i = 0; i < t; ++i) xs[i] = shares[i].x;
  std::vector<std::uint64_t> weights(t), basis(t);
  for (std::size_t i = 0; i < t; ++i) {
    std::uint64_t den = 1;
    for (std::size_t j = 0; j < t; ++j)
      if (j != i) den = gf61::mul(den, gf61::sub(xs[i], xs[j]));
    weights[i] = gf61::inv(den);
  }
  const auto value_at = [&](std::size_t c) {
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < t; ++i) sum = gf61::add(sum, gf61::mul(shares[i].y[c], basis[i]));
    return sum;
  };
  shamir_values elements;
  basis_at(xs, weights, 0, basis);
  for (std::size_t c = 0; c < shamir_chunks; ++c) elements[c] = value_at(c);
  for (std::size_t k = t; k < shares.size(); ++k) {  // the extras must agree
    basis_at(xs, weights, shares[k].x, basis);
    for (std::size_t c = 0; c < shamir_chunks; ++c)
      if (value_at(c) != shares[k].y[c])
        return make_error(errc::invalid_argument, "the share at x = " + std::to_string(shares[k].x) + " does not lie on the others' polynomial");
  }
  return elements_to_secret(elements);
}

}  // namespace tessera::crypto
