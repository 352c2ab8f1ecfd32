// Internal: an Asio ssl::context over crypto's SSL_CTX (shared, reference-counted).
#pragma once

#include <memory>

#include <boost/asio/ssl/context.hpp>
#include <openssl/ssl.h>

#include "tessera/crypto/tls.hpp"

namespace tessera::net::detail {

inline std::shared_ptr<boost::asio::ssl::context> adopt_tls(const crypto::tls_context& tls) {
  TESSERA_ASSERT(tls.valid());
  // Asio's context takes ownership of the handle it is given, so it gets its own reference.
  return std::make_shared<boost::asio::ssl::context>(static_cast<SSL_CTX*>(tls.native_handle_add_ref()));
}

}  // namespace tessera::net::detail
