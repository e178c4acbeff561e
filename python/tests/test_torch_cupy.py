"""DLPack with PyTorch and CuPy: device memory (and PyTorch's host tensors) shared with
blobs in both directions, writes seen both ways without host synchronisation, stream
order across a consumer's own stream, lifetimes in every order. Skipped, with the
reason, where PyTorch, CuPy or a GPU is missing."""
import gc
import unittest

import blob
from optional import optional

np = optional("numpy", ImportError)
torch = optional("torch")
cupy = optional("cupy")

BIG = 1 << 24  # elements: a kernel over this takes long enough to expose a missing wait


def gpu_reason(lib_name, module, has_gpu):
    if np is None:
        return "NumPy is not importable"
    if module is None:
        return f"{lib_name} is not importable"
    if not has_gpu():
        return f"{lib_name} sees no GPU"
    if blob.device_count() == 0:
        return "libblob sees no GPU (a CPU-only build, or no GPU)"
    return None


TORCH_GPU = gpu_reason("PyTorch", torch, lambda: torch.cuda.is_available())
CUPY_GPU = gpu_reason("CuPy", cupy, lambda: cupy.cuda.runtime.getDeviceCount() > 0)


def host_values(b, part="data"):
    """The blob's values read through its host side (a copy from the device if needed,
    on the blob's stream)."""
    return np.array(b.view(part, "cpu", writable=False).numpy())


@unittest.skipUnless(torch is not None and np is not None, "PyTorch is not importable")
class TorchHostTest(unittest.TestCase):
    def test_host_memory_both_ways(self):
        b = blob.Blob((3, 4), device="cpu")
        b.data[...] = np.arange(12).reshape(3, 4)
        t = torch.from_dlpack(b.view("data", "cpu"))
        self.assertEqual(t.device.type, "cpu")
        self.assertEqual(t.data_ptr(), b.pointer(device="cpu"))
        t.mul_(2)  # torch writes: torch's tensors from DLPack are writable
        self.assertEqual(b.data[2, 3], 22.0)
        x = torch.arange(6, dtype=torch.float64)
        c = blob.from_dlpack(x)
        self.assertEqual(c.pointer(), x.data_ptr())
        c.diff[...] = 1.0
        c.update()
        self.assertEqual(x[5].item(), 4.0)


class Spy:
    """Passes __dlpack__ on to a view of ours and records the keywords it was given."""

    def __init__(self, view):
        self.view, self.calls = view, []

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        return self.view.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.view.__dlpack_device__()


def accepts_max_version(x):
    try:
        x.__dlpack__(max_version=(1, 0))
    except TypeError:
        return False
    return True


@unittest.skipUnless(torch is not None and np is not None, "PyTorch is not importable")
class TorchVersionedTest(unittest.TestCase):
    def setUp(self):
        if not accepts_max_version(torch.ones(1)):
            self.skipTest("this PyTorch speaks DLPack 0.6 only")

    def test_export_versioned(self):
        b = blob.Blob((4,), device="cpu")
        b.data[...] = [1, 2, 3, 4]
        spy = Spy(b.view("data", "cpu"))
        t = torch.from_dlpack(spy)
        self.assertGreaterEqual(tuple(spy.calls[0]["max_version"]), (1, 0))
        self.assertEqual(t.data_ptr(), b.pointer())
        t.add_(1)
        self.assertEqual(b.data[3], 5.0)
        c = torch.from_dlpack(b.data, copy=True)
        self.assertNotEqual(c.data_ptr(), b.pointer())
        self.assertEqual(c.tolist(), [2, 3, 4, 5])

    def test_import_versioned(self):
        x = torch.arange(6, dtype=torch.float32)
        capsule = x.__dlpack__(max_version=(1, 0))
        b = blob.from_dlpack(capsule)
        self.assertIn("used_dltensor_versioned", repr(capsule))
        self.assertEqual(b.pointer(), x.data_ptr())
        b.diff[...] = 1.0
        b.update()
        self.assertEqual(x.tolist(), [-1, 0, 1, 2, 3, 4])
        del x, capsule
        gc.collect()
        np.testing.assert_array_equal(b.data.numpy(), [-1, 0, 1, 2, 3, 4])
        b.close()  # torch's deleter, through our wrapper


@unittest.skipIf(TORCH_GPU, TORCH_GPU)
class TorchDeviceTest(unittest.TestCase):
    def setUp(self):
        torch.cuda.synchronize()

    def test_export_zero_copy_both_ways(self):
        for dtype, tdtype in (("float32", torch.float32), ("float64", torch.float64)):
            b = blob.Blob((BIG,), dtype, device=0)
            b.data[...] = np.arange(BIG) % 1000  # written on the host: AT_CPU
            t = torch.from_dlpack(b)  # the device side, copied up by the export itself
            self.assertEqual(t.device, torch.device("cuda", 0))
            self.assertEqual(t.dtype, tdtype)
            self.assertEqual(t.data_ptr(), b.pointer())  # no copy
            t.mul_(2)  # torch writes on its stream ...
            np.testing.assert_array_equal(host_values(b), 2 * (np.arange(BIG) % 1000))
            b.pointer(writable=True)  # the device side holds the head again
            b.diff[...] = 1.0
            b.update()  # ... and the blob writes on the device (cuBLAS axpy)
            self.assertEqual(t[BIG - 1].item(), 2 * ((BIG - 1) % 1000) - 1)

    def test_consumer_stream_is_ordered_both_ways(self):
        b = blob.Blob((BIG,), device=0)
        b.data[...] = 1.0
        s = torch.cuda.Stream()  # non-blocking: no implicit order with anything
        with torch.cuda.stream(s):
            t = torch.from_dlpack(b)  # s waits for the upload on the device
            for _ in range(20):
                t.add_(1.0)  # queued on s, far from done when the host reads on
        # the blob's next use on its own stream waits for s on the device
        values = host_values(b)
        self.assertTrue((values == 21.0).all(), f"{(values != 21.0).sum()} stale elements")
        s.synchronize()

    def test_import_zero_copy_both_ways(self):
        x = torch.arange(BIG, dtype=torch.float32, device="cuda") % 1000
        b = blob.from_dlpack(x)
        self.assertEqual(b.device, "cuda:0")
        self.assertEqual(b.shape, (BIG,))
        self.assertEqual(b.pointer(), x.data_ptr())
        x.mul_(3)  # torch writes ...
        np.testing.assert_array_equal(host_values(b), 3 * (np.arange(BIG) % 1000))  # seen
        b.pointer(writable=True)
        b.diff[...] = 1.0
        b.update()  # the blob writes on the device ...
        self.assertEqual(x[7].item(), 20.0)  # ... torch sees it

    def test_lifetimes(self):
        # export, free the blob, use the tensor, drop it
        b = blob.Blob((1000,), device=0)
        b.data[...] = 2.0
        t = torch.from_dlpack(b)
        b.close()
        del b
        gc.collect()
        self.assertEqual(t.sum().item(), 2000.0)
        del t
        # import, drop the producer's object, use the blob, free it: torch gets its
        # memory back exactly then
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        x = torch.ones(1 << 20, device="cuda")
        c = blob.from_dlpack(x)
        del x
        gc.collect()
        self.assertEqual(torch.cuda.memory_allocated(), base + (4 << 20))
        c.diff[...] = 1.0
        c.update()
        self.assertEqual(float(host_values(c).sum()), 0.0)
        c.close()
        self.assertEqual(torch.cuda.memory_allocated(), base)

    def test_bad_input_returns_the_tensor(self):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        for x, message in ((torch.ones(64, 32, device="cuda").t(), "not C-contiguous"),
                           (torch.ones(8, dtype=torch.int16, device="cuda"), "only float32"),
                           (torch.ones(8, dtype=torch.complex64, device="cuda"), "only float32")):
            with self.assertRaises(blob.BlobError) as e:
                blob.from_dlpack(x)
            self.assertIn(message, str(e.exception))
            del x
        gc.collect()
        self.assertEqual(torch.cuda.memory_allocated(), base)  # torch's deleter ran

    def test_devices_and_copies(self):
        b = blob.Blob((1000,), device=0)
        b.data[...] = 3.0
        h = torch.from_dlpack(b, device="cpu")  # torch may copy the device side itself
        self.assertEqual(h.device, torch.device("cpu"))
        self.assertEqual(h.sum().item(), 3000.0)
        h = torch.from_dlpack(b.__dlpack__(dl_device=(1, 0)))  # the blob's own host side
        self.assertEqual(h.data_ptr(), b.pointer(device="cpu"))
        c = torch.from_dlpack(b, copy=True)  # a copy on the blob's GPU
        self.assertEqual(c.device, torch.device("cuda", 0))
        self.assertNotEqual(c.data_ptr(), b.pointer())
        self.assertEqual(c.sum().item(), 3000.0)
        host = blob.Blob((1000,), device="cpu")
        host.data[...] = 2.0
        g = torch.from_dlpack(host.data, device="cuda:0")  # copied to the GPU
        self.assertEqual(g.device, torch.device("cuda", 0))
        self.assertEqual(g.sum().item(), 2000.0)
        with self.assertRaises(BufferError):  # what torch passes on when it asks
            host.data.__dlpack__(dl_device=(2, 0), copy=False)
        with self.assertRaises((BufferError, ValueError)):  # some versions refuse first
            torch.from_dlpack(host.data, device="cuda:0", copy=False)

    def test_blob_round_trip_through_torch(self):
        b = blob.Blob((5, 7), "float64", device=0)
        b.data[...] = np.arange(35).reshape(5, 7)
        c = blob.from_dlpack(torch.from_dlpack(b))
        self.assertEqual(c.pointer(), b.pointer())
        b.close()
        np.testing.assert_array_equal(host_values(c), np.arange(35).reshape(5, 7))


@unittest.skipIf(CUPY_GPU, CUPY_GPU)
class CupyDeviceTest(unittest.TestCase):
    def test_export_zero_copy_both_ways(self):
        b = blob.Blob((BIG,), device=0)
        b.data[...] = np.arange(BIG) % 1000
        a = cupy.from_dlpack(b)
        self.assertEqual(a.data.ptr, b.pointer())
        a *= 2  # cupy writes ...
        np.testing.assert_array_equal(host_values(b), 2 * (np.arange(BIG) % 1000))
        b.pointer(writable=True)
        b.diff[...] = 1.0
        b.update()  # the blob writes
        self.assertEqual(float(a[BIG - 1]), 2 * ((BIG - 1) % 1000) - 1)

    def test_consumer_stream_is_ordered_both_ways(self):
        b = blob.Blob((BIG,), "float64", device=0)
        b.data[...] = 1.0
        s = cupy.cuda.Stream(non_blocking=True)
        with s:
            a = cupy.from_dlpack(b)
            for _ in range(20):
                a += 1.0
        values = host_values(b)
        self.assertTrue((values == 21.0).all(), f"{(values != 21.0).sum()} stale elements")
        s.synchronize()

    def test_import_zero_copy_and_lifetimes(self):
        x = cupy.arange(BIG, dtype=cupy.float32) % 1000
        b = blob.from_dlpack(x)
        self.assertEqual(b.pointer(), x.data.ptr)
        x *= 3
        np.testing.assert_array_equal(host_values(b), 3 * (np.arange(BIG) % 1000))
        del x  # the producer's object goes first
        gc.collect()
        b.pointer(writable=True)
        b.diff[...] = 1.0
        b.update()
        self.assertEqual(host_values(b)[7], 20.0)
        b.close()

    def test_versioned_both_ways(self):
        x = cupy.arange(8, dtype=cupy.float32)
        if not accepts_max_version(x):
            self.skipTest("this CuPy speaks DLPack 0.6 only")
        capsule = x.__dlpack__(max_version=(1, 0), stream=1)
        b = blob.from_dlpack(capsule)
        self.assertIn("used_dltensor_versioned", repr(capsule))
        self.assertEqual(b.pointer(), x.data.ptr)
        spy = Spy(b.data)
        a = cupy.from_dlpack(spy)
        self.assertEqual(a.data.ptr, b.pointer())
        self.assertGreaterEqual(tuple(spy.calls[0]["max_version"]), (1, 0))
        a += 1  # cupy writes through the versioned export ...
        self.assertEqual(float(x[7]), 8.0)  # ... into the memory the blob borrows from x

    def test_blob_freed_before_the_array(self):
        b = blob.Blob((100,), device=0)
        b.data[...] = 4.0
        a = cupy.from_dlpack(b)
        b.close()
        gc.collect()
        self.assertEqual(float(a.sum()), 400.0)


if __name__ == "__main__":
    unittest.main()
