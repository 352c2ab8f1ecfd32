// Internal: a round's secure aggregation on the network (crypto/secagg.hpp, DESIGN §6). The engine holds
// the protocol's server and applies the sums; this is who answered which step, what the unmasking asks,
// and the steps' timing for the log. The round driver owns it in its secure_aggregation phase
// (phase.hpp), runs the step timer, and does what each call returns (`next`):
//
//   ASSIGN{secure} ─▶ SECAGG_KEYS from each device   (secure_step_s; who is late cannot take part)
//   SECAGG_ROSTER  ─▶ SECAGG_SHARES from each member (secure_step_s; who is late cannot take part)
//   SECAGG_INBOX   ─▶ SECAGG_MASKED_WITH, UPDATE + the masked upload (round_deadline_s, as any round)
//   SECAGG_CHECK   ─▶ SECAGG_CHECK_REPLY from each survivor (secure_step_s): its signature over the
//                     survivor set; fewer than threshold signatures and nothing is released
//   SECAGG_UNMASK  ─▶ SECAGG_UNMASK_REPLY from each signer (secure_step_s) ─▶ close the round: the sums
//
// The hub relays keys and encrypted shares and adds masked vectors: it never holds one device's update.
#pragma once

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "device_registry.hpp"
#include "hub_context.hpp"
#include "tessera/rounds/engine.hpp"

namespace tessera::hub {

class secure_steps {
 public:
  enum class step { keys, shares, uploads, check, unmask };
  // What the driver does after a step ended.
  enum class next {
    wait,         // nothing: the uploads run under the round's deadline
    timed_step,   // a step under secure_step_s began: arm its timer (and end it at once if all answered)
    uploads,      // the uploads began: no step timer; the collection may be over already
    close_round,  // the protocol is over (or cannot go on): close the round
  };

  secure_steps(const hub_context& ctx, rounds::engine& engine, device_registry& devices);

  [[nodiscard]] step at() const noexcept { return at_; }
  // The uploads are over: the survivors are signing their set, or unmasking.
  [[nodiscard]] bool past_uploads() const noexcept { return at_ == step::check || at_ == step::unmask; }
  [[nodiscard]] static std::string_view name(step s);
  // Everyone the step waits for has answered.
  [[nodiscard]] bool done() const;
  // The step's message to one device (after a reconnect, which may have lost it).
  void send_step(device_entry& d, const std::string& id);

  // The step ends: everyone answered, or secure_step_s ran out.
  [[nodiscard]] next end_step();
  // Every update is in, or the round's deadline passed: the survivors are asked to sign their set (the
  // consistency check), then the signers to unmask.
  [[nodiscard]] next begin_unmask();
  // A device's SECAGG_* message for this round: true if it counted (then the step may be done).
  [[nodiscard]] bool on_message(const std::string& id, const net::message& m);
  // The round closed: what the protocol released, and how long its steps took.
  void log_outcome() const;

  // "SECAGG_KEYS from dev-a", for the log.
  [[nodiscard]] static std::string describe(const std::string& id, const net::message& m);

 private:
  void mark_time(step s);
  [[nodiscard]] next end_keys();
  [[nodiscard]] next end_shares();
  [[nodiscard]] next end_check();
  template <class Add>
  [[nodiscard]] bool take_reply(std::set<std::string>& answered, step when, const std::string& id, const std::string& what, bool own,
                                Add add);
  [[nodiscard]] bool is_signer(const std::string& id) const;

  const hub_context* ctx_;
  rounds::engine* engine_;
  device_registry* devices_;
  step at_ = step::keys;
  std::set<std::string> keyed_, shared_, pledged_, signed_, replied_;
  std::optional<crypto::secagg_roster> roster_;
  std::optional<crypto::secagg_unmask_request> request_;
  std::chrono::steady_clock::time_point step_started_;
  std::vector<std::pair<std::string, double>> timings_;  // seconds each step took
};

}  // namespace tessera::hub
