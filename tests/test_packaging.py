"""The installed distribution ships this repository's packages.

`runtime` and `collectives` are also names of unrelated PyPI distributions: importing
them must resolve to the folders of this checkout, never to a same-named package.
"""

import importlib
import importlib.metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", ["xladist", "collectives", "runtime"])
def test_package_resolves_to_this_repository(name):
    mod = importlib.import_module(name)
    assert Path(mod.__file__).resolve().parent == ROOT / name


def test_console_script_declared():
    eps = importlib.metadata.entry_points(group="console_scripts")
    targets = {ep.name: ep.value for ep in eps}
    assert targets.get("xladist") == "xladist.cli:main"


def test_mpiexec_comes_with_the_install():
    from runtime.launcher import find_mpiexec
    assert Path(find_mpiexec()).exists()
