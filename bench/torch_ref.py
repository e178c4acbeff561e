#!/usr/bin/env python3
"""PyTorch figures for blob_bench: the same operations on the same GPU, timed the same
way (one warm-up batch, then the median of timed batches).

blob_bench runs this script and merges its output, one line per figure:
    ref KEY SIZE VALUE     (ns per call; GB/s for the copy keys)
    info TEXT              (torch version and device)
    error TEXT             (a figure that failed; the others still come)
Sizes come from blob_bench's command line, so both sides measure the same ones.
"""
import argparse
import statistics
import sys
import time

MIB = 1 << 20


def size_list(text):
    return [int(s) for s in text.split(",") if s]


def shape_list(text):
    return [tuple(int(d) for d in s.split("x")) for s in text.split(",") if s]


def split(n):
    """The optimizer rows' tensors of n parameters, as blob_bench makes them: four
    weights of 40, 30, 20 and 10% of n less 1024, each followed by a bias of 1024."""
    return [size for p in (40, 30, 20, 10) for size in (n * p // 100 - 1024, 1024)]


def say(*words):
    print(*words, flush=True)


def wall_ns(fn, batch, reps, sync):
    """Median ns per call by the host clock; queued GPU work drains untimed."""
    samples = []
    for rep in range(reps + 1):
        t0 = time.perf_counter_ns()
        for _ in range(batch):
            fn()
        t = time.perf_counter_ns() - t0
        sync()
        if rep:
            samples.append(t / batch)
    return statistics.median(samples)


def event_ns(torch, fn, batch, reps):
    """Median ns per call between CUDA events on the current stream."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    samples = []
    for rep in range(reps + 1):
        start.record()
        for _ in range(batch):
            fn()
        end.record()
        end.synchronize()
        if rep:
            samples.append(start.elapsed_time(end) * 1e6 / batch)
    return statistics.median(samples)


def error(what, e):
    say("error", f"{what}: {type(e).__name__}: {e}".replace("\n", " ")[:200])


def measure(key, size, thunk):
    try:
        say("ref", key, size, f"{thunk():.6g}")
    except Exception as e:  # one failed figure must not stop the others
        error(f"{key} {size}", e)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alloc", type=size_list, default=[], help="device alloc sizes, bytes")
    ap.add_argument("--pinned", type=size_list, default=[], help="pinned alloc sizes, bytes")
    ap.add_argument("--copy", type=size_list, default=[], help="H<->D copy sizes, bytes")
    ap.add_argument("--axpy", type=size_list, default=[], help="add_ sizes, float32 elements")
    ap.add_argument("--conv", action="append", default=[],
                    help="OP:N,C,SIZE,KERNEL,PAD,STRIDE (repeatable; figures keyed by OP and "
                         "the option's index)")
    ap.add_argument("--optim", type=size_list, default=[], help="optimizer parameters, floats")
    ap.add_argument("--linear", type=shape_list, default=[], help="BxIxO relu(linear) shapes")
    args = ap.parse_args()
    try:
        import torch
    except Exception as e:
        error("import torch", e)
        return 1
    if not torch.cuda.is_available():
        say("error torch.cuda.is_available() is False")
        return 1
    dev = torch.device("cuda")
    say(f"info {torch.__version__} on {torch.cuda.get_device_name(dev)}")
    measure_allocs(torch, dev, args.alloc, args.pinned)
    measure_copies(torch, dev, args.copy)
    measure_axpys(torch, dev, args.axpy)
    measure_convs(torch, dev, args.conv)
    measure_optimizers(torch, dev, args.optim)
    measure_linears(torch, dev, args.linear)
    return 0


def measure_allocs(torch, dev, device_sizes, pinned_sizes):
    """Allocations of device and pinned blocks of the given sizes, bytes."""
    u8, sync = torch.uint8, torch.cuda.synchronize
    for n in device_sizes:
        measure("alloc_dev", n, lambda: wall_ns(
            lambda: torch.empty(n, dtype=u8, device=dev), 20 if n >= 16 * MIB else 200, 15, sync))
    for n in pinned_sizes:
        measure("alloc_pinned", n, lambda: wall_ns(
            lambda: torch.empty(n, dtype=u8, pin_memory=True), 20, 15, sync))


def measure_copies(torch, dev, sizes):
    """Copies of n bytes both ways, from pinned and from pageable host memory, in GB/s."""
    u8, sync = torch.uint8, torch.cuda.synchronize
    for n in sizes:
        try:
            pinned = torch.empty(n, dtype=u8, pin_memory=True).fill_(60)
            pageable = torch.empty(n, dtype=u8).fill_(60)
            d = torch.empty(n, dtype=u8, device=dev)
        except Exception as e:
            error(f"copy buffers of {n} bytes", e)
            continue
        batch = min(50, max(1, 64 * MIB // n))
        reps = 5 if n >= 256 * MIB else 11

        def copy_gbs(dst, src):
            return n / wall_ns(lambda: (dst.copy_(src), sync()), batch, reps, sync)

        measure("h2d_pinned", n, lambda: copy_gbs(d, pinned))
        measure("d2h_pinned", n, lambda: copy_gbs(pinned, d))
        measure("h2d_pageable", n, lambda: copy_gbs(d, pageable))
        measure("d2h_pageable", n, lambda: copy_gbs(pageable, d))
        del pinned, pageable, d
        torch.cuda.empty_cache()


def measure_axpys(torch, dev, sizes):
    """y.add_(x, alpha) on n float32 elements."""
    for n in sizes:
        try:
            x = torch.full((n,), 1.6e-10, device=dev)
            y = torch.full((n,), 0.747, device=dev)
        except Exception as e:
            error(f"axpy buffers of {n} floats", e)
            continue
        batch = 1 if n >= 1 << 22 else min(200, (1 << 22) // n)
        reps = 9 if n >= 1 << 26 else 15
        measure("axpy", n, lambda: event_ns(torch, lambda: y.add_(x, alpha=-1), batch, reps))
        del x, y
        torch.cuda.empty_cache()


def measure_convs(torch, dev, cases):
    """Each --conv case (OP:N,C,SIZE,KERNEL,PAD,STRIDE), keyed by OP and its index."""
    for index, case in enumerate(cases):
        try:
            op, dims = case.split(":")
            fn, nbytes = conv_op(torch, dev, op, *map(int, dims.split(",")))
        except Exception as e:
            error(f"conv {case}", e)
            continue
        batch = 3 if nbytes > 1e9 else 10 if nbytes > 1e8 else 200
        measure(op, index, lambda: event_ns(torch, fn, batch, 7 if nbytes > 1e9 else 11))
        del fn
        torch.cuda.empty_cache()


def measure_optimizers(torch, dev, sizes):
    """A fused SGD and AdamW step over n float parameters (split as blob_bench splits them)."""
    for n in sizes:
        big = n > 16 << 20
        batch, reps = (3, 7) if big else (10, 9)
        try:
            params = [torch.full((k,), 0.747, device=dev) for k in split(n)]
            for p in params:
                p.grad = torch.full_like(p, 1.6e-10)
        except Exception as e:
            error(f"optimizer tensors of {n} floats", e)
            continue
        for key, make in (
            ("sgd", lambda: torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=5e-4,
                                            fused=True)),
            ("adamw", lambda: torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-2, fused=True)),
        ):
            try:
                opt = make()
                opt.step()  # its state (momentum, moments) exists from here on
            except Exception as e:
                error(f"{key} {n}", e)
                continue
            measure(key, n, lambda: event_ns(torch, opt.step, batch, reps))
            del opt
        del params
        torch.cuda.empty_cache()


def measure_linears(torch, dev, shapes):
    """relu(linear) of each BxIxO shape at float32, TF32 and bfloat16 matmul precision."""
    func = torch.nn.functional
    for index, (b, i, o) in enumerate(shapes):
        x = torch.rand(b, i, device=dev)
        w = torch.rand(o, i, device=dev) - 0.5
        bias = torch.rand(o, device=dev) - 0.5
        batch = 20 if 2 * b * i * o > 1e10 else 200
        for mode, precision in (("fp32", "highest"), ("tf32", "high"), ("bf16", "medium")):
            torch.set_float32_matmul_precision(precision)
            measure(f"linear_{mode}", index,
                    lambda: event_ns(torch, lambda: torch.relu(func.linear(x, w, bias)), batch, 11))
        torch.set_float32_matmul_precision("highest")
        del x, w, bias


def conv_op(torch, dev, op, num, channels, size, kernel, pad, stride):
    """A thunk running one of blob_bench's section C operations on float32 NCHW data,
    and the bytes of its input and output (blob_bench sizes its timed batches by them)."""
    F = torch.nn.functional
    aten = torch.ops.aten
    x = torch.rand(num, channels, size, size, device=dev) * 2 - 1
    k, p, s = [kernel] * 2, [pad] * 2, [stride] * 2
    if op in ("im2col", "col2im"):
        cols = F.unfold(x, k, padding=p, stride=s)
        nbytes = (x.numel() + cols.numel()) * 4
        if op == "im2col":
            return (lambda: F.unfold(x, k, padding=p, stride=s)), nbytes
        return (lambda: F.fold(cols, (size, size), k, padding=p, stride=s)), nbytes
    y, idx = F.max_pool2d(x, k, s, p, return_indices=True)
    dy = torch.rand_like(y)
    nbytes = (x.numel() + y.numel()) * 4
    thunks = {
        "max_fwd": lambda: F.max_pool2d(x, k, s, p, return_indices=True),
        "max_bwd": lambda: aten.max_pool2d_with_indices_backward(dy, x, k, s, p, [1, 1],
                                                                 False, idx),
        "avg_fwd": lambda: F.avg_pool2d(x, k, s, p, count_include_pad=True),
        "avg_bwd": lambda: aten.avg_pool2d_backward(dy, x, k, s, p, False, True, None),
    }
    return thunks[op], nbytes


if __name__ == "__main__":
    sys.exit(main())
