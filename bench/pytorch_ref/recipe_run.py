"""The recipe of pytorch_ref/recipe.py trained in PyTorch, from sinkrt's
initial parameters and in sinkrt's batch order (compare_recipe.py)."""

import time

import torch

from .models import build
from .philox_dropout import VIT_DROPOUT_OPS, PhiloxDropout
from .recipe import AdamWeightDecay
from .rng import PassOrder
from .torch_run import evaluate


def train(args, recipe, steps=0, epochs=0):
    """steps > 0: the losses of the first `steps` steps. Otherwise `epochs`
    whole passes, then the test accuracy and loss (dropout off in eval)."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)  # torch.nn.Dropout's masks (--masks torch)
    train_x, train_y, test_x, test_y = args.loaded
    x_all, y_all = torch.from_numpy(train_x), torch.from_numpy(train_y)
    drop = None
    if recipe.dropout and args.masks == "sinkrt":
        drop = PhiloxDropout(recipe.dropout, args.seed, VIT_DROPOUT_OPS)
    elif recipe.dropout:
        drop = torch.nn.Dropout(recipe.dropout)
    net = build("vit", args.seed, **({"drop": drop} if drop else {}))
    sinkrt_names = {torch_name: name for name, torch_name in _names(net)}
    opt = AdamWeightDecay([(sinkrt_names[n], p) for n, p in net.named_parameters()], recipe)
    loss_fn = torch.nn.CrossEntropyLoss()
    order = PassOrder(len(train_y), args.seed, args.batch)
    total = steps or epochs * order.steps_per_pass
    t0 = time.perf_counter()
    step_losses, epoch_losses, norms = [], [], []
    net.train()
    for g in range(total):
        idx = torch.from_numpy(order.step(g))
        for p in net.parameters():
            p.grad = None
        loss = loss_fn(net(x_all[idx]), y_all[idx])
        loss.backward()
        _, norm = opt.step()
        if steps:
            norms.append(norm)
        if isinstance(drop, PhiloxDropout):
            drop.next_step()
        if steps:
            step_losses.append(loss.item())
        elif (g + 1) % order.steps_per_pass == 0:
            epoch_losses.append(loss.item())  # each pass's last step, as sinkrun's report
    if steps:
        return {"step_losses": step_losses, "norms": norms}
    net.eval()
    acc, test_loss = evaluate(net, torch.from_numpy(test_x), torch.from_numpy(test_y))
    return {"losses": epoch_losses, "test_accuracy": acc, "test_loss": test_loss,
            "seconds": time.perf_counter() - t0}


def _names(net):
    """(sinkrt name, torch name) of every parameter."""
    from .models import torch_name
    from .params import vit_parameters
    return [(name, torch_name(name)) for name in vit_parameters(0)]
