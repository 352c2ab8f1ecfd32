#include <doctest/doctest.h>

#include <sys/stat.h>

#include <filesystem>

#include "tessera/crypto/error.hpp"
#include "tessera/crypto/pki.hpp"
#include "tessera/crypto/tls.hpp"
#include "test_pki.hpp"

namespace crypto = tessera::crypto;
using tessera::test::test_pki;

namespace {
unsigned mode_of(const std::filesystem::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_mode & 0777;
}
}  // namespace

TEST_CASE("pki: keys are owner-read-only, certificates public") {
  const auto& pki = test_pki::get();
  CHECK(mode_of(pki.ca.key) == 0400);
  CHECK(mode_of(pki.hub.key) == 0400);
  CHECK(mode_of(pki.dev_a.key) == 0400);
  CHECK(mode_of(pki.ca.cert) == 0644);
  CHECK(mode_of(pki.ca.crl) == 0644);
}

TEST_CASE("pki: existing files are not overwritten without force") {
  const auto& pki = test_pki::get();
  const auto before = crypto::certificate_serial(pki.dev_b.cert).value();
  auto again = crypto::issue(pki.ca, {.device_id = "dev-b"}, pki.dev_b, false);
  REQUIRE(!again);
  CHECK(again.error().code == crypto::errc::exists);
  CHECK(crypto::certificate_serial(pki.dev_b.cert).value() == before);
  auto ca_again = crypto::init_ca(pki.ca, {}, false);
  REQUIRE(!ca_again);
  CHECK(ca_again.error().code == crypto::errc::exists);

  const auto dir = pki.dir / "force";
  std::filesystem::create_directories(dir);
  const crypto::cert_files out{dir / "d.pem", dir / "d.key"};
  const auto s1 = crypto::issue(pki.ca, {.device_id = "dev-f"}, out, false).value();
  const auto s2 = crypto::issue(pki.ca, {.device_id = "dev-f"}, out, true).value();
  CHECK(s1 != s2);
  CHECK(crypto::certificate_serial(out.cert).value() == s2);
  CHECK(mode_of(out.key) == 0400);
}

TEST_CASE("pki: the device id is in the subject and the URI SAN") {
  const auto& pki = test_pki::get();
  auto id = crypto::device_id_from_der(crypto::certificate_der(pki.dev_a.cert).value());
  REQUIRE(id);
  CHECK(id.value() == "dev-a");
  auto hub = crypto::device_id_from_der(crypto::certificate_der(pki.hub.cert).value());
  REQUIRE(!hub);
  CHECK(hub.error().code == crypto::errc::no_device_id);
}

TEST_CASE("pki: an operator certificate names its role, and neither role passes for the other") {
  const auto& pki = test_pki::get();
  const auto op_der = crypto::certificate_der(pki.operator_cert.cert).value();
  auto name = crypto::operator_name_from_der(op_der);
  REQUIRE(name);
  CHECK(name.value() == "ops");
  auto as_device = crypto::device_id_from_der(op_der);
  REQUIRE(!as_device);
  CHECK(as_device.error().code == crypto::errc::no_device_id);
  CHECK(as_device.error().message.find("operator ops") != std::string::npos);

  auto device_as_operator = crypto::operator_name_from_der(crypto::certificate_der(pki.dev_a.cert).value());
  REQUIRE(!device_as_operator);
  CHECK(device_as_operator.error().code == crypto::errc::not_operator);
  CHECK(device_as_operator.error().message.find("device dev-a") != std::string::npos);
  auto hub_as_operator = crypto::operator_name_from_der(crypto::certificate_der(pki.hub.cert).value());
  REQUIRE(!hub_as_operator);
  CHECK(hub_as_operator.error().code == crypto::errc::not_operator);

  const crypto::cert_files out{pki.dir / "op-bad.pem", pki.dir / "op-bad.key"};
  CHECK(crypto::issue(pki.ca, {.operator_name = "a b"}, out, false).error().code == crypto::errc::invalid_argument);
  CHECK(crypto::issue(pki.ca, {.device_id = "d", .operator_name = "o"}, out, false).error().code == crypto::errc::invalid_argument);
  CHECK(crypto::issue(pki.ca, {.dns_names = {"x.org"}, .operator_name = "o"}, out, false).error().code ==
        crypto::errc::invalid_argument);
  CHECK(crypto::issue(pki.ca, {.common_name = "mallory", .operator_name = "o"}, out, false).error().code ==
        crypto::errc::invalid_argument);
  CHECK(!std::filesystem::exists(out.cert));
}

TEST_CASE("pki: bad names and ids are refused before anything is written") {
  const auto& pki = test_pki::get();
  const crypto::cert_files out{pki.dir / "bad.pem", pki.dir / "bad.key"};
  CHECK(crypto::issue(pki.ca, {.device_id = "a/b"}, out, false).error().code == crypto::errc::invalid_argument);
  CHECK(crypto::issue(pki.ca, {.device_id = std::string(65, 'a')}, out, false).error().code ==
        crypto::errc::invalid_argument);
  CHECK(crypto::issue(pki.ca, {.dns_names = {"a,DNS:evil"}}, out, false).error().code == crypto::errc::invalid_argument);
  CHECK(crypto::issue(pki.ca, {.ip_addresses = {"300.1.1.1"}}, out, false).error().code ==
        crypto::errc::invalid_argument);
  CHECK(crypto::issue(pki.ca, {}, out, false).error().code == crypto::errc::invalid_argument);
  CHECK(!std::filesystem::exists(out.cert));
  CHECK(!std::filesystem::exists(out.key));
}

TEST_CASE("pki: revoke adds a serial once and keeps the CRL signed") {
  const auto& pki = test_pki::get();
  const auto serial = crypto::certificate_serial(pki.revoked.cert).value();
  auto twice = crypto::revoke(pki.ca, serial);
  REQUIRE(!twice);
  CHECK(twice.error().code == crypto::errc::already_revoked);
  CHECK(crypto::revoke(pki.ca, "xyz").error().code == crypto::errc::invalid_argument);
  // A hub context still loads the (re-signed) CRL.
  CHECK(crypto::make_hub_tls({pki.ca.cert, pki.hub.cert, pki.hub.key, pki.ca.crl}));
}
