#include "tessera/core/base/error.hpp"

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <string_view>

namespace tessera::core {
std::string_view table_category::identifier(int value) const noexcept {
  if (value < 1 || static_cast<std::size_t>(value) > names_.size()) return {};
  return names_[static_cast<std::size_t>(value) - 1];
}

std::string table_category::message(int value) const {
  const std::string_view id = identifier(value);
  if (id.empty()) return std::string("unknown ") + name_ + " error " + std::to_string(value);
  std::string words(id);
  std::replace(words.begin(), words.end(), '_', ' ');
  return words;
}

std::string error_name(const std::error_code& code) {
  if (const auto* table = dynamic_cast<const table_category*>(&code.category())) {
    if (const std::string_view id = table->identifier(code.value()); !id.empty()) {
      std::string_view module = table->name();
      if (module.starts_with("tessera.")) module.remove_prefix(8);
      return std::string(module) + "." + std::string(id);
    }
  }
  return std::string(code.category().name()) + ":" + std::to_string(code.value());
}

const std::error_category& category_of(errc) noexcept {
  static constexpr std::string_view names[] = {
      "invalid_spec", "invalid_argument", "io", "bad_format", "truncated", "not_finite", "over_budget",
      "unsupported", "cancelled"};
  static const table_category category("tessera.core", names);
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
