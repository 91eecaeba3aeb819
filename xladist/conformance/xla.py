"""XLA's own collective tests (xladist.conformance.xla_cases) as units of the suite.

Each case of `xla_cases.CASES` (records.Case: the module, its device count and run
configuration, every device's inputs, infeed items, expected results and outfeed items,
written from XLA's test) is one unit named `xla/<case name>`. Its expected values are the
ones XLA's test states, compared exactly or within the case's tolerance. A case xladist
refuses on purpose (`refused`) passes when the error says so; a known xladist gap (`gap`)
is reported as such and does not fail the run, nor does it pass silently when it starts
working (`gap-closed`). Cases tagged "huge" run only with XLADIST_XLA_HUGE=1.

The row and column of a case in the matrix come from its module: the first collective,
channel or feed op and its operand's element type.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .checks import ERROR, FAIL, GAP, GAP_CLOSED, PASS, UNSUPPORTED, Verdict, first_difference
from .emit import ASYNC_ROW, RED_NAMES
from .groups import mode_of

PREFIX = "xla/"
HUGE_ENV = "XLADIST_XLA_HUGE"

_ROW = {"all-gather": "all-gather", "reduce-scatter": "reduce-scatter",
        "all-to-all": "all-to-all", "ragged-all-to-all": "ragged-all-to-all",
        "collective-permute": "collective-permute",
        "collective-broadcast": "collective-broadcast"}
_COLLECTIVES = ("all-reduce", *_ROW)


def cases() -> list:
    """XLA's cases, or [] when this xladist has none packaged."""
    try:
        from .xla_cases import CASES
    except ModuleNotFoundError as e:
        if e.name != f"{__package__}.xla_cases":
            raise
        return []
    return list(CASES)


def to_numpy(a) -> np.ndarray:
    """A records.Array as a numpy array of its HLO element type: its values written out
    (repeated to fill the dims) or made by its function."""
    from xladist.hlo.shape import primitive_type
    dtype = primitive_type(a.type).dtype
    if a.make is not None:
        out = np.asarray(a.make())
        return (out.astype(dtype) if out.dtype != dtype else out).reshape(a.dims)
    count = int(np.prod(a.dims, dtype=np.int64))
    values = list(a.values)
    if dtype.kind == "c":
        flat = np.array([complex(v) for v in values], dtype)
    elif dtype.kind in "biu":
        flat = np.array(values, dtype) if values else np.zeros(0, dtype)
    else:
        flat = np.array([float(v) for v in values], np.float64).astype(dtype)
    if flat.size != count:
        flat = np.resize(flat, count)
    return flat.reshape(a.dims)


def _value(item):
    return tuple(_value(x) for x in item) if isinstance(item, tuple) else to_numpy(item)


def _place(module) -> tuple[str, str, str]:
    """(row, column, group mode) of a parsed module: its first channel, feed, async or
    collective op, in that order of precedence."""
    instrs = list(module.all_instructions())
    ops = [i.opcode for i in instrs]
    if "send" in ops or "recv" in ops:
        i = next(i for i in instrs if i.opcode in ("send", "recv"))
        shape = i.shape.tuple_shapes[0]
        return "send/recv", _column(shape), "channel"
    if "infeed" in ops or "outfeed" in ops:
        i = next(i for i in instrs if i.opcode in ("infeed", "outfeed"))
        shape = i.shape.tuple_shapes[0] if i.opcode == "infeed" else i.operands[0].shape
        return "infeed/outfeed", _column(shape), "feeds"
    found = next((i for i in instrs if i.opcode.removesuffix("-start") in _COLLECTIVES), None)
    if found is None:
        return "other", "-", "-"
    op = found.opcode.removesuffix("-start")
    has_channel = found.attrs.get("channel_id") is not None
    mode = mode_of(has_channel, found.attrs.get("use_global_device_ids"),
                   op in ("all-reduce", "all-gather", "reduce-scatter"))
    column = _column(found.operands[0].shape) if found.operands else "-"
    asynchronous = found.opcode.endswith("-start") or any(
        i.opcode == "async-start" for i in instrs)
    if asynchronous:
        return ASYNC_ROW, column, mode
    if op == "all-reduce":
        root = found.attrs["to_apply"].root.opcode
        return f"all-reduce {RED_NAMES.get(root, root)}", column, mode
    if op == "all-to-all" and not found.attrs.get("dimensions"):
        return "all-to-all (tuple)", column, mode
    return _ROW[op], column, mode


def _column(shape) -> str:
    while shape.is_tuple and shape.tuple_shapes:
        shape = shape.tuple_shapes[0]
    return shape.element_type.name if shape.is_array else "-"


@dataclass
class XlaUnit:
    """One of XLA's cases as a unit (module doc)."""

    case: object

    @property
    def key(self) -> str:
        return PREFIX + self.case.name

    @property
    def n(self) -> int:
        return self.case.n

    @cached_property
    def module(self):
        from xladist.hlo.parser import parse_module
        return parse_module(self.case.module)

    @cached_property
    def cases(self) -> list:
        from .suite import CaseInfo
        try:
            row, column, mode = _place(self.module)
        except Exception:  # noqa: BLE001 - a module xladist cannot parse still gets a row
            row, column, mode = "other", "-", "-"
        return [CaseInfo(self.key, row, column, mode, self.n, self.case.source)]

    def alone(self, index: int) -> XlaUnit:
        return self

    def counts(self) -> tuple[int, int] | None:
        c = self.case
        if (c.replica_count or c.n, c.num_partitions or 1) == (c.n, 1):
            return None  # the default reading of a module without counts: n replicas
        return c.replica_count or c.n // (c.num_partitions or 1), c.num_partitions or 1

    def job(self):
        from .suite import Job
        c = self.case
        inputs = [[to_numpy(a) for a in row] for row in c.inputs] if c.inputs \
            else [[] for _ in range(c.n)]
        infeed = [[_value(item) for item in items] for items in c.infeed] if c.infeed else None
        return Job(c.module, inputs, None, infeed, self.counts(),
                   outfeed=any(i.opcode == "outfeed" for i in self.module.all_instructions()))

    def error_verdict(self, kind: str, text: str) -> list[Verdict]:
        """The verdict when every rank raised `text` (kind: "unsupported" or "error")."""
        c = self.case
        if c.refused is not None and c.refused in text:
            return [Verdict(self.key, PASS, f"refused as documented: {text}")]
        if c.gap:
            return [Verdict(self.key, GAP, f"known gap ({c.gap}): {text}")]
        return [Verdict(self.key, UNSUPPORTED if kind == UNSUPPORTED else ERROR, text)]

    def judge(self, outputs, outfeeds) -> list[Verdict]:
        c = self.case
        if c.refused is not None:
            return [Verdict(self.key, FAIL, f"ran, but xladist documents refusing it "
                                            f"({c.refused!r})")]
        problem = self._compare(outputs, outfeeds)
        if c.gap:
            return [Verdict(self.key, GAP, f"known gap ({c.gap}): {problem[1]}", problem[0])
                    if problem else Verdict(self.key, GAP_CLOSED,
                                            f"passes: the known gap ({c.gap}) seems closed")]
        if problem:
            return [Verdict(self.key, FAIL, problem[1], problem[0])]
        return [Verdict(self.key, PASS)]

    def _compare(self, outputs, outfeeds):
        from .suite import flat_items
        c = self.case
        for d, want in enumerate(c.expected):
            if want is None:
                continue
            got = outputs[d]
            if len(got) != len(want):
                return d, f"device {d}: {len(got)} results, expected {len(want)}"
            for i, w in enumerate(want):
                if w is None:
                    continue
                why = first_difference(np.asarray(got[i]), to_numpy(w), tolerance=c.tolerance)
                if why:
                    return d, f"device {d}, result {i}: {why}"
        for d, want in enumerate(c.outfeed):
            if want is None:
                continue
            got = flat_items(outfeeds[d]) if outfeeds is not None else []
            want = [to_numpy(a) for a in flat_items_records(want)]
            if len(got) != len(want):
                return d, f"device {d}: {len(got)} outfeed values, expected {len(want)}"
            for k, (g, w) in enumerate(zip(got, want)):
                why = first_difference(g, w, tolerance=c.tolerance)
                if why:
                    return d, f"device {d}, outfeed value {k}: {why}"
        return None


def flat_items_records(items) -> list:
    out = []
    for item in items:
        out.extend(flat_items_records(item) if isinstance(item, tuple) else [item])
    return out


def units(n: int, plan) -> list[XlaUnit]:
    huge = bool(os.environ.get(HUGE_ENV))
    return [XlaUnit(c) for c in cases()
            if c.n == n and plan.wants(PREFIX + c.name) and (huge or "huge" not in c.tags)]
