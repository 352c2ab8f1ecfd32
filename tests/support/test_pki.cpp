#include "support/test_pki.hpp"

#include <system_error>
#include <utility>

namespace tessera::testing {

test_pki::test_pki(std::filesystem::path dir, std::string hub_address)
    : dir_(std::move(dir)), hub_address_(std::move(hub_address)), ca_(crypto::ca_files::in(dir_)), hub_{dir_ / "hub.pem", dir_ / "hub.key"} {}

core::result<test_pki> test_pki::create(const std::filesystem::path& dir, const std::string& hub_address) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return core::make_error(core::errc::io, dir.string() + ": " + ec.message());
  test_pki pki(dir, hub_address);
  if (auto r = crypto::init_ca(pki.ca_, {}, false); !r) return std::move(r).error();
  if (auto r = crypto::issue(pki.ca_, {.ip_addresses = {hub_address}}, pki.hub_, false); !r) return std::move(r).error();
  return pki;
}

test_pki test_pki::in(const std::filesystem::path& dir, const std::string& hub_address) { return test_pki(dir, hub_address); }

core::result<void> test_pki::issue_device(const std::string& device_id) const {
  if (auto r = crypto::issue(ca_, {.device_id = device_id}, device(device_id), false); !r) return std::move(r).error();
  return {};
}

crypto::cert_files test_pki::device(const std::string& device_id) const {
  return {dir_ / (device_id + ".pem"), dir_ / (device_id + ".key")};
}

core::result<crypto::tls_context> test_pki::agent_tls(const std::string& device_id) const {
  const crypto::cert_files files = device(device_id);
  return crypto::make_agent_tls({.ca_cert = ca_.cert, .cert = files.cert, .key = files.key, .hub_name = hub_address_});
}

}  // namespace tessera::testing
