"""The collective conformance kit: `xladist conformance` and xladist.testing's checks.

A suite of programs that exercise every collective, channel and feed (suite.py, emit.py,
program.py, values.py), a reference that runs every device with the interpreter in one
process under the rules of docs/reference/collective-semantics.md (reference.py, groups.py),
comparisons that name the device and element (checks.py), and the machinery that runs the
suite on N MPI ranks with any backend in one job per device count (runner.py,
rank_main.py, protocol.py) and reports a matrix (report.py). docs/conformance.md is the
user's guide.

`xla_cases`: XLA's own collective tests (xla/tests/collective_ops_test.cc and friends)
transcribed as data -- module text, device count, every device's inputs and expected
outputs, and the XLA file and test each came from; data only, it imports nothing of xladist.
xla.py makes them units of the kit's suite; tests/xla_collectives/ also runs every case
under MPI on both backends.
"""
