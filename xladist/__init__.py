"""xladist: run XLA HLO programs across MPI ranks, one device per rank."""

__version__ = "0.1.0"
