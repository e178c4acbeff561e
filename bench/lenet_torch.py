#!/usr/bin/env python3
"""Time one training step of a LeNet for 1x28x28 images in PyTorch, eagerly and as a
whole-step CUDA graph, the way bench/mlp_torch.py times the MLP: warm up, synchronize,
wall clock over N steps alternating between two resident batches, synchronize; the
median of R repeats (for an even R the mean of the two middle ones).

The net is Caffe's LeNet with ReLU after the convolutions too: conv 5x5 (20) -> ReLU ->
max pool 2x2/2 -> conv 5x5 (50) -> ReLU -> max pool 2x2/2 -> inner product (500) ->
ReLU -> inner product (10); the widths are options. A step is zero_grad, forward,
cross-entropy, backward, SGD with momentum 0.9 and weight decay 5e-4, and loss.item().
cuDNN picks its algorithms (cudnn.benchmark) during the warm-up.

The graph is PyTorch's "whole-network capture" (torch.cuda.graphs): a few warm-up steps
on a side stream (they create the momentum buffers, which then stay in place), then
forward, backward and optimizer.step() captured on static input and label tensors with
the gradients set to None first, so that backward refills the graph's own .grad tensors.
SGD's state is its momentum buffers, updated in place, and its learning rate a Python
number: the captured step needs no capturable flag. A graph step copies the batch into
the static tensors, replays the graph and reads the loss.

Prints "device NAME (torch VERSION, ...)", then per batch
"batch B eager_us E graph_us G" (graph_us is "-" on the CPU), and with --kernels the
CUDA kernels one eager step launches: "batch B kernels K"."""
import argparse
import statistics
import time
import warnings

import torch


def lenet(conv1, conv2, hidden):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, conv1, 5), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Conv2d(conv1, conv2, 5), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Flatten(), nn.Linear(conv2 * 4 * 4, hidden), nn.ReLU(), nn.Linear(hidden, 10))


class Bench:
    """A fresh net, its optimizer and two resident batches."""

    def __init__(self, a, batch, device):
        torch.manual_seed(1)
        self.device = device
        self.model = lenet(a.conv1, a.conv2, a.hidden).to(device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9,
                                   weight_decay=5e-4)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.xs = [torch.rand(batch, 1, 28, 28, device=device) for _ in range(2)]
        self.ys = [torch.randint(0, 10, (batch,), device=device) for _ in range(2)]

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def forward_backward(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss

    def eager_step(self, i):
        self.opt.zero_grad(set_to_none=True)
        return self.forward_backward(self.xs[i % 2], self.ys[i % 2]).item()

    def capture(self, warmup):
        """Capture one whole training step into self.graph (PyTorch's recipe)."""
        self.static_x = self.xs[0].clone()
        self.static_y = self.ys[0].clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                self.opt.zero_grad(set_to_none=True)
                self.forward_backward(self.static_x, self.static_y)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        self.opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            self.static_loss = self.forward_backward(self.static_x, self.static_y)

    def graph_step(self, i):
        self.static_x.copy_(self.xs[i % 2])
        self.static_y.copy_(self.ys[i % 2])
        self.graph.replay()
        return self.static_loss.item()

    def time(self, step, steps, repeats, warmup):
        """Median microseconds per step over `repeats` runs of `steps` steps."""
        for i in range(warmup):
            step(i)
        samples = []
        for _ in range(repeats):
            self.sync()
            t0 = time.perf_counter()
            for i in range(steps):
                step(i)
            self.sync()
            samples.append((time.perf_counter() - t0) / steps)
        return 1e6 * statistics.median(samples)

    def count_kernels(self):
        """CUDA kernels launched by one eager step after a few, by the profiler."""
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile
        for i in range(3):
            self.eager_step(i)
        self.sync()
        with warnings.catch_warnings():  # about events of earlier profiler cycles
            warnings.simplefilter("ignore")
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                self.eager_step(0)
                self.sync()
        return sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--batch", type=int, action="append", help="repeatable; default 64 and 256")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--conv1", type=int, default=20, help="channels of the first convolution")
    p.add_argument("--conv2", type=int, default=50, help="channels of the second convolution")
    p.add_argument("--hidden", type=int, default=500, help="width of the hidden inner product")
    p.add_argument("--no-graph", action="store_true", help="time the eager step only")
    p.add_argument("--no-tf32", action="store_true",
                   help="keep cuDNN's convolutions in full float32 (PyTorch allows TF32 there)")
    p.add_argument("--kernels", action="store_true", help="count the kernels of an eager step")
    a = p.parse_args()
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.exit(1, "lenet_torch.py: torch has no CUDA device\n")
    torch.backends.cudnn.benchmark = True
    if a.no_tf32:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"device {name} (torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"LeNet {a.conv1}-{a.conv2}-{a.hidden}, cuDNN TF32 "
          f"{'on' if torch.backends.cudnn.allow_tf32 else 'off'})", flush=True)
    for batch in a.batch or [64, 256]:
        b = Bench(a, batch, device)
        eager = b.time(b.eager_step, a.steps, a.repeats, a.warmup)
        graph = "-"
        if device.type == "cuda" and not a.no_graph:
            b = Bench(a, batch, device)
            b.capture(a.warmup)
            graph = f"{b.time(b.graph_step, a.steps, a.repeats, a.warmup):.1f}"
        print(f"batch {batch} eager_us {eager:.1f} graph_us {graph}", flush=True)
        if a.kernels and device.type == "cuda":
            print(f"batch {batch} kernels {Bench(a, batch, device).count_kernels()}", flush=True)


if __name__ == "__main__":
    main()
