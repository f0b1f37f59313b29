#include "device/src/comm/transport/shm/shm_transport.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "device/src/sync/futex.h"

namespace sinkrt::device {

struct ShmRing {
  alignas(64) std::atomic<uint32_t> head;  // published by the sender
  std::atomic<uint32_t> receiver_sleeping;
  alignas(64) std::atomic<uint32_t> tail;  // released by the receiver
  std::atomic<uint32_t> sender_sleeping;
};

struct ShmSlotHeader {
  uint8_t op;
  uint8_t pad[3];
  uint32_t group;
  uint64_t seq;
  uint32_t segment;
  uint32_t bytes;
};

// One direction's DirectPair flags: the writer bumps `step` after filling
// the note; the reader sleeps on `step` when it has to.
struct ShmDirectCell {
  alignas(64) std::atomic<uint32_t> step;
  std::atomic<uint32_t> sleeping;
  uint64_t offset;
  uint64_t bytes;
  uint64_t seq;
  uint32_t group;
  uint32_t segment;
  uint8_t op;
  uint64_t generation;
};

// One direction's shared block, as its owner announces it.
struct ShmBlockCell {
  char name[64];
  uint64_t total_bytes;  // header page included
  uint64_t generation;
};

// The header page of a ShmBlock.
struct ShmBlockHeader {
  std::atomic<uint32_t> mapped;  // peers that hold a mapping
  uint32_t peers;                // peers that will
};

namespace {

constexpr uint32_t kShmMagic = 0x4D534B53;  // "SKSM"
constexpr uint32_t kShmVersion = 2;         // 2: the DirectPair cells
constexpr size_t kPage = 4096;
constexpr size_t kRingsOffset = 64;
constexpr size_t kDirectOffset = 1024;
constexpr size_t kBlockCellsOffset = 2048;
constexpr size_t kHeadersOffset = kPage;
constexpr auto kSleepSlice = std::chrono::milliseconds(20);

struct ShmPairHeader {
  uint32_t magic;
  uint32_t version;
  uint32_t window;
  uint32_t reserved;
  uint64_t slot_bytes;
};

size_t RoundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }
size_t Stride(size_t slot_bytes) { return RoundUp(std::max<size_t>(slot_bytes, 1), kPage); }
size_t DataOffset(int window) {
  return RoundUp(kHeadersOffset + 2 * static_cast<size_t>(window) * sizeof(ShmSlotHeader), kPage);
}

ShmRing* RingAt(uint8_t* base, int dir) { return reinterpret_cast<ShmRing*>(base + kRingsOffset) + dir; }
ShmDirectCell* DirectAt(uint8_t* base, int dir) { return reinterpret_cast<ShmDirectCell*>(base + kDirectOffset) + dir; }
ShmBlockCell* BlockCellAt(uint8_t* base, int dir) {
  return reinterpret_cast<ShmBlockCell*>(base + kBlockCellsOffset) + dir;
}

std::string Errno() { return std::strerror(errno); }

}  // namespace

size_t ShmPairBytes(int window, size_t slot_bytes) {
  return DataOffset(window) + 2 * static_cast<size_t>(window) * Stride(slot_bytes);
}

void InitShmPair(uint8_t* base, int window, size_t slot_bytes) {
  // A fresh object is zero-filled: counters and flags start at 0.
  static_assert(kRingsOffset + 2 * sizeof(ShmRing) <= kDirectOffset, "rings overlap the direct cells");
  static_assert(kDirectOffset + 2 * sizeof(ShmDirectCell) <= kBlockCellsOffset, "direct cells overlap the block cells");
  static_assert(kBlockCellsOffset + 2 * sizeof(ShmBlockCell) <= kHeadersOffset, "block cells overlap the slot headers");
  auto* h = reinterpret_cast<ShmPairHeader*>(base);
  h->window = static_cast<uint32_t>(window);
  h->slot_bytes = slot_bytes;
  h->version = kShmVersion;
  h->magic = kShmMagic;
}

Status CheckShmPair(const uint8_t* base, int window, size_t slot_bytes) {
  auto* h = reinterpret_cast<const ShmPairHeader*>(base);
  if (h->magic != kShmMagic || h->version != kShmVersion || h->window != static_cast<uint32_t>(window) ||
      h->slot_bytes != slot_bytes)
    return FailedPrecondition("the shared-memory object has another layout");
  return Status::Ok();
}

Result<std::unique_ptr<ShmRegion>> ShmRegion::Create(const std::string& name, size_t bytes) {
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return Unavailable("shm_open(" + name + "): " + Errno());
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    std::string e = Errno();
    ::close(fd);
    ::shm_unlink(name.c_str());
    return ResourceExhausted("sizing " + name + " to " + std::to_string(bytes) + " bytes: " + e);
  }
  // ftruncate only sets the size; a tmpfs too small for it would fail the
  // first touch with SIGBUS. Reserving the pages turns that into an error
  // here (a file system without fallocate keeps the old behaviour).
  if (int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    return ResourceExhausted("reserving " + std::to_string(bytes) + " bytes for " + name + ": " + std::strerror(rc));
  }
  // MAP_POPULATE pre-faults every page: a first touch in the middle of a
  // collective would cost ~10 us per page here.
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  std::string e = Errno();
  ::close(fd);
  if (p == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    return ResourceExhausted("mapping " + name + ": " + e);
  }
  return std::unique_ptr<ShmRegion>(new ShmRegion(static_cast<uint8_t*>(p), bytes));
}

Result<std::unique_ptr<ShmRegion>> ShmRegion::OpenAndUnlink(const std::string& name, size_t bytes) {
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return Unavailable("shm_open(" + name + "): " + Errno());
  ::shm_unlink(name.c_str());
  struct stat st;
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes) {
    ::close(fd);
    return FailedPrecondition(name + " is smaller than " + std::to_string(bytes) + " bytes");
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  std::string e = Errno();
  ::close(fd);
  if (p == MAP_FAILED) return ResourceExhausted("mapping " + name + ": " + e);
  return std::unique_ptr<ShmRegion>(new ShmRegion(static_cast<uint8_t*>(p), bytes));
}

ShmRegion::~ShmRegion() { ::munmap(base_, size_); }

void UnlinkShm(const std::string& name) { ::shm_unlink(name.c_str()); }

Result<ShmBlock> ShmBlock::Create(const std::string& name, size_t bytes, uint32_t peers) {
  if (name.size() >= sizeof(ShmBlockCell::name)) return InvalidArgument("shared block name too long: " + name);
  ShmBlock b;
  SINKRT_ASSIGN_OR_RETURN(b.region, ShmRegion::Create(name, kHeaderBytes + RoundUp(std::max<size_t>(bytes, 1), kPage)));
  b.name = name;
  reinterpret_cast<ShmBlockHeader*>(b.region->base())->peers = peers;
  return b;
}

std::span<uint8_t> ShmBlock::data() const { return {region->base() + kHeaderBytes, region->size() - kHeaderBytes}; }

ShmTransport::ShmTransport(uint32_t self, uint32_t peer, const ShmRegion& region, int window, size_t slot_bytes,
                           TcpLink& link, CommSignals& signals)
    : self_(self),
      peer_(peer),
      window_(static_cast<uint32_t>(window)),
      slot_bytes_(slot_bytes),
      link_(link),
      signals_(signals),
      stride_(Stride(slot_bytes)) {
  uint8_t* base = region.base();
  const int send_dir = self < peer ? 0 : 1;
  const int recv_dir = 1 - send_dir;
  send_ = RingAt(base, send_dir);
  recv_ = RingAt(base, recv_dir);
  auto* headers = reinterpret_cast<ShmSlotHeader*>(base + kHeadersOffset);
  send_headers_ = headers + send_dir * window;
  recv_headers_ = headers + recv_dir * window;
  uint8_t* data = base + DataOffset(window);
  send_slots_ = data + static_cast<size_t>(send_dir) * window * stride_;
  recv_slots_ = data + static_cast<size_t>(recv_dir) * window * stride_;
  direct_out_ = DirectAt(base, send_dir);
  direct_in_ = DirectAt(base, recv_dir);
  block_out_ = BlockCellAt(base, send_dir);
  block_in_ = BlockCellAt(base, recv_dir);
}

ShmTransport::~ShmTransport() { UnmapPeerBlock(); }

void ShmTransport::UnmapPeerBlock() {
  if (peer_header_) ::munmap(peer_header_, ShmBlock::kHeaderBytes);
  if (peer_data_) ::munmap(peer_data_, peer_data_bytes_);
  peer_header_ = peer_data_ = nullptr;
  peer_data_bytes_ = 0;
  peer_generation_ = 0;
}

void ShmTransport::PublishBlock(const std::string& name, size_t total_bytes, uint64_t generation) {
  std::snprintf(block_out_->name, sizeof block_out_->name, "%s", name.c_str());
  block_out_->total_bytes = total_bytes;
  block_out_->generation = generation;  // read by the peer only after a note naming it
}

Result<std::span<const uint8_t>> ShmTransport::PeerBlock(uint64_t generation) {
  if (generation != 0 && generation == peer_generation_) return std::span<const uint8_t>(peer_data_, peer_data_bytes_);
  // Published before the note that names it (the note's release store).
  const ShmBlockCell& cell = *block_in_;
  if (generation == 0 || cell.generation != generation)
    return Internal("rank " + std::to_string(peer_) + " names shared block " + std::to_string(generation) +
                    ", but announced " + std::to_string(cell.generation));
  char name[sizeof cell.name];
  std::memcpy(name, cell.name, sizeof name);
  name[sizeof name - 1] = '\0';
  const size_t total = cell.total_bytes;
  UnmapPeerBlock();
  int fd = ::shm_open(name, O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0)
    return Unavailable(std::string("mapping rank ") + std::to_string(peer_) + "'s block " + name + ": " + Errno());
  struct stat st;
  void* header = MAP_FAILED;
  void* data = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= total && total > ShmBlock::kHeaderBytes) {
    header = ::mmap(nullptr, ShmBlock::kHeaderBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    // Pre-faulted: the op that maps it reads every page next.
    data = ::mmap(nullptr, total - ShmBlock::kHeaderBytes, PROT_READ, MAP_SHARED | MAP_POPULATE, fd,
                  static_cast<off_t>(ShmBlock::kHeaderBytes));
  }
  const std::string e = Errno();
  ::close(fd);
  if (header == MAP_FAILED || data == MAP_FAILED) {
    if (header != MAP_FAILED) ::munmap(header, ShmBlock::kHeaderBytes);
    if (data != MAP_FAILED) ::munmap(data, total - ShmBlock::kHeaderBytes);
    return ResourceExhausted(std::string("mapping rank ") + std::to_string(peer_) + "'s block " + name + " of " +
                             std::to_string(total) + " bytes: " + e);
  }
  peer_header_ = static_cast<uint8_t*>(header);
  peer_data_ = static_cast<uint8_t*>(data);
  peer_data_bytes_ = total - ShmBlock::kHeaderBytes;
  peer_generation_ = generation;
  auto* h = reinterpret_cast<ShmBlockHeader*>(peer_header_);
  // The last of the owner's peers to map it removes the name.
  if (h->mapped.fetch_add(1, std::memory_order_acq_rel) + 1 >= h->peers) ::shm_unlink(name);
  return std::span<const uint8_t>(peer_data_, peer_data_bytes_);
}

template <typename Ready>
Status ShmTransport::Wait(std::atomic<uint32_t>* word, std::atomic<uint32_t>* sleeping, Ready ready, Deadline deadline,
                          bool sending) {
  if (SpinThenYield(ready)) return Status::Ok();
  signals_.BeforeSleep();
  WaitingOn waiting(signals_, peer_);
  for (;;) {
    if (ready()) return Status::Ok();
    if (signals_.aborted()) return Aborted("aborted");
    if (signals_.poisoned()) return signals_.poison();
    if (link_.closed()) return Unavailable("rank " + std::to_string(peer_) + " closed its connection");
    auto now = std::chrono::steady_clock::now();
    if (deadline && now >= *deadline)
      return DeadlineExceeded(sending ? "rank " + std::to_string(peer_) + " took no data"
                                      : "no data from rank " + std::to_string(peer_));
    auto slice = deadline ? std::min<std::chrono::nanoseconds>(*deadline - now, kSleepSlice) : kSleepSlice;
    uint32_t seen = word->load(std::memory_order_acquire);
    // Dekker with the other side's "publish, then look for a sleeper":
    // one of us sees the other's store.
    sleeping->store(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!ready()) FutexWait(word, seen, slice);
    sleeping->store(0, std::memory_order_relaxed);
  }
}

Result<uint64_t> ShmTransport::PostSend(const Tag& tag, std::span<const uint8_t> bytes, Deadline deadline) {
  if (bytes.size() > slot_bytes_)
    return Internal("a " + std::to_string(bytes.size()) + "-byte segment for a " + std::to_string(slot_bytes_) +
                    "-byte slot");
  auto has_room = [&] { return sent_ - send_->tail.load(std::memory_order_acquire) < window_; };
  if (!has_room()) SINKRT_RETURN_IF_ERROR(Wait(&send_->tail, &send_->sender_sleeping, has_room, deadline, true));
  const uint32_t slot = sent_ % window_;
  ShmSlotHeader& h = send_headers_[slot];
  h.op = static_cast<uint8_t>(tag.op);
  h.group = tag.group;
  h.seq = tag.seq;
  h.segment = tag.segment;
  h.bytes = static_cast<uint32_t>(bytes.size());
  if (!bytes.empty()) std::memcpy(send_slots_ + slot * stride_, bytes.data(), bytes.size());
  send_->head.store(++sent_, std::memory_order_seq_cst);
  if (send_->receiver_sleeping.load(std::memory_order_seq_cst)) FutexWakeAll(&send_->head);
  return ++posted_;
}

Result<std::span<const uint8_t>> ShmTransport::Receive(const Tag& tag, size_t bytes, Deadline deadline) {
  auto ready = [&] { return recv_->head.load(std::memory_order_acquire) != received_; };
  if (!ready()) SINKRT_RETURN_IF_ERROR(Wait(&recv_->head, &recv_->receiver_sleeping, ready, deadline, false));
  const uint32_t slot = received_ % window_;
  const ShmSlotHeader& h = recv_headers_[slot];
  Tag got{static_cast<OpKind>(h.op), h.group, h.seq, h.segment};
  if (!(got == tag)) return TagMismatch(self_, peer_, tag, got);
  if (h.bytes != bytes) return SizeMismatch(self_, peer_, tag, bytes, h.bytes);
  return std::span<const uint8_t>(recv_slots_ + slot * stride_, h.bytes);
}

void ShmTransport::Release() {
  recv_->tail.store(++received_, std::memory_order_seq_cst);
  if (recv_->sender_sleeping.load(std::memory_order_seq_cst)) FutexWakeAll(&recv_->tail);
}

void ShmTransport::Signal(const DirectNote* note) {
  if (note) {
    direct_out_->offset = note->offset;
    direct_out_->bytes = note->bytes;
    direct_out_->seq = note->tag.seq;
    direct_out_->group = note->tag.group;
    direct_out_->segment = note->tag.segment;
    direct_out_->generation = note->generation;
    direct_out_->op = static_cast<uint8_t>(note->tag.op);
  }
  direct_out_->step.store(++signaled_, std::memory_order_seq_cst);
  if (direct_out_->sleeping.load(std::memory_order_seq_cst)) FutexWakeAll(&direct_out_->step);
}

Result<DirectNote> ShmTransport::Await(Deadline deadline) {
  // The peer may be a point or two ahead (it signals "reduced" before we
  // look at its "arrived"), never a whole op: its next note waits for our
  // "done".
  auto ready = [&] { return static_cast<int32_t>(direct_in_->step.load(std::memory_order_acquire) - awaited_) > 0; };
  if (!ready()) SINKRT_RETURN_IF_ERROR(Wait(&direct_in_->step, &direct_in_->sleeping, ready, deadline, false));
  ++awaited_;
  DirectNote note;
  note.offset = direct_in_->offset;
  note.bytes = direct_in_->bytes;
  note.generation = direct_in_->generation;
  note.tag = Tag{static_cast<OpKind>(direct_in_->op), direct_in_->group, direct_in_->seq, direct_in_->segment};
  return note;
}

void ShmTransport::Wake() {
  FutexWakeAll(&recv_->head);
  FutexWakeAll(&send_->tail);
  FutexWakeAll(&direct_in_->step);
}

}  // namespace sinkrt::device
