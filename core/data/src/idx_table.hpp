// Private to the IDX readers: random access to uncompressed IDX files with pread. open_idx_table returns
// this table; the stream over two plain files (dataset_idx.cpp) holds one as well, for gather().
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/data/dataset.hpp"
#include "dataset_internal.hpp"
#include "idx_format.hpp"

namespace tessera::core::detail {

// An uncompressed IDX file open for pread, with its checked header.
struct idx_file {
  unique_fd fd;
  idx_header header;
};

// Opens an uncompressed IDX file for pread and checks its size against the header (a gzip-compressed
// file is refused: its records have no byte offsets).
[[nodiscard]] result<idx_file> open_idx_file(const std::string& path, idx_role role);

class idx_table final : public example_table {
 public:
  idx_table(std::string images_path, std::string labels_path, idx_file images, idx_file labels, u8_converter conv)
      : images_path_(std::move(images_path)),
        labels_path_(std::move(labels_path)),
        images_(std::move(images)),
        labels_(std::move(labels)),
        conv_(std::move(conv)),
        record_(static_cast<std::size_t>(images_.header.features)) {}

  std::int64_t feature_count() const noexcept override { return images_.header.features; }
  std::int64_t size() const noexcept override { return images_.header.count; }
  std::string describe() const override { return images_path_ + " + " + labels_path_; }

  void set_converter(u8_converter conv) { conv_ = std::move(conv); }

  result<void> gather(std::span<const std::uint32_t> indices, std::span<float> features,
                      std::span<float> targets) override;

 private:
  std::string images_path_;
  std::string labels_path_;
  idx_file images_;
  idx_file labels_;
  u8_converter conv_;
  std::vector<std::uint8_t> record_;  // one image record, reused by every gather
};

}  // namespace tessera::core::detail
