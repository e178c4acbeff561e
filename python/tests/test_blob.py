"""The Blob class: creation, shape, dtype, reshape, update, .npy files, errors."""
import os
import tempfile
import unittest

import blob
from optional import optional

np = optional("numpy", ImportError)

NEEDS_NUMPY = "NumPy is not importable"


class BlobTest(unittest.TestCase):
    def test_create_and_queries(self):
        b = blob.Blob((2, 3, 4), "float64", device="cpu")
        self.assertEqual(b.shape, (2, 3, 4))
        self.assertEqual(b.ndim, 3)
        self.assertEqual(b.size, 24)
        self.assertEqual(b.dtype, "float64")
        self.assertEqual(b.device, "cpu")
        self.assertIn("shape=(2, 3, 4)", repr(b))
        self.assertEqual(blob.Blob(5, device="cpu").shape, (5,))
        self.assertEqual(blob.Blob((), device="cpu").size, 1)
        self.assertEqual(blob.Blob((3, 0), device="cpu").size, 0)
        default = blob.Blob((2,))
        self.assertEqual(default.device, "cuda:0" if blob.device_count() else "cpu")

    def test_reshape(self):
        b = blob.Blob((4, 5), device="cpu")
        self.assertIs(b.reshape(2, 10), b)
        self.assertEqual(b.shape, (2, 10))
        b.reshape((20,))
        self.assertEqual(b.shape, (20,))

    def test_errors_carry_the_library_message(self):
        with self.assertRaises(blob.BlobError) as e:
            blob.Blob((2, -1), device="cpu")
        self.assertEqual(e.exception.name, "EINVAL")
        self.assertEqual(e.exception.status, -1)
        self.assertIn("negative", str(e.exception))
        b = blob.Blob((2,), device="cpu")
        with self.assertRaises(blob.BlobError) as e:
            b.reshape([2] * 33)
        self.assertIn("33 axes", str(e.exception))
        self.assertEqual(b.shape, (2,))  # a failed call changes nothing
        with self.assertRaises(blob.BlobError) as e:
            b.update()  # data never touched
        self.assertEqual(e.exception.name, "ESTATE")
        with self.assertRaises(ValueError):
            blob.Blob((2,), "int16")
        with self.assertRaises(ValueError):
            blob.Blob((2,), device="tpu")
        with self.assertRaises(blob.BlobError) as e:
            b.load("/nonexistent/x.npy")
        self.assertEqual(e.exception.name, "EIO")

    def test_closed(self):
        b = blob.Blob((2,), device="cpu")
        b.close()
        b.close()
        self.assertEqual(repr(b), "Blob(closed)")
        with self.assertRaises(ValueError):
            _ = b.shape
        with blob.Blob((2,), device="cpu") as c:
            self.assertEqual(c.size, 2)
        self.assertEqual(repr(c), "Blob(closed)")

    @unittest.skipUnless(np, NEEDS_NUMPY)
    def test_update_and_views(self):
        b = blob.Blob((3, 4), device="cpu")
        b.data[...] = np.arange(12).reshape(3, 4)
        b.diff[...] = 0.5
        b.update()
        np.testing.assert_array_equal(b.data.numpy(), np.arange(12).reshape(3, 4) - 0.5)
        self.assertEqual(b.data[2, 3], 10.5)
        self.assertEqual(b.diff.numpy().dtype, np.float32)

    @unittest.skipUnless(np, NEEDS_NUMPY)
    def test_npy_round_trip(self):
        with tempfile.TemporaryDirectory() as d:
            b = blob.Blob((2, 5), "float64", device="cpu")
            values = np.random.default_rng(1).standard_normal((2, 5))
            b.data[...] = values
            path = os.path.join(d, "x.npy")
            b.save(path)
            np.testing.assert_array_equal(np.load(path), values)
            c = blob.Blob.from_npy(path, "float32", device="cpu")
            self.assertEqual(c.shape, (2, 5))
            self.assertEqual(c.dtype, "float32")
            np.testing.assert_allclose(c.data.numpy(), values, rtol=1e-6)
            np.save(path, np.ones((7,), np.float32))
            c.load(path, "diff")
            self.assertEqual(c.shape, (7,))
            np.testing.assert_array_equal(c.diff.numpy(), np.ones(7))

    @unittest.skipUnless(np, NEEDS_NUMPY)
    def test_copy(self):
        b = blob.Blob((4,), device="cpu")
        b.data[...] = [1, 2, 3, 4]
        b.diff[...] = [5, 6, 7, 8]
        c = b.copy()
        b.data[...] = 0
        b.diff[...] = 0
        np.testing.assert_array_equal(c.data.numpy(), [1, 2, 3, 4])
        np.testing.assert_array_equal(c.diff.numpy(), [5, 6, 7, 8])
        np.testing.assert_array_equal(np.from_dlpack(b.diff, copy=True), [0, 0, 0, 0])


if __name__ == "__main__":
    unittest.main()
