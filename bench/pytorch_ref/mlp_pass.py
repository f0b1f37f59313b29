"""The MLP and one training pass in PyTorch, as bench/compare_ddp.py uses
them (it passes the torch module in, so that importing this needs no torch)."""


def torch_model(torch, seed):
    """784-512-256-10 from sinkrt's initial parameters (params.mlp_parameters)."""
    from .models import build
    return build("mlp", seed)


def train_pass(model, opt, loss_fn, x_all, y_all, order, batch, steps, step_losses, first_steps=0):
    """One pass of `steps` optimizer steps over x_all/y_all in `order`, `batch`
    samples a step; returns the last step's loss. With first_steps > 0, each
    step's loss goes to step_losses, and the pass ends once it holds
    first_steps of them."""
    for s in range(steps):
        idx = order[s * batch:(s + 1) * batch]
        xb, yb = x_all[idx], y_all[idx]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        if first_steps:
            step_losses.append(loss.item())
            if len(step_losses) == first_steps:
                break
    return loss
