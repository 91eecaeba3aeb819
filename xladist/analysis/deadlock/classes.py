"""Devices by classes: one trace per class of devices that run the same instructions.

symmetry.py traces once for all devices, and gives up as soon as replica-id or partition-id
decides control (`if partition_id < P/2`, `replica_id % 2` choosing permute pairs, the first
and last stage of a pipeline).  Here the ids of a class of devices are arrays (fold.py
IdValue: one value per member, computed for all members at once by the same numpy
functions); a class starts as all devices and is traced once.  Where the members would part
-- a conditional's index, a loop's condition or trip-count slice that differs between them,
a collective or channel end that names some members and not others -- the tracer raises `Split` with each member's
value and the class is cut by it; every part is traced again from the start.  A value all
members share folds to that value, so each finished class trace is, event for event, what
the per-device tracer gives each member (with the representative's groups and peers).  An
all-reduce result keys a data-chosen branch or trip count (check.py enumerates them) only
when all members are in one group of it; otherwise control on it stops the trace.

Then, without a trace per device (`prove`):

- collectives: every distinct group partition P (instructions with equal groups share it;
  two different partitions must share no group, else each device's count per group would
  mix them) and every group of P: the classes with a member in the group must issue the
  same sequence of P-collectives (kind and signature, by position).  Members of a class are
  in some group of P exactly when the representative is (the class was split otherwise), so
  a device's k-th collective on its group is its class's k-th P-event, and matching pairs
  it with the k-th P-event of each member's class: no mismatch, nothing unmatched.  Which
  classes meet in a group is one numpy pass per partition (a bit mask of classes per group);
- channels: all ends on one channel name the same source-target pairs; for every (class of
  a source, class of its target) the first issues as many sends as the second recvs, with
  the same shapes: the k-th send pairs with the k-th recv;
- in a loop traced by induction, classes that meet in a group (or a source's and its
  target's class) issue as many events there per iteration (steady.py) and as many before
  the loop, else the traced iterations do not stand for the later ones;
- the joint simulation runs classes instead of devices: a class moves on only when every
  member could (all classes it meets in a group arrived at the collective, all target
  classes issued the recv, ...).  Such moves are moves of the per-device simulation, and
  since waits are only ever released, if the classes all finish, every device does.

Anything else -- a split into more than MAX_CLASSES classes, a trace that stops (data), a
check that fails or a class simulation that gets stuck -- answers None, and check.py traces
every device as before: problems are always reported by the per-device path, in its words.
"""

from __future__ import annotations

import time
from collections import Counter

import numpy as np

from .fold import IdValue
from .budget import OverBudget
from .events import DeviceTrace
from .facts import ModuleFacts
from .simulate import run
from .steady import loop_runs, rates
from .trace import trace_device

__all__ = ["MAX_CLASSES", "Split", "by_classes"]

# More classes than this: the per-device path (bit masks of classes are uint64).
MAX_CLASSES = 64


class Split(Exception):
    """The members of a class part at this point: `vals` are per-member arrays (aligned with
    the class's members); members with equal values in all of them stay together."""

    def __init__(self, *vals):
        super().__init__("split")
        self.vals = vals


class _Devices:
    """Arrays over all device ids, computed once per check: the ids, each class's index, and
    per distinct group or peer mapping (shared by instructions with equal attributes) who is
    in it and in which group."""

    def __init__(self, facts: ModuleFacts):
        table = np.asarray(facts.da.table(), np.int64)   # [replica][partition] -> device
        self.size = int(table.max()) + 1
        self.replica = np.zeros(self.size, np.uint32)
        self.partition = np.zeros(self.size, np.uint32)
        self.replica[table] = np.arange(table.shape[0], dtype=np.uint32)[:, None]
        self.partition[table] = np.arange(table.shape[1], dtype=np.uint32)[None, :]
        self.devices = np.sort(table.ravel())
        self._masks: dict[int, np.ndarray] = {}
        self._gids: dict[int, np.ndarray] = {}
        self._flat: dict[int, tuple] = {}
        self._keep: list = []   # the mappings the caches are keyed by id() of

    def mask(self, mapping: dict) -> np.ndarray:
        hit = self._masks.get(id(mapping))
        if hit is None:
            hit = np.zeros(self.size, bool)
            hit[np.fromiter(mapping, np.int64, len(mapping))] = True
            self._masks[id(mapping)] = hit
            self._keep.append(mapping)
        return hit

    def flat_groups(self, groups) -> tuple[np.ndarray, np.ndarray] | None:
        """(members of all groups in a row, where each group starts); None if one is empty."""
        hit = self._flat.get(id(groups))
        if hit is None:
            sizes = np.fromiter(map(len, groups), np.int64, len(groups))
            if not len(sizes) or sizes.min() == 0:
                return None
            flat = np.fromiter((d for g in groups for d in g), np.int64, int(sizes.sum()))
            hit = self._flat[id(groups)] = (flat, np.concatenate(([0], np.cumsum(sizes)[:-1])))
            self._keep.append(groups)
        return hit

    def pair_arrays(self, to_target: dict) -> tuple[np.ndarray, np.ndarray, bool]:
        """(sources, their targets, whether no target has two sources) of a pair map."""
        hit = self._flat.get(id(to_target))
        if hit is None:
            src = np.fromiter(to_target, np.int64, len(to_target))
            dst = np.fromiter(to_target.values(), np.int64, len(to_target))
            hit = self._flat[id(to_target)] = (src, dst, np.unique(dst).size == dst.size)
            self._keep.append(to_target)
        return hit

    def group_index(self, member: dict) -> np.ndarray:
        """Device -> index of its group in a device -> group mapping (-1: in none)."""
        hit = self._gids.get(id(member))
        if hit is None:
            index: dict[int, int] = {}
            hit = np.full(self.size, -1, np.int64)
            devs = np.fromiter(member, np.int64, len(member))
            hit[devs] = [index.setdefault(id(g), len(index)) for g in member.values()]
            self._gids[id(member)] = hit
            self._keep.append(member)
        return hit


class ClassIds:
    """What the tracer and folder ask of a class (see trace.py `ids`)."""

    def __init__(self, devs: _Devices, members: np.ndarray):
        self.devs = devs
        self.members = members
        self.replica = devs.replica[members]
        self.partition = devs.partition[members]
        self._known: set[int] = set()   # id() of mappings already found uniform
        self._groups: dict[int, bool] = {}

    def settle(self, *values) -> None:
        """Split when one of `values` (a decision) differs between members."""
        vals = [v.vals for v in values if isinstance(v, IdValue)]
        if vals:
            raise Split(*vals)

    def present(self, mapping: dict) -> None:
        """Split when some members are keys of `mapping` (a group, a channel end) and some
        are not."""
        if id(mapping) in self._known:
            return
        inside = self.devs.mask(mapping)[self.members]
        if inside.any() and not inside.all():
            raise Split(inside)
        self._known.add(id(mapping))

    def same_group(self, member: dict) -> bool:
        """Whether all members are in one group of a collective: an all-reduce's result is
        then one uniform value for the class (else each group may see another)."""
        key = id(member)
        if key not in self._groups:
            gid = self.devs.group_index(member)[self.members]
            self._groups[key] = bool(np.all(gid == gid[0]))
        return self._groups[key]


def _parts(members: np.ndarray, vals) -> list[np.ndarray]:
    """`members` cut by equal values across `vals`, in order of their first member."""
    code = np.zeros(len(members), np.int64)
    for v in vals:
        _, inv = np.unique(np.asarray(v), return_inverse=True)
        code = code * (int(inv.max()) + 1) + inv.ravel()
    _, first, inv = np.unique(code, return_index=True, return_inverse=True)
    order = np.argsort(first)
    return [members[inv.ravel() == k] for k in order]


def _trace_classes(facts, schedule, devs: _Devices, *, max_unroll, deadline, choose):
    """[(members, trace)] covering all devices, or None when more than MAX_CLASSES are
    needed or a trace stops (control depends on data)."""
    todo = [devs.devices]
    done: list[tuple[np.ndarray, DeviceTrace]] = []
    while todo:
        members = todo.pop(0)
        if deadline is not None and time.perf_counter() > deadline:
            raise OverBudget(int(members[0]), "the start of its class's trace")
        try:
            trace = trace_device(facts, schedule, int(members[0]), max_unroll=max_unroll,
                                 choose=choose, induction=True, deadline=deadline,
                                 symbolic=True, ids=ClassIds(devs, members))
        except Split as s:
            parts = _parts(members, s.vals)
            if len(parts) < 2 or len(done) + len(todo) + len(parts) > MAX_CLASSES:
                return None  # (one part: values that never compare equal, such as NaN)
            todo[:0] = parts
            continue
        if trace.unproven is not None or trace.assumptions:
            return None
        done.append((members, trace))
    return done


def by_classes(facts: ModuleFacts, schedule, *, max_unroll: int, deadline: float | None,
               choices, max_runs: int):
    """The class traces of the first combination of data-chosen branches when every
    combination (check.py `_Choices`, at most `max_runs`) is proven by classes; else None.
    Raises OverBudget when the deadline passes."""
    devs = _Devices(facts)
    first = None
    while True:
        classes = _trace_classes(facts, schedule, devs, max_unroll=max_unroll,
                                 deadline=deadline, choose=choices)
        if classes is None or not prove(facts, devs, classes, deadline):
            return None
        first = first or classes
        if not choices.advance():
            return first
        if choices.runs >= max_runs:
            return None


class _Canon:
    """Equal values (group partitions, pair maps) mapped to one index; compared by identity
    first, since instructions with equal attributes share the object (trace.ModuleFacts)."""

    def __init__(self):
        self.values: list = []
        self._by_id: dict[int, int] = {}

    def index(self, value) -> int:
        hit = self._by_id.get(id(value))
        if hit is None:
            hit = next((i for i, v in enumerate(self.values) if v == value), None)
            if hit is None:
                hit = len(self.values)
                self.values.append(value)
            self._by_id[id(value)] = hit
        return hit


def _same(a: list, b: list) -> bool:
    """Two classes' sequences of events on one partition (or shapes on one channel) pair."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, str):
            if x != y:
                return False
        elif x.kind != y.kind or x.sig.first_difference(y.sig) is not None:
            return False
    return True


def _bits(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def prove(facts: ModuleFacts, devs: _Devices, classes, deadline: float | None) -> bool:
    """Whether the class traces prove every device free of mismatches, unmatched ends and
    cycles (the module docstring's argument); False when not sure."""
    if len({tuple(tr.shortened) for _, tr in classes}) > 1:
        return False   # loops shortened differently: check.py unrolls them per device
    n = len(classes)
    class_of = np.full(devs.size, -1, np.int64)
    for c, (members, _) in enumerate(classes):
        class_of[members] = c
    parts, maps = _Canon(), {}
    same: set[tuple] = set()                 # (channel, id(pair map)) known to be maps[channel]
    on_part = [{} for _ in range(n)]     # class -> partition -> its events on it
    sends = [{} for _ in range(n)]       # class -> channel -> shapes sent
    recvs = [{} for _ in range(n)]
    steps: list[list[tuple]] = []            # class -> per event (kind, key, position)
    for c, (_, tr) in enumerate(classes):
        at: dict[int, tuple] = {}            # id(start/send/recv event) -> its key, position
        out = []
        for ev in tr.events:
            k = ev.kind
            if k in ("sync", "start"):
                seq = on_part[c].setdefault(parts.index(ev.sig.groups), [])
                at[id(ev)] = (parts.index(ev.sig.groups), len(seq))
                seq.append(ev)
                out.append((k,) + at[id(ev)])
            elif k in ("send", "recv"):
                to_target = facts.peers(ev.instr)[0]
                if (ev.stream, id(to_target)) not in same:
                    if maps.setdefault(ev.stream, to_target) != to_target:
                        return False   # ends of one stream name different pairs
                    same.add((ev.stream, id(to_target)))
                seq = (sends if k == "send" else recvs)[c].setdefault(ev.stream, [])
                at[id(ev)] = (ev.stream, len(seq))
                seq.append(ev.shape)
                out.append((k,) + at[id(ev)])
            else:   # done, send-done, recv-done: wait on what their start/send/recv issued
                out.append((k,) + at[id(ev.link)])
        steps.append(out)
    _over(deadline)
    meets = _partition_meetings(parts.values, class_of, devs)
    if meets is None:
        return False
    # Loops traced by induction: classes that meet must stay in step (steady.py).
    per_loop = [rates(tr, lambda ev: ("p", parts.index(ev.sig.groups))
                      if ev.kind in ("sync", "start") else (ev.kind, ev.stream)
                      if ev.kind in ("send", "recv") else None) for _, tr in classes]
    loops = set().union(*per_loop)
    # ... and enter it alike: as many events on each link before it (per-device matching
    # allows a few iterations apart, steady.entered_apart; classes allow none).
    entry = [_entry_counts(out, tr) for out, (_, tr) in zip(steps, classes)]

    def in_step(a: int, b: int, key_a, key_b) -> bool:
        return all(per_loop[a].get(loop, (None, {}))[1].get(key_a, 0) ==
                   per_loop[b].get(loop, (None, {}))[1].get(key_b, 0) and
                   entry[a].get(loop, {}).get(key_a, 0) == entry[b].get(loop, {}).get(key_b, 0)
                   for loop in loops)
    for p, masks in enumerate(meets):
        for mask in masks:
            cs = _bits(mask)
            ref = on_part[cs[0]].get(p, [])
            if not all(_same(ref, on_part[c].get(p, [])) for c in cs[1:]):
                return False
            if not all(in_step(cs[0], c, ("p", p), ("p", p)) for c in cs[1:]):
                return False
    targets, sources = {}, {}
    for channel, to_target in maps.items():
        src, dst, injective = devs.pair_arrays(to_target)
        if not injective:
            return False   # two sources to one target (the pair parser forbids it)
        edges = np.unique(class_of[src] * n + class_of[dst])
        for e in edges.tolist():
            a, b = divmod(e, n)
            if not _same(sends[a].get(channel, []), recvs[b].get(channel, [])) or \
                    not in_step(a, b, ("send", channel), ("recv", channel)):
                return False
            targets.setdefault((channel, a), []).append(b)
            sources.setdefault((channel, b), []).append(a)
    _over(deadline)
    nbrs = {}
    for p, masks in enumerate(meets):
        for mask in masks:
            for c in _bits(mask):
                nbrs[(p, c)] = nbrs.get((p, c), 0) | mask
    nbrs = {key: _bits(mask) for key, mask in nbrs.items()}
    return _simulate(steps, nbrs, targets, sources, deadline)


def _entry_counts(steps: list[tuple], trace) -> dict:
    """Loop run (steady.loop_runs) -> Counter of what the class issued before the run's
    first event: ("p", partition) per sync or start, (kind, stream) per send or recv."""
    out = {}
    for loop, w in loop_runs(trace):
        count = Counter()
        for kind, key, _ in steps[:w[6]]:
            if kind in ("sync", "start"):
                count[("p", key)] += 1
            elif kind in ("send", "recv"):
                count[(kind, key)] += 1
        out[loop] = count
    return out


def _partition_meetings(partitions, class_of, devs: _Devices):
    """Per partition, the distinct bit masks of the classes that meet in one of its groups;
    None when two partitions share a group."""
    if len(partitions) > 1:
        seen: set = set()
        for groups in partitions:
            if not seen.isdisjoint(groups):
                return None
            seen.update(groups)
    out = []
    for groups in partitions:
        flat = devs.flat_groups(groups)
        if flat is None:
            return None
        bit = np.left_shift(np.uint64(1), class_of[flat[0]].astype(np.uint64))
        out.append([int(m) for m in np.unique(np.bitwise_or.reduceat(bit, flat[1]))])
    return out


def _over(deadline) -> None:
    if deadline is not None and time.perf_counter() > deadline:
        raise OverBudget(None, "", "checking the classes of devices")


def _simulate(steps, nbrs, targets, sources, deadline) -> bool:
    """Run every class as one device (module docstring), in simulate.py's joint simulation;
    True when all finish.  A class raises its count of events reached on a partition (a
    sync or start) or issued on a channel (a send or recv); its k-th sync on a partition
    waits until every class it meets there reached k + 1 events on it, its done the same,
    its k-th send-done until every target class issued k + 1 recvs (recv-done: sends)."""
    compiled = []
    for c, seq in enumerate(steps):
        out = []
        for kind, key, k in seq:
            if kind in ("sync", "start"):
                waits = (tuple((("p", key, b), k + 1) for b in nbrs[(key, c)])
                         if kind == "sync" else ())
                out.append(((("p", key, c),), waits))
            elif kind == "done":
                out.append(((), tuple((("p", key, b), k + 1) for b in nbrs[(key, c)])))
            elif kind in ("send", "recv"):
                out.append((((kind, key, c),), ()))
            elif kind == "send-done":
                out.append(((), tuple((("recv", key, b), k + 1) for b in targets[(key, c)])))
            else:   # recv-done
                out.append(((), tuple((("send", key, b), k + 1) for b in sources[(key, c)])))
        compiled.append(out)
    pos = run(compiled, deadline, lambda *_: "checking the classes of devices")
    return all(p == len(seq) for p, seq in zip(pos, compiled))
