#include <doctest/doctest.h>

#include <sys/stat.h>

#include <filesystem>
#include <numeric>
#include <vector>

#include "tessera/crypto/error.hpp"
#include "tessera/crypto/seal.hpp"

namespace crypto = tessera::crypto;

namespace {
std::vector<std::byte> sample(std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>(i * 31 + 7);
  return v;
}
std::filesystem::path temp(const char* name) {
  auto p = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove(p);
  return p;
}
}  // namespace

TEST_CASE("seal then unseal returns the plaintext; sealing is randomized") {
  auto key = crypto::sealing_key::generate();
  REQUIRE(key);
  const auto plain = sample(100'000);
  auto a = crypto::seal(key.value(), plain);
  auto b = crypto::seal(key.value(), plain);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a.value().size() == plain.size() + crypto::sealed_overhead_bytes);
  CHECK(a.value() != b.value());  // fresh nonce each time
  auto back = crypto::unseal(key.value(), a.value());
  REQUIRE(back);
  CHECK(back.value() == plain);
  auto empty = crypto::seal(key.value(), {});
  REQUIRE(empty);
  CHECK(crypto::unseal(key.value(), empty.value()).value().empty());
}

TEST_CASE("unseal refuses a flipped bit, a wrong key, a truncated blob and a wrong magic") {
  auto key = crypto::sealing_key::generate().value();
  auto other = crypto::sealing_key::generate().value();
  const auto sealed = crypto::seal(key, sample(1000)).value();
  for (std::size_t pos : {std::size_t{10}, std::size_t{100}, sealed.size() - 1}) {
    auto bad = sealed;
    bad[pos] ^= std::byte{1};
    CHECK(crypto::unseal(key, bad).error().code == crypto::errc::auth_failed);
  }
  CHECK(crypto::unseal(other, sealed).error().code == crypto::errc::auth_failed);
  CHECK(crypto::unseal(key, std::span(sealed).first(20)).error().code == crypto::errc::bad_format);
  auto bad_magic = sealed;
  bad_magic[0] = std::byte{'X'};
  CHECK(crypto::unseal(key, bad_magic).error().code == crypto::errc::bad_format);
}

TEST_CASE("sealing key files are owner-read-only and never silently replaced") {
  const auto path = temp("tessera-seal-test.key");
  auto key = crypto::sealing_key::generate().value();
  REQUIRE(key.save(path, false));
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0400);
  auto again = key.save(path, false);
  REQUIRE(!again);
  CHECK(again.error().code == crypto::errc::exists);
  auto other = crypto::sealing_key::generate().value();
  REQUIRE(other.save(path, true));
  auto loaded = crypto::sealing_key::load(path);
  REQUIRE(loaded);
  CHECK(loaded.value().bytes() == other.bytes());
  std::filesystem::remove(path);
}

TEST_CASE("seal_file and unseal_file round-trip a checkpoint") {
  const auto path = temp("tessera-seal-test.sealed");
  auto key = crypto::sealing_key::generate().value();
  const auto plain = sample(4096);
  REQUIRE(crypto::seal_file(key, plain, path, false));
  CHECK(crypto::seal_file(key, plain, path, false).error().code == crypto::errc::exists);
  auto back = crypto::unseal_file(key, path);
  REQUIRE(back);
  CHECK(back.value() == plain);
  std::filesystem::remove(path);
}
