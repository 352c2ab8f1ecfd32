// tessera/core/io/safetensors.hpp — reading and writing the safetensors format.
//
// Layout of a file (byte by byte): an unsigned 64-bit little-endian header length N; N bytes of UTF-8
// JSON mapping each tensor name to {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}
// (offsets relative to the end of the header, end exclusive) plus an optional "__metadata__" object of
// string to string; then the tensor bytes, little-endian, packed in offset order. Python loads it with
// `safetensors.numpy.load_file` or a few lines of numpy.
//
//   std::vector<core::tensor_f32> tensors = {{"layers.0.weight", {512, 784}, weights}};
//   auto w = core::write_safetensors("model.safetensors", tensors, {{"format", "tessera"}});
//   auto f = core::read_safetensors("model.safetensors");   // checks every offset against the file
//
// Only F32 tensors are written; reading accepts F32 and refuses other dtypes with a clear error.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/base/error.hpp"

namespace tessera::core {

struct tensor_f32 {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> data;  // product(shape) values, row-major
};

struct safetensors_file {
  std::vector<tensor_f32> tensors;  // in file order
  std::map<std::string, std::string> metadata;

  // The tensor called `name`, or nullptr.
  [[nodiscard]] const tensor_f32* find(const std::string& name) const;
};

// A header longer than this is refused before it is read (a hostile length must not size a buffer).
inline constexpr std::uint64_t k_safetensors_max_header = 16u << 20;

// Writes through a temporary file in the same folder, fsync and rename, so a crash leaves the old file.
[[nodiscard]] result<void> write_safetensors(const std::string& path, std::span<const tensor_f32> tensors,
                                             const std::map<std::string, std::string>& metadata);
[[nodiscard]] result<safetensors_file> read_safetensors(const std::string& path);

}  // namespace tessera::core
