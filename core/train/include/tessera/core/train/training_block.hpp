// tessera/core/train/training_block.hpp — one aligned mapping carved into a trainer's regions.
//
// The device's arena (edge/arena.hpp) and the simulator's per-device training memory are the same
// thing: plan_training_memory's layout in one allocation aligned to k_arena_alignment. Sharing it is
// what makes a simulated round and a device's round compute the very same floats: Eigen's kernels peel
// loops by address alignment, so the same math on differently aligned buffers sums in another order.
// The block is its own anonymous mapping, not heap memory: released, it goes back to the system at
// once. From the heap, a freed arena could stay resident (glibc raises its mmap threshold after the
// first large free, so the next arenas come from the heap) and a device given new assignments in a
// row could hold several arenas' worth of memory though only one is alive.
//
//   auto block = core::training_block::allocate(core::plan_training_memory(arch, 32, true, codec));
//   core::local_trainer trainer(arch, 32, block.value().buffers());
//   trainer.run(block.value().params(), batches, options);
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "tessera/core/base/error.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/core/train/train.hpp"

namespace tessera::core {

class training_block {
 public:
  // Maps (and touches, so it is resident from the start) layout.total bytes; errc::over_budget if the
  // mapping fails.
  [[nodiscard]] static result<training_block> allocate(const training_memory& layout);

  [[nodiscard]] std::span<float> params() noexcept { return floats(layout_.params, layout_.params_bytes); }
  [[nodiscard]] std::span<std::byte> staging() noexcept { return {base() + layout_.staging, layout_.staging_bytes}; }
  [[nodiscard]] training_buffers buffers() noexcept;
  [[nodiscard]] std::span<std::byte> all() noexcept { return {base(), layout_.total}; }
  [[nodiscard]] const training_memory& layout() const noexcept { return layout_; }
  [[nodiscard]] std::size_t size_bytes() const noexcept { return layout_.total; }

 private:
  struct unmap_deleter {
    std::size_t bytes = 0;
    void operator()(std::byte* p) const noexcept;
  };
  training_block(training_memory layout, std::byte* base, std::size_t mapped)
      : layout_(layout), base_(base, unmap_deleter{mapped}) {}
  [[nodiscard]] std::byte* base() noexcept { return base_.get(); }
  [[nodiscard]] std::span<float> floats(std::size_t offset, std::size_t bytes) noexcept {
    return {reinterpret_cast<float*>(base() + offset), bytes / sizeof(float)};
  }
  training_memory layout_;
  std::unique_ptr<std::byte, unmap_deleter> base_;
};

}  // namespace tessera::core
