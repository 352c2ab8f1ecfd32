// tessera/rounds/assignment.hpp — one device's part in one round, and the states it moves through.
//
// The engine owns every assignment's state; its driver (the hub's sessions, the simulator's in-process
// devices) only reports what happened, and the engine moves the state:
//
//              sent                    downloaded                announced (claim checked)
//   assigned ────────▶ downloading ────────────────▶ training ───────────────────────▶ uploading
//      │                  ▲   sent again (the device lost its copy): from any open state     │
//      │                  └──────────────────────────────────────────────────────────────────┤
//      │                                                                            received │
//      │   refused: the device declined         rejected: a bad claim or blob               ▼
//      ├─────────────────────▶ refused   ◀─┐  ┌─▶ rejected                          accepted
//      │                                   any open state
//      └──── the round closes while open ──▶ straggler (its neurons keep their values)
//
// accepted, refused, rejected and straggler are final. next_state() is the whole table.
//
//   auto s = rounds::next_state(a.state, rounds::assignment_event::downloaded);   // optional
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/base/error.hpp"
#include "tessera/core/math/ist.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/core/train/device_round.hpp"
#include "tessera/crypto/masking.hpp"

namespace tessera::rounds {

enum class assignment_state : std::uint8_t {
  assigned, downloading, training, uploading, accepted, refused, rejected, straggler
};
enum class assignment_event : std::uint8_t { sent, downloaded, announced, received, refused, rejected, closed };

[[nodiscard]] std::string_view to_string(assignment_state s) noexcept;
[[nodiscard]] std::string_view to_string(assignment_event e) noexcept;
// Not yet ended: the round still waits for this device.
[[nodiscard]] bool is_open(assignment_state s) noexcept;
// The state after `event`, or nullopt where the event does not fit the state.
[[nodiscard]] std::optional<assignment_state> next_state(assignment_state s, assignment_event e) noexcept;

struct assignment {
  std::string device;
  std::size_t index = 0;              // position in the round's device order
  std::size_t group = 0;
  core::subnet sub;
  core::codec_kind codec = core::codec_kind::f32;
  core::training_task task;
  std::size_t blob_bytes = 0;         // the subnet in its codec: the download's size
  // The upload's: the subnet's layers after the frozen ones in its codec (core::update_bytes: blob_bytes
  // when none is frozen), or with secure aggregation the masked values' bytes.
  std::size_t upload_bytes = 0;
  // Secure aggregation: the segments this device's masked input covers (its group's, then the shared
  // parameters'), and the key of its stochastic rounding (from the round's plan seed and its id, so the
  // simulator rounds alike; it hides nothing: the masks do). So it is no crypto::key256, which is a
  // secret: its bytes are the hub's to send, in ASSIGN.
  std::vector<std::uint32_t> segments;
  std::array<std::byte, 32> rounding_key{};
  assignment_state state = assignment_state::assigned;
  core::error reason;                 // why refused or rejected
  std::uint64_t examples = 0;         // from the accepted update
  std::uint64_t steps = 0;
  std::optional<double> loss;         // none in a secure round: the device keeps it
  std::uint64_t clipped = 0;          // plain DP rounds: 1 if the device clipped its change (its claim)
  std::vector<float> trained;         // the decoded upload, until the engine adds it to the round's sums
  // Bytes that crossed the wire, resends included, and the resent part (set by the driver).
  std::uint64_t bytes_down = 0, bytes_up = 0, resent_bytes = 0;
};

}  // namespace tessera::rounds
