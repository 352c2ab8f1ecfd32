// tessera/core/io/file_io.hpp — whole-file reads with a size bound, and crash-safe whole-file writes.
//
// A write goes to a temporary in the same folder (created exclusively, with its final mode from the
// start), is fsync'd, then renamed over the target, and the folder is fsync'd: after a crash the target
// holds either the old bytes or the new ones, never a mix. Without `replace` an existing target is kept
// and the call fails (link + unlink instead of rename, so a file that appears meanwhile is not lost).
// write_file_keeping_previous renames the old file aside instead of dropping it: after a crash at any
// step the new bytes are whole under the target's name, or the old ones under either name.
//
//   TESSERA_TRY(core::write_file_atomic("ckpt/hub.ckpt", bytes, 0600, /*replace=*/true));
//   TESSERA_TRY(core::write_file_keeping_previous("ckpt/hub.ckpt", bytes, 0600, "ckpt/hub.ckpt.prev"));
//   auto back = core::read_file_bounded("ckpt/hub.ckpt", 1u << 30);   // refuses a larger file
//   auto n = core::read_file_into("hub.sealkey", key_bytes);           // into a buffer of the caller's
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <vector>

#include "tessera/core/base/error.hpp"

namespace tessera::core {

[[nodiscard]] result<void> write_file_atomic(const std::filesystem::path& path, std::span<const std::byte> bytes,
                                             unsigned mode, bool replace);
// As write_file_atomic with `replace`, but an existing `path` first becomes `previous` (replacing what
// was there); `previous` must be in the same folder. Without a file at `path` nothing is renamed.
[[nodiscard]] result<void> write_file_keeping_previous(const std::filesystem::path& path, std::span<const std::byte> bytes,
                                                       unsigned mode, const std::filesystem::path& previous);
// The whole file; errc::bad_format naming the path if it holds more than max_bytes.
[[nodiscard]] result<std::vector<std::byte>> read_file_bounded(const std::filesystem::path& path, std::size_t max_bytes);
// The whole file into `out`, which must hold it (errc::bad_format naming the path otherwise); returns
// its size. No copy is made on the way: what is read goes where the caller chose (a key into a
// crypto::secret, which wipes it).
[[nodiscard]] result<std::size_t> read_file_into(const std::filesystem::path& path, std::span<std::byte> out);

}  // namespace tessera::core
