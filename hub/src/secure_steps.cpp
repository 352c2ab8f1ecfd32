#include "secure_steps.hpp"

#include <algorithm>

namespace tessera::hub {

using core::log_level;
using rounds::is_open;

// ---- the parties --------------------------------------------------------------------------------

std::vector<std::string> engine_party::open_members() const {
  std::vector<std::string> out;
  for (const auto& a : std::as_const(*engine_).assignments())
    if (is_open(a.state)) out.push_back(a.device);
  return out;
}

const std::vector<std::uint32_t>* engine_party::open_segments(const std::string& id) const {
  const rounds::assignment* a = std::as_const(*engine_).find(id);
  return a != nullptr && is_open(a->state) ? &a->segments : nullptr;
}

void engine_party::refuse(const std::string& id, const std::string& why) {
  if (rounds::assignment* a = engine_->find(id); a != nullptr) engine_->refuse(*a, why);
}

std::vector<std::string> sum_party::open_members() const {
  std::vector<std::string> out;
  for (const auto& id : sum_.members())
    if (!out_.contains(id)) out.push_back(id);
  return out;
}

const std::vector<std::uint32_t>* sum_party::open_segments(const std::string& id) const {
  static const std::vector<std::uint32_t> the_segment{0};
  return sum_.is_member(id) && !out_.contains(id) ? &the_segment : nullptr;
}

void sum_party::refuse(const std::string& id, const std::string&) { out_.insert(id); }

core::result<void> sum_party::add_masked(const std::string& id, std::span<const std::byte> packed) {
  if (open_segments(id) == nullptr) return rounds::make_error(rounds::errc::secure_step, "device " + id + " is not in the sum");
  if (uploaded_.contains(id)) return rounds::make_error(rounds::errc::secure_step, "device " + id + " sent its masked vector twice");
  auto y = crypto::secagg_unpack(packed, sum_.params().bits);
  if (!y) return rounds::make_error(rounds::errc::secure_step, "device " + id + "'s masked vector: " + y.error().message);
  TESSERA_TRY(sum_.server().add_masked({.id = id, .y = std::move(y).value(), .clipped = 0}));
  uploaded_.insert(id);
  return {};
}

net::msg::secure_assign sum_party::part_for(const std::string& id) const {
  const crypto::secagg_params& p = sum_.params();
  return {.params = p, .segments = {0}, .rounding_key = sum_.rounding_key(id), .upload_size = p.segments[0].length * crypto::secagg_value_bytes(p.bits)};
}

bool sum_party::all_uploaded() const {
  const auto open = open_members();
  return std::all_of(open.begin(), open.end(), [&](const std::string& id) { return uploaded_.contains(id); });
}

// ---- the steps ------------------------------------------------------------------------------------

namespace {
std::uint64_t next_serial() {
  static std::uint64_t serial = 0;  // the hub's io thread only
  return ++serial;
}
}  // namespace

secure_steps::secure_steps(const hub_context& ctx, std::unique_ptr<secure_party> party, device_registry& devices)
    : ctx_(&ctx), party_(std::move(party)), devices_(&devices), serial_(next_serial()), step_started_(std::chrono::steady_clock::now()) {}

std::string_view secure_steps::name(step s) {
  static constexpr std::string_view names[] = {"keys", "shares", "uploads", "consistency check", "unmasking"};
  return names[static_cast<int>(s)];
}

bool secure_steps::done() const {
  switch (at_) {
    case step::keys: {
      const auto open = party_->open_members();
      return std::all_of(open.begin(), open.end(), [&](const std::string& id) { return keyed_.contains(id); });
    }
    case step::shares:
      return std::all_of(roster_->begin(), roster_->end(), [&](const crypto::secagg_member& m) {
        return shared_.contains(m.keys.id) || party_->open_segments(m.keys.id) == nullptr;
      });
    case step::uploads: return false;
    case step::check:
      return std::all_of(request_->survivors.begin(), request_->survivors.end(), [&](const std::string& id) { return signed_.contains(id); });
    case step::unmask:
      return std::all_of(request_->signatures.begin(), request_->signatures.end(),
                         [&](const crypto::secagg_signature& s) { return replied_.contains(s.id); });
  }
  return false;
}

void secure_steps::send_step(device_entry& d, const std::string& id) {
  if (!d.session) return;
  const std::uint64_t round = party_->round();
  switch (at_) {
    case step::keys: break;  // the agent sends its keys with each ASSIGN and after a reconnect
    case step::shares:
      // Each member gets the roster with its neighbours' keys (all of them while the graph is complete).
      if (!shared_.contains(id))
        if (auto mine = party_->server().roster_for(id); mine) d.session->send(net::msg::secagg_roster{.round = round, .roster = std::move(mine).value()});
      break;
    case step::uploads:
      if (shared_.contains(id)) d.session->send(net::msg::secagg_inbox{.round = round, .boxes = party_->server().inbox(id)});
      break;
    case step::check:
      if (!signed_.contains(id) && std::find(request_->survivors.begin(), request_->survivors.end(), id) != request_->survivors.end())
        d.session->send(net::msg::secagg_check{.round = round, .request = party_->server().check_request_for(id)});
      break;
    case step::unmask:
      if (!replied_.contains(id) && is_signer(id))
        d.session->send(net::msg::secagg_unmask{.round = round, .request = party_->server().unmask_request_for(id)});
      break;
  }
}

void secure_steps::mark_time(step s) {
  const auto now = std::chrono::steady_clock::now();
  timings_.emplace_back(name(s), std::chrono::duration<double>(now - step_started_).count());
  step_started_ = now;
}

secure_steps::next secure_steps::end_step() {
  mark_time(at_);
  switch (at_) {
    case step::keys: return end_keys();
    case step::shares: return end_shares();
    case step::uploads: return next::wait;  // ends by begin_unmask
    case step::check: return end_check();
    case step::unmask: return next::close_round;
  }
  return next::wait;
}

secure_steps::next secure_steps::end_keys() {
  const std::string what = party_->what();
  for (const auto& id : party_->open_members())
    if (!keyed_.contains(id)) {
      ctx_->say(log_level::warning, "device " + id + " sent no secure aggregation keys in " + what + ": left out");
      party_->refuse(id, "no secure aggregation keys within secure_step_s");
    }
  auto roster = party_->server().roster();
  if (!roster) {
    ctx_->say(log_level::warning, what + ": secure aggregation cannot go on: " + roster.error().message);
    for (const auto& id : party_->open_members()) party_->refuse(id, "the secure aggregation stopped: " + roster.error().message);
    return next::close_round;
  }
  roster_ = std::move(roster).value();
  at_ = step::shares;
  for (const auto& m : *roster_) send_step((*devices_)[m.keys.id], m.keys.id);
  return next::timed_step;
}

secure_steps::next secure_steps::end_shares() {
  for (const auto& m : *roster_) {
    if (party_->open_segments(m.keys.id) != nullptr && !shared_.contains(m.keys.id)) {
      ctx_->say(log_level::warning, "device " + m.keys.id + " sent no secure aggregation shares in " + party_->what() + ": left out");
      party_->refuse(m.keys.id, "no secure aggregation shares within secure_step_s");
    }
  }
  at_ = step::uploads;
  for (const auto& id : shared_) send_step((*devices_)[id], id);
  return next::uploads;
}

secure_steps::next secure_steps::begin_unmask() {
  const std::string what = party_->what();
  if (!roster_ || at_ != step::uploads) {
    if (at_ != step::uploads)
      ctx_->say(log_level::warning, what + " ended before its secure aggregation's " + std::string(name(at_)) +
                                        " step was over: nothing is released");
    return next::close_round;
  }
  mark_time(step::uploads);
  request_ = party_->server().check_request();  // later masked inputs are refused
  at_ = step::check;
  if (request_->survivors.size() < party_->params().threshold) {
    ctx_->say(log_level::warning, what + ": " + std::to_string(request_->survivors.size()) +
                                      " masked inputs, below the threshold " + std::to_string(party_->params().threshold) +
                                      ": nothing is released");
    return next::close_round;
  }
  for (const auto& id : request_->survivors) send_step((*devices_)[id], id);
  return next::timed_step;
}

bool secure_steps::is_signer(const std::string& id) const {
  return std::any_of(request_->signatures.begin(), request_->signatures.end(), [&](const crypto::secagg_signature& s) { return s.id == id; });
}

// The survivors' signatures are in (or secure_step_s ran out): the signers are asked to unmask, with
// the signatures, which each checks before it reveals anything.
secure_steps::next secure_steps::end_check() {
  request_ = party_->server().unmask_request();
  const std::size_t threshold = party_->params().threshold;
  if (request_->signatures.size() < threshold) {
    ctx_->say(log_level::warning, party_->what() + ": " + std::to_string(request_->signatures.size()) + " of " +
                                      std::to_string(request_->survivors.size()) + " survivors signed the survivor set, below the threshold " +
                                      std::to_string(threshold) + ": nothing is released");
    return next::close_round;
  }
  at_ = step::unmask;
  for (const auto& s : request_->signatures) send_step((*devices_)[s.id], s.id);
  return next::timed_step;
}

bool secure_steps::on_message(const std::string& id, const net::message& m) {
  const std::string what = describe(id, m);
  const std::vector<std::uint32_t>* segments = party_->open_segments(id);
  const auto drop = [&](const core::error& why) {
    ctx_->say(log_level::warning, what + " refused: " + why.message);
    party_->refuse(id, why.message);
    return false;
  };
  const auto ignore = [&](const char* when) {
    ctx_->say(log_level::warning, what + when + ": ignored");
    return false;
  };
  if (const auto* k = std::get_if<net::msg::secagg_keys>(&m)) {
    if (keyed_.contains(id)) return false;  // sent again after a reconnect
    if (at_ != step::keys || segments == nullptr) return ignore(" after the keys step");
    if (k->keys.id != id) return drop(core::make_error(core::errc::invalid_argument, "keys advertised for " + k->keys.id));
    if (auto ok = party_->server().add_keys(k->keys, *segments); !ok) return drop(ok.error());
    keyed_.insert(id);
  } else if (const auto* sh = std::get_if<net::msg::secagg_shares>(&m)) {
    if (shared_.contains(id)) return false;
    if (at_ != step::shares || segments == nullptr) return ignore(" outside the shares step");
    if (auto ok = party_->server().add_boxes(id, sh->boxes); !ok) return drop(ok.error());
    shared_.insert(id);
  } else if (const auto* w = std::get_if<net::msg::secagg_masked_with>(&m)) {
    if (pledged_.contains(id)) return false;  // sent again after a reconnect
    if (at_ != step::uploads || w->pledge.id != id || segments == nullptr) return ignore(" outside the uploads");
    if (auto ok = party_->server().add_masked_with(w->pledge); !ok) return drop(ok.error());
    pledged_.insert(id);
    return false;  // no step ends on it
  } else if (const auto* c = std::get_if<net::msg::secagg_check_reply>(&m)) {
    return take_reply(signed_, step::check, id, what, c->signature.id == id, [&] { return party_->server().add_signature(c->signature); });
  } else if (const auto* r = std::get_if<net::msg::secagg_unmask_reply>(&m)) {
    return take_reply(replied_, step::unmask, id, what, r->reply.id == id, [&] { return party_->server().add_reply(r->reply); });
  }
  return true;
}

bool secure_steps::take_vector(sum_party& sum, const std::string& id, std::span<const std::byte> packed) {
  if (sum.uploaded(id)) return false;  // sent again after a reconnect: its first is in the sum
  auto ok = packed.empty()             ? core::result<void>(core::make_error(core::errc::invalid_argument, "its figures came in the clear, not masked"))
            : at_ != step::uploads     ? core::result<void>(core::make_error(core::errc::invalid_argument, "its masked figures came outside the uploads"))
                                       : sum.add_masked(id, packed);
  if (!ok) {
    ctx_->say(log_level::warning, "device " + id + " left out of " + sum.what() + ": " + ok.error().message);
    sum.refuse(id, ok.error().message);
  }
  return sum.all_uploaded();
}

// A survivor's answer to the step `when`, taken once (a repeat after a reconnect changes nothing); one
// the protocol's server refuses is logged, and the device stays in the round (its masked input is in).
template <class Add>
bool secure_steps::take_reply(std::set<std::string>& answered, step when, const std::string& id, const std::string& what, bool own,
                              Add add) {
  if (answered.contains(id)) return false;
  if (at_ != when || !own) {
    ctx_->say(log_level::warning, what + " outside the " + std::string(name(when)) + " step: ignored");
    return false;
  }
  if (auto ok = add(); !ok) {
    ctx_->say(log_level::warning, what + " refused: " + ok.error().message);
    return false;
  }
  answered.insert(id);
  return true;
}

void secure_steps::log_outcome(const rounds::secure_outcome& o, std::int64_t round) const {
  std::string steps;
  for (const auto& [step_name, seconds] : timings_) steps += " " + step_name + " " + std::to_string(seconds).substr(0, 5) + " s,";
  ctx_->say(o.withheld.empty() ? log_level::info : log_level::warning,
            "round " + std::to_string(round) + ": secure aggregation released " + std::to_string(o.released) + " of " +
                std::to_string(o.segments) + " sums (" + std::to_string(o.dropped) + " device(s) dropped); 4 extra round trips:" + steps.substr(0, steps.empty() ? 0 : steps.size() - 1) +
                (o.withheld.empty() ? "" : "; withheld: " + o.withheld));
}

std::string secure_steps::describe(const std::string& id, const net::message& m) {
  return std::string(net::to_string(net::type_of(m))) + " from " + id;
}

}  // namespace tessera::hub
