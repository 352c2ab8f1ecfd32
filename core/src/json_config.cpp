#include "tessera/core/json_config.hpp"

#include <algorithm>
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

config_reader::config_reader(const nlohmann::json& object, std::string source, std::string prefix)
    : object_(object), source_(std::move(source)), prefix_(std::move(prefix)) {
  if (!object_.is_object()) {
    error_ = make_error(errc::invalid_spec, source_ + (prefix_.empty() ? "" : ": field '" + prefix_ + "'") +
                                                ": expected a JSON object");
  }
}

std::string config_reader::where(const std::string& key) const {
  return source_ + ": field '" + (prefix_.empty() ? key : prefix_ + "." + key) + "'";
}

void config_reader::fail(const std::string& key, const std::string& what) {
  if (!error_) error_ = make_error(errc::invalid_spec, where(key) + ": " + what);
}

bool config_reader::has(const std::string& key) const { return object_.is_object() && object_.contains(key); }

const nlohmann::json* config_reader::find(const std::string& key) {
  known_.insert(key);
  if (!object_.is_object()) return nullptr;
  const auto it = object_.find(key);
  return it == object_.end() ? nullptr : &*it;
}

std::uint64_t config_reader::seed(const std::string& key, std::uint64_t fallback) {
  const auto* v = find(key);
  if (v == nullptr) return fallback;
  if (v->is_number_unsigned()) return v->get<std::uint64_t>();
  fail(key, "expected an integer in [0, 2^64), found " + v->dump());
  return fallback;
}

std::int64_t config_reader::integer(const std::string& key, std::int64_t fallback, std::int64_t min, std::int64_t max) {
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

double config_reader::number(const std::string& key, double fallback, double min, double max) {
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

bool config_reader::boolean(const std::string& key, bool fallback) {
  const auto* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) {
    fail(key, "expected true or false, found " + v->dump());
    return fallback;
  }
  return v->get<bool>();
}

std::string config_reader::string(const std::string& key, const std::string& fallback) {
  const auto* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_string()) {
    fail(key, "expected a string, found " + v->dump());
    return fallback;
  }
  return v->get<std::string>();
}

std::string config_reader::choice(const std::string& key, const std::string& fallback,
                                  std::initializer_list<std::string_view> allowed) {
  std::string s = string(key, fallback);
  for (auto a : allowed)
    if (s == a) return s;
  std::string list;
  for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
  fail(key, "'" + s + "' is not one of: " + list);
  return fallback;
}

std::vector<std::int64_t> config_reader::integers(const std::string& key, const std::vector<std::int64_t>& fallback,
                                                  std::int64_t min, std::int64_t max) {
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

std::vector<std::string> config_reader::choices(const std::string& key, const std::vector<std::string>& fallback,
                                               std::initializer_list<std::string_view> allowed) {
  const auto* v = find(key);
  if (v == nullptr) return fallback;
  std::string names;
  for (auto a : allowed) names += (names.empty() ? "" : ", ") + std::string(a);
  if (!v->is_array()) {
    fail(key, "expected an array of names (" + names + "), found " + v->dump());
    return fallback;
  }
  std::vector<std::string> out;
  for (std::size_t i = 0; i < v->size(); ++i) {
    const auto& e = (*v)[i];
    if (!e.is_string() || std::find(allowed.begin(), allowed.end(), e.get<std::string>()) == allowed.end()) {
      fail(key + "[" + std::to_string(i) + "]", "expected one of " + names + ", found " + e.dump());
      return fallback;
    }
    out.push_back(e.get<std::string>());
  }
  return out;
}

std::vector<double> config_reader::numbers(const std::string& key, const std::vector<double>& fallback, double min,
                                           double max) {
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

const nlohmann::json* config_reader::object(const std::string& key) {
  const auto* v = find(key);
  if (v != nullptr && !v->is_object()) {
    fail(key, "expected an object, found " + v->dump());
    return nullptr;
  }
  return v;
}

config_reader config_reader::child(const std::string& key, const nlohmann::json& object) const {
  return config_reader(object, source_, prefix_.empty() ? key : prefix_ + "." + key);
}

result<void> config_reader::finish() {
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
