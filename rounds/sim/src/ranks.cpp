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
  const char* launched = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (launched == nullptr) return;  // a plain run never starts MPI (nor pays for its start-up)
  const bool several = std::strtol(launched, nullptr, 10) > 1;
#if TESSERA_WITH_MPI
  int rank = 0, size = 1;
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
    if (several) problem_ = "mpirun started " + std::string(launched) + " processes, but MPI_Init failed in this one";
    return;
  }
  started_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ranks& w = the_world();
  w.rank_ = static_cast<std::size_t>(rank);
  w.size_ = static_cast<std::size_t>(size);
#else
  if (several)
    problem_ = "mpirun started " + std::string(launched) + " processes, but this tessera-sim was built without MPI (install libopenmpi-dev and "
               "configure again): each would run the whole simulation into the same files";
#endif
}

int rank_scope::end(int status) {
#if TESSERA_WITH_MPI
  if (status != 0 && started_ && ranks::world().size() > 1) MPI_Abort(MPI_COMM_WORLD, status);
#endif
  return status;
}

rank_scope::~rank_scope() {
#if TESSERA_WITH_MPI
  if (started_) MPI_Finalize();
#endif
}

core::result<std::vector<std::byte>> ranks::all_gather(std::span<const std::byte> mine) const {
  if (size_ == 1) return std::vector<std::byte>(mine.begin(), mine.end());
#if TESSERA_WITH_MPI
  // MPI counts are ints: a rank's share of one exchange stays below 2 GiB. One beyond it says so to every
  // rank (a count of -1), so that all of them fail together rather than wait for each other.
  const bool fits = mine.size() <= static_cast<std::size_t>(std::numeric_limits<int>::max());
  const int n = fits ? static_cast<int>(mine.size()) : -1;
  std::vector<int> counts(size_), offsets(size_);
  if (MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD) != MPI_SUCCESS)
    return core::make_error(core::errc::io, "MPI_Allgather of the update sizes failed");
  for (std::size_t r = 0; r < size_; ++r)
    if (counts[r] < 0)
      return core::make_error(core::errc::invalid_argument, "rank " + std::to_string(r) + " has more than 2 GiB of updates for one exchange (MPI's limit)");
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
