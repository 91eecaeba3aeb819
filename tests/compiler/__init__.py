"""Compiled (cpu backend) tests: kernels, cache, targets, threads, in-place, fuzzing."""
