"""Shape rules of data-movement ops (operation semantics: Broadcast, Reshape, Transpose, Rev,
ConcatInDim, Slice, DynamicSlice, DynamicUpdateSlice, Pad, Iota, Gather, Scatter, Tuple,
GetTupleElement, GetDimensionSize)."""

from __future__ import annotations

from ..shape import Shape
from .base import (S32, ShapeError, attr, check_dim_list, check_permutation,
                                   check_reducer, expect_array, expect_count, expect_scalar, fmt,
                                   fmt_all, fmt_dims, like, make, need_declared, tuple_or_single)


def broadcast(op, shapes, attrs, declared):
    """Operand dimension i becomes result dimension dimensions[i]; the other result
    dimensions are new, so their sizes only exist in the declared shape."""
    expect_count(shapes, 1)
    (x,) = shapes
    expect_array(x, "operand")
    dims = tuple(attr(attrs, "dimensions"))
    if len(dims) != x.rank:
        raise ShapeError(f"dimensions={fmt_dims(dims)} must list one result dimension per "
                         f"operand dimension of {fmt(x)}")
    d = need_declared(declared, "the sizes of the new dimensions are only in the result shape")
    if not d.is_array or d.element_type != x.element_type:
        raise ShapeError(f"result {fmt(d)} must be an array of the operand's element type "
                         f"({fmt(x)})")
    check_dim_list(dims, d.rank, "dimensions", d)
    for i, r in enumerate(dims):
        if d.dims[r] != x.dims[i]:
            raise ShapeError(f"operand {fmt(x)} dimension {i} has size {x.dims[i]} but result "
                             f"{fmt(d)} dimension {r} has size {d.dims[r]} "
                             f"(dimensions={fmt_dims(dims)})")
    return d


def reshape(op, shapes, attrs, declared):
    expect_count(shapes, 1)
    (x,) = shapes
    expect_array(x, "operand")
    d = need_declared(declared, "the new dimensions are only in the result shape")
    if not d.is_array or d.element_type != x.element_type:
        raise ShapeError(f"result {fmt(d)} must be an array of the operand's element type "
                         f"({fmt(x)})")
    if d.size != x.size:
        raise ShapeError(f"element counts differ: operand {fmt(x)} has {x.size}, result "
                         f"{fmt(d)} has {d.size}")
    inferred = attrs.get("inferred_dimension")
    if inferred is not None and not 0 <= inferred < d.rank:
        raise ShapeError(f"inferred_dimension={inferred} is out of range for {fmt(d)}")
    return d


def dynamic_reshape(op, shapes, attrs, declared):
    if not shapes:
        raise ShapeError("expects an operand and one s32[] size per result dimension")
    x, sizes = shapes[0], shapes[1:]
    expect_array(x, "operand")
    d = need_declared(declared, "the bounds of the new dimensions are only in the result shape")
    if len(sizes) != d.rank:
        raise ShapeError(f"result {fmt(d)} needs {d.rank} size operands, got {len(sizes)}")
    for s in sizes:
        if not (s.is_array and s.rank == 0 and s.element_type == S32):
            raise ShapeError(f"sizes must be s32[] scalars, got {fmt_all(sizes)}")
    if d.element_type != x.element_type:
        raise ShapeError(f"result {fmt(d)} must have the operand's element type ({fmt(x)})")
    return d


def transpose(op, shapes, attrs, declared):
    expect_count(shapes, 1)
    (x,) = shapes
    expect_array(x, "operand")
    perm = tuple(attr(attrs, "dimensions"))
    check_permutation(perm, x.rank, "dimensions", x)
    # Result dimension i is operand dimension perm[i].
    return make(x.element_type, [x.dims[p] for p in perm], [x.dynamic[p] for p in perm])


def reverse(op, shapes, attrs, declared):
    expect_count(shapes, 1)
    (x,) = shapes
    expect_array(x, "operand")
    check_dim_list(tuple(attr(attrs, "dimensions")), x.rank, "dimensions", x)
    return like(x)


def concatenate(op, shapes, attrs, declared):
    if not shapes:
        raise ShapeError("expects at least one operand")
    dims = tuple(attr(attrs, "dimensions"))
    if len(dims) != 1:
        raise ShapeError(f"dimensions={fmt_dims(dims)} must name exactly one dimension")
    (dim,) = dims
    first = shapes[0]
    for s in shapes:
        expect_array(s, "operand")
    if not 0 <= dim < first.rank:
        raise ShapeError(f"dimension {dim} is out of range for {fmt(first)}")
    for s in shapes[1:]:
        if s.element_type != first.element_type or s.rank != first.rank:
            raise ShapeError(f"operands must have one element type and rank, got "
                             f"{fmt_all(shapes)}")
        for i in range(first.rank):
            if i != dim and s.dims[i] != first.dims[i]:
                raise ShapeError(f"operands may differ only in dimension {dim}, but dimension "
                                 f"{i} differs: {fmt_all(shapes)}")
    out = list(first.dims)
    out[dim] = sum(s.dims[dim] for s in shapes)
    dyn = [any(s.dynamic[i] for s in shapes) for i in range(first.rank)]
    return make(first.element_type, out, dyn)


def slice_(op, shapes, attrs, declared):
    expect_count(shapes, 1)
    (x,) = shapes
    expect_array(x, "operand")
    spec = attr(attrs, "slice")
    if len(spec.dims) != x.rank:
        raise ShapeError(f"slice={spec.to_text()} has {len(spec.dims)} ranges for "
                         f"{fmt(x)} (rank {x.rank})")
    out = []
    for i, ((start, limit, stride), size) in enumerate(zip(spec.dims, x.dims)):
        if stride <= 0 or start < 0 or start > limit or limit > size:
            raise ShapeError(f"slice={spec.to_text()}: range [{start}:{limit}:{stride}] of "
                             f"dimension {i} does not fit 0 <= start <= limit <= {size} with "
                             f"stride > 0 (operand {fmt(x)})")
        out.append((limit - start + stride - 1) // stride)
    return make(x.element_type, out, [x.dynamic[i] and out[i] != 1 for i in range(x.rank)])


def _start_indices(x: Shape, indices: list[Shape]) -> None:
    """One integer scalar per operand dimension, or (old form) one rank-1 integer array.
    Messages start after the opcode, which infer_shape puts in front."""
    if len(indices) == 1 and indices[0].is_array and indices[0].rank == 1:
        idx = indices[0]
        if not idx.element_type.is_integer or idx.dims[0] != x.rank:
            raise ShapeError(f"the start-index array {fmt(idx)} must be an integer "
                             f"vector of length {x.rank} (operand {fmt(x)})")
        return
    if len(indices) != x.rank:
        raise ShapeError(f"needs {x.rank} scalar start indices for {fmt(x)}, got "
                         f"{len(indices)} ({fmt_all(indices)})")
    for s in indices:
        if not (s.is_array and s.rank == 0 and s.element_type.is_integer
                and s.element_type == indices[0].element_type):
            raise ShapeError(f"start indices must be integer scalars of one type, got "
                             f"{fmt_all(indices)}")


def dynamic_slice(op, shapes, attrs, declared):
    if not shapes:
        raise ShapeError("expects an operand and start indices")
    x, indices = shapes[0], shapes[1:]
    expect_array(x, "operand")
    _start_indices(x, indices)
    sizes = tuple(attr(attrs, "dynamic_slice_sizes"))
    if len(sizes) != x.rank:
        raise ShapeError(f"dynamic_slice_sizes={fmt_dims(sizes)} needs one size per dimension "
                         f"of {fmt(x)}")
    for i, (s, n) in enumerate(zip(sizes, x.dims)):
        if not 0 <= s <= n:
            raise ShapeError(f"dynamic_slice_sizes={fmt_dims(sizes)}: size {s} of dimension {i} "
                             f"is outside [0, {n}] (operand {fmt(x)})")
    return make(x.element_type, sizes)


def dynamic_update_slice(op, shapes, attrs, declared):
    if len(shapes) < 2:
        raise ShapeError("expects an operand, an update and start indices")
    x, upd, indices = shapes[0], shapes[1], shapes[2:]
    expect_array(x, "operand")
    expect_array(upd, "update")
    _start_indices(x, indices)
    if upd.element_type != x.element_type or upd.rank != x.rank:
        raise ShapeError(f"update {fmt(upd)} must have the operand's element type and rank "
                         f"({fmt(x)})")
    for i, (u, n) in enumerate(zip(upd.dims, x.dims)):
        if u > n:
            raise ShapeError(f"update {fmt(upd)} is larger than operand {fmt(x)} in dimension "
                             f"{i}")
    return like(x)


def pad(op, shapes, attrs, declared):
    """size = low + high + n + (n-1)*interior per dimension; edges may be negative."""
    expect_count(shapes, 2)
    x, value = shapes
    expect_array(x, "operand")
    expect_scalar(value, "padding value")
    if value.element_type != x.element_type:
        raise ShapeError(f"padding value {fmt(value)} must have the operand's element type "
                         f"({fmt(x)})")
    config = attr(attrs, "padding")
    if len(config.dims) != x.rank:
        raise ShapeError(f"padding={config.to_text()} has {len(config.dims)} dimensions for "
                         f"{fmt(x)} (rank {x.rank})")
    out = []
    for i, ((lo, hi, interior), n) in enumerate(zip(config.dims, x.dims)):
        if interior < 0:
            raise ShapeError(f"padding={config.to_text()}: interior padding of dimension {i} "
                             "must not be negative")
        size = lo + hi + n + max(n - 1, 0) * interior
        if size < 0:
            raise ShapeError(f"padding={config.to_text()} makes dimension {i} of {fmt(x)} "
                             f"negative ({size})")
        out.append(size)
    return make(x.element_type, out, x.dynamic)


def iota(op, shapes, attrs, declared):
    expect_count(shapes, 0)
    d = need_declared(declared, "iota has no operands")
    if not d.is_array or d.rank == 0:
        raise ShapeError(f"result must be an array of rank >= 1, got {fmt(d)}")
    dim = attr(attrs, "iota_dimension")
    if not 0 <= dim < d.rank:
        raise ShapeError(f"iota_dimension={dim} is out of range for {fmt(d)}")
    return d


def bitcast(op, shapes, attrs, declared):
    """A reinterpretation of the buffer: any shape with the same number of bytes."""
    expect_count(shapes, 1)
    (x,) = shapes
    expect_array(x, "operand")
    d = need_declared(declared, "a bitcast's result shape is only in the result")
    if not d.is_array:
        raise ShapeError(f"result must be an array, got {fmt(d)}")
    if d.size * d.element_type.bits != x.size * x.element_type.bits:
        raise ShapeError(f"bitcast must keep the buffer size: operand {fmt(x)} has "
                         f"{x.size * x.element_type.bits} bits, result {fmt(d)} has "
                         f"{d.size * d.element_type.bits}")
    return d


def _expanded_indices(indices: Shape, index_vector_dim: int, role: str) -> list[int]:
    """Index dims with an implicit trailing 1 when index_vector_dim == rank (gather/scatter)."""
    if not indices.is_array or not indices.element_type.is_integer:
        raise ShapeError(f"{role} indices must be an integer array, got {fmt(indices)}")
    if not 0 <= index_vector_dim <= indices.rank:
        raise ShapeError(f"index_vector_dim={index_vector_dim} must be in [0, "
                         f"{indices.rank}] for indices {fmt(indices)}")
    dims = list(indices.dims)
    if index_vector_dim == indices.rank:
        dims.append(1)
    return dims


def _sorted_unique(dims, what, bound, shape):
    check_dim_list(dims, bound, what, shape)
    if list(dims) != sorted(dims):
        raise ShapeError(f"{what}={fmt_dims(dims)} must be sorted")


def gather(op, shapes, attrs, declared):
    """Output = batch dims (index dims without index_vector_dim) interleaved with the slice's
    offset dims at offset_dims positions; collapsed and batching dims are dropped."""
    expect_count(shapes, 2)
    x, indices = shapes
    expect_array(x, "operand")
    offset_dims = tuple(attr(attrs, "offset_dims"))
    collapsed = tuple(attr(attrs, "collapsed_slice_dims"))
    start_map = tuple(attr(attrs, "start_index_map"))
    op_batch = tuple(attrs.get("operand_batching_dims") or ())
    idx_batch = tuple(attrs.get("start_indices_batching_dims") or ())
    ivd = attr(attrs, "index_vector_dim")
    sizes = tuple(attr(attrs, "slice_sizes"))
    where = (f"operand {fmt(x)}, indices {fmt(indices)}, offset_dims={fmt_dims(offset_dims)}, "
             f"collapsed_slice_dims={fmt_dims(collapsed)}, start_index_map={fmt_dims(start_map)},"
             f" index_vector_dim={ivd}, slice_sizes={fmt_dims(sizes)}")
    idims = _expanded_indices(indices, ivd, "gather")
    out_rank = len(offset_dims) + len(idims) - 1
    if any(not 0 <= d < out_rank for d in offset_dims) or len(set(offset_dims)) != len(
            offset_dims) or list(offset_dims) != sorted(offset_dims):
        raise ShapeError(f"offset_dims={fmt_dims(offset_dims)} must be sorted, unique and in "
                         f"[0, {out_rank}) (the output rank) ({where})")
    _sorted_unique(collapsed, "collapsed_slice_dims", x.rank, x)
    _sorted_unique(op_batch, "operand_batching_dims", x.rank, x)
    check_dim_list(start_map, x.rank, "start_index_map", x)
    if set(collapsed) & set(op_batch):
        raise ShapeError(f"collapsed_slice_dims and operand_batching_dims overlap ({where})")
    if len(sizes) != x.rank:
        raise ShapeError(f"slice_sizes needs one size per operand dimension ({where})")
    if len(offset_dims) + len(collapsed) + len(op_batch) != x.rank:
        raise ShapeError("every operand dimension must be an offset, collapsed or batching "
                         f"dimension ({where})")
    if len(start_map) != idims[ivd]:
        raise ShapeError(f"start_index_map has {len(start_map)} entries but indices dimension "
                         f"index_vector_dim={ivd} has size {idims[ivd]} ({where})")
    for i, (s, n) in enumerate(zip(sizes, x.dims)):
        if not 0 <= s <= n:
            raise ShapeError(f"slice size {s} of dimension {i} is outside [0, {n}] ({where})")
    for d in collapsed + op_batch:
        if sizes[d] > 1:
            raise ShapeError(f"collapsed or batching dimension {d} must have slice size <= 1, "
                             f"has {sizes[d]} ({where})")
    if len(idx_batch) != len(op_batch):
        raise ShapeError(f"operand_batching_dims={fmt_dims(op_batch)} and "
                         f"start_indices_batching_dims={fmt_dims(idx_batch)} differ in length")
    check_dim_list(idx_batch, len(idims), "start_indices_batching_dims", indices)
    if ivd in idx_batch:
        raise ShapeError(f"start_indices_batching_dims must not contain index_vector_dim={ivd}")
    for od, idd in zip(op_batch, idx_batch):
        if x.dims[od] != idims[idd]:
            raise ShapeError(f"batching dimension {od} of the operand (size {x.dims[od]}) and "
                             f"{idd} of the indices (size {idims[idd]}) differ ({where})")
    # Index batch dimensions keep their dynamic-ness, as do operand dimensions sliced whole.
    window = [(sizes[i], x.dynamic[i] and sizes[i] == x.dims[i]) for i in range(x.rank)
              if i not in collapsed and i not in op_batch]
    idyn = tuple(indices.dynamic) + (False,) * (len(idims) - indices.rank)
    batch = [(n, idyn[i]) for i, n in enumerate(idims) if i != ivd]
    out, w, b = [], iter(window), iter(batch)
    for i in range(out_rank):
        out.append(next(w) if i in offset_dims else next(b))
    return make(x.element_type, [n for n, _ in out], [dyn for _, dyn in out])


def scatter(op, shapes, attrs, declared):
    """Result = the operand(s); updates are checked against the scatter and window dims."""
    if len(shapes) < 3 or len(shapes) % 2 == 0:
        raise ShapeError(f"expects N operands, the indices and N updates (2N+1 operands), got "
                         f"{len(shapes)} ({fmt_all(shapes)})")
    n = len(shapes) // 2
    operands, indices, updates = shapes[:n], shapes[n], shapes[n + 1:]
    uwd = tuple(attr(attrs, "update_window_dims"))
    inserted = tuple(attr(attrs, "inserted_window_dims"))
    to_operand = tuple(attr(attrs, "scatter_dims_to_operand_dims"))
    in_batch = tuple(attrs.get("input_batching_dims") or ())
    idx_batch = tuple(attrs.get("scatter_indices_batching_dims") or ())
    ivd = attr(attrs, "index_vector_dim")
    idims = _expanded_indices(indices, ivd, "scatter")
    x0 = operands[0]
    for x, u in zip(operands, updates):
        expect_array(x, "operand")
        expect_array(u, "update")
        if x.dims != x0.dims:
            raise ShapeError(f"all operands must have the same dimensions, got "
                             f"{fmt_all(operands)}")
        if u.dims != updates[0].dims:
            # Every update is read at the same update index (StableHLO's scatter, C4): a
            # smaller one would be read past its end.
            raise ShapeError(f"all updates must have the same dimensions, got "
                             f"{fmt_all(updates)}")
        where = (f"operand {fmt(x)}, indices {fmt(indices)}, updates {fmt(u)}, "
                 f"update_window_dims={fmt_dims(uwd)}, inserted_window_dims={fmt_dims(inserted)},"
                 f" scatter_dims_to_operand_dims={fmt_dims(to_operand)}, index_vector_dim={ivd}")
        if u.rank != len(idims) - 1 + len(uwd):
            raise ShapeError(f"updates must have rank {len(idims) - 1 + len(uwd)} ({where})")
        _sorted_unique(uwd, "update_window_dims", u.rank, u)
        _sorted_unique(inserted, "inserted_window_dims", x.rank, x)
        _sorted_unique(in_batch, "input_batching_dims", x.rank, x)
        check_dim_list(to_operand, x.rank, "scatter_dims_to_operand_dims", x)
        if set(inserted) & set(in_batch):
            raise ShapeError(f"inserted_window_dims and input_batching_dims overlap ({where})")
        if len(uwd) + len(inserted) + len(in_batch) != x.rank:
            raise ShapeError("update_window_dims, inserted_window_dims and input_batching_dims "
                             f"must account for every operand dimension ({where})")
        if len(to_operand) != idims[ivd]:
            raise ShapeError(f"scatter_dims_to_operand_dims has {len(to_operand)} entries but "
                             f"indices dimension {ivd} has size {idims[ivd]} ({where})")
        if len(idx_batch) != len(in_batch):
            raise ShapeError(f"input_batching_dims={fmt_dims(in_batch)} and "
                             f"scatter_indices_batching_dims={fmt_dims(idx_batch)} differ in "
                             "length")
        check_dim_list(idx_batch, len(idims), "scatter_indices_batching_dims", indices)
        for od, idd in zip(in_batch, idx_batch):
            if idd == ivd or x.dims[od] != idims[idd]:
                raise ShapeError(f"batching dimension {od} of the operand and {idd} of the "
                                 f"indices do not match ({where})")
        window_bounds = [x.dims[i] for i in range(x.rank)
                         if i not in inserted and i not in in_batch]
        for k, ud in enumerate(uwd):
            if u.dims[ud] > window_bounds[k]:
                raise ShapeError(f"update window dimension {ud} has size {u.dims[ud]}, larger "
                                 f"than the operand's {window_bounds[k]} ({where})")
        scatter_bounds = [d for i, d in enumerate(idims) if i != ivd]
        update_scatter = [u.dims[i] for i in range(u.rank) if i not in uwd]
        if update_scatter != scatter_bounds:
            raise ShapeError(f"update scatter dimensions {update_scatter} must equal the "
                             f"indices' batch dimensions {scatter_bounds} ({where})")
    check_reducer(attrs.get("to_apply"), "to_apply",
                  [make(x.element_type, ()) for x in operands],
                  [u.element_type for u in updates])
    return tuple_or_single(list(operands))


def tuple_(op, shapes, attrs, declared):
    return Shape.tuple_of(shapes)


def get_tuple_element(op, shapes, attrs, declared):
    expect_count(shapes, 1)
    (t,) = shapes
    index = attr(attrs, "index")
    if not t.is_tuple:
        raise ShapeError(f"operand must be a tuple, got {fmt(t)}")
    if not 0 <= index < len(t.tuple_shapes):
        raise ShapeError(f"index={index} is out of range for {fmt(t)} "
                         f"({len(t.tuple_shapes)} elements)")
    return t.tuple_shapes[index]


def get_dimension_size(op, shapes, attrs, declared):
    expect_count(shapes, 1)
    (x,) = shapes
    expect_array(x, "operand")
    dims = tuple(attr(attrs, "dimensions"))
    if len(dims) != 1:
        raise ShapeError(f"dimensions={fmt_dims(dims)} must name exactly one dimension")
    check_dim_list(dims, x.rank, "dimensions", x)
    return make(S32, ())


def set_dimension_size(op, shapes, attrs, declared):
    expect_count(shapes, 2)
    x, size = shapes
    expect_array(x, "operand")
    dims = tuple(attr(attrs, "dimensions"))
    if len(dims) != 1:
        raise ShapeError(f"dimensions={fmt_dims(dims)} must name exactly one dimension")
    check_dim_list(dims, x.rank, "dimensions", x)
    if not (size.is_array and size.rank == 0 and size.element_type == S32):
        raise ShapeError(f"the size operand must be s32[], got {fmt(size)}")
    dyn = list(x.dynamic)
    dyn[dims[0]] = True
    return make(x.element_type, x.dims, dyn)


RULES = {
    "broadcast": broadcast,
    "reshape": reshape,
    "dynamic-reshape": dynamic_reshape,
    "transpose": transpose,
    "reverse": reverse,
    "concatenate": concatenate,
    "slice": slice_,
    "dynamic-slice": dynamic_slice,
    "dynamic-update-slice": dynamic_update_slice,
    "pad": pad,
    "iota": iota,
    "bitcast": bitcast,
    "gather": gather,
    "scatter": scatter,
    "tuple": tuple_,
    "get-tuple-element": get_tuple_element,
    "get-dimension-size": get_dimension_size,
    "set-dimension-size": set_dimension_size,
}
