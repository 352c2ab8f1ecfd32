#include "tessera/hub/hub_config.hpp"

#include <charconv>

namespace tessera::hub {
namespace {

using core::errc;
using core::make_error;

}  // namespace

core::result<hub_config> parse_hub_config(const nlohmann::json& json, const std::string& source) {
  core::config_reader r(json, source);
  hub_config c;
  TESSERA_TRY(rounds::read_run_fields(r, source, c, /*allow_central=*/false));
  const std::string listen = r.string("listen", "127.0.0.1:7443");
  const auto colon = listen.rfind(':');
  unsigned port = 0;
  const char* end = listen.data() + listen.size();
  if (colon == std::string::npos || colon == 0 ||
      std::from_chars(listen.data() + colon + 1, end, port).ptr != end || port > 65535) {
    r.fail("listen", "'" + listen + "' is not HOST:PORT (e.g. 0.0.0.0:7443)");
  } else {
    c.listen_host = listen.substr(0, colon);
    if (c.listen_host.size() > 2 && c.listen_host.front() == '[' && c.listen_host.back() == ']')
      c.listen_host = c.listen_host.substr(1, c.listen_host.size() - 2);
    c.listen_port = static_cast<std::uint16_t>(port);
  }
  if (const auto* t = r.object("tls")) {
    core::config_reader tr = r.child("tls", *t);
    c.tls.ca_cert = tr.string("ca", c.tls.ca_cert.string());
    c.tls.cert = tr.string("cert", c.tls.cert.string());
    c.tls.key = tr.string("key", c.tls.key.string());
    c.tls.crl = tr.string("crl", c.tls.crl.string());
    TESSERA_TRY(tr.finish());
  }
  c.min_devices = static_cast<std::size_t>(r.integer("min_devices", 1, 1, 100'000));
  c.max_devices = static_cast<std::size_t>(r.integer("max_devices", 1000, 1, 100'000));
  if (c.max_devices < c.min_devices) r.fail("max_devices", "is below min_devices (" + std::to_string(c.min_devices) + ")");
  c.device_wait_s = r.number("device_wait_s", 30, 0, 86400 * 30);
  c.round_deadline_s = r.number("round_deadline_s", 300, 0.1, 86400 * 30);
  c.heartbeat_s = r.number("heartbeat_s", 10, 0.05, 3600);
  c.idle_timeout_s = r.number("idle_timeout_s", 60, 0.2, 86400);
  if (c.idle_timeout_s <= c.heartbeat_s) r.fail("idle_timeout_s", "must exceed heartbeat_s, or idle links are cut between heartbeats");
  c.chunk_kib = static_cast<std::uint32_t>(r.integer("chunk_kib", 256, 1, 1000));
  c.window_kib = static_cast<std::uint32_t>(r.integer("window_kib", 2048, 1, 1 << 20));
  if (c.window_kib < c.chunk_kib) r.fail("window_kib", "is below chunk_kib");
  c.max_sessions = static_cast<std::size_t>(r.integer("max_sessions", 4096, 1, 1'000'000));
  if (const auto* v = r.object("validation")) {
    core::config_reader vr = r.child("validation", *v);
    validation_config val;
    val.format = vr.choice("format", "idx", {"idx", "csv"});
    val.images = vr.string("images", "");
    val.labels = vr.string("labels", "");
    val.csv = vr.string("csv", "");
    val.label_column = static_cast<std::size_t>(vr.integer("label_column", 0, 0, 1 << 20));
    val.header = vr.boolean("header", false);
    const std::string norm = vr.choice("normalization", val.format == "csv" ? "none" : "scale_unit", {"none", "scale_unit"});
    val.norm = norm == "none" ? core::normalization::none : core::normalization::scale_unit;
    val.max_examples = vr.integer("max_examples", val.max_examples, 1, 1LL << 31);
    if (val.format == "idx" && (val.images.empty() || val.labels.empty())) vr.fail("images", "images and labels are required for idx");
    if (val.format == "csv" && val.csv.empty()) vr.fail("csv", "required when format is csv");
    TESSERA_TRY(vr.finish());
    c.validation = val;
  }
  c.checkpoint_dir = r.string("checkpoint_dir", "");
  c.seal_key = r.string("seal_key", "");
  if (!c.seal_key.empty() && c.checkpoint_dir.empty()) r.fail("seal_key", "given without a checkpoint_dir");
  TESSERA_TRY(r.finish());
  return c;
}

core::result<hub_config> load_hub_config(const std::string& path, const std::vector<std::string>& overrides) {
  auto json = core::load_config(path, overrides);
  TESSERA_TRY(json);
  return parse_hub_config(json.value(), path.empty() ? "command line" : path);
}

core::result<std::unique_ptr<core::memory_table>> load_validation(const validation_config& v) {
  std::unique_ptr<core::example_stream> stream;
  if (v.format == "idx") {
    core::idx_options o;
    o.norm = v.norm;
    auto s = core::open_idx(v.images, v.labels, o);
    TESSERA_TRY(s);
    stream = std::move(s.value());
  } else {
    core::csv_options o;
    o.norm = v.norm;
    o.label_column = v.label_column;
    o.header = v.header;
    auto s = core::open_csv(v.csv, o);
    TESSERA_TRY(s);
    stream = std::move(s.value());
  }
  auto table = core::load_all(*stream, v.max_examples);
  TESSERA_TRY(table);
  return std::make_unique<core::memory_table>(std::move(table.value()));
}

}  // namespace tessera::hub
