"""The installed distribution is one namespace: `xladist` and nothing else.

`runtime` and `collectives` are also names of unrelated PyPI distributions, so xladist's
layers live under `xladist.` only; the wheel test installs the real wheel into a fresh
venv and lists what landed in site-packages.
"""

import importlib
import importlib.metadata
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", ["xladist", "xladist.collectives", "xladist.runtime"])
def test_package_resolves_to_this_repository(name):
    mod = importlib.import_module(name)
    assert Path(mod.__file__).resolve().parent == ROOT.joinpath(*name.split("."))


@pytest.mark.parametrize("name", ["collectives", "runtime"])
def test_no_generic_top_level_package_in_the_checkout(name):
    assert not (ROOT / name).exists()


def test_console_script_declared():
    eps = importlib.metadata.entry_points(group="console_scripts")
    targets = {ep.name: ep.value for ep in eps}
    assert targets.get("xladist") == "xladist.cli:entry"


def test_mpiexec_comes_with_the_install():
    from xladist.runtime.launcher import find_mpiexec
    assert Path(find_mpiexec()).exists()


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel, built from a copy of the package (so the build leaves nothing in the
    checkout) and installed without dependencies into a new venv that sees the system's
    site-packages (numpy, mpi4py, ...): (tmp dir, wheel, venv python, its site-packages,
    what the install added there)."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "xladist", src / "xladist",
                    ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "-w", str(wheels), str(src)],
                   check=True, capture_output=True, timeout=240)
    (wheel,) = wheels.glob("xladist-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True,
                   timeout=120)
    vpy = venv / "bin" / "python"
    site = Path(subprocess.check_output(
        [str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        text=True).strip())
    before = set(p.name for p in site.iterdir())
    subprocess.run([sys.executable, "-m", "pip", "--python", str(vpy), "install", "-q",
                    "--no-deps", str(wheel)], check=True, capture_output=True, timeout=240)
    added = sorted(set(p.name for p in site.iterdir()) - before)
    return tmp_path, wheel, vpy, site, added


@pytest.mark.slow
def test_the_wheel_installs_only_xladist_into_site_packages(installed):
    """Build the wheel, install it (without dependencies) into a new venv, and list the
    venv's site-packages: only `xladist` and its .dist-info are new."""
    tmp_path, wheel, vpy, site, added = installed
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"xladist"}, tops
    assert (vpy.parent / "xladist").exists()
    assert [a for a in added if not a.endswith(".dist-info")] == ["xladist"], added
    assert [a for a in added if a.endswith(".dist-info")] == ["xladist-0.1.0.dist-info"]
    # The layers import from the installed copy, not the checkout (numpy, mpi4py, ...
    # from the system site-packages the venv sees).
    out = subprocess.check_output(
        [str(vpy), "-c", "import xladist.runtime.launcher, xladist.collectives.p2p, sys; "
         "print(xladist.__file__)"], text=True, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ""}).strip()
    assert out.startswith(str(site)), out


@pytest.mark.slow
def test_the_installed_package_runs_the_conformance_suite(installed):
    """`xladist conformance` from the installed wheel, outside the checkout: the suite, its
    XLA:CPU recordings, XLA's own collective tests and the ranks all come from the package."""
    tmp_path, wheel, vpy, site, added = installed
    names = zipfile.ZipFile(wheel).namelist()
    assert "xladist/conformance/data/xla_cpu.json.gz" in names
    assert "xladist/conformance/xla_cases/collective_ops.py" in names
    assert "pytest11" in zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith("entry_points.txt"))).decode()
    proc = subprocess.run(
        [str(vpy.parent / "xladist"), "conformance", "-n", "2", "--backend", "interpreter",
         "--select", "*/all-reduce/*_f32_*", "--select", "xla/*float32*"], cwd=tmp_path,
        capture_output=True, text=True, timeout=600,
        env={"PATH": f"{vpy.parent}:/usr/bin:/bin", "PYTHONPATH": "", "HOME": str(tmp_path),
             "XLADIST_PROGRESS": "off"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "passed (1 MPI job" in proc.stdout
    assert re.search(r"^n=2 +XLA xla/tests/collective_ops_test\.cc +(\d+) cases: \1 passed$",
                     proc.stdout, re.M), proc.stdout
    assert "checked against XLA:CPU's recorded outputs" in proc.stdout
