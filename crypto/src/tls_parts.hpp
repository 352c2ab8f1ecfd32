// Internal: what tls.cpp and tls_failure.cpp share: a certificate described in one line, and the slot
// where a connection keeps the peer certificate that failed verification.
#pragma once

#include <string>

#include <openssl/ssl.h>

namespace tessera::crypto::detail {

// Its subject and when it stops being valid: "/O=Tessera/CN=device-2, valid until Dec  6 20:25:03 2027 GMT".
[[nodiscard]] std::string describe(X509* cert);
// The SSL ex_data index of the peer certificate that failed verification (OpenSSL does not keep it in
// the session then), for describe_handshake_failure.
[[nodiscard]] int failed_certificate_index();

}  // namespace tessera::crypto::detail
