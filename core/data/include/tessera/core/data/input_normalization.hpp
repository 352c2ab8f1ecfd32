// tessera/core/data/input_normalization.hpp — the model's input standardization: part of the model.
//
// A federation that standardizes its inputs computes, before its first round, each feature's mean and
// standard deviation over the whole fleet's training data (fed_stats.hpp). From then on they belong to
// the model: every assignment carries them, agents apply them to their data as they train and evaluate,
// the hub to its validation set, and the model file stores them (safetensors `input.mean`, `input.std`)
// for whoever uses the model. The transform is computed in one place, here, in float32 as
//   x' = (x − mean) / std
// which numpy reproduces to the bit (examples/load_model.py).
//
//   core::input_normalization n{.mean = {...}, .std = {...}};
//   core::normalize_rows(features, n);          // rows × n.size() floats, in place
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace tessera::core {

struct input_normalization {
  std::vector<float> mean;  // per input feature
  std::vector<float> std;   // per input feature, > 0 (a feature that never varies gets 1)

  [[nodiscard]] bool empty() const noexcept { return mean.empty(); }
  [[nodiscard]] std::size_t size() const noexcept { return mean.size(); }
  friend bool operator==(const input_normalization&, const input_normalization&) = default;
};

// Standardizes `rows` (a multiple of n.size() floats) in place; a no-op when n is empty.
void normalize_rows(std::span<float> rows, const input_normalization& n) noexcept;

}  // namespace tessera::core
