// Private to the IDX readers and writers: the file format, its header parser (shared by the stream
// reader, which reads through zlib, and the table, which reads with pread) and the conversion of its
// u8 records to fp32 rows.
//
// Byte layout of one file, all integers big-endian:
//   0  u8   0x00
//   1  u8   0x00
//   2  u8   element type: 0x08 unsigned byte (the only one read here; 0x09 i8, 0x0B i16, 0x0C i32,
//           0x0D f32, 0x0E f64 exist and are refused)
//   3  u8   number of dimensions N
//   4  u32  N dimensions; the first is the example count
//   4+4N    the elements, row-major, one record of product(dims[1..]) bytes per example
// Images have N >= 2, labels N == 1. Files are often shipped gzip-compressed; zlib reads both kinds
// through the same calls, so the stream reader does not care, while the table reader needs byte offsets
// in the file itself and so refuses compressed files.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/data/dataset.hpp"
#include "dataset_internal.hpp"

namespace tessera::core::detail {

inline constexpr std::uint8_t k_idx_type_u8 = 0x08;
// Bounds on what a header may declare, so a corrupt or hostile header cannot size a buffer: 2^24 bytes
// per example is 16 MiB (a 4096x4096 image), 2^31 examples is more than any IDX dataset we know of.
inline constexpr std::uint64_t k_idx_max_features = std::uint64_t{1} << 24;
inline constexpr std::uint64_t k_idx_max_count = std::uint64_t{1} << 31;

// What a file holds, which decides the rank its header may declare.
enum class idx_role { images, labels };

struct idx_header {
  std::int64_t count = 0;        // examples
  std::int64_t features = 0;     // bytes per record: product of the dimensions after the first
  std::int64_t data_offset = 0;  // bytes of header before the first record
  std::string shape;             // "60000 x 28 x 28", for messages

  [[nodiscard]] record_layout layout() const noexcept { return {count, features, data_offset}; }
  // What the header declares, as messages quote it: "(60000 x 28 x 28)".
  [[nodiscard]] std::string declared() const { return "(" + shape + ")"; }
};

inline std::string truncated_at(const std::string& path, const idx_header& h, std::int64_t record) {
  return truncated_at(path, h.layout(), record);
}

// Parses the header through `read(span) -> result<size_t>`, which returns fewer bytes than asked only at
// the end of the file.
template <class Read>
result<idx_header> parse_idx_header(Read&& read, const std::string& path, idx_role role) {
  std::array<std::uint8_t, 4> magic{};
  TESSERA_ASSIGN_OR_RETURN(std::size_t got, read(std::span<std::uint8_t>(magic)));
  if (got < magic.size())
    return make_error(errc::truncated, path + ": truncated in the header (" + std::to_string(got) +
                                           " of the 4 magic bytes)");
  if (magic[0] != 0 || magic[1] != 0)
    return make_error(errc::bad_format, path + ": not an IDX file: it starts with " + hex_bytes(magic) +
                                            ", an IDX file starts with 00 00 08 NN");
  if (magic[2] != k_idx_type_u8)
    return make_error(errc::unsupported, path + ": IDX element type " + hex_bytes(std::span(magic).subspan(2, 1)) +
                                             " is not supported (only 08, unsigned bytes)");
  const unsigned rank = magic[3];
  if (role == idx_role::images && rank < 2)
    return make_error(errc::unsupported, path + ": IDX images need at least 2 dimensions (count, then the "
                                                "example's shape), the header has " + std::to_string(rank));
  if (role == idx_role::labels && rank != 1)
    return make_error(errc::unsupported, path + ": IDX labels need exactly 1 dimension, the header has " +
                                             std::to_string(rank));

  std::array<std::uint8_t, 4 * 255> raw{};  // the rank is one byte
  const auto dims_bytes = std::span(raw).first(4 * std::size_t{rank});
  TESSERA_ASSIGN_OR_RETURN(got, read(dims_bytes));
  if (got < dims_bytes.size())
    return make_error(errc::truncated, path + ": truncated in the header (" + std::to_string(got) + " of the " +
                                           std::to_string(dims_bytes.size()) + " bytes of dimensions)");
  idx_header h;
  std::uint64_t features = 1;
  for (unsigned i = 0; i < rank; ++i) {
    const std::uint64_t d = (std::uint64_t{raw[4 * i]} << 24) | (std::uint64_t{raw[4 * i + 1]} << 16) |
                            (std::uint64_t{raw[4 * i + 2]} << 8) | std::uint64_t{raw[4 * i + 3]};
    h.shape += (i == 0 ? "" : " x ") + std::to_string(d);
    if (i == 0) {
      if (d > k_idx_max_count)
        return make_error(errc::bad_format, path + ": the header declares " + std::to_string(d) +
                                                " examples, more than the limit of " + std::to_string(k_idx_max_count));
      h.count = static_cast<std::int64_t>(d);
      continue;
    }
    if (d == 0)
      return make_error(errc::bad_format, path + ": dimension " + std::to_string(i) + " is 0");
    // Both factors are at most 2^32 and the running product at most 2^24 here: no overflow in 64 bits.
    features *= d;
    if (features > k_idx_max_features)
      return make_error(errc::bad_format, path + ": dimensions " + h.shape + "... give more than " +
                                              std::to_string(k_idx_max_features) + " bytes per example");
  }
  h.features = static_cast<std::int64_t>(features);
  h.data_offset = 4 + 4 * static_cast<std::int64_t>(rank);
  return h;
}

inline result<void> check_counts(const std::string& images_path, const idx_header& images,
                                 const std::string& labels_path, const idx_header& labels) {
  if (images.count != labels.count)
    return make_error(errc::invalid_argument, images_path + " has " + std::to_string(images.count) + " images but " +
                                                  labels_path + " has " + std::to_string(labels.count) + " labels");
  return {};
}

// Turns u8 records into normalized fp32 rows. For `none` and `scale_unit` a 256-entry table gives the
// exact value for each byte; `standardize` needs per-feature parameters.
class u8_converter {
 public:
  explicit u8_converter(normalization norm, standardize_params params = {})
      : norm_(norm), mean_(std::move(params.mean)), inv_stddev_(std::move(params.inv_stddev)) {
    for (unsigned v = 0; v < 256; ++v)
      table_[v] = norm == normalization::scale_unit ? static_cast<float>(v) / 255.0f : static_cast<float>(v);
  }

  void convert(const std::uint8_t* in, float* out, std::size_t features) const {
    if (norm_ != normalization::standardize) {
      for (std::size_t j = 0; j < features; ++j) out[j] = table_[in[j]];
      return;
    }
    for (std::size_t j = 0; j < features; ++j) out[j] = (static_cast<float>(in[j]) - mean_[j]) * inv_stddev_[j];
  }

 private:
  normalization norm_;
  std::vector<float> mean_;
  std::vector<float> inv_stddev_;
  std::array<float, 256> table_{};
};

}  // namespace tessera::core::detail
