#include "tessera/rounds/natural_order.hpp"

#include <cctype>

namespace tessera::rounds {
namespace {

bool is_digit(char c) noexcept { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

}  // namespace

// Ties (leading zeros) fall back to plain comparison.
bool natural_less(std::string_view a, std::string_view b) noexcept {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (is_digit(a[i]) && is_digit(b[j])) {
      std::size_t ie = i, je = j;
      while (ie < a.size() && a[ie] == '0') ++ie;
      while (je < b.size() && b[je] == '0') ++je;
      std::size_t ia = ie, jb = je;
      while (ia < a.size() && is_digit(a[ia])) ++ia;
      while (jb < b.size() && is_digit(b[jb])) ++jb;
      if (ia - ie != jb - je) return ia - ie < jb - je;
      const int c = a.substr(ie, ia - ie).compare(b.substr(je, jb - je));
      if (c != 0) return c < 0;
      i = ia;
      j = jb;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  if (a.size() - i != b.size() - j) return a.size() - i < b.size() - j;
  return a < b;
}

}  // namespace tessera::rounds
