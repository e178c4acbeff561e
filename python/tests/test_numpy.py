"""DLPack with NumPy on host memory: one memory on both sides, writes seen both ways,
lifetimes in every order (the producer's deleter exactly once), bad input."""
import ctypes
import gc
import sys
import unittest

import blob
from optional import optional

np = optional("numpy", ImportError)

_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype = ctypes.c_char_p
_get_name.argtypes = [ctypes.py_object]


NUMPY_READS_FLAGS = np is not None and tuple(map(int, np.__version__.split(".")[:2])) >= (2, 1)


def address(a):
    return a.__array_interface__["data"][0]


class Producer:
    """Hands out a capsule it made earlier, as a producer's __dlpack__ would."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


@unittest.skipUnless(np, "NumPy is not importable")
class NumpyTest(unittest.TestCase):
    def blob_with(self, values, dtype="float32"):
        b = blob.Blob(np.shape(values), dtype, device="cpu")
        b.data[...] = values
        return b

    def test_export_same_memory_both_ways(self):
        for dtype in ("float32", "float64"):
            b = self.blob_with(np.arange(6.0).reshape(2, 3), dtype)
            a = np.from_dlpack(b.data)
            self.assertEqual(a.dtype, np.dtype(dtype))
            self.assertEqual(a.shape, (2, 3))
            self.assertEqual(address(a), b.pointer(device="cpu"))  # no copy
            # DLPack 1.0 says "writable" (NumPy >= 2.1 reads it; older NumPy, and DLPack
            # 0.6, make read-only arrays)
            self.assertEqual(a.flags.writeable, NUMPY_READS_FLAGS)
            b.diff[...] = 1.0
            b.update()  # the blob writes ...
            np.testing.assert_array_equal(a, np.arange(6.0).reshape(2, 3) - 1)  # ... seen
            w = np.asarray(b.data)  # the writable way for NumPy: same memory
            self.assertEqual(address(w), address(a))
            w[1, 2] = 100.0  # NumPy writes ...
            b.update()
            self.assertEqual(b.data[1, 2], 99.0)  # ... the blob sees it
            self.assertEqual(a[1, 2], 99.0)

    def test_import_same_memory_both_ways(self):
        for dtype in (np.float32, np.float64):
            x = np.arange(12, dtype=dtype).reshape(3, 4)
            b = blob.from_dlpack(x)
            self.assertEqual(b.shape, (3, 4))
            self.assertEqual(b.dtype, np.dtype(dtype).name)
            self.assertEqual(b.device, "cpu")
            self.assertEqual(b.pointer(), address(x))
            x[0, 0] = 5.0  # the producer writes ...
            self.assertEqual(b.data[0, 0], 5.0)  # ... the blob sees it
            b.diff[...] = 2.0
            b.update()  # the blob writes ...
            self.assertEqual(x[2, 3], 9.0)  # ... the producer sees it

    def test_blob_freed_before_the_array(self):
        b = self.blob_with(np.arange(1000.0))
        a = np.from_dlpack(b.data)
        w = np.asarray(b.data)
        b.close()
        del b
        gc.collect()
        np.testing.assert_array_equal(a, np.arange(1000.0))  # the memory is still there
        w += 1
        self.assertEqual(a[999], 1000.0)

    def test_array_dropped_first_then_blob(self):
        x = np.arange(10.0)
        refs = sys.getrefcount(x)
        b = blob.from_dlpack(x)
        self.assertEqual(sys.getrefcount(x), refs + 1)  # NumPy's export holds x
        del x  # the producer's object goes; its memory is the blob's to use
        b.diff[...] = 1.0
        b.update()
        self.assertEqual(b.data[9], 8.0)
        b.close()  # now NumPy's deleter runs

    def test_deleter_once_when_the_last_holder_goes(self):
        x = np.ones(8)
        refs = sys.getrefcount(x)
        b = blob.from_dlpack(x)
        c = blob.Blob((8,), "float64", device="cpu")
        # c shares b's data block through the C API's blob_share_data
        blob._lib.lib.blob_share_data.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self.assertEqual(blob._lib.lib.blob_share_data(c._h, b._h), 0)
        b.close()
        self.assertEqual(sys.getrefcount(x), refs + 1)
        capsule = c.data.__dlpack__()  # an export of ours holds the block too
        c.close()
        self.assertEqual(sys.getrefcount(x), refs + 1)
        del capsule  # never consumed: its destructor gives the tensor back
        gc.collect()
        self.assertEqual(sys.getrefcount(x), refs)

    def test_reshape_past_capacity_releases_the_producer(self):
        x = np.ones(4, np.float32)
        refs = sys.getrefcount(x)
        b = blob.from_dlpack(x)
        b.reshape(2)
        self.assertEqual(sys.getrefcount(x), refs + 1)
        b.reshape(100)  # a new block: the borrowed one is dropped
        self.assertEqual(sys.getrefcount(x), refs)
        b.close()
        self.assertEqual(sys.getrefcount(x), refs)

    def test_capsule_protocol(self):
        b = self.blob_with(np.arange(4.0))
        capsule = b.data.__dlpack__()
        self.assertEqual(_get_name(capsule), b"dltensor")
        a = np.from_dlpack(Producer(capsule))
        self.assertEqual(_get_name(capsule), b"used_dltensor")  # NumPy took it
        del capsule  # our destructor now does nothing: NumPy's array owns the tensor
        gc.collect()
        np.testing.assert_array_equal(a, np.arange(4.0))
        self.assertEqual(b.__dlpack_device__(), (1, 0))
        # a capsule of ours into a blob again: the same memory
        c = blob.from_dlpack(b.data.__dlpack__())
        self.assertEqual(c.pointer(), b.pointer())
        # the keywords of the array API
        a2 = np.from_dlpack(b.data, device="cpu")
        self.assertEqual(address(a2), address(a))
        a3 = np.from_dlpack(b.data, copy=True)
        self.assertNotEqual(address(a3), address(a))
        np.testing.assert_array_equal(a3, a)
        if blob.device_count() == 0:  # a host blob to CUDA: a copy, on a GPU only
            with self.assertRaises(BufferError):
                b.data.__dlpack__(dl_device=(2, 0))
        else:
            on_gpu = blob.from_dlpack(b.data.__dlpack__(dl_device=(2, 0)))
            self.assertEqual(on_gpu.device, "cuda:0")
            np.testing.assert_array_equal(on_gpu.data.numpy(), np.arange(4.0))
        with self.assertRaises(BufferError):
            b.data.__dlpack__(dl_device=(13, 0))  # not a device a blob can be on

    def test_bad_input_leaves_the_capsule_to_its_producer(self):
        cases = [
            (np.arange(12.0).reshape(3, 4)[:, ::2], "not C-contiguous"),
            (np.arange(12.0).reshape(3, 4).T, "not C-contiguous"),
            (np.zeros(3, np.int16), "only float32, float64"),
            (np.zeros(3, np.complex64), "only float32, float64"),
            (np.zeros([1] * 33), "at most 32"),
        ]
        for x, message in cases:
            refs = sys.getrefcount(x)
            with self.assertRaises(blob.BlobError) as e:
                blob.from_dlpack(x)
            self.assertIn(message, str(e.exception))
            self.assertEqual(e.exception.name, "EINVAL")
            gc.collect()
            self.assertEqual(sys.getrefcount(x), refs)  # NumPy's deleter ran, once
        used = np.ones(2).__dlpack__()
        np.from_dlpack(Producer(used))
        with self.assertRaises(ValueError):  # a capsule that was consumed already
            blob.from_dlpack(used)
        # size-1 dims with any stride and empty arrays are accepted
        x = np.ones((3, 1, 4), np.float32)[:, :, :]
        self.assertEqual(blob.from_dlpack(x).shape, (3, 1, 4))
        self.assertEqual(blob.from_dlpack(np.ones((4, 1), np.float32)[::1, ::-1]).shape, (4, 1))
        self.assertEqual(blob.from_dlpack(np.ones((0, 3))).size, 0)
        self.assertEqual(blob.from_dlpack(np.full((), 2.5)).shape, ())

    def test_empty_and_scalar(self):
        e = blob.Blob((3, 0), device="cpu")
        self.assertEqual(np.from_dlpack(e.data).shape, (3, 0))
        s = self.blob_with(np.full((), 4.0))
        self.assertEqual(np.from_dlpack(s.data)[()], 4.0)

    def test_many_cycles_keep_memory_flat(self):
        b = self.blob_with(np.arange(256.0))

        def resident_kib():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4

        def cycle():
            a = np.asarray(b.data)  # our memory in NumPy ...
            c = blob.from_dlpack(a)  # ... and NumPy's export of it borrowed back
            np.from_dlpack(c.data)

        for _ in range(2000):
            cycle()
        before = resident_kib()
        for _ in range(20000):
            cycle()
        gc.collect()
        self.assertLess(resident_kib() - before, 2048)


if __name__ == "__main__":
    unittest.main()
