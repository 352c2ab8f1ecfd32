#include "device_registry.hpp"

#include <ctime>

namespace tessera::hub {

void device_entry::seen() { record.last_seen = static_cast<std::int64_t>(std::time(nullptr)); }

device_entry* device_registry::find(const std::string& id) {
  const auto it = devices_.find(id);
  return it == devices_.end() ? nullptr : &it->second;
}

std::size_t device_registry::ready_count() const {
  std::size_t n = 0;
  for (const auto& [id, d] : devices_) n += d.ready() ? 1 : 0;
  return n;
}

std::size_t device_registry::connected_count() const {
  std::size_t n = 0;
  for (const auto& [id, d] : devices_) n += d.session ? 1 : 0;
  return n;
}

std::vector<rounds::device_offer> device_registry::ready_offers() const {
  std::vector<rounds::device_offer> offers;
  for (const auto& [id, d] : devices_) {
    if (!d.ready()) continue;
    offers.push_back({.id = id,
                      .budget_bytes = d.record.budget_bytes,
                      .examples = d.record.examples,
                      .codecs = d.codecs,
                      .capacity = 0,
                      .validation_examples = d.validation_examples});
  }
  return offers;
}

std::vector<rounds::device_record> device_registry::records() const {
  std::vector<rounds::device_record> out;
  for (const auto& [id, d] : devices_) out.push_back(d.record);
  return out;
}

void device_registry::restore(std::span<const rounds::device_record> records) {
  for (const auto& r : records) devices_[r.id].record = r;
}

void device_registry::release_sessions() {
  for (auto& [id, d] : devices_) {
    d.session.reset();
    d.handover.session.reset();
  }
}

}  // namespace tessera::hub
