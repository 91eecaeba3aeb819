"""The documentation stays true to the tree: every relative link in README.md and docs/
leads to a file (and heading) that exists, every repository path they name exists, every
run-config key is documented, and code comments cite the references in docs/reference/."""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

import pytest

from tests.paths import ROOT

DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
# Also the READMEs of examples/, launch/ and tests/, which the docs send readers to: their
# links and commands are checked too (the paths they name are often the ones they make).
PAGES = sorted([*DOCS, *(p for top in ("examples", "launch", "tests")
                         for p in (ROOT / top).rglob("*.md"))])
PAGE_IDS = [str(p.relative_to(ROOT)) for p in PAGES]
IDS = [str(p.relative_to(ROOT)) for p in DOCS]

# The repository's top-level folders: a path starting with one of them must exist as
# written (relative to the root). `xla:xla/...`-style upstream paths do not match.
TOP = ("docs", "tests", "xladist", "benchmarks", "tools", "configs", "launch", "examples",
       ".ci")
REPO_PATH = re.compile(r"(?<![\w/.:@-])((?:%s)/[\w./-]*[\w/])(?![\w{<*])"
                       % "|".join(re.escape(t) for t in TOP))
# Shorthand inside backticks, relative to a package folder (`compiler/parallel.py`,
# `codegen/kernels/distinct.py`): must be the tail of some file of the repository.
SHORT_PATH = re.compile(r"`([\w-]+/[\w./-]*\.(?:py|md|toml|hlo|sh|c|h))`")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


@functools.cache
def _files() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode == 0 and out.stdout:
        return out.stdout.splitlines()
    return [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()]


def _anchors(md: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in FENCE.sub("", md.read_text()).splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


@pytest.mark.parametrize("doc", PAGES, ids=PAGE_IDS)
def test_relative_links_lead_somewhere(doc: Path):
    bad = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not bad, f"{doc.relative_to(ROOT)}: broken links: {bad}"


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_named_paths_exist(doc: Path):
    text = doc.read_text()
    files = _files()
    bad = sorted({p for p in REPO_PATH.findall(text) if not (ROOT / p).exists()})
    for short in set(SHORT_PATH.findall(text)):
        if short.split("/")[0] in TOP or "<" in short:
            continue
        if not any(f == short or f.endswith("/" + short) for f in files):
            bad.append(short)
    assert not bad, f"{doc.relative_to(ROOT)} names paths that do not exist: {bad}"


def test_the_checks_can_fail(tmp_path):
    """The two patterns find what they should (so the tests above cannot pass vacuously)."""
    text = ("see [x](nowhere.md) and [y](running.md#no-such-heading), `tests/no_such.py`, "
            "`codegen/no_such.py`, xla:xla/service/x.cc, `out/rank{rank}.npz`")
    assert [t for t in LINK.findall(text)] == ["nowhere.md", "running.md#no-such-heading"]
    assert REPO_PATH.findall(text) == ["tests/no_such.py"]
    assert SHORT_PATH.findall(text) == ["tests/no_such.py", "codegen/no_such.py"]
    assert "compile-once-per-launch" in _anchors(ROOT / "docs" / "running.md")


def test_readme_stays_short():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= 200, (f"README.md has {lines} lines: keep it to what xladist is, install, "
                          "the quickstart, one example each and the table of contents; put "
                          "detail in a docs/ topic file")


def _config_row(key, spec) -> str:
    """SCHEMA's row as docs/run-configs.md's table writes it."""
    if spec.default is None:
        default = ""
    elif isinstance(spec.default, bool):
        default = f"`{str(spec.default).lower()}`"  # TOML's spelling
    else:
        default = f"`{spec.default}`"
    return f"| `{key}` | {spec.type} | `{spec.option}` | {default} | {spec.help} |"


def test_every_run_config_key_is_documented():
    """Each key's row -- type, option, default and meaning -- is SCHEMA's own."""
    from xladist.runtime.config import SCHEMA
    rows = {line.split(" | ")[0]: line.strip()
            for line in (ROOT / "docs" / "run-configs.md").read_text().splitlines()
            if line.startswith("| `")}
    wrong = {k: _config_row(k, s) for k, s in SCHEMA.items()
             if rows.get(f"| `{k}`") != _config_row(k, s)}
    assert not wrong, f"docs/run-configs.md: rows should read {wrong}"


REFERENCES = ("hlo-text-format.md", "collective-semantics.md")


def test_code_cites_the_references_in_docs():
    """Code comments cite docs/reference/<name>.md, which is in the repository."""
    for name in REFERENCES:
        assert (ROOT / "docs" / "reference" / name).is_file()
    bare = re.compile(r"(?<![\w/.-])(%s)" % "|".join(re.escape(n) for n in REFERENCES))
    bad = []
    for py in sorted([*(ROOT / "xladist").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]):
        if py == Path(__file__):
            continue
        for n, line in enumerate(py.read_text().splitlines(), 1):
            if bare.search(line):
                bad.append(f"{py.relative_to(ROOT)}:{n}")
    assert not bad, f"cite docs/reference/<name>.md, not the bare name: {bad}"


# An environment variable's name in the code; `XLADIST_AOT_{n}_H` (a C header guard the
# aot command writes) is no variable.
ENV_NAME = re.compile(r"\b(XLADIST_[A-Z0-9_]*[A-Z0-9])(?![\w{])")


def _env_names(paths) -> set[str]:
    return {n for p in paths for n in ENV_NAME.findall(p.read_text())}


def test_every_environment_variable_is_documented():
    """Every XLADIST_* name the package reads or sets has a row in docs/environment.md, and
    every row names a variable some code (the package or the tests) still reads."""
    doc = (ROOT / "docs" / "environment.md").read_text()
    rows = {n for line in doc.splitlines() if line.startswith("| `")
            for n in ENV_NAME.findall(line.split(" | ")[0])}
    read = _env_names((ROOT / "xladist").rglob("*.py"))
    missing = sorted(read - rows)
    assert not missing, f"docs/environment.md has no row for {missing}"
    everywhere = read | _env_names((ROOT / "tests").rglob("*.py"))
    stale = sorted(rows - everywhere)
    assert not stale, f"docs/environment.md documents variables nothing reads: {stale}"


@functools.cache
def _cli_options() -> dict[str, set[str]]:
    """Each subcommand's option names, as its parser takes them (bench: its harnesses')."""
    import argparse

    from xladist.bench import collectives, in_loop
    from xladist.cli import build_parser
    sub = next(a for a in build_parser()._actions
               if isinstance(a, argparse._SubParsersAction))
    out = {name: {o for a in p._actions for o in a.option_strings}
           for name, p in sub.choices.items()}
    out["bench"] |= {o for h in (collectives, in_loop) for a in h._parser()._actions
                     for o in a.option_strings}
    return out


@pytest.mark.parametrize("doc", PAGES, ids=PAGE_IDS)
def test_documented_command_options_exist(doc: Path):
    """`xladist SUB ... --option` in a doc names an option SUB's parser takes."""
    opts = _cli_options()
    cmd = re.compile(r"xladist (%s)\b([^`\n]*)" % "|".join(sorted(opts, key=len, reverse=True)))
    bad = []
    for n, line in enumerate(doc.read_text().splitlines(), 1):
        for m in cmd.finditer(line):
            rest = m.group(2).split("#")[0]  # a comment after the command is prose
            bad += [f"{n}: xladist {m.group(1)} {o}"
                    for o in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", rest)
                    if o not in opts[m.group(1)]]
    assert not bad, f"{doc.relative_to(ROOT)} names options the command lacks: {bad}"


def test_environment_page_lists_every_checked_number():
    """The page's opening says which variables are checked before any rank starts: every
    numeric one xladist/environment.py checks (the timeouts as `*_TIMEOUT`s)."""
    from xladist.environment import _NUMBERS
    doc = (ROOT / "docs" / "environment.md").read_text()
    intro = doc.split("\n|", 1)[0]
    named = [n for n in _NUMBERS if f"`{n}`" in intro
             or (n.endswith("_TIMEOUT") and "`*_TIMEOUT`s" in intro)]
    missing = sorted(set(_NUMBERS) - set(named))
    assert not missing, f"docs/environment.md's opening does not name {missing}"


def _resolves(dotted: str) -> bool:
    """`xladist.a.b.c` names a module, or attributes of the longest module prefix."""
    import importlib
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


@pytest.mark.parametrize("doc", PAGES, ids=PAGE_IDS)
def test_python_names_and_blocks_are_real(doc: Path):
    """Every `xladist.NAME...` a page writes is a module or attribute that exists, and every
    ```python block is valid Python (a signature or shell text is marked as text)."""
    text = doc.read_text()
    names = set(re.findall(r"(?<![\w./-])(xladist(?:\.[A-Za-z_]\w*)+)", text))
    bad = sorted(n for n in names if not n.endswith((".py", ".md", ".toml"))
                 and not _resolves(n))
    for block in re.findall(r"^```python\n(.*?)^```", text, re.S | re.M):
        try:
            compile(block, str(doc), "exec")
        except SyntaxError as e:
            bad.append(f"a python block: {e}")
    assert not bad, f"{doc.relative_to(ROOT)}: {bad}"
