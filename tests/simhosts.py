"""Several hosts on one machine, for tests: MPICH really sees two nodes, and the nodes other
than the launching one have their own /tmp and host name.

How (launch/README.md "Trying it without a cluster"):
* a hostfile of made-up names (`nodeA:2`, `nodeB:2`) and Hydra's fork launcher: one proxy
  per name, so MPICH treats the ranks as two nodes (node-local communicators of size 2, the
  network path between them); each rank finds its node's name in PMI_HOSTNAME;
* every rank starts under `unshare --mount --uts`: its host name becomes the node's, and on
  a node other than the launching one a per-node folder is bind-mounted over /tmp, like
  another machine's local disk (the home folder and /work stay shared, as on a cluster);
  a rank whose working folder (mpiexec's, unless `-wdir`) that node lacks fails to start,
  as MPICH's proxy fails on a real host;
* `XLADIST_TARGET_CPU` on chosen nodes emulates an older CPU there;
* a node that is `down` never starts its ranks (its wrapper sleeps instead, as a launch
  whose ssh never gets through).

`SimHosts.mpiexec` is a launcher script for `--mpiexec` / `xladist.run(mpiexec=...)`: it runs
the real mpiexec with `-launcher fork` and puts the node wrapper in front of the program.
This needs root (mount namespaces); `require_root()` skips with the reason otherwise.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from xladist.collectives.mpiexec import find_mpiexec

# Per-node folders live outside /tmp: a node's private /tmp must not hide them.
SIM_ROOT = Path(os.environ.get("XLADIST_SIM_ROOT", "/var/tmp/xladist-sim"))

# The rank-start wrapper, run by each rank's proxy: $1 = the launching node's name, $2 = the
# folder holding one sub-folder per node, $3 = "node=cpu,..." emulated CPUs, $4 = the nodes
# that are down ("node,..."); then the program.
_NODE_WRAPPER = r"""
launch="$1"; root="$2"; cpus="$3"; down="$4"; shift 4
case ",$down," in *",$PMI_HOSTNAME,"*) exec sleep 3600 ;; esac
hostname "$PMI_HOSTNAME" || exit 97
if [ "$PMI_HOSTNAME" != "$launch" ]; then
  here="$(pwd)"
  mkdir -p "$root/$PMI_HOSTNAME" && mount --bind "$root/$PMI_HOSTNAME" /tmp || exit 98
  # MPICH's proxy on a real host changes to mpiexec's folder and stops where there is none
  cd "$here" 2>/dev/null || {
    echo "[proxy@$PMI_HOSTNAME] unable to change wdir to $here (No such file or directory)" >&2
    exit 97; }
fi
for pair in $(echo "$cpus" | tr ',' ' '); do
  if [ "${pair%%=*}" = "$PMI_HOSTNAME" ]; then export XLADIST_TARGET_CPU="${pair#*=}"; fi
done
exec "$@"
"""

_MPIEXEC = """#!{python}
# mpiexec for simulated hosts (tests/simhosts.py): the fork launcher, every rank started by
# the node wrapper.
import os, sys
real, launch, root, cpus, down, wrapper, marker = {args!r}
argv = sys.argv[1:]
# The program starts at the first argument that is this Python (the launcher's rank command).
at = next(i for i, a in enumerate(argv) if os.path.realpath(a) == os.path.realpath(sys.executable)
          or a == sys.executable)
argv = argv[:at] + ["unshare", "--mount", "--uts", "--propagation", "private", "sh", "-c",
                    wrapper, "sh", launch, root, cpus, down] + argv[at:]
if marker:
    open(marker, "a").write(" ".join(sys.argv[1:]) + "\\n")
os.execv(real, [real, "-launcher", "fork", *argv])
"""


def require_root() -> None:
    """Skip unless this process may create mount namespaces (root, with unshare)."""
    if os.geteuid() != 0:
        pytest.skip("simulated hosts need root: each node's ranks get a private /tmp through "
                    "a mount namespace (unshare --mount)")
    if shutil.which("unshare") is None:
        pytest.skip("simulated hosts need util-linux's unshare")
    probe = subprocess.run(["unshare", "--mount", "--uts", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("cannot create mount namespaces here (unshare --mount failed: "
                    f"{probe.stderr.decode(errors='replace').strip()})")


class SimHosts:
    """Made-up nodes for one test: `nodes` = [(name, slots), ...] in hostfile order (rank 0
    on the first), `launch` = the node the launching process is on (it shares the real /tmp;
    default the first), `cpus` = {node: XLADIST_TARGET_CPU}, `down` = nodes whose ranks never
    start."""

    def __init__(self, where: Path, nodes=(("nodeA", 2), ("nodeB", 2)), *, launch=None,
                 cpus=None, down=(), tag: str | None = None):
        require_root()
        self.where = Path(where)
        self.nodes = list(nodes)
        self.launch = launch or self.nodes[0][0]
        self.root = SIM_ROOT / (tag or f"{os.getpid()}-{self.where.name}")
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        self.hostfile = self.where / "hosts"
        self.hostfile.write_text("".join(f"{name}:{slots}\n" for name, slots in self.nodes))
        self.marker = self.where / "mpiexec.calls"
        cpu_text = ",".join(f"{k}={v}" for k, v in (cpus or {}).items())
        self.mpiexec = self.where / "sim-mpiexec"
        self.mpiexec.write_text(_MPIEXEC.format(python=sys.executable, args=(
            find_mpiexec(), self.launch, str(self.root), cpu_text, ",".join(down), _NODE_WRAPPER,
            str(self.marker))))
        self.mpiexec.chmod(self.mpiexec.stat().st_mode | stat.S_IXUSR)

    @property
    def size(self) -> int:
        return sum(slots for _, slots in self.nodes)

    def node_of(self, rank: int) -> str:
        for name, slots in self.nodes:
            if rank < slots:
                return name
            rank -= slots
        raise IndexError(rank)

    def private_tmp(self, node: str) -> Path:
        """What the ranks of `node` see as /tmp (the real /tmp on the launching node)."""
        return Path("/tmp") if node == self.launch else self.root / node

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def simhosts(tmp_path):
    """A factory of SimHosts whose per-node folders are removed after the test."""
    made = []

    def make(*args, **kwargs):
        sim = SimHosts(tmp_path, *args, **kwargs)
        made.append(sim)
        return sim
    yield make
    for sim in made:
        sim.cleanup()
