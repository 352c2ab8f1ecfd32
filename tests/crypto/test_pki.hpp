// Test certificates, made with our own crypto API in a temporary directory, once per test process:
// a CA with a hub certificate for localhost/127.0.0.1, devices (dev-a, dev-b, an expired one, a revoked
// one) and an operator (ops), and another CA with its own device and operator. No key material is
// committed.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "tessera/crypto/pki.hpp"
#include "tessera/crypto/tls.hpp"

namespace tessera::test {

class test_pki {
 public:
  std::filesystem::path dir;
  crypto::ca_files ca, other_ca;
  crypto::cert_files hub, dev_a, dev_b, expired, revoked, foreign, operator_cert, foreign_operator;

  static test_pki& get() {
    static test_pki pki;
    return pki;
  }

  [[nodiscard]] crypto::tls_context hub_tls() const {
    return must(crypto::make_hub_tls({ca.cert, hub.cert, hub.key, ca.crl}));
  }
  [[nodiscard]] crypto::tls_context agent_tls(const crypto::cert_files& dev, const std::string& hub_name = "localhost") const {
    return must(crypto::make_agent_tls({ca.cert, dev.cert, dev.key, hub_name}));
  }

  ~test_pki() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

 private:
  template <class T>
  static T must(core::result<T> r) {
    if (!r) throw std::runtime_error(r.error().message);  // test set-up only
    return std::move(r).value();
  }
  static void must(core::result<void> r) {
    if (!r) throw std::runtime_error(r.error().message);
  }

  test_pki() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tessera-pki-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp");
    dir = tmpl;
    ca = crypto::ca_files::in(dir / "ca");
    other_ca = crypto::ca_files::in(dir / "other");
    std::filesystem::create_directories(dir / "ca");
    std::filesystem::create_directories(dir / "other");
    must(crypto::init_ca(ca, {}, false));
    must(crypto::init_ca(other_ca, {.common_name = "Other CA", .valid_days = 3650}, false));
    hub = files("hub");
    must(crypto::issue(ca, {.dns_names = {"localhost"}, .ip_addresses = {"127.0.0.1"}}, hub, false));
    dev_a = files("dev-a");
    (void)must(crypto::issue(ca, {.device_id = "dev-a"}, dev_a, false));
    dev_b = files("dev-b");
    (void)must(crypto::issue(ca, {.device_id = "dev-b"}, dev_b, false));
    expired = files("dev-old");
    (void)must(crypto::issue(ca, {.device_id = "dev-old", .valid_days = 1, .not_before_offset_s = -3 * 86400}, expired,
                             false));
    revoked = files("dev-gone");
    const std::string serial = must(crypto::issue(ca, {.device_id = "dev-gone"}, revoked, false));
    must(crypto::revoke(ca, serial));
    foreign = files("dev-x");
    (void)must(crypto::issue(other_ca, {.device_id = "dev-x"}, foreign, false));
    operator_cert = files("operator-ops");
    (void)must(crypto::issue(ca, {.operator_name = "ops"}, operator_cert, false));
    foreign_operator = files("operator-x");
    (void)must(crypto::issue(other_ca, {.operator_name = "ops-x"}, foreign_operator, false));
  }
  crypto::cert_files files(const std::string& name) const { return {dir / (name + ".pem"), dir / (name + ".key")}; }
};

}  // namespace tessera::test
