// Internal: this process's CPU seconds, resident bytes and open descriptors, as the Prometheus client
// libraries name them (process_*), read from /proc at each scrape; absent where /proc says nothing.
#pragma once

#include <optional>

namespace tessera::hub {

struct process_figures {
  std::optional<double> cpu_seconds, resident_bytes, open_fds;
};

[[nodiscard]] process_figures read_process_figures();

}  // namespace tessera::hub
