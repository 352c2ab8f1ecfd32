// edge/src/train_local.hpp — `tessera-edge train-local`: a subnet trained on a local file inside a memory
// budget, with no network, so the runtime can be tried on a board alone. Part of the executable only.
#pragma once

#include "tessera/core/config/command.hpp"

namespace tessera::edge {

extern const core::command k_train_local_command;
[[nodiscard]] core::result<int> train_local(const core::command_line& line);

}  // namespace tessera::edge
