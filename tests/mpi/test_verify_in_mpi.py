"""`xladist.run` called on every rank of an MPI job (a script under `mpiexec -n N`) refuses
an invalid module as the verifier does from a plain process: VerifierError naming the
instruction as written, before the deadlock check looks at it (whose own group checks
would say the same thing as an InputError naming only the instruction's name).
Passes at any world size (run with -n 2 and -n 4)."""

import numpy as np
import pytest
from mpi4py import MPI

import xladist
from xladist.errors import VerifierError

pytestmark = pytest.mark.mpi


def _bad_permute(n: int) -> str:
    # Source 0 twice: XLA's verifier (CheckDuplicatedSourceOrTarget) rejects it.
    return f"""HloModule bad_pairs, replica_count={n}

ENTRY main {{
  x = f32[4] parameter(0)
  ROOT r = f32[4] collective-permute(x), source_target_pairs={{{{0,1}},{{0,0}}}}
}}
"""


def test_an_invalid_module_is_a_verifier_error_on_every_rank():
    n = MPI.COMM_WORLD.size
    x = np.zeros((n, 4), np.float32)
    with pytest.raises(VerifierError, match=r"instruction `%r = f32\[4\]\{0\} collective-permute"
                                            r"\(%x\).*source 0 appears more than once"):
        xladist.run(_bad_permute(n), [x], n=n, timeout=60)
