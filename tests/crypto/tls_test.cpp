#include <doctest/doctest.h>

#include "tessera/crypto/error.hpp"
#include "tessera/crypto/tls.hpp"
#include "test_pki.hpp"

namespace crypto = tessera::crypto;
using tessera::test::test_pki;

TEST_CASE("tls: hub and agent contexts build from the PKI's files") {
  const auto& pki = test_pki::get();
  auto hub = crypto::make_hub_tls({pki.ca.cert, pki.hub.cert, pki.hub.key, pki.ca.crl});
  REQUIRE(hub);
  CHECK(hub.value().valid());
  auto agent = crypto::make_agent_tls({pki.ca.cert, pki.dev_a.cert, pki.dev_a.key, "localhost"});
  REQUIRE(agent);
  auto agent_ip = crypto::make_agent_tls({pki.ca.cert, pki.dev_a.cert, pki.dev_a.key, "127.0.0.1"});
  REQUIRE(agent_ip);
}

TEST_CASE("tls: a key that does not match its certificate is an OpenSSL error naming the files") {
  const auto& pki = test_pki::get();
  auto bad = crypto::make_agent_tls({pki.ca.cert, pki.dev_a.cert, pki.dev_b.key, "localhost"});
  REQUIRE(!bad);
  CHECK(bad.error().code == crypto::errc::openssl);
  CHECK(bad.error().message.find("dev-b.key") != std::string::npos);
}

TEST_CASE("tls: a hub without its revocation list does not start") {
  const auto& pki = test_pki::get();
  auto bad = crypto::make_hub_tls({pki.ca.cert, pki.hub.cert, pki.hub.key, pki.dir / "missing.crl"});
  REQUIRE(!bad);
  CHECK(bad.error().code == crypto::errc::io);
  CHECK(crypto::make_agent_tls({pki.ca.cert, pki.dev_a.cert, pki.dev_a.key, ""}).error().code ==
        crypto::errc::invalid_argument);
}
