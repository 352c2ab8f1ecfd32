// Internal: the operator endpoint's routes (operator_endpoint.hpp carries the HTTP):
//
//   GET  /                          the status page (one self-contained file; its script reads the API)
//   GET  /metrics                   Prometheus text format 0.0.4
//   GET  /api/status[?devices_from=N&devices=M]   the run and its fleet: the counts of every device, the
//                                   documents of M (default 200, at most 1000) from the N-th in natural
//                                   order of their ids, so that a fleet of 10 000 costs a page per poll
//   GET  /api/rounds[?since=N]      the per-round series (rounds after N)
//   POST /api/pause | /api/resume | /api/finish | /api/devices/<id>/revoke     operator certificate only
//
// A route knows its methods, who may act, and how a document travels (JSON, Prometheus text, the page);
// the documents and the actions are the hub's, behind operator_api.
//
//   http_response reply = route(request, desk);   // HEAD: as GET, without the body
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "tessera/core/base/error.hpp"
#include "tessera/hub/operator_endpoint.hpp"

namespace tessera::hub {

// The devices /api/status documents: `limit` of them from the `from`-th, in natural order of their ids.
struct fleet_page {
  static constexpr std::size_t k_default = 200, k_most = 1000;
  std::size_t from = 0;
  std::size_t limit = k_default;
};

class operator_api {
 public:
  virtual ~operator_api() = default;
  [[nodiscard]] virtual std::string metrics() const = 0;
  [[nodiscard]] virtual nlohmann::json status(fleet_page page) const = 0;
  [[nodiscard]] virtual nlohmann::json rounds(std::int64_t since) const = 0;  // the rounds after `since`
  // The actions answer with their reply; `by` names the operator. A device to revoke may be unknown
  // (errc::unknown_device).
  virtual nlohmann::json pause(const std::string& by) = 0;
  virtual nlohmann::json resume(const std::string& by) = 0;
  virtual nlohmann::json finish(const std::string& by) = 0;
  [[nodiscard]] virtual core::result<nlohmann::json> revoke(const std::string& id, const std::string& by) = 0;

 protected:
  operator_api() = default;
  operator_api(const operator_api&) = default;
  operator_api& operator=(const operator_api&) = default;
};

[[nodiscard]] http_response route(const http_request& r, operator_api& api);

}  // namespace tessera::hub
