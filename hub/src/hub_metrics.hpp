// Internal: the hub's figures as Prometheus scrapes them (/metrics, prometheus.hpp's text format): the
// run (tessera_hub_state has one sample per phase, 1 for the current one), the fleet, the listener,
// the last figures, the counters and durations since this process started, and the process (process_*).
#pragma once

#include <string>

#include "hub_view.hpp"

namespace tessera::hub {

[[nodiscard]] std::string metrics_document(const hub_view& v);

}  // namespace tessera::hub
