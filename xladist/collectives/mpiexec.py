"""Where `mpiexec` is: the one place every launching command looks for it.

`xladist run -n N`, `xladist demo`, `xladist bench collectives` and `xladist.run` all start
their ranks with the mpiexec found here, in this order:
1. an explicit choice (`--mpiexec PATH` of `xladist run`, `xladist demo` and
   `xladist bench collectives`; `mpiexec = "PATH"` in a run config);
2. the `mpich` wheel's, found from this Python - next to `sys.executable`, in this
   environment's scripts folder, or through the installed `mpich` package's file list -
   so a venv's `xladist` called by its full path finds it without the venv on PATH;
3. `mpiexec` on PATH.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
import sysconfig
from pathlib import Path

from xladist.errors import InputError

__all__ = ["find_mpiexec"]

_NAMES = ("mpiexec", "mpiexec.hydra", "mpirun")


def _wheel_dirs():
    """The folders that may hold the wheel's mpiexec, in order; the installed package's file
    list only when the usual folders did not have it (reading it imports importlib.metadata,
    a twentieth of a second and more before every launch)."""
    seen = set()
    for d in itertools.chain((Path(sys.executable).parent, Path(sysconfig.get_path("scripts")),
                              Path(sys.prefix) / "bin"), _package_dirs()):
        if d not in seen:
            seen.add(d)
            yield d


def _package_dirs():
    try:
        from importlib.metadata import PackageNotFoundError, distribution
        dist = distribution("mpich")
        for f in dist.files or ():
            if f.name in _NAMES:
                yield Path(dist.locate_file(f)).parent
    except (ImportError, PackageNotFoundError, OSError):
        pass


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_mpiexec(explicit: str | None = None, what: str = "--mpiexec") -> str:
    """The mpiexec to start ranks with (see the module docstring); InputError if none.
    `what`: how the message names the explicit choice (an option, a config key)."""
    if explicit:
        found = explicit if os.sep in explicit else shutil.which(explicit)
        if found is None or not _executable(Path(found)):
            raise InputError(f"{what} {explicit}: not an executable program (give the path "
                             f"of mpiexec, or leave it out to use the mpich wheel's)")
        return str(found)
    for d in _wheel_dirs():
        for name in _NAMES:
            if _executable(d / name):
                return str(d / name)
    found = shutil.which("mpiexec")
    if found is None:
        raise InputError("mpiexec not found: install xladist with pip (it brings the `mpich` "
                         "wheel, which provides mpiexec), put an MPI launcher on PATH, or "
                         "pass --mpiexec PATH")
    return found
