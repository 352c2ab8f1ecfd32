#include "tessera/edge/process.hpp"

#include <cstdio>
#include <cstring>

namespace tessera::edge {
namespace {

// The value of a "Name:   N kB" line of /proc/self/status, in bytes; 0 if the line or the file is missing.
std::size_t status_bytes(const char* field) noexcept {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  const std::size_t n = std::strlen(field);
  char line[256];
  std::size_t kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, field, n) == 0 && line[n] == ':') {
      unsigned long long v = 0;
      if (std::sscanf(line + n + 1, "%llu", &v) == 1) kib = static_cast<std::size_t>(v);
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}

}  // namespace

std::size_t peak_rss_bytes() noexcept { return status_bytes("VmHWM"); }

std::size_t anonymous_rss_bytes() noexcept { return status_bytes("RssAnon"); }

}  // namespace tessera::edge
