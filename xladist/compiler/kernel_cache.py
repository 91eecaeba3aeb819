"""On-disk cache of compiled object code, each entry checked before anything is loaded.

An entry is `<dir>/<key[:2]>/<key>.o`:

  offset  size  field
       0     8  magic b"XLDKCACH"
       8     4  format version (little-endian u32, FORMAT_VERSION)
      12    32  cache key (sha256 digest; the file name says the same in hex)
      44     8  payload length (u64)
      52    32  sha256 of the payload
      84     n  payload: the ELF object LLVM emitted

A file that is empty, truncated, random bytes, another format version or another key's
entry (copied or renamed) fails the check: it gives one warning (KernelCacheWarning), the
module is recompiled and the entry replaced. Loading damaged object code into MCJIT would
crash the process, on every later run, on every rank.

Entries are written to a temporary file in the same directory and renamed over the
target (os.replace is atomic), so ranks compiling the same module at once each write a
whole entry and readers see an old whole entry or a new whole one, never a mix.

The cache is bounded (XLADIST_CACHE_MAX_MB, default DEFAULT_MAX_MB; 0: no bound) by
least-recently-used eviction, as ccache does it: each of the 256 `key[:2]` folders holds at
most 1/256 of the bound, and a store prunes the folder it wrote into (one listing of
~1/256 of the entries, only after a cold compile). A hit sets the entry's modification
time, so the oldest is the least recently used. Safe with any number of processes and hosts
sharing the folder or not: a pruner never deletes an entry used (read or written) in the
last MIN_AGE_S seconds nor one whose time changed since it looked, and deleting can never
hurt a reader (an entry is read whole through one open file, which keeps its bytes after
`unlink`; a missing entry is a miss, compiled again and stored). Temporary files a crashed
writer left are removed after STALE_TMP_S.

A rank of a job also asks the job's coordination service (`set_remote`: the runtime
installs the fetch), which holds the object the launching process compiled for the whole
job: a miss here is then a hit there, and remote hosts need no cache of their own.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import time
import threading
import warnings
from pathlib import Path

from .. import environment
from ..errors import OutputError
from ..files import write_atomic

MAGIC = b"XLDKCACH"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sI32sQ32s")
HEADER_SIZE = _HEADER.size
DEFAULT_MAX_MB = 2048     # XLADIST_CACHE_MAX_MB when unset: ~400,000 small modules
SHARDS = 256              # the `key[:2]` folders
MIN_AGE_S = 60.0          # an entry used this recently is never evicted
STALE_TMP_S = 86400.0     # a writer's temporary file this old was left by a crash


class KernelCacheWarning(UserWarning):
    """A cache entry could not be used; it is being recompiled and replaced."""


def entry_path(key: str) -> Path | None:
    """Where entry `key` lives; None when caching is off (the directory: XLADIST_CACHE_DIR,
    read and checked before any rank starts in xladist/environment.py)."""
    d = environment.cache_dir()
    return None if d is None else d / key[:2] / f"{key}.o"


def encode(key: str, payload: bytes) -> bytes:
    return _HEADER.pack(MAGIC, FORMAT_VERSION, bytes.fromhex(key), len(payload),
                        hashlib.sha256(payload).digest()) + payload


def decode(key: str, data: bytes) -> bytes:
    """The payload of a whole, matching entry; ValueError saying what is wrong otherwise."""
    if not data:
        raise ValueError("the file is empty")
    if len(data) < HEADER_SIZE:
        raise ValueError(f"the file is truncated ({len(data)} bytes, shorter than its header)")
    magic, version, entry_key, length, digest = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ValueError("the file is not an xladist kernel cache entry")
    if version != FORMAT_VERSION:
        raise ValueError(f"format version {version}, this xladist reads {FORMAT_VERSION}")
    if entry_key != bytes.fromhex(key):
        raise ValueError("the entry belongs to another cache key")
    payload = data[HEADER_SIZE:]
    if len(payload) != length:
        raise ValueError(f"the payload is {len(payload)} bytes, the header says {length}")
    if hashlib.sha256(payload).digest() != digest:
        raise ValueError("the payload's checksum does not match")
    return payload


_remote = None
_here = threading.local()  # .only: this thread compiles what it misses (the one who serves)


def set_remote(fetch) -> None:
    """`fetch(key) -> bytes | None`, asked after a miss on disk (None: nobody to ask)."""
    global _remote
    _remote = fetch


@contextlib.contextmanager
def local_only():
    """In this thread, a miss is compiled here, never fetched: the thread compiling for the
    job's service (rank 0 of a bare launch hosts it) must not ask itself."""
    before = getattr(_here, "only", False)
    _here.only = True
    try:
        yield
    finally:
        _here.only = before


def load(key: str) -> bytes | None:
    """The cached object code for `key`, or None (absent, unreadable or damaged)."""
    path = entry_path(key)
    if path is None:
        return _fetch(key)
    obj = _load_file(key, path)
    return obj if obj is not None else _fetch(key)


def _fetch(key: str) -> bytes | None:
    if _remote is None or getattr(_here, "only", False):
        return None
    try:
        return _remote(key)
    except Exception as e:  # noqa: BLE001 -- compiling here is always possible
        warnings.warn(f"could not fetch compiled code from the job's service ({e}); "
                      "compiling here", KernelCacheWarning, stacklevel=3)
        return None


def _load_file(key: str, path: Path) -> bytes | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        warnings.warn(f"kernel cache entry {path} cannot be read ({e}); recompiling",
                      KernelCacheWarning, stacklevel=2)
        return None
    try:
        payload = decode(key, data)
    except ValueError as e:
        warnings.warn(f"kernel cache entry {path} is damaged ({e}); recompiling and "
                      f"replacing it", KernelCacheWarning, stacklevel=2)
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # most recently used (a read-only cache just does not record it)
    return payload


def store(key: str, payload: bytes) -> None:
    path = entry_path(key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # temporary file + rename: ranks writing the same entry never leave a partial one
        write_atomic(path, lambda f: f.write(encode(key, payload)), "kernel cache entry")
    except (OSError, OutputError):
        return  # a read-only or full cache is not an error, only slower
    limit = environment.setting("XLADIST_CACHE_MAX_MB", DEFAULT_MAX_MB)
    if limit:
        prune(path.parent, limit * (1 << 20) / SHARDS, keep=path.name)


def prune(folder: Path, budget: float, keep: str = "", now: float | None = None) -> None:
    """Delete the least recently used entries of one `key[:2]` folder until its entries
    hold at most `budget` bytes (module doc: what is never deleted, and why deleting is safe
    for everyone else); `keep` (the entry just written) stays."""
    now = time.time() if now is None else now
    entries = []
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        p = folder / name
        try:
            st = p.stat()
        except OSError:
            continue  # another process removed it
        if name.endswith(".o"):
            entries.append((st.st_mtime_ns, st.st_size, name))
        elif name.startswith(".") and name.endswith(".tmp") and now - st.st_mtime > STALE_TMP_S:
            with contextlib.suppress(OSError):
                p.unlink()
    total = sum(size for _, size, _ in entries)
    for mtime, size, name in sorted(entries):  # oldest first
        if total <= budget:
            break
        if name == keep or now - mtime / 1e9 < MIN_AGE_S:
            continue
        p = folder / name
        try:
            if p.stat().st_mtime_ns != mtime:
                continue  # used since we looked
            p.unlink()
        except OSError:
            continue  # gone already (another pruner), or not ours to delete
        total -= size
