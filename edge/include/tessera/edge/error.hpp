// tessera/edge/error.hpp — the agent's typed errors: why it refuses an assignment or cannot start.
//
// An ASSIGN the device cannot honour is refused with one of these and a line naming the numbers
// involved; the same codes let tests tell a codec the device has disabled from a subnet too large for
// its budget without parsing text.
//
//   auto task = edge::check_assignment(assign, limits);
//   if (!task && task.error().code == edge::errc::codec_disabled) ...
#pragma once

#include <string>
#include <system_error>

#include "tessera/core/base/error.hpp"

namespace tessera::edge {

enum class errc {
  bad_task = 1,      // the ASSIGN's task does not parse or is out of bounds
  inputs_mismatch,   // the subnet's inputs differ from the device data's features
  batch_too_large,   // the batch exceeds what the data reader was sized for (data.max_batch)
  codec_disabled,    // the blob's codec is not enabled on this device
  size_mismatch,     // the declared blob size is not the subnet's size in its codec
  bad_download,      // the downloaded parameters do not decode or are not finite
  training_failed,   // training stopped with an error (a diverged loss, unreadable data)
  data_over_budget,  // the data reader's buffers alone exceed the memory budget
  labels_mismatch,   // the data's targets do not suit the model (a label out of range, fractional, not finite)
  secure_refused,    // secure aggregation: this device's configuration refuses the assignment (required, or off)
  secure_step,       // secure aggregation: a step from the hub that this device does not take (a bad roster,
                     // a request for both shares of one device, a step out of order)
  privacy_policy,    // the hub asks for less privacy than this device's policy allows (privacy_policy.hpp)
};

[[nodiscard]] const std::error_category& category_of(errc) noexcept;  // "tessera.edge"
using core::make_error, core::make_error_code;

}  // namespace tessera::edge

template <>
struct std::is_error_code_enum<tessera::edge::errc> : std::true_type {};
