#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <random>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>

#include "ossl.hpp"
#include "tessera/core/io/file_io.hpp"
#include "tessera/crypto/error.hpp"

namespace tessera::crypto {

const std::error_category& category_of(errc) noexcept {
  static constexpr std::string_view names[] = {
      "openssl", "io", "exists", "invalid_argument", "bad_format", "auth_failed", "no_device_id",
      "already_revoked", "not_operator"};
  static const core::table_category category("tessera.crypto", names);
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

core::result<secret_bytes> read_secret_file(const std::filesystem::path& path, std::size_t max_bytes) {
  // Sized first, then read into the secret; a file that changed meanwhile fails the read. Without a
  // size (no such file) the read reports why.
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  secret_bytes out(ec ? 0 : static_cast<std::size_t>(std::min<std::uintmax_t>(size, max_bytes)));
  auto read = core::read_file_into(path, std::span(out.data(), out.size()));
  if (!read) return make_error(read.error().code == core::errc::bad_format ? errc::bad_format : errc::io, read.error().message);
  out.resize(read.value());
  return out;
}

namespace {
constexpr std::size_t k_pem_limit = 1 << 20;  // PEM files we read are a few KiB; a CRL grows ~40 B/serial

// Through a secret: one of the PEM files read here is a private key. (The BIO's own buffer is
// OpenSSL's, which clears it when it frees it.)
core::result<bio_ptr> read_bio(const std::filesystem::path& path) {
  auto bytes = read_secret_file(path, k_pem_limit);
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

namespace {

// One PEM object from a file: `read` is OpenSSL's PEM_read_bio_* for its type.
template <class Ptr, class Read>
core::result<Ptr> read_pem(const std::filesystem::path& path, Read read, const char* what) {
  TESSERA_ASSIGN_OR_RETURN(auto bio, read_bio(path));
  Ptr object(read(bio.get(), nullptr, nullptr, nullptr));
  if (!object) return make_error(errc::bad_format, openssl_error(path.string() + ": not a PEM " + what).message);
  return object;
}

}  // namespace

core::result<x509_ptr> read_cert(const std::filesystem::path& path) {
  return read_pem<x509_ptr>(path, PEM_read_bio_X509, "certificate");
}

core::result<pkey_ptr> read_key(const std::filesystem::path& path) {
  return read_pem<pkey_ptr>(path, PEM_read_bio_PrivateKey, "private key");
}

core::result<x509_crl_ptr> read_crl(const std::filesystem::path& path) {
  return read_pem<x509_crl_ptr>(path, PEM_read_bio_X509_CRL, "CRL");
}

namespace {
std::span<const std::byte> bio_bytes(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  if (n <= 0 || data == nullptr) return {};
  return {reinterpret_cast<const std::byte*>(data), static_cast<std::size_t>(n)};
}
}  // namespace

std::vector<std::byte> bio_contents(BIO* bio) {
  const auto b = bio_bytes(bio);
  return {b.begin(), b.end()};
}

secret_bytes bio_secret_contents(BIO* bio) { return secret_bytes(bio_bytes(bio)); }

std::string serial_hex(const ASN1_INTEGER* serial) {
  bignum_ptr bn(ASN1_INTEGER_to_BN(serial, nullptr));
  if (!bn) return {};
  char* hex = BN_bn2hex(bn.get());
  if (!hex) return {};
  std::string out(hex);
  OPENSSL_free(hex);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace detail
}  // namespace tessera::crypto
