// A bounded shuffle buffer over a stream: approximate shuffling for data that has no random access.
//
// The buffer holds up to `capacity` examples in slots [0, filled_). Each example handed out is drawn
// uniformly from the filled slots; its slot is refilled with the next example of the stream or, once the
// stream has ended, given the last filled slot's example (so [0, filled_) stays dense). When the buffer
// is empty and the stream has ended, the stream is rewound: a new epoch.
//
//   filling ──(buffer full)──> drawing & refilling ──(stream ends)──> draining ──(empty)──> rewind ─┐
//      ^                                                                                            │
//      └────────────────────────────────────────────────────────────────────────────────────────────┘
//
// Because the buffer drains completely before the rewind, every epoch hands out each example of the
// stream exactly once. Each draw uses its own generator, seeded from (seed, draw number), so the order
// depends only on the seed and the data.
#include <cstring>
#include <limits>
#include <utility>

#include "tessera/core/base/rng.hpp"
#include "tessera/core/train/train.hpp"

namespace tessera::core {

shuffled_stream_batches::shuffled_stream_batches(example_stream& stream, std::size_t capacity, std::uint64_t seed)
    : stream_(stream), capacity_(capacity), seed_(seed) {
  TESSERA_ASSERT(capacity_ >= 1);
  const std::int64_t features = stream_.feature_count();
  TESSERA_ASSERT(features > 0);
  const auto f = static_cast<std::size_t>(features);
  TESSERA_ASSERT(capacity_ <= std::numeric_limits<std::size_t>::max() / sizeof(float) / (f + 1));
  features_.resize(capacity_ * f);
  targets_.resize(capacity_);
}

std::size_t shuffled_stream_batches::buffer_bytes() const noexcept {
  return (features_.size() + targets_.size()) * sizeof(float);
}

result<void> shuffled_stream_batches::next(std::span<float> features, std::span<float> targets) {
  const auto f = static_cast<std::size_t>(stream_.feature_count());
  TESSERA_ASSERT(features.size() >= targets.size() * f);

  // Reads into the free slots [filled_, capacity_) until they are full or the stream ends.
  const auto fill = [&]() -> result<void> {
    while (filled_ < capacity_ && !stream_ended_) {
      TESSERA_ASSIGN_OR_RETURN(const std::size_t got,
                               stream_.read(std::span(features_).subspan(filled_ * f, (capacity_ - filled_) * f),
                                            std::span(targets_).subspan(filled_)));
      TESSERA_ASSERT(got <= capacity_ - filled_);
      if (got == 0) stream_ended_ = true;
      filled_ += got;
    }
    return {};
  };

  for (std::size_t k = 0; k < targets.size(); ++k) {
    TESSERA_TRY(fill());
    if (filled_ == 0) {
      // The epoch is over: the stream ended and the buffer is drained.
      TESSERA_TRY(stream_.rewind());
      stream_ended_ = false;
      TESSERA_TRY(fill());
      // A stream that yields nothing right after a rewind would make this loop spin forever.
      if (filled_ == 0)
        return make_error(errc::bad_format, stream_.describe() + ": no examples; a shuffled batch source needs "
                                                                 "at least one");
    }
    rng r(mix_seed(seed_, draws_++));
    const auto slot = static_cast<std::size_t>(r.below(filled_));
    std::memcpy(features.data() + k * f, features_.data() + slot * f, f * sizeof(float));
    targets[k] = targets_[slot];

    // Empties `slot`, keeping [0, filled_) dense by moving the last filled slot into the hole.
    const auto release = [&] {
      const std::size_t last = filled_ - 1;
      if (slot != last) {
        std::memcpy(features_.data() + slot * f, features_.data() + last * f, f * sizeof(float));
        targets_[slot] = targets_[last];
      }
      filled_ = last;
    };
    if (!stream_ended_) {
      auto got = stream_.read(std::span(features_).subspan(slot * f, f), std::span(targets_).subspan(slot, 1));
      if (!got) {
        release();  // the slot was handed out and may be half-overwritten: it must not be drawn again
        return std::move(got).error();
      }
      if (got.value() == 1) continue;
      stream_ended_ = true;
    }
    release();
  }
  return {};
}

}  // namespace tessera::core
