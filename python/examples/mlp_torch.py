#!/usr/bin/env python3
"""The MLP example's trained weights in PyTorch, without a copy.

    make demo                                  # trains, writes build/<cuda|cpu>/demo-out/mlp
    python3 python/examples/mlp_torch.py       # [--weights DIR] [--data DIR] [--check]

The weights (ip{1,2,3}.{weights,bias}.npy, weights num_output x num_input) are loaded
into blobs, on the GPU when there is one, and handed to PyTorch through DLPack: the torch
model's parameters are the blobs' own device memory (the script checks the addresses).
The torch model (784-256-128-10, ReLU, inputs pixels/255) evaluates the Fashion-MNIST test
set, and so does the same forward computed by libblob itself (its GEMM and ReLU, through
the module), and the two accuracies are printed side by side. With --check the script
fails when they differ by more than 0.01 points; without PyTorch it says it is skipped.
"""
import argparse
import gzip
import os
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

import blob  # noqa: E402
from blob import _lib  # noqa: E402

LAYERS = ("ip1", "ip2", "ip3")
DIMS = (784, 256, 128, 10)


def default_weights():
    """Where make demo leaves the MLP's weights: build/<cuda|cpu>/demo-out/mlp."""
    for build in ("cuda", "cpu"):
        for d in (ROOT / "build" / build / "demo-out" / "mlp", ROOT / "build" / build / "demo-out"):
            if (d / "ip1.weights.npy").exists():
                return d
    return ROOT / "build" / "cuda" / "demo-out" / "mlp"


def read_idx(path, magic, dims):
    """An IDX file's payload as bytes, after checking its magic number and dims."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    head = 4 * (1 + len(dims))
    if len(data) < head or struct.unpack(">I", data[:4])[0] != magic:
        raise ValueError(f"{path}: not an IDX file of magic {magic}")
    found = struct.unpack(f">{len(dims)}I", data[4:head])
    if any(want is not None and want != got for want, got in zip(dims, found)):
        raise ValueError(f"{path}: dims {found}")
    size = 1
    for d in found:
        size *= d
    if len(data) != head + size:
        raise ValueError(f"{path}: {len(data) - head} bytes of payload, {size} expected")
    return data[head:], found[0]


def load_test_set(np, directory):
    pixels, n = read_idx(Path(directory) / "t10k-images-idx3-ubyte.gz", 2051, (None, 28, 28))
    labels, m = read_idx(Path(directory) / "t10k-labels-idx1-ubyte.gz", 2049, (None,))
    if n != m:
        raise ValueError(f"{n} images but {m} labels")
    x = np.frombuffer(pixels, np.uint8).reshape(n, 784).astype(np.float32) / 255.0
    return x, np.frombuffer(labels, np.uint8).astype(np.int64)


def library_forward(np, params, x, device):
    """The logits by libblob's own math on the blobs (cuBLAS on the GPU, CBLAS on the
    host): y = x W^T + 1 b^T, ReLU between layers, as the C example's layers compute."""
    side = "cpu" if device == "cpu" else "gpu"
    gemm = getattr(_lib.lib, f"blob_{side}_gemm")
    relu = getattr(_lib.lib, f"blob_{side}_relu_forward")
    fill = getattr(_lib.lib, f"blob_{side}_set")
    rows = x.shape[0]
    ones = blob.Blob((rows, 1), device=device)
    check = blob._check
    check(fill(_lib.FLOAT32, rows, 1.0, ones.pointer(writable=True)))
    bottom = blob.from_dlpack(x, device=device)  # borrows the host array; uploaded once
    for i, name in enumerate(LAYERS):
        w, b = params[name + ".weights"], params[name + ".bias"]
        top = blob.Blob((rows, DIMS[i + 1]), device=device)
        y = top.pointer(writable=True)
        check(gemm(_lib.FLOAT32, _lib.NO_TRANS, _lib.TRANS, rows, DIMS[i + 1], DIMS[i], 1.0,
                   bottom.pointer(), w.pointer(), 0.0, y))
        check(gemm(_lib.FLOAT32, _lib.NO_TRANS, _lib.NO_TRANS, rows, DIMS[i + 1], 1, 1.0,
                   ones.pointer(), b.pointer(), 1.0, y))
        if i + 1 < len(LAYERS):
            check(relu(_lib.FLOAT32, rows * DIMS[i + 1], y, y))
        bottom = top
    return np.array(bottom.view("data", "cpu", writable=False).numpy())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--weights", default=None, help="directory of ip*.npy (make demo's)")
    ap.add_argument("--data", default=os.environ.get("FASHION_MNIST_DIR",
                                                     "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless both accuracies agree to 0.01 points")
    args = ap.parse_args()

    try:
        import numpy as np
        import torch
    except Exception as e:  # noqa: BLE001
        print(f"skipped: 1 example (mlp_torch.py: {type(e).__name__}: {e})")
        return 0
    weights = Path(args.weights) if args.weights else default_weights()
    if not (weights / "ip1.weights.npy").exists():
        print(f"mlp_torch: no weights in {weights}: run make demo first", file=sys.stderr)
        return 1

    gpu = blob.device_count() > 0 and torch.cuda.is_available()
    device = 0 if gpu else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False  # plain float32, as libblob computes
    torch.backends.cudnn.allow_tf32 = False

    params, tensors, same = {}, {}, 0
    for name in LAYERS:
        for kind in ("weights", "bias"):
            key = f"{name}.{kind}"
            b = blob.Blob.from_npy(weights / f"{key}.npy", device=device)
            params[key] = b
            tensors[key] = torch.from_dlpack(b)  # the blob's memory itself
            same += tensors[key].data_ptr() == b.pointer()
    print(f"{len(params)} parameter blobs on {'GPU 0' if gpu else 'the CPU'}, handed to "
          f"PyTorch through DLPack: {same} of {len(params)} at the blobs' own addresses")

    model = torch.nn.Sequential(
        torch.nn.Linear(DIMS[0], DIMS[1]), torch.nn.ReLU(),
        torch.nn.Linear(DIMS[1], DIMS[2]), torch.nn.ReLU(),
        torch.nn.Linear(DIMS[2], DIMS[3]))
    for i, name in enumerate(LAYERS):
        layer = model[2 * i]
        w, b = tensors[name + ".weights"], tensors[name + ".bias"]
        if w.shape != layer.weight.shape or b.shape != layer.bias.shape:
            print(f"mlp_torch: {name} has shape {tuple(w.shape)}, {tuple(b.shape)}",
                  file=sys.stderr)
            return 1
        layer.weight = torch.nn.Parameter(w, requires_grad=False)  # no copy either
        layer.bias = torch.nn.Parameter(b, requires_grad=False)
    same_model = sum(getattr(model[2 * i], attr).data_ptr() == params[f"{name}.{kind}"].pointer()
                     for i, name in enumerate(LAYERS)
                     for attr, kind in (("weight", "weights"), ("bias", "bias")))

    x, labels = load_test_set(np, args.data)
    with torch.no_grad():
        logits = model(torch.from_numpy(x).to("cuda" if gpu else "cpu"))
    torch_pred = logits.argmax(1).cpu().numpy()
    lib_pred = library_forward(np, params, x, device).argmax(1)
    n = len(labels)
    torch_acc = 100.0 * (torch_pred == labels).sum() / n
    lib_acc = 100.0 * (lib_pred == labels).sum() / n
    diff = abs(torch_acc - lib_acc)
    print(f"torch model parameters at the blobs' addresses: {same_model} of {len(params)}")
    print(f"test accuracy on {n} images: PyTorch {torch_acc:.2f}%, libblob {lib_acc:.2f}% "
          f"(difference {diff:.2f} points; {(torch_pred != lib_pred).sum()} predictions "
          f"differ)")
    if args.check and (diff > 0.01 + 1e-9 or same != len(params) or same_model != len(params)):
        print("mlp_torch: FAILED: the accuracies differ by more than 0.01 points, or a "
              "parameter was copied", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
