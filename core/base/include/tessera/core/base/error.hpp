// tessera/core/base/error.hpp — typed errors and the result type every module returns.
//
// Expected failures (bad input, a file that is not what it claims, a budget that is too small) cross
// module boundaries as a `tessera::core::error`: a std::error_code from the module's own category plus
// one human line that names what is wrong (file, field, record, offset). Functions that can fail return
// `result<T>`; exceptions are used only at process edges, where `main` turns an error into one line.
//
//   core::result<model_spec> spec = load_model_spec("model.json");
//   if (!spec) {
//     std::fprintf(stderr, "%s\n", spec.error().message.c_str());
//     return 1;
//   }
//   use(spec.value());
#pragma once

#include <concepts>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>

#include "tessera/core/base/assert.hpp"

namespace tessera::core {

// Error conditions of the core module.
enum class errc {
  invalid_spec = 1,   // a model specification or configuration field is wrong
  invalid_argument,   // a caller passed values that do not fit together
  io,                 // the operating system refused a read or write
  bad_format,         // a file or blob is not in the format it claims
  truncated,          // a file or blob ends before its declared size
  not_finite,         // a NaN or infinity where finite numbers are required
  over_budget,        // what is asked does not fit in the memory budget
  unsupported,        // a valid but unsupported variant (dtype, rank, codec)
  cancelled,          // the caller asked a long operation to stop
};

// Every module's errc works the same way: beside the enum it declares its category, found by
// argument-dependent lookup, and takes the two functions below into its namespace,
//
//   enum class errc { size_mismatch = 1, ... };
//   [[nodiscard]] const std::error_category& category_of(errc) noexcept;   // "tessera.rounds"
//   using core::make_error, core::make_error_code;
//   // and, at global scope: template <> struct std::is_error_code_enum<tessera::rounds::errc> : std::true_type {};
//
// so `make_error(errc::size_mismatch, "...")` makes a core::error and an errc compares with a
// std::error_code.
[[nodiscard]] const std::error_category& category_of(errc) noexcept;  // "tessera.core"

template <class E>
concept error_enum = std::is_enum_v<E> && requires(E e) {
  { category_of(e) } -> std::same_as<const std::error_category&>;
};

template <error_enum E>
[[nodiscard]] std::error_code make_error_code(E e) noexcept {
  return {static_cast<int>(e), category_of(e)};
}

// A module's error category from the identifiers of its codes, in enumerator order from 1: stable
// names that travel in RESULT messages and logs ("rounds.size_mismatch"); a code's message() is its
// identifier in words. What went wrong in a given case is the core::error's own line.
//
//   const std::error_category& category_of(errc) noexcept {
//     static constexpr std::string_view names[] = {"no_devices", "wrong_round", "size_mismatch"};
//     static const core::table_category category("tessera.rounds", names);
//     return category;
//   }
class table_category final : public std::error_category {
 public:
  // `name` and `names` must outlive the category (a string literal and a static array do).
  table_category(const char* name, std::span<const std::string_view> names) noexcept : name_(name), names_(names) {}
  [[nodiscard]] const char* name() const noexcept override { return name_; }
  [[nodiscard]] std::string message(int value) const override;
  // The code's identifier ("size_mismatch"); empty for a value outside the enum.
  [[nodiscard]] std::string_view identifier(int value) const noexcept;

 private:
  const char* name_;
  std::span<const std::string_view> names_;
};

// "rounds.size_mismatch" for a code of a table category named "tessera.rounds"; otherwise
// "<category>:<value>" (e.g. "generic:2").
[[nodiscard]] std::string error_name(const std::error_code& code);

// An expected failure: what kind it is, and one line for a person saying exactly what is wrong.
struct error {
  std::error_code code;
  std::string message;
};

template <error_enum E>
[[nodiscard]] error make_error(E e, std::string message) {
  return {make_error_code(e), std::move(message)};
}

// Either a T or an error. Access to the wrong alternative is a bug and asserts.
template <class T>
class [[nodiscard]] result {
 public:
  result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  result(core::error e) : v_(std::in_place_index<1>, std::move(e)) {}       // NOLINT: implicit by design

  [[nodiscard]] bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  [[nodiscard]] T& value() & {
    TESSERA_ASSERT(ok());
    return std::get<0>(v_);
  }
  [[nodiscard]] const T& value() const& {
    TESSERA_ASSERT(ok());
    return std::get<0>(v_);
  }
  [[nodiscard]] T&& value() && {
    TESSERA_ASSERT(ok());
    return std::get<0>(std::move(v_));
  }
  // As std::optional and std::expected: *r and r->member, asserting like value().
  [[nodiscard]] T& operator*() & { return value(); }
  [[nodiscard]] const T& operator*() const& { return value(); }
  [[nodiscard]] T&& operator*() && { return std::move(*this).value(); }
  [[nodiscard]] T* operator->() { return &value(); }
  [[nodiscard]] const T* operator->() const { return &value(); }
  [[nodiscard]] const core::error& error() const& {
    TESSERA_ASSERT(!ok());
    return std::get<1>(v_);
  }
  [[nodiscard]] core::error&& error() && {
    TESSERA_ASSERT(!ok());
    return std::get<1>(std::move(v_));
  }

 private:
  std::variant<T, core::error> v_;
};

// The no-value case: success, or an error.
template <>
class [[nodiscard]] result<void> {
 public:
  result() = default;
  result(core::error e) : e_(std::move(e)), failed_(true) {}  // NOLINT: implicit by design

  [[nodiscard]] bool ok() const noexcept { return !failed_; }
  explicit operator bool() const noexcept { return ok(); }
  [[nodiscard]] const core::error& error() const& {
    TESSERA_ASSERT(failed_);
    return e_;
  }
  [[nodiscard]] core::error&& error() && {
    TESSERA_ASSERT(failed_);
    return std::move(e_);
  }

 private:
  core::error e_;
  bool failed_ = false;
};

}  // namespace tessera::core

template <>
struct std::is_error_code_enum<tessera::core::errc> : std::true_type {};

// Propagates an error out of the enclosing function: TESSERA_TRY(r) returns r.error() if r failed.
#define TESSERA_TRY(expr)                          \
  do {                                             \
    auto&& tessera_try_r_ = (expr);                \
    if (!tessera_try_r_.ok())                      \
      return std::move(tessera_try_r_).error();    \
  } while (false)

// Evaluates a result-returning expression; on failure returns its error from the enclosing function,
// otherwise moves the value into `lhs` (a declaration or an lvalue), as Abseil's ASSIGN_OR_RETURN:
//
//   TESSERA_ASSIGN_OR_RETURN(auto spec, core::load_model_spec(path));   // spec is a model_spec
//   TESSERA_ASSIGN_OR_RETURN(config.model, parse(json));
#define TESSERA_ASSIGN_OR_RETURN(lhs, ...) \
  TESSERA_ASSIGN_OR_RETURN_IMPL_(TESSERA_CONCAT_(tessera_aor_, __COUNTER__), lhs, __VA_ARGS__)
#define TESSERA_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, ...) \
  auto tmp = (__VA_ARGS__);                           \
  if (!tmp.ok()) return std::move(tmp).error();      \
  lhs = std::move(tmp).value()
#define TESSERA_CONCAT_(a, b) TESSERA_CONCAT_INNER_(a, b)
#define TESSERA_CONCAT_INNER_(a, b) a##b
