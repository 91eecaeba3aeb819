"""Kernels: one LLVM function per fused kernel.

core.py     the KernelSpec, the table of kernel emitters (KERNEL_EMITTERS), loop and
            reduce kernels (row caches), the fast and accurate versions of kernels with
            sin/cos/tan (emit_kernel), map kernels for collective reducers
special.py  scatter, sort, select-and-scatter
inplace.py  a dynamic-update-slice written into its operand's buffer
            (both register their kinds when emit_kernel first runs: a compile from the
            kernel cache emits nothing and does not import them)
distinct.py each distinct kernel emitted once, the repeats as aliases of its functions
"""

from .core import (
    ACCURATE_SUFFIX,
    KERNEL_EMITTERS,
    RANGE_SUFFIX,
    KernelSpec,
    begin_function,
    emit_kernel,
    emit_map_kernel,
    kernel_kind,
    make_context,
)

__all__ = ["ACCURATE_SUFFIX", "KERNEL_EMITTERS", "RANGE_SUFFIX", "KernelSpec",
           "begin_function", "emit_kernel", "emit_map_kernel", "kernel_kind", "make_context"]
