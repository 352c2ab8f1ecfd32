#include "tessera/crypto/seal.hpp"

#include <cstring>

#include <openssl/rand.h>

#include "ossl.hpp"
#include "tessera/core/io/file_io.hpp"

namespace tessera::crypto {
namespace {

constexpr std::array<unsigned char, 8> k_magic{'T', 'S', 'E', 'A', 'L', 0x01, 0, 0};
constexpr std::size_t k_nonce = 12;
constexpr std::size_t k_tag = 16;
static_assert(sealed_overhead_bytes == k_magic.size() + k_nonce + k_tag);
// EVP_*Update take int lengths; larger blobs would need chunking we do not need for checkpoints.
constexpr std::size_t k_max_plaintext = (std::size_t{1} << 31) - 1;

unsigned char* uc(std::byte* p) { return reinterpret_cast<unsigned char*>(p); }
const unsigned char* uc(const std::byte* p) { return reinterpret_cast<const unsigned char*>(p); }

}  // namespace

core::result<sealing_key> sealing_key::generate() {
  sealing_key k;
  if (RAND_bytes(k.bytes_.data(), static_cast<int>(k.bytes_.size())) != 1) return detail::openssl_error("RAND_bytes");
  return k;
}

core::result<sealing_key> sealing_key::load(const std::filesystem::path& path) {
  sealing_key k;
  const auto read = core::read_file_into(path, std::as_writable_bytes(std::span(k.bytes_.data(), k.bytes_.size())));
  // A larger file does not fit the key: the same answer as a shorter one.
  if (!read && read.error().code != core::errc::bad_format) return make_error(errc::io, read.error().message);
  if (!read || read.value() != k.bytes_.size())
    return make_error(errc::bad_format, path.string() + ": a sealing key file holds exactly 32 bytes");
  return k;
}

core::result<void> sealing_key::save(const std::filesystem::path& path, bool force) const {
  const std::filesystem::path outs[] = {path};
  TESSERA_TRY(detail::check_outputs(outs, force));
  return detail::write_file(path, std::as_bytes(std::span(bytes_)), 0400, force);
}

core::result<std::vector<std::byte>> seal(const sealing_key& key, std::span<const std::byte> plaintext) {
  if (plaintext.size() > k_max_plaintext) return make_error(errc::invalid_argument, "plaintext over 2 GiB");
  std::vector<std::byte> out(sealed_overhead_bytes + plaintext.size());
  std::memcpy(out.data(), k_magic.data(), k_magic.size());
  std::byte* nonce = out.data() + k_magic.size();
  std::byte* body = nonce + k_nonce;
  std::byte* tag = body + plaintext.size();
  if (RAND_bytes(uc(nonce), static_cast<int>(k_nonce)) != 1) return detail::openssl_error("RAND_bytes");

  detail::cipher_ctx_ptr ctx(EVP_CIPHER_CTX_new());
  int n = 0;
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.bytes().data(), uc(nonce)) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &n, k_magic.data(), static_cast<int>(k_magic.size())) != 1 ||
      (!plaintext.empty() &&
       EVP_EncryptUpdate(ctx.get(), uc(body), &n, uc(plaintext.data()), static_cast<int>(plaintext.size())) != 1) ||
      EVP_EncryptFinal_ex(ctx.get(), uc(body) + plaintext.size(), &n) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, static_cast<int>(k_tag), uc(tag)) != 1)
    return detail::openssl_error("AES-256-GCM seal");
  return out;
}

core::result<std::vector<std::byte>> unseal(const sealing_key& key, std::span<const std::byte> sealed) {
  if (sealed.size() < sealed_overhead_bytes || std::memcmp(sealed.data(), k_magic.data(), k_magic.size()) != 0)
    return make_error(errc::bad_format, "not a sealed blob (magic or size)");
  const std::size_t body_size = sealed.size() - sealed_overhead_bytes;
  if (body_size > k_max_plaintext) return make_error(errc::bad_format, "sealed blob over 2 GiB");
  const std::byte* nonce = sealed.data() + k_magic.size();
  const std::byte* body = nonce + k_nonce;
  std::array<unsigned char, k_tag> tag{};
  std::memcpy(tag.data(), body + body_size, k_tag);

  std::vector<std::byte> out(body_size);
  detail::cipher_ctx_ptr ctx(EVP_CIPHER_CTX_new());
  int n = 0;
  if (!ctx || EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.bytes().data(), uc(nonce)) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &n, k_magic.data(), static_cast<int>(k_magic.size())) != 1 ||
      (body_size > 0 && EVP_DecryptUpdate(ctx.get(), uc(out.data()), &n, uc(body), static_cast<int>(body_size)) != 1) ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, static_cast<int>(k_tag), tag.data()) != 1)
    return detail::openssl_error("AES-256-GCM open");
  if (EVP_DecryptFinal_ex(ctx.get(), uc(out.data()) + body_size, &n) != 1) {
    // Do not hand back unauthenticated plaintext, not even partially, nor leave it in freed memory.
    // A checkpoint is no key, and this buffer no secret: a secret_bytes would cost every load a copy
    // of the checkpoint to hand back a plain vector. So it is wiped here, the one wipe outside
    // secret.hpp.
    detail::cleanse(out.data(), out.size());
    return make_error(errc::auth_failed, "sealed blob failed authentication (wrong key or modified data)");
  }
  return out;
}

core::result<void> seal_file(const sealing_key& key, std::span<const std::byte> plaintext,
                             const std::filesystem::path& path, bool force) {
  const std::filesystem::path outs[] = {path};
  TESSERA_TRY(detail::check_outputs(outs, force));
  auto sealed = seal(key, plaintext);
  TESSERA_TRY(sealed);
  return detail::write_file(path, sealed.value(), 0600, force);
}

core::result<std::vector<std::byte>> unseal_file(const sealing_key& key, const std::filesystem::path& path) {
  auto bytes = detail::read_file(path, k_max_plaintext + sealed_overhead_bytes);
  TESSERA_TRY(bytes);
  return unseal(key, bytes.value());
}

}  // namespace tessera::crypto
