"""The packages the tests use where they are there: each test module takes them from here
and skips, saying why, where one is None."""
import importlib


def optional(name, missing=Exception):
    """The module name, or None where importing it fails with missing (NumPy: ImportError;
    PyTorch and CuPy: any failure, a missing CUDA library say, means they are not here)."""
    try:
        return importlib.import_module(name)
    except missing:
        return None
