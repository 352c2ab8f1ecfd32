#include "tessera/edge/agent_config.hpp"

#include <algorithm>
#include <charconv>

#include "tessera/core/json_config.hpp"
#include "tessera/net/task.hpp"

namespace tessera::edge {

core::result<agent_config> parse_agent_config(const nlohmann::json& json, const std::string& source) {
  core::config_reader r(json, source);
  agent_config c;
  const std::string hub = r.string("hub", "127.0.0.1:7443");
  const auto colon = hub.rfind(':');
  unsigned port = 0;
  const char* end = hub.data() + hub.size();
  if (colon == std::string::npos || colon == 0 || std::from_chars(hub.data() + colon + 1, end, port).ptr != end ||
      port == 0 || port > 65535) {
    r.fail("hub", "'" + hub + "' is not HOST:PORT");
  } else {
    c.hub_host = hub.substr(0, colon);
    c.hub_port = static_cast<std::uint16_t>(port);
  }
  c.tls.hub_name = r.string("hub_name", c.hub_host);
  if (const auto* t = r.object("tls")) {
    core::config_reader tr = r.child("tls", *t);
    c.tls.ca_cert = tr.string("ca", c.tls.ca_cert.string());
    c.tls.cert = tr.string("cert", c.tls.cert.string());
    c.tls.key = tr.string("key", c.tls.key.string());
    TESSERA_TRY(tr.finish());
  }
  if (const auto* d = r.object("data")) {
    core::config_reader dr = r.child("data", *d);
    data_config& data = c.data;
    data.format = dr.choice("format", "idx", {"idx", "npy", "csv"});
    data.features = dr.string("features", "");
    data.labels = dr.string("labels", "");
    const std::string norm = dr.choice("normalization", data.format == "csv" ? "none" : "scale_unit", {"none", "scale_unit"});
    data.norm = norm == "none" ? core::normalization::none : core::normalization::scale_unit;
    data.label_column = static_cast<std::size_t>(dr.integer("label_column", 0, 0, 1 << 20));
    data.header = dr.boolean("header", false);
    data.shuffle_buffer = dr.integer("shuffle_buffer", 1024, 1, 1 << 24);
    data.max_batch = dr.integer("max_batch", 256, 1, net::max_task_batch);
    c.data_seed = dr.seed("seed", 0);
    if (data.features.empty()) dr.fail("features", "required: the file of this device's examples");
    if (data.format != "csv" && data.labels.empty()) dr.fail("labels", "required for " + data.format);
    TESSERA_TRY(dr.finish());
  } else {
    r.fail("data", "required: this device's examples ({\"format\", \"features\", \"labels\"})");
  }
  c.budget_bytes = static_cast<std::size_t>(r.number("memory_budget_mib", 16, 0.25, 1 << 20) * 1024 * 1024);
  c.codecs.clear();
  for (const auto& name : r.choices("codecs", {"f32", "f16", "q8"}, {"f32", "f16", "q8"})) {
    const auto k = core::parse_codec(name);
    if (k && std::find(c.codecs.begin(), c.codecs.end(), k.value()) == c.codecs.end()) c.codecs.push_back(k.value());
  }
  if (std::find(c.codecs.begin(), c.codecs.end(), core::codec_kind::f32) == c.codecs.end()) c.codecs.push_back(core::codec_kind::f32);
  if (const auto* rc = r.object("reconnect")) {
    core::config_reader rr = r.child("reconnect", *rc);
    c.backoff_initial = std::chrono::milliseconds(rr.integer("initial_ms", 250, 1, 3'600'000));
    c.backoff_max = std::chrono::milliseconds(rr.integer("max_ms", 30'000, 1, 86'400'000));
    c.jitter = rr.number("jitter", 0.5, 0.0, 1.0);
    if (c.backoff_max < c.backoff_initial) rr.fail("max_ms", "is below initial_ms");
    TESSERA_TRY(rr.finish());
  }
  if (const auto* rl = r.object("rate_limit")) {
    core::config_reader lr = r.child("rate_limit", *rl);
    c.upload_bytes_per_s = static_cast<std::uint64_t>(lr.integer("upload_bytes_per_s", 0, 0, INT64_MAX));
    c.download_bytes_per_s = static_cast<std::uint64_t>(lr.integer("download_bytes_per_s", 0, 0, INT64_MAX));
    // A cap below a few hundred bytes per second could not even carry the heartbeats.
    if (c.upload_bytes_per_s != 0 && c.upload_bytes_per_s < 512) lr.fail("upload_bytes_per_s", "below 512 (0 means no cap)");
    if (c.download_bytes_per_s != 0 && c.download_bytes_per_s < 512) lr.fail("download_bytes_per_s", "below 512 (0 means no cap)");
    TESSERA_TRY(lr.finish());
  }
  c.chunk_kib = static_cast<std::uint32_t>(r.integer("chunk_kib", 256, 1, 1000));
  c.window_kib = static_cast<std::uint32_t>(r.integer("window_kib", 2048, 1, 1 << 20));
  if (c.window_kib < c.chunk_kib) r.fail("window_kib", "is below chunk_kib");
  c.heartbeat_s = r.number("heartbeat_s", 10, 0.05, 3600);
  c.idle_timeout_s = r.number("idle_timeout_s", 60, 0.2, 86400);
  if (c.idle_timeout_s <= c.heartbeat_s) r.fail("idle_timeout_s", "must exceed heartbeat_s");
  c.exit_after_rounds = r.integer("exit_after_rounds", 0, 0, INT64_MAX);
  TESSERA_TRY(r.finish());
  return c;
}

core::result<agent_config> load_agent_config(const std::string& path, const std::vector<std::string>& overrides) {
  auto json = core::load_config(path, overrides);
  TESSERA_TRY(json);
  return parse_agent_config(json.value(), path.empty() ? "command line" : path);
}

}  // namespace tessera::edge
