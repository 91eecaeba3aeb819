"""Shape rules of collectives, point-to-point channels, feeds, tokens and device ids
(docs/reference/collective-semantics.md C.10-C.17, D.18, E.21, F.23; operation semantics AllReduce,
AllGather, ReduceScatter, AllToAll, CollectivePermute, Send/Recv, Infeed/Outfeed, AfterAll).

Shape inference sees only the instruction, not the module, so the group size of all-gather,
reduce-scatter and all-to-all comes from explicit replica_groups; with `replica_groups={}` it
depends on the device count and the declared shape is checked for divisibility only (the
verifier checks the exact size against replica_count / num_partitions).
"""

from __future__ import annotations

from ..collective_groups import has_global_ids_flag
from ..reducers import retyped
from ..shape import Shape
from .base import (U32, ShapeError, attr, expect_array, expect_count,
                                   expect_token, fmt, fmt_all, fmt_dims, like, make, need_declared,
                                   program_shape, signature, tuple_or_single)

_TOKEN = Shape.token()


def explicit_group_size(op, attrs) -> int | None:
    """Devices per group when explicit groups say it alone; None when it depends on the device
    count: `{}`, or CrossReplicaAndPartition mode (channel_id without use_global_device_ids on
    all-gather / reduce-scatter / all-reduce, where each replica id brings all partitions)."""
    groups = attrs.get("replica_groups")
    if groups is None or not groups.groups:
        return None
    if (has_global_ids_flag(op) and attrs.get("channel_id") is not None
            and not attrs.get("use_global_device_ids")):
        return None
    sizes = sorted({len(g) for g in groups.groups})
    if len(sizes) > 1:
        raise ShapeError(f"replica_groups={groups.to_text()} has groups of sizes {sizes}; this "
                         "collective needs groups of one size")
    return sizes[0]


def _arrays(shapes, what="operand"):
    if not shapes:
        raise ShapeError("expects at least one operand")
    for s in shapes:
        expect_array(s, what)


def _scalar_reducer(attrs, shapes):
    """all-reduce / reduce-scatter apply one binary scalar computation (T[], T[]) -> T[] to
    every operand, T being the operand's element type."""
    comp = attrs.get("to_apply")
    params, result = program_shape(comp, "to_apply")
    for s in shapes:
        t = make(s.element_type, ())
        if len(params) != 2 or not all(p.compatible(t) for p in params) \
                or not result.compatible(t):
            if len({o.element_type for o in shapes}) == 1 and retyped(comp, s.element_type):
                # XLA:CPU widens an f8 all-reduce to f16 and keeps an f8 to_apply: the
                # reduction runs in the operand's type (xladist/hlo/reducers.py).
                continue
            raise ShapeError(f"to_apply={signature(comp)} must be a binary scalar computation "
                             f"({fmt(t)}, {fmt(t)}) -> {fmt(t)} for operand {fmt(s)}")


def _collective_dim(attrs, shapes) -> int:
    dims = tuple(attr(attrs, "dimensions"))
    if len(dims) != 1:
        raise ShapeError(f"dimensions={fmt_dims(dims)} must name exactly one dimension")
    (d,) = dims
    for s in shapes:
        if not 0 <= d < s.rank:
            raise ShapeError(f"dimension {d} is out of range for operand {fmt(s)}")
    return d


def _scaled(op, shapes, d, declared, attrs, grow: bool) -> Shape:
    """all-gather (grow) multiplies dimension d by the group size, reduce-scatter divides it."""
    n = explicit_group_size(op, attrs)
    if n is None:
        d_shape = need_declared(declared, "the group size depends on the device count (replica_"
                                "groups={} or channel_id without use_global_device_ids)")
        outs = list(d_shape.tuple_shapes) if d_shape.is_tuple else [d_shape]
        if len(outs) != len(shapes):
            raise ShapeError(f"result {fmt(d_shape)} must have one array per operand "
                             f"({fmt_all(shapes)})")
        for s, o in zip(shapes, outs):
            a, b = (o.dims[d], s.dims[d]) if grow else (s.dims[d], o.dims[d])
            others_same = o.rank == s.rank and all(
                o.dims[i] == s.dims[i] for i in range(s.rank) if i != d)
            if not others_same or b == 0 or a % b or o.element_type != s.element_type:
                raise ShapeError(f"result {fmt(o)} and operand {fmt(s)} must differ only in "
                                 f"dimension {d}, by a whole factor (the group size)")
        return d_shape
    outs = []
    for s in shapes:
        dims = list(s.dims)
        if grow:
            dims[d] *= n
        elif dims[d] % n:
            raise ShapeError(f"dimension {d} of operand {fmt(s)} (size {dims[d]}) is not "
                             f"divisible by the group size {n}")
        else:
            dims[d] //= n
        outs.append(make(s.element_type, dims))
    return tuple_or_single(outs)


def all_reduce(op, shapes, attrs, declared):
    _arrays(shapes)
    _scalar_reducer(attrs, shapes)
    return tuple_or_single([like(s) for s in shapes])


def all_reduce_done(op, shapes, attrs, declared):
    expect_count(shapes, 1)
    return shapes[0]


def all_gather(op, shapes, attrs, declared):
    _arrays(shapes)
    return _scaled(op, shapes, _collective_dim(attrs, shapes), declared, attrs, grow=True)


def all_gather_start(op, shapes, attrs, declared):
    """(operand(s), gathered result(s)); done returns element 1."""
    _arrays(shapes)
    inner = None
    if declared is not None:
        if not declared.is_tuple or len(declared.tuple_shapes) != 2:
            raise ShapeError(f"result must be (operands, results), got {fmt(declared)}")
        inner = declared.tuple_shapes[1]
    result = _scaled(op, shapes, _collective_dim(attrs, shapes), inner, attrs, grow=True)
    return Shape.tuple_of([tuple_or_single(list(shapes)), result])


def element_1(op, shapes, attrs, declared):
    """all-gather-done / collective-permute-done: the result half of the start's state."""
    expect_count(shapes, 1)
    (s,) = shapes
    if not s.is_tuple or len(s.tuple_shapes) < 2:
        raise ShapeError(f"operand must be the start instruction's tuple, got {fmt(s)}")
    return s.tuple_shapes[1]


def reduce_scatter(op, shapes, attrs, declared):
    _arrays(shapes)
    _scalar_reducer(attrs, shapes)
    return _scaled(op, shapes, _collective_dim(attrs, shapes), declared, attrs, grow=False)


def all_to_all(op, shapes, attrs, declared):
    """Array form (dimensions={d}, one operand): same shape, d divisible by the group size.
    Tuple form (no dimensions): N same-shape operands -> a tuple of N arrays."""
    _arrays(shapes)
    dims = attrs.get("dimensions")
    n = explicit_group_size(op, attrs)
    if dims:
        expect_count(shapes, 1)
        d = _collective_dim(attrs, shapes)
        x = shapes[0]
        if n is not None and x.dims[d] % n:
            raise ShapeError(f"dimension {d} of operand {fmt(x)} (size {x.dims[d]}) is not "
                             f"divisible by the group size {n}")
        return like(x)
    for s in shapes:
        if not s.compatible(shapes[0]):
            raise ShapeError(f"the tuple form needs operands of one shape, got {fmt_all(shapes)}")
    if n is not None and len(shapes) != n:
        raise ShapeError(f"the tuple form needs one operand per group member ({n}), got "
                         f"{len(shapes)}")
    return Shape.tuple_of(list(shapes))


def ragged_all_to_all(op, shapes, attrs, declared):
    """(input, output, input_offsets, send_sizes, output_offsets, recv_sizes) -> output."""
    expect_count(shapes, 6)
    _arrays(shapes)
    x, out = shapes[0], shapes[1]
    if x.element_type != out.element_type or x.rank != out.rank or x.dims[1:] != out.dims[1:]:
        raise ShapeError(f"input {fmt(x)} and output {fmt(out)} must agree in element type "
                         "and in every dimension but the first")
    meta = shapes[2:]
    for s in meta:
        if not s.element_type.is_integer or s.element_type != meta[0].element_type \
                or s.dims != meta[0].dims:
            raise ShapeError(f"offsets and sizes must be integer arrays of one shape and type, "
                             f"got {fmt_all(meta)}")
    # rank 1 [n*k], or rank 2 [n, k]: k updates per peer (XLA's verifier allows both).
    if meta[0].rank not in (1, 2):
        raise ShapeError(f"offsets and sizes must have rank 1 or 2, got {fmt(meta[0])}")
    return like(out)


def collective_broadcast(op, shapes, attrs, declared):
    _arrays(shapes)
    return tuple_or_single([like(s) for s in shapes])


def in_place_permute(shapes, attrs) -> bool:
    """A collective-permute(-start) in the 4-operand in-place form: slice_sizes given, or
    tuples of start indices (the verifier refuses it: xladist does not run it)."""
    return attrs.get("slice_sizes") is not None or (len(shapes) == 4 and shapes[2].is_tuple)


def collective_permute(op, shapes, attrs, declared):
    """One operand -> its shape; the in-place form (input, output, input offsets, output
    offsets with slice_sizes) -> the output's shape; several plain operands -> a tuple."""
    if not shapes:
        raise ShapeError("expects at least one operand")
    if in_place_permute(shapes, attrs):
        expect_count(shapes, 4)
        return shapes[1]
    _arrays(shapes)
    return tuple_or_single([like(s) for s in shapes])


def collective_permute_start(op, shapes, attrs, declared):
    """(input, output, contexts...) where output has the input's shape (or the in-place
    form's output operand); the combined form of several operands is ((inputs), (outputs)).
    The contexts are what the declared shape lists after those two - none, or XLA's printed
    u32[], u32[] - as in XLA's InferCollectivePermuteStartShape, which takes them from the
    declared shape; without one, the single-operand forms get the two u32[] (hlo_parser_test.cc
    CombinedCollectivePermuteStartAndDone: the combined form has none)."""
    u = make(U32, ())
    contexts = None
    if declared is not None and declared.is_tuple and len(declared.tuple_shapes) >= 2:
        contexts = list(declared.tuple_shapes[2:])
    if in_place_permute(shapes, attrs):
        expect_count(shapes, 4)
        return Shape.tuple_of([shapes[0], shapes[1], *([u, u] if contexts is None else contexts)])
    _arrays(shapes)
    if len(shapes) > 1:
        x = Shape.tuple_of([like(s) for s in shapes])
        return Shape.tuple_of([x, x, *(contexts or [])])
    x = like(shapes[0])
    return Shape.tuple_of([x, x, *([u, u] if contexts is None else contexts)])


def copy_start(op, shapes, attrs, declared):
    """(destination, source, u32[] context); copy-done returns the destination."""
    expect_count(shapes, 1)
    return Shape.tuple_of([shapes[0], shapes[0], make(U32, ())])


def copy_done(op, shapes, attrs, declared):
    expect_count(shapes, 1)
    (s,) = shapes
    if not s.is_tuple or len(s.tuple_shapes) != 3:
        raise ShapeError(f"operand must be a copy-start's (dest, src, u32[]), got {fmt(s)}")
    return s.tuple_shapes[0]


def send(op, shapes, attrs, declared):
    expect_count(shapes, 2)
    data, token = shapes
    expect_token(token, "operand 1")
    return Shape.tuple_of([data, make(U32, ()), _TOKEN])


def _p2p_state(shapes, role):
    expect_count(shapes, 1)
    (s,) = shapes
    if not (s.is_tuple and len(s.tuple_shapes) == 3 and s.tuple_shapes[2].is_token
            and s.tuple_shapes[1].compatible(make(U32, ()))):
        raise ShapeError(f"operand must be a {role}'s (data, u32[], token[]), got {fmt(s)}")
    return s


def send_done(op, shapes, attrs, declared):
    _p2p_state(shapes, "send")
    return _TOKEN


def recv(op, shapes, attrs, declared):
    expect_count(shapes, 1)
    expect_token(shapes[0], "operand")
    d = need_declared(declared, "the received data's shape is only in the result shape")
    if not (d.is_tuple and len(d.tuple_shapes) == 3 and d.tuple_shapes[2].is_token
            and d.tuple_shapes[1].compatible(make(U32, ()))):
        raise ShapeError(f"result must be (data, u32[], token[]), got {fmt(d)}")
    return d


def recv_done(op, shapes, attrs, declared):
    s = _p2p_state(shapes, "recv")
    return Shape.tuple_of([s.tuple_shapes[0], _TOKEN])


def infeed(op, shapes, attrs, declared):
    expect_count(shapes, 1)
    expect_token(shapes[0], "operand")
    d = need_declared(declared, "the fed data's shape is only in the result shape")
    if not (d.is_tuple and len(d.tuple_shapes) == 2 and d.tuple_shapes[1].is_token):
        raise ShapeError(f"result must be (data, token[]), got {fmt(d)}")
    return d


def outfeed(op, shapes, attrs, declared):
    expect_count(shapes, 2)
    data, token = shapes
    expect_token(token, "operand 1")
    declared_data = attrs.get("outfeed_shape")
    if declared_data is not None and not declared_data.compatible(data):
        raise ShapeError(f"outfeed_shape={fmt(declared_data)} must equal the operand's shape "
                         f"{fmt(data)}")
    return _TOKEN


def after_all(op, shapes, attrs, declared):
    """token[] whatever the operands: XLA's verifier takes any operand (an ordering edge,
    `after-all(%neg)` in hlo_parser_test.cc AddDependency / AfterAllWithMultipleOperands)."""
    return _TOKEN


def add_dependency(op, shapes, attrs, declared):
    expect_count(shapes, 2)
    expect_token(shapes[1], "operand 1")
    return shapes[0]


def device_id(op, shapes, attrs, declared):
    expect_count(shapes, 0)
    return make(U32, ())


RULES = {
    "all-reduce": all_reduce,
    "all-reduce-start": all_reduce,
    "all-reduce-done": all_reduce_done,
    "all-gather": all_gather,
    "all-gather-start": all_gather_start,
    "all-gather-done": element_1,
    "reduce-scatter": reduce_scatter,
    "all-to-all": all_to_all,
    "ragged-all-to-all": ragged_all_to_all,
    "collective-broadcast": collective_broadcast,
    "collective-permute": collective_permute,
    "collective-permute-start": collective_permute_start,
    "collective-permute-done": element_1,
    "copy-start": copy_start,
    "copy-done": copy_done,
    "send": send,
    "send-done": send_done,
    "recv": recv,
    "recv-done": recv_done,
    "infeed": infeed,
    "outfeed": outfeed,
    "after-all": after_all,
    "add-dependency": add_dependency,
    "replica-id": device_id,
    "partition-id": device_id,
}
