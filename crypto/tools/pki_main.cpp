// tessera-pki — the fleet's certificate authority on the command line. See tessera/crypto/pki.hpp.
//
//   tessera-pki init --dir pki [--cn "Tessera CA"] [--days 3650]
//   tessera-pki issue-hub --dir pki --name hub.example.org --name 10.0.0.5 [--days 365]
//   tessera-pki issue-device --dir pki --id pi-07 [--days 365]
//   tessera-pki revoke --dir pki (--serial 4f3a... | --cert pki/pi-07.pem)
//
// Outputs go into --dir (hub.pem/hub.key, <id>.pem/<id>.key) unless --out-dir is given. Keys are 0400.
// Existing files are never replaced unless --force is given.
#include <arpa/inet.h>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/crypto/pki.hpp"

namespace {

namespace crypto = tessera::crypto;

constexpr const char* k_usage =
    "usage: tessera-pki <command> [options]\n"
    "commands:\n"
    "  init            create a CA (ECDSA P-256, self-signed) and an empty revocation list\n"
    "  issue-hub       issue the hub certificate; --name NAME (repeatable, DNS name or IP address)\n"
    "  issue-device    issue a device certificate; --id ID\n"
    "  revoke          add a certificate to the revocation list; --serial HEX or --cert FILE\n"
    "options:\n"
    "  --dir DIR       CA directory holding ca.pem, ca.key, ca.crl (default: pki)\n"
    "  --out-dir DIR   where issued certificates and keys go (default: --dir)\n"
    "  --cn NAME       subject common name (init, issue-hub)\n"
    "  --days N        validity in days (default: 3650 for init, 365 otherwise)\n"
    "  --force         replace existing output files\n"
    "  --help          this text\n";

struct options {
  std::string command;
  std::string dir = "pki";
  std::string out_dir;
  std::string cn;
  std::vector<std::string> names;
  std::string id;
  std::string serial;
  std::string cert;
  long long days = 0;
  bool force = false;
};

bool is_ip(const std::string& s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

int fail(const std::string& message) {
  std::fprintf(stderr, "tessera-pki: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  std::vector<std::string_view> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    auto value = [&](std::string& out) -> bool {
      if (i + 1 >= args.size()) return false;
      out = std::string(args[++i]);
      return true;
    };
    if (a == "--help" || a == "-h") {
      std::fputs(k_usage, stdout);
      return 0;
    } else if (a == "--force") {
      o.force = true;
    } else if (a == "--dir") {
      if (!value(o.dir)) return fail("--dir needs a value");
    } else if (a == "--out-dir") {
      if (!value(o.out_dir)) return fail("--out-dir needs a value");
    } else if (a == "--cn") {
      if (!value(o.cn)) return fail("--cn needs a value");
    } else if (a == "--name") {
      std::string n;
      if (!value(n)) return fail("--name needs a value");
      o.names.push_back(n);
    } else if (a == "--id") {
      if (!value(o.id)) return fail("--id needs a value");
    } else if (a == "--serial") {
      if (!value(o.serial)) return fail("--serial needs a value");
    } else if (a == "--cert") {
      if (!value(o.cert)) return fail("--cert needs a value");
    } else if (a == "--days") {
      std::string d;
      if (!value(d)) return fail("--days needs a value");
      auto [p, ec] = std::from_chars(d.data(), d.data() + d.size(), o.days);
      if (ec != std::errc{} || p != d.data() + d.size() || o.days < 1) return fail("--days must be a positive integer");
    } else if (!a.starts_with("-") && o.command.empty()) {
      o.command = std::string(a);
    } else {
      return fail("unknown argument '" + std::string(a) + "' (see --help)");
    }
  }
  if (o.command.empty()) {
    std::fputs(k_usage, stderr);
    return 2;
  }

  const auto ca = crypto::ca_files::in(o.dir);
  const std::filesystem::path out_dir = o.out_dir.empty() ? std::filesystem::path(o.dir) : std::filesystem::path(o.out_dir);
  std::error_code ec;
  if (o.command == "init") {
    std::filesystem::create_directories(o.dir, ec);
    crypto::ca_options co;
    if (!o.cn.empty()) co.common_name = o.cn;
    if (o.days > 0) co.valid_days = o.days;
    auto r = crypto::init_ca(ca, co, o.force);
    if (!r) return fail(r.error().message);
    std::printf("CA written: %s, %s, %s\n", ca.cert.c_str(), ca.key.c_str(), ca.crl.c_str());
    return 0;
  }
  if (o.command == "issue-hub" || o.command == "issue-device") {
    crypto::issue_options io;
    crypto::cert_files out;
    if (o.days > 0) io.valid_days = o.days;
    if (o.command == "issue-hub") {
      if (o.names.empty()) return fail("issue-hub needs at least one --name");
      if (!o.id.empty()) return fail("issue-hub takes --name, not --id");
      for (const auto& n : o.names) (is_ip(n) ? io.ip_addresses : io.dns_names).push_back(n);
      io.common_name = o.cn;
      out = {out_dir / "hub.pem", out_dir / "hub.key"};
    } else {
      if (o.id.empty()) return fail("issue-device needs --id");
      if (!crypto::valid_device_id(o.id)) return fail("device id must match [A-Za-z0-9._-]{1,64}");
      if (!o.names.empty() || !o.cn.empty()) return fail("issue-device takes --id only (the id is the subject)");
      io.device_id = o.id;
      out = {out_dir / (o.id + ".pem"), out_dir / (o.id + ".key")};
    }
    std::filesystem::create_directories(out_dir, ec);
    auto serial = crypto::issue(ca, io, out, o.force);
    if (!serial) return fail(serial.error().message);
    std::printf("issued %s (key %s), serial %s\n", out.cert.c_str(), out.key.c_str(), serial.value().c_str());
    return 0;
  }
  if (o.command == "revoke") {
    if (o.serial.empty() == o.cert.empty()) return fail("revoke needs exactly one of --serial or --cert");
    std::string serial = o.serial;
    if (!o.cert.empty()) {
      auto s = crypto::certificate_serial(o.cert);
      if (!s) return fail(s.error().message);
      serial = s.value();
    }
    auto r = crypto::revoke(ca, serial);
    if (!r) return fail(r.error().message);
    std::printf("revoked serial %s in %s\n", serial.c_str(), ca.crl.c_str());
    return 0;
  }
  return fail("unknown command '" + o.command + "' (see --help)");
}
