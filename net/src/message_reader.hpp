// net/src/message_reader.hpp — internal: reading and writing the fields of a control message's JSON,
// shared by messages.cpp and secagg_messages.cpp. Every reader error names the message and the field.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/config/base64.hpp"
#include "tessera/net/messages.hpp"

namespace tessera::net::detail {

using json = nlohmann::json;

// Rejects nesting deeper than max_json_depth with a linear scan, before nlohmann's recursive parser
// sees the text. Strings are skipped (with their escapes) so brackets inside them do not count.
inline bool depth_ok(std::string_view text) noexcept {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > max_json_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

// Reads fields of one message, keeping the first error; each error names the message and field.
class reader {
 public:
  reader(const json& j, std::string_view what) : j_(j), what_(what) {}

  const json* field(const char* key) {
    if (failed_) return nullptr;
    auto it = j_.find(key);
    if (it == j_.end()) {
      fail(key, "missing");
      return nullptr;
    }
    return &*it;
  }

  std::uint64_t u64(const char* key, std::uint64_t max = UINT64_MAX) {
    const json* v = field(key);
    if (!v) return 0;
    if (!v->is_number_unsigned()) {
      fail(key, "expected a non-negative integer");
      return 0;
    }
    const auto x = v->get<std::uint64_t>();
    if (x > max) fail(key, "over the maximum of " + std::to_string(max));
    return x;
  }
  std::uint32_t u32(const char* key, std::uint32_t min, std::uint32_t max) {
    const std::uint64_t x = u64(key, max);
    if (!failed_ && x < min) fail(key, "under the minimum of " + std::to_string(min));
    return static_cast<std::uint32_t>(x);
  }
  double finite(const char* key) {
    const json* v = field(key);
    if (!v) return 0;
    if (!v->is_number()) {
      fail(key, "expected a number");
      return 0;
    }
    const double x = v->get<double>();
    if (!std::isfinite(x)) fail(key, "not finite");
    return x;
  }
  // A number, or null for one that is not finite (JSON has no NaN: encoders write null), read as NaN
  // for the receiver to judge.
  double number_or_null(const char* key) {
    const json* v = field(key);
    if (!v) return 0;
    if (v->is_null()) return std::numeric_limits<double>::quiet_NaN();
    if (!v->is_number()) {
      fail(key, "expected a number or null");
      return 0;
    }
    return v->get<double>();
  }
  bool boolean(const char* key) {
    const json* v = field(key);
    if (!v) return false;
    if (!v->is_boolean()) {
      fail(key, "expected true or false");
      return false;
    }
    return v->get<bool>();
  }
  std::string string(const char* key, std::size_t max_chars) {
    const json* v = field(key);
    if (!v) return {};
    if (!v->is_string()) {
      fail(key, "expected a string");
      return {};
    }
    auto s = v->get<std::string>();
    if (s.size() > max_chars) fail(key, "longer than " + std::to_string(max_chars) + " characters");
    return s;
  }
  codec blob_codec(const char* key) {
    const std::string s = string(key, 16);
    if (failed_) return codec::f32;
    auto c = core::k_codec_names.find(s);
    if (!c) fail(key, "unknown codec '" + s + "'");
    return c.value_or(codec::f32);
  }
  bool has(const char* key) const { return !failed_ && j_.contains(key); }
  digest sha256(const char* key) {
    const std::string s = string(key, 64);
    digest d{};
    if (failed_) return d;
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    if (s.size() != 64) {
      fail(key, "expected 64 hex characters");
      return d;
    }
    for (std::size_t i = 0; i < d.size(); ++i) {
      const int hi = hex(s[2 * i]);
      const int lo = hex(s[2 * i + 1]);
      if (hi < 0 || lo < 0) {
        fail(key, "expected 64 hex characters");
        return d;
      }
      d[i] = static_cast<std::uint8_t>(hi * 16 + lo);
    }
    return d;
  }
  const json* array(const char* key, std::size_t max_items) {
    const json* v = field(key);
    if (!v) return nullptr;
    if (!v->is_array()) {
      fail(key, "expected an array");
      return nullptr;
    }
    if (v->size() > max_items) {
      fail(key, "more than " + std::to_string(max_items) + " items");
      return nullptr;
    }
    return v;
  }

  // `count` float64 values as base64 (core/config/base64.hpp); the text's length is checked before decoding.
  std::vector<double> doubles(const char* key, std::uint64_t count) {
    const std::string text = string(key, (count * 8 + 2) / 3 * 4);
    if (failed_) return {};
    auto v = core::decode_doubles(text, count, std::string(what_) + ": field '" + key + "'");
    if (!v) {
      failed_ = true;
      error_ = make_error(errc::bad_field, v.error().message);
      return {};
    }
    return std::move(v).value();
  }
  // Base64 of at most `max_bytes` bytes (its decoded length read from the text, checked first).
  std::vector<std::byte> bytes(const char* key, std::size_t max_bytes) {
    const std::string text = string(key, (max_bytes + 2) / 3 * 4);
    if (failed_) return {};
    std::size_t n = text.size() / 4 * 3;
    if (text.size() % 4 != 0) {
      fail(key, "not base64");
      return {};
    }
    for (std::size_t i = text.size(); i > 0 && text[i - 1] == '=' && n > 0; --i) --n;
    auto v = core::base64_decode(text, n, std::string(what_) + ": field '" + key + "'");
    if (!v) {
      failed_ = true;
      error_ = make_error(errc::bad_field, v.error().message);
      return {};
    }
    return std::move(v).value();
  }
  // A device id ([A-Za-z0-9._-]{1,64}).
  std::string device(const char* key) {
    std::string id = string(key, 64);
    if (!failed_ && !valid_device_id(id)) fail(key, "must match [A-Za-z0-9._-]{1,64}");
    return id;
  }
  core::task_kind task(const char* key) {
    const std::string s = string(key, 32);
    if (failed_) return core::task_kind::classification;
    auto t = core::k_task_names.find(s);
    if (!t) fail(key, "unknown task '" + s + "'");
    return t.value_or(core::task_kind::classification);
  }

  [[nodiscard]] std::string_view what() const noexcept { return what_; }
  // Keeps a nested reader's error (it names its own path).
  void take(const reader& inner) {
    if (failed_ || !inner.failed()) return;
    failed_ = true;
    error_ = inner.error();
  }
  void fail(const std::string& key, const std::string& why) {
    if (failed_) return;
    failed_ = true;
    error_ = make_error(errc::bad_field, std::string(what_) + ": field '" + key + "': " + why);
  }
  [[nodiscard]] bool failed() const noexcept { return failed_; }
  [[nodiscard]] core::error error() const { return error_; }

 private:
  const json& j_;
  std::string_view what_;
  bool failed_ = false;
  core::error error_;
};

inline std::string hex_of(const digest& d) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  for (std::uint8_t b : d) {
    s.push_back(digits[b >> 4]);
    s.push_back(digits[b & 0xf]);
  }
  return s;
}


// The secure aggregation messages (secagg_messages.cpp).
[[nodiscard]] json secagg_to_object(const message& m);
[[nodiscard]] json secure_assign_object(const msg::secure_assign& s);
void read_secure_assign(reader& r, msg::secure_assign& s);
[[nodiscard]] message parse_secagg(frame_type t, reader& r);

}  // namespace tessera::net::detail
