"""Backends that get collectives wrong on purpose (tests/conformance/test_cli.py puts this
directory on the ranks' PYTHONPATH; its dist-info registers them as xladist backends).

Each is the interpreter with the runtime's DeviceContext wrapped, the way a backend's own
collective code would sit between the program and MPI:
- broken-ftz: all-reduce results flush subnormals to zero (a backend reducing with FTZ/DAZ);
- broken-nan: all-gather results have every NaN replaced by the canonical quiet NaN;
- broken-no-a2a: refuses (UnsupportedError) modules with an all-to-all;
- broken-crash: the process dies in a collective-permute of f64 on device 1;
- broken-chatty: correct, but prints on stdout without a newline as it runs.
"""

from __future__ import annotations

import os

import numpy as np

from xladist.errors import UnsupportedError
from xladist.executable import Executable


class _Device:
    def __init__(self, inner, fix):
        self._inner, self._fix = inner, fix

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def collective(self, instr, args, reducer=None):
        return self._fix(instr, self._inner.collective(instr, args, reducer), self._inner)


class _Broken(Executable):
    backend = "broken"

    def __init__(self, module, *, device=None, infeed=(), schedule=None):
        super().__init__(module)
        from xladist.interpreter import check_supported
        from xladist.semantics.single_device import SingleDeviceContext
        check_supported(module)
        self.refuse(module)
        inner = device if device is not None else SingleDeviceContext(infeed)
        self.device = _Device(inner, self.fix)
        self.schedule = schedule

    def refuse(self, module):
        pass

    def fix(self, instr, value, device):
        return value

    def execute(self, args):
        from xladist.interpreter import Evaluator
        return Evaluator(self.module, self.device, schedule=self.schedule).run(args)


def _floats(value, f):
    """f applied to each numpy float array of a result (an array or a tuple of them)."""
    if isinstance(value, tuple):
        return tuple(_floats(v, f) for v in value)
    return f(value) if value.dtype.kind == "f" else value


class FlushToZero(_Broken):
    def fix(self, instr, value, device):
        if instr.opcode != "all-reduce":
            return value

        def flush(a):
            tiny = np.finfo(a.dtype).tiny
            return np.where(np.abs(a) < tiny, np.copysign(np.zeros_like(a), a), a).astype(a.dtype)
        return _floats(value, flush)


class CanonicalNan(_Broken):
    def fix(self, instr, value, device):
        if instr.opcode != "all-gather":
            return value
        return _floats(value, lambda a: np.where(np.isnan(a), np.array(np.nan, a.dtype), a))


class NoAllToAll(_Broken):
    def refuse(self, module):
        for instr in module.all_instructions():
            if instr.opcode.startswith("all-to-all"):
                raise UnsupportedError(f"broken-no-a2a: {instr.name}: all-to-all is not "
                                       "supported by this backend")


class CrashOnPermute(_Broken):
    def fix(self, instr, value, device):
        if instr.opcode == "collective-permute" and device.replica_id + \
                device.partition_id == 1 and instr.shape.element_type.name == "f64":
            os._exit(17)
        return value


class Chatty(_Broken):
    def execute(self, args):
        print("chatty backend: running", end="", flush=True)
        return super().execute(args)
