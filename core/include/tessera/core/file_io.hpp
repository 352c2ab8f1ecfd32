// tessera/core/file_io.hpp — whole-file reads with a size bound, and crash-safe whole-file writes.
//
// A write goes to a temporary in the same folder (created exclusively, with its final mode from the
// start), is fsync'd, then renamed over the target, and the folder is fsync'd: after a crash the target
// holds either the old bytes or the new ones, never a mix. Without `replace` an existing target is kept
// and the call fails (link + unlink instead of rename, so a file that appears meanwhile is not lost).
//
//   TESSERA_TRY(core::write_file_atomic("ckpt/hub.ckpt", bytes, 0600, /*replace=*/true));
//   auto back = core::read_file_bounded("ckpt/hub.ckpt", 1u << 30);   // refuses a larger file
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <vector>

#include "tessera/core/error.hpp"

namespace tessera::core {

[[nodiscard]] result<void> write_file_atomic(const std::filesystem::path& path, std::span<const std::byte> bytes,
                                             unsigned mode, bool replace);
// The whole file; errc::bad_format naming the path if it holds more than max_bytes.
[[nodiscard]] result<std::vector<std::byte>> read_file_bounded(const std::filesystem::path& path, std::size_t max_bytes);

}  // namespace tessera::core
