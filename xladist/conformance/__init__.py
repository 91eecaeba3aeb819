"""The collective conformance kit: `xladist conformance` and xladist.testing's checks.

A suite of programs that exercise every collective, channel and feed (suite.py, emit.py,
program.py, values.py), a reference that runs every device with the interpreter in one
process under the rules of docs/reference/collective-semantics.md (reference.py, groups.py),
comparisons that name the device and element (checks.py), and the machinery that runs the
suite on N MPI ranks with any backend in one job per device count (runner.py,
rank_main.py, protocol.py) and reports a matrix (report.py). XLA's own collective tests
join the suite through xla.py. docs/conformance.md is the user's guide.
"""
