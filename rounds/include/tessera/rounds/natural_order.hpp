// tessera/rounds/natural_order.hpp — the order in which a round takes devices.
#pragma once

#include <string_view>

namespace tessera::rounds {

// Device ids in natural order: runs of digits compare as numbers ("device-2" before "device-10"), so a
// fleet named by index sorts like the simulator's devices. Plans, statistics and the devices' scores
// take devices in it, so sums come out the same whatever order the devices answered in.
[[nodiscard]] bool natural_less(std::string_view a, std::string_view b) noexcept;

}  // namespace tessera::rounds
