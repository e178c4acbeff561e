"""python -m blob: which libblob the module loaded and how it was built, for bug reports
(as python -m torch.utils.collect_env)."""
import ctypes
import importlib.metadata
import os
import platform
import sys

import blob
from blob import _lib
from blob._lib import lib


def _dotted(code, scale):
    """A version int such as CUDA's 13000 (scale 1000) or NCCL's 22809 (scale 10000) as
    "13.0" or "2.28.9"."""
    if scale == 1000:
        return f"{code // 1000}.{code % 1000 // 10}"
    return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"


def _package_version(module):
    """The version of the distribution that provides `module` (cupy comes as
    cupy-cuda12x and the like)."""
    by_module = getattr(importlib.metadata, "packages_distributions", dict)()  # Python 3.10+
    for name in by_module.get(module, []) + [module]:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return "not installed"


def report():
    """The lines python -m blob prints."""
    lines = [f"libblob: {blob.library_path}",
             f"version: {_lib.version or 'unknown (the file name carries none)'}, Python "
             f"package libblob {blob.__version__}"]
    if blob.built_with_cuda():
        runtime = _lib.dependency_version("cudaRuntimeGetVersion")
        build = f"CUDA (runtime {_dotted(runtime, 1000) if runtime else 'unknown'})"
        nccl = _lib.dependency_version("ncclGetVersion")
        build += f", NCCL {_dotted(nccl, 10000)}" if nccl else ", no NCCL"
    else:
        build = "CPU-only (no CUDA, no NCCL)"
    lines.append(f"build: {build}")
    gpus = f"GPUs: {blob.device_count()}"
    driver = _lib.dependency_version("cudaDriverGetVersion")
    if driver:
        gpus += f" (driver supports CUDA {_dotted(driver, 1000)})"
    elif blob.built_with_cuda():
        gpus += " (no CUDA driver)"
    lines.append(gpus)
    info = _lib.BlasInfo()
    blas = info.summary.decode(errors="replace") if lib.blob_blas_get_info(
        ctypes.byref(info)) == _lib.OK else "unknown"
    lines.append(f"BLAS: {blas}")
    mode = lib.blob_math_mode_name(lib.blob_math_mode_get()).decode()
    if "BLOB_MATH_MODE" in os.environ:
        mode += f" (BLOB_MATH_MODE={os.environ['BLOB_MATH_MODE']!r})"
    lines.append(f"math mode: {mode}; GEMM tuning: "
                 f"{'on' if lib.blob_gemm_tuning_get() else 'off'}")
    lines.append(f"Python: {platform.python_version()} ({sys.executable}), "
                 f"{platform.platform()}")
    lines.append("packages: " + ", ".join(
        f"{name} {_package_version(name)}" for name in ("numpy", "torch", "cupy")))
    return lines


if __name__ == "__main__":
    print("\n".join(report()))
