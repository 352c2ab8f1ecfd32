#include "tessera/core/log.hpp"

#include <cstdio>
#include <ctime>

namespace tessera::core {

log_sink stderr_log(std::string tag, log_level min_level) {
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
