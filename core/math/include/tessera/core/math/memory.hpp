// tessera/core/math/memory.hpp — the memory-budget formula: exactly what training a subnet needs.
//
// A device trains inside one arena (DESIGN.md §4) holding, each region aligned to 64 bytes:
//   parameters, the optimizer's state for the trained ones (with momentum a velocity that the backward
//   pass accumulates gradients into; plain SGD a gradient buffer instead; frozen layers, mlp_arch::frozen,
//   have none), the activations and their
//   gradients for one mini-batch (network::workspace_floats), the input batch and its targets, and the
//   codec's staging buffer (the encoded blob of the received subnet before it is decoded into the
//   parameters; none for f32, which is received straight into them).
// Frozen layers held encoded (compact_frozen) are not among the parameters: their blob has a region of
// its own (frozen_bytes) that ends where the rest of the download begins (the parameters for f32, the
// staging buffer otherwise, which then holds only the trained layers), so that the download is received
// whole into one span; and the forward pass decodes them through a scratch (frozen_scratch_floats).
// Beside the arena, on the stack, the matrix products' packing buffers (product_stack_bytes).
// The hub sizes each device's subnet with this formula and the agent checks it again before it accepts
// an assignment; the arena is carved by the same layout, so "needed" and "used" cannot drift apart.
//
//   core::training_memory m = core::plan_training_memory(sub.arch, 32, /*momentum=*/true, core::codec_kind::f32);
//   if (m.needed() > budget_bytes) refuse("needs " + std::to_string(m.needed()) + " bytes");
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "tessera/core/base/error.hpp"
#include "tessera/core/base/names.hpp"
#include "tessera/core/math/model_spec.hpp"

namespace tessera::core {

// Bytes of a subnet's parameters encoded with `codec` (its frozen layers with arch.frozen_codec when
// compact_frozen).
[[nodiscard]] std::size_t encoded_bytes(const mlp_arch& arch, codec_kind codec) noexcept;
// Bytes of the update a device sends: its trained layers' parameters (after arch.frozen) encoded.
[[nodiscard]] std::size_t update_bytes(const mlp_arch& arch, codec_kind codec) noexcept;
// Bytes of the frozen layers encoded with arch.frozen_codec when compact_frozen(arch), else 0: what the
// device holds of them, and the download's first part.
[[nodiscard]] std::size_t frozen_bytes(const mlp_arch& arch) noexcept;
// A compact frozen layer runs a block of this many rows (output units) at a time, decoded into a
// scratch (a convolution's whole kernel: it is small); frozen_scratch_floats(arch) floats of it, 0
// when the frozen layers are not compact. Eight rows of a 784-input layer are 25 KiB, and the block's
// product packs no more than eight columns (product_stack_bytes counts the block's product alone).
inline constexpr std::int64_t k_frozen_block_rows = 8;
[[nodiscard]] std::size_t frozen_scratch_floats(const mlp_arch& arch);

inline constexpr std::size_t k_arena_alignment = 64;

// The rows a training step holds in memory at once: a micro-batch's when steps are taken in parts
// (micro_batch > 0), else the batch's. Every budget (the hub's plan, the agent's arena, train-local's)
// is counted at these rows.
[[nodiscard]] constexpr std::int64_t memory_rows(std::int64_t batch, std::int64_t micro_batch) noexcept {
  return micro_batch > 0 ? micro_batch : batch;
}

// A byte count as a reader meets it in a refusal: "1.50 MiB" (two decimals), "0.256 MiB" below one
// (three decimals), "76 bytes" below 10 KiB.
[[nodiscard]] std::string mib_text(std::uint64_t bytes);

// Eigen's matrix products pack blocks of their two operands into scratch buffers on the stack: at most
// min(depth, 256) × min(rows, 128) and min(depth, 256) × min(columns, 128) floats. core/math/CMakeLists.txt
// fixes this blocking (Eigen would otherwise size it from the CPU's caches), so that hub and device
// count the same bytes, and keeps both buffers under Eigen's stack limit, so that no step allocates.
inline constexpr std::int64_t k_product_block_depth = 256, k_product_block_width = 128;
// The largest pair of packing buffers any matrix product of a training step (or an evaluation) of
// `arch` at `batch` rows takes, in bytes with their alignment: memory the device needs beside its arena.
[[nodiscard]] std::size_t product_stack_bytes(const mlp_arch& arch, std::int64_t batch);

// Byte offsets of each region in the arena, and the total; and the stack the matrix products take.
struct training_memory {
  std::size_t params = 0, grads = 0, velocity = 0, workspace = 0, features = 0, targets = 0, staging = 0, frozen = 0, scratch = 0;
  std::size_t params_bytes = 0, grads_bytes = 0, velocity_bytes = 0, workspace_bytes = 0, features_bytes = 0,
              targets_bytes = 0, staging_bytes = 0, frozen_bytes = 0, scratch_bytes = 0;
  std::size_t total = 0;        // bytes of the whole arena
  std::size_t stack_bytes = 0;  // product_stack_bytes: beside the arena, on the training thread's stack
  [[nodiscard]] std::size_t needed() const noexcept { return total + stack_bytes; }
};

[[nodiscard]] training_memory plan_training_memory(const mlp_arch& arch, std::int64_t batch, bool momentum,
                                                   codec_kind codec) noexcept;
// What training needs: the arena and the products' stack.
[[nodiscard]] inline std::size_t bytes_needed(const mlp_arch& arch, std::int64_t batch, bool momentum,
                                              codec_kind codec) noexcept {
  return plan_training_memory(arch, batch, momentum, codec).needed();
}

// What evaluating a model needs (a device scoring the full model on its validation split): the same
// layout without the optimizer's state (no gradients, no velocity). The hub asks only devices whose
// budget holds it; the agent checks it again and evaluates inside exactly this.
[[nodiscard]] training_memory plan_inference_memory(const mlp_arch& arch, std::int64_t batch, codec_kind codec) noexcept;
[[nodiscard]] inline std::size_t inference_bytes(const mlp_arch& arch, std::int64_t batch, codec_kind codec) noexcept {
  return plan_inference_memory(arch, batch, codec).needed();
}

// Secure aggregation's memory on a device besides the arena (crypto/secagg.hpp): the received
// parameters kept to take the change against, the weighted change (one float per value), and its
// encoded, masked values (8 bytes each; the upload is packed over them), for `values` = the subnet's
// parameters plus one weight per segment it covers. The hub plans with it, the agent checks it.
[[nodiscard]] std::size_t secure_bytes(const mlp_arch& arch, std::size_t segments) noexcept;
// Clipping the change to an L2 norm (differential privacy) besides the arena: the received parameters.
[[nodiscard]] std::size_t clip_bytes(const mlp_arch& arch) noexcept;
// Everything a device holds besides its arena for a subnet: secure aggregation's buffers when
// `secure_segments` > 0, the received parameters when `clip`.
[[nodiscard]] inline std::size_t beside_arena(const mlp_arch& arch, std::size_t secure_segments, bool clip) {
  return (secure_segments > 0 ? secure_bytes(arch, secure_segments) : 0) + (clip ? clip_bytes(arch) : 0);
}

// The neurons a fraction f of a hidden layer of n neurons gives: ⌊f·n⌋, forgiving a floating-point error
// of 1e-9 (0.29·100 is 28.999…96). capacity_for_budget sizes subnets with it and the planner (ist.hpp)
// cuts groups with it, so a device's group is never a neuron wider than the subnet its capacity was
// computed for.
[[nodiscard]] std::int64_t neurons_for(double fraction, std::int64_t n) noexcept;

// The largest fraction f in (0, 1] of every hidden layer such that a subnet with neurons_for(f, n_l)
// neurons per hidden layer fits in budget_bytes; 0 if not even min_width neurons per layer fit. Used by the hub to
// turn a device's budget into its capacity for the planner.
// What beside_arena(subnet, secure_segments, clip) gives counts too.
[[nodiscard]] double capacity_for_budget(const mlp_arch& full, std::int64_t batch, bool momentum, codec_kind codec,
                                         std::size_t budget_bytes, std::int64_t min_width, std::size_t secure_segments = 0,
                                         bool clip = false);

// The largest f in (0, 1] with bytes(f) ≤ budget_bytes, bytes growing with f (to 2⁻⁴⁰); 0 if not
// even bytes(0) fits. The bisection behind capacity_for_budget and ist.hpp's capacity_for_stage.
[[nodiscard]] double largest_fitting(const std::function<std::size_t(double)>& bytes, std::size_t budget_bytes);

}  // namespace tessera::core
