"""One PyTorch training run, in a child process of compare_pytorch so that
thread pools, the allocator and the environment start fresh each time."""

import json
import time

import torch

from .data import load_data
from .models import SinkrtAdam, build
from .recipes import RECIPES
from .rng import PassOrder


def make_optimizer(model, net, impl):
    """impl "sinkrt": the update sinkrt computes (first-steps check, accuracy);
    "torch": PyTorch's own optimizer, as a PyTorch user would train."""
    r = RECIPES[model]
    if r["optimizer"] == "momentum":
        # MindSpore's Momentum (v = m v + g; p -= lr v) is torch.optim.SGD's.
        return torch.optim.SGD(net.parameters(), lr=r["lr"], momentum=r["momentum"]), "torch.optim.SGD(momentum)"
    if impl == "sinkrt":
        return SinkrtAdam(net.parameters(), lr=r["lr"]), "sinkrt's Adam (MindSpore's eps placement)"
    return torch.optim.Adam(net.parameters(), lr=r["lr"]), "torch.optim.Adam"


def evaluate(net, test_x, test_y):
    with torch.no_grad():
        logits = net(test_x)
        loss = torch.nn.functional.cross_entropy(logits.double(), test_y).item()
        acc = (logits.argmax(1) == test_y).double().mean().item()
    return acc, loss


def run(args):
    """Trains args.epochs epochs of args.epoch_steps steps (0: a whole pass)
    and evaluates. With args.first_steps > 0, returns the losses of the first
    first_steps steps instead."""
    torch.set_num_threads(args.threads)
    train_x, train_y, test_x, test_y = load_data(args.data)
    x_all, y_all = torch.from_numpy(train_x), torch.from_numpy(train_y)
    test_x, test_y = torch.from_numpy(test_x), torch.from_numpy(test_y)
    net = build(args.model, args.seed)
    opt, opt_name = make_optimizer(args.model, net, args.optimizer_impl)
    loss_fn = torch.nn.CrossEntropyLoss()
    order = PassOrder(len(train_y), args.seed, args.batch)  # Batch(drop_remainder=True)
    steps = args.epoch_steps or order.steps_per_pass
    rates, losses, step_losses, accuracies = [], [], [], []
    g = 0
    for _ in range(args.epochs):
        t0 = time.perf_counter()
        for _ in range(steps):
            idx = torch.from_numpy(order.step(g))
            g += 1
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(net(x_all[idx]), y_all[idx])
            loss.backward()
            opt.step()
            if args.first_steps:
                step_losses.append(loss.item())
                if len(step_losses) == args.first_steps:
                    return {"step_losses": step_losses, "optimizer": opt_name}
        rates.append(steps * args.batch / (time.perf_counter() - t0))
        losses.append(loss.item())  # the epoch's last step, as sinkrun's report
        if args.eval_each_epoch:
            accuracies.append(evaluate(net, test_x, test_y)[0])
    acc, test_loss = evaluate(net, test_x, test_y)
    return {"epoch_samples_per_s": rates, "losses": losses, "epoch_test_accuracy": accuracies,
            "test_accuracy": acc, "test_loss": test_loss, "test_samples": len(test_y), "optimizer": opt_name}


def worker(args):
    out = run(args)
    out["torch_version"] = torch.__version__
    out["torch_threads"] = torch.get_num_threads()
    out["blas"] = sorted({line.split()[-1].rsplit("/", 1)[-1] for line in open("/proc/self/maps")
                          if "blas" in line and "/" in line})
    print(json.dumps(out))
