#!/usr/bin/env python3
"""PyTorch DDP on the MLPs of make bench-dp: one process per GPU, started by blob-launch
(or torchrun), timed as dp_step times libblob.

For each net (784-H-H-H-10, ReLU, cross-entropy, SGD lr 0.01 momentum 0.9 weight decay
5e-4, float32, --batch rows per GPU) it measures:
  one  the plain model on each rank's own GPU at once, no communication (1 GPU);
  ddp  the model wrapped in DistributedDataParallel (default 25 MiB buckets, NCCL);
  ddp_bf16  the same with DDP's bf16_compress_hook (gradients all-reduced in bfloat16).
A step is zero_grad, forward, loss, backward, optimizer step; no loss is read back.
Timing: --warmup steps, then --repeats runs of --steps steps, each between a barrier and
a synchronize; the median run, in ms per step.

Rank 0 prints, for make bench-dp (bench/dp_step.c):
    ref one_NET BATCH MS_PER_STEP
    ref ddp_NET BATCH MS_PER_STEP
    ref ddp_bf16_NET BATCH MS_PER_STEP
    info TEXT
"""
import argparse
import os
import statistics
import time

NETS = {"mlp4096": 4096, "mlp1024": 1024}


def build(torch, hidden, device):
    torch.manual_seed(1)
    return torch.nn.Sequential(
        torch.nn.Linear(784, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, 10)).to(device)


def time_model(torch, dist, model, batch, device, a):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    xs = [torch.rand(batch, 784, device=device) for _ in range(2)]
    ys = [torch.randint(0, 10, (batch,), device=device) for _ in range(2)]

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss_fn(model(xs[i % 2]), ys[i % 2]).backward()
        opt.step()

    for i in range(a.warmup):
        step(i)
    samples = []
    for _ in range(a.repeats):
        torch.cuda.synchronize(device)
        dist.barrier()
        t0 = time.perf_counter()
        for i in range(a.steps):
            step(i)
        torch.cuda.synchronize(device)
        dist.barrier()
        samples.append((time.perf_counter() - t0) / a.steps)
    return 1e3 * statistics.median(samples)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--net", action="append", choices=sorted(NETS),
                   help="repeatable: NET; default both")
    p.add_argument("--batch", type=int, action="append",
                   help="rows per GPU, one per --net; default 512 for mlp4096, 256 for mlp1024")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=20)
    a = p.parse_args()
    nets = a.net or ["mlp4096", "mlp1024"]
    batches = a.batch or [512 if n == "mlp4096" else 256 for n in nets]
    if len(batches) != len(nets):
        p.error("give one --batch per --net")
    try:
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    except Exception as e:  # torch missing or broken: dp_step says so
        print(f"error torch cannot be imported: {e}", flush=True)
        return
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    device = torch.device("cuda", local)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    for net, batch in zip(nets, batches):
        hidden = NETS[net]
        one = time_model(torch, dist, build(torch, hidden, device), batch, device, a)
        ddp = DistributedDataParallel(build(torch, hidden, device), device_ids=[local])
        many = time_model(torch, dist, ddp, batch, device, a)
        del ddp
        ddp = DistributedDataParallel(build(torch, hidden, device), device_ids=[local])
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
        many_bf16 = time_model(torch, dist, ddp, batch, device, a)
        del ddp
        if rank == 0:
            print(f"ref one_{net} {batch} {one:.4f}", flush=True)
            print(f"ref ddp_{net} {batch} {many:.4f}", flush=True)
            print(f"ref ddp_bf16_{net} {batch} {many_bf16:.4f}", flush=True)
    if rank == 0:
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
        print(f"info torch {torch.__version__}, NCCL {nccl}, {world} processes on "
              f"{torch.cuda.get_device_name(device)}, TF32 matmul "
              f"{'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'}", flush=True)
    dist.destroy_process_group()


main()
