// tessera-edge: the device agent. `run` serves a hub over mutual TLS (the agent's normal life);
// `train-local` trains a subnet on a local data file inside a memory budget, with no network, so the
// runtime can be tried on a board alone; `baseline` is the process with no model (memory benchmark).
#include <cstdio>
#include <cstring>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "tessera/core/config/command.hpp"
#include "tessera/edge/agent.hpp"
#include "tessera/edge/process.hpp"
#include "train_local.hpp"

namespace {

using namespace tessera;

constexpr const char* k_overview = R"(usage: tessera-edge run --config FILE [KEY=VALUE ...]
       tessera-edge train-local [options]
       tessera-edge baseline

  run           serves a hub (tessera-edge run --help lists every configuration field)
  train-local   trains a subnet on a local data file inside a memory budget, no network
  baseline      prints the peak memory of the process with no model at all
)";

const core::command k_run_command{
    .name = "tessera-edge run",
    .usage = "tessera-edge run --config FILE [KEY=VALUE ...]",
    .about = R"(Serves a hub. Connects over mutual TLS, trains each assigned subnet on this device's data inside the
memory budget, uploads it, and reconnects on its own (backoff with jitter) whenever the link drops. When the hub says
its run is finished it exits with 0 (after_run exit) or waits for the next run (after_run wait).
Stop it with SIGTERM or SIGINT. Events go to standard error.)",
    .options = {}};

core::result<int> run(const core::command_line& line, const edge::agent_config& config) {
  boost::asio::io_context io;
  const core::log_sink log = core::stderr_log("edge", line.level, config.log_format);
  TESSERA_ASSIGN_OR_RETURN(auto agent, edge::agent::create(io, config, log));
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (!ec) agent->stop();
  });
  agent->start();
  // The agent posts stop() itself after exit_after_rounds or the hub's finished run (after_run exit);
  // then only the signal wait is left.
  while (!io.stopped()) {
    io.run_one();
    if (agent->stopped()) signals.cancel();
  }
  const auto& s = agent->stats();
  log(core::log_level::info, "stopped: " + std::to_string(s.accepted) + " updates accepted, " + std::to_string(s.rejected) +
                                 " rejected, " + std::to_string(s.refused) + " assignments refused; peak memory " +
                                 std::to_string(edge::peak_rss_bytes() >> 10) + " KiB");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "run") return core::run_configured(k_run_command, argc, argv, 2, edge::read_agent_config, run);
  if (command == "train-local") return core::run_command(edge::k_train_local_command, argc, argv, 2, {}, edge::train_local);
  if (command == "--version") {
    std::printf("tessera-edge %.*s\n", static_cast<int>(core::version().size()), core::version().data());
    return 0;
  }
  if (command == "baseline") {
    std::printf("peak resident memory %.2f MiB; anonymous now %zu KiB\n", static_cast<double>(edge::peak_rss_bytes()) / (1024.0 * 1024.0),
                edge::anonymous_rss_bytes() >> 10);
    return 0;
  }
  std::fputs(k_overview, command == "--help" || command == "-h" ? stdout : stderr);
  if (command == "--help" || command == "-h") return 0;
  if (!command.empty()) std::fprintf(stderr, "tessera-edge: unknown command '%s'\n", command.c_str());
  return 1;
}
