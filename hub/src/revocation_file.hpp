// Internal: the devices operators revoked through the endpoint (POST /api/devices/<id>/revoke), kept in
// checkpoint_dir/revoked-devices.json so a restarted hub goes on refusing them:
//
//   {"devices": [{"id": "dev-b", "serial": "3f0a…", "by": "ops", "unix_time": 1760000000}, ...]}
//
// The serial is the certificate the device last used (empty if it never connected to this hub), for the
// CA's own list; "by" names the operator.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "tessera/core/base/error.hpp"

namespace tessera::hub {

struct operator_revocation {
  std::string serial, by;
  std::int64_t unix_time = 0;
};
using operator_revocations = std::map<std::string, operator_revocation>;  // device id → its revocation

inline constexpr std::string_view k_revocations_file = "revoked-devices.json";

// The list in `file`; empty when there is no such file. A file that is not such a list is an error.
[[nodiscard]] core::result<operator_revocations> read_revocations(const std::filesystem::path& file);
// Replaces `file` (written aside, then renamed; owner-only).
[[nodiscard]] core::result<void> write_revocations(const std::filesystem::path& file, const operator_revocations& list);

}  // namespace tessera::hub
