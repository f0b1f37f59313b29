"""The training recipe of each zoo network: optimizer, learning rate and the
sinkrun flags that select it. Both frameworks read it from here."""

RECIPES = {
    "mlp": {"describe": "MLP 784-512-256-10, SGD momentum 0.9, lr 0.01", "optimizer": "momentum", "lr": 0.01,
            "momentum": 0.9, "accuracy_epochs": 5, "epoch_steps": 0,
            # Same parameters, batches and update: the first losses agree to
            # float rounding (2e-7 measured), which grows slowly as ReLUs flip.
            "first_steps_tolerance": 1e-4},
    "vit": {"describe": "ViT (16 patches of 7x7, width 64, 2 blocks, 4 heads), Adam lr 1e-3", "optimizer": "adam",
            "lr": 0.001, "momentum": None, "accuracy_epochs": 3, "epoch_steps": 150,
            # Float rounding alone moves the first 20 losses by <= 1.5e-7 (this
            # PyTorch in f32 against f64, Fashion-MNIST, seed 1); placing Adam's
            # eps as torch.optim.Adam does moves them by up to 1e-5 (5e-6 from
            # step 3 on). The bound sits between the two, so a wrong update shows.
            "first_steps_tolerance": 3e-6},
}


def sinkrun_flags(model):
    r = RECIPES[model]
    flags = ["--model", model, "--optimizer", r["optimizer"], "--lr", repr(r["lr"])]
    if r["momentum"] is not None:
        flags += ["--momentum", repr(r["momentum"])]
    return flags
