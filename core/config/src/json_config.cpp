#include "tessera/core/config/json_config.hpp"

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

namespace tessera::core {

result<nlohmann::json> parse_json(std::string_view text, std::string_view source) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    return make_error(errc::bad_format, std::string(source) + ": invalid JSON at byte " + std::to_string(e.byte) +
                                            ": " + e.what());
  }
}

result<nlohmann::json> load_json_file(const std::string& path, std::size_t max_bytes) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return make_error(errc::io, path + ": cannot open: " + std::strerror(errno));
  std::string text;
  char buf[8192];
  for (;;) {
    const std::size_t n = std::fread(buf, 1, sizeof buf, f.get());
    if (n == 0) break;
    if (text.size() + n > max_bytes)
      return make_error(errc::bad_format, path + ": larger than " + std::to_string(max_bytes) + " bytes");
    text.append(buf, n);
  }
  if (std::ferror(f.get())) return make_error(errc::io, path + ": read failed: " + std::strerror(errno));
  return parse_json(text, path);
}

namespace {

const nlohmann::json& empty_object() {
  static const nlohmann::json empty = nlohmann::json::object();
  return empty;
}

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

std::string joined(const std::vector<std::string_view>& names) {
  std::string out;
  for (auto n : names) (out += out.empty() ? "" : ", ") += n;
  return out;
}

}  // namespace

result<host_port> parse_host_port(std::string_view text, bool allow_port_zero) {
  const auto colon = text.rfind(':');
  unsigned port = 0;
  const char* end = text.data() + text.size();
  const bool ok = colon != std::string_view::npos && colon > 0 &&
                  std::from_chars(text.data() + colon + 1, end, port).ptr == end && colon + 1 < text.size() &&
                  port <= 65535 && (allow_port_zero || port != 0);
  if (!ok)
    return make_error(errc::invalid_spec, "'" + std::string(text) + "' is not HOST:PORT (e.g. 10.0.0.5:7443" +
                                              (allow_port_zero ? "; port 0 picks a free one" : "") + ")");
  host_port hp{std::string(text.substr(0, colon)), static_cast<std::uint16_t>(port)};
  if (hp.host.size() > 2 && hp.host.front() == '[' && hp.host.back() == ']') hp.host = hp.host.substr(1, hp.host.size() - 2);
  return hp;
}

void field_table::add(field_doc field) {
  for (const auto& f : fields_)
    if (f.path == field.path) return;
  fields_.push_back(std::move(field));
}

void field_table::set_fallback(const std::string& path, std::string words) {
  for (auto& f : fields_)
    if (f.path == path) f.fallback = std::move(words);
}

std::string field_table::render() const {
  std::string out;
  for (const auto& f : fields_) {
    out += "  " + f.path;
    out += f.path.size() < 28 ? std::string(28 - f.path.size(), ' ') : "\n" + std::string(30, ' ');
    out += f.doc + "\n" + std::string(30, ' ') + f.type;
    if (!f.fallback.empty()) out += ", default " + f.fallback;
    out += "\n";
  }
  return out;
}

config_reader::config_reader(const nlohmann::json& object, std::string source, std::string prefix)
    : object_(object), source_(std::move(source)), prefix_(std::move(prefix)) {
  if (!object_.is_object()) {
    error_ = make_error(errc::invalid_spec, source_ + (prefix_.empty() ? "" : ": field '" + prefix_ + "'") +
                                                ": expected a JSON object");
  }
}

config_reader config_reader::describing(field_table& table) {
  config_reader r(empty_object(), "help");
  r.table_ = &table;
  return r;
}

std::string config_reader::where(const std::string& key) const {
  return source_ + ": field '" + (prefix_.empty() ? key : prefix_ + "." + key) + "'";
}

void config_reader::fail(const std::string& key, const std::string& what) {
  if (!error_ && !table_) error_ = make_error(errc::invalid_spec, where(key) + ": " + what);
}

void config_reader::fail(error e) {
  if (!error_ && !table_) error_ = std::move(e);
}

std::string config_reader::where() const { return prefix_.empty() ? source_ : source_ + ": field '" + prefix_ + "'"; }

bool config_reader::has(const std::string& key) const { return object_.is_object() && object_.contains(key); }

void config_reader::default_is(const std::string& key, std::string words) {
  if (table_) table_->set_fallback(prefix_.empty() ? key : prefix_ + "." + key, std::move(words));
}

void config_reader::note(const std::string& key, std::string type, std::string fallback, std::string_view doc) {
  if (table_) table_->add({prefix_.empty() ? key : prefix_ + "." + key, std::move(type), std::move(fallback), std::string(doc)});
}

const nlohmann::json* config_reader::find(const std::string& key) {
  known_.insert(key);
  if (!object_.is_object()) return nullptr;
  const auto it = object_.find(key);
  return it == object_.end() ? nullptr : &*it;
}

void config_reader::renamed(const std::string& old_key, const std::string& new_path) {
  if (find(old_key) != nullptr) fail(old_key, "renamed: use '" + new_path + "'");
}

std::uint64_t config_reader::seed(const std::string& key, std::uint64_t fallback, std::string_view doc) {
  note(key, "integer in [0, 2^64)", std::to_string(fallback), doc);
  const auto* v = find(key);
  if (v == nullptr) return fallback;
  if (v->is_number_unsigned()) return v->get<std::uint64_t>();
  fail(key, "expected an integer in [0, 2^64), found " + v->dump());
  return fallback;
}

std::int64_t config_reader::integer(const std::string& key, std::int64_t fallback, std::int64_t min, std::int64_t max,
                                    std::string_view doc) {
  note(key, "integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]", std::to_string(fallback), doc);
  const auto* v = find(key);
  if (v == nullptr) return fallback;
  std::int64_t x = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
      fail(key, "out of range");
      return fallback;
    }
    x = v->get<std::int64_t>();
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) && v->get<double>() == std::floor(v->get<double>()) &&
             std::fabs(v->get<double>()) < 9.0e15) {
    x = static_cast<std::int64_t>(v->get<double>());
  } else {
    fail(key, "expected an integer, found " + v->dump());
    return fallback;
  }
  if (x < min || x > max) {
    fail(key, std::to_string(x) + " is out of range [" + std::to_string(min) + ", " + std::to_string(max) + "]");
    return fallback;
  }
  return x;
}

double config_reader::number(const std::string& key, double fallback, double min, double max, std::string_view doc) {
  note(key, "number in [" + number_text(min) + ", " + number_text(max) + "]", number_text(fallback), doc);
  const auto* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) {
    fail(key, "expected a number, found " + v->dump());
    return fallback;
  }
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < min || x > max) {
    fail(key, v->dump() + " is out of range [" + std::to_string(min) + ", " + std::to_string(max) + "]");
    return fallback;
  }
  return x;
}

bool config_reader::boolean(const std::string& key, bool fallback, std::string_view doc) {
  note(key, "true or false", fallback ? "true" : "false", doc);
  const auto* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) {
    fail(key, "expected true or false, found " + v->dump());
    return fallback;
  }
  return v->get<bool>();
}

std::string config_reader::string(const std::string& key, const std::string& fallback, std::string_view doc) {
  note(key, "string", nlohmann::json(fallback).dump(), doc);
  const auto* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_string()) {
    fail(key, "expected a string, found " + v->dump());
    return fallback;
  }
  return v->get<std::string>();
}

std::string config_reader::pick(const std::string& key, std::string_view fallback, const std::vector<std::string_view>& allowed,
                                std::string_view doc) {
  note(key, "one of: " + joined(allowed), nlohmann::json(std::string(fallback)).dump(), doc);
  const auto* v = find(key);
  if (v == nullptr) return std::string(fallback);
  if (!v->is_string()) {
    fail(key, "expected one of " + joined(allowed) + ", found " + v->dump());
    return std::string(fallback);
  }
  const std::string s = v->get<std::string>();
  if (std::find(allowed.begin(), allowed.end(), s) != allowed.end()) return s;
  fail(key, "'" + s + "' is not one of: " + joined(allowed));
  return std::string(fallback);
}

std::vector<std::string> config_reader::picks(const std::string& key, const std::vector<std::string>& fallback,
                                              const std::vector<std::string_view>& allowed, std::string_view doc) {
  note(key, "list of: " + joined(allowed), nlohmann::json(fallback).dump(), doc);
  const auto* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_array()) {
    fail(key, "expected an array of names (" + joined(allowed) + "), found " + v->dump());
    return fallback;
  }
  std::vector<std::string> out;
  for (std::size_t i = 0; i < v->size(); ++i) {
    const auto& e = (*v)[i];
    if (!e.is_string() || std::find(allowed.begin(), allowed.end(), e.get<std::string>()) == allowed.end()) {
      fail(key + "[" + std::to_string(i) + "]", "expected one of " + joined(allowed) + ", found " + e.dump());
      return fallback;
    }
    out.push_back(e.get<std::string>());
  }
  return out;
}

std::vector<std::int64_t> config_reader::integers(const std::string& key, const std::vector<std::int64_t>& fallback,
                                                  std::int64_t min, std::int64_t max, std::string_view doc) {
  note(key, "list of integers in [" + std::to_string(min) + ", " + std::to_string(max) + "]", nlohmann::json(fallback).dump(), doc);
  const auto* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_array()) {
    fail(key, "expected an array of integers, found " + v->dump());
    return fallback;
  }
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < v->size(); ++i) {
    const auto& e = (*v)[i];
    if (!e.is_number_integer() || (e.is_number_unsigned() && e.get<std::uint64_t>() > static_cast<std::uint64_t>(max)) ||
        e.get<std::int64_t>() < min || e.get<std::int64_t>() > max) {
      fail(key + "[" + std::to_string(i) + "]",
           "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "], found " + e.dump());
      return fallback;
    }
    out.push_back(e.get<std::int64_t>());
  }
  return out;
}

std::vector<double> config_reader::numbers(const std::string& key, const std::vector<double>& fallback, double min, double max,
                                           std::string_view doc) {
  note(key, "list of numbers in [" + number_text(min) + ", " + number_text(max) + "]", nlohmann::json(fallback).dump(), doc);
  const auto* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_array()) {
    fail(key, "expected an array of numbers, found " + v->dump());
    return fallback;
  }
  std::vector<double> out;
  for (std::size_t i = 0; i < v->size(); ++i) {
    const auto& e = (*v)[i];
    if (!e.is_number() || !std::isfinite(e.get<double>()) || e.get<double>() < min || e.get<double>() > max) {
      fail(key + "[" + std::to_string(i) + "]",
           "expected a number in [" + std::to_string(min) + ", " + std::to_string(max) + "], found " + e.dump());
      return fallback;
    }
    out.push_back(e.get<double>());
  }
  return out;
}

host_port config_reader::address(const std::string& key, const std::string& fallback, bool allow_port_zero,
                                 std::string_view doc) {
  note(key, "HOST:PORT", nlohmann::json(fallback).dump(), doc);
  auto fallback_address = parse_host_port(fallback, true);
  TESSERA_ASSERT(fallback_address.ok());  // our own default
  const auto* v = find(key);
  if (v == nullptr) return fallback_address.value();
  if (!v->is_string()) {
    fail(key, "expected a string HOST:PORT, found " + v->dump());
    return fallback_address.value();
  }
  auto hp = parse_host_port(v->get<std::string>(), allow_port_zero);
  if (hp) return hp.value();
  fail(key, hp.error().message);
  return fallback_address.value();
}

const nlohmann::json* config_reader::value(const std::string& key, std::string type, std::string_view doc) {
  note(key, std::move(type), "", doc);
  const auto* v = find(key);
  return v != nullptr && v->is_null() ? nullptr : v;
}

const nlohmann::json* config_reader::object(const std::string& key, std::string_view doc) {
  note(key, "object", "", doc);
  const auto* v = find(key);
  if (v != nullptr && v->is_null()) v = nullptr;  // null leaves an optional object out (an override can)
  if (v != nullptr && !v->is_object()) {
    fail(key, "expected an object, found " + v->dump());
    return nullptr;
  }
  if (v == nullptr && table_) return &empty_object();
  return v;
}

config_reader config_reader::child(const std::string& key, const nlohmann::json& object) const {
  config_reader c(object, source_, prefix_.empty() ? key : prefix_ + "." + key);
  c.table_ = table_;
  return c;
}

result<void> config_reader::finish() {
  if (table_) return {};
  if (error_) return *error_;
  if (object_.is_object()) {
    for (const auto& [k, v] : object_.items()) {
      if (!known_.contains(k)) return make_error(errc::invalid_spec, where(k) + ": unknown field");
    }
  }
  return {};
}

namespace {

result<void> apply_override(nlohmann::json& root, const std::string& item) {
  const auto eq = item.find('=');
  if (eq == std::string::npos || eq == 0)
    return make_error(errc::invalid_spec, "override '" + item + "': expected key=value");
  const std::string key = item.substr(0, eq);
  const std::string text = item.substr(eq + 1);
  nlohmann::json value = nlohmann::json::parse(text, nullptr, false);
  if (value.is_discarded()) value = text;
  nlohmann::json* node = &root;
  std::size_t start = 0;
  for (;;) {
    const auto dot = key.find('.', start);
    const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.empty()) return make_error(errc::invalid_spec, "override '" + item + "': empty field name");
    if (!node->is_object()) return make_error(errc::invalid_spec, "override '" + item + "': '" + part + "' is inside a non-object");
    if (dot == std::string::npos) {
      (*node)[part] = value;
      return {};
    }
    node = &(*node)[part];
    if (node->is_null()) *node = nlohmann::json::object();
    start = dot + 1;
  }
}

}  // namespace

result<void> apply_overrides(nlohmann::json& root, const std::vector<std::string>& overrides) {
  for (const auto& o : overrides) TESSERA_TRY(apply_override(root, o));
  return {};
}

result<nlohmann::json> load_config(const std::string& path, const std::vector<std::string>& overrides) {
  nlohmann::json json = nlohmann::json::object();
  if (!path.empty()) {
    TESSERA_ASSIGN_OR_RETURN(json, load_json_file(path));
  }
  TESSERA_TRY(apply_overrides(json, overrides));
  return json;
}

}  // namespace tessera::core
