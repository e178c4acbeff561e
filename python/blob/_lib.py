"""Loading libblob and declaring the C functions and DLPack structs the module uses
(ctypes)."""
import ctypes
import os
import re
from ctypes import (CFUNCTYPE, POINTER, Structure, c_bool, c_char, c_char_p, c_double, c_int,
                    c_int32, c_int64, c_uint, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p)
from pathlib import Path

# Status codes, dtypes, parts and sides, as in blob/status.h, tensor.h and dlpack.h.
OK = 0
FLOAT32, FLOAT64, BFLOAT16, FLOAT16, INT32, INT64, UINT8 = range(7)
PART_DATA, PART_DIFF = 0, 1
SIDE_HOST, SIDE_DEVICE = 0, 1
DLPACK_WRITABLE, DLPACK_CUDA_HOST, DLPACK_UNORDERED = 1, 2, 4
HOST_ONLY, DEVICE_DEFAULT = -1, -2
NO_TRANS, TRANS = 0, 1
# DLPack device types
KDLCPU, KDLCUDA, KDLCUDAHOST = 1, 2, 3
# DLPack type codes
KDLINT, KDLUINT, KDLFLOAT, KDLBFLOAT = 0, 1, 2, 4
# DLPack 1.0: the version this module speaks, and the flags of a versioned tensor
DLPACK_VERSION = (1, 0)
DLPACK_FLAG_READ_ONLY, DLPACK_FLAG_IS_COPIED = 1, 2
C_INT_MAX = 2**31 - 1


def _candidates():
    """Where libblob is looked for: $BLOB_LIBRARY alone when set; otherwise the build
    tree of the libblob checkout this package sits in, if it sits in one (a CUDA build
    before a CPU-only one), then the system's loader (an installed libblob). Never the
    working directory."""
    env = os.environ.get("BLOB_LIBRARY")
    if env:
        return [env]
    root = Path(__file__).resolve().parents[2]
    found = []
    if (root / "include" / "blob" / "blob.h").is_file():
        found = [str(p) for p in (root / "build" / b / "libblob.so" for b in ("cuda", "cpu"))
                 if p.exists()]
    return found + ["libblob.so.0"]


def _load():
    errors = []
    for candidate in _candidates():
        try:
            return ctypes.CDLL(candidate)
        except OSError as e:
            errors.append(f"{candidate}: {e}")
    raise ImportError(
        "libblob not found (build it with make, install it with make install, or set "
        "BLOB_LIBRARY to the path of libblob.so): " + "; ".join(errors))


class _DlInfo(Structure):
    _fields_ = [("dli_fname", c_char_p), ("dli_fbase", c_void_p), ("dli_sname", c_char_p),
                ("dli_saddr", c_void_p)]


def _file_of(library):
    """The file the loader mapped for `library` (through dladdr on one of its
    functions), links resolved; the name it was loaded by where dladdr cannot tell."""
    info = _DlInfo()
    try:
        dladdr = ctypes.CDLL(None).dladdr
        found = dladdr(ctypes.cast(library.blob_create, c_void_p), ctypes.byref(info))
    except AttributeError:  # a libc without dladdr in its global symbols
        found = 0
    if not found or not info.dli_fname:
        return library._name
    return os.path.realpath(os.fsdecode(info.dli_fname))


lib = _load()
path = _file_of(lib)
_match = re.search(r"\.so\.(\d+\.\d+\.\d+)$", path)
version = _match.group(1) if _match else None  # from the file name: the C API has no call


class BlasInfo(Structure):
    """blob_blas_info of blob/math.h."""
    _fields_ = [("name", c_char * 64), ("core", c_char * 32), ("detected", c_char * 32),
                ("threads", c_int), ("summary", c_char * 192)]


# DLPack's structs (dlpack/dlpack.h, 1.0), declared here as ctypes modules do.
class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32),
                ("dtype", DLDataType), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


# A deleter takes the managed tensor's address (either kind of managed tensor).
DELETER = CFUNCTYPE(None, c_void_p)


class DLManagedTensor(Structure):
    """DLPack 0.6's managed tensor (capsule "dltensor")."""
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", DELETER)]


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(Structure):
    """DLPack 1.0's managed tensor (capsule "dltensor_versioned")."""
    _fields_ = [("version", DLPackVersion), ("manager_ctx", c_void_p), ("deleter", DELETER),
                ("flags", c_uint64), ("dl_tensor", DLTensor)]


_STATUS = c_int
_PROTOTYPES = {
    "blob_status_name": (c_char_p, [c_int]),
    "blob_last_error": (c_char_p, []),
    "blob_device_count": (c_int, []),
    "blob_built_with_cuda": (c_bool, []),
    "blob_device_get": (_STATUS, [POINTER(c_int)]),
    "blob_device_set": (_STATUS, [c_int]),
    "blob_device_synchronize": (_STATUS, []),
    "blob_stream_get": (c_void_p, []),
    "blob_stream_set": (None, [c_void_p]),
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
    "blob_convert_from": (_STATUS, [c_void_p, c_void_p, c_bool, c_bool]),
    "blob_save_npy": (_STATUS, [c_void_p, c_int, c_char_p]),
    "blob_load_npy": (_STATUS, [c_void_p, c_int, c_char_p]),
    "blob_to_dlpack": (_STATUS, [c_void_p, c_int, c_int, c_uint, c_void_p, POINTER(c_void_p)]),
    "blob_from_dlpack": (_STATUS, [POINTER(c_void_p), c_void_p, c_int]),
    "blob_dlpack_delete": (None, [c_void_p]),
    "blob_blas_get_info": (_STATUS, [POINTER(BlasInfo)]),
    "blob_math_mode_get": (c_int, []),
    "blob_math_mode_name": (c_char_p, [c_int]),
    "blob_gemm_tuning_get": (c_bool, []),
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


def dependency_version(symbol):
    """The int that `symbol` (a `status f(int *)` of a library libblob links, such as
    ncclGetVersion or cudaRuntimeGetVersion) reports; None where libblob links no
    library with it, or the call fails."""
    try:
        fn = getattr(lib, symbol)  # dlsym on libblob's handle also searches its dependencies
    except AttributeError:
        return None
    fn.restype, fn.argtypes = c_int, [POINTER(c_int)]
    value = c_int()
    return value.value if fn(ctypes.byref(value)) == 0 else None


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
