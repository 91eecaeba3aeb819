"""Feed items in `.npz` files, and the crash-safe outfeed log behind the npz writer.

File format (the same for infeed sources and outfeed results): one file per rank;
item k is the array `item{k}`, or, for a tuple item, its elements `item{k}_0`,
`item{k}_1`, ... (the leaves of the tuple in order). bf16 arrays are stored as uint16
bit patterns, the other ml_dtypes types (f8, f4, s4, ...) as uint8 (xladist/io.py encode;
an infeed takes them back, items.conform). Items are numbered from 0 without gaps.

Outfeed results must survive a failure of any rank, including being killed by MPI_Abort
when *another* rank fails. So the writer appends every outfeed item, as it is outfed,
to `PATH.part` (one `os.write` per item: a process that is killed afterwards cannot lose
it) and keeps it in memory; `close()` writes PATH atomically and deletes the log. A log
left behind by a killed rank is turned into PATH by `recover()` — the launching process
(`xladist run`, `xladist.run`) does that after a failed job.
"""

from __future__ import annotations

import io
import os
import re
import zipfile
from pathlib import Path

import numpy as np

from xladist.errors import InputError, OutputError
from xladist.files import NPZ_ERRORS, check_npz, deliver, fill_template, npz_member
from xladist.io import encode

_KEY = re.compile(r"^item(\d+)(?:_(\d+))?$")


def format_path(template: str, placement) -> str:
    """`template` with {rank}, {replica} and {partition} filled in for this placement."""
    return fill_template(template, "feed path", rank=placement.rank,
                         replica=placement.replica, partition=placement.partition)


def _index(files) -> dict[int, list[str] | str]:
    """item number -> its key, or its element keys in order; validates the key set."""
    items: dict[int, dict[int | None, str]] = {}
    for key in files:
        m = _KEY.match(key)
        if m is None:
            raise ValueError(f"array {key!r} is not an item (keys are item0, item1, ... "
                             "or item{k}_{j} for the elements of a tuple item)")
        k, j = int(m.group(1)), m.group(2)
        items.setdefault(k, {})[None if j is None else int(j)] = key
    out: dict[int, list[str] | str] = {}
    for k, parts in items.items():
        if None in parts and len(parts) > 1:
            raise ValueError(f"item {k} is given both as item{k} and as tuple elements "
                             f"item{k}_j")
        if None in parts:
            out[k] = parts[None]
            continue
        js = sorted(parts)
        if js != list(range(len(js))):
            raise ValueError(f"tuple item {k} has elements {js}: they must be 0..{len(js) - 1}")
        out[k] = [parts[j] for j in js]
    numbers = sorted(out)
    if numbers != list(range(len(numbers))):
        missing = next(i for i in range(len(numbers) + 1) if i not in out)
        raise ValueError(f"items must be numbered 0, 1, ... without gaps: item {missing} is "
                         f"missing but item {numbers[-1]} is there")
    return out


def _open(path: str, what: str):
    """(the opened npz file, its item index): InputError naming `what` and `path` when it is
    not a readable npz (files.check_npz) or its keys are not items (_index)."""
    check_npz(path, what)
    try:
        data = np.load(path, allow_pickle=False)
    except NPZ_ERRORS as e:
        raise InputError(f"{what} {path}: cannot read it ({type(e).__name__}: {e})") from None
    try:
        return data, _index(data.files)
    except ValueError as e:
        data.close()
        raise InputError(f"{what} {path}: {e}") from None


def check_items(path: str, what: str = "infeed file") -> None:
    """Before a launch: `path` is an npz file of items (names only: no member is read)."""
    data, _ = _open(path, what)
    data.close()


def read_items(path: str):
    """Yield the items of an npz file in order, reading each member only when needed."""
    what = "infeed file"
    data, index = _open(path, what)
    with data:
        for k in range(len(index)):
            keys = index[k]
            names = keys if isinstance(keys, list) else [keys]
            try:
                leaves = [npz_member(data, key) for key in names]
            except NPZ_ERRORS as e:
                raise InputError(f"{what} {path}: item {k} is damaged "
                                 f"({type(e).__name__}: {e})") from None
            for key, leaf in zip(names, leaves):
                _check_stored_type(path, what, k, key, leaf)
            yield tuple(leaves) if isinstance(keys, list) else leaves[0]


def _check_stored_type(path: str, what: str, k: int, key: str, array) -> None:
    """An ml_dtypes array saved as itself (np.savez writes bf16 as '<V2', f8 as '<V1')
    comes back from np.load as raw void bytes, which no infeed takes: say how npz files
    hold those types instead."""
    if array.dtype.kind == "V":
        raise InputError(f"{what} {path}: item {k} ({key}) is stored as {array.dtype.str}, "
                         f"raw bytes np.load cannot give a type back: npz files hold bf16 "
                         f"as uint16 bit patterns and the other ml_dtypes types (f8, f4, s4, "
                         f"...) as uint8 ones (`a.view(np.uint16)`, xladist.io.encode)")


def _leaves(item) -> list[np.ndarray]:
    if isinstance(item, tuple):
        out = []
        for v in item:
            out.extend(_leaves(v))
        return out
    return [encode(np.asarray(item))]


def item_arrays(k: int, item) -> dict[str, np.ndarray]:
    """The npz arrays of item k (a tuple item's leaves, flattened depth-first)."""
    if isinstance(item, tuple):
        return {f"item{k}_{j}": a for j, a in enumerate(_leaves(item))}
    return {f"item{k}": encode(np.asarray(item))}


def write_items(path: str, items, what: str = "--outfeed") -> None:
    """Write items to `path` atomically (a temporary file renamed into place); when that
    fails, to a fresh rescue folder, saying where (xladist/files.py `deliver`)."""
    arrays: dict[str, np.ndarray] = {}
    for k, item in enumerate(items):
        arrays.update(item_arrays(k, item))
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass  # deliver reports it and rescues the items
    deliver(target, lambda f: np.savez(f, **arrays), what)


def part_path(path: str) -> str:
    return str(path) + ".part"


class PartLog:
    """Append-only log of outfeed items: per item one record of npy blobs, written with
    one os.write so that what was outfed is on its way to disk even if the process is
    killed right after."""

    def __init__(self, path: str):
        self.path = part_path(path)
        try:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as e:
            raise OutputError(f"cannot write --outfeed {path}: {e.strerror or e}") from None

    def append(self, item) -> None:
        buf = io.BytesIO()
        leaves = _leaves(item)
        # Header: (leaf count, 1 for a tuple item); nested tuples are flattened.
        np.lib.format.write_array(buf, np.array([len(leaves), isinstance(item, tuple)],
                                                np.int64))
        for a in leaves:  # (write_array keeps 0-d arrays 0-d; any strides)
            np.lib.format.write_array(buf, a, allow_pickle=False)
        data = buf.getbuffer()
        while data:
            written = os.write(self.fd, data)
            data = data[written:]

    def close(self, *, remove: bool) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if remove:
            try:
                os.unlink(self.path)
            except OSError:
                pass  # gone with its folder: the items were delivered from memory


def read_part(path: str) -> list:
    """Items of a log (a record cut short by a kill is dropped)."""
    items = []
    with open(path, "rb") as f:
        while True:
            try:
                head = np.lib.format.read_array(f, allow_pickle=False)
                count, is_tuple = int(head[0]), bool(head[1])
                leaves = [np.lib.format.read_array(f, allow_pickle=False)
                          for _ in range(count)]
            except (ValueError, EOFError, OSError, zipfile.BadZipFile):
                break
            items.append(tuple(leaves) if is_tuple else leaves[0])
    return items


def recover(path: str) -> int | None:
    """Turn a leftover outfeed log into `path`; returns the item count, None if no log."""
    log = part_path(path)
    if not os.path.exists(log):
        return None
    items = read_part(log)
    write_items(path, items)
    os.unlink(log)
    return len(items)
