#!/usr/bin/python3
"""AllReduce side by side: sinkrt (shm, tcp), Gloo (tcp), OpenMPI (vader
shared memory, tcp) and a memcpy of the same bytes, in one run. sinkrt's
shared-memory run times both of its paths: "direct" (the buffers lie in
memory the ranks shared, and each reads its peers' buffers in place) and
"rings" (private buffers, copied through the shared-memory rings).

Builds nothing: it runs what the build directory holds
(`cmake --build BUILD --target allreduce_bench gloo_allreduce mpi_allreduce`)
and skips, with a note, a peer whose binary or mpirun is missing. Every
program times the same way (bench/allreduce_harness.h: per size, warm-up,
then a barrier before each timed op; latency = the mean over ranks of each
rank's median) and prints JSON lines, which this script collects and turns
into one table per rank count (rows = sizes) plus the MLP gradients table.
Every program runs --repeat times (default 3, interleaved); a cell shows the
best of those runs.

  bench/compare_allreduce.py [--build-dir build] [--ranks 2,4] [--repeat 3]
      [--sizes 4K,64K,1M,16M,64M,256M] [--iters-scale 1] [--json-out FILE]

Gloo's column is its fastest algorithm at each size (named under the
table). Run it on a quiet machine: it prints the load average first and
warns above 0.5. The default run takes ~3-5 minutes on 2 cores.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

DEFAULT_SIZES = "4K,64K,1M,16M,64M,256M"
# (impl, transport, heading, sinkrt's algorithm or None for any)
COLUMNS = [
    ("sinkrt", "shm", "sinkrt shm direct", "direct"),
    ("sinkrt", "shm", "sinkrt shm rings", "auto"),
    ("sinkrt", "tcp", "sinkrt tcp", None),
    ("gloo", "tcp", "gloo tcp", None),
    ("mpi", "shm", "mpi shm (vader)", None),
    ("mpi", "tcp", "mpi tcp", None),
    ("memcpy", "-", "memcpy", None),
]


def parse_bytes(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper().replace("IB", "").replace("B", "")
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def human(b):
    for unit, v in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= v and b % v == 0:
            return f"{b // v} {unit}"
    return f"{b} B"


def run(cmd, timeout, env=None, log=None):
    """Runs one program; returns its JSON lines (a failure is reported, not fatal)."""
    t0 = time.time()
    print(f"$ {' '.join(cmd)}", file=sys.stderr, flush=True)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        print(f"  timed out after {timeout} s", file=sys.stderr)
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        p = None
    else:
        out = p.stdout
        if p.returncode != 0:
            print(f"  exit {p.returncode}: {p.stderr.strip()[-2000:]}", file=sys.stderr)
    rows = []
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    if log is not None:
        log.extend(rows)
    print(f"  {len(rows)} results in {time.time() - t0:.1f} s", file=sys.stderr, flush=True)
    return rows


def cell(r):
    if r is None:
        return "n/a"
    lat = r["latency_us"]
    lat_s = f"{lat:.1f}" if lat < 1000 else f"{lat / 1000:.2f} ms"
    return f"{lat_s} / {r['busbw_gbs']:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--sizes", default=DEFAULT_SIZES)
    ap.add_argument("--iters-scale", default="1")
    ap.add_argument("--timeout", type=int, default=240, help="seconds per program run")
    ap.add_argument("--repeat", type=int, default=3,
                    help="run every program this many times, interleaved; each cell keeps the best run's median "
                         "(bursts of load from other processes only ever slow a run down)")
    ap.add_argument("--json-out", help="also write every result line here")
    ap.add_argument("--no-mlp", action="store_true", help="skip the MLP gradients (fused vs unfused)")
    args = ap.parse_args()

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build = args.build_dir if os.path.isabs(args.build_dir) else os.path.join(root, args.build_dir)
    bench = os.path.join(build, "bench")
    sinkrt_bin = os.path.join(bench, "allreduce_bench")
    gloo_bin = os.path.join(bench, "gloo_allreduce")
    mpi_bin = os.path.join(bench, "mpi_allreduce")
    mpirun = shutil.which("mpirun")
    ranks_list = [int(x) for x in args.ranks.split(",")]
    sizes = [parse_bytes(s) for s in args.sizes.split(",")]
    common = ["--sizes", ",".join(str(s) for s in sizes), "--iters-scale", args.iters_scale]
    mlp = [] if args.no_mlp else ["--mlp"]

    load = os.getloadavg()
    ncpu = os.cpu_count()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({ncpu} CPUs)")
    if load[0] > 0.5:
        print("WARNING: load average above 0.5: something else is running; figures will be noisy and low")
    t_start = time.time()

    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    results = []
    missing = []
    if not os.access(sinkrt_bin, os.X_OK):
        missing.append(f"{sinkrt_bin} (cmake --build {args.build_dir} --target allreduce_bench)")
    if not os.access(gloo_bin, os.X_OK):
        missing.append(f"{gloo_bin} (libgloo-dev)")
    if not os.access(mpi_bin, os.X_OK) or not mpirun:
        missing.append(f"{mpi_bin} or mpirun (libopenmpi-dev, openmpi-bin)")
    for m in missing:
        print(f"note: skipping {m}")

    mpi_base = ["--allow-run-as-root", "--oversubscribe", "--mca", "pml", "ob1"]
    mpi_btl = {
        "shm": ["--mca", "btl", "self,vader"],
        "tcp": ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"],
    }
    for rep in range(args.repeat):
        if os.access(sinkrt_bin, os.X_OK):
            run([sinkrt_bin, "--compare", "--memcpy"] + common, args.timeout, env, results)
        for n in ranks_list:
            if os.access(sinkrt_bin, os.X_OK):
                for t in ("shm", "tcp"):
                    algos = ["--algos", "auto,direct"] if t == "shm" else []
                    run([sinkrt_bin, "--compare", "--ranks", str(n), "--transport", t] + algos + common + mlp,
                        args.timeout, env, results)
            if os.access(gloo_bin, os.X_OK):
                run([gloo_bin, "--ranks", str(n)] + common + mlp, args.timeout, env, results)
            if os.access(mpi_bin, os.X_OK) and mpirun:
                for t in ("shm", "tcp"):
                    run([mpirun, "-n", str(n)] + mpi_base + mpi_btl[t] + [mpi_bin, "--transport", t] + common + mlp,
                        args.timeout, env, results)
        for r in results:
            r.setdefault("run", rep)

    if args.json_out:
        with open(args.json_out, "w") as f:
            for r in results:
                f.write(json.dumps(r) + "\n")

    def best(impl, transport, n, case, nbytes=None, algo=None):
        """The fastest line: over repeats, and over Gloo's algorithms."""
        cands = [r for r in results
                 if r["impl"] == impl and r["transport"] == transport and r["case"] == case
                 and (impl == "memcpy" or r["ranks"] == n) and (nbytes is None or r["bytes"] == nbytes)
                 and (algo is None or r["algo"] == algo)]
        return min(cands, key=lambda r: r["latency_us"]) if cands else None

    print(f"\nAllReduce, float32 sum in place, best of {args.repeat} runs; each cell: latency µs (median) / busbw GB/s "
          f"(busbw = algbw·2(n−1)/n; memcpy: bytes/time)")
    for n in ranks_list:
        print(f"\n### {n} ranks\n")
        print("| size | " + " | ".join(c[2] for c in COLUMNS) + " |")
        print("|---" * (len(COLUMNS) + 1) + "|")
        gloo_algos = []
        for b in sizes:
            cells = []
            for impl, t, _, algo in COLUMNS:
                r = best(impl, t, n, "size", b, algo)
                cells.append(cell(r))
                if impl == "gloo" and r:
                    gloo_algos.append(f"{human(b)}: {r['algo']}")
            print(f"| {human(b)} | " + " | ".join(cells) + " |")
        if gloo_algos:
            print(f"\nGloo's fastest algorithm per size: {', '.join(gloo_algos)}")
        # The aim (DESIGN §7): busbw at least 0.8x memcpy's bytes/time from 16 MiB.
        ratios = []
        for b in sizes:
            d, m = best("sinkrt", "shm", n, "size", b, "direct"), best("memcpy", "-", n, "size", b)
            if b >= 16 << 20 and d and m and m["busbw_gbs"] > 0:
                ratios.append(f"{human(b)} {d['busbw_gbs'] / m['busbw_gbs']:.2f}x")
        if ratios:
            print(f"\nsinkrt shm direct busbw / memcpy: {', '.join(ratios)}")

    if not args.no_mlp:
        print("\n### MLP 784-512-256-10 gradients (6 tensors, 2.14 MB float32): fused (1 AllReduce) vs unfused "
              "(6), latency µs\n")
        print("| ranks | implementation | fused | unfused | unfused / fused |")
        print("|---|---|---|---|---|")
        for n in ranks_list:
            for impl, t, label, algo in COLUMNS:
                if impl == "memcpy":
                    continue
                f = best(impl, t, n, "mlp_fused", algo=algo)
                u = best(impl, t, n, "mlp_unfused", algo=algo)
                if not f or not u:
                    continue
                name = label + (f" ({f['algo']} / {u['algo']})" if impl == "gloo" else "")
                print(f"| {n} | {name} | {f['latency_us']:.0f} | {u['latency_us']:.0f} | "
                      f"{u['latency_us'] / f['latency_us']:.2f}x |")

    load_end = os.getloadavg()
    print(f"\nload average at end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}; "
          f"total {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    main()
