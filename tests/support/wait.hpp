// Waiting with a deadline: tests and benchmarks poll for what they expect instead of sleeping a guess.
//
//   REQUIRE(testing::eventually([&] { return !hub.running(); }, 60s));
//   testing::eventually(ready, 10s, [&] { io.restart(); io.run_for(10ms); });  // drives in-process agents
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace tessera::testing {

// Polls `ready` about every 10 ms until it holds or `limit` passes; false on the deadline. `pump` (if
// given) runs instead of sleeping: in-process agents are then driven from the waiting thread.
template <class Pred>
[[nodiscard]] bool eventually(Pred&& ready, std::chrono::milliseconds limit, const std::function<void()>& pump = {}) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!ready()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (pump) pump();
    else std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace tessera::testing
