// tessera/core/train/device_round.hpp — a device's part of a round: take the download, train, encode the upload.
//
// The agent (edge/) and the simulator's in-process devices (rounds/sim/) run exactly this code in the
// same memory layout (training_block), which is what lets a simulated federation reproduce a real one
// bit for bit. The blob travels through the block: a download is written into blob_region() (the
// parameters themselves for f32, the codec's staging region otherwise), take_download() turns it into
// parameters, and train_for_upload() trains and writes the upload (its trained layers: update_region)
// back into the same memory.
//
//   auto block = core::training_block::allocate(core::plan_training_memory(task.arch, core::memory_rows(task), true, codec));
//   auto blob = core::blob_region(block.value(), codec, core::encoded_bytes(task.arch, codec));
//   receive_into(blob);                                        // the network, or the engine's encoder
//   TESSERA_TRY(core::take_download(block.value(), task.arch, codec, blob));
//   auto upload = core::update_region(block.value(), task.arch, codec);
//   auto report = core::train_for_upload(block.value(), task, codec, upload, batches, nullptr);
//   send(upload);
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "tessera/core/base/error.hpp"
#include "tessera/core/data/input_normalization.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/core/math/optimizer.hpp"
#include "tessera/core/train/train.hpp"
#include "tessera/core/train/training_block.hpp"

namespace tessera::core {

// What an assignment asks a device to do: the subnet's architecture and how to train it.
struct training_task {
  mlp_arch arch;             // the subnet (widths include inputs and outputs)
  std::int64_t steps = 0;
  std::int64_t batch = 0;
  // > 0: each step is taken in micro-batches of this many rows (network::batch_part): the same step,
  // with the memory of this many rows of activations and inputs (memory_rows).
  std::int64_t micro_batch = 0;
  sgd_options sgd;
  // The model's input normalization, applied to every batch (null: none). Shared: a round's tasks all
  // carry the same one.
  std::shared_ptr<const input_normalization> normalization{};
  // > 0 (differential privacy): the change (trained − received, every parameter as one vector) is
  // scaled down to this L2 norm before the upload; the received parameters must be kept for it.
  double clip_norm = 0;
};

// The rows a task's training memory holds at a time: its micro-batch, or its whole batch.
[[nodiscard]] inline std::int64_t memory_rows(const training_task& t) noexcept { return memory_rows(t.batch, t.micro_batch); }

// Scales params − received down to L2 norm `clip` when it is longer (McMahan et al., ICLR 2018: a
// device's whole update has norm at most clip, to the precision of the floats it is stored in: the hub
// clips again in double precision); returns the norm before clipping.
[[nodiscard]] double clip_change(std::span<const float> received, std::span<float> params, double clip) noexcept;

// Where the round's blob of `bytes` bytes (encoded_bytes(arch, codec)) lives in the block.
[[nodiscard]] std::span<std::byte> blob_region(training_block& block, codec_kind codec, std::size_t bytes) noexcept;

// Where the update lives once train_for_upload has written it (update_bytes(arch, codec) bytes): the
// trained layers' part of the parameters (f32, in place), or the start of the staging region. With no
// frozen layers it is the download's blob_region.
[[nodiscard]] std::span<std::byte> update_region(training_block& block, const mlp_arch& arch, codec_kind codec) noexcept;

// The download is in blob_region: decode it into the parameters (f16, q8), or check that every
// received parameter is finite (f32, already in place). Errors name the offending value.
[[nodiscard]] result<void> take_download(training_block& block, const mlp_arch& arch, codec_kind codec,
                                         std::span<const std::byte> blob);

// Trains task.steps steps on the block's parameters (on `data` normalized by task.normalization, if
// any), then encodes the trained ones into `upload` (update_region) for the upload.
// `cancel` may be null; when it turns true training stops with errc::cancelled.
// With task.clip_norm > 0, `received` holds the parameters as downloaded (clip_bytes beside the block).
[[nodiscard]] result<local_training_report> train_for_upload(training_block& block, const training_task& task,
                                                             codec_kind codec, std::span<std::byte> upload,
                                                             batch_source& data, const std::atomic<bool>* cancel,
                                                             std::span<const float> received = {});

}  // namespace tessera::core
