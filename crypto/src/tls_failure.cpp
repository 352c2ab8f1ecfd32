// Why a TLS handshake failed, in a sentence for the operator (tls.hpp: describe_handshake_failure):
// the peer's certificate as this side checked it, or this side's as the peer's alert judged it, with
// a short label for counting.
#include <string>
#include <string_view>

#include <openssl/err.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include "ossl.hpp"
#include "tessera/crypto/tls.hpp"
#include "tls_parts.hpp"

namespace tessera::crypto {
namespace detail {

// One line about a certificate: its subject and when it stops being valid.
std::string describe(X509* cert) {
  std::string out = "?";
  if (char* s = X509_NAME_oneline(X509_get_subject_name(cert), nullptr, 0)) {
    out = s;
    OPENSSL_free(s);
  }
  if (bio_ptr b(BIO_new(BIO_s_mem())); b && ASN1_TIME_print(b.get(), X509_get0_notAfter(cert)) == 1) {
    char* data = nullptr;
    const long n = BIO_get_mem_data(b.get(), &data);
    out += ", valid until " + std::string(data, static_cast<std::size_t>(n));
  }
  return out;
}

// Where a connection keeps the peer certificate that failed verification: OpenSSL does not keep it in
// the session then, and describe_handshake_failure names it.
int failed_certificate_index() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr,
                                                [](void*, void* cert, CRYPTO_EX_DATA*, int, long, void*) { X509_free(static_cast<X509*>(cert)); });
  return index;
}

}  // namespace detail

namespace {

using namespace detail;

std::string_view verify_label(long verify) noexcept {
  switch (verify) {
    case X509_V_OK: return {};
    case X509_V_ERR_CERT_REVOKED: return "certificate_revoked";
    case X509_V_ERR_CERT_HAS_EXPIRED: return "certificate_expired";
    case X509_V_ERR_CERT_NOT_YET_VALID: return "certificate_not_yet_valid";
    case X509_V_ERR_INVALID_PURPOSE: return "wrong_purpose";
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_CERT_SIGNATURE_FAILURE: return "unknown_ca";
    case X509_V_ERR_UNABLE_TO_GET_CRL:
    case X509_V_ERR_CRL_HAS_EXPIRED:
    case X509_V_ERR_CRL_NOT_YET_VALID: return "crl_unusable";
    default: return "certificate_invalid";
  }
}

std::string_view error_label(unsigned long openssl_error) noexcept {
  if (ERR_GET_LIB(openssl_error) != ERR_LIB_SSL) return {};
  switch (ERR_GET_REASON(openssl_error)) {
    case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE: return "no_certificate";
    // The peer's alert about this side's certificate.
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA: return "peer_distrusts_ca";
    case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED: return "peer_says_expired";
    case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED: return "peer_says_revoked";
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN: return "peer_refused_certificate";
    case SSL_R_UNSUPPORTED_PROTOCOL:
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_NO_PROTOCOLS_AVAILABLE:
    case SSL_R_VERSION_TOO_LOW: return "protocol_version";
    case SSL_R_HTTP_REQUEST:
    case SSL_R_HTTPS_PROXY_REQUEST: return "not_tls";
    default: return {};
  }
}


std::string name_text(const X509_NAME* name) {
  std::string out = "?";
  if (char* s = X509_NAME_oneline(name, nullptr, 0)) {
    out = s;
    OPENSSL_free(s);
  }
  return out;
}

// The DNS names and addresses a certificate is for.
std::string names_of(X509* cert) {
  using names_ptr = std::unique_ptr<GENERAL_NAMES, decltype([](GENERAL_NAMES* n) { GENERAL_NAMES_free(n); })>;
  names_ptr names(static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr)));
  std::string out;
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names.get(), i);
    std::string one;
    if (n->type == GEN_DNS) {
      one.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.dNSName)), static_cast<std::size_t>(ASN1_STRING_length(n->d.dNSName)));
    } else if (n->type == GEN_IPADD && ASN1_STRING_length(n->d.iPAddress) == 4) {
      const unsigned char* a = ASN1_STRING_get0_data(n->d.iPAddress);
      one = std::to_string(a[0]) + "." + std::to_string(a[1]) + "." + std::to_string(a[2]) + "." + std::to_string(a[3]);
    } else if (n->type == GEN_IPADD) {
      one = "an IPv6 address";
    }
    if (!one.empty()) out += (out.empty() ? "" : ", ") + one;
  }
  return out.empty() ? "no name" : out;
}

// The CAs this side trusts (its tls.ca), as " (subject, ...)"; empty if it cannot tell.
std::string trusted_names(ssl_st* ssl) {
  X509_STORE* store = SSL_CTX_get_cert_store(SSL_get_SSL_CTX(ssl));
  STACK_OF(X509_OBJECT)* objects = store != nullptr ? X509_STORE_get0_objects(store) : nullptr;
  std::string out;
  for (int i = 0; objects != nullptr && i < sk_X509_OBJECT_num(objects); ++i)
    if (X509* ca = X509_OBJECT_get0_X509(sk_X509_OBJECT_value(objects, i)))
      out += (out.empty() ? "" : ", ") + name_text(X509_get_subject_name(ca));
  return out.empty() ? out : " (" + out + ")";
}

// The name this side dialled (a client's hub_name), as its verification parameters hold it.
std::string dialled(ssl_st* ssl) {
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  if (const char* host = X509_VERIFY_PARAM_get0_host(param, 0)) return host;
  if (char* ip = X509_VERIFY_PARAM_get1_ip_asc(param)) {
    std::string out = ip;
    OPENSSL_free(ip);
    return out;
  }
  return "?";
}

// What went wrong with the peer's certificate, which this side checked.
std::string peer_explanation(ssl_st* ssl, long verify, X509* peer) {
  const std::string who = "the peer's certificate (" + describe(peer) + ")";
  switch (verify) {
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
      return who + " is for " + names_of(peer) + ", not for " + dialled(ssl) + ", the name this side dialled (hub_name)";
    case X509_V_ERR_CERT_HAS_EXPIRED: return who + " has expired";
    case X509_V_ERR_CERT_NOT_YET_VALID: return who + " is not valid yet (a clock behind?)";
    case X509_V_ERR_CERT_REVOKED: return who + " is revoked by this side's tls.crl";
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
      return who + " was issued by " + name_text(X509_get_issuer_name(peer)) + ", not by this side's tls.ca" + trusted_names(ssl);
    default: return who + " does not verify: " + X509_verify_cert_error_string(verify);
  }
}

// What the peer said of this side's certificate, in its alert.
std::string own_explanation(ssl_st* ssl, unsigned long openssl_error) {
  X509* own = SSL_get_certificate(ssl);
  if (own == nullptr || ERR_GET_LIB(openssl_error) != ERR_LIB_SSL) return {};
  const std::string mine = "this side's certificate (" + describe(own) + ")";
  switch (ERR_GET_REASON(openssl_error)) {
    // OpenSSL sends the same alerts when the peer's own revocation list is out of date or unusable.
    case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED: return "the peer refused " + mine + ": it has expired (or its own revocation list is out of date)";
    case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED: return "the peer refused " + mine + ": it is revoked";
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
      return "the peer does not trust " + name_text(X509_get_issuer_name(own)) + ", which issued " + mine +
             ": the two sides' tls.ca differ (or the peer cannot use its revocation list)";
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN: return "the peer refused " + mine;
    default: return {};
  }
}

}  // namespace

tls_handshake_failure describe_handshake_failure(ssl_st* ssl, unsigned long openssl_error) {
  tls_handshake_failure out;
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) out.verify_error = X509_verify_cert_error_string(verify);
  out.verify_label = verify_label(verify);
  out.error_label = error_label(openssl_error);
  X509* peer = SSL_get0_peer_certificate(ssl);
  if (peer == nullptr) peer = static_cast<X509*>(SSL_get_ex_data(ssl, failed_certificate_index()));
  if (verify != X509_V_OK && peer != nullptr) out.explanation = peer_explanation(ssl, verify, peer);
  else if (openssl_error != 0) out.explanation = own_explanation(ssl, openssl_error);
  return out;
}

}  // namespace tessera::crypto
