"""Results arriving at the service: outputs, traces and per-rank statistics, written on the
launching host where the user asked.

Outputs stream in one array after the other (a rank's `outputs` message holds them all,
jobs.JobHost.receive_outputs) and go straight to disk: each device's array i to a
temporary .npy file, never whole in memory (but for an array whose file cannot be made: the
temporary folder removed or full since the run began; it is kept in memory instead).
When the job is over, `finish` assembles what the user asked for:
* an npz of `out{i}` stacked over devices (xladist/io.py's format, bf16/f8 as bit patterns,
  dynamic dims padded with `out{i}_sizes`) -- copied in pieces from the temporary files;
* one npz per device (a `{device}` template), written as soon as that device is complete;
* the outputs printed, device by device (`xladist run` without --outputs);
* in memory, for `xladist.run` (which returns them all anyway).
Memory on the launching host: one piece (wire.CHUNK) per arriving array, or one device's
array where dims differ between devices.

Traces: each rank's events (JSON) go to a temporary file as they arrive (or stay in memory
when that file, or the temporary folder, cannot be made); the merged trace is written from
them, and after a failure it says which ranks saved their events and which did not.
"""

from __future__ import annotations

import shutil
import sys
import threading
import zipfile
from pathlib import Path

import numpy as np

from xladist.errors import OutputError
from xladist.files import deliver, temp_folder
from xladist.io import DEVICE_FIELD, bits_dtype, npz_path, outputs_text

from .. import wire

__all__ = ["Outputs", "Traces"]


def _npy_header(dtype: np.dtype, shape) -> bytes:
    import io
    buf = io.BytesIO()
    np.lib.format.write_array_header_2_0(
        buf, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
              "shape": tuple(shape)})
    return buf.getvalue()


def stored_dtype(dtype: np.dtype) -> np.dtype:
    """How npz holds an element type (bf16 -> uint16 bits, ...)."""
    return bits_dtype(dtype) or np.dtype(dtype)


class Outputs:
    """Where a job's outputs go: `mode` is "npz" (target: a path), "devices" (target: a path
    template with {device}), "print" or "memory"."""

    def __init__(self, n: int, mode: str, target: str | None = None, what: str = "--outputs"):
        self.n, self.mode, self.target, self.what = n, mode, target, what
        self.count: int | None = None
        self.meta: dict[tuple[int, int], tuple[np.dtype, tuple]] = {}
        self.memory: dict[tuple[int, int], np.ndarray] = {}
        self.done: set[int] = set()
        self._lock = threading.Lock()
        self.errors: list[str] = []  # arrays that could not be kept (a full disk)
        self.broken: set[int] = set()  # devices with such an array
        self.lost: list[str] = []  # per-device files that could be neither written nor rescued
        self.tmp = None
        self.in_memory = mode == "memory"
        if mode in ("npz", "devices", "print"):
            # Not next to the destination: that folder may vanish during the run, and the
            # result must still reach `deliver`, which then saves it elsewhere and says so.
            # When none can be made, outputs to print are kept in memory; files are an
            # OutputError before any rank starts (they may be too large for memory).
            try:
                self.tmp = temp_folder("xladist-outputs-", "the outputs while the ranks run")
            except OutputError:
                if mode != "print":
                    raise
                self.in_memory = True

    def _file(self, device: int, index: int) -> Path:
        return self.tmp / f"d{device}_o{index}.npy"

    def receive(self, device: int, index: int, meta: dict, size: int, sock, seen) -> None:
        """Read array `index` of `device` (its bytes still on `sock`) to where it belongs."""
        (name, dims), = meta["leaves"]
        dtype = wire.dtype_of(name)
        with self._lock:
            self.meta[(device, index)] = (dtype, tuple(dims))
        f = None
        if not self.in_memory:
            try:
                f = open(self._file(device, index), "wb")
                f.write(_npy_header(stored_dtype(dtype), dims))
            except OSError:
                # The temporary folder removed, replaced or full since the run began: this
                # array is kept in memory instead (a result is not lost for want of a
                # temporary file).
                if f is not None:
                    try:
                        f.close()
                    except OSError:
                        pass
                    f = None
        if f is None:
            a = np.empty(dims, dtype)
            view = memoryview(a.reshape(-1).view(np.uint8))
            at = 0

            def into(piece) -> None:
                nonlocal at
                view[at:at + piece.nbytes] = piece
                at += piece.nbytes
                seen()
            wire.copy_payload(sock, size, into)
            with self._lock:
                self.memory[(device, index)] = a
            return

        def write(piece) -> None:
            nonlocal f
            seen()
            if f is None:
                return  # drained: the stream stays in step with the rank
            try:
                f.write(piece)
            except OSError as e:
                self._lose(device, f"output {index} of device {device}: {e.strerror or e}")
                f.close()
                f = None
        try:
            wire.copy_payload(sock, size, write)
        finally:
            if f is not None:
                f.close()

    def _lose(self, device: int, text: str) -> None:
        with self._lock:
            self.errors.append(text)
            self.broken.add(device)

    def device_done(self, device: int, count: int) -> None:
        """Every output of `device` has arrived. A `{device}` file is written now; one that
        can be neither written nor rescued (files.deliver) is kept in `lost`, for the job's
        end (JobHost.finish) to name, never raised here: in the service's thread of the
        rank an exception would be taken for a defect of the service."""
        with self._lock:
            self.count = count
            self.done.add(device)
        if self.mode == "devices" and device not in self.broken:
            try:
                self._write_device(device)
            except OutputError as e:
                with self._lock:
                    self.lost.append(str(e))

    def _array(self, device: int, index: int) -> np.ndarray:
        """One device's array (memory-mapped from its temporary file when on disk)."""
        if (device, index) in self.memory:
            return self.memory[(device, index)]
        dtype, _dims = self.meta[(device, index)]
        a = np.load(self._file(device, index), mmap_mode="r", allow_pickle=False)
        return a if a.dtype == dtype else a.view(dtype)

    def _write_device(self, device: int) -> None:
        path = npz_path(self.target.replace(DEVICE_FIELD, str(device)))

        def write(f) -> None:
            with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
                for i in range(self.count):
                    dtype, dims = self.meta[(device, i)]
                    with z.open(f"out{i}.npy", "w", force_zip64=True) as m:
                        m.write(_npy_header(stored_dtype(dtype), dims))  # its file's header
                        self._copy_data(device, i, m)
        deliver(path, write, f"{self.what} (device {device})")
        for i in range(self.count):
            with self._lock:
                self.memory.pop((device, i), None)
            try:
                self._file(device, i).unlink(missing_ok=True)
            except OSError:
                pass  # its folder went (replaced by a file): discard() tries again

    def missing(self) -> list[int]:
        return [d for d in range(self.n) if d not in self.done]

    def finish(self) -> list[list[np.ndarray]] | None:
        """Write or print what the user asked for (all devices done). Returns the outputs
        for "memory"."""
        if self.errors:
            self.discard()
            raise OutputError(f"{self.what}: the launching host could not keep the outputs "
                              f"({'; '.join(self.errors[:3])})")
        try:
            if self.mode == "memory":
                return [[self.memory[(d, i)] for i in range(self.count or 0)]
                        for d in range(self.n)]
            if self.mode == "npz":
                deliver(npz_path(self.target), self._write_stacked, self.what)
            elif self.mode == "print":
                self._print()
            return None
        finally:
            self.discard()

    def _write_stacked(self, f) -> None:
        with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
            for i in range(self.count or 0):
                metas = [self.meta[(d, i)] for d in range(self.n)]
                dtype = stored_dtype(metas[0][0])
                shapes = [dims for _, dims in metas]
                if len(set(shapes)) > 1:
                    self._write_padded(z, i, dtype, shapes)
                    continue
                with z.open(f"out{i}.npy", "w", force_zip64=True) as m:
                    m.write(_npy_header(dtype, (self.n, *shapes[0])))
                    for d in range(self.n):
                        self._copy_data(d, i, m)

    def _copy_data(self, device: int, index: int, m) -> None:
        """The bytes of one device's array, from memory or its temporary file, into `m`."""
        if (device, index) in self.memory:
            a = self.memory[(device, index)]
            m.write(memoryview(np.ascontiguousarray(a).reshape(-1).view(np.uint8)))
            return
        with open(self._file(device, index), "rb") as src:
            np.lib.format.read_magic(src)
            np.lib.format.read_array_header_2_0(src)
            shutil.copyfileobj(src, m, wire.CHUNK)

    def _write_padded(self, z, i: int, dtype, shapes) -> None:
        """Dynamic dims: each device's array zero-padded to the largest, and the sizes."""
        largest = tuple(max(dims) for dims in zip(*shapes))
        with z.open(f"out{i}_sizes.npy", "w") as m:
            np.lib.format.write_array(m, np.array(shapes, dtype=np.int64))
        with z.open(f"out{i}.npy", "w", force_zip64=True) as m:
            m.write(_npy_header(dtype, (self.n, *largest)))
            for d in range(self.n):
                row = np.asarray(self._array(d, i)).view(dtype)
                padded = np.pad(row, [(0, b - a) for a, b in zip(row.shape, largest)])
                m.write(memoryview(np.ascontiguousarray(padded).reshape(-1).view(np.uint8)))

    def _print(self) -> None:
        for d in range(self.n):
            sys.stdout.write(f"device {d}:\n" + outputs_text(
                [self._array(d, i) for i in range(self.count or 0)]))
        sys.stdout.flush()

    def discard(self) -> None:
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


class Traces:
    """The ranks' trace events, merged into one Perfetto file at `path` (trace.py's format)."""

    def __init__(self, n: int, path: str):
        self.n, self.path = n, path
        try:
            self.tmp = temp_folder("xladist-trace-", "the trace")
        except OutputError:  # the temp folder removed or full: the events stay in memory
            self.tmp = None
        self.saved: set[int] = set()
        self.partial: set[int] = set()
        self.kept: dict[int, bytes] = {}  # events whose file could not be written

    def receive(self, rank: int, blob: bytes, partial: bool) -> None:
        """Keep a rank's events: in a file, or in memory when the file cannot be written
        (the temp folder full or removed). Never raises OSError: in the service's thread
        of the rank it would end the rank's connection, as if the rank had died."""
        try:
            if self.tmp is None:
                raise OSError("no temporary folder")
            (self.tmp / f"rank{rank}.json").write_bytes(blob)
        except OSError:
            self.kept[rank] = bytes(blob)
        else:
            self.kept.pop(rank, None)
        self.saved.add(rank)
        if partial:
            self.partial.add(rank)

    def finish(self, failed: bool) -> str | None:
        """Write the trace (also of a failed run, from the ranks that saved their events);
        returns the note for a partial trace, or None."""
        from ..trace import write_trace_parts
        note = None
        if failed:
            missing = [r for r in range(self.n) if r not in self.saved]
            saved = sorted(self.saved)
            note = (f"partial: the run failed; {_ranks(saved) if saved else 'no rank'} saved "
                    f"{'its' if len(saved) == 1 else 'their'} events before the job ended"
                    + (f"; {_ranks(missing)} did not (ended before they could)"
                       if missing else ""))
        if self.saved or not failed:
            write_trace_parts(self.path, [self.kept[r] if r in self.kept
                                          else self.tmp / f"rank{r}.json"
                                          for r in sorted(self.saved)],
                              ranks=self.n, note=note)
        self.discard()
        return note if self.saved else None

    def discard(self) -> None:
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


def _ranks(ranks) -> str:
    ranks = sorted(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))

