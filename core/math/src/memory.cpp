#include "tessera/core/math/memory.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "tessera/core/math/conv.hpp"
#include "tessera/core/math/mlp.hpp"

namespace tessera::core {
namespace {

constexpr std::size_t align_up(std::size_t n) noexcept {
  return (n + k_arena_alignment - 1) / k_arena_alignment * k_arena_alignment;
}

}  // namespace

std::string mib_text(std::uint64_t bytes) {
  char buf[32];
  const double mib = static_cast<double>(bytes) / (1024.0 * 1024.0);
  // Below a MiB two decimals would print a small device's budget and its need alike as "0.26 MiB" or
  // "0.00 MiB": three decimals tell them apart, and below 10 KiB the bytes themselves.
  if (bytes < 10 * 1024)
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, mib < 1.0 ? "%.3f MiB" : "%.2f MiB", mib);
  return buf;
}

namespace {

// Bytes of the parameters of layers [from, to), encoded.
std::size_t layers_bytes(const mlp_arch& arch, std::size_t from, std::size_t to, codec_kind codec) noexcept {
  const auto slots = param_slots(arch);
  const std::size_t n = layer_start(slots, to) - layer_start(slots, from);
  switch (codec) {
    case codec_kind::f32: return 4 * n;
    case codec_kind::f16: return 2 * n;
    case codec_kind::q8: {
      // One byte per value plus one fp32 scale per row of every tensor (a vector is one row).
      std::size_t rows = 0;
      for (std::size_t l = from; l < to && l < slots.size(); ++l) rows += static_cast<std::size_t>(slots[l].rows) + 1 + (slots[l].has_norm ? 2 : 0);
      return n + 4 * rows;
    }
  }
  return 4 * n;
}

}  // namespace

std::size_t encoded_bytes(const mlp_arch& arch, codec_kind codec) noexcept {
  return frozen_bytes(arch) + layers_bytes(arch, compact_frozen(arch) ? static_cast<std::size_t>(arch.frozen) : 0, arch.layer_count(), codec);
}

std::size_t update_bytes(const mlp_arch& arch, codec_kind codec) noexcept {
  return layers_bytes(arch, static_cast<std::size_t>(arch.frozen), arch.layer_count(), codec);
}

std::size_t frozen_bytes(const mlp_arch& arch) noexcept {
  return compact_frozen(arch) ? layers_bytes(arch, 0, static_cast<std::size_t>(arch.frozen), arch.frozen_codec) : 0;
}

namespace {

// More than every region below takes, in bytes, summed in 64 bits: on a 32-bit board (armhf) the exact
// sizes would wrap for a network whose activations pass 4 GiB (a hostile ASSIGN can ask for one with
// few parameters), and a wrapped total would pass any budget.
std::uint64_t memory_bound(const mlp_arch& arch, std::int64_t batch) {
  const auto rows = static_cast<std::uint64_t>(batch);
  std::uint64_t floats = 4 * static_cast<std::uint64_t>(param_count(arch)) + rows * static_cast<std::uint64_t>(arch.inputs() + arch.outputs());
  std::uint64_t widest = 0;
  for (const layer_plan& p : plan_layers(arch)) {
    const auto in = static_cast<std::uint64_t>(p.in.size()), out = static_cast<std::uint64_t>(p.out.size());
    floats += rows * (3 * out + 1) + static_cast<std::uint64_t>(k_conv_chunk_rows) * static_cast<std::uint64_t>(p.taps * p.in_units);
    widest = std::max({widest, in, out});
    for (const shape_step& st : p.before) {
      floats += 2 * rows * static_cast<std::uint64_t>(st.out.size());
      widest = std::max(widest, static_cast<std::uint64_t>(st.in.size()));
    }
  }
  return 4 * (floats + 2 * rows * widest) + 64 * 64 * (arch.widths.size() + k_max_layers);
}

}  // namespace

// Every build of these sources (CMake's, and tests/fuzz/run-fuzz's own) must define what
// core/math/CMakeLists.txt does: the blocking counted here, and a stack limit of one block.
#if !defined(EIGEN_TEST_SPECIFIC_BLOCKING_SIZES) || !defined(EIGEN_STACK_ALLOCATION_LIMIT)
#error "Eigen's blocking and stack limit must be set as core/math/CMakeLists.txt sets them"
#endif
static_assert(EIGEN_STACK_ALLOCATION_LIMIT == k_product_block_depth * k_product_block_width * sizeof(float),
              "Eigen's stack limit must be one packing block, as core/math/CMakeLists.txt sets it");
static_assert(EIGEN_TEST_SPECIFIC_BLOCKING_SIZE_K == k_product_block_depth && EIGEN_TEST_SPECIFIC_BLOCKING_SIZE_M == k_product_block_width &&
                  EIGEN_TEST_SPECIFIC_BLOCKING_SIZE_N == k_product_block_width,
              "core/math/CMakeLists.txt fixes Eigen's blocking to other sizes than memory.hpp counts");

std::size_t product_stack_bytes(const mlp_arch& arch, std::int64_t batch) {
  // One product: rows × depth times depth × cols. Each buffer is over-allocated by its alignment.
  const auto packed = [](std::int64_t rows, std::int64_t cols, std::int64_t depth) {
    const std::int64_t kc = std::min(depth, k_product_block_depth);
    return static_cast<std::size_t>(kc * (std::min(rows, k_product_block_width) + std::min(cols, k_product_block_width))) * sizeof(float) +
           2 * k_arena_alignment;
  };
  std::size_t most = 0;
  const std::vector<layer_plan> plans = plan_layers(arch);
  for (std::size_t l = 0; l < plans.size(); ++l) {
    const layer_plan& p = plans[l];
    const bool held = compact_frozen(arch) && l < static_cast<std::size_t>(arch.frozen);  // forward only, in blocks (frozen.cpp)
    if (p.kind == layer_kind::conv1d || p.kind == layer_kind::conv2d) {
      // conv.cpp: chunks of c output positions; patches c × P, weights C × P.
      const std::int64_t c = std::min(batch * p.conv.out.positions(), k_conv_chunk_rows), P = p.conv.patch(), C = p.conv.out.channels;
      most = std::max(most, held ? packed(c, C, P) : std::max({packed(c, C, P), packed(C, P, c), packed(c, P, C)}));
    } else if (held) {
      most = std::max(most, packed(batch, std::min(p.units, k_frozen_block_rows), p.in.size()));
    } else {
      // Forward, the weights' gradient, the input's gradient.
      const std::int64_t in = p.in.size(), out = p.units;
      most = std::max({most, packed(batch, out, in), packed(out, in, batch), packed(batch, in, out)});
    }
  }
  return most;
}

namespace {

// The arena's regions in order; `optimizer` false leaves out gradients and velocity (inference).
training_memory plan_memory(const mlp_arch& arch, std::int64_t batch, bool optimizer, bool momentum, codec_kind codec) noexcept {
  training_memory m;
  // Only where size_t is narrower than the bound: with 64 bits the model's limits keep every size far
  // from wrapping, and the hub plans budgets (bisecting) often enough not to pay for it twice.
  if (sizeof(std::size_t) < sizeof(std::uint64_t) && memory_bound(arch, batch) > std::numeric_limits<std::size_t>::max() / 2) {
    m.total = std::numeric_limits<std::size_t>::max();  // no budget holds it
    return m;
  }
  const network net(arch);
  const auto b = static_cast<std::size_t>(batch);
  std::size_t at = 0;
  auto region = [&](std::size_t& offset, std::size_t& size, std::size_t bytes) {
    offset = at;
    size = bytes;
    at += align_up(bytes);
  };
  const std::size_t trained = net.trained_count() * sizeof(float);
  const std::size_t tw = arch.task == task_kind::classification ? 1 : static_cast<std::size_t>(arch.outputs());
  if (compact_frozen(arch)) {
    // The frozen blob ends on an alignment boundary, where the rest of the download begins.
    m.frozen_bytes = frozen_bytes(arch);
    m.frozen = align_up(m.frozen_bytes) - m.frozen_bytes;
    at = align_up(m.frozen_bytes);
    if (codec != codec_kind::f32) region(m.staging, m.staging_bytes, update_bytes(arch, codec));
    region(m.params, m.params_bytes, trained);
  } else {
    region(m.params, m.params_bytes, net.param_count() * sizeof(float));
  }
  region(m.grads, m.grads_bytes, optimizer && !momentum ? trained : 0);
  region(m.velocity, m.velocity_bytes, optimizer && momentum ? trained : 0);
  region(m.workspace, m.workspace_bytes, net.workspace_floats(batch) * sizeof(float));
  region(m.features, m.features_bytes, b * static_cast<std::size_t>(arch.inputs()) * sizeof(float));
  region(m.targets, m.targets_bytes, b * tw * sizeof(float));
  if (!compact_frozen(arch)) region(m.staging, m.staging_bytes, codec == codec_kind::f32 ? 0 : encoded_bytes(arch, codec));
  region(m.scratch, m.scratch_bytes, frozen_scratch_floats(arch) * sizeof(float));
  m.total = at;
  m.stack_bytes = product_stack_bytes(arch, batch);
  return m;
}

}  // namespace

training_memory plan_training_memory(const mlp_arch& arch, std::int64_t batch, bool momentum, codec_kind codec) noexcept {
  return plan_memory(arch, batch, /*optimizer=*/true, momentum, codec);
}

training_memory plan_inference_memory(const mlp_arch& arch, std::int64_t batch, codec_kind codec) noexcept {
  return plan_memory(arch, batch, /*optimizer=*/false, false, codec);
}

std::size_t secure_bytes(const mlp_arch& arch, std::size_t segments) noexcept {
  const std::size_t values = param_count(arch) + segments;
  return values * (sizeof(float) + sizeof(float) + sizeof(std::uint64_t)) + 3 * k_arena_alignment;
}

std::size_t clip_bytes(const mlp_arch& arch) noexcept { return param_count(arch) * sizeof(float) + k_arena_alignment; }

std::int64_t neurons_for(double fraction, std::int64_t n) noexcept {
  return static_cast<std::int64_t>(std::floor(fraction * static_cast<double>(n) + 1e-9));
}

double capacity_for_budget(const mlp_arch& full, std::int64_t batch, bool momentum, codec_kind codec,
                           std::size_t budget_bytes, std::int64_t min_width, std::size_t secure_segments, bool clip) {
  const auto bytes_needed = [&](const mlp_arch& a, std::int64_t b, bool m, codec_kind c) {
    return core::bytes_needed(a, b, m, c) + beside_arena(a, secure_segments, clip);
  };
  auto arch_at = [&](double f) {
    mlp_arch a = full;
    for (std::size_t h = 1; h + 1 < a.widths.size(); ++h)
      a.widths[h] = std::max<std::int64_t>(std::min(min_width, full.widths[h]), neurons_for(f, full.widths[h]));
    return a;
  };
  return largest_fitting([&](double f) { return bytes_needed(arch_at(f), batch, momentum, codec); }, budget_bytes);
}

double largest_fitting(const std::function<std::size_t(double)>& bytes, std::size_t budget_bytes) {
  if (bytes(1.0) <= budget_bytes) return 1.0;
  if (bytes(0.0) > budget_bytes) return 0.0;
  // Memory grows monotonically with f: bisect to a resolution finer than one neuron of the widest layer.
  double lo = 0.0, hi = 1.0;
  for (int i = 0; i < 40; ++i) {
    const double mid = 0.5 * (lo + hi);
    (bytes(mid) <= budget_bytes ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace tessera::core
