#include "tessera/core/config/command.hpp"

#include <cstdio>

namespace tessera::core {

#ifndef TESSERA_VERSION
#error "TESSERA_VERSION comes from the build (core/config/CMakeLists.txt)"
#endif
std::string_view version() noexcept { return TESSERA_VERSION; }

result<command_line> parse_command_line(const command& cmd, int argc, const char* const* argv, int first) {
  command_line line;
  for (int i = first; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value_of = [&](std::string_view flag) -> result<std::string> {
      if (i + 1 >= argc) return make_error(errc::invalid_argument, std::string(flag) + " needs a value");
      return std::string(argv[++i]);
    };
    if (arg == "--help" || arg == "-h") {
      line.help = true;
    } else if (arg == "--version") {
      line.version = true;
    } else if (arg == "--config" && cmd.configured) {
      TESSERA_ASSIGN_OR_RETURN(line.config_path, value_of(arg));
    } else if (arg == "--log-level") {
      TESSERA_ASSIGN_OR_RETURN(const std::string level, value_of(arg));
      const auto l = k_log_level_names.find(level);
      if (!l) return make_error(errc::invalid_argument, "--log-level: '" + level + "' is not one of " + k_log_level_names.list());
      line.level = *l;
    } else if (arg.starts_with("-")) {
      const command_option* known = nullptr;
      for (const auto& o : cmd.options)
        if (o.flag == arg) known = &o;
      if (known == nullptr) return make_error(errc::invalid_argument, "unknown option '" + std::string(arg) + "' (see --help)");
      std::string v;
      if (!known->value.empty()) {
        TESSERA_ASSIGN_OR_RETURN(v, value_of(arg));
      }
      line.values[std::string(arg)].push_back(std::move(v));
    } else if (cmd.configured && arg.find('=') != std::string_view::npos && arg.front() != '=') {
      line.overrides.emplace_back(arg);
    } else {
      return make_error(errc::invalid_argument, "unexpected argument '" + std::string(arg) + "' (see --help)");
    }
  }
  return line;
}

std::string help_text(const command& cmd, const field_table& fields) {
  std::string out = "usage: " + std::string(cmd.usage) + "\n\n" + std::string(cmd.about) + "\n\nOptions:\n";
  auto option = [&](std::string_view flag, std::string_view value, std::string_view doc) {
    std::string left = "  " + std::string(flag) + (value.empty() ? "" : " " + std::string(value));
    left += left.size() < 30 ? std::string(30 - left.size(), ' ') : "\n" + std::string(30, ' ');
    out += left + std::string(doc) + "\n";
  };
  if (cmd.configured) {
    option("--config", "FILE", "JSON configuration (every field below has a default)");
    option("KEY=VALUE", "", "overrides a field; values are JSON, dotted keys reach into objects: rounds=100 model.hidden=[64,32]");
  }
  for (const auto& o : cmd.options) option(o.flag, o.value, o.doc);
  option("--log-level", "LEVEL", "events at this level and above go to standard error: " + k_log_level_names.list());
  option("--help", "", "this text");
  option("--version", "", "the name and version, then exit");
  if (!fields.fields().empty()) out += "\nConfiguration fields:\n" + fields.render();
  return out;
}

int run_command(const command& cmd, int argc, const char* const* argv, int first, const std::function<void(field_table&)>& describe,
                const std::function<result<int>(const command_line&)>& body) {
  auto line = parse_command_line(cmd, argc, argv, first);
  if (!line) {
    std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(cmd.name.size()), cmd.name.data(), line.error().message.c_str());
    return 1;
  }
  if (line.value().version) {
    std::printf("%.*s %.*s\n", static_cast<int>(cmd.name.size()), cmd.name.data(), static_cast<int>(version().size()), version().data());
    return 0;
  }
  if (line.value().help) {
    field_table fields;
    if (describe) describe(fields);
    std::fputs(help_text(cmd, fields).c_str(), stdout);
    return 0;
  }
  auto status = body(line.value());
  if (!status) {
    std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(cmd.name.size()), cmd.name.data(), status.error().message.c_str());
    return 1;
  }
  return status.value();
}

}  // namespace tessera::core
