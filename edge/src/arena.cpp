#include "tessera/edge/arena.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

namespace tessera::edge {

core::result<std::unique_ptr<training_arena>> training_arena::reserve(const core::mlp_arch& arch, std::int64_t batch,
                                                                      bool momentum, core::codec_kind codec,
                                                                      std::size_t budget_bytes) {
  const core::training_memory layout = core::plan_training_memory(arch, batch, momentum, codec);
  std::string widths;
  for (auto w : arch.widths) widths += (widths.empty() ? "" : "-") + std::to_string(w);
  if (layout.total > budget_bytes)
    return core::make_error(core::errc::over_budget, "subnet " + widths + " at batch " + std::to_string(batch) + " needs " +
                                                         std::to_string(layout.total) + " bytes, the memory budget is " +
                                                         std::to_string(budget_bytes) + " bytes");
  void* p = std::aligned_alloc(core::k_arena_alignment, std::max<std::size_t>(layout.total, core::k_arena_alignment));
  if (p == nullptr)
    return core::make_error(core::errc::over_budget,
                            "cannot allocate the " + std::to_string(layout.total) + "-byte training arena for subnet " + widths);
  // Touch every page now, so the arena's memory is resident from the start and never faulted in mid-round.
  std::memset(p, 0, layout.total);
  return std::unique_ptr<training_arena>(new training_arena(layout, static_cast<std::byte*>(p)));
}

training_arena::~training_arena() { std::free(base_); }

core::training_buffers training_arena::buffers() noexcept {
  return {floats(layout_.grads, layout_.grads_bytes), floats(layout_.velocity, layout_.velocity_bytes),
          floats(layout_.workspace, layout_.workspace_bytes), floats(layout_.features, layout_.features_bytes),
          floats(layout_.targets, layout_.targets_bytes)};
}

}  // namespace tessera::edge
