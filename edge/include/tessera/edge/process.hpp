// tessera/edge/process.hpp — what the agent reports about its own process.
//
//   std::printf("peak %zu bytes\n", edge::peak_rss_bytes());
#pragma once

#include <cstddef>

namespace tessera::edge {

// Peak resident set size of this process (VmHWM in /proc/self/status), in bytes; 0 if unknown.
[[nodiscard]] std::size_t peak_rss_bytes() noexcept;

// Anonymous memory resident now (RssAnon): heap, stack and written data, not the code and libraries
// mapped from files, which the kernel can drop and read again; in bytes, 0 if unknown.
[[nodiscard]] std::size_t anonymous_rss_bytes() noexcept;


}  // namespace tessera::edge
