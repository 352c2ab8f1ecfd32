// Tests of tessera/crypto/secret.hpp: a secret is wiped when it is moved from and when it goes, and a
// growing one wipes every buffer it lets go. Memory a destroyed object leaves behind is looked at through
// storage the test owns: a fixed secret is built in a byte buffer of the test's, and the heap buffers of
// a dynamic one are looked at by this executable's operator delete the moment they are freed.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include "tessera/crypto/masking.hpp"
#include "tessera/crypto/secret.hpp"
#include "tessera/crypto/shamir.hpp"

namespace crypto = tessera::crypto;

namespace {

// The buffer whose release the test watches, and whether it was all zeros when it was released.
struct freed_watch {
  const void* buffer = nullptr;
  bool released = false;
  bool zeros = false;
};
freed_watch g_watch;

void watch(const void* buffer) { g_watch = {.buffer = buffer, .released = false, .zeros = false}; }

bool all_zero(const volatile unsigned char* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] != 0) return false;
  return true;
}

template <class T>
bool all_zero(const T& s) {
  return all_zero(reinterpret_cast<const volatile unsigned char*>(s.data()), s.size() * sizeof(*s.data()));
}

crypto::key256 filled_key(std::uint8_t fill) {
  crypto::key256 k;
  std::fill(k.begin(), k.end(), std::byte{fill});
  return k;
}

}  // namespace

// This executable's new and delete are malloc and free, so that delete can look at a buffer before it
// goes: sized delete is what std::allocator frees with, and when it frees the watched buffer it records
// whether the buffer's bytes were wiped.
void* operator new(std::size_t n) {
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t n) noexcept {
  if (p != nullptr && p == g_watch.buffer) {
    g_watch.released = true;
    g_watch.zeros = all_zero(static_cast<const volatile unsigned char*>(p), n);
  }
  std::free(p);
}

TEST_CASE("secret: a copy is written out; no copy by passing or returning by value") {
  static_assert(std::is_constructible_v<crypto::key256, const crypto::key256&>);
  static_assert(!std::is_convertible_v<const crypto::key256&, crypto::key256>);
  static_assert(std::is_nothrow_move_constructible_v<crypto::key256> && std::is_nothrow_move_assignable_v<crypto::key256>);
  static_assert(!std::is_convertible_v<const crypto::secret_bytes&, crypto::secret_bytes>);
  const crypto::key256 a = filled_key(7);
  const crypto::key256 b(a);
  CHECK(b == a);
  CHECK_FALSE(b == filled_key(8));
  crypto::key256 c;
  c = a;  // assignment names both
  CHECK(c == a);
  crypto::secret_bytes d(std::span<const std::byte>(a.data(), 4)), e(2);
  e = d;
  CHECK(e == d);
}

TEST_CASE("secret: moving a key wipes the source, and the destination holds the key") {
  crypto::key256 a = filled_key(0x5a);
  crypto::key256 b(std::move(a));
  CHECK(all_zero(a));  // what a move leaves behind is the point
  CHECK(b == filled_key(0x5a));
  crypto::key256 c = filled_key(1);
  c = std::move(b);
  CHECK(all_zero(b));
  CHECK(c == filled_key(0x5a));
  // A share's values likewise.
  crypto::shamir_share s{.x = 3, .y = {1, 2, 3, 4, 5}};
  crypto::shamir_share t(std::move(s));
  CHECK(all_zero(s.y));
  CHECK(t.y[4] == 5);
}

TEST_CASE("secret: a key's destructor wipes its bytes, in storage the test still owns") {
  alignas(crypto::key256) unsigned char storage[sizeof(crypto::key256)];
  auto* k = new (storage) crypto::key256(filled_key(0xc3));
  REQUIRE(!all_zero(*k));
  std::destroy_at(k);
  CHECK(all_zero(storage, sizeof storage));
  // And a secret dropped by an early return (a result holding a key, never read).
  alignas(tessera::core::result<crypto::key256>) unsigned char held[sizeof(tessera::core::result<crypto::key256>)];
  auto* r = new (held) tessera::core::result<crypto::key256>(crypto::random_key());
  REQUIRE(r->ok());
  const std::size_t at = static_cast<std::size_t>(reinterpret_cast<unsigned char*>(r->value().data()) - held);
  std::destroy_at(r);
  CHECK(all_zero(held + at, crypto::key256::size()));
}

TEST_CASE("secret_bytes: the buffer is wiped when it is freed, when the secret goes or grows") {
  {
    crypto::secret_bytes s(48);
    std::fill(s.begin(), s.end(), std::byte{0xee});
    watch(s.data());
  }
  CHECK(g_watch.released);
  CHECK(g_watch.zeros);

  crypto::secret_bytes grows;
  grows.reserve(4);
  for (int i = 0; i < 4; ++i) grows.push_back(std::byte{0x11});
  watch(grows.data());
  for (int i = 0; i < 64; ++i) grows.push_back(std::byte{0x22});  // the first buffer is let go
  CHECK(g_watch.released);
  CHECK(g_watch.zeros);
  CHECK(grows.size() == 68);
  CHECK(grows[0] == std::byte{0x11});

  // A move takes the buffer along: nothing is left in the source, and the buffer is wiped once, when
  // its new owner lets it go.
  watch(grows.data());
  crypto::secret_bytes moved(std::move(grows));
  CHECK(grows.empty());
  CHECK_FALSE(g_watch.released);
  moved = crypto::secret_bytes(2);
  CHECK(g_watch.released);
  CHECK(g_watch.zeros);
  watch(nullptr);
}

TEST_CASE("secret: keys pass to their users as spans, and test vectors build secrets") {
  const crypto::key256 k{std::byte{1}, std::byte{2}};
  const std::span<const std::byte, 32> fixed = k;
  const std::span<const std::byte> any = k;
  CHECK(fixed.data() == k.data());
  CHECK(any.size() == 32);
  CHECK(k[1] == std::byte{2});
  CHECK(k[2] == std::byte{0});
  const crypto::secret_bytes b(std::span<const std::byte>(k.data(), 3));
  CHECK(b.size() == 3);
  CHECK(b[1] == std::byte{2});
}
