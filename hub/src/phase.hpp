// Internal: the hub's phase — what it is doing now, as one value. Each phase holds the state only it
// needs (the statistics being gathered, the secure protocol's steps, the devices scoring the model) and
// its name, written once here: /api/status and tessera_hub_state read them from this type.
//
//   waiting ◀──────────────────────────────────────────────────────┐
//     │  ▲ pause / resume (an operator; between rounds)            │
//     │  paused                                                    │
//     ├──▶ statistics (before round 1 of a standardizing model) ───┤
//     └──▶ training | secure_aggregation ──▶ [evaluating] ─────────┘
//   any ──▶ stopping (stop()) | finished | failed
#pragma once

#include <array>
#include <chrono>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "device_evaluation.hpp"
#include "fleet_statistics.hpp"
#include "secure_steps.hpp"

namespace tessera::hub {

using clock_type = std::chrono::steady_clock;

// Between rounds, until enough devices are ready: max_devices, or min_devices after device_wait_s.
struct waiting_phase {
  static constexpr std::string_view name = "waiting";
  clock_type::time_point since;
};
// Waiting, held by an operator: no round starts. `since` is the wait's, kept for the resume.
struct paused_phase {
  static constexpr std::string_view name = "paused";
  clock_type::time_point since;
};
struct statistics_phase {
  static constexpr std::string_view name = "statistics";
  fleet_statistics stats;
};
// A round from its plan to its close; `started` is the planning's time (a round's seconds run from it to
// its checkpoint).
struct training_phase {
  static constexpr std::string_view name = "training";
  clock_type::time_point started;
};
struct secure_phase {
  static constexpr std::string_view name = "secure_aggregation";
  clock_type::time_point started;
  secure_steps steps;
};
// The round is closed; its figures wait for the devices' scores before they are recorded.
struct evaluating_phase {
  static constexpr std::string_view name = "evaluating";
  clock_type::time_point started;
  device_evaluation eval;
};
struct stopping_phase {
  static constexpr std::string_view name = "stopping";
};
struct finished_phase {
  static constexpr std::string_view name = "finished";
};
struct failed_phase {
  static constexpr std::string_view name = "failed";
  std::string why;
};

// The stopped phases come last: stopped() below counts on it.
using hub_phase = std::variant<waiting_phase, paused_phase, statistics_phase, training_phase, secure_phase, evaluating_phase,
                               stopping_phase, finished_phase, failed_phase>;

[[nodiscard]] inline std::string_view name_of(const hub_phase& p) {
  return std::visit([](const auto& s) { return s.name; }, p);
}

namespace detail {
template <std::size_t... I>
constexpr auto phase_names(std::index_sequence<I...>) {
  return std::array<std::string_view, sizeof...(I)>{std::variant_alternative_t<I, hub_phase>::name...};
}
}  // namespace detail

// Every phase's name, in the order above (the metrics list them all, 1 for the current one).
inline constexpr auto k_phase_names = detail::phase_names(std::make_index_sequence<std::variant_size_v<hub_phase>>{});

// stop() ran, or the run ended: nothing starts again.
inline constexpr std::size_t k_first_stopped = 6;
static_assert(std::is_same_v<std::variant_alternative_t<k_first_stopped, hub_phase>, stopping_phase>);
[[nodiscard]] inline bool stopped(const hub_phase& p) noexcept { return p.index() >= k_first_stopped; }
// A phase the run is busy in: the operator's finish waits for its end.
[[nodiscard]] inline bool busy(const hub_phase& p) noexcept {
  return std::holds_alternative<statistics_phase>(p) || std::holds_alternative<training_phase>(p) ||
         std::holds_alternative<secure_phase>(p) || std::holds_alternative<evaluating_phase>(p);
}

// What an operator asked through the endpoint. Not the phase: a pause asked during a round holds the
// rounds after it (the phase becomes paused when that round ends), and a finish asked during one ends
// the run when it is recorded.
struct operator_holds {
  bool pause = false;
  bool finish = false;
};

}  // namespace tessera::hub
