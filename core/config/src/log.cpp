#include "tessera/core/config/log.hpp"

#include <cstdio>
#include <ctime>

namespace tessera::core {

std::string json_quote(std::string_view text) {
  std::string out = "\"";
  out.reserve(text.size() + 2);
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    if (c == '"' || c == '\\' || c == '\n' || c == '\t' || c == '\r') {
      ++i;
      continue;
    }
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
      ++i;
      continue;
    }
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A multi-byte sequence: copied when it is well-formed UTF-8 (no overlongs, no surrogates), else U+FFFD.
    const std::size_t len = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c <= 0xdf ? 2 : 0;
    bool ok = len > 0 && i + len <= n;
    for (std::size_t k = 1; ok && k < len; ++k) ok = (p[i + k] & 0xc0) == 0x80;
    if (ok && len == 3) ok = !(c == 0xe0 && p[i + 1] < 0xa0) && !(c == 0xed && p[i + 1] >= 0xa0);
    if (ok && len == 4) ok = !(c == 0xf0 && p[i + 1] < 0x90) && !(c == 0xf4 && p[i + 1] >= 0x90);
    if (ok) {
      out.append(text.substr(i, len));
      i += len;
    } else {
      out += "\xef\xbf\xbd";
      ++i;
    }
  }
  out += '"';
  return out;
}

std::string json_log_line(std::string_view source, log_level level, std::string_view message,
                          std::chrono::system_clock::time_point when) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(when.time_since_epoch()).count();
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char stamp[40];
  const std::size_t k = std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(stamp + k, sizeof stamp - k, ".%03dZ", static_cast<int>(ms % 1000));
  return std::string("{\"time\":\"") + stamp + "\",\"level\":\"" + std::string(k_log_level_names.name(level)) +
         "\",\"source\":" + json_quote(source) + ",\"message\":" + json_quote(message) + "}";
}

log_sink stderr_log(std::string tag, log_level min_level, log_format format) {
  if (format == log_format::json) {
    return [tag = std::move(tag), min_level](log_level level, const std::string& text) {
      if (level < min_level) return;
      const std::string line = json_log_line(tag, level, text, std::chrono::system_clock::now()) + "\n";
      std::fwrite(line.data(), 1, line.size(), stderr);  // one write per event: lines never interleave
    };
  }
  return [tag = std::move(tag), min_level](log_level level, const std::string& text) {
    if (level < min_level) return;
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char stamp[16];
    std::strftime(stamp, sizeof stamp, "%H:%M:%S", &local);
    const char* prefix = level == log_level::error ? "error: " : level == log_level::warning ? "warning: " : "";
    std::fprintf(stderr, "[%s %s] %s%s\n", tag.c_str(), stamp, prefix, text.c_str());
  };
}

}  // namespace tessera::core
