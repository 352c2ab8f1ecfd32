// Tests of tessera/crypto/tls.hpp: contexts from the PKI's files, and what a finished (or failed)
// handshake tells about its peer.
#include <doctest/doctest.h>

#include <memory>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "tessera/crypto/error.hpp"
#include "tessera/crypto/pki.hpp"
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

TEST_CASE("tls: a key that does not match its certificate is named with both files and fields") {
  const auto& pki = test_pki::get();
  auto bad = crypto::make_agent_tls({pki.ca.cert, pki.dev_a.cert, pki.dev_b.key, "localhost"});
  REQUIRE(!bad);
  CHECK(bad.error().code == crypto::errc::invalid_argument);
  CHECK(bad.error().message == "tls.key " + pki.dev_b.key.string() + " is not the key of tls.cert " + pki.dev_a.cert.string());
}

TEST_CASE("tls: a certificate its own tls.ca did not sign, or expired, is refused at start, not by every peer") {
  const auto& pki = test_pki::get();
  // A hub with a certificate of another CA used to start, and every agent then failed its handshake.
  auto foreign = crypto::make_hub_tls({pki.ca.cert, pki.foreign.cert, pki.foreign.key, pki.ca.crl});
  REQUIRE(!foreign);
  CAPTURE(foreign.error().message);
  CHECK(foreign.error().message.starts_with("tls.cert " + pki.foreign.cert.string() + " (/O=Tessera/CN=dev-x, valid until "));
  CHECK(foreign.error().message.ends_with(" does not verify against tls.ca " + pki.ca.cert.string() +
                                          ": unable to get local issuer certificate (it was issued by another CA: every peer would refuse it)"));
  auto expired = crypto::make_agent_tls({pki.ca.cert, pki.expired.cert, pki.expired.key, "localhost"});
  REQUIRE(!expired);
  CHECK(expired.error().message.ends_with(": certificate has expired"));
  // A device's certificate is not the hub's (its purpose is the client's).
  auto device_as_hub = crypto::make_hub_tls({pki.ca.cert, pki.dev_a.cert, pki.dev_a.key, pki.ca.crl});
  REQUIRE(!device_as_hub);
  CAPTURE(device_as_hub.error().message);
  CHECK(device_as_hub.error().message.ends_with(": unsuitable certificate purpose"));
}

TEST_CASE("tls: a missing or empty file is named by its field, without OpenSSL's error stack") {
  const auto& pki = test_pki::get();
  auto missing = crypto::make_agent_tls({pki.ca.cert, pki.dir / "nope.pem", pki.dev_a.key, "localhost"});
  REQUIRE(!missing);
  CHECK(missing.error().message == "tls.cert: " + (pki.dir / "nope.pem").string() + ": no such file");
  auto empty_crl = crypto::make_hub_tls({pki.ca.cert, pki.hub.cert, pki.hub.key, ""});
  REQUIRE(!empty_crl);
  CHECK(empty_crl.error().message == "tls.crl is empty: it names a PEM file");  // was "cannot open : No such file or directory"
}

TEST_CASE("tls: a hub without its revocation list does not start") {
  const auto& pki = test_pki::get();
  auto bad = crypto::make_hub_tls({pki.ca.cert, pki.hub.cert, pki.hub.key, pki.dir / "missing.crl"});
  REQUIRE(!bad);
  CHECK(bad.error().code == crypto::errc::io);
  CHECK(crypto::make_agent_tls({pki.ca.cert, pki.dev_a.cert, pki.dev_a.key, ""}).error().code ==
        crypto::errc::invalid_argument);
}

namespace {

// One TLS 1.3 handshake between a hub and an agent context, in memory (a BIO pair, no sockets). The
// test drives OpenSSL itself; what it checks is what net/ and hub/ ask of a finished handshake.
class handshake {
 public:
  handshake(const crypto::tls_context& hub, const crypto::tls_context& agent)
      : hub_(SSL_new(hub.native_handle())), agent_(SSL_new(agent.native_handle())) {
    BIO* hub_side = nullptr;
    BIO* agent_side = nullptr;
    REQUIRE(BIO_new_bio_pair(&hub_side, 0, &agent_side, 0) == 1);
    SSL_set_bio(hub_.get(), hub_side, hub_side);
    SSL_set_bio(agent_.get(), agent_side, agent_side);
    SSL_set_accept_state(hub_.get());
    SSL_set_connect_state(agent_.get());
    // Each side steps until both are done or one fails; the last one to fail names the error.
    for (int i = 0; i < 20 && !(hub_done_ && agent_done_) && (error_ == 0 || agent_error_ == 0); ++i) {
      step(hub_.get(), hub_done_, error_);
      step(agent_.get(), agent_done_, agent_error_);
    }
    // TLS 1.3: the client is done before the hub checks its certificate; a refusal is its next read.
    if (agent_done_ && !hub_done_ && agent_error_ == 0) {
      char byte = 0;
      ERR_clear_error();
      if (SSL_read(agent_.get(), &byte, 1) <= 0) {
        agent_done_ = false;
        agent_error_ = ERR_peek_last_error();
      }
    }
  }
  [[nodiscard]] bool done() const { return hub_done_ && agent_done_; }
  [[nodiscard]] ssl_st* hub_side() const { return hub_.get(); }
  [[nodiscard]] ssl_st* agent_side() const { return agent_.get(); }
  [[nodiscard]] unsigned long error() const { return error_ != 0 ? error_ : agent_error_; }
  [[nodiscard]] unsigned long agent_error() const { return agent_error_; }

 private:
  static void step(SSL* ssl, bool& done, unsigned long& error) {
    if (done || error != 0) return;
    ERR_clear_error();
    const int r = SSL_do_handshake(ssl);
    if (r == 1) {
      done = true;
      return;
    }
    const int why = SSL_get_error(ssl, r);
    if (why != SSL_ERROR_WANT_READ && why != SSL_ERROR_WANT_WRITE) error = ERR_peek_last_error();
  }

  struct ssl_free {
    void operator()(SSL* s) const noexcept { SSL_free(s); }
  };
  std::unique_ptr<SSL, ssl_free> hub_, agent_;
  bool hub_done_ = false, agent_done_ = false;
  unsigned long error_ = 0, agent_error_ = 0;
};

// A client context presenting `cert` whatever it is (an agent's own check refuses expired ones).
crypto::tls_context client_presenting(const tessera::crypto::cert_files& cert) {
  const auto& pki = test_pki::get();
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()), &SSL_CTX_free);
  REQUIRE(SSL_CTX_load_verify_locations(ctx.get(), pki.ca.cert.c_str(), nullptr) == 1);
  REQUIRE(SSL_CTX_use_certificate_chain_file(ctx.get(), cert.cert.c_str()) == 1);
  REQUIRE(SSL_CTX_use_PrivateKey_file(ctx.get(), cert.key.c_str(), SSL_FILETYPE_PEM) == 1);
  SSL_CTX_up_ref(ctx.get());
  return crypto::tls_context(std::shared_ptr<void>(ctx.get(), [](void* p) { SSL_CTX_free(static_cast<SSL_CTX*>(p)); }));
}

}  // namespace

TEST_CASE("tls: after a handshake the hub reads the device and its serial from the certificate, never an operator") {
  const auto& pki = test_pki::get();
  handshake h(pki.hub_tls(), pki.agent_tls(pki.dev_a));
  REQUIRE(h.done());
  auto peer = crypto::peer_device(h.hub_side());
  REQUIRE(peer);
  CHECK(peer.value().id == "dev-a");
  CHECK(peer.value().serial == crypto::certificate_serial(pki.dev_a.cert).value());
  auto as_operator = crypto::peer_operator(h.hub_side());
  REQUIRE_FALSE(as_operator);
  CHECK(as_operator.error().code == crypto::errc::not_operator);
  const auto fine = crypto::describe_handshake_failure(h.hub_side(), 0);
  CHECK(fine.verify_error.empty());
  CHECK(fine.verify_label.empty());
  CHECK(fine.error_label.empty());
  ERR_clear_error();
}

TEST_CASE("tls: an operator's certificate names its operator and no device") {
  const auto& pki = test_pki::get();
  handshake h(pki.hub_tls(), pki.agent_tls(pki.operator_cert));
  REQUIRE(h.done());
  CHECK(crypto::peer_operator(h.hub_side()).value() == "ops");
  auto as_device = crypto::peer_device(h.hub_side());
  REQUIRE_FALSE(as_device);
  CHECK(as_device.error().code == crypto::errc::no_device_id);
  ERR_clear_error();
}

TEST_CASE("tls: a revoked device's handshake fails, and why reads as text and as a label") {
  const auto& pki = test_pki::get();
  handshake h(pki.hub_tls(), pki.agent_tls(pki.revoked));
  REQUIRE_FALSE(h.done());
  const auto why = crypto::describe_handshake_failure(h.hub_side(), h.error());
  CHECK(why.verify_label == "certificate_revoked");
  CHECK(why.verify_error.find("revoked") != std::string::npos);
  // The sentence names the device's certificate (its subject, its end date).
  CAPTURE(why.explanation);
  CHECK(why.explanation.starts_with("the peer's certificate (/O=Tessera/CN=dev-gone, valid until "));
  CHECK(why.explanation.ends_with(") is revoked by this side's tls.crl"));
  ERR_clear_error();
}

TEST_CASE("tls: failures read as sentences naming both sides' certificates, not OpenSSL's alerts") {
  const auto& pki = test_pki::get();
  // What each side of a failed handshake between `hub` and `agent` would say: the hub's, the agent's.
  struct said {
    std::string hub, agent;
  };
  const auto failed = [](const crypto::tls_context& hub, const crypto::tls_context& agent) {
    handshake h(hub, agent);
    REQUIRE_FALSE(h.done());
    said out{crypto::describe_handshake_failure(h.hub_side(), h.error()).explanation,
             crypto::describe_handshake_failure(h.agent_side(), h.agent_error()).explanation};
    ERR_clear_error();
    return out;
  };
  // The agent dialled a name the hub's certificate does not carry ("hostname mismatch" named neither).
  const said name = failed(pki.hub_tls(), pki.agent_tls(pki.dev_a, "hub.example.org"));
  CAPTURE(name.agent);
  CHECK(name.agent.starts_with("the peer's certificate (/O=Tessera/CN=tessera-hub"));
  CHECK(name.agent.ends_with(" is for localhost, 127.0.0.1, not for hub.example.org, the name this side dialled (hub_name)"));
  // The hub refused the device's expired certificate: the agent heard "sslv3 alert certificate expired".
  const said expired = failed(pki.hub_tls(), client_presenting(pki.expired));
  CAPTURE(expired.agent);
  CHECK(expired.agent.starts_with("the peer refused this side's certificate (/O=Tessera/CN=dev-old, valid until "));
  CHECK(expired.agent.ends_with("): it has expired (or its own revocation list is out of date)"));
  // A device of another CA: the hub names its issuer; the device hears that the two CAs differ.
  const said foreign = failed(pki.hub_tls(), client_presenting(pki.foreign));
  CAPTURE(foreign.hub);
  CAPTURE(foreign.agent);
  CHECK(foreign.hub.find(") was issued by ") != std::string::npos);
  CHECK(foreign.hub.ends_with(", not by this side's tls.ca (/O=Tessera/CN=Tessera CA)"));  // and which CA that is
  CHECK(foreign.agent.starts_with("the peer does not trust "));
  CHECK(foreign.agent.ends_with(": the two sides' tls.ca differ (or the peer cannot use its revocation list)"));
}

TEST_CASE("tls: a handshake without a client certificate is labelled so") {
  const auto& pki = test_pki::get();
  // An agent context without a certificate: a bare TLS 1.3 client trusting the CA.
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> bare(SSL_CTX_new(TLS_client_method()), &SSL_CTX_free);
  REQUIRE(SSL_CTX_load_verify_locations(bare.get(), pki.ca.cert.c_str(), nullptr) == 1);
  SSL_CTX_up_ref(bare.get());
  const crypto::tls_context agent(std::shared_ptr<void>(bare.get(), [](void* p) { SSL_CTX_free(static_cast<SSL_CTX*>(p)); }));
  handshake h(pki.hub_tls(), agent);
  REQUIRE_FALSE(h.done());
  CHECK(crypto::peer_device(h.hub_side()).error().code == crypto::errc::no_device_id);
  CHECK(crypto::peer_operator(h.hub_side()).error().message == "no client certificate");
  const auto why = crypto::describe_handshake_failure(h.hub_side(), h.error());
  CHECK(why.verify_label.empty());
  CHECK(why.error_label == "no_certificate");
  ERR_clear_error();
}
