#!/usr/bin/env python3
"""Time one training step of a net of examples/nets in PyTorch, eagerly and as a
whole-step CUDA graph, the way bench/net_step.c times libblob: warm up, synchronize,
wall clock over N steps alternating between two resident batches, synchronize; the
median of R repeats (for an even R the mean of the two middle ones, as net_step.c
computes it too).

The nets (--net) are those of examples/nets, with the same widths:
  mlp, mlp1024, mlp4096  inner products with ReLU between them, on flattened images;
  lenet                  a LeNet with ReLU after the convolutions too: conv 5x5 pad 2
                         (16) -> max pool 2x2/2 -> ReLU -> conv 5x5 (32) -> max pool
                         2x2/2 -> ReLU -> inner product (500) -> ReLU -> inner product
                         (10) (ReLU after pooling, as examples/nets/lenet.c has it).
A step is zero_grad, forward, cross-entropy, backward, SGD with momentum 0.9 and weight
decay 5e-4, and loss.item(). cuDNN picks its algorithms (cudnn.benchmark) during the
warm-up.

The graph is PyTorch's "whole-network capture" (torch.cuda.graphs): a few warm-up steps
on a side stream (they create the momentum buffers, which then stay in place), then
forward, backward and optimizer.step() captured on static input and label tensors with
the gradients set to None first, so that backward refills the graph's own .grad tensors.
SGD's state is its momentum buffers, updated in place, and its learning rate a Python
number: the captured step needs no capturable flag. A graph step copies the batch into
the static tensors, replays the graph and reads the loss.

Prints "device NAME (torch VERSION, ...)", "net NAME params P" (the learnable values,
which net_step compares with libblob's net), then per batch
"batch B eager_us E graph_us G" (graph_us is "-" on the CPU or with --no-graph), and
with --kernels the CUDA kernels one eager step launches: "batch B kernels K"."""
import argparse
import statistics
import time
import warnings

import torch


def mlp(*widths):
    """Inner products of the given widths with ReLU between them; input: widths[0]."""
    layers = []
    for i in range(len(widths) - 1):
        if i:
            layers.append(torch.nn.ReLU())
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
    return torch.nn.Sequential(*layers), (widths[0],)


def lenet(conv1, conv2, hidden, pad):
    """LeNet for 1x28x28 images with ReLU after the convolutions (and their pooling), the
    first convolution padded by pad."""
    nn = torch.nn
    side = ((28 + 2 * pad - 4) // 2 - 4) // 2  # conv 5x5, pool /2, conv 5x5, pool /2
    return nn.Sequential(
        nn.Conv2d(1, conv1, 5, padding=pad), nn.MaxPool2d(2, 2), nn.ReLU(),
        nn.Conv2d(conv1, conv2, 5), nn.MaxPool2d(2, 2), nn.ReLU(),
        nn.Flatten(), nn.Linear(conv2 * side * side, hidden), nn.ReLU(),
        nn.Linear(hidden, 10)), (1, 28, 28)


# The nets of examples/nets (mlp.c, lenet.c): a model and the shape of one input.
NETS = {
    "mlp": lambda: mlp(784, 256, 128, 10),
    "mlp1024": lambda: mlp(784, 1024, 1024, 1024, 10),
    "mlp4096": lambda: mlp(784, 4096, 4096, 4096, 10),
    "lenet": lambda: lenet(16, 32, 500, 2),
}


class Bench:
    """A fresh net, its optimizer and two resident batches."""

    def __init__(self, net, batch, device):
        torch.manual_seed(1)
        self.device = device
        model, shape = NETS[net]()
        self.model = model.to(device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9,
                                   weight_decay=5e-4)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.xs = [torch.rand(batch, *shape, device=device) for _ in range(2)]
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
    p.add_argument("--net", default="mlp", choices=sorted(NETS))
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--batch", type=int, action="append", help="repeatable; default 64 and 256")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--no-graph", action="store_true", help="time the eager step only")
    p.add_argument("--no-tf32", action="store_true",
                   help="keep cuDNN's convolutions in full float32 (PyTorch allows TF32 there)")
    p.add_argument("--kernels", action="store_true", help="count the kernels of an eager step")
    a = p.parse_args()
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.exit(1, "net_torch.py: torch has no CUDA device\n")
    torch.backends.cudnn.benchmark = True
    if a.no_tf32:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"device {name} (torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"cuDNN TF32 {'on' if torch.backends.cudnn.allow_tf32 else 'off'})", flush=True)
    params = sum(t.numel() for t in NETS[a.net]()[0].parameters())
    print(f"net {a.net} params {params}", flush=True)
    for batch in a.batch or [64, 256]:
        b = Bench(a.net, batch, device)
        eager = b.time(b.eager_step, a.steps, a.repeats, a.warmup)
        graph = "-"
        if device.type == "cuda" and not a.no_graph:
            b = Bench(a.net, batch, device)
            b.capture(a.warmup)
            graph = f"{b.time(b.graph_step, a.steps, a.repeats, a.warmup):.1f}"
        print(f"batch {batch} eager_us {eager:.1f} graph_us {graph}", flush=True)
        if a.kernels and device.type == "cuda":
            print(f"batch {batch} kernels {Bench(a.net, batch, device).count_kernels()}",
                  flush=True)


if __name__ == "__main__":
    main()
