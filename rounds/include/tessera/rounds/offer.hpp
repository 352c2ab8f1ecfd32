// tessera/rounds/offer.hpp — what a driver tells the engine of a device it can put into a round, and
// how the engine answers: the devices it leaves out, with the reason, and those that score a model.
//
//   rounds::device_offer o{.id = "device-3", .budget_bytes = 64 << 20, .examples = 600};
//   auto excluded = engine.begin_round({o});   // each excluded_device names its reason
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/core/math/codec.hpp"

namespace tessera::rounds {

struct device_offer {
  std::string id;
  std::uint64_t budget_bytes = 0;            // training memory the device offers
  std::uint64_t examples = 0;
  std::vector<core::codec_kind> codecs;      // f32 is always understood
  double capacity = 0;                       // > 0: fixed by the driver (the simulator's capacities),
                                             // and the budget is not consulted
  std::uint64_t validation_examples = 0;     // held out on the device, for evaluation on the devices
};

// A device that scores the model of the round just closed (plan_evaluation): the codec its copy of
// the model travels in and that copy's bytes.
struct evaluator {
  std::string id;
  core::codec_kind codec = core::codec_kind::f32;
  std::size_t blob_bytes = 0;
  std::uint64_t examples = 0;  // its validation examples (its offer's)
};

struct excluded_device {
  std::string id;
  std::string reason;
};
}  // namespace tessera::rounds
