"""The static cross-device deadlock check (see check.py for the algorithm).

check.py   matching, the joint simulation, check_module
trace.py   per-device communication traces (loops, branches, calls walked)
fold.py    the constant folder deciding control flow per device
symmetry.py  one symbolic trace for all devices, when that proves the module
classes.py   one trace per class of devices that take the same path, when ids feed control
induction.py loops whose communication repeats, checked by a constant number of iterations
report.py  Problems and Reports: what the check tells a person and a program
"""

from .check import Problem, Report, check_module, resolve_devices

__all__ = ["Problem", "Report", "check_module", "resolve_devices"]
