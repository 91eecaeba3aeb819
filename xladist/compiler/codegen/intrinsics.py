"""Declaring LLVM intrinsics and libm functions once per module."""

from __future__ import annotations

from llvmlite import ir

from .types import F32, F64, HALF


def _suffix(t: ir.Type) -> str:
    if isinstance(t, ir.VectorType):  # lane-wise (codegen/lanes.py)
        return f"v{t.count}{_suffix(t.element)}"
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    if t == F32:
        return "f32"
    if t == F64:
        return "f64"
    if t == HALF:
        return "f16"
    raise TypeError(f"no intrinsic suffix for {t}")


def declare(module: ir.Module, name: str, ret: ir.Type, args) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, list(args)), name=name)
    return fn


def intrinsic(b: ir.IRBuilder, base: str, args, ret: ir.Type | None = None,
              overload: ir.Type | None = None, *extra_types) -> ir.Value:
    """Call `llvm.<base>.<type>` with the first argument's type as the overload."""
    t = overload or args[0].type
    name = f"llvm.{base}.{_suffix(t)}"
    for et in extra_types:
        name += f".{_suffix(et)}"
    fn = declare(b.module, name, ret or t, [a.type for a in args])
    return b.call(fn, list(args))


def libm(b: ir.IRBuilder, name: str, args) -> ir.Value:
    """A scalar libm call; only for rare cases that have no vector implementation."""
    t = args[0].type
    cname = name + ("f" if t == F32 else "")
    fn = declare(b.module, cname, t, [a.type for a in args])
    return b.call(fn, list(args))


def fmuladd(b, x, y, z):
    return intrinsic(b, "fmuladd", [x, y, z])


def fabs(b, x):
    return intrinsic(b, "fabs", [x])


def sqrt(b, x):
    return intrinsic(b, "sqrt", [x])


def copysign(b, mag, sign):
    return intrinsic(b, "copysign", [mag, sign])


def rint(b, x):
    return intrinsic(b, "rint", [x])


def floor(b, x):
    return intrinsic(b, "floor", [x])


def maximum(b, x, y):
    return intrinsic(b, "maximum", [x, y])


def minimum(b, x, y):
    return intrinsic(b, "minimum", [x, y])


def maxnum(b, x, y):
    return intrinsic(b, "maxnum", [x, y])


def minnum(b, x, y):
    return intrinsic(b, "minnum", [x, y])
