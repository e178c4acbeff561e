"""Arguments checked before the library sees them: integers (no silent wrap, no floats),
paths (str, bytes, os.PathLike, any name the system allows, no embedded NUL), and where
the library itself is looked for (never the working directory)."""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import blob
from optional import optional

np = optional("numpy", ImportError)

PACKAGE = Path(blob.__file__).resolve().parent


class IntegerTest(unittest.TestCase):
    def test_shapes_do_not_wrap(self):
        for shape in ((2**64 + 5,), 2**64 + 5, (2, 2**63), (-2**63 - 1,)):
            with self.assertRaises(OverflowError):
                blob.Blob(shape, device="cpu")
        b = blob.Blob((4,), device="cpu")
        for shape in ((2**64 + 3,), (2**64 + 3, 1)):
            with self.assertRaises(OverflowError):
                b.reshape(*shape)
        with self.assertRaises(OverflowError):
            b.reshape([2**64 + 3])
        self.assertEqual(b.shape, (4,))  # a refused reshape changes nothing
        # in int64's range, the library's own checks
        with self.assertRaises(blob.BlobError):
            blob.Blob((2**62, 2**62), device="cpu")
        with self.assertRaises(blob.BlobError):
            b.reshape(-1)

    def test_no_floats_or_strings(self):
        for shape in ((2.9, 3), 2.0, (True, 3.0), "ab", b"ab", None, 3 + 0j):
            with self.assertRaises(TypeError, msg=repr(shape)):
                blob.Blob(shape, device="cpu")
        b = blob.Blob((4,), device="cpu")
        with self.assertRaises(TypeError):
            b.reshape(2.5)
        with self.assertRaises(TypeError):
            b.reshape(2, 2.0)
        self.assertEqual(b.shape, (4,))

    @unittest.skipUnless(np, "NumPy is not importable")
    def test_numpy_integers(self):
        self.assertEqual(blob.Blob(np.int64(3), device="cpu").shape, (3,))
        self.assertEqual(blob.Blob(np.array([2, 3]), device="cpu").shape, (2, 3))
        self.assertEqual(blob.Blob((np.uint8(2), np.int32(5)), device="cpu").shape, (2, 5))
        self.assertEqual(blob.Blob((2,), device="cpu").reshape(np.int16(1), 2).shape, (1, 2))
        with self.assertRaises(TypeError):
            blob.Blob((np.float64(2.0),), device="cpu")

    def test_devices(self):
        for device in (2**32, 2**31, -1, -2, 2**64, "cuda:4294967296", "cuda:-1", "cuda:"):
            with self.assertRaises(ValueError, msg=repr(device)):
                blob.Blob((2,), device=device)
        for device in (1.0, 0.0, True, False, 1j):
            with self.assertRaises(TypeError, msg=repr(device)):
                blob.Blob((2,), device=device)
        if blob.device_count() == 0:  # a GPU number in range goes to the library
            with self.assertRaises(blob.BlobError):
                blob.Blob((2,), device=2**31 - 1)

    def test_dlpack_numbers(self):
        v = blob.Blob((2,), device="cpu").data
        for kwargs in ({"stream": 1.0}, {"max_version": (1.0, 0)}, {"max_version": "1.0"},
                       {"dl_device": (1.0, 0)}, {"dl_device": 1}):
            with self.assertRaises(TypeError, msg=repr(kwargs)):
                v.__dlpack__(**kwargs)
        for kwargs in ({"stream": 2**64}, {"stream": -2}, {"dl_device": (2**32 + 1, 0)}):
            with self.assertRaises(OverflowError, msg=repr(kwargs)):
                v.__dlpack__(**kwargs)
        with self.assertRaises(ValueError):
            v.__dlpack__(stream=0)


class PathTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.b = blob.Blob((3,), device="cpu")

    def names(self):
        return sorted(os.listdir(os.fsencode(self.dir)))

    def test_embedded_nul_is_refused(self):
        for path in (os.path.join(self.dir, "a\0.npy"), os.fsencode(self.dir) + b"/a\0.npy"):
            with self.assertRaises(ValueError):
                self.b.save(path)
            with self.assertRaises(ValueError):
                self.b.load(path)
        self.assertEqual(self.names(), [])  # not even the part before the NUL

    @unittest.skipUnless(np, "NumPy is not importable")
    def test_str_bytes_and_pathlike(self):
        self.b.data[...] = [1, 2, 3]
        self.b.save(os.fsencode(self.dir) + b"/x.npy")
        self.b.save(pathlib.Path(self.dir) / "p.npy")
        self.b.save(os.path.join(self.dir, "s.npy"))
        self.assertEqual(self.names(), [b"p.npy", b"s.npy", b"x.npy"])
        for name in ("p.npy", "s.npy", "x.npy"):
            np.testing.assert_array_equal(np.load(os.path.join(self.dir, name)), [1, 2, 3])
        c = blob.Blob((), device="cpu")
        c.load(os.fsencode(self.dir) + b"/x.npy")
        np.testing.assert_array_equal(c.data.numpy(), [1, 2, 3])

    @unittest.skipUnless(np, "NumPy is not importable")
    def test_names_that_are_not_utf8(self):
        self.b.data[...] = [4, 5, 6]
        raw = os.fsencode(self.dir) + b"/caf\xe9.npy"
        self.b.save(os.fsdecode(raw))  # a str with a surrogate escape, as os.listdir gives
        self.b.save(os.fsencode(self.dir) + b"/\xff.npy")
        self.assertEqual(self.names(), [b"caf\xe9.npy", b"\xff.npy"])
        c = blob.Blob((), device="cpu")
        c.load(raw)
        np.testing.assert_array_equal(c.data.numpy(), [4, 5, 6])

    def test_not_a_path(self):
        for path in (3, None, ["a"]):
            with self.assertRaises(TypeError):
                self.b.save(path)


class LibraryLookupTest(unittest.TestCase):
    """_candidates() with $BLOB_LIBRARY unset, in a child whose working directory holds
    build/cuda/libblob.so and build/cpu/libblob.so (the child imports the module with
    $BLOB_LIBRARY set, then drops it and asks again)."""

    def candidates(self, package_parent):
        with tempfile.TemporaryDirectory() as cwd:
            for build in ("cuda", "cpu"):
                os.makedirs(os.path.join(cwd, "build", build))
                open(os.path.join(cwd, "build", build, "libblob.so"), "w").close()
            env = dict(os.environ, PYTHONPATH=str(package_parent),
                       BLOB_LIBRARY=blob.library_path)
            out = subprocess.run(
                [sys.executable, "-c", "import os; from blob import _lib; "
                 "del os.environ['BLOB_LIBRARY']; print('\\n'.join(_lib._candidates()))"],
                cwd=cwd, env=env, stdout=subprocess.PIPE, text=True, check=True).stdout
            found = out.split()
            self.assertFalse([c for c in found if c.startswith(os.path.realpath(cwd))], found)
            self.assertFalse([c for c in found if c.startswith("build")], found)
            return found

    def test_not_the_working_directory(self):
        with tempfile.TemporaryDirectory() as d:  # a copy of the package outside a checkout
            shutil.copytree(PACKAGE, os.path.join(d, "blob"),
                            ignore=shutil.ignore_patterns("__pycache__"))
            self.assertEqual(self.candidates(d), ["libblob.so.0"])

    def test_the_checkout_the_package_sits_in(self):
        root = PACKAGE.parents[1]
        if not (root / "include" / "blob" / "blob.h").is_file():
            self.skipTest("the package does not sit in a libblob checkout")
        found = self.candidates(PACKAGE.parent)
        self.assertEqual(found[-1], "libblob.so.0")
        for c in found[:-1]:
            self.assertIn(c, [str(root / "build" / b / "libblob.so") for b in ("cuda", "cpu")])

    def test_blob_library_wins(self):
        env = dict(os.environ, PYTHONPATH=str(PACKAGE.parent), BLOB_LIBRARY="/nonexistent.so")
        done = subprocess.run([sys.executable, "-c", "import blob"], env=env,
                              stderr=subprocess.PIPE, text=True)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("/nonexistent.so", done.stderr)
        self.assertEqual(len(done.stderr.split("; ")), 1)  # nothing else was tried


if __name__ == "__main__":
    unittest.main()
