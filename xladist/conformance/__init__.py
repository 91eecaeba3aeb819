"""Conformance data: programs with every device's expected results, shipped with xladist.

`xla_cases`: XLA's own collective tests (xla/tests/collective_ops_test.cc and friends)
transcribed as data -- module text, device count, every device's inputs and expected
outputs, and the XLA file and test each came from. Runners live elsewhere
(tests/xla_collectives/ runs every case under MPI on both backends); this package holds
data only and imports nothing of xladist.
"""
