"""Runs sinkrun train and reads its --report."""

import json
import os
import subprocess
import sys
import tempfile

from .recipes import sinkrun_flags


def pinned(cores):
    """preexec_fn: run the child on `cores` cores only, so that "1 thread"
    means one core for everything the framework runs: sinkrt's feeder and
    pipeline workers as much as PyTorch's inline batch gathering."""
    allowed = sorted(os.sched_getaffinity(0))[:cores]
    return lambda: os.sched_setaffinity(0, allowed)


def read_report(path):
    """sinkrun's --report file (JSON lines), removed once read: its epoch
    records and its end record."""
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    os.unlink(path)
    return [r for r in records if r["event"] == "epoch"], next(r for r in records if r["event"] == "end")


class MissingModel(Exception):
    """This sinkrun has no such --model."""


def run_sinkrun(sinkrun, model, data, batch, threads, epochs, sink, seed, extra=()):
    with tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False) as f:
        report = f.name
    cmd = [sinkrun, "train", *sinkrun_flags(model), "--data", data, "--batch", str(batch), "--epochs", str(epochs),
           "--threads", str(threads), "--seed", str(seed), "--report", report, *extra]
    if not sink:
        cmd.append("--no-sink")
    proc = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=pinned(threads))
    if proc.returncode != 0:
        if os.path.exists(report):
            os.unlink(report)
        if f"--model: {model} not in" in proc.stderr:
            raise MissingModel(f"{sinkrun} has no --model {model} yet ({proc.stderr.strip().splitlines()[0]})")
        sys.exit(f"compare_pytorch: {' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    epochs_, end = read_report(report)
    return {"epoch_samples_per_s": [r["samples_per_s"] for r in epochs_], "losses": [r["loss"] for r in epochs_],
            "test_accuracy": end["test_accuracy"], "test_loss": end["test_loss"], "end": end}


def has_model(sinkrun, model):
    """Whether sinkrun train accepts --model `model` (asked without training:
    --help lists the choices in the option's check)."""
    proc = subprocess.run([sinkrun, "train", "--model", model, "--epochs", "0"], capture_output=True, text=True)
    return f"--model: {model} not in" not in proc.stderr
