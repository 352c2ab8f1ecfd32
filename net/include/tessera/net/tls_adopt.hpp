// Internal: TLS glue between crypto and Asio — an Asio ssl::context over crypto's SSL_CTX (shared,
// reference-counted), and the device id of an authenticated peer's certificate.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <openssl/err.h>
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

// A TLS handshake's failure as a short, bounded label (the hub counts them by reason): the peer
// certificate's verification result when there is one, else what OpenSSL's error says.
inline std::string tls_failure_label(const boost::system::error_code& ec, long verify) {
  switch (verify) {
    case X509_V_OK: break;
    case X509_V_ERR_CERT_REVOKED: return "certificate_revoked";
    case X509_V_ERR_CERT_HAS_EXPIRED: return "certificate_expired";
    case X509_V_ERR_CERT_NOT_YET_VALID: return "certificate_not_yet_valid";
    case X509_V_ERR_INVALID_PURPOSE: return "wrong_purpose";
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_CERT_SIGNATURE_FAILURE: return "unknown_ca";
    case X509_V_ERR_UNABLE_TO_GET_CRL:
    case X509_V_ERR_CRL_HAS_EXPIRED:
    case X509_V_ERR_CRL_NOT_YET_VALID: return "crl_unusable";
    default: return "certificate_invalid";
  }
  if (ec == boost::asio::error::eof || ec == boost::asio::ssl::error::stream_truncated || ec == boost::asio::error::connection_reset)
    return "closed";
  if (ec.category() == boost::asio::error::get_ssl_category()) {
    switch (ERR_GET_REASON(static_cast<unsigned long>(ec.value()))) {
      case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE: return "no_certificate";
      case SSL_R_UNSUPPORTED_PROTOCOL:
      case SSL_R_WRONG_VERSION_NUMBER:
      case SSL_R_NO_PROTOCOLS_AVAILABLE:
      case SSL_R_VERSION_TOO_LOW: return "protocol_version";
      case SSL_R_HTTP_REQUEST:
      case SSL_R_HTTPS_PROXY_REQUEST: return "not_tls";
      default: break;
    }
  }
  return "tls_error";
}

}  // namespace tessera::net::detail
