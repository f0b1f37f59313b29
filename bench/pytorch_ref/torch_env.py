"""The PyTorch configurations compare_pytorch times, and "PyTorch best".

A configuration is what a PyTorch user can change without touching the
model: the torch thread count and environment variables. For a row with n
threads (the run confined to n cores) the candidates are every combination
of

  OPENBLAS_CORETYPE      as set in this environment | unset
  GLIBC_TUNABLES         glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296 | not set
  OPENBLAS_NUM_THREADS   1 | n
  torch threads          1 | 2 (those <= n: a confined run gains nothing from more threads than cores)

plus "as-is" (n torch threads, the environment untouched) and DESIGN §7's
"tuned" environment (passive OpenMP, glibc malloc variables, BLAS and OpenMP
threads = n). Candidates that come out identical are timed once. "PyTorch
best" for the row is the candidate with the highest median samples/s.
"""

import os

GLIBC_TUNED = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296"

# DESIGN §7's "tuned": what environment variables alone buy a PyTorch user —
# OpenMP waits passively (a spinning team beside OpenBLAS's threads on 2
# cores runs 3-4x slower), glibc keeps freed memory (no mmap/munmap and page
# faults per tensor), and BLAS runs as many threads as torch.
def design_tuned(threads):
    return {"OMP_WAIT_POLICY": "PASSIVE", "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
            "MALLOC_TRIM_THRESHOLD_": str(1 << 32), "MALLOC_TOP_PAD_": str(64 << 20),
            "OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}


class Config:
    """torch threads, plus variables to set and to remove."""

    def __init__(self, name, torch_threads, set_=None, unset=()):
        self.name, self.torch_threads = name, torch_threads
        self.set, self.unset = dict(set_ or {}), tuple(unset)

    def env(self, base):
        env = {k: v for k, v in base.items() if k not in self.unset}
        env.update(self.set)
        return env

    def key(self, base):
        return self.torch_threads, tuple(sorted(self.env(base).items()))

    def describe(self, base):
        """What differs from `base`, e.g. "1 torch thr, OPENBLAS_NUM_THREADS=1, -OPENBLAS_CORETYPE"."""
        if self.name != "grid":
            return f"{self.name} ({self.torch_threads} torch thr)"
        parts = [f"{self.torch_threads} torch thr"]
        env = self.env(base)
        for k in sorted(set(env) | set(base)):
            if k not in env:
                parts.append(f"-{k}")
            elif base.get(k) != env[k]:
                parts.append(f"{k}={env[k]}" if k != "GLIBC_TUNABLES" else "GLIBC_TUNABLES(malloc)")
        return ", ".join(parts)


def candidates(threads, search, base=None):
    """The configurations for a row of `threads` cores; the first is as-is.
    search: "full" (the grid above), "quick" (as-is, DESIGN's tuned, and the
    grid's all-knobs-on corner at n torch threads) or "off" (as-is only)."""
    base = dict(os.environ if base is None else base)
    out = [Config("as-is", threads)]
    if search == "off":
        return out
    out.append(Config("DESIGN tuned", threads, design_tuned(threads)))
    coretypes = [False, True] if "OPENBLAS_CORETYPE" in base else [False]
    if search == "quick":
        grid = [(True, True, 1, threads)]
        coretypes = coretypes[-1:]
    else:
        torch_threads = [t for t in (1, 2) if t <= threads]
        grid = [(ct, glibc, blas, tt) for ct in coretypes for glibc in (False, True)
                for blas in sorted({1, threads}) for tt in torch_threads]
    for ct, glibc, blas, tt in grid:
        set_ = {"OPENBLAS_NUM_THREADS": str(blas)}
        unset = []
        if glibc:
            set_["GLIBC_TUNABLES"] = GLIBC_TUNED
        else:
            unset.append("GLIBC_TUNABLES")
        if ct:
            unset.append("OPENBLAS_CORETYPE")
        out.append(Config("grid", tt, set_, unset))
    seen, unique = set(), []
    for c in out:
        k = c.key(base)
        if k not in seen:
            seen.add(k)
            unique.append(c)
    return unique
