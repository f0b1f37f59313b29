// A rank other than 0 dialing the rendezvous master (wire protocol 1.5):
// Hello with its nonce, the master's Challenge checked (its proof of the
// token, the job it serves), then round 0's RankJoin with the rank's own
// proof. Whatever answers that is not a master of this job is named: a
// sinkd, another job's master, a program speaking something else.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "runtime/src/wire_socket.h"
#include "sinkrt/host/communication.h"

namespace sinkrt::host {

// Round 0 of a rank other than 0 (init()): dials, proves itself and waits
// for the master's WorldFormed; returns the connection for later rounds.
// `job_id` in: this rank's own (may be empty); out: the master's. A master
// over its quotas of pending connections closes the oldest with
// ResourceExhausted; the rank then dials again while its timeout allows.
Result<std::unique_ptr<FrameSocket>> JoinMaster(const ProcessGroup::Options& options, std::string* job_id);

}  // namespace sinkrt::host
