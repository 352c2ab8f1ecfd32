// tessera/rounds/aggregation.hpp — how a round's uploads become the next model: one interface, one
// implementation per kind, each owning its state; the engine (engine.hpp) is the loop around it.
//
// The kinds, and which combinations exist (make_aggregation, the one place that decides):
//   plain     (plain_aggregation.cpp)   each device's update decoded, held to the update bounds, and
//                                       combined by the configured aggregate: the mean weighted by
//                                       examples, the median or the trimmed mean.
//   secure    (secure_aggregation.cpp)  masked uploads (crypto/secagg.hpp): the hub learns only each
//                                       segment's sum over its contributors, and applies its mean.
//   private   (private_aggregation.cpp) differential privacy around either of them, as a wrapper owns
//                                       its state and leaves the wrapped kind unaware of it: devices
//                                       sampled, changes clipped, noise added (by the hub around plain,
//                                       by the devices around secure), ε accounted.
//
// A round, as the engine calls it:
//
//   sample(offers) ─▶ admit(taking) ─▶ own_plan(taking)? ─▶ begin(plan, assignments)
//        ─▶ receive(a, blob) per upload ─▶ fold(a) per accepted update, in device order
//        ─▶ finish(params, reached, metrics)
//
//   auto agg = rounds::make_aggregation(config, param_count);
//   TESSERA_ASSIGN_OR_RETURN(offers, agg->sample(view, std::move(offers)));
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "tessera/core/base/error.hpp"
#include "tessera/core/math/ist.hpp"
#include "tessera/rounds/assignment.hpp"
#include "tessera/rounds/metrics.hpp"
#include "tessera/rounds/offer.hpp"
#include "tessera/rounds/run_config.hpp"

namespace tessera::rounds {

// What an aggregation sees of the engine's round: the run's configuration, the full model's shape, the
// model as the round found it, and how many rounds closed before it.
struct round_view {
  const run_config& config;
  const core::mlp_arch& full;
  std::span<const float> params;
  std::int64_t completed = 0;
  [[nodiscard]] std::int64_t round() const noexcept { return completed + 1; }
};

// The coordinates a round reached, for the server optimizer (core/math/server_optimizer.hpp): one flag per
// parameter of the full model, or nothing at all when no server optimizer steps (every mark a no-op).
class reached_mask {
 public:
  reached_mask() = default;
  reached_mask(const core::mlp_arch& full, bool tracked);
  [[nodiscard]] bool tracked() const noexcept { return !flags_.empty(); }
  [[nodiscard]] std::span<const float> flags() const noexcept { return flags_; }
  // The first `leading` values of the subnet's layout (all by default).
  void mark(const core::subnet& sub, std::size_t leading = SIZE_MAX);
  void mark_range(std::size_t offset, std::size_t count);

 private:
  core::mlp_arch full_;
  std::vector<float> flags_;
};

class aggregation {
 public:
  virtual ~aggregation() = default;

  // Sizing a device: the segments its masked input covers (0: uploads are not masked) and whether it
  // clips its change; both change what sits beside its training arena (core::beside_arena).
  [[nodiscard]] virtual std::size_t masked_segments() const noexcept { return 0; }
  [[nodiscard]] virtual bool clips() const noexcept { return false; }
  // The clip a device's task carries (0: none).
  [[nodiscard]] virtual double task_clip() const noexcept { return 0; }

  // The offered devices (in natural order of their ids) that this round may take: all of them, or a
  // sample. Fails when the round must not start (a spent privacy budget).
  [[nodiscard]] virtual core::result<std::vector<device_offer>> sample(const round_view& v, std::vector<device_offer> offers);
  // The devices whose budget holds a subnet: fails when they cannot make a round of this kind, may move
  // some to `excluded`, and returns how many devices the groups are cut for.
  [[nodiscard]] virtual core::result<std::size_t> admit(const round_view& v, std::vector<device_offer>& taking,
                                                        std::vector<excluded_device>& excluded) const = 0;
  // A plan of this kind's own, or nullopt for the engine's (a cut of the hidden layers, or the whole
  // model).
  [[nodiscard]] virtual core::result<std::optional<core::round_plan>> own_plan(const round_view& v, std::span<const device_offer> taking);
  // Whether a round runs with no device at all (a private round releases its noise all the same).
  [[nodiscard]] virtual bool runs_empty() const noexcept { return false; }
  // The round's assignments exist: set what each uploads (segments, sizes, keys) and start the round.
  [[nodiscard]] virtual core::result<void> begin(const round_view& v, const core::round_plan& plan, std::span<assignment> assignments) = 0;

  // The most clipped values or changes an upload may claim.
  [[nodiscard]] virtual std::uint64_t most_clipped(const assignment& a) const noexcept = 0;
  // An announced upload, whole: decoded and checked (an error rejects the assignment) and held.
  [[nodiscard]] virtual core::result<void> receive(const round_view& v, assignment& a, std::span<const std::byte> blob) = 0;
  // An accepted update joins the round's sums; called in device order.
  virtual void fold(const round_view& v, assignment& a, reached_mask& reached) = 0;
  // The round's release: the new model in `params` (which holds the one the round started from, and is
  // the view's params: read them before writing), the coordinates it reached, and this kind's figures
  // in `m`.
  [[nodiscard]] virtual core::result<void> finish(const round_view& v, std::span<const assignment> assignments,
                                                  std::span<float> params, reached_mask& reached, round_metrics& m) = 0;
  // Why the run must stop after the round just finished (empty: it need not).
  [[nodiscard]] virtual std::string_view stop_reason() const noexcept { return {}; }
};

// The aggregation a run's configuration asks for: plain or secure, wrapped in private with
// differential privacy. `params`: the full model's parameter count.
[[nodiscard]] std::unique_ptr<aggregation> make_aggregation(const run_config& config, std::size_t params);

}  // namespace tessera::rounds
