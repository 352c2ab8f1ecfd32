// tessera-pki — the fleet's certificate authority on the command line. See tessera/crypto/pki.hpp.
//
//   tessera-pki init --dir pki [--cn "Tessera CA"] [--days 3650]
//   tessera-pki issue-hub --dir pki --name hub.example.org --name 10.0.0.5 [--days 365]
//   tessera-pki issue-device --dir pki --id pi-07 [--days 365]
//   tessera-pki issue-operator --dir pki --id alice [--days 365]
//   tessera-pki revoke --dir pki (--serial 4f3a... | --cert pki/pi-07.pem)
//   tessera-pki seal-key --out hub.sealkey
//
// Outputs go into --dir (hub.pem/hub.key, <id>.pem/<id>.key, operator-<name>.pem/.key) unless --out-dir is given; seal-key writes
// the one file --out names. Keys are 0400. Existing files are never replaced unless --force is given.
#include <arpa/inet.h>

#include <charconv>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>

#include "tessera/core/config/command.hpp"
#include "tessera/crypto/error.hpp"
#include "tessera/crypto/pki.hpp"
#include "tessera/crypto/seal.hpp"

namespace {

using namespace tessera;

const core::command k_command{
    .name = "tessera-pki",
    .usage = "tessera-pki init|issue-hub|issue-device|issue-operator|revoke|seal-key [options]",
    .about = R"(The fleet's certificate authority.
  init            create a CA (ECDSA P-256, self-signed) and an empty revocation list
  issue-hub       issue the hub certificate; --name NAME (repeatable, DNS name or IP address)
  issue-device    issue a device certificate; --id ID
  issue-operator  issue an operator certificate for the hub's operator endpoint; --id NAME
  revoke          add a certificate to the revocation list; --serial HEX or --cert FILE
  seal-key        write a fresh 32-byte key for sealing the hub's checkpoints (its seal_key); --out FILE)",
    .options = {{.flag = "--dir", .value = "DIR", .doc = "CA directory holding ca.pem, ca.key, ca.crl (default: pki)"},
                {.flag = "--out-dir", .value = "DIR", .doc = "where issued certificates and keys go (default: --dir)"},
                {.flag = "--cn", .value = "NAME", .doc = "subject common name (init, issue-hub)"},
                {.flag = "--name", .value = "NAME", .doc = "issue-hub: a DNS name or IP address (repeatable)"},
                {.flag = "--id", .value = "ID", .doc = "issue-device: the device id; issue-operator: the operator's name"},
                {.flag = "--serial", .value = "HEX", .doc = "revoke: the certificate's serial"},
                {.flag = "--cert", .value = "FILE", .doc = "revoke: the certificate"},
                {.flag = "--days", .value = "N", .doc = "validity in days (default: 3650 for init, 365 otherwise)"},
                {.flag = "--out", .value = "FILE", .doc = "seal-key: the key file (owner-read-only)"},
                {.flag = "--force", .value = "", .doc = "replace existing output files"}},
    .configured = false};

bool is_ip(const std::string& s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

core::error usage_error(const std::string& what) { return core::make_error(core::errc::invalid_argument, what); }

core::result<long long> days_of(const core::command_line& line) {
  if (!line.has("--days")) return 0LL;
  const std::string d = line.value("--days");
  long long days = 0;
  auto [p, ec] = std::from_chars(d.data(), d.data() + d.size(), days);
  if (ec != std::errc{} || p != d.data() + d.size() || days < 1) return usage_error("--days must be a positive integer");
  return days;
}

core::result<int> init(const core::command_line& line, const crypto::ca_files& ca, const std::string& dir, long long days) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  crypto::ca_options co;
  if (line.has("--cn")) co.common_name = line.value("--cn");
  if (days > 0) co.valid_days = days;
  TESSERA_TRY(crypto::init_ca(ca, co, line.has("--force")));
  std::printf("CA written: %s, %s, %s\n", ca.cert.c_str(), ca.key.c_str(), ca.crl.c_str());
  return 0;
}

core::result<int> issue(const core::command_line& line, const std::string& command, const crypto::ca_files& ca,
                        const std::filesystem::path& out_dir, long long days) {
  crypto::issue_options io;
  crypto::cert_files out;
  if (days > 0) io.valid_days = days;
  const std::string id = line.value("--id");
  if (command == "issue-hub") {
    if (!line.has("--name")) return usage_error("issue-hub needs at least one --name");
    if (!id.empty()) return usage_error("issue-hub takes --name, not --id");
    for (const auto& n : line.all("--name")) (is_ip(n) ? io.ip_addresses : io.dns_names).push_back(n);
    io.common_name = line.value("--cn");
    out = {out_dir / "hub.pem", out_dir / "hub.key"};
  } else if (command == "issue-operator") {
    if (id.empty()) return usage_error("issue-operator needs --id NAME");
    if (!crypto::valid_device_id(id)) return usage_error("operator name must match [A-Za-z0-9._-]{1,64}");
    if (line.has("--name") || line.has("--cn")) return usage_error("issue-operator takes --id only (the name is the subject)");
    io.operator_name = id;
    out = {out_dir / ("operator-" + id + ".pem"), out_dir / ("operator-" + id + ".key")};
  } else {
    if (id.empty()) return usage_error("issue-device needs --id");
    if (!crypto::valid_device_id(id)) return usage_error("device id must match [A-Za-z0-9._-]{1,64}");
    if (line.has("--name") || line.has("--cn")) return usage_error("issue-device takes --id only (the id is the subject)");
    io.device_id = id;
    out = {out_dir / (id + ".pem"), out_dir / (id + ".key")};
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  TESSERA_ASSIGN_OR_RETURN(const std::string serial, crypto::issue(ca, io, out, line.has("--force")));
  std::printf("issued %s (key %s), serial %s\n", out.cert.c_str(), out.key.c_str(), serial.c_str());
  return 0;
}

core::result<int> revoke(const core::command_line& line, const crypto::ca_files& ca) {
  if (line.has("--serial") == line.has("--cert")) return usage_error("revoke needs exactly one of --serial or --cert");
  std::string serial = line.value("--serial");
  if (line.has("--cert")) {
    TESSERA_ASSIGN_OR_RETURN(serial, crypto::certificate_serial(line.value("--cert")));
  }
  // Revoking what is revoked already is what the operator wanted: say so and succeed (a script that
  // revokes a list of devices may meet one twice).
  if (auto done = crypto::revoke(ca, serial); !done) {
    if (done.error().code != crypto::errc::already_revoked) return std::move(done).error();
    std::printf("serial %s is already revoked in %s: nothing to do\n", serial.c_str(), ca.crl.c_str());
    return 0;
  }
  std::printf("revoked serial %s in %s\n", serial.c_str(), ca.crl.c_str());
  return 0;
}

// A key from the CSPRNG, straight to its file: the bytes are never printed.
core::result<int> seal_key(const core::command_line& line) {
  for (const std::string_view flag : {"--dir", "--out-dir", "--cn", "--name", "--id", "--serial", "--cert", "--days"})
    if (line.has(flag)) return usage_error("seal-key takes --out FILE [--force], not " + std::string(flag));
  const std::filesystem::path out = line.value("--out");
  if (out.empty()) return usage_error("seal-key needs --out FILE");
  if (out.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(out.parent_path(), ec);
  }
  TESSERA_ASSIGN_OR_RETURN(const crypto::sealing_key key, crypto::sealing_key::generate());
  TESSERA_TRY(key.save(out, line.has("--force")));
  std::printf("sealing key written: %s (32 bytes, owner-read-only; the hub's seal_key)\n", out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "--version") {
    std::printf("tessera-pki %.*s\n", static_cast<int>(core::version().size()), core::version().data());
    return 0;
  }
  if (command != "init" && command != "issue-hub" && command != "issue-device" && command != "issue-operator" &&
      command != "revoke" && command != "seal-key") {
    // No command, --help, or one we do not know: the usage, on the stream that fits.
    const bool help = command == "--help" || command == "-h";
    std::fputs(core::help_text(k_command, {}).c_str(), help ? stdout : stderr);
    if (!help && !command.empty()) std::fprintf(stderr, "tessera-pki: unknown command '%s'\n", command.c_str());
    return help ? 0 : 2;
  }
  return core::run_command(k_command, argc, argv, 2, {}, [&command](const core::command_line& line) -> core::result<int> {
    if (command == "seal-key") return seal_key(line);
    if (line.has("--out")) return usage_error("--out is for seal-key (certificates and keys go in --out-dir)");
    const std::string dir = line.has("--dir") ? line.value("--dir") : "pki";
    const auto ca = crypto::ca_files::in(dir);
    const std::filesystem::path out_dir = line.has("--out-dir") ? std::filesystem::path(line.value("--out-dir")) : std::filesystem::path(dir);
    TESSERA_ASSIGN_OR_RETURN(const long long days, days_of(line));
    if (command == "init") return init(line, ca, dir, days);
    if (command == "revoke") return revoke(line, ca);
    return issue(line, command, ca, out_dir, days);
  });
}
