#include "operator_routes.hpp"

#include <algorithm>
#include <charconv>
#include <string_view>

#include "tessera/hub/error.hpp"
#include "tessera/hub/prometheus.hpp"

// hub/src/status_page.html with its script (status_page.js), embedded at build time (cmake/embed_text.cmake).
extern const char k_status_page_html[];
extern const std::size_t k_status_page_html_size;

namespace tessera::hub {
namespace {

constexpr std::string_view k_devices_prefix = "/api/devices/", k_revoke_suffix = "/revoke";

http_response json_reply(unsigned status, const nlohmann::json& j) {
  // Text that came from peers is valid UTF-8 once parsed; should anything else slip in, it is replaced
  // (U+FFFD) rather than thrown out of a completion handler.
  return {.status = status,
          .content_type = "application/json",
          .body = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
          .headers = {}};
}
http_response error_reply(unsigned status, const std::string& what) { return json_reply(status, {{"error", what}}); }

http_response allow(const char* methods) {
  http_response x = error_reply(405, std::string("method not allowed (") + methods + ")");
  x.headers.emplace_back("Allow", methods);
  return x;
}

http_response status_page() {
  http_response page{.status = 200,
                     .content_type = "text/html; charset=utf-8",
                     .body = std::string(k_status_page_html, k_status_page_html_size),
                     .headers = {}};
  // The page needs nothing from elsewhere, and may not load anything from elsewhere.
  page.headers.emplace_back("Content-Security-Policy",
                            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
                            "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
  return page;
}

// "since=12" from a query string (key "since"); `otherwise` when absent or not a number, 0 below 0.
std::int64_t query_number(const std::string& query, std::string_view key, std::int64_t otherwise) {
  for (std::size_t at = 0; at < query.size();) {
    const auto end = std::min(query.find('&', at), query.size());
    const std::string_view kv(query.data() + at, end - at);
    if (kv.size() > key.size() && kv.starts_with(key) && kv[key.size()] == '=') {
      std::int64_t n = 0;
      const auto v = kv.substr(key.size() + 1);
      if (std::from_chars(v.data(), v.data() + v.size(), n).ec == std::errc{}) return std::max<std::int64_t>(n, 0);
    }
    at = end + 1;
  }
  return otherwise;
}

std::int64_t since_of(const std::string& query) { return query_number(query, "since", 0); }

fleet_page page_of(const std::string& query) {
  const auto limit = query_number(query, "devices", static_cast<std::int64_t>(fleet_page::k_default));
  return {.from = static_cast<std::size_t>(query_number(query, "devices_from", 0)),
          .limit = std::min(static_cast<std::size_t>(limit), fleet_page::k_most)};
}

bool is_revoke(const std::string& path) { return path.starts_with(k_devices_prefix) && path.ends_with(k_revoke_suffix); }

http_response action(const http_request& r, operator_api& api) {
  if (r.path != "/api/pause" && r.path != "/api/resume" && r.path != "/api/finish" && !is_revoke(r.path))
    return error_reply(404, "no such resource: " + r.path);
  if (r.method != "POST") return allow("POST");
  if (r.operator_name.empty())
    return error_reply(403, "actions need an operator certificate: serve the endpoint over HTTPS (http.tls on, or a "
                            "non-loopback http.listen) and connect with a certificate from tessera-pki issue-operator");
  // A browser cannot send a cross-site JSON POST without asking first (CORS preflight, which this
  // endpoint never grants): requiring the type keeps another page from acting with the operator's
  // certificate.
  if (!r.content_type.starts_with("application/json")) return error_reply(415, "actions take Content-Type: application/json");
  if (r.path == "/api/pause") return json_reply(200, api.pause(r.operator_name));
  if (r.path == "/api/resume") return json_reply(200, api.resume(r.operator_name));
  if (r.path == "/api/finish") return json_reply(200, api.finish(r.operator_name));
  const std::string id = r.path.substr(k_devices_prefix.size(), r.path.size() - k_devices_prefix.size() - k_revoke_suffix.size());
  auto reply = api.revoke(id, r.operator_name);
  if (!reply) return error_reply(reply.error().code == errc::unknown_device ? 404 : 400, reply.error().message);
  return json_reply(200, reply.value());
}

http_response dispatch(const http_request& r, operator_api& api) {
  const bool get = r.method == "GET" || r.method == "HEAD";
  if (r.path == "/" || r.path == "/index.html") return get ? status_page() : allow("GET");
  if (r.path == "/metrics")
    return get ? http_response{.status = 200, .content_type = std::string(prom::content_type), .body = api.metrics(), .headers = {}}
               : allow("GET");
  if (r.path == "/api/status") return get ? json_reply(200, api.status(page_of(r.query))) : allow("GET");
  if (r.path == "/api/rounds") return get ? json_reply(200, api.rounds(since_of(r.query))) : allow("GET");
  return action(r, api);
}

}  // namespace

http_response route(const http_request& r, operator_api& api) {
  http_response out = dispatch(r, api);
  if (r.method == "HEAD") out.body.clear();
  return out;
}

}  // namespace tessera::hub
