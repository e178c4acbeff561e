"""Check that numpy reads files written by blob_save_npy (run by test/test_npy.c).

usage: python3 test/npy_numpy_check.py DTYPE:SHAPE:PATH...
DTYPE is f4 or f8, SHAPE dims joined by 'x' ("" for 0-d). Each file must be a format 1.0
file with data at a multiple of 64 bytes holding the little-endian C-order array whose
element i is i * 1.375 - 7.0625. Exit status: 0 all good, 1 a mismatch, 77 no numpy.
"""
import sys

try:
    import numpy as np
    from numpy.lib import format as npformat
except ImportError:
    sys.exit(77)

bad = 0
for arg in sys.argv[1:]:
    dtype, dims, path = arg.split(":", 2)
    shape = tuple(int(d) for d in dims.split("x")) if dims else ()
    n = int(np.prod(shape, dtype=np.int64))
    want = (np.arange(n) * 1.375 - 7.0625).astype("<" + dtype).reshape(shape)
    with open(path, "rb") as f:
        version = npformat.read_magic(f)
        read = npformat.read_array_header_1_0 if version == (1, 0) else npformat.read_array_header_2_0
        header = read(f)
        offset = f.tell()
    got = np.load(path)
    problems = []
    if version != (1, 0):
        problems.append(f"version {version}")
    if header != (shape, False, np.dtype("<" + dtype)):
        problems.append(f"header {header}")
    if offset % 64:
        problems.append(f"data at offset {offset}")
    if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
        problems.append(f"array {got.dtype} {got.shape} {got.ravel()[:8]}")
    if problems:
        print(f"{path}: " + "; ".join(problems))
        bad = 1
sys.exit(bad)
