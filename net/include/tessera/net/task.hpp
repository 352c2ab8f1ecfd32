// tessera/net/task.hpp — what an ASSIGN asks a device to do: the subnet to train and how.
//
// ASSIGN carries the subnet's hidden widths in `widths` and everything else in `hyper_json`:
//
//   {"inputs": 784, "outputs": 10, "task": "classification", "layer_norm": true,
//    "input_scale": [1, 1, 1], "steps": 100, "batch": 32,
//    "lr": 0.05, "momentum": 0.9, "weight_decay": 0,
//    "input_mean": "<base64 f32 × inputs>", "input_std": "<base64 f32 × inputs>"}   // when the model
//                                                       // standardizes its inputs (core/data/fed_stats.hpp)
//
// "frozen": k (successive layer training) holds the first k layers for the forward pass: the device
// trains the others and sends back only theirs (core::update_bytes). An agent that does not know the
// field would train and send every layer, which the hub rejects by its size. "frozen_codec": "f16" or
// "q8" (absent: f32) sends the frozen layers so encoded, first in the blob, and the device holds them so
// (core::compact_frozen), agents saying net::k_feature_compact_frozen in HELLO. Frozen layers come only
// in a training assignment that uploads in the clear: with an evaluation, secure aggregation or
// clip_norm they are refused by name.
//
// The agent builds the subnet's architecture from these alone (it never sees the full model), checks
// it against its data and its memory budget, and trains. Parsing bounds every number before anything
// is sized from it (a hostile hub cannot make the agent allocate) and names the field that is wrong;
// unknown fields are ignored so a newer hub can add some.
//
//   std::string hyper = net::task_to_json(task);                   // hub
//   auto t = net::task_from_assign(assign_message);                // agent: result<training_task>
#pragma once

#include <cstdint>
#include <string>

#include "tessera/core/base/error.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/core/math/model_spec.hpp"
#include "tessera/core/math/optimizer.hpp"
#include "tessera/core/train/device_round.hpp"
#include "tessera/net/messages.hpp"

namespace tessera::net {

inline constexpr std::int64_t max_task_batch = 4096;
inline constexpr std::int64_t max_task_steps = 100'000'000;

using core::training_task;  // core/train/device_round.hpp: the subnet and how to train it

// The hyper_json of an ASSIGN (the hidden widths travel in ASSIGN.widths).
[[nodiscard]] std::string task_to_json(const training_task& t);
// Rebuilds the task from an ASSIGN; errors are errc::bad_field naming the field ("ASSIGN: field 'batch': ...").
[[nodiscard]] core::result<training_task> task_from_assign(const msg::assign& a);
// Transfer ids: the hub's downloads have the top bit clear; the upload answering an assignment carries
// the download's id with the top bit set, so the hub can tell a stale upload (an earlier assignment)
// from the one it waits for.
inline constexpr std::uint64_t upload_bit = std::uint64_t{1} << 63;
[[nodiscard]] constexpr std::uint64_t upload_transfer_id(std::uint64_t download_id) noexcept { return download_id | upload_bit; }

// The hidden widths of an architecture, as ASSIGN.widths carries them.
[[nodiscard]] std::vector<std::uint32_t> hidden_widths(const core::mlp_arch& arch);

}  // namespace tessera::net
