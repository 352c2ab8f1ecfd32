// tessera/crypto/error.hpp — the crypto module's typed errors.
//
// Every OpenSSL failure becomes a `core::error` whose code is one of these and whose message carries
// what we were doing plus OpenSSL's own reason text, taken where the failure happened.
//
//   core::result<crypto::sha256_digest> d = crypto::sha256_file("model.safetensors");
//   if (!d && d.error().code == crypto::errc::io) { ... }
#pragma once

#include <string>
#include <system_error>

#include "tessera/core/base/error.hpp"

namespace tessera::crypto {

enum class errc {
  openssl = 1,        // an OpenSSL call failed; the message holds its reason
  io,                 // the operating system refused a read or write
  exists,             // an output file exists and --force was not given
  invalid_argument,   // a name, id, key or option is malformed
  bad_format,         // a PEM/DER/sealed file is not what it claims to be
  auth_failed,        // AES-GCM tag mismatch: wrong key or tampered data
  no_device_id,       // a certificate carries no Tessera device id
  already_revoked,    // the serial is already on the revocation list
  not_operator,       // a certificate carries no Tessera operator name (a device's, or none)
};

[[nodiscard]] const std::error_category& category_of(errc) noexcept;  // "tessera.crypto"
using core::make_error, core::make_error_code;

}  // namespace tessera::crypto

template <>
struct std::is_error_code_enum<tessera::crypto::errc> : std::true_type {};
