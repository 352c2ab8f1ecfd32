// Tests of tessera/crypto/agreement.hpp: X25519 agreement, signatures by certificate keys checked
// against the CA, and AES-256-GCM boxes.
#include <doctest/doctest.h>

#include <string>

#include "../support/text.hpp"
#include "test_pki.hpp"
#include "tessera/crypto/agreement.hpp"

using namespace tessera;

using testing::text_bytes;

TEST_CASE("X25519: both sides derive the same key, per purpose; a rebuilt pair agrees as the original") {
  auto a = crypto::x25519_keypair::generate().value();
  auto b = crypto::x25519_keypair::generate().value();
  CHECK(a.public_bytes() != b.public_bytes());
  const auto ab = a.agree(b.public_bytes(), "tessera mask r1").value();
  CHECK(ab == b.agree(a.public_bytes(), "tessera mask r1").value());
  CHECK(ab != a.agree(b.public_bytes(), "tessera mask r2").value());
  // A dropped device's key, recovered from its shares, gives the survivors' masks back.
  auto again = crypto::x25519_keypair::from_private(a.private_bytes().value()).value();
  CHECK(again.public_bytes() == a.public_bytes());
  CHECK(again.agree(b.public_bytes(), "tessera mask r1").value() == ab);
  // A public key of small order (here 0) gives an all-zero secret: refused.
  CHECK_FALSE(a.agree(crypto::public_key{}, "tessera mask r1").ok());
}

TEST_CASE("signatures: a device signs with its certificate key; others verify it against the CA only") {
  const auto& pki = test::test_pki::get();
  const std::string ca = testing::read_text(pki.ca.cert);
  auto signer = crypto::signing_key::load(pki.dev_a.key).value();
  const std::string message = "round 7: dev-a advertises c_pk and s_pk";
  const auto sig = signer.sign(text_bytes(message)).value();
  auto peer = crypto::verifying_key::from_certificate_pem(testing::read_text(pki.dev_a.cert), ca);
  REQUIRE_MESSAGE(peer.ok(), (peer.ok() ? "" : peer.error().message));
  CHECK(peer.value().device_id() == "dev-a");
  CHECK(peer.value().verify(text_bytes(message), sig));
  // Another message (another round: a replay), another signer, or an altered signature: no.
  CHECK_FALSE(peer.value().verify(text_bytes("round 8: dev-a advertises c_pk and s_pk"), sig));
  auto other = crypto::signing_key::load(pki.dev_b.key).value();
  CHECK_FALSE(peer.value().verify(text_bytes(message), other.sign(text_bytes(message)).value()));
  auto bent = sig;
  bent[bent.size() / 2] ^= std::byte{1};
  CHECK_FALSE(peer.value().verify(text_bytes(message), bent));
  // A certificate from another CA, an expired one, or the hub's (not a device's) is refused.
  auto foreign = crypto::verifying_key::from_certificate_pem(testing::read_text(pki.foreign.cert), ca);
  REQUIRE_FALSE(foreign.ok());
  CHECK(foreign.error().code == crypto::errc::auth_failed);
  CHECK_FALSE(crypto::verifying_key::from_certificate_pem(testing::read_text(pki.expired.cert), ca).ok());
  CHECK_FALSE(crypto::verifying_key::from_certificate_pem(testing::read_text(pki.hub.cert), ca).ok());
  CHECK_FALSE(crypto::verifying_key::from_certificate_pem("not a certificate", ca).ok());
}

TEST_CASE("AES-256-GCM boxes: open with the key and the same associated data only") {
  const auto key = crypto::random_key().value();
  const std::string share = "a share of dev-b's seed";
  const auto box = crypto::aead_seal(key, text_bytes("dev-a to dev-b, round 3"), text_bytes(share)).value();
  CHECK(box.size() == share.size() + crypto::aead_overhead);
  const auto back = crypto::aead_open(key, text_bytes("dev-a to dev-b, round 3"), box).value();
  CHECK(std::string(reinterpret_cast<const char*>(back.data()), back.size()) == share);
  CHECK(crypto::aead_open(key, text_bytes("dev-a to dev-c, round 3"), box).error().code == crypto::errc::auth_failed);
  CHECK(crypto::aead_open(crypto::random_key().value(), text_bytes("dev-a to dev-b, round 3"), box).error().code == crypto::errc::auth_failed);
  auto altered = box;
  altered[13] ^= std::byte{0x80};
  CHECK(crypto::aead_open(key, text_bytes("dev-a to dev-b, round 3"), altered).error().code == crypto::errc::auth_failed);
  CHECK(crypto::aead_open(key, {}, std::span(box).first(10)).error().code == crypto::errc::bad_format);
  // A fresh nonce each time: two boxes of one plaintext differ.
  CHECK(crypto::aead_seal(key, {}, text_bytes(share)).value() != crypto::aead_seal(key, {}, text_bytes(share)).value());
}
