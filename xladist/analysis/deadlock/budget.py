"""The check's time budget: the exception that stops it and the clock it looks at."""

from __future__ import annotations

import time

__all__ = ["CLOCK_EVERY", "OverBudget", "over_deadline"]

# The matching and simulation loops look at the clock every this many steps: a million
# events take seconds at 1,024 devices, and perf_counter per step would cost ~10% of that.
CLOCK_EVERY = 4096


class OverBudget(Exception):
    """The check's time budget ran out; `doing` says what the check was working on
    ("tracing device 3 at while.2 ...", "matching collectives ..."), `device` the device
    it was on, if one."""

    def __init__(self, device: int | None, where: str, doing: str | None = None):
        super().__init__(where)
        self.device, self.where = device, where
        self.doing = doing or f"tracing device {device} at {where}"


def over_deadline(deadline: float | None, doing) -> None:
    """Raise OverBudget when `deadline` has passed; `doing()` builds the description."""
    if deadline is not None and time.perf_counter() > deadline:
        raise OverBudget(None, "", doing())
