#include "host/src/link/world/join_frames.h"

#include <unistd.h>

namespace sinkrt::host {

Status SendJoin(FrameSocket& s, const JoinMessage& join) {
  flatbuffers::FlatBufferBuilder fbb(512);
  std::vector<flatbuffers::Offset<fb::JoinField>> fv;
  for (const JoinField& f : join.fields) fv.push_back(fb::CreateJoinFieldDirect(fbb, f.name.c_str(), f.value.c_str()));
  auto member = fb::CreateWorldMemberDirect(fbb, join.member.address.c_str(), join.member.host_id.c_str());
  auto fields = fbb.CreateVector(fv);
  auto proof = join.proof.empty() ? 0 : fbb.CreateVector(join.proof.data(), join.proof.size());
  auto job_id = join.job_id.empty() ? 0 : fbb.CreateString(join.job_id);
  fb::RankJoinBuilder b(fbb);
  b.add_round(join.round);
  b.add_rank(join.rank);
  b.add_world_size(join.world_size);
  b.add_member(member);
  b.add_fields(fields);
  b.add_pid(static_cast<uint32_t>(::getpid()));
  b.add_proof(proof);
  b.add_job_id(job_id);
  FinishMessage(fbb, fb::MessageBody::RankJoin, b.Finish().Union());
  return s.Send(fbb);
}

Joined CopyJoin(const fb::RankJoin& j) {
  Joined out;
  out.round = j.round();
  out.rank = j.rank();
  out.world_size = j.world_size();
  out.pid = j.pid();
  if (j.job_id()) out.job_id = j.job_id()->str();
  if (j.proof()) out.proof.assign(j.proof()->begin(), j.proof()->end());
  if (j.member()) {
    if (j.member()->address()) out.member.address = j.member()->address()->str();
    if (j.member()->host_id()) out.member.host_id = j.member()->host_id()->str();
  }
  if (j.fields())
    for (const fb::JoinField* f : *j.fields())
      out.fields.push_back({f->name() ? f->name()->str() : "", f->value() ? f->value()->str() : ""});
  return out;
}

Result<Joined> ReadJoin(FrameSocket& s, Deadline deadline, const std::string& who) {
  InFrame frame;
  Status st = s.Receive(&frame, deadline);
  if (!st.ok()) return st;
  if (frame.type() != fb::MessageBody::RankJoin || frame.payload_left != 0)
    return Unavailable(who + " sent " + MessageName(frame.type()) + ", not RankJoin");
  return CopyJoin(*frame.message->body_as_RankJoin());
}

Status SendFormed(FrameSocket& s, uint32_t round, const FormedWorld& world) {
  flatbuffers::FlatBufferBuilder fbb(512);
  std::vector<flatbuffers::Offset<fb::WorldMember>> mv;
  for (const PeerEndpoint& m : world.members)
    mv.push_back(fb::CreateWorldMemberDirect(fbb, m.address.c_str(), m.host_id.c_str()));
  FinishMessage(fbb, fb::MessageBody::WorldFormed,
                fb::CreateWorldFormed(fbb, round, world.job, fbb.CreateVector(mv)).Union());
  return s.Send(fbb);
}

void SendFailure(FrameSocket& s, const Status& st) {
  flatbuffers::FlatBufferBuilder fbb(512);
  ErrorContext context;
  context.rank = 0;
  BuildError(fbb, st, context);
  (void)s.Send(fbb);
}

Status Refusal(const fb::Error& error) {
  StatusCode code = static_cast<StatusCode>(error.code());
  if (code == StatusCode::kOk || error.code() > static_cast<uint8_t>(StatusCode::kPermissionDenied))
    code = StatusCode::kInternal;
  return Status(code, error.message() ? error.message()->str() : "(no message)");
}

}  // namespace sinkrt::host
