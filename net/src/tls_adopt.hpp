// Internal: TLS glue between crypto and Asio — an Asio ssl::context over crypto's SSL_CTX (shared,
// reference-counted), and the device id of an authenticated peer's certificate.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/ssl/context.hpp>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "tessera/crypto/pki.hpp"
#include "tessera/crypto/tls.hpp"
#include "tessera/net/error.hpp"

namespace tessera::net::detail {

inline std::shared_ptr<boost::asio::ssl::context> adopt_tls(const crypto::tls_context& tls) {
  TESSERA_ASSERT(tls.valid());
  // Asio's context takes ownership of the handle it is given, so it gets its own reference.
  return std::make_shared<boost::asio::ssl::context>(static_cast<SSL_CTX*>(tls.native_handle_add_ref()));
}

// The device id in the peer's certificate (hub side, after the handshake): the identity a HELLO must
// match, never what the peer claims.
// The peer certificate's device id and serial (lowercase hex).
struct peer_identity {
  std::string id, serial;
};
inline core::result<peer_identity> peer_of(SSL* ssl) {
  const X509* cert = SSL_get0_peer_certificate(ssl);
  const int n = cert != nullptr ? i2d_X509(cert, nullptr) : 0;
  if (n <= 0) return make_error(errc::no_device_id, "no peer certificate");
  std::vector<std::uint8_t> der(static_cast<std::size_t>(n));
  unsigned char* p = der.data();
  if (i2d_X509(cert, &p) != n) return make_error(errc::no_device_id, "no peer certificate");
  peer_identity out;
  TESSERA_ASSIGN_OR_RETURN(out.id, crypto::device_id_from_der(der));
  auto serial = crypto::certificate_serial_der(der);
  if (!serial) return make_error(errc::no_device_id, serial.error().message);
  out.serial = std::move(serial).value();
  return out;
}

}  // namespace tessera::net::detail
