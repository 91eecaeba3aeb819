"""Tests of the measurement code in benchmarks/ that is more than a script (gemm_kernel.py)."""
