// tessera/core/base/names.hpp — an enum's names in one table: to_string, parsing, and the list for messages.
//
// Each enum that appears in a configuration, a message or a log keeps its names in one constexpr table,
// so printing, parsing and "expected one of ..." cannot disagree (and config_reader::choice reads the
// enum directly from it).
//
//   inline constexpr auto k_codec_names = core::names_in_order<codec_kind>({"f32", "f16", "q8"});
//   std::string_view s = k_codec_names.name(codec_kind::q8);      // "q8"
//   std::optional<codec_kind> c = k_codec_names.find("f16");      // codec_kind::f16
//   std::string all = k_codec_names.list();                        // "f32, f16, q8"
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace tessera::core {

template <class E>
struct enum_name {
  E value;
  std::string_view name;
};

template <class E, std::size_t N>
class name_table {
 public:
  constexpr explicit name_table(std::array<enum_name<E>, N> entries) noexcept : entries_(entries) {}

  // The value's name; "?" for a value outside the table (a bug: every enumerator is listed).
  [[nodiscard]] constexpr std::string_view name(E value) const noexcept {
    for (const auto& e : entries_)
      if (e.value == value) return e.name;
    return "?";
  }
  [[nodiscard]] constexpr std::optional<E> find(std::string_view name) const noexcept {
    for (const auto& e : entries_)
      if (e.name == name) return e.value;
    return std::nullopt;
  }
  // "a, b, c": the names in table order, for messages and help.
  [[nodiscard]] std::string list() const {
    std::string out;
    for (const auto& e : entries_) (out += out.empty() ? "" : ", ") += e.name;
    return out;
  }
  [[nodiscard]] constexpr const std::array<enum_name<E>, N>& entries() const noexcept { return entries_; }

 private:
  std::array<enum_name<E>, N> entries_;
};

// The table of an enum whose enumerators are 0, 1, ..., N-1 in declaration order (every enum here):
// names[i] names enumerator i.
template <class E, std::size_t N>
[[nodiscard]] constexpr name_table<E, N> names_in_order(const std::string_view (&names)[N]) noexcept {
  std::array<enum_name<E>, N> entries{};
  for (std::size_t i = 0; i < N; ++i) entries[i] = {static_cast<E>(i), names[i]};
  return name_table<E, N>(entries);
}

}  // namespace tessera::core
