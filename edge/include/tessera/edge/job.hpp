// tessera/edge/job.hpp — one assignment on the device, from ASSIGN to RESULT, apart from any socket.
//
// check_assignment() is everything an ASSIGN must pass before the agent reserves memory for it: the
// task parses within bounds, the subnet's inputs match the data, the batch fits the data reader, the
// codec is enabled, secure aggregation is as the device allows and its part one the device can take
// (secure_round::check: segments and ring), the declared size is the subnet's size in that codec, and
// bytes_needed fits the budget (the arena is then reserved: one allocation, exactly that size). A job
// then moves through
//
//   downloading ──downloaded()──▶ training ──trained()──▶ uploading ──upload_sent()──▶ waiting_result
//        (values decoded and finite)    (UPDATE prepared)       (hub ACKed every byte)      │ RESULT
//                                           │                     ▲                         ▼ (dropped)
//                 secure aggregation: trained_secure() ▶ masking ─┘ masked(): once the shares are in
//
// and after a reconnect resumes where it stood (resume_action): a download continues from what it
// holds, an upload is announced again and continues from the hub's ACK, training goes on undisturbed.
// The transfers are handed out as aliasing pointers: a session holding one keeps the job, and so the
// arena its bytes live in, alive until it lets go (net::session::forget_blob makes it let go);
// when_released() says when the last holder did, so the next arena is reserved only after this one is
// gone.
//
//   auto j = edge::job::start(assign, limits);          // errc: why it is refused
//   session->expect_blob(j.value()->download());
//   ... on_blob_received: j->downloaded(); worker: j->train(data, &cancel); I/O thread: j->trained(...)
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "tessera/core/train/device_round.hpp"
#include "tessera/edge/arena.hpp"
#include "tessera/edge/device_data.hpp"
#include "tessera/edge/error.hpp"
#include "tessera/edge/privacy_budget.hpp"
#include "tessera/edge/secure_round.hpp"
#include "tessera/net/messages.hpp"
#include "tessera/net/transfer.hpp"

namespace tessera::edge {

// What this device can take: its data's shape, its reader's largest batch, its codecs, its memory.
struct device_limits {
  std::int64_t feature_count = 0;
  std::int64_t max_batch = 0;
  std::vector<core::codec_kind> codecs{};
  std::size_t arena_budget = 0;     // bytes for the training arena (the budget less the reader's buffers)
  // Whether the data's targets suit a model of this task and outputs (device_data::check_targets); unset:
  // not checked.
  std::function<core::result<void>(core::task_kind, std::int64_t)> check_targets{};
  std::string data_name{};          // the data, for messages
  bool requires_normalization = false;  // data.normalization standardize: the model must carry statistics
  // Secure aggregation: this device's identity for it (null: it refuses secure assignments), and whether
  // it refuses assignments without it.
  const secure_identity* secure = nullptr;
  bool require_secure = false;
  privacy_policy policy{};              // what this device lets the hub do (privacy_policy.hpp)
  privacy_budget* budget = nullptr;     // with privacy.max_epsilon: what this device has spent against the hub
};

// The assignment's task, or why this device refuses it (edge::errc; core::errc::over_budget when the
// subnet does not fit, with both numbers). inputs_mismatch and labels_mismatch mean the data does not
// suit the model at all: the hub stops assigning to the device until its data changes.
[[nodiscard]] core::result<core::training_task> check_assignment(const net::msg::assign& a, const device_limits& limits);

class job : public std::enable_shared_from_this<job> {
 public:
  enum class stage { downloading, training, masking, uploading, waiting_result };
  enum class resume_action { expect_download, wait, resend_upload };

  // Checks the assignment and reserves its arena.
  [[nodiscard]] static core::result<std::shared_ptr<job>> start(const net::msg::assign& a, const device_limits& limits);
  ~job();
  job(const job&) = delete;
  job& operator=(const job&) = delete;
  // `f` runs when the job, and so its arena, is gone (on the thread that let go of it last).
  void when_released(std::function<void()> f) { released_ = std::move(f); }

  [[nodiscard]] std::uint64_t round() const noexcept { return round_; }
  [[nodiscard]] std::uint64_t download_id() const noexcept { return download_id_; }
  [[nodiscard]] stage at() const noexcept { return at_; }
  [[nodiscard]] const core::training_task& task() const noexcept { return task_; }
  [[nodiscard]] core::codec_kind codec() const noexcept { return codec_; }
  [[nodiscard]] const training_arena& arena() const noexcept { return *arena_; }
  [[nodiscard]] std::span<const std::byte> blob() const noexcept { return blob_; }
  // The update once trained: the trained layers' part of the arena (core::update_region), which is the
  // whole blob unless the task froze layers.
  [[nodiscard]] std::span<const std::byte> update_blob() const noexcept { return upload_; }
  [[nodiscard]] const net::msg::update& update() const noexcept { return update_; }
  // An evaluating ASSIGN: the download is the whole model, scored instead of trained (in an arena of
  // core::plan_inference_memory), and answered with EVALUATION.
  [[nodiscard]] bool evaluates() const noexcept { return evaluate_; }
  // What to do on a new link.
  [[nodiscard]] resume_action on_reconnect() const noexcept;

  [[nodiscard]] std::shared_ptr<net::incoming_transfer> download() { return {shared_from_this(), &*download_state_}; }
  [[nodiscard]] std::shared_ptr<net::outgoing_transfer> upload() { return {shared_from_this(), &*upload_state_}; }
  [[nodiscard]] bool owns(const net::incoming_transfer* t) const noexcept { return t == &*download_state_; }
  [[nodiscard]] bool owns(const net::outgoing_transfer* t) const noexcept { return upload_state_ && t == &*upload_state_; }

  // The download arrived whole (the session checked its digest): decode it, or check it is finite.
  // → training; on error the stage stays.
  [[nodiscard]] core::result<void> downloaded();
  // Scores the downloaded model on the data's validation split (any thread; evaluating jobs only).
  [[nodiscard]] core::result<net::msg::evaluation> evaluate(device_data& data);
  // Trains and encodes the upload (any thread; the job's stage does not change).
  [[nodiscard]] core::result<core::local_training_report> train(core::batch_source& data, const std::atomic<bool>* cancel);
  // Back on the I/O thread with the report and the upload's digest: the UPDATE is ready. → uploading.
  void trained(const core::local_training_report& report, const net::digest& sha256);
  // The hub acknowledged every byte of the upload. → waiting_result.
  void upload_sent() noexcept;

  // Secure aggregation (ASSIGN{secure}): its protocol state, null otherwise.
  [[nodiscard]] secure_round* secure() noexcept { return secure_.get(); }
  // Trained: the report is kept until the shares are in. → masking.
  void trained_secure(const core::local_training_report& report);
  // Masks the trained parameters (secure_round::mask) and prepares the UPDATE. → uploading.
  [[nodiscard]] core::result<void> masked();
  // A private secure round whose training failed: on to masking with a zero change (secure_round::
  // withdraw), the UPDATE claiming the assigned steps, as any device's does.
  void training_failed_privately();
  // The mean loss of the training this job ran (a secure round's UPDATE does not carry it).
  [[nodiscard]] double trained_loss() const noexcept { return report_.mean_loss; }
  // The protocol state outlives the job (its unmasking comes after RESULT).
  [[nodiscard]] std::unique_ptr<secure_round> release_secure() noexcept { return std::move(secure_); }

 private:
  job() = default;
  // The UPDATE announcing `upload` and its transfer (with the loss and clipped count it may tell). → uploading.
  void prepare_upload(const core::local_training_report& r, std::span<const std::byte> upload, const net::digest& sha256,
                      std::optional<double> loss, std::uint64_t clipped);

  std::uint64_t round_ = 0;
  std::uint64_t download_id_ = 0;
  core::training_task task_;
  std::vector<float> received_;  // task_.clip_norm > 0: the parameters as downloaded (core::clip_bytes)
  core::codec_kind codec_ = core::codec_kind::f32;
  std::unique_ptr<training_arena> arena_;
  std::span<std::byte> blob_;    // where the blob lives in the arena: params (f32) or staging, after any frozen layers held encoded
  std::span<std::byte> upload_;  // where the update is written: blob_, less any frozen layers
  std::optional<net::incoming_transfer> download_state_;
  std::optional<net::outgoing_transfer> upload_state_;
  net::msg::update update_{};
  stage at_ = stage::downloading;
  bool evaluate_ = false;
  std::unique_ptr<secure_round> secure_;
  privacy_budget* budget_ = nullptr;      // with privacy.max_epsilon: spent into before the masked upload
  core::skellam_mechanism release_{};     // the round's release as this device counts it
  core::local_training_report report_{};
  std::function<void()> released_;
};

}  // namespace tessera::edge
