// tessera/crypto/pki.hpp — the certificate authority behind `tessera-pki`.
//
// One CA (ECDSA P-256, self-signed) issues a hub certificate (DNS and IP subject alternative names,
// serverAuth), one certificate per device (the id as subject CN and as the URI SAN
// "urn:tessera:device:<id>", clientAuth) and operator certificates for the hub's operator endpoint (the
// name as CN and as the URI SAN "urn:tessera:operator:<name>", clientAuth). The URI is the role: the hub
// refuses an operator certificate on the device port and a device certificate on the operator port. Revocation is a standard X.509 CRL signed by the CA, which the
// hub loads into its TLS context. Everything is done with OpenSSL's API; nothing shells out.
// Private keys are written owner-read-only (0400); no output file is replaced unless `force` is set,
// and all outputs are checked before the first one is written, so a refused command writes nothing.
//
//   auto ca = crypto::ca_files::in("pki");                         // pki/ca.pem, ca.key, ca.crl
//   crypto::init_ca(ca, {.common_name = "Tessera CA", .valid_days = 3650}, false);
//   crypto::issue_options hub{.common_name = "hub", .dns_names = {"localhost"}, .ip_addresses = {"127.0.0.1"}};
//   crypto::issue(ca, hub, {"pki/hub.pem", "pki/hub.key"}, false);
//   crypto::issue_options dev{.device_id = "pi-07"};
//   auto serial = crypto::issue(ca, dev, {"pki/pi-07.pem", "pki/pi-07.key"}, false);
//   crypto::revoke(ca, serial.value());                             // adds it to pki/ca.crl
//   crypto::issue(ca, {.operator_name = "alice"}, {"pki/operator-alice.pem", "pki/operator-alice.key"}, false);
#pragma once

#include <cstdint>
#include <filesystem>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/base/error.hpp"

namespace tessera::crypto {

// The URI SAN prefix that marks a device certificate; the id follows it.
inline constexpr std::string_view device_uri_prefix = "urn:tessera:device:";
// The URI SAN prefix that marks an operator certificate; the operator's name follows it.
inline constexpr std::string_view operator_uri_prefix = "urn:tessera:operator:";

struct ca_files {
  std::filesystem::path cert{};  // PEM certificate (what hub and agents trust)
  std::filesystem::path key{};   // PEM PKCS#8 private key, mode 0400
  std::filesystem::path crl{};   // PEM CRL, re-signed by every revoke
  [[nodiscard]] static ca_files in(const std::filesystem::path& dir);
};

struct cert_files {
  std::filesystem::path cert{};
  std::filesystem::path key{};
};

struct ca_options {
  std::string common_name = "Tessera CA";
  std::int64_t valid_days = 3650;
};

// A hub certificate (dns_names/ip_addresses), a device one (device_id set) or an operator one
// (operator_name set): exactly one kind.
struct issue_options {
  std::string common_name{};                 // defaults to the device id, or "tessera-hub"
  std::vector<std::string> dns_names{};      // hub only
  std::vector<std::string> ip_addresses{};   // hub only, dotted IPv4 or IPv6 text
  std::string device_id{};                   // [A-Za-z0-9._-]{1,64}; non-empty makes a device certificate
  std::string operator_name{};               // [A-Za-z0-9._-]{1,64}; non-empty makes an operator certificate
  std::int64_t valid_days = 365;
  // Start of validity relative to now, in seconds. The default allows for clocks a little behind the
  // CA's; tests use a large negative value with a short validity to make an already-expired certificate.
  std::int64_t not_before_offset_s = -300;
};

// A device id is what the hub keys its registry with and what goes into a URI: keep it plain. Operator
// names follow the same rule.
[[nodiscard]] bool valid_device_id(std::string_view id) noexcept;

[[nodiscard]] core::result<void> init_ca(const ca_files& ca, const ca_options& options, bool force);
// Returns the new certificate's serial number as lowercase hex.
[[nodiscard]] core::result<std::string> issue(const ca_files& ca, const issue_options& options,
                                              const cert_files& out, bool force);
// Adds a serial (hex, as printed by issue or `openssl x509 -serial`) to the CA's CRL.
[[nodiscard]] core::result<void> revoke(const ca_files& ca, std::string_view serial_hex);
// The serial of a PEM certificate file, lowercase hex.
[[nodiscard]] core::result<std::string> certificate_serial(const std::filesystem::path& cert_pem);
// The serial of a DER certificate (a TLS peer's), lowercase hex.
[[nodiscard]] core::result<std::string> certificate_serial_der(std::span<const std::uint8_t> der);
// The serials a CRL revokes, lowercase hex, after checking that `ca_cert` signed it (errc::bad_format
// naming the file otherwise): a file anyone could write revokes nothing.
[[nodiscard]] core::result<std::set<std::string>> revoked_serials(const std::filesystem::path& crl_pem,
                                                                  const std::filesystem::path& ca_cert);
// The DER encoding of a PEM certificate file (what a TLS peer presents).
[[nodiscard]] core::result<std::vector<std::uint8_t>> certificate_der(const std::filesystem::path& cert_pem);

}  // namespace tessera::crypto
