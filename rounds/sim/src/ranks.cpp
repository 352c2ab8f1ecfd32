#include "ranks.hpp"

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

#if TESSERA_WITH_MPI
#include <mpi.h>
#endif

namespace tessera::sim {
namespace {

ranks& the_world() noexcept {
  static ranks w;
  return w;
}

}  // namespace

const ranks& ranks::world() noexcept { return the_world(); }

rank_scope::rank_scope([[maybe_unused]] int& argc, [[maybe_unused]] char**& argv) {
#if TESSERA_WITH_MPI
  // Only under a launcher: a plain run never starts MPI (nor pays for its start-up).
  if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr && std::getenv("PMIX_RANK") == nullptr) return;
  int rank = 0, size = 1;
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) return;
  started_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ranks& w = the_world();
  w.rank_ = static_cast<std::size_t>(rank);
  w.size_ = static_cast<std::size_t>(size);
#endif
}

rank_scope::~rank_scope() {
#if TESSERA_WITH_MPI
  if (started_) MPI_Finalize();
#endif
}

core::result<std::vector<std::byte>> ranks::all_gather(std::span<const std::byte> mine) const {
  if (size_ == 1) return std::vector<std::byte>(mine.begin(), mine.end());
#if TESSERA_WITH_MPI
  // MPI counts are ints: a rank's share of one exchange stays below 2 GiB.
  if (mine.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    return core::make_error(core::errc::invalid_argument, "rank " + std::to_string(rank_) + " has " + std::to_string(mine.size()) +
                                                              " bytes of updates for one exchange, beyond MPI's 2 GiB");
  const int n = static_cast<int>(mine.size());
  std::vector<int> counts(size_), offsets(size_);
  if (MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD) != MPI_SUCCESS)
    return core::make_error(core::errc::io, "MPI_Allgather of the update sizes failed");
  std::int64_t total = 0;
  for (std::size_t r = 0; r < size_; ++r) {
    if (total > std::numeric_limits<int>::max()) return core::make_error(core::errc::invalid_argument, "one exchange beyond MPI's 2 GiB");
    offsets[r] = static_cast<int>(total);
    total += counts[r];
  }
  std::vector<std::byte> all(static_cast<std::size_t>(total));
  if (MPI_Allgatherv(mine.data(), n, MPI_BYTE, all.data(), counts.data(), offsets.data(), MPI_BYTE, MPI_COMM_WORLD) != MPI_SUCCESS)
    return core::make_error(core::errc::io, "MPI_Allgatherv of the updates failed");
  return all;
#else
  return core::make_error(core::errc::invalid_argument, "more than one rank without MPI");
#endif
}

}  // namespace tessera::sim
