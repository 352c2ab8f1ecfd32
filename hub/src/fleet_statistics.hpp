// Internal: the hub's statistics phase — before round 1 of a model that standardizes its inputs, the
// fleet's feature statistics in two passes over the network (rounds/statistics.hpp holds the
// gathering's state, core/data/fed_stats.hpp the sums). This asks the devices and takes their answers; the
// round driver owns it in its statistics phase (phase.hpp), times each pass and moves on when a call
// says the pass is over.
//
//   fleet_statistics stats(ctx, devices);
//   TESSERA_TRY(stats.begin(engine.draw_cohort(devices.ready_offers(), purpose).value()));  // logs who is left out
//   if (stats.ask()) end_pass();                          // STATS to every asked device
//   ... if (stats.on_reply(id, reply)) end_pass();        // or drop(id, why), or time_out()
//   TESSERA_TRY(stats.finish_pass());
//
// Under secure aggregation each pass is one masked sum (DESIGN §6): STATS carries the sum's secure
// part, the protocol's steps run as a training round's (secure()), each reply is a masked vector, and
// on_reply's true means every vector is in — the driver then asks for the unmasking, and the pass ends
// when the protocol does. The hub never holds one device's figures.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "device_registry.hpp"
#include "hub_context.hpp"
#include "secure_steps.hpp"
#include "tessera/rounds/statistics.hpp"

namespace tessera::hub {

class fleet_statistics {
 public:
  fleet_statistics(const hub_context& ctx, device_registry& devices);

  // Pass 1 on `offers` (logs the devices left out, and how many are asked); fails when none is left.
  [[nodiscard]] core::result<void> begin(std::vector<rounds::device_offer> offers);
  [[nodiscard]] int pass() const noexcept { return gathering_.pass(); }
  [[nodiscard]] const rounds::stats_gathering& gathering() const noexcept { return gathering_; }
  [[nodiscard]] rounds::stats_gathering& gathering() noexcept { return gathering_; }

  // The pass's question to every asked device (one not connected is left out). Each of these returns
  // true when the pass is over: every asked device answered or was left out (masked: every vector is in).
  [[nodiscard]] bool ask();
  // The pass's masked sum's protocol, or null (plain figures).
  [[nodiscard]] secure_steps* secure() noexcept { return secure_ ? &*secure_ : nullptr; }
  // Ends the pass: its figures (plain), or the protocol's released sum (masked), into the gathering.
  [[nodiscard]] core::result<void> finish_pass();
  [[nodiscard]] bool expects(const std::string& id, std::uint64_t pass) const;
  [[nodiscard]] bool on_reply(const std::string& id, const net::msg::stats_reply& r);  // expects(id, r.pass) holds
  [[nodiscard]] bool drop(const std::string& id, const std::string& why);             // false for a device not asked
  // The pass's deadline: every device that has not answered is left out.
  void time_out();

  // The log line for statistics nobody asked for.
  [[nodiscard]] static std::string unasked(const std::string& id, std::uint64_t pass);

 private:
  void leave_out(const std::string& id, const std::string& why);
  [[nodiscard]] bool ask_masked(net::msg::stats m);

  const hub_context* ctx_;
  device_registry* devices_;
  rounds::stats_gathering gathering_;
  std::optional<secure_steps> secure_;
  sum_party* party_ = nullptr;              // secure_'s
  std::optional<core::error> cannot_mask_;  // the pass's masked sum could not begin
};

// A model whose statistics would not fit in one control frame is refused at start.
[[nodiscard]] core::result<void> check_frame_room(const hub_config& config);

}  // namespace tessera::hub
