"""ragged-all-to-all without MPI: the collective over the in-process twin (results against
tests/mpi/ragged_cases.py's numpy reference; bad metadata gives errors, never a hang), the
verifier's and the deadlock check's view of it, and one `xladist run -n 2` job end to end.

tests/mpi/test_ragged_all_to_all.py runs the same cases over real MPI, with both backends.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import xladist
from xladist.collectives import CollectiveError, in_process_world
from xladist.collectives.ragged_all_to_all import ragged_all_to_all
from xladist.analysis.deadlock import check_module
from tests.cli_util import xladist_cli
from tests.mpi.ragged_cases import Member, hlo_type, make_group, reference, rng_for, same
from xladist.errors import VerifierError

TIMEOUT_S = 20.0


def outcomes(members: list[Member], timeout_s: float = TIMEOUT_S) -> list:
    """Run the collective on one thread per member; each member's result or exception."""
    n = len(members)
    comms = in_process_world(n, timeout_s)
    got: list = [None] * n

    def body(r):
        try:
            got[r] = ragged_all_to_all(comms[r], *members[r].operands(), label="ra2a")
        except Exception as e:  # noqa: BLE001 -- compared by the test
            got[r] = e

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s + 5)
    assert not any(t.is_alive() for t in threads), "a member hung"
    return got


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("k,rank2", [(1, False), (2, False), (3, True)])
@pytest.mark.parametrize("dt,row", [("f32", ()), ("bf16", (3,)), ("s8", (2, 3)),
                                    ("pred", (2,))])
def test_matches_reference(n, k, rank2, dt, row):
    members = make_group(n, k, row, dt, rng_for("twin", n, k, dt), rank2=rank2,
                         index="s64" if rank2 else "s32")
    got = outcomes(members)
    for p in range(n):
        assert not isinstance(got[p], Exception), got[p]
        want = reference(members, p)
        assert same(got[p], want), f"member {p}:\n{got[p]}\nwant\n{want}"
    # Not vacuous: something moved, and rows nobody writes keep the output's values.
    assert any(m.send_sizes.sum() for m in members)
    assert any(not same(got[p], members[p].output) for p in range(n))


def test_non_contiguous_input_and_overlapping_chunks_in_sender_order():
    """Chunks overlapping in a receiver's output are written sender by sender (the staging
    path); a strided input view is read by value."""
    base = np.arange(40, dtype=np.float32).reshape(10, 4)
    members = []
    for p in range(2):
        x = (base + 100 * p)[::2, ::2]  # [5, 2], not contiguous
        members.append(Member(x, np.full((4, 2), -1, np.float32),
                               np.array([0, 1]), np.array([2, 2]), np.array([1, 1]),
                               np.array([2, 2])))
    got = outcomes(members)
    for p in range(2):
        want = reference(members, p)
        assert same(got[p], want)
        # Rows 1-2 come from member 0, then member 1 overwrites them.
        np.testing.assert_array_equal(got[p][1:3], members[1].x[p:p + 2])


def _bad(n: int = 3) -> list[Member]:
    return make_group(n, 1, (2,), "f32", rng_for("bad", n), max_size=3)


def _raise_on(got, ranks, *fragments):
    for r, g in enumerate(got):
        if r in ranks:
            assert isinstance(g, ValueError), f"member {r}: {g!r}"
            for f in fragments:
                assert f in str(g), f"{f!r} not in member {r}'s error: {g}"
        else:
            assert not isinstance(g, Exception), f"member {r}: {g!r}"


def test_chunk_past_the_input_sender_raises_receivers_name_it():
    members = _bad()
    m = members[0]
    m.send_sizes[2] = m.x.shape[0] + 1 - m.input_offsets[2]
    got = outcomes(members)
    # The sender explains; every receiver hears "sent nothing" and fails too.
    _raise_on(got, {0, 1, 2}, "member 0 (device 0) sent nothing")
    assert f"runs past the input's {m.x.shape[0]} rows" in str(got[0])
    assert "send_sizes[2]" in str(got[0])


def test_negative_size_and_offset():
    members = _bad()
    members[1].send_sizes[0] = -1
    members[2].send_sizes[1] = members[1].recv_sizes[2] = 1
    members[2].input_offsets[1] = -1
    got = outcomes(members)
    assert "must be >= 0" in str(got[1]) and "send_sizes[0]=-1" in str(got[1])
    assert "must be >= 0" in str(got[2]) and "input_offsets[1]=-1" in str(got[2])
    _raise_on(got, {0, 1, 2}, "member 1 (device 1) sent nothing",
              "member 2 (device 2) sent nothing")


def test_chunk_past_the_receivers_output():
    members = _bad()
    rows_out = members[2].output.shape[0]
    # Member 1 aims its chunk for member 2 at the last row: it runs off the end there.
    members[1].send_sizes[2] = members[2].recv_sizes[1] = 2
    members[1].input_offsets[2] = 0
    members[1].output_offsets[2] = rows_out - 1
    got = outcomes(members)
    _raise_on(got, {2}, "member 1 (device 1) writes 2 rows at output_offsets="
              f"{rows_out - 1}", f"past this output's {rows_out} rows")


def test_recv_sizes_that_disagree_with_the_sender():
    members = _bad()
    members[0].recv_sizes[1] += 1
    got = outcomes(members)
    _raise_on(got, {0}, f"recv_sizes[1]={members[0].recv_sizes[1]}, but member 1 (device 1) "
                        f"sends {members[1].send_sizes[0]} rows")


@pytest.mark.parametrize("what,fragment", [
    ("length", "k entries per group member"),
    ("rank2", "[group size, updates per peer]"),
    ("types", "integer arrays of one type and shape"),
    ("rows", "agree in every dimension but the first"),
])
def test_static_misuse_refused_on_every_member(what, fragment):
    members = _bad(2)
    for m in members:
        if what == "length":
            m.input_offsets, m.send_sizes, m.output_offsets, m.recv_sizes = (
                np.zeros(3, np.int32) for _ in range(4))
        elif what == "rank2":
            m.input_offsets, m.send_sizes, m.output_offsets, m.recv_sizes = (
                a.reshape(1, 2) for a in m.operands()[2:])
        elif what == "types":
            m.recv_sizes = m.recv_sizes.astype(np.float32)
        else:
            m.output = np.zeros((4, 3), np.float32)
    _raise_on(outcomes(members), {0, 1}, fragment)


def test_twin_alltoallv_refuses_counts_the_sender_does_not_send():
    comms = in_process_world(2, TIMEOUT_S)
    errors = [None, None]

    def body(r):
        send, recv = np.zeros((4, 2), np.int32), np.zeros((4, 2), np.int32)
        rcounts = [1, 2] if r == 0 else [1, 1]  # rank 0 expects 2 rows from rank 1, gets 1
        try:
            comms[r].alltoallv(send, [1, 1], [0, 1], recv, rcounts, [0, 1], 8)
        except CollectiveError as e:
            errors[r] = e

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S)
    assert errors[1] is None
    assert "expected 2 rows from rank 1, but it sends 1" in str(errors[0])


# ---- verifier and deadlock check -------------------------------------------------------------

def _module(meta: str, groups: str = "{}", n: int = 2) -> str:
    return f"""HloModule ragged, replica_count={n}

ENTRY %main (x: f32[6,2], out: f32[8,2], a: {meta}, b: {meta}, c: {meta}, d: {meta}) -> f32[8,2] {{
  %x = f32[6,2]{{1,0}} parameter(0)
  %out = f32[8,2]{{1,0}} parameter(1)
  %a = {meta} parameter(2)
  %b = {meta} parameter(3)
  %c = {meta} parameter(4)
  %d = {meta} parameter(5)
  %r = f32[8,2]{{1,0}} ragged-all-to-all(%x, %out, %a, %b, %c, %d), replica_groups={groups}
  ROOT %s = f32[8,2]{{1,0}} ragged-all-to-all(%x, %r, %a, %b, %c, %d), replica_groups={groups}
}}
"""


@pytest.mark.parametrize("meta,groups,n", [("s32[2]", "{}", 2), ("s64[4]", "{{1,0}}", 2),
                                           ("s32[2,3]", "{{0,1},{3,2}}", 4),
                                           ("u32[3]", "{{0},{1},{2}}", 3)])
def test_verifier_accepts_k_updates_per_member(meta, groups, n):
    xladist.verify(xladist.parse_hlo(_module(meta, groups, n)))


@pytest.mark.parametrize("meta,groups,n,fragment", [
    ("s32[3]", "{}", 2, "k >= 1 entries per group member"),
    ("s32[3,2]", "{}", 2, "[2,k]"),
    ("s32[1,2,2]", "{}", 2, "rank 1 or 2"),
    ("s32[4]", "{{0,1},{2}}", 3, "all groups must have the same size"),
])
def test_verifier_refuses_bad_metadata_shapes(meta, groups, n, fragment):
    with pytest.raises(VerifierError, match=None) as e:
        xladist.verify(xladist.parse_hlo(_module(meta, groups, n)))
    assert fragment in str(e.value), str(e.value)


@pytest.mark.parametrize("groups,n", [("{}", 2), ("{{1,0},{3,2}}", 4), ("{{3,1,2,0}}", 4)])
def test_deadlock_check_proves_ragged_programs(groups, n):
    module = xladist.parse_hlo(_module("s32[2]" if groups != "{{3,1,2,0}}" else "s32[4]",
                                       groups, n))
    xladist.verify(module)
    report = check_module(module, n)
    assert report.ok and report.problems == [], report.to_text()
    assert "proven deadlock-free" in report.to_text()


def test_deadlock_check_reports_a_ragged_collective_some_devices_skip():
    """Not vacuous: the check does see ragged-all-to-all as a collective that needs every
    member (here a conditional runs it on replica 0 only)."""
    text = """HloModule skip, replica_count=2

%then (t: (f32[4], s32[2])) -> f32[4] {
  %t = (f32[4], s32[2]) parameter(0)
  %x = f32[4] get-tuple-element(%t), index=0
  %m = s32[2] get-tuple-element(%t), index=1
  ROOT %r = f32[4] ragged-all-to-all(%x, %x, %m, %m, %m, %m), replica_groups={}
}

%else (e: (f32[4], s32[2])) -> f32[4] {
  %e = (f32[4], s32[2]) parameter(0)
  ROOT %x = f32[4] get-tuple-element(%e), index=0
}

ENTRY %main (x: f32[4], m: s32[2]) -> f32[4] {
  %x = f32[4] parameter(0)
  %m = s32[2] parameter(1)
  %id = u32[] replica-id()
  %zero = u32[] constant(0)
  %p = pred[] compare(%id, %zero), direction=EQ
  %t = (f32[4], s32[2]) tuple(%x, %m)
  ROOT %c = f32[4] conditional(%p, %t, %t), true_computation=%then, false_computation=%else
}
"""
    module = xladist.parse_hlo(text)
    xladist.verify(module)
    report = check_module(module, 2)
    text = report.to_text()
    assert not report.ok, text
    assert "ragged-all-to-all r (line 7" in text and "never by device 1" in text, text


# ---- one CLI job -------------------------------------------------------------------------------

def _cli_case(n: int):
    members = make_group(n, 2, (2,), "f32", rng_for("cli", n))
    m0 = members[0]
    names = ["x", "out", "io", "ss", "oo", "rs"]
    sig = ", ".join(f"{nm}: {hlo_type(a)}" for nm, a in zip(names, m0.operands()))
    params = "\n".join(f"  %{nm} = {hlo_type(a)} parameter({i})"
                       for i, (nm, a) in enumerate(zip(names, m0.operands())))
    out_ty = hlo_type(m0.output)
    text = (f"HloModule ragged_cli, replica_count={n}\n\n"
            f"ENTRY %main ({sig}) -> {out_ty} {{\n{params}\n"
            f"  ROOT %r = {out_ty} ragged-all-to-all(%x, %out, %io, %ss, %oo, %rs), "
            "replica_groups={}\n}\n")
    inputs = {f"arg{i}": np.stack([m.operands()[i] for m in members]) for i in range(6)}
    return text, inputs, members


@pytest.mark.timeout(200)
@pytest.mark.slow
def test_cli_run_two_devices(tmp_path):
    text, inputs, members = _cli_case(2)
    (tmp_path / "m.hlo").write_text(text)
    np.savez(tmp_path / "in.npz", **inputs)
    proc = xladist_cli("run", tmp_path / "m.hlo", "-n", 2, "--inputs", tmp_path / "in.npz",
                       "--outputs", tmp_path / "out.npz", "--timeout", 30, "-q", timeout=180)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "out.npz") as out:
        got = out["out0"]
    for p in range(2):
        assert same(got[p], reference(members, p)), (p, got[p], reference(members, p))
    assert not same(got[0], members[0].output)


@pytest.mark.timeout(200)
@pytest.mark.slow
def test_cli_bad_recv_sizes_name_rank_and_instruction(tmp_path):
    text, inputs, _ = _cli_case(2)
    inputs["arg5"][1, 0] += 1  # device 1 expects one row more from device 0 than it gets
    (tmp_path / "m.hlo").write_text(text)
    np.savez(tmp_path / "in.npz", **inputs)
    proc = xladist_cli("run", tmp_path / "m.hlo", "-n", 2, "--inputs", tmp_path / "in.npz",
                       "--outputs", tmp_path / "out.npz", "--timeout", 30, "-q", timeout=180)
    assert proc.returncode != 0
    err = proc.stderr
    assert "Traceback" not in err, err
    assert "rank 1 (replica 1, partition 0) | r (line" in err, err
    assert f"recv_sizes[0]={inputs['arg5'][1, 0]}, but member 0 (device 0) sends" in err, err


def test_empty_chunks_may_carry_any_offset():
    """An update of 0 rows writes nothing, whatever its offsets say (nothing checks them)."""
    members = _bad(2)
    for m in members:
        for e in range(2):
            if m.send_sizes[e] == 0:
                m.input_offsets[e] = -7
                m.output_offsets[e] = 10**6
    assert any(m.send_sizes.min() == 0 for m in members)
    got = outcomes(members)
    for p in range(2):
        assert same(got[p], reference(members, p))
