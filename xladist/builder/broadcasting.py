"""XLA's implicit broadcasting for element-wise ops, as plans the builder turns into HLO.

HLO element-wise instructions require operands of one shape; the *client* (XlaBuilder)
inserts the `broadcast`/`reshape` instructions that make them so. The rules follow XLA's
broadcasting semantics page and XlaBuilder::BinaryOp / AddBroadcastSequence:

1. Same dims: nothing to do.
2. A scalar broadcasts to any shape (`broadcast(s), dimensions={}`).
3. Different ranks: `broadcast_dimensions` maps each dimension of the lower-rank operand
   to a dimension of the higher-rank one (strictly increasing, sizes equal or 1). There is
   no numpy-style right alignment: without the mapping it is an error.
4. Same rank, sizes differing only where one side is 1 ("degenerate" dimensions): the
   size-1 dimensions are reshaped away and the rest broadcast back to the result.

This module is pure (dims in, plans out) so the rules are testable without IR.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise


class BroadcastError(ValueError):
    """Operands that XLA's broadcasting rules cannot make the same shape."""


@dataclass(frozen=True)
class OperandPlan:
    """How one operand reaches the result dims.

    `reshape_to` is the operand's dims with its degenerate (size-1, broadcast) dimensions
    removed, or None when nothing is removed; `dimensions` are the result dimensions the
    remaining operand dimensions map to (the `broadcast` instruction's attribute).
    `identity` means the operand already has the result dims.
    """

    identity: bool
    reshape_to: tuple[int, ...] | None = None
    dimensions: tuple[int, ...] = ()


def _text(dims: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def plan_operand(operand: Sequence[int], out: Sequence[int],
                 mapping: Sequence[int]) -> OperandPlan:
    """The plan moving an operand whose dim i sits at result dim mapping[i] to `out`."""
    operand, out, mapping = tuple(operand), tuple(out), tuple(mapping)
    if operand == out and mapping == tuple(range(len(out))):
        return OperandPlan(identity=True)
    keep = [i for i, d in enumerate(operand) if d == out[mapping[i]]]
    # Every other dimension is degenerate (size 1 stretched); callers checked that.
    reshape_to = None
    if len(keep) != len(operand):
        reshape_to = tuple(operand[i] for i in keep)
    return OperandPlan(False, reshape_to, tuple(mapping[i] for i in keep))


def _degenerate_dims(a: tuple[int, ...], b: tuple[int, ...], what: str) -> tuple[int, ...]:
    """Result dims of same-rank operands: per dimension equal, or one side is 1."""
    out = []
    for i, (x, y) in enumerate(zip(a, b)):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise BroadcastError(
                f"{what}: dimension {i} has size {x} in one operand and {y} in the other; "
                "same-rank operands may differ only where one of them has size 1")
    return tuple(out)


def binary_plan(lhs: Sequence[int], rhs: Sequence[int],
                broadcast_dimensions: Sequence[int] | None = None, *,
                what: str = "binary op", lhs_text: str | None = None,
                rhs_text: str | None = None):
    """(result dims, lhs plan, rhs plan) for an element-wise binary op.

    `what` names the op in error messages, `lhs_text`/`rhs_text` the operand shapes
    (defaulting to their dims).
    """
    lhs, rhs = tuple(lhs), tuple(rhs)
    lt = lhs_text or _text(lhs)
    rt = rhs_text or _text(rhs)
    where = f"{what} of {lt} and {rt}"
    bd = tuple(broadcast_dimensions) if broadcast_dimensions is not None else ()

    if len(lhs) == len(rhs):
        if bd and bd != tuple(range(len(lhs))):
            raise BroadcastError(
                f"{where}: broadcast_dimensions={bd} must be empty or the identity when both "
                "operands have the same rank")
        out = _degenerate_dims(lhs, rhs, where)
        ident = tuple(range(len(out)))
        return out, plan_operand(lhs, out, ident), plan_operand(rhs, out, ident)

    lhs_small = len(lhs) < len(rhs)
    small, large = (lhs, rhs) if lhs_small else (rhs, lhs)
    if not small:
        # A scalar broadcasts to anything; a mapping, if given, must be empty.
        if bd:
            raise BroadcastError(f"{where}: broadcast_dimensions={bd} given for a scalar "
                                 "operand; it must be empty")
        mapping = ()
    else:
        if broadcast_dimensions is None or not bd:
            raise BroadcastError(
                f"{where}: operands of different ranks need broadcast_dimensions mapping each "
                f"of the {len(small)} dimensions of the lower-rank operand to a dimension of "
                f"the rank-{len(large)} operand (e.g. broadcast_dimensions="
                f"{tuple(range(len(large) - len(small), len(large)))}); XLA does not align "
                "trailing dimensions implicitly")
        if len(bd) != len(small):
            raise BroadcastError(
                f"{where}: broadcast_dimensions={bd} has {len(bd)} entries but the lower-rank "
                f"operand has rank {len(small)}")
        for d in bd:
            if not 0 <= d < len(large):
                raise BroadcastError(
                    f"{where}: broadcast dimension {d} is out of range for the rank-"
                    f"{len(large)} operand")
        for a, b in pairwise(bd):
            if b <= a:
                raise BroadcastError(
                    f"{where}: broadcast_dimensions={bd} must be strictly increasing "
                    f"({b} comes after {a})")
        mapping = bd
    out = list(large)
    for i, d in enumerate(mapping):
        s, l_ = small[i], large[d]
        if s == l_ or s == 1:
            continue
        if l_ == 1:
            out[d] = s
        else:
            raise BroadcastError(
                f"{where}: dimension {i} (size {s}) of the lower-rank operand is mapped to "
                f"dimension {d} (size {l_}) by broadcast_dimensions={bd}; sizes must be equal "
                "or one of them 1")
    out = tuple(out)
    small_plan = plan_operand(small, out, mapping)
    large_plan = plan_operand(large, out, tuple(range(len(large))))
    if lhs_small:
        return out, small_plan, large_plan
    return out, large_plan, small_plan


def nary_plan(operands: Sequence[Sequence[int]], *, what: str = "op",
              texts: Sequence[str] | None = None):
    """(result dims, plans) for select/clamp-like ops: scalars broadcast, the non-scalar
    operands must have one rank and may differ in degenerate dimensions only."""
    operands = [tuple(o) for o in operands]
    texts = list(texts) if texts is not None else [_text(o) for o in operands]
    where = f"{what} of " + ", ".join(texts)
    arrays = [o for o in operands if o]
    out: tuple[int, ...] = ()
    if arrays:
        ranks = {len(o) for o in arrays}
        if len(ranks) > 1:
            raise BroadcastError(f"{where}: non-scalar operands must have the same rank")
        out = arrays[0]
        for o in arrays[1:]:
            out = _degenerate_dims(out, o, where)
    plans = [plan_operand(o, out, () if not o else tuple(range(len(o)))) for o in operands]
    return out, plans
