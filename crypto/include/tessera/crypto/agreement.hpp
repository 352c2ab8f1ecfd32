// tessera/crypto/agreement.hpp — the public-key steps of secure aggregation (Bonawitz et al., CCS 2017):
// X25519 key pairs and their shared secrets, signatures by a device's certificate key (so a hub that
// relays public keys cannot substitute its own), and AES-256-GCM for the secret shares the hub relays.
//
//   auto mine = crypto::x25519_keypair::generate().value();
//   auto shared = mine.agree(peer_public, "tessera mask r7").value();      // HKDF-SHA256 of the ECDH output
//   auto signer = crypto::signing_key::load("device.key").value();         // the certificate's P-256 key
//   auto sig = signer.sign(message).value();
//   auto peer = crypto::verifying_key::from_certificate_pem(cert_pem, ca_pem).value();  // checked against the CA
//   bool ok = peer.verify(message, sig);
//   auto box = crypto::aead_seal(shared, associated, plaintext).value();   // nonce || ciphertext || tag
//   auto back = crypto::aead_open(shared, associated, box.value());         // errc::auth_failed if altered
#pragma once

#include <array>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/base/error.hpp"
#include "tessera/crypto/error.hpp"
#include "tessera/crypto/masking.hpp"

namespace tessera::crypto {

using public_key = std::array<std::byte, 32>;

// An X25519 key pair; the private half is wiped when it goes and never leaves but through agree().
class x25519_keypair {
 public:
  [[nodiscard]] static core::result<x25519_keypair> generate();  // from OpenSSL's CSPRNG
  // Rebuilds a pair from its private key (a dropped device's key, recovered from shares).
  [[nodiscard]] static core::result<x25519_keypair> from_private(key256_view private_key);
  x25519_keypair(x25519_keypair&&) noexcept;
  x25519_keypair& operator=(x25519_keypair&&) noexcept;
  ~x25519_keypair();

  [[nodiscard]] const public_key& public_bytes() const noexcept { return public_; }
  [[nodiscard]] core::result<key256> private_bytes() const;  // for secret sharing only
  // HKDF-SHA256 of the X25519 shared secret with `info`: both sides derive the same key. A public key
  // of small order (an all-zero shared secret) is refused.
  [[nodiscard]] core::result<key256> agree(const public_key& peer, std::string_view info) const;

 private:
  struct handle;
  x25519_keypair(std::unique_ptr<handle> h, const public_key& p);
  std::unique_ptr<handle> h_;
  public_key public_{};
};

// A device's certificate key (ECDSA P-256 with SHA-256), for signing what it advertises.
class signing_key {
 public:
  [[nodiscard]] static core::result<signing_key> load(const std::filesystem::path& key_pem);
  signing_key(signing_key&&) noexcept;
  signing_key& operator=(signing_key&&) noexcept;
  ~signing_key();
  [[nodiscard]] core::result<std::vector<std::byte>> sign(std::span<const std::byte> message) const;

 private:
  struct handle;
  explicit signing_key(std::unique_ptr<handle> h);
  std::unique_ptr<handle> h_;
};

// Another device's public key, from its certificate, which must be signed by the CA given (the hub only
// relays certificates; it cannot make one). `device_id` is the id in the certificate.
class verifying_key {
 public:
  // With `crl_pem` (the CA's revocation list, PEM), a revoked certificate is refused too.
  [[nodiscard]] static core::result<verifying_key> from_certificate_pem(std::string_view cert_pem, std::string_view ca_pem,
                                                                        std::string_view crl_pem = {});
  verifying_key(verifying_key&&) noexcept;
  verifying_key& operator=(verifying_key&&) noexcept;
  ~verifying_key();
  [[nodiscard]] const std::string& device_id() const noexcept { return device_id_; }
  [[nodiscard]] bool verify(std::span<const std::byte> message, std::span<const std::byte> signature) const;

 private:
  struct handle;
  verifying_key(std::unique_ptr<handle> h, std::string id);
  std::unique_ptr<handle> h_;
  std::string device_id_;
};

inline constexpr std::size_t aead_overhead = 12 + 16;  // nonce and tag

// AES-256-GCM with a random 96-bit nonce: nonce || ciphertext || tag. `associated` is authenticated,
// not encrypted (who sends to whom, which round). What a box holds is secret (shares): it opens into a
// secret_bytes, and one that does not authenticate leaves nothing behind.
[[nodiscard]] core::result<std::vector<std::byte>> aead_seal(key256_view key, std::span<const std::byte> associated,
                                                             std::span<const std::byte> plaintext);
[[nodiscard]] core::result<secret_bytes> aead_open(key256_view key, std::span<const std::byte> associated,
                                                   std::span<const std::byte> box);

}  // namespace tessera::crypto
