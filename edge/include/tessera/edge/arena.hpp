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

#include "tessera/core/error.hpp"
#include "tessera/core/memory.hpp"
#include "tessera/core/train.hpp"

namespace tessera::edge {

class training_arena {
 public:
  // Reserves the arena for one subnet; refuses (errc::over_budget, both numbers in the message) when
  // bytes_needed exceeds budget_bytes, and when the allocation itself fails.
  [[nodiscard]] static core::result<std::unique_ptr<training_arena>> reserve(const core::mlp_arch& arch,
                                                                             std::int64_t batch, bool momentum,
                                                                             core::codec_kind codec,
                                                                             std::size_t budget_bytes);
  ~training_arena();
  training_arena(const training_arena&) = delete;
  training_arena& operator=(const training_arena&) = delete;

  [[nodiscard]] std::span<float> params() noexcept { return floats(layout_.params, layout_.params_bytes); }
  [[nodiscard]] std::span<std::byte> staging() noexcept { return {base_ + layout_.staging, layout_.staging_bytes}; }
  [[nodiscard]] core::training_buffers buffers() noexcept;
  [[nodiscard]] const core::training_memory& layout() const noexcept { return layout_; }
  [[nodiscard]] std::size_t size_bytes() const noexcept { return layout_.total; }
  [[nodiscard]] std::span<std::byte> all() noexcept { return {base_, layout_.total}; }

 private:
  training_arena(core::training_memory layout, std::byte* base) : layout_(layout), base_(base) {}
  [[nodiscard]] std::span<float> floats(std::size_t offset, std::size_t bytes) noexcept {
    return {reinterpret_cast<float*>(base_ + offset), bytes / sizeof(float)};
  }
  core::training_memory layout_;
  std::byte* base_;
};

}  // namespace tessera::edge
