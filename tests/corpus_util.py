"""Corpus cases (tests/data/corpus/<set>/<case>/) and how their outputs are compared.

One reading of a case folder (module.hlo, case.json, inputs.npz, expected.npz) and one
comparison rule for every corpus test: dtype and dims equal; integers and preds bit-exact;
floats and complex with np.allclose under case.json's rtol/atol (a per-output `out_tol` entry,
{"rtol":..,"atol":..} or [rtol, atol], overrides), narrow floats (bf16, f16, f8) widened
exactly to f32 first; NaN equals NaN.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

CORPUS = Path(__file__).resolve().parent / "data" / "corpus"


def case_folders(*sets: str) -> list[Path]:
    """Case folders (those holding a module.hlo) of the named sets, sorted within each set."""
    found: list[Path] = []
    for s in sets:
        folder = CORPUS / s
        if folder.is_dir():
            found += sorted(p for p in folder.iterdir() if (p / "module.hlo").exists())
    return found


def meta(folder: Path) -> dict:
    return json.loads((folder / "case.json").read_text())


def inputs(folder: Path, module) -> list[np.ndarray]:
    """The entry parameters' arrays from inputs.npz (arg<parameter number>), in order."""
    with np.load(folder / "inputs.npz") as npz:
        return [npz[f"arg{p.parameter_number}"] for p in module.entry.parameters]


def expected(folder: Path) -> dict[str, np.ndarray]:
    with np.load(folder / "expected.npz") as npz:
        return {k: npz[k] for k in npz.files}


def tolerances(case_meta: dict, key: str) -> tuple[float, float]:
    """(rtol, atol) of output `key`: its `out_tol` entry if any, else the case's."""
    override = case_meta.get("out_tol", {}).get(key)
    if isinstance(override, dict):
        return override.get("rtol", case_meta["rtol"]), override.get("atol", case_meta["atol"])
    if isinstance(override, (list, tuple)):
        return float(override[0]), float(override[1])
    return case_meta["rtol"], case_meta["atol"]


def comparable(a: np.ndarray) -> np.ndarray:
    """Narrow floats widened exactly to f32 so allclose works on them; others as they are."""
    if a.dtype.name in ("bfloat16", "float16") or a.dtype.name.startswith("float8"):
        return a.astype(np.float32)
    return a


def assert_close(got, want, rtol: float, atol: float, what: str) -> None:
    """The corpus comparison rule (module docstring); `what` names case and output."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: dims {got.shape} != {want.shape}"
    got, want = comparable(got), comparable(want)
    if want.dtype.kind in "fc":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def assert_output(got, want, case_meta: dict, key: str, what: str) -> None:
    """assert_close under output `key`'s tolerances."""
    rtol, atol = tolerances(case_meta, key)
    assert_close(got, want, rtol, atol, what)
