#include "tessera/edge/arena.hpp"

#include <string>

namespace tessera::edge {

namespace {

core::result<core::training_block> allocate(const core::training_memory& layout, const core::mlp_arch& arch, std::int64_t batch,
                                            const char* what, std::size_t budget_bytes) {
  std::string widths;
  for (auto w : arch.widths) widths += (widths.empty() ? "" : "-") + std::to_string(w);
  if (layout.needed() > budget_bytes)
    return core::make_error(core::errc::over_budget, std::string(what) + " " + widths + " at batch " + std::to_string(batch) + " needs " +
                                                         std::to_string(layout.needed()) + " bytes, the memory budget is " +
                                                         std::to_string(budget_bytes) + " bytes (an arena of " +
                                                         std::to_string(layout.total) + " bytes and " + std::to_string(layout.stack_bytes) +
                                                         " bytes of stack for its matrix products)");
  // Touched at allocation, so the arena's memory is resident from the start and never faulted in mid-round.
  auto block = core::training_block::allocate(layout);
  if (!block)
    return core::make_error(core::errc::over_budget,
                            "cannot allocate the " + std::to_string(layout.total) + "-byte arena for " + what + " " + widths);
  return std::move(block).value();
}

}  // namespace

core::result<std::unique_ptr<training_arena>> training_arena::reserve(const core::mlp_arch& arch, std::int64_t batch,
                                                                      bool momentum, core::codec_kind codec,
                                                                      std::size_t budget_bytes) {
  TESSERA_ASSIGN_OR_RETURN(auto block, allocate(core::plan_training_memory(arch, batch, momentum, codec), arch, batch, "subnet", budget_bytes));
  return std::unique_ptr<training_arena>(new training_arena(std::move(block)));
}

core::result<std::unique_ptr<training_arena>> training_arena::reserve_for_evaluation(const core::mlp_arch& arch, std::int64_t batch,
                                                                                     core::codec_kind codec, std::size_t budget_bytes) {
  TESSERA_ASSIGN_OR_RETURN(auto block, allocate(core::plan_inference_memory(arch, batch, codec), arch, batch,
                                                "evaluating the model", budget_bytes));
  return std::unique_ptr<training_arena>(new training_arena(std::move(block)));
}

}  // namespace tessera::edge
