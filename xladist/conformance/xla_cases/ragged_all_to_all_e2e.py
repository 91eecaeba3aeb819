"""xla/tests/ragged_all_to_all_e2e_test.cc (fixtures RaggedAllToAllTest,
RaggedAllToAllMultiHostDecomposerTest), transcribed from revision 289dd9a.

A ragged-all-to-all sends rows of each replica's input to every member of its group, at
offsets and sizes given per peer. XLA's tests draw the row counts (or take them from the test),
derive the offsets, fill the rows it sends with random values, and state every replica's
output: the rows received at their offsets, -1 elsewhere (the output operand's start value).
The same construction is written here (`_ragged_data`), with a seeded generator. The GPU
variants (async or not, NCCL, decomposer, one-shot kernels) compute the same program, so each
test is one case; the multi-host decomposer tests keep their two row-count variants.
"""

from __future__ import annotations

import zlib

import numpy as np

from .records import Case, arr, full, made, per_device

SOURCE = "xla/tests/ragged_all_to_all_e2e_test.cc"
_CACHE: dict = {}


def _ragged_data(key, groups, sizes, in_dims, out_dims, dtype):
    """Per replica: (input, output start, input_offsets, send_sizes, output_offsets,
    recv_sizes) and the expected output, for `sizes[replica][member][update]` rows sent by
    `replica` to the group member at that index (XLA's CreateRandomTestData)."""
    if key in _CACHE:
        return _CACHE[key]
    n_total = sizes.shape[0]
    k = sizes.shape[2]
    inputs = [np.zeros(in_dims, np.float64) for _ in range(n_total)]
    outputs = [np.full(out_dims, -1.0) for _ in range(n_total)]
    meta = [None] * n_total
    for group in groups:
        g = len(group)
        s = np.stack([sizes[r] for r in group])                  # [member, peer, update]
        out_s = s.transpose(1, 0, 2)                              # rows member i receives
        in_off = np.concatenate([np.zeros((g, 1), np.int64),
                                 np.cumsum(s.reshape(g, -1), axis=1)[:, :-1]],
                                axis=1).reshape(g, g, k)
        recv_off = np.concatenate([np.zeros((g, 1), np.int64),
                                   np.cumsum(out_s.reshape(g, -1), axis=1)[:, :-1]],
                                  axis=1).reshape(g, g, k)
        out_off = recv_off.transpose(1, 0, 2)                     # where i's rows land at j
        for i in range(g):
            for j in range(g):
                for u in range(k):
                    rows = int(s[i, j, u])
                    seed = zlib.crc32(repr((key, group[i], j, u)).encode())
                    chunk = np.random.default_rng(seed).integers(
                        1, 127, size=(rows, *in_dims[1:])).astype(np.float64)
                    a, b = int(in_off[i, j, u]), int(out_off[i, j, u])
                    inputs[group[i]][a:a + rows] = chunk
                    outputs[group[j]][b:b + rows] = chunk
        for i in range(g):
            meta[group[i]] = (in_off[i].ravel(), s[i].ravel(), out_off[i].ravel(),
                              out_s[i].ravel())
    result = ([x.astype(dtype) for x in inputs], [y.astype(dtype) for y in outputs], meta)
    _CACHE[key] = result
    return result


def _module(type_, in_dims, out_dims, index, n_meta, groups, header=", num_partitions=1",
            in_layout="", out_layout=""):
    g = "{" + ",".join("{" + ",".join(map(str, x)) + "}" for x in groups) + "}"
    dims_in, dims_out = ",".join(map(str, in_dims)), ",".join(map(str, out_dims))
    return f"""HloModule module{header}

ENTRY entry {{
  input = {type_}[{dims_in}]{in_layout} parameter(0)
  output = {type_}[{dims_out}]{out_layout} parameter(1)
  input_offsets = {index}[{n_meta}] parameter(2)
  send_sizes = {index}[{n_meta}] parameter(3)
  output_offsets = {index}[{n_meta}] parameter(4)
  recv_sizes = {index}[{n_meta}] parameter(5)
  ROOT ra2a = {type_}[{dims_out}]{out_layout} ragged-all-to-all(input, output,
    input_offsets, send_sizes, output_offsets, recv_sizes),
    replica_groups={g}
}}
"""


def _dtype(type_):
    if type_ == "bf16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return {"f32": np.float32}[type_]


def _ragged(fixture, test, sizes, *, groups=None, type_="f32", in_dims=(4,), out_dims=None,
            index="s32", name=None, **module_kw):
    sizes = np.asarray(sizes, np.int64)
    if sizes.ndim == 2:
        sizes = sizes[:, :, None]
    n = sizes.shape[0]
    groups = groups or [list(range(n))]
    out_dims = tuple(out_dims or in_dims)
    in_dims = tuple(in_dims)
    n_meta = sizes.shape[1] * sizes.shape[2]
    key = (fixture, name or test)
    dtype = _dtype(type_)

    def data():
        return _ragged_data(key, groups, sizes, in_dims, out_dims, dtype)

    def inputs(r):
        return (made(type_, in_dims, lambda: data()[0][r]),
                full(type_, out_dims, -1),
                *[made(index, (n_meta,), lambda m=m: data()[2][r][m]) for m in range(4)])

    return Case(name=f"{fixture}.{name or test}", source=SOURCE, test=f"{fixture}.{test}",
                module=_module(type_, in_dims, out_dims, index, n_meta, groups, **module_kw),
                n=n, replica_count=n,
                inputs=per_device(*[inputs(r) for r in range(n)]),
                expected=per_device(*[made(type_, out_dims, lambda r=r: data()[1][r])
                                      for r in range(n)]))


def _random_sizes(test, shape, high):
    """Array::FillRandomUniform(0, high): row counts per (replica, peer, update)."""
    return np.random.default_rng(zlib.crc32(test.encode())).integers(0, high, size=shape)


_T = "RaggedAllToAllTest"
_M = "RaggedAllToAllMultiHostDecomposerTest"

# The S4 test states its data: the s4 values replace the random ones.
_S4_MODULE = """HloModule module, num_partitions=1

ENTRY entry {
  input = s4[4,2]{1,0:E(4)} parameter(0)
  output = s4[4,2]{1,0:E(4)} parameter(1)
  input_offsets = s32[2] parameter(2)
  send_sizes = s32[2] parameter(3)
  output_offsets = s32[2] parameter(4)
  recv_sizes = s32[2] parameter(5)
  ROOT ra2a = s4[4,2]{1,0:E(4)} ragged-all-to-all(input, output, 
    input_offsets, send_sizes, output_offsets, recv_sizes), 
    replica_groups={{0,1}}
}
"""


def _multi_host(test, rows, sizes_shape, high, groups, header=", num_partitions=1"):
    n_in, n_out = rows
    variant = ("combine" if n_in > n_out else "dispatch") + f"_{n_in}_{n_out}"
    return _ragged(_M, test, _random_sizes(f"{test}/{variant}", sizes_shape, high),
                   groups=groups, in_dims=(n_in, 5, 32), out_dims=(n_out, 5, 32),
                   name=f"{test}/{variant}", header=header)


CASES: list[Case] = [
    _ragged(_T, "RaggedAllToAll_2GPUs", [[1, 1], [3, 1]]),
    _ragged(_T, "RaggedAllToAll_2GPUs_CommandBuffer", [[1, 1], [3, 1]]),
    Case(name=f"{_T}.RaggedAllToAll_2GPUs_S4", source=SOURCE,
         test=f"{_T}.RaggedAllToAll_2GPUs_S4", module=_S4_MODULE, n=2, replica_count=2,
         inputs=per_device(
             (arr("s4", [[1, 1], [2, 2], [0, 0], [0, 0]]), full("s4", (4, 2), -1),
              arr("s32", [0, 1]), arr("s32", [1, 1]), arr("s32", [0, 0]), arr("s32", [1, 3])),
             (arr("s4", [[3, 3], [4, 4], [5, 5], [6, 6]]), full("s4", (4, 2), -1),
              arr("s32", [0, 3]), arr("s32", [3, 1]), arr("s32", [1, 1]), arr("s32", [1, 1]))),
         expected=per_device(arr("s4", [[1, 1], [3, 3], [4, 4], [5, 5]]),
                             arr("s4", [[2, 2], [6, 6], [-1, -1], [-1, -1]]))),
    _ragged(_T, "RaggedAllToAll_2GPUs_InputBufferLargerThanOutput", [[8, 5], [4, 3]],
            in_dims=(32,), out_dims=(16,)),
    _ragged(_T, "RaggedAllToAll_2GPUs_OutputBufferLargerThanInput", [[4, 12], [5, 11]],
            in_dims=(16,), out_dims=(32,)),
    _ragged(_T, "RaggedAllToAll_2GPUs_MultipleUpdates", [[[1, 2], [2, 1]], [[3, 1], [1, 1]]],
            in_dims=(8,)),
    _ragged(_T, "RaggedAllToAll_2GPUs_MultiDimData", [[4, 7], [2, 5]], type_="bf16",
            in_dims=(16, 5, 32), index="s64"),
    _ragged(_T, "RaggedAllToAll_2GPUs_Degenerate", [[[1]], [[3]]], groups=[[0], [1]],
            header=""),
    # Non-default layouts: the values are the logical arrays.
    _ragged(_T, "RaggedAllToAll_2GPUs_NonDefaultLayout", [[4, 7], [2, 5]],
            in_dims=(16, 4, 8), header="", in_layout="{0,2,1}", out_layout="{0,1,2}"),
    _ragged(_T, "RaggedAllToAll_2GPUs_DevicesInReplicaGroupInReverseOrder", [[1, 1], [3, 1]],
            groups=[[1, 0]]),
    _ragged(_T, "RaggedAllToAll_8GPUs", _random_sizes("RaggedAllToAll_8GPUs", (8, 8, 4), 10),
            in_dims=(512, 5, 32)),
    _ragged(_T, "RaggedAllToAll_8GPUs_2ReplicasPerGroup",
            _random_sizes("RaggedAllToAll_8GPUs_2ReplicasPerGroup", (8, 2, 16), 10),
            groups=[[0, 4], [1, 5], [2, 6], [3, 7]], in_dims=(512, 5, 32)),
    _ragged(_T, "RaggedAllToAll_8GPUs_4ReplicasPerGroups",
            _random_sizes("RaggedAllToAll_8GPUs_4ReplicasPerGroups", (8, 4, 8), 10),
            groups=[[0, 1, 2, 3], [4, 5, 6, 7]], in_dims=(512, 5, 32)),
    *[c for rows in ((512, 4096), (4096, 512)) for c in (
        _multi_host("RaggedAllToAll_2GPUs_SliceSize1", rows, (2, 2, 16), 10, [[0, 1]]),
        _multi_host("RaggedAllToAll_8GPUs_SliceSize4_ShuffledReplicaGroups", rows, (8, 8, 4),
                    10, [[0, 2, 4, 6, 1, 3, 5, 7]], header=""),
        _multi_host("RaggedAllToAll_8GPUs_SliceSize4", rows, (8, 8, 4), 16,
                    [list(range(8))]),
        _multi_host("RaggedAllToAll_8GPUs_SliceSize4_2ReplicaGroups", rows, (8, 4, 8), 10,
                    [[0, 2, 4, 6], [1, 3, 5, 7]]),
    )],
]

SKIPPED: dict[str, str] = {}
