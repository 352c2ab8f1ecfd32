#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>

#include "ossl.hpp"
#include "tessera/core/file_io.hpp"
#include "tessera/crypto/error.hpp"

namespace tessera::crypto {
namespace {

constexpr int code(errc e) noexcept { return static_cast<int>(e); }

constexpr core::error_text k_texts[] = {
    {code(errc::openssl), "openssl", "OpenSSL failure"},
    {code(errc::io), "io", "input/output error"},
    {code(errc::exists), "exists", "file exists"},
    {code(errc::invalid_argument), "invalid_argument", "invalid argument"},
    {code(errc::bad_format), "bad_format", "bad format"},
    {code(errc::auth_failed), "auth_failed", "authentication failed"},
    {code(errc::no_device_id), "no_device_id", "no device id in certificate"},
    {code(errc::already_revoked), "already_revoked", "already revoked"},
};

}  // namespace

const std::error_category& crypto_category() noexcept {
  static const core::table_category category("tessera.crypto", k_texts);
  return category;
}

namespace detail {

core::error openssl_error(const std::string& what) {
  std::string text = what;
  bool first = true;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    text += first ? ": " : "; ";
    text += buf;
    first = false;
  }
  return make_error(errc::openssl, std::move(text));
}

core::result<void> check_outputs(std::span<const std::filesystem::path> paths, bool force) {
  if (force) return {};
  for (const auto& p : paths) {
    std::error_code ec;
    if (std::filesystem::exists(p, ec))
      return make_error(errc::exists, p.string() + " exists (use --force to replace it)");
  }
  return {};
}

core::result<void> write_file(const std::filesystem::path& path, std::span<const std::byte> bytes, unsigned mode,
                              bool force) {
  if (!force) {
    std::error_code ec;
    if (std::filesystem::exists(path, ec))
      return make_error(errc::exists, path.string() + " exists (use --force to replace it)");
  }
  auto written = core::write_file_atomic(path, bytes, mode, force);
  if (written) return {};
  // Lost a race with a file that appeared meanwhile: the same answer as above.
  if (!force && std::filesystem::exists(path)) return make_error(errc::exists, path.string() + " exists (use --force to replace it)");
  return make_error(errc::io, written.error().message);
}

core::result<std::vector<std::byte>> read_file(const std::filesystem::path& path, std::size_t max_bytes) {
  auto bytes = core::read_file_bounded(path, max_bytes);
  if (bytes) return bytes;
  // This module's callers (and users' scripts) see crypto's own codes.
  return make_error(bytes.error().code == core::errc::bad_format ? errc::bad_format : errc::io, bytes.error().message);
}

namespace {
constexpr std::size_t k_pem_limit = 1 << 20;  // PEM files we read are a few KiB; a CRL grows ~40 B/serial

core::result<bio_ptr> read_bio(const std::filesystem::path& path) {
  auto bytes = read_file(path, k_pem_limit);
  TESSERA_TRY(bytes);
  BIO* mem = BIO_new(BIO_s_mem());
  if (!mem) return openssl_error("BIO_new");
  bio_ptr bio(mem);
  if (!bytes.value().empty() &&
      BIO_write(mem, bytes.value().data(), static_cast<int>(bytes.value().size())) != static_cast<int>(bytes.value().size()))
    return openssl_error("BIO_write");
  return bio;
}
}  // namespace

core::result<x509_ptr> read_cert(const std::filesystem::path& path) {
  auto bio = read_bio(path);
  TESSERA_TRY(bio);
  x509_ptr cert(PEM_read_bio_X509(bio.value().get(), nullptr, nullptr, nullptr));
  if (!cert) {
    auto e = openssl_error(path.string() + ": not a PEM certificate");
    return make_error(errc::bad_format, e.message);
  }
  return cert;
}

core::result<pkey_ptr> read_key(const std::filesystem::path& path) {
  auto bio = read_bio(path);
  TESSERA_TRY(bio);
  pkey_ptr key(PEM_read_bio_PrivateKey(bio.value().get(), nullptr, nullptr, nullptr));
  if (!key) {
    auto e = openssl_error(path.string() + ": not a PEM private key");
    return make_error(errc::bad_format, e.message);
  }
  return key;
}

core::result<x509_crl_ptr> read_crl(const std::filesystem::path& path) {
  auto bio = read_bio(path);
  TESSERA_TRY(bio);
  x509_crl_ptr crl(PEM_read_bio_X509_CRL(bio.value().get(), nullptr, nullptr, nullptr));
  if (!crl) {
    auto e = openssl_error(path.string() + ": not a PEM CRL");
    return make_error(errc::bad_format, e.message);
  }
  return crl;
}

std::vector<std::byte> bio_contents(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  if (n <= 0 || data == nullptr) return {};
  const auto* first = reinterpret_cast<const std::byte*>(data);
  return {first, first + n};
}

}  // namespace detail
}  // namespace tessera::crypto
