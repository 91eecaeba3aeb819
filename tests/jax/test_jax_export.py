"""xladist.jax: export/run JAX functions (README "From JAX").

The pure-Python parts (mesh and spec parsing, the shard each device holds, assembling results
from meta.json, the run config, CLI argument errors) run without jax, so CI exercises them.
The parts that need jax skip, with the reason, when it is not installed; with it they lower
real functions, run them with `xladist.run` on 2 and 4 MPI ranks and compare with jax.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import xladist.jax as xj
from xladist.cli import main as cli_main
from xladist.errors import ExecutionError, InputError, UnsupportedError
from xladist.jax import folder as F
from xladist.jax import specs as S

from tests.cli_util import cli_env
from tests.optional import HAVE_JAX, JAX_MISSING
from tests.paths import ROOT

needs_jax = pytest.mark.skipif(not HAVE_JAX, reason=JAX_MISSING)
RUN_TIMEOUT = 120  # per-wait deadline of the MPI jobs these tests start


# ---- meshes and specs -----------------------------------------------------------------------

def test_parse_mesh_keeps_order():
    assert list(S.parse_mesh("model=2, data=3").items()) == [("model", 2), ("data", 3)]


@pytest.mark.parametrize("text,needle", [("data2", "axis=size"), ("data=0", "must be a whole number >= 1, got 0"),
                                         ("d=2,d=2", "twice"), ("2=2", "axis=size")])
def test_parse_mesh_errors(text, needle):
    with pytest.raises(InputError, match=needle):
        S.parse_mesh(text)


@pytest.mark.parametrize("text,spec", [
    ("data,None", (("data",), None)),
    ("P('data', None)", (("data",), None)),
    ("('data', None)", (("data",), None)),
    ("data+model", (("data", "model"),)),
    ("P(('data', 'model'), None)", (("data", "model"), None)),
    ("None, model", (None, ("model",))),
    ("()", ()),
    ("P()", ()),
])
def test_parse_spec_forms(text, spec):
    assert S.parse_spec(text) == spec


@pytest.mark.parametrize("text,needle", [("", "empty spec"), ("data,2x", "not an axis name"),
                                         ("P(data)", "Python literal"),
                                         ("P('a'", "closing parenthesis"),
                                         ("P(3)", "spec entry")])
def test_parse_spec_errors(text, needle):
    with pytest.raises(InputError, match=needle):
        S.parse_spec(text)


def test_spec_list_single_and_per_array():
    assert S.spec_list("data", 3, "in_specs") == [(("data",),)] * 3
    assert S.spec_list("data; ()", 2, "in_specs") == [(("data",),), ()]
    assert S.spec_list([None, ("a", None)], 2, "in_specs") == [(), (("a",), None)]
    with pytest.raises(InputError, match="3 specs for 2 arguments"):
        S.spec_list("a; b; c", 2, "in_specs")
    with pytest.raises(InputError, match="1 specs for 2 results"):
        S.spec_list([None], 2, "out_specs")


def test_in_specs_as_a_dict_is_refused_as_a_dict():
    """in_specs={"x": P("d")} (jax's pytree form, taken by out_specs only) was iterated as a
    list of specs: its key became the spec, refused as "in_specs[0] P('x') names mesh axis
    'x'", an axis nobody wrote (found by a JAX program sweep). Now the dict itself is
    refused, saying to give a list or a single spec."""
    with pytest.raises(InputError, match=r"in_specs is a dict \(\{'x': 'd'\}\); give one "
                                         r"spec per argument as a list, or a single spec"):
        S.spec_list({"x": "d"}, 1, "in_specs")


@pytest.mark.parametrize("spec,shape,needle", [
    ((("data",), None), (7, 4), r"splits dimension 0 \(size 7\).*into 2 shards \(data=2\)"),
    ((None, ("data", "model")), (4, 6), r"dimension 1 \(size 6\).*4 shards"),
    ((("pipe",),), (4,), "mesh axis 'pipe'"),
    ((("data",), ("data",)), (4, 4), "more than once"),
    ((None, None, None), (4, 4), "3 entries but the array has 2"),
])
def test_check_refuses(spec, shape, needle):
    with pytest.raises(InputError, match=needle):
        S.check(spec, {"data": 2, "model": 2}, shape, "in_specs[0]")


def _reference_blocks(shape, spec, mesh):
    """Each device's block, from numpy's own view of the mesh (np.unravel_index) and
    np.array_split: independent of shard_index's arithmetic."""
    names = list(mesh)
    n = int(np.prod(list(mesh.values())))
    out = []
    for d in range(n):
        coord = dict(zip(names, np.unravel_index(d, tuple(mesh.values()))))
        block = []
        for dim, size in enumerate(shape):
            axes = spec[dim] if dim < len(spec) and spec[dim] else ()
            parts = int(np.prod([mesh[a] for a in axes])) if axes else 1
            k = int(np.ravel_multi_index([coord[a] for a in axes], [mesh[a] for a in axes])) \
                if axes else 0
            pieces = np.array_split(np.arange(size), parts)[k]
            block.append([int(pieces[0]), int(pieces[-1]) + 1])
        out.append(block)
    return out


@pytest.mark.parametrize("spec", [(), (("a",),), (None, ("b",)), (("b",), ("a",)),
                                  (("a", "b"),), (("b", "a"), None), (("c",), ("a", "b"))])
def test_shard_index_matches_numpy(spec):
    mesh = {"a": 2, "b": 3, "c": 2}
    shape = (12, 6)
    got = [S.shard_index(shape, spec, mesh, d) for d in range(12)]
    assert got == _reference_blocks(shape, spec, mesh)


# ---- assembling from meta.json ----------------------------------------------------------------

def _meta(mesh, results):
    n = S.mesh_size(mesh)
    return {"num_devices": n, "outputs": [
        {"name": f"out{i}", "global_shape": list(shape), "dtype": np.dtype(dtype).name,
         "spec": S.text(spec), "index": [S.shard_index(shape, spec, mesh, d) for d in range(n)]}
        for i, (shape, dtype, spec) in enumerate(results)]}


def _cut(a, meta_out):
    return [a[tuple(slice(s, e) for s, e in blk)] for blk in meta_out["index"]]


def test_assemble_from_synthetic_shards(tmp_path):
    mesh = {"data": 2, "model": 2}
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((4, 6)).astype(np.float32),
              rng.integers(0, 9, (4, 2)).astype(np.int32),
              np.float32(2.5),
              rng.standard_normal((2, 4)).astype(ml_dtypes.bfloat16)]
    specs = [(("data",), ("model",)), (("model",),), (), (None, ("data", "model"))]
    meta = _meta(mesh, [(a.shape, a.dtype, s) for a, s in zip(arrays, specs)])
    F.write_meta(tmp_path, meta)
    shards = [_cut(a, m) for a, m in zip(arrays, meta["outputs"])]
    np.savez(tmp_path / "outputs.npz", **{
        f"out{i}": np.stack(s).view(np.uint16) if a.dtype == ml_dtypes.bfloat16
        else np.stack(s) for i, (a, s) in enumerate(zip(arrays, shards))})
    got = xj.assemble(tmp_path, tmp_path / "outputs.npz")
    for g, a in zip(got, arrays):
        assert g.dtype == a.dtype and g.shape == np.shape(a)
        assert np.array_equal(g.astype(np.float64), np.asarray(a).astype(np.float64))


def test_assemble_decodes_the_bits_npz_keeps(tmp_path):
    """outputs.npz holds bf16 as uint16 and f8/int4/f4 as uint8 bits (xladist.io.encode,
    what `xladist run --outputs` writes); assemble took only bf16 back and refused an f8 or
    int4 result ("device 0's shard is uint8[1, 8], meta.json expects float8_e5m2[1, 8])."""
    from xladist.io import encode
    mesh = {"d": 2}
    arrays = [np.linspace(-3, 3, 8).astype(ml_dtypes.float8_e5m2).reshape(2, 4),
              (np.arange(8) - 4).astype(ml_dtypes.int4).reshape(2, 4),
              np.linspace(-1, 1, 4).astype(ml_dtypes.float4_e2m1fn),
              np.linspace(-1, 1, 4).astype(ml_dtypes.bfloat16)]
    specs = [(("d",),), (None, ("d",)), (), (("d",),)]
    meta = _meta(mesh, [(a.shape, a.dtype, s) for a, s in zip(arrays, specs)])
    F.write_meta(tmp_path, meta)
    np.savez(tmp_path / "outputs.npz", **{
        f"out{i}": encode(np.stack(_cut(a, m)))
        for i, (a, m) in enumerate(zip(arrays, meta["outputs"]))})
    got = xj.assemble(tmp_path, tmp_path / "outputs.npz")
    for g, a in zip(got, arrays):
        assert g.dtype == a.dtype and g.shape == a.shape
        np.testing.assert_array_equal(g.view(np.uint8), a.view(np.uint8))


def test_replicated_copies_that_differ_are_refused():
    mesh = {"d": 2}
    meta = _meta(mesh, [((3,), np.float32, ())])
    same = [np.array([1.0, np.nan, 3.0], np.float32)] * 2
    np.testing.assert_array_equal(xj.assemble_outputs(meta, [[r] for r in same])[0], same[0])
    rows = [np.array([1.0, 2.0, 3.0], np.float32), np.array([1.0, 2.5, 3.0], np.float32)]
    with pytest.raises(ExecutionError, match=r"replicated on devices 0 and 1.*index \[1\]"):
        xj.assemble_outputs(meta, [[r] for r in rows])


def test_assemble_file_errors(tmp_path):
    meta = _meta({"d": 2}, [((4,), np.float32, (("d",),))])
    F.write_meta(tmp_path, meta)
    np.savez(tmp_path / "bad.npz", out0=np.zeros((3, 2), np.float32))
    with pytest.raises(InputError, match="leading device axis of size 2"):
        xj.assemble(tmp_path, tmp_path / "bad.npz")
    np.savez(tmp_path / "missing.npz", out1=np.zeros((2, 2), np.float32))
    with pytest.raises(InputError, match="lacks out0"):
        xj.assemble(tmp_path, tmp_path / "missing.npz")
    with pytest.raises(InputError, match="written by xladist.jax.export"):
        xj.assemble(tmp_path / "nowhere", tmp_path / "bad.npz")


def test_config_is_a_valid_run_config(tmp_path):
    from xladist.runtime import config
    (tmp_path / F.CONFIG).write_text(F.config_text(4))
    got = config.load(tmp_path / F.CONFIG)
    assert got["ranks"] == 4
    assert got["module"] == str(tmp_path / "module.hlo")
    assert got["outputs"] == str(tmp_path / "outputs.npz")


# ---- without jax: imports, errors found before jax is needed --------------------------------

def test_import_xladist_never_imports_jax():
    code = ("import sys, xladist, xladist.jax, xladist.cli.export_jax\n"
            "assert 'jax' not in sys.modules, 'jax was imported'")
    subprocess.run([sys.executable, "-c", code], check=True, env=cli_env(), timeout=60)


def test_missing_jax_is_reported(monkeypatch):
    monkeypatch.setitem(sys.modules, "jax", None)  # `import jax` now raises ImportError
    with pytest.raises(UnsupportedError, match=r"needs jax: pip install 'xladist\[jax\]'"):
        xj.export(lambda x: x, np.ones(2), mesh_shape={"d": 1}, in_specs=None,
                  out_specs=None, path="unused")


@pytest.mark.parametrize("n,needle", [(2, "has 4 devices but n=2 ranks"),
                                      (8, "n=8 ranks were requested for the mesh")])
def test_run_ranks_must_match_the_mesh(n, needle):
    with pytest.raises(InputError, match=needle):
        xj.run(lambda x: x, np.ones(4), mesh_shape={"a": 2, "b": 2}, in_specs=None,
               out_specs=None, n=n)


def test_argument_count_mismatch():
    with pytest.raises(InputError, match="2 specs for 3 arguments"):
        xj.export(lambda a, b, c: a, np.ones(2), np.ones(2), np.ones(2), mesh_shape={"d": 2},
                  in_specs=[None, None], out_specs=None, path="unused")
    with pytest.raises(InputError, match="cannot take 3 arguments"):
        xj.export(lambda a, b: a, np.ones(2), np.ones(2), np.ones(2), mesh_shape={"d": 2},
                  in_specs=None, out_specs=None, path="unused")


def _cli(capsys, *argv):
    code = cli_main(["export-jax", *map(str, argv)])
    return code, capsys.readouterr().err


@pytest.fixture
def args_npz(tmp_path):
    path = tmp_path / "args.npz"
    np.savez(path, arg0=np.ones((4, 6), np.float32), arg1=np.ones((6,), np.float32))
    return path


@pytest.mark.parametrize("argv,needle", [
    (["--mesh", "data"], "expected axis=size pairs"),
    (["--mesh", "data=2", "--in-specs", "data; data; data"], "3 specs for 2 arguments"),
    (["--mesh", "data=4", "--in-specs", "None,data; ()"], r"dimension 1 \(size 6\)"),
    (["--mesh", "data=2", "--in-specs", "data,"], "not an axis name"),
    (["--mesh", "data=2", "--in-specs", "pipe"], "mesh axis 'pipe'"),
    (["--mesh", "data=2", "--out-specs", "P(data)"], "Python literal"),
])
def test_cli_argument_errors(capsys, tmp_path, args_npz, argv, needle):
    code, err = _cli(capsys, "json:dumps", "--args", args_npz, *argv, "-o", tmp_path / "o")
    assert code == 2, err
    assert re.search(needle, err), err
    assert "Traceback" not in err


def test_cli_bad_args_file(capsys, tmp_path):
    np.savez(tmp_path / "keys.npz", x=np.ones(2))
    code, err = _cli(capsys, "json:dumps", "--args", tmp_path / "keys.npz", "--mesh", "d=2",
                     "-o", tmp_path / "o")
    assert code == 2 and "expected arrays named arg0..arg0, got x" in err, err


def test_cli_without_jax(capsys, tmp_path, args_npz, monkeypatch):
    monkeypatch.setitem(sys.modules, "jax", None)
    code, err = _cli(capsys, "json:dumps", "--args", args_npz, "--mesh", "d=2",
                     "-o", tmp_path / "o")
    assert code == 2 and "needs jax: pip install 'xladist[jax]'" in err, err


@needs_jax
def test_cli_bad_function(capsys, tmp_path, args_npz):
    code, err = _cli(capsys, "json:no_such_fn", "--args", args_npz, "--mesh", "d=2",
                     "-o", tmp_path / "o")
    assert code == 2 and "json has no attribute no_such_fn" in err, err
    code, err = _cli(capsys, "no_such_module_xyz:f", "--mesh", "d=2", "-o", tmp_path / "o")
    assert code == 2 and "cannot import no_such_module_xyz" in err, err


# ---- with jax -----------------------------------------------------------------------------------

def _readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## From JAX"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@needs_jax
@pytest.mark.slow
def test_readme_example_runs_on_4_ranks():
    """The README's data- and tensor-parallel MLP step, as written there (it compares every
    result with jax itself)."""
    code = _readme_example().replace(
        "in_specs=in_specs, out_specs=out_specs)",
        f"in_specs=in_specs, out_specs=out_specs, timeout={RUN_TIMEOUT})")
    namespace: dict = {}
    exec(compile(code, "README.md (From JAX)", "exec"), namespace)
    assert namespace["w1_new"].shape == (16, 32)


@needs_jax
@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
@pytest.mark.slow
def test_shard_map_function_on_2_ranks(backend):
    """A function that calls jax.shard_map itself (no mesh=), with a psum and a ppermute,
    compared with the same computation in numpy."""
    import jax
    from jax import lax
    from jax.sharding import PartitionSpec as P

    def body(x):
        total = lax.psum(jax.numpy.sum(x, axis=0), "d")
        return x * 2.0 + total, lax.ppermute(x, "d", [(0, 1), (1, 0)])

    def fn(x):
        return jax.shard_map(body, in_specs=P("d"), out_specs=(P("d"), P("d")))(x)

    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    scaled, swapped = xj.run(fn, x, mesh_shape={"d": 2}, in_specs=P("d"), out_specs=P("d"),
                             backend=backend, timeout=RUN_TIMEOUT)
    np.testing.assert_allclose(scaled, x * 2.0 + x.sum(axis=0), rtol=1e-6)
    np.testing.assert_array_equal(swapped, np.concatenate([x[3:], x[:3]]))


@needs_jax
def test_export_folder(tmp_path):
    """Every file: the module XLA compiled for 4 partitions, inputs cut in device order,
    meta.json blocks, expected.npz assembling to jax's own global results."""
    import jax
    from jax.sharding import PartitionSpec as P

    def fn(a, b):
        return jax.numpy.tanh(a @ b), a.sum()

    rng = np.random.default_rng(3)
    a = rng.standard_normal((8, 6)).astype(np.float32)
    b = rng.standard_normal((6, 4)).astype(np.float32)
    out = xj.export(fn, a, b, mesh_shape={"data": 2, "model": 2},
                    in_specs=[P("data", None), P(None, "model")],
                    out_specs=[P("data", "model"), P()], path=tmp_path / "ex")
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [F.MODULE, F.INPUTS, F.EXPECTED, F.CONFIG, F.META])
    import xladist
    module = xladist.load_hlo(out / F.MODULE)
    assert module.num_partitions == 4 and len(module.entry.parameters) == 2
    ins = np.load(out / F.INPUTS)
    for d in range(4):  # device d = (data d // 2, model d % 2)
        np.testing.assert_array_equal(ins["arg0"][d], a[(d // 2) * 4:(d // 2 + 1) * 4])
        np.testing.assert_array_equal(ins["arg1"][d], b[:, (d % 2) * 2:(d % 2 + 1) * 2])
    meta = F.read_meta(out)
    assert meta["outputs"][0]["index"][1] == [[0, 4], [2, 4]]
    assert meta["outputs"][0]["spec"] == "P('data', 'model')"
    got = xj.assemble(out, out / F.EXPECTED)
    want = jax.jit(fn)(a, b)
    np.testing.assert_allclose(got[0], np.asarray(want[0]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], np.asarray(want[1]), rtol=1e-5, atol=1e-5)


@needs_jax
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_typed_prng_keys_go_in_and_come_back_as_keys(tmp_path):
    """jax.random.key's typed keys, jax's recommended keys, have no numpy form: a step
    taking one was refused ("argument 0 (PRNGKeyArray) is not an array"). Now a key
    argument travels as its key data and is wrapped again inside the function, and a key
    the function returns comes back as a key; the draws are jax's, the new key bit for
    bit. In the exported folder a key is its data (uint32[..., 2] for threefry)."""
    import jax
    from jax.sharding import PartitionSpec as P

    def step(key, x):
        k1, k2 = jax.random.split(key)
        return x + jax.random.normal(k1, x.shape), k2

    key = jax.random.key(7)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    y, new_key = xj.run(step, key, x, mesh_shape={"d": 2}, in_specs=[P(), P("d")],
                        out_specs=[P("d"), P()], timeout=RUN_TIMEOUT)
    want_y, want_key = jax.jit(step)(key, x)
    assert jax.dtypes.issubdtype(new_key.dtype, jax.dtypes.prng_key)
    np.testing.assert_array_equal(jax.random.key_data(new_key), jax.random.key_data(want_key))
    np.testing.assert_allclose(y, np.asarray(want_y), rtol=1e-5, atol=1e-5)
    out = xj.export(step, key, x, mesh_shape={"d": 2}, in_specs=[P(), P("d")],
                    out_specs=[P("d"), P()], path=tmp_path / "ex")
    with np.load(out / F.INPUTS) as z:
        np.testing.assert_array_equal(z["arg0"][0], np.asarray(jax.random.key_data(key)))


@needs_jax
def test_keys_made_inside_the_function_are_results_too(tmp_path):
    """A function that takes no typed key but returns one (made from a seed, or from key
    data it wraps itself) failed in export with jax's "JAX array with PRNGKey dtype cannot
    be converted to a NumPy array" (found by a JAX program sweep). Now such a result is its
    key data as well, equal to jax's own."""
    import jax
    from jax.sharding import PartitionSpec as P

    def fn(seed, data):
        k1, k2 = jax.random.split(jax.random.wrap_key_data(data))
        return jax.random.key(seed), k2, jax.random.uniform(k1, (4,))

    seed, data = np.int32(5), np.asarray(jax.random.key_data(jax.random.key(11)))
    out = xj.export(fn, seed, data, mesh_shape={"d": 2}, in_specs=P(), out_specs=P(),
                    path=tmp_path / "ex")
    want = jax.jit(fn)(seed, data)
    got = xj.assemble(out, out / F.EXPECTED)
    np.testing.assert_array_equal(got[0], np.asarray(jax.random.key_data(want[0])))
    np.testing.assert_array_equal(got[1], np.asarray(jax.random.key_data(want[1])))
    np.testing.assert_array_equal(got[2], np.asarray(want[2]))
    assert [o["dtype"] for o in F.read_meta(out)["outputs"]] == ["uint32", "uint32", "float32"]


@needs_jax
@pytest.mark.parametrize("fn,value,jax_says", [
    (lambda x, n: x.sum() + np.zeros(3)[:n], 2, "__index__"),
    (lambda x, flag: x * 2 if flag else x, True, "TracerBoolConversionError"),
    (lambda x, act: x, "relu", "abstract array"),
])
def test_python_value_the_function_needs_static_says_bind_it(tmp_path, fn, value, jax_says):
    """Every argument is traced as an array, so a Python value used as one (a slice bound,
    an `if`, a string option) failed with jax's own error (TracerIntegerConversionError, TypeError,
    TracerBoolConversionError) about tracers and static_argnums, which cannot be used
    here (found by a JAX program sweep). Now an InputError names the argument and says to
    bind it with functools.partial, keeping jax's message."""
    import functools
    x = np.ones((4, 3), np.float32)
    with pytest.raises(InputError, match=rf"(?s){jax_says}.*argument 1 \({value!r}, a Python "
                                         rf"{type(value).__name__}\).*functools.partial"):
        xj.export(fn, x, value, mesh_shape={"d": 2}, in_specs=None, out_specs=None,
                  path=tmp_path / "ex")
    out = xj.export(functools.partial(fn, **{fn.__code__.co_varnames[1]: value}), x,
                    mesh_shape={"d": 2}, in_specs=None, out_specs=None, path=tmp_path / "ok")
    want = np.asarray(fn(x, value))
    np.testing.assert_array_equal(xj.assemble(out, out / F.EXPECTED)[0], want)


@needs_jax
def test_out_specs_as_a_dict_shaped_like_the_results(tmp_path):
    """out_specs in jax's pytree form for a function returning a dict: a dict iterated as
    a list of specs gave its keys, refused as mesh axes ("P('loss') names mesh axis
    'loss'", found by a JAX program sweep). Now one spec per leaf in jax's leaf order (a
    prefix: one spec for a whole subtree); a dict of other keys is refused by name."""
    import jax
    from jax.sharding import PartitionSpec as P

    def fn(x):
        return {"w": (x * 2, jax.numpy.tanh(x)), "loss": x.sum()}

    x = np.arange(48, dtype=np.float32).reshape(8, 6) / 48
    for specs, want in [({"loss": P(), "w": (P("d"), P(None, "d"))},
                         ["P()", "P('d')", "P(None, 'd')"]),
                        ({"loss": P(), "w": P("d")}, ["P()", "P('d')", "P('d')"]),
                        ({"loss": None, "w": ("d", "None,d")},
                         ["P()", "P('d')", "P(None, 'd')"])]:
        out = xj.export(fn, x, mesh_shape={"d": 2}, in_specs=P("d"), out_specs=specs,
                        path=tmp_path / f"ex{len(list(tmp_path.iterdir()))}")
        meta = F.read_meta(out)
        assert [o["spec"] for o in meta["outputs"]] == want
        loss, w0, w1 = xj.assemble(out, out / F.EXPECTED)  # jax's leaf order: loss, w
        np.testing.assert_allclose(loss, x.sum(), rtol=1e-6)
        np.testing.assert_array_equal(w0, x * 2)
        np.testing.assert_allclose(w1, np.tanh(x), rtol=1e-6)
    with pytest.raises(InputError, match="out_specs .* is not shaped like the function's "
                                         "results"):
        xj.export(fn, x, mesh_shape={"d": 2}, in_specs=P("d"),
                  out_specs={"loss": P(), "weights": P("d")}, path=tmp_path / "bad")


@needs_jax
def test_constants_of_more_than_10_elements_keep_their_data(tmp_path):
    """A function closing over a mask and a table: compiled.as_text() printed their
    constants as {...}, so module.hlo could not run (xladist.jax.run failed on its ranks:
    "constant ... its data was elided"; found by a sweep of JAX programs). The module is
    printed with its large constants: every constant has data."""
    import jax
    import xladist
    from jax.sharding import PartitionSpec as P
    mask = np.array([[1, 1, 0, 0, 0, 1], [0, 0, 0, 0, 0, 1],
                     [1, 1, 1, 1, 1, 0], [0, 1, 0, 1, 0, 1]], bool)
    table = np.array([3., 1., 4., 1., 5., 9., 2., 6., 5., 3., 5., 8.], np.float32)

    def fn(x):
        return jax.numpy.where(mask, x, 0.) * table[:6] + table[6:]

    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    out = xj.export(fn, x, mesh_shape={"d": 2}, in_specs=P("d"), out_specs=P("d"),
                    path=tmp_path / "consts")
    text = (out / F.MODULE).read_text()
    assert "{...}" not in text
    module = xladist.load_hlo(out / F.MODULE)
    constants = [i for i in module.all_instructions() if i.opcode == "constant"]
    assert any(i.shape.size > 10 for i in constants)
    assert not any(i.literal.elided for i in constants)
    (got,) = xj.assemble(out, out / F.EXPECTED)
    np.testing.assert_array_equal(got, np.where(mask, x, 0) * table[:6] + table[6:])


@needs_jax
def test_python_and_64_bit_arguments_take_jax_types(tmp_path):
    """float64/int64 numpy arrays become what jax makes of them (f32/s32 without x64), so
    inputs.npz fits the module's parameters."""
    import xladist
    out = xj.export(lambda a, k: a * k, np.arange(4.0), np.int64(3), mesh_shape={"d": 2},
                    in_specs=["d", None], out_specs="d", path=tmp_path / "x64")
    ins = np.load(out / F.INPUTS)
    params = xladist.load_hlo(out / F.MODULE).entry.parameters
    assert [ins[f"arg{i}"].dtype for i in range(2)] == [p.shape.dtype for p in params] == [
        np.float32, np.int32]
    np.testing.assert_array_equal(xj.assemble(out, out / F.EXPECTED)[0], np.arange(4.0) * 3)


@needs_jax
def test_python_int_too_big_for_its_type_is_refused(tmp_path):
    """A Python int argument is int32 without jax_enable_x64; 2**40 wrapped silently to 0
    in inputs.npz (wrong results, where jax's own call raises OverflowError; found by a
    JAX program sweep). Now an InputError names the argument, the value and the type."""
    with pytest.raises(InputError, match=r"argument 1 is the Python int 1099511627776, which "
                                         r"does not fit int32.*would wrap to 0"):
        xj.export(lambda x, k: x + k, np.float32(1), 2**40, mesh_shape={"d": 1},
                  in_specs=None, out_specs=None, path=tmp_path / "ex")
    out = xj.export(lambda x, k: x + k, np.float32(1), -2**31, mesh_shape={"d": 1},
                    in_specs=None, out_specs=None, path=tmp_path / "ok")  # fits: taken
    with np.load(out / F.INPUTS) as z:
        assert z["arg1"].tolist() == [-2**31]


@needs_jax
def test_export_with_int4_arguments(tmp_path):
    """jax's ahead-of-time call refuses int4 arguments (packed layout compiled, one byte per
    element given); export took jax's expected results from that call and raised
    ValueError. Sub-byte arguments go through jit's own call: expected.npz holds jax's
    results, here a ring ppermute of int4 and an all-gather of float8, against numpy."""
    import jax
    from jax import lax
    from jax.sharding import PartitionSpec as P

    def fn(a, b):
        return jax.shard_map(
            lambda u, w: (lax.ppermute(u, "d", [(i, (i + 1) % 4) for i in range(4)]),
                          lax.all_gather(w, "d", tiled=True)),
            in_specs=(P("d"), P("d")), out_specs=(P("d"), P()), check_vma=False)(a, b)

    a = (np.arange(16) % 15 - 7).reshape(4, 4).astype(ml_dtypes.int4)
    b = np.linspace(-2, 2, 8).astype(ml_dtypes.float8_e4m3fn)
    out = xj.export(fn, a, b, mesh_shape={"d": 4}, in_specs=P("d"),
                    out_specs=[P("d"), P()], path=tmp_path / "s4")
    shifted, gathered = xj.assemble(out, out / F.EXPECTED)
    np.testing.assert_array_equal(shifted.astype(np.int32), np.roll(a, 1, axis=0).astype(np.int32))
    np.testing.assert_array_equal(gathered.view(np.uint8), b.view(np.uint8))


@needs_jax
def test_cli_reports_a_failing_function(capsys, tmp_path, args_npz, monkeypatch):
    (tmp_path / "broken_fn.py").write_text("def f(a, b):\n    return a @ a  # [4,6] @ [4,6]\n")
    monkeypatch.chdir(tmp_path)
    code, err = _cli(capsys, "broken_fn:f", "--args", args_npz, "--mesh", "d=2", "-o", "o")
    assert code == 2 and "broken_fn:f failed while jax traced" in err, err
    assert "Traceback" not in err


@needs_jax
def test_shard_blocks_agree_with_jax():
    """specs.shard_index against jax's own NamedSharding.devices_indices_map."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    xj.ensure_devices(8)
    mesh_shape = {"a": 2, "b": 2, "c": 2}
    mesh = Mesh(np.array(jax.devices("cpu")[:8]).reshape(2, 2, 2), ("a", "b", "c"))
    for spec in [P(), P("a"), P(None, "c"), P(("b", "a"), "c"), P(("a", "b", "c"))]:
        shape = (8, 4)
        theirs = NamedSharding(mesh, spec).devices_indices_map(shape)
        for p, dev in enumerate(mesh.devices.flat):
            want = [list(s.indices(n))[:2] for s, n in zip(theirs[dev], shape)]
            assert S.shard_index(shape, S.normalize(spec), mesh_shape, p) == want, (spec, p)


@needs_jax
def test_host_callback_refused_by_name(tmp_path):
    import jax

    def fn(x):
        jax.debug.print("x = {}", x)
        return x * 2

    with pytest.raises(UnsupportedError, match=r"host callback .*target '[a-z_]*callback'"):
        xj.export(fn, np.ones(4, np.float32), mesh_shape={"d": 2}, in_specs=None,
                  out_specs=None, path=tmp_path / "cb")


@needs_jax
def test_unequal_replicated_copies_from_jax(tmp_path):
    """shard_map with check_vma=False lets a 'replicated' result differ per device: its
    expected.npz must not assemble."""
    import jax
    from jax import lax
    from jax.sharding import PartitionSpec as P

    def fn(x):
        return jax.shard_map(lambda v: v + lax.axis_index("d").astype(v.dtype),
                             in_specs=P(), out_specs=P(), check_vma=False)(x)

    out = xj.export(fn, np.zeros(3, np.float32), mesh_shape={"d": 2}, in_specs=None,
                    out_specs=None, path=tmp_path / "rep")
    with pytest.raises(ExecutionError, match="replicated on devices 0 and 1"):
        xj.assemble(out, out / F.EXPECTED)


@needs_jax
@pytest.mark.slow
def test_too_few_devices_says_what_to_do():
    code = ("import jax, numpy as np, xladist.jax as xj\n"
            "from xladist.errors import InputError\n"
            "jax.numpy.ones(2).block_until_ready()\n"  # the backend starts with 1 device
            "try:\n"
            "    xj.export(lambda x: x, np.ones(4), mesh_shape={'d': 4}, in_specs=None,\n"
            "              out_specs=None, path='unused')\n"
            "except InputError as e:\n"
            "    print(e)\n")
    proc = subprocess.run([sys.executable, "-c", code],
                          env=cli_env(XLA_FLAGS="", JAX_PLATFORMS="cpu"), capture_output=True,
                          text=True, timeout=120)
    assert "needs 4 CPU devices but jax already started its CPU backend with 1" in proc.stdout, \
        proc.stdout + proc.stderr
    assert "XLA_FLAGS=--xla_force_host_platform_device_count=4" in proc.stdout


@needs_jax
@pytest.mark.slow
def test_cli_export_then_xladist_run(tmp_path):
    """`xladist export-jax` on a module in the current folder, `xladist run --config`, and
    assemble: the results equal jax's expected.npz."""
    (tmp_path / "mymodel.py").write_text(
        "import jax.numpy as jnp\n\n"
        "def step(w, x):\n"
        "    return jnp.tanh(x @ w), jnp.sum(x * x)\n")
    rng = np.random.default_rng(5)
    np.savez(tmp_path / "args.npz", arg0=rng.standard_normal((6, 4)).astype(np.float32),
             arg1=rng.standard_normal((8, 6)).astype(np.float32))
    env = cli_env()
    export = subprocess.run(
        [sys.executable, "-m", "xladist", "export-jax", "mymodel:step", "--args", "args.npz",
         "--mesh", "data=2", "--in-specs", "(); data,None", "--out-specs", "data,None; ()",
         "-o", "out"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert export.returncode == 0, export.stderr
    assert "xladist run --config out/config.toml" in export.stdout
    run = subprocess.run([sys.executable, "-m", "xladist", "run", "--config",
                          "out/config.toml", "-q", "--timeout", str(RUN_TIMEOUT)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr
    got = xj.assemble(tmp_path / "out", tmp_path / "out" / F.OUTPUTS)
    want = xj.assemble(tmp_path / "out", tmp_path / "out" / F.EXPECTED)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    args = np.load(tmp_path / "args.npz")
    np.testing.assert_allclose(got[0], np.tanh(args["arg1"] @ args["arg0"]), rtol=1e-5,
                               atol=1e-6)
    json.loads((tmp_path / "out" / F.META).read_text())
