"""Persistent clusters for tests: one `xladist.Cluster` per rank count, kept for the process.

A test suite that runs modules on N ranks from a plain process (not inside an MPI job)
would otherwise pay an `mpiexec` start and N interpreters for every run (about 1 s idle,
3-5 s on a loaded machine); through a kept cluster a run costs milliseconds more than the
module's own time (docs/cluster.md), with the same results bit for bit.

Independence: every run loads its module, runs it and releases it (`keep=0`), so nothing
one test compiled or planned is left on the ranks for the next; the backend, timeout and
checks are per run. A run that ended its cluster (a hang, a dead rank, an interrupted call)
leaves it unusable, and the next run on N ranks starts a fresh one. So does a run whose
environment (os.environ) differs from the one the cluster's ranks started with: a fresh job
would start its ranks in the run's environment (PYTHONPATH to a backend of one's own,
XLADIST_THREADS, a backend's settings), and so does a kept cluster. `run_devices(...,
persistent=False)` (the plugin's `--xladist-fresh-jobs`) starts a job per run. Clusters end
with `close_shared()`, at the end of a pytest session (plugin.py), or at interpreter exit
(xladist.Cluster's own atexit).
"""

from __future__ import annotations

import os
import threading

# What Cluster.run takes of xladist.run's keyword arguments; the rest (host transfers,
# traces, hosts, job_timeout) are not offered by a cluster: such a run starts a job of its
# own.
TAKEN = frozenset({"backend", "timeout", "device_assignment", "verify", "check", "strict",
                   "infeed", "outfeed", "infeed_fn", "prefetch"})


# Whether run_devices keeps ranks when not told (its `persistent=None`); the plugin sets it
# False for a session run with --xladist-fresh-jobs.
KEEP = True

# Set by pytest for every test (the test's name and phase): not a setting of the ranks.
_PER_TEST = frozenset({"PYTEST_CURRENT_TEST"})


def _environment() -> list:
    """os.environ, less what is not the user's setting for the ranks: pytest's per-test
    variable, XLADIST_JOB_TARGET (a rank takes its job's target from the coordination
    service; a launching process's background compile once set it here for a moment, and
    a run that read it restarted its cluster for nothing) and the CLI's deadlock-check
    mark."""
    from xladist.compiler.target import JOB_TARGET_ENV
    from xladist.runtime.precheck import CHECKED_ENV
    skip = _PER_TEST | {JOB_TARGET_ENV, CHECKED_ENV}
    for attempt in range(10):
        try:
            return sorted(kv for kv in os.environ.items() if kv[0] not in skip)
        except RuntimeError:  # another thread changed os.environ while it was read
            if attempt == 9:
                raise


class Clusters:
    """Live clusters by rank count, started on first use and again after one ended."""

    def __init__(self):
        self.live: dict[int, object] = {}
        self._env: dict[int, list] = {}  # the environment each cluster's ranks started with
        self.started = 0  # how many clusters were started (for the record)
        self.why: list[tuple[int, str]] = []  # (n, why) of every start, in order
        self._lock = threading.Lock()

    def get(self, n: int):
        from xladist.runtime.cluster import Cluster
        env = _environment()
        with self._lock:
            cluster = self.live.get(n)
            if cluster is None:
                why = "first run"
            elif not cluster.usable:
                why = f"the last one ended ({cluster._ended or 'its job is gone'})"
            elif self._env.get(n) != env:
                old, new = dict(self._env[n]), dict(env)
                why = "environment changed: " + ", ".join(
                    sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k)))
            else:
                return cluster
            if cluster is not None:
                cluster.close()
            cluster = Cluster(n=n, keep=0).start()
            self.live[n], self._env[n] = cluster, env
            self.started += 1
            self.why.append((n, why))
            return cluster

    def run(self, module, inputs=None, n: int = 1, **options):
        """xladist.run(module, inputs, n=n, **options) on the n-rank cluster."""
        other = set(options) - TAKEN
        if other:
            raise TypeError(f"a cluster's run does not take {sorted(other)} (it has no "
                            "host transfers or traces): call xladist.run")
        return self.get(n).run(module, inputs, **options)

    def close(self) -> None:
        with self._lock:
            for cluster in self.live.values():
                cluster.close()
            self.live.clear()


_shared: list[Clusters] = []
_shared_lock = threading.Lock()


def shared() -> Clusters:
    """This process's clusters (run_devices and the plugin's fixtures use them)."""
    with _shared_lock:
        if not _shared:
            _shared.append(Clusters())
        return _shared[0]


def close_shared() -> None:
    """End this process's kept clusters (a later run starts new ones)."""
    with _shared_lock:
        clusters = _shared[0] if _shared else None
    if clusters is not None:
        clusters.close()
