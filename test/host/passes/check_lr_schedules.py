#!/usr/bin/python3
"""The learning rate the device used at every step of a 1,000-step run,
against an independent float64 reimplementation of MindSpore's formulas
(mindspore/nn/learning_rate_schedule.py's construct() methods and
mindspore/nn/dynamic_lr.py), within 1e-7 relative.

Plain Python floats (IEEE float64) and the math module: numpy is not
installed for /usr/bin/python3 on the build machines, and float64 is what
the check needs. LrScheduleTrain.EveryStepsRateFromTheDevice writes one
file per schedule into the directory given: the schedule as a call of the
functions below on its first line, then the device's rate of each step.

usage: check_lr_schedules.py DIR
"""
import math
import os
import struct
import sys

TOLERANCE = 1e-7


# ---- nn.learning_rate_schedule: the rate as a function of the step ----------

def WarmUpLR(learning_rate, warmup_steps):
    return lambda step: learning_rate * min(step, warmup_steps) / warmup_steps


def CosineDecayLR(min_lr, max_lr, decay_steps):
    delta = 0.5 * (max_lr - min_lr)
    return lambda step: min_lr + delta * (1.0 + math.cos(math.pi * min(step, decay_steps) / decay_steps))


def PolynomialDecayLR(learning_rate, end_learning_rate, decay_steps, power, update_decay_steps=False):
    def rate(step):
        d = decay_steps
        if update_decay_steps:
            d = d * max(math.ceil(step / d), 1)
        else:
            step = min(step, d)
        return (learning_rate - end_learning_rate) * (1.0 - step / d) ** power + end_learning_rate
    return rate


def ExponentialDecayLR(learning_rate, decay_rate, decay_steps, is_stair=False):
    def rate(step):
        p = step / decay_steps
        return learning_rate * decay_rate ** (math.floor(p) if is_stair else p)
    return rate


def NaturalExpDecayLR(learning_rate, decay_rate, decay_steps, is_stair=False):
    # construct(): p is the step itself (floored to a multiple of
    # decay_steps when is_stair), not step / decay_steps.
    def rate(step):
        p = (step // decay_steps) * decay_steps if is_stair else step
        return learning_rate * math.exp(-decay_rate * p)
    return rate


def InverseDecayLR(learning_rate, decay_rate, decay_steps, is_stair=False):
    def rate(step):
        p = step / decay_steps
        return learning_rate / (1 + decay_rate * (math.floor(p) if is_stair else p))
    return rate


def WarmupCosine(max_lr, min_lr, warmup_steps, decay_steps):
    """sinkrt's warmup then cosine: WarmUpLR below warmup_steps, then
    CosineDecayLR at step - warmup_steps."""
    warm = WarmUpLR(max_lr, warmup_steps)
    cos = CosineDecayLR(min_lr, max_lr, decay_steps)
    return lambda step: warm(step) if step < warmup_steps else cos(step - warmup_steps)


# ---- nn.dynamic_lr: lists ----------------------------------------------------

def piecewise_constant_lr(milestone, learning_rates):
    out, last = [], 0
    for m, r in zip(milestone, learning_rates):
        out += [r] * (m - last)
        last = m
    return out


def _epoch(i, step_per_epoch):
    return math.floor(i / step_per_epoch)


def exponential_decay_lr(lr, rate, total, spe, decay_epoch, is_stair=False):
    out = []
    for i in range(total):
        p = _epoch(i, spe) / decay_epoch
        out.append(lr * rate ** (math.floor(p) if is_stair else p))
    return out


def natural_exp_decay_lr(lr, rate, total, spe, decay_epoch, is_stair=False):
    out = []
    for i in range(total):
        e = _epoch(i, spe)
        x = math.floor(e / decay_epoch) * decay_epoch if is_stair else e
        out.append(lr * math.e ** (-rate * x))
    return out


def inverse_decay_lr(lr, rate, total, spe, decay_epoch, is_stair=False):
    out = []
    for i in range(total):
        e = _epoch(i, spe)
        out.append(lr / (1 + rate * (math.floor(e / decay_epoch) if is_stair else e / decay_epoch)))
    return out


def cosine_decay_lr(min_lr, max_lr, total, spe, decay_epoch):
    delta = 0.5 * (max_lr - min_lr)
    return [min_lr + delta * (1 + math.cos(math.pi * min(_epoch(i, spe), decay_epoch) / decay_epoch))
            for i in range(total)]


def polynomial_decay_lr(lr, end, total, spe, decay_epoch, power, update_decay_epoch=False):
    out = []
    for i in range(total):
        e = _epoch(i, spe)
        if update_decay_epoch:
            span, t = decay_epoch * max(math.ceil(e / decay_epoch), 1), e
        else:
            span, t = decay_epoch, min(e, decay_epoch)
        out.append((lr - end) * (1 - t / span) ** power + end)
    return out


def warmup_lr(lr, total, spe, warmup_epoch):
    return [lr * min(_epoch(i, spe), warmup_epoch) / warmup_epoch for i in range(total)]


def table(values):
    """A list as the optimizer takes it: float32 values, indexed by the
    step; past its end, sinkrt keeps the last value."""
    f32 = [struct.unpack("f", struct.pack("f", v))[0] for v in values]
    return lambda step: f32[min(step, len(f32) - 1)]


def check(path):
    with open(path) as f:
        call = f.readline().strip()
        got = [float(line) for line in f if line.strip()]
    rate = eval(call, {k: v for k, v in globals().items() if not k.startswith("_")})  # noqa: S307 (our own file)
    worst = 0.0
    for step, g in enumerate(got):
        want = rate(step)
        err = abs(g - want) / abs(want) if want != 0 else abs(g)
        worst = max(worst, err)
        if err > TOLERANCE:
            print(f"{os.path.basename(path)}: {call}: step {step}: device {g!r}, reference {want!r} "
                  f"(relative error {err:.3g} > {TOLERANCE})")
            return False, worst, len(got)
    return True, worst, len(got)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    files = sorted(f for f in os.listdir(sys.argv[1]) if f.endswith(".txt"))
    if not files:
        print(f"no rate files in {sys.argv[1]}")
        return 1
    failed = 0
    for name in files:
        ok, worst, steps = check(os.path.join(sys.argv[1], name))
        print(f"{name[:-4]:24s} {steps} steps, worst relative error {worst:.3g}" + ("" if ok else "  FAILED"))
        failed += not ok
    print(f"{len(files) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
