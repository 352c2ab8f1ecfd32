#include "tessera/crypto/agreement.hpp"

#include <algorithm>
#include <cstring>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>

#include "ossl.hpp"
#include "tessera/crypto/tls.hpp"

namespace tessera::crypto {
namespace {

using detail::openssl_error;
using detail::pkey_ptr;
using detail::x509_ptr;
using pkey_ctx_ptr = detail::ossl_ptr<EVP_PKEY_CTX, EVP_PKEY_CTX_free>;
using store_ptr = detail::ossl_ptr<X509_STORE, X509_STORE_free>;
using store_ctx_ptr = detail::ossl_ptr<X509_STORE_CTX, X509_STORE_CTX_free>;
using crl_ptr = detail::ossl_ptr<X509_CRL, X509_CRL_free>;

const unsigned char* uc(const std::byte* p) { return reinterpret_cast<const unsigned char*>(p); }
unsigned char* uc(std::byte* p) { return reinterpret_cast<unsigned char*>(p); }

constexpr std::size_t k_nonce = 12, k_tag = 16;
constexpr std::size_t k_max_aead = (std::size_t{1} << 31) - 1;

core::result<x509_ptr> parse_pem_cert(std::string_view pem, const char* what) {
  detail::bio_ptr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return openssl_error("BIO_new_mem_buf");
  x509_ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return make_error(errc::bad_format, std::string(what) + ": not a PEM certificate");
  return cert;
}

}  // namespace

struct x25519_keypair::handle {
  pkey_ptr key;
};

x25519_keypair::x25519_keypair(std::unique_ptr<handle> h, const public_key& p) : h_(std::move(h)), public_(p) {}
x25519_keypair::x25519_keypair(x25519_keypair&&) noexcept = default;
x25519_keypair& x25519_keypair::operator=(x25519_keypair&&) noexcept = default;
x25519_keypair::~x25519_keypair() = default;  // EVP_PKEY_free wipes the private key

core::result<x25519_keypair> x25519_keypair::generate() {
  pkey_ptr key(EVP_PKEY_Q_keygen(nullptr, nullptr, "X25519"));
  if (!key) return openssl_error("generate an X25519 key");
  public_key pub{};
  std::size_t len = pub.size();
  if (EVP_PKEY_get_raw_public_key(key.get(), uc(pub.data()), &len) != 1 || len != pub.size()) return openssl_error("X25519 public key");
  return x25519_keypair(std::make_unique<handle>(handle{std::move(key)}), pub);
}

core::result<x25519_keypair> x25519_keypair::from_private(key256_view private_key) {
  pkey_ptr key(EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, uc(private_key.data()), private_key.size()));
  if (!key) return openssl_error("X25519 private key");
  public_key pub{};
  std::size_t len = pub.size();
  if (EVP_PKEY_get_raw_public_key(key.get(), uc(pub.data()), &len) != 1 || len != pub.size()) return openssl_error("X25519 public key");
  return x25519_keypair(std::make_unique<handle>(handle{std::move(key)}), pub);
}

core::result<key256> x25519_keypair::private_bytes() const {
  key256 k;
  std::size_t len = k.size();
  if (EVP_PKEY_get_raw_private_key(h_->key.get(), uc(k.data()), &len) != 1 || len != k.size()) return openssl_error("X25519 private key");
  return k;
}

core::result<key256> x25519_keypair::agree(const public_key& peer, std::string_view info) const {
  pkey_ptr other(EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, uc(peer.data()), peer.size()));
  if (!other) return openssl_error("X25519 peer key");
  pkey_ctx_ptr ctx(EVP_PKEY_CTX_new(h_->key.get(), nullptr));
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) != 1 || EVP_PKEY_derive_set_peer(ctx.get(), other.get()) != 1)
    return openssl_error("X25519 agreement");
  key256 shared;
  std::size_t len = shared.size();
  // OpenSSL refuses an all-zero result (a peer key of small order): RFC 7748 §6.1's check.
  if (EVP_PKEY_derive(ctx.get(), uc(shared.data()), &len) != 1 || len != shared.size()) return openssl_error("X25519 agreement");
  return derive_key(shared, info);
}

struct signing_key::handle {
  pkey_ptr key;
};
signing_key::signing_key(std::unique_ptr<handle> h) : h_(std::move(h)) {}
signing_key::signing_key(signing_key&&) noexcept = default;
signing_key& signing_key::operator=(signing_key&&) noexcept = default;
signing_key::~signing_key() = default;

core::result<signing_key> signing_key::load(const std::filesystem::path& key_pem) {
  TESSERA_ASSIGN_OR_RETURN(pkey_ptr key, detail::read_key(key_pem));
  return signing_key(std::make_unique<handle>(handle{std::move(key)}));
}

core::result<std::vector<std::byte>> signing_key::sign(std::span<const std::byte> message) const {
  detail::md_ctx_ptr ctx(EVP_MD_CTX_new());
  std::size_t len = 0;
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, h_->key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &len, uc(message.data()), message.size()) != 1)
    return openssl_error("sign");
  std::vector<std::byte> sig(len);
  if (EVP_DigestSign(ctx.get(), uc(sig.data()), &len, uc(message.data()), message.size()) != 1) return openssl_error("sign");
  sig.resize(len);
  return sig;
}

struct verifying_key::handle {
  pkey_ptr key;
};
verifying_key::verifying_key(std::unique_ptr<handle> h, std::string id) : h_(std::move(h)), device_id_(std::move(id)) {}
verifying_key::verifying_key(verifying_key&&) noexcept = default;
verifying_key& verifying_key::operator=(verifying_key&&) noexcept = default;
verifying_key::~verifying_key() = default;

core::result<verifying_key> verifying_key::from_certificate_pem(std::string_view cert_pem, std::string_view ca_pem, std::string_view crl_pem) {
  TESSERA_ASSIGN_OR_RETURN(x509_ptr cert, parse_pem_cert(cert_pem, "device certificate"));
  TESSERA_ASSIGN_OR_RETURN(x509_ptr ca, parse_pem_cert(ca_pem, "CA certificate"));
  store_ptr store(X509_STORE_new());
  store_ctx_ptr ctx(X509_STORE_CTX_new());
  if (!store || !ctx || X509_STORE_add_cert(store.get(), ca.get()) != 1) return openssl_error("certificate store");
  if (!crl_pem.empty()) {
    // The CA's list, checked like the certificate: OpenSSL verifies its signature against the CA.
    detail::bio_ptr bio(BIO_new_mem_buf(crl_pem.data(), static_cast<int>(crl_pem.size())));
    crl_ptr crl(bio ? PEM_read_bio_X509_CRL(bio.get(), nullptr, nullptr, nullptr) : nullptr);
    if (!crl) {
      ERR_clear_error();  // the parser's reasons are this answer, not an error to carry over
      return make_error(errc::bad_format, "revocation list: not a PEM CRL");
    }
    if (X509_STORE_add_crl(store.get(), crl.get()) != 1 || X509_STORE_set_flags(store.get(), X509_V_FLAG_CRL_CHECK) != 1)
      return openssl_error("revocation list");
  }
  if (X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) != 1) return openssl_error("certificate store");
  X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_CLIENT);
  if (X509_verify_cert(ctx.get()) != 1) {
    const int why = X509_STORE_CTX_get_error(ctx.get());
    if (why == X509_V_ERR_CERT_REVOKED) return make_error(errc::auth_failed, "device certificate revoked by the CA's revocation list");
    if (!crl_pem.empty() && (why == X509_V_ERR_UNABLE_TO_GET_CRL || why == X509_V_ERR_CRL_HAS_EXPIRED ||
                             why == X509_V_ERR_CRL_SIGNATURE_FAILURE || why == X509_V_ERR_CRL_NOT_YET_VALID))
      return make_error(errc::auth_failed, std::string("the revocation list cannot vouch for the device certificate: ") +
                                               X509_verify_cert_error_string(why));
    return make_error(errc::auth_failed, std::string("device certificate not issued by this CA: ") + X509_verify_cert_error_string(why));
  }
  unsigned char* der = nullptr;
  const int n = i2d_X509(cert.get(), &der);
  if (n <= 0) return openssl_error("encode certificate");
  auto id = device_id_from_der(std::span(der, static_cast<std::size_t>(n)));
  OPENSSL_free(der);
  TESSERA_TRY(id);
  pkey_ptr key(X509_get_pubkey(cert.get()));
  if (!key) return openssl_error("certificate public key");
  return verifying_key(std::make_unique<handle>(handle{std::move(key)}), std::move(id).value());
}

bool verifying_key::verify(std::span<const std::byte> message, std::span<const std::byte> signature) const {
  detail::md_ctx_ptr ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr, h_->key.get()) != 1) return false;
  const bool ok = EVP_DigestVerify(ctx.get(), uc(signature.data()), signature.size(), uc(message.data()), message.size()) == 1;
  ERR_clear_error();  // a bad signature is an answer, not an error to carry over
  return ok;
}

core::result<std::vector<std::byte>> aead_seal(key256_view key, std::span<const std::byte> associated, std::span<const std::byte> plaintext) {
  if (plaintext.size() > k_max_aead || associated.size() > k_max_aead) return make_error(errc::invalid_argument, "AEAD input too large");
  std::vector<std::byte> box(k_nonce + plaintext.size() + k_tag);
  if (RAND_bytes(uc(box.data()), static_cast<int>(k_nonce)) != 1) return openssl_error("RAND_bytes");
  detail::cipher_ctx_ptr ctx(EVP_CIPHER_CTX_new());
  int len = 0;
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, uc(key.data()), uc(box.data())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &len, uc(associated.data()), static_cast<int>(associated.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), uc(box.data() + k_nonce), &len, uc(plaintext.data()), static_cast<int>(plaintext.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), uc(box.data() + k_nonce + len), &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, static_cast<int>(k_tag), uc(box.data() + k_nonce + plaintext.size())) != 1)
    return openssl_error("AES-256-GCM seal");
  return box;
}

core::result<secret_bytes> aead_open(key256_view key, std::span<const std::byte> associated, std::span<const std::byte> box) {
  if (box.size() < k_nonce + k_tag || box.size() > k_max_aead) return make_error(errc::bad_format, "a sealed box of " + std::to_string(box.size()) + " bytes");
  const std::size_t n = box.size() - k_nonce - k_tag;
  secret_bytes plain(n);
  detail::cipher_ctx_ptr ctx(EVP_CIPHER_CTX_new());
  int len = 0;
  std::array<unsigned char, k_tag> tag{};
  std::memcpy(tag.data(), box.data() + k_nonce + n, k_tag);
  if (!ctx || EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, uc(key.data()), uc(box.data())) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &len, uc(associated.data()), static_cast<int>(associated.size())) != 1 ||
      EVP_DecryptUpdate(ctx.get(), uc(plain.data()), &len, uc(box.data() + k_nonce), static_cast<int>(n)) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, static_cast<int>(k_tag), tag.data()) != 1)
    return openssl_error("AES-256-GCM open");
  if (EVP_DecryptFinal_ex(ctx.get(), uc(plain.data()) + len, &len) != 1) {
    ERR_clear_error();  // `plain` wipes what was decrypted as it goes
    return make_error(errc::auth_failed, "a sealed box that does not authenticate: wrong key, or altered");
  }
  return plain;
}

}  // namespace tessera::crypto
