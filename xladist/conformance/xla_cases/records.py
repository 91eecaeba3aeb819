"""The record types of the XLA case data, and small helpers to write values compactly.

Nothing of xladist is imported. An `Array` holds its values either written out (a tuple,
repeated cyclically when shorter than the array: `full` is a one-value tuple) or as a
function that makes them (numpy allowed) -- used for the large inputs of XLA's e2e tests,
which are made from a formula or a seeded generator there too, so importing the cases stays
cheap and a runner makes only the arrays of the cases it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Array:
    """A literal: HLO element type name (`f32`, `u16`, `pred`, `bf16`, `s4`, `c64`, ...), dims,
    and either the values flat in row-major order (a tuple, repeated cyclically if shorter)
    or a function returning an array-like of `dims` (`make`)."""

    type: str
    dims: tuple[int, ...]
    values: tuple = ()
    make: Callable[[], object] | None = None

    def __post_init__(self):
        if self.make is not None:
            return
        count = 1
        for d in self.dims:
            count *= d
        if (count == 0) != (len(self.values) == 0) or (count and count % len(self.values)):
            raise ValueError(f"{self.type}{list(self.dims)} cannot be filled from "
                             f"{len(self.values)} values")


@dataclass(frozen=True)
class Case:
    """One XLA test (or one variant of a parametrized one) as a program to run on n devices.

    name: unique; XLA's test name, `/variant` for parametrized tests.
    source: the XLA file (and the revision read); test: `Fixture.TestName` there.
    module: the HLO text (XLA's module written out; the syntax XLA's parser takes is kept).
    n: devices; replica_count / num_partitions: the run configuration XLA's test used
        (HloModuleConfig), None where it was the default (n replicas) or the header's.
    inputs[d]: device d's entry arguments; expected[d]: device d's flattened result, None
        where XLA's test does not check that device (or that element).
    infeed[d] / outfeed[d]: items fed to / expected from device d, in order.
    tolerance: (rtol, atol) for floating results; None compares exactly.
    refused: xladist refuses this program on purpose (a rule stricter than XLA's, stated in
        docs/xla-compatibility.md); the text its error must contain.
    gap: a known xladist gap ("issue 30 item 6: ..."): runners expect the case to fail until
        the gap is closed.
    tags: "huge" (needs more memory than a CI machine has), ...
    """

    name: str
    source: str
    test: str
    module: str
    n: int
    inputs: tuple = ()
    expected: tuple = ()
    replica_count: int | None = None
    num_partitions: int | None = None
    infeed: tuple = ()
    outfeed: tuple = ()
    tolerance: tuple[float, float] | None = None
    refused: str | None = None
    gap: str | None = None
    note: str = ""
    tags: tuple[str, ...] = field(default=())


def _flatten(values) -> tuple[tuple, tuple[int, ...]]:
    if not isinstance(values, (list, tuple)):
        return (values,), ()
    if not values:
        return (), (0,)
    parts = [_flatten(v) for v in values]
    inner = parts[0][1]
    if any(p[1] != inner for p in parts):
        raise ValueError(f"ragged nested values: {values!r}")
    return tuple(x for p in parts for x in p[0]), (len(values), *inner)


def arr(type_: str, values, dims=None) -> Array:
    """An Array from nested lists (dims from the nesting) or flat values with `dims`.
    A bare number is a scalar."""
    flat, nested_dims = _flatten(values)
    return Array(type_, tuple(nested_dims if dims is None else dims), flat)


def full(type_: str, dims, value) -> Array:
    """Every element `value`."""
    return Array(type_, tuple(dims), (value,))


def iota(type_: str, count: int, start=0, step=1) -> Array:
    """start, start+step, ... (count values), one dimension."""
    return Array(type_, (count,), tuple(start + i * step for i in range(count)))


def made(type_: str, dims, make: Callable[[], object]) -> Array:
    """An Array whose values `make()` returns (an array-like of `dims`), made when needed."""
    return Array(type_, tuple(dims), make=make)


def each(n: int, *arrays) -> tuple:
    """The same arguments (or expected results) on every one of n devices."""
    return tuple(tuple(arrays) for _ in range(n))


def per_device(*rows) -> tuple:
    """One row per device; a row is an Array, a tuple of Arrays, or None (not checked)."""
    return tuple(r if (r is None or isinstance(r, tuple)) else (r,) for r in rows)
