#!/usr/bin/env python3
"""Time one training step of a net of examples/nets in PyTorch, the way
bench/net_step.c times libblob: warm up, synchronize, wall clock over N steps
alternating between two resident batches, synchronize; the median of R repeats (for an
even R the mean of the two middle ones, as net_step.c computes it too), and the net's
peak GPU memory in them. Four ways in the float32 precisions (--math fp32, tf32, bf16):

  eager     torch.optim.SGD as it comes (its foreach implementation on CUDA);
  fused     the same with torch.optim.SGD(fused=True);
  graph     PyTorch's "whole-network capture" (torch.cuda.graphs, CUDA only): a few
            warm-up steps on a side stream (they create the momentum buffers, which then
            stay in place), then forward, backward and optimizer.step() captured on
            static input and label tensors with the gradients set to None first, so that
            backward refills the graph's own .grad tensors. SGD's state is its momentum
            buffers, updated in place, and its learning rate a Python number: the
            captured step needs no capturable flag. A graph step copies the batch into
            the static tensors, replays the graph and reads the loss;
  compile   torch.compile (inductor, --compile-mode, default "default") of the model and
            of the optimizer's step, eager SGD as above; the compilation happens in the
            warm-up and is not timed.

In the mixed precisions, as libblob's nets with 16-bit activations and weight copies:
  --math bf16-mixed  autocast (torch.autocast(bfloat16) around forward and loss, float32
                     parameters, gradients and momentum; its cast cache off, as a graph
                     capture needs, which costs these nets nothing: they use each weight
                     once), eager and as a whole-step graph; then model.to(bfloat16), every
                     parameter, gradient and momentum in bfloat16, eager and as a graph;
  --math fp16-mixed  autocast(float16) with torch.amp.GradScaler (its default scale 65536,
                     as libblob's), eager.

The nets (--net) are those of examples/nets, with the same widths:
  mlp, mlp1024, mlp4096  inner products with ReLU between them, on flattened images;
  lenet                  a LeNet with ReLU after the convolutions too: conv 5x5 pad 2
                         (16) -> max pool 2x2/2 -> ReLU -> conv 5x5 (32) -> max pool
                         2x2/2 -> ReLU -> inner product (500) -> ReLU -> inner product
                         (10) (ReLU after pooling, as examples/nets/lenet.c has it).
A step is zero_grad, forward, cross-entropy, backward, SGD with momentum 0.9 and weight
decay 5e-4, and loss.item(). cuDNN picks its algorithms (cudnn.benchmark) during the
warm-up.

--math sets the float32 matmul precision as libblob's math modes do: fp32 "highest"
(exact), tf32 "high" (TF32 tensor cores), bf16 "medium" (bfloat16 products with float32
storage and accumulation, as libblob's BF16 mode: torch.set_float32_matmul_precision, not
autocast, which would also store activations in bfloat16); "highest" in the mixed
precisions. --threads sets torch's host threads (torch.set_num_threads).

The peak: torch.cuda.max_memory_allocated over the timed steps (its peak reset after the
warm-up) less what stays allocated once the net, its optimizer and batches are dropped
(cuBLAS's workspaces), as net_step measures libblob's.

Prints "device NAME (torch VERSION, ...)", "net NAME params P" (the learnable values,
which net_step compares with libblob's net), then per batch "batch B us W1 W2 W3 W4"
and "batch B peak_mib W1 W2 W3 W4", the four ways in the order above ("-" for a figure
not measured: a way the precision lacks, the graphs on the CPU or with --no-graph, the
compiled step with --no-compile, every peak on the CPU, a way that failed),
"batch B error WAY: WHY" for each way that failed, and with --kernels the CUDA kernels
one eager step of the first way launches: "batch B kernels K"."""
import argparse
import contextlib
import gc
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
    """A fresh net, its optimizer and two resident batches; fused: SGD(fused=True);
    autocast: the dtype of torch.autocast around forward and loss (None: none); dtype: of
    the parameters and inputs; scaler: a torch.amp.GradScaler."""

    def __init__(self, net, batch, device, fused=False, autocast=None, dtype=torch.float32,
                 scaler=False):
        torch.manual_seed(1)
        self.device = device
        model, shape = NETS[net]()
        self.model = model.to(device, dtype)
        extra = {"fused": True} if fused else {}
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9,
                                   weight_decay=5e-4, **extra)
        self.opt_step = self.opt.step
        self.autocast = contextlib.nullcontext
        if autocast:
            self.autocast = lambda: torch.autocast(device.type, autocast, cache_enabled=False)
        self.scaler = torch.amp.GradScaler(device.type) if scaler else None
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.xs = [torch.rand(batch, *shape, device=device, dtype=dtype) for _ in range(2)]
        self.ys = [torch.randint(0, 10, (batch,), device=device) for _ in range(2)]

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def compile(self, mode):
        """Run the model and the optimizer's step through torch.compile."""
        self.model = torch.compile(self.model, mode=mode)
        self.opt_step = torch.compile(self.opt.step, mode=mode)

    def forward_backward(self, x, y):
        with self.autocast():
            loss = self.loss_fn(self.model(x), y)
        if self.scaler:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            loss.backward()
            self.opt_step()
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
        """Median microseconds per step over `repeats` runs of `steps` steps, and the most
        bytes allocated on the GPU in them (None on the CPU)."""
        cuda = self.device.type == "cuda"
        for i in range(warmup):
            step(i)
        self.sync()
        if cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        samples = []
        for _ in range(repeats):
            self.sync()
            t0 = time.perf_counter()
            for i in range(steps):
                step(i)
            self.sync()
            samples.append((time.perf_counter() - t0) / steps)
        peak = torch.cuda.max_memory_allocated(self.device) if cuda else None
        return 1e6 * statistics.median(samples), peak

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


def one_line(e):
    """An exception as one short line."""
    text = " ".join(f"{type(e).__name__}: {e}".split())
    return text[:150]


def figure(value):
    return "-" if value is None else f"{value:.1f}"


# The ways of each --math, in their printed order: a name (net_step's table heads say the
# same), Bench's options and how a step runs (eager, graph, compile).
FLOAT32_WAYS = [("eager", {}, "eager"), ("fused SGD", {"fused": True}, "eager"),
                ("graph", {}, "graph"), ("compile", {}, "compile")]
BF16 = {"autocast": torch.bfloat16}
BF16_ALL = {"dtype": torch.bfloat16}
# --math: the float32 matmul precision and the ways.
MATHS = {
    "fp32": ("highest", FLOAT32_WAYS),
    "tf32": ("high", FLOAT32_WAYS),
    "bf16": ("medium", FLOAT32_WAYS),
    "bf16-mixed": ("highest", [("autocast", BF16, "eager"), ("ac graph", BF16, "graph"),
                               ("bf16 eager", BF16_ALL, "eager"),
                               ("bf16 graph", BF16_ALL, "graph")]),
    "fp16-mixed": ("highest", [("ac+scaler", {"autocast": torch.float16, "scaler": True},
                                "eager")]),
}
WAYS = 4  # the figures printed per batch


def measure(a, device, batch, options, run):
    """Microseconds per step of one way, and its net's peak MiB (None on the CPU)."""
    b = Bench(a.net, batch, device, **options)
    if run == "graph":
        b.capture(a.warmup)
    elif run == "compile":
        b.compile(a.compile_mode)
    us, peak = b.time(b.graph_step if run == "graph" else b.eager_step, a.steps, a.repeats,
                      a.warmup)
    if peak is None:
        return us, None
    del b
    gc.collect()
    torch.cuda.synchronize(device)
    return us, (peak - torch.cuda.memory_allocated(device)) / 2**20


def run_batch(a, device, batch):
    """Print one batch's figures of every way of --math."""
    us, peaks = [None] * WAYS, [None] * WAYS
    ways = MATHS[a.math][1]
    for i, (name, options, run) in enumerate(ways):
        if (run == "graph" and (device.type != "cuda" or a.no_graph)) or \
                (run == "compile" and a.no_compile):
            continue
        try:
            us[i], peaks[i] = measure(a, device, batch, options, run)
        except Exception as e:  # noqa: BLE001 - a way that fails is reported, not fatal
            print(f"batch {batch} error {name}: {one_line(e)}", flush=True)
    print(f"batch {batch} us {' '.join(map(figure, us))}", flush=True)
    print(f"batch {batch} peak_mib {' '.join(map(figure, peaks))}", flush=True)
    if a.kernels and device.type == "cuda":
        kernels = Bench(a.net, batch, device, **ways[0][1]).count_kernels()
        print(f"batch {batch} kernels {kernels}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--net", default="mlp", choices=sorted(NETS))
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--batch", type=int, action="append", help="repeatable; default 64 and 256")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--math", default="fp32", choices=sorted(MATHS),
                   help="float32 matmul precision, as libblob's math modes, or mixed precision")
    p.add_argument("--threads", type=int, help="host threads (torch.set_num_threads)")
    p.add_argument("--no-graph", action="store_true", help="no whole-step CUDA graph")
    p.add_argument("--no-compile", action="store_true", help="no torch.compile")
    p.add_argument("--compile-mode", default="default",
                   help='torch.compile mode, e.g. "max-autotune-no-cudagraphs"')
    p.add_argument("--no-tf32", action="store_true",
                   help="keep cuDNN's convolutions in full float32 (PyTorch allows TF32 there)")
    p.add_argument("--kernels", action="store_true", help="count the kernels of an eager step")
    a = p.parse_args()
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.exit(1, "net_torch.py: torch has no CUDA device\n")
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.backends.cudnn.benchmark = True
    precision = MATHS[a.math][0]
    torch.set_float32_matmul_precision(precision)
    if a.no_tf32:
        torch.backends.cudnn.allow_tf32 = False
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"device {name} (torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"cuDNN TF32 {'on' if torch.backends.cudnn.allow_tf32 else 'off'}, "
          f"matmul {precision}, {torch.get_num_threads()} host threads)", flush=True)
    params = sum(t.numel() for t in NETS[a.net]()[0].parameters())
    print(f"net {a.net} params {params}", flush=True)
    for batch in a.batch or [64, 256]:
        run_batch(a, device, batch)


if __name__ == "__main__":
    main()
