// Tests of tessera/core/base/error.hpp: the result type and the propagation macros.
#include <doctest/doctest.h>

#include <cerrno>
#include <memory>
#include <string>

#include "tessera/core/base/error.hpp"

namespace core = tessera::core;

namespace {

core::result<int> parse_positive(int v) {
  if (v <= 0) return core::make_error(core::errc::invalid_argument, "not positive: " + std::to_string(v));
  return v;
}

core::result<std::unique_ptr<int>> boxed(int v) {
  TESSERA_ASSIGN_OR_RETURN(const int checked, parse_positive(v));
  return std::make_unique<int>(checked);
}

core::result<int> sum_of_boxes(int a, int b) {
  TESSERA_ASSIGN_OR_RETURN(auto x, boxed(a));  // move-only values move out
  TESSERA_ASSIGN_OR_RETURN(auto y, boxed(b));  // two in one scope: distinct temporaries
  int total = 0;
  TESSERA_ASSIGN_OR_RETURN(total, parse_positive(*x + *y));  // into an existing lvalue
  return total;
}

core::result<void> check_both(int a, int b) {
  TESSERA_TRY(parse_positive(a));
  TESSERA_TRY(parse_positive(b));
  return {};
}

}  // namespace

TEST_CASE("TESSERA_ASSIGN_OR_RETURN yields the value or returns the first error") {
  auto ok = sum_of_boxes(2, 3);
  REQUIRE(ok);
  CHECK(ok.value() == 5);

  auto bad = sum_of_boxes(2, -7);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == core::errc::invalid_argument);
  CHECK(bad.error().message == "not positive: -7");
}

TEST_CASE("result: * and -> reach the value as value() does, also on a const and a temporary result") {
  struct pair {
    int a = 0;
    std::string b;
  };
  core::result<pair> r(pair{.a = 4, .b = "four"});
  CHECK(r->a == 4);
  CHECK((*r).b == "four");
  r->a = 5;  // the value itself, not a copy
  CHECK(r.value().a == 5);
  const core::result<pair>& c = r;
  CHECK(c->b == "four");
  CHECK(&*c == &r.value());
  const std::unique_ptr<int> moved = *boxed(9);  // a temporary's value moves out
  CHECK(*moved == 9);
}

TEST_CASE("TESSERA_TRY returns the first error and passes success through") {
  CHECK(check_both(1, 1));
  auto bad = check_both(-1, -2);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "not positive: -1");
}

TEST_CASE("table_category: identifier per code, in words as its message; error_name qualifies it by module") {
  const std::error_code over = core::errc::over_budget;
  CHECK(over.message() == "over budget");
  CHECK(core::error_name(core::errc::invalid_spec) == "core.invalid_spec");  // the first code
  CHECK(core::error_name(core::errc::cancelled) == "core.cancelled");        // and the last: the list is whole
  CHECK(std::string(over.category().name()) == "tessera.core");
  CHECK(core::error_name(over) == "core.over_budget");
  const std::error_code unknown(999, core::category_of(core::errc{}));
  CHECK(core::error_name(std::error_code(0, core::category_of(core::errc{}))) == "tessera.core:0");
  CHECK(unknown.message() == "unknown tessera.core error 999");
  CHECK(core::error_name(unknown) == "tessera.core:999");
  CHECK(core::error_name(std::make_error_code(std::errc::io_error)) == "generic:" + std::to_string(EIO));
}
