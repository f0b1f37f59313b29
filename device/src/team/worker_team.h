// WorkerTeam: the compute threads of a device beyond the one that drives
// its sink, for kernels that split their work into parts.
//
// Run(parts, fn) runs fn(0) on the calling thread and fn(p) on worker p, all
// at once, and returns when every part is done. Parts are fixed by the
// kernel at load (rows of a matmul, a range of an update), never by timing,
// so a step computes the same bits on every run. Which thread runs a part
// may vary: a worker claims its part when it wakes, and the caller, its own
// part done, runs every part still unclaimed rather than wait for a worker
// that is asleep or whose core another process holds. A kernel's part
// therefore keeps its state per part (scratch, oneDNN stream), not per
// thread.
//
// Why not OpenMP: oneDNN's OpenMP team waits passively here (DESIGN §5: a
// spinning team on 2 cores starves the feeder and the comm thread), and
// waking a passive worker costs tens of µs per parallel region on these
// VMs, about as much as a small matmul's whole work (bench/team_bench
// measures both). A worker here polls for a bounded while after its part,
// since the next split kernel of a step follows within microseconds, and
// only then sleeps on a futex: inside a step the hand-off is a cache line,
// between sinks the workers cost nothing. After its first 2 µs the poll
// yields the core at every turn, since a pure spin starves whatever else
// must run on 2 cores, and stops yielding for a while once a yield lost the
// core to another process (sync/futex.h, SpinThenYield).
//
// One caller at a time (the thread running the compute stream). No
// allocation after construction.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

namespace sinkrt::device {

// Pins the calling thread to one core; false if the system refused.
bool PinToCore(int core);

class WorkerTeam {
 public:
  // `size` threads in all, counting the caller (size - 1 workers start
  // here). `spin_ns`: how long a worker polls for the next part, and the
  // caller for the workers' ends, before sleeping. `cores`, if not empty:
  // worker p is pinned to cores[p % cores.size()] (cores[0] is the
  // caller's, which the caller pins itself).
  WorkerTeam(int size, int64_t spin_ns, std::vector<int> cores = {});
  ~WorkerTeam();
  WorkerTeam(const WorkerTeam&) = delete;
  WorkerTeam& operator=(const WorkerTeam&) = delete;

  int size() const { return size_; }

  // fn(part) for every part in [0, parts), parts <= size(); `fn` must not
  // throw. With one part (or a team of one) it is a plain call.
  template <typename F>
  void Run(int parts, F&& fn) {
    if (parts <= 1 || size_ <= 1) {
      fn(0);
      return;
    }
    RunParts(
        parts, [](void* f, int part) { (*static_cast<std::remove_reference_t<F>*>(f))(part); }, &fn);
  }

 private:
  using PartFn = void (*)(void*, int);
  void RunParts(int parts, PartFn fn, void* arg);
  void WorkerLoop(int index);
  // True for the one thread that takes `part` in `generation`.
  bool Claim(int part, uint32_t generation);

  std::vector<int> cores_;
  const int size_;
  const int64_t spin_ns_;
  // The job of the current generation, written before generation_ moves.
  PartFn fn_ = nullptr;
  void* arg_ = nullptr;
  int parts_ = 0;
  bool quit_ = false;
  // Per part, the generation that claimed it last.
  std::unique_ptr<std::atomic<uint32_t>[]> claims_;
  // Futex words: workers wait for generation_ to move, the caller for
  // done_ (parts finished in this generation) to reach parts_.
  alignas(64) std::atomic<uint32_t> generation_{0};
  std::atomic<uint32_t> sleepers_{0};
  alignas(64) std::atomic<uint32_t> done_{0};
  std::atomic<uint32_t> caller_sleeping_{0};
  std::vector<std::thread> workers_;
};

}  // namespace sinkrt::device
