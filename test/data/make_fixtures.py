"""Write the .npy fixtures of test/test_npy.c with numpy itself.

Run from the repository root: python3 test/data/make_fixtures.py
Element i of every array (C order) is i * 1.375 - 7.0625, exact in float32 and float64.
"""
import os

import numpy as np
from numpy.lib import format as npformat

HERE = os.path.dirname(os.path.abspath(__file__))


def ramp(dtype, shape):
    n = int(np.prod(shape, dtype=np.int64))
    return (np.arange(n) * 1.375 - 7.0625).astype(dtype).reshape(shape)


def save(name, array, version=None):
    with open(os.path.join(HERE, name), "wb") as f:
        npformat.write_array(f, array, version=version)


save("f4_2x3.npy", ramp("<f4", (2, 3)))
save("f8_scalar.npy", ramp("<f8", ()))
save("f4_5.npy", ramp("<f4", (5,)))
save("f8_2x3x4.npy", ramp("<f8", (2, 3, 4)))
save("f4_2x0x3.npy", ramp("<f4", (2, 0, 3)))
save("f4_16axes.npy", ramp("<f4", (2,) + (1,) * 14 + (3,)))  # growth room crosses 64
save("f4_big_2x3.npy", ramp(">f4", (2, 3)))
save("f8_big_7.npy", ramp(">f8", (7,)))
save("f8_v2_3x2.npy", ramp("<f8", (3, 2)), version=(2, 0))
save("f4_v3_4.npy", ramp("<f4", (4,)), version=(3, 0))
save("f8_fortran_2x3.npy", np.asfortranarray(ramp("<f8", (2, 3))))
save("i4_6.npy", np.arange(6, dtype="<i4"))
