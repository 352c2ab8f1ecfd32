#include "tessera/crypto/pki.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

#include <openssl/bn.h>
#include <openssl/pem.h>
#include <openssl/rand.h>

#include "ossl.hpp"

namespace tessera::crypto {
namespace {

using namespace detail;

constexpr unsigned k_key_mode = 0400;   // owner-read-only: keys are never edited, only replaced
constexpr unsigned k_cert_mode = 0644;  // certificates and CRLs are public

core::result<pkey_ptr> new_p256_key() {
  pkey_ptr key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  if (!key) return openssl_error("generate ECDSA P-256 key");
  return key;
}

core::result<secret_bytes> key_pem(EVP_PKEY* key) {
  bio_ptr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    return openssl_error("encode private key");
  return bio_secret_contents(bio.get());
}

core::result<std::vector<std::byte>> cert_pem(X509* cert) {
  bio_ptr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return openssl_error("encode certificate");
  return bio_contents(bio.get());
}

core::result<std::vector<std::byte>> crl_pem(X509_CRL* crl) {
  bio_ptr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509_CRL(bio.get(), crl) != 1) return openssl_error("encode CRL");
  return bio_contents(bio.get());
}

// 127 random bits: unique without a serial database, positive as RFC 5280 requires, within 20 octets.
core::result<void> set_random_serial(X509* cert) {
  unsigned char raw[16];
  if (RAND_bytes(raw, sizeof raw) != 1) return openssl_error("RAND_bytes");
  raw[0] &= 0x7f;
  raw[0] |= 0x40;  // never zero, never shorter than 16 octets
  bignum_ptr bn(BN_bin2bn(raw, sizeof raw, nullptr));
  if (!bn || !BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert))) return openssl_error("set serial");
  return {};
}

core::result<void> add_ext(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  x509_ext_ptr ext(X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) return openssl_error(std::string("extension ") + OBJ_nid2sn(nid));
  return {};
}

core::result<void> set_subject(X509* cert, const std::string& common_name) {
  X509_NAME* name = X509_get_subject_name(cert);
  const auto* o = reinterpret_cast<const unsigned char*>("Tessera");
  const auto* cn = reinterpret_cast<const unsigned char*>(common_name.c_str());
  if (X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, o, -1, -1, 0) != 1 ||
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, cn, -1, -1, 0) != 1)
    return openssl_error("subject name");
  return {};
}

core::result<void> set_validity(X509* cert, std::int64_t not_before_offset_s, std::int64_t valid_days) {
  if (valid_days < 1 || valid_days > 36500) return make_error(errc::invalid_argument, "validity must be 1..36500 days");
  if (!X509_gmtime_adj(X509_getm_notBefore(cert), static_cast<long>(not_before_offset_s)) ||
      !X509_time_adj_ex(X509_getm_notAfter(cert), static_cast<int>(valid_days), static_cast<long>(not_before_offset_s),
                        nullptr))
    return openssl_error("validity");
  return {};
}

bool valid_dns_name(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  std::string_view rest = name.starts_with("*.") ? name.substr(2) : name;
  if (rest.empty() || rest.front() == '.' || rest.back() == '.') return false;
  return std::all_of(rest.begin(), rest.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '.';
  });
}

bool valid_ip(const std::string& ip) {
  unsigned char buf[16];
  return inet_pton(AF_INET, ip.c_str(), buf) == 1 || inet_pton(AF_INET6, ip.c_str(), buf) == 1;
}

}  // namespace

ca_files ca_files::in(const std::filesystem::path& dir) {
  return {dir / "ca.pem", dir / "ca.key", dir / "ca.crl"};
}

bool valid_device_id(std::string_view id) noexcept {
  if (id.empty() || id.size() > 64) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_' || c == '.';
  });
}

core::result<void> init_ca(const ca_files& ca, const ca_options& options, bool force) {
  if (options.common_name.empty() || options.common_name.size() > 64)
    return make_error(errc::invalid_argument, "CA common name must be 1..64 characters");
  const std::filesystem::path outs[] = {ca.cert, ca.key, ca.crl};
  TESSERA_TRY(check_outputs(outs, force));

  auto key = new_p256_key();
  TESSERA_TRY(key);
  x509_ptr cert(X509_new());
  if (!cert || X509_set_version(cert.get(), 2) != 1) return openssl_error("new certificate");
  TESSERA_TRY(set_random_serial(cert.get()));
  TESSERA_TRY(set_validity(cert.get(), -300, options.valid_days));
  TESSERA_TRY(set_subject(cert.get(), options.common_name));
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get())) != 1 ||
      X509_set_pubkey(cert.get(), key.value().get()) != 1)
    return openssl_error("CA certificate");
  TESSERA_TRY(add_ext(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
  TESSERA_TRY(add_ext(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign"));
  TESSERA_TRY(add_ext(cert.get(), cert.get(), NID_subject_key_identifier, "hash"));
  if (X509_sign(cert.get(), key.value().get(), EVP_sha256()) <= 0) return openssl_error("sign CA certificate");

  // An empty CRL from day one: the hub checks revocation for every device, so the list must exist.
  x509_crl_ptr crl(X509_CRL_new());
  asn1_time_ptr now(ASN1_TIME_adj(nullptr, std::time(nullptr), 0, 0));
  if (!crl || !now || X509_CRL_set_version(crl.get(), 1) != 1 ||
      X509_CRL_set_issuer_name(crl.get(), X509_get_subject_name(cert.get())) != 1 ||
      X509_CRL_set1_lastUpdate(crl.get(), now.get()) != 1 ||
      X509_CRL_set1_nextUpdate(crl.get(), X509_get0_notAfter(cert.get())) != 1 ||
      X509_CRL_sign(crl.get(), key.value().get(), EVP_sha256()) <= 0)
    return openssl_error("initial CRL");

  auto kp = key_pem(key.value().get());
  TESSERA_TRY(kp);
  auto cp = cert_pem(cert.get());
  TESSERA_TRY(cp);
  auto lp = crl_pem(crl.get());
  TESSERA_TRY(lp);
  TESSERA_TRY(write_file(ca.key, kp.value(), k_key_mode, force));
  TESSERA_TRY(write_file(ca.cert, cp.value(), k_cert_mode, force));
  return write_file(ca.crl, lp.value(), k_cert_mode, force);
}

core::result<std::string> issue(const ca_files& ca, const issue_options& options, const cert_files& out, bool force) {
  const bool device = !options.device_id.empty();
  const bool op = !options.operator_name.empty();
  std::string san;
  if (device && op) return make_error(errc::invalid_argument, "a certificate is a device's or an operator's, not both");
  if (op) {
    if (!valid_device_id(options.operator_name))
      return make_error(errc::invalid_argument, "operator name '" + options.operator_name + "' must match [A-Za-z0-9._-]{1,64}");
    if (!options.dns_names.empty() || !options.ip_addresses.empty())
      return make_error(errc::invalid_argument, "an operator certificate carries no DNS or IP names");
    san = "URI:" + std::string(operator_uri_prefix) + options.operator_name;
  } else if (device) {
    if (!valid_device_id(options.device_id))
      return make_error(errc::invalid_argument, "device id '" + options.device_id + "' must match [A-Za-z0-9._-]{1,64}");
    if (!options.dns_names.empty() || !options.ip_addresses.empty())
      return make_error(errc::invalid_argument, "a device certificate carries no DNS or IP names");
    san = "URI:" + std::string(device_uri_prefix) + options.device_id;
  } else {
    for (const auto& d : options.dns_names) {
      if (!valid_dns_name(d)) return make_error(errc::invalid_argument, "bad DNS name '" + d + "'");
      san += (san.empty() ? "" : ",") + std::string("DNS:") + d;
    }
    for (const auto& ip : options.ip_addresses) {
      if (!valid_ip(ip)) return make_error(errc::invalid_argument, "bad IP address '" + ip + "'");
      san += (san.empty() ? "" : ",") + std::string("IP:") + ip;
    }
    if (san.empty()) return make_error(errc::invalid_argument, "a hub certificate needs at least one DNS or IP name");
  }
  const std::string cn = !options.common_name.empty() ? options.common_name
                         : device                      ? options.device_id
                         : op                          ? options.operator_name
                                                       : "tessera-hub";
  if (cn.size() > 64) return make_error(errc::invalid_argument, "common name over 64 characters");
  if (device && cn != options.device_id)
    return make_error(errc::invalid_argument, "a device certificate's common name is its id");
  if (op && cn != options.operator_name)
    return make_error(errc::invalid_argument, "an operator certificate's common name is its name");

  const std::filesystem::path outs[] = {out.cert, out.key};
  TESSERA_TRY(check_outputs(outs, force));
  auto ca_cert = read_cert(ca.cert);
  TESSERA_TRY(ca_cert);
  auto ca_key = read_key(ca.key);
  TESSERA_TRY(ca_key);
  if (X509_check_private_key(ca_cert.value().get(), ca_key.value().get()) != 1)
    return make_error(errc::invalid_argument, ca.key.string() + " is not the key of " + ca.cert.string());

  auto key = new_p256_key();
  TESSERA_TRY(key);
  x509_ptr cert(X509_new());
  if (!cert || X509_set_version(cert.get(), 2) != 1) return openssl_error("new certificate");
  TESSERA_TRY(set_random_serial(cert.get()));
  TESSERA_TRY(set_validity(cert.get(), options.not_before_offset_s, options.valid_days));
  TESSERA_TRY(set_subject(cert.get(), cn));
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert.value().get())) != 1 ||
      X509_set_pubkey(cert.get(), key.value().get()) != 1)
    return openssl_error("certificate");
  X509* issuer = ca_cert.value().get();
  TESSERA_TRY(add_ext(cert.get(), issuer, NID_basic_constraints, "critical,CA:FALSE"));
  TESSERA_TRY(add_ext(cert.get(), issuer, NID_key_usage, "critical,digitalSignature"));
  TESSERA_TRY(add_ext(cert.get(), issuer, NID_ext_key_usage, device || op ? "clientAuth" : "serverAuth"));
  TESSERA_TRY(add_ext(cert.get(), issuer, NID_subject_alt_name, san));
  TESSERA_TRY(add_ext(cert.get(), issuer, NID_subject_key_identifier, "hash"));
  TESSERA_TRY(add_ext(cert.get(), issuer, NID_authority_key_identifier, "keyid:always"));
  if (X509_sign(cert.get(), ca_key.value().get(), EVP_sha256()) <= 0) return openssl_error("sign certificate");

  auto kp = key_pem(key.value().get());
  TESSERA_TRY(kp);
  auto cp = cert_pem(cert.get());
  TESSERA_TRY(cp);
  TESSERA_TRY(write_file(out.key, kp.value(), k_key_mode, force));
  TESSERA_TRY(write_file(out.cert, cp.value(), k_cert_mode, force));
  return serial_hex(X509_get0_serialNumber(cert.get()));
}

core::result<void> revoke(const ca_files& ca, std::string_view serial_text) {
  std::string hex(serial_text);
  if (hex.starts_with("0x") || hex.starts_with("0X")) hex.erase(0, 2);
  if (hex.empty() || hex.size() > 40 ||
      !std::all_of(hex.begin(), hex.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }))
    return make_error(errc::invalid_argument, "serial must be 1..40 hex digits");
  BIGNUM* raw = nullptr;
  if (BN_hex2bn(&raw, hex.c_str()) == 0) return openssl_error("parse serial");
  bignum_ptr bn(raw);
  asn1_integer_ptr serial(BN_to_ASN1_INTEGER(bn.get(), nullptr));
  if (!serial) return openssl_error("serial");

  auto ca_cert = read_cert(ca.cert);
  TESSERA_TRY(ca_cert);
  auto ca_key = read_key(ca.key);
  TESSERA_TRY(ca_key);
  auto crl = read_crl(ca.crl);
  TESSERA_TRY(crl);
  if (X509_CRL_verify(crl.value().get(), X509_get0_pubkey(ca_cert.value().get())) != 1)
    return make_error(errc::bad_format, ca.crl.string() + " is not signed by " + ca.cert.string());

  if (STACK_OF(X509_REVOKED)* list = X509_CRL_get_REVOKED(crl.value().get())) {
    for (int i = 0; i < sk_X509_REVOKED_num(list); ++i) {
      if (ASN1_INTEGER_cmp(X509_REVOKED_get0_serialNumber(sk_X509_REVOKED_value(list, i)), serial.get()) == 0)
        return make_error(errc::already_revoked, "serial " + hex + " is already revoked");
    }
  }
  asn1_time_ptr now(ASN1_TIME_adj(nullptr, std::time(nullptr), 0, 0));
  x509_revoked_ptr entry(X509_REVOKED_new());
  if (!now || !entry || X509_REVOKED_set_serialNumber(entry.get(), serial.get()) != 1 ||
      X509_REVOKED_set_revocationDate(entry.get(), now.get()) != 1)
    return openssl_error("revocation entry");
  if (X509_CRL_add0_revoked(crl.value().get(), entry.get()) != 1) return openssl_error("add revocation");
  entry.release();  // owned by the CRL now
  if (X509_CRL_sort(crl.value().get()) != 1 || X509_CRL_set1_lastUpdate(crl.value().get(), now.get()) != 1 ||
      X509_CRL_sign(crl.value().get(), ca_key.value().get(), EVP_sha256()) <= 0)
    return openssl_error("re-sign CRL");
  auto lp = crl_pem(crl.value().get());
  TESSERA_TRY(lp);
  // The CRL is the one file revoke exists to update: replaced atomically (temporary + rename).
  return write_file(ca.crl, lp.value(), k_cert_mode, true);
}

core::result<std::string> certificate_serial(const std::filesystem::path& cert_pem_path) {
  auto cert = read_cert(cert_pem_path);
  TESSERA_TRY(cert);
  return serial_hex(X509_get0_serialNumber(cert.value().get()));
}

core::result<std::string> certificate_serial_der(std::span<const std::uint8_t> der) {
  const unsigned char* p = der.data();
  x509_ptr cert(d2i_X509(nullptr, &p, static_cast<long>(der.size())));
  if (!cert) return openssl_error("parse certificate");
  return serial_hex(X509_get0_serialNumber(cert.get()));
}

core::result<std::set<std::string>> revoked_serials(const std::filesystem::path& crl_path, const std::filesystem::path& ca_cert_path) {
  auto ca_cert = read_cert(ca_cert_path);
  TESSERA_TRY(ca_cert);
  auto crl = read_crl(crl_path);
  TESSERA_TRY(crl);
  if (X509_CRL_verify(crl.value().get(), X509_get0_pubkey(ca_cert.value().get())) != 1)
    return make_error(errc::bad_format, crl_path.string() + " is not signed by " + ca_cert_path.string());
  std::set<std::string> out;
  if (STACK_OF(X509_REVOKED)* list = X509_CRL_get_REVOKED(crl.value().get()))
    for (int i = 0; i < sk_X509_REVOKED_num(list); ++i) out.insert(serial_hex(X509_REVOKED_get0_serialNumber(sk_X509_REVOKED_value(list, i))));
  return out;
}

core::result<std::vector<std::uint8_t>> certificate_der(const std::filesystem::path& cert_pem_path) {
  auto cert = read_cert(cert_pem_path);
  TESSERA_TRY(cert);
  const int n = i2d_X509(cert.value().get(), nullptr);
  if (n <= 0) return openssl_error("encode DER");
  std::vector<std::uint8_t> der(static_cast<std::size_t>(n));
  unsigned char* p = der.data();
  if (i2d_X509(cert.value().get(), &p) != n) return openssl_error("encode DER");
  return der;
}

}  // namespace tessera::crypto
