// tessera/core/log.hpp — where the commands' events go: one sink type, one line format, a level.
//
// tessera-hub, tessera-edge and tessera-sim report events (a device joined, an update refused, a link
// lost) through a log_sink; the command decides where lines go. The standard one writes
//   [hub 14:03:07] warning: update from pi-07 refused: ...
// to standard error, dropping lines below its level.
//
//   core::log_sink log = core::stderr_log("hub", core::log_level::info);
//   log(core::log_level::warning, "device pi-07 missed the deadline");
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "tessera/core/names.hpp"

namespace tessera::core {

enum class log_level { info, warning, error };
inline constexpr auto k_log_level_names = names_in_order<log_level>({"info", "warning", "error"});

using log_sink = std::function<void(log_level, const std::string&)>;

// Lines "[<tag> HH:MM:SS] <level>: <text>" on standard error for events at `min_level` or above.
[[nodiscard]] log_sink stderr_log(std::string tag, log_level min_level = log_level::info);

}  // namespace tessera::core
