#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include "../support/text.hpp"
#include "tessera/crypto/digest.hpp"
#include "tessera/crypto/error.hpp"

namespace crypto = tessera::crypto;
using tessera::testing::text_bytes;

TEST_CASE("sha256 matches the FIPS 180-2 test vectors") {
  CHECK(crypto::to_hex(crypto::sha256_of(text_bytes(""))) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(crypto::to_hex(crypto::sha256_of(text_bytes("abc"))) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("sha256 incremental equals one-shot and resets after finish") {
  const std::string text = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  crypto::sha256 h;
  h.update(text_bytes(text.substr(0, 10)));
  h.update(text_bytes(text.substr(10)));
  const auto d = h.finish();
  CHECK(crypto::to_hex(d) == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(d == crypto::sha256_of(text_bytes(text)));
  h.update(text_bytes("abc"));
  CHECK(crypto::to_hex(h.finish()) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("sha256 hex parses back and rejects malformed text") {
  const auto d = crypto::sha256_of(text_bytes("abc"));
  auto back = crypto::digest_from_hex(crypto::to_hex(d));
  REQUIRE(back);
  CHECK(back.value() == d);
  CHECK(crypto::digest_from_hex("abc").error().code == crypto::errc::bad_format);
  CHECK(crypto::digest_from_hex(std::string(64, 'g')).error().code == crypto::errc::bad_format);
}

TEST_CASE("sha256_file hashes a file and reports a missing one") {
  const auto path = std::filesystem::temp_directory_path() / "tessera-digest-test.bin";
  {
    std::ofstream out(path, std::ios::binary);
    out << "abc";
  }
  auto d = crypto::sha256_file(path);
  REQUIRE(d);
  CHECK(d.value() == crypto::sha256_of(text_bytes("abc")));
  std::filesystem::remove(path);
  CHECK(crypto::sha256_file(path).error().code == crypto::errc::io);
}
