"""Pass 1b: algebraic rewrites on the flattened computation (a small part of
XLA's AlgebraicSimplifier + layout assignment, only what the planner needs).

  transpose(dot(a, b)) with one free dim per side and no batch dims
      -> dot(b, a) written directly in row-major order.
    Unoptimized JAX HLO expresses weight gradients this way with a `{0,1}`
    layout that makes the transpose free but leaves every consumer reading the
    product column-wise; computing the swapped product keeps them unit-stride.
"""

from __future__ import annotations

from ..hlo.ir import Computation, Instruction
from ..hlo.shape import default_layout

REWRITES = []


def rewrite(fn):
    REWRITES.append(fn)
    return fn


def simplify(comp: Computation) -> None:
    users: dict[Instruction, list[Instruction]] = {i: [] for i in comp.instructions}
    for i in comp.instructions:
        for op in i.operands:
            users[op].append(i)
    for fn in REWRITES:
        fn(comp, users)


def _replace(comp: Computation, old: Instruction, new: Instruction, users) -> None:
    for u in users.get(old, []):
        u.operands = [new if o is old else o for o in u.operands]
    if comp.root is old:
        comp.root = new
    idx = comp.instructions.index(old)
    comp.instructions[idx] = new
    new.parent = comp
    if hasattr(comp, "original_of") and old in comp.original_of:
        comp.original_of[new] = comp.original_of[old]


@rewrite
def _transpose_of_dot(comp: Computation, users) -> None:
    for t in list(comp.instructions):
        if t.opcode != "transpose" or tuple(t.attrs["dimensions"]) != (1, 0):
            continue
        d = t.operands[0]
        if d.opcode != "dot" or len(users[d]) != 1 or d.shape.rank != 2:
            continue
        a = d.attrs
        if a.get("lhs_batch_dims") or a.get("rhs_batch_dims"):
            continue
        lhs, rhs = d.operands
        if len(a.get("lhs_contracting_dims", ())) != 1 or lhs.shape.rank != 2 \
                or rhs.shape.rank != 2:
            continue
        if any(u.opcode == "bitcast" for u in users[t]) or comp.root is t:
            continue
        attrs = dict(a)
        attrs["lhs_contracting_dims"] = tuple(a["rhs_contracting_dims"])
        attrs["rhs_contracting_dims"] = tuple(a["lhs_contracting_dims"])
        if "operand_precision" in a:
            attrs["operand_precision"] = tuple(reversed(a["operand_precision"]))
        shape = t.shape.with_layout(default_layout(2))
        new = Instruction(t.name, "dot", shape, [rhs, lhs], attrs)
        new.line = t.line
        comp.instructions.remove(d)
        _replace(comp, t, new, users)
        users[new] = users.pop(t, [])
