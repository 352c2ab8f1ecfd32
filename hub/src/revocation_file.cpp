#include "revocation_file.hpp"

#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/io/file_io.hpp"

namespace tessera::hub {

core::result<operator_revocations> read_revocations(const std::filesystem::path& file) {
  operator_revocations out;
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return out;
  TESSERA_ASSIGN_OR_RETURN(const std::vector<std::byte> bytes, core::read_file_bounded(file, 16u << 20));
  const auto j = nlohmann::json::parse(reinterpret_cast<const char*>(bytes.data()), reinterpret_cast<const char*>(bytes.data()) + bytes.size(),
                                       nullptr, false);
  if (!j.is_object() || !j.contains("devices") || !j["devices"].is_array())
    return core::make_error(core::errc::bad_format, file.string() + ": not a list of revoked devices (\"devices\": [...])");
  for (const auto& d : j["devices"]) {
    if (!d.is_object() || !d.contains("id") || !d["id"].is_string())
      return core::make_error(core::errc::bad_format, file.string() + ": an entry without an \"id\"");
    out[d["id"].get<std::string>()] = {.serial = d.value("serial", std::string()),
                                       .by = d.value("by", std::string()),
                                       .unix_time = d.value("unix_time", std::int64_t{0})};
  }
  return out;
}

core::result<void> write_revocations(const std::filesystem::path& file, const operator_revocations& list) {
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& [id, r] : list) devices.push_back({{"id", id}, {"serial", r.serial}, {"by", r.by}, {"unix_time", r.unix_time}});
  const std::string text = nlohmann::json{{"devices", devices}}.dump(2) + "\n";
  return core::write_file_atomic(file, std::as_bytes(std::span(text)), 0600, /*replace=*/true);
}

}  // namespace tessera::hub
