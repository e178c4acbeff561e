"""Lifetimes and threads: each NumPy array made from a view owns its export (a kept View
holds none), close() racing with calls in other threads raises instead of crashing, and
a View kept across loads that replace the blob's memory. The races run in a child
process, so that a crash fails the test instead of ending the run."""
import gc
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

import blob
from optional import optional

np = optional("numpy", ImportError)

PACKAGE_DIR = str(Path(blob.__file__).resolve().parents[1])


def resident_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4


def run_child(source, timeout=120):
    """Run Python source in a child with this module on its path; (returncode, output)."""
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR, BLOB_LIBRARY=blob.library_path)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(source)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)
    return done.returncode, done.stdout


@unittest.skipUnless(np, "NumPy is not importable")
class ExportOwnershipTest(unittest.TestCase):
    def test_item_access_through_a_kept_view_holds_no_export(self):
        x = np.arange(64.0)
        refs = sys.getrefcount(x)
        b = blob.from_dlpack(x)  # the blob's data block holds NumPy's export of x
        v = b.data
        for i in range(1000):
            v[i % 64] = i  # a write ...
            self.assertEqual(v[i % 64], i)  # ... and a load, each through a new array
        np.asarray(v).sum()
        kept = np.asarray(v)[10:20]  # a slice of an array keeps its export
        b.close()
        gc.collect()
        self.assertEqual(sys.getrefcount(x), refs + 1)  # held by `kept`'s export alone
        kept += 1
        self.assertEqual(x[10], 971.0)  # written last as 970
        del kept
        gc.collect()
        self.assertEqual(sys.getrefcount(x), refs)  # the view, still alive, holds nothing
        self.assertEqual(repr(v), "View(Blob(closed), data, host side)")

    def test_many_item_writes_keep_memory_flat(self):
        b = blob.Blob((256,), device="cpu")
        v = b.data
        for i in range(2000):
            v[i % 256] = i
        before = resident_kib()
        for i in range(50000):
            v[i % 256] = i
            v[(i + 1) % 256]
        gc.collect()
        self.assertLess(resident_kib() - before, 1024)

    def test_arrays_outlive_views_and_blob(self):
        v = blob.Blob((4,), device="cpu").data  # the view alone holds the blob
        gc.collect()
        v[...] = [1, 2, 3, 4]
        a = np.asarray(v)
        del v
        gc.collect()  # blob and view gone: the array's export keeps the memory
        a += 1
        np.testing.assert_array_equal(a, [2, 3, 4, 5])

    def test_array_protocol(self):
        b = blob.Blob((3,), "float32", device="cpu")
        b.data[...] = [1, 2, 3]
        v = b.view("data", "cpu", writable=False)
        self.assertFalse(np.asarray(v).flags.writeable)
        with self.assertRaises(ValueError):
            v[0] = 5
        self.assertEqual(np.asarray(v, dtype=np.float64).dtype, np.float64)  # a copy
        with self.assertRaises(ValueError):
            np.asarray(v, dtype=np.float64, copy=False)
        c = np.array(b.data)  # copy=True
        c[0] = 9
        self.assertEqual(b.data[0], 1)
        self.assertEqual(blob.Blob((3, 0), device="cpu").data.numpy().shape, (3, 0))


@unittest.skipUnless(np, "NumPy is not importable")
class ThreadsTest(unittest.TestCase):
    def test_close_racing_with_calls_in_other_threads(self):
        code, out = run_child("""
            import threading, numpy as np, blob
            def use(b, errors):
                try:
                    while True:
                        b.update()
                        b.shape, b.size, repr(b)
                        b.data[7] = 1.0
                        np.asarray(b.diff).sum()
                        b.reshape(1 << 20)
                except ValueError as e:  # the blob is closed
                    errors.append(str(e))
            for _ in range(40):
                b = blob.Blob((1 << 20,), device="cpu")
                b.data[...] = 1.0
                b.diff[...] = 0.0
                errors = []
                threads = [threading.Thread(target=use, args=(b, errors)) for _ in range(3)]
                for t in threads:
                    t.start()
                b.update()
                b.close()
                for t in threads:
                    t.join()
                assert errors == ["the blob is closed"] * 3, errors
            print("ok")
            """)
        self.assertEqual((code, out.strip()), (0, "ok"))

    def test_one_capsule_taken_in_two_threads_at_once(self):
        code, out = run_child("""
            import sys, threading, numpy as np, blob
            x = np.ones(1000)
            refs = sys.getrefcount(x)
            for max_version in [(1, 0), None] * 200:
                capsule = x.__dlpack__(max_version=max_version)
                barrier, got = threading.Barrier(2), []
                def take():
                    barrier.wait()
                    try:
                        got.append(blob.from_dlpack(capsule))
                    except ValueError:
                        got.append("refused")
                threads = [threading.Thread(target=take) for _ in range(2)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                assert sorted(map(str, got))[1] == "refused", got
                del capsule, got
            assert sys.getrefcount(x) == refs, (sys.getrefcount(x), refs)
            print("ok")
            """)
        self.assertEqual((code, out.strip()), (0, "ok"))

    def test_view_kept_across_loads_in_another_thread(self):
        with tempfile.TemporaryDirectory() as d:
            small, big = os.path.join(d, "small.npy"), os.path.join(d, "big.npy")
            np.save(small, np.full(1000, 1.0, np.float32))
            np.save(big, np.full(300000, 2.0, np.float32))
            code, out = run_child(f"""
                import threading, numpy as np, blob
                b = blob.Blob((1000,), device="cpu")
                v = b.data  # kept by the reader throughout
                stop = threading.Event()
                def reload():
                    for i in range(1500):
                        b.load({big!r} if i % 2 else {small!r})
                    stop.set()
                def read(seen):
                    while not stop.is_set():
                        a = v.numpy()
                        assert a.shape in ((1000,), (300000,)), a.shape
                        seen.add(a.shape)
                        a.sum()  # every byte of the export's memory is readable
                        v[0]
                seen = set()
                threads = [threading.Thread(target=reload)] + [
                    threading.Thread(target=read, args=(seen,)) for _ in range(2)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                assert v.numpy().shape == (300000,) and (v.numpy() == 2.0).all()
                b.close()
                print("ok")
                """)
        self.assertEqual((code, out.strip()), (0, "ok"))


if __name__ == "__main__":
    unittest.main()
