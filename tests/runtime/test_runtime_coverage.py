"""The runtime's coverage table names every device op, and its "yes" rows are real."""

from xladist.runtime.op_coverage import DEVICE_FAMILIES, coverage
from xladist.runtime.mpi_context import _RUNNERS
from xladist.cli.ops import coverage_matrix
from xladist.hlo.opcodes import OPCODES


def test_every_device_op_listed():
    table = coverage()
    device_ops = {n for n, o in OPCODES.items() if o.family in DEVICE_FAMILIES}
    assert set(table) == device_ops
    assert all(v == "yes" or len(v) > 20 for v in table.values())


def test_collectives_marked_yes_have_a_runner():
    for op, cell in coverage().items():
        base = op.removesuffix("-start").removesuffix("-done")
        if OPCODES[op].family == "collective" and cell == "yes":
            assert base in _RUNNERS, op
    assert coverage()["ragged-all-to-all"] == "yes"


def test_ops_matrix_has_no_blank_runtime_cell():
    matrix = coverage_matrix()
    for op, row in matrix.items():
        assert row["runtime"], op
        assert "not available" not in row["runtime"], (op, row["runtime"])
