// Internal: the JSON the operator's API answers with (operator_routes.hpp serves them):
//
//   /api/status   {"hub": {version, uptime_s, ...}, "run": {state, round, paused, waiting_for, ε, ...},
//                  "fleet": {registered, connected, training, devices_from, "devices": [{id, state, budget_bytes, ...}],
//                            "turned_away": [{who, address, serial, code, reason, times, last_unix}]}}
//   /api/rounds   {"rounds": [round_metrics::to_json(), ...]}   (the rounds after ?since=N)
//   the actions   {"paused": true, "state": "paused"}, {"finish_requested": true, ...}, {"revoked": id, ...}
//
// Numbers that are not finite (no figure yet) are null.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "hub_view.hpp"
#include "operator_routes.hpp"

namespace tessera::hub {

// The fleet's counts cover every device; its "devices" are `page`'s, in natural order of their ids.
[[nodiscard]] nlohmann::json status_document(const hub_view& v, fleet_page page = {});
// The series is in round order, so the rounds after `since` are its tail.
[[nodiscard]] nlohmann::json rounds_document(const hub_figures& figures, std::int64_t since);

// The actions' replies.
[[nodiscard]] nlohmann::json hold_document(bool paused, std::string_view state);
[[nodiscard]] nlohmann::json finish_document(const hub_view& v);
[[nodiscard]] nlohmann::json revoke_document(const std::string& id, const std::string& serial);

}  // namespace tessera::hub
