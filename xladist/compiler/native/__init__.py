"""Native code that runs whole steps without Python: while loops as one LLVM driver
(loop.py) with its collective steps (collectives.py, exchange.py), 2-D dots through
numpy's OpenBLAS (blas.py), and the order-preserving reduce-scatter + all-gather for
reducers MPI has no builtin for (ordered.py)."""
