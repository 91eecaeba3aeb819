"""A minimal xladist backend package (tests/test_backends.py puts this directory on sys.path;
its dist-info registers `toy` in the `xladist.backends` entry-point group).

It reuses what docs/BACKENDS.md says a backend may reuse: the Executable base class (argument
checks, flattened results) and the interpreter's Evaluator with the DeviceContext it is
given (so collectives reach the MPI runtime unchanged). Element-wise ops it overrides with
its own rules, counting them, to prove its code ran.
"""

from __future__ import annotations

import numpy as np

from xladist.executable import Executable


class ToyExecutable(Executable):
    backend = "toy"
    adds = 0  # add instructions this backend evaluated itself (in this process)

    def __init__(self, module, *, device=None, infeed=(), schedule=None):
        super().__init__(module)
        from xladist.interpreter import check_supported
        from xladist.semantics.single_device import SingleDeviceContext
        check_supported(module)
        self.device = device if device is not None else SingleDeviceContext(infeed)
        self.schedule = schedule

    def execute(self, args):
        from xladist.interpreter import Evaluator

        def add(instr, operands, *rest):
            ToyExecutable.adds += 1
            return np.add(operands[0], operands[1]).astype(instr.shape.dtype)
        return Evaluator(self.module, self.device, schedule=self.schedule,
                         rules={"add": add}).run(args)
