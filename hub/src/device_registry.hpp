// Internal: the hub's devices (hub.hpp), keyed by the id in their certificates: what each said in its
// HELLO, its connection, the transfers of its assignment, and what the operator sees of it. Entries
// outlive connections (a device that reconnects finds its transfers) and, through the checkpoint's
// records, restarts.
//
//   device_entry& d = devices["dev-a"];                   // made empty on first sight
//   d.download_id = devices.next_transfer();
//   engine.begin_round(devices.ready_offers());            // the engine draws the cohort
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/math/memory.hpp"
#include "tessera/net/session.hpp"
#include "tessera/rounds/checkpoint.hpp"
#include "tessera/rounds/offer.hpp"

namespace tessera::hub {

// The bytes of a blob and its transfer in one allocation: a session may still hold the transfer after
// the round closed, and the aliasing shared_ptr keeps the bytes alive exactly as long.
// The bytes are shared: the devices scoring the model get one copy of it per codec.
struct download_slot {
  std::shared_ptr<const std::vector<std::byte>> bytes;
  net::outgoing_transfer out;
  download_slot(std::uint64_t id, std::shared_ptr<const std::vector<std::byte>> b, const net::digest& sha)
      : bytes(std::move(b)), out(id, std::span<const std::byte>(*bytes), sha) {}
};

// An upload being received: its bytes and the transfer writing into them.
struct upload_slot {
  std::vector<std::byte> bytes;
  net::incoming_transfer in;
  upload_slot(std::uint64_t id, std::size_t size, const net::digest& sha) : bytes(size), in(id, std::span<std::byte>(bytes), sha) {}
};

struct device_entry {
  rounds::device_record record;
  std::shared_ptr<net::session> session;   // the current connection, after its HELLO
  std::vector<core::codec_kind> codecs;
  std::uint64_t download_id = 0;
  std::shared_ptr<download_slot> download;
  std::shared_ptr<upload_slot> upload;
  std::uint64_t accepted_upload = 0;       // the last upload accepted (a repeat gets its RESULT again)
  std::string data_digest;                 // HELLO's: changes when the device's data does
  std::string unfit;                       // why its data cannot train this model; no assignments meanwhile
  std::uint64_t validation_examples = 0;   // HELLO's: held out for evaluation on the device
  bool told_over_budget = false;           // logged once that its budget cannot hold the model to score it
  // For the operator: the certificate serial of its last session, its last subnet, and its transfers
  // (blob bytes since this hub started, resent ones included; rates of the last complete transfer).
  std::string serial;
  std::uint64_t subnet_params = 0;
  std::optional<core::codec_kind> codec;
  std::uint64_t bytes_down = 0, bytes_up = 0;
  std::optional<double> down_rate, up_rate;  // bytes per second
  std::chrono::steady_clock::time_point download_started{}, upload_started{};
  // A connection that replaced a dead one (or came after a revoked one) waits for its WELCOME until every
  // older one has closed, and so let go of the transfers (they run on other threads); until then it is
  // not `session`.
  struct {
    std::shared_ptr<net::session> session;
    std::optional<net::msg::hello> hello;
    std::vector<const net::session*> letting_go;  // older sessions cut or refused, their on_closed to come
  } handover;

  // Connected after its HELLO, and its data fit for this model: it may be offered a round.
  [[nodiscard]] bool ready() const noexcept { return session && unfit.empty(); }
  void seen();  // last_seen: now
};

class device_registry {
 public:
  // Downloads get transfer ids from `first_transfer` on (its upload bit and low 16 bits clear).
  explicit device_registry(std::uint64_t first_transfer) : next_transfer_(first_transfer) {}

  // The entry of `id`, made empty if it is new.
  device_entry& operator[](const std::string& id) { return devices_[id]; }
  [[nodiscard]] device_entry* find(const std::string& id);
  [[nodiscard]] std::map<std::string, device_entry>& entries() noexcept { return devices_; }
  [[nodiscard]] const std::map<std::string, device_entry>& entries() const noexcept { return devices_; }
  [[nodiscard]] std::size_t size() const noexcept { return devices_.size(); }
  [[nodiscard]] std::size_t ready_count() const;
  [[nodiscard]] std::size_t connected_count() const;

  // Every ready device, as the round engine takes them (it draws a round's cohort from them).
  [[nodiscard]] std::vector<rounds::device_offer> ready_offers() const;
  // What the checkpoint keeps of every device; restore() takes it back after a restart.
  [[nodiscard]] std::vector<rounds::device_record> records() const;
  void restore(std::span<const rounds::device_record> records);

  // A fresh transfer id for a download: a restarted agent never resumes bytes of another one.
  [[nodiscard]] std::uint64_t next_transfer() noexcept { return next_transfer_++; }
  // Lets go of every session (the hub stops).
  void release_sessions();

 private:
  std::map<std::string, device_entry> devices_;
  std::uint64_t next_transfer_;
};

}  // namespace tessera::hub
