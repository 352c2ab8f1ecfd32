#include "tessera/edge/error.hpp"

namespace tessera::edge {
namespace {

constexpr int code(errc e) noexcept { return static_cast<int>(e); }

constexpr core::error_text k_texts[] = {
    {code(errc::bad_task), "bad_task", "the assignment's task is invalid"},
    {code(errc::inputs_mismatch), "inputs_mismatch", "the subnet's inputs differ from the data's features"},
    {code(errc::batch_too_large), "batch_too_large", "batch larger than the data reader allows"},
    {code(errc::codec_disabled), "codec_disabled", "codec not enabled on this device"},
    {code(errc::size_mismatch), "size_mismatch", "declared size is not the subnet's"},
    {code(errc::bad_download), "bad_download", "downloaded parameters are not usable"},
    {code(errc::training_failed), "training_failed", "training failed"},
    {code(errc::data_over_budget), "data_over_budget", "data buffers exceed the memory budget"},
};

}  // namespace

const std::error_category& edge_category() noexcept {
  static const core::table_category category("tessera.edge", k_texts);
  return category;
}

}  // namespace tessera::edge
