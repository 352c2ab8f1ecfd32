// tessera/crypto/digest.hpp — SHA-256 of blobs and files.
//
// Transfers are checked end to end with SHA-256: the sender declares the digest of the whole blob, the
// receiver recomputes it over the bytes that landed in its buffer before handing them on.
//
//   crypto::sha256 h;
//   h.update(first_part);
//   h.update(second_part);
//   crypto::sha256_digest d = h.finish();
//   std::string hex = crypto::to_hex(d);          // 64 lowercase hex characters
//   auto back = crypto::digest_from_hex(hex);     // result<sha256_digest>
//   auto file = crypto::sha256_file("ckpt.safetensors");
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "tessera/core/base/error.hpp"

namespace tessera::crypto {

using sha256_digest = std::array<std::uint8_t, 32>;

// Incremental SHA-256. Not copyable; movable. finish() may be called once, after which the object is
// reset and may hash a new message.
class sha256 {
 public:
  sha256();
  ~sha256();
  sha256(sha256&&) noexcept;
  sha256& operator=(sha256&&) noexcept;
  sha256(const sha256&) = delete;
  sha256& operator=(const sha256&) = delete;

  void update(std::span<const std::byte> bytes);
  void update(std::span<const std::uint8_t> bytes);
  [[nodiscard]] sha256_digest finish();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

[[nodiscard]] sha256_digest sha256_of(std::span<const std::byte> bytes);
[[nodiscard]] core::result<sha256_digest> sha256_file(const std::filesystem::path& path);

// Lowercase hex, 2 characters per byte.
[[nodiscard]] std::string to_hex(std::span<const std::uint8_t> bytes);
// Exactly 64 hex characters (either case); anything else is errc::bad_format.
[[nodiscard]] core::result<sha256_digest> digest_from_hex(std::string_view hex);

}  // namespace tessera::crypto
