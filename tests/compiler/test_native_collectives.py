"""A native while loop calling MPI_Allreduce itself (compiler/native/collectives.py), in one
process: a device that hands out MPI_COMM_SELF gets the loop's results with no Python per
iteration, and a failing MPI call becomes an ExecutionError naming the all-reduce and the
iteration instead of a crash. The multi-rank behaviour is tests/mpi/native_loops/test_paths.py."""

import re

import numpy as np
import pytest

import xladist
from xladist.bench.in_loop import loop_module
from xladist.errors import ExecutionError
from xladist.semantics.single_device import SingleDeviceContext


class _SelfDevice(SingleDeviceContext):
    """One device whose all-reduces are MPI_Allreduce over MPI_COMM_SELF (or `comm`)."""

    def __init__(self, comm_name="COMM_SELF"):
        super().__init__()
        self.comm_name = comm_name
        self.asked = []

    def native_all_reduce(self, instr, reducer=None):
        from mpi4py import MPI

        from xladist.collectives import native_ops
        self.asked.append(instr.name)
        return native_ops.NativeAllReduce(
            native_ops.function_address("MPI_Allreduce"), instr.shape.size,
            native_ops.handle(MPI.FLOAT), native_ops.handle(MPI.SUM),
            native_ops.handle(getattr(MPI, self.comm_name)), True, f"{instr.name} (test)", None,
            native_ops.in_place_address())


def _loop():
    return xladist.parse_hlo(loop_module(3, "sum"))


@pytest.mark.parametrize("trips", [0, 1, 4])
def test_native_loop_over_comm_self_returns_the_operand(trips):
    x = np.array([1.5, 0.0, -0.0], np.float32)
    x.view(np.uint32)[1] = 0xFFC00001  # a NaN with a sign and a payload
    device = _SelfDevice()
    exe = xladist.compile(_loop(), backend="cpu", device=device)
    (out,) = exe(x, np.int32(trips))
    assert device.asked == ["r"]  # the loop asked for the native form
    # One member: MPI copies; after a call the NaN is the canonical one (the descriptor
    # asked for canonicalization), before any call it is the input's.
    want = x.copy()
    if trips:
        want[1] = np.float32(np.nan)
    assert out.tobytes() == want.tobytes()


def test_failing_mpi_call_is_an_error_naming_the_all_reduce_and_iteration():
    exe = xladist.compile(_loop(), backend="cpu", device=_SelfDevice("COMM_NULL"))
    with pytest.raises(ExecutionError) as info:
        exe(np.ones(3, np.float32), np.int32(4))
    text = str(info.value)
    assert "r (test): MPI_Allreduce failed in iteration 1 of w" in text, text
    assert "MPI error" in text, text


def test_permute_and_gather_drivers_name_no_mpi_symbol():
    """The native steps call MPI_Sendrecv and MPI_Allgather through table entries: the loop's
    object gains no undefined symbol beyond the allowlist (and none of MPI's), and the
    drivers are really there (the loops are eligible)."""
    from tests.mpi.native_loops.test_p2p_gather import gather_module, permute_module
    from xladist.compiler import elf, jit, runtime_symbols, target
    from xladist.compiler.program import CpuProgram

    allowed = runtime_symbols.allowlist()
    for text in (permute_module([(0, 1), (1, 0)], 70_001), gather_module(2, (5,), 0)):
        ir_text = CpuProgram(xladist.parse_hlo(text), compile_code=False).llvm_ir()
        assert "MPI_Sendrecv" not in ir_text and "MPI_Allgather" not in ir_text
        assert re.search(r'define i64 @"?loop\d+_w"?\(', ir_text), "no native driver"
        obj = jit.compile_ir(ir_text, target.host_target())
        stray = [s for s in elf.undefined_symbols(obj) if s not in allowed or "MPI" in s]
        assert not stray, stray
