// tessera/crypto/tls.hpp — mutual TLS 1.3 contexts for hub and agent.
//
// Both sides present a certificate and verify the other's against the one CA they are given (never the
// system store). TLS 1.3 only: no fallback to older versions. The hub requires a client certificate
// with clientAuth usage, checks it against the CA's CRL, and disables session tickets so that every
// connection is fully verified (a ticket would let a since-revoked device resume). The agent requires
// serverAuth usage and that the hub's certificate names the host it dialled (DNS or IP SAN).
// OpenSSL stays inside crypto/: net/ and hub/ hold Asio's wrappers of its handles, and hand those
// handles only to the functions here (the context to Asio's ssl::context, which adopts a reference; a
// connection's, after its handshake, to the peer_* functions and describe_handshake_failure).
//
//   auto ctx = crypto::make_hub_tls({.ca_cert = "pki/ca.pem", .cert = "pki/hub.pem",
//                                    .key = "pki/hub.key", .crl = "pki/ca.crl"});
//   if (!ctx) return fail(ctx.error());
//   net::server srv(io, ctx.value(), cfg);                        // see tessera/net/server.hpp
//   // after a handshake, the device id comes from the peer certificate:
//   auto peer = crypto::peer_device(stream.native_handle());      // {.id = "pi-07", .serial = "1f..."}
//   // on the hub's operator endpoint (the same context), the role is the operator's:
//   auto who = crypto::peer_operator(stream.native_handle());     // "alice"
//   // or from a certificate file's bytes:
//   auto id = crypto::device_id_from_der(cert_der);               // "pi-07"
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "tessera/core/base/error.hpp"

// OpenSSL's connection and context, by their struct names: Asio's ssl::stream::native_handle() and
// ssl::context's native_handle_type are pointers to these. Their definitions stay in crypto's sources.
struct ssl_st;
struct ssl_ctx_st;

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
  // The SSL_CTX*; the context keeps ownership.
  [[nodiscard]] ssl_ctx_st* native_handle() const noexcept { return static_cast<ssl_ctx_st*>(handle_.get()); }
  // Like native_handle() but adds a reference the caller must release (Asio's ssl::context adopts it:
  // net::adopt_tls in tessera/net/tls_adopt.hpp).
  [[nodiscard]] ssl_ctx_st* native_handle_add_ref() const noexcept;

  explicit tls_context(std::shared_ptr<void> handle) : handle_(std::move(handle)) {}

 private:
  std::shared_ptr<void> handle_;
};

// Its own certificate is checked against files.ca_cert (chain, dates, purpose) unless `own` is skip:
// a hub reloading its revocation list applies it even after its own certificate expired.
enum class own_certificate { check, skip };
[[nodiscard]] core::result<tls_context> make_hub_tls(const hub_tls_files& files, own_certificate own = own_certificate::check);
[[nodiscard]] core::result<tls_context> make_agent_tls(const agent_tls_files& files);

// The device id of a DER certificate: the URI SAN "urn:tessera:device:<id>", which must agree with the
// subject CN. errc::no_device_id if absent or inconsistent (an operator certificate is named as such).
[[nodiscard]] core::result<std::string> device_id_from_der(std::span<const std::uint8_t> der);
// The operator name of a DER certificate: the URI SAN "urn:tessera:operator:<name>", agreeing with the
// CN, and no device URI. errc::not_operator otherwise (a device certificate is named as such).
[[nodiscard]] core::result<std::string> operator_name_from_der(std::span<const std::uint8_t> der);

// ---- a connection after its handshake; `ssl` is its native handle, never null ----

// The device a connection's peer certificate names, and that certificate's serial (lowercase hex):
// the identity a HELLO must match, never what the peer claims. errc::no_device_id if there is no
// certificate or it names no single device.
struct tls_device_peer {
  std::string id;
  std::string serial;
};
[[nodiscard]] core::result<tls_device_peer> peer_device(ssl_st* ssl);
// The operator a connection's peer certificate names; errc::not_operator without a certificate or with
// one that is not an operator's (operator_name_from_der).
[[nodiscard]] core::result<std::string> peer_operator(ssl_st* ssl);

// Why a handshake failed, as far as OpenSSL can tell. The labels are short and bounded (the hub counts
// failures by them); each is empty when OpenSSL's codes name nothing more specific.
struct tls_handshake_failure {
  std::string verify_error;       // the peer certificate's verification error, OpenSSL's text
  std::string_view verify_label;  // the same as a label: "certificate_revoked", "unknown_ca", "crl_unusable", ...
  std::string_view error_label;   // the handshake error's reason: "no_certificate", "protocol_version", "not_tls"
  // A sentence for the operator, naming both sides' certificates where they are the cause (subjects,
  // issuers, end dates, the name dialled against the names carried); empty when OpenSSL names nothing
  // more than its own text.
  std::string explanation;
};
// `openssl_error`: the handshake's error code when it is OpenSSL's (Asio's ssl category), else 0.
[[nodiscard]] tls_handshake_failure describe_handshake_failure(ssl_st* ssl, unsigned long openssl_error);

}  // namespace tessera::crypto
