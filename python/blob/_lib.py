"""Loading libblob and declaring the C functions the module calls (ctypes)."""
import ctypes
import os
from ctypes import POINTER, c_bool, c_char_p, c_double, c_int, c_int64, c_uint, c_void_p
from pathlib import Path

# Status codes, dtypes, parts and sides, as in blob/status.h, tensor.h and dlpack.h.
OK = 0
FLOAT32, FLOAT64 = 0, 1
PART_DATA, PART_DIFF = 0, 1
SIDE_HOST, SIDE_DEVICE = 0, 1
DLPACK_WRITABLE, DLPACK_CUDA_HOST, DLPACK_UNORDERED = 1, 2, 4
HOST_ONLY, DEVICE_DEFAULT = -1, -2
NO_TRANS, TRANS = 0, 1
# DLPack device types
KDLCPU, KDLCUDA, KDLCUDAHOST = 1, 2, 3


def _candidates():
    """Where libblob is looked for: $BLOB_LIBRARY alone when set; otherwise the build
    tree of the checkout this package sits in, then of the working directory (a CUDA
    build before a CPU-only one), then the system's loader (an installed libblob)."""
    env = os.environ.get("BLOB_LIBRARY")
    if env:
        return [env]
    found = []
    for root in (Path(__file__).resolve().parents[2], Path.cwd()):
        for build in ("cuda", "cpu"):
            lib = root / "build" / build / "libblob.so"
            if lib.exists() and str(lib) not in found:
                found.append(str(lib))
    return found + ["libblob.so.0"]


def _load():
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise ImportError(
        "libblob not found (build it with make, install it with make install, or set "
        "BLOB_LIBRARY to the path of libblob.so): " + "; ".join(errors))


lib, path = _load()

_STATUS = c_int
_PROTOTYPES = {
    "blob_status_name": (c_char_p, [c_int]),
    "blob_last_error": (c_char_p, []),
    "blob_device_count": (c_int, []),
    "blob_built_with_cuda": (c_bool, []),
    "blob_device_get": (_STATUS, [POINTER(c_int)]),
    "blob_device_set": (_STATUS, [c_int]),
    "blob_device_synchronize": (_STATUS, []),
    "blob_get_stream": (c_void_p, []),
    "blob_set_stream": (None, [c_void_p]),
    "blob_create": (_STATUS, [POINTER(c_void_p), c_int, c_int, c_int, POINTER(c_int64)]),
    "blob_free": (None, [c_void_p]),
    "blob_reshape": (_STATUS, [c_void_p, c_int, POINTER(c_int64)]),
    "blob_get_dtype": (c_int, [c_void_p]),
    "blob_device": (c_int, [c_void_p]),
    "blob_num_axes": (c_int, [c_void_p]),
    "blob_count": (c_int64, [c_void_p]),
    "blob_shape": (POINTER(c_int64), [c_void_p]),
    "blob_update": (_STATUS, [c_void_p]),
    "blob_copy_from": (_STATUS, [c_void_p, c_void_p, c_bool, c_bool]),
    "blob_save_npy": (_STATUS, [c_void_p, c_int, c_char_p]),
    "blob_load_npy": (_STATUS, [c_void_p, c_int, c_char_p]),
    "blob_to_dlpack": (_STATUS, [c_void_p, c_int, c_int, c_uint, c_void_p, POINTER(c_void_p)]),
    "blob_from_dlpack": (_STATUS, [POINTER(c_void_p), c_void_p, c_int]),
    "blob_dlpack_delete": (None, [c_void_p]),
}
for _side in ("cpu", "gpu"):
    for _part in ("data", "diff"):
        _PROTOTYPES[f"blob_{_side}_{_part}"] = (_STATUS, [c_void_p, POINTER(c_void_p)])
        _PROTOTYPES[f"blob_mutable_{_side}_{_part}"] = (_STATUS, [c_void_p, POINTER(c_void_p)])
    # the math used by the examples: C = alpha op(A) op(B) + beta C, y = max(x, 0)
    _PROTOTYPES[f"blob_{_side}_gemm"] = (
        _STATUS, [c_int, c_int, c_int, c_int64, c_int64, c_int64, c_double, c_void_p, c_void_p,
                  c_double, c_void_p])
    _PROTOTYPES[f"blob_{_side}_relu_forward"] = (_STATUS, [c_int, c_int64, c_void_p, c_void_p])
    _PROTOTYPES[f"blob_{_side}_set"] = (_STATUS, [c_int, c_int64, c_double, c_void_p])

for _name, (_restype, _argtypes) in _PROTOTYPES.items():
    _fn = getattr(lib, _name)
    _fn.restype = _restype
    _fn.argtypes = _argtypes

# PyCapsule functions of the running interpreter. Destructor arguments are plain
# pointers: a py_object argument would revive the capsule while it is being freed.
api = ctypes.pythonapi
CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, c_void_p)
api.PyCapsule_New.restype = ctypes.py_object
api.PyCapsule_New.argtypes = [c_void_p, c_char_p, CAPSULE_DESTRUCTOR]
api.PyCapsule_IsValid.restype = c_int
api.PyCapsule_IsValid.argtypes = [ctypes.py_object, c_char_p]
api.PyCapsule_GetPointer.restype = c_void_p
api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, c_char_p]
api.PyCapsule_SetName.restype = c_int
api.PyCapsule_SetName.argtypes = [ctypes.py_object, c_char_p]
# the same two for the destructor, on the raw pointer of a capsule being freed (with the
# GIL held, as every Python C API call)
capsule_is_valid = ctypes.PYFUNCTYPE(c_int, c_void_p, c_char_p)(("PyCapsule_IsValid", api))
capsule_get_pointer = ctypes.PYFUNCTYPE(c_void_p, c_void_p, c_char_p)(
    ("PyCapsule_GetPointer", api))
