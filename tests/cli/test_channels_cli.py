"""`xladist run -n N` with channels: the deadlock check before any rank starts, channel runs
through the CLI (numbers checked against numpy), host transfers from and to .npz files, and
the scheduled order the executor runs.

Jobs run as subprocesses with a timeout; programs come from tests/data/deadlock/.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import xladist
from tests.cli_util import xladist_cli
from xladist.semantics.single_device import SingleDeviceContext
from tests.paths import ROOT

DATA = ROOT / "tests" / "data" / "deadlock"
JOB_TIMEOUT = 120


def write_inputs(path: Path, module_path: Path, n: int, arrays=None) -> Path:
    """arg0.. for every entry parameter, with a leading device axis of n (zeros unless given)."""
    module = xladist.load_hlo(module_path)
    arrays = dict(arrays or {})
    out = {}
    for i, p in enumerate(module.entry.parameters):
        out[f"arg{i}"] = arrays.get(i, np.zeros((n, *p.shape.dims), p.shape.dtype))
    np.savez(path, **out)
    return path


# ---- programs the check refuses: exit 1 with the report, and no rank ever starts ------------

INVALID = {
    # file: (devices, strings the report must contain)
    "recv_done_first.hlo": (2, ["deadlock: devices 0, 1 wait for each other in a cycle",
                                "recv-done.a", "recv-done.b"]),
    "cyclic_wait_3.hlo": (3, ["deadlock: devices 0, 2, 1", "recv-done.0", "recv-done.1",
                              "recv-done.2"]),
    "collectives_out_of_order.hlo": (2, ["mismatch", "kind (all-reduce vs all-to-all)",
                                         "reduce.first", "exchange.first"]),
    "allreduce_some_branch.hlo": (2, ["unmatched", "psum.only_some",
                                      "reached by device 0 but never by device 1"]),
    "partition_trip_count.hlo": (2, ["unmatched", "psum.in_loop", "iteration 2 of loop",
                                     "reached by device 1 but never by device 0"]),
    "mismatched_shapes.hlo": (2, ["mismatch", "shapes ([4] vs [8])", "psum.small",
                                  "psum.big"]),
    "send_without_recv.hlo": (2, ["unmatched", "send.lonely",
                                  "device 1 never issues a matching recv"]),
}


@pytest.mark.slow  # one CLI process per program
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_program_is_refused_before_any_rank_starts(tmp_path, name):
    n, expected = INVALID[name]
    inputs = write_inputs(tmp_path / "in.npz", DATA / name, n)
    out = tmp_path / "out.npz"
    proc = xladist_cli("run", DATA / name, "-n", n, "--inputs", inputs, "--outputs", out,
                       "-q")
    assert proc.returncode == 1, proc.stderr
    assert "refusing to run" in proc.stderr
    for text in expected:
        assert text in proc.stderr, f"{text!r} missing from:\n{proc.stderr}"
    # The launching process refused it: no rank ran, so none wrote outputs or said anything.
    assert not out.exists()
    assert "rank 0" not in proc.stderr


# ---- "cannot prove": a warning printed once, then the run; --strict refuses -------------------

def _data_loop_inputs(tmp_path, steps):
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    return write_inputs(tmp_path / "in.npz", DATA / "data_dependent_loop.hlo", 2,
                        {0: x, 1: np.array(steps, np.int32)}), x


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_unproven_program_warns_once_then_runs(tmp_path):
    inputs, x = _data_loop_inputs(tmp_path, [3, 3])
    out = tmp_path / "out.npz"
    proc = xladist_cli("run", DATA / "data_dependent_loop.hlo", "-n", 2, "--inputs", inputs,
                       "--outputs", out, "-q", "--timeout", 60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("cannot prove that data_dependent_loop finishes") == 1
    assert "data_loop" in proc.stderr
    # Three all-reduces over 2 devices: sum, then doubled twice.
    want = 4 * x.sum(axis=0)
    with np.load(out) as z:
        np.testing.assert_array_equal(z["out0"], np.stack([want, want]))


@pytest.mark.timeout(300)
def test_strict_refuses_unproven_program(tmp_path):
    inputs, _ = _data_loop_inputs(tmp_path, [3, 3])
    proc = xladist_cli("run", DATA / "data_dependent_loop.hlo", "-n", 2, "--inputs", inputs,
                       "--strict", "-q")
    assert proc.returncode == 1, proc.stderr
    assert "unproven: cannot prove devices 0, 1 past while data_loop" in proc.stderr


# ---- valid programs through the CLI ------------------------------------------------------------

@pytest.mark.timeout(300)
@pytest.mark.slow
def test_ring_through_cli_at_4(tmp_path):
    x = (np.arange(16, dtype=np.float32).reshape(4, 4) - 5) * 3
    inputs = write_inputs(tmp_path / "in.npz", DATA / "ring_send_recv.n4.hlo", 4, {0: x})
    out = tmp_path / "out.npz"
    proc = xladist_cli("run", DATA / "ring_send_recv.n4.hlo", "-n", 4, "--inputs", inputs,
                       "--outputs", out, "-q", "--timeout", 60)
    assert proc.returncode == 0, proc.stderr
    with np.load(out) as z:
        np.testing.assert_array_equal(z["out0"], np.roll(x, 1, axis=0))


HOST_LOOP = """\
HloModule host_loop, num_partitions=2

%body (s: (s32[], f32[3], token[])) -> (s32[], f32[3], token[]) {
  %s = (s32[], f32[3]{0}, token[]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %acc = f32[3]{0} get-tuple-element(%s), index=1
  %t = token[] get-tuple-element(%s), index=2
  %recv = (f32[3]{0}, u32[], token[]) recv(%t), channel_id=7, is_host_transfer=true
  %recv-done = (f32[3]{0}, token[]) recv-done(%recv), channel_id=7, is_host_transfer=true
  %item = f32[3]{0} get-tuple-element(%recv-done), index=0
  %t.1 = token[] get-tuple-element(%recv-done), index=1
  %acc.1 = f32[3]{0} add(%acc, %item)
  %send = (f32[3]{0}, u32[], token[]) send(%acc.1, %t.1), channel_id=8, is_host_transfer=true
  %send-done = token[] send-done(%send), channel_id=8, is_host_transfer=true
  %one = s32[] constant(1)
  %i.1 = s32[] add(%i, %one)
  ROOT %next = (s32[], f32[3]{0}, token[]) tuple(%i.1, %acc.1, %send-done)
}

%cond (c: (s32[], f32[3], token[])) -> pred[] {
  %c = (s32[], f32[3]{0}, token[]) parameter(0)
  %k = s32[] get-tuple-element(%c), index=0
  %three = s32[] constant(3)
  ROOT %lt = pred[] compare(%k, %three), direction=LT
}

ENTRY %main (x: f32[3]) -> f32[3] {
  %x = f32[3]{0} parameter(0)
  %zero = s32[] constant(0)
  %t0 = token[] after-all()
  %init = (s32[], f32[3]{0}, token[]) tuple(%zero, %x, %t0)
  %loop = (s32[], f32[3]{0}, token[]) while(%init), condition=%cond, body=%body
  ROOT %final = f32[3]{0} get-tuple-element(%loop), index=1
}
"""


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_host_transfers_from_and_to_npz_files(tmp_path):
    module = tmp_path / "host_loop.hlo"
    module.write_text(HOST_LOOP)
    x = np.array([[1, 2, 3], [10, 20, 30]], np.float32)
    inputs = write_inputs(tmp_path / "in.npz", module, 2, {0: x})
    items = {r: [np.full(3, 100 * r + k, np.float32) for k in range(3)] for r in range(2)}
    (tmp_path / "host").mkdir()
    for r in range(2):
        np.savez(tmp_path / "host" / f"rank{r}_ch7.npz", *items[r])
    out = tmp_path / "out.npz"
    proc = xladist_cli("run", module, "-n", 2, "--inputs", inputs, "--outputs", out, "-q",
                       "--host-recv", tmp_path / "host" / "rank{rank}_ch{channel}.npz",
                       "--host-send", tmp_path / "sent" / "rank{rank}_ch{channel}.npz")
    assert proc.returncode == 0, proc.stderr
    for r in range(2):
        partial = x[r] + np.cumsum(items[r], axis=0)  # what iteration k sends to the host
        with np.load(tmp_path / "sent" / f"rank{r}_ch8.npz") as z:
            got = [z[name] for name in z.files]
        np.testing.assert_array_equal(np.stack(got), partial)
        with np.load(out) as z:
            np.testing.assert_array_equal(z["out0"][r], partial[-1])


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_missing_host_data_names_rank_channel_and_file(tmp_path):
    module = tmp_path / "host_loop.hlo"
    module.write_text(HOST_LOOP)
    inputs = write_inputs(tmp_path / "in.npz", module, 2)
    (tmp_path / "host").mkdir()
    for r in range(2):  # two items where the loop asks for three
        np.savez(tmp_path / "host" / f"rank{r}_ch7.npz", np.zeros(3, np.float32),
                 np.ones(3, np.float32))
    proc = xladist_cli("run", module, "-n", 2, "--inputs", inputs, "-q", "--timeout", 30,
                       "--host-send", tmp_path / "sent" / "rank{rank}_ch{channel}.npz")
    assert proc.returncode == 1, proc.stderr  # without --host-recv: a clear error first
    assert "no host to receive from: pass host_recv= to xladist.run or --host-recv" \
        in proc.stderr
    proc = xladist_cli("run", module, "-n", 2, "--inputs", inputs, "-q", "--timeout", 30,
                       "--host-recv", tmp_path / "host" / "rank{rank}_ch{channel}.npz",
                       "--host-send", tmp_path / "sent" / "rank{rank}_ch{channel}.npz")
    assert proc.returncode == 1, proc.stderr
    assert "recv-done" in proc.stderr and "channel 7" in proc.stderr
    assert "recv number 3 from the host on channel 7 needs item 2" in proc.stderr
    assert "holds 2" in proc.stderr
    # What a failing rank sent to the host before its failure is not lost: a rank the report
    # names failed at its third recv, so both its sends reached the file. (Both ranks fail
    # alike, but the first one's abort may take the other down anywhere before that: its
    # file, if any, holds a prefix of the same sums.)
    failed = {int(r) for r in re.findall(r"rank (\d+) \(replica \d+, partition \d+\) \| "
                                         r"recv-done", proc.stderr)}
    assert failed, proc.stderr
    for r in range(2):
        path = tmp_path / "sent" / f"rank{r}_ch8.npz"
        if r not in failed and not path.exists():
            continue
        with np.load(path) as z:
            items = [z[k] for k in z.files]
        assert len(items) == 2 if r in failed else 1 <= len(items) <= 2, (path, len(items))
        for got, want in zip(items, (0.0, 1.0)):  # acc after item 0 (zeros), then item 1 (ones)
            np.testing.assert_array_equal(got, np.full(3, want, np.float32))


SHAPE_MISMATCH = """\
HloModule channel_shapes, num_partitions=2

ENTRY %main (x: f32[4]) -> f32[8] {
  %x = f32[4]{0} parameter(0)
  %t = token[] after-all()
  %recv = (f32[8]{0}, u32[], token[]) recv(%t), channel_id=1, frontend_attributes={_xla_send_recv_source_target_pairs="{{0,1}}"}
  %send = (f32[4]{0}, u32[], token[]) send(%x, %t), channel_id=1, frontend_attributes={_xla_send_recv_source_target_pairs="{{0,1}}"}
  %recv-done = (f32[8]{0}, token[]) recv-done(%recv), channel_id=1
  %send-done = token[] send-done(%send), channel_id=1
  ROOT %got = f32[8]{0} get-tuple-element(%recv-done), index=0
}
"""


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_channel_shape_mismatch_refused_statically_and_at_run_time(tmp_path):
    module = tmp_path / "shapes.hlo"
    module.write_text(SHAPE_MISMATCH)
    inputs = write_inputs(tmp_path / "in.npz", module, 2)
    proc = xladist_cli("run", module, "-n", 2, "--inputs", inputs, "-q")
    assert proc.returncode == 1
    assert "channel 1: device 0 sends f32[4]" in proc.stderr
    assert "device 1 receives f32[8]" in proc.stderr
    # Without the check, the receiving rank finds out at its recv-done
    # (docs/reference/collective-semantics.md 21b) and names both devices.
    proc = xladist_cli("run", module, "-n", 2, "--inputs", inputs, "-q", "--no-check",
                       "--timeout", 30)
    assert proc.returncode == 1
    assert "rank 1 (replica 0, partition 1)" in proc.stderr
    assert "recv-done" in proc.stderr
    assert "device 0 sent 16 bytes on channel 1" in proc.stderr
    assert "f32[8] (32 bytes)" in proc.stderr


# ---- the executor runs exactly the scheduled order --------------------------------------------

class _Recorder(SingleDeviceContext):
    """Records channel ops in the order the evaluator issues them; every transfer is local."""

    def __init__(self):
        super().__init__()
        self.log = []

    def send(self, instr, data):
        self.log.append(instr.name)
        return data

    def send_done(self, instr, handle):
        self.log.append(instr.name)

    def recv(self, instr):
        self.log.append(instr.name)
        return instr

    def recv_done(self, instr, handle):
        self.log.append(instr.name)
        return np.zeros(tuple(instr.shape.tuple_shapes[0].dims), np.float32)


def test_executor_runs_the_schedule_not_the_text_order():
    from xladist.analysis.schedule import schedule_module
    module = xladist.load_hlo(DATA / "bidirectional_exchange.n2.hlo")
    schedule = schedule_module(module)
    p2p = [i.name for i in schedule[module.entry] if i.family == "p2p"]
    text = [i.name for i in module.entry.instructions if i.family == "p2p"]
    assert p2p != text  # the file is written send-first on purpose
    x = np.zeros(8, np.float32)
    scheduled = _Recorder()
    xladist.compile(module, device=scheduled, schedule=schedule)(x)
    assert scheduled.log == p2p
    unscheduled = _Recorder()
    xladist.compile(module, device=unscheduled)(x)
    assert unscheduled.log == text


# ---- host callbacks of the Python API, relayed from the launching process ---------------------

@pytest.mark.timeout(300)
@pytest.mark.slow
def test_python_api_host_callbacks_run_in_the_launching_process():
    from xladist.runtime.api import run
    x = np.array([[1, 2, 3], [10, 20, 30]], np.float32)
    sent = []

    def host_recv(rank, channel):
        assert channel == 7
        k = sum(1 for r, _, _ in sent if r == rank)  # how many items this rank sent so far
        return np.full(3, 100 * rank + k, np.float32)

    def host_send(rank, channel, array):
        sent.append((rank, channel, array))

    got = run(HOST_LOOP, [x], n=2, host_send=host_send, host_recv=host_recv, timeout=60)
    for r in range(2):
        mine = [a for rank, c, a in sent if rank == r and c == 8]
        want = x[r] + np.cumsum([np.full(3, 100 * r + k, np.float32) for k in range(3)], axis=0)
        np.testing.assert_array_equal(np.stack(mine), want)
        np.testing.assert_array_equal(got[r][0], want[-1])


def test_host_send_files_are_all_attempted_before_one_error_names_those_lost(tmp_path,
                                                                            monkeypatch):
    # Before: FileHost.finish stopped at the first channel whose file could be neither
    # written nor rescued: the later ranks' --host-send files were never written (a real
    # 2-rank run, rank 0's folder replaced by a file, no rescue folder possible:
    # /work/scratch/lost42/r4.py). Now every file is attempted, then one OutputError names
    # every one that was lost.
    import errno

    from xladist import files
    from xladist.errors import OutputError
    from xladist.runtime.channels_host import FileHost

    def no_room():
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(files, "rescue_dir", no_room)
    host = FileHost(send_pattern=str(tmp_path / "sent{rank}" / "r{rank}_ch{channel}.npz"))
    for r in range(3):
        host.host_send(r, 8, np.full(2, r, np.float32))
        host.host_send(r, 8, (np.full(3, 10 + r, np.int32),))
    for r in (0, 2):
        (tmp_path / f"sent{r}").write_text("a file where the folder was")
    with pytest.raises(OutputError) as info:
        host.finish()
    assert str(info.value) == "; ".join(
        f"cannot write --host-send {tmp_path / f'sent{r}' / f'r{r}_ch8.npz'}: Not a "
        f"directory; making a folder to save it in failed too: No space left on device"
        for r in (0, 2))
    with np.load(tmp_path / "sent1" / "r1_ch8.npz") as z:
        got = [z[name] for name in z.files]
    np.testing.assert_array_equal(got[0], np.full(2, 1, np.float32))
    np.testing.assert_array_equal(got[1], np.full(3, 11, np.int32))
    host.finish()  # (what was sent is attempted once: an abort hook may call it again)
