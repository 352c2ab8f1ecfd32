#include "tessera/crypto/tls.hpp"

#include <arpa/inet.h>

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <openssl/err.h>
#include <openssl/x509_vfy.h>

#include "ossl.hpp"
#include "tessera/crypto/pki.hpp"
#include "tls_parts.hpp"

namespace tessera::crypto {
namespace {

using namespace detail;

// A file a TLS field names: there and readable, or an error naming the field (OpenSSL's own words for
// a missing file are an error stack without it).
core::result<void> readable(std::string_view field, const std::filesystem::path& p) {
  if (p.empty()) return make_error(errc::invalid_argument, std::string(field) + " is empty: it names a PEM file");
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec))
    return make_error(errc::io, std::string(field) + ": " + p.string() + ": " + (std::filesystem::exists(p, ec) ? "not a file" : "no such file"));
  if (std::FILE* f = std::fopen(p.c_str(), "rb")) {
    std::fclose(f);
    return {};
  }
  return make_error(errc::io, std::string(field) + ": " + p.string() + ": cannot be read (its permissions?)");
}

// This side's own certificate against the CA it trusts (and its own purpose): one that the CA did not
// sign, or that expired, is refused here, where it can be named, rather than by every peer.
core::result<void> check_own_certificate(SSL_CTX* ctx, const std::filesystem::path& cert, const std::filesystem::path& ca, int purpose) {
  X509* own = SSL_CTX_get0_certificate(ctx);
  if (own == nullptr) return make_error(errc::bad_format, "tls.cert: " + cert.string() + " holds no certificate");
  using store_ctx_ptr = std::unique_ptr<X509_STORE_CTX, decltype([](X509_STORE_CTX* c) { X509_STORE_CTX_free(c); })>;
  store_ctx_ptr check(X509_STORE_CTX_new());
  STACK_OF(X509)* chain = nullptr;
  SSL_CTX_get0_chain_certs(ctx, &chain);
  if (!check || X509_STORE_CTX_init(check.get(), SSL_CTX_get_cert_store(ctx), own, chain) != 1) return openssl_error("check tls.cert");
  X509_STORE_CTX_set_purpose(check.get(), purpose);
  X509_VERIFY_PARAM_clear_flags(X509_STORE_CTX_get0_param(check.get()), X509_V_FLAG_CRL_CHECK);  // the CRL comes after
  if (X509_verify_cert(check.get()) == 1) return {};
  const int why = X509_STORE_CTX_get_error(check.get());
  return make_error(errc::auth_failed, "tls.cert " + cert.string() + " (" + describe(own) + ") does not verify against tls.ca " + ca.string() +
                                           ": " + X509_verify_cert_error_string(why) +
                                           (why == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY || why == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT
                                                ? " (it was issued by another CA: every peer would refuse it)"
                                                : ""));
}

int keep_failed_certificate(int ok, X509_STORE_CTX* store) {
  if (ok == 1) return ok;
  auto* ssl = static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  X509* leaf = X509_STORE_CTX_get0_cert(store);
  if (ssl != nullptr && leaf != nullptr && SSL_get_ex_data(ssl, failed_certificate_index()) == nullptr && X509_up_ref(leaf) == 1 &&
      SSL_set_ex_data(ssl, failed_certificate_index(), leaf) != 1)
    X509_free(leaf);
  return ok;
}

core::result<ssl_ctx_ptr> base_context(const std::filesystem::path& ca_cert, const std::filesystem::path& cert,
                                       const std::filesystem::path& key, int purpose, own_certificate own = own_certificate::check) {
  ssl_ctx_ptr ctx(SSL_CTX_new(TLS_method()));
  if (!ctx) return openssl_error("SSL_CTX_new");
  // TLS 1.3 only: both bounds pinned, so there is no version to fall back to.
  if (SSL_CTX_set_min_proto_version(ctx.get(), TLS1_3_VERSION) != 1 ||
      SSL_CTX_set_max_proto_version(ctx.get(), TLS1_3_VERSION) != 1)
    return openssl_error("pin TLS 1.3");
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);

  TESSERA_TRY(readable("tls.ca", ca_cert));
  TESSERA_TRY(readable("tls.cert", cert));
  TESSERA_TRY(readable("tls.key", key));
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), cert.c_str()) != 1)
    return openssl_error("tls.cert: " + cert.string() + " is not a PEM certificate");
  const auto mismatch = [&] {
    ERR_clear_error();
    return make_error(errc::invalid_argument, "tls.key " + key.string() + " is not the key of tls.cert " + cert.string());
  };
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), key.c_str(), SSL_FILETYPE_PEM) != 1) {
    if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) return mismatch();
    return openssl_error("tls.key: " + key.string() + " is not a PEM private key");
  }
  if (SSL_CTX_check_private_key(ctx.get()) != 1) return mismatch();
  // Only our CA is trusted: no default verify paths are loaded.
  if (SSL_CTX_load_verify_locations(ctx.get(), ca_cert.c_str(), nullptr) != 1)
    return openssl_error("tls.ca: " + ca_cert.string() + " is not a PEM certificate");
  if (own == own_certificate::check)
    TESSERA_TRY(check_own_certificate(ctx.get(), cert, ca_cert, purpose == X509_PURPOSE_SSL_CLIENT ? X509_PURPOSE_SSL_SERVER : X509_PURPOSE_SSL_CLIENT));
  // The peer must hold the matching extended key usage (clientAuth for devices, serverAuth for the
  // hub), so a device certificate cannot impersonate the hub and vice versa.
  if (SSL_CTX_set_purpose(ctx.get(), purpose) != 1) return openssl_error("set purpose");
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, keep_failed_certificate);
  SSL_CTX_set_verify_depth(ctx.get(), 2);
  return ctx;
}

tls_context wrap(ssl_ctx_ptr ctx) {
  return tls_context(std::shared_ptr<void>(ctx.release(), [](void* p) { SSL_CTX_free(static_cast<SSL_CTX*>(p)); }));
}

}  // namespace

ssl_ctx_st* tls_context::native_handle_add_ref() const noexcept {
  if (!handle_) return nullptr;
  SSL_CTX_up_ref(native_handle());
  return native_handle();
}

// CRL_CHECK: the peer's serial is looked up in the CA's CRL, whose signature and dates are verified;
// a missing or stale CRL fails closed.
static core::result<void> check_against(SSL_CTX* c, const std::filesystem::path& crl_path) {
  TESSERA_TRY(readable("tls.crl", crl_path));
  auto crl = read_crl(crl_path);
  TESSERA_TRY(crl);
  X509_STORE* store = SSL_CTX_get_cert_store(c);
  if (X509_STORE_add_crl(store, crl.value().get()) != 1) return openssl_error("add CRL " + crl_path.string());
  if (X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK) != 1) return openssl_error("CRL check flag");
  return {};
}

core::result<tls_context> make_hub_tls(const hub_tls_files& files, own_certificate own) {
  auto ctx = base_context(files.ca_cert, files.cert, files.key, X509_PURPOSE_SSL_CLIENT, own);
  TESSERA_TRY(ctx);
  SSL_CTX* c = ctx.value().get();
  TESSERA_TRY(check_against(c, files.crl));
  // No tickets and no session cache: every connection presents and verifies a certificate against the
  // current CRL.
  SSL_CTX_set_options(c, SSL_OP_NO_TICKET);
  SSL_CTX_set_num_tickets(c, 0);
  SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
  return wrap(std::move(ctx).value());
}

core::result<tls_context> make_agent_tls(const agent_tls_files& files) {
  if (files.hub_name.empty()) return make_error(errc::invalid_argument, "hub name is required");
  auto ctx = base_context(files.ca_cert, files.cert, files.key, X509_PURPOSE_SSL_SERVER);
  TESSERA_TRY(ctx);
  X509_VERIFY_PARAM* param = SSL_CTX_get0_param(ctx.value().get());
  unsigned char ip[16];
  const bool is_ip = inet_pton(AF_INET, files.hub_name.c_str(), ip) == 1 ||
                     inet_pton(AF_INET6, files.hub_name.c_str(), ip) == 1;
  if (is_ip) {
    if (X509_VERIFY_PARAM_set1_ip_asc(param, files.hub_name.c_str()) != 1) return openssl_error("hub IP");
  } else {
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (X509_VERIFY_PARAM_set1_host(param, files.hub_name.c_str(), files.hub_name.size()) != 1)
      return openssl_error("hub name");
  }
  if (!files.crl.empty()) TESSERA_TRY(check_against(ctx.value().get(), files.crl));
  return wrap(std::move(ctx).value());
}

namespace {

// The Tessera roles a certificate names in its URI SANs, and its subject CN.
struct named_roles {
  std::vector<std::string> devices, operators;
  std::string common_name;
};

// From the certificate OpenSSL already parsed in the handshake: decoding its DER again costs OpenSSL 3's
// key decoders, most of the hub's CPU for a handshake.
named_roles roles_of(const X509* cert) {
  using names_ptr = std::unique_ptr<GENERAL_NAMES, decltype([](GENERAL_NAMES* n) { GENERAL_NAMES_free(n); })>;
  names_ptr names(static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr)));
  named_roles out;
  if (names) {
    for (int i = 0; i < sk_GENERAL_NAME_num(names.get()); ++i) {
      const GENERAL_NAME* n = sk_GENERAL_NAME_value(names.get(), i);
      if (n->type != GEN_URI) continue;
      const auto* data = reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.uniformResourceIdentifier));
      std::string_view uri(data, static_cast<std::size_t>(ASN1_STRING_length(n->d.uniformResourceIdentifier)));
      if (uri.starts_with(device_uri_prefix)) out.devices.emplace_back(uri.substr(device_uri_prefix.size()));
      else if (uri.starts_with(operator_uri_prefix)) out.operators.emplace_back(uri.substr(operator_uri_prefix.size()));
    }
  }
  char cn[80] = {};
  const int n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
  if (n >= 0) out.common_name.assign(cn, static_cast<std::size_t>(n));
  return out;
}

core::result<named_roles> roles_of(std::span<const std::uint8_t> der) {
  const unsigned char* p = der.data();
  x509_ptr cert(d2i_X509(nullptr, &p, static_cast<long>(der.size())));
  if (!cert) return openssl_error("parse peer certificate");
  return roles_of(cert.get());
}

core::result<std::string> device_id_of(const named_roles& roles) {
  if (roles.devices.empty() && roles.operators.size() == 1 && valid_device_id(roles.operators[0]))
    return make_error(errc::no_device_id, "peer certificate is operator " + roles.operators[0] +
                                              "'s: operator certificates are for the hub's operator endpoint, not for devices");
  if (roles.devices.size() != 1 || !roles.operators.empty() || !valid_device_id(roles.devices[0]))
    return make_error(errc::no_device_id, "peer certificate carries no single valid device id URI");
  if (roles.common_name != roles.devices[0])
    return make_error(errc::no_device_id, "peer certificate's common name differs from its device id");
  return roles.devices[0];
}

core::result<std::string> operator_name_of(const named_roles& roles) {
  if (roles.operators.empty() && roles.devices.size() == 1 && valid_device_id(roles.devices[0]))
    return make_error(errc::not_operator, "peer certificate is device " + roles.devices[0] +
                                              "'s: the operator endpoint takes operator certificates only (tessera-pki issue-operator)");
  if (roles.operators.size() != 1 || !roles.devices.empty() || !valid_device_id(roles.operators[0]))
    return make_error(errc::not_operator, "peer certificate carries no single valid operator URI (tessera-pki issue-operator)");
  if (roles.common_name != roles.operators[0])
    return make_error(errc::not_operator, "peer certificate's common name differs from its operator name");
  return roles.operators[0];
}

}  // namespace

core::result<std::string> device_id_from_der(std::span<const std::uint8_t> der) {
  TESSERA_ASSIGN_OR_RETURN(const named_roles roles, roles_of(der));
  return device_id_of(roles);
}

core::result<std::string> operator_name_from_der(std::span<const std::uint8_t> der) {
  TESSERA_ASSIGN_OR_RETURN(const named_roles roles, roles_of(der));
  return operator_name_of(roles);
}

core::result<tls_device_peer> peer_device(ssl_st* ssl) {
  const X509* cert = SSL_get0_peer_certificate(ssl);
  if (cert == nullptr) return make_error(errc::no_device_id, "no peer certificate");
  tls_device_peer out;
  TESSERA_ASSIGN_OR_RETURN(out.id, device_id_of(roles_of(cert)));
  out.serial = serial_hex(X509_get0_serialNumber(cert));
  if (out.serial.empty()) return make_error(errc::no_device_id, "peer certificate's serial number cannot be read");
  return out;
}

core::result<std::string> peer_operator(ssl_st* ssl) {
  const X509* cert = SSL_get0_peer_certificate(ssl);
  if (cert == nullptr) return make_error(errc::not_operator, "no client certificate");
  return operator_name_of(roles_of(cert));
}

}  // namespace tessera::crypto
