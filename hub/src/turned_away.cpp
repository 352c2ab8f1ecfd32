#include "turned_away.hpp"

#include <algorithm>
#include <ctime>

namespace tessera::hub {

void turned_away_list::note(turned_away_entry e) {
  e.last_unix = static_cast<std::int64_t>(std::time(nullptr));
  const auto same = std::find_if(entries_.begin(), entries_.end(), [&](const turned_away_entry& x) { return x.who == e.who && x.code == e.code; });
  e.times = 1;
  if (same != entries_.end()) {
    e.times += same->times;
    entries_.erase(same);
  }
  entries_.push_front(std::move(e));
  if (entries_.size() > k_most) entries_.pop_back();
}

nlohmann::json turned_away_list::to_json() const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& e : entries_)
    out.push_back({{"who", e.who}, {"address", e.address}, {"serial", e.serial}, {"code", e.code},
                   {"reason", e.reason}, {"times", e.times}, {"last_unix", e.last_unix}});
  return out;
}

bool certificate_trouble(std::string_view tls_failure) noexcept {
  for (std::string_view none : {"", "closed", "not_tls", "protocol_version", "no_certificate", "tls_error"})
    if (tls_failure == none) return false;
  return true;
}

std::string host_of(const std::string& address) {
  if (address.starts_with('[')) {
    const auto close = address.find(']');
    return close == std::string::npos ? address : address.substr(1, close - 1);
  }
  const auto colon = address.rfind(':');
  return colon == std::string::npos || address.find(':') != colon ? address : address.substr(0, colon);
}

}  // namespace tessera::hub
