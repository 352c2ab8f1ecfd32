// Reading what a child process wrote: whole files, counts of a phrase, matching lines, the tail.
//
//   const std::string log = testing::read_text(hub.err_path());
//   CHECK(testing::count_of(log, "update accepted") == 3);
//   std::fputs(testing::last_lines(log, 20).c_str(), stderr);
#pragma once

#include <cstddef>
#include <span>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::testing {

// The bytes of a text, for the APIs that take bytes (a view: the text must outlive it).
inline std::span<const std::byte> text_bytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

// The whole file; empty if it cannot be read.
inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Non-overlapping occurrences of `needle` in `text`.
inline std::size_t count_of(std::string_view text, std::string_view needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string_view::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

// The complete lines of `text` that contain `needle`.
inline std::vector<std::string> lines_with(const std::string& text, std::string_view needle) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find(needle) != std::string::npos) out.push_back(line);
  return out;
}

// The last `n` lines of `text` (a final newline does not start an empty line).
inline std::string last_lines(const std::string& text, std::size_t n) {
  std::size_t at = text.size();
  if (at > 0 && text[at - 1] == '\n') --at;
  for (std::size_t seen = 0; at > 0; --at)
    if (text[at - 1] == '\n' && ++seen == n) break;
  return text.substr(at);
}

}  // namespace tessera::testing
