// NumPy .npy reader (random access with pread) and writers. The file's byte layout, and the reading
// and checking of its preamble and header, are in npy_header.hpp; this file reads the records.
#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>
#include <utility>

#include "tessera/core/data/dataset.hpp"
#include "dataset_internal.hpp"
#include "npy_header.hpp"
#include "tessera/core/base/endian.hpp"

namespace tessera::core {

namespace {

using detail::errno_text;
using detail::k_npy_max_count;
using detail::k_npy_magic;
using detail::k_npy_max_features;
using detail::npy_file;
using detail::npy_header;
using detail::npy_role;

// Bytes of one record read per pread: a record larger than this is read in pieces, so the table holds
// this much whatever the record or file size.
constexpr std::size_t k_scratch_bytes = std::size_t{1} << 16;
static_assert(k_scratch_bytes % 8 == 0, "whole elements of every size fit in the scratch buffer");
// Integers up to 2^24 in magnitude are exactly representable in float32; above, some are not.
constexpr std::uint64_t k_max_exact_label = std::uint64_t{1} << 24;
// NumPy aligns the start of the data to this (so it can be memory-mapped with any dtype).
constexpr std::size_t k_data_alignment = 64;

std::string number_text(double v) {
  std::array<char, 32> buf{};
  std::snprintf(buf.data(), buf.size(), "%.9g", v);
  return buf.data();
}

std::string truncated_at(const std::string& path, const npy_header& h, std::int64_t record) {
  return detail::truncated_at(path, h.layout(), record);
}

// The element at `p` as raw bits, assembled in the file's byte order.
std::uint64_t load_bits(const std::uint8_t* p, unsigned size, bool big_endian) noexcept {
  std::uint64_t v = 0;
  for (unsigned b = 0; b < size; ++b) v = (v << 8) | p[big_endian ? b : size - 1 - b];
  return v;
}

// ---- the table ------------------------------------------------------------------------------------

class npy_table final : public example_table {
 public:
  npy_table(npy_file features, npy_file labels) : x_(std::move(features)), y_(std::move(labels)) {
    const auto elem = static_cast<std::size_t>(x_.header.dtype.size);
    const auto record = static_cast<std::size_t>(x_.header.record_bytes);
    scratch_.resize(std::min(record, k_scratch_bytes / elem * elem));
  }

  std::int64_t feature_count() const noexcept override { return x_.header.record_elements; }
  std::int64_t size() const noexcept override { return x_.header.count; }
  std::string describe() const override { return x_.path + " + " + y_.path; }

  void set_normalization(normalization norm, detail::standardize_params params) {
    norm_ = norm;
    mean_ = std::move(params.mean);
    inv_stddev_ = std::move(params.inv_stddev);
  }

  result<void> gather(std::span<const std::uint32_t> indices, std::span<float> features,
                      std::span<float> targets) override {
    const auto f = static_cast<std::size_t>(x_.header.record_elements);
    TESSERA_ASSERT(targets.size() >= indices.size());
    TESSERA_ASSERT(features.size() >= indices.size() * f);
    for (std::size_t k = 0; k < indices.size(); ++k) {
      const std::int64_t i = indices[k];
      if (i >= x_.header.count)
        return make_error(errc::invalid_argument, describe() + ": index " + std::to_string(i) +
                                                      " is out of range (size " + std::to_string(x_.header.count) +
                                                      ")");
      TESSERA_TRY(read_features(i, features.data() + k * f));
      TESSERA_ASSIGN_OR_RETURN(targets[k], read_label(i));
    }
    return {};
  }

 private:
  // Reads record i into out[0, features), a scratch-sized piece at a time, and normalizes it.
  result<void> read_features(std::int64_t i, float* out) {
    const npy_header& h = x_.header;
    const auto f = static_cast<std::size_t>(h.record_elements);
    const std::size_t elem = h.dtype.size;
    const std::size_t chunk = scratch_.size() / elem;
    const std::int64_t offset = h.data_offset + i * h.record_bytes;
    for (std::size_t done = 0; done < f;) {
      const std::size_t k = std::min(chunk, f - done);
      const auto bytes = std::span(scratch_).first(k * elem);
      const std::int64_t at = offset + static_cast<std::int64_t>(done * elem);
      TESSERA_ASSIGN_OR_RETURN(const std::size_t got, detail::pread_full(x_.fd.get(), bytes, at, x_.path));
      if (got < bytes.size()) return make_error(errc::truncated, truncated_at(x_.path, h, i));
      float* dst = out + done;
      if (h.dtype.kind == 'u') {
        for (std::size_t j = 0; j < k; ++j) dst[j] = static_cast<float>(bytes[j]);
      } else {
        if (h.dtype.big_endian == (std::endian::native == std::endian::big)) {
          std::memcpy(dst, bytes.data(), bytes.size());
        } else {
          for (std::size_t j = 0; j < k; ++j)
            dst[j] = std::bit_cast<float>(static_cast<std::uint32_t>(load_bits(bytes.data() + 4 * j, 4, true)));
        }
        for (std::size_t j = 0; j < k; ++j)
          if (!std::isfinite(dst[j])) return not_finite(i, done + j, dst[j], "");
      }
      done += k;
    }
    switch (norm_) {
      case normalization::none:
        break;
      case normalization::scale_unit:
        for (std::size_t j = 0; j < f; ++j) out[j] /= 255.0f;
        break;
      case normalization::standardize:
        for (std::size_t j = 0; j < f; ++j) {
          out[j] = (out[j] - mean_[j]) * inv_stddev_[j];
          // Finite inputs near the float range can overflow here.
          if (!std::isfinite(out[j])) return not_finite(i, j, out[j], " after standardize");
        }
        break;
    }
    return {};
  }

  error not_finite(std::int64_t record, std::size_t feature, float v, const char* when) const {
    return make_error(errc::not_finite, x_.path + ": record " + std::to_string(record) + " of " +
                                            std::to_string(x_.header.count) + ", feature " + std::to_string(feature) +
                                            " is not finite" + when + " (" + number_text(v) + ")");
  }

  result<float> read_label(std::int64_t i) {
    const npy_header& h = y_.header;
    std::array<std::uint8_t, 8> raw{};
    const auto bytes = std::span(raw).first(h.dtype.size);
    TESSERA_ASSIGN_OR_RETURN(const std::size_t got,
                             detail::pread_full(y_.fd.get(), bytes, h.data_offset + i * h.record_bytes, y_.path));
    if (got < bytes.size()) return make_error(errc::truncated, truncated_at(y_.path, h, i));
    const std::uint64_t bits = load_bits(raw.data(), h.dtype.size, h.dtype.big_endian);
    const auto where = [&] { return y_.path + ": record " + std::to_string(i) + " of " + std::to_string(h.count); };
    if (h.dtype.kind == 'f') {
      const double v = h.dtype.size == 4 ? double{std::bit_cast<float>(static_cast<std::uint32_t>(bits))}
                                         : std::bit_cast<double>(bits);
      if (!std::isfinite(v) || std::fabs(v) > double{std::numeric_limits<float>::max()})
        return make_error(errc::not_finite, where() + ": label " + number_text(v) + " is not a finite float32");
      return static_cast<float>(v);
    }
    // Integers: sign-extend signed types, then check the magnitude fits a float exactly.
    bool negative = false;
    std::uint64_t magnitude = bits;
    const unsigned width = 8 * h.dtype.size;
    if (h.dtype.kind == 'i' && ((bits >> (width - 1)) & 1) != 0) {
      negative = true;
      // Two's complement magnitude within the element's width (2^width - bits), exact for INT64_MIN too.
      magnitude = width == 64 ? (~bits + 1) : ((std::uint64_t{1} << width) - bits);
    }
    const std::string text = (negative ? "-" : "") + std::to_string(magnitude);
    if (magnitude > k_max_exact_label)
      return make_error(errc::unsupported, where() + ": label " + text +
                                               " has no exact float32 value (integer labels must be within 2^24)");
    const auto v = static_cast<float>(magnitude);
    return negative ? -v : v;
  }

  npy_file x_;
  npy_file y_;
  normalization norm_ = normalization::none;
  std::vector<float> mean_;
  std::vector<float> inv_stddev_;
  std::vector<std::uint8_t> scratch_;  // one record or a piece of one, reused by every gather
};

// ---- writers --------------------------------------------------------------------------------------

// A version 1.0 preamble and header for `descr` and `shape`, padded as NumPy pads it: spaces, then '\n'
// as the last byte, so that the data starts at a multiple of k_data_alignment.
std::string npy_preamble(std::string_view descr, const std::string& shape) {
  std::string dict = "{'descr': '";
  dict.append(descr);
  dict.append("', 'fortran_order': False, 'shape': ");
  dict.append(shape);
  dict.append(", }");
  constexpr std::size_t k_preamble = 10;  // magic, version, u16 header length
  const std::size_t unpadded = k_preamble + dict.size() + 1;
  const std::size_t total = (unpadded + k_data_alignment - 1) / k_data_alignment * k_data_alignment;
  dict.append(total - unpadded, ' ');
  dict.push_back('\n');
  const std::size_t header_length = dict.size();
  TESSERA_ASSERT(header_length <= 0xffff);  // a two-dimensional shape is far below the u16 limit
  std::string out(k_npy_magic.begin(), k_npy_magic.end());
  le_writer(out).u8(1).u8(0).u16(static_cast<std::uint16_t>(header_length));
  return out + dict;
}

// Writes a preamble then `values` as 4-byte little-endian elements; on failure removes what was written.
template <class T>
result<void> write_npy_32(const std::string& path, std::string_view descr, const std::string& shape,
                          std::span<const T> values) {
  static_assert(sizeof(T) == 4);
  const std::string header = npy_preamble(descr, shape);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return make_error(errc::io, path + ": cannot create: " + errno_text(errno));
  bool failed = std::fwrite(header.data(), 1, header.size(), f) != header.size();
  int err = failed ? errno : 0;
  constexpr std::size_t k_chunk_values = 4096;
  std::array<std::uint8_t, 4 * k_chunk_values> buf{};
  for (std::size_t done = 0; !failed && done < values.size();) {
    const std::size_t k = std::min(k_chunk_values, values.size() - done);
    le_writer w(buf);
    for (std::size_t j = 0; j < k; ++j) {
      if constexpr (std::is_floating_point_v<T>) w.f32(values[done + j]);
      else w.u32(static_cast<std::uint32_t>(values[done + j]));
    }
    if (std::fwrite(buf.data(), 1, 4 * k, f) != 4 * k) {
      failed = true;
      err = errno;
    }
    done += k;
  }
  return detail::close_written(f, failed, err, path);
}

}  // namespace

result<std::unique_ptr<example_table>> open_npy(const std::string& features_path, const std::string& labels_path,
                                                const npy_options& options) {
  TESSERA_ASSIGN_OR_RETURN(npy_file x, detail::open_npy_file(features_path, npy_role::features));
  TESSERA_ASSIGN_OR_RETURN(npy_file y, detail::open_npy_file(labels_path, npy_role::labels));
  if (x.header.count != y.header.count)
    return make_error(errc::invalid_argument, features_path + " has " + std::to_string(x.header.count) +
                                                  " examples but " + labels_path + " has " +
                                                  std::to_string(y.header.count) + " labels");
  auto table = std::make_unique<npy_table>(std::move(x), std::move(y));
  // The table still converts with `none` here: statistics measured through `raw` are of the raw values.
  const std::unique_ptr<example_stream> raw = make_table_stream(*table);
  TESSERA_ASSIGN_OR_RETURN(detail::standardize_params params,
                           detail::normalization_params(options.norm, options.stats, table->feature_count(), raw.get(),
                                                        features_path));
  table->set_normalization(options.norm, std::move(params));
  return std::unique_ptr<example_table>(std::move(table));
}

result<void> write_npy_features(const std::string& path, std::int64_t features, std::span<const float> values) {
  if (features <= 0 || static_cast<std::uint64_t>(features) > k_npy_max_features)
    return make_error(errc::invalid_argument, path + ": " + std::to_string(features) +
                                                  " features per example is empty or over the reader's limit of " +
                                                  std::to_string(k_npy_max_features));
  const auto f = static_cast<std::size_t>(features);
  if (values.size() % f != 0)
    return make_error(errc::invalid_argument, path + ": " + std::to_string(values.size()) +
                                                  " values are not a whole number of examples of " +
                                                  std::to_string(features) + " features");
  const std::size_t count = values.size() / f;
  if (count > k_npy_max_count)
    return make_error(errc::invalid_argument, path + ": " + std::to_string(count) + " examples, over the limit of " +
                                                  std::to_string(k_npy_max_count));
  return write_npy_32(path, "<f4", "(" + std::to_string(count) + ", " + std::to_string(features) + ")", values);
}

result<void> write_npy_labels(const std::string& path, std::span<const std::int32_t> labels) {
  if (labels.size() > k_npy_max_count)
    return make_error(errc::invalid_argument, path + ": " + std::to_string(labels.size()) +
                                                  " labels, over the limit of " + std::to_string(k_npy_max_count));
  return write_npy_32(path, "<i4", "(" + std::to_string(labels.size()) + ",)", labels);
}

result<void> write_npy_targets(const std::string& path, std::span<const float> targets) {
  if (targets.size() > k_npy_max_count)
    return make_error(errc::invalid_argument, path + ": " + std::to_string(targets.size()) +
                                                  " targets, over the limit of " + std::to_string(k_npy_max_count));
  return write_npy_32(path, "<f4", "(" + std::to_string(targets.size()) + ",)", targets);
}

}  // namespace tessera::core
