// Communicator::ShareMemory: every rank's block, mapped by every other.
//
//   1. The world agrees that it can share: every peer is on this host and
//      its pair shares memory (an AllReduce of a flag, Min), else every
//      rank returns an empty span.
//   2. Each rank creates its object (mode 0600, reserved, pre-faulted) and
//      the world gathers every object's name and size.
//   3. Each rank maps every peer's object read-only (pre-faulted too: the
//      first read of a page must not fault inside a collective), then the
//      world agrees that all of them did (Min again). That agreement is
//      also the point after which no one opens a name any more, so each
//      rank removes its own name there, whatever happened: nothing is
//      left in /dev/shm once both sides hold a mapping, or once they gave
//      up.
//
// All-or-nothing, because the direct AllReduce needs every member's
// buffer: a world where one pair could not map would have ranks disagree
// on the schedule. The construction layer (rendezvous/): it sees the
// concrete shm region and the communicator's state.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>

#include "comm/comm_state.h"
#include "comm/transport/shm/shm_transport.h"

namespace sinkrt::device {
namespace {

constexpr size_t kPage = 4096;

// What each rank tells the others about its block.
struct BlockRecord {
  char name[64];
  uint64_t bytes;
  uint32_t ok;
  uint32_t reserved;
};

struct SharedMappings {
  std::unique_ptr<ShmRegion> own;
  std::vector<std::unique_ptr<ShmRegion>> peers;  // by world rank
};

std::string BlockName(uint64_t job, uint32_t rank) {
  static std::atomic<uint64_t> counter{0};
  char buf[64];
  std::snprintf(buf, sizeof buf, "/sinkrt-blk-%llx-%u-%d-%llu", static_cast<unsigned long long>(job), rank,
                static_cast<int>(::getpid()), static_cast<unsigned long long>(counter.fetch_add(1)));
  return buf;
}

template <typename T>
std::span<uint8_t> BytesOf(T& v) {
  return {reinterpret_cast<uint8_t*>(&v), sizeof v};
}

}  // namespace

Result<std::span<uint8_t>> Communicator::ShareMemory(size_t bytes) {
  State& s = *state_;
  const uint32_t n = s.size;
  if (n == 1) return std::span<uint8_t>();
  const Group world = Group::World(n);

  int32_t can = s.options.use_shared_memory ? 1 : 0;
  for (uint32_t p = 0; p < n; ++p)
    if (p != s.rank && !s.mesh->direct(p)) can = 0;
  SINKRT_RETURN_IF_ERROR(AllReduce(BytesOf(can), DType::I32, ReduceOp::Min, world));
  if (!can) return std::span<uint8_t>();

  auto mappings = std::make_shared<SharedMappings>();
  mappings->peers.resize(n);
  BlockRecord mine{};
  const std::string name = BlockName(s.job, s.rank);
  const size_t rounded = std::max<size_t>((bytes + kPage - 1) / kPage * kPage, kPage);
  auto own = ShmRegion::Create(name, rounded);
  if (own.ok()) {
    mappings->own = std::move(own).value();
    std::snprintf(mine.name, sizeof mine.name, "%s", name.c_str());
    mine.bytes = rounded;
    mine.ok = 1;
  }
  std::vector<BlockRecord> all(n);
  Status st = AllGather(BytesOf(mine), std::span(reinterpret_cast<uint8_t*>(all.data()), n * sizeof(BlockRecord)),
                        world);
  int32_t mapped = st.ok() ? 1 : 0;
  for (uint32_t p = 0; mapped && p < n; ++p) {
    if (!all[p].ok) mapped = 0;
    if (p == s.rank || !mapped) continue;
    all[p].name[sizeof all[p].name - 1] = '\0';
    auto peer = ShmRegion::Open(all[p].name, all[p].bytes, /*writable=*/false);
    if (peer.ok())
      mappings->peers[p] = std::move(peer).value();
    else
      mapped = 0;
  }
  if (st.ok()) st = AllReduce(BytesOf(mapped), DType::I32, ReduceOp::Min, world);
  if (mappings->own) UnlinkShm(name);
  SINKRT_RETURN_IF_ERROR(st);
  if (!mapped) return std::span<uint8_t>();

  // Replaces the last blocks: their users (the last executor) are gone,
  // and every peer is past its last op on them.
  s.shared_peers.assign(n, {});
  for (uint32_t p = 0; p < n; ++p)
    if (p != s.rank) s.shared_peers[p] = {mappings->peers[p]->base(), all[p].bytes};
  s.direct.assign(n, nullptr);
  for (uint32_t p = 0; p < n; ++p)
    if (p != s.rank) s.direct[p] = s.mesh->direct(p);
  s.direct_sources.assign(n, nullptr);
  s.shared_own = {mappings->own->base(), bytes};
  s.shared_mappings = std::move(mappings);
  return s.shared_own;
}

uint64_t Communicator::direct_allreduces() const { return state_->direct_allreduces; }

}  // namespace sinkrt::device
