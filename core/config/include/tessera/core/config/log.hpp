// tessera/core/config/log.hpp — where the commands' events go: one sink type, two line formats, a level.
//
// tessera-hub, tessera-edge and tessera-sim report events (a device joined, an update refused, a link
// lost) through a log_sink; the command decides where lines go. The standard one writes to standard
// error, dropping lines below its level, either for people (log_format text)
//   [hub 14:03:07] warning: update from pi-07 refused: ...
// or for journald and log shippers (log_format json), one object per line with stable field names:
//   {"time":"2026-12-04T14:03:07.251Z","level":"warning","source":"hub","message":"update from pi-07 refused: ..."}
// ("time" is UTC with milliseconds; "level" is info, warning or error; "source" is the command).
//
//   core::log_sink log = core::stderr_log("hub", core::log_level::info, core::log_format::json);
//   log(core::log_level::warning, "device pi-07 missed the deadline");
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "tessera/core/base/names.hpp"

namespace tessera::core {

enum class log_level { info, warning, error };
inline constexpr auto k_log_level_names = names_in_order<log_level>({"info", "warning", "error"});
enum class log_format { text, json };
inline constexpr auto k_log_format_names = names_in_order<log_format>({"text", "json"});

using log_sink = std::function<void(log_level, const std::string&)>;

// Lines for events at `min_level` or above on standard error, in `format`.
[[nodiscard]] log_sink stderr_log(std::string tag, log_level min_level = log_level::info, log_format format = log_format::text);

// One event as its json line (without the newline).
[[nodiscard]] std::string json_log_line(std::string_view source, log_level level, std::string_view message,
                                        std::chrono::system_clock::time_point when);
// `text` as a JSON string literal (quotes included): ", \ and control characters escaped, and bytes
// that are not valid UTF-8 replaced by U+FFFD, so every line parses whatever a message holds.
[[nodiscard]] std::string json_quote(std::string_view text);

}  // namespace tessera::core
