#include "tessera/core/train/training_block.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace tessera::core {

void training_block::unmap_deleter::operator()(std::byte* p) const noexcept { ::munmap(p, bytes); }

result<training_block> training_block::allocate(const training_memory& layout) {
  // Whole pages: page alignment is far beyond k_arena_alignment.
  static_assert(k_arena_alignment <= 4096);
  const std::size_t bytes = std::max<std::size_t>(layout.total, 1);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return make_error(errc::over_budget, "cannot allocate " + std::to_string(layout.total) + " bytes of training memory");
  std::memset(p, 0, layout.total);  // resident from the start: never faulted in mid-round
  return training_block(layout, static_cast<std::byte*>(p), bytes);
}

training_buffers training_block::buffers() noexcept {
  return {floats(layout_.grads, layout_.grads_bytes), floats(layout_.velocity, layout_.velocity_bytes),
          floats(layout_.workspace, layout_.workspace_bytes), floats(layout_.features, layout_.features_bytes),
          floats(layout_.targets, layout_.targets_bytes), std::span<const std::byte>(base() + layout_.frozen, layout_.frozen_bytes),
          floats(layout_.scratch, layout_.scratch_bytes)};
}

}  // namespace tessera::core
