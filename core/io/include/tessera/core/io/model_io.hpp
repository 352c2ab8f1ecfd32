// tessera/core/io/model_io.hpp — a whole model as a safetensors file, loadable from Python.
//
// Tensors: `layers.N.weight` (n_{N+1} × n_N, as torch.nn.Linear.weight) and `layers.N.bias` for
// N = 0..L; with LayerNorm, `layers.N.norm.weight` / `layers.N.norm.bias` for hidden layers; with
// input standardization (spec input_normalization), `input.mean` and `input.std` (one per input). The
// metadata holds the model spec as JSON under "tessera.spec" plus any extra entries given. Inference in
// numpy: h = (x − input.mean) / input.std in float32 (when present); for each hidden N:
// h = relu(norm_N(h @ W_N.T + b_N)); logits = h @ W_L.T + b_L.
// A convolutional network's tensors are in PyTorch's layouts: a convolution's weight OIHW (OIW for
// 1-D, torch.nn.Conv2d/Conv1d), a dense layer after a flatten with the columns of torch.flatten on
// NCHW (channel-major); its LayerNorm normalises each example over channels and positions with a gain
// and shift per channel (torch.nn.GroupNorm with one group). examples/load_model.py runs both kinds.
//
//   auto saved = core::save_model("model.safetensors", spec, params, {{"tessera.round", "50"}});
//   auto model = core::load_model("model.safetensors");  // checks every shape against the spec
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/base/error.hpp"
#include "tessera/core/data/input_normalization.hpp"
#include "tessera/core/math/model_spec.hpp"

namespace tessera::core {

struct stored_model {
  model_spec spec;
  std::vector<float> params;  // the flat layout of mlp.hpp
  input_normalization normalization;  // empty unless the spec standardizes its inputs
  std::map<std::string, std::string> metadata;
};

// A spec that standardizes its inputs needs `normalization` (one mean and std per input).
[[nodiscard]] result<void> save_model(const std::string& path, const model_spec& spec, std::span<const float> params,
                                      const std::map<std::string, std::string>& extra_metadata = {},
                                      const input_normalization& normalization = {});
[[nodiscard]] result<stored_model> load_model(const std::string& path);

}  // namespace tessera::core
