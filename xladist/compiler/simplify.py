"""Pass 1b: algebraic rewrites on the flattened computation (a small part of
XLA's AlgebraicSimplifier + layout assignment, only what the planner needs).

  transpose(dot(a, b)) with one free dim per side and no batch dims
      -> dot(b, a) written directly in row-major order.
    Unoptimized JAX HLO expresses weight gradients this way with a `{0,1}`
    layout that makes the transpose free but leaves every consumer reading the
    product column-wise; computing the swapped product keeps them unit-stride.
    The rewrite changes the transpose's layout ({0,1} -> {1,0}), so it is made only
    when every user reads its operand logically, through the operand's own layout
    (LOGICAL_READERS). A tuple, a bitcast, a collective or a call boundary passes the
    bytes on under the layout its own shape declares: the JAX weight gradient returned
    straight in the root tuple came back transposed before this rule.
"""

from __future__ import annotations

from ..hlo.ir import Computation, Instruction
from ..hlo.opcodes import OPCODES
from ..hlo.shape import default_layout

REWRITES = []

# Users whose emitters index every operand through that operand's layout, so the
# operand's layout may change under them. Everything else (tuple, bitcast, collectives,
# feeds, custom calls, control flow, ...) sees the operand's bytes as they are.
LOGICAL_READERS = frozenset(
    name for name, info in OPCODES.items()
    if info.family in ("elementwise_unary", "elementwise_binary", "elementwise_ternary",
                       "compare")
) | {"convert", "dot", "reduce", "broadcast", "transpose", "slice", "concatenate", "pad",
     "reverse", "dynamic-slice"}


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
        if comp.root is t or any(u.opcode not in LOGICAL_READERS for u in users[t]):
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


def layouts_differ(a, b) -> bool:
    """Whether values of shapes `a` and `b` (the same dims) lie differently in memory: an
    array of rank 2 or more with another minor_to_major, or any such leaf of a tuple."""
    if a.is_tuple:
        return b.is_tuple and any(layouts_differ(x, y)
                                  for x, y in zip(a.tuple_shapes, b.tuple_shapes))
    return a.is_array and b.is_array and a.rank > 1 \
        and a.minor_to_major() != b.minor_to_major()


def relaid(value: Instruction, shape, name: str) -> list[Instruction]:
    """The instructions, in order, that give `value` in the layouts of `shape` (its last
    is that value): an array copied, a tuple rebuilt from its elements relaid, at every
    depth; none where the layouts agree. XLA's layout assignment adds the same copies."""
    if not layouts_differ(value.shape, shape):
        return []
    if not shape.is_tuple:
        return [Instruction(f"{name}.relayout", "copy", shape, [value], {})]
    new, parts = [], []
    for i, s in enumerate(shape.tuple_shapes):
        g = Instruction(f"{name}.gte.{i}", "get-tuple-element", value.shape.tuple_shapes[i],
                        [value], {"index": i})
        sub = relaid(g, s, f"{name}.{i}")
        new += [g] + sub
        parts.append(sub[-1] if sub else g)
    new.append(Instruction(f"{name}.relayout", "tuple", shape, parts, {}))
    return new


def _relayout(comp: Computation, op: Instruction, shape, name: str, at: int,
              origin: Instruction, users) -> Instruction:
    """`op` in `shape`'s layouts (`relaid`), its instructions placed from index `at` of
    the computation's (errors name `origin`, the instruction that asked for them)."""
    new = relaid(op, shape, name)
    for k, c in enumerate(new):
        c.line = origin.line
        c.parent = comp
        comp.instructions.insert(at + k, c)
        users[c] = []
        for o in c.operands:
            users.setdefault(o, []).append(c)
        if hasattr(comp, "original_of") and origin in comp.original_of:
            comp.original_of[c] = comp.original_of[origin]
    return new[-1] if new else op


def passed_on(t: Instruction):
    """The shape of the bytes an instruction hands on as its value when that value is an
    operand's, or an element of it, unchanged (buffers.py gives it the operand's slots):
    a get-tuple-element's element, an opt-barrier's, domain's, add-dependency's or
    async-update's operand, an async-done's result part of its start, a copy-done's
    destination. None for every other instruction."""
    op = t.opcode
    src = t.operands[0].shape if t.operands else None
    if op == "get-tuple-element":
        return src.tuple_shapes[int(t.attrs["index"])] if src.is_tuple else None
    if op in ("opt-barrier", "domain", "add-dependency", "async-update"):
        return src
    if op in ("async-done", "copy-done") and src.is_tuple:
        return src.tuple_shapes[1 if op == "async-done" else 0]
    return None


def _branches(t: Instruction) -> list:
    a = t.attrs
    if "branch_computations" in a:
        return list(a["branch_computations"])
    return [a["true_computation"], a["false_computation"]]


@rewrite
def _branch_operand_layouts(comp: Computation, users) -> None:
    """A conditional's operand in its branch's parameter layouts. JAX's text passes a
    branch a gradient in the layout a transpose left it (`(f32[8,2]{0,1}, ...)` into a
    branch whose parameter is `(f32[8,2]{1,0}, ...)`: `lax.cond` after `jax.grad`); XLA's
    layout assignment copies it there, and so does this (`relaid`). Before, the cpu
    backend relaid the bytes in Python at each run and `xladist aot` refused the module
    ("a branch takes or returns another layout")."""
    for t in list(comp.instructions):
        if t.opcode != "conditional":
            continue
        ops = list(t.operands)
        for k, branch in enumerate(_branches(t)):
            op, want = ops[k + 1], branch.parameters[0].shape if branch.parameters else None
            if want is not None and layouts_differ(op.shape, want):
                ops[k + 1] = _relayout(comp, op, want, f"{op.name}.relayout.{t.name}.{k}",
                                       comp.instructions.index(t), t, users)
                users[ops[k + 1]].append(t)
                users[op].remove(t)
        t.operands = ops


@rewrite
def _tuple_layouts(comp: Computation, users) -> None:
    """Tuples pass bytes on under the layouts their own shape declares. HLO before layout
    assignment may give a tuple element another layout than its operand's (XLA's
    algebraic simplifier leaves `(f32[2,2]{1,0}) tuple(transpose{0,1})`; its layout
    assignment then inserts a copy): the same copy here, and likewise a get-tuple-element
    (or any instruction that hands on an operand's bytes, `passed_on`: an opt-barrier, an
    async-done, ...) whose layout differs from the value it reads; at every depth of a
    nested tuple.
    Without it the bytes were read under the wrong layout (a Shardy transpose came back
    transposed; an array inside a tuple element or a tuple-valued get-tuple-element came
    back transposed until the rule reached nested tuples, and an opt-barrier's,
    add-dependency's or domain's value until it reached them)."""
    for t in list(comp.instructions):
        if t.opcode == "tuple":
            ops = list(t.operands)
            for i, (op, want) in enumerate(zip(ops, t.shape.tuple_shapes)):
                if layouts_differ(op.shape, want):
                    ops[i] = _relayout(comp, op, want, f"{op.name}.relayout.{t.name}.{i}",
                                       comp.instructions.index(t), t, users)
                    users[ops[i]].append(t)
                    users[op].remove(t)  # t now reads the copy (once per use)
            t.operands = ops
        else:
            have = passed_on(t)
            if have is not None and layouts_differ(have, t.shape):
                wanted = t.shape
                t.shape = have  # what the bytes are
                readers = list(users.get(t, []))
                c = _relayout(comp, t, wanted, f"{t.name}.relayout",
                              comp.instructions.index(t) + 1, t, users)
                for u in readers:
                    u.operands = [c if o is t else o for o in u.operands]
                    users[c].append(u)
                users[t] = [u for u in users[t] if u not in readers]
                if comp.root is t:
                    comp.root = c
