// tessera/core/config/json_config.hpp — reading JSON configuration objects with errors that name the field.
//
// Every configuration field has a default and one line of documentation; a field of the wrong type or
// out of range, and a field the reader does not know (a typo), is an error naming the source and the
// field's path. The reader keeps the first error and `finish()` returns it, so call sites read as a list
// of fields. The same parser, run on a describing reader, lists every field it reads with its type,
// default and line: that is a command's --help, so no field can be read without being documented.
//
//   core::config_reader r(json, "sim.json");
//   cfg.rounds = r.integer("rounds", 50, 1, 1'000'000, "rounds to run");
//   cfg.lr = r.number("lr", 0.05, 0.0, 10.0, "learning rate of local SGD");
//   cfg.codec = r.choice("codec", core::codec_kind::f32, core::k_codec_names, "how parameters travel");
//   if (auto done = r.finish(); !done) return done.error();   // "sim.json: field 'rounds': ..."
//
//   core::field_table help;
//   (void)parse(core::config_reader::describing(help));       // the same parser, recording
//   std::fputs(help.render().c_str(), stdout);
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/base/error.hpp"
#include "tessera/core/base/names.hpp"

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

// A HOST:PORT address ("0.0.0.0:7443", "[::1]:7443", "hub.example.org:7443").
struct host_port {
  std::string host;
  std::uint16_t port = 0;
};
// Parses HOST:PORT; port 0 is refused unless `allow_port_zero` (a listener that picks its own port).
[[nodiscard]] result<host_port> parse_host_port(std::string_view text, bool allow_port_zero);

// One configuration field as --help lists it.
struct field_doc {
  std::string path;      // "validation.format"
  std::string type;      // "integer in [1, 10000000]", "one of: ist, fedavg", "object", ...
  std::string fallback;  // the default, as JSON text ("" for objects)
  std::string doc;       // one line
};

// The fields a parser read, in the order it read them.
class field_table {
 public:
  void add(field_doc field);  // a path already listed keeps its first entry
  // The default of a listed field in words, where it follows from other fields ("scale_unit; csv: none").
  void set_fallback(const std::string& path, std::string words);
  [[nodiscard]] const std::vector<field_doc>& fields() const noexcept { return fields_; }
  // Indented text for --help: per field its path and line, then its type and default.
  [[nodiscard]] std::string render() const;

 private:
  std::vector<field_doc> fields_;
};

class config_reader {
 public:
  // `object` must outlive the reader. A non-object is reported by finish().
  config_reader(const nlohmann::json& object, std::string source, std::string prefix = {});
  // A reader that describes instead of reading: every field read returns its default and is recorded
  // in `table`; objects are entered even though absent; no error is kept. `table` must outlive it.
  [[nodiscard]] static config_reader describing(field_table& table);

  [[nodiscard]] std::int64_t integer(const std::string& key, std::int64_t fallback, std::int64_t min, std::int64_t max,
                                     std::string_view doc);
  // A seed: any unsigned 64-bit integer.
  [[nodiscard]] std::uint64_t seed(const std::string& key, std::uint64_t fallback, std::string_view doc);
  [[nodiscard]] double number(const std::string& key, double fallback, double min, double max, std::string_view doc);
  [[nodiscard]] bool boolean(const std::string& key, bool fallback, std::string_view doc);
  [[nodiscard]] std::string string(const std::string& key, const std::string& fallback, std::string_view doc);
  // One of an enum's names.
  template <class E, std::size_t N>
  [[nodiscard]] E choice(const std::string& key, E fallback, const name_table<E, N>& names, std::string_view doc) {
    const std::string s = pick(key, names.name(fallback), names_of(names), doc);
    return names.find(s).value_or(fallback);
  }
  // A list whose every entry is one of an enum's names.
  template <class E, std::size_t N>
  [[nodiscard]] std::vector<E> choices(const std::string& key, const std::vector<E>& fallback, const name_table<E, N>& names,
                                       std::string_view doc) {
    std::vector<std::string> given;
    for (E e : fallback) given.emplace_back(names.name(e));
    std::vector<E> out;
    for (const auto& s : picks(key, given, names_of(names), doc)) out.push_back(*names.find(s));
    return out;
  }
  [[nodiscard]] std::vector<std::int64_t> integers(const std::string& key, const std::vector<std::int64_t>& fallback,
                                                   std::int64_t min, std::int64_t max, std::string_view doc);
  [[nodiscard]] std::vector<double> numbers(const std::string& key, const std::vector<double>& fallback, double min,
                                            double max, std::string_view doc);
  // HOST:PORT (see parse_host_port).
  [[nodiscard]] host_port address(const std::string& key, const std::string& fallback, bool allow_port_zero,
                                  std::string_view doc);
  // A field whose structure the caller checks itself (a list of objects, say): its JSON, or nullptr if
  // absent or null. `type` is what --help says it is.
  [[nodiscard]] const nlohmann::json* value(const std::string& key, std::string type, std::string_view doc);
  // A nested object (nullptr if absent or null; an empty object when describing); read it with `child`.
  [[nodiscard]] const nlohmann::json* object(const std::string& key, std::string_view doc);
  [[nodiscard]] config_reader child(const std::string& key, const nlohmann::json& object) const;
  // A field that was renamed: given under its old name, it is an error that names the new one.
  void renamed(const std::string& old_key, const std::string& new_path);
  [[nodiscard]] bool has(const std::string& key) const;
  [[nodiscard]] bool describing() const noexcept { return table_ != nullptr; }

  // When describing: `key`'s default as the parser chooses it, in words (the value just read showed
  // only one case of it). Nothing otherwise.
  void default_is(const std::string& key, std::string words);
  // Records an error found by the caller (a cross-field check) against `key`.
  void fail(const std::string& key, const std::string& what);
  // Keeps an error found by the caller as it is (its message names the source already).
  void fail(error e);
  // The first error, or — if none — an error for the first unknown field; success otherwise (always
  // when describing).
  [[nodiscard]] result<void> finish();

  [[nodiscard]] std::string where(const std::string& key) const;
  // The reader's own object, for messages: "hub.json: field 'model'" (or "hub.json" at the top).
  [[nodiscard]] std::string where() const;

 private:
  const nlohmann::json* find(const std::string& key);
  void note(const std::string& key, std::string type, std::string fallback, std::string_view doc);
  [[nodiscard]] std::string pick(const std::string& key, std::string_view fallback, const std::vector<std::string_view>& allowed,
                                 std::string_view doc);
  [[nodiscard]] std::vector<std::string> picks(const std::string& key, const std::vector<std::string>& fallback,
                                               const std::vector<std::string_view>& allowed, std::string_view doc);
  template <class E, std::size_t N>
  static std::vector<std::string_view> names_of(const name_table<E, N>& names) {
    std::vector<std::string_view> out;
    for (const auto& e : names.entries()) out.push_back(e.name);
    return out;
  }

  const nlohmann::json& object_;
  std::string source_;
  std::string prefix_;
  std::set<std::string> known_;
  std::optional<error> error_;
  field_table* table_ = nullptr;  // set: describing
};

// A command's configuration, read by `read(config_reader&) -> result<T>`: from a JSON object, from a
// file with KEY=VALUE overrides (an empty path: defaults and overrides only), and described for --help.
template <class Read>
[[nodiscard]] auto parse_config(const nlohmann::json& json, const std::string& source, Read read) {
  config_reader r(json, source);
  return read(r);
}
template <class Read>
[[nodiscard]] auto load_config(const std::string& path, const std::vector<std::string>& overrides, Read read)
    -> decltype(read(std::declval<config_reader&>())) {
  TESSERA_ASSIGN_OR_RETURN(const nlohmann::json json, load_config(path, overrides));
  return parse_config(json, path.empty() ? "command line" : path, read);
}
template <class Read>
void describe_config(field_table& table, Read read) {
  config_reader r = config_reader::describing(table);
  (void)read(r);
}

// A duration read in seconds (config_reader::number, already bounded) as whole milliseconds, for timers.
[[nodiscard]] inline std::chrono::milliseconds seconds_to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0));
}

}  // namespace tessera::core
