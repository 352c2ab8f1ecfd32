// tessera/core/config/command.hpp — the command-line layer of tessera-hub, tessera-sim and tessera-edge run.
//
// Every command reads one JSON configuration (--config FILE) with KEY=VALUE overrides, logs events at
// a level (--log-level), takes a few options of its own, and answers --help with text made from the
// same field table its parser reads (json_config.hpp): a field cannot be read without being listed.
// An error, on the command line or in the run, prints "<name>: <message>" and exits 1.
//
//   const core::command cmd{.name = "tessera-hub", .usage = "tessera-hub [--config FILE] [KEY=VALUE ...]",
//                           .about = "Runs a federation...", .options = {}};
//   int main(int argc, char** argv) {
//     return core::run_configured(cmd, argc, argv, 1, hub::read_hub_config,
//                                 [](const core::command_line& line, const hub::hub_config& cfg) -> core::result<int> {
//                                   ...              // core::stderr_log("hub", line.level)
//                                   return 0;
//                                 });
//   }
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/base/error.hpp"
#include "tessera/core/config/json_config.hpp"
#include "tessera/core/config/log.hpp"

namespace tessera::core {

struct command_option {
  std::string_view flag;   // "--out"
  std::string_view value;  // "DIR"; empty for a switch
  std::string_view doc;
};

struct command {
  std::string_view name;    // "tessera-hub"
  std::string_view usage;   // the synopsis line(s)
  std::string_view about;   // what it does, a paragraph
  std::vector<command_option> options;  // besides --config, --log-level, --help and KEY=VALUE
  bool configured = true;               // takes --config FILE and KEY=VALUE (false: options only)
};

struct command_line {
  std::string config_path;
  std::vector<std::string> overrides;                           // KEY=VALUE, in order
  std::map<std::string, std::vector<std::string>, std::less<>> values;  // given options: flag -> values ("" for a switch)
  log_level level = log_level::info;
  bool help = false;
  bool version = false;  // --version

  [[nodiscard]] bool has(std::string_view flag) const { return values.find(flag) != values.end(); }
  // The option's value (the last, if given more than once); empty if absent.
  [[nodiscard]] std::string value(std::string_view flag) const {
    const auto it = values.find(flag);
    return it == values.end() ? std::string() : it->second.back();
  }
  // Every value of a repeatable option, in order.
  [[nodiscard]] std::vector<std::string> all(std::string_view flag) const {
    const auto it = values.find(flag);
    return it == values.end() ? std::vector<std::string>() : it->second;
  }
};

// Parses args[first..]: --config FILE, --log-level info|warning|error, --help (-h), the command's own
// options and KEY=VALUE overrides. Anything else is an error naming it.
[[nodiscard]] result<command_line> parse_command_line(const command& cmd, int argc, const char* const* argv, int first);

// Tessera's version, as the build's project() gives it ("0.1.0"); every command answers --version
// with "<name> <version>".
[[nodiscard]] std::string_view version() noexcept;

// usage, about, the options, then "Configuration fields" from `fields`.
[[nodiscard]] std::string help_text(const command& cmd, const field_table& fields);

// Parses the line, prints help when asked (running `describe` to fill the field table), otherwise runs
// `body`; an error from it is printed as "<name>: <message>", exit 1. Returns the exit status.
[[nodiscard]] int run_command(const command& cmd, int argc, const char* const* argv, int first,
                              const std::function<void(field_table&)>& describe,
                              const std::function<result<int>(const command_line&)>& body);

// run_command for a command whose configuration `read` parses (json_config.hpp): --help lists its
// fields, and `body(line, config)` gets the configuration loaded from --config and KEY=VALUE.
template <class Read, class Body>
[[nodiscard]] int run_configured(const command& cmd, int argc, const char* const* argv, int first, Read read, Body body) {
  return run_command(
      cmd, argc, argv, first, [&](field_table& fields) { describe_config(fields, read); },
      [&](const command_line& line) -> result<int> {
        TESSERA_ASSIGN_OR_RETURN(auto config, load_config(line.config_path, line.overrides, read));
        return body(line, config);
      });
}

}  // namespace tessera::core
