"""libblob's tensors in Python, and zero-copy exchange with NumPy, PyTorch, CuPy and
every other library that speaks DLPack.

    import blob, numpy as np, torch

    b = blob.Blob((64, 784), "float32", device="cuda")   # or "cpu", "cuda:1", None
    b.data[...] = np.random.rand(64, 784)                 # host side, as in pycaffe
    t = torch.from_dlpack(b)                              # the device memory, no copy
    a = np.from_dlpack(b.view("data", "cpu"))             # the host memory, no copy

    c = blob.from_dlpack(torch.ones(3, device="cuda"))    # borrows torch's memory
    c.update()                                            # data -= diff, in place

The module calls libblob.so through ctypes (see _lib.py for where it is looked for).
Library errors raise BlobError carrying the library's message.
"""
import ctypes
from ctypes import byref, c_int, c_int64, c_void_p

from . import _lib
from ._lib import api, lib

__all__ = ["Blob", "BlobError", "View", "from_dlpack", "device_count", "built_with_cuda",
           "library_path"]

library_path = _lib.path


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


def _device_arg(device):
    """None (the current GPU if there is one, else the host), "cpu", "cuda", "cuda:N",
    an int N, or anything whose str() is one of these (a torch.device)."""
    if device is None:
        return _lib.DEVICE_DEFAULT
    if isinstance(device, int) and not isinstance(device, bool):
        if device < 0:
            raise ValueError(f"bad device {device}")
        return device
    name = str(device)
    if name == "cpu":
        return _lib.HOST_ONLY
    if name == "cuda":
        cur = c_int()
        _check(lib.blob_device_get(byref(cur)))
        return cur.value
    if name.startswith("cuda:") and name[5:].isdigit():
        return int(name[5:])
    raise ValueError(f"bad device {device!r}: None, 'cpu', 'cuda', 'cuda:N' or an int")


_DTYPES = {"float32": _lib.FLOAT32, "f4": _lib.FLOAT32, "<f4": _lib.FLOAT32,
           "float64": _lib.FLOAT64, "f8": _lib.FLOAT64, "<f8": _lib.FLOAT64}
_DTYPE_NAMES = {_lib.FLOAT32: "float32", _lib.FLOAT64: "float64"}


def _dtype_arg(dtype):
    """"float32" or "float64", or their NumPy or PyTorch dtype."""
    name = str(getattr(dtype, "__name__", dtype))
    name = name[6:] if name.startswith("torch.") else name
    if name not in _DTYPES:
        raise ValueError(f"bad dtype {dtype!r}: blobs are float32 or float64")
    return _DTYPES[name]


def _shape_arg(shape):
    shape = (shape,) if isinstance(shape, int) else tuple(int(d) for d in shape)
    return shape, (c_int64 * max(len(shape), 1))(*shape)


def _part_arg(part):
    if part in ("data", _lib.PART_DATA):
        return _lib.PART_DATA
    if part in ("diff", _lib.PART_DIFF):
        return _lib.PART_DIFF
    raise ValueError(f"bad part {part!r}: 'data' or 'diff'")


# ---- capsules ----
# Both names are handed to PyCapsule_New / SetName, which keep the pointer, so the
# buffers (and the destructor) are given a reference that is never dropped.
_NAME = ctypes.create_string_buffer(b"dltensor")
_USED_NAME = ctypes.create_string_buffer(b"used_dltensor")


@_lib.CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule):
    """A capsule of ours is freed: if no consumer took its tensor (a consumer renames the
    capsule "used_dltensor"), give the tensor back."""
    try:
        if _lib.capsule_is_valid(capsule, _NAME):
            lib.blob_dlpack_delete(_lib.capsule_get_pointer(capsule, _NAME))
    except Exception:  # noqa: BLE001 - a destructor must not raise
        pass


for _keep in (_NAME, _USED_NAME, _capsule_destructor):
    api.Py_IncRef(ctypes.py_object(_keep))


def _export(handle, part, side, flags, stream):
    """A "dltensor" capsule of the blob's part and side."""
    tensor = c_void_p()
    _check(lib.blob_to_dlpack(handle, part, side, flags, stream, byref(tensor)))
    try:
        return api.PyCapsule_New(tensor, _NAME, _capsule_destructor)
    except BaseException:
        lib.blob_dlpack_delete(tensor)
        raise


def _stream_arg(stream):
    """The consumer's CUDA stream of the array API's __dlpack__ as (pointer, flags):
    None and 1 are the legacy default stream, 2 the per-thread default stream, -1 asks
    for no ordering, any other value is a cudaStream_t."""
    if stream is None or stream == 1:
        return None, 0
    if stream == -1:
        return None, _lib.DLPACK_UNORDERED
    if stream == 0 or not isinstance(stream, int):
        raise ValueError(f"bad CUDA stream {stream!r}: 0 is ambiguous; pass 1 for the legacy "
                         "default stream, 2 for the per-thread one, or a stream pointer")
    return stream, 0


class Blob:
    """A libblob blob: a shape, a dtype (float32 or float64), a device, and a data and a
    diff block, each with a host and (on a GPU) a device side kept in sync by the library.

    Blob(shape, dtype="float32", device=None): device is None (the current GPU if there
    is one, else the host), "cpu", "cuda", "cuda:N" or an int. Memory is allocated (and
    zero-filled) on first use. The blob is freed when the object goes (or by close());
    arrays exported from it keep its memory alive on their own.
    """

    __slots__ = ("_handle", "__weakref__")

    def __init__(self, shape=(), dtype="float32", device=None):
        self._handle = None
        shape, dims = _shape_arg(shape)
        handle = c_void_p()
        _check(lib.blob_create(byref(handle), _dtype_arg(dtype), _device_arg(device),
                               len(shape), dims))
        self._handle = handle.value

    @classmethod
    def _adopt(cls, handle):
        b = cls.__new__(cls)
        b._handle = handle
        return b

    @classmethod
    def from_npy(cls, path, dtype="float32", device=None):
        """A blob of the .npy file's shape and values, converted to dtype."""
        b = cls((), dtype, device)
        b.load(path)
        return b

    @property
    def _h(self):
        if self._handle is None:
            raise ValueError("the blob is closed")
        return self._handle

    def close(self):
        """Free the blob now (exported arrays keep their memory)."""
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
        h = self._h
        dims = lib.blob_shape(h)
        return tuple(dims[i] for i in range(lib.blob_num_axes(h)))

    @property
    def ndim(self):
        return lib.blob_num_axes(self._h)

    @property
    def size(self):
        """The number of elements."""
        return lib.blob_count(self._h)

    @property
    def dtype(self):
        """"float32" or "float64"."""
        return _DTYPE_NAMES[lib.blob_get_dtype(self._h)]

    @property
    def device(self):
        """"cpu" for a host-only blob, "cuda:N" for a blob of GPU N."""
        d = lib.blob_device(self._h)
        return "cpu" if d < 0 else f"cuda:{d}"

    def __repr__(self):
        if self._handle is None:
            return "Blob(closed)"
        return f"Blob(shape={self.shape}, dtype={self.dtype}, device={self.device})"

    def reshape(self, *shape):
        """Change the shape in place (memory is kept while it fits); returns self."""
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = shape[0]
        shape, dims = _shape_arg(shape)
        _check(lib.blob_reshape(self._h, len(shape), dims))
        return self

    def update(self):
        """data -= diff, where data's newest values are (the GPU for a GPU blob whose data
        was last used there)."""
        _check(lib.blob_update(self._h))

    def save(self, path, part="data"):
        """Write data or diff as a .npy file."""
        _check(lib.blob_save_npy(self._h, _part_arg(part), str(path).encode()))

    def load(self, path, part="data"):
        """Read a .npy file into data or diff, reshaping the blob to its shape."""
        _check(lib.blob_load_npy(self._h, _part_arg(part), str(path).encode()))

    def copy(self):
        """A new blob on the same device with copies of the data and the diff."""
        device = lib.blob_device(self._h)
        c = Blob((), self.dtype, device if device >= 0 else "cpu")
        _check(lib.blob_copy_from(c._h, self._h, False, True))
        _check(lib.blob_copy_from(c._h, self._h, True, False))
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
        host = (device is None and lib.blob_device(self._h) < 0) or str(device) == "cpu"
        name = ("blob_mutable_" if writable else "blob_") + ("cpu_" if host else "gpu_") + \
            ("data" if _part_arg(part) == _lib.PART_DATA else "diff")
        ptr = c_void_p()
        _check(getattr(lib, name)(self._h, byref(ptr)))
        return ptr.value or 0

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return self.data.__dlpack__(stream=stream, max_version=max_version,
                                    dl_device=dl_device, copy=copy)

    def __dlpack_device__(self):
        return self.data.__dlpack_device__()


class View:
    """The data or diff of a blob on one side, for exchange: __dlpack__ and
    __dlpack_device__ (the Python array API), __array_interface__ for host views (so
    np.asarray(view) is a writable NumPy array on the blob's memory), and item access,
    which reads and writes the host side (as pycaffe's blob.data[...] did)."""

    __slots__ = ("blob", "part", "side", "writable", "_held")

    def __init__(self, blob, part, side, writable=True):
        self.blob = blob
        self.part = part
        self.side = side if side is not None else (
            _lib.SIDE_DEVICE if lib.blob_device(blob._h) >= 0 else _lib.SIDE_HOST)
        self.writable = writable
        self._held = []  # exports backing arrays made through __array_interface__

    def __del__(self):
        held = getattr(self, "_held", ())
        while held and lib is not None:
            lib.blob_dlpack_delete(held.pop())

    def __dlpack_device__(self):
        if self.side == _lib.SIDE_DEVICE:
            return (_lib.KDLCUDA, lib.blob_device(self.blob._h))
        return (_lib.KDLCPU, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A "dltensor" capsule (DLPack 0.6; max_version is accepted and an unversioned
        capsule returned, as the array API allows). dl_device may ask for the host side
        of a device view; copy=True exports a copy; the CUDA stream is ordered after the
        blob's pending work on the device (see _stream_arg)."""
        side = self.side
        if dl_device is not None:
            dl_device = tuple(dl_device)
            if dl_device == (_lib.KDLCPU, 0):
                side = _lib.SIDE_HOST
            elif dl_device != self.__dlpack_device__():
                raise BufferError(f"cannot export {self.__dlpack_device__()} memory to "
                                  f"{dl_device} without a copy")
        source = self.blob.copy() if copy else self.blob
        flags = _lib.DLPACK_WRITABLE if self.writable else 0
        ptr = None
        if side == _lib.SIDE_DEVICE:
            ptr, more = _stream_arg(stream)
            flags |= more
        return _export(source._h, self.part, side, flags, ptr)

    @property
    def __array_interface__(self):
        if self.side != _lib.SIDE_HOST:
            raise AttributeError("a device view has no __array_interface__: use DLPack "
                                 "(torch.from_dlpack, cupy.from_dlpack) or view(part, 'cpu')")
        h = self.blob._h
        tensor = c_void_p()
        flags = _lib.DLPACK_WRITABLE if self.writable else 0
        _check(lib.blob_to_dlpack(h, self.part, _lib.SIDE_HOST, flags, None, byref(tensor)))
        self._held.append(tensor.value)
        ptr = self.blob.pointer(self.part, "cpu")  # the exported side: no copy, no change
        typestr = "<f4" if lib.blob_get_dtype(h) == _lib.FLOAT32 else "<f8"
        return {"shape": self.blob.shape, "typestr": typestr, "data": (ptr, not self.writable),
                "strides": None, "version": 3}

    def numpy(self):
        """The host side as a NumPy array on the blob's memory (writable unless the view
        is read-only)."""
        import numpy as np
        host = self if self.side == _lib.SIDE_HOST else View(self.blob, self.part,
                                                              _lib.SIDE_HOST, self.writable)
        return np.asarray(host)

    def __getitem__(self, key):
        return self.numpy()[key]

    def __setitem__(self, key, value):
        self.numpy()[key] = value

    def __repr__(self):
        part = "data" if self.part == _lib.PART_DATA else "diff"
        side = "device" if self.side == _lib.SIDE_DEVICE else "host"
        return f"View({self.blob!r}, {part}, {side} side)"


def from_dlpack(x, device="cpu"):
    """A Blob whose data borrows the memory of x (a NumPy, PyTorch, CuPy, ... array, or an
    unconsumed "dltensor" capsule) without a copy. x's memory must be C-contiguous
    float32 or float64. Device memory gives a blob of its GPU, ordered after x's pending
    work on the device; host memory a blob bound to `device` (default "cpu": host-only).
    The producer's deleter runs when the last blob using the memory lets go of it. On
    failure (BlobError) the capsule is left unconsumed, so its producer frees it."""
    if type(x).__name__ == "PyCapsule":
        capsule = x
    else:
        dev_type = x.__dlpack_device__()[0] if hasattr(x, "__dlpack_device__") else _lib.KDLCPU
        if dev_type == _lib.KDLCUDA:
            stream = lib.blob_get_stream()  # the stream our work on it will use
            capsule = x.__dlpack__(stream=stream if stream else 1)
        else:
            capsule = x.__dlpack__()
    if not api.PyCapsule_IsValid(capsule, _NAME):
        raise ValueError("expected an unconsumed DLPack capsule named 'dltensor'")
    tensor = api.PyCapsule_GetPointer(capsule, _NAME)
    handle = c_void_p()
    _check(lib.blob_from_dlpack(byref(handle), tensor, _device_arg(device)))
    api.PyCapsule_SetName(capsule, _USED_NAME)
    return Blob._adopt(handle.value)
