#include "tessera/edge/agent_config.hpp"

#include <algorithm>

#include "tessera/net/task.hpp"

namespace tessera::edge {

namespace {

// The device's examples: files, held-out share or a validation set, the stream's buffer, the batch cap.
core::result<void> read_data(core::config_reader& r, agent_config& c) {
  if (const auto* d = r.object("data", "this device's examples (required)")) {
    core::config_reader dr = r.child("data", *d);
    data_config& data = c.data;
    data.source = core::read_data_source(dr, {}, {.required = true, .allow_standardize = true, .csv_default = core::normalization::none});
    // standardize: with the fleet's statistics, which the model carries; the files are read as they are.
    if (data.source.norm == core::normalization::standardize) {
      c.requires_normalization = true;
      data.source.norm = core::normalization::none;
    }
    data.validation_fraction = dr.number("validation_fraction", 0.1, 0.0, 0.5,
                                         "share of the examples held out (never trained on) to evaluate the model on this device");
    if (const auto* v = dr.object("validation", "a validation set of its own instead of validation_fraction (optional)")) {
      core::config_reader vr = dr.child("validation", *v);
      data.validation = core::read_data_source(vr, {}, {.required = true, .allow_standardize = true, .csv_default = core::normalization::none});
      // Read as the training files are: standardize is the model's, with the fleet's statistics.
      if (data.validation->norm == core::normalization::standardize) data.validation->norm = core::normalization::none;
      TESSERA_TRY(vr.finish());
      if (dr.describing()) data.validation.reset();
    }
    data.shuffle_buffer = dr.integer("shuffle_buffer", 1024, 1, 1 << 24, "examples held to shuffle a stream (gzip IDX, CSV)");
    data.max_batch = dr.integer("max_batch", 256, 1, net::max_task_batch, "the largest batch this device accepts");
    c.data_seed = dr.seed("seed", 0, "batch order (0: derived from the device id)");
    TESSERA_TRY(dr.finish());
  } else {
    r.fail("data", "required: this device's examples ({\"format\", \"features\", \"labels\"})");
  }
  return {};
}

core::result<void> read_privacy(core::config_reader& r, privacy_policy& p) {
  if (const auto* pv = r.object("privacy", "what this device lets a hub do, checked by the device against every request")) {
    core::config_reader pr = r.child("privacy", *pv);
    p.min_threshold = static_cast<std::size_t>(pr.integer("min_threshold", 0, 0, 1 << 16,
                                                          "fewest shares that may recover this device's secrets, over and above "
                                                          "a majority of its neighbours and itself, always required (0: the majority)"));
    p.min_group = static_cast<std::size_t>(pr.integer("min_group", 2, 2, 1 << 16, "fewest devices a released sum holding this "
                                                                                  "device's update may have"));
    p.min_noise_multiplier = pr.number("min_noise_multiplier", 0.0, 0.0, 1e6,
                                       "least DP noise multiplier the devices' noise must carry (0: none asked; above 0, rounds, "
                                       "statistics and evaluations in the clear are refused)");
    p.max_noise_contributors = static_cast<std::size_t>(
        pr.integer("max_noise_contributors", 0, 0, 1 << 16,
                   "most devices a private round's noise may be sized for: each adds the noise over that many, and this device's "
                   "share is all that hides it from the hub with colluding devices (0: no cap)"));
    p.max_epsilon = pr.number("max_epsilon", 0.0, 0.0, 1e6,
                              "most ε this device spends against the hub over the rounds it joins, counted here (0: no limit; "
                              "above 0, rounds without the devices' noise are refused)");
    p.delta = pr.number("delta", 1e-5, 1e-300, 0.1, "the δ of max_epsilon");
    p.ledger = pr.string("ledger", "privacy-ledger.json", "the file where this device records the ε it has spent (with max_epsilon)");
    if (p.max_epsilon > 0 && p.ledger.empty()) pr.fail("ledger", "is empty, and max_epsilon needs a file to count in");
    p.statistics = pr.choice("statistics", answer_mode::allow, k_answer_mode_names, "answer the feature statistics request (in the clear)");
    p.evaluation = pr.choice("evaluation", answer_mode::allow, k_answer_mode_names, "score models on the validation split (scores in the clear)");
    TESSERA_TRY(pr.finish());
  }
  return {};
}

}  // namespace

core::result<agent_config> read_agent_config(core::config_reader& r) {
  agent_config c;
  c.hub = r.address("hub", "127.0.0.1:7443", /*allow_port_zero=*/false, "the hub's address");
  c.tls.hub_name = r.string("hub_name", c.hub.host, "the name (or IP) the hub's certificate must carry");
  r.default_is("hub_name", "the host of 'hub'");
  if (const auto* t = r.object("tls", "this device's certificate and the CA the hub's must chain to")) {
    core::config_reader tr = r.child("tls", *t);
    c.tls.ca_cert = tr.string("ca", c.tls.ca_cert.string(), "the CA certificate (PEM)");
    c.tls.cert = tr.string("cert", c.tls.cert.string(), "this device's certificate (PEM): its id is the device's");
    c.tls.key = tr.string("key", c.tls.key.string(), "this device's private key (PEM)");
    c.tls.crl = tr.string("crl", "", "the CA's revocation list (PEM): a revoked hub certificate is refused, and a revoked device's keys in a "
                                       "secure aggregation roster (empty: not checked)");
    TESSERA_TRY(tr.finish());
  }
  TESSERA_TRY(read_data(r, c));
  c.budget_bytes = static_cast<std::size_t>(r.number("memory_budget_mib", 16, 0.25, 1 << 20,
                                                     "MiB for training: the arena and the data reader's buffers") *
                                            1024 * 1024);
  const std::vector<core::codec_kind> offered = c.codecs;  // all of them, by default
  c.codecs.clear();
  for (auto k : r.choices("codecs", offered, core::k_codec_names, "codecs this device speaks (f32 always)"))
    if (std::find(c.codecs.begin(), c.codecs.end(), k) == c.codecs.end()) c.codecs.push_back(k);
  if (std::find(c.codecs.begin(), c.codecs.end(), core::codec_kind::f32) == c.codecs.end()) c.codecs.push_back(core::codec_kind::f32);
  if (const auto* rc = r.object("reconnect", "how the agent dials again after a lost link")) {
    core::config_reader rr = r.child("reconnect", *rc);
    c.backoff_initial = std::chrono::milliseconds(rr.integer("initial_ms", 250, 1, 3'600'000, "first wait, ms"));
    c.backoff_max = std::chrono::milliseconds(rr.integer("max_ms", 30'000, 1, 86'400'000, "longest wait, ms (doubling up to it)"));
    c.jitter = rr.number("jitter", 0.5, 0.0, 1.0, "random share of each wait, so a fleet does not dial at once");
    if (c.backoff_max < c.backoff_initial) rr.fail("max_ms", "is below initial_ms");
    TESSERA_TRY(rr.finish());
  }
  c.secure_aggregation = r.choice("secure_aggregation", secure_mode::allow, k_secure_mode_names,
                                  "masked uploads: allow (when the hub asks), require (refuse rounds, statistics and "
                                  "evaluations in the clear) or off");
  TESSERA_TRY(read_privacy(r, c.privacy));
  net::read_link_settings(r, c.link, /*rate_limits=*/true);
  c.log_format = r.choice("log_format", core::log_format::text, core::k_log_format_names,
                          "events on standard error: text for people, json for journald and log shippers (one object "
                          "per line: time, level, source, message)");
  c.after_run = r.choice("after_run", after_run_mode::exit, k_after_run_names,
                         "when the hub says its run is finished: exit (status 0), or wait for its next run, asking at the "
                         "longest reconnect backoff");
  c.exit_after_rounds = r.integer("exit_after_rounds", 0, 0, INT64_MAX, "exit after this many accepted updates, and the evaluation that may follow the last (0: serve forever)");
  TESSERA_TRY(r.finish());
  return c;
}

core::result<agent_config> parse_agent_config(const nlohmann::json& json, const std::string& source) {
  return core::parse_config(json, source, read_agent_config);
}

}  // namespace tessera::edge
