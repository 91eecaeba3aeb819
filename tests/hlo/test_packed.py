"""The parsed form the launcher ships to its ranks (xladist/hlo/packed.py): it reads back as
the module parsed, with the source lines errors name, and only by the same code."""

from __future__ import annotations

import pickle
import threading

import pytest

from xladist.errors import InputError
from xladist.hlo import packed
from xladist.hlo.parser import parse_module
from xladist.hlo.printer import print_module
from tests.paths import DATA, ROOT

FILES = sorted(DATA.rglob("*.hlo")) + sorted((ROOT / "benchmarks").glob("*.hlo"))
LOOP = DATA / "deadlock" / "data_dependent_loop.hlo"


def test_there_are_modules_to_read_back():
    assert len(FILES) >= 50


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_packed_module_reads_back_as_parsed(path):
    text = path.read_text()
    module = parse_module(text, filename=str(path))
    back = packed.unpack(packed.pack(module))
    assert print_module(back) == print_module(module)
    # What runtime errors cite: every instruction's source line and metadata.
    for comp, comp_back in zip(module.computations, back.computations):
        assert [(i.name, i.line, i.attrs.get("metadata")) for i in comp.instructions] == \
            [(i.name, i.line, i.attrs.get("metadata")) for i in comp_back.instructions]


def test_a_long_chain_packs_without_deep_recursion():
    n = 20000
    lines = ["HloModule chain", "", "ENTRY main {", "  p = f32[4] parameter(0)",
             "  a0 = f32[4] add(p, p)"]
    lines += [f"  a{i} = f32[4] add(a{i - 1}, p)" for i in range(1, n)]
    lines += [f"  ROOT r = f32[4] negate(a{n - 1})", "}"]
    module = parse_module("\n".join(lines))
    assert print_module(packed.unpack(packed.pack(module))) == print_module(module)


def test_other_code_or_other_bytes_are_refused_by_name():
    module = parse_module(LOOP.read_text())
    data = packed.pack(module)
    key = packed.code_key()
    other = data.replace(key, b"0" * len(key), 1)
    with pytest.raises(InputError, match="loop.hlo was packed by different xladist code .* "
                                         "every host of a job must run the same xladist"):
        packed.unpack(other, "loop.hlo")
    with pytest.raises(InputError, match="not a packed module"):
        packed.unpack(b"HloModule m\n", "m.hlo")


def test_a_module_holding_something_unpicklable_is_not_packed():
    module = parse_module(LOOP.read_text())
    module.entry.instructions[0].attrs["x"] = threading.Lock()
    with pytest.raises(TypeError):
        pickle.dumps(module)
    assert packed.pack(module) is None


def test_reading_a_large_packed_module_back_runs_no_garbage_collection():
    # Before: the collector ran its passes while unpickling made the module's objects,
    # over a heap growing with them: a 30,000-instruction module read back in 1.2 s
    # against 0.3 s without them, on every rank at every launch.
    import gc
    lines = ["HloModule big", "", "ENTRY %main (x: f32[8]) -> f32[8] {",
             "  %v0 = f32[8] parameter(0)"]
    lines += [f"  %v{i} = f32[8] add(%v{i - 1}, %v{max(0, i - 2)})" for i in range(1, 3000)]
    lines += ["  ROOT %r = f32[8] negate(%v2999)", "}", ""]
    data = packed.pack(parse_module("\n".join(lines)))
    passes = []

    def count(phase, info):
        if phase == "start":
            passes.append(info["generation"])

    gc.callbacks.append(count)
    try:
        back = packed.unpack(data)
    finally:
        gc.callbacks.remove(count)
    assert len(back.entry.instructions) == 3001
    assert gc.isenabled()
    assert passes == [], f"{len(passes)} collector passes while unpacking"
