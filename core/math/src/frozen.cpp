// Frozen layers held encoded (mlp_arch::frozen_codec f16 or q8; successive layer training): the forward
// pass of such a layer, and the scratch it decodes into. The blob is the codec's layout of the frozen
// layers (codec.hpp): per layer the weight rows, then the bias, gain and shift, each vector one row.
// A dense layer decodes k_frozen_block_rows weight rows at a time and multiplies the batch by them
// into the matching columns of its pre-activations; a convolution decodes its whole kernel, which is
// small beside the dense layers a model's memory goes to.
#include <algorithm>
#include <cstddef>

#include <Eigen/Core>

#include "eigen_views.hpp"
#include "tessera/core/math/codec.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/core/math/mlp.hpp"

namespace tessera::core {
namespace {

using namespace detail;

// The scratch of one frozen layer, in floats: its weights (a block of rows, or a convolution's kernel),
// then its bias, gain and shift.
struct scratch_layout {
  std::size_t bias = 0, gain = 0, shift = 0, total = 0;
};

scratch_layout scratch_for(const layer_slots& s, bool conv) noexcept {
  const std::size_t w = align_up(sz(conv ? s.rows : std::min(s.rows, k_frozen_block_rows)) * sz(s.cols));
  const std::size_t v = align_up(sz(s.rows));
  return {.bias = w, .gain = w + v, .shift = w + 2 * v, .total = w + (s.has_norm ? 3 : 1) * v};
}

bool is_conv(const mlp_arch& arch, const std::vector<layer_plan>& plans, std::size_t l) {
  return !arch.layers.empty() && plans[l].kind != layer_kind::dense;
}

}  // namespace

std::size_t frozen_scratch_floats(const mlp_arch& arch) {
  if (!compact_frozen(arch)) return 0;
  const auto slots = param_slots(arch);
  const std::vector<layer_plan> plans = arch.layers.empty() ? std::vector<layer_plan>{} : plan_layers(arch);
  std::size_t most = 0;
  for (std::size_t l = 0; l < static_cast<std::size_t>(arch.frozen); ++l) most = std::max(most, scratch_for(slots[l], is_conv(arch, plans, l)).total);
  return most;
}

network::norm_vectors network::frozen_forward(std::size_t l, const float* input, std::int64_t rows, float* z, std::span<float> patches) const {
  const codec_kind codec = arch_.frozen_codec;
  const layer_slots& s = slots_[l];
  const bool conv = is_conv(arch_, plans_, l);
  const scratch_layout lay = scratch_for(s, conv);
  TESSERA_ASSERT(frozen_.scratch.size() >= lay.total);
  // The layer's place in the blob: every earlier frozen layer's rows before it.
  std::size_t at = 0;
  for (std::size_t k = 0; k < l; ++k)
    at += sz(slots_[k].rows) * row_bytes(codec, sz(slots_[k].cols)) + (slots_[k].has_norm ? 3 : 1) * row_bytes(codec, sz(slots_[k].rows));
  const std::byte* weights = frozen_.blob.data() + at;
  const std::size_t row = row_bytes(codec, sz(s.cols)), vector = row_bytes(codec, sz(s.rows));
  const std::byte* vectors = weights + sz(s.rows) * row;
  TESSERA_ASSERT(at + sz(s.rows) * row + (s.has_norm ? 3 : 1) * vector <= frozen_.blob.size());
  float* w = frozen_.scratch.data();
  float* b = w + lay.bias;
  decode_rows(codec, vectors, 1, sz(s.rows), b);
  norm_vectors out;
  if (s.has_norm) {
    decode_rows(codec, vectors + vector, 1, sz(s.rows), w + lay.gain);
    decode_rows(codec, vectors + 2 * vector, 1, sz(s.rows), w + lay.shift);
    out = {.gain = w + lay.gain, .shift = w + lay.shift};
  }
  const float scale = arch_.input_scale[l];
  if (conv) {
    decode_rows(codec, weights, sz(s.rows), sz(s.cols), w);
    conv_forward(plans_[l].conv, {w, sz(s.rows * s.cols)}, {b, sz(s.rows)}, input, rows, z, patches, scale);
    return out;
  }
  matrix_map zm(z, ix(rows), ix(s.rows));
  zm.rowwise() = const_row_vector_map(b, ix(s.rows));
  const const_matrix_map u(input, ix(rows), ix(s.cols));
  for (std::int64_t first = 0; first < s.rows; first += k_frozen_block_rows) {
    const std::int64_t n = std::min(k_frozen_block_rows, s.rows - first);
    decode_rows(codec, weights + sz(first) * row, sz(n), sz(s.cols), w);
    scaled_product(zm.middleCols(ix(first), ix(n)), scale, u, const_matrix_map(w, ix(n), ix(s.cols)).transpose(), /*accumulate=*/true);
  }
  return out;
}

}  // namespace tessera::core
