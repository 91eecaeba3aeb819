"""The numpy reference interpreter as a backend (`backend="interpreter"`)."""

from __future__ import annotations

from ..executable import Executable


class InterpreterExecutable(Executable):
    """The numpy reference interpreter as a backend.

    Options: `device` (a DeviceContext; default SingleDeviceContext(infeed)), `infeed`
    (items for a SingleDeviceContext), `check` (assert rule result shapes, default on),
    `schedule` (computation -> instruction order to run, e.g. xladist.analysis.schedule's) and
    `rules` (per-run opcode rule overrides); see interpreter.Evaluator.
    """

    backend = "interpreter"

    def __init__(self, module, *, device=None, infeed=(), check: bool = True, schedule=None,
                 rules=None):
        super().__init__(module)
        from ..semantics.single_device import SingleDeviceContext
        from . import check_supported
        check_supported(module)
        self.device = device if device is not None else SingleDeviceContext(infeed)
        self.check = check
        self.schedule = schedule
        self.rules = rules

    def execute(self, args):
        from . import Evaluator
        from .shaping import read_only
        return Evaluator(self.module, self.device, check=self.check, schedule=self.schedule,
                         rules=self.rules).run([read_only(a) for a in args])
