// tessera/hub/rounds.hpp — the hub's round logic, apart from any socket: plan, assign, check, assemble.
//
// A round_engine holds the full model and runs rounds for whatever devices the caller offers. The
// network service (hub.hpp) feeds it; tests and benchmarks can drive it directly. Per round:
//
//   begin_round(offers)   devices sorted by id; each one's capacity is the largest subnet its reported
//                         budget holds (core::capacity_for_budget, the core's bytes_needed formula); a
//                         device that cannot hold min_width neurons per layer (or the whole model, for
//                         FedAvg) is excluded with its reason. The plan's seed is the simulator's for
//                         the same round, so same seed + same shards gives the simulator's run.
//                         Each assignment gets its subnet, encoded in its codec, ready to send.
//   check_update(a, u)    an UPDATE is announced: round, size, codec, examples and loss must match
//                         what the assignment allows; the receive buffer is sized from the plan.
//   accept_blob(a)        the blob arrived with the digest it was announced with: decode it (every
//                         value finite) into the assignment's trained parameters.
//   close_round(v)        example-weighted assembly of what was accepted, in device order; a
//                         straggler's or a rejected device's blocks keep their old values; then
//                         validation. Returns the round's figures.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/core/dataset.hpp"
#include "tessera/core/ist.hpp"
#include "tessera/core/memory.hpp"
#include "tessera/hub/run_config.hpp"
#include "tessera/hub/simulation.hpp"
#include "tessera/net/messages.hpp"
#include "tessera/net/task.hpp"

namespace tessera::hub {

struct device_offer {
  std::string id;
  std::uint64_t budget_bytes = 0;     // training memory the device offers (HELLO)
  std::uint64_t examples = 0;
  std::vector<net::codec> codecs;     // f32 is always understood
};

enum class assignment_state { assigned, accepted, rejected, refused };
[[nodiscard]] std::string_view to_string(assignment_state s) noexcept;

struct assignment {
  std::string device;
  std::size_t index = 0;              // position in the round's device order
  std::size_t group = 0;
  core::subnet sub;
  core::codec_kind codec = core::codec_kind::f32;
  net::training_task task;
  std::vector<std::byte> download;    // the subnet as sent, in its codec
  net::digest download_sha{};
  std::size_t upload_bytes = 0;       // the size an UPDATE must declare
  assignment_state state = assignment_state::assigned;
  std::string reason;                 // why rejected or refused
  std::uint64_t examples = 0, steps = 0;
  double loss = 0;
  std::vector<float> trained;         // decoded upload, once accepted
  std::uint64_t bytes_down = 0, bytes_up = 0;  // bytes that crossed the wire, resends included (set by the service)
  std::uint64_t resent_bytes = 0;
};

struct excluded_device {
  std::string id;
  std::string reason;
};

class round_engine {
 public:
  // `params`: the full model to start from; `completed`: rounds already done (from a checkpoint).
  round_engine(const run_config& config, std::vector<float> params, std::int64_t completed);

  [[nodiscard]] std::int64_t completed() const noexcept { return completed_; }
  [[nodiscard]] bool finished() const noexcept { return completed_ >= config_.rounds || stopped_early_; }
  [[nodiscard]] bool in_round() const noexcept { return in_round_; }
  [[nodiscard]] std::int64_t current_round() const noexcept { return completed_ + 1; }  // 1-based
  [[nodiscard]] std::span<const float> params() const noexcept { return params_; }
  [[nodiscard]] const core::mlp_arch& full() const noexcept { return full_; }
  [[nodiscard]] std::uint64_t plan_seed() const noexcept { return plan_seed_; }
  [[nodiscard]] const run_config& config() const noexcept { return config_; }

  // The codec a device gets: the configured one if it speaks it, else f32.
  [[nodiscard]] core::codec_kind codec_for(const device_offer& offer) const noexcept;
  // Capacity a device's offer gives it in (0, 1], or an error saying why it cannot take part.
  [[nodiscard]] core::result<double> capacity(const device_offer& offer) const;

  // Plans the next round for `offers` (any order; at most the caller's max) and prepares every
  // assignment. Returns the devices left out, with reasons; fails if nobody can take part.
  [[nodiscard]] core::result<std::vector<excluded_device>> begin_round(std::vector<device_offer> offers);
  [[nodiscard]] std::vector<assignment>& assignments() noexcept { return assignments_; }
  [[nodiscard]] assignment* find(const std::string& device) noexcept;

  [[nodiscard]] core::result<void> check_update(const assignment& a, const net::msg::update& u) const;
  // Decodes `blob` (the received upload) into a.trained; on success the assignment is accepted.
  [[nodiscard]] core::result<void> accept_blob(assignment& a, std::span<const std::byte> blob);
  [[nodiscard]] bool all_reported() const noexcept;

  // Assembles, validates on `validation` (may be null), and ends the round.
  [[nodiscard]] core::result<round_metrics> close_round(core::example_table* validation, double seconds);

 private:
  run_config config_;
  core::mlp_arch full_;
  std::vector<float> params_;
  std::int64_t completed_ = 0;
  bool in_round_ = false;
  std::uint64_t plan_seed_ = 0;
  std::size_t groups_ = 0;
  std::vector<assignment> assignments_;
  core::aggregator aggregator_;
  bool have_best_ = false;
  double best_score_ = 0;
  std::int64_t evals_since_best_ = 0;
  bool stopped_early_ = false;
};

using net::to_core;
using net::to_net;

}  // namespace tessera::hub
