#include "tessera/core/error.hpp"

#include <cstdio>
#include <cstdlib>

namespace tessera::core {
namespace {

class core_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "tessera.core"; }
  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::invalid_spec: return "invalid specification";
      case errc::invalid_argument: return "invalid argument";
      case errc::io: return "input/output error";
      case errc::bad_format: return "bad format";
      case errc::truncated: return "truncated input";
      case errc::not_finite: return "value not finite";
      case errc::over_budget: return "over the memory budget";
      case errc::unsupported: return "unsupported";
      case errc::cancelled: return "cancelled";
    }
    return "unknown core error";
  }
};

}  // namespace

const std::error_category& core_category() noexcept {
  static const core_category_impl category;
  return category;
}

namespace detail {
void assertion_failed(const char* condition, const char* file, int line) noexcept {
  std::fprintf(stderr, "tessera: assertion failed: %s (%s:%d)\n", condition, file, line);
  std::fflush(stderr);
  std::abort();
}
}  // namespace detail

}  // namespace tessera::core
