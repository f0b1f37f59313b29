#!/usr/bin/python3
"""BatchNorm2d forward + backward in training: sinkrt's kernels (build/bench/batch_norm_bench)
against PyTorch's nn.BatchNorm2d on the same shapes, one thread each, interleaved round by
round in one run; prints each side's median and PyTorch's time over sinkrt's (above 1: sinkrt
is faster). A comparison, not a test. Needs python3-torch and libopenblas0-pthread
(bench/compare_pytorch installs them); run it niced on a shared machine:

    nice /usr/bin/python3 bench/compare_batch_norm.py --rounds 3

--before BINARY adds another build's batch_norm_bench to the same rounds (a
before/after of a kernel change, as ratios measured in one run); --shapes
picks shapes by name (256x512x1x1 is BatchNorm1d's [N, C]).
"""
import argparse
import json
import os
import statistics
import subprocess
import time

SHAPES = [(32, 64, 56, 56), (32, 256, 14, 14), (32, 512, 7, 7), (256, 512, 1, 1)]


def sinkrt_ms(binary, shape, min_time):
    n, c, h, w = shape
    out = subprocess.run(
        [binary, f"--benchmark_filter=^BM_BatchNorm2d/{n}/{c}/{h}/{w}/1/real_time$",
         "--benchmark_format=json", f"--benchmark_min_time={min_time}"],
        check=True, capture_output=True, text=True, env=dict(os.environ, OMP_WAIT_POLICY="passive")).stdout
    runs = json.loads(out)["benchmarks"]
    assert runs and runs[0]["time_unit"] == "ms", runs
    return runs[0]["real_time"]


def torch_ms(torch, shape, min_time):
    bn = torch.nn.BatchNorm2d(shape[1])  # momentum 0.1 = MindSpore's 0.9
    bn.train()
    x = torch.rand(*shape, requires_grad=True)
    dy = torch.rand(*shape)

    def step():
        y = bn(x)
        y.backward(dy)
        x.grad = None
        bn.weight.grad = None
        bn.bias.grad = None

    for _ in range(3):
        step()
    iters, start = 0, time.perf_counter()
    while time.perf_counter() - start < min_time or iters < 5:
        step()
        iters += 1
    return 1e3 * (time.perf_counter() - start) / iters


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", default=os.environ.get("SINKRT_BUILD_DIR", "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=0.5)
    ap.add_argument("--before", help="another build's batch_norm_bench, run in the same rounds")
    ap.add_argument("--shapes", nargs="*", help="only these shapes, e.g. 256x512x1x1")
    a = ap.parse_args()
    import torch
    torch.set_num_threads(1)
    binary = os.path.join(a.build, "bench", "batch_norm_bench")
    print(f"torch {torch.__version__}, 1 thread each; {a.rounds} interleaved rounds; {os.uname().machine}")
    for shape in SHAPES:
        name = 'x'.join(map(str, shape))
        if a.shapes and name not in a.shapes:
            continue
        ours, theirs, before = [], [], []
        for _ in range(a.rounds):
            if a.before:
                before.append(sinkrt_ms(a.before, shape, a.min_time))
            ours.append(sinkrt_ms(binary, shape, a.min_time))
            theirs.append(torch_ms(torch, shape, a.min_time))
        s, t = statistics.median(ours), statistics.median(theirs)
        line = f"{name:>14}  sinkrt {s:8.3f} ms  pytorch {t:8.3f} ms  pytorch/sinkrt {t / s:5.2f}"
        if before:
            b = statistics.median(before)
            line += f"  before {b:8.3f} ms  pytorch/before {t / b:5.2f}  before/sinkrt {b / s:5.2f}"
        print(line)


if __name__ == "__main__":
    main()
