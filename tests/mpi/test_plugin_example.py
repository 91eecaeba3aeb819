import numpy as np
import pytest
from xladist.testing import assert_conforms

MODULE = """HloModule psum
add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }
ENTRY e { x = f32[8] parameter(0)\n ROOT r = f32[8] all-reduce(x), replica_groups={}, to_apply=add }"""

@pytest.mark.mpi(min_size=2)
def test_psum_conforms(xladist_backend, xladist_devices):
    x = np.random.default_rng(0).standard_normal((xladist_devices, 8)).astype(np.float32)
    assert_conforms(MODULE, [x], n=xladist_devices, backend=xladist_backend, tolerance=True)
