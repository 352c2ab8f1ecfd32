// Shared by tests/core's network tests: a small convolutional network on an 8 × 8 image of 2 channels
// (conv2d 4 k3, max_pool 2, conv2d 5 k3 stride 2, flatten, dense `dense_units`, 3 outputs).
#pragma once

#include <cstdint>

#include "tessera/core/math/model_spec.hpp"

namespace tessera::testing {

inline core::mlp_arch small_image_arch(bool layer_norm, std::int64_t dense_units) {
  using core::layer_kind;
  core::mlp_arch a;
  a.input = {.height = 8, .width = 8, .channels = 2};
  a.layers = {{.kind = layer_kind::conv2d, .units = 4, .kernel = 3},
              {.kind = layer_kind::max_pool, .pool = 2},
              {.kind = layer_kind::conv2d, .units = 5, .kernel = 3, .stride = 2},
              {.kind = layer_kind::flatten},
              {.kind = layer_kind::dense, .units = dense_units}};
  a.widths = {2, 4, 5, dense_units, 3};
  a.layer_norm = layer_norm;
  a.input_scale = {1.0f, 1.25f, 0.8f, 1.0f};
  return a;
}

}  // namespace tessera::testing
