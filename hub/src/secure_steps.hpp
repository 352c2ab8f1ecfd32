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
// What the protocol sums and who takes part is a secure_party: a training round's assignments (the
// engine's: engine_party) or a sum outside a round (rounds/secure_sum.hpp: sum_party, the fleet's
// statistics), whose masked vectors come in their own messages (STATS_REPLY) instead of UPDATE.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "device_registry.hpp"
#include "hub_context.hpp"
#include "tessera/rounds/engine.hpp"
#include "tessera/rounds/secure_sum.hpp"

namespace tessera::hub {

class secure_party {
 public:
  virtual ~secure_party() = default;
  // "round 3", "the statistics' pass 1": for the log; the round the SECAGG_* messages name.
  [[nodiscard]] const std::string& what() const noexcept { return what_; }
  [[nodiscard]] std::uint64_t round() const noexcept { return round_; }
  [[nodiscard]] virtual crypto::secagg_server& server() = 0;
  [[nodiscard]] virtual const crypto::secagg_params& params() const = 0;
  // Those still taking part, and what one of them covers (null: it is not, or no longer).
  [[nodiscard]] virtual std::vector<std::string> open_members() const = 0;
  [[nodiscard]] virtual const std::vector<std::uint32_t>* open_segments(const std::string& id) const = 0;
  // Leaves `id` out (it missed a step, or the server refused what it sent).
  virtual void refuse(const std::string& id, const std::string& why) = 0;
  // Every member still in has sent its masked input (UPDATE and its upload, or its masked vector).
  [[nodiscard]] virtual bool all_uploaded() const = 0;

 protected:
  secure_party(std::string what, std::uint64_t round) : what_(std::move(what)), round_(round) {}

 private:
  std::string what_;
  std::uint64_t round_;
};

// A training round's secure aggregation: the engine's open round.
class engine_party final : public secure_party {
 public:
  explicit engine_party(rounds::engine& engine)
      : secure_party("round " + std::to_string(engine.current_round()), static_cast<std::uint64_t>(engine.current_round())), engine_(&engine) {}
  [[nodiscard]] crypto::secagg_server& server() override { return engine_->secagg_server(); }
  [[nodiscard]] const crypto::secagg_params& params() const override { return engine_->secagg_params(); }
  [[nodiscard]] std::vector<std::string> open_members() const override;
  [[nodiscard]] const std::vector<std::uint32_t>* open_segments(const std::string& id) const override;
  void refuse(const std::string& id, const std::string& why) override;
  [[nodiscard]] bool all_uploaded() const override { return engine_->all_reported(); }

 private:
  rounds::engine* engine_;
};

// A sum outside a round: its members, who is still in, whose masked vector is in.
class sum_party final : public secure_party {
 public:
  // `round`: the round its messages name (0 for the statistics, before round 1).
  sum_party(rounds::secure_sum sum, std::string what, std::uint64_t round) : secure_party(std::move(what), round), sum_(std::move(sum)) {}
  [[nodiscard]] crypto::secagg_server& server() override { return sum_.server(); }
  [[nodiscard]] const crypto::secagg_params& params() const override { return sum_.params(); }
  [[nodiscard]] std::vector<std::string> open_members() const override;
  [[nodiscard]] const std::vector<std::uint32_t>* open_segments(const std::string& id) const override;
  void refuse(const std::string& id, const std::string& why) override;

  [[nodiscard]] const rounds::secure_sum& sum() const noexcept { return sum_; }
  // The secure part of a member's request: the sum's parameters, its one segment, the member's rounding key.
  [[nodiscard]] net::msg::secure_assign part_for(const std::string& id) const;
  // A member's masked vector (the ring's values packed), added to the server's sum.
  [[nodiscard]] core::result<void> add_masked(const std::string& id, std::span<const std::byte> packed);
  [[nodiscard]] bool all_uploaded() const override;
  [[nodiscard]] bool uploaded(const std::string& id) const { return uploaded_.contains(id); }

 private:
  rounds::secure_sum sum_;
  std::set<std::string> out_, uploaded_;
};

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

  secure_steps(const hub_context& ctx, std::unique_ptr<secure_party> party, device_registry& devices);

  [[nodiscard]] secure_party& party() noexcept { return *party_; }
  // Distinct for every protocol the hub runs: a timer armed for one does not end another's step.
  [[nodiscard]] std::uint64_t serial() const noexcept { return serial_; }

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
  // A sum's member sent its masked vector (`sum` is this protocol's party): into the sum in the uploads
  // step, else the member is left out, logged. A repeat after a reconnect changes nothing. True when
  // every member still in has sent its own.
  [[nodiscard]] bool take_vector(sum_party& sum, const std::string& id, std::span<const std::byte> packed);
  // A member left: whether the step it was in may be over now.
  [[nodiscard]] bool after_leaving() const { return at_ == step::uploads ? party_->all_uploaded() : done(); }
  // The protocol is over: what it released (`o`), and how long its steps took.
  void log_outcome(const rounds::secure_outcome& o, std::int64_t round) const;

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
  std::unique_ptr<secure_party> party_;
  device_registry* devices_;
  std::uint64_t serial_;
  step at_ = step::keys;
  std::set<std::string> keyed_, shared_, pledged_, signed_, replied_;
  std::optional<crypto::secagg_roster> roster_;
  std::optional<crypto::secagg_unmask_request> request_;
  std::chrono::steady_clock::time_point step_started_;
  std::vector<std::pair<std::string, double>> timings_;  // seconds each step took
};

}  // namespace tessera::hub
