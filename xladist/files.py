"""Files a user names: checked before anything runs, written so that no result is lost.

Every file a command reads or writes passes through here, so bad input is handled by one
set of rules rather than case by case (README "Error formats"):

* sources (`check_source`, `read_text`, `check_npz`, `load_npz`): a missing path, a
  directory, an unreadable or empty file, text that is not UTF-8 (`utf8_text`, the one
  decoding of a text file's bytes: a leading byte-order mark, as some Windows editors
  write, is dropped -- `without_mark`, the one rule for it, which `parse_hlo` also applies
  to text given as a string), an npz that is not a zip
  archive, is cut short, or holds pickled (object) members - each one InputError (exit 2)
  naming the option (`what`) and the file. npz files are always read with
  allow_pickle=False: loading a file must never run code from it;
* destinations (`check_destination`): before a run starts, the folder exists (or, for
  per-rank templates, can be created) and is writable, and the path is not a folder;
* writing (`write_atomic`): a temporary file in the destination's folder renamed over the
  target, so a reader never sees half a file; a failure is an OutputError;
* templates (`fill_template`): a path with placeholders (`out.{device}.npz`, one file per
  device, rank, channel) filled in; a placeholder the setting does not take is refused
  naming it and the ones it takes;
* rescue (`deliver`): when a result still cannot be written after a run (disk full, folder
  removed meanwhile), it is written to a fresh `xladist-rescued-*` folder instead, one line
  on stderr says where (and on which host, when this is a rank of a job rather than the
  launching process), and `rescued()` lists it so that the command exits non-zero. Results
  are never dropped.
"""

from __future__ import annotations

import math
import os
import string
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path

from .errors import InputError, OutputError

__all__ = ["check_destination", "check_npz", "check_source", "deliver", "load_npz",
           "read_text", "rescued", "temp_folder", "utf8_text", "without_mark",
           "write_atomic"]


# Errors numpy / zipfile raise for a damaged npz (a member cut short, bad compression, a
# header numpy cannot parse).
NPZ_ERRORS = (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error, KeyError,
               NotImplementedError, SyntaxError)


def is_path(source) -> bool:
    """Whether `source` can name a file (str, bytes, PathLike), not an open file or other."""
    return isinstance(source, (str, bytes, os.PathLike))


# ---- sources ---------------------------------------------------------------------------
def check_source(path, what: str) -> Path:
    """`path` is a readable, non-empty regular file (InputError naming `what` otherwise)."""
    if not is_path(path):
        raise InputError(f"{what} must be a path, got {type(path).__name__}")
    p = Path(os.fsdecode(path))
    if not str(path):
        raise InputError(f"{what}: the path is empty")
    try:
        st = p.stat()
    except FileNotFoundError:
        raise InputError(f"{what} {p}: does not exist") from None
    except OSError as e:
        raise InputError(f"{what} {p}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:  # a NUL byte in the path
        raise InputError(f"{what} {str(p)!r}: not a usable path ({e})") from None
    if p.is_dir():
        raise InputError(f"{what} {p}: is a directory, not a file")
    if not p.is_file():
        raise InputError(f"{what} {p}: is not a regular file")
    if not os.access(p, os.R_OK):
        raise InputError(f"{what} {p}: cannot read it (permission denied)")
    if st.st_size == 0:
        raise InputError(f"{what} {p}: the file is empty")
    return p


def without_mark(text: str) -> str:
    """`text` without the byte-order mark (U+FEFF) that some Windows editors write first --
    an encoding's signature, not text; dropping it leaves every line:column as an editor
    shows it. A mark anywhere else stays in the text (the HLO parser names it). The one
    rule for a leading mark: every text file xladist reads (`utf8_text`) and HLO text given
    as a string (`parse_hlo`, read by the user with encoding="utf-8") pass through it."""
    return text[1:] if text.startswith("\ufeff") else text


def utf8_text(data: bytes, where: str, kind: str) -> str:
    """The text of a text file's (or standard input's) bytes: UTF-8, without a leading
    byte-order mark (`without_mark`). InputError naming `where` (the option and file) and
    `kind` (the expected format) when the bytes are not UTF-8."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{where}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset "
                         f"{e.start}); expected {kind}") from None
    return without_mark(text)


def read_text(path, what: str, kind: str = "text") -> str:
    """The text of a source file (`utf8_text`); `kind` names the expected format in
    messages."""
    p = check_source(path, what)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise InputError(f"{what} {p}: cannot read it ({e.strerror or e})") from None
    return utf8_text(data, f"{what} {p}", kind)


def fill_template(template, what: str, **fields) -> str:
    """`template` with `fields` ({device}, {rank}, ...) filled in. A placeholder not among
    `fields` ({name}, {devce}, {}), or a brace that opens or closes none, is an InputError
    naming `what` (the option), the template, the bad placeholder and the ones it takes --
    not str.format's KeyError, which named only the bad name, quoted."""
    template = str(template)
    names = [f"{{{name}}}" for name in fields]
    takes = (f"it takes only {names[0]}" if len(names) == 1 else
             f"it takes {', '.join(names[:-1])} and {names[-1]}")
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError:  # a lone { or }
        raise InputError(f"{what} {template!r}: a {{ or }} that opens or closes no "
                         f"placeholder ({takes}; write {{{{ or }}}} for a brace in the "
                         "name)") from None
    for _, field, _, _ in parts:
        if field is not None and field not in fields:
            raise InputError(f"{what} {template!r}: {{{field}}} is not a placeholder it "
                             f"takes ({takes})")
    try:
        return template.format(**fields)
    except (KeyError, IndexError, ValueError, AttributeError) as e:  # {device:{x}}, {rank:s}
        raise InputError(f"{what} {template!r}: its placeholders cannot be filled in: {e} "
                         f"({takes})") from None


def check_npz(path, what: str) -> None:
    """`path` is an npz archive of plain arrays: a zip whose members are .npy arrays with
    a dtype that holds no Python objects. Reads only the headers."""
    import numpy as np
    p = check_source(path, what)
    try:
        with zipfile.ZipFile(p) as z:
            for info in z.infolist():
                if not info.filename.endswith(".npy"):
                    raise InputError(f"{what} {p}: member {info.filename!r} is not an array "
                                     "(.npy); not an npz file of arrays")
                with z.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                                   (2, 0): np.lib.format.read_array_header_2_0}.get(version)
                    # (format 3.0, UTF-8 field names: np.load's allow_pickle=False still
                    # refuses object arrays when the data is read)
                    if read_header:
                        start = f.tell()

                        def parse(f=f, start=start, read_header=read_header):
                            f.seek(start)
                            return read_header(f)
                        shape, _, dtype = past_ast_race(parse)
                        header = f.tell()
                    else:
                        dtype = np.dtype(np.uint8)
                if dtype.hasobject:
                    raise InputError(f"{what} {p}: array {info.filename[:-4]!r} holds Python "
                                     "objects (pickled data); xladist reads only plain "
                                     "numeric arrays and never unpickles")
                if read_header:
                    # The member holds as many bytes as its header's dims need: a member cut
                    # short would otherwise be read in place past its end (io.NpzArray).
                    need = header + dtype.itemsize * math.prod(shape)
                    if info.file_size < need:
                        raise InputError(
                            f"{what} {p}: array {info.filename[:-4]!r} is cut short: its "
                            f"header says {dtype} {list(shape)} ({need - header} bytes), the "
                            f"file holds {max(info.file_size - header, 0)} of them")
    except InputError:
        raise
    except zipfile.BadZipFile as e:
        raise InputError(f"{what} {p}: not an npz file ({e})") from None
    except NPZ_ERRORS as e:
        raise InputError(f"{what} {p}: a damaged npz file ({type(e).__name__}: {e})") from None


# CPython 3.11's AST constructor keeps its recursion count in state every thread shares
# (python/cpython gh-106905): numpy parses each npz member's header with ast.literal_eval,
# and while another thread builds an AST at the same moment (3.11's traceback carets, a
# literal_eval of its own) the parse can fail with "SystemError: AST constructor recursion
# depth mismatch (before=45, after=42)". A rank's infeed producer reads members beside its
# main thread: CI saw it once (the train_mlp example, rank 3's first item), and the run
# failed. The next parse starts from a fresh count, so the member is read again.
_AST_RACE = "AST constructor recursion depth mismatch"
NPZ_READ_TRIES = 3


def past_ast_race(read):
    """read() -- which parses an npy header --, again when CPython's AST race (above) hit
    the parse."""
    for attempt in range(NPZ_READ_TRIES):
        try:
            return read()
        except SystemError as e:
            if _AST_RACE not in str(e) or attempt == NPZ_READ_TRIES - 1:
                raise


def npz_member(data, key: str):
    """data[key] of an open npz file (past_ast_race)."""
    return past_ast_race(lambda: data[key])


def load_npz(source, what: str) -> dict:
    """Every array of an npz file (a path or an open binary file): {name: array}."""
    import numpy as np
    if is_path(source):
        check_npz(source, what)
    try:
        with np.load(source, allow_pickle=False) as data:
            if not hasattr(data, "files"):
                raise InputError(f"{what} {source}: a single .npy array, not an npz file")
            return {k: npz_member(data, k) for k in data.files}
    except InputError:
        raise
    except NPZ_ERRORS as e:
        raise InputError(f"{what} {source}: not a readable npz file "
                         f"({type(e).__name__}: {e})") from None


# ---- destinations ----------------------------------------------------------------------
def check_destination(path, what: str, *, create_dirs: bool = False) -> Path:
    """Before a run: `path` can be written. Its folder must exist and be writable; with
    `create_dirs` (per-rank templates, whose folders are made on the way) the nearest
    existing folder above it must be writable instead."""
    p = Path(os.fsdecode(path))
    if not str(path):
        raise InputError(f"{what}: the path is empty")
    if p.is_dir():
        raise InputError(f"{what} {p}: is a directory; give a file name")
    parent = p.parent
    if create_dirs:
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
    if not parent.exists():
        raise InputError(f"{what} {p}: the folder {parent} does not exist (create it first)")
    if not parent.is_dir():
        raise InputError(f"{what} {p}: {parent} is not a folder")
    # Try it: permission bits say little to root or on a read-only or special file system.
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".xladist-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise InputError(f"{what} {p}: cannot write to the folder {parent} "
                         f"({e.strerror or e})") from None
    return p


def _umask() -> int:
    mask = os.umask(0o22)
    os.umask(mask)
    return mask


_UMASK = _umask()


def write_atomic(path, write, what: str = "file") -> Path:
    """Call `write(f)` on a temporary binary file next to `path`, then rename it to `path`.
    OutputError (with the reason) when that fails; no temporary file is left behind."""
    p = Path(os.fsdecode(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; a result gets the usual mode
        os.replace(tmp, p)
        tmp = None
    except OSError as e:
        raise OutputError(f"cannot write {what} {p}: {e.strerror or e}") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return p


def temp_folder(prefix: str, what: str) -> Path:
    """A fresh folder in this process's temp folder (tempfile's: TMPDIR, else /tmp, ...)
    for `what` (e.g. "the outputs while the ranks run"). When none can be made (the temp
    folder removed, full, not writable): an OutputError naming the folder and TMPDIR,
    not the standard library's OSError."""
    try:
        return Path(tempfile.mkdtemp(prefix=prefix))
    except OSError as e:  # (gettempdir's "No usable temporary directory" is one too)
        folder = tempfile.tempdir
        tmpdir = os.environ.get("TMPDIR")
        raise OutputError(
            "cannot make a temporary folder" + (f" in {folder}" if folder else "")
            + f" for {what}: {e.strerror or e} (TMPDIR "
            + (f"is {tmpdir}" if tmpdir is not None else "is not set") + "); set TMPDIR to "
            "a writable folder with room") from None


# ---- rescue ----------------------------------------------------------------------------
_rescued: list[tuple[str, str, str]] = []   # (what, wanted path, where it went)
_fallback_dir: Path | None = None


def rescue_dir() -> Path:
    """Where results that could not be written go: a folder made for this process."""
    global _fallback_dir
    if _fallback_dir is None or not _fallback_dir.is_dir():
        _fallback_dir = Path(tempfile.mkdtemp(prefix="xladist-rescued-"))
    return _fallback_dir


def deliver(path, write, what: str) -> Path:
    """Write a result atomically to `path`; if that fails, to the rescue folder, saying so
    on stderr. Returns where it was written. Raises OutputError only when both fail."""
    try:
        return write_atomic(path, write, what)
    except OutputError as first:
        try:
            d = rescue_dir()
        except OSError as e:  # a full disk: no folder can be made either
            raise OutputError(f"{first}; making a folder to save it in failed too: "
                              f"{e.strerror or e}" + (f" ({e.filename})" if e.filename else
                                                      "")) from None
        target = d / Path(os.fsdecode(path)).name
        k = 1
        while target.exists():
            target = d / f"{Path(os.fsdecode(path)).name}.{k}"
            k += 1
        try:
            write_atomic(target, write, what)
        except OutputError as second:
            raise OutputError(f"{first}; saving it in {d} failed too: {second}") from None
        _rescued.append((what, os.fsdecode(path), str(target)))
        where = f"{target} (on {_rank_host()})" if _rank_host() else str(target)
        # One write: ranks share stderr, and print() would write the newline separately.
        sys.stderr.write(f"xladist: error: {first}; saved it as {where} instead\n")
        sys.stderr.flush()
        return target


def _rank_host() -> str | None:
    """This host's name when this process is a rank of an MPI job (a file it rescues is on
    that host, which may not be the one the user works on), else None."""
    if not any(v in os.environ for v in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")):
        return None
    import socket
    return os.environ.get("XLADIST_HOSTNAME") or socket.gethostname()


def rescued() -> list[tuple[str, str, str]]:
    """(what, wanted path, saved path) of every result this process had to rescue."""
    return list(_rescued)
