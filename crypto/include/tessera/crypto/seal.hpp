// tessera/crypto/seal.hpp — AES-256-GCM sealing of files at rest (hub checkpoints).
//
// A sealed blob is: 8-byte magic "TSEAL\x01\0\0", a 12-byte random nonce, the ciphertext (same length as
// the plaintext) and a 16-byte GCM tag. The magic is authenticated as associated data, so a blob cannot
// be passed off as another format version. A fresh random nonce per seal is safe for far more than the
// number of checkpoints a hub writes under one key (the GCM bound is 2^32 random nonces per key).
//
//   auto key = crypto::sealing_key::generate();
//   key.value().save("hub.sealkey", /*force=*/false);              // 32 raw bytes, mode 0400
//   auto sealed = crypto::seal(key.value(), plaintext_bytes);
//   auto plain = crypto::unseal(key.value(), sealed.value());      // errc::auth_failed if tampered
//   crypto::seal_file(key.value(), plaintext_bytes, "ckpt.sealed", /*force=*/true);
//   auto back = crypto::unseal_file(key.value(), "ckpt.sealed");
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "tessera/core/base/error.hpp"
#include "tessera/crypto/secret.hpp"

namespace tessera::crypto {

inline constexpr std::size_t sealed_overhead_bytes = 8 + 12 + 16;  // magic + nonce + tag

// A 256-bit key. The bytes never appear in logs; they live in a secret, which wipes them (a copy of the
// key is a second secret, wiped in its turn).
class sealing_key {
 public:
  [[nodiscard]] static core::result<sealing_key> generate();
  // The file is read straight into the key (no copy is left on the heap).
  [[nodiscard]] static core::result<sealing_key> load(const std::filesystem::path& path);
  // Writes the 32 key bytes owner-read-only; an existing file is kept unless `force`.
  [[nodiscard]] core::result<void> save(const std::filesystem::path& path, bool force) const;

  sealing_key(const sealing_key&) = default;
  sealing_key& operator=(const sealing_key&) = default;
  sealing_key(sealing_key&&) noexcept = default;
  sealing_key& operator=(sealing_key&&) noexcept = default;
  ~sealing_key() = default;

  [[nodiscard]] const secret<std::uint8_t, 32>& bytes() const noexcept { return bytes_; }

 private:
  sealing_key() = default;
  secret<std::uint8_t, 32> bytes_;
};

[[nodiscard]] core::result<std::vector<std::byte>> seal(const sealing_key& key, std::span<const std::byte> plaintext);
[[nodiscard]] core::result<std::vector<std::byte>> unseal(const sealing_key& key, std::span<const std::byte> sealed);

// Seal to a file (written to a temporary, fsync'd, renamed) and read one back.
[[nodiscard]] core::result<void> seal_file(const sealing_key& key, std::span<const std::byte> plaintext,
                                           const std::filesystem::path& path, bool force);
[[nodiscard]] core::result<std::vector<std::byte>> unseal_file(const sealing_key& key,
                                                               const std::filesystem::path& path);

}  // namespace tessera::crypto
