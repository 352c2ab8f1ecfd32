#include "tessera/rounds/assignment.hpp"

#include "tessera/core/base/names.hpp"

namespace tessera::rounds {

std::string_view to_string(assignment_state s) noexcept {
  static constexpr auto names = core::names_in_order<assignment_state>(
      {"assigned", "downloading", "training", "uploading", "accepted", "refused", "rejected", "straggler"});
  return names.name(s);
}

std::string_view to_string(assignment_event e) noexcept {
  static constexpr auto names =
      core::names_in_order<assignment_event>({"sent", "downloaded", "announced", "received", "refused", "rejected", "closed"});
  return names.name(e);
}

bool is_open(assignment_state s) noexcept {
  switch (s) {
    case assignment_state::assigned:
    case assignment_state::downloading:
    case assignment_state::training:
    case assignment_state::uploading: return true;
    case assignment_state::accepted:
    case assignment_state::refused:
    case assignment_state::rejected:
    case assignment_state::straggler: return false;
  }
  return false;
}

std::optional<assignment_state> next_state(assignment_state s, assignment_event e) noexcept {
  using st = assignment_state;
  if (!is_open(s)) return std::nullopt;
  switch (e) {
    case assignment_event::sent: return st::downloading;
    case assignment_event::downloaded:
      if (s == st::downloading) return st::training;
      return std::nullopt;
    case assignment_event::announced:
      // An update may follow a download whose last ACK the hub never saw (the link broke after it).
      if (s == st::uploading) return std::nullopt;
      return st::uploading;
    case assignment_event::received:
      if (s == st::uploading) return st::accepted;
      return std::nullopt;
    case assignment_event::refused: return st::refused;
    case assignment_event::rejected: return st::rejected;
    case assignment_event::closed: return st::straggler;
  }
  return std::nullopt;
}

}  // namespace tessera::rounds
