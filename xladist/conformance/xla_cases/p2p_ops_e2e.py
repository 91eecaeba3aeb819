"""xla/backends/gpu/tests/p2p_ops_e2e_test.cc (fixture P2POps), transcribed from revision
ea47f87. Its parameter (symmetric buffers on or off) is a GPU memory setting: one case."""

from __future__ import annotations

from .records import Case, arr, each

SOURCE = "xla/backends/gpu/tests/p2p_ops_e2e_test.cc"

CASES: list[Case] = [
    Case(name="P2POps.CollectivePermute", source=SOURCE, test="P2POps.CollectivePermute", n=2,
         replica_count=2, module="""HloModule p2p_exchange, replica_count=2

ENTRY main {
  c21 = u32[] constant(21)
  data = u32[2] broadcast(c21), dimensions={}
  ROOT result = u32[2] collective-permute(data), source_target_pairs={{0,1},{1,0}}
}
""", expected=each(2, arr("u32", [21, 21]))),
]

SKIPPED: dict[str, str] = {}
