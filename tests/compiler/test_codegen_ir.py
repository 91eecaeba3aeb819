"""The kernels' LLVM IR as text (llvmlite.ir, no LLVM needed): loop structure,
signatures, fast-math only where it is allowed, constants inlined."""

from __future__ import annotations

import re

from llvmlite import ir

import xladist
from xladist.compiler.codegen.kernels import emit_kernel
from xladist.compiler.emit import ProgramBuilder
from xladist.compiler.program import CpuProgram


def kernels_ir(text: str) -> dict[str, str]:
    """{kernel name: its function text} without compiling anything."""
    module = xladist.parse_hlo(text)
    pb = ProgramBuilder(module)
    pb.computation(module.entry)
    out = {}
    for spec in pb.kernels:
        mod = ir.Module()
        emit_kernel(mod, spec)
        out[spec.name] = str(mod)
    return out


CHAIN = """HloModule m
ENTRY main {
  a = f32[64,32] parameter(0)
  b = f32[64,32] parameter(1)
  m = f32[64,32] multiply(a, b)
  h = f32[] constant(0.5)
  hb = f32[64,32] broadcast(h), dimensions={}
  ROOT r = f32[64,32] add(m, hb)
}
"""


def test_elementwise_chain_is_one_flat_loop():
    k = kernels_ir(CHAIN)
    assert len(k) == 1
    body = next(iter(k.values()))
    assert re.search(r'define void @"?\w+"?\(ptr noalias', body)
    # One induction variable over all 2048 elements; no div/rem for indices.
    assert len(re.findall(r"phi\s+i64", body)) == 1
    assert "2048" in body
    assert "udiv" not in body and "urem" not in body
    # The scalar constant is an immediate, not a buffer.
    assert "0x3fe0000000000000" in body


def test_broadcast_of_row_uses_nested_loops():
    k = kernels_ir("""HloModule m
ENTRY main {
  a = f32[64,32] parameter(0)
  v = f32[32] parameter(1)
  vb = f32[64,32] broadcast(v), dimensions={1}
  ROOT r = f32[64,32] add(a, vb)
}
""")
    body = next(iter(k.values()))
    assert len(re.findall(r"phi\s+i64", body)) == 2  # rows, columns in physical order
    assert "udiv" not in body


def test_row_reduction_accumulates_in_lanes_without_fast_math():
    k = kernels_ir("""HloModule m
add { x = f32[] parameter(0)
 y = f32[] parameter(1)
 ROOT s = f32[] add(x, y) }
ENTRY main {
  a = f32[64,32] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[64] reduce(a, z), dimensions={1}, to_apply=add
}
""")
    body = next(iter(k.values()))
    # 32 lanes of 32 = 32 elements (codegen/lanes.py), summed in the order it states:
    # plain IEEE adds, so no LLVM pipeline can change a bit.
    assert "alloca <32 x float>" in body and "fadd float" in body
    assert "reassoc" not in body and "fast" not in body


def test_producer_arithmetic_never_gets_fast_math():
    k = kernels_ir("""HloModule m
add { x = f32[] parameter(0)
 y = f32[] parameter(1)
 ROOT s = f32[] add(x, y) }
ENTRY main {
  a = f32[64,32] parameter(0)
  b = f32[64,32] parameter(1)
  d = f32[64,32] subtract(a, b)
  z = f32[] constant(0)
  ROOT r = f32[64] reduce(d, z), dimensions={1}, to_apply=add
}
""")
    body = next(iter(k.values()))
    assert "fsub float" in body and "fsub reassoc" not in body


def test_column_reduction_accumulates_into_the_output():
    k = kernels_ir("""HloModule m
add { x = f32[] parameter(0)
 y = f32[] parameter(1)
 ROOT s = f32[] add(x, y) }
ENTRY main {
  a = f32[64,32] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[32] reduce(a, z), dimensions={0}, to_apply=add
}
""")
    body = next(iter(k.values()))
    # An init loop over the output, then loads and stores of the output inside the nest.
    assert not re.search(r"phi\s+float", body)
    assert body.count("store float") >= 2


def test_llvm_ir_of_a_module_parses_and_verifies():
    import llvmlite.binding as llvm

    from xladist.compiler.target import init_llvm
    init_llvm()
    text = CpuProgram(xladist.parse_hlo(CHAIN)).llvm_ir()
    llvm.parse_assembly(text).verify()


def test_vector_width_attribute_reaches_every_function_and_the_cache_key(monkeypatch):
    from xladist.compiler import jit
    from xladist.compiler.target import target_description
    ir_text = ('define void @"k"(ptr noalias %".1") nounwind\n{\nentry:\n  ret void\n}\n'
               'define void @"m"(ptr %".1", i64 %".2") nounwind\n{\nentry:\n  ret void\n}\n')
    for width in ("512", "128"):
        monkeypatch.setenv("XLADIST_VECTOR_WIDTH", width)
        try:
            text = jit._with_vector_width(ir_text)
            assert text.count(f'"prefer-vector-width"="{width}"') == 2
            jit.optimize(ir_text)  # still valid IR
            assert f"vector-width={width}" in target_description()
        finally:
            monkeypatch.delenv("XLADIST_VECTOR_WIDTH")
