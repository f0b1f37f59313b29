// The rendezvous master's first round (init()): rank 0 admits the other
// ranks' connections concurrently, on one Asio event loop, with sinkd's
// admission rules (runtime/admission.h): every connection is pending until
// it has said Hello and proven the token (the challenge of runtime/auth.h,
// wire protocol 1.5), pending ones have a short deadline and quotas per
// address and in all, and a stranger is refused alone: it never holds up,
// nor ends, the world. Only an authenticated rank of this job that
// contradicts the world (its size, a rank claimed twice) ends it. With TLS
// (MasterSetup::tls) every connection's handshake runs first, on the same
// loop and within the same deadline, and what follows travels encrypted.
#pragma once

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/src/wire_socket.h"
#include "sinkrt/runtime/admission.h"
#include "sinkrt/runtime/status.h"
#include "sinkrt/runtime/tls.h"

namespace sinkrt::host {

// The label every proof of the master's handshake is made under.
inline constexpr const char* kMasterAuthLabel = "sinkrt rendezvous master 1";

struct MasterSetup {
  std::string where;   // the master's address, for messages
  std::string token;   // empty: the handshake runs with an empty key
  std::string job_id;  // the job this master serves
  uint32_t world_size = 1;
  std::chrono::milliseconds timeout{0};        // until every rank has joined
  std::chrono::milliseconds hello_timeout{0};  // for each connection to say Hello and prove the token
  PendingQuotas quotas;
  std::shared_ptr<const TlsContext> tls;  // a server context: every rank speaks TLS; null: plain
};

// Accepts on `acceptor` (bound, listening, on `io`) until ranks 1..n-1 have
// all joined round 0, filling `ranks` (by rank; their sockets live on `io`).
// Fails with the verdict every joined rank must hear: the ranks missing at
// the deadline (and who was refused meanwhile), or the first authenticated
// join that contradicts the world, which has been told already.
Status GatherRanks(asio::io_context& io, asio::ip::tcp::acceptor& acceptor, const MasterSetup& setup,
                   std::vector<std::unique_ptr<FrameSocket>>& ranks);

}  // namespace sinkrt::host
