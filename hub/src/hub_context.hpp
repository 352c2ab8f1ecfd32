// Internal: what every part of the hub reads — the configuration and the log. hub_service owns it; the
// registry, the round driver and the operator's desk hold it by reference and never outlive it.
#pragma once

#include <string>

#include "tessera/core/config/log.hpp"
#include "tessera/hub/hub_config.hpp"

namespace tessera::hub {

struct hub_context {
  hub_config config;
  core::log_sink log;

  void say(core::log_level level, const std::string& text) const {
    if (log) log(level, text);
  }
};

}  // namespace tessera::hub
