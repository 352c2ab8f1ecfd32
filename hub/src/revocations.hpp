// Internal: who may not stay connected (hub.hpp). Two lists: the serials on the CA's revocation list
// (tls.crl), read again when its file changes, and the devices operators revoked through the endpoint
// (revocation_file.hpp). The hub's TLS context lives here too: it carries the CRL, so it is made anew
// with each new list, and the listeners take it for the connections they accept from then on.
//
//   TESSERA_ASSIGN_OR_RETURN(auto list, revocations::load(ctx));
//   if (list.reload()) { server->set_tls(list.tls()); /* close the sessions revoked now */ }
//   if (list.is_revoked(id, session->peer_serial())) ...
#pragma once

#include <filesystem>
#include <set>
#include <string>

#include "hub_context.hpp"
#include "revocation_file.hpp"
#include "tessera/crypto/tls.hpp"

namespace tessera::hub {

class revocations {
 public:
  // The TLS context and the CRL as configured; fails as the hub's start-up does.
  [[nodiscard]] static core::result<revocations> load(const hub_context& ctx);
  // The operators' list in checkpoint_dir (none without one); logs how many stay refused.
  [[nodiscard]] core::result<void> load_operator_list();

  [[nodiscard]] const crypto::tls_context& tls() const noexcept { return tls_; }
  // Reads the CRL again if its file changed: true when the list and the TLS context are new (the caller
  // hands the context to its listeners and closes the sessions revoked now). A list that cannot be
  // loaded is logged and the old one kept.
  [[nodiscard]] bool reload();

  [[nodiscard]] bool is_revoked(const std::string& id, const std::string& serial) const {
    return crl_serials_.contains(serial) || by_operator_.contains(id);
  }
  // An operator's revocation of `id`, or null.
  [[nodiscard]] const operator_revocation* by_operator(const std::string& id) const;
  // Adds an operator's revocation and keeps the list in checkpoint_dir (without one it holds until the
  // hub restarts, which the log says).
  void add_by_operator(const std::string& id, operator_revocation r);

 private:
  explicit revocations(const hub_context& ctx) : ctx_(&ctx) {}

  const hub_context* ctx_;
  crypto::tls_context tls_;
  std::filesystem::file_time_type crl_time_{};
  std::filesystem::file_time_type crl_failed_time_{};  // the version of the file last found unusable
  std::set<std::string> crl_serials_;  // lowercase hex
  operator_revocations by_operator_;
};

}  // namespace tessera::hub
