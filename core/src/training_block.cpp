#include "tessera/core/training_block.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace tessera::core {

void training_block::free_deleter::operator()(std::byte* p) const noexcept { std::free(p); }

result<training_block> training_block::allocate(const training_memory& layout) {
  void* p = std::aligned_alloc(k_arena_alignment, std::max<std::size_t>(layout.total, k_arena_alignment));
  if (p == nullptr)
    return make_error(errc::over_budget, "cannot allocate " + std::to_string(layout.total) + " bytes of training memory");
  std::memset(p, 0, layout.total);
  return training_block(layout, static_cast<std::byte*>(p));
}

training_buffers training_block::buffers() noexcept {
  return {floats(layout_.grads, layout_.grads_bytes), floats(layout_.velocity, layout_.velocity_bytes),
          floats(layout_.workspace, layout_.workspace_bytes), floats(layout_.features, layout_.features_bytes),
          floats(layout_.targets, layout_.targets_bytes)};
}

}  // namespace tessera::core
