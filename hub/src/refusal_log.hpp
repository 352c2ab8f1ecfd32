// Internal: connections refused before their HELLO (a foreign or revoked certificate, a port scan, a
// flood) in the hub's log, one by one up to 5 in 10 s, then as one summary line per window: a flood of
// bad connections cannot fill a disk.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "tessera/core/base/error.hpp"
#include "tessera/core/config/log.hpp"

namespace tessera::hub {

class refusal_log {
 public:
  void note(const core::error& why, const core::log_sink& log);

 private:
  std::chrono::steady_clock::time_point window_{};
  std::size_t logged_ = 0, quiet_ = 0;  // in this window: lines written, refusals only counted
  std::string last_;                    // the last one only counted, for the summary
};

}  // namespace tessera::hub
