#include "device/src/arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace sinkrt::device {
namespace {
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kPage = 4096;
}  // namespace

PageBlock::~PageBlock() { Release(); }

PageBlock::PageBlock(PageBlock&& o) noexcept { *this = std::move(o); }

PageBlock& PageBlock::operator=(PageBlock&& o) noexcept {
  if (this != &o) {
    Release();
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    keep_ = std::move(o.keep_);
  }
  return *this;
}

void PageBlock::Release() {
  if (map_) munmap(map_, map_bytes_);
  keep_.reset();
  map_ = nullptr;
  data_ = nullptr;
  bytes_ = map_bytes_ = 0;
}

PageBlock PageBlock::Borrow(std::span<uint8_t> data, std::shared_ptr<void> keep) {
  PageBlock b;
  b.data_ = data.data();
  b.bytes_ = data.size();
  b.keep_ = std::move(keep);
  return b;
}

Result<PageBlock> PageBlock::Allocate(size_t bytes, bool prefault) {
  PageBlock b;
  if (bytes == 0) return b;
  const bool huge = bytes >= kHugePage;
  const size_t align = huge ? kHugePage : kPage;
  const size_t rounded = (bytes + align - 1) / align * align;
  const size_t map_bytes = rounded + (huge ? kHugePage : 0);
  void* p = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return ResourceExhausted("cannot map " + std::to_string(bytes) + " bytes: " + std::strerror(errno));
  b.map_ = p;
  b.map_bytes_ = map_bytes;
  uintptr_t start = (reinterpret_cast<uintptr_t>(p) + align - 1) / align * align;
  b.data_ = reinterpret_cast<uint8_t*>(start);
  b.bytes_ = bytes;
#ifdef MADV_HUGEPAGE
  // Advisory: without THP support this fails harmlessly.
  if (huge) madvise(b.data_, rounded, MADV_HUGEPAGE);
#endif
  if (prefault) {
    // A write per page forces the kernel to back it now, not inside a sink.
    volatile uint8_t* q = b.data_;
    for (size_t off = 0; off < rounded; off += kPage) q[off] = 0;
  }
  return b;
}

}  // namespace sinkrt::device
