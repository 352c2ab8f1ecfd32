// Mutual TLS over loopback: who may talk. Each refusal is observed on the side that refuses.
#include <doctest/doctest.h>

#include "net_test_util.hpp"

using namespace tessera::test;
namespace crypto = tessera::crypto;

namespace {

// The hub's view of one refused handshake: its session closed with tls_handshake, the agent never got
// a WELCOME, and the hub then still serves a good device.
void expect_hub_refuses(const std::shared_ptr<asio::ssl::context>& agent_ctx, const char* reason_part) {
  hub_fixture hub;
  auto agent = start_agent(hub.io, agent_ctx, hub.port, "dev-a");
  REQUIRE(run_until(hub.io, [&] { return !hub.closes.empty() && agent->closed.has_value(); }));
  CHECK(hub.closes[0].code == net::errc::tls_handshake);
  INFO(hub.closes[0].message);
  CHECK(hub.closes[0].message.find(reason_part) != std::string::npos);
  CHECK(!agent->welcomed);
  CHECK(hub.hellos.empty());
  CHECK(still_serving(hub));
}

}  // namespace

TEST_CASE("tls: a device with a valid certificate is accepted and identified by its certificate") {
  hub_fixture hub;
  auto agent = start_agent(hub.io, asio_tls(test_pki::get().agent_tls(test_pki::get().dev_a)), hub.port, "dev-a");
  REQUIRE(run_until(hub.io, [&] { return agent->welcomed; }));
  REQUIRE(hub.peer_ids.size() == 1);
  CHECK(hub.peer_ids[0] == "dev-a");
  CHECK(agent->s->bytes_received() > 0);
}

TEST_CASE("tls: a client without a certificate is refused") {
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_3_VERSION);
  ctx->load_verify_file(test_pki::get().ca.cert.string());
  ctx->set_verify_mode(asio::ssl::verify_peer);
  expect_hub_refuses(ctx, "did not return a certificate");
}

// A client that presents `cert` whatever it is (an agent's own check would refuse a foreign or
// expired one before any handshake): what a hostile peer can do.
std::shared_ptr<asio::ssl::context> client_presenting(const tessera::crypto::cert_files& cert) {
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_3_VERSION);
  ctx->load_verify_file(test_pki::get().ca.cert.string());
  ctx->set_verify_mode(asio::ssl::verify_peer);
  ctx->use_certificate_chain_file(cert.cert.string());
  ctx->use_private_key_file(cert.key.string(), asio::ssl::context::pem);
  return ctx;
}

TEST_CASE("tls: a client certificate from another CA is refused") {
  // The client trusts our CA (so it accepts the hub) but presents a certificate from another CA.
  expect_hub_refuses(client_presenting(test_pki::get().foreign), "certificate verify failed");
}

TEST_CASE("tls: an expired client certificate is refused, and the device is told which of its certificates and why") {
  hub_fixture hub;
  auto agent = start_agent(hub.io, client_presenting(test_pki::get().expired), hub.port, "dev-a");
  REQUIRE(run_until(hub.io, [&] { return !hub.closes.empty() && agent->closed.has_value(); }));
  INFO(hub.closes[0].message);
  INFO(agent->closed->message);
  CHECK(hub.closes[0].message.find("the peer's certificate (/O=Tessera/CN=dev-old, valid until ") != std::string::npos);
  CHECK(hub.closes[0].message.find(") has expired (") != std::string::npos);
  // It used to read "read: sslv3 alert certificate expired".
  CHECK(agent->closed->code == net::errc::tls_handshake);
  CHECK(agent->closed->message.find("the peer refused this side's certificate (/O=Tessera/CN=dev-old, valid until ") != std::string::npos);
  CHECK(agent->closed->message.find("): it has expired (") != std::string::npos);
  CHECK(still_serving(hub));
}

TEST_CASE("tls: a revoked client certificate is refused") {
  expect_hub_refuses(asio_tls(test_pki::get().agent_tls(test_pki::get().revoked)), "revoked");
}

TEST_CASE("tls: the agent refuses a hub whose certificate does not carry the dialled name") {
  hub_fixture hub;
  auto wrong = asio_tls(test_pki::get().agent_tls(test_pki::get().dev_a, "hub.example.org"));
  auto agent = start_agent(hub.io, wrong, hub.port, "dev-a");
  REQUIRE(run_until(hub.io, [&] { return agent->closed.has_value() && !hub.closes.empty(); }));
  CHECK(agent->closed->code == net::errc::tls_handshake);
  INFO(agent->closed->message);
  // Both names, the hub's address and its certificate (it used to say "hostname mismatch" alone).
  CHECK(agent->closed->message.starts_with("TLS handshake with 127.0.0.1:"));
  CHECK(agent->closed->message.find(": the peer's certificate (/O=Tessera/CN=tessera-hub, valid until ") != std::string::npos);
  CHECK(agent->closed->message.find(") is for localhost, 127.0.0.1, not for hub.example.org, the name this side dialled (hub_name)") !=
        std::string::npos);
  CHECK(!agent->ready);
  CHECK(hub.hellos.empty());
  CHECK(still_serving(hub));
}

TEST_CASE("tls: a device whose HELLO claims another id than its certificate is refused") {
  hub_fixture hub;
  auto agent = start_agent(hub.io, asio_tls(test_pki::get().agent_tls(test_pki::get().dev_a)), hub.port, "dev-b");
  REQUIRE(run_until(hub.io, [&] { return agent->closed.has_value() && !hub.closes.empty(); }));
  CHECK(hub.closes[0].code == net::errc::identity_mismatch);
  CHECK(agent->closed->code == net::errc::refused);
  CHECK(agent->closed->message.find("certificate is 'dev-a'") != std::string::npos);
  CHECK(!agent->welcomed);
  CHECK(hub.hellos.empty());
  CHECK(still_serving(hub));
}
