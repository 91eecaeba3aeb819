"""replica_groups in XLA's mesh-axes form, as Shardy-partitioned modules print them.

`mesh['a'=2,'b'=4], device_ids=([2,4]T(1,0)) {'b','a':(1)2}` names the mesh and the axes a
collective runs over. The texts below are taken from modules XLA:CPU compiled for JAX 0.10
programs jitted with NamedShardings (tests/data/corpus/jax_extra/shardy_*); the expected groups
are worked out by hand from what the program does (which devices hold the pieces being summed
or gathered) and cross-checked with numpy reshapes/transposes of the mesh's device array.
"""

from __future__ import annotations

import numpy as np
import pytest

from xladist import parse_hlo
from xladist.errors import HloParseError
from xladist.hlo.collective_groups import GroupError, mesh_axes_replica_groups
from xladist.hlo.printer import print_module


def numpy_groups(ids: np.ndarray, pieces: list[int], grouped: list[int]) -> list[list[int]]:
    """The reference: reshape the mesh's id array into `pieces`, move `grouped` last, cut."""
    a = ids.reshape(pieces)
    others = [i for i in range(len(pieces)) if i not in grouped]
    size = int(np.prod([pieces[g] for g in grouped]))
    return a.transpose(others + grouped).reshape(-1, size).tolist()


@pytest.mark.parametrize("sizes, device_ids, axes, pieces, grouped, hand", [
    # psum over 'y' of a 2x2 mesh: rows of the mesh.
    ([2, 2], None, [(1, None)], [2, 2], [1], [[0, 1], [2, 3]]),
    # psum over 'x': columns.
    ([2, 2], None, [(0, None)], [2, 2], [0], [[0, 2], [1, 3]]),
    # both axes, mesh order: one group of everything.
    ([2, 2], None, [(0, None), (1, None)], [2, 2], [0, 1], [[0, 1, 2, 3]]),
    # 8 devices seen as [2,4,1]: a sum over the middle axis (x.reshape(2,4,..) summed on dim 1).
    ([2, 4, 1], None, [(1, None)], [2, 4, 1], [1], [[0, 1, 2, 3], [4, 5, 6, 7]]),
    # mesh [4,2] whose devices are iota [2,4] transposed: device(b, a) = b + 4a.
    ([4, 2], [0, 4, 1, 5, 2, 6, 3, 7], [(1, None)], [4, 2], [1],
     [[0, 4], [1, 5], [2, 6], [3, 7]]),
    ([4, 2], [0, 4, 1, 5, 2, 6, 3, 7], [(0, None)], [4, 2], [0], [[0, 1, 2, 3], [4, 5, 6, 7]]),
    # a sub-axis: axis 0 (size 4) split as [pre 2, size 2]; the minor half is grouped.
    ([4, 2], [0, 4, 1, 5, 2, 6, 3, 7], [(0, (2, 2))], [2, 2, 2], [1],
     [[0, 1], [4, 5], [2, 3], [6, 7]]),
    # a sub-axis with a remainder: axis of 8 as [1, 2, 4], the major 2 grouped.
    ([8], None, [(0, (1, 2))], [1, 2, 4], [1], [[0, 4], [1, 5], [2, 6], [3, 7]]),
    # two sub-axes of one axis, written minor first: [2 (pre), 2, 2] with pieces 2 then 1.
    ([8], None, [(0, (4, 2)), (0, (1, 2))], [2, 2, 2], [2, 0],
     [[0, 4, 1, 5], [2, 6, 3, 7]]),
])
def test_expansion(sizes, device_ids, axes, pieces, grouped, hand):
    got = mesh_axes_replica_groups(sizes, device_ids, axes)
    assert got == hand
    ids = np.arange(int(np.prod(sizes))) if device_ids is None else np.array(device_ids)
    assert got == numpy_groups(ids, pieces, grouped)


@pytest.mark.parametrize("sizes, device_ids, axes, match", [
    ([2, 2], None, [(2, None)], "not an axis of the mesh"),
    ([4], None, [(0, (2, 3))], "does not divide"),
    ([8], None, [(0, (1, 4)), (0, (2, 2))], "overlap"),
    ([2, 2], [0, 1, 1, 3], [(0, None)], "permutation"),
])
def test_expansion_errors(sizes, device_ids, axes, match):
    with pytest.raises(GroupError, match=match):
        mesh_axes_replica_groups(sizes, device_ids, axes)


ADD = """%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
"""


def module(op: str, n: int) -> str:
    return (f"HloModule m, num_partitions={n}\n\n{ADD}\nENTRY %main (p: f32[4]) -> f32[8] {{\n"
            f"  %p = f32[4]{{0}} parameter(0)\n  ROOT {op}\n}}\n")


@pytest.mark.parametrize("groups_text, n, want", [
    ("mesh['axis_0'=2,'axis_1'=2] {'axis_1'}", 4, ((0, 1), (2, 3))),
    ("mesh['axis_0'=4,'axis_1'=1], device_ids=([2,2]T(1,0)) {'axis_0'}", 4, ((0, 2, 1, 3),)),
    ("mesh['axis_0'=4,'axis_1'=2], device_ids=([2,2,2]T(0,2,1)) {'axis_0':(2)2}", 8,
     ((0, 1), (2, 3), (4, 5), (6, 7))),
    ("mesh['axis_0'=2] {'axis_0'}", 2, ((0, 1),)),
    # bare axis names and an explicit device list
    ("mesh[x=2,y=2], device_ids=(0,2,1,3) {y}", 4, ((0, 2), (1, 3))),
    ("mesh[x=8] {x:(1)2}", 8, ((0, 4), (1, 5), (2, 6), (3, 7))),
])
def test_parse_and_print_back(groups_text, n, want):
    size = len(want[0])
    op = (f"%g = f32[{4 * size}]{{0}} all-gather(%p), channel_id=1, "
          f"replica_groups={groups_text}, dimensions={{0}}, use_global_device_ids=true")
    text = module(op, n).replace("-> f32[8]", f"-> f32[{4 * size}]")
    m = parse_hlo(text)
    rg = m.entry.root.attrs["replica_groups"]
    assert rg.groups == want
    assert m.entry.root.attrs["use_global_device_ids"] is True  # the next attribute survives
    printed = print_module(m)
    assert f"replica_groups={rg.mesh}," in printed
    assert print_module(parse_hlo(printed)) == printed
    assert parse_hlo(printed).entry.root.attrs["replica_groups"].groups == want


@pytest.mark.parametrize("groups_text, match", [
    ("mesh['a'=2,'b'=2] {'c'}", "'c' is not an axis of the mesh"),
    ("mesh['a'=2,'b'=2] {'a':(1)3}", "does not divide"),
    ("mesh['a'=2,'b'] {'a'}", "expected '='"),
    ("mesh['a'=2,'b'=2], device_ids=([3]) {'a'}", "permutation"),
])
def test_parse_errors(groups_text, match):
    op = (f"%g = f32[8]{{0}} all-gather(%p), channel_id=1, replica_groups={groups_text}, "
          "dimensions={0}, use_global_device_ids=true")
    with pytest.raises(HloParseError, match=match):
        parse_hlo(module(op, 4))
