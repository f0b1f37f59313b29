// The frames of the host processes' bootstrap (schemas/wire.fbs, RankJoin
// to WorldFormed), shared by the master (master.cc), the ranks dialing it
// (master_link.cc) and the rounds (process_group.cc).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/src/wire_socket.h"
#include "sinkrt/host/communication.h"

namespace sinkrt::host {

// What one RankJoin carries, as the sender fills it.
struct JoinMessage {
  uint32_t round = 0, rank = 0, world_size = 0;
  std::string job_id;
  std::span<const uint8_t> proof;  // round 0 of protocol 1.5: the rank's proof of the token
  std::vector<JoinField> fields;
  PeerEndpoint member;
};
Status SendJoin(FrameSocket& s, const JoinMessage& join);

// A received RankJoin, copied out of the frame.
struct Joined {
  uint32_t round = 0, rank = 0, world_size = 0, pid = 0;
  std::string job_id;
  std::vector<uint8_t> proof;
  PeerEndpoint member;
  std::vector<JoinField> fields;
};
Joined CopyJoin(const fb::RankJoin& j);
// Receives the next frame from `s` and requires a RankJoin; `who` names the sender in errors.
Result<Joined> ReadJoin(FrameSocket& s, Deadline deadline, const std::string& who);

Status SendFormed(FrameSocket& s, uint32_t round, const FormedWorld& world);
// Sends `st` as the master's Error frame; a rank that has left is no error.
void SendFailure(FrameSocket& s, const Status& st);
// The master's refusal as the master worded it: it already names the rank
// at fault, and every rank must report the same words.
Status Refusal(const fb::Error& error);

}  // namespace sinkrt::host
