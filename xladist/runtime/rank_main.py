"""A rank of a served job: everything it needs comes from the coordination service.

    mpiexec -n N python -m xladist.runtime.rank_main        (XLADIST_COORD names the service)

`xladist run -n N` and `xladist.run` from a plain process start their ranks this way; under a
bare `mpiexec -n N xladist run ...` every rank calls `serve` after rank 0 has started the
service. A rank asks the service for the job (module and settings) and for its own
device's inputs, runs its device, and streams its outputs back in one message (then its
trace and statistics); nothing is read from or written to a disk the ranks would have to
share. A failing rank reports and aborts the job (xladist.runtime.rank.report_and_abort).
"""

from __future__ import annotations

import json
import os
import sys

# How long a rank waits for the service to hand it the job and its inputs: they are read
# (and the code compiled) on the launching host while the ranks wait.
SETUP_TIMEOUT_S = 600.0


def main(argv: list[str], serve_fn=None) -> int:
    """A rank's life: connect to the service, `serve_fn(client, comm)` (default `serve`: one
    job; cluster_rank.serve: a persistent cluster's orders), report-and-abort on failure."""
    from .hostinfo import set_blas_coretype
    set_blas_coretype()  # this host's OpenBLAS kernel, before numpy loads OpenBLAS
    from .rank import report_and_abort, world
    comm = world()
    rank = comm.Get_rank()
    prefix = os.environ.get("XLADIST_RANK_PREFIX", "xladist.run")
    try:
        from .service import client as service_client
        (serve_fn or serve)(service_client.for_rank(comm), comm)
    except BaseException as e:  # noqa: BLE001 - every failure must take the job down
        report_and_abort(e, rank, prefix=prefix)
        return 1
    return 0


def serve(client, comm, bye: bool = True) -> None:
    """Run this rank's part of the job the service describes (collective); `bye`: then say
    goodbye to the service (rank 0 of a bare launch, which hosts it, does later)."""
    from xladist.collectives import deadline

    from .channels_host import ServiceHost
    from .rank import execute_on_this_rank
    rank = comm.Get_rank()
    # The service hears of every wait that passes its deadline from here on, so that a
    # deadline passed on several ranks at once is one report of where every rank is.
    deadline.watchdog.set_monitor(client)
    # Each start-up step named, for a hang report of a rank between its waits (else it
    # would say 'computing', its program not begun): the rank's record, no message.
    client.starting("receiving the job")
    with deadline.waiting("receiving the job from the coordination service"):
        meta, blob = client.request("job", SETUP_TIMEOUT_S)
    spec = meta["spec"]
    client.starting("reading the module")
    module, compile_options = _module(spec, blob)
    deadline.configure(spec.get("timeout", 300.0))
    client.starting("receiving its inputs")
    with deadline.waiting("receiving this rank's inputs from the coordination service"):
        inputs = _inputs(client, rank)
    client.starting("placing its device and making its communicators")
    if spec.get("threads") is not None:
        from xladist.compiler import parallel
        parallel.set_threads(spec["threads"])
    feeds = _feeds(client, spec)
    host = None
    if spec.get("host_send") or spec.get("host_recv"):
        host = ServiceHost(client, spec["host_send"], spec["host_recv"],
                           spec.get("timeout") or None)
    tracer, shown = _watchers(spec, rank)
    with shown:
        result = execute_on_this_rank(
            module, inputs, backend=spec.get("backend", "cpu"),
            timeout=spec.get("timeout", 300.0), verify=spec.get("verify", True),
            device_assignment=spec.get("device_assignment"), feeds=feeds, host=host,
            trace=True if spec.get("trace") else None, tracer=tracer, gather_to=None,
            compile_options=compile_options, schedule=spec.get("schedule", True),
            proven=spec.get("proven", False))
    deadline.watchdog.set_monitor(client)   # (the run's end took it off)
    if spec.get("outputs"):
        _send_outputs(client, result.outputs, spec.get("timeout") or None)
    if spec.get("stats"):
        client.send("stats", summary=result.tracer.summary())
    if bye:
        client.bye()


def _module(spec: dict, blob: bytes):
    """The module and the backend options that run it (a .xlx file: without compiling),
    after the custom-call targets the launching process forwarded are registered here."""
    if "custom_calls" in spec:  # started by a launcher (under a bare mpiexec: not sent)
        from .forwarded_calls import register
        register(spec["custom_calls"])
    if spec.get("xlx"):
        import tempfile

        from xladist.compiler.serialized import SerializedExecutable

        from .hostinfo import host_name
        with tempfile.NamedTemporaryFile(suffix=".xlx") as f:
            f.write(blob)
            f.flush()
            # this host's CPU checked here (the launcher's need not run the code)
            exe = SerializedExecutable(f.name, name=spec.get("source"), host=host_name())
        return exe.module, exe.options()
    from .config import override_device_counts
    if spec.get("packed"):  # parsed by the launcher (hlo/packed.py)
        from xladist.hlo.packed import unpack
        module = unpack(blob, spec.get("source") or "the module")
    else:
        from xladist.hlo.parser import parse_module
        module = parse_module(blob.decode("utf-8"), filename=spec.get("source") or "the module")
    override_device_counts(module, spec.get("replica_count"), spec.get("num_partitions"))
    return module, {}


def _inputs(client, rank: int) -> list:
    meta, arrays = client.request("inputs", SETUP_TIMEOUT_S, device=rank)
    return unpack_inputs(meta, arrays)


def unpack_inputs(meta: dict, arrays) -> list:
    """A device's argument list from the service's `inputs` reply (JobHost.request)."""
    from xladist.semantics.values import TOKEN
    arrays = iter(arrays or [])
    tokens = set(meta.get("tokens", []))
    return [TOKEN if i in tokens else next(arrays) for i in range(meta.get("count", 0))]


def _feeds(client, spec: dict):
    # The feeds' modules only for a job that has feeds.
    source = sink = None
    if spec.get("infeed") == "served":
        from .feeds.host import SocketSource
        source = SocketSource(client.address, client.token)
    elif spec.get("infeed_fn"):
        from .feeds.pipeline import FunctionSource
        source = FunctionSource(spec["infeed_fn"])
    if spec.get("outfeed") == "served":
        from .feeds.host import SocketSink
        sink = SocketSink(client.address, client.token, spec.get("timeout"))
    if source is None and sink is None:
        return None
    from .feeds.pipeline import Feeds
    return Feeds(source, sink, prefetch=spec.get("prefetch", 8), timeout=spec.get("timeout"))


def _watchers(spec: dict, rank: int):
    """The rank's Tracer (None when nothing needs one) and rank 0's progress line."""
    from . import progress
    from .trace import Tracer
    how = progress.mode(spec.get("quiet", False)) if rank == 0 else "off"
    tracer = None
    if spec.get("trace") or spec.get("stats") or how != "off":
        tracer = Tracer(rank, record=bool(spec.get("trace")))
    return tracer, progress.Progress(tracer, how, label=spec.get("label", "xladist run"))


def _send_outputs(client, outputs, timeout, op: str = "outputs", **fields) -> None:
    """All of this rank's outputs in one message (`op {outputs: count, **fields}`: the
    service reads each array to where it goes, in pieces, and then takes `op` as any other
    message), straight from this rank's memory: one array after the other, never copied
    whole."""
    import numpy as np

    from xladist.collectives import deadline
    arrays = [np.asarray(a) for a in outputs]
    with deadline.waiting("handing this rank's outputs to the coordination service"):
        if not client.send(op, arrays=arrays, timeout=timeout or 300.0, outputs=len(arrays),
                           **fields):
            raise ConnectionError("the coordination service stopped taking this rank's "
                                  f"outputs ({len(arrays)} arrays)")


def trace_blob(tracer) -> bytes:
    return json.dumps(tracer.trace_events(), separators=(",", ":")).encode()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
