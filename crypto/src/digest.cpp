#include "tessera/crypto/digest.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "ossl.hpp"

namespace tessera::crypto {

struct sha256::impl {
  detail::md_ctx_ptr ctx{EVP_MD_CTX_new()};
  void reset() {
    // Failure here means OpenSSL could not allocate or lost its SHA-256 provider: not an input error.
    TESSERA_ASSERT(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1);
  }
};

sha256::sha256() : impl_(std::make_unique<impl>()) { impl_->reset(); }
sha256::~sha256() = default;
sha256::sha256(sha256&&) noexcept = default;
sha256& sha256::operator=(sha256&&) noexcept = default;

void sha256::update(std::span<const std::byte> bytes) {
  if (bytes.empty()) return;
  TESSERA_ASSERT(EVP_DigestUpdate(impl_->ctx.get(), bytes.data(), bytes.size()) == 1);
}

void sha256::update(std::span<const std::uint8_t> bytes) { update(std::as_bytes(bytes)); }

sha256_digest sha256::finish() {
  sha256_digest out{};
  unsigned int n = 0;
  TESSERA_ASSERT(EVP_DigestFinal_ex(impl_->ctx.get(), out.data(), &n) == 1 && n == out.size());
  impl_->reset();
  return out;
}

sha256_digest sha256_of(std::span<const std::byte> bytes) {
  sha256 h;
  h.update(bytes);
  return h.finish();
}

core::result<sha256_digest> sha256_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(errc::io, "cannot open " + path.string());
  sha256 h;
  std::vector<std::byte> buf(1 << 16);
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return make_error(errc::io, "cannot read " + path.string());
    }
    if (n == 0) break;
    h.update(std::span<const std::byte>(buf.data(), static_cast<std::size_t>(n)));
  }
  ::close(fd);
  return h.finish();
}

std::string to_hex(std::span<const std::uint8_t> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (std::uint8_t b : bytes) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 0xf]);
  }
  return out;
}

namespace {
int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

core::result<sha256_digest> digest_from_hex(std::string_view hex) {
  sha256_digest out{};
  if (hex.size() != out.size() * 2)
    return make_error(errc::bad_format, "sha256 must be 64 hex characters, got " + std::to_string(hex.size()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = hex_value(hex[2 * i]);
    const int lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return make_error(errc::bad_format, "sha256 has a non-hex character");
    out[i] = static_cast<std::uint8_t>(hi * 16 + lo);
  }
  return out;
}

}  // namespace tessera::crypto
