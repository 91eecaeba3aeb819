"""A parsed module as bytes: what the launcher ships to its ranks instead of the text.

Every rank used to parse the module's text again after the launcher had parsed it (~27 ms
for the 233 KB transformer step on an idle core, 0.10 s at load 7, on every rank and
every launch); loading the parsed form takes ~6 ms. The form is the pickled Module (its
instructions keep their names, line numbers and metadata, so errors on a rank still name
the module's source lines) behind a header naming the code that wrote it: the digest of
xladist's version, numpy's and this package's source files. A rank whose code differs
(another install on another host) refuses the form with that message instead of
misreading it. The bytes travel only from the launcher to its own ranks over the
coordination service's authenticated connections; nothing else is ever unpickled.
"""

from __future__ import annotations

import gc
import hashlib
import pathlib
import pickle

from ..errors import InputError
from ..version import __version__

MAGIC = b"XLADIST-HLO-PACKED\n"
_key: list[bytes] = []


def code_key() -> bytes:
    """The digest of what decides how a packed module reads back (computed once)."""
    if not _key:
        import numpy
        h = hashlib.sha256(f"{__version__} numpy {numpy.__version__} "
                           f"pickle {pickle.HIGHEST_PROTOCOL}".encode())
        here = pathlib.Path(__file__).parent
        for path in sorted(here.rglob("*.py")):
            h.update(path.relative_to(here).as_posix().encode())
            h.update(path.read_bytes())
        _key.append(h.hexdigest().encode())
    return _key[0]


def pack(module) -> bytes | None:
    """The module as bytes, or None when it cannot be pickled (a builder's module holding
    something that is not plain data): the caller then ships its text."""
    try:
        body = pickle.dumps(module, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
        return None
    return MAGIC + code_key() + b"\n" + body


def unpack(data: bytes, what: str = "the module"):
    """The Module packed by `pack`, written by this same code."""
    if not data.startswith(MAGIC):
        raise InputError(f"{what}: not a packed module")
    key, _, body = data[len(MAGIC):].partition(b"\n")
    if key != code_key():
        raise InputError(
            f"{what} was packed by different xladist code than this process runs (code "
            f"{key[:12].decode(errors='replace')}..., here {code_key()[:12].decode()}...): "
            "every host of a job must run the same xladist and numpy")
    # The collector off while the module's objects are made: they are all kept, and its
    # passes over a heap growing by ~10 objects an instruction made a 30,000-instruction
    # module read back in 1.2 s instead of 0.3 s, on every rank at every launch.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return pickle.loads(body)
    finally:
        if enabled:
            gc.enable()
