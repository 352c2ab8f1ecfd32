#include "tessera/hub/hub_config.hpp"

namespace tessera::hub {

core::result<hub_config> read_hub_config(core::config_reader& r) {
  hub_config c;
  TESSERA_TRY(rounds::read_run_fields(r, c, /*allow_central=*/false));
  c.listen = r.address("listen", "127.0.0.1:7443", /*allow_port_zero=*/true, "where agents connect (port 0: pick a free one)");
  if (const auto* t = r.object("tls", "the hub's certificate and the CA its devices' certificates must chain to")) {
    core::config_reader tr = r.child("tls", *t);
    c.tls.ca_cert = tr.string("ca", c.tls.ca_cert.string(), "the CA certificate (PEM)");
    c.tls.cert = tr.string("cert", c.tls.cert.string(), "the hub's certificate (PEM)");
    c.tls.key = tr.string("key", c.tls.key.string(), "the hub's private key (PEM)");
    c.tls.crl = tr.string("crl", c.tls.crl.string(), "the CA's revocation list, reloaded when it changes");
    TESSERA_TRY(tr.finish());
  }
  c.min_devices = static_cast<std::size_t>(r.integer("min_devices", 1, 1, 100'000, "a round starts with at least this many devices"));
  c.max_devices = static_cast<std::size_t>(r.integer("max_devices", 1000, 1, 100'000,
                                                     "and at once when this many are ready; a round takes this many of them at most, "
                                                     "drawn at random"));
  if (c.max_devices < c.min_devices) r.fail("max_devices", "is below min_devices (" + std::to_string(c.min_devices) + ")");
  if (c.devices_per_round > c.max_devices)
    r.fail("devices_per_round", std::to_string(c.devices_per_round) + " is above max_devices (" + std::to_string(c.max_devices) +
                                    "): a round never takes more than max_devices");
  c.device_wait_s = r.number("device_wait_s", 30, 0, 86400 * 30, "seconds to wait for max_devices before starting with fewer");
  c.round_deadline_s = r.number("round_deadline_s", 300, 0.1, 86400 * 30,
                                "seconds from dispatch to close; a straggler's neurons keep their values");
  c.secure_step_s = r.number("secure_step_s", 60, 0.1, 86400,
                             "secure aggregation: seconds for each of its steps (keys, shares, unmasking); who has not "
                             "answered by then is dropped");
  net::read_link_settings(r, c.link, /*rate_limits=*/false);
  c.max_sessions = static_cast<std::size_t>(r.integer("max_sessions", 4096, 1, 1'000'000, "devices connected at once (verified sessions)"));
  c.max_handshakes = static_cast<std::size_t>(r.integer("max_handshakes", 256, 1, 1'000'000,
                                                        "connections in their TLS handshake at once, and as many again that have sent nothing yet; the oldest of each goes to make room"));
  c.max_handshakes_per_source = static_cast<std::size_t>(r.integer("max_handshakes_per_source", 16, 1, 1'000'000,
                                                                   "connections in their TLS handshake from one address, and as many silent ones"));
  c.handshake_timeout_s = r.number("handshake_timeout_s", 10, 0.1, 3600, "seconds for a connection's TLS handshake and its HELLO");
  c.io_threads = static_cast<std::size_t>(r.integer("io_threads", 0, 0, 1024,
                                                    "threads serving the agents' connections (TLS handshakes, frames, transfers), "
                                                    "each connection on one at a time; 0: one per core. The rounds run on one "
                                                    "of them at a time"));
  if (const auto* v = r.object("validation", "the hub's own test set (optional: a federation needs none)")) {
    core::config_reader vr = r.child("validation", *v);
    vr.renamed("images", "validation.features");
    vr.renamed("csv", "validation.features");
    c.validation = core::read_data_source(vr, {}, {.required = true, .allow_standardize = true, .csv_default = core::normalization::none});
    // The hub holds no training data: standardize means the fleet's statistics, which the model holds.
    rounds::standardize_with_fleet(vr, *c.validation, c);
    TESSERA_TRY(vr.finish());
    if (r.describing()) c.validation.reset();
  }
  c.checkpoint_dir = r.string("checkpoint_dir", "", "folder of the checkpoint written after every round (empty: none, no resume)");
  c.seal_key = r.string("seal_key", "", "a file of 32 key bytes: checkpoints sealed with AES-256-GCM");
  if (!c.seal_key.empty() && c.checkpoint_dir.empty()) r.fail("seal_key", "given without a checkpoint_dir");
  c.audit_uploads = r.string("audit_uploads", "",
                             "a folder where every upload is kept exactly as the hub received it, to audit what the hub "
                             "holds (masked, under secure aggregation); empty: none");
  c.log_format = r.choice("log_format", core::log_format::text, core::k_log_format_names,
                          "events on standard error: text for people, json for journald and log shippers (one object "
                          "per line: time, level, source, message; each round's progress line on standard output is "
                          "then its metrics JSON)");
  if (const auto* h = r.object("http", "the operator endpoint: Prometheus /metrics, /api/status, /api/rounds, a status "
                                       "page at /, and operator actions (off unless http.listen is set)")) {
    core::config_reader hr = r.child("http", *h);
    const std::string listen = hr.string("listen", "", "HOST:PORT of the endpoint (empty: none); plain HTTP only on a "
                                                        "loopback address, HTTPS with an operator certificate elsewhere");
    if (!listen.empty()) {
      if (auto hp = core::parse_host_port(listen, /*allow_port_zero=*/true); hp) c.http.listen = hp.value();
      else hr.fail("listen", hp.error().message);
    }
    c.http.tls = hr.choice("tls", http_tls_kind::automatic, k_http_tls_names,
                           "auto: plain HTTP on a loopback address, HTTPS elsewhere; on: HTTPS everywhere (actions "
                           "need an operator certificate, so they need HTTPS)");
    c.http.max_connections = static_cast<std::size_t>(hr.integer("max_connections", 64, 1, 10'000, "endpoint connections at once"));
    c.http.timeout_s = hr.number("timeout_s", 10, 0.1, 3600, "seconds for the endpoint's TLS handshake, each request and each response");
    TESSERA_TRY(hr.finish());
  }
  rounds::check_private_inputs(r, c);
  TESSERA_TRY(r.finish());
  return c;
}

core::result<hub_config> parse_hub_config(const nlohmann::json& json, const std::string& source) {
  return core::parse_config(json, source, read_hub_config);
}

}  // namespace tessera::hub
