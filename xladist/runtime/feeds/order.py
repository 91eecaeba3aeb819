"""Infeeds must be totally ordered by their tokens (docs/reference/collective-semantics.md E.22).

Host items are consumed in program order, so two infeeds of one computation that no
token (or other data or control dependency) orders could take their items in either
order: XLA's operation semantics require a total order among the infeeds, and we refuse
a module without one before anything runs, naming both instructions. Empty-tuple
infeeds take no item (E.22a) and are left out. Any schedule that respects dependencies
(the evaluator's text order, the compiler's schedule) then runs the infeeds in the one
order their tokens give, and outfeeds in the order of their tokens too.
"""

from __future__ import annotations

from xladist.errors import VerifierError

from .items import is_empty_tuple


def _ancestors(instr, memo: dict) -> frozenset:
    """Every instruction `instr` depends on (operands and control predecessors),
    transitively, computed iteratively (long token chains must not hit the recursion
    limit)."""
    if instr in memo:
        return memo[instr]
    stack = [(instr, False)]
    while stack:
        node, expanded = stack.pop()
        if node in memo:
            continue
        preds = list(node.operands) + list(getattr(node, "control_predecessors", ()) or ())
        if expanded:
            acc = set()
            for p in preds:
                acc.add(p)
                acc |= memo[p]
            memo[node] = frozenset(acc)
            continue
        stack.append((node, True))
        stack.extend((p, False) for p in preds if p not in memo)
    return memo[instr]


def check_infeed_order(module) -> None:
    """Raise VerifierError when a computation has two infeeds that no dependency orders."""
    for comp in module.computations:
        feeds = [i for i in comp.instructions
                 if i.opcode == "infeed" and not is_empty_tuple(i.shape.tuple_shapes[0])]
        if len(feeds) < 2:
            continue
        memo: dict = {}
        for a_pos, a in enumerate(feeds):
            for b in feeds[a_pos + 1:]:
                if a in _ancestors(b, memo) or b in _ancestors(a, memo):
                    continue
                raise VerifierError(
                    f"infeeds {a.name} (line {a.line}) and {b.name} (line {b.line}) are not "
                    "ordered by tokens: the host could not tell which takes the next item. "
                    "Thread the token of one into the other (XLA requires a total order "
                    "among infeeds)", computation=comp.name, instruction=b.name, line=b.line)
