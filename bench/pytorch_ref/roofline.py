"""The machine's own f32 limit, measured beside the throughput figures.

bench/train_step_bench's BM_Roofline times a 1024^3 oneDNN matmul on one
thread (bench/roofline.h): one core's peak f32 GEMM rate. n cores' roofline
for a network is n times it over the network's FLOP per training sample.
"""

import json
import subprocess

from pytorch_ref.sinkrun import pinned

# FLOP per training sample (forward, every dW, every dX but the first
# layer's), for the networks whose count is fixed; bench/roofline.h has the
# MLP's derivation.
FLOPS_PER_SAMPLE = {"mlp": 3 * 2.0 * (784 * 512 + 512 * 256 + 256 * 10) - 2.0 * 784 * 512}


def peak_gflops_one_core(bench):
    """One core's peak f32 GEMM GFLOP/s, from `bench` (train_step_bench) pinned to one core."""
    proc = subprocess.run([bench, "--benchmark_filter=BM_Roofline", "--benchmark_format=json"],
                          capture_output=True, text=True, preexec_fn=pinned(1))
    if proc.returncode != 0:
        raise RuntimeError(f"{bench} failed ({proc.returncode}): {proc.stderr.strip()}")
    runs = json.loads(proc.stdout)["benchmarks"]
    return max(r["gflops_1core"] for r in runs)


def samples_per_s(model, gflops_one_core, cores):
    """The roofline in samples/s of `cores` cores, or None for a network without a fixed count."""
    flops = FLOPS_PER_SAMPLE.get(model)
    return cores * gflops_one_core * 1e9 / flops if flops else None
