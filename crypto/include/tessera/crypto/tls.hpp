// tessera/crypto/tls.hpp — mutual TLS 1.3 contexts for hub and agent.
//
// Both sides present a certificate and verify the other's against the one CA they are given (never the
// system store). TLS 1.3 only: no fallback to older versions. The hub requires a client certificate
// with clientAuth usage, checks it against the CA's CRL, and disables session tickets so that every
// connection is fully verified (a ticket would let a since-revoked device resume). The agent requires
// serverAuth usage and that the hub's certificate names the host it dialled (DNS or IP SAN).
// The OpenSSL SSL_CTX stays inside: net/ reaches it through native_handle() only in its sources.
//
//   auto ctx = crypto::make_hub_tls({.ca_cert = "pki/ca.pem", .cert = "pki/hub.pem",
//                                    .key = "pki/hub.key", .crl = "pki/ca.crl"});
//   if (!ctx) return fail(ctx.error());
//   net::server srv(io, ctx.value(), cfg);                        // see tessera/net/server.hpp
//   // after a handshake, the device id comes from the peer certificate:
//   auto id = crypto::device_id_from_der(peer_cert_der);          // "pi-07"
//   // on the hub's operator endpoint (the same context), the role is the operator's:
//   auto who = crypto::operator_name_from_der(peer_cert_der);     // "alice"
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

#include "tessera/core/base/error.hpp"

namespace tessera::crypto {

struct hub_tls_files {
  std::filesystem::path ca_cert{};
  std::filesystem::path cert{};
  std::filesystem::path key{};
  std::filesystem::path crl{};  // required: a hub without a revocation list would accept revoked devices
};

struct agent_tls_files {
  std::filesystem::path ca_cert{};
  std::filesystem::path cert{};
  std::filesystem::path key{};
  std::string hub_name{};  // DNS name or IP literal the hub's certificate must carry
  std::filesystem::path crl{};  // optional: the CA's revocation list, checked against the hub's certificate
};

// An immutable, shareable TLS configuration (an SSL_CTX underneath). Cheap to copy.
class tls_context {
 public:
  tls_context() = default;
  [[nodiscard]] bool valid() const noexcept { return handle_ != nullptr; }
  // The SSL_CTX*, for net/'s sources only. The context keeps ownership.
  [[nodiscard]] void* native_handle() const noexcept { return handle_.get(); }
  // Like native_handle() but adds a reference the caller must release (Asio's ssl::context adopts it).
  [[nodiscard]] void* native_handle_add_ref() const noexcept;

  explicit tls_context(std::shared_ptr<void> handle) : handle_(std::move(handle)) {}

 private:
  std::shared_ptr<void> handle_;
};

[[nodiscard]] core::result<tls_context> make_hub_tls(const hub_tls_files& files);
[[nodiscard]] core::result<tls_context> make_agent_tls(const agent_tls_files& files);

// The device id of a DER certificate: the URI SAN "urn:tessera:device:<id>", which must agree with the
// subject CN. errc::no_device_id if absent or inconsistent (an operator certificate is named as such).
[[nodiscard]] core::result<std::string> device_id_from_der(std::span<const std::uint8_t> der);
// The operator name of a DER certificate: the URI SAN "urn:tessera:operator:<name>", agreeing with the
// CN, and no device URI. errc::not_operator otherwise (a device certificate is named as such).
[[nodiscard]] core::result<std::string> operator_name_from_der(std::span<const std::uint8_t> der);

}  // namespace tessera::crypto
