#include "tessera/edge/arena.hpp"

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
  // Touched at allocation, so the arena's memory is resident from the start and never faulted in mid-round.
  auto block = core::training_block::allocate(layout);
  if (!block)
    return core::make_error(core::errc::over_budget,
                            "cannot allocate the " + std::to_string(layout.total) + "-byte training arena for subnet " + widths);
  return std::unique_ptr<training_arena>(new training_arena(std::move(block.value())));
}

}  // namespace tessera::edge
