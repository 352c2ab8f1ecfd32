// tessera/core/json_config.hpp — reading JSON configuration objects with errors that name the field.
//
// Every configuration field has a default; a field of the wrong type or out of range, and a field the
// reader does not know (a typo), is an error naming the source and the field's path. The reader keeps
// the first error and `finish()` returns it, so call sites read as a list of fields:
//
//   core::config_reader r(json, "sim.json");
//   cfg.rounds = r.integer("rounds", 50, 1, 1'000'000);
//   cfg.lr = r.number("lr", 0.05, 0.0, 10.0);
//   cfg.strategy = r.choice("strategy", "ist", {"ist", "fedavg", "central"});
//   if (auto done = r.finish(); !done) return done.error();   // "sim.json: field 'rounds': ..."
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/error.hpp"

namespace tessera::core {

// Parses JSON text; a syntax error names the source and the byte offset.
[[nodiscard]] result<nlohmann::json> parse_json(std::string_view text, std::string_view source);
// Reads a whole (small) file, refusing more than max_bytes, and parses it.
[[nodiscard]] result<nlohmann::json> load_json_file(const std::string& path, std::size_t max_bytes = 1 << 20);

// Applies "a.b=value" overrides (from a command line) to a JSON object; a value is parsed as JSON, or
// taken as a string if it is not JSON: rounds=100 model.hidden=[2048,2048] listen=0.0.0.0:7443
[[nodiscard]] result<void> apply_overrides(nlohmann::json& root, const std::vector<std::string>& overrides);

// A command's configuration: the JSON file at `path` (an empty object if path is empty) with the
// command line's KEY=VALUE overrides applied.
[[nodiscard]] result<nlohmann::json> load_config(const std::string& path, const std::vector<std::string>& overrides);

class config_reader {
 public:
  // `object` must outlive the reader. A non-object is reported by finish().
  config_reader(const nlohmann::json& object, std::string source, std::string prefix = {});

  [[nodiscard]] std::int64_t integer(const std::string& key, std::int64_t fallback, std::int64_t min, std::int64_t max);
  // A seed: any unsigned 64-bit integer.
  [[nodiscard]] std::uint64_t seed(const std::string& key, std::uint64_t fallback);
  [[nodiscard]] double number(const std::string& key, double fallback, double min, double max);
  [[nodiscard]] bool boolean(const std::string& key, bool fallback);
  [[nodiscard]] std::string string(const std::string& key, const std::string& fallback);
  [[nodiscard]] std::string choice(const std::string& key, const std::string& fallback,
                                   std::initializer_list<std::string_view> allowed);
  [[nodiscard]] std::vector<std::int64_t> integers(const std::string& key, const std::vector<std::int64_t>& fallback,
                                                   std::int64_t min, std::int64_t max);
  // A list whose every entry is one of `allowed`.
  [[nodiscard]] std::vector<std::string> choices(const std::string& key, const std::vector<std::string>& fallback,
                                                 std::initializer_list<std::string_view> allowed);
  [[nodiscard]] std::vector<double> numbers(const std::string& key, const std::vector<double>& fallback, double min,
                                            double max);
  // A nested object (nullptr if absent); read it with a child reader built by `child`.
  [[nodiscard]] const nlohmann::json* object(const std::string& key);
  [[nodiscard]] config_reader child(const std::string& key, const nlohmann::json& object) const;
  [[nodiscard]] bool has(const std::string& key) const;

  // Records an error found by the caller (a cross-field check) against `key`.
  void fail(const std::string& key, const std::string& what);
  // The first error, or — if none — an error for the first unknown field; success otherwise.
  [[nodiscard]] result<void> finish();

  [[nodiscard]] std::string where(const std::string& key) const;

 private:
  const nlohmann::json* find(const std::string& key);

  const nlohmann::json& object_;
  std::string source_;
  std::string prefix_;
  std::set<std::string> known_;
  std::optional<error> error_;
};

}  // namespace tessera::core
