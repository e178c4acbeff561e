"""python -m blob: the library's path, version, build, GPUs, BLAS and math mode."""
import os
import re
import subprocess
import sys
import unittest
from pathlib import Path

import blob

PACKAGE_DIR = str(Path(blob.__file__).resolve().parents[1])


def run_main(**settings):
    """python -m blob with the library under test and only the given settings."""
    env = {k: v for k, v in os.environ.items() if k not in ("BLOB_MATH_MODE", "BLOB_GEMM_TUNING")}
    env.update(PYTHONPATH=PACKAGE_DIR, BLOB_LIBRARY=blob.library_path, **settings)
    done = subprocess.run([sys.executable, "-m", "blob"], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120)
    return done.returncode, dict(line.split(": ", 1) for line in done.stdout.splitlines()), \
        done.stderr


class MainTest(unittest.TestCase):
    def test_report(self):
        code, lines, err = run_main()
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(list(lines), ["libblob", "version", "build", "GPUs", "BLAS",
                                       "math mode", "Python", "packages"])
        self.assertEqual(lines["libblob"], os.path.realpath(blob.library_path))
        self.assertRegex(lines["version"], r"^(\d+\.\d+\.\d+|unknown.*), Python package "
                                           rf"libblob {re.escape(blob.__version__)}$")
        if blob.built_with_cuda():
            self.assertRegex(lines["build"], r"^CUDA \(runtime [\d.]+\), (NCCL [\d.]+|no NCCL)$")
        else:
            self.assertEqual(lines["build"], "CPU-only (no CUDA, no NCCL)")
        self.assertRegex(lines["GPUs"], rf"^{blob.device_count()}\b")  # 0 without a GPU
        self.assertRegex(lines["BLAS"], r"^(OpenBLAS|BLIS|MKL|CBLAS)")
        self.assertRegex(lines["math mode"], r"^fp32; GEMM tuning: (on|off)$")
        self.assertRegex(lines["packages"], r"^numpy .*, torch .*, cupy .*$")

    def test_settings_from_the_environment(self):
        code, lines, _ = run_main(BLOB_MATH_MODE="tf32", BLOB_GEMM_TUNING="1")
        self.assertEqual(code, 0)
        self.assertEqual(lines["math mode"], "tf32 (BLOB_MATH_MODE='tf32'); GEMM tuning: on")


if __name__ == "__main__":
    unittest.main()
