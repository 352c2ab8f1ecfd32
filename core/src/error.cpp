#include "tessera/core/error.hpp"

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace tessera::core {
namespace {

constexpr int code(errc e) noexcept { return static_cast<int>(e); }

constexpr error_text k_texts[] = {
    {code(errc::invalid_spec), "invalid_spec", "invalid specification"},
    {code(errc::invalid_argument), "invalid_argument", "invalid argument"},
    {code(errc::io), "io", "input/output error"},
    {code(errc::bad_format), "bad_format", "bad format"},
    {code(errc::truncated), "truncated", "truncated input"},
    {code(errc::not_finite), "not_finite", "value not finite"},
    {code(errc::over_budget), "over_budget", "over the memory budget"},
    {code(errc::unsupported), "unsupported", "unsupported"},
    {code(errc::cancelled), "cancelled", "cancelled"},
};

}  // namespace

std::string table_category::message(int value) const {
  for (const auto& t : texts_)
    if (t.value == value) return t.text;
  return std::string("unknown ") + name_ + " error " + std::to_string(value);
}

const char* table_category::identifier(int value) const noexcept {
  for (const auto& t : texts_)
    if (t.value == value) return t.name;
  return nullptr;
}

std::string error_name(const std::error_code& code) {
  if (const auto* table = dynamic_cast<const table_category*>(&code.category())) {
    if (const char* id = table->identifier(code.value())) {
      std::string_view module = table->name();
      if (module.starts_with("tessera.")) module.remove_prefix(8);
      return std::string(module) + "." + id;
    }
  }
  return std::string(code.category().name()) + ":" + std::to_string(code.value());
}

const std::error_category& core_category() noexcept {
  static const table_category category("tessera.core", k_texts);
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
