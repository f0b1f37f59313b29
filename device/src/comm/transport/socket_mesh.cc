#include "comm/transport/socket_mesh.h"

#include "comm/transport/tcp/tcp_transport.h"

namespace sinkrt::device {

SocketMesh::SocketMesh(uint32_t rank, uint32_t size, int window, size_t slot_bytes, CommSignals& signals)
    : rank_(rank), window_(window), slot_bytes_(slot_bytes), signals_(signals), peers_(size) {}

SocketMesh::~SocketMesh() {
  // The I/O thread reads the links: stop it before they go.
  if (engine_) engine_->Stop();
  peers_.clear();
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
