"""Serialized executables (`.xlx`): a module compiled once, run later without compiling.

    write_executable(path, module_text, schedule_of)     # `xladist compile`
    exe = load_executable(path)                           # `xladist.load_executable`

File layout (all integers little-endian):
    magic  b"XLADIST\\x00X"          9 bytes
    format version                   u32 (FORMAT)
    payload length                   u64
    sha256 of the payload            32 bytes
    payload = u32 length + JSON header, then the object code (jit.pack_objects: the
    objects of the program's compile units)
The JSON header holds the module text (as written by the user), the schedule (computation
name -> instruction names), the thunk plan (CpuProgram.explain(), for people and tools),
the kernel fingerprint (program.kernel_fingerprint: module text, large constants' digests,
kernel names: what the object was built from), the
target it was compiled for (triple, CPU, CPU features, LLVM version, vector width, as
target.target_description) and the xladist and compiler versions.

Loading checks magic, format version, length and checksum (a damaged or truncated file is an
InputError, never a crash), then the target and versions: a file made for another CPU,
another CPU feature set, another LLVM or another xladist/compiler version is refused with an
UnsupportedError saying what differs (recompile it from its module with `xladist compile`);
it is never silently recompiled, so a deployed file either runs the code it holds or fails.
Planning (fusion, buffers: pure Python, milliseconds) runs again on load and must reproduce
the stored fingerprint, so the object always matches the thunks that call it.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct

from ..errors import InputError, UnsupportedError

MAGIC = b"XLADIST\x00X"
FORMAT = 1
_HEAD = struct.Struct("<9sIQ32s")
SUFFIX = ".xlx"


def _target() -> dict:
    from ..version import __version__
    from . import jit
    from .target import target_description
    triple, cpu, features, llvm_version, width = target_description().split("|")
    return {"triple": triple, "cpu": cpu, "cpu_features": features, "llvm": llvm_version,
            "vector_width": width, "xladist": __version__, "compiler": jit.compiler_version()}


def _schedule_names(schedule) -> dict:
    return {getattr(c, "name", c): [i.name for i in order] for c, order in schedule.items()}


def compile_to_bytes(module_text: str, schedule_of=None, filename: str | None = None) -> bytes:
    """The `.xlx` bytes of a module, compiled for this host; `schedule_of(module)` gives the
    instruction order (the cli passes xladist.analysis.schedule's: the order every rank of
    `xladist run` uses; default: the text order). `filename` names the text in parse
    errors."""
    from ..hlo.parser import parse_module
    from ..hlo.verifier import verify_module
    from ..semantics.custom_calls import check_partitioned
    from .program import CpuProgram
    module = parse_module(module_text, filename=filename)
    check_partitioned(module)  # before the verifier, whose hint would not help
    verify_module(module)
    schedule = schedule_of(module) if schedule_of is not None else {}
    prog = CpuProgram(module, schedule)
    obj = prog.code.blob  # the object code the program just loaded (jit.pack_objects)
    header = {"module_text": module_text, "schedule": _schedule_names(schedule),
              "fingerprint": prog.fingerprint, "plan": prog.explain(), "backend": "cpu",
              "target": _target()}
    hjson = json.dumps(header).encode()
    payload = struct.pack("<I", len(hjson)) + hjson + obj
    return _HEAD.pack(MAGIC, FORMAT, len(payload), hashlib.sha256(payload).digest()) + payload


def write_executable(path, module_text: str, schedule_of=None,
                     filename: str | None = None) -> int:
    """Compile `module_text` and write its `.xlx` file to `path` (atomically: files.py);
    the number of bytes written."""
    from ..files import write_atomic
    data = compile_to_bytes(module_text, schedule_of, filename)
    write_atomic(path, lambda f: f.write(data), "executable")
    return len(data)


class SerializedExecutable:
    """A validated `.xlx` file: its module, schedule and object code.

    `here`: whether this process will run the code, so that the file's CPU must be this
    host's (a launcher whose ranks run on the hosts of a hostfile checks the file and its
    versions only; each rank checks its own CPU). `name`: the file as messages name it (a
    rank loads a copy of the launcher's), `host`: this host's name for them."""

    def __init__(self, path, *, here: bool = True, name: str | None = None,
                 host: str | None = None):
        from ..files import is_path
        if not is_path(path):
            raise InputError(f"executable must be a path, got {type(path).__name__}")
        self.path = str(path)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise InputError(f"cannot read {path}: {e.strerror or e}") from None
        self.header, self.object = _parse(data, self.path)
        _check_target(self.header.get("target", {}), name or self.path, here=here, host=host)
        from ..hlo.parser import parse_module
        self.module_text = self.header["module_text"]
        self.module = parse_module(self.module_text, filename=self.path)
        self.schedule = _schedule_from_names(self.module, self.header.get("schedule", {}),
                                             self.path)

    def options(self) -> dict:
        """What the cpu backend needs to run this file without compiling."""
        return {"schedule": self.schedule, "code": self.object,
                "fingerprint": self.header["fingerprint"]}

    def executable(self, **options):
        from .program import CpuExecutable
        return CpuExecutable(self.module, **self.options(), **options)


def _parse(data: bytes, path: str) -> tuple[dict, bytes]:
    def damaged(why: str) -> InputError:
        return InputError(f"{path} is not a valid xladist executable ({why}); write it again "
                          f"with `xladist compile MODULE.hlo -o {os.path.basename(path)}`")
    if len(data) < _HEAD.size:
        raise damaged(f"{len(data)} bytes, shorter than the {_HEAD.size}-byte header")
    magic, fmt, length, digest = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise damaged("wrong magic bytes")
    if fmt != FORMAT:
        raise damaged(f"format version {fmt}, this xladist reads version {FORMAT}")
    payload = data[_HEAD.size:]
    if len(payload) != length:
        raise damaged(f"truncated or extended: payload of {len(payload)} bytes, the header "
                      f"says {length}")
    if hashlib.sha256(payload).digest() != digest:
        raise damaged("checksum mismatch: the file is damaged")
    try:
        (hlen,) = struct.unpack_from("<I", payload)
        header = json.loads(payload[4:4 + hlen].decode())
    except (struct.error, UnicodeDecodeError, ValueError) as e:
        raise damaged(f"unreadable header: {e}") from None
    # A checksum that holds says nothing of who wrote the file: every field as
    # compile_to_bytes writes it, and the object code a bundle jit can unpack.
    problem = _header_problem(header)
    if problem:
        raise damaged(f"unreadable header: {problem}")
    code = payload[4 + hlen:]
    from .jit import unpack_objects
    try:
        unpack_objects(code)
    except (ValueError, struct.error) as e:
        raise damaged(f"unreadable object code: {e}") from None
    return header, code


def _header_problem(header) -> str | None:
    """What in a header does not have the form compile_to_bytes writes, or None."""
    if not isinstance(header, dict):
        return f"a JSON {type(header).__name__}, not an object"
    for key, kind in (("module_text", str), ("fingerprint", str), ("schedule", dict),
                      ("target", dict)):
        if key not in header and key in ("module_text", "fingerprint"):
            return f"no {key!r}"
        if key in header and not isinstance(header[key], kind):
            return f"{key!r} is of type {type(header[key]).__name__}, not {kind.__name__}"
    for comp, order in header.get("schedule", {}).items():
        if not isinstance(order, list) or not all(isinstance(n, str) for n in order):
            return f"the schedule of {comp} is not a list of instruction names"
    return None


_WHAT = {"triple": "target triple", "cpu": "CPU", "cpu_features": "CPU features",
         "llvm": "LLVM version", "vector_width": "vector width", "xladist": "xladist version",
         "compiler": "compiler version"}


# What the code runs on: checked where it runs (the other keys: by every process of the job,
# which runs one install of xladist and LLVM).
_MACHINE = ("triple", "cpu", "cpu_features", "vector_width")


def _check_target(stored: dict, path: str, *, here: bool = True,
                  host: str | None = None) -> None:
    own = _target()
    where = f"on {host}" if host else "here"
    named = _named_cpu(stored, own, here)
    if named is not None:
        raise UnsupportedError(
            f"{path} was compiled for the CPU {named!r} (XLADIST_TARGET_CPU={named}), and "
            f"this process compiles for {own['cpu']!r}{' on ' + host if host else ''}: run "
            f"it with XLADIST_TARGET_CPU={named} set, as it was compiled (a host whose CPU "
            f"runs {named}'s code runs it), or recompile it {where} with `xladist compile`")
    diffs = []
    for key, what in _WHAT.items():
        if not here and key in _MACHINE:
            continue
        if stored.get(key) != own[key]:
            a, b = stored.get(key), own[key]
            if key == "cpu_features" and a and b:
                fa, fb = set(a.split(",")), set(b.split(","))
                a, b = ",".join(sorted(fa - fb)) or "-", ",".join(sorted(fb - fa)) or "-"
                diffs.append(f"{what}: the file has {a} where {host or 'this host'} has {b}")
            else:
                diffs.append(f"{what}: file {a!r}, {where} {b!r}")
    if diffs:
        raise UnsupportedError(f"{path} was compiled for another machine or xladist and is not "
                               f"run (recompile it {where} with `xladist compile`): "
                               + "; ".join(diffs))


def _named_cpu(stored: dict, own: dict, here: bool) -> str | None:
    """The CPU a file was compiled for with XLADIST_TARGET_CPU (its features are that
    CPU's own: empty), when that setting is all that differs from this process's target;
    else None. Such a file -- a portable one, for a CPU older than the hosts -- was refused
    as 'compiled for another machine' on the very host that wrote it, with this host's
    whole feature list (~1,800 characters) as the difference."""
    if not here or stored.get("cpu_features") != "" or stored.get("cpu") == own["cpu"] \
            or stored.get("vector_width") != "vector-width=None":  # (no XLADIST_VECTOR_WIDTH)
        return None
    same = all(stored.get(k) == own[k] for k in _WHAT if k not in _MACHINE)
    return stored.get("cpu") if same and stored.get("triple") == own["triple"] else None


def _schedule_from_names(module, names: dict, path: str) -> dict:
    out = {}
    comps = {c.name: c for c in module.computations}
    for cname, order in names.items():
        comp = comps.get(cname)
        if comp is None:
            raise InputError(f"{path}: the schedule names computation {cname!r}, which the "
                             f"module does not have")
        by_name = {i.name: i for i in comp.instructions}
        try:
            out[comp] = [by_name[n] for n in order]
        except KeyError as e:
            raise InputError(f"{path}: the schedule of {cname} names instruction {e}, which "
                             f"the computation does not have") from None
    return out


def load_executable(path, **options):
    """A CpuExecutable from a `.xlx` file, compiling nothing; options as CpuExecutable's
    (device, infeed)."""
    return SerializedExecutable(path).executable(**options)
