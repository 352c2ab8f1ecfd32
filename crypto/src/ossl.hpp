// Internal: OpenSSL handles as unique_ptrs, OpenSSL errors as core::error, careful file writes.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "tessera/crypto/error.hpp"
#include "tessera/crypto/secret.hpp"

namespace tessera::crypto::detail {

template <class T, void (*Free)(T*)>
struct ossl_deleter {
  void operator()(T* p) const noexcept { Free(p); }
};
template <class T, void (*Free)(T*)>
using ossl_ptr = std::unique_ptr<T, ossl_deleter<T, Free>>;

using pkey_ptr = ossl_ptr<EVP_PKEY, EVP_PKEY_free>;
using x509_ptr = ossl_ptr<X509, X509_free>;
using x509_crl_ptr = ossl_ptr<X509_CRL, X509_CRL_free>;
using x509_revoked_ptr = ossl_ptr<X509_REVOKED, X509_REVOKED_free>;
using x509_ext_ptr = ossl_ptr<X509_EXTENSION, X509_EXTENSION_free>;
using x509_name_ptr = ossl_ptr<X509_NAME, X509_NAME_free>;
using bio_ptr = ossl_ptr<BIO, BIO_free_all>;
using md_ctx_ptr = ossl_ptr<EVP_MD_CTX, EVP_MD_CTX_free>;
using cipher_ctx_ptr = ossl_ptr<EVP_CIPHER_CTX, EVP_CIPHER_CTX_free>;
using ssl_ctx_ptr = ossl_ptr<SSL_CTX, SSL_CTX_free>;
using asn1_integer_ptr = ossl_ptr<ASN1_INTEGER, ASN1_INTEGER_free>;
using asn1_time_ptr = ossl_ptr<ASN1_TIME, ASN1_TIME_free>;
using bignum_ptr = ossl_ptr<BIGNUM, BN_free>;

// Drains OpenSSL's thread-local error queue into one line: "<what>: <reason>; <reason>".
[[nodiscard]] core::error openssl_error(const std::string& what);

// Refuses if any path exists and !force (errc::exists), so a command fails before writing anything.
[[nodiscard]] core::result<void> check_outputs(std::span<const std::filesystem::path> paths, bool force);
// Writes bytes to a temporary in the same directory with `mode`, fsyncs, renames over `path`.
// Without force, the rename must not replace an existing file (link + unlink).
[[nodiscard]] core::result<void> write_file(const std::filesystem::path& path, std::span<const std::byte> bytes,
                                            unsigned mode, bool force);
[[nodiscard]] core::result<std::vector<std::byte>> read_file(const std::filesystem::path& path,
                                                             std::size_t max_bytes);
// The same, read straight into a secret (a private key's PEM): no copy of the bytes is left behind.
[[nodiscard]] core::result<secret_bytes> read_secret_file(const std::filesystem::path& path, std::size_t max_bytes);

// PEM I/O through memory BIOs, so that file writing keeps one careful path.
[[nodiscard]] core::result<x509_ptr> read_cert(const std::filesystem::path& path);
[[nodiscard]] core::result<pkey_ptr> read_key(const std::filesystem::path& path);
[[nodiscard]] core::result<x509_crl_ptr> read_crl(const std::filesystem::path& path);
[[nodiscard]] std::vector<std::byte> bio_contents(BIO* bio);
[[nodiscard]] secret_bytes bio_secret_contents(BIO* bio);  // a private key's PEM
// A certificate's serial number in lower-case hex, as tessera-pki prints it; empty if it cannot be read.
[[nodiscard]] std::string serial_hex(const ASN1_INTEGER* serial);

}  // namespace tessera::crypto::detail
