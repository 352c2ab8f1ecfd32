// tessera/crypto/masking.hpp — the arithmetic of a masked update (Bonawitz et al., "Practical Secure
// Aggregation for Privacy-Preserving Machine Learning", CCS 2017, §3–4).
//
// A device's update becomes integers in the ring Z_{2^bits}: each value clipped to [−clip, clip]
// (every clipped value counted: a clip that saturates is reported, never silent) and divided by a step
// chosen so that the sum of `summands` inputs can never wrap, then rounded stochastically (unbiased: the
// expected value is the input) or to nearest (error at most half a step). Masks are keystreams of
// ChaCha20 under 256-bit keys from HKDF-SHA256 — never a generator with a small seed — added or
// subtracted in the ring, so that pairwise masks cancel in the sum and a self mask is removed once its
// seed is recovered.
//
//   auto fp = crypto::fixed_point::create(/*clip=*/0.5, /*bits=*/32, /*summands=*/12).value();
//   std::vector<std::uint64_t> x(n);
//   crypto::keystream rounding(rounding_key);
//   std::size_t clipped = fp.encode(update, x, &rounding);          // stochastic rounding
//   crypto::apply_mask(x, fp.bits(), pairwise_key, crypto::mask_sign::add);
//   ... the hub adds every device's x in the ring, removes the self masks ...
//   fp.decode_sum(sum, out);                                         // back to floats
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "tessera/core/base/error.hpp"
#include "tessera/crypto/secret.hpp"

namespace tessera::crypto {

// A 256-bit key made here (drawn, derived, agreed): a secret, wiped when it goes.
using key256 = secret<std::byte, 32>;
// How a function takes a 256-bit key: a view of its bytes, whether they are a key256's or those of a
// key that is no secret by design (a device's rounding key, which the hub derives and sends).
using key256_view = std::span<const std::byte, 32>;

// HKDF-SHA256 (RFC 5869): `out.size()` bytes (at most 255·32) from the input keying material, a salt
// and a context string.
[[nodiscard]] core::result<void> hkdf_sha256(std::span<const std::byte> ikm, std::span<const std::byte> salt,
                                             std::string_view info, std::span<std::byte> out);
// A 256-bit key for one purpose (`info` names it: "tessera mask", "tessera rounding", ...).
[[nodiscard]] core::result<key256> derive_key(std::span<const std::byte> ikm, std::string_view info);
// 32 bytes from OpenSSL's CSPRNG.
[[nodiscard]] core::result<key256> random_key();

// The ChaCha20 keystream of a 256-bit key (nonce and counter 0: every key serves one stream), read
// 8 bytes at a time. The key and the stream's buffered output are wiped when the stream goes.
class keystream {
 public:
  explicit keystream(key256_view key);
  ~keystream();
  keystream(const keystream&) = delete;
  keystream& operator=(const keystream&) = delete;
  keystream(keystream&&) noexcept;
  keystream& operator=(keystream&&) noexcept;

  [[nodiscard]] std::uint64_t next();                        // 64 uniform bits
  [[nodiscard]] double next_unit() { return static_cast<double>(next() >> 11) * 0x1p-53; }  // [0, 1)
  void fill(std::span<std::uint64_t> out);

 private:
  struct state;
  std::unique_ptr<state> s_;
};

enum class mask_sign { add, subtract };
// x[i] ← x[i] ± r_i mod 2^bits, r the keystream of `key` (8 bytes per value, low `bits` kept).
void apply_mask(std::span<std::uint64_t> x, int bits, key256_view key, mask_sign sign);
// a[i] ← a[i] + b[i] mod 2^bits (a sum of masked inputs).
void add_into(std::span<std::uint64_t> a, std::span<const std::uint64_t> b, int bits) noexcept;

class fixed_point {
 public:
  // bits in [8, 64]; clip > 0 and finite; summands >= 1 and small enough that every input keeps at
  // least one step of each sign (errc::invalid_argument otherwise, naming what does not fit).
  [[nodiscard]] static core::result<fixed_point> create(double clip, int bits, std::uint64_t summands);

  [[nodiscard]] int bits() const noexcept { return bits_; }
  [[nodiscard]] double clip() const noexcept { return clip_; }
  [[nodiscard]] double step() const noexcept { return step_; }
  // The largest magnitude of one encoded input, in steps: summands·limit < 2^(bits−1).
  [[nodiscard]] std::int64_t limit() const noexcept { return limit_; }

  // Encodes `in` into `out` (same size): clipped to ±clip, rounded stochastically with `rounding`, or to
  // nearest when it is null. Returns how many values were clipped (a NaN counts as clipped to 0).
  std::size_t encode(std::span<const float> in, std::span<std::uint64_t> out, keystream* rounding) const;
  // A sum of at most `summands` encoded inputs back to real values.
  void decode_sum(std::span<const std::uint64_t> sum, std::span<double> out) const;

 private:
  fixed_point(double clip, int bits, std::int64_t limit);
  double clip_ = 0, step_ = 0;
  int bits_ = 0;
  std::int64_t limit_ = 0;
};

}  // namespace tessera::crypto
