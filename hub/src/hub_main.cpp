// tessera-hub: the server of a federation. Runs IST (or FedAvg) rounds with agents over mutual TLS.
#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "tessera/core/config/command.hpp"
#include "tessera/core/math/memory.hpp"
#include "tessera/hub/hub.hpp"

namespace {

using namespace tessera;

const core::command k_command{
    .name = "tessera-hub",
    .usage = "tessera-hub [--config FILE] [KEY=VALUE ...]",
    .about = R"(Runs a federation: waits for agents, plans each round, sends every agent its subnet over mutual TLS,
collects and assembles the trained subnets, validates, checkpoints, and at the end writes the model
(safetensors). Restarted with the same checkpoint_dir, it resumes after the last completed round.
One progress line per round goes to standard output; events go to standard error.
Exit status: 0 when the last round is done, 1 on an error, 2 when stopped by SIGINT or SIGTERM.)",
    .options = {}};

core::result<int> serve(const core::command_line& line, const hub::hub_config& cfg) {
  boost::asio::io_context io;
  const core::log_sink log = core::stderr_log("hub", line.level, cfg.log_format);
  TESSERA_ASSIGN_OR_RETURN(auto service, hub::hub_service::create(io, cfg, log));
  hub::hub_service& h = *service;
  h.on_round([json = cfg.log_format == core::log_format::json](const rounds::round_metrics& m) {
    std::printf("%s\n", json ? m.to_json().dump().c_str() : m.to_line().c_str());
    std::fflush(stdout);
  });
  // Set before start(): a run that is finished already stops inside it, and io.run() must then return.
  // On the hub's strand, as stop() must be.
  boost::asio::signal_set signals(h.executor(), SIGINT, SIGTERM);
  h.on_stopped([&signals] { signals.cancel(); });  // then io.run() returns once the sessions closed
  TESSERA_ASSIGN_OR_RETURN(const std::uint16_t port, h.start());
  std::string endpoint;
  if (cfg.http.listen)
    endpoint = std::string(", operator endpoint ") +
               (cfg.http.tls == hub::http_tls_kind::on || !hub::is_loopback_address(cfg.http.listen->host) ? "https://" : "http://") +
               cfg.http.listen->host + ":" + std::to_string(h.http_port()) + "/";
  const std::size_t threads = cfg.io_threads != 0 ? cfg.io_threads : std::max(1U, std::thread::hardware_concurrency());
  // What training the whole model takes, so an operator sees which devices can hold it (their HELLO budgets).
  std::printf("tessera-hub: %s on %s:%u, model %s (%s to train whole), rounds %lld (from %lld), devices %zu..%zu, seed %llu, "
              "%zu io threads%s\n",
              std::string(rounds::to_string(cfg.strategy)).c_str(), cfg.listen.host.c_str(), static_cast<unsigned>(port),
              core::widths_text(cfg.model).c_str(), core::mib_text(h.engine().whole_model_bytes()).c_str(), static_cast<long long>(cfg.rounds),
              static_cast<long long>(h.resumed_from()), cfg.min_devices, cfg.max_devices, static_cast<unsigned long long>(cfg.seed),
              threads, endpoint.c_str());
  std::fflush(stdout);

  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    log(core::log_level::warning, std::string("stopping on ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") +
                                      " (the last checkpoint is kept; restart to resume)");
    h.stop();
  });
  if (h.finished() || !h.failure().empty()) signals.cancel();  // over inside start(): nothing to wait for
  // The connections on every thread, the hub's state on its strand (hub.hpp).
  std::vector<std::jthread> pool;
  for (std::size_t i = 1; i < threads; ++i) pool.emplace_back([&io] { io.run(); });
  io.run();
  pool.clear();  // joins: every thread has left io.run()
  if (!h.failure().empty()) return 1;  // already logged
  if (!h.finished()) return 2;         // stopped by a signal before the last round
  std::printf("tessera-hub: done after %lld rounds\n", static_cast<long long>(h.engine().completed()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return core::run_configured(k_command, argc, argv, 1, hub::read_hub_config, serve); }
