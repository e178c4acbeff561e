"""The dtypes past float32 and float64: NumPy views of float16, int32, int64 and uint8
blobs, .npy files of them, bfloat16's clear refusal (NumPy has no bfloat16), and DLPack
with PyTorch's bfloat16, float16 and int64 tensors on the host and, with a GPU, on the
device. Skipped, with the reason, where NumPy, PyTorch or a GPU is missing."""
import os
import tempfile
import unittest

import blob
from optional import optional

np = optional("numpy", ImportError)
torch = optional("torch")

NUMPY_DTYPES = ["float16", "int32", "int64", "uint8"]


class DtypeNamesTest(unittest.TestCase):
    def test_names(self):
        for name in ["float32", "float64", "bfloat16"] + NUMPY_DTYPES:
            with blob.Blob((2, 3), name, device="cpu") as b:
                self.assertEqual(b.dtype, name)
        with self.assertRaisesRegex(ValueError, "bfloat16"):
            blob.Blob((2,), "int16")

    def test_integer_math_refused(self):
        b = blob.Blob((4,), "int32", device="cpu")
        with self.assertRaisesRegex(blob.BlobError, "blob_update.*int32"):
            b.update()


@unittest.skipUnless(np is not None, "NumPy is not importable")
class NumpyDtypeTest(unittest.TestCase):
    def test_views_and_npy(self):
        with tempfile.TemporaryDirectory() as d:
            for name in NUMPY_DTYPES:
                b = blob.Blob((3, 4), name, device="cpu")
                a = b.data.numpy()
                self.assertEqual(a.dtype, np.dtype(name))
                a[...] = np.arange(12, dtype=name).reshape(3, 4) * 3 + 1
                path = os.path.join(d, name + ".npy")
                b.save(path)
                back = np.load(path)
                self.assertEqual(back.dtype, np.dtype(name))
                np.testing.assert_array_equal(back, a)
                c = blob.Blob.from_npy(path, name, device="cpu")
                np.testing.assert_array_equal(c.data.numpy(), a)

    def test_float16_from_float32_file(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "f4.npy")
            x = np.array([1 / 3, -65520.0, 2.0 ** -25, 1.5 * 2.0 ** -24, np.nan], "<f4")
            np.save(path, x)
            c = blob.Blob.from_npy(path, "float16", device="cpu")
            expect = x.astype(np.float16)  # NumPy rounds to nearest even too
            np.testing.assert_array_equal(c.data.numpy().view(np.uint16)[:4],
                                          expect.view(np.uint16)[:4])
            self.assertTrue(np.isnan(c.data.numpy()[4]))

    def test_astype(self):
        b = blob.Blob((5,), "float32", device="cpu")
        x = np.array([1 / 3, -65520.0, 1e-30, np.inf, np.nan], "<f4")
        b.data.numpy()[...] = x
        b.diff.numpy()[...] = -x
        h = b.astype("float16")
        self.assertEqual((h.dtype, h.shape), ("float16", (5,)))
        expect = x.astype(np.float16)  # NumPy rounds to nearest even too
        np.testing.assert_array_equal(h.data.numpy().view(np.uint16)[:4],
                                      expect.view(np.uint16)[:4])
        np.testing.assert_array_equal(h.diff.numpy()[:4], -expect[:4])
        self.assertTrue(np.isnan(h.data.numpy()[4]))
        back = h.astype("float64")  # exact: float64 holds every float16
        np.testing.assert_array_equal(back.data.numpy()[:4], expect[:4].astype(np.float64))
        with self.assertRaisesRegex(blob.BlobError, "int32"):
            b.astype("int32")

    def test_bfloat16_refused(self):
        b = blob.Blob((2, 2), "bfloat16", device="cpu")
        with self.assertRaisesRegex(TypeError, "NumPy has no bfloat16"):
            b.data.numpy()
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaisesRegex(blob.BlobError, "bfloat16"):
                b.save(os.path.join(d, "x.npy"))

    def test_from_dlpack_numpy(self):
        for name in NUMPY_DTYPES:
            x = np.arange(6, dtype=name)
            c = blob.from_dlpack(x)
            self.assertEqual(c.dtype, name)
            self.assertEqual(c.pointer(), x.ctypes.data)
            np.testing.assert_array_equal(c.data.numpy(), x)


@unittest.skipUnless(torch is not None and np is not None, "PyTorch is not importable")
class TorchDtypeTest(unittest.TestCase):
    DTYPES = ["bfloat16", "float16", "int64"]

    def check_both_ways(self, device):
        for name in self.DTYPES:
            tdt = getattr(torch, name)
            x = torch.arange(12, dtype=tdt, device=device).reshape(3, 4)
            b = blob.from_dlpack(x)
            self.assertEqual(b.dtype, name)
            self.assertEqual(b.pointer(device=device), x.data_ptr())
            b2 = blob.Blob((3, 4), name, device=device)
            t = torch.from_dlpack(b2.data)
            self.assertEqual(t.dtype, tdt)
            self.assertEqual(t.data_ptr(), b2.pointer(device=device))
            t.copy_(x * 2)  # written through torch, read through the blob
            back = torch.from_dlpack(b2.view("data", "cpu"))
            self.assertTrue(torch.equal(back, (x * 2).cpu()))

    def test_host(self):
        self.check_both_ways("cpu")

    @unittest.skipUnless(torch is not None and torch.cuda.is_available() and
                         blob.device_count() > 0, "PyTorch or libblob sees no GPU")
    def test_device(self):
        self.check_both_ways("cuda")


if __name__ == "__main__":
    unittest.main()
