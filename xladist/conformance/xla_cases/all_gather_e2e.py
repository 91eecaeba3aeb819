"""xla/tests/all_gather_e2e_test.cc (fixtures AllGatherTest, AllGatherTypesTest,
AllGatherTritonVerificationTest, AllGatherTestNoParams), transcribed from revision dbf6f65.

Every test gathers each replica's input along one dimension. XLA fills the inputs from a seed
per replica (floats in [1, 10), integers in [0, 100), random bools) and builds the expected
results by concatenating them in group order; here too, with numpy generators. The GPU
variants (async or not, Triton or NCCL) compute the same program, so each TEST_P is one case.
"""

from __future__ import annotations

import numpy as np

from .records import Case, made, per_device

SOURCE = "xla/tests/all_gather_e2e_test.cc"

_NUMPY = {"f32": np.float32, "f16": np.float16, "s32": np.int32, "s8": np.int8,
          "pred": np.bool_}


def _fill(type_: str, dims, seed: int) -> np.ndarray:
    """FillRandom in spirit: floats in [1, 10), integers in [0, 100), bools."""
    rng = np.random.default_rng(seed + 1000)
    if type_ == "pred":
        return rng.integers(0, 2, size=dims).astype(bool)
    if type_ in ("s32", "s8"):
        return rng.integers(0, 100, size=dims).astype(_NUMPY[type_])
    values = rng.uniform(1.0, 10.0, size=dims)
    if type_ == "bf16":
        import ml_dtypes
        return values.astype(np.float32).astype(ml_dtypes.bfloat16)
    return values.astype(_NUMPY[type_])


def _gather_case(fixture, test, type_, in_dims, dim, groups, n, name=None, tolerance=None):
    """An all-gather of `in_dims` along `dim` within `groups` on n replicas."""
    out_dims = list(in_dims)
    out_dims[dim] *= len(groups[0])
    group_text = "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in groups) + "}"
    module = f"""HloModule test

ENTRY test_computation {{
  param_0 = {type_}[{",".join(map(str, in_dims))}] parameter(0)
  ROOT all-gather = {type_}[{",".join(map(str, out_dims))}] all-gather(param_0),
    replica_groups={group_text}, dimensions={{{dim}}}
}}
"""
    group_of = {r: g for g in groups for r in g}

    def expected(r):
        return np.concatenate([_fill(type_, in_dims, s) for s in group_of[r]], axis=dim)

    return Case(name=f"{fixture}.{name or test}", source=SOURCE, test=f"{fixture}.{test}",
                module=module, n=n, replica_count=n, tolerance=tolerance,
                inputs=per_device(*[made(type_, in_dims, lambda r=r: _fill(type_, in_dims, r))
                                    for r in range(n)]),
                expected=per_device(*[made(type_, out_dims, lambda r=r: expected(r))
                                      for r in range(n)]))


def _shape(rank: int) -> list[int]:
    """AllGatherTestParams::GetShape: 1024 elements, leading dims of size `rank`."""
    if rank <= 1:
        return [1024]
    dims, total = [], 1024
    for _ in range(rank - 1):
        dims.append(rank)
        total //= rank
    return dims + [total]


_ALL8 = [list(range(8))]
_PAIRS8 = [[0, 4], [1, 5], [2, 6], [3, 7]]

CASES: list[Case] = [
    *[_gather_case("AllGatherTypesTest", "SupportedTypes2GPUs", t, [1024], 0, [[0, 1]], 2,
                   name=f"SupportedTypes2GPUs/{t}") for t in ("f32", "f16", "bf16", "s32", "s8",
                                                             "pred")],
    _gather_case("AllGatherTest", "F32_8GPUs_AllReplicasOneGroup", "f32", [1024], 0, _ALL8, 8,
                 tolerance=(1e-5, 1e-5)),
    _gather_case("AllGatherTest", "F32_8GPUs_2ReplicasPerGroup", "f32", [1024], 0, _PAIRS8, 8),
    _gather_case("AllGatherTest", "F32TwoD4GPUs", "f32", _shape(2), 0, [[0, 1, 2, 3]], 4,
                 tolerance=(1e-5, 1e-5)),
    _gather_case("AllGatherTest", "F32_3D_2GPUs", "f32", _shape(3), 0, [[0, 1]], 2,
                 tolerance=(1e-5, 1e-5)),
    _gather_case("AllGatherTest", "F32_3D_2GPUs_PowerOf2", "f32", [8, 8, 16], 0, [[0, 1]], 2,
                 tolerance=(1e-5, 1e-5)),
    _gather_case("AllGatherTest", "F32TwoD4GPUs_Dim1", "f32", [32, 32], 1, [[0, 1, 2, 3]], 4,
                 tolerance=(1e-5, 1e-5)),
    _gather_case("AllGatherTest", "F32_3D_2GPUs_Dim1", "f32", [8, 8, 16], 1, [[0, 1]], 2,
                 tolerance=(1e-5, 1e-5)),
    _gather_case("AllGatherTest", "F32_3D_2GPUs_Dim2", "f32", [8, 8, 16], 2, [[0, 1]], 2,
                 tolerance=(1e-5, 1e-5)),
    _gather_case("AllGatherTest", "BF16_1024Elements_2GPUs", "bf16", [1024], 0, [[0, 1]], 2,
                 tolerance=(1e-3, 1e-3)),
    _gather_case("AllGatherTest", "BF16_1024Elements_4GPUs", "bf16", [1024], 0,
                 [[0, 1, 2, 3]], 4, tolerance=(1e-3, 1e-3)),
    _gather_case("AllGatherTest", "BF16_1024Elements_8GPUs", "bf16", [1024], 0, _ALL8, 8,
                 tolerance=(1e-3, 1e-3)),
]

SKIPPED = {
    "AllGatherTritonVerificationTest.TritonActuallyRuns_BF16_1024Elements_2GPUs":
        "GPU: checks from the log that the Triton all-gather kernel ran (its program and "
        "values are AllGatherTest.BF16_1024Elements_2GPUs's)",
    "AllGatherTritonVerificationTest.NcclFallbackWarningEmitted_NonAlignedShape_2GPUs":
        "GPU: checks the Triton-to-NCCL fallback warning (its program and values are "
        "AllGatherTest.F32_3D_2GPUs's)",
    "AllGatherTestNoParams.AsyncAllGather_F8E4M3FN_2GPUs":
        "GPU: FP8 all-gather on Hopper / ROCm FP8; compares an f16 program with an f8 one",
}
