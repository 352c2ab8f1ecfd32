// tessera-hub: the server of a federation. Runs IST (or FedAvg) rounds with agents over mutual TLS.
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "tessera/hub/hub.hpp"

namespace {

constexpr const char* k_usage = R"(usage: tessera-hub [--config FILE] [KEY=VALUE ...]

Runs a federation: waits for agents, plans each round, sends every agent its subnet over mutual TLS,
collects and assembles the trained subnets, validates, checkpoints, and at the end writes the model
(safetensors). Restarted with the same checkpoint_dir, it resumes after the last completed round.
One progress line per round goes to standard output; events go to standard error.

  --config FILE   JSON configuration (every field has a default; see examples/hub.json)
  KEY=VALUE       overrides a field; values are JSON, dotted keys reach into objects:
                  listen=0.0.0.0:7443 rounds=100 strategy=fedavg tls.crl=pki/ca.crl
  --help          this text

Fields:
  listen (HOST:PORT), tls{ca, cert, key, crl}
  model{inputs, hidden, outputs, task, init, compensation, seed}, strategy (ist|fedavg)
  rounds, min_devices, max_devices, device_wait_s, round_deadline_s, heartbeat_s, idle_timeout_s,
  chunk_kib, window_kib (CHUNK size and unacknowledged bytes per blob: small on slow links)
  local_steps, batch, lr, lr_schedule (constant|step|cosine), lr_warmup_rounds, lr_step_rounds,
  lr_gamma, lr_final_fraction, momentum, weight_decay, min_width, groups (0: auto), codec (f32|f16|q8)
  validation{format (idx|csv), images, labels, csv, label_column, header, normalization, max_examples}
  checkpoint_dir, seal_key (key file: checkpoints sealed with AES-256-GCM), metrics (JSON lines),
  output (safetensors), seed, eval_every, patience, max_sessions
)";

int fail(const std::string& message) {
  std::fprintf(stderr, "tessera-hub: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera;
  std::string config_path;
  std::vector<std::string> overrides;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(k_usage, stdout);
      return 0;
    }
    if (arg == "--config") {
      if (i + 1 >= argc) return fail("--config needs a file");
      config_path = argv[++i];
    } else if (arg.find('=') != std::string::npos && arg.rfind("--", 0) != 0) {
      overrides.push_back(arg);
    } else {
      return fail("unknown argument '" + arg + "' (see --help)");
    }
  }
  auto config = hub::load_hub_config(config_path, overrides);
  if (!config) return fail(config.error().message);
  const hub::hub_config& cfg = config.value();

  boost::asio::io_context io;
  const core::log_sink log = core::stderr_log("hub");
  auto service = hub::hub_service::create(io, cfg, log);
  if (!service) return fail(service.error().message);
  hub::hub_service& h = *service.value();
  h.on_round([](const rounds::round_metrics& m) {
    std::printf("%s\n", m.to_line().c_str());
    std::fflush(stdout);
  });
  auto port = h.start();
  if (!port) return fail(port.error().message);
  std::printf("tessera-hub: %s on %s:%u, model %lld", std::string(rounds::to_string(cfg.strategy)).c_str(), cfg.listen_host.c_str(),
              static_cast<unsigned>(port.value()), static_cast<long long>(cfg.model.inputs));
  for (auto w : cfg.model.hidden) std::printf("-%lld", static_cast<long long>(w));
  std::printf("-%lld, rounds %lld (from %lld), devices %zu..%zu, seed %llu\n", static_cast<long long>(cfg.model.outputs),
              static_cast<long long>(cfg.rounds), static_cast<long long>(h.resumed_from()), cfg.min_devices, cfg.max_devices,
              static_cast<unsigned long long>(cfg.seed));
  std::fflush(stdout);

  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    log(core::log_level::warning, std::string("stopping on ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") +
                                           " (the last checkpoint is kept; restart to resume)");
    h.stop();
  });
  h.on_stopped([&signals] { signals.cancel(); });  // then io.run() returns once the sessions closed
  io.run();
  if (!h.failure().empty()) return 1;
  if (!h.finished()) return 2;  // stopped by a signal before the last round
  std::printf("tessera-hub: done after %lld rounds\n", static_cast<long long>(h.engine().completed()));
  return 0;
}
