#include "tessera/crypto/masking.hpp"

#include <cmath>
#include <cstring>
#include <string>

#include <openssl/core_names.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include "ossl.hpp"

namespace tessera::crypto {
namespace {

using kdf_ptr = detail::ossl_ptr<EVP_KDF, EVP_KDF_free>;
using kdf_ctx_ptr = detail::ossl_ptr<EVP_KDF_CTX, EVP_KDF_CTX_free>;

constexpr std::uint64_t low_bits(int bits) noexcept { return bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1; }

// Keystream bytes come in blocks: one EVP call per 64 values.
constexpr std::size_t k_block_values = 64;

}  // namespace

core::result<void> hkdf_sha256(std::span<const std::byte> ikm, std::span<const std::byte> salt, std::string_view info,
                               std::span<std::byte> out) {
  if (out.empty() || out.size() > 255 * 32) return make_error(errc::invalid_argument, "HKDF-SHA256 gives 1 to 8160 bytes");
  kdf_ptr kdf(EVP_KDF_fetch(nullptr, "HKDF", nullptr));
  if (!kdf) return detail::openssl_error("EVP_KDF_fetch(HKDF)");
  kdf_ctx_ptr ctx(EVP_KDF_CTX_new(kdf.get()));
  if (!ctx) return detail::openssl_error("EVP_KDF_CTX_new");
  char digest[] = "SHA256";
  // OSSL_PARAM wants non-const pointers; OpenSSL only reads these buffers.
  auto* key = const_cast<std::byte*>(ikm.data());
  auto* s = const_cast<std::byte*>(salt.data());
  auto* i = const_cast<char*>(info.data());
  // An empty salt or info is left out (RFC 5869: an absent salt is a string of zeros).
  OSSL_PARAM params[5];
  std::size_t n = 0;
  params[n++] = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0);
  params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, key, ikm.size());
  if (!salt.empty()) params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, s, salt.size());
  if (!info.empty()) params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, i, info.size());
  params[n] = OSSL_PARAM_construct_end();
  if (EVP_KDF_derive(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), out.size(), params) != 1)
    return detail::openssl_error("HKDF-SHA256");
  return {};
}

core::result<key256> derive_key(std::span<const std::byte> ikm, std::string_view info) {
  key256 k{};
  TESSERA_TRY(hkdf_sha256(ikm, {}, info, k));
  return k;
}

core::result<key256> random_key() {
  key256 k{};
  if (RAND_bytes(reinterpret_cast<unsigned char*>(k.data()), static_cast<int>(k.size())) != 1) return detail::openssl_error("RAND_bytes");
  return k;
}

// The cipher context holds the key (EVP_CIPHER_CTX_free cleanses it); the block, output not yet read.
struct keystream::state {
  detail::cipher_ctx_ptr ctx{EVP_CIPHER_CTX_new()};
  secret<std::uint64_t, k_block_values> block;
  std::size_t used = k_block_values;
};

keystream::keystream(key256_view key) : s_(std::make_unique<state>()) {
  static constexpr unsigned char iv[16] = {};  // counter 0, nonce 0: the key is used for this stream only
  // Failures here are not input errors: an OpenSSL without ChaCha20 or out of memory.
  TESSERA_ASSERT(s_->ctx != nullptr);
  const int ok = EVP_EncryptInit_ex(s_->ctx.get(), EVP_chacha20(), nullptr, reinterpret_cast<const unsigned char*>(key.data()), iv);
  TESSERA_ASSERT(ok == 1);
}

keystream::~keystream() = default;
keystream::keystream(keystream&&) noexcept = default;
keystream& keystream::operator=(keystream&&) noexcept = default;

void keystream::fill(std::span<std::uint64_t> out) {
  static constexpr unsigned char zeros[k_block_values * 8] = {};
  for (auto& v : out) {
    if (s_->used == k_block_values) {
      int len = 0;
      const int ok = EVP_EncryptUpdate(s_->ctx.get(), reinterpret_cast<unsigned char*>(s_->block.data()), &len, zeros, sizeof zeros);
      static_assert(sizeof zeros == sizeof(std::uint64_t) * k_block_values);
      TESSERA_ASSERT(ok == 1 && len == static_cast<int>(sizeof zeros));
      s_->used = 0;
    }
    v = s_->block[s_->used++];
  }
}

std::uint64_t keystream::next() {
  std::uint64_t v = 0;
  fill(std::span(&v, 1));
  return v;
}

void apply_mask(std::span<std::uint64_t> x, int bits, key256_view key, mask_sign sign) {
  keystream ks(key);
  const std::uint64_t m = low_bits(bits);
  secret<std::uint64_t, k_block_values> r;  // the mask itself: as secret as the key
  for (std::size_t i = 0; i < x.size(); i += r.size()) {
    const std::size_t n = std::min(r.size(), x.size() - i);
    ks.fill(std::span(r.data(), n));
    for (std::size_t j = 0; j < n; ++j) x[i + j] = (sign == mask_sign::add ? x[i + j] + r[j] : x[i + j] - r[j]) & m;
  }
}

void add_into(std::span<std::uint64_t> a, std::span<const std::uint64_t> b, int bits) noexcept {
  TESSERA_ASSERT(a.size() == b.size());
  const std::uint64_t m = low_bits(bits);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = (a[i] + b[i]) & m;
}

fixed_point::fixed_point(double clip, int bits, std::int64_t limit)
    : clip_(clip), step_(clip / static_cast<double>(limit)), bits_(bits), limit_(limit) {}

core::result<fixed_point> fixed_point::create(double clip, int bits, std::uint64_t summands) {
  if (!(std::isfinite(clip) && clip > 0)) return make_error(errc::invalid_argument, "the clip must be a positive finite number");
  if (bits < 8 || bits > 64) return make_error(errc::invalid_argument, "a ring of " + std::to_string(bits) + " bits (8 to 64)");
  if (summands < 1) return make_error(errc::invalid_argument, "a sum of no inputs");
  // summands · limit <= 2^(bits−1) − 1: the largest sum (every input at ±limit) reads back as itself.
  const std::uint64_t half = (std::uint64_t{1} << (bits - 1)) - 1;
  const std::uint64_t limit = half / summands;
  if (limit < 1)
    return make_error(errc::invalid_argument, "a ring of " + std::to_string(bits) + " bits cannot hold the sum of " +
                                                  std::to_string(summands) + " inputs");
  return fixed_point(clip, bits, static_cast<std::int64_t>(std::min<std::uint64_t>(limit, std::uint64_t{1} << 52)));
}

std::size_t fixed_point::encode(std::span<const float> in, std::span<std::uint64_t> out, keystream* rounding) const {
  TESSERA_ASSERT(in.size() == out.size());
  const std::uint64_t m = low_bits(bits_);
  const auto lim = static_cast<double>(limit_);
  std::size_t clipped = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    double v = static_cast<double>(in[i]) / step_;
    if (std::isnan(v)) {
      v = 0;
      ++clipped;
    } else if (v > lim) {
      v = lim;
      ++clipped;
    } else if (v < -lim) {
      v = -lim;
      ++clipped;
    }
    const double q = rounding != nullptr ? std::floor(v + rounding->next_unit()) : std::nearbyint(v);
    // q in [−limit, limit] (floor of at most limit + u < limit + 1 is at most limit).
    out[i] = static_cast<std::uint64_t>(static_cast<std::int64_t>(std::min(std::max(q, -lim), lim))) & m;
  }
  return clipped;
}

void fixed_point::decode_sum(std::span<const std::uint64_t> sum, std::span<double> out) const {
  TESSERA_ASSERT(sum.size() == out.size());
  const std::uint64_t m = low_bits(bits_);
  const std::uint64_t sign = std::uint64_t{1} << (bits_ - 1);
  for (std::size_t i = 0; i < sum.size(); ++i) {
    const std::uint64_t u = sum[i] & m;
    // Two's complement in `bits`: values at or above 2^(bits−1) are negative.
    const std::int64_t s = (u & sign) != 0 ? static_cast<std::int64_t>(u | ~m) : static_cast<std::int64_t>(u);
    out[i] = static_cast<double>(s) * step_;
  }
}

}  // namespace tessera::crypto
