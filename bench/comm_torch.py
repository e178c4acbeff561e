#!/usr/bin/env python3
"""torch.distributed all-reduce for make bench-comm: one process per GPU, started by
blob-launch (or torchrun), timed as blob_bench_comm times blob_comm: a warm-up batch,
then the median of 5 batches of the same number of calls, host clock around each
batch plus a synchronize.

Rank 0 prints, one line per size (bytes from the command line, comma-separated):
    ref allreduce BYTES US_PER_CALL
    info TEXT
"""
import os
import statistics
import sys
import time

GIB = 1 << 30


def main():
    try:
        import torch
        import torch.distributed as dist
    except Exception as e:  # torch missing or broken: blob_bench_comm says so
        print(f"error torch cannot be imported: {e}", flush=True)
        return
    rank = int(os.environ["RANK"])
    local = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    sizes = [int(s) for s in sys.argv[1].split(",")] if len(sys.argv) > 1 else [1 << 24]
    for size in sizes:
        x = torch.full((size // 4,), 0.0115, device="cuda")
        batch = max(5, min(200, 2 * GIB // size))
        samples = []
        for rep in range(6):
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(batch):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            if rep:
                samples.append((time.perf_counter() - t0) / batch)
        if rank == 0:
            print(f"ref allreduce {size} {statistics.median(samples) * 1e6:.3f}", flush=True)
        del x
    if rank == 0:
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
        print(f"info torch {torch.__version__}, NCCL {nccl}, {world} processes", flush=True)
    dist.destroy_process_group()


main()
