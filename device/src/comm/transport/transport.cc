#include "device/src/comm/transport/transport.h"

namespace sinkrt::device {

const char* OpName(OpKind op) {
  switch (op) {
    case OpKind::kNone:
      return "(no op)";
    case OpKind::kAllReduce:
      return "AllReduce";
    case OpKind::kAllGather:
      return "AllGather";
    case OpKind::kReduceScatter:
      return "ReduceScatter";
    case OpKind::kBroadcast:
      return "Broadcast";
    case OpKind::kSend:
      return "Send";
    case OpKind::kRecv:
      return "Recv";
    case OpKind::kBarrier:
      return "Barrier";
    case OpKind::kAllToAll:
      return "AllToAll";
  }
  return "(unknown op)";
}

std::string TagText(const Tag& tag) {
  return std::string(OpName(tag.op)) + " #" + std::to_string(tag.seq) + " segment " + std::to_string(tag.segment);
}

Status TagMismatch(uint32_t self, uint32_t peer, const Tag& expected, const Tag& got) {
  std::string m = "rank " + std::to_string(self) + " expected " + TagText(expected) + " from rank " +
                  std::to_string(peer) + ", got " + TagText(got);
  if (got.group != expected.group && got.op == expected.op && got.seq == expected.seq) m += " of another group";
  return FailedPrecondition(m);
}

Status SizeMismatch(uint32_t self, uint32_t peer, const Tag& tag, size_t expected, size_t got) {
  return FailedPrecondition("rank " + std::to_string(self) + " expected " + std::to_string(expected) + " bytes in " +
                            TagText(tag) + " from rank " + std::to_string(peer) + ", got " + std::to_string(got) +
                            ": the ranks passed different sizes");
}

}  // namespace sinkrt::device
