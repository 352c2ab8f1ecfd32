// tessera/edge/arena.hpp — the device's training memory: one allocation, carved by the core's formula.
//
// The arena is reserved once per assignment with exactly core::bytes_needed(...) bytes (DESIGN.md §4)
// and every buffer training uses — parameters, gradients, velocity, activations, the input batch, codec
// staging — is a view into it, laid out by core::plan_training_memory. Nothing in the training step
// allocates. Received parameters are written straight into params().
//
//   auto arena = edge::training_arena::reserve(sub.arch, 32, true, core::codec_kind::f32, budget_bytes);
//   if (!arena) return refuse(arena.error());           // "needs 9437184 bytes, budget is 8388608"
//   core::local_trainer trainer(sub.arch, 32, arena.value()->buffers());
//   receive_into(arena.value()->params());
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "tessera/core/base/error.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/core/train/train.hpp"
#include "tessera/core/train/training_block.hpp"

namespace tessera::edge {

class training_arena {
 public:
  // Reserves the arena for one subnet; refuses (errc::over_budget, both numbers in the message) when
  // bytes_needed exceeds budget_bytes, and when the allocation itself fails.
  [[nodiscard]] static core::result<std::unique_ptr<training_arena>> reserve(const core::mlp_arch& arch,
                                                                             std::int64_t batch, bool momentum,
                                                                             core::codec_kind codec,
                                                                             std::size_t budget_bytes);
  // The same for evaluating `arch` (core::plan_inference_memory: no optimizer state).
  [[nodiscard]] static core::result<std::unique_ptr<training_arena>> reserve_for_evaluation(const core::mlp_arch& arch,
                                                                                            std::int64_t batch,
                                                                                            core::codec_kind codec,
                                                                                            std::size_t budget_bytes);
  training_arena(const training_arena&) = delete;
  training_arena& operator=(const training_arena&) = delete;

  [[nodiscard]] std::span<float> params() noexcept { return block_.params(); }
  [[nodiscard]] std::span<std::byte> staging() noexcept { return block_.staging(); }
  [[nodiscard]] core::training_buffers buffers() noexcept { return block_.buffers(); }
  [[nodiscard]] const core::training_memory& layout() const noexcept { return block_.layout(); }
  [[nodiscard]] std::size_t size_bytes() const noexcept { return block_.size_bytes(); }
  [[nodiscard]] std::span<std::byte> all() noexcept { return block_.all(); }
  // The block itself, for the device's round step (core/train/device_round.hpp).
  [[nodiscard]] core::training_block& block() noexcept { return block_; }

 private:
  explicit training_arena(core::training_block block) : block_(std::move(block)) {}
  core::training_block block_;
};

}  // namespace tessera::edge
