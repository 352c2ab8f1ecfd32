// Internal: the hub's side of an assignment's transfers — ASSIGN and the subnet's download, the device's
// UPDATE, the upload it announces, and what the engine says of them (RESULT). The round driver calls
// these while a round runs; the engine owns each assignment's state, this moves its bytes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "device_registry.hpp"
#include "hub_context.hpp"
#include "hub_figures.hpp"
#include "tessera/rounds/engine.hpp"

namespace tessera::hub {

class round_transfers {
 public:
  round_transfers(const hub_context& ctx, rounds::engine& engine, device_registry& devices, hub_figures& figures)
      : ctx_(&ctx), engine_(&engine), devices_(&devices), figures_(&figures) {}

  // ASSIGN and the subnet's download (the same bytes again when the device lost them in this round).
  void send_assignment(device_entry& d, rounds::assignment& a);
  // Before a dispatch's assignments go out, and once the round is over: forgets the shared encodings.
  void forget_encodings() { encoded_.clear(); }
  // While `uploads_over` (a secure round checks or unmasks), its survivors are fixed and no masked input
  // joins. Each returns true when every assignment has reported since: the collection is over.
  [[nodiscard]] bool on_update(const std::shared_ptr<net::session>& s, const net::msg::update& u, bool uploads_over);
  [[nodiscard]] bool on_upload(const std::shared_ptr<net::session>& s, const std::shared_ptr<net::incoming_transfer>& in,
                               bool uploads_over);
  void on_download_sent(const std::string& id, const std::shared_ptr<net::outgoing_transfer>& out);
  // The download is complete (its last ACK, or the agent says it holds every byte).
  void note_downloaded(device_entry& d, rounds::assignment& a, const net::outgoing_transfer& out);

 private:
  // Logs and answers RESULT{rejected, code, reason}; `transfer` (if not 0) is the announced upload, whose
  // chunks are dropped.
  void reject(const std::shared_ptr<net::session>& s, const std::string& id, const core::error& why, std::uint64_t transfer);
  // Why an UPDATE without an assignment is refused.
  [[nodiscard]] core::error unassigned(std::uint64_t round) const;
  // Every upload as received, under audit_uploads.
  void audit(const std::string& id, const upload_slot& upload) const;

  // The dispatch's downloads by what tells them apart: a group's subnet in one codec, its frozen layers in
  // another. A group's devices share one encoding and one digest, not one each.
  struct encoded_download {
    std::shared_ptr<const std::vector<std::byte>> bytes;
    net::digest sha{};
  };
  std::map<std::tuple<std::size_t, core::codec_kind, core::codec_kind>, encoded_download> encoded_;
  const hub_context* ctx_;
  rounds::engine* engine_;
  device_registry* devices_;
  hub_figures* figures_;
};

}  // namespace tessera::hub
