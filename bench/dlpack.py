#!/usr/bin/env python3
"""DLPack from Python, part of make bench: what a NumPy or PyTorch user pays to see a
blob's memory (and a blob to see theirs), beside what the same call costs between
NumPy or PyTorch objects themselves, in the same run. Each figure is the median over
timed batches (after a warm-up batch) of one call whose result is dropped at once, so
the consumer's deleter is part of it. The blob is 1024 float32.

    BLOB_LIBRARY=build/cuda/libblob.so python3 bench/dlpack.py
"""
import sys
from pathlib import Path

from torch_ref import wall_ns  # the timing loop of the PyTorch figures (bench/)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import blob  # noqa: E402

NUMPY_GOAL_US = 10.0
BATCH, REPS = 2000, 15


def us_per_call(fn):
    return wall_ns(fn, BATCH, REPS, lambda: None) / 1e3


def row(label, ours, reference=None, ref_label="", goal=None):
    text = f"{label:<44}{ours:>9.2f}"
    text += f"{reference:>11.2f}  {ref_label}" if reference is not None else f"{'-':>11}"
    if goal is not None:
        text += f"  {'PASS' if ours <= goal else 'MISS'} (goal <= {goal:g} us)"
    print(text, flush=True)


def main():
    try:
        import numpy as np
    except ImportError:
        print("\nD2. DLPack from Python: skipped (NumPy is not importable)")
        return 0
    print(f"\nD2. DLPack from Python (us per call; reference: the same call between the "
          f"library's own objects)\n{'':<44}{'us':>9}{'ref us':>11}")
    b = blob.Blob((1024,), device="cpu")
    b.data[...] = 1.0
    a = np.ones(1024, np.float32)
    row("numpy.from_dlpack(b.data), host blob", us_per_call(lambda: np.from_dlpack(b.data)),
              us_per_call(lambda: np.from_dlpack(a)), "numpy.from_dlpack(ndarray)",
              NUMPY_GOAL_US)
    row("blob.from_dlpack(ndarray) + close", us_per_call(lambda: blob.from_dlpack(a).close()),
        us_per_call(lambda: np.from_dlpack(a)), "numpy.from_dlpack(ndarray)")

    try:
        import torch
    except Exception as e:  # noqa: BLE001
        print(f"PyTorch rows skipped: torch does not import ({type(e).__name__}: {e})")
        return 0
    t = torch.ones(1024)
    host = b.view("data", "cpu")
    row("torch.from_dlpack(b host view)", us_per_call(lambda: torch.from_dlpack(host)),
        us_per_call(lambda: torch.from_dlpack(t)), "torch.from_dlpack(CPU tensor)")
    if blob.device_count() and torch.cuda.is_available():
        g = blob.Blob((1024,), device=0)
        g.data[...] = 1.0
        tc = torch.ones(1024, device="cuda")
        row("torch.from_dlpack(b), device side", us_per_call(lambda: torch.from_dlpack(g)),
            us_per_call(lambda: torch.from_dlpack(tc)), "torch.from_dlpack(CUDA tensor)")
        row("blob.from_dlpack(CUDA tensor) + close",
            us_per_call(lambda: blob.from_dlpack(tc).close()),
            us_per_call(lambda: torch.from_dlpack(tc)), "torch.from_dlpack(CUDA tensor)")
    else:
        print("GPU rows skipped: no GPU for libblob or PyTorch")
    print(f"torch {torch.__version__}, numpy {np.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
