"""The static cross-device deadlock check (docs/ARCHITECTURE.md explains the engines).

check.py     the driver: check_module, the engines tried in order
events.py    the event model (Event, Signature, DeviceTrace)
facts.py     device-independent facts: groups, signatures, channel peers
trace.py     per-device communication traces (loops, branches, calls walked)
fold.py      the constant folder deciding control flow per device
induction.py loops whose communication repeats, checked by a constant number of iterations
symmetry.py  one symbolic trace for all devices, when that proves the module
classes.py   one trace per class of devices that take the same path, when ids feed control
matching.py  which events of different devices are the same collective or transfer
simulate.py  the joint simulation of all devices
cycles.py    the cycles of waits that remain, in words
choices.py   branches and trip counts chosen by all-reduce results, one combination per run
budget.py    the time budget (OverBudget)
report.py    Problems and Reports: what the check tells a person and a program
"""

from .check import Problem, Report, check_module, resolve_devices

__all__ = ["Problem", "Report", "check_module", "resolve_devices"]
