"""The PyTorch peer of edge_speed.cpp: the same shapes, optimizer, batch sizes, one thread.

Prints "torch WIDTHS BATCH EXAMPLES_PER_S" per case, and the BLAS PyTorch uses.
"""
import time

import torch

torch.set_num_threads(1)
torch.manual_seed(1)


def model(hidden):
    return torch.nn.Sequential(
        torch.nn.Linear(784, hidden), torch.nn.LayerNorm(hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.LayerNorm(hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, 10))


def cnn(c1, c2, d):
    """bench/common/cnn.hpp's network: Tessera's LayerNorm of a convolution is GroupNorm with one group."""
    return torch.nn.Sequential(
        torch.nn.Unflatten(1, (1, 28, 28)),
        torch.nn.Conv2d(1, c1, 3, padding=1), torch.nn.GroupNorm(1, c1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(c1, c2, 3, padding=1), torch.nn.GroupNorm(1, c2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(c2 * 49, d), torch.nn.LayerNorm(d), torch.nn.ReLU(),
        torch.nn.Linear(d, 10))


def best_seconds(f, reps, repeats):
    f()
    best = 1e30
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


cfg = torch.__config__.show()
blas = [line.strip() for line in cfg.splitlines() if "BLAS" in line]
print("torch_version", torch.__version__, "|", " ".join(blas) or "BLAS unknown")
def rows(name, make):
    for batch in (16, 32, 64):
        net = make()
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        loss_fn = torch.nn.CrossEntropyLoss()
        x = torch.rand(batch, 784)
        y = torch.randint(0, 10, (batch,))
        steps = 20

        def run():
            for _ in range(steps):
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(net(x), y)
                loss.backward()
                opt.step()

        s = best_seconds(run, 3, 5)
        print(f"torch {name} {batch} {steps * batch / s:.0f}", flush=True)


for hidden in (64, 128, 512):
    rows(f"784-{hidden}-{hidden}-10", lambda: model(hidden))
rows("cnn-32-64-128", lambda: cnn(32, 64, 128))
rows("cnn-8-16-32", lambda: cnn(8, 16, 32))
