// Page-backed memory blocks for the arena and the queue slots.
//
// Memory comes straight from mmap, aligned to 2 MiB when large enough so
// that transparent huge pages can back it, and every page is touched at
// load: a first-touch fault costs ~10 µs per 4 KiB page on these virtual
// machines, which would otherwise land inside the first sink.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "sinkrt/runtime/status.h"

namespace sinkrt::device {

class PageBlock {
 public:
  PageBlock() = default;
  ~PageBlock();
  PageBlock(PageBlock&& other) noexcept;
  PageBlock& operator=(PageBlock&& other) noexcept;
  PageBlock(const PageBlock&) = delete;
  PageBlock& operator=(const PageBlock&) = delete;

  // Maps `bytes` (zeroed) aligned to at least 4096; pre-faults when asked.
  static Result<PageBlock> Allocate(size_t bytes, bool prefault);
  // Memory mapped by someone else and kept mapped while `keep` lives (the
  // arena a communicator shares with its peers): never unmapped here.
  static PageBlock Borrow(std::span<uint8_t> data, std::shared_ptr<void> keep);

  uint8_t* data() const { return data_; }
  size_t size() const { return bytes_; }

 private:
  void Release();

  uint8_t* data_ = nullptr;  // aligned start handed out
  size_t bytes_ = 0;
  void* map_ = nullptr;  // what mmap returned, for munmap; null when borrowed
  size_t map_bytes_ = 0;
  std::shared_ptr<void> keep_;  // borrowed memory's owner
};

}  // namespace sinkrt::device
