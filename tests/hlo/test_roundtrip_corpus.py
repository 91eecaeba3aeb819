"""Every corpus HLO file parses, and printing it gives back the file byte for byte.

The jax `module.hlo` and single `module.optimized.hlo` files are XLA's long style
(`%` names, program shapes, metadata); `module.unoptimized.hlo` and single
`module.hlo` are the short style JAX's `as_text(dialect="hlo")` produces.
"""

from __future__ import annotations


import pytest

from xladist.hlo.parser import parse_module
from xladist.hlo.printer import print_module
from tests.paths import TESTS

CORPUS = TESTS / "data" / "corpus"
FILES = sorted(CORPUS.glob("*/*/*.hlo"))


def _is_long_style(text: str) -> bool:
    return any(line.startswith("ENTRY %") for line in text.splitlines())


def test_corpus_is_present():
    names = {p.name for p in FILES}
    assert {"module.hlo", "module.unoptimized.hlo", "module.optimized.hlo"} <= names
    assert len(FILES) >= 50


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_print_reproduces_source_exactly(path):
    text = path.read_text()
    module = parse_module(text, filename=str(path))
    printed = print_module(module, sigils=_is_long_style(text))
    if printed != text:
        for n, (a, b) in enumerate(zip(text.splitlines(), printed.splitlines()), 1):
            assert a == b, f"{path}:{n} differs"
    assert printed == text


@pytest.mark.slow  # 1,143 cases: every corpus file in four print styles
@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
@pytest.mark.parametrize("style", [
    dict(), dict(sigils=False), dict(operand_shapes=True), dict(metadata=False)],
    ids=["long", "short", "operand_shapes", "no_metadata"])
def test_print_parse_print_is_stable(path, style):
    module = parse_module(path.read_text())
    once = print_module(module, **style)
    again = print_module(parse_module(once), **style)
    assert again == once
    # Every style describes the same program: its canonical long text is unchanged.
    assert print_module(parse_module(once), metadata=style.get("metadata", True)) == \
        print_module(module, metadata=style.get("metadata", True))


def test_corpus_entry_matches_case_json():
    """The parsed entry and header agree with the corpus case descriptions."""
    import json
    for case in sorted((CORPUS / "jax").iterdir()):
        meta = json.loads((case / "case.json").read_text())
        module = parse_module((case / "module.hlo").read_text())
        assert module.num_partitions == meta["num_partitions"]
        assert module.replica_count == meta["replica_count"]
        assert module.is_scheduled
        assert len(module.entry.parameters) == meta["num_inputs"]
        ops = {i.opcode for i in module.all_instructions()}
        assert ops == set(meta["ops"]), case.name
