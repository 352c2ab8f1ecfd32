// IDX random access (pread per record, uncompressed files only) and the IDX writers. The byte layout is
// in idx_format.hpp; the reader in order, plain or gzip, is dataset_idx.cpp.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <utility>

#include "tessera/core/data/dataset.hpp"
#include "dataset_internal.hpp"
#include "idx_format.hpp"
#include "idx_table.hpp"

namespace tessera::core {

namespace detail {

result<idx_file> open_idx_file(const std::string& path, idx_role role) {
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return make_error(errc::io, path + ": cannot open: " + errno_text(errno));
  std::array<std::uint8_t, 2> first{};
  TESSERA_ASSIGN_OR_RETURN(const std::size_t got, pread_full(fd.get(), first, 0, path));
  if (got == 2 && first[0] == 0x1f && first[1] == 0x8b)
    return make_error(errc::unsupported, path + ": gzip-compressed; random access needs an uncompressed IDX file "
                                                "(gunzip it, or read it in order with open_idx)");
  std::int64_t pos = 0;
  const auto read = [&](std::span<std::uint8_t> out) -> result<std::size_t> {
    auto n = pread_full(fd.get(), out, pos, path);
    if (n) pos += static_cast<std::int64_t>(n.value());
    return n;
  };
  TESSERA_ASSIGN_OR_RETURN(idx_header h, parse_idx_header(read, path, role));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return make_error(errc::io, path + ": cannot stat: " + errno_text(errno));
  // Checked here once, so gather() can only meet a short read if the file shrinks while open.
  TESSERA_TRY(check_file_size(path, st.st_size, h.layout(), h.declared()));
  return idx_file{std::move(fd), std::move(h)};
}

result<void> idx_table::gather(std::span<const std::uint32_t> indices, std::span<float> features,
                               std::span<float> targets) {
  const std::size_t f = record_.size();
  TESSERA_ASSERT(targets.size() >= indices.size());
  TESSERA_ASSERT(features.size() >= indices.size() * f);
  const idx_header& ih = images_.header;
  const idx_header& lh = labels_.header;
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const std::int64_t i = indices[k];
    if (i >= ih.count)
      return make_error(errc::invalid_argument, describe() + ": index " + std::to_string(i) +
                                                    " is out of range (size " + std::to_string(ih.count) + ")");
    TESSERA_ASSIGN_OR_RETURN(std::size_t got, pread_full(images_.fd.get(), record_,
                                                                 ih.data_offset + i * ih.features, images_path_));
    if (got < f) return make_error(errc::truncated, truncated_at(images_path_, ih, i));
    std::array<std::uint8_t, 1> label{};
    TESSERA_ASSIGN_OR_RETURN(got, pread_full(labels_.fd.get(), label, lh.data_offset + i, labels_path_));
    if (got < 1) return make_error(errc::truncated, truncated_at(labels_path_, lh, i));
    conv_.convert(record_.data(), features.data() + k * f, f);
    targets[k] = static_cast<float>(label[0]);
  }
  return {};
}

}  // namespace detail

namespace {

using detail::errno_text;
using detail::idx_file;
using detail::idx_role;
using detail::k_idx_max_count;
using detail::k_idx_max_features;
using detail::k_idx_type_u8;
using detail::u8_converter;

// Writes `header` then `data` to a new file at `path`; on failure removes what was written.
result<void> write_file(const std::string& path, std::span<const std::uint8_t> header,
                        std::span<const std::uint8_t> data) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return make_error(errc::io, path + ": cannot create: " + errno_text(errno));
  bool failed = std::fwrite(header.data(), 1, header.size(), f) != header.size() ||
                (!data.empty() && std::fwrite(data.data(), 1, data.size(), f) != data.size());
  int err = failed ? errno : 0;
  return detail::close_written(f, failed, err, path);
}

void put_be32(std::vector<std::uint8_t>& out, std::uint64_t v) {
  out.push_back(static_cast<std::uint8_t>((v >> 24) & 0xff));
  out.push_back(static_cast<std::uint8_t>((v >> 16) & 0xff));
  out.push_back(static_cast<std::uint8_t>((v >> 8) & 0xff));
  out.push_back(static_cast<std::uint8_t>(v & 0xff));
}

}  // namespace

result<std::unique_ptr<example_table>> open_idx_table(const std::string& images_path, const std::string& labels_path,
                                                      const idx_options& options) {
  TESSERA_ASSIGN_OR_RETURN(idx_file images, detail::open_idx_file(images_path, idx_role::images));
  TESSERA_ASSIGN_OR_RETURN(idx_file labels, detail::open_idx_file(labels_path, idx_role::labels));
  TESSERA_TRY(detail::check_counts(images_path, images.header, labels_path, labels.header));
  const std::int64_t features = images.header.features;
  std::unique_ptr<example_stream> raw;  // opened only to measure statistics the caller did not give
  if (detail::must_measure(options.norm, options.stats)) {
    TESSERA_ASSIGN_OR_RETURN(raw, open_idx(images_path, labels_path, idx_options{normalization::none, {}}));
  }
  TESSERA_ASSIGN_OR_RETURN(detail::standardize_params params,
                           detail::normalization_params(options.norm, options.stats, features, raw.get(), images_path));
  return std::unique_ptr<example_table>(std::make_unique<detail::idx_table>(images_path, labels_path, std::move(images),
                                                                            std::move(labels),
                                                                            u8_converter(options.norm, std::move(params))));
}

result<void> write_idx_images(const std::string& path, std::int64_t rows, std::int64_t cols,
                              std::span<const std::uint8_t> pixels) {
  if (rows <= 0 || cols <= 0 || static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(cols) > k_idx_max_features)
    return make_error(errc::invalid_argument, path + ": image shape " + std::to_string(rows) + " x " +
                                                  std::to_string(cols) + " is empty or over the IDX reader's limit");
  const auto per_image = static_cast<std::size_t>(rows * cols);
  if (pixels.size() % per_image != 0)
    return make_error(errc::invalid_argument, path + ": " + std::to_string(pixels.size()) +
                                                  " pixels are not a whole number of " + std::to_string(rows) + " x " +
                                                  std::to_string(cols) + " images");
  const std::size_t count = pixels.size() / per_image;
  if (count > k_idx_max_count)
    return make_error(errc::invalid_argument, path + ": " + std::to_string(count) + " images, over the limit of " +
                                                  std::to_string(k_idx_max_count));
  std::vector<std::uint8_t> header = {0x00, 0x00, k_idx_type_u8, 0x03};
  put_be32(header, count);
  put_be32(header, static_cast<std::uint64_t>(rows));
  put_be32(header, static_cast<std::uint64_t>(cols));
  return write_file(path, header, pixels);
}

result<void> write_idx_labels(const std::string& path, std::span<const std::uint8_t> labels) {
  if (labels.size() > k_idx_max_count)
    return make_error(errc::invalid_argument, path + ": " + std::to_string(labels.size()) +
                                                  " labels, over the limit of " + std::to_string(k_idx_max_count));
  std::vector<std::uint8_t> header = {0x00, 0x00, k_idx_type_u8, 0x01};
  put_be32(header, labels.size());
  return write_file(path, header, labels);
}

}  // namespace tessera::core
