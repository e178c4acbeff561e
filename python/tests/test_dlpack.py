"""DLPack 1.0 beside 0.6: versioned capsules out and in (version, flags, read-only, the
deleters exactly once), the array API's copy= and dl_device=, and producers of either
kind, with NumPy. PyTorch and CuPy in test_torch_cupy.py."""
import ctypes
import gc
import sys
import unittest

import blob
from blob import _lib
from optional import optional

np = optional("numpy", ImportError)

NUMPY_READS_FLAGS = np is not None and tuple(map(int, np.__version__.split(".")[:2])) >= (2, 1)

_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype = ctypes.c_char_p
_get_name.argtypes = [ctypes.py_object]


def versioned_struct(capsule):
    address = _lib.api.PyCapsule_GetPointer(capsule, b"dltensor_versioned")
    return _lib.DLManagedTensorVersioned.from_address(address)


def address(a):
    return a.__array_interface__["data"][0]


class Producer:
    """Hands out a capsule made earlier; old=True: a DLPack 0.6 producer, whose __dlpack__
    knows no max_version."""

    def __init__(self, capsule, old=False):
        self.capsule, self.old, self.calls = capsule, old, []

    def __dlpack__(self, stream=None, **kwargs):
        self.calls.append(kwargs)
        if self.old and kwargs:
            raise TypeError("__dlpack__() got an unexpected keyword argument")
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


@unittest.skipUnless(np, "NumPy is not importable")
class VersionedExportTest(unittest.TestCase):
    def setUp(self):
        self.b = blob.Blob((2, 3), "float64", device="cpu")
        self.b.data[...] = np.arange(6.0).reshape(2, 3)

    def test_capsule_kinds(self):
        v = self.b.data
        for max_version in (None, (0, 8)):
            self.assertEqual(_get_name(v.__dlpack__(max_version=max_version)), b"dltensor")
        for max_version in ((1, 0), (1, 3), (2, 0)):
            capsule = v.__dlpack__(max_version=max_version)
            self.assertEqual(_get_name(capsule), b"dltensor_versioned")
            t = versioned_struct(capsule)
            self.assertEqual((t.version.major, t.version.minor), (1, 0))  # what we speak
            self.assertEqual(t.flags, 0)
            self.assertEqual(t.dl_tensor.data, self.b.pointer())
            self.assertEqual(t.dl_tensor.shape[:t.dl_tensor.ndim], [2, 3])
            self.assertEqual((t.dl_tensor.dtype.code, t.dl_tensor.dtype.bits), (2, 64))
        ro = self.b.view("data", "cpu", writable=False).__dlpack__(max_version=(1, 0))
        self.assertEqual(versioned_struct(ro).flags, _lib.DLPACK_FLAG_READ_ONLY)
        copied = v.__dlpack__(max_version=(1, 0), copy=True)
        self.assertEqual(versioned_struct(copied).flags, _lib.DLPACK_FLAG_IS_COPIED)
        self.assertNotEqual(versioned_struct(copied).dl_tensor.data, self.b.pointer())

    def test_numpy_reads_the_flags(self):
        a = np.from_dlpack(self.b.data)
        self.assertEqual(address(a), self.b.pointer())
        self.assertEqual(a.flags.writeable, NUMPY_READS_FLAGS)
        if NUMPY_READS_FLAGS:
            a[1, 2] = 50.0  # NumPy writes ...
            self.assertEqual(self.b.data[1, 2], 50.0)  # ... the blob sees it
        ro = np.from_dlpack(self.b.view("data", "cpu", writable=False))
        self.assertFalse(ro.flags.writeable)
        self.assertEqual(address(ro), self.b.pointer())
        old = np.from_dlpack(Producer(self.b.data.__dlpack__()))  # 0.6: read-only
        self.assertFalse(old.flags.writeable)
        self.assertEqual(address(old), self.b.pointer())

    def test_copy(self):
        v = self.b.data
        same = np.from_dlpack(v, copy=False)
        self.assertEqual(address(same), self.b.pointer())
        c = np.from_dlpack(self.b.view("data", "cpu", writable=False), copy=True)
        self.assertNotEqual(address(c), self.b.pointer())
        np.testing.assert_array_equal(c, np.arange(6.0).reshape(2, 3))
        self.assertEqual(c.flags.writeable, NUMPY_READS_FLAGS)  # the copy is the consumer's
        if NUMPY_READS_FLAGS:
            c[0, 0] = 7.0
            self.assertEqual(self.b.data[0, 0], 0.0)
        self.b.diff[...] = 3.0
        d = np.from_dlpack(self.b.diff, copy=True)  # the diff's values, not the data's
        np.testing.assert_array_equal(d, np.full((2, 3), 3.0))
        for max_version in (None, (1, 0)):  # an unversioned copy too
            capsule = v.__dlpack__(max_version=max_version, copy=True)
            np.testing.assert_array_equal(np.from_dlpack(Producer(capsule)), self.b.data.numpy())

    def test_dl_device(self):
        v = self.b.data
        a = np.from_dlpack(v, device="cpu")
        self.assertEqual(address(a), self.b.pointer())
        self.assertEqual(address(np.from_dlpack(Producer(v.__dlpack__(dl_device=(1, 0))))),
                         self.b.pointer())
        for dl_device in ((2, 0), (3, 0), (2, 5)):
            with self.assertRaises(BufferError):  # a copy is needed, and refused
                v.__dlpack__(dl_device=dl_device, copy=False)
        with self.assertRaises(BufferError):
            v.__dlpack__(dl_device=(7, 0))  # a device type the library does not know
        with self.assertRaises(BufferError):
            v.__dlpack__(dl_device=(1, 1))  # the host is device 0
        if blob.device_count() == 0:
            for dl_device in ((2, 0), (3, 0)):  # a copy would do, but there is no GPU
                for copy in (None, True):
                    with self.assertRaises(BufferError):
                        v.__dlpack__(dl_device=dl_device, copy=copy)
        else:
            capsule = v.__dlpack__(dl_device=(2, 0), max_version=(1, 0))
            t = versioned_struct(capsule)
            self.assertEqual((t.dl_tensor.device.device_type, t.flags),
                             (2, _lib.DLPACK_FLAG_IS_COPIED))

    def test_unconsumed_capsules_give_their_tensor_back(self):
        x = np.arange(8.0)
        refs, wrappers = sys.getrefcount(x), len(blob._wrappers)
        c = blob.from_dlpack(x)
        capsules = [c.data.__dlpack__(max_version=(1, 0)),
                    c.view("data", "cpu", writable=False).__dlpack__(max_version=(1, 0)),
                    c.data.__dlpack__()]
        c.close()
        self.assertEqual(sys.getrefcount(x), refs + 1)  # the exports hold the memory
        del capsules
        gc.collect()
        self.assertEqual(sys.getrefcount(x), refs)  # every deleter ran, once
        self.assertEqual(len(blob._wrappers), wrappers)


@unittest.skipUnless(np, "NumPy is not importable")
class VersionedImportTest(unittest.TestCase):
    def test_numpy_capsules_of_both_kinds(self):
        x = np.arange(6.0)
        refs, wrappers = sys.getrefcount(x), len(blob._wrappers)
        for max_version in ((1, 0), None):
            capsule = x.__dlpack__(max_version=max_version)
            b = blob.from_dlpack(capsule)
            self.assertEqual(_get_name(capsule),
                             b"used_dltensor_versioned" if max_version else b"used_dltensor")
            self.assertEqual(b.pointer(), address(x))
            b.diff[...] = 1.0
            b.update()
            del capsule
            gc.collect()
            self.assertEqual(sys.getrefcount(x), refs + 1)  # the blob holds NumPy's export
            b.close()
            self.assertEqual(sys.getrefcount(x), refs)  # the producer's deleter, once
        np.testing.assert_array_equal(x, np.arange(6.0) - 2)
        self.assertEqual(len(blob._wrappers), wrappers)

    def test_producers_are_asked_for_dlpack_1(self):
        x = np.ones(3)
        p = Producer(x.__dlpack__(max_version=(1, 0)))
        self.assertEqual(blob.from_dlpack(p).shape, (3,))
        self.assertEqual(p.calls, [{"max_version": (1, 0)}])
        old = Producer(x.__dlpack__(), old=True)  # DLPack 0.6: asked again without
        self.assertEqual(blob.from_dlpack(old).shape, (3,))
        self.assertEqual(old.calls, [{"max_version": (1, 0)}, {}])
        self.assertEqual(blob.from_dlpack(x).pointer(), address(x))  # NumPy itself

    def test_round_trip_through_our_own_versioned_capsule(self):
        wrappers = len(blob._wrappers)
        b = blob.Blob((4,), device="cpu")
        b.data[...] = [1, 2, 3, 4]
        c = blob.from_dlpack(b.data.__dlpack__(max_version=(1, 0)))
        self.assertEqual(c.pointer(), b.pointer())
        b.close()
        np.testing.assert_array_equal(c.data.numpy(), [1, 2, 3, 4])
        c.close()  # our import wrapper's deleter, then our export's, then the library's
        self.assertEqual(len(blob._wrappers), wrappers)

    def test_refusals_leave_the_capsule_to_its_producer(self):
        x = np.ones(4)
        x.flags.writeable = False
        refs, wrappers = sys.getrefcount(x), len(blob._wrappers)
        with self.assertRaises(BufferError):  # NumPy: not without a read-only flag
            blob.from_dlpack(Producer(x.__dlpack__(), old=True))
        capsule = x.__dlpack__(max_version=(1, 0))
        with self.assertRaises(BufferError):  # read-only: a blob writes its data
            blob.from_dlpack(capsule)
        self.assertEqual(_get_name(capsule), b"dltensor_versioned")
        del capsule
        gc.collect()
        self.assertEqual(sys.getrefcount(x), refs)
        b = blob.Blob((2,), device="cpu")
        capsule = b.data.__dlpack__(max_version=(1, 0))
        t = versioned_struct(capsule)
        t.version.major = 2  # a future DLPack this module cannot read
        with self.assertRaises(BufferError):
            blob.from_dlpack(capsule)
        self.assertEqual(_get_name(capsule), b"dltensor_versioned")
        t.version.major = 1
        capsule = np.zeros(3, np.int16).__dlpack__(max_version=(1, 0))
        with self.assertRaises(blob.BlobError):
            blob.from_dlpack(capsule)
        self.assertEqual(_get_name(capsule), b"dltensor_versioned")
        del capsule, t
        gc.collect()
        self.assertEqual(len(blob._wrappers), wrappers)
        with self.assertRaises(ValueError):
            blob.from_dlpack(Producer(object()))
        p = Producer(object())
        with self.assertRaises(ValueError):  # the device argument, before the producer
            blob.from_dlpack(p, device="tpu")
        self.assertEqual(p.calls, [])


if __name__ == "__main__":
    unittest.main()
