#!/usr/bin/env python3
"""Run the module's tests (unittest, so nothing beyond the standard library is needed)
and say how many were skipped and why: the library under test is $BLOB_LIBRARY, or the
one the module finds (see blob/_lib.py)."""
import collections
import sys
import unittest
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here.parent))

import blob  # noqa: E402

print(f"python tests: {blob.library_path}, {'CUDA' if blob.built_with_cuda() else 'CPU-only'} "
      f"build, {blob.device_count()} GPU(s)")
suite = unittest.defaultTestLoader.discover(str(here), pattern="test_*.py")
sys.stdout.flush()
result = unittest.TextTestRunner(stream=sys.stdout, verbosity=1).run(suite)
for reason, n in collections.Counter(r for _, r in result.skipped).items():
    print(f"skipped: {n} tests ({reason})")
failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
passed = result.testsRun - failed - len(result.skipped) - len(result.expectedFailures)
print(f"{passed} passed, {failed} failed, {len(result.skipped)} skipped")
sys.exit(0 if result.wasSuccessful() else 1)
