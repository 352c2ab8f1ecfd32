// Shared by the benchmarks: the command line as a table of options, each bound to the field it sets.
// `--name value` reads the value as its field's type (a whole number, a number, the text itself) or
// hands it to a function (lists, JSON); a switch takes no value and sets its field to the value given
// with it. --help names the options. Anything else ends the run with one line (bench::die): an unknown
// option, a missing value, a value that is not a number of the field's type.
//
//   options o;
//   bench::parse_options(argc, argv, "bench/secagg/secagg.cpp",
//                        {{"--rounds", o.rounds}, {"--rate-kbit", o.rate_kbit}, {"--skip-real", o.real, false}});
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>

#include "common/must.hpp"

namespace tessera::bench {

class option {
 public:
  option(std::string name, std::string& field) : name_(std::move(name)), read_([&field](const std::string& v) { field = v; }) {}
  option(std::string name, double& field)
      : name_(std::move(name)), read_([&field, n = name_](const std::string& v) { field = number(n, v); }) {}
  option(std::string name, std::int64_t& field)
      : name_(std::move(name)), read_([&field, n = name_](const std::string& v) { field = whole_number(n, v); }) {}
  option(std::string name, std::size_t& field)
      : name_(std::move(name)), read_([&field, n = name_](const std::string& v) {
          const std::int64_t w = whole_number(n, v);
          if (w < 0) die(n + ": " + v + " is negative");
          field = static_cast<std::size_t>(w);
        }) {}
  // The value handed to `read`, for what is not one number: lists, JSON, choices.
  option(std::string name, std::function<void(const std::string&)> read) : name_(std::move(name)), read_(std::move(read)) {}
  // A switch: given, it sets `field` to `value`.
  option(std::string name, bool& field, bool value) : name_(std::move(name)), set_([&field, value] { field = value; }) {}

  [[nodiscard]] const std::string& name() const { return name_; }
  [[nodiscard]] bool takes_value() const { return static_cast<bool>(read_); }
  void apply(const std::string& value) const { read_(value); }
  void apply() const { set_(); }

  // The whole of `text` as a decimal integer.
  [[nodiscard]] static std::int64_t whole_number(const std::string& name, const std::string& text) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || end != text.c_str() + text.size() || errno != 0) die(name + ": \"" + text + "\" is not a whole number");
    return static_cast<std::int64_t>(v);
  }
  // The whole of `text` as a number.
  [[nodiscard]] static double number(const std::string& name, const std::string& text) {
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || errno != 0) die(name + ": \"" + text + "\" is not a number");
    return v;
  }

 private:
  std::string name_;
  std::function<void(const std::string&)> read_;  // empty for a switch
  std::function<void()> set_;
};

// Applies argv[1..] to `options` in order; `described_in` names the file whose header explains them.
inline void parse_options(int argc, char** argv, const std::string& described_in, std::initializer_list<option> options) {
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--help" || word == "-h") {
      std::printf("options:");
      for (const option& o : options) std::printf(" %s%s", o.name().c_str(), o.takes_value() ? " VALUE" : "");
      std::printf("\n(see the header of %s)\n", described_in.c_str());
      std::exit(0);
    }
    const option* match = nullptr;
    for (const option& o : options)
      if (o.name() == word) match = &o;
    if (match == nullptr) die("unknown option " + word + " (see the header of " + described_in + ")");
    if (!match->takes_value()) {
      match->apply();
    } else {
      if (i + 1 >= argc) die(word + " needs a value");
      match->apply(argv[++i]);
    }
  }
}

}  // namespace tessera::bench
