#include "revocations.hpp"

#include "tessera/crypto/pki.hpp"

namespace tessera::hub {

using core::log_level;

core::result<revocations> revocations::load(const hub_context& ctx) {
  revocations r(ctx);
  TESSERA_ASSIGN_OR_RETURN(r.tls_, crypto::make_hub_tls(ctx.config.tls));
  std::error_code ec;
  r.crl_time_ = std::filesystem::last_write_time(ctx.config.tls.crl, ec);
  TESSERA_ASSIGN_OR_RETURN(r.crl_serials_, crypto::revoked_serials(ctx.config.tls.crl, ctx.config.tls.ca_cert));
  return r;
}

core::result<void> revocations::load_operator_list() {
  if (ctx_->config.checkpoint_dir.empty()) return {};
  const auto path = std::filesystem::path(ctx_->config.checkpoint_dir) / k_revocations_file;
  TESSERA_ASSIGN_OR_RETURN(by_operator_, read_revocations(path));
  if (!by_operator_.empty())
    ctx_->say(log_level::info, std::to_string(by_operator_.size()) + " device(s) revoked by operators stay refused (" + path.string() + ")");
  return {};
}

bool revocations::reload() {
  const auto& files = ctx_->config.tls;
  std::error_code ec;
  const auto t = std::filesystem::last_write_time(files.crl, ec);
  if (ec || t == crl_time_) return false;
  // The hub's own certificate was checked at start; a revocation must apply even after it expired.
  auto tls = crypto::make_hub_tls(files, crypto::own_certificate::skip);
  auto serials = tls ? crypto::revoked_serials(files.crl, files.ca_cert) : core::result<std::set<std::string>>(tls.error());
  if (!serials) {
    // Said once per change of the file, not at every look (four a second).
    if (t != crl_failed_time_) ctx_->say(log_level::error, "revocation list changed but cannot be loaded (keeping the old one): " + serials.error().message);
    crl_failed_time_ = t;
    return false;
  }
  crl_time_ = t;
  tls_ = tls.value();
  crl_serials_ = std::move(serials).value();
  ctx_->say(log_level::info, "revocation list reloaded from " + files.crl.string() + " (" + std::to_string(crl_serials_.size()) + " revoked)");
  return true;
}

const operator_revocation* revocations::by_operator(const std::string& id) const {
  const auto it = by_operator_.find(id);
  return it == by_operator_.end() ? nullptr : &it->second;
}

void revocations::add_by_operator(const std::string& id, operator_revocation r) {
  by_operator_[id] = std::move(r);
  if (ctx_->config.checkpoint_dir.empty()) {
    ctx_->say(log_level::warning, "no checkpoint_dir: the revocation holds until the hub restarts; put the serial on the CA's CRL to keep it");
    return;
  }
  const auto path = std::filesystem::path(ctx_->config.checkpoint_dir) / k_revocations_file;
  if (auto ok = write_revocations(path, by_operator_); !ok) ctx_->say(log_level::error, "cannot keep the revocation: " + ok.error().message);
}

}  // namespace tessera::hub
