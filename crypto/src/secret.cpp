#include "tessera/crypto/secret.hpp"

#include <openssl/crypto.h>

namespace tessera::crypto::detail {

void cleanse(void* p, std::size_t bytes) noexcept {
  if (bytes != 0) OPENSSL_cleanse(p, bytes);
}

bool equal_bytes(const void* a, const void* b, std::size_t bytes) noexcept {
  return bytes == 0 || CRYPTO_memcmp(a, b, bytes) == 0;
}

}  // namespace tessera::crypto::detail
