// tessera/net/tls_adopt.hpp — a crypto::tls_context as the Asio ssl::context its streams are built on.
//
// crypto/ owns the TLS configuration (tessera/crypto/tls.hpp); Asio's context adopts a reference to it,
// so the two share one configuration and each releases its own reference. Everything else TLS needs
// after a handshake (the peer's identity, why a handshake failed) is crypto's too: a stream's
// native_handle() goes to those functions and nowhere else.
//
//   auto ctx = net::adopt_tls(crypto::make_hub_tls(files).value());   // shared_ptr<asio::ssl::context>
//   asio::ssl::stream<tcp::socket> stream(std::move(socket), *ctx);
//   ... after the handshake:
//   auto peer = crypto::peer_device(stream.native_handle());
#pragma once

#include <memory>

#include <boost/asio/ssl/context.hpp>

#include "tessera/core/base/assert.hpp"
#include "tessera/crypto/tls.hpp"

namespace tessera::net {

[[nodiscard]] inline std::shared_ptr<boost::asio::ssl::context> adopt_tls(const crypto::tls_context& tls) {
  TESSERA_ASSERT(tls.valid());
  // Asio's context takes ownership of the handle it is given, so it gets its own reference.
  return std::make_shared<boost::asio::ssl::context>(tls.native_handle_add_ref());
}

}  // namespace tessera::net
