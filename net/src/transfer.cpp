#include "tessera/net/transfer.hpp"

namespace tessera::net {

outgoing_transfer::outgoing_transfer(std::uint64_t id, std::span<const std::byte> data)
    : id_(id), data_(data), sha256_(crypto::sha256_of(data)) {}

outgoing_transfer::outgoing_transfer(std::uint64_t id, std::span<const std::byte> data, const digest& sha256)
    : id_(id), data_(data), sha256_(sha256) {}

incoming_transfer::incoming_transfer(std::uint64_t id, std::span<std::byte> dest, const digest& expected)
    : id_(id), dest_(dest), expected_(expected) {}

}  // namespace tessera::net
