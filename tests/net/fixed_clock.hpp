// The instant the suites that drive a clock by hand start from (token_bucket, session_lifecycle): an
// hour past the steady clock's epoch, so that times a little before it are still valid time points.
#pragma once

#include <chrono>

namespace tessera::test {

inline const std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::time_point(std::chrono::hours(1));

}  // namespace tessera::test
