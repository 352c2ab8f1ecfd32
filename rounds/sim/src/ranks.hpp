// rounds/sim/src/ranks.hpp — the processes one simulation is spread over: Open MPI's ranks when
// tessera-sim runs under mpirun (and was built with MPI), else one.
//
// Every rank runs the same engine on the same plan; each trains the devices it owns (device d on rank
// d mod size) and the ranks exchange what their devices reported, which every rank then hands to its
// engine in the same order: the model is the one-process model to the last bit.
//
//   sim::rank_scope mpi(argc, argv);          // MPI_Init / MPI_Finalize around main, under mpirun only
//   const sim::ranks& r = sim::ranks::world();
//   auto all = r.all_gather(mine);            // every rank's bytes, in rank order
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/base/error.hpp"
#include "tessera/rounds/sim/sim_config.hpp"

namespace tessera::sim {

class ranks {
 public:
  [[nodiscard]] static const ranks& world() noexcept;
  [[nodiscard]] std::size_t rank() const noexcept { return rank_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  // Every rank's `mine`, concatenated in rank order, on every rank (collective: every rank calls it).
  [[nodiscard]] core::result<std::vector<std::byte>> all_gather(std::span<const std::byte> mine) const;

 private:
  friend class rank_scope;
  std::size_t rank_ = 0, size_ = 1;
};

// Starts MPI when the process was launched by mpirun (Open MPI's environment says so) and MPI is built
// in; ends it when it goes. Without either, ranks::world() is one rank.
class rank_scope {
 public:
  rank_scope(int& argc, char**& argv);
  ~rank_scope();
  rank_scope(const rank_scope&) = delete;
  rank_scope& operator=(const rank_scope&) = delete;
  // Launched by mpirun for several processes but not one of several ranks (a build without MPI, or
  // MPI_Init failed): why, so that N copies do not each run the whole simulation into the same files.
  [[nodiscard]] const std::string& problem() const noexcept { return problem_; }
  // A run that failed on one rank ends every rank (MPI_Abort): the others would wait in the next
  // exchange for ever. Returns `status` where there is nothing to abort.
  int end(int status);

 private:
  bool started_ = false;
  std::string problem_;
};

// The run as this rank runs it: only rank 0 writes the metrics and the model. What cannot be spread yet
// is refused by name with more than one rank: secure aggregation (the devices' masked encodings are not
// exchanged) and checkpoints (one writer, and every rank would resume from it).
[[nodiscard]] core::result<sim_config> for_this_rank(const sim_config& c);

}  // namespace tessera::sim
