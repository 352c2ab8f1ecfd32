// tessera/crypto/secret.hpp — the one type every key, seed and share lives in: it wipes itself.
//
// secret<T, N> holds N values of T inline (the 32 bytes of a key, the five field elements of a share);
// secret<T> holds a count chosen at run time on the heap (a decrypted box, key material being put
// together). Whatever way a secret goes — returned, moved from, dropped by an early return or an
// exception — its memory is cleansed with OPENSSL_cleanse, which the compiler may not drop as a dead
// store:
//   - the destructor wipes the values;
//   - a move leaves the source wiped (a fixed secret's values are zeros, a dynamic one is empty: its
//     buffer moved, nothing is left behind);
//   - a dynamic secret that grows wipes each buffer it lets go.
// A copy is a second secret and is written out: the copy constructor is explicit (`crypto::key256
// b(a);`), so passing or returning by value and `key256 b = a;` do not compile and no copy is made by
// accident. Assignment (`b = a;`) names both secrets and is allowed: structs that hold one (a share, a
// message carrying shares) stay assignable. == compares in constant time.
// A secret is never printed; its bytes leave only through data(), a span of them, or a key's user.
//
//   crypto::key256 k = crypto::random_key().value();           // wiped when k goes
//   crypto::keystream ks(k);                                    // functions take keys as spans
//   crypto::secret_bytes plain;                                 // grows like a vector, wipes as it goes
//   core::le_writer(plain).u32(share.x);
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "tessera/core/base/assert.hpp"

namespace tessera::crypto {

namespace detail {
// OPENSSL_cleanse, which only crypto/src/secret.cpp calls.
void cleanse(void* p, std::size_t bytes) noexcept;
// CRYPTO_memcmp == 0: constant time in the number of bytes.
[[nodiscard]] bool equal_bytes(const void* a, const void* b, std::size_t bytes) noexcept;

// std::allocator, but every buffer is cleansed before it is freed (a vector's growth frees its old one).
template <class T>
struct wiping_allocator {
  using value_type = T;
  wiping_allocator() noexcept = default;
  template <class U>
  wiping_allocator(const wiping_allocator<U>&) noexcept {}  // allocators convert implicitly
  [[nodiscard]] T* allocate(std::size_t n) { return std::allocator<T>{}.allocate(n); }
  void deallocate(T* p, std::size_t n) noexcept {
    cleanse(p, n * sizeof(T));
    std::allocator<T>{}.deallocate(p, n);
  }
  template <class U>
  friend bool operator==(const wiping_allocator&, const wiping_allocator<U>&) noexcept {
    return true;
  }
};
}  // namespace detail

template <class T, std::size_t N = std::dynamic_extent>
class secret {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>, "a secret holds plain values");

 public:
  using value_type = T;

  secret() noexcept = default;  // N zero values
  // From values (test vectors): at most N, the rest zero.
  secret(std::initializer_list<T> values) noexcept { assign(std::span(values.begin(), values.size())); }
  explicit secret(std::span<const T> values) noexcept { assign(values); }
  explicit secret(const secret& other) noexcept : values_(other.values_) {}
  secret(secret&& other) noexcept : values_(other.values_) { other.wipe(); }
  secret& operator=(const secret& other) noexcept {
    values_ = other.values_;  // the old values are overwritten in place
    return *this;
  }
  secret& operator=(secret&& other) noexcept {
    if (this != &other) {
      values_ = other.values_;
      other.wipe();
    }
    return *this;
  }
  ~secret() { wipe(); }

  [[nodiscard]] static constexpr std::size_t size() noexcept { return N; }
  [[nodiscard]] T* data() noexcept { return values_.data(); }
  [[nodiscard]] const T* data() const noexcept { return values_.data(); }
  [[nodiscard]] T* begin() noexcept { return data(); }
  [[nodiscard]] T* end() noexcept { return data() + N; }
  [[nodiscard]] const T* begin() const noexcept { return data(); }
  [[nodiscard]] const T* end() const noexcept { return data() + N; }
  [[nodiscard]] T& operator[](std::size_t i) noexcept { return values_[i]; }
  [[nodiscard]] const T& operator[](std::size_t i) const noexcept { return values_[i]; }
  // A key's user takes it as std::span<const T, N> (std::span<const T> takes it as a range).
  operator std::span<const T, N>() const noexcept { return std::span<const T, N>(values_); }  // implicit: a key passes as a view

  void fill(const T& v) noexcept { values_.fill(v); }
  // Zeros the values now (the destructor does it anyway).
  void wipe() noexcept { detail::cleanse(values_.data(), sizeof values_); }

  friend bool operator==(const secret& a, const secret& b) noexcept { return detail::equal_bytes(a.data(), b.data(), sizeof a.values_); }

 private:
  void assign(std::span<const T> values) noexcept {
    TESSERA_ASSERT(values.size() <= N);
    for (std::size_t i = 0; i < values.size(); ++i) values_[i] = values[i];
  }

  std::array<T, N> values_{};
};

template <class T>
class secret<T, std::dynamic_extent> {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>, "a secret holds plain values");
  using storage = std::vector<T, detail::wiping_allocator<T>>;

 public:
  using value_type = T;

  secret() noexcept = default;
  explicit secret(std::size_t n) : values_(n) {}  // n zero values
  explicit secret(std::span<const T> values) : values_(values.begin(), values.end()) {}
  explicit secret(const secret& other) : values_(other.values_) {}
  secret(secret&& other) noexcept = default;  // the buffer moves: the source is left empty
  secret& operator=(const secret& other) {
    if (this != &other) {
      wipe();  // what this held, before the buffer is reused or let go (which wipes it too)
      values_.assign(other.values_.begin(), other.values_.end());
    }
    return *this;
  }
  secret& operator=(secret&& other) noexcept = default;  // the buffer this held is wiped as it goes
  ~secret() = default;                                   // the allocator wipes the buffer

  [[nodiscard]] std::size_t size() const noexcept { return values_.size(); }
  [[nodiscard]] bool empty() const noexcept { return values_.empty(); }
  [[nodiscard]] T* data() noexcept { return values_.data(); }
  [[nodiscard]] const T* data() const noexcept { return values_.data(); }
  [[nodiscard]] T* begin() noexcept { return data(); }
  [[nodiscard]] T* end() noexcept { return data() + size(); }
  [[nodiscard]] const T* begin() const noexcept { return data(); }
  [[nodiscard]] const T* end() const noexcept { return data() + size(); }
  [[nodiscard]] T& operator[](std::size_t i) noexcept { return values_[i]; }
  [[nodiscard]] const T& operator[](std::size_t i) const noexcept { return values_[i]; }

  void push_back(T v) { values_.push_back(v); }  // what core::le_writer appends with
  void reserve(std::size_t n) { values_.reserve(n); }
  void resize(std::size_t n) {
    if (n < size()) detail::cleanse(data() + n, (size() - n) * sizeof(T));  // the values let go
    values_.resize(n);
  }
  void clear() noexcept {
    wipe();
    values_.clear();
  }
  void wipe() noexcept { detail::cleanse(values_.data(), values_.size() * sizeof(T)); }

  friend bool operator==(const secret& a, const secret& b) noexcept {
    return a.size() == b.size() && detail::equal_bytes(a.data(), b.data(), a.size() * sizeof(T));
  }

 private:
  storage values_;
};

// Bytes of secret material whose count is known at run time.
using secret_bytes = secret<std::byte>;

}  // namespace tessera::crypto
