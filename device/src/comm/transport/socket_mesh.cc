#include "device/src/comm/transport/socket_mesh.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "device/src/comm/transport/tcp/tcp_transport.h"

namespace sinkrt::device {

SocketMesh::SocketMesh(uint32_t rank, uint32_t size, int window, size_t slot_bytes, CommSignals& signals)
    : rank_(rank), window_(window), slot_bytes_(slot_bytes), signals_(signals), peers_(size) {}

SocketMesh::~SocketMesh() {
  // The I/O thread reads the links: stop it before they go. The engine
  // goes with it: its destructor still unhooks itself from every link, so
  // destroyed after them (as a member would be) it wrote into freed links
  // (a crash seen tearing down 32 ranks at once under load).
  engine_.reset();
  peers_.clear();
  if (block_) UnlinkShm(block_->name);  // a peer that never mapped it left the name
}

Result<SharedMemory> SocketMesh::ShareBlock(size_t bytes, uint64_t job, uint64_t generation) {
  uint32_t peers = 0;
  for (auto& p : peers_)
    if (p.shm) ++peers;
  // The pid and a counter keep names apart between worlds in one process
  // (tests) and from a crashed run's leftovers.
  static std::atomic<uint64_t> counter{0};
  char name[64];
  std::snprintf(name, sizeof name, "/sinkrt-blk-%llx-%u-%d-%llu", static_cast<unsigned long long>(job), rank_,
                static_cast<int>(::getpid()), static_cast<unsigned long long>(counter.fetch_add(1)));
  if (block_) UnlinkShm(block_->name);
  block_.reset();
  SINKRT_ASSIGN_OR_RETURN(ShmBlock block, ShmBlock::Create(name, bytes, peers));
  block_ = std::make_shared<ShmBlock>(std::move(block));
  for (auto& p : peers_)
    if (p.shm) p.shm->PublishBlock(block_->name, block_->region->size(), generation);
  return SharedMemory{block_->data().first(bytes), block_};
}

void SocketMesh::AddPeer(uint32_t peer, std::unique_ptr<FrameSocket> socket, std::unique_ptr<ShmRegion> region) {
  Peer& e = peers_[peer];
  e.region = std::move(region);
  TcpLink::Params lp;
  lp.self = rank_;
  lp.peer = peer;
  lp.window = window_;
  lp.slot_bytes = slot_bytes_;
  lp.carries_data = !e.region;
  e.link = std::make_unique<TcpLink>(lp, std::move(socket), signals_);
  if (e.region) {
    e.shm = std::make_unique<ShmTransport>(rank_, peer, *e.region, window_, slot_bytes_, *e.link, signals_);
    ShmTransport* shm = e.shm.get();
    e.link->SetEventHook([shm] { shm->Wake(); });
    signals_.AddWaker([shm] { shm->Wake(); });
    e.transport = shm;
  } else {
    e.tcp = std::make_unique<TcpTransport>(*e.link);
    e.transport = e.tcp.get();
  }
  TcpLink* link = e.link.get();
  signals_.AddWaker([link] { link->WakeWaiters(); });
  if (lp.carries_data) signals_.AddBeforeSleep([link] { link->StopReading(); });
}

Status SocketMesh::Start() {
  std::vector<TcpLink*> links;
  for (auto& p : peers_)
    if (p.link) links.push_back(p.link.get());
  engine_ = std::make_unique<TcpEngine>(std::move(links));
  SINKRT_RETURN_IF_ERROR(engine_->Start());
  TcpEngine* engine = engine_.get();
  signals_.AddWaker([engine] { engine->WakeOp(); });  // an op thread asleep in OpSleep
  return Status::Ok();
}

void SocketMesh::SendNotice(const std::string& text) {
  for (auto& p : peers_)
    if (p.link) p.link->SendNotice(text);
}

void SocketMesh::Close(bool drain, bool await_eof, Deadline until) {
  if (!engine_) return;
  if (drain) {
    for (auto& p : peers_)
      if (p.link) p.link->Drain(until);
  }
  for (auto& p : peers_)
    if (p.link) p.link->ShutdownWrite();
  if (await_eof) {
    for (auto& p : peers_)
      if (p.link) p.link->AwaitEof(until);
  }
  engine_->Stop();
}

}  // namespace sinkrt::device
