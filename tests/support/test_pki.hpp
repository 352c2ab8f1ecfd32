// A throwaway PKI for a federation on 127.0.0.1: a CA, the hub's certificate and device certificates,
// laid out in one folder as tessera-pki lays them out (ca.pem, ca.key, ca.crl, hub.pem, hub.key,
// <id>.pem, <id>.key), and the TLS contexts built from them.
//
//   auto pki = testing::test_pki::create(dir / "pki");           // CA and hub certificate
//   if (!pki) fail(pki.error().message);
//   (void)pki.value().issue_device("device-0");
//   auto tls = pki.value().agent_tls("device-0");                 // result<crypto::tls_context>
//   hub config: pki.value().hub_tls_files()
//
// Or over certificates another tool made: testing::test_pki::in(folder).agent_tls(id).
#pragma once

#include <filesystem>
#include <string>

#include "tessera/core/base/error.hpp"
#include "tessera/crypto/pki.hpp"
#include "tessera/crypto/tls.hpp"

namespace tessera::testing {

class test_pki {
 public:
  // A new CA and a hub certificate for `hub_address` (an IP literal) in `dir`, created if missing.
  [[nodiscard]] static core::result<test_pki> create(const std::filesystem::path& dir, const std::string& hub_address = "127.0.0.1");
  // The certificates already in `dir`; the hub is reached as `hub_address`.
  [[nodiscard]] static test_pki in(const std::filesystem::path& dir, const std::string& hub_address = "127.0.0.1");

  // A device certificate with `device_id` in its subject.
  [[nodiscard]] core::result<void> issue_device(const std::string& device_id) const;
  [[nodiscard]] crypto::cert_files device(const std::string& device_id) const;
  [[nodiscard]] core::result<crypto::tls_context> agent_tls(const std::string& device_id) const;

  [[nodiscard]] const crypto::ca_files& ca() const noexcept { return ca_; }
  [[nodiscard]] const crypto::cert_files& hub() const noexcept { return hub_; }
  [[nodiscard]] crypto::hub_tls_files hub_tls_files() const { return {ca_.cert, hub_.cert, hub_.key, ca_.crl}; }
  [[nodiscard]] const std::filesystem::path& dir() const noexcept { return dir_; }

 private:
  test_pki(std::filesystem::path dir, std::string hub_address);

  std::filesystem::path dir_;
  std::string hub_address_;
  crypto::ca_files ca_;
  crypto::cert_files hub_;
};

}  // namespace tessera::testing
