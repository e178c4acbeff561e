#!/usr/bin/env python3
"""Time one training step of the 784-256-128-10 MLP in PyTorch eager mode, the way
bench/mlp_step.c times libblob: warm up, synchronize, wall clock over N steps
alternating between two resident batches, synchronize; the median of R repeats (for an
even R the mean of the two middle ones, as mlp_step.c computes it too).
A step is zero_grad, forward, cross-entropy, backward, SGD with momentum and weight
decay, and loss.item(). Prints "device NAME", then "batch B us_per_step T" per batch."""
import argparse
import statistics
import time

import torch


def time_batch(batch, device, steps, repeats, warmup):
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    xs = [torch.rand(batch, 784, device=device) for _ in range(2)]
    ys = [torch.randint(0, 10, (batch,), device=device) for _ in range(2)]

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xs[i % 2]), ys[i % 2])
        loss.backward()
        opt.step()
        return loss.item()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for i in range(warmup):
        step(i)
    samples = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for i in range(steps):
            step(i)
        sync()
        samples.append((time.perf_counter() - t0) / steps)
    return 1e6 * statistics.median(samples)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--batch", type=int, action="append", help="repeatable; default 64 and 256")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=20)
    a = p.parse_args()
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.exit(1, "mlp_torch.py: torch has no CUDA device\n")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"device {name} (torch {torch.__version__})", flush=True)
    for batch in a.batch or [64, 256]:
        us = time_batch(batch, device, a.steps, a.repeats, a.warmup)
        print(f"batch {batch} us_per_step {us:.1f}", flush=True)


if __name__ == "__main__":
    main()
