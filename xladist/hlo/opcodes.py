"""The one table of every HLO opcode: text name, arity, family, attribute schema.

Data only. The parser reads attribute kinds from here, the printer prints
attributes in schema order, shape inference / interpreter / compiler register
their rules by opcode name and are tested against this table for coverage.

Attribute kinds (value type in the IR in brackets):
  int [int]  bool [bool]  float [float]  word [str: bare enum word]  string [str]
  ints [tuple[int]]  intss [tuple[tuple[int]]]  replica_groups [attrs.ReplicaGroups]
  pairs [tuple[tuple[int,int]]]  window [attrs.Window]
  dim_labels [attrs.ConvDimensionNumbers]  padding [attrs.PaddingConfig]
  slice [attrs.SliceSpec]  computation [ir.Computation]  computations [list]
  shape [Shape]  shapes [tuple[Shape]]  words [tuple[str]: `{high,default}`]
  raw [attrs.RawAttr: kept as text]
  literal [attrs.RawAttr: a shape and its value, `s32[2]{0} {1, 2}` or a tuple
    `( s32[1]{0} {4}, pred[] true )`; checked on parsing, kept as text]
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AttrSpec:
    name: str
    kind: str
    required: bool = False


@dataclass(frozen=True)
class OpInfo:
    name: str
    arity: int | None  # None: variadic
    family: str
    attrs: tuple[AttrSpec, ...] = ()
    side_effect: bool = False

    def attr(self, name: str) -> AttrSpec | None:
        for a in self.attrs:
            if a.name == name:
                return a
        return None


def _a(spec: str) -> tuple[AttrSpec, ...]:
    """Compact schema: 'name:kind' items separated by spaces, '!' suffix = required."""
    out = []
    for item in spec.split():
        name, kind = item.split(":")
        required = kind.endswith("!")
        out.append(AttrSpec(name, kind.rstrip("!"), required))
    return tuple(out)


# Attributes every instruction may carry, printed after the opcode-specific ones in
# this order; they live in dedicated Instruction fields, not in Instruction.attrs.
COMMON_ATTRS = ("sharding", "frontend_attributes", "control-predecessors", "statistics",
                "result_accuracy", "origin", "metadata", "backend_config")

FAMILIES = ("elementwise_unary", "elementwise_binary", "elementwise_ternary", "compare",
            "conversion", "shaping", "reduction", "linalg", "control", "constant", "token",
            "rng", "collective", "collective_async", "p2p", "feed", "id")

_ACC = "result_accuracy:raw"  # accepted on transcendental unary ops, kept as text

OPCODES: dict[str, OpInfo] = {}


def _row(name, arity, family, attrs="", side_effect=False):
    OPCODES[name] = OpInfo(name, arity, family, _a(attrs), side_effect)


# Element-wise unary: one shape rule (operand shape), one numpy/LLVM function each.
for _name in ("abs", "ceil", "floor", "negate", "not", "sign", "popcnt",
              "count-leading-zeros", "round-nearest-afz", "round-nearest-even", "is-finite",
              "real", "imag", "copy"):
    _row(_name, 1, "elementwise_unary")
for _name in ("sqrt", "rsqrt", "cbrt", "exponential", "exponential-minus-one", "log",
              "log-plus-one", "logistic", "sine", "cosine", "tan", "tanh", "erf",
              "acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "sinh"):
    _row(_name, 1, "elementwise_unary", _ACC)

# Element-wise binary: operands of one shape (after the builder's broadcasting).
for _name in ("add", "subtract", "multiply", "divide", "remainder", "power", "atan2",
              "maximum", "minimum", "and", "or", "xor", "shift-left",
              "shift-right-arithmetic", "shift-right-logical", "complex", "mulhi"):
    _row(_name, 2, "elementwise_binary")
_row("compare", 2, "compare", "direction:word! type:word")
_row("select", 3, "elementwise_ternary")
_row("clamp", 3, "elementwise_ternary")

# Conversions change the element type (and bitcast-convert possibly the last dim).
_row("convert", 1, "conversion")
_row("bitcast-convert", 1, "conversion")
_row("reduce-precision", 1, "conversion", "exponent_bits:int! mantissa_bits:int!")
_row("stochastic-convert", 2, "conversion")

# Shape and data movement.
_row("bitcast", 1, "shaping")
_row("broadcast", 1, "shaping", "dimensions:ints!")
_row("reshape", 1, "shaping", "inferred_dimension:int")
_row("dynamic-reshape", None, "shaping")
_row("transpose", 1, "shaping", "dimensions:ints!")
_row("reverse", 1, "shaping", "dimensions:ints!")
_row("concatenate", None, "shaping", "dimensions:ints!")
_row("slice", 1, "shaping", "slice:slice!")
_row("dynamic-slice", None, "shaping", "dynamic_slice_sizes:ints!")
_row("dynamic-update-slice", None, "shaping")
_row("pad", 2, "shaping", "padding:padding!")
_row("iota", 0, "shaping", "iota_dimension:int!")
_row("gather", 2, "shaping",
     "offset_dims:ints! collapsed_slice_dims:ints! start_index_map:ints! "
     "operand_batching_dims:ints start_indices_batching_dims:ints index_vector_dim:int! "
     "slice_sizes:ints! indices_are_sorted:bool")
_row("scatter", None, "shaping",
     "update_window_dims:ints! inserted_window_dims:ints! "
     "scatter_dims_to_operand_dims:ints! input_batching_dims:ints "
     "scatter_indices_batching_dims:ints index_vector_dim:int! indices_are_sorted:bool "
     "unique_indices:bool to_apply:computation!")
_row("tuple", None, "shaping")
_row("get-tuple-element", 1, "shaping", "index:int!")
_row("get-dimension-size", 1, "shaping", "dimensions:ints!")
_row("set-dimension-size", 2, "shaping", "dimensions:ints!")
_row("shuffle", None, "shaping", "dimensions:ints")

# Reductions and ops with a called scalar computation.
_row("reduce", None, "reduction", "dimensions:ints! to_apply:computation!")
_row("reduce-window", None, "reduction", "window:window to_apply:computation!")
_row("select-and-scatter", 3, "reduction",
     "window:window select:computation! scatter:computation!")
_row("map", None, "reduction", "dimensions:ints to_apply:computation!")
_row("sort", None, "reduction", "dimensions:ints! is_stable:bool to_apply:computation!")
_row("topk", 1, "reduction", "k:int! largest:bool to_apply:computation")
_row("scan", None, "reduction",
     "dimensions:ints! num_carries:int! is_reverse:bool is_associative:bool "
     "to_apply:computation!")

# Linear algebra and signal processing.
_DOT = ("lhs_batch_dims:ints lhs_contracting_dims:ints rhs_batch_dims:ints "
        "rhs_contracting_dims:ints")
_row("dot", 2, "linalg", _DOT + " operand_precision:words algorithm:word")
_row("ragged-dot", 3, "linalg",
     _DOT + " lhs_ragged_dims:ints rhs_group_dims:ints operand_precision:words")
_row("scaled-dot", 4, "linalg", _DOT + " operand_precision:words")
_row("convolution", 2, "linalg",
     "window:window dim_labels:dim_labels! feature_group_count:int batch_group_count:int "
     "operand_precision:words algorithm:word conv_kind:word")
_row("fft", 1, "linalg", "fft_type:word! fft_length:ints!")
_row("cholesky", 1, "linalg", "lower:bool")
_row("triangular-solve", 2, "linalg",
     "left_side:bool lower:bool unit_diagonal:bool transpose_a:word")
_row("batch-norm-training", 3, "linalg", "epsilon:float! feature_index:int!")
_row("batch-norm-inference", 5, "linalg", "epsilon:float! feature_index:int!")
_row("batch-norm-grad", 5, "linalg", "epsilon:float! feature_index:int!")

# Control flow and calls.
_row("call", None, "control", "to_apply:computation! is_composite:bool")
_row("while", 1, "control", "condition:computation! body:computation!")
_row("conditional", None, "control",
     "true_computation:computation false_computation:computation "
     "branch_computations:computations")
_row("fusion", None, "control",
     "kind:word! output_to_operand_aliasing:raw calls:computation!")
_row("custom-call", None, "control",
     "window:window dim_labels:dim_labels feature_group_count:int batch_group_count:int "
     "operand_precision:words padding_type:word custom_call_target:string! "
     "operand_layout_constraints:shapes custom_call_has_side_effect:bool literal:literal "
     "output_to_operand_aliasing:raw schedule:word api_version:word "
     "called_computations:computations to_apply:computation")
_row("async-start", None, "control",
     "async_execution_thread:string output_to_operand_aliasing:raw calls:computation!")
# Every async op (start, update, done) prints its thread first (HloAsyncInstruction).
_row("async-update", 1, "control", "async_execution_thread:string calls:computation")
_row("async-done", 1, "control", "async_execution_thread:string calls:computation")
_row("domain", 1, "control", "domain:raw!")
_row("opt-barrier", 1, "control")

_row("parameter", 0, "constant", "parameter_replication:raw")
_row("constant", 0, "constant")

# Tokens order side effects.
_row("after-all", None, "token")
_row("add-dependency", 2, "token")

_row("rng", None, "rng", "distribution:word!", side_effect=True)
_row("rng-bit-generator", 1, "rng", "algorithm:word!")
_row("rng-get-and-update-state", 0, "rng", "delta:int!", side_effect=True)

# Collectives: ids in replica_groups are interpreted by the group mode
# (channel_id and use_global_device_ids), see collective_groups.py.
_AR = "channel_id:int replica_groups:replica_groups constrain_layout:bool " \
      "use_global_device_ids:bool to_apply:computation!"
_AG = "channel_id:int replica_groups:replica_groups constrain_layout:bool dimensions:ints! " \
      "use_global_device_ids:bool"
_CP = "channel_id:int source_target_pairs:pairs! slice_sizes:intss"
_row("all-reduce", None, "collective", _AR, side_effect=True)
_row("all-gather", None, "collective", _AG, side_effect=True)
_row("reduce-scatter", None, "collective",
     "channel_id:int replica_groups:replica_groups constrain_layout:bool "
     "use_global_device_ids:bool dimensions:ints! to_apply:computation!", side_effect=True)
_row("all-to-all", None, "collective",
     "channel_id:int replica_groups:replica_groups constrain_layout:bool dimensions:ints",
     side_effect=True)
_row("ragged-all-to-all", 6, "collective", "channel_id:int replica_groups:replica_groups",
     side_effect=True)
_row("collective-broadcast", None, "collective",
     "channel_id:int replica_groups:replica_groups", side_effect=True)
_row("collective-permute", None, "collective", _CP, side_effect=True)
# XLA 2025 (hlo_to_mhlo's import test): a reduction to a root, its semantics not published.
_row("collective-reduce", None, "collective",
     "channel_id:int replica_groups:replica_groups use_global_device_ids:bool "
     "has_dynamic_root:bool to_apply:computation!", side_effect=True)
_row("all-reduce-start", None, "collective_async", _AR, side_effect=True)
_row("all-reduce-done", 1, "collective_async", side_effect=True)
_row("all-gather-start", None, "collective_async", _AG, side_effect=True)
_row("all-gather-done", 1, "collective_async", side_effect=True)
_row("collective-permute-start", None, "collective_async", _CP, side_effect=True)
_row("collective-permute-done", 1, "collective_async", side_effect=True)
_row("copy-start", 1, "collective_async", "cross_program_prefetch_index:int")
_row("copy-done", 1, "collective_async")

_row("send", 2, "p2p", "channel_id:int is_host_transfer:bool", side_effect=True)
_row("send-done", 1, "p2p", "channel_id:int is_host_transfer:bool", side_effect=True)
_row("recv", 1, "p2p", "channel_id:int is_host_transfer:bool", side_effect=True)
_row("recv-done", 1, "p2p", "channel_id:int is_host_transfer:bool", side_effect=True)

_row("infeed", 1, "feed", "infeed_config:string", side_effect=True)
_row("outfeed", 2, "feed", "outfeed_shape:shape outfeed_config:string", side_effect=True)

_row("replica-id", 0, "id")
_row("partition-id", 0, "id")

# Opcodes whose generic async form (async-start wrapping them) may be printed with the
# sugared name `<op>-start` / `<op>-update` / `<op>-done` (docs/reference/hlo-text-format.md 4.7).
ASYNC_SUGAR_SUFFIXES = ("-start", "-update", "-done")


def opcode_info(name: str) -> OpInfo:
    try:
        return OPCODES[name]
    except KeyError:
        raise KeyError(f"unknown HLO opcode {name!r}") from None


def collective_opcodes() -> list[str]:
    return [n for n, o in OPCODES.items() if o.family in ("collective", "collective_async", "p2p")]
