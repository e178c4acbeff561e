"""libblob's tensors in Python, and zero-copy exchange with NumPy, PyTorch, CuPy and
every other library that speaks DLPack (1.0, and 0.6 for older consumers).

    import blob, numpy as np, torch

    b = blob.Blob((64, 784), "float32", device="cuda")   # or "cpu", "cuda:1", None
    b.data[...] = np.random.rand(64, 784)                 # host side, as in pycaffe
    t = torch.from_dlpack(b)                              # the device memory, no copy
    a = np.from_dlpack(b.view("data", "cpu"))             # the host memory, no copy

    c = blob.from_dlpack(torch.ones(3, device="cuda"))    # borrows torch's memory
    c.update()                                            # data -= diff, in place

The module calls libblob.so through ctypes (see _lib.py for where it is looked for;
`python -m blob` says which one it found and how it was built). Library errors raise
BlobError carrying the library's message; bad arguments raise TypeError, ValueError or
OverflowError before the library is called. docs/python.md in the checkout has more.

Threads. The library releases the GIL in every call, so threads run while one waits.
- A Blob may be used from any thread: each call on it holds the Blob's lock, so calls
  on one Blob run one at a time, as the C library requires. close() waits for a call in
  progress in another thread; calls after it raise ValueError. Calls on different blobs
  run in parallel.
- A View holds its Blob. An exported array (NumPy, PyTorch, CuPy, a capsule) holds the
  memory block, not the Blob: it stays valid after close(), load() or reshape() (which
  may give the Blob a new block), and may be dropped on any thread.
- A capsule is taken once: handed to from_dlpack in two threads at once, one imports it
  and the other raises ValueError.
- The values are not guarded: reads and writes of the same memory through arrays, or
  through arrays and the blob's own calls on other threads, are ordered by the caller,
  as with any NumPy array. Device work is ordered by CUDA streams, not by threads.
- The current device, the current CUDA stream and the error detail are per thread, as in
  the C library.
"""
import ctypes
import numbers
import operator
import os
import threading
from ctypes import byref, c_int, c_int64, c_void_p

from . import _lib
from ._lib import (DLManagedTensor, DLManagedTensorVersioned, DLTensor, api, lib)

__all__ = ["Blob", "BlobError", "View", "from_dlpack", "device_count", "built_with_cuda",
           "library_path", "__version__"]

__version__ = "0.1.0"
library_path = _lib.path

_INT64 = (-2**63, 2**63 - 1)


class BlobError(RuntimeError):
    """A failed libblob call: .status is the code (negative), .name its name (e.g.
    "EINVAL"), and the message the library's detail (blob_last_error)."""

    def __init__(self, status, detail):
        self.status = status
        self.name = lib.blob_status_name(status).decode()
        super().__init__(f"{self.name}: {detail}")


def _check(status):
    if status != _lib.OK:
        raise BlobError(status, lib.blob_last_error().decode(errors="replace"))


def device_count():
    """Usable GPUs (0 in a CPU-only build or without a GPU)."""
    return lib.blob_device_count()


def built_with_cuda():
    return bool(lib.blob_built_with_cuda())


def _index(value, what, low, high):
    """value as an int (operator.index: TypeError for floats), low <= value <= high
    (OverflowError otherwise)."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an integer, not bool")
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}") from None
    if not low <= n <= high:
        raise OverflowError(f"{what} {n} is out of range ({low}..{high})")
    return n


def _device_arg(device):
    """None (the current GPU if there is one, else the host), "cpu", "cuda", "cuda:N",
    an int N, or an object whose str() is one of these (a torch.device)."""
    if device is None:
        return _lib.DEVICE_DEFAULT
    if not isinstance(device, str):
        if hasattr(device, "__index__") and not isinstance(device, bool):
            n = operator.index(device)
            if not 0 <= n <= _lib.C_INT_MAX:
                raise ValueError(f"bad device {n}: a GPU number is 0..{_lib.C_INT_MAX}")
            return n
        if isinstance(device, (bool, numbers.Number)):
            raise TypeError(f"bad device {device!r}: None, 'cpu', 'cuda', 'cuda:N' or an int")
    name = str(device)
    if name == "cpu":
        return _lib.HOST_ONLY
    if name == "cuda":
        cur = c_int()
        _check(lib.blob_device_get(byref(cur)))
        return cur.value
    if name.startswith("cuda:") and name[5:].isascii() and name[5:].isdigit():
        return _device_arg(int(name[5:]))
    raise ValueError(f"bad device {device!r}: None, 'cpu', 'cuda', 'cuda:N' or an int")


_DTYPE_NAMES = {_lib.FLOAT32: "float32", _lib.FLOAT64: "float64", _lib.BFLOAT16: "bfloat16",
                _lib.FLOAT16: "float16", _lib.INT32: "int32", _lib.INT64: "int64",
                _lib.UINT8: "uint8"}
# The NumPy typestr of each dtype NumPy has (bfloat16 has none).
_TYPESTRS = {_lib.FLOAT32: "<f4", _lib.FLOAT64: "<f8", _lib.FLOAT16: "<f2", _lib.INT32: "<i4",
             _lib.INT64: "<i8", _lib.UINT8: "|u1"}
_DTYPES = {**{n: d for d, n in _DTYPE_NAMES.items()},
           **{t: d for d, t in _TYPESTRS.items()}, **{t[1:]: d for d, t in _TYPESTRS.items()}}
# DLPack (type code, bits) of each dtype
_DL_DTYPES = {(_lib.KDLFLOAT, 32): _lib.FLOAT32, (_lib.KDLFLOAT, 64): _lib.FLOAT64,
              (_lib.KDLBFLOAT, 16): _lib.BFLOAT16, (_lib.KDLFLOAT, 16): _lib.FLOAT16,
              (_lib.KDLINT, 32): _lib.INT32, (_lib.KDLINT, 64): _lib.INT64,
              (_lib.KDLUINT, 8): _lib.UINT8}


def _dtype_arg(dtype):
    """A dtype's name ("float32", "float64", "bfloat16", "float16", "int32", "int64",
    "uint8"), its NumPy typestr, or its NumPy or PyTorch dtype."""
    name = str(getattr(dtype, "__name__", dtype))
    name = name[6:] if name.startswith("torch.") else name
    if name not in _DTYPES:
        raise ValueError(f"bad dtype {dtype!r}: blobs are {', '.join(_DTYPE_NAMES.values())}")
    return _DTYPES[name]


def _shape_arg(shape):
    """An int or a sequence of ints (each through operator.index, in int64's range; the
    library checks the count and the signs) as (tuple, int64 array)."""
    if not isinstance(shape, (tuple, list)):
        try:
            shape = (operator.index(shape),)
        except TypeError:
            if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
                raise TypeError("a shape is an int or a sequence of ints, not "
                                f"{type(shape).__name__}") from None
    shape = tuple(_index(d, "dimension", *_INT64) for d in shape)
    return shape, (c_int64 * max(len(shape), 1))(*shape)


def _part_arg(part):
    if part == "data" or (type(part) is int and part == _lib.PART_DATA):
        return _lib.PART_DATA
    if part == "diff" or (type(part) is int and part == _lib.PART_DIFF):
        return _lib.PART_DIFF
    raise ValueError(f"bad part {part!r}: 'data' or 'diff'")


def _path_arg(path):
    """A str, bytes or os.PathLike path as the file system's bytes (as open() takes it:
    any name the system allows, an embedded NUL refused)."""
    encoded = os.fsencode(os.fspath(path))
    if b"\0" in encoded:
        raise ValueError("embedded null byte in path")
    return encoded


# ---- capsules ----
# The names are handed to PyCapsule_New / SetName, which keep the pointer, so the
# buffers (and the destructors, the deleters and the structs of _wrappers) are given a
# reference that is never dropped: they must outlive every capsule and tensor, even at
# interpreter exit.
_NAME = ctypes.create_string_buffer(b"dltensor")
_USED_NAME = ctypes.create_string_buffer(b"used_dltensor")
_VNAME = ctypes.create_string_buffer(b"dltensor_versioned")
_USED_VNAME = ctypes.create_string_buffer(b"used_dltensor_versioned")

# Versioned tensors of ours wrapping the library's unversioned exports, and unversioned
# tensors of ours wrapping imported versioned ones, by address, until their deleter runs:
# address -> (our struct, the wrapped tensor's address).
_wrappers = {}
_VERSION = _lib.DLPackVersion(*_lib.DLPACK_VERSION)


def _delete_versioned(address):
    """Call the deleter of the DLManagedTensorVersioned at address, if it has one."""
    deleter = DLManagedTensorVersioned.from_address(address).deleter
    if deleter:
        deleter(address)


def _release_export(address):
    """Give back the library's tensor inside our versioned export at address."""
    entry = _wrappers.pop(address, None)
    if entry is not None:
        lib.blob_dlpack_delete(entry[1])


_export_deleter = _lib.DELETER(_release_export)  # the versioned exports' deleter


@_lib.DELETER
def _import_deleter(address):
    """The deleter the library calls for an imported versioned tensor: the producer's."""
    entry = _wrappers.pop(address, None)
    if entry is not None:
        _delete_versioned(entry[1])


@_lib.CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule):
    """A capsule of ours is freed: if no consumer took its tensor (a consumer renames the
    capsule "used_dltensor"), give the tensor back."""
    try:
        if _lib.capsule_is_valid(capsule, _NAME):
            lib.blob_dlpack_delete(_lib.capsule_get_pointer(capsule, _NAME))
    except Exception:  # noqa: BLE001 - a destructor must not raise
        pass


@_lib.CAPSULE_DESTRUCTOR
def _vcapsule_destructor(capsule):
    """The same for "dltensor_versioned" (taken: "used_dltensor_versioned")."""
    try:
        if _lib.capsule_is_valid(capsule, _VNAME):
            _release_export(_lib.capsule_get_pointer(capsule, _VNAME))
    except Exception:  # noqa: BLE001 - a destructor must not raise
        pass


for _keep in (_NAME, _USED_NAME, _VNAME, _USED_VNAME, _capsule_destructor,
              _vcapsule_destructor, _export_deleter, _import_deleter, _wrappers):
    api.Py_IncRef(ctypes.py_object(_keep))


def _capsule(tensor, versioned, flags):
    """A capsule that owns the library's exported tensor: "dltensor", or with versioned
    a "dltensor_versioned" wrapping it, with DLPack's flags."""
    try:
        if not versioned:
            return api.PyCapsule_New(tensor, _NAME, _capsule_destructor)
        v = DLManagedTensorVersioned(_VERSION, None, _export_deleter, flags,
                                     DLTensor.from_address(tensor))  # dl_tensor comes first
        address = ctypes.addressof(v)
        _wrappers[address] = (v, tensor)
    except BaseException:
        lib.blob_dlpack_delete(tensor)
        raise
    try:
        return api.PyCapsule_New(address, _VNAME, _vcapsule_destructor)
    except BaseException:
        _release_export(address)
        raise


def _stream_arg(stream):
    """The consumer's CUDA stream of the array API's __dlpack__ as (pointer, flags):
    None and 1 are the legacy default stream, 2 the per-thread default stream, -1 asks
    for no ordering, any other value is a cudaStream_t."""
    if stream is None:
        return None, 0
    stream = _index(stream, "stream", -1, 2**64 - 1)
    if stream == -1:
        return None, _lib.DLPACK_UNORDERED
    if stream == 0:
        raise ValueError("bad CUDA stream 0: it is ambiguous; pass 1 for the legacy "
                         "default stream, 2 for the per-thread one, or a stream pointer")
    return (None if stream == 1 else stream), 0


def _max_version_arg(max_version):
    """Whether a consumer's max_version asks for a versioned capsule (DLPack >= 1)."""
    if max_version is None:
        return False
    try:
        major, minor = max_version
    except (TypeError, ValueError):
        raise TypeError(f"max_version must be a (major, minor) tuple, not {max_version!r}") \
            from None
    _index(minor, "max_version minor", 0, 2**32 - 1)
    return _index(major, "max_version major", 0, 2**32 - 1) >= 1


def _dl_device_arg(dl_device):
    try:
        device_type, device_id = dl_device
    except (TypeError, ValueError):
        raise TypeError(f"dl_device must be a (device_type, device_id) tuple, not "
                        f"{dl_device!r}") from None
    return (_index(device_type, "dl_device type", -2**31, 2**31 - 1),
            _index(device_id, "dl_device id", -2**31, 2**31 - 1))


def _tensor_device(tensor):
    d = DLManagedTensor.from_address(tensor).dl_tensor.device
    return (d.device_type, d.device_id)


class Blob:
    """A libblob blob: a shape, a dtype (float32, float64,
    bfloat16, float16, int32, int64 or uint8), a device, and a data and a
    diff block, each with a host and (on a GPU) a device side kept in sync by the library.

    Blob(shape, dtype="float32", device=None): device is None (the current GPU if there
    is one, else the host), "cpu", "cuda", "cuda:N" or an int. Memory is allocated (and
    zero-filled) on first use. The blob is freed when the object goes (or by close());
    arrays exported from it keep its memory alive on their own. Calls on one Blob from
    several threads run one at a time (see the module's notes on threads).
    """

    # _dtype and _device: the library's, fixed at creation
    __slots__ = ("_handle", "_lock", "_dtype", "_device", "__weakref__")

    def __init__(self, shape=(), dtype="float32", device=None):
        self._handle = None
        shape, dims = _shape_arg(shape)
        dtype, device = _dtype_arg(dtype), _device_arg(device)
        handle = c_void_p()
        _check(lib.blob_create(byref(handle), dtype, device, len(shape), dims))
        self._take_handle(handle.value)

    def _take_handle(self, handle):
        self._lock = threading.RLock()
        self._dtype, self._device = lib.blob_get_dtype(handle), lib.blob_device(handle)
        self._handle = handle

    @classmethod
    def _adopt(cls, handle):
        b = cls.__new__(cls)
        b._take_handle(handle)
        return b

    @classmethod
    def from_npy(cls, path, dtype="float32", device=None):
        """A blob of the .npy file's shape and values, converted to dtype."""
        b = cls((), dtype, device)
        b.load(path)
        return b

    def _live(self):
        """The handle, for a call made while holding self._lock."""
        if self._handle is None:
            raise ValueError("the blob is closed")
        return self._handle

    def _call(self, fn, *args):
        """fn(handle, *args) under the lock."""
        with self._lock:
            return fn(self._live(), *args)

    @property
    def _h(self):
        """The handle, for ctypes calls into libblob (blob._lib.lib) that the caller keeps
        from running beside other calls on the blob or its close()."""
        return self._live()

    def close(self):
        """Free the blob now, once a call on it in another thread is done (exported arrays
        keep their memory)."""
        with self._lock:
            handle, self._handle = self._handle, None
            if handle is not None:
                lib.blob_free(handle)

    def __del__(self):
        if getattr(self, "_handle", None) is not None and lib is not None:
            self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def shape(self):
        with self._lock:
            h = self._live()
            return tuple(lib.blob_shape(h)[:lib.blob_num_axes(h)])

    @property
    def ndim(self):
        return self._call(lib.blob_num_axes)

    @property
    def size(self):
        """The number of elements."""
        return self._call(lib.blob_count)

    @property
    def dtype(self):
        """The dtype's name: "float32", "float64", "bfloat16", "float16", "int32", "int64"
        or "uint8"."""
        self._live()
        return _DTYPE_NAMES[self._dtype]

    @property
    def device(self):
        """"cpu" for a host-only blob, "cuda:N" for a blob of GPU N."""
        self._live()
        return "cpu" if self._device < 0 else f"cuda:{self._device}"

    def __repr__(self):
        with self._lock:
            if self._handle is None:
                return "Blob(closed)"
            return f"Blob(shape={self.shape}, dtype={self.dtype}, device={self.device})"

    def reshape(self, *shape):
        """Change the shape in place (memory is kept while it fits); returns self."""
        if len(shape) == 1:
            shape = shape[0]  # an int or a sequence
        shape, dims = _shape_arg(shape)
        _check(self._call(lib.blob_reshape, len(shape), dims))
        return self

    def update(self):
        """data -= diff, where data's newest values are (the GPU for a GPU blob whose data
        was last used there)."""
        _check(self._call(lib.blob_update))

    def save(self, path, part="data"):
        """Write data or diff as a .npy file (path: str, bytes or os.PathLike)."""
        _check(self._call(lib.blob_save_npy, _part_arg(part), _path_arg(path)))

    def load(self, path, part="data"):
        """Read a .npy file into data or diff, reshaping the blob to its shape."""
        _check(self._call(lib.blob_load_npy, _part_arg(part), _path_arg(path)))

    def astype(self, dtype):
        """A new blob on the same device whose data and diff are ours converted to dtype
        (between the float dtypes: round to nearest even, NaN and Inf kept)."""
        c = Blob((), dtype, self._device if self._device >= 0 else "cpu")
        with self._lock:
            _check(lib.blob_convert_from(c._handle, self._live(), False, True))
            _check(lib.blob_convert_from(c._handle, self._live(), True, False))
        return c

    def _copy_part(self, part, device):
        """A new blob on device (as Blob() takes it) whose `part` is a copy of ours."""
        c = Blob((), _DTYPE_NAMES[self._dtype], device)
        with self._lock:
            _check(lib.blob_copy_from(c._handle, self._live(), part == _lib.PART_DIFF, True))
        return c

    def copy(self):
        """A new blob on the same device with copies of the data and the diff."""
        with self._lock:
            c = self._copy_part(_lib.PART_DATA, self._device if self._device >= 0 else "cpu")
            _check(lib.blob_copy_from(c._handle, self._live(), True, False))
        return c

    # ---- views ----

    @property
    def data(self):
        """The data on the blob's device: an object that NumPy, PyTorch and CuPy take
        through DLPack without a copy (and NumPy also through np.asarray)."""
        return View(self, _lib.PART_DATA, None)

    @property
    def diff(self):
        return View(self, _lib.PART_DIFF, None)

    def view(self, part="data", device=None, writable=True):
        """data or diff on a chosen side: device "cpu" for the host side, "cuda" for the
        device side, None for the blob's device. A writable view claims the side's head
        when exported, as the C mutable accessors do; a read-only one syncs it."""
        if device is None:
            side = None
        elif str(device) == "cpu":
            side = _lib.SIDE_HOST
        elif str(device).startswith("cuda"):
            side = _lib.SIDE_DEVICE
        else:
            raise ValueError(f"bad device {device!r}: None, 'cpu' or 'cuda'")
        return View(self, _part_arg(part), side, writable)

    def pointer(self, part="data", device=None, writable=False):
        """The raw address of data or diff on the host ("cpu") or device side (None: the
        blob's device), synced first, for ctypes calls into libblob (blob._lib.lib):
        valid as long as a C accessor's pointer is. 0 for a blob of no elements."""
        part = _part_arg(part)
        ptr = c_void_p()
        with self._lock:
            h = self._live()
            host = (device is None and self._device < 0) or str(device) == "cpu"
            name = ("blob_mutable_" if writable else "blob_") + ("cpu_" if host else "gpu_") + \
                ("data" if part == _lib.PART_DATA else "diff")
            _check(getattr(lib, name)(h, byref(ptr)))
        return ptr.value or 0

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return self.data.__dlpack__(stream=stream, max_version=max_version,
                                    dl_device=dl_device, copy=copy)

    def __dlpack_device__(self):
        return self.data.__dlpack_device__()


class _HostMemory:
    """One export of a host side, the base of the NumPy array made from it: the export,
    and with it the memory, lives exactly as long as the array and its views."""

    __slots__ = ("_tensor", "__array_interface__")

    def __init__(self, tensor, writable):
        self._tensor = tensor
        t = DLManagedTensor.from_address(tensor).dl_tensor
        self.__array_interface__ = {
            "shape": tuple(t.shape[:t.ndim]),
            "typestr": _TYPESTRS[_DL_DTYPES[(t.dtype.code, t.dtype.bits)]],
            "data": (t.data or 0, not writable), "strides": None, "version": 3}

    def __del__(self):
        if lib is not None:
            lib.blob_dlpack_delete(self._tensor)


class View:
    """The data or diff of a blob on one side, for exchange: __dlpack__ and
    __dlpack_device__ (the Python array API, DLPack 1.0 and 0.6), __array__ for host
    views (so np.asarray(view) is a NumPy array on the blob's memory, writable unless the
    view is read-only), and item access, which reads and writes the host side (as
    pycaffe's blob.data[...] did). Each array made holds its own export of the memory,
    freed with the array."""

    __slots__ = ("blob", "part", "side", "writable")

    def __init__(self, blob, part, side, writable=True):
        self.blob = blob
        self.part = part
        self.side = side if side is not None else (
            _lib.SIDE_DEVICE if blob._device >= 0 else _lib.SIDE_HOST)
        self.writable = bool(writable)

    def __dlpack_device__(self):
        if self.side == _lib.SIDE_DEVICE:
            return (_lib.KDLCUDA, self.blob._device)
        return (_lib.KDLCPU, 0)

    def _export(self, blob, side, flags, stream):
        """The library's unversioned export of `blob`'s part (this view's) and side."""
        tensor = c_void_p()
        _check(blob._call(lib.blob_to_dlpack, self.part, side, flags, stream, byref(tensor)))
        return tensor.value

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A "dltensor_versioned" capsule (DLPack 1.0; read-only for a read-only view)
        when max_version is (1, 0) or later, else a "dltensor" one (DLPack 0.6).
        dl_device: the view's device (None), or (kDLCPU, 0) for the host side, or
        (kDLCUDAHost, 0) for a pinned host side, or (kDLCUDA, N): the blob's own other
        side where it has one, else a copy. copy: True always copies (the copy is
        writable), False never does (BufferError where a copy would be needed), None
        copies only where needed. A device export's CUDA stream is ordered after the
        blob's pending work on the device (see _stream_arg)."""
        versioned = _max_version_arg(max_version)
        copy = None if copy is None else bool(copy)
        ptr, stream_flags = _stream_arg(stream)
        target = self.__dlpack_device__() if dl_device is None else _dl_device_arg(dl_device)
        bdev = self.blob._device
        flags = 0
        if target == (_lib.KDLCPU, 0):
            side, here, copy_to = _lib.SIDE_HOST, True, "cpu"
        elif target == (_lib.KDLCUDAHOST, 0):
            side, here, copy_to = _lib.SIDE_HOST, bdev >= 0, None  # any GPU's pinned memory
            flags = _lib.DLPACK_CUDA_HOST
        elif target[0] == _lib.KDLCUDA and target[1] >= 0:
            side, here, copy_to = _lib.SIDE_DEVICE, bdev == target[1], target[1]
        else:
            raise BufferError(f"cannot export to DLPack device {target}: kDLCPU, "
                              "kDLCUDAHost or kDLCUDA only")
        if side == _lib.SIDE_DEVICE:
            flags |= stream_flags
        else:
            ptr = None
        tensor = None
        if here and not copy:
            tensor = self._export(self.blob, side,
                                  flags | (_lib.DLPACK_WRITABLE if self.writable else 0), ptr)
            if flags & _lib.DLPACK_CUDA_HOST and _tensor_device(tensor) != target:  # pageable
                lib.blob_dlpack_delete(tensor)
                tensor = None
        if tensor is not None:
            return _capsule(tensor, versioned, 0 if self.writable else _lib.DLPACK_FLAG_READ_ONLY)
        if copy is False:
            raise BufferError(f"exporting {self.__dlpack_device__()} memory to {target} "
                              "needs a copy, and copy=False")
        try:
            c = self.blob._copy_part(self.part, copy_to)
        except BlobError as e:
            raise BufferError(f"cannot copy to DLPack device {target}: {e}") from e
        with c:
            tensor = self._export(c, side, flags | _lib.DLPACK_WRITABLE, ptr)
        if _tensor_device(tensor) != target:  # no GPU for the pinned copy
            lib.blob_dlpack_delete(tensor)
            raise BufferError(f"cannot copy to DLPack device {target}: no GPU")
        return _capsule(tensor, versioned, _lib.DLPACK_FLAG_IS_COPIED)

    def __array__(self, dtype=None, copy=None):
        """The host side as a NumPy array on the blob's memory (NumPy's protocol: a copy
        with copy=True or another dtype)."""
        import numpy as np
        if self.side != _lib.SIDE_HOST:
            raise TypeError("a device view is not a NumPy array: use DLPack "
                            "(torch.from_dlpack, cupy.from_dlpack) or view(part, 'cpu')")
        if self.blob._dtype not in _TYPESTRS:
            raise TypeError("a bfloat16 blob is not a NumPy array (NumPy has no bfloat16): "
                            "use DLPack (torch.from_dlpack) or a float32 copy")
        flags = _lib.DLPACK_WRITABLE if self.writable else 0
        a = np.asarray(_HostMemory(self._export(self.blob, _lib.SIDE_HOST, flags, None),
                                   self.writable))
        if copy or (dtype is not None and np.dtype(dtype) != a.dtype):
            if copy is False:
                raise ValueError(f"a {a.dtype} view as {np.dtype(dtype)} needs a copy")
            return np.array(a, dtype=dtype)
        return a

    def numpy(self):
        """The host side as a NumPy array on the blob's memory (writable unless the view
        is read-only)."""
        host = self if self.side == _lib.SIDE_HOST else View(self.blob, self.part,
                                                              _lib.SIDE_HOST, self.writable)
        return host.__array__()

    def __getitem__(self, key):
        return self.numpy()[key]

    def __setitem__(self, key, value):
        self.numpy()[key] = value

    def __repr__(self):
        part = "data" if self.part == _lib.PART_DATA else "diff"
        side = "device" if self.side == _lib.SIDE_DEVICE else "host"
        return f"View({self.blob!r}, {part}, {side} side)"


# Taking a capsule (checking its name, then renaming it) is one step under this lock, so
# that a capsule handed to from_dlpack in two threads at once is taken by one of them.
_taking = threading.Lock()


def _take(capsule):
    """(name, tensor address) of an unconsumed capsule, renamed "used_..." now: its tensor
    is this caller's, to import or to give back by restoring the name."""
    with _taking:
        for name, used in ((_VNAME, _USED_VNAME), (_NAME, _USED_NAME)):
            if api.PyCapsule_IsValid(capsule, name):
                tensor = api.PyCapsule_GetPointer(capsule, name)
                api.PyCapsule_SetName(capsule, used)
                return name, tensor
    raise ValueError("expected an unconsumed DLPack capsule named 'dltensor' or "
                     "'dltensor_versioned'")


def _import(tensor, host_device):
    """blob_from_dlpack of a DLManagedTensor: the new blob's handle."""
    handle = c_void_p()
    _check(lib.blob_from_dlpack(byref(handle), tensor, host_device))
    return handle.value


def _import_versioned(address, host_device):
    """The same for a DLManagedTensorVersioned, through an unversioned tensor of ours
    whose deleter calls the producer's."""
    v = DLManagedTensorVersioned.from_address(address)
    if v.version.major != _lib.DLPACK_VERSION[0]:
        raise BufferError(f"DLPack {v.version.major}.{v.version.minor} tensor: this module "
                          f"reads major version {_lib.DLPACK_VERSION[0]}")
    if v.flags & _lib.DLPACK_FLAG_READ_ONLY:
        raise BufferError("the tensor is read-only, and a blob writes its data")
    wrapper = DLManagedTensor()
    wrapper.dl_tensor = v.dl_tensor
    wrapper.deleter = _import_deleter
    key = ctypes.addressof(wrapper)
    _wrappers[key] = (wrapper, address)
    try:
        return _import(key, host_device)
    except BaseException:
        del _wrappers[key]
        raise


def from_dlpack(x, device="cpu"):
    """A Blob whose data borrows the memory of x (a NumPy, PyTorch, CuPy, ... array, or an
    unconsumed "dltensor" or "dltensor_versioned" capsule) without a copy. x's memory must
    be writable, C-contiguous float32, float64, bfloat16, float16, int32, int64 or uint8.
    Device memory gives a blob of its GPU,
    ordered after x's pending work on the device; host memory a blob bound to `device`
    (default "cpu": host-only). The producer's deleter runs when the last blob using the
    memory lets go of it. On failure (BlobError, BufferError) the capsule is left
    unconsumed, so its producer frees it."""
    host_device = _device_arg(device)
    if type(x).__name__ == "PyCapsule":
        capsule = x
    else:
        dev_type = x.__dlpack_device__()[0] if hasattr(x, "__dlpack_device__") else _lib.KDLCPU
        kwargs = {}
        if dev_type == _lib.KDLCUDA:
            stream = lib.blob_stream_get()  # the stream our work on it will use
            kwargs["stream"] = stream if stream else 1
        try:
            capsule = x.__dlpack__(max_version=_lib.DLPACK_VERSION, **kwargs)
        except TypeError:  # a producer of DLPack < 1.0
            capsule = x.__dlpack__(**kwargs)
    name, tensor = _take(capsule)
    try:
        handle = (_import_versioned if name is _VNAME else _import)(tensor, host_device)
    except BaseException:
        api.PyCapsule_SetName(capsule, name)  # not taken after all
        raise
    return Blob._adopt(handle)
