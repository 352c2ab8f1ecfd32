// Tests of tessera/rounds/assignment.hpp: the whole state table.
#include <doctest/doctest.h>

#include <optional>

#include "tessera/rounds/assignment.hpp"

using namespace tessera;
using st = rounds::assignment_state;
using ev = rounds::assignment_event;

TEST_CASE("assignment: the table of states and events, cell by cell") {
  const st states[] = {st::assigned, st::downloading, st::training, st::uploading,
                       st::accepted, st::refused,     st::rejected, st::straggler};
  const ev events[] = {ev::sent, ev::downloaded, ev::announced, ev::received, ev::refused, ev::rejected, ev::closed};
  const std::optional<st> none;
  // Rows: states in the order above; columns: events in the order above.
  const std::optional<st> expected[8][7] = {
      /* assigned    */ {st::downloading, none, st::uploading, none, st::refused, st::rejected, st::straggler},
      /* downloading */ {st::downloading, st::training, st::uploading, none, st::refused, st::rejected, st::straggler},
      /* training    */ {st::downloading, none, st::uploading, none, st::refused, st::rejected, st::straggler},
      /* uploading   */ {st::downloading, none, none, st::accepted, st::refused, st::rejected, st::straggler},
      /* accepted    */ {none, none, none, none, none, none, none},
      /* refused     */ {none, none, none, none, none, none, none},
      /* rejected    */ {none, none, none, none, none, none, none},
      /* straggler   */ {none, none, none, none, none, none, none},
  };
  for (std::size_t s = 0; s < 8; ++s) {
    CHECK(rounds::is_open(states[s]) == (s < 4));
    for (std::size_t e = 0; e < 7; ++e) {
      INFO(rounds::to_string(states[s]), " + ", rounds::to_string(events[e]));
      CHECK(rounds::next_state(states[s], events[e]) == expected[s][e]);
    }
  }
}
