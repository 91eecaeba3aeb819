"""A rank of a persistent cluster (xladist/runtime/cluster.py): it stays up and obeys orders.

    mpiexec -n N python -m xladist.runtime.cluster_rank     (XLADIST_COORD names the service)

After it has connected to the coordination service it says `cluster-ready` and waits for
`order` messages (service/client.py queues them): `{call, handle, load, run, free}` --
load: take the module from the service, place this rank's device, plan its collectives and
compile (rank.device_context, rank.compile_for), kept under `handle`; run: this device's
inputs came with the order (no request: one round trip less per call), the call's feeds
(`feeds`: infeed and outfeed streams opened for this call, as a one-shot rank opens them),
run; free: release the handle's communicators -- or `{end}`: say goodbye and exit. Every
call ends with one message: `call-done` (after a run, with the outputs, as rank_main.py
sends them), or `call-failed {text}` naming the rank and instruction (rank.failure_text): a
failed call does not end the rank. What ends it as in a one-shot job: a hang (the service's
report, then `abort`), the loss of the service, an internal error (report_and_abort).
"""

from __future__ import annotations

import sys

from .rank_main import SETUP_TIMEOUT_S


def main(argv: list[str]) -> int:
    from .rank_main import main as rank_main
    return rank_main(argv, serve)


class _Loaded:
    """A module placed and compiled on this rank (a cluster's handle)."""

    def __init__(self, ctx, exe, spec: dict):
        self.ctx, self.exe, self.spec = ctx, exe, spec


def serve(client, comm) -> None:
    """Obey the cluster's orders until `end` (or the service closes)."""
    from xladist.collectives import deadline

    from .rank import release
    # From the first wait on (a load's split of the node's ranks comes before its device
    # is placed), as rank_main.serve: a deadline passed there is the job's one report of
    # where every rank is, not a line from each rank naming XLADIST_COLLECTIVE_TIMEOUT.
    deadline.watchdog.set_monitor(client)
    loaded: dict[int, _Loaded] = {}
    client.send("cluster-ready")
    try:
        while (got := client.orders.get()) is not None and not got[0].get("end"):
            _obey(client, comm, *got, loaded)
    finally:
        for item in loaded.values():
            release(item.ctx)
    client.bye()


def _obey(client, comm, order: dict, payload, loaded: dict) -> None:
    from xladist.collectives import deadline

    from .rank import failure_text, release
    call, handle = order["call"], order["handle"]
    try:
        if order.get("load"):
            # A hang report names the step (not 'computing'), as for a one-shot rank.
            client.starting("loading the module (placing its device, making its "
                            "communicators, compiling)")
            try:
                loaded[handle] = _load(client, comm)
            finally:
                client.starting(None)
        if order.get("run"):  # answers call-done with the outputs
            _run(client, call, loaded[handle], order["inputs"], payload, order.get("feeds"))
        else:
            client.send("call-done", call=call)
    except Exception as e:  # noqa: BLE001 -- the call failed, not the rank
        text, code = failure_text(e, comm.Get_rank())
        client.send("call-failed", call=call, text=text, code=code)
    finally:
        # The monitor stays: it is this rank's client for all its calls.
        deadline.watchdog.loops.clear()
        if order.get("free") and handle in loaded:
            release(loaded.pop(handle).ctx)


def _load(client, comm) -> _Loaded:
    from xladist.collectives import deadline

    from .rank import compile_for, device_context, release
    from .rank_main import _module
    with deadline.waiting("receiving the module from the coordination service"):
        meta, blob = client.request("job", SETUP_TIMEOUT_S)
    spec = meta["spec"]
    module, compile_options = _module(spec, blob)
    deadline.configure(spec.get("timeout", 300.0))
    ctx = device_context(module, comm, spec.get("device_assignment"),
                         proven=spec.get("proven", False))
    try:
        exe = compile_for(module, ctx, backend=spec.get("backend", "cpu"),
                          verify=spec.get("verify", True), schedule=spec.get("schedule", True),
                          compile_options=compile_options)
    except BaseException:
        release(ctx)
        raise
    return _Loaded(ctx, exe, spec)


def _run(client, call: int, item: _Loaded, described: dict, arrays, fed: dict | None) -> None:
    """Run a loaded module on this device's inputs, which came with the order (`described`
    as the service's `inputs` reply, JobHost.request), with the call's feeds (`fed`: as a
    one-shot job's spec gives them, served by the cluster's process for this call only),
    and answer `call-done` with the outputs: one message."""
    from xladist.collectives import deadline

    from .rank import watch
    from .rank_main import _feeds, _send_outputs, unpack_inputs
    timeout = item.spec.get("timeout", 300.0)
    deadline.configure(timeout)
    ctx = item.ctx
    watch(ctx.monitor, ctx.placement)
    inputs = unpack_inputs(described, arrays)
    feeds = _feeds(client, {**fed, "timeout": timeout}) if fed else None
    if feeds is not None:
        ctx.feeds = feeds
        feeds.start(ctx.placement, ctx.module)
    try:
        # The service marked this rank 'computing' when it sent the order, and marks it
        # 'finished' at its answer (RankState.mark): no message of its own for either.
        outputs = item.exe(*inputs)
        ctx.monitor.mark("finished", tell=False)
    except BaseException:
        if feeds is not None:  # every item outfed so far still reaches the caller
            feeds.abort()
        raise
    finally:
        ctx.feeds = None
    if feeds is not None:
        feeds.finish()  # the outfeed delivered before the outputs and call-done
    _send_outputs(client, outputs, timeout or None, "call-done", call=call)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
