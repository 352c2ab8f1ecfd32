// tessera/edge/secure_round.hpp — this device's part in one round's secure aggregation
// (crypto/secagg.hpp, DESIGN §6), apart from any socket.
//
//   ASSIGN{secure}  ──start()──▶ keys_message(): SECAGG_KEYS, signed with this device's certificate key
//   SECAGG_ROSTER   ──on_roster()──▶ SECAGG_SHARES (every member's certificate and signature checked)
//   SECAGG_INBOX    ──on_inbox()
//   trained         ──mask()──▶ the upload: the weighted change (trained − received), clipped,
//                              fixed-point, masked, packed; UPDATE carries its size and clipped count;
//                              SECAGG_MASKED_WITH before it, whom it masked with, signed
//   SECAGG_CHECK    ──on_check()──▶ SECAGG_CHECK_REPLY: this device's signature over the survivor set
//                              (once a round: another set is refused)
//   SECAGG_UNMASK   ──on_unmask()──▶ SECAGG_UNMASK_REPLY (the set it signed, with at least threshold
//                              survivors' signatures over it; never both shares of one device)
//
// A step repeated by the hub (after a broken link) gets the same answer; a step out of order, for
// another round or that the protocol forbids is refused (errc::secure_step) with the reason.
// Memory besides the arena: core::secure_bytes, which the hub planned with and check_assignment checks.
#pragma once

#include <filesystem>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/math/model_spec.hpp"
#include "tessera/crypto/agreement.hpp"
#include "tessera/crypto/secagg.hpp"
#include "tessera/edge/error.hpp"
#include "tessera/edge/privacy_policy.hpp"
#include "tessera/net/messages.hpp"

namespace tessera::edge {

// What this device signs its keys with and checks the others' against: its certificate and key, the CA.
struct secure_identity {
  std::string id;
  std::string certificate_pem;
  crypto::signing_key key;
  std::string ca_pem;
  // The CA's revocation list this device holds (tls.crl; empty: none), read again at every round's
  // start so a list replaced on the device counts from its next round: a revoked device's keys in a
  // roster are refused.
  std::filesystem::path crl;
};

class secure_round {
 public:
  enum class stage { keys, shared, masked, checked, unmasked };

  // Whether this device can take part in the secure part `s` of an ASSIGN for `arch`, before anything
  // is reserved (errc::secure_step, naming the fields): its covered segments hold exactly the subnet's
  // parameters and their weights, and its ring exists for every roster the protocol allows — at least
  // `threshold` devices and, when `summands` sizes the ring, at most that many (crypto::fixed_point).
  [[nodiscard]] static core::result<void> check(const net::msg::secure_assign& s, const core::mlp_arch& arch);
  // Checks the secure part (check()) and makes this round's keys, signed over the segments the ASSIGN
  // gave and `model`, the digest it announced for the subnet (which the download is checked against);
  // `policy` is held against the roster's threshold (check_roster_threshold) before any share leaves.
  [[nodiscard]] static core::result<std::unique_ptr<secure_round>> start(const net::msg::secure_assign& s, std::uint64_t round,
                                                                         const net::digest& model, const core::mlp_arch& arch,
                                                                         const secure_identity& me, const privacy_policy& policy = {});

  // A sum outside a training round (the fleet's statistics, core/data/stats_vector.hpp): one segment of
  // `length` values in [−1, 1], no noise, keys signed over `request`, the digest of what the hub asked
  // (the same for every device, or the neighbours refuse the roster). mask_values() masks the vector.
  [[nodiscard]] static core::result<std::unique_ptr<secure_round>> start_sum(const net::msg::secure_assign& s, std::uint64_t round,
                                                                             const net::digest& request, std::size_t length,
                                                                             const secure_identity& me, const privacy_policy& policy);

  [[nodiscard]] stage at() const noexcept { return at_; }
  [[nodiscard]] std::uint64_t round() const noexcept { return round_; }
  // Differential privacy: the variance of this device's share of the noise, in ring steps² (0: none).
  [[nodiscard]] double noise() const noexcept { return s_.params.noise; }
  [[nodiscard]] bool has_inbox() const noexcept { return inbox_.has_value(); }
  [[nodiscard]] net::msg::secagg_keys keys_message() const;
  [[nodiscard]] core::result<net::msg::secagg_shares> on_roster(const net::msg::secagg_roster& r);
  [[nodiscard]] core::result<void> on_inbox(const net::msg::secagg_inbox& in);
  // The received parameters, kept to take the change against (before training).
  void keep_received(std::span<const float> params);
  // The masked upload from the trained parameters; weight = examples / (steps × batch).
  // `fitted`: the change was within the task's clip before clipping (adaptive clipping's count).
  [[nodiscard]] core::result<void> mask(std::span<const float> trained, double weight, bool fitted = true);
  [[nodiscard]] core::result<void> mask_values(std::vector<float> values);
  [[nodiscard]] std::span<const std::byte> upload() const noexcept { return upload_; }
  // After mask(): the signed pledge of whom it masked with, sent before the masked UPDATE.
  [[nodiscard]] const net::msg::secagg_masked_with& masked_with() const noexcept { return masked_with_; }
  [[nodiscard]] std::uint64_t clipped() const noexcept { return clipped_; }
  // A round whose devices sample themselves: whether this device drew itself in (its CSPRNG, at
  // mask()); one not drawn sent its noise alone. Always true in other rounds.
  [[nodiscard]] bool drawn() const noexcept { return drawn_; }
  // A private round whose training failed: mask() sends a zero change (this device's noise alone)
  // rather than the device refusing in the clear, which would tell the hub something of its data.
  void withdraw() noexcept { withdrawn_ = true; }
  // The rate this round's release is composed at in the device's ledger (crypto::secagg_sampling_rate).
  [[nodiscard]] double sampling_rate() const noexcept { return crypto::secagg_sampling_rate(s_.params); }
  [[nodiscard]] core::result<net::msg::secagg_check_reply> on_check(const net::msg::secagg_check& c);
  [[nodiscard]] core::result<net::msg::secagg_unmask_reply> on_unmask(const net::msg::secagg_unmask& u);

 private:
  secure_round(std::uint64_t round, net::msg::secure_assign s, crypto::secagg_client client, const secure_identity& me,
               const privacy_policy& policy);
  [[nodiscard]] static core::result<void> check_ring(const crypto::secagg_params& p);
  [[nodiscard]] static core::result<std::unique_ptr<secure_round>> open(const net::msg::secure_assign& s, std::uint64_t round,
                                                                        const net::digest& model, const secure_identity& me,
                                                                        const privacy_policy& policy);
  [[nodiscard]] core::result<void> seal(std::vector<std::vector<float>>& input);

  std::uint64_t round_ = 0;
  const secure_identity* me_;  // the agent's, which outlives its rounds
  privacy_policy policy_;
  net::msg::secure_assign s_;
  crypto::secagg_client client_;
  stage at_ = stage::keys;
  std::optional<net::msg::secagg_shares> shares_;   // the answer to the roster, for a repeat
  std::optional<std::vector<crypto::secagg_box>> inbox_;
  std::vector<float> received_;
  std::vector<std::byte> upload_;
  std::uint64_t clipped_ = 0;
  bool drawn_ = true;
  bool withdrawn_ = false;
  net::msg::secagg_masked_with masked_with_;
  std::optional<net::msg::secagg_unmask_reply> reply_;
};

}  // namespace tessera::edge
